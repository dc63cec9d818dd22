"""The common ``\\set``/``\\if``/``\\elif`` lines read in C (``pgsurge._fastparse``).

:mod:`pgsurge.script.parser` is the reference: it gives pgbench's trees,
messages and caret columns, at some 30 µs a line -- which made a script
of 10,000 ``\\set`` lines parse nine times slower than pgbench (issue 11,
item 8). The optional extension reads such a line, an ASCII one without a
continuation, and builds the very same :mod:`pgsurge.script.ast` nodes (its
columns included) in about a microsecond; for anything else -- another
command, an error of any kind, a non-ASCII or continued line, deep
nesting -- it returns None and the caller lexes and parses the line in
Python, which raises pgbench's message. tests/unit/test_fastparse.py
compares the two parsers node for node.

:data:`meta_expr` is None when the extension is not built, is stale, or
``PGSURGE_PURE`` asks for the pure-Python paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from pgsurge import _native
from pgsurge.script.ast import Call, Const, Expr, Var
from pgsurge.script.functions import ARITY, DEFAULT_SEED, SEEDED_FUNCTIONS

__all__ = ["FASTPARSE_API", "MetaExpr", "MetaHit", "meta_expr"]

#: the interface version of pgsurge._fastparse this code expects
FASTPARSE_API = 1

#: (kind: 0 \\set, 1 \\if, 2 \\elif; the \\set variable or None; the tree;
#: the command's first_line; the index of its backslash; where SQL
#: scanning resumes)
MetaHit: TypeAlias = tuple[int, str | None, Expr, str, int, int]
MetaExpr: TypeAlias = Callable[[str, int], MetaHit | None]


def _load() -> MetaExpr | None:
    module = _native.load("_fastparse", FASTPARSE_API)
    if module is None:
        return None
    # the function table as C reads it: (low, high or None, takes the
    # implicit seed, the name object every Call of it shares)
    table = {
        name: (low, high, name in SEEDED_FUNCTIONS, name)
        for name, (low, high) in ARITY.items()
    }
    try:
        module.configure(Const, Var, Call, table, DEFAULT_SEED)
    except TypeError:
        # the node classes are no longer what the C code fills in (slotted
        # classes with these fields): the Python parser reads every line
        # (test_fastparse fails on it)
        return None
    fn: MetaExpr = module.meta_expr
    return fn


#: ``meta_expr(src, pos)``: the command whose backslash is at ``src[pos]``,
#: or after the blanks, newlines and ``--`` comments there (what the SQL
#: scanner drops between statements), read in C; or None (see the module
#: docstring). None itself when the extension is not built
meta_expr: MetaExpr | None = _load()
