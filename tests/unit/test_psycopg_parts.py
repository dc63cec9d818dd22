"""pgconn imports only psycopg's parts a run uses, and the package stays whole.

``pgsurge.pgconn`` imports ``psycopg.pq`` and ``psycopg.errors`` (not
``psycopg.conninfo``: pgconn has its two functions) without executing
psycopg's ``__init__`` (a fifth of a run's start-up) and leaves the
package to complete itself on first use.
These tests pin both halves, each in a fresh interpreter (the test process
has psycopg imported already): what a plain import leaves out, and that
the completed package is the one ``import psycopg`` gives (same names,
submodules, adapters and classes), including when a part turns out to
need the package (the fallback) or ``PGSURGE_PSYCOPG=full`` asks for it.
The same with a server, and a whole run: tests/server/test_psycopg_parts.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.conninfo
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fix_run import psycopg_env, python_c

#: modules only psycopg's ``__init__`` imports (connections, cursors,
#: the adapters): a plain pgconn import must not load them
PACKAGE_ONLY = (
    "psycopg.connection",
    "psycopg.cursor",
    "psycopg.adapt",
    "psycopg.types",
    "psycopg._psycopg",
    "psycopg_binary._psycopg",
)

#: modules only ``psycopg.conninfo`` imports (pgconn has its own
#: ``conninfo_to_dict``/``make_conninfo``)
CONNINFO_ONLY = (
    "psycopg.conninfo",
    "psycopg._conninfo_attempts",
    "psycopg._conninfo_attempts_async",
    "psycopg._conninfo_utils",
    "psycopg.abc",
)

# what a process reports about psycopg once it is (completed and) imported
_DESCRIBE = (
    "import psycopg, psycopg.errors, psycopg.pq\n"
    "from pgsurge import pgconn\n"
    "print(json.dumps({\n"
    "    'names': sorted(vars(psycopg)),\n"
    "    'modules': sorted(m for m in sys.modules if m.startswith('psycopg')),\n"
    "    'types': len(list(psycopg.adapters.types)),\n"
    "    'impl': psycopg.pq.__impl__,\n"
    "    'same_errors': psycopg.OperationalError is pgconn.LibpqError\n"
    "        and psycopg.Error is pgconn.PsycopgError\n"
    "        and psycopg.errors.OperationalError is pgconn.LibpqError,\n"
    "    'same_pq': psycopg.pq is pgconn.pq,\n"
    "    'lazy_hook': '__getattr__' in vars(psycopg),\n"
    "}))\n"
)


def _run(code: str, **env: str) -> str:
    return python_c("import json, sys\n" + code, env=psycopg_env(**env))


def _describe(before: str = "", **env: str) -> dict[str, object]:
    out = _run(before + _DESCRIBE, **env)
    described: dict[str, object] = json.loads(out.splitlines()[-1])
    return described


def test_pgconn_imports_only_the_parts() -> None:
    out = _run(
        "from pgsurge import pgconn\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('psycopg'))))"
    )
    loaded = set(json.loads(out))
    assert {"psycopg.pq", "psycopg.errors"} <= loaded
    # nor psycopg.conninfo's connection attempts and what they import
    assert sorted(loaded.intersection(CONNINFO_ONLY)) == []
    assert "psycopg_binary.pq" in loaded  # the binary implementation's libpq
    assert sorted(loaded.intersection(PACKAGE_ONLY)) == []


def test_the_completed_package_is_the_plain_one() -> None:
    plain = _describe("import psycopg\n")
    completed = _describe()  # pgconn first, then "import psycopg" completes it
    assert completed == plain
    assert plain["same_errors"] is True
    assert plain["same_pq"] is True
    assert plain["lazy_hook"] is False
    assert plain["impl"] == "binary"
    assert "psycopg.connection" in plain["modules"]  # type: ignore[operator]


def test_any_missing_name_completes_the_package() -> None:
    out = _run(
        "from pgsurge import pgconn\n"
        "import psycopg\n"
        "assert 'psycopg.connection' not in sys.modules\n"
        "from psycopg import sql\n"  # a submodule not yet imported
        "complete = 'psycopg.connection' in sys.modules\n"
        "print(complete, callable(psycopg.connect), sql.SQL('x').as_string())\n"
    )
    assert out == "True True x\n"


@pytest.mark.parametrize(
    "first",
    [
        "from psycopg.conninfo import conninfo_to_dict\n",
        "import psycopg.conninfo\n",
        "import psycopg.rows\n",
    ],
    ids=["from-conninfo", "conninfo", "rows"],
)
def test_a_submodule_imported_first(first: str) -> None:
    # psycopg.conninfo is not a part: imported first (by a test, a Python
    # workload), its own "from . import ..." must not complete the package
    # into its half-imported self; the package completes later, whole, on
    # the first use of a name of its own
    before = (
        "from pgsurge import pgconn\n"
        + first
        + "assert 'psycopg.connection' not in sys.modules\n"
        "import psycopg\n"
        "assert callable(psycopg.connect)\n"
    )
    assert _describe(before) == _describe("import psycopg\n")


def test_a_part_that_needs_the_package_falls_back_to_the_whole_import() -> None:
    # a stand-in for a future psycopg whose psycopg.pq reads a name of
    # the package: it fails while the package is not executed
    before = (
        "import importlib.abc\n"
        "class Finder(importlib.abc.MetaPathFinder):\n"
        "    failed = False\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'psycopg.pq' and not self.failed:\n"
        "            self.failed = True\n"
        "            raise ImportError('needs the package')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Finder())\n"
        "from pgsurge import pgconn\n"
        "assert 'psycopg.connection' in sys.modules, 'not completed'\n"
    )
    assert _describe(before) == _describe("import psycopg\n")


def test_full_import_on_request() -> None:
    out = _run(
        "from pgsurge import pgconn\nprint('psycopg.connection' in sys.modules)\n",
        PGSURGE_PSYCOPG="full",
    )
    assert out == "True\n"


def test_psycopg_imported_first_is_left_alone() -> None:
    out = _run(
        "import psycopg\n"
        "package = psycopg\n"
        "from pgsurge import pgconn\n"
        "print(sys.modules['psycopg'] is package, '__getattr__' in vars(package))\n"
    )
    assert out == "True False\n"


def test_binary_version_is_read_without_importlib_metadata() -> None:
    """pgconn reads psycopg-binary's version from its METADATA file (the
    version module would import importlib.metadata, a tenth of a run's
    start-up): the same string, and importlib.metadata not loaded."""
    out = _run(
        "from pgsurge import pgconn\n"
        "import psycopg_binary\n"
        "loaded = 'importlib.metadata' in sys.modules\n"
        "from importlib import metadata\n"
        "print(json.dumps([loaded, psycopg_binary.__version__,"
        " metadata.version('psycopg-binary')]))"
    )
    loaded, preset, real = json.loads(out.splitlines()[-1])
    assert loaded is False
    assert preset == real and real.count(".") >= 2


# pgconn's conninfo_to_dict/make_conninfo stand for psycopg.conninfo's (whose
# imports a run does without): the same strings and errors as psycopg's own

_VALUE_CHARS = "ab =\\'\"\t\n\x1c\x85\u00a0\u2003\u3000é"
_KEYS = ("host", "port", "user", "dbname", "application_name", "options")


@given(
    st.dictionaries(
        st.sampled_from(_KEYS), st.text(alphabet=_VALUE_CHARS, max_size=6), min_size=0
    )
)
def test_make_conninfo_is_psycopgs(params: dict[str, str]) -> None:
    from pgsurge import pgconn

    assert _outcome(pgconn.make_conninfo, params) == _outcome(
        lambda p: psycopg.conninfo.make_conninfo("", **p), params
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "host=x port=5",
        "postgresql://u:p@h:5/db?sslmode=require",
        "host='a b' user=\\'x",
        "host='a b",
        "postgres://[::1",
        "dbname=x user=",
        "nosuchkeyword=1",
    ],
)
def test_conninfo_to_dict_is_psycopgs(text: str) -> None:
    from pgsurge import pgconn

    assert _outcome(pgconn.conninfo_to_dict, text) == _outcome(
        psycopg.conninfo.conninfo_to_dict, text
    )


def _outcome(func: Callable[[Any], object], arg: Any) -> object:
    """What ``func(arg)`` returns, or the class and text of its error."""
    try:
        return func(arg)
    except psycopg.Error as exc:
        return (type(exc), str(exc))
