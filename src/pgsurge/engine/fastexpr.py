"""Expressions of ``\\set`` and ``\\if`` as the C loop's op codes.

The C loop (``pgsurge._fastloop``) evaluates an expression as a small
stack program over typed values (NULL, boolean, int64, double), with
pgbench's promotions and errors: :func:`compile_expr` turns an expression
tree into a flat tuple of ``(code, argument)`` pairs, or raises
:class:`Unsupported` with the reason. It accepts the whole language but
``debug()``: constants (foldable sub-expressions folded), variables
(their slots: C checks at run time that it holds the variable's value,
and hands the client to Python otherwise), every operator, ``and``/``or``
(lazy), ``case`` (lazy, as jumps), ``is``, and every function, the random
ones (``random``, ``random_exponential``, ``random_gaussian``,
``random_zipfian``) drawing from the client's stream as
:mod:`pgsurge.script.functions` does.

Every error (an overflow, a division by zero, a coercion pgbench refuses,
a bad random range or parameter, a variable C does not hold: a string or
an undefined one) makes C restore the client's PRNG state and hand the
client to Python at the start of the command, which evaluates it again
and gives pgbench's message.

The op codes and the pops of each (:data:`POPS`) are mirrored by
``_fastloop_logic.c``; :mod:`pgsurge.engine.abi` compares them with the
module's when it is loaded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from pgsurge.cnum import INT64_MAX, INT64_MIN
from pgsurge.script.ast import Call, Const, Expr, Var
from pgsurge.script.functions import FUNCTIONS, FuncKind

__all__ = ["CODES", "MAX_STACK", "POPS", "Unsupported", "compile_expr"]

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
#: and: if the top is false or NULL, jump to the argument keeping it;
#: if it is true, pop it; else an error
X_JFALSE = 17
#: or: if the top is true or NULL, jump keeping it; if false, pop it
X_JTRUE = 18
X_ABS = 19
X_LEAST = 20
X_GREATEST = 21
X_RANDOM = 22
X_MURMUR2 = 23
X_FNV1A = 24
X_PERMUTE = 25
X_NULL = 26
#: a boolean constant (the argument: 0 or 1)
X_BOOL = 27
#: a double constant (the argument: its IEEE bits as an int64)
X_DOUBLE = 28
X_INT = 29
X_TODOUBLE = 30
X_SQRT = 31
X_LN = 32
X_EXP = 33
X_POW = 34
X_IS = 35
#: the right operand of and/or: a boolean or NULL stays, else an error
X_CHKBOOL = 36
#: jump to the argument
X_JUMP = 37
#: case: pop a condition, jump to the argument unless it is true
#: (valueTruth)
X_JNOTTRUE = 38
X_REXP = 39
X_RGAUSS = 40
X_RZIPF = 41
#: always an error (an expression that fails at compile time, too many
#: function arguments): Python evaluates it and reports
X_FAIL = 42

#: every op code by name (exported by the C module and compared at load)
CODES: dict[str, int] = {
    name: value for name, value in globals().items() if name.startswith("X_")
}

#: what each code pops, by code (-1: its argument says; the jumps that
#: keep the value they test pop it on the other path)
POPS: tuple[int, ...] = (
    0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, -1, -1, 2, 2, 2, 3,
    0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 1, 0, 1, 3, 3, 3, 0,
)  # fmt: skip

#: the C evaluator's stack depth
MAX_STACK = 32
#: nesting deeper than this is left to Python (and its recursion limit)
_MAX_DEPTH = 200
#: pgbench evaluates at most 16 arguments of a function
_MAX_FARGS = 16

_BINARY = {
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
    "=": X_EQ,
    "<>": X_NE,
    "<": X_LT,
    "<=": X_LE,
    "is": X_IS,
}
#: functions: (code, argument count)
_FUNCS = {
    "not": (X_NOT, 1),
    "abs": (X_ABS, 1),
    "int": (X_INT, 1),
    "double": (X_TODOUBLE, 1),
    "sqrt": (X_SQRT, 1),
    "ln": (X_LN, 1),
    "exp": (X_EXP, 1),
    "pow": (X_POW, 2),
    "power": (X_POW, 2),
    "random": (X_RANDOM, 2),
    "random_exponential": (X_REXP, 3),
    "random_gaussian": (X_RGAUSS, 3),
    "random_zipfian": (X_RZIPF, 3),
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


def _double_bits(d: float) -> int:
    """A double's IEEE bits as an int64 (C reads them back with memcpy)."""
    return int(struct.unpack("<q", struct.pack("<d", d))[0])


