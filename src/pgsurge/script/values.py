"""pgbench's value semantics: types, coercions, operators and text forms.

A value is ``None`` (NULL), ``bool``, ``int`` (int64), ``float`` (double)
or ``str``. Strings come from ``-D``, ``\\gset``/``\\aset`` and
``\\setshell``; like pgbench, they get a type only when an expression reads
them (:func:`parse_lazy`), and keep their exact text for SQL substitution.

The operators here implement pgbench's ``evalStandardFunc`` for ``+ - * /
mod = <> < <= & | # << >> not is``: NULL in any operand gives NULL; a
double operand makes the operation double (``mod`` always works on ints);
int64 overflow, division by zero and impossible coercions raise
:class:`~pgsurge.errors.EvalError` carrying pgbench's message. Where C
behaviour is undefined but pgbench's x86-64 binary is consistent (shift
counts taken modulo 64, ``abs`` of INT64_MIN), the binary's results are
reproduced. Text forms follow PostgreSQL's own ``snprintf``: doubles as
``%.15g``, with ``NaN``, ``Infinity`` and ``-Infinity`` spelled out.

``bool`` is a subclass of ``int`` in Python, so type tests use
``type(v) is int`` and never ``isinstance``.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import TYPE_CHECKING

from pgsurge.cnum import INT64_MAX, INT64_MIN
from pgsurge.errors import EvalError
from pgsurge.script.ast import Value

if TYPE_CHECKING:
    from fractions import Fraction

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "add",
    "bitand",
    "bitor",
    "bitxor",
    "coerce_to_bool",
    "coerce_to_double",
    "coerce_to_int",
    "debug_text",
    "div",
    "eq",
    "fmt_double",
    "fmt_double_f",
    "is_",
    "le",
    "lshift",
    "lt",
    "mod",
    "mul",
    "ne",
    "not_",
    "parse_lazy",
    "rshift",
    "sub",
    "to_text",
    "truth",
    "type_name",
    "wrap_int64",
]

_TWO64 = 1 << 64
_M64 = _TWO64 - 1
_SIGN = 1 << 63
_INF = math.inf
_NAN = math.nan
_DBL_MIN = 2.2250738585072014e-308  # smallest normal double


def wrap_int64(v: int) -> int:
    """Wrap an integer to int64 as two's complement hardware does."""
    v &= _M64
    return v - _TWO64 if v & _SIGN else v


# --------------------------------------------------------------------------
# Text forms


def fmt_double(d: float) -> str:
    """A double as pgbench prints it (``%.*g`` with DBL_DIG = 15)."""
    if d != d:
        return "NaN"
    if d in (_INF, -_INF):
        return "Infinity" if d > 0 else "-Infinity"
    return format(d, ".15g")


def fmt_double_f(d: float) -> str:
    """A double as ``%f`` prints it in pgbench's messages."""
    if d != d:
        return "NaN"
    if d in (_INF, -_INF):
        return "Infinity" if d > 0 else "-Infinity"
    return format(d, "f")


def to_text(v: Value) -> str:
    """The text pgbench substitutes for ``:var`` (``getVariable``)."""
    t = type(v)
    if t is str:
        return v  # type: ignore[return-value]
    if t is int:
        return str(v)
    if t is float:
        return fmt_double(v)  # type: ignore[arg-type]
    if t is bool:
        return "true" if v else "false"
    return "NULL"


def type_name(v: Value) -> str:
    """pgbench's ``valueTypeName``, used in coercion errors."""
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "boolean"
    if t is int:
        return "int"
    if t is float:
        return "double"
    return "none"  # a string that was never typed (cannot happen in ops)


def debug_text(v: Value) -> str:
    """What ``debug()`` prints after its ``debug(script=…,command=…): ``."""
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "boolean true" if v else "boolean false"
    if t is int:
        return f"int {v}"
    if t is float:
        return "double " + fmt_double(v)  # type: ignore[arg-type]
    return "string " + str(v)  # not reachable: strings are typed when read


# --------------------------------------------------------------------------
# Lazy typing of strings (makeVariableValue)

# C's isspace() in the "C" locale
_SPACES = " \t\n\v\f\r"


@cache
def _strtod_res() -> tuple[re.Pattern[str], ...]:
    """What glibc's strtod accepts after leading white space, in full:
    decimal, hexadecimal, infinity, NaN (compiled on first use: only a
    string that a number is asked of needs them)."""
    return (
        re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.A),
        re.compile(
            r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
            r"(?:[pP][+-]?[0-9]+)?",
            re.A,
        ),
        re.compile(r"([+-]?)(?:inf|infinity)", re.A | re.I),
        re.compile(r"[+-]?nan(?:\([0-9A-Za-z_]*\))?", re.A | re.I),
    )


