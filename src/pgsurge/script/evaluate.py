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

from collections.abc import Callable

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

# A compiled node: a constant value, or a closure to call.
_Node = tuple[bool, Value, CompiledExpr | None]

_parse_lazy = V.parse_lazy
_truth = V.truth
_coerce_to_bool = V.coerce_to_bool


def compile_expr(expr: Expr) -> CompiledExpr:
    """Build the closure that evaluates ``expr`` in a context."""
    is_const, value, fn = _compile(expr)
    if is_const:
        const = value

        def constant(ctx: EvalContext) -> Value:
            return const

        return constant
    assert fn is not None
    return fn


def evaluate(expr: Expr, ctx: EvalContext) -> Value:
    """Evaluate once (tests, one-offs); hot paths keep the compiled form."""
    return compile_expr(expr)(ctx)


# --------------------------------------------------------------------------
# Nodes


def _compile(expr: Expr) -> _Node:
    if isinstance(expr, Const):
        return (True, expr.value, None)
    if isinstance(expr, Var):
        return (False, None, _var(expr.name))
    if isinstance(expr, Call):
        return _call(expr)
    raise TypeError(f"not an expression node: {expr!r}")


def _var(name: str) -> CompiledExpr:
    undefined = f'undefined variable "{name}"'

    def var(ctx: EvalContext) -> Value:
        try:
            v = ctx.variables[name]
        except KeyError:
            raise EvalError(undefined) from None
        if type(v) is str:
            return _parse_lazy(name, v)
        return v

    return var


def _as_fn(node: _Node) -> CompiledExpr:
    is_const, value, fn = node
    if not is_const:
        assert fn is not None
        return fn

    def constant(ctx: EvalContext) -> Value:
        return value

    return constant


def _call(call: Call) -> _Node:
    spec = FUNCTIONS.get(call.name)
    if spec is None:
        raise ValueError(f"unknown function in expression tree: {call.name!r}")
    nargs = len(call.args)
    if spec.nargs >= 0 and nargs != spec.nargs:
        raise ValueError(f"{call.name}: expected {spec.nargs} arguments, got {nargs}")
    args = [_compile(a) for a in call.args]
    kind = spec.kind
    if kind is FuncKind.LAZY:
        fn = _lazy(call.name, args)
    elif kind is FuncKind.DEBUG:
        fn = _debug(args[0])
    elif kind is FuncKind.RANDOM:
        fn = _random(spec.impl, args)  # type: ignore[arg-type]
    else:
        impl = spec.impl
        assert impl is not None
        if not spec.null_in:
            impl = _null_strict(impl)
        fn = _apply(impl, args)
    if kind in _FOLDABLE and all(a[0] for a in args):
        # constant folding: evaluate now, unless it fails (then the error
        # must surface at run time, when pgbench raises it)
        try:
            return (True, fn(_FOLD_CTX), None)
        except EvalError:
            pass
    return (False, None, fn)


_FOLD_CTX = EvalContext()
_FOLDABLE = (FuncKind.PURE, FuncKind.LAZY)


def _null_strict(impl: Callable[..., Value]) -> Callable[..., Value]:
    """Wrap a function that must not see NULL: any NULL argument → NULL."""

    def strict(*vals: Value) -> Value:
        if None in vals:
            return None
        return impl(*vals)

    return strict


def _apply(impl: Callable[..., Value], args: list[_Node]) -> CompiledExpr:
    """A closure calling ``impl`` on the evaluated arguments."""
    n = len(args)
    if n == 0:
        return lambda ctx: impl()
    if n == 1:
        c0, v0, f0 = args[0]
        if c0:
            return lambda ctx: impl(v0)
        assert f0 is not None
        g0 = f0
        return lambda ctx: impl(g0(ctx))
    if n == 2:
        (c0, v0, f0), (c1, v1, f1) = args
        if c0 and not c1:
            assert f1 is not None
            h1 = f1
            return lambda ctx: impl(v0, h1(ctx))
        if c1 and not c0:
            assert f0 is not None
            h0 = f0
            return lambda ctx: impl(h0(ctx), v1)
        a0, a1 = _as_fn(args[0]), _as_fn(args[1])
        return lambda ctx: impl(a0(ctx), a1(ctx))
    fns = tuple(_as_fn(a) for a in args)
    return lambda ctx: impl(*[f(ctx) for f in fns])


def _random(impl: Callable[..., Value], args: list[_Node]) -> CompiledExpr:
    """Like :func:`_apply`, with the client's state as first argument."""
    if len(args) == 2:
        (c0, v0, _), (c1, v1, f1) = args
        if c0 and c1:
            return lambda ctx: impl(ctx.rng, v0, v1)
        if c0:
            assert f1 is not None
            h1 = f1
            return lambda ctx: impl(ctx.rng, v0, h1(ctx))
        a0, a1 = _as_fn(args[0]), _as_fn(args[1])
        return lambda ctx: impl(ctx.rng, a0(ctx), a1(ctx))
    fns = tuple(_as_fn(a) for a in args)
    return lambda ctx: impl(ctx.rng, *[f(ctx) for f in fns])


def _debug(arg: _Node) -> CompiledExpr:
    f = _as_fn(arg)
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
    left, right = _as_fn(args[0]), _as_fn(args[1])
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
    fns = [_as_fn(a) for a in args]
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
