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
from tests.fix_pooler import Pooler
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