def _hex_exact(core: str) -> Fraction:
    """The exact value of a C hexadecimal floating constant."""
    from fractions import Fraction  # see _exact_decimal

    s = core.lower()
    neg = s.startswith("-")
    s = s.lstrip("+-")[2:]
    mant, _, exp = s.partition("p")
    whole, _, frac = mant.partition(".")
    value = Fraction(int((whole + frac) or "0", 16), 16 ** len(frac))
    value *= Fraction(2) ** int(exp or "0")
    return -value if neg else value


def _strtod(s: str) -> float | None:
    """glibc ``strtod`` on the whole string, or None where pgbench's
    ``strtodouble`` fails: trailing garbage, or ERANGE (overflow, and
    underflow to zero or to an inexact subnormal)."""
    core = s.lstrip(_SPACES)
    dec_re, hex_re, inf_re, nan_re = _strtod_res()
    if dec_re.fullmatch(core):
        d = float(core)
        exact: Fraction | None = None
        if d in (_INF, -_INF):
            return None
        if -_DBL_MIN < d < _DBL_MIN:
            exact = _exact_decimal(core)
    elif hex_re.fullmatch(core):
        try:
            d = float.fromhex(core)
        except OverflowError:
            return None
        if not -_DBL_MIN < d < _DBL_MIN:
            return d
        exact = _hex_exact(core)
    elif m := inf_re.fullmatch(core):
        return -_INF if m.group(1) == "-" else _INF
    elif nan_re.fullmatch(core):
        return _NAN
    else:
        return None
    if exact is not None and exact != exact.from_float(d):
        return None  # glibc reports ERANGE for an inexact tiny result
    return d


def _exact_decimal(core: str) -> Fraction:
    """The exact value of a decimal constant. (decimal and fractions are
    imported here, for the rare tiny value: at the top they would be part
    of every run, in the memory of each of its processes.)"""
    from decimal import Decimal
    from fractions import Fraction

    return Fraction(Decimal(core))


def _ascii_lower(s: str) -> str | None:
    return s.lower() if s.isascii() else None


def parse_lazy(name: str, s: str) -> Value:
    """Type a string variable the way pgbench's ``makeVariableValue`` does.

    In order: ``null`` (any case); a non-empty prefix of ``true`` or
    ``yes``, or ``on``; a prefix of ``false`` or ``no``, or ``off``/``of``;
    something shaped like an integer (leading white space, a sign, digits),
    which must then fit int64; anything ``strtod`` takes in full. An empty
    string fails without a message, as in pgbench.
    """
    if not s:
        raise EvalError("")
    low = _ascii_lower(s)
    if low is not None:
        if low == "null":
            return None
        if "true".startswith(low) or "yes".startswith(low) or low == "on":
            return True
        if (
            "false".startswith(low)
            or "no".startswith(low)
            or low == "off"
            or low == "of"
        ):
            return False
    # is_an_int(): white space, an optional sign, then only digits (maybe none)
    body = s.lstrip(_SPACES)
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not digits or (digits.isascii() and digits.isdigit()):
        if not digits:
            raise EvalError(f'invalid input syntax for type bigint: "{s}"')
        iv = int(body)
        if not INT64_MIN <= iv <= INT64_MAX:
            raise EvalError(f'value "{s}" is out of range for type bigint')
        return iv
    d = _strtod(s)
    if d is None:
        raise EvalError(f'malformed variable "{name}" value: "{s}"')
    return d


# --------------------------------------------------------------------------
# Coercions


def coerce_to_bool(v: Value) -> bool:
    if type(v) is bool:
        return v
    raise EvalError(f"cannot coerce {type_name(v)} to boolean")


def truth(v: Value) -> bool:
    """``valueTruth``: the condition value of ``\\if`` and ``CASE WHEN``.
    Non-zero numbers are true; NULL is false."""
    if v is None:
        return False
    return v != 0  # bool, int and float alike


def coerce_to_int(v: Value) -> int:
    t = type(v)
    if t is int:
        return v  # type: ignore[return-value]
    if t is float:
        # rint() rounds half to even, like Python's round() on floats
        d: float = v  # type: ignore[assignment]
        if d != d or d in (_INF, -_INF):
            raise EvalError(f"double to int overflow for {fmt_double_f(d)}")
        r = round(d)
        if not INT64_MIN <= r <= INT64_MAX:
            raise EvalError(f"double to int overflow for {fmt_double_f(float(r))}")
        return r
    raise EvalError(f"cannot coerce {type_name(v)} to int")


def coerce_to_double(v: Value) -> float:
    t = type(v)
    if t is float:
        return v  # type: ignore[return-value]
    if t is int:
        return float(v)  # type: ignore[arg-type]
    raise EvalError(f"cannot coerce {type_name(v)} to double")


