"""The C loop's expressions (engine/fastexpr.py, _fastloop_logic.c) against
the reference evaluator (script/evaluate.py), no server.

Random expression trees over a few int variables: whatever C computes must
be what Python computes (the value, and the PRNG state after random()), and
whatever Python refuses with an error C must give up on (it then hands the
client to Python, which prints the error).
"""

from __future__ import annotations

import random

import pytest

from pgsurge.engine import fastloop
from pgsurge.engine.fastexpr import BOOL, INT, Unsupported, compile_int_expr
from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng
from pgsurge.script.ast import Call, Const, Expr, Var
from pgsurge.script.evaluate import EvalContext, evaluate

pytestmark = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)

NAMES = ("a", "b", "c", "big", "neg", "unset")
_INT_OPS = ("+", "-", "*", "/", "mod", "&", "|", "#", "<<", ">>")
_CMP = ("=", "<>", "<", "<=")
_CONSTS = (0, 1, -1, 2, 3, 7, 63, 64, 1000, -5, 2**62, -(2**63), 2**63 - 1)


def _int_expr(rng: random.Random, depth: int) -> Expr:
    if depth <= 0 or rng.random() < 0.25:
        if rng.random() < 0.5:
            return Var(rng.choice(NAMES))
        return Const(rng.choice(_CONSTS))
    pick = rng.random()
    if pick < 0.5:
        op = rng.choice(_INT_OPS)
        return Call(op, (_int_expr(rng, depth - 1), _int_expr(rng, depth - 1)))
    if pick < 0.6:
        return Call("abs", (_int_expr(rng, depth - 1),))
    if pick < 0.7:
        n = rng.randint(1, 4)
        name = rng.choice(("least", "greatest"))
        return Call(name, tuple(_int_expr(rng, depth - 1) for _ in range(n)))
    if pick < 0.8:
        return Call("random", (_int_expr(rng, depth - 1), _int_expr(rng, depth - 1)))
    if pick < 0.9:
        name = rng.choice(("hash", "hash_murmur2", "hash_fnv1a"))
        return Call(name, (_int_expr(rng, depth - 1), _int_expr(rng, depth - 1)))
    size = _int_expr(rng, depth - 1)
    return Call("permute", (_int_expr(rng, depth - 1), size, Var("c")))


def _bool_expr(rng: random.Random, depth: int) -> Expr:
    pick = rng.random()
    if depth <= 0 or pick < 0.5:
        op = rng.choice(_CMP)
        return Call(op, (_int_expr(rng, depth - 1), _int_expr(rng, depth - 1)))
    if pick < 0.65:
        return Call("not", (_bool_expr(rng, depth - 1),))
    name = rng.choice(("and", "or"))
    return Call(name, (_bool_expr(rng, depth - 1), _bool_expr(rng, depth - 1)))


def _check(expr: Expr, values: dict[str, int], seed: int) -> str:
    slots = {name: i for i, name in enumerate(NAMES)}
    try:
        code, kind = compile_int_expr(expr, slots.get)
    except Unsupported:
        return "unsupported"
    held = tuple(values.get(name) for name in NAMES)
    rng = PgPrng(seed)
    s0, s1 = rng.getstate()
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    bailed, value, c0, c1 = _fastloop._eval(code, held, s0, s1)
    ctx = EvalContext(dict(values), rng)
    try:
        expected = evaluate(expr, ctx)
    except EvalError:
        assert bailed, (expr, value)
        return "error"
    if bailed:
        # C gives up only on what Python cannot do as an int: here, a
        # variable it does not hold
        assert "unset" in repr(expr), expr
        return "bailed"
    if kind == BOOL:
        assert type(expected) is bool and value == int(expected), (expr, value)
    else:
        assert kind == INT and type(expected) is int and value == expected, expr
    assert (c0, c1) == rng.getstate(), expr
    return "same"


@pytest.mark.parametrize("seed", range(8))
def test_random_expressions_as_python(seed: int) -> None:
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    for i in range(400):
        values = {"a": rng.randint(-50, 50), "b": rng.randint(1, 1000), "c": 17}
        values |= {"big": 2**62 + rng.randint(0, 9), "neg": -rng.randint(1, 9)}
        expr = _bool_expr(rng, 3) if i % 3 == 0 else _int_expr(rng, 4)
        got = _check(expr, values, seed * 1000 + i)
        outcomes[got] = outcomes.get(got, 0) + 1
    # both paths are exercised
    assert outcomes.get("same", 0) > 100 and outcomes.get("error", 0) > 5, outcomes


@pytest.mark.parametrize(
    "text",
    [
        # (0 - big - big) / -1: INT64_MIN / -1
        Call(
            "/",
            (Call("-", (Call("-", (Const(0), Var("big"))), Var("big"))), Const(-1)),
        ),
        (Call("mod", (Var("a"), Const(0)))),
        Call(
            "-", (Const(0), Call("-", (Call("-", (Const(0), Var("big"))), Var("big"))))
        ),
        (Call("random", (Const(5), Const(1)))),
        (Call("random", (Const(-(2**63)), Const(2**63 - 1)))),
        (Call("permute", (Var("a"), Const(0), Var("c")))),
        (Call("*", (Var("big"), Const(4)))),
    ],
)
def test_errors_are_left_to_python(text: Expr) -> None:
    assert _check(text, {"a": 3, "b": 4, "c": 17, "big": 2**62, "neg": -1}, 1) == (
        "error"
    )
