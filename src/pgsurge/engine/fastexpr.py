"""Integer expressions of ``\\set`` and ``\\if`` as the C loop's op codes.

The C loop (``pgsurge._fastloop``) evaluates an expression as a small
stack program over int64 values: :func:`compile_int_expr` turns an
expression tree into a flat tuple of ``(code, argument)`` pairs, or raises
:class:`Unsupported` with the reason. Only what the C evaluator computes
exactly as :mod:`pgsurge.script.values`/``functions`` do is accepted:

* int constants (and foldable sub-expressions), variables (their slots:
  C checks at run time that a variable holds an int, and hands the client
  to Python otherwise);
* ``+ - * / %`` (and ``mod``), ``& | # << >>``, the comparisons
  (booleans), ``and``/``or`` (lazy) and ``not`` on booleans;
* ``abs``, ``least``/``greatest`` of ints, ``random(lo, hi)`` (the
  client's stream), ``hash``/``hash_murmur2``/``hash_fnv1a``, ``permute``.

Every error (an overflow, a division by zero, an empty random range, a
permute size below 1, a variable that is not an int) makes C restore the
client's PRNG state and hand the client to Python at the start of the
command, which evaluates it again and gives pgbench's message. Doubles,
strings, NULL, ``case``, ``is``, the other random functions and
``debug()`` stay with Python.
"""

from __future__ import annotations

from collections.abc import Callable

from pgsurge.cnum import INT64_MAX, INT64_MIN
from pgsurge.script.ast import Call, Const, Expr, Var
from pgsurge.script.evaluate import EvalContext, evaluate
from pgsurge.script.functions import FUNCTIONS, FuncKind

__all__ = ["BOOL", "INT", "MAX_STACK", "Unsupported", "compile_int_expr"]

# the evaluator's op codes (_fastloop_logic.c)
X_CONST = 0
X_VAR = 1
X_ADD = 2
X_SUB = 3
X_MUL = 4
X_DIV = 5
X_MOD = 6
X_EQ = 7
X_NE = 8
X_LT = 9
X_LE = 10
X_BAND = 11
X_BOR = 12
X_BXOR = 13
X_SHL = 14
X_SHR = 15
X_NOT = 16
#: and: if the top is false, jump to the argument keeping it; else pop it
X_JFALSE = 17
#: or: if the top is true, jump keeping it; else pop it
X_JTRUE = 18
X_ABS = 19
X_LEAST = 20
X_GREATEST = 21
X_RANDOM = 22
X_MURMUR2 = 23
X_FNV1A = 24
X_PERMUTE = 25

#: the static types of values
INT = 0
BOOL = 1

#: the C evaluator's stack depth
MAX_STACK = 32
#: nesting deeper than this is left to Python (and its recursion limit)
_MAX_DEPTH = 200

_INT_BINARY = {
    "+": X_ADD,
    "-": X_SUB,
    "*": X_MUL,
    "/": X_DIV,
    "mod": X_MOD,
    "&": X_BAND,
    "|": X_BOR,
    "#": X_BXOR,
    "<<": X_SHL,
    ">>": X_SHR,
}
_COMPARE = {"=": X_EQ, "<>": X_NE, "<": X_LT, "<=": X_LE}
#: functions of ints only: (code, argument count)
_INT_FUNCS = {
    "abs": (X_ABS, 1),
    "random": (X_RANDOM, 2),
    "hash": (X_MURMUR2, 2),
    "hash_murmur2": (X_MURMUR2, 2),
    "hash_fnv1a": (X_FNV1A, 2),
    "permute": (X_PERMUTE, 3),
}


class Unsupported(Exception):
    """The expression is not for the C evaluator; ``args[0]`` says why."""


