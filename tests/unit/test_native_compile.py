"""``pgsurge._native.compile_source``: the builtin ``compile``'s code, without
the ``ast`` module's node types (issue 25).

The builtin ``compile`` asks first whether its source is an ast object, and
the first such question in a process makes every node type of the ``ast``
module: some 200 KiB of each run, which compiles strings (psycopg.errors'
source in ``pgsurge.deferred_errors``, the string annotations of psycopg's
named tuples through ``typing.ForwardRef``) but never sees an ast object.
These check that the C twin gives the builtin's code object byte for byte,
its errors, and that ``pgsurge.deferred`` hands it to typing only while
psycopg's parts import; tests/unit/test_startup.py checks that a run
leaves the node types unmade.
"""

from __future__ import annotations

import marshal
import typing

import pytest

from pgsurge import _native, deferred

speedups = _native.load("_speedups", _native.SPEEDUPS_API)

needs_c = pytest.mark.skipif(speedups is None, reason="pgsurge._speedups not usable")

EXEC_SOURCES = [
    "x = 1\n",
    "def f(a, /, b=2, *args, c, **kw):\n    '''doc'''\n    return a + b\n",
    "class C:\n    y: int = 3\n\n    def m(self):\n        return [i for i in ()]\n",
    "async def g():\n    async with h() as a:\n        await a\n",
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
    "x = '\u00e9\U0001f600'  # a comment with \u00e9\n",
    "# -*- coding: latin-1 -*-\ns = '\u00e9'\n",
    "",
]
EVAL_SOURCES = [
    "1 + 2",
    "bytes | None",
    "tuple[int, ...]",
    "re.Pattern[str]",
    "(*Ts,)[0]",
]


@pytest.mark.parametrize(
    ("source", "mode"),
    [(s, "exec") for s in EXEC_SOURCES] + [(s, "eval") for s in EVAL_SOURCES],
)
def test_the_builtins_code(source: str, mode: str) -> None:
    ours = _native.compile_source(source, "/some/where.py", mode)
    theirs = compile(source, "/some/where.py", mode, dont_inherit=True)
    assert marshal.dumps(ours) == marshal.dumps(theirs)
    assert ours.co_filename == "/some/where.py"


@needs_c
@pytest.mark.parametrize(
    ("source", "mode"),
    [
        ("x = (\n", "exec"),
        ("def f(:\n", "exec"),
        ("a = 1", "eval"),
        ("\tif 1:\n  x", "exec"),
    ],
)
def test_the_builtins_syntax_errors(source: str, mode: str) -> None:
    assert speedups is not None
    with pytest.raises(SyntaxError) as ours:
        speedups.compile_source(source, "f.py", mode)
    with pytest.raises(SyntaxError) as theirs:
        compile(source, "f.py", mode, dont_inherit=True)
    assert type(ours.value) is type(theirs.value)
    assert ours.value.args == theirs.value.args


@needs_c
def test_refused_arguments() -> None:
    assert speedups is not None
    with pytest.raises(ValueError, match="null bytes"):
        speedups.compile_source("x = 1\0", "f.py", "exec")
    with pytest.raises(ValueError, match="mode"):
        speedups.compile_source("x", "f.py", "single")
    with pytest.raises(TypeError):
        speedups.compile_source(b"x", "f.py", "exec")


def test_typing_compiles_through_it_only_inside_the_block() -> None:
    assert "compile" not in vars(typing)
    with deferred._forward_refs_compiled_natively():
        assert vars(typing)["compile"] is deferred._compile
        ref = typing.ForwardRef("bytes | None")
    assert "compile" not in vars(typing)
    plain = typing.ForwardRef("bytes | None")
    assert marshal.dumps(ref.__forward_code__) == marshal.dumps(plain.__forward_code__)


def test_anything_else_goes_to_the_builtin() -> None:
    # (flags, or an ast object: what only the builtin does)
    code = deferred._compile("1", "<s>", "eval", 0, True)
    assert eval(code) == 1
    with pytest.raises(ValueError, match="compile\\(\\) mode must be"):
        deferred._compile("1", "<s>", "nope")
