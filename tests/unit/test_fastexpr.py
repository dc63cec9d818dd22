"""The C loop's expressions (engine/fastexpr.py, _fastloop_logic.c) against
the reference evaluator (script/evaluate.py), no server.

Expression trees over the whole grammar (hypothesis, and a seeded random
walk for volume), over variables of every type C holds (NULL, booleans,
int64 edges, doubles with NaN, the infinities, -0.0, halves that round to
even) and some it does not (a string, an undefined name): whatever C
computes must be what Python computes (the value, its type, its SQL text
and the PRNG state after the random functions), and whatever Python
refuses with an error C must give up on (it then hands the client to
Python, which prints the error).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsurge.engine import abi, fastexpr, fastloop
from pgsurge.engine.fastexpr import Unsupported, compile_expr
from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng
from pgsurge.script.ast import Call, Const, Expr, Value, Var
from pgsurge.script.evaluate import EvalContext, evaluate
from pgsurge.script.parser import parse_expr
from pgsurge.script.values import to_text

pytestmark = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
#: the variables: name -> value (a str is not held by C; "unset" is missing)
VALUES: dict[str, Value] = {
    "a": 3,
    "b": -7,
    "c": 17,
    "big": 2**62 + 5,
    "max": I64_MAX,
    "min": I64_MIN,
    "d": 2.5,
    "h": -0.5,
    "z": -0.0,
    "nan": math.nan,
    "inf": math.inf,
    "ninf": -math.inf,
    "huge": 1e300,
    "tiny": 5e-324,
    "t": True,
    "f": False,
    "n": None,
    # text (-D, \\gset): typed when read
    "s": "12",
    "s_dbl": "2.5",
    "s_neg": "-0.0",
    "s_exp": "1e5",
    "s_hex": "0x1p3",
    "s_inf": "-inf",
    "s_big": "1e400",
    "s_bad": "abc",
    "s_sp": " 7",
    "s_true": "true",
    "s_lead": "007",
    "s_sub": "1e-320",
    "s_empty": "",
}
NAMES = (*VALUES, "unset")
#: what C may give up on although Python computes it: text whose typing
#: C leaves to Python (white space, words, int shapes, subnormals)
_NOT_HELD = ("s_sp", "s_true", "s_lead", "s_sub")

_INTS = (0, 1, -1, 2, 3, 7, 63, 64, 1000, -5, 2**31, 2**62, I64_MIN, I64_MAX)
_DOUBLES = (0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 1e-5, 1.07, 2.0, 3.0, 1e15, 1e16,
            9.2233720368547758e18, -9.2233720368547758e18, 1e308, math.nan,
            math.inf, -math.inf, 0.1, 1.001, 1000.0)  # fmt: skip
_BINARY = ("+", "-", "*", "/", "mod", "&", "|", "#", "<<", ">>", "=", "<>", "<", "<=")
_UNARY = ("not", "abs", "int", "double", "sqrt", "ln", "exp")
_TWO = ("pow", "random", "hash", "hash_fnv1a", "hash_murmur2")
_THREE = ("permute", "random_exponential", "random_gaussian", "random_zipfian")

leaves: st.SearchStrategy[Expr] = st.one_of(
    st.sampled_from(NAMES).map(Var),
    st.sampled_from(_INTS).map(Const),
    st.integers(I64_MIN, I64_MAX).map(Const),
    st.sampled_from(_DOUBLES).map(Const),
    st.floats(allow_nan=True, allow_infinity=True).map(Const),
    st.sampled_from((True, False, None)).map(Const),
)


def _calls(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def call(name: str, n: int) -> st.SearchStrategy[Expr]:
        return st.tuples(*([children] * n)).map(lambda args: Call(name, args))

    return st.one_of(
        st.sampled_from(_BINARY).flatmap(lambda name: call(name, 2)),
        st.sampled_from(_UNARY).flatmap(lambda name: call(name, 1)),
        st.sampled_from(_TWO).flatmap(lambda name: call(name, 2)),
        st.sampled_from(_THREE).flatmap(lambda name: call(name, 3)),
        st.sampled_from(("and", "or")).flatmap(lambda name: call(name, 2)),
        st.tuples(children, st.sampled_from((None, True, False))).map(
            lambda t: Call("is", (t[0], Const(t[1])))
        ),
        st.tuples(
            st.sampled_from(("least", "greatest")),
            st.lists(children, min_size=1, max_size=4),
        ).map(lambda t: Call(t[0], tuple(t[1]))),
        st.lists(children, min_size=2, max_size=7).map(
            lambda a: Call("case", tuple(a))
        ),
    )


expressions = st.recursive(leaves, _calls, max_leaves=12)


def _same(x: Value, y: Value) -> bool:
    if type(x) is not type(y):
        return False
    if type(x) is float:
        assert type(y) is float
        return (x != x and y != y) or (
            x == y and math.copysign(1, x) == math.copysign(1, y)
        )
    return x == y


def _check(expr: Expr, seed: int) -> str:
    """Compare C and Python on ``expr``; returns the outcome's kind."""
    slots = {name: i for i, name in enumerate(NAMES)}
    try:
        code = compile_expr(expr, slots.get)
    except Unsupported:
        return "unsupported"
    held = tuple(VALUES.get(name) if name in VALUES else "" for name in NAMES)
    rng = PgPrng(seed)
    s0, s1 = rng.getstate()
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    bailed, value, c0, c1, text = _fastloop._eval(code, held, s0, s1)
    ctx = EvalContext(dict(VALUES), rng)
    try:
        expected = evaluate(expr, ctx)
    except EvalError:
        assert bailed, (expr, value)
        return "error"
    if bailed:
        # C gives up only where Python reads a value C does not hold
        assert any(f"Var(name='{n}')" in repr(expr) for n in _NOT_HELD), expr
        return "bailed"
    assert _same(value, expected), (expr, value, expected)
    assert text == to_text(expected), (expr, text)
    assert (c0, c1) == rng.getstate(), expr
    return "same"