def _static_nodes(expr: Expr) -> set[int]:
    """The ids of the sub-expressions that fold (no variable, no random
    function, no debug()), in one pass (a chain of 20000 terms is fine)."""
    static: set[int] = set()
    todo: list[tuple[Expr, bool]] = [(expr, False)]
    while todo:
        node, done = todo.pop()
        if isinstance(node, Const):
            static.add(id(node))
        elif isinstance(node, Call):
            if not done:
                todo.append((node, True))
                todo.extend((a, False) for a in node.args)
                continue
            spec = FUNCTIONS.get(node.name)
            if (
                spec is not None
                and spec.kind in (FuncKind.PURE, FuncKind.LAZY)
                and all(id(a) in static for a in node.args)
            ):
                static.add(id(node))
    return static


class _Emitter:
    def __init__(self, slot_of: Callable[[str], int | None], expr: Expr) -> None:
        self.static = _static_nodes(expr)
        self.slot_of = slot_of
        self.code: list[int] = []
        self.depth = 0
        self.max_depth = 0

    def op(self, code: int, arg: int = 0, pushes: int = 0) -> int:
        self.code += (code, arg)
        self.depth += pushes
        self.max_depth = max(self.max_depth, self.depth)
        return len(self.code) // 2 - 1

    def emit(self, node: Expr, level: int = 0) -> int:
        if level > _MAX_DEPTH:
            raise Unsupported("an expression nested too deeply")
        if id(node) in self.static:
            try:
                value = evaluate(node, EvalContext())
            except Exception:
                raise Unsupported("an expression that fails") from None
            if type(value) is bool:
                self.op(X_CONST, int(value), 1)
                return BOOL
            if type(value) is int and INT64_MIN <= value <= INT64_MAX:
                self.op(X_CONST, value, 1)
                return INT
            raise Unsupported("a value that is not an int")
        if isinstance(node, Var):
            slot = self.slot_of(node.name)
            if slot is None:
                raise Unsupported(f"variable {node.name} is not an int C holds")
            self.op(X_VAR, slot, 1)
            return INT
        if not isinstance(node, Call):  # a non-int constant
            raise Unsupported("a value that is not an int")
        name, args = node.name, node.args
        if name in _INT_BINARY or name in _COMPARE:
            self.ints(args, level)
            code = _INT_BINARY[name] if name in _INT_BINARY else _COMPARE[name]
            self.op(code, 0, -1)
            return INT if name in _INT_BINARY else BOOL
        if name == "not":
            self.bools(args, level)
            self.op(X_NOT)
            return BOOL
        if name in ("and", "or"):
            self.bools(args[:1], level)
            jump = self.op(X_JFALSE if name == "and" else X_JTRUE, 0, -1)
            self.bools(args[1:], level)
            self.code[2 * jump + 1] = len(self.code) // 2
            return BOOL
        if name in ("least", "greatest"):
            self.ints(args, level)
            code = X_LEAST if name == "least" else X_GREATEST
            self.op(code, len(args), 1 - len(args))
            return INT
        if name in _INT_FUNCS:
            code, nargs = _INT_FUNCS[name]
            if len(args) != nargs:
                raise Unsupported(f"{name}() with {len(args)} arguments")
            self.ints(args, level)
            self.op(code, 0, 1 - nargs)
            return INT
        raise Unsupported(f"{name}()")

    def ints(self, args: tuple[Expr, ...], level: int) -> None:
        for a in args:
            if self.emit(a, level + 1) != INT:
                raise Unsupported("a boolean where an int is expected")

    def bools(self, args: tuple[Expr, ...], level: int) -> None:
        for a in args:
            if self.emit(a, level + 1) != BOOL:
                raise Unsupported("an int where a boolean is expected")


def compile_int_expr(
    expr: Expr, slot_of: Callable[[str], int | None]
) -> tuple[tuple[int, ...], int]:
    """The C evaluator's program of ``expr`` and its static type (INT or
    BOOL); ``slot_of`` gives a variable's slot (None: C cannot read it).
    Raises :class:`Unsupported`."""
    em = _Emitter(slot_of, expr)
    kind = em.emit(expr)
    if em.max_depth > MAX_STACK:
        raise Unsupported("an expression needing a deep stack")
    return tuple(em.code), kind
