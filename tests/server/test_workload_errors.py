"""SQL errors in Python workloads: thrown into the generator at the yield
that sent the statement (caught: the transaction goes on; not caught: a
script's handling, messages naming the file and line), and a batch as one
implicit transaction in every -M mode."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.errors import ExitStatus
from pgsurge.runner import run
from pgsurge.stats.results import RunResult

pytestmark = pytest.mark.server

MODES = ["simple", "extended", "prepared"]


def run_inprocess(args: list[str], dsn: str) -> tuple[ExitStatus, RunResult, str, str]:
    cfg = parse_command_line([*args, dsn], environ={}, stderr=io.StringIO())
    assert isinstance(cfg, RunConfig)
    results: list[RunResult] = []
    out, err = io.StringIO(), io.StringIO()
    status = run(cfg, stdout=out, stderr=err, on_result=results.append)
    return status, results[0] if results else None, out.getvalue(), err.getvalue()  # type: ignore[return-value]


def run_cli(args: list[str], dsn: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, dsn],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def make_kv(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS kv")
        conn.execute("CREATE TABLE kv (k bigint PRIMARY KEY, v int)")


def kv_keys(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT k FROM kv ORDER BY k")]


CATCH = """
from pgsurge.workloads import SqlError, sql, transaction

put = sql("INSERT INTO kv VALUES ($1, $2)", fetch=False)
begin = sql("BEGIN")
savepoint = sql("SAVEPOINT s")
undo = sql("ROLLBACK TO SAVEPOINT s")
commit = sql("COMMIT")

@transaction
def t(ctx):
    ctx.n = getattr(ctx, "n", 0) + 1
    other = 1000 * (ctx.client_id + 1) + ctx.n
{body}
"""

#: autocommit: a caught unique violation, then an insert under another key
PLAIN = """
    try:
        yield put(ctx.random(1, 3), ctx.client_id)
    except SqlError as e:
        assert e.sqlstate == "23505", e
        assert e.statement is put and "duplicate key" in e.message, e
        assert e.where.endswith(":15"), e.where
        yield put(other, ctx.client_id)
"""

#: in a transaction block: back to a savepoint, then the other key
BLOCK = """
    yield begin()
    yield savepoint()
    try:
        yield put(ctx.random(1, 3), ctx.client_id)
    except SqlError:
        yield undo()
        yield put(other, ctx.client_id)
    yield commit()
"""

#: a batch whose second statement fails: none of it stays; then one row
BATCH = """
    try:
        yield [put(other, 0), put(ctx.random(1, 3), 0), put(other + 500, 0)]
    except SqlError as e:
        assert e.sqlstate == "23505" and e.statement is put, e
        yield put(other, ctx.client_id)
"""


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "catch.py"
    path.write_text(CATCH.format(body=body.strip("\n")))
    return path


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", ["plain", "block", "batch"])
def test_a_caught_unique_violation_goes_on_and_commits(
    fresh_db: str, tmp_path: Path, mode: str, case: str
) -> None:
    make_kv(fresh_db)
    if case == "batch":
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("INSERT INTO kv VALUES (1, 0), (2, 0), (3, 0)")
    body = {"plain": PLAIN, "block": BLOCK, "batch": BATCH}[case]
    path = write(tmp_path, body)
    args = ["-n", "-f", str(path), "-M", mode, "-c", "2", "-t", "10", "-r"]
    status, res, _, err = run_inprocess(args, fresh_db)
    assert status == ExitStatus.SUCCESS, err
    # a caught error is not a failed transaction
    assert res.total.cnt == 20 and res.total.failures == 0, err
    keys = kv_keys(fresh_db)
    low = [k for k in keys if k <= 3]
    high = [k for k in keys if k > 3]
    if case == "batch":
        # every batch failed as a whole: only the keys inserted after it
        assert low == [1, 2, 3]
        assert high == sorted(1000 * (c + 1) + n for c in (0, 1) for n in range(1, 11))
    else:
        assert len(low) == 3 and len(low) + len(high) == 20, keys


UNCAUGHT = """
from pgsurge.workloads import sql, transaction

