"""psycopg.errors' SQLSTATE classes are made on first need (pgsurge.deferred_errors).

A run imports ``psycopg.errors`` without the some 250 classes generated
from PostgreSQL's errcodes (issue 25: 430 KiB of every run's memory).
These pin both halves, each in a fresh interpreter (this process has
psycopg imported already): a run's import leaves them out, and every way
of reaching one (a name, ``from ... import``, ``lookup()``, a subclass
registering a code) completes the module into the one a plain import
gives: the same names, the same table of codes in the same order, the
same classes.
"""

from __future__ import annotations

import json

import pytest

from pgsurge.deferred_errors import END, START, _source, _split
from tests.fix_run import psycopg_env, python_c

# what a process reports about psycopg.errors once it is complete
_DESCRIBE = (
    "import json, psycopg.errors as e\n"
    "e.lookup('40001')\n"
    "own = ('__loader__', '__spec__')\n"
    "print(json.dumps({\n"
    "    'names': sorted(k for k in vars(e) if k not in own),\n"
    "    'codes': [\n"
    "        (k, [b.__name__ for b in v.__mro__]) for k, v in e._sqlcodes.items()\n"
    "    ],\n"
    "}))\n"
)


def _run(code: str, **env: str) -> str:
    return python_c(code, env=psycopg_env(**env)).splitlines()[-1]


def test_a_run_imports_the_module_without_its_generated_classes() -> None:
    out = _run(
        "import sys\n"
        "from pgsurge import pgconn\n"
        "from pgsurge.deferred_errors import is_deferred\n"
        "e = sys.modules['psycopg.errors']\n"
        "print(is_deferred(e), 'UniqueViolation' in vars(e),\n"
        "      e.OperationalError is pgconn.LibpqError,\n"
        "      e.Error is pgconn.PsycopgError,\n"
        "      hasattr(e, '__path__'), is_deferred(e))\n"
    )
    # a dunder probe answers without completing it
    assert out == "True False True True False True"


def test_the_completed_module_is_the_plain_one() -> None:
    code = "from pgsurge import pgconn\n" + _DESCRIBE
    ours = json.loads(_run(code))
    plain = json.loads(_run(code, PGSURGE_PSYCOPG="full"))
    assert len(plain["codes"]) > 400
    assert ours == plain


@pytest.mark.parametrize(
    "use",
    [
        "e.UniqueViolation",
        "__import__('psycopg.errors', fromlist=['SerializationFailure'])"
        ".SerializationFailure",
        "e.lookup('23505')",
        "e._class_for_state('23505')",
        "'23505' in e._sqlcodes",
        "e._sqlcodes.get('23505')",
        "len(e._sqlcodes)",
    ],
)
def test_each_use_completes_it(use: str) -> None:
    out = _run(
        "import sys\n"
        "from pgsurge import pgconn\n"
        "from pgsurge.deferred_errors import is_deferred\n"
        "e = sys.modules['psycopg.errors']\n"
        f"x = {use}\n"
        "print(is_deferred(e), e.lookup('23505').__name__,\n"
        "      type(e._sqlcodes).__name__, '__getattr__' in vars(e))\n"
    )
    assert out == "False UniqueViolation dict False"


def test_a_subclass_with_a_code_registers_after_psycopgs_own() -> None:
    # as in the plain module: psycopg's class first, the subclass's after
    code = (
        "import psycopg.errors as e\n"
        "class Mine(e.IntegrityError, code='23505'):\n"
        "    pass\n"
        "print(e.lookup('23505') is Mine, e.UniqueViolation.__name__)\n"
    )
    assert _run("from pgsurge import pgconn\n" + code) == "True UniqueViolation"
    plain = _run("from pgsurge import pgconn\n" + code, PGSURGE_PSYCOPG="full")
    assert plain == "True UniqueViolation"


def test_a_missing_name_is_still_missing() -> None:
    out = _run(
        "import psycopg.errors as e\n"
        "from pgsurge import pgconn\n"
        "try:\n"
        "    e.NoSuchError\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    assert out == "module 'psycopg.errors' has no attribute 'NoSuchError'"


def test_the_parts_keep_the_files_line_numbers() -> None:
    source = "a = 1\n" + START + "\nb = 2\nc = 3\n" + END + "\nd = 4\n"
    parts = _split(source)
    assert parts is not None
    rest, generated = parts
    lines = source.splitlines()
    assert len(rest.splitlines()) == len(lines)
    for text in (rest, generated):
        for i, line in enumerate(text.splitlines()):
            assert line in ("", lines[i])
    assert "b = 2" in generated and "b = 2" not in rest
    assert "d = 4" in rest and "a = 1" in rest and "d = 4" not in generated


@pytest.mark.parametrize(
    "source",
    [
        "a = 1\n",
        "a = 1\n" + START + "\nb = 2\n",
        "a = 1\n" + END + "\nb = 2\n" + START + "\nc = 3\n",
        "a = 1\n" + START + "\n" + START + "\nb = 2\n" + END + "\n",
        "a = 1\n    " + START + "\nb = 2\n" + END + "\n",
    ],
)
def test_another_layout_is_imported_whole(source: str) -> None:
    assert _split(source) is None


class _Loader:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def get_data(self, path: str) -> bytes:
        return self.data


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"a = 1\n", "a = 1\n"),
        (b"\xef\xbb\xbfa = '\xc3\xa9'\n", "a = '\u00e9'\n"),
        # a declared coding, or bytes that are not UTF-8: the plain import
        (b"# -*- coding: latin-1 -*-\na = 1\n", None),
        (b"#!/usr/bin/python\n# vim: set fileencoding=utf-8 :\n", None),
        (b"a = '\xe9'\n", None),
    ],
)
def test_the_source_is_read_as_utf8_without_tokenize(
    data: bytes, text: str | None
) -> None:
    # (the loader's get_source would import tokenize to decode it)
    assert _source(_Loader(data), "errors.py") == text
