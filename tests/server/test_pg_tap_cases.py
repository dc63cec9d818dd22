"""PostgreSQL's own pgbench TAP cases, run with pgsurge and with pgbench 18.6.

Every case of ``t/001_pgbench_with_server.pl`` and
``t/002_pgbench_no_server.pl`` (``tests/fix_tap_cases.py``) runs twice,
each program from the same database state on the cases' own cluster
(``tests/fix_tap.py``): pgbench 18.6 must meet the expectations (the table
is right), pgsurge must meet them too, and where the output does not
depend on timing the two must agree (the report with numbers masked,
stderr exactly or line by line; the cases without a server run pgsurge's
command line in-process, for speed). The with-server cases run in the TAP
file's order, since each leaves the state the next expects; run alone
(``-k``), a case that needs the pgbench tables gets them first.

Cases that check what docs/differences.md lists ("Differences from pgbench")
are expected failures (strict: one that starts passing must be
revisited). ``tools/tap_driver.py`` prints the same comparison as a table.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fix_tap import (
    TapNode,
    compare_runs,
    describe,
    expected_to_pass,
    pgbench_program,
    pgsurge_program,
    run_case,
)
from tests.fix_tap_cases import NO_SERVER, WITH_SERVER, TapCase

pytestmark = pytest.mark.server

#: the first case that needs the pgbench tables: everything after -i
_FIRST_WITH_TABLES = next(
    i for i, case in enumerate(WITH_SERVER) if case.args.split() == ["-i"]
)


#: cases of 2 s or more (make test-fast leaves them out)
_SLOW = {"deadlock retried"}


def _param(case: TapCase) -> object:
    marks = []
    if case.name in _SLOW:
        marks.append(pytest.mark.slow)
    if case.difference:
        marks.append(pytest.mark.xfail(reason=case.difference, strict=True))
    return pytest.param(case, id=case.name, marks=marks)


def _check_both(case: TapCase, node: TapNode | None, workdir: Path) -> None:
    ref = run_case(pgbench_program(), case, node, workdir)
    # without a server, pgsurge's command line in this process (the driver,
    # tools/tap_driver.py, runs the program itself)
    ours = run_case(pgsurge_program(inprocess=True), case, node, workdir)
    if case.todo and not (ref.passed and ours.passed):
        # upstream marks it "to do": a server race that rarely strikes
        pytest.xfail(f"known server race (to do upstream): {describe(ref)}")
    if expected_to_pass(ref):
        assert ref.passed, "the case table is wrong for pgbench:\n" + describe(ref)
    if expected_to_pass(ours):
        assert ours.passed, describe(ours)
    diffs = compare_runs(ours, ref)
    assert not diffs, "\n".join(diffs)


@pytest.fixture(scope="module")
def tap_workdir(tap_node: TapNode) -> Iterator[Path]:
    path = tap_node.base / "work"
    path.mkdir(exist_ok=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("case", [_param(c) for c in NO_SERVER])
def test_no_server_case(case: TapCase, tmp_path: Path) -> None:
    _check_both(case, None, tmp_path)


@pytest.mark.parametrize("case", [_param(c) for c in WITH_SERVER])
def test_with_server_case(case: TapCase, tap_node: TapNode, tap_workdir: Path) -> None:
    if WITH_SERVER.index(case) > _FIRST_WITH_TABLES and not tap_node.sql(
        "SELECT to_regclass('pgbench_branches') IS NOT NULL"
    ).startswith("True"):
        # run alone: the tables the cases before it would have made
        ref = run_case(
            pgbench_program(), WITH_SERVER[_FIRST_WITH_TABLES], tap_node, tap_workdir
        )
        assert ref.passed, describe(ref)
    _check_both(case, tap_node, tap_workdir)
