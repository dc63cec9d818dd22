"""Operator chains as long as pgbench evaluates them, on both run loops.

pgbench's parser takes ``a + a + ... + a`` of any length; its evaluator
recurses in C and holds some 20000 to 29000 terms, depending on the
script, before its stack overflows. A recursive walk of ours that
recursed through C (a generator expression) stopped at about 10000 terms
with a RecursionError traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fix_run import Loop, run_pgbench, run_pgsurge

pytestmark = pytest.mark.server


@pytest.mark.parametrize("loop", ["auto", "python"])
def test_chain_of_20000_terms(
    fresh_db: str, pgbench_bin: Path, tmp_path: Path, loop: Loop
) -> None:
    terms = 20000
    path = tmp_path / "chain.sql"
    path.write_text(
        f"\\set x {' + '.join([':client_id'] * terms)}\n"
        "\\set one 1\n"
        "SELECT :x AS x, :one AS one \\gset r_\n"
        f"\\if :r_x <> {terms} * :client_id\n"
        "SELECT 1/0;\n"
        "\\endif\n"
    )
    args = ["-n", "-f", str(path), "-t", "2", "-c", "2"]
    ref = run_pgbench(pgbench_bin, args, fresh_db)
    assert ref.status == 0, ref.stderr
    ours = run_pgsurge(args, fresh_db, loop=loop)
    assert ours.status == 0, ours.stderr
    assert "Traceback" not in ours.stderr
    assert "number of transactions actually processed: 4/4" in ours.stdout


def test_chain_beyond_the_limit_is_an_error(fresh_db: str, tmp_path: Path) -> None:
    """Deeper than our recursion limit (pgbench dies of SIGSEGV there): a
    message and status 1, not a worker's traceback."""
    path = tmp_path / "chain.sql"
    path.write_text(f"\\set x {' + '.join([':client_id'] * 40000)}\nSELECT :x;\n")
    ours = run_pgsurge(["-n", "-f", str(path), "-t", "1"], fresh_db)
    assert ours.status == 1, ours.stderr
    assert ours.stderr == (
        "pgsurge: error: an expression of a script is nested too deeply to be "
        "evaluated\n"
    )
