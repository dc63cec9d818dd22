"""Hostile runs against the pooler and monitor insight (issue 25): what a
DBA meets when the pieces around the run misbehave.

* a ``--monitor`` that reaches another database (or server) than the run
  is refused: its samples and counters would silently be another's;
* a connection of ``--monitor`` or ``--pooler-admin`` that fails says
  which option it was;
* Ctrl-C during the wait for the pooled sessions' counters cuts the wait
  short, not the report;
* a PgBouncer killed mid-run leaves the console figures read until then;
* counters reset without a ``stats_reset`` (a table's, a crash restart)
  are called reset, not reported as negative work.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from pgsurge.report.json import load_schema
from tests.fix_pooler import Pooler, start_pooler
from tests.fix_run import PGSURGE, Loop, run_pgsurge, tool_env

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(load_schema())
UPDATE_SCRIPT = (
    "\\set bid random(1, 1)\n"
    "update pgbench_branches set bbalance = bbalance + 1 where bid = :bid;\n"
)
#: generous: a loaded 2-core box
PATIENCE_S = 90.0


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "script.sql"
    path.write_text(text)
    return str(path)


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    return doc


def _spawn(args: list[str], dsn: str, cwd: Path) -> subprocess.Popen[str]:
    """pgsurge in the background, SIGINT at its default (as from a shell)."""
    return subprocess.Popen(
        [*PGSURGE, *args, dsn],
        cwd=cwd,
        env=tool_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


# -- --monitor elsewhere --------------------------------------------------------


def test_monitor_elsewhere_is_refused(
    pgbouncer_transaction: Pooler, bench_db: str, server_dsn: str, tmp_path: Path
) -> None:
    """The monitor on the server's other database: before, 0 samples (or
    another database's idle sessions) and another database's counters,
    exit 0 and no word; now one error naming --monitor, exit 1."""
    f = _script(tmp_path, UPDATE_SCRIPT)
    args = ["-n", "-f", f, "-c", "2", "-t", "20", "--waits=50", "--server-stats"]
    for dsn in (pgbouncer_transaction.pooled(bench_db), bench_db):
        out = run_pgsurge([*args, f"--monitor={server_dsn}"], dsn, cwd=tmp_path)
        assert out.status == 1, out.stderr
        errors = [ln for ln in out.stderr.splitlines() if "error" in ln]
        assert len(errors) == 1 and errors[0].startswith(
            "pgsurge: error: --monitor: it reaches database "
        ), out.stderr
        assert "Traceback" not in out.stderr
        # the run's own database: accepted
        ok = run_pgsurge([*args, f"--monitor={bench_db}"], dsn, cwd=tmp_path)
        assert ok.status == 0, ok.stderr
        assert "server counters" in ok.stdout
    # idle sessions alone, opened elsewhere: they would load another database
    idle = ["-n", "-S", "-c", "1", "-t", "5", "--idle-sessions=1:xact"]
    out = run_pgsurge([*idle, f"--monitor={server_dsn}"], bench_db, cwd=tmp_path)
    assert out.status == 1, out.stderr
    assert "pgsurge: error: --monitor: it reaches database " in out.stderr


def test_insight_connections_say_which_failed(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    args = ["-n", "-S", "-c", "1", "-t", "5"]
    dsn = pgbouncer_transaction.pooled(bench_db)
    bad = "host=/nonexistent-pgsurge-dir port=5432 connect_timeout=5"
    for option in ("--monitor", "--pooler-admin"):
        extra = ["--waits=50"] if option == "--monitor" else []
        out = run_pgsurge([*args, *extra, f"{option}={bad}"], dsn, cwd=tmp_path)
        assert out.status == 1, out.stderr
        assert f"pgsurge: error: {option}: connection to server" in out.stderr, (
            out.stderr
        )


# -- Ctrl-C in the flush wait -------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_in_flush_wait_keeps_report(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path, signum: int
) -> None:
    """The run is over, the monitor waits (~10 s) for the pooled sessions'
    counters: Ctrl-C (or a SIGTERM) there lost the whole report (died of
    the signal)."""
    f = _script(tmp_path, UPDATE_SCRIPT)
    result = tmp_path / "r.json"
    args = ["-n", "-f", f, "-c", "2", "-t", "50", "--server-stats"]
    args += [f"--monitor={bench_db}", f"--json={result}"]
    proc = _spawn(args, pgbouncer_transaction.pooled(bench_db), tmp_path)
    try:
        # the wait's query, run by the monitor's session straight on the server
        deadline = time.monotonic() + PATIENCE_S
        with psycopg.connect(bench_db, autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name"
                    " = 'pgsurge monitor' AND query LIKE '%max(state_change)%'"
                ).fetchone()
                if row and row[0]:
                    break
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "no flush wait seen"
                time.sleep(0.02)
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "number of transactions actually processed: 100/100" in out, out
    assert "server counters" in out
    assert len([ln for ln in err.splitlines() if "was interrupted after" in ln]) == 1
    doc = _load(result)
    assert doc["totals"]["processed"] == 100
    assert "server_stats" in doc


def test_sigterm_in_the_exit_wait_keeps_report(bench_db: str, tmp_path: Path) -> None:
    """Straight to the server, --server-stats waits (up to 5 s) for the
    run's backends to exit before its end snapshot: a SIGTERM there killed
    the finished run's report, as Ctrl-C did not. Under -C the run's
    sessions are found by name, so a session of that name left open keeps
    the wait going."""
    result = tmp_path / "r.json"
    args = ["-n", "-S", "-C", "-c", "1", "-t", "20", "--server-stats"]
    args += [f"--json={result}"]
    with (
        psycopg.connect(
            bench_db, application_name="pgsurge", autocommit=True
        ) as lingering,
        psycopg.connect(bench_db, autocommit=True) as watch,
    ):
        proc = _spawn(args, bench_db, tmp_path)
        try:
            deadline = time.monotonic() + PATIENCE_S
            while True:  # the wait's query, by the monitor's session
                row = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid <> "
                    "pg_backend_pid() AND query LIKE '%starts_with(application_name%'"
                ).fetchone()
                if row and row[0]:
                    break
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "no exit wait seen"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=PATIENCE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert lingering.execute("SELECT 1").fetchone() == (1,)
    assert proc.returncode == 0, err
    assert "number of transactions actually processed: 20/20" in out, out
    assert "had not all exited" in err, err
    assert _load(result)["totals"]["processed"] == 20


def test_an_interrupted_run_reads_its_counters_at_once(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    """Ctrl-C mid-run behind a pooler: the report came only after the wait
    for the pooled sessions' counters (up to 13 s, the signals held
    meanwhile). An interrupted run reads them at once and says so."""
    f = _script(tmp_path, UPDATE_SCRIPT)
    result = tmp_path / "r.json"
    args = ["-n", "-f", f, "-c", "2", "-T", "120", "-P", "1", "--server-stats"]
    args += [f"--monitor={bench_db}", f"--json={result}"]
    proc = _spawn(args, pgbouncer_transaction.pooled(bench_db), tmp_path)
    try:
        assert proc.stderr is not None
        while True:  # busy sessions: a progress line
            line = proc.stderr.readline()
            assert line, proc.communicate()
            if line.startswith("progress: "):
                break
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGINT, err
    assert "number of transactions actually processed" in out, out
    assert "the run was interrupted: its end counters were read at once" in err, err
    doc = _load(result)
    assert doc["server_stats"]["pooler_flush_wait_s"] == 0


# -- the pooler dies -----------------------------------------------------------------


def test_pooler_killed_keeps_console_figures(
    server_dsn: str, bench_db: str, tmp_path: Path
) -> None:
    """PgBouncer killed mid-run: the console's figures read until then
    stayed out of the report and the JSON (section and interval points)."""
    pooler = start_pooler(server_dsn, "session")
    try:
        f = _script(tmp_path, "select pg_sleep(0.01);\n")
        result = tmp_path / "r.json"
        args = ["-n", "-f", f, "-c", "2", "-T", "60", "-P", "1"]
        args += [f"--pooler-admin={pooler.admin_dsn}", f"--json={result}"]
        proc = _spawn(args, pooler.pooled(bench_db), tmp_path)
        try:
            assert proc.stderr is not None
            progress = 0
            # three -P lines: the console was read at the first boundaries
            while progress < 3:
                line = proc.stderr.readline()
                assert line, proc.communicate()
                progress += line.startswith("progress: ")
            pooler.process.kill()
            out, err = proc.communicate(timeout=PATIENCE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        pooler.stop()
        shutil.rmtree(pooler.directory, ignore_errors=True)
    assert proc.returncode == 2, err
    assert "--pooler-admin: stopped" in err
    section = _load(result).get("pooler_admin")
    assert section is not None, err
    assert section["reads"] >= 1 and section["xacts"] > 0, section
    assert section["stopped"], section
    points = [iv["pooler"] for iv in _load(result)["intervals"] if "pooler" in iv]
    assert len(points) == section["reads"]
    assert sum(p["xacts"] for p in points) == section["xacts"]
    assert "(until the console failed:" in out, out


# -- counters reset without stats_reset ----------------------------------------------


def test_table_counters_reset_during_run(bench_db: str, tmp_path: Path) -> None:
    """pg_stat_user_tables has no stats_reset: a reset of a table's
    counters during the run made a negative delta, with no warning."""
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute("UPDATE pgbench_accounts SET abalance = abalance + 1")
    # the session above reported its counters as it exited
    script = (
        "select pg_stat_reset_single_table_counters("
        "'pgbench_accounts'::regclass);\n"
        "update pgbench_accounts set abalance = 0 where aid = 1;\n"
    )
    f = _script(tmp_path, script)
    result = tmp_path / "r.json"
    args = ["-n", "-f", f, "-c", "1", "-t", "1", "--server-stats"]
    out = run_pgsurge([*args, f"--json={result}"], bench_db, cwd=tmp_path)
    assert out.status == 0, out.stderr
    stats = _load(result)["server_stats"]
    tables = {t["relname"]: t for t in stats["deltas"]["tables"]}
    assert tables["pgbench_accounts"]["n_tup_upd"] < 0  # what a reset does
    assert "tables" in stats["stats_reset_during_run"], stats
    warned = [ln for ln in out.stderr.splitlines() if "reset during the run" in ln]
    assert len(warned) == 1 and "tables" in warned[0], out.stderr
    # the text shows no negative work
    assert "  tables: reset during the run: no figures" in out.stdout, out.stdout
    assert "public.pgbench_accounts:" not in out.stdout


# -- --waits by name: a pool's sessions left from an earlier run ----------------------


def test_waits_leave_out_pooled_sessions_of_earlier_runs(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    """A transaction pooler keeps the server sessions of an earlier run,
    named as this run's and idle: they were sampled as this run's,
    "waiting for the client" (and the client called the bottleneck)."""
    dsn = pgbouncer_transaction.pooled(bench_db)
    f = _script(tmp_path, "select pg_sleep(0.05);\n")
    earlier = run_pgsurge(["-n", "-f", f, "-c", "12", "-t", "3"], dsn, cwd=tmp_path)
    assert earlier.status == 0, earlier.stderr
    with psycopg.connect(bench_db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
            " 'pgsurge' AND datname = current_database() AND state = 'idle'"
        ).fetchone()
    assert row is not None and row[0] >= 8, row  # the pool kept them
    result = tmp_path / "r.json"
    f = _script(tmp_path, "select pg_sleep(0.02);\n")
    args = ["-n", "-f", f, "-c", "2", "-T", "2", "--waits=50", f"--json={result}"]
    out = run_pgsurge(args, dsn, cwd=tmp_path)
    assert out.status == 0, out.stderr
    waits = _load(result)["waits"]
    # the two clients' sessions (a transaction pooler may hand them others)
    assert 1 <= waits["server_backends_seen"] <= 5, waits
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Timeout", "PgSleep"), waits["events"]
    assert "the client may be the bottleneck" not in out.stdout, out.stdout


# -- --server-stats right after another client ---------------------------------------


def test_server_stats_wait_for_earlier_clients_counters(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    """The pooler's server sessions hold an earlier run's last counters
    for up to 10 s: a run right after it counted them as its own (a few
    thousand commits more than its transactions, no word)."""
    dsn = pgbouncer_transaction.pooled(bench_db)
    earlier = run_pgsurge(["-n", "-S", "-c", "4", "-T", "2"], dsn, cwd=tmp_path)
    assert earlier.status == 0, earlier.stderr
    result = tmp_path / "r.json"
    args = ["-n", "-S", "-c", "2", "-t", "100", "--server-stats"]
    out = run_pgsurge([*args, f"--json={result}"], dsn, cwd=tmp_path)
    assert out.status == 0, out.stderr
    stats = _load(result)["server_stats"]
    commits = stats["deltas"]["database"]["xact_commit"]
    # the run's 200, the set-up's and the monitor's few dozen
    assert 200 <= commits <= 200 + 60, (commits, out.stderr)
    notices = [ln for ln in out.stderr.splitlines() if "just before this run" in ln]
    assert len(notices) == 1, out.stderr
    assert stats["pooler_start_wait_s"] > 0


def test_pooler_admin_of_another_pooler_is_called_out(
    pgbouncer_transaction: Pooler,
    pgbouncer_session: Pooler,
    bench_db: str,
    tmp_path: Path,
) -> None:
    """--pooler-admin naming another PgBouncer's console (which also has
    the database): "0 transactions passed on" for a run of thousands,
    with no word."""
    args = ["-n", "-S", "-c", "2", "-t", "200", "-P", "1"]
    dsn = pgbouncer_transaction.pooled(bench_db)
    wrong = f"--pooler-admin={pgbouncer_session.admin_dsn}"
    out = run_pgsurge([*args, wrong], dsn, cwd=tmp_path)
    assert out.status == 0, out.stderr
    said = [ln for ln in out.stderr.splitlines() if "it is not the console" in ln]
    assert len(said) == 1 and "the run made 400" in said[0], out.stderr
    right = f"--pooler-admin={pgbouncer_transaction.admin_dsn}"
    ok = run_pgsurge([*args, right], dsn, cwd=tmp_path)
    assert ok.status == 0, ok.stderr
    assert "it is not the console" not in ok.stderr, ok.stderr
    assert "pooler console (database" in ok.stdout


# -- sessions the sampler cannot find by name ----------------------------------------


def test_waits_behind_application_name_add_host(
    server_dsn: str, bench_db: str, tmp_path: Path
) -> None:
    """PgBouncer's application_name_add_host names each server session
    "pgsurge - host:port": --waits found none of them and printed an empty
    profile, exit 0, no word."""
    pooler = start_pooler(server_dsn, "transaction", "application_name_add_host = 1\n")
    try:
        f = _script(tmp_path, "select pg_sleep(0.02);\n")
        result = tmp_path / "r.json"
        args = ["-n", "-f", f, "-c", "2", "-T", "2", "--waits=50"]
        out = run_pgsurge([*args, f"--json={result}"], pooler.pooled(bench_db))
    finally:
        pooler.stop()
        shutil.rmtree(pooler.directory, ignore_errors=True)
    assert out.status == 0, out.stderr
    waits = _load(result)["waits"]
    assert waits["server_backends_seen"] >= 1 and waits["samples"] > 0, waits
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Timeout", "PgSleep"), waits["events"]
    assert '"pgsurge"' in out.stderr and "was seen" not in out.stderr, out.stderr


def test_waits_say_when_no_session_was_found(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    """A script that renames its sessions: nothing to sample by name. The
    empty profile now comes with one warning."""
    f = _script(tmp_path, "set application_name = 'renamed';\nselect pg_sleep(0.01);\n")
    args = ["-n", "-f", f, "-c", "2", "-T", "1", "--waits=50"]
    out = run_pgsurge(args, pgbouncer_transaction.pooled(bench_db), cwd=tmp_path)
    assert out.status == 0, out.stderr
    said = [ln for ln in out.stderr.splitlines() if "was seen in the database" in ln]
    assert len(said) == 1 and 'named "pgsurge"' in said[0], out.stderr


def test_pooler_admin_counts_from_the_warmup_window(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    """--warmup: the run's figures count from the window, the console's
    run figures counted the warm-up too (twice the run's transactions)."""
    result = tmp_path / "r.json"
    args = ["-n", "-S", "-c", "2", "-T", "2", "--warmup", "2", "-P", "1"]
    args += [f"--pooler-admin={pgbouncer_transaction.admin_dsn}", f"--json={result}"]
    out = run_pgsurge(args, pgbouncer_transaction.pooled(bench_db), cwd=tmp_path)
    assert out.status == 0, out.stderr
    doc = _load(result)
    processed = doc["totals"]["processed"]
    xacts = doc["pooler_admin"]["xacts"]
    # the window's transactions (its start read a moment after it opened)
    assert 0.97 * processed <= xacts <= processed * 1.03 + 50, (xacts, processed)
    assert "it is not the console" not in out.stderr, out.stderr


def test_server_stats_from_the_window_say_what_they_include(
    bench_db: str, tmp_path: Path
) -> None:
    """--warmup: the window's start snapshot cannot have the busy sessions'
    last second of warm-up counters (they report at most once a second):
    the window's totals counted ~50 % more commits than its transactions
    in a 2 s window, with no word."""
    args = ["-n", "-S", "-c", "2", "-T", "1", "--warmup", "1", "--server-stats"]
    out = run_pgsurge(args, bench_db, cwd=tmp_path)
    assert out.status == 0, out.stderr
    said = [ln for ln in out.stderr.splitlines() if "each session's warm-up" in ln]
    assert len(said) == 1, out.stderr


# -- -M prepared through a transaction pooler, --continue-on-error -------------------


@pytest.mark.parametrize("loop", ["c", "python"])
def test_prepared_failures_hint_without_abort(
    server_dsn: str, bench_db: str, tmp_path: Path, loop: Loop
) -> None:
    """--continue-on-error: the clients go on, most transactions fail on a
    prepared statement the pooler's next server session lacks: no abort,
    so the hint never came (78 % failed, not a word why)."""
    pooler = start_pooler(server_dsn, "transaction")  # no statement prepared yet
    try:
        args = ["-n", "-S", "-M", "prepared", "-c", "4", "-j", "2", "-t", "200"]
        out = run_pgsurge(
            [*args, "--continue-on-error"], pooler.pooled(bench_db), loop=loop
        )
        extended = run_pgsurge(
            ["-n", "-S", "-M", "extended", "-c", "4", "-t", "50"],
            pooler.pooled(bench_db),
            loop=loop,
        )
    finally:
        pooler.stop()
        shutil.rmtree(pooler.directory, ignore_errors=True)
    assert out.status == 0, out.stderr
    failed = int(out.number("number of failed transactions: ").split()[0])
    assert failed > 0, out.stdout
    said = [ln for ln in out.stderr.splitlines() if "transactions failed on a" in ln]
    assert len(said) == 1 and said[0].split()[2] == str(failed), out.stderr
    assert len([ln for ln in out.stderr.splitlines() if "max_prepared" in ln]) == 1
    assert extended.status == 0 and "max_prepared" not in extended.stderr
