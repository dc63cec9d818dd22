"""A run whose server goes away under it: the report, the --json document
and the exit status survive whatever the monitor's session meets.

Hostile-tester regressions: the monitor's end snapshot (``--server-stats``,
``--waits``) on a connection the server had closed raised a psycopg
traceback from the runner, and the report and the JSON were lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_run import plain_env

pytestmark = pytest.mark.server

#: ends every other session of this database: the monitor's among them
KILL_OTHERS = (
    "select pg_terminate_backend(pid) from pg_stat_activity "
    "where pid <> pg_backend_pid() and backend_type = 'client backend' "
    "and datname = current_database();\n"
)


def test_monitor_session_killed_keeps_the_report_and_json(
    fresh_db: str, tmp_path: Path
) -> None:
    (tmp_path / "kill.sql").write_text(KILL_OTHERS)
    args = ["-n", "-f", "kill.sql", "-t", "1", "--server-stats", "--waits"]
    r = subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, "--json", "r.json", fresh_db],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=plain_env(),
        timeout=120,
    )
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    assert "number of transactions actually processed: 1/1" in r.stdout
    # only the counters need the end snapshot: the wait samples stay
    assert (
        "pgsurge: warning: --server-stats: left out: the monitor's "
        "connection failed at the end of the run: "
    ) in r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["totals"]["transactions"] == 1
    assert "waits" in doc and "server_stats" not in doc


def test_ab_arm_options_win_over_the_common_ones(fresh_db: str, tmp_path: Path) -> None:
    """``--a "-c 2" --b "-c 3" -- -c 1``: each arm runs as it is labelled.
    The common arguments came last, so both arms ran -c 1 under the names
    "-c 2" and "-c 3" (a sweep's ``--vary -c`` points likewise)."""
    (tmp_path / "one.sql").write_text("select 1;\n")
    out = tmp_path / "out"
    own = ["--runs", "1", "--warmup", "0", "--a", "-c 2", "--b", "-c 3"]
    common = ["-n", "-f", "one.sql", "-c", "1", "-T", "1", fresh_db]
    r = subprocess.run(
        [sys.executable, "-m", "pgsurge", "ab", *own, "--out", str(out), "--", *common],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=plain_env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    clients = {
        doc["experiment"]["arm"]: doc["config"]["clients"]
        for doc in (json.loads(p.read_text()) for p in sorted(out.glob("run-*.json")))
    }
    assert clients == {"A": 2, "B": 3}


def test_a_password_in_a_label_is_masked_in_the_store(
    fresh_db: str, tmp_path: Path
) -> None:
    """The --json document masked it; the store kept it in clear (and
    ``history`` printed it)."""
    import sqlite3

    (tmp_path / "one.sql").write_text("select 1;\n")
    store = tmp_path / "s.sqlite"
    labels = ["--label", "db=postgresql://u:LBLSECRET@h/x", "--label", "k=password=P2"]
    args = ["-n", "-f", "one.sql", "-t", "1", *labels, f"--store={store}", fresh_db]
    r = subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=plain_env(),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(store) as db:
        rows = sorted(db.execute("SELECT key, value FROM run_labels").fetchall())
        docs = [d for (d,) in db.execute("SELECT doc FROM runs")]
    assert rows == [("db", "postgresql://u:********@h/x"), ("k", "password=********")]
    assert not any("LBLSECRET" in d or "P2" in d for d in docs)