@settings(max_examples=1500, deadline=None)
@given(expressions, st.integers(0, 2**32))
def test_expressions_as_python(expr: Expr, seed: int) -> None:
    _check(expr, seed)


def _random_expr(rng: random.Random, depth: int) -> Expr:
    if depth <= 0 or rng.random() < 0.2:
        pick = rng.random()
        if pick < 0.4:
            return Var(rng.choice(NAMES))
        if pick < 0.7:
            return Const(rng.choice(_INTS))
        if pick < 0.9:
            return Const(rng.choice(_DOUBLES))
        return Const(rng.choice((True, False, None)))
    pick = rng.random()
    sub = [_random_expr(rng, depth - 1) for _ in range(3)]
    if pick < 0.4:
        return Call(rng.choice(_BINARY), (sub[0], sub[1]))
    if pick < 0.5:
        return Call(rng.choice(_UNARY), (sub[0],))
    if pick < 0.6:
        return Call(rng.choice(_TWO), (sub[0], sub[1]))
    if pick < 0.7:
        return Call(rng.choice(_THREE), (sub[0], sub[1], sub[2]))
    if pick < 0.8:
        return Call(rng.choice(("and", "or")), (sub[0], sub[1]))
    if pick < 0.85:
        return Call("is", (sub[0], Const(rng.choice((None, True, False)))))
    if pick < 0.9:
        return Call(rng.choice(("least", "greatest")), tuple(sub[: rng.randint(1, 3)]))
    return Call("case", tuple(sub[: rng.randint(2, 3)]))


@pytest.mark.parametrize("seed", range(6))
def test_random_walk_as_python(seed: int) -> None:
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    for i in range(600):
        got = _check(_random_expr(rng, 4), seed * 1000 + i)
        outcomes[got] = outcomes.get(got, 0) + 1
    # both paths are exercised
    assert outcomes.get("same", 0) > 100 and outcomes.get("error", 0) > 20, outcomes


# the skewed draws on realistic arguments: many draws, exact agreement
@pytest.mark.parametrize(
    "text",
    [
        "random_zipfian(1, 100000 * :c, 1.07)",
        "random_zipfian(1, 1000, 2.5)",
        "random_zipfian(-5, :max - 10, 1.001)",
        "random_zipfian(:min, :min + 3, 999.0)",
        "random_gaussian(1, 100000, 2.5)",
        "random_gaussian(-4611686018427387904, 4611686018427387902, 2.0)",
        "random_exponential(1, 100000, 3.0)",
        "random_exponential(1, 10, :d * 1e-9)",
        "random_exponential(:min, -2, 0.5)",
        "random(1, 100) * 0.5",
        "int(random(1, 100) * 0.5) + 1",
        "case when random(0, 3) = 0 then null when random(0, 1) = 1 then :d end",
    ],
)
def test_draws_as_python(text: str) -> None:
    expr = parse_expr(text)
    for seed in range(300):
        assert _check(expr, seed) == "same", (text, seed)


@pytest.mark.parametrize(
    "text",
    [
        "(0 - :big - :big) / -1",
        "mod(:a, 0)",
        ":max + 1",
        "random(5, 1)",
        "random(:min, :max)",
        "permute(:a, 0, :c)",
        ":big * 4",
        "int(:nan)",
        "int(:huge)",
        "int(9223372036854775807.0)",
        ":t + 1",
        "not 1",
        "1 and true",
        "true and 2",
        "sqrt(:t)",
        "random_gaussian(1, 10, 1.99)",
        "random_exponential(1, 10, 0)",
        "random_zipfian(1, 10, 1.0)",
        "random_zipfian(1, 10, :nan)",
        ":unset + 1",
        "1 / 0",
        "least(1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17)",
    ],
)
def test_errors_are_left_to_python(text: str) -> None:
    assert _check(parse_expr(text), 1) == "error"


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        (":s + 1", "same"),
        (":s_dbl * 2", "same"),
        (":s_hex + :s_exp + :s_neg", "same"),
        (":s_inf < 0", "same"),
        (":s_big + 1", "error"),
        (":s_bad + 1", "error"),
        (":s_empty + 1", "error"),
        (":s_sp + 1", "bailed"),
        (":s_true and true", "bailed"),
        (":s_lead + 1", "bailed"),
    ],
)
def test_text_is_typed_when_read(text: str, outcome: str) -> None:
    assert _check(parse_expr(text), 1) == outcome


def test_op_codes_are_mirrored() -> None:
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    # every code both sides name, with its pops (abi checks it at load)
    assert abi.check_module(_fastloop) is None
    assert {k: getattr(_fastloop, k) for k in fastexpr.CODES} == fastexpr.CODES
    assert _fastloop.EXPR_POPS == fastexpr.POPS
    assert len(fastexpr.POPS) == max(fastexpr.CODES.values()) + 1


def test_malformed_programs_are_refused() -> None:
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    for code in [
        (fastexpr.X_ADD, 0),  # pops what is not there
        (fastexpr.X_CONST, 1, fastexpr.X_CONST, 2),  # two values left
        (fastexpr.X_BOOL, 1, fastexpr.X_JNOTTRUE, 0, fastexpr.X_CONST, 1),  # backwards
        (fastexpr.X_CONST, 1, fastexpr.X_JUMP, 9),  # past the end
        (99, 0),
    ]:
        with pytest.raises(ValueError, match="malformed"):
            _fastloop._eval(code, (), 1, 2)
