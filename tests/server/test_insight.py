"""Server insight on real runs: --waits, --server-stats, --idle-sessions.

The acceptance cases of issue 13, each a 2-4 s run of ``python -m pgsurge``
against a fresh database initialized by the real ``pgbench -i -s 1``:

* a heavyweight-lock script shows ``Lock:relation`` as the top event that
  is not CPU, with a majority of the samples;
* a client-bound run (hundreds of ``\\set`` per transaction, one worker)
  shows the server waiting for the client;
* ``--idle-sessions 1:snapshot`` keeps a VACUUM during the run from
  removing the dead row versions of an update-heavy run, and without it
  they go;
* ``--server-stats``: WAL bytes per transaction of tpcb-like in the range
  of its four writes, about zero for select-only;
* a user without ``pg_read_all_stats`` gets one warning line and the run
  goes on; the idle sessions are gone after the run, an abort and Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest
from psycopg import sql

from pgsurge.report.json import load_schema

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(load_schema())
LOCK_SCRIPT = "begin;\nlock table pgbench_accounts;\ncommit;\n"
CLIENT_SCRIPT = "".join(f"\\set a{i} random(1, 100000)\n" for i in range(300)) + (
    "select 1;\n"
)
UPDATE_SCRIPT = (
    "\\set aid random(1, 100000)\n"
    "update pgbench_accounts set abalance = abalance + 1 where aid = :aid;\n"
)
IDLE_APP = "pgsurge idle session"


def _env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    environ["LC_ALL"] = "C"
    return environ


def pgsurge(args: list[str], dsn: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, dsn],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=120,
    )


def json_run(args: list[str], dsn: str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "result.json"
    path.unlink(missing_ok=True)
    proc = pgsurge([*args, f"--json={path}"], dsn, tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    doc["_stdout"], doc["_stderr"] = proc.stdout, proc.stderr
    return doc


@pytest.fixture
def bench_db(fresh_db: str, pgbench_bin: Path) -> str:
    subprocess.run(
        [str(pgbench_bin), "-i", "-s", "1", "-q", fresh_db],
        check=True,
        capture_output=True,
        env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"},
    )
    return fresh_db


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def top_non_cpu(doc: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in doc["waits"]["events"] if e["type"] != "CPU")


# -- --waits ----------------------------------------------------------------------


def test_lock_script_waits_on_relation_lock(bench_db: str, tmp_path: Path) -> None:
    f = script(tmp_path, "lock.sql", LOCK_SCRIPT)
    doc = json_run(
        ["-n", "-f", f, "-c", "8", "-j", "2", "-T", "2", "-P", "1", "--waits"],
        bench_db,
        tmp_path,
    )
    waits = doc["waits"]
    assert waits["source"] == "pg_stat_activity"
    assert waits["backends"] == 8 and waits["attribution"] == "pids"
    top = top_non_cpu(doc)
    assert (top["type"], top["event"]) == ("Lock", "relation"), waits["events"]
    assert top["share"] > 0.5, waits["events"]
    shares = [e["share"] for e in waits["events"]]
    assert shares == sorted(shares, reverse=True)
    assert abs(sum(shares) - 1.0) < 1e-9
    assert waits["sampler_query_ms"]["count"] > 0
    # the text block, the progress suffix and the per-interval series
    assert re.search(r"^ +\d+\.\d% +\d+\.\d\d  Lock:relation$", doc["_stdout"], re.M)
    assert re.search(
        r"^progress: .*, waits: .*Lock:relation \d+%", doc["_stderr"], re.M
    )
    assert any("Lock:relation" in (iv.get("waits") or {}) for iv in doc["intervals"])


def test_client_bound_run_waits_for_the_client(bench_db: str, tmp_path: Path) -> None:
    f = script(tmp_path, "client.sql", CLIENT_SCRIPT)
    doc = json_run(
        ["-n", "-f", f, "-c", "4", "-j", "1", "-T", "2", "--waits=50"],
        bench_db,
        tmp_path,
    )
    waits = doc["waits"]
    assert waits["period_ms"] == 50
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Client", "ClientRead"), waits["events"]
    assert waits["client_wait_share"] > 0.5
    assert "the client may be the bottleneck" in doc["_stdout"]


def test_connect_each_tx_samples_by_application_name(
    bench_db: str, tmp_path: Path
) -> None:
    f = script(tmp_path, "sleep.sql", "select pg_sleep(0.05);\n")
    doc = json_run(
        ["-n", "-C", "-f", f, "-c", "2", "-T", "2", "--waits=50", "--idle-sessions=1"],
        bench_db,
        tmp_path,
    )
    waits = doc["waits"]
    assert (waits["attribution"], waits["backends"]) == ("application_name", 0)
    assert "-C gives no backend pids to follow" in doc["_stderr"]
    top = waits["events"][0]
    # the sleeping clients, not the idle session (which waits in ClientRead)
    assert (top["type"], top["event"]) == ("Timeout", "PgSleep"), waits["events"]


def test_no_option_no_insight_output(bench_db: str, tmp_path: Path) -> None:
    proc = pgsurge(["-n", "-S", "-c", "2", "-T", "1", "-P", "1"], bench_db, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "wait events" not in proc.stdout and "server counters" not in proc.stdout
    assert "waits:" not in proc.stderr and "idle sessions" not in proc.stdout


# -- --server-stats -------------------------------------------------------------


def _server_wal(dsn: str) -> int:
    """The server's WAL bytes so far (pg_stat_wal, a fresh snapshot)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select wal_bytes from pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0])


