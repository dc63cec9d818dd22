"""The function table, the functions, and the closure compiler.

Values marked "pgbench 18.6" were printed by the reference binary; the
server tests re-check all functions against it on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng, derive_streams
from pgsurge.script import functions as F
from pgsurge.script.ast import Call, Const, Expr, Value, Var
from pgsurge.script.evaluate import EvalContext, compile_expr, evaluate

MIN = -(2**63)
MAX = 2**63 - 1
NAN = math.nan
INF = math.inf


def _err(expr: Expr, ctx: EvalContext | None = None) -> str:
    with pytest.raises(EvalError) as exc:
        evaluate(expr, ctx or EvalContext())
    return exc.value.message


def c(name: str, *args: Expr) -> Call:
    return Call(name, args)


K = Const

# --------------------------------------------------------------------------
# Hashes and permute


def test_hash_doc_examples() -> None:
    assert F.hash_murmur2(10, 5432) == -5817877081768721676
    assert F.hash_fnv1a(10, 5432) == -7793829335365542153


def test_hash_pgbench_vectors() -> None:
    # pgbench 18.6
    assert F.hash_murmur2(0, 0) == 8217090173679840641
    assert F.hash_fnv1a(0, 0) == -6284781860667377211


def test_hash_takes_any_int64() -> None:
    for v in (MIN, -1, 0, 1, MAX):
        for seed in (MIN, -1, 0, MAX):
            assert MIN <= F.hash_murmur2(v, seed) <= MAX
            assert MIN <= F.hash_fnv1a(v, seed) <= MAX
    assert F.hash_fnv1a(-1, 0) != F.hash_fnv1a(2**64 - 1 - 2**64 + 1, 0)


def test_permute_pgbench_vectors() -> None:
    # pgbench 18.6
    assert F.permute(5, 100, 3) == 21
    assert F.permute(0, 1000000, 12345) == 466056


@pytest.mark.parametrize("seed", [0, 1, -1, 42, MIN, MAX])
def test_permute_is_a_bijection(seed: int) -> None:
    for size in [*range(1, 40), 64, 100, 257, 1000]:
        image = sorted(F.permute(i, size, seed) for i in range(size))
        assert image == list(range(size)), size


def test_permute_reduces_its_input_modulo_size_as_unsigned() -> None:
    assert F.permute(12, 10, 7) == F.permute(2, 10, 7)
    # -1 is 2**64 - 1 as unsigned, which is 5 modulo 10
    assert F.permute(-1, 10, 7) == F.permute(5, 10, 7)
    assert F.permute(3, 1, 5) == 0


def test_permute_huge_size() -> None:
    v = F.permute(MAX, MAX, -1)
    assert 0 <= v < MAX


# --------------------------------------------------------------------------
# Random functions (pgbench 18.6, --random-seed=5, one client, in order)


def test_random_functions_pgbench_stream() -> None:
    rng = derive_streams(5, 1, 1).clients[0]
    assert F.random_gaussian(rng, 1, 1000, 2.5) == 281
    assert F.random_gaussian(rng, 1, 1000, 2.5) == 667
    assert F.random_exponential(rng, 1, 1000, 2.5) == 280
    assert F.random_exponential(rng, 1, 1000, 2.5) == 226
    assert F.random_zipfian(rng, 1, 1000, 1.5) == 1
    assert F.random_zipfian(rng, 1, 1000, 1.5) == 2
    assert F.random_uniform(rng, 0, 9223372036854775806) == 9217397660947736650
    assert F.random_uniform(rng, -5000, 5000) == 3388


@pytest.mark.parametrize(
    ("fn", "args", "message"),
    [
        (F.random_uniform, (10, 1), "empty range given to random"),
        (F.random_uniform, (MIN, MAX), "random range is too large"),
        (F.random_uniform, (0, MAX), "random range is too large"),
        (F.random_uniform, (True, 1), "cannot coerce boolean to int"),
        (F.random_uniform, (1, 1e30), "double to int overflow for "
         "1000000000000000019884624838656.000000"),
        (F.random_gaussian, (1, 10, 1.99),
         "gaussian parameter must be at least 2.000000 (not 1.990000)"),
        (F.random_gaussian, (1, 10, -INF),
         "gaussian parameter must be at least 2.000000 (not -Infinity)"),
        (F.random_gaussian, (1, 10, True), "cannot coerce boolean to double"),
        (F.random_zipfian, (1, 10, 1.0),
         "zipfian parameter must be in range [1.001, 1000] (not 1.000000)"),
        (F.random_zipfian, (1, 10, 1001),
         "zipfian parameter must be in range [1.001, 1000] (not 1001.000000)"),
        (F.random_zipfian, (1, 10, NAN),
         "zipfian parameter must be in range [1.001, 1000] (not NaN)"),
        (F.random_exponential, (1, 10, 0),
         "exponential parameter must be greater than zero (not 0.000000)"),
        (F.random_exponential, (10, 1, 1), "empty range given to random"),
    ],
)  # fmt: skip
def test_random_errors(
    fn: Callable[..., Value], args: tuple[Value, ...], message: str
) -> None:
    rng = PgPrng(1)
    with pytest.raises(EvalError) as exc:
        fn(rng, *args)
    assert exc.value.message == message
    assert rng == PgPrng(1)  # nothing drawn


def test_random_null_does_not_draw() -> None:
    rng = PgPrng(1)
    assert F.random_uniform(rng, None, 5) is None
    assert F.random_gaussian(rng, 1, 10, None) is None
    assert F.random_exponential(rng, None, 10, 1) is None
    assert F.random_zipfian(rng, 1, None, 1.5) is None
    assert rng == PgPrng(1)


def test_random_distributions_stay_in_bounds() -> None:
    rng = PgPrng(2)
    for _ in range(300):
        assert 1 <= F.random_uniform(rng, 1, 6) <= 6
        assert -9 <= F.random_gaussian(rng, -9, 9, 2.0) <= 9
        assert 0 <= F.random_exponential(rng, 0, 9, 0.5) <= 9
        assert 5 <= F.random_zipfian(rng, 5, 15, 1.2) <= 15
    assert F.random_zipfian(rng, 7, 7, 2.0) == 7  # n == 1 draws nothing


def test_random_nan_parameters_follow_the_x86_conversion() -> None:
    # (int64) NaN is INT64_MIN on x86-64; pgbench then adds the lower bound
    rng = PgPrng(3)
    assert F.random_gaussian(rng, 1, 10, NAN) == MIN + 1
    assert F.random_exponential(rng, 1, 10, NAN) == MIN + 1


# --------------------------------------------------------------------------
# Math


def test_math_follows_c() -> None:
    assert F.f_ln(0) == -INF
    assert math.isnan(F.f_ln(-1))
    assert F.f_ln(INF) == INF
    assert math.isnan(F.f_sqrt(-1))
    assert math.copysign(1.0, F.f_sqrt(-0.0)) == -1.0
    assert F.f_exp(710) == INF
    assert F.f_exp(-1000) == 0.0
    assert F.f_pow(2, 10) == 1024.0
    assert F.f_pow(0, -1) == INF
    assert F.f_pow(-0.0, -1) == -INF
    assert F.f_pow(-0.0, -2) == INF
    assert F.f_pow(-10, 309) == -INF
    assert F.f_pow(-10, 310) == INF
    assert F.f_pow(10, -400) == 0.0
    assert math.isnan(F.f_pow(-8, 1 / 3))
    assert F.f_pow(NAN, 0) == 1.0
    assert F.f_pow(1, NAN) == 1.0
    assert F.f_pi() == math.pi


def test_abs() -> None:
    assert F.f_abs(-5) == 5
    assert F.f_abs(MIN) == MIN  # wraps, as in pgbench
    assert F.f_abs(-2.5) == 2.5
    assert math.copysign(1.0, F.f_abs(-0.0)) == -1.0
    # pgbench reads a boolean's bytes as a double
    assert F.f_abs(True) == 5e-324
    assert F.f_abs(False) == 0.0


def test_greatest_least() -> None:
    assert F.f_greatest(1, 2, 3) == 3
    assert type(F.f_greatest(1, 2.5, 3)) is float
    assert F.f_least(5, 1.5) == 1.5
    assert F.f_greatest(-1) == -1
    # C's "a > b ? a : b": NaN loses as the running extremum, wins as argument
    assert F.f_greatest(NAN, 1) == 1.0
    assert math.isnan(F.f_greatest(1, NAN))
    assert math.copysign(1.0, F.f_least(-0.0, 0.0)) == 1.0
    with pytest.raises(EvalError, match=r"^cannot coerce boolean to int$"):
        F.f_greatest(1, True)
    with pytest.raises(EvalError, match=r"^cannot coerce boolean to double$"):
        F.f_least(1.5, True)


# --------------------------------------------------------------------------
# Tables


# every name the parser may emit (ast.Call's contract)
OPERATOR_NAMES = {
    *("+", "-", "*", "/", "mod", "=", "<>", "<", "<="),
    *("&", "|", "#", "<<", ">>", "and", "or", "not", "is", "case"),
}


def test_table_covers_contract_and_arity() -> None:
    assert set(F.FUNCTIONS) == OPERATOR_NAMES | set(F.ARITY)
    assert len(F.ARITY) == 21  # pgbench's 20 documented functions + power
    for name, (lo, hi) in F.ARITY.items():
        spec = F.FUNCTIONS[name]
        if spec.nargs >= 0:
            assert hi is not None and lo <= spec.nargs <= hi
    assert F.ARITY["hash"] == (1, 2) and F.FUNCTIONS["hash"].nargs == 2
    assert F.ARITY["permute"] == (2, 3) and F.FUNCTIONS["permute"].nargs == 3
    assert F.ARITY["least"] == (1, None)


# --------------------------------------------------------------------------
# The compiler


def _ctx(**variables: Value) -> tuple[EvalContext, list[str]]:
    lines: list[str] = []
    return EvalContext(dict(variables), PgPrng(9), lines.append), lines


def test_evaluates_nested_calls_and_variables() -> None:
    ctx, _ = _ctx(scale=10)
    expr = c("+", c("*", K(2), Var("scale")), c("abs", K(-3)))
    assert evaluate(expr, ctx) == 23


def test_string_variables_are_typed_on_read_and_kept() -> None:
    ctx, _ = _ctx(x=" 12", b="yes", d="1.5")
    assert evaluate(c("+", Var("x"), K(1)), ctx) == 13
    assert evaluate(c("and", Var("b"), K(True)), ctx) is True
    assert evaluate(c("*", Var("d"), K(2)), ctx) == 3.0
    assert ctx.variables["x"] == " 12"  # the text stays for SQL substitution


def test_undefined_and_malformed_variables() -> None:
    ctx, _ = _ctx(bad="abc")
    assert _err(c("+", Var("nope"), K(1)), ctx) == 'undefined variable "nope"'
    assert _err(Var("bad"), ctx) == 'malformed variable "bad" value: "abc"'


def test_lazy_and_or_case_skip_unneeded_operands() -> None:
    ctx, _ = _ctx()
    boom = c("=", c("/", K(1), K(0)), K(1))  # would raise
    undefined = Var("undefined")
    assert evaluate(c("and", _false_var(ctx), boom), ctx) is False
    assert evaluate(c("or", K(True), undefined), ctx) is True
    assert evaluate(c("and", K(None), undefined), ctx) is None
    case = c("case", K(0), boom, K(0.5), K(7), undefined)
    assert evaluate(case, ctx) == 7
    assert evaluate(c("case", K(None), K(1), K(2)), ctx) == 2
    # an even argument count means no ELSE: NULL
    assert evaluate(c("case", K(False), K(1)), ctx) is None


def _false_var(ctx: EvalContext) -> Expr:
    ctx.variables["f"] = False
    return Var("f")


def test_all_arguments_are_evaluated_before_null_propagation() -> None:
    ctx, _ = _ctx()
    assert evaluate(c("+", K(None), K(1)), ctx) is None
    assert _err(c("+", K(None), Var("nope")), ctx) == 'undefined variable "nope"'
    assert _err(c("sqrt", c("/", K(1), K(0))), ctx) == "division by zero"


def test_constant_subtrees_are_folded() -> None:
    fn = compile_expr(c("+", c("*", K(6), K(7)), c("pi")))
    assert fn(None) == 42 + math.pi  # no context needed


def test_failing_constants_fail_at_run_time_only() -> None:
    fn = compile_expr(c("/", K(1), K(0)))  # compiling must not raise
    with pytest.raises(EvalError, match=r"^division by zero$"):
        fn(EvalContext())


def test_random_is_never_folded() -> None:
    ctx, _ = _ctx()
    fn = compile_expr(c("random", K(1), K(1000000)))
    assert len({fn(ctx) for _ in range(10)}) > 1


def test_random_uses_the_context_state() -> None:
    plan = derive_streams(42, 1, 1)
    ctx = EvalContext({"scale": 1}, plan.clients[0])
    expr = c("random", K(1), c("*", K(100000), Var("scale")))
    assert evaluate(expr, ctx) == 83532  # pgbench 18.6, --random-seed=42


def test_debug_writes_to_the_sink_and_returns_its_argument() -> None:
    ctx, lines = _ctx()
    ctx.script, ctx.command = 2, 4
    assert evaluate(c("debug", c("/", K(1.0), K(3))), ctx) == 1 / 3
    assert evaluate(c("debug", K(None)), ctx) is None
    assert evaluate(c("debug", c("<", K(1), K(2))), ctx) is True
    assert evaluate(c("debug", K(-7)), ctx) == -7
    assert lines == [
        "debug(script=2,command=5): double 0.333333333333333\n",
        "debug(script=2,command=5): null\n",
        "debug(script=2,command=5): boolean true\n",
        "debug(script=2,command=5): int -7\n",
    ]


def test_debug_is_never_folded() -> None:
    ctx, lines = _ctx()
    fn = compile_expr(c("debug", K(1)))
    fn(ctx)
    fn(ctx)
    assert len(lines) == 2


def test_variadic_and_generic_calls() -> None:
    ctx, _ = _ctx(a=4)
    assert evaluate(c("greatest", K(1), Var("a"), K(3), K(2)), ctx) == 4
    assert evaluate(c("least", Var("a"), K(None)), ctx) is None
    assert evaluate(c("permute", Var("a"), K(10), K(7)), ctx) == F.permute(4, 10, 7)
    assert evaluate(c("hash", Var("a"), K(5432)), ctx) == F.hash_murmur2(4, 5432)
    assert evaluate(c("is", Var("a"), K(None)), ctx) is False
    assert evaluate(c("not", c("is", K(None), K(None))), ctx) is False
    assert evaluate(c("random_zipfian", K(1), Var("a"), K(1.5)), ctx) in range(1, 5)


def test_at_most_16_arguments_are_evaluated() -> None:
    ctx, lines = _ctx()
    args = [c("debug", K(i)) for i in range(1, 18)]
    assert evaluate(c("least", *args[:16]), ctx) == 1
    lines.clear()
    fn = compile_expr(c("greatest", *args))  # pgbench 18.6 fails at run time
    with pytest.raises(EvalError) as exc:
        fn(ctx)
    assert exc.value.message == "too many function arguments, maximum is 16"
    assert len(lines) == 16  # the first 16 arguments were evaluated
    consts = [K(i) for i in range(17)]
    assert _err(c("greatest", *consts)) == "too many function arguments, maximum is 16"


def test_unknown_names_are_programming_errors() -> None:
    with pytest.raises(ValueError):
        compile_expr(c("frobnicate", K(1)))
    with pytest.raises(ValueError):
        compile_expr(c("abs", K(1), K(2)))
