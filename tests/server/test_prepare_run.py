"""-M prepared: a statement's first prepare on a connection does not block.

pgbench prepares with a blocking PQprepare, so one slow prepare holds up
every client of its thread (and under -C every transaction prepares
anew). pgsurge sends the prepare and the query after its result, while
the worker's other clients go on. What users see must not change: the
messages of a failing prepare, the counts, the -r table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.fix_run import run_pgbench, run_pgsurge, tool_env

pytestmark = pytest.mark.server


def test_failed_prepare_reports_as_pgbench(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bad.sql"
    path.write_text("SELECT * FROM no_such_table;\n")
    args = ["-n", "-M", "prepared", "-f", str(path), "-t", "2", "-c", "2"]
    ref = run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path, timeout=60)
    ours = run_pgsurge(args, bench_db, cwd=tmp_path, timeout=60)
    assert ref.status == ours.status == 2
    # the prepare's error, then the query's, per client (clients interleave)
    assert Counter(ours.stderr.splitlines()) == Counter(
        line.replace("pgbench: ", "pgsurge: ", 1) for line in ref.stderr.splitlines()
    )


def test_connect_each_transaction_prepared(bench_db: str, tmp_path: Path) -> None:
    ours = run_pgsurge(
        ["-n", "-b", "tpcb-like", "-M", "prepared", "-C", "-r", "-t", "5", "-c", "3"],
        bench_db,
        cwd=tmp_path,
        timeout=60,
    )
    code, out, err = ours.status, ours.stdout, ours.stderr
    assert code == 0, err
    assert "number of transactions actually processed: 15/15" in out
    table = out[out.index("statement latencies") :].splitlines()[1:]
    assert len(table) == 11  # the tpcb-like commands, no failure
    assert all(line.split()[1] == "0" for line in table)


def _lock_waits_and_rows(dsn: str) -> tuple[int, int]:
    """(sessions waiting for a lock on ``locked``, rows in ``ran``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pg_locks WHERE NOT granted"
            " AND relation = 'locked'::regclass), (SELECT count(*) FROM ran)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.slow
def test_prepare_does_not_block_other_clients(bench_db: str, tmp_path: Path) -> None:
    """Client 0's first prepare waits for a lock held by this test (parsing
    takes the table's share lock); client 1, on the same worker, runs all
    its transactions meanwhile (with a blocking prepare none of them could
    come). The lock is held until they are in, whatever the machine's
    load: a release at a fixed time (3.5 s, 'past -T 2') came before -T's
    end when the start-up was slow, and client 0 ran more than its one."""
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute("create table locked(id int)")
        conn.execute("create table ran(cid int)")
    path = tmp_path / "s.sql"
    path.write_text(
        "\\if :client_id = 0\nSELECT * FROM locked;\n\\else\n"
        "INSERT INTO ran VALUES (:client_id);\n\\endif\n"
    )
    holder = psycopg.connect(bench_db)
    try:
        holder.execute("lock table locked in access exclusive mode")
        args = ["-n", "-M", "prepared", "-f", str(path), "-c", "2", "-j", "1"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgsurge", *args, "-t", "30", "-l", bench_db],
            cwd=tmp_path,
            env=tool_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # client 1's 30 transactions, with client 0 waiting for the lock
        deadline = time.monotonic() + 60
        while (seen := _lock_waits_and_rows(bench_db))[1] < 30:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"client 1 held up: {seen}"
            time.sleep(0.05)
        assert seen[0] == 1, seen  # client 0's prepare, still waiting
    finally:
        holder.rollback()
        holder.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    (log,) = [name for name in os.listdir(tmp_path) if name.startswith("pgbench_log")]
    per_client = Counter(
        line.split()[0] for line in (tmp_path / log).read_text().splitlines()
    )
    # each its 30: client 0's after the lock
    assert per_client == {"0": 30, "1": 30}, per_client