put = sql("INSERT INTO kv VALUES ($1, 0)", fetch=False)

@transaction
def t(ctx):
    yield put(ctx.random(1, 3))
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_uncaught_error_aborts_naming_the_yield(
    fresh_db: str, tmp_path: Path, mode: str
) -> None:
    make_kv(fresh_db)
    path = tmp_path / "uncaught.py"
    path.write_text(UNCAUGHT)
    proc = run_cli(["-n", "-f", str(path), "-M", mode, "-t", "10"], fresh_db)
    assert proc.returncode == 2, proc.stderr
    assert re.search(
        rf"client 0 aborted in script 0 \({re.escape(str(path))}: t\) at "
        rf"{re.escape(str(path))}:8 \(statement put\): ERROR:  duplicate key",
        proc.stderr,
    ), proc.stderr
    assert "Run was aborted" in proc.stderr
    assert 1 <= len(kv_keys(fresh_db)) <= 3  # up to the first duplicate


def test_an_uncaught_error_fails_under_continue_on_error(
    fresh_db: str, tmp_path: Path
) -> None:
    make_kv(fresh_db)
    path = tmp_path / "uncaught.py"
    path.write_text(UNCAUGHT)
    args = ["-n", "-f", str(path), "-c", "2", "-t", "20", "--continue-on-error"]
    proc = run_cli([*args, "--verbose-errors"], fresh_db)
    assert proc.returncode == 0, proc.stderr
    assert len(kv_keys(fresh_db)) == 3
    assert "number of transactions actually processed: 3/40" in proc.stdout
    assert "number of failed transactions: 37 (92.500%)" in proc.stdout
    assert re.search(
        r"client \d got an error at .*uncaught.py:8 in script 0; ERROR:", proc.stderr
    )


FAILING_BATCH = """
from pgsurge.workloads import sql, transaction

put = sql("INSERT INTO kv VALUES ($1, 0)", fetch=False)

@transaction
def t(ctx):
    yield [put(1), put(2), put(2), put(3)]
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_batch_leaves_no_row(
    fresh_db: str, tmp_path: Path, mode: str
) -> None:
    make_kv(fresh_db)
    path = tmp_path / "batch.py"
    path.write_text(FAILING_BATCH)
    proc = run_cli(["-n", "-f", str(path), "-M", mode, "-t", "1"], fresh_db)
    assert proc.returncode == 2, proc.stderr
    assert "duplicate key" in proc.stderr and "batch.py:8" in proc.stderr
    assert kv_keys(fresh_db) == []


def notes_example() -> str:
    """The example workload of the guide's "Python workloads" page."""
    guide = Path(__file__).resolve().parents[2] / "docs" / "python-workloads.md"
    text = guide.read_text()
    start = text.index("# transfer.py")
    return text[start : text.index("```", start)]


def test_the_example_workload_catches_and_goes_on(
    bench_db: str, tmp_path: Path
) -> None:
    path = tmp_path / "transfer.py"
    path.write_text(notes_example())
    args = ["-n", "-f", str(path), "-c", "3", "-t", "60", "-r", "--max-tries=50"]
    status, res, out, err = run_inprocess([*args, "--random-seed=5"], bench_db)
    assert status == ExitStatus.SUCCESS, err
    assert res.total.cnt == 180 and res.total.failures == 0
    assert "ctx.sleep()" in out
    names = [s.desc.split(": ")[1] for s in res.facts.scripts]
    opened = res.per_script[names.index("open_or_touch")].cnt
    with psycopg.connect(bench_db) as conn:
        total = conn.execute("SELECT sum(abalance) FROM pgbench_accounts").fetchone()
        seen = conn.execute(
            "SELECT count(*) FROM pgbench_accounts WHERE filler = 'seen'"
        ).fetchone()
        new = conn.execute(
            "SELECT count(*) FROM pgbench_accounts WHERE aid > 100000"
        ).fetchone()
    assert total == (0,)  # transfers move money, never make it
    # every open_or_touch either opened an account or, on the caught unique
    # violation, touched it (most accounts exist: the caught path ran)
    assert seen is not None and new is not None
    assert seen[0] > 0 and seen[0] + new[0] <= opened
