"""Compile expression trees into closures, once, and run them per command.

:func:`compile_expr` turns an :data:`~pgsurge.script.ast.Expr` into a
``Callable[[EvalContext], Value]``: each node becomes one closure, built
for its shape (constant operands are captured as values, not called), so
running a ``\\set`` walks no tree and looks nothing up by name. Subtrees
whose operands are all constants are evaluated at compile time, except
those that draw random numbers, print (``debug``) or would fail (the error
must happen when pgbench would raise it: at run time).

Semantics are pgbench's ``evaluateExpr``: every argument of a function is
evaluated, left to right, before NULL propagation and type checks;
``and``/``or``/``case`` are lazy. Errors are
:class:`~pgsurge.errors.EvalError` with pgbench's message; the engine
prints it and aborts the client.

This module does no I/O: ``debug()`` hands its line to the context's
``debug`` sink.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from pgsurge.cnum import INT64_MAX, INT64_MIN
from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng
from pgsurge.script import values as V
from pgsurge.script.ast import Call, Const, Expr, Value, Var
from pgsurge.script.functions import FUNCTIONS, FuncKind

__all__ = ["CompiledExpr", "EvalContext", "compile_expr", "evaluate"]


def _no_debug(line: str) -> None:
    pass


class EvalContext:
    """What an expression sees while it runs: one per client.

    ``variables`` is the client's variable dict (name → value, strings
    typed lazily); ``rng`` the client's ``random*()`` state; ``debug`` is
    called with each complete ``debug()`` line (newline included);
    ``script``/``command`` are the script index and the 0-based command
    index that ``debug()`` reports (as ``command + 1``), kept current by the
    engine.
    """

    __slots__ = ("command", "debug", "rng", "script", "variables")

    def __init__(
        self,
        variables: dict[str, Value] | None = None,
        rng: PgPrng | None = None,
        debug: Callable[[str], None] = _no_debug,
        script: int = 0,
        command: int = 0,
    ) -> None:
        self.variables: dict[str, Value] = {} if variables is None else variables
        self.rng: PgPrng = PgPrng(0) if rng is None else rng
        self.debug: Callable[[str], None] = debug
        self.script = script
        self.command = command


CompiledExpr = Callable[[EvalContext], Value]

_parse_lazy = V.parse_lazy
_truth = V.truth
_coerce_to_bool = V.coerce_to_bool
_INT64_MIN = INT64_MIN
_INT64_MAX = INT64_MAX
_MISSING: Any = object()


class _Node:
    """A compiled subtree: a constant, a variable read, or a closure.

    Parents specialize on the kind: a constant operand is captured as a
    value and a variable operand is read inline, so the common shapes
    (``100000 * :scale``, ``random(1, …)``) cost one closure call.
    """

    __slots__ = ("_fn", "const", "name", "scaled", "value")

    def __init__(
        self,
        *,
        const: bool = False,
        value: Value = None,
        name: str | None = None,
        fn: CompiledExpr | None = None,
        scaled: tuple[int, str] | None = None,
    ) -> None:
        self.const = const
        self.value = value
        self.name = name
        self._fn = fn
        #: (k, name) when the node is ``k * :name`` or ``:name * k`` with an
        #: int constant k: a parent may compute it inline (``fn`` still works)
        self.scaled = scaled

    @property
    def fn(self) -> CompiledExpr:
        """The node's closure; a constant's is made when a parent asks
        (most capture the value instead)."""
        fn = self._fn
        if fn is None:
            fn = self._fn = _constant(self.value)
        return fn


def _constant(value: Value) -> CompiledExpr:
    def constant(ctx: EvalContext) -> Value:
        return value

    return constant


def compile_expr(expr: Expr) -> CompiledExpr:
    """Build the closure that evaluates ``expr`` in a context."""
    return _compile(expr).fn


def evaluate(expr: Expr, ctx: EvalContext) -> Value:
    """Evaluate once (tests, one-offs); hot paths keep the compiled form."""
    return compile_expr(expr)(ctx)


# --------------------------------------------------------------------------
# Nodes


def _compile(expr: Expr) -> _Node:
    if isinstance(expr, Const):
        return _Node(const=True, value=expr.value)
    if isinstance(expr, Var):
        return _Node(name=expr.name, fn=_var(expr.name))
    if isinstance(expr, Call):
        return _call(expr)
    raise TypeError(f"not an expression node: {expr!r}")


def _read_slow(name: str, v: Value) -> Value:
    """A variable's value when it is missing or still a string."""
    if v is _MISSING:
        raise EvalError(f'undefined variable "{name}"')
    if type(v) is str:
        return _parse_lazy(name, v)
    return v


def _var(name: str) -> CompiledExpr:
    def var(ctx: EvalContext) -> Value:
        v: Value = ctx.variables.get(name, _MISSING)
        if v is _MISSING or type(v) is str:
            return _read_slow(name, v)
        return v

    return var