class _Emitter:
    def __init__(self, slot_of: Callable[[str], int | None], expr: Expr) -> None:
        self.static = _static_nodes(expr)
        self.slot_of = slot_of
        self.code: list[int] = []
        self.depth = 0
        self.max_depth = 0

    def here(self) -> int:
        return len(self.code) // 2

    def op(self, code: int, arg: int = 0, pushes: int = 0) -> int:
        self.code += (code, arg)
        self.depth += pushes
        self.max_depth = max(self.max_depth, self.depth)
        return len(self.code) // 2 - 1

    def patch(self, at: int) -> None:
        """Point the jump at ``at`` to the next instruction."""
        self.code[2 * at + 1] = self.here()

    def const(self, value: object) -> None:
        if value is None:
            self.op(X_NULL, 0, 1)
        elif type(value) is bool:
            self.op(X_BOOL, int(value), 1)
        elif type(value) is int and INT64_MIN <= value <= INT64_MAX:
            self.op(X_CONST, value, 1)
        elif type(value) is float:
            self.op(X_DOUBLE, _double_bits(value), 1)
        else:
            raise Unsupported("a value that is not a number, a boolean or NULL")

    def emit(self, node: Expr, level: int = 0) -> None:
        if level > _MAX_DEPTH:
            raise Unsupported("an expression nested too deeply")
        if id(node) in self.static:
            # imported here: a plain run of SQL folds no expression (and
            # so does without the Python evaluator)
            from pgsurge.script.evaluate import EvalContext, evaluate

            try:
                value = evaluate(node, EvalContext())
            except Exception:
                # pgbench fails when it runs it: so does C (Python reports)
                self.op(X_FAIL, 0, 1)
                return
            self.const(value)
            return
        if isinstance(node, Var):
            slot = self.slot_of(node.name)
            if slot is None:
                raise Unsupported(f"variable {node.name} is not one C holds")
            self.op(X_VAR, slot, 1)
            return
        if not isinstance(node, Call):  # pragma: no cover - a folded Const
            raise Unsupported("an unknown node")
        name, args = node.name, node.args
        if name in _BINARY:
            self.args(args, level)
            self.op(_BINARY[name], 0, -1)
        elif name in ("and", "or"):
            self.emit(args[0], level + 1)
            jump = self.op(X_JFALSE if name == "and" else X_JTRUE, 0, -1)
            self.emit(args[1], level + 1)
            self.op(X_CHKBOOL)
            self.patch(jump)
        elif name == "case":
            self.case(args, level)
        elif name in ("least", "greatest"):
            if len(args) > _MAX_FARGS:
                self.op(X_FAIL, 0, 1)
                return
            self.args(args, level)
            code = X_LEAST if name == "least" else X_GREATEST
            self.op(code, len(args), 1 - len(args))
        elif name in _FUNCS:
            code, nargs = _FUNCS[name]
            if len(args) != nargs:
                raise Unsupported(f"{name}() with {len(args)} arguments")
            self.args(args, level)
            self.op(code, 0, 1 - nargs)
        else:
            raise Unsupported(f"{name}()")

    def args(self, args: tuple[Expr, ...], level: int) -> None:
        for a in args:
            self.emit(a, level + 1)

    def case(self, args: tuple[Expr, ...], level: int) -> None:
        """``case``: each condition, a jump past its result when it is not
        true, the result and a jump to the end; then the ELSE (or NULL)."""
        ends: list[int] = []
        base = self.depth
        for i in range(0, len(args) - 1, 2):
            self.emit(args[i], level + 1)
            skip = self.op(X_JNOTTRUE, 0, -1)
            self.emit(args[i + 1], level + 1)
            ends.append(self.op(X_JUMP))
            self.depth = base
            self.patch(skip)
        if len(args) % 2:
            self.emit(args[-1], level + 1)
        else:
            self.op(X_NULL, 0, 1)
        for at in ends:
            self.patch(at)


def compile_expr(expr: Expr, slot_of: Callable[[str], int | None]) -> tuple[int, ...]:
    """The C evaluator's program of ``expr``; ``slot_of`` gives a
    variable's slot (None: C cannot read it). Raises :class:`Unsupported`."""
    em = _Emitter(slot_of, expr)
    em.emit(expr)
    if em.max_depth > MAX_STACK:
        raise Unsupported("an expression needing a deep stack")
    return tuple(em.code)