# --------------------------------------------------------------------------
# Arithmetic and comparison operators
#
# Each operator has an int fast path inline; the rest (NULL, doubles,
# booleans and errors) goes through _numeric(), which mirrors pgbench's
# order of checks: NULL first, then "double if some double", then the
# coercions of the left and then the right operand.


def _numeric(a: Value, b: Value) -> tuple[bool, float | int, float | int] | None:
    """None for a NULL operand, else (is_double, left, right) coerced."""
    if a is None or b is None:
        return None
    if type(a) is float or type(b) is float:
        return True, coerce_to_double(a), coerce_to_double(b)
    return False, coerce_to_int(a), coerce_to_int(b)


def add(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        r = a + b
        if INT64_MIN <= r <= INT64_MAX:
            return r
        raise EvalError("bigint add out of range")
    n = _numeric(a, b)
    if n is None:
        return None
    if n[0]:
        return n[1] + n[2]
    return add(n[1], n[2])


def sub(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        r = a - b
        if INT64_MIN <= r <= INT64_MAX:
            return r
        raise EvalError("bigint sub out of range")
    n = _numeric(a, b)
    if n is None:
        return None
    if n[0]:
        return n[1] - n[2]
    return sub(n[1], n[2])


def mul(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        r = a * b
        if INT64_MIN <= r <= INT64_MAX:
            return r
        raise EvalError("bigint mul out of range")
    n = _numeric(a, b)
    if n is None:
        return None
    if n[0]:
        return n[1] * n[2]
    return mul(n[1], n[2])


def _fdiv(x: float, y: float) -> float:
    """IEEE division, where Python would raise on a zero divisor."""
    if y == 0.0:
        if x != x or x == 0.0:
            return _NAN
        neg = (math.copysign(1.0, x) < 0) != (math.copysign(1.0, y) < 0)
        return -_INF if neg else _INF
    return x / y


def _idiv(a: int, b: int) -> int:
    """C's truncating int64 division, with pgbench's checks."""
    if b == 0:
        raise EvalError("division by zero")
    if b == -1:
        if a == INT64_MIN:
            raise EvalError("bigint div out of range")
        return -a
    if (a >= 0) == (b > 0):
        return a // b
    return -(-a // b)


def _imod(a: int, b: int) -> int:
    """C's int64 remainder: the sign follows the dividend."""
    if b == 0:
        raise EvalError("division by zero")
    if b == -1:
        return 0
    r = a % b
    if r and (r < 0) != (a < 0):
        r -= b
    return r


def div(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return _idiv(a, b)
    n = _numeric(a, b)
    if n is None:
        return None
    if n[0]:
        return _fdiv(n[1], n[2])
    return _idiv(n[1], n[2])  # type: ignore[arg-type]


def mod(a: Value, b: Value) -> Value:
    """``%`` and ``mod()``: always on ints, doubles rounded first."""
    if type(a) is int and type(b) is int:
        return _imod(a, b)
    if a is None or b is None:
        return None
    return _imod(coerce_to_int(a), coerce_to_int(b))


def eq(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return a == b
    n = _numeric(a, b)
    return None if n is None else n[1] == n[2]


def ne(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return a != b
    n = _numeric(a, b)
    return None if n is None else n[1] != n[2]


def lt(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return a < b
    n = _numeric(a, b)
    return None if n is None else n[1] < n[2]


def le(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return a <= b
    n = _numeric(a, b)
    return None if n is None else n[1] <= n[2]


# --------------------------------------------------------------------------
# Bitwise and logical operators


def _ints(a: Value, b: Value) -> tuple[int, int] | None:
    if a is None or b is None:
        return None
    return coerce_to_int(a), coerce_to_int(b)


def bitand(a: Value, b: Value) -> Value:
    n = _ints(a, b)
    return None if n is None else n[0] & n[1]


def bitor(a: Value, b: Value) -> Value:
    n = _ints(a, b)
    return None if n is None else n[0] | n[1]


def bitxor(a: Value, b: Value) -> Value:
    n = _ints(a, b)
    return None if n is None else n[0] ^ n[1]


def lshift(a: Value, b: Value) -> Value:
    """``<<``: x86-64 takes the count modulo 64 and the result wraps."""
    n = _ints(a, b)
    return None if n is None else wrap_int64(n[0] << (n[1] & 63))


def rshift(a: Value, b: Value) -> Value:
    """``>>``: arithmetic shift, the count taken modulo 64 (x86-64)."""
    n = _ints(a, b)
    return None if n is None else n[0] >> (n[1] & 63)


def not_(a: Value) -> Value:
    if a is None:
        return None
    return not coerce_to_bool(a)


def is_(a: Value, b: Value) -> bool:
    """``IS``: same type and same boolean payload; NULL IS NULL is true.

    The parser only puts NULL, TRUE or FALSE on the right.
    """
    if b is None:
        return a is None
    return type(a) is bool and a == b
