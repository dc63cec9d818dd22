"""C's number semantics, written once: what pgbench's C code does with ints,
longs and doubles, where Python would do otherwise.

* bounds of C's ``int``/``int64``/``uint64`` and the wrap of a value stored
  in an ``int`` (:func:`wrap_int32`, x86-64 behaviour);
* glibc's ``strtol``/``atoi``/``atof`` in the C locale: leading blanks, a
  sign, trailing garbage, saturation to ``long``, ``nan``/``inf``/hex
  floats (:func:`strtol`, :func:`atoi`, :func:`atof`);
* ``double`` arithmetic where Python raises (division by zero, ``sqrt`` of
  a negative rounding error) and PostgreSQL's ``printf`` of NaN and
  infinities (:func:`c_div`, :func:`c_sqrt`, :func:`c_fmt`): pgbench prints
  its report figures with PostgreSQL's own ``snprintf``, whose digits
  equal Python's ``%`` for finite values but which spells ``NaN`` and
  ``Infinity``.

Pure functions and constants, imported by every layer that needs them
(options, the script language, the engine, reports).
"""

from __future__ import annotations

import math
import re
from functools import cache

__all__ = [
    "C_SPACE",
    "DECIMAL_DIGITS",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "NAN",
    "UINT64_MAX",
    "atof",
    "atoi",
    "bounded_int",
    "c_div",
    "c_fmt",
    "c_sqrt",
    "double_to_int64",
    "skip_c_space",
    "strtol",
    "wrap_int32",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

#: C's isspace() in the C locale
C_SPACE = " \t\n\v\f\r"

DECIMAL_DIGITS = re.compile(r"[0-9]*")


@cache
def _float_re() -> re.Pattern[str]:
    """What ``strtod`` accepts (compiled on first use: a run whose options
    and scripts hold no double never needs it, and it is the costliest
    pattern of the start-up)."""
    return re.compile(
        r"""[+-]?(?:
        (?P<hex>0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)
            (?:[pP][+-]?[0-9]+)?)
      | (?P<inf>[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)
      | (?P<nan>[nN][aA][nN](?:\([0-9A-Za-z_]*\))?)
      | (?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?
    )""",
        re.VERBOSE,
    )


def wrap_int32(value: int) -> int:
    """The int32 that C gets when it stores ``value`` in an ``int``."""
    return (value - INT32_MIN) % (1 << 32) + INT32_MIN


def skip_c_space(s: str) -> int:
    i = 0
    while i < len(s) and s[i] in C_SPACE:
        i += 1
    return i


def bounded_int(digits: str) -> int:
    """``int(digits)``, capped far above 64 bits (Python refuses huge strings)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 40 else 1 << 140


def strtol(s: str) -> tuple[int, int, bool]:
    """``strtol(s, &end, 10)``: (value, end index, overflowed).

    Without digits the end is 0 (C sets ``endptr`` to the string start).
    On overflow the value is clamped to the 64-bit ``long`` range.
    """
    i = skip_c_space(s)
    negative = False
    if i < len(s) and s[i] in "+-":
        negative = s[i] == "-"
        i += 1
    m = DECIMAL_DIGITS.match(s, i)
    assert m is not None
    if m.end() == i:
        return 0, 0, False
    value = bounded_int(m.group())
    if negative:
        value = -value
    if value > INT64_MAX:
        return INT64_MAX, m.end(), True
    if value < INT64_MIN:
        return INT64_MIN, m.end(), True
    return value, m.end(), False


def atoi(s: str) -> int:
    """glibc's ``atoi``: ``(int) strtol(s, NULL, 10)``, wrapping like C."""
    return wrap_int32(strtol(s)[0])


def atof(s: str) -> float:
    """``atof``: the longest prefix ``strtod`` accepts, else 0.0."""
    i = skip_c_space(s)
    m = _float_re().match(s, i)
    if m is None:
        return 0.0
    text = m.group()
    if m.group("hex"):
        sign = -1.0 if text.startswith("-") else 1.0
        try:
            return sign * float.fromhex(m.group("hex"))
        except OverflowError:
            return sign * float("inf")
    if m.group("nan"):
        return float("-nan") if text.startswith("-") else float("nan")
    if m.group("inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float(text)


def double_to_int64(value: float) -> int:
    """C's ``(int64) value`` on x86-64: truncation, INT64_MIN when out of range."""
    if value != value or not (INT64_MIN <= value < 2.0**63):
        return INT64_MIN
    return int(value)


NAN = math.nan


def c_div(num: float, den: float) -> float:
    """``num / den`` with C semantics for a zero denominator."""
    if den != 0:
        return num / den
    if num == 0 or math.isnan(num):
        return NAN
    # x / +0.0 is +inf for positive x; a -0.0 denominator flips the sign
    sign = math.copysign(1.0, num) * math.copysign(1.0, den)
    return math.copysign(math.inf, sign)


def c_sqrt(value: float) -> float:
    """``sqrt`` that returns NaN for a negative argument instead of raising."""
    if value < 0:
        return NAN
    return math.sqrt(value)


def c_fmt(spec: str, value: float) -> str:
    """Format one double as PostgreSQL's ``printf(spec, value)`` would.

    ``spec`` is a right-justified printf float conversion such as
    ``"%.3f"``, ``"%11.3f"`` or ``"%f"``.
    """
    if math.isnan(value):
        text = "NaN"
    elif math.isinf(value):
        text = "Infinity" if value > 0 else "-Infinity"
    else:
        return spec % value
    return text.rjust(_field_width(spec))


def _field_width(spec: str) -> int:
    # "%11.3f" -> 11, "%.3f" -> 0
    digits = ""
    for ch in spec[1:]:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0
