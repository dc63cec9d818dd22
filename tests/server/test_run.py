"""The run engine against a real server: what the differential tests cannot see.

The merged ``RunResult`` (read in-process through ``runner.run``'s
``on_result``) obeys pgbench's accounting identities; a sleeping client
does not hold up the others; progress lines count every worker's
clients; ``--exit-on-abort`` ends the run at once; ``--random-seed`` gives
each client the very random values pgbench gives it, also across retries;
PG19's ``--continue-on-error`` counts other SQL errors as failures.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import psycopg
import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.errors import ExitStatus
from pgsurge.runner import run, split_clients
from pgsurge.stats.results import RunResult
from tests.fix_run import run_pgbench, run_pgsurge

pytestmark = pytest.mark.server


def run_inprocess(args: list[str], dsn: str) -> tuple[ExitStatus, RunResult, str, str]:
    cfg = parse_command_line([*args, dsn])
    assert isinstance(cfg, RunConfig)
    results: list[RunResult] = []
    out, err = io.StringIO(), io.StringIO()
    status = run(cfg, stdout=out, stderr=err, on_result=results.append)
    return status, results[0], out.getvalue(), err.getvalue()


def test_split_clients_like_pgbench() -> None:
    # thread i gets (n - dealt + j - i - 1) / (j - i): the first get more
    assert split_clients(10, 3) == [(0, 4), (4, 3), (7, 3)]
    assert split_clients(7, 2) == [(0, 4), (4, 3)]
    assert split_clients(2, 2) == [(0, 1), (1, 1)]


def test_accounting_identities(bench_db: str) -> None:
    status, res, out, _ = run_inprocess(
        [
            "-n",
            "-b",
            "select-only@2",
            "-b",
            "simple-update@1",
            "-t",
            "30",
            "-c",
            "4",
            "-j",
            "2",
        ],
        bench_db,
    )
    assert status == ExitStatus.SUCCESS
    t = res.total
    assert t.cnt + t.skipped + t.failures == 4 * 30
    assert t.latency.count == t.cnt  # only successes have a latency
    assert sum(s.cnt for s in res.per_script) == t.cnt
    assert sum(s.total for s in res.per_script) == t.total
    assert res.clients_finished == 4 and res.aborted_clients == 0
    assert res.workers == 2
    assert res.cpu_user_s + res.cpu_sys_s > 0
    assert f"number of transactions actually processed: {t.cnt}/120" in out


def test_sleeping_client_does_not_block_others(fresh_db: str, tmp_path: Path) -> None:
    path = tmp_path / "sleep.sql"
    path.write_text("\\if :client_id = 0\n\\sleep 1500 ms\n\\endif\nSELECT 1;\n")
    status, res, _, _ = run_inprocess(
        ["-n", "-f", str(path), "-T", "1", "-c", "2", "-j", "1"], fresh_db
    )
    assert status == ExitStatus.SUCCESS
    # client 0 ran one transaction (the whole second asleep); client 1 many
    assert res.total.cnt > 50


@pytest.mark.slow
def test_progress_counts_all_workers(bench_db: str, tmp_path: Path) -> None:
    proc = run_pgsurge(
        ["-n", "-S", "-R", "400", "-P", "1", "-T", "3", "-c", "4", "-j", "2"],
        bench_db,
        cwd=tmp_path,
    )
    assert proc.status == 0, proc.stderr
    rates = [
        float(m.group(1))
        for m in re.finditer(r"^progress: [\d.]+ s, ([\d.]+) tps", proc.stderr, re.M)
    ]
    assert len(rates) >= 2, proc.stderr
    # the schedule is 400 tps over both workers, not 200 for worker 0 alone
    assert all(250 < r < 600 for r in rates), rates


def test_exit_on_abort_ends_at_once(fresh_db: str, tmp_path: Path) -> None:
    path = tmp_path / "abort.sql"
    path.write_text(
        "\\if :client_id = 0\nSELECT 1/0;\n\\endif\nSELECT pg_sleep(0.2);\n"
    )
    t0 = time.perf_counter()
    proc = run_pgsurge(
        ["-n", "-f", str(path), "-t", "500", "-c", "4", "-j", "2", "--exit-on-abort"],
        fresh_db,
        cwd=tmp_path,
    )
    elapsed = time.perf_counter() - t0
    assert proc.status == 2
    assert "Run was aborted due to an error in thread 0" in proc.stderr
    assert "latency" not in proc.stdout  # no report
    # without --exit-on-abort the others would run 100 s; the bound leaves a
    # loaded box its slow start-up (it was 5 s against 10 s of -t 50)
    assert elapsed < 30


SEEDED = """\
\\set r random(1, 1000000000)
\\set g random_gaussian(1, 1000, 2.5)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM hot WHERE id = 1;
UPDATE hot SET v = v + 1 WHERE id = 1;
INSERT INTO drawn VALUES (:client_id, :r, :g);
END;
"""


def test_random_values_match_pgbench_across_retries(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """Same seed, same values per client, whatever retries happened: a retry
    restores the client's PRNG state of the transaction start."""
    path = tmp_path / "seeded.sql"
    path.write_text(SEEDED)
    args = [
        "-n",
        "-f",
        str(path),
        "-t",
        "15",
        "-c",
        "3",
        "-j",
        "3",
        "--random-seed",
        "987654321",
        "--max-tries",
        "1000",
    ]
    drawn: dict[str, list[tuple[int, int, int]]] = {}
    for tool in ("pgbench", "pgsurge"):
        with psycopg.connect(bench_db, autocommit=True) as conn:
            conn.execute("drop table if exists hot, drawn")
            conn.execute("create table hot(id int primary key, v int)")
            conn.execute("insert into hot values (1, 0)")
            conn.execute("create table drawn(client int, r bigint, g bigint)")
        if tool == "pgbench":
            proc = run_pgbench(pgbench_bin, args, bench_db, timeout=None)
        else:
            proc = run_pgsurge(args, bench_db, timeout=None)
        assert proc.status == 0, proc.stderr
        assert "number of transactions retried: 0 " not in proc.stdout  # conflicts
        with psycopg.connect(bench_db) as conn:
            rows = conn.execute("select client, r, g from drawn").fetchall()
        drawn[tool] = sorted(rows)
    assert len(drawn["pgsurge"]) == 45
    assert drawn["pgsurge"] == drawn["pgbench"]


def test_continue_on_error(bench_db: str, tmp_path: Path) -> None:
    path = tmp_path / "coe.sql"
    path.write_text("\\set r random(0, 1)\nSELECT 1 / :r;\n")
    status, res, out, err = run_inprocess(
        [
            "-n",
            "-f",
            str(path),
            "-t",
            "40",
            "-c",
            "2",
            "--continue-on-error",
            "--failures-detailed",
            "--random-seed",
            "1",
        ],
        bench_db,
    )
    assert status == ExitStatus.SUCCESS, err
    t = res.total
    assert t.other_failures > 0 and t.cnt > 0
    assert t.cnt + t.failures == 80
    assert "number of other failures:" in out
