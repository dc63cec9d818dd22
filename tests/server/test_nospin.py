"""The engine never spins: waiting clients cost (almost) no client CPU.

pgbench once burnt a core on ``PQisBusy``/``PQconsumeInput`` while a result
trickled in over several packets. pgsurge waits on the sockets instead, so
its CPU time while the server is busy must stay near zero. Each test runs
the real ``python -m pgsurge`` and measures its whole process tree with
``getrusage(RUSAGE_CHILDREN)``; start-up costs (interpreter, imports,
connections) are taken out by subtracting a short run of the same shape.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from tests.fix_run import run_pgsurge

pytestmark = [pytest.mark.server, pytest.mark.slow]


def measured_run(args: list[str], dsn: str, cwd: Path) -> tuple[float, float, str]:
    """(CPU seconds of the process tree, wall seconds, stdout) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = run_pgsurge(args, dsn, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.status == 0, proc.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.stdout


def test_sleeping_clients_do_not_spin(fresh_db: str, tmp_path: Path) -> None:
    sleep = tmp_path / "sleep.sql"
    sleep.write_text("SELECT pg_sleep(0.5);\n")
    common = ["-n", "-f", str(sleep), "-c", "8", "-j", "2"]
    base_cpu, _, _ = measured_run([*common, "-t", "1"], fresh_db, tmp_path)
    cpu, wall, out = measured_run([*common, "-T", "4"], fresh_db, tmp_path)
    assert "number of transactions actually processed: " in out
    # the wall-clock floor is the run's own -T 4 (a difference of two walls
    # would move with the start-up time of each on a loaded machine)
    assert wall >= 4.0, wall
    extra_cpu = cpu - base_cpu
    # < 5% of one core while 8 clients wait on the server for 4 s
    assert extra_cpu < 0.05 * 4.0, (extra_cpu, wall)


def test_large_and_trickling_results_do_not_spin(fresh_db: str, tmp_path: Path) -> None:
    # 20 rows of 200 kB, one every 0.1 s: the result arrives in many pieces
    # over 2 s; then a 5 MB value in one go
    big = tmp_path / "big.sql"
    big.write_text(
        "SELECT repeat('x', 200000) || pg_sleep(0.1)::text"
        " FROM generate_series(1, 20);\n"
        "SELECT repeat('y', 5000000);\n"
    )
    one = tmp_path / "one.sql"
    one.write_text("SELECT 1;\n")
    base_cpu, _, _ = measured_run(["-n", "-f", str(one), "-t", "1"], fresh_db, tmp_path)
    cpu, wall, out = measured_run(
        ["-n", "-f", str(big), "-t", "1", "-M", "extended"], fresh_db, tmp_path
    )
    assert "number of transactions actually processed: 1/1" in out, out
    # the server's 20 sleeps of 0.1 s are the floor of the wall time
    assert wall >= 2.0, wall
    extra_cpu = cpu - base_cpu
    # receiving ~9 MB costs some milliseconds; waiting 2 s must cost nothing
    assert extra_cpu < 0.05 * 2.0, (extra_cpu, wall)
