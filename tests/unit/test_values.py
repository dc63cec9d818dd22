"""pgbench value semantics: text forms, lazy typing, coercions, operators.

Expected results and messages were checked against pgbench 18.6 (the
server tests in tests/server/test_eval_diff.py compare them on every run).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pgsurge.errors import EvalError
from pgsurge.script import values as V
from pgsurge.script.ast import Value

MIN = -(2**63)
MAX = 2**63 - 1
NAN = math.nan
INF = math.inf


def _err(fn: Callable[..., Value], *args: Value) -> str:
    """The message of the EvalError that ``fn(*args)`` raises."""
    with pytest.raises(EvalError) as exc:
        fn(*args)
    return exc.value.message


# --------------------------------------------------------------------------
# Text forms


@pytest.mark.parametrize(
    ("d", "text"),
    [
        (1.0 / 3, "0.333333333333333"),
        (0.1 + 0.2, "0.3"),
        (100.0, "100"),
        (1e16, "1e+16"),
        (1e-5, "1e-05"),
        (-0.0, "-0"),
        (1.7976931348623157e308, "1.79769313486232e+308"),
        (5e-324, "4.94065645841247e-324"),
        (NAN, "NaN"),
        (-NAN, "NaN"),
        (INF, "Infinity"),
        (-INF, "-Infinity"),
    ],
)
def test_fmt_double(d: float, text: str) -> None:
    assert V.fmt_double(d) == text


def test_fmt_double_f() -> None:
    assert V.fmt_double_f(2.0) == "2.000000"
    assert V.fmt_double_f(1e30) == "1000000000000000019884624838656.000000"
    assert V.fmt_double_f(NAN) == "NaN"
    assert V.fmt_double_f(-INF) == "-Infinity"


@pytest.mark.parametrize(
    ("v", "text", "debug"),
    [
        (None, "NULL", "null"),
        (True, "true", "boolean true"),
        (False, "false", "boolean false"),
        (0, "0", "int 0"),
        (MIN, "-9223372036854775808", "int -9223372036854775808"),
        (2.5, "2.5", "double 2.5"),
        (INF, "Infinity", "double Infinity"),
        (" 1.50", " 1.50", "string  1.50"),
    ],
)
def test_text_and_debug_forms(v: Value, text: str, debug: str) -> None:
    assert V.to_text(v) == text
    assert V.debug_text(v) == debug


# --------------------------------------------------------------------------
# Lazy typing of strings


@pytest.mark.parametrize(
    ("s", "value"),
    [
        ("null", None),
        ("NuLl", None),
        ("t", True),
        ("tr", True),
        ("TRUE", True),
        ("y", True),
        ("yes", True),
        ("on", True),
        ("ON", True),
        ("of", False),
        ("off", False),
        ("f", False),
        ("FALSE", False),
        ("n", False),
        ("No", False),
        ("1", 1),
        ("0", 0),
        (" 12", 12),
        ("\t5", 5),
        ("+7", 7),
        ("-0", 0),
        ("00012", 12),
        ("9223372036854775807", MAX),
        ("-9223372036854775808", MIN),
        ("1.5", 1.5),
        (" 1.5", 1.5),
        ("1e5", 100000.0),
        ("1E+05", 100000.0),
        ("-.5e-3", -0.0005),
        ("5.", 5.0),
        ("inf", INF),
        ("-Infinity", -INF),
        ("0x10", 16.0),
        ("0X1P3", 8.0),
        ("-0x.8", -0.5),
        ("0x1p-1070", 2.0**-1070),
        ("2.2250738585072014e-308", 2.2250738585072014e-308),
        ("0e-400", 0.0),
        ("1.00000000000000000001", 1.0),
    ],
)
def test_parse_lazy(s: str, value: Value) -> None:
    got = V.parse_lazy("x", s)
    assert type(got) is type(value)
    assert got == value


@pytest.mark.parametrize("s", ["nan", "NaN", "+nan", "nan()", "nan(12ab)"])
def test_parse_lazy_nan(s: str) -> None:
    got = V.parse_lazy("x", s)
    assert isinstance(got, float)
    assert math.isnan(got)


@pytest.mark.parametrize(
    ("s", "message"),
    [
        ("", ""),  # pgbench fails without a message
        ("o", 'malformed variable "x" value: "o"'),
        ("12 ", 'malformed variable "x" value: "12 "'),
        ("+", 'invalid input syntax for type bigint: "+"'),
        ("-", 'invalid input syntax for type bigint: "-"'),
        ("   ", 'invalid input syntax for type bigint: "   "'),
        (
            "9223372036854775808",
            'value "9223372036854775808" is out of range for type bigint',
        ),
        (
            "-9223372036854775809",
            'value "-9223372036854775809" is out of range for type bigint',
        ),
        ("1e400", 'malformed variable "x" value: "1e400"'),
        ("1e-400", 'malformed variable "x" value: "1e-400"'),
        ("1e-310", 'malformed variable "x" value: "1e-310"'),
        (
            "2.225073858507201e-308",
            'malformed variable "x" value: "2.225073858507201e-308"',
        ),
        (
            "1.7976931348623159e308",
            'malformed variable "x" value: "1.7976931348623159e308"',
        ),
        ("0x", 'malformed variable "x" value: "0x"'),
        ("0x.p1", 'malformed variable "x" value: "0x.p1"'),
        ("1e", 'malformed variable "x" value: "1e"'),
        ("1e+", 'malformed variable "x" value: "1e+"'),
        (".", 'malformed variable "x" value: "."'),
        ("1_000", 'malformed variable "x" value: "1_000"'),
        ("trueX", 'malformed variable "x" value: "trueX"'),
        ("infin", 'malformed variable "x" value: "infin"'),
        ("nan(-)", 'malformed variable "x" value: "nan(-)"'),
        ("١٢", 'malformed variable "x" value: "١٢"'),  # non-ASCII digits
    ],
)
def test_parse_lazy_errors(s: str, message: str) -> None:
    with pytest.raises(EvalError) as exc:
        V.parse_lazy("x", s)
    assert exc.value.message == message


# --------------------------------------------------------------------------
# Coercions


def test_coerce_to_int_rounds_half_to_even() -> None:
    assert [V.coerce_to_int(d) for d in (0.5, 1.5, 2.5, -0.5, -1.5, 2.4999)] == [
        0,
        2,
        2,
        0,
        -2,
        2,
    ]
    assert V.coerce_to_int(-9223372036854775808.0) == MIN


@pytest.mark.parametrize(
    ("v", "message"),
    [
        (
            9223372036854775808.0,
            "double to int overflow for 9223372036854775808.000000",
        ),
        (1e30, "double to int overflow for 1000000000000000019884624838656.000000"),
        (NAN, "double to int overflow for NaN"),
        (-INF, "double to int overflow for -Infinity"),
        (True, "cannot coerce boolean to int"),
        (None, "cannot coerce null to int"),
    ],
)
def test_coerce_to_int_errors(v: Value, message: str) -> None:
    assert _err(V.coerce_to_int, v) == message


def test_other_coercions() -> None:
    assert V.coerce_to_double(2**53 + 1) == 2.0**53
    assert V.coerce_to_bool(False) is False
    assert _err(V.coerce_to_double, True) == "cannot coerce boolean to double"
    assert _err(V.coerce_to_bool, 1) == "cannot coerce int to boolean"
    assert _err(V.coerce_to_bool, 1.0) == "cannot coerce double to boolean"
    assert _err(V.coerce_to_bool, None) == "cannot coerce null to boolean"
    assert [V.truth(v) for v in (None, True, False, 0, 3, 0.0, -0.0, 0.1, NAN)] == [
        False,
        True,
        False,
        False,
        True,
        False,
        False,
        True,
        True,
    ]


# --------------------------------------------------------------------------
# Arithmetic


@pytest.mark.parametrize(
    ("op", "a", "b", "result"),
    [
        (V.add, MAX - 1, 1, MAX),
        (V.sub, MIN + 1, 1, MIN),
        (V.mul, 3037000499, 3037000499, 9223372030926249001),
        (V.mul, -(2**62), 2, MIN),
        (V.add, 1, 1.5, 2.5),
        (V.add, 1.5, 1, 2.5),
        (V.sub, 3, 3.5, -0.5),
        (V.mul, 1e308, 10, INF),
        (V.div, 7, 2, 3),
        (V.div, -7, 2, -3),
        (V.div, 7, -2, -3),
        (V.div, -7, -2, 3),
        (V.div, 5, -1, -5),
        (V.div, MIN, 1, MIN),
        (V.div, 2, 4.0, 0.5),
        (V.div, 1.0, 0, INF),
        (V.div, -1.0, 0, -INF),
        (V.div, 1, -0.0, -INF),
        (V.mod, 7, 3, 1),
        (V.mod, -7, 3, -1),
        (V.mod, 7, -3, 1),
        (V.mod, -7, -3, -1),
        (V.mod, MIN, -1, 0),
        (V.mod, 7.6, 3, 2),  # ints always: rint(7.6) % 3
        (V.mod, 7.5, 2, 0),
    ],
)
def test_arithmetic(
    op: Callable[..., Value], a: Value, b: Value, result: Value
) -> None:
    got = op(a, b)
    assert type(got) is type(result)
    assert got == result


def test_double_division_by_zero_is_nan_for_zero_and_nan() -> None:
    assert math.isnan(V.div(0.0, 0))
    assert math.isnan(V.div(NAN, 0.0))


@pytest.mark.parametrize(
    ("op", "a", "b", "message"),
    [
        (V.add, MAX, 1, "bigint add out of range"),
        (V.sub, MIN, 1, "bigint sub out of range"),
        (V.sub, 0, MIN, "bigint sub out of range"),
        (V.mul, 3037000500, 3037000500, "bigint mul out of range"),
        (V.div, 1, 0, "division by zero"),
        (V.mod, 1, 0, "division by zero"),
        (V.mod, 1.0, 0.4, "division by zero"),
        (V.div, MIN, -1, "bigint div out of range"),
        (V.add, True, 1, "cannot coerce boolean to int"),
        (V.add, 1, True, "cannot coerce boolean to int"),
        (V.add, 1.5, True, "cannot coerce boolean to double"),
        (V.lt, True, 1.5, "cannot coerce boolean to double"),
        (V.eq, 1, True, "cannot coerce boolean to int"),
        (V.eq, True, True, "cannot coerce boolean to int"),
        (V.mod, True, 2, "cannot coerce boolean to int"),
        (V.bitand, 1, True, "cannot coerce boolean to int"),
    ],
)
def test_arithmetic_errors(
    op: Callable[..., Value], a: Value, b: Value, message: str
) -> None:
    assert _err(op, a, b) == message


@pytest.mark.parametrize(
    "op",
    [
        *(V.add, V.sub, V.mul, V.div, V.mod, V.eq, V.ne, V.lt, V.le),
        *(V.bitand, V.bitor, V.bitxor, V.lshift, V.rshift),
    ],
)
def test_null_operands_give_null_before_type_checks(op: Callable[..., Value]) -> None:
    assert op(None, 1) is None
    assert op(1, None) is None
    assert op(None, True) is None  # NULL wins over a bad type
    assert op(None, 0) is None  # and over a zero divisor


def test_comparisons() -> None:
    assert V.lt(1, 2) is True
    assert V.le(2, 2) is True
    assert V.eq(1, 1.0) is True
    assert V.ne(1, 2) is True
    # an int compared with a double is converted to double first
    assert V.eq(9007199254740993, 9007199254740992.0) is True
    assert V.eq(9007199254740993, 9007199254740992) is False
    assert V.eq(NAN, NAN) is False
    assert V.ne(NAN, NAN) is True
    assert V.lt(NAN, 1) is False


def test_bitwise() -> None:
    assert V.bitand(5, 3) == 1
    assert V.bitor(5, 3) == 7
    assert V.bitxor(5, 3) == 6
    assert V.bitxor(-1, 5) == -6  # ~5
    assert V.bitor(2.5, 0) == 2  # rint
    assert V.bitor(3.5, 0) == 4
    assert V.lshift(1, 62) == 2**62
    assert V.lshift(1, 63) == MIN  # wraps
    assert V.lshift(3, 62) == MIN + 2**62
    # shift counts are taken modulo 64, as x86-64 does
    assert V.lshift(1, 64) == 1
    assert V.lshift(1, 65) == 2
    assert V.lshift(1, -1) == MIN
    assert V.rshift(-8, 1) == -4
    assert V.rshift(-1, 63) == -1
    assert V.rshift(5, 70) == 0
    assert V.rshift(320, 70) == 5
    assert V.rshift(5, -63) == 2


def test_logical() -> None:
    assert V.not_(True) is False
    assert V.not_(None) is None
    assert _err(V.not_, 1) == "cannot coerce int to boolean"
    assert V.is_(None, None) is True
    assert V.is_(1, None) is False
    assert V.is_(True, True) is True
    assert V.is_(False, True) is False
    assert V.is_(1, True) is False
    assert V.is_(0, False) is False
    assert V.is_(None, False) is False


def test_wrap_int64() -> None:
    assert V.wrap_int64(MAX + 1) == MIN
    assert V.wrap_int64(-MIN) == MIN
    assert V.wrap_int64(-1) == -1