def _call(call: Call) -> _Node:
    spec = FUNCTIONS.get(call.name)
    if spec is None:
        raise ValueError(f"unknown function in expression tree: {call.name!r}")
    nargs = len(call.args)
    if spec.nargs >= 0 and nargs != spec.nargs:
        raise ValueError(f"{call.name}: expected {spec.nargs} arguments, got {nargs}")
    # a loop, not a comprehension, and calls compiled without going through
    # _compile: one Python frame per level of a deep tree (pgbench accepts
    # operator chains of some 20000 terms; see cli's recursion limit)
    args: list[_Node] = []
    for a in call.args:
        args.append(_call(a) if type(a) is Call else _compile(a))  # noqa: PERF401
    kind = spec.kind
    if kind is FuncKind.LAZY:
        fn = _lazy(call.name, args)
    elif kind is FuncKind.DEBUG:
        fn = _debug(args[0])
    elif kind is FuncKind.RANDOM:
        assert spec.impl is not None
        if call.name == "random":
            fn = _random_uniform(spec.impl, args[0], args[1])
        else:
            fn = _random(spec.impl, args)
    else:
        impl = spec.impl
        assert impl is not None
        if not spec.null_in:
            impl = _null_strict(impl)
        if nargs == 2:
            fn = _apply2(impl, args[0], args[1], _INT_FAST.get(call.name))
        else:
            fn = _apply(impl, args)
    if kind in _FOLDABLE and all(a.const for a in args):
        # constant folding: evaluate now, unless it fails (then the error
        # must surface at run time, when pgbench raises it)
        try:
            return _Node(const=True, value=fn(_FOLD_CTX))
        except EvalError:
            pass
    return _Node(fn=fn, scaled=_scaled_var(call.name, args))


def _scaled_var(name: str, args: list[_Node]) -> tuple[int, str] | None:
    """(k, var) for ``k * :var`` and ``:var * k`` with an int constant k."""
    if name != "*":
        return None
    a, b = args
    if a.const and type(a.value) is int and b.name is not None:
        return a.value, b.name
    if b.const and type(b.value) is int and a.name is not None:
        return b.value, a.name
    return None


_FOLD_CTX = EvalContext()
_FOLDABLE = (FuncKind.PURE, FuncKind.LAZY)
# int64 operations done inline (C-level) when both operands are ints; the
# operator function from values.py still handles everything else
_INT_FAST: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}


def _null_strict(impl: Callable[..., Value]) -> Callable[..., Value]:
    """Wrap a function that must not see NULL: any NULL argument → NULL."""

    def strict(*vals: Value) -> Value:
        if None in vals:
            return None
        return impl(*vals)

    return strict


def _apply(impl: Callable[..., Value], args: list[_Node]) -> CompiledExpr:
    """A closure calling ``impl`` on the evaluated arguments (not 2)."""
    if not args:
        return lambda ctx: impl()
    if len(args) == 1:
        a = args[0]
        if a.const:
            v0 = a.value
            return lambda ctx: impl(v0)
        f0 = a.fn
        return lambda ctx: impl(f0(ctx))
    fns = tuple(a.fn for a in args)
    if len(fns) > _MAX_FARGS:
        return _too_many(fns[:_MAX_FARGS])
    return lambda ctx: impl(*[f(ctx) for f in fns])


# pgbench evaluates at most 16 arguments (MAX_FARGS), then fails at run time
_MAX_FARGS = 16


def _too_many(first: tuple[CompiledExpr, ...]) -> CompiledExpr:
    message = f"too many function arguments, maximum is {_MAX_FARGS}"

    def too_many(ctx: EvalContext) -> Value:
        for f in first:  # evaluated first, for their errors and debug()
            f(ctx)
        raise EvalError(message)

    return too_many


def _apply2(
    impl: Callable[[Value, Value], Value],
    a: _Node,
    b: _Node,
    fast: Callable[[int, int], int] | None,
) -> CompiledExpr:
    """A two-operand closure, specialized for a constant operand, an
    inline variable read and, with ``fast``, an inline int64 result."""
    lo, hi = _INT64_MIN, _INT64_MAX
    if a.const and b.name is not None:
        x, name = a.value, b.name
        if fast is not None and type(x) is int:
            op, xi = fast, x

            def const_var_fast(ctx: EvalContext) -> Value:
                y = ctx.variables.get(name, _MISSING)
                if type(y) is int:
                    r = op(xi, y)
                    if lo <= r <= hi:
                        return r
                    return impl(xi, y)  # raises pgbench's overflow error
                return impl(xi, _read_slow(name, y))

            return const_var_fast

        def const_var(ctx: EvalContext) -> Value:
            y = ctx.variables.get(name, _MISSING)
            if y is _MISSING or type(y) is str:
                y = _read_slow(name, y)
            return impl(x, y)

        return const_var
    if b.const and a.name is not None:
        y, name = b.value, a.name
        if fast is not None and type(y) is int:
            op, yi = fast, y

            def var_const_fast(ctx: EvalContext) -> Value:
                x = ctx.variables.get(name, _MISSING)
                if type(x) is int:
                    r = op(x, yi)
                    if lo <= r <= hi:
                        return r
                    return impl(x, yi)
                return impl(_read_slow(name, x), yi)

            return var_const_fast

        def var_const(ctx: EvalContext) -> Value:
            x = ctx.variables.get(name, _MISSING)
            if x is _MISSING or type(x) is str:
                x = _read_slow(name, x)
            return impl(x, y)

        return var_const
    if a.const:
        x, g = a.value, b.fn
        return lambda ctx: impl(x, g(ctx))
    if b.const:
        y, f = b.value, a.fn
        return lambda ctx: impl(f(ctx), y)
    f, g = a.fn, b.fn
    return lambda ctx: impl(f(ctx), g(ctx))


