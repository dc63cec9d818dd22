"""The steady-state check of a run's JSON (``report/steady.py``), on
real runs: a transaction whose server time grows with the time since the
run started (a sleep of 5 ms per second elapsed: tps falls from ~200 to
~20, whatever the machine's load) is not steady; a rate-limited ``SELECT
1`` holds still (steady)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fix_db import create_database, db_dsn, drop_database

pytestmark = [pytest.mark.server, pytest.mark.slow]

SLOWER = "SELECT pg_sleep(extract(epoch FROM clock_timestamp() - t0) / 200) FROM t0;\n"


@pytest.fixture
def db(server_dsn: str) -> Iterator[str]:
    name = create_database(server_dsn, "t_steady")
    dsn = db_dsn(server_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t0 (t0 timestamptz)")
    yield dsn
    drop_database(server_dsn, name)


def _run(args: list[str], cwd: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    out = cwd / "r.json"
    r = subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def test_a_falling_throughput_is_not_steady(db: str, tmp_path: Path) -> None:
    script = tmp_path / "slower.sql"
    script.write_text(SLOWER)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO t0 VALUES (clock_timestamp())")
    doc = _run(["-f", str(script), "-c", "1", "-T", "10", db], tmp_path)
    check = doc["steady_state"]
    assert isinstance(check, dict)
    assert check["steady"] is False, check
    assert check["tps_change"] < -0.10 and check["intervals"] >= 5


def test_a_held_rate_is_steady(db: str, tmp_path: Path) -> None:
    script = tmp_path / "one.sql"
    script.write_text("SELECT 1;\n")
    doc = _run(["-f", str(script), "-c", "1", "-R", "100", "-T", "7", db], tmp_path)
    check = doc["steady_state"]
    assert isinstance(check, dict)
    assert check["steady"] is True, check
    assert abs(check["tps_change"]) < 0.5


def test_a_short_run_has_no_verdict(db: str, tmp_path: Path) -> None:
    script = tmp_path / "one.sql"
    script.write_text("SELECT 1;\n")
    doc = _run(["-f", str(script), "-c", "1", "-T", "2", db], tmp_path)
    assert "steady_state" not in doc


def test_the_check_sees_the_window_after_a_warm_up(db: str, tmp_path: Path) -> None:
    # slow for the first 3 s (the warm-up: 20 ms a transaction), then flat
    # at 2 ms: after --warmup 3 the series is the window's, its first
    # interval kept, and it holds still
    script = tmp_path / "warming.sql"
    script.write_text(
        "SELECT pg_sleep(CASE WHEN clock_timestamp() - t0 < interval '3 s' "
        "THEN 0.02 ELSE 0.002 END) FROM t0;\n"
    )
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO t0 VALUES (clock_timestamp())")
    doc = _run(["-f", str(script), "-c", "1", "--warmup", "3", "-T", "6", db], tmp_path)
    assert doc["warmup_s"] == 3
    check = doc["steady_state"]
    assert isinstance(check, dict)
    assert check["intervals"] in (5, 6), check
    assert check["steady"] is True, check
    intervals = doc["intervals"]
    assert isinstance(intervals, list) and intervals[0]["offset_s"] == 0.0
