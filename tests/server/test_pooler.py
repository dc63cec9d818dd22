"""Runs behind a real PgBouncer (issue 25), each compared with the same run
on a direct connection.

``tests/fix_pooler.py`` starts Debian's pgbouncer in transaction and in
session pooling before the test server. Through it:

* the set-up finds the pooler (libpq's backend pid is not the server's),
  says so in one stderr line, tells the pooling mode and records it in the
  JSON document; a direct run says nothing and has no ``pooler`` section;
* ``--waits`` samples the server sessions by ``application_name`` (and
  says so), through the pooler or straight from the server (``--monitor``);
* ``--server-stats`` waits for the pooled sessions' counters: the run's
  updates and commits are all counted;
* ``--idle-sessions`` through a transaction pooler warns what they do;
* ``-M prepared`` through a transaction pooler aborts with a hint line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pgsurge.report.json import load_schema
from tests.fix_pooler import POOL_SIZE, Pooler
from tests.fix_run import Outcome, run_pgsurge

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(load_schema())
NOTICE = "a connection pooler is between pgsurge and the server"
SLEEP_SCRIPT = "select pg_sleep(0.02);\n"
UPDATE_SCRIPT = (
    "\\set bid random(1, 1)\n"
    "update pgbench_branches set bbalance = bbalance + 1 where bid = :bid;\n"
)


def json_run(
    args: list[str], dsn: str, tmp_path: Path, *, status: int = 0
) -> tuple[Outcome, dict[str, Any]]:
    path = tmp_path / "result.json"
    path.unlink(missing_ok=True)
    out = run_pgsurge([*args, f"--json={path}"], dsn, cwd=tmp_path)
    assert out.status == status, out.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    return out, doc


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def lines_with(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


@pytest.fixture(params=["transaction", "session"])
def pooler(
    request: pytest.FixtureRequest,
    pgbouncer_transaction: Pooler,
    pgbouncer_session: Pooler,
) -> Pooler:
    return (
        pgbouncer_transaction if request.param == "transaction" else pgbouncer_session
    )


# -- the pooler is found --------------------------------------------------------


def test_pooler_found_and_recorded(
    pooler: Pooler, bench_db: str, tmp_path: Path
) -> None:
    out, doc = json_run(
        ["-n", "-S", "-c", "4", "-j", "2", "-T", "1"], pooler.pooled(bench_db), tmp_path
    )
    notices = lines_with(out.stderr, NOTICE)
    assert len(notices) == 1, out.stderr
    assert f"it looks like {pooler.mode} pooling" in notices[0]
    info = doc["pooler"]
    assert info["mode"] == pooler.mode
    assert info["libpq_backend_pid"] != info["server_backend_pid"]
    assert info["application_name"] == "pgsurge"
    assert doc["totals"]["processed"] > 0
    # the same run on a direct connection: no notice, no section
    direct, ddoc = json_run(
        ["-n", "-S", "-c", "4", "-j", "2", "-T", "1"], bench_db, tmp_path
    )
    assert NOTICE not in direct.stderr and "pooler" not in ddoc
    assert [ln for ln in direct.stderr.splitlines() if "pgsurge:" in ln] == []


def test_missing_pgbouncer_fails_not_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the program the fixture fails the test (never a skip)."""
    import tests.fix_pooler as fix

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(fix, "CANDIDATES", ("/nonexistent/pgbouncer",))
    with pytest.raises(pytest.fail.Exception, match="pgbouncer is not installed"):
        fix.pgbouncer_binary()


def test_pooler_fixture_serves_both_modes(
    pgbouncer_transaction: Pooler, pgbouncer_session: Pooler
) -> None:
    """The two fixtures are running pgbouncers in the modes they claim."""
    for pooler in (pgbouncer_transaction, pgbouncer_session):
        config = {str(r[0]): str(r[1]) for r in pooler.admin("SHOW CONFIG")}
        assert config["pool_mode"] == pooler.mode
        assert pooler.process.poll() is None


# -- --waits ----------------------------------------------------------------------


def test_waits_by_application_name(
    pooler: Pooler, bench_db: str, tmp_path: Path
) -> None:
    f = script(tmp_path, "sleep.sql", SLEEP_SCRIPT)
    args = ["-n", "-f", f, "-c", "4", "-j", "2", "-T", "2", "--waits=50"]
    out, doc = json_run(args, pooler.pooled(bench_db), tmp_path)
    waits = doc["waits"]
    assert waits["attribution"] == "application_name"
    assert waits["samples"] > 0 and waits["server_backends_seen"] >= 1, waits
    assert "a connection pooler hides the backends' pids" in out.stderr
    assert "sampling stopped" not in out.stderr
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Timeout", "PgSleep"), waits["events"]
    assert "wait events of the run's server sessions" in out.stdout
    # direct: by the pids libpq gave, no word about a pooler
    dout, ddoc = json_run(args, bench_db, tmp_path)
    assert ddoc["waits"]["attribution"] == "pids"
    assert ddoc["waits"]["backends"] == 4
    assert "server_backends_seen" not in ddoc["waits"]
    assert "pooler" not in dout.stderr