def _random_uniform(impl: Callable[..., Value], a: _Node, b: _Node) -> CompiledExpr:
    """``random(lo, hi)``: straight to the state when the bounds are valid
    ints; otherwise ``impl`` coerces, checks and reports."""
    top = _INT64_MAX
    if a.const and b.const:
        x, y = a.value, b.value
        if type(x) is int and type(y) is int and x <= y and y - x < top:
            return lambda ctx: ctx.rng.int64_range(x, y)
        return lambda ctx: impl(ctx.rng, x, y)
    if a.const and type(a.value) is int:
        x0: int = a.value
        g = b.fn

        def const_lo(ctx: EvalContext) -> Value:
            y = g(ctx)
            if type(y) is int and x0 <= y and y - x0 < top:
                return ctx.rng.int64_range(x0, y)
            return impl(ctx.rng, x0, y)

        if b.scaled is None:
            return const_lo
        # random(1, 100000 * :scale), pgbench's builtins: the product inline.
        # Anything unusual (a string or missing variable, an overflow, a bad
        # range) goes through const_lo, which re-reads the variable (no side
        # effect) and raises or coerces exactly as without this shortcut.
        k, name = b.scaled

        def const_lo_scaled(ctx: EvalContext) -> Value:
            y = ctx.variables.get(name, _MISSING)
            if type(y) is int:
                hi = k * y
                if x0 <= hi <= top and hi - x0 < top:
                    return ctx.rng.int64_range(x0, hi)
            return const_lo(ctx)

        return const_lo_scaled
    f, g = a.fn, b.fn

    def general(ctx: EvalContext) -> Value:
        return impl(ctx.rng, f(ctx), g(ctx))

    return general


def _random(impl: Callable[..., Value], args: list[_Node]) -> CompiledExpr:
    """A random function: the client's state, then the evaluated arguments."""
    fns = tuple(a.fn for a in args)
    if len(fns) == 3:
        f, g, h = fns
        return lambda ctx: impl(ctx.rng, f(ctx), g(ctx), h(ctx))
    return lambda ctx: impl(ctx.rng, *[f(ctx) for f in fns])


def _debug(arg: _Node) -> CompiledExpr:
    f = arg.fn
    debug_text = V.debug_text

    def debug(ctx: EvalContext) -> Value:
        v = f(ctx)
        ctx.debug(
            f"debug(script={ctx.script},command={ctx.command + 1}): {debug_text(v)}\n"
        )
        return v

    return debug


# --------------------------------------------------------------------------
# Lazy operators (evalLazyFunc)


def _lazy(name: str, args: list[_Node]) -> CompiledExpr:
    if name == "case":
        return _case(args)
    left, right = args[0].fn, args[1].fn
    if name == "and":

        def and_(ctx: EvalContext) -> Value:
            a = left(ctx)
            if a is None:
                return None
            if not _coerce_to_bool(a):
                return False
            b = right(ctx)
            if b is None:
                return None
            return _coerce_to_bool(b)

        return and_

    def or_(ctx: EvalContext) -> Value:
        a = left(ctx)
        if a is None:
            return None
        if _coerce_to_bool(a):
            return True
        b = right(ctx)
        if b is None:
            return None
        return _coerce_to_bool(b)

    return or_


def _case(args: list[_Node]) -> CompiledExpr:
    """``case``(c1, r1, ..., cN, rN, else): the first true condition wins.

    Conditions use ``valueTruth`` (non-zero numbers are true, NULL false);
    an even argument count is read as a missing ELSE (NULL).
    """
    fns = [a.fn for a in args]
    if len(fns) % 2 == 0:
        fns.append(lambda ctx: None)
    pairs = tuple((fns[i], fns[i + 1]) for i in range(0, len(fns) - 1, 2))
    otherwise = fns[-1]

    def case(ctx: EvalContext) -> Value:
        for cond, result in pairs:
            if _truth(cond(ctx)):
                return result(ctx)
        return otherwise(ctx)

    return case
