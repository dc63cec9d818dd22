"""C ``double`` arithmetic and ``printf`` corner cases that Python does not mimic.

pgbench computes its report figures in C doubles and prints them with glibc's
``printf``. Python floats are the same IEEE doubles and ``"%.3f" % x`` rounds
exactly like glibc, so ordinary values need nothing special. Three places
differ and would break byte-compatibility on degenerate runs:

* dividing by zero raises ``ZeroDivisionError`` in Python, while C yields
  ``inf`` or, for ``0/0``, the x86 "default NaN", whose sign bit is set;
* ``math.sqrt`` of a (rounding-error) negative number raises, while C's
  ``sqrt`` returns that same negative NaN;
* glibc prints a NaN with its sign (``-nan``); Python prints ``nan``.

These helpers are tiny and pure so that the report and progress modules can
follow pgbench's expressions operation by operation.
"""

from __future__ import annotations

import math

#: the NaN an x86 FPU produces for 0/0 or sqrt(-1): sign bit set ("-nan")
DEFAULT_NAN = math.copysign(math.nan, -1.0)


def c_div(num: float, den: float) -> float:
    """``num / den`` with C semantics for a zero denominator."""
    if den != 0:
        return num / den
    if num == 0 or math.isnan(num):
        return DEFAULT_NAN
    # x / +0.0 is +inf for positive x; a -0.0 denominator flips the sign
    sign = math.copysign(1.0, num) * math.copysign(1.0, den)
    return math.copysign(math.inf, sign)


def c_sqrt(value: float) -> float:
    """``sqrt`` that returns C's negative NaN instead of raising."""
    if math.isnan(value):
        return value
    if value < 0:
        return DEFAULT_NAN
    return math.sqrt(value)


def c_fmt(spec: str, value: float) -> str:
    """Format one double as glibc's ``printf(spec, value)`` would.

    ``spec`` is a printf conversion such as ``"%.3f"`` or ``"%11.3f"``.
    Only NaN needs care: glibc writes ``-nan`` when the sign bit is set,
    and pads it to the field width like any other text.
    """
    if math.isnan(value):
        text = "-nan" if math.copysign(1.0, value) < 0 else "nan"
        width = _field_width(spec)
        return text.rjust(width)
    return spec % value


def _field_width(spec: str) -> int:
    # "%11.3f" -> 11, "%.3f" -> 0
    body = spec[1:].lstrip("-+ #0")
    digits = ""
    for ch in body:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0
