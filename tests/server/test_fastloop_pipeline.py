"""Pipelines on the C loop (issue 22): C against the Python engine and pgbench 18.6.

``\\startpipeline``, ``\\syncpipeline`` and ``\\endpipeline`` run in
``pgsurge._fastloop`` (libpq's pipeline mode on its non-blocking
connections); an error inside a pipeline hands the client to the Python
engine, which discards up to a sync, rolls back and retries or aborts as
pgbench does. Every C run here is under ``PGSURGE_FASTLOOP=require``
(``loop="c"``), so a run the C loop did not take fails; each is compared
with the same run on the Python loop and with the reference pgbench: the
rows the script wrote, the report with numbers masked, the messages and
the -l lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.engine import fastloop
from tests.fix_db import run_worker, take_rows
from tests.fix_run import Outcome, run_pgbench, run_pgsurge

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]

#: two pipelines' worth of inserts and a select, a sync in the middle
PIPELINE = """\
\\set a random(1, 1000000)
\\set b random(1, 10)
\\startpipeline
INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, :b);
SELECT CAST(:a AS int) + :b;
\\syncpipeline
INSERT INTO t (cid, s, a, b) VALUES (:client_id, 2, :b, :a);
\\endpipeline
"""


def _three(
    pgbench_bin: Path, args: list[str], dsn: str, cwd: Path
) -> list[tuple[Outcome, list[tuple[int, int, int, int]], list[list[str]]]]:
    """The run by pgbench, pgsurge's C loop and its Python loop: each
    outcome with the rows it left in ``t`` and its -l lines (if any)."""
    out = []
    for tool in ("pgbench", "c", "python"):
        if tool == "pgbench":
            got = run_pgbench(pgbench_bin, args, dsn, cwd=cwd)
        else:
            got = run_pgsurge(args, dsn, cwd=cwd, loop=tool)  # type: ignore[arg-type]
        lines = []
        for path in sorted(cwd.glob("pgbench_log.*")):
            lines += [line.split() for line in path.read_text().splitlines()]
            path.unlink()
        out.append((got, take_rows(dsn), lines))
    return out


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_pipeline_same_rows_reports_logs(
    draws_db: str, pgbench_bin: Path, tmp_path: Path, mode: str
) -> None:
    # one client per worker and a seed: every draw, hence every row, is
    # the same in the three runs
    (tmp_path / "p.sql").write_text(PIPELINE)
    args = ["-n", "-f", "p.sql", "-M", mode, "-c", "2", "-j", "2", "-t", "60"]
    args += ["--random-seed", "11", "-r", "-l"]
    runs = _three(pgbench_bin, args, draws_db, tmp_path)
    ref = runs[0][0]
    assert ref.status == 0, ref.stderr
    for got, rows, lines in runs:
        assert got.status == 0, got.stderr
        assert rows == runs[0][1]
        assert len(rows) == 2 * 2 * 60
        assert got.report == ref.report
        # -l: client, transaction number and script of every transaction
        # (latency and times are timing)
        assert sorted((f[0], f[1], f[3]) for f in lines) == sorted(
            (f[0], f[1], f[3]) for f in runs[0][2]
        )
        assert len(lines) == 2 * 60
    # -r: one line per command, the same commands
    assert "\\endpipeline" in runs[1][0].stdout


def test_error_inside_pipeline_aborts_as_pgbench(
    draws_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # a division by zero in the middle of a pipeline, at a transaction the
    # seed decides (not the first: C runs it): the client aborts with
    # pgbench's message, after the rows of its earlier transactions
    (tmp_path / "e.sql").write_text(
        "\\set a random(1, 1000000)\n"
        "\\set n random(0, 7)\n"
        "\\startpipeline\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, :n);\n"
        "SELECT 1 / :n;\n"
        "SELECT 2;\n"
        "\\endpipeline\n"
    )
    args = ["-n", "-f", "e.sql", "-M", "extended", "-c", "1", "-t", "200"]
    args += ["--random-seed", "4"]
    runs = _three(pgbench_bin, args, draws_db, tmp_path)
    ref = runs[0][0]
    assert ref.status == 2, ref.stderr
    assert "division by zero" in ref.stderr
    # the seed's first zero is after a few transactions
    assert len(runs[0][1]) > 2
    for got, rows, _lines in runs:
        assert got.status == 2, got.stderr
        assert got.messages == ref.messages, (ref.stderr, got.stderr)
        assert got.report == ref.report
        # the pipeline's insert is in the failed (implicit) transaction
        # too: rolled back with it
        assert rows == runs[0][1]


def test_serialization_failure_in_pipeline_retried(
    draws_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # two clients update one row under REPEATABLE READ, each transaction
    # one pipeline that sleeps after taking its snapshot: the later of two
    # concurrent ones fails to serialize, and --max-tries runs it again
    # from its first command (Python's ERROR state discards the pipeline
    # up to a new sync and rolls back); every transaction ends committed
    with psycopg.connect(draws_db, autocommit=True) as conn:
        conn.execute("INSERT INTO u VALUES (0)")
    (tmp_path / "r.sql").write_text(
        "\\startpipeline\n"
        "BEGIN ISOLATION LEVEL REPEATABLE READ;\n"
        "SELECT pg_sleep(0.02) FROM u;\n"
        "UPDATE u SET v = v + 1;\n"
        "END;\n"
        "\\endpipeline\n"
    )
    args = ["-n", "-f", "r.sql", "-M", "prepared", "-c", "2", "-j", "1", "-t", "15"]
    args += ["--max-tries", "1000", "-l"]
    retried = []
    for tool in ("pgbench", "c", "python"):
        if tool == "pgbench":
            got = run_pgbench(pgbench_bin, args, draws_db, cwd=tmp_path)
        else:
            got = run_pgsurge(args, draws_db, cwd=tmp_path, loop=tool)  # type: ignore[arg-type]
        assert got.status == 0, got.stderr
        assert got.line("number of transactions actually processed:").endswith("30/30")
        assert got.line("number of failed transactions:").startswith(
            "number of failed transactions: 0 "
        )
        retried.append(int(got.number("number of transactions retried:").split()[0]))
        logs = []
        for path in tmp_path.glob("pgbench_log.*"):
            logs += [line.split() for line in path.read_text().splitlines()]
            path.unlink()
        # -l with --max-tries: the retries of each transaction last
        assert len(logs) == 30 and all(len(f) == 7 for f in logs)
        assert sum(int(f[6]) > 0 for f in logs) == retried[-1]
        with psycopg.connect(draws_db, autocommit=True) as conn:
            row = conn.execute("SELECT v FROM u").fetchone()
            conn.execute("UPDATE u SET v = 0")
        assert row == (30,)
    # concurrent snapshots: some transactions failed and were retried
    assert all(n > 0 for n in retried), retried


def test_gset_in_pipeline_refused_as_pgbench(
    draws_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # C hands the client to Python, whose message is pgbench's
    (tmp_path / "g.sql").write_text(
        "\\startpipeline\nSELECT 1 AS one \\gset\n\\endpipeline\n"
    )
    args = ["-n", "-f", "g.sql", "-M", "extended", "-c", "1", "-t", "3"]
    ref = run_pgbench(pgbench_bin, args, draws_db, cwd=tmp_path)
    got = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    assert ref.status == 2, ref.stderr
    assert got.status == ref.status
    assert got.messages == ref.messages, (ref.stderr, got.stderr)


def test_pipelines_run_in_c(
    c_loops: list[Any], draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in-process: after each client's first transaction (its prepares,
    # made by Python before its pipeline starts), C runs every pipeline:
    # a hand-back for those prepares and one at the end, per client
    (tmp_path / "p.sql").write_text(PIPELINE)
    loops = c_loops
    args = ["-n", "-f", str(tmp_path / "p.sql"), "-M", "prepared", "-c", "3"]
    _w, result = run_worker([*args, "-t", "300"], draws_db)
    assert result.total.cnt == 900
    assert len(take_rows(draws_db)) == 2 * 900
    assert loops
    assert loops[0]._fast.handbacks <= 2 * 3
    assert loops[0]._fast.py_calls <= 6 * 3