def _wal_run(
    args: list[str], dsn: str, tmp_path: Path, quiet: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """A --server-stats run whose WAL per transaction ``quiet`` accepts.

    pg_stat_wal is server-wide: what another session writes during the
    run's window (a shared server's other tests, a checkpoint, autovacuum)
    counts in the run's figure, and a 2 s window catches such a burst at
    times. So a run is taken again, up to three times, while ``quiet``
    rejects it; a run that writes too much WAL of its own is rejected every
    time. Each run's figure must be a delta within the server's own count
    around the run (a delta, divided by the run's transactions)."""
    for _ in range(3):
        before = _server_wal(dsn)
        doc = json_run(args, dsn, tmp_path)
        around = _server_wal(dsn) - before
        stats = doc["server_stats"]
        per, n = stats["per_transaction"], stats["transactions"]
        assert n == doc["totals"]["processed"] > 0, stats
        assert per["wal_bytes"] is not None, per
        assert 0 <= per["wal_bytes"] * n <= around + 1, (per, n, around)
        if quiet(per):
            break
    return doc


def test_server_stats_wal_per_transaction(pgss_db: str, tmp_path: Path) -> None:
    # on a cluster of its own (fix_pgss: autovacuum off, no other
    # session): on the shared test server, other sessions' WAL (a CREATE
    # DATABASE ... TEMPLATE copies a whole database into it) made three
    # select-only runs in a row show 3 kB a transaction
    bench_db = pgss_db
    # select-only first, on the freshly loaded (vacuumed, frozen) tables
    sel = _wal_run(
        ["-n", "-S", "-c", "2", "-T", "2", "--server-stats"],
        bench_db,
        tmp_path,
        lambda per: per["wal_bytes"] < 100,
    )
    per = sel["server_stats"]["per_transaction"]
    assert per["wal_bytes"] < 100, per
    # a warm-up touches the pages (their full-page images after the last
    # checkpoint), then the measured tpcb-like run
    pgsurge(["-n", "-c", "2", "-T", "1"], bench_db, tmp_path)

    # 3 updates, 1 insert and a commit: ~10 records, 500-800 bytes, plus
    # any full-page image (8 kB) of a page first touched since a checkpoint
    def tpcb_quiet(per: dict[str, float]) -> bool:
        return (
            5 <= per["wal_records"] <= 20
            and 300 <= per["wal_bytes"] <= 1500 + 8300 * per["wal_fpi"]
        )

    doc = _wal_run(
        ["-n", "-c", "2", "-j", "2", "-T", "2", "-P", "1", "--server-stats"],
        bench_db,
        tmp_path,
        tpcb_quiet,
    )
    stats = doc["server_stats"]
    per = stats["per_transaction"]
    assert 5 <= per["wal_records"] <= 20, per
    assert 300 <= per["wal_bytes"] <= 1500 + 8300 * per["wal_fpi"], per
    assert stats["server_version_num"] >= 130000
    assert any(s["name"] == "max_connections" or s["source"] for s in stats["settings"])
    assert {"database", "wal", "io", "checkpointer", "tables"} <= set(stats["deltas"])
    tables = {t["relname"]: t for t in stats["deltas"]["tables"]}
    processed = doc["totals"]["processed"]
    assert tables["pgbench_accounts"]["n_tup_upd"] == processed
    assert tables["pgbench_history"]["n_tup_ins"] == processed
    assert stats["deltas"]["database"]["xact_commit"] >= processed
    assert "per transaction:" in doc["_stdout"]
    # the -P series: the intervals' WAL adds up to the run's (the tail
    # after the last whole interval aside)
    wal = [
        iv["server_stats"]["wal_bytes"]
        for iv in doc["intervals"]
        if "server_stats" in iv
    ]
    assert wal and sum(wal) <= stats["deltas"]["wal"]["wal_bytes"]


# -- --idle-sessions ------------------------------------------------------------


def _vacuum_during_run(dsn: str, args: list[str], tmp_path: Path) -> tuple[str, int]:
    """Start the run, VACUUM VERBOSE pgbench_accounts once it has committed
    200 updates; the run's output and the tuples the VACUUM found dead but
    not yet removable."""
    messages: list[str] = []
    base = _balance_sum(dsn)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsurge", *args, dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    try:
        # wait for the updates themselves, not for a fixed time: a loaded
        # box may spend the first seconds starting the run
        while _balance_sum(dsn) - base < 200:
            assert proc.poll() is None, "the run ended before 200 updates"
            time.sleep(0.05)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
            conn.execute("VACUUM (VERBOSE) pgbench_accounts")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    text = "\n".join(messages)
    m = re.search(r"(\d+) are dead but not yet removable", text)
    assert m, text
    return out, int(m.group(1))


def _balance_sum(dsn: str) -> int:
    """Each committed update of UPDATE_SCRIPT adds 1 here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select sum(abalance) from pgbench_accounts").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def test_idle_snapshot_holds_back_vacuum(bench_db: str, tmp_path: Path) -> None:
    f = script(tmp_path, "update.sql", UPDATE_SCRIPT)
    run = ["-n", "-f", f, "-c", "2", "-T", "6"]
    out, kept = _vacuum_during_run(
        bench_db, [*run, "--idle-sessions", "1:snapshot"], tmp_path
    )
    assert "idle sessions: 1 session idle in a REPEATABLE READ transaction" in out
    assert kept >= 100
    out, kept_without = _vacuum_during_run(bench_db, run, tmp_path)
    assert "idle sessions" not in out
    # without it, only the versions of transactions that commit while the
    # VACUUM runs are kept (tens on a loaded machine, a few otherwise)
    assert kept_without * 5 < kept, (kept, kept_without)


def _idle_sessions(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity where application_name = %s",
            (IDLE_APP,),
        ).fetchone()
    return int(row[0]) if row else 0


def _wait_gone(dsn: str) -> int:
    """The idle sessions left, once none are or after 60 s (their backends
    end after pgsurge's close, later on a loaded box: 200 polls of 10 ms
    were some 2 s)."""
    deadline = time.monotonic() + 60
    while (n := _idle_sessions(dsn)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def test_idle_sessions_in_json_and_closed(bench_db: str, tmp_path: Path) -> None:
    doc = json_run(
        ["-n", "-S", "-c", "1", "-T", "1", "--idle-sessions=2:xact"], bench_db, tmp_path
    )
    idle = doc["idle_sessions"]
    assert idle["count"] == 2 and idle["mode"] == "xact" and len(idle["pids"]) == 2
    assert doc["config"]["idle_sessions"] == 2
    assert _wait_gone(bench_db) == 0


def test_idle_sessions_closed_on_abort(bench_db: str, tmp_path: Path) -> None:
    f = script(tmp_path, "fail.sql", "select 1/0;\n")
    proc = pgsurge(
        ["-n", "-f", f, "-t", "1", "--idle-sessions", "2"], bench_db, tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert _wait_gone(bench_db) == 0


def test_idle_sessions_closed_on_ctrl_c(bench_db: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgsurge",
            "-n",
            "-S",
            "-T",
            "30",
            "--waits",
            "--idle-sessions",
            "2:snapshot",
            bench_db,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=_env(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60  # 500 polls of 10 ms: a slow start
        while _idle_sessions(bench_db) != 2 and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.05)
        assert _idle_sessions(bench_db) == 2
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole process group
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert _wait_gone(bench_db) == 0


# -- permissions --------------------------------------------------------------------


@pytest.fixture
def plain_user(bench_db: str) -> Iterator[str]:
    """A role with no pg_read_all_stats; yields its conninfo."""
    name = f"u_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(bench_db, user=name)
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_unprivileged_user_one_warning(plain_user: str, tmp_path: Path) -> None:
    f = script(tmp_path, "one.sql", "select pg_sleep(0.002);\n")
    doc = json_run(
        ["-n", "-f", f, "-c", "2", "-T", "1", "--waits", "--server-stats"],
        plain_user,
        tmp_path,
    )
    # (a checkpoint during the run is said apart: the server's timed one
    # comes every 5 minutes, whatever the test does)
    checkpoint = "a checkpoint ran during the measurement"
    warnings = [
        ln
        for ln in doc["_stderr"].splitlines()
        if "warning" in ln and checkpoint not in ln
    ]
    assert len(warnings) == 1 and "pg_read_all_stats" in warnings[0], warnings
    waits = doc["waits"]
    assert waits["background_sampled"] is False and waits["background"] == []
    # its own sessions are visible: sleeping in pg_sleep
    assert ("Timeout", "PgSleep") in {(e["type"], e["event"]) for e in waits["events"]}
    assert doc["server_stats"]["deltas"]["database"]["xact_commit"] > 0


def test_progress_and_interval_series(bench_db: str, tmp_path: Path) -> None:
    doc = json_run(
        ["-n", "-S", "-c", "2", "-T", "3", "-P", "1", "--waits", "--server-stats"],
        bench_db,
        tmp_path,
    )
    lines = [ln for ln in doc["_stderr"].splitlines() if ln.startswith("progress:")]
    assert len(lines) >= 2 and all(", waits: " in ln for ln in lines), lines
    with_waits = [iv for iv in doc["intervals"] if "waits" in iv]
    assert len(with_waits) >= 2
    for iv in with_waits:
        assert abs(sum(iv["waits"].values()) - 1.0) < 1e-9
    assert sum("server_stats" in iv for iv in doc["intervals"]) >= 2