def test_monitor_straight_to_the_server(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    f = script(tmp_path, "sleep.sql", SLEEP_SCRIPT)
    args = ["-n", "-f", f, "-c", "4", "-T", "2", "--waits=50", f"--monitor={bench_db}"]
    out, doc = json_run(args, pgbouncer_transaction.pooled(bench_db), tmp_path)
    waits = doc["waits"]
    assert waits["attribution"] == "application_name"
    # the pool's server sessions, by their real pids
    assert 1 <= waits["server_backends_seen"] <= 4 + 1, waits
    top = waits["events"][0]
    assert (top["type"], top["event"]) == ("Timeout", "PgSleep"), waits["events"]
    assert "sampling stopped" not in out.stderr
    # on a direct run --monitor changes nothing but where the monitor is
    _dout, ddoc = json_run(args, bench_db, tmp_path)
    assert ddoc["waits"]["attribution"] == "pids" and ddoc["waits"]["backends"] == 4


# -- --server-stats -----------------------------------------------------------------


def test_server_stats_complete_behind_pooler(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    f = script(tmp_path, "update.sql", UPDATE_SCRIPT)
    args = ["-n", "-f", f, "-c", "4", "-j", "2", "-T", "2", "--server-stats"]
    out, doc = json_run(args, pgbouncer_transaction.pooled(bench_db), tmp_path)
    assert len(lines_with(out.stderr, "totals wait for that")) == 1, out.stderr
    stats = doc["server_stats"]
    processed = doc["totals"]["processed"]
    tables = {t["relname"]: t for t in stats["deltas"]["tables"]}
    # every update of the run counted, though its sessions never exited
    assert tables["pgbench_branches"]["n_tup_upd"] == processed, stats["deltas"]
    commits = stats["deltas"]["database"]["xact_commit"]
    # plus the set-up's and the monitor's own few dozen statements
    assert processed <= commits <= processed * 1.01 + 60, (commits, processed)
    assert stats["pooler_flush_wait_s"] > 0
    # direct: no wait, no warning, the same count
    dout, ddoc = json_run(args, bench_db, tmp_path)
    dstats = ddoc["server_stats"]
    assert "pooler_flush_wait_s" not in dstats and "totals wait" not in dout.stderr
    dtables = {t["relname"]: t for t in dstats["deltas"]["tables"]}
    assert dtables["pgbench_branches"]["n_tup_upd"] == ddoc["totals"]["processed"]


# -- --idle-sessions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("xact", "pins one of the pool's server connections"),
        ("idle", "holds no server session at all"),
    ],
)
def test_idle_sessions_warning_behind_transaction_pooler(
    pgbouncer_transaction: Pooler,
    pgbouncer_session: Pooler,
    bench_db: str,
    tmp_path: Path,
    mode: str,
    says: str,
) -> None:
    args = ["-n", "-S", "-c", "2", "-T", "1", f"--idle-sessions=2:{mode}"]
    out = run_pgsurge(args, pgbouncer_transaction.pooled(bench_db), cwd=tmp_path)
    assert out.status == 0, out.stderr
    assert len(lines_with(out.stderr, says)) == 1, out.stderr
    assert "idle sessions: 2 sessions" in out.stdout
    # a session pooler gives each its own server session: nothing to say,
    # nor on a direct connection, nor with --monitor to the server
    for dsn, extra in (
        (pgbouncer_session.pooled(bench_db), []),
        (bench_db, []),
        (pgbouncer_transaction.pooled(bench_db), [f"--monitor={bench_db}"]),
    ):
        other = run_pgsurge([*args, *extra], dsn, cwd=tmp_path)
        assert other.status == 0, other.stderr
        assert "--idle-sessions" not in other.stderr, other.stderr


# -- -M prepared ------------------------------------------------------------------


def test_prepared_abort_hint(
    pgbouncer_transaction: Pooler,
    pgbouncer_session: Pooler,
    bench_db: str,
    tmp_path: Path,
) -> None:
    args = ["-n", "-S", "-M", "prepared", "-c", "4", "-j", "2", "-T", "2"]
    out = run_pgsurge(args, pgbouncer_transaction.pooled(bench_db), cwd=tmp_path)
    assert out.status == 2, out.stderr
    assert 'prepared statement "' in out.stderr, out.stderr
    hints = lines_with(out.stderr, "max_prepared_statements")
    assert len(hints) == 1 and "-M extended" in hints[0], out.stderr
    # the session pooler keeps them, as a direct connection does
    for dsn in (pgbouncer_session.pooled(bench_db), bench_db):
        ok = run_pgsurge(args, dsn, cwd=tmp_path)
        assert ok.status == 0, ok.stderr
        assert "max_prepared_statements" not in ok.stderr


# -- --pooler-admin -----------------------------------------------------------------


def test_pooler_admin_per_interval(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    # more clients than the pool has server connections: some always wait
    f = script(tmp_path, "sleep.sql", SLEEP_SCRIPT)
    clients = POOL_SIZE + 10
    args = ["-n", "-f", f, "-c", str(clients), "-j", "2", "-T", "2", "-P", "1"]
    admin = f"--pooler-admin={pgbouncer_transaction.admin_dsn}"
    out, doc = json_run(
        [*args, admin], pgbouncer_transaction.pooled(bench_db), tmp_path
    )
    section = doc["pooler_admin"]
    assert section["pool_mode"] == "transaction"
    assert section["max_cl_waiting"] >= 1, section
    assert 1 <= section["max_sv_active"] <= POOL_SIZE, section
    processed = doc["totals"]["processed"]
    # what the pooler passed on: the run's transactions (and the set-up's few)
    assert processed <= section["xacts"] <= processed + 50, (section, processed)
    points = [iv["pooler"] for iv in doc["intervals"] if "pooler" in iv]
    assert len(points) >= 2, doc["intervals"]
    assert sum(p["xacts"] for p in points) == section["xacts"]
    assert "pooler console (database" in out.stdout
    # on a direct connection there is no pooler to read: one warning
    direct = run_pgsurge([*args, admin], bench_db, cwd=tmp_path)
    assert direct.status == 0, direct.stderr
    assert len(lines_with(direct.stderr, "--pooler-admin")) == 1, direct.stderr
    assert "pooler console" not in direct.stdout
