"""The fixed memory of a run on the C loop with its workers as threads (issue 25).

At a thousand clients pgsurge's peak memory per client is compared with
pgbench's, and what pgsurge holds whatever the number of clients (its
modules, their classes and code) is most of the difference. A real run
(``PGSURGE_FASTLOOP=require``, ``PGSURGE_WORKERS=threads``) in a fresh
interpreter reports what it imported and whether it made the ``ast``
module's node types (the first builtin ``compile()`` of a process does:
some 200 KiB); tests/unit/test_startup.py checks the same of a run that
fails to connect, without a server.
"""

from __future__ import annotations

import json

import pytest

from pgsurge import _native
from tests.fix_run import byte_compile_pgsurge, plain_env, python_c

pytestmark = pytest.mark.server

#: what a C-loop run on threads does without: the Python event loop's
#: timers, the live panel, copy and weakref (dataclasses' asdict), string
#: (three constants psycopg reads), the ast module and what it would bring
NOT_IMPORTED = (
    "heapq",
    "pgsurge.report.live_panel",
    "copy",
    "weakref",
    "string",
    "ast",
    "inspect",
)

#: what only the end of the run imports (its report): present afterwards
AFTER_THE_RUN = ("pgsurge.report.extras", "pgsurge.report.rate", "pgsurge.stats.host")

_CODE = """
import json, sys, tracemalloc
from pgsurge.cli import main
status = main(['pgsurge', '-n', '-S', '-c', '4', '-j', '2', '-t', '20', sys.argv[1]])
modules = sorted(sys.modules)
tracemalloc.start()
compile('1', '<s>', 'eval')
print(json.dumps([status, modules, tracemalloc.get_traced_memory()[0]]))
"""


def _run(dsn: str) -> tuple[int, set[str], int]:
    byte_compile_pgsurge()
    env = {**plain_env(), "PGSURGE_FASTLOOP": "require", "PGSURGE_WORKERS": "threads"}
    out = python_c(_CODE, dsn, env=env)
    status, modules, cost = json.loads(out.splitlines()[-1])
    return status, set(modules), cost


def test_a_c_loop_run_on_threads_imports_only_what_it_uses(bench_db: str) -> None:
    status, modules, _ = _run(bench_db)
    assert status == 0
    assert "pgsurge._fastloop" in modules
    assert sorted(modules.intersection(NOT_IMPORTED)) == []
    assert set(AFTER_THE_RUN) <= modules


def test_a_c_loop_run_on_threads_makes_no_ast_node_types(bench_db: str) -> None:
    if _native.load("_speedups", _native.SPEEDUPS_API) is None:
        pytest.skip("pgsurge._speedups not usable: the builtin compiles")
    status, _, cost = _run(bench_db)
    assert status == 0
    # the node types are made by this compile, not before it (~200 KiB)
    assert cost > 100 * 1024
