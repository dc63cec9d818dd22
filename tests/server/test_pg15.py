"""pgsurge against PostgreSQL 15 (Debian's), not only the embedded 18.6.

The report must be pgbench 18.6's against the same old server; the
server-insight options must work with what 15 has (no ``pg_stat_io``, no
``pg_stat_checkpointer``, ``pg_stat_statements`` keeping the monitor's
leading comment), saying what they leave out instead of failing; and
behind a PgBouncer in front of 15 the pooler is found and ``--waits``
samples by ``application_name`` as it does in front of 18.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from pgsurge.report.json import load_schema
from tests.fix_pooler import start_pooler
from tests.fix_run import run_pgbench, run_pgsurge

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(load_schema())


def _json_run(args: list[str], dsn: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "result.json"
    out = run_pgsurge([*args, f"--json={path}"], dsn, cwd=tmp_path)
    assert out.status == 0, out.stderr
    assert "Traceback" not in out.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    return out.stderr, doc


@pytest.mark.parametrize(
    "args",
    [
        ["-S", "-t", "30", "-c", "2"],
        ["-M", "prepared", "-t", "20", "-c", "2", "-r"],
        ["-b", "simple-update", "-T", "1", "-c", "2", "-P", "1"],
    ],
    ids=["select-only", "tpcb-prepared-r", "simple-update-progress"],
)
def test_the_report_is_pgbench_s_on_15(
    pg15_dsn: str, pgbench_bin: Path, tmp_path: Path, args: list[str]
) -> None:
    ref = run_pgbench(pgbench_bin, args, pg15_dsn, cwd=tmp_path)
    ours = run_pgsurge(args, pg15_dsn, cwd=tmp_path)
    assert ours.status == ref.status == 0, (ref.stderr, ours.stderr)
    assert ours.report == ref.report, f"pgbench:\n{ref.stdout}\npgsurge:\n{ours.stdout}"
    assert ours.messages == ref.messages
    assert ours.progress == ref.progress


def test_insight_on_15_says_what_it_leaves_out(pg15_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg15_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    stderr, doc = _json_run(
        ["-M", "prepared", "-T", "2", "-c", "2", "--server-stats", "--waits"],
        pg15_dsn,
        tmp_path,
    )
    assert doc["server"]["version_num"] // 10000 == 15
    processed = doc["totals"]["transactions"]
    assert processed > 0
    # 15 has no pg_stat_io: one warning line names it; nothing else warns
    warnings = [line for line in stderr.splitlines() if "warning" in line]
    assert any("pg_stat_io" in line for line in warnings), stderr
    assert all("pg_stat_io" in line for line in warnings), stderr
    stats = doc["server_stats"]
    assert sorted(stats["unavailable"]) == ["checkpointer", "io"]
    deltas = stats["deltas"]
    # every transaction of the run committed on the server (the monitor's
    # own reads commit too, so at least as many)
    assert deltas["database"]["xact_commit"] >= processed
    # the run's statements are the top ones; none of the monitor's
    texts = [s["query"] for s in deltas["statements"]]
    assert any("pgbench_branches" in t for t in texts), texts
    assert not any("pgsurge" in t.lower() for t in texts), texts
    calls = {s["query"]: s["calls"] for s in deltas["statements"]}
    updates = [c for q, c in calls.items() if q.startswith("UPDATE pgbench_tellers")]
    assert updates == [processed], calls
    waits = doc["waits"]
    assert waits["samples"] > 0
    assert waits["attribution"] == "pids" and waits["backends"] == 2


def test_behind_a_pooler_in_front_of_15(pg15_dsn: str, tmp_path: Path) -> None:
    pooler = start_pooler(pg15_dsn, "transaction")
    try:
        dsn = pooler.pooled(pg15_dsn)
        stderr, doc = _json_run(["-S", "-T", "2", "-c", "4", "--waits"], dsn, tmp_path)
        assert "a connection pooler is between pgsurge and the server" in stderr
        assert doc["pooler"]["mode"] == "transaction"
        waits = doc["waits"]
        assert waits["attribution"] == "application_name"
        assert waits["samples"] > 0
    finally:
        pooler.stop()
        shutil.rmtree(pooler.directory, ignore_errors=True)
