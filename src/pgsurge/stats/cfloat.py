"""C ``double`` arithmetic and PostgreSQL ``printf`` output, in Python.

pgbench computes its report figures in C doubles and prints them with
PostgreSQL's own ``printf`` replacement (src/port/snprintf.c, used instead
of the C library's on every platform). Python floats are the same IEEE
doubles, and for finite values ``"%.3f" % x`` produces exactly the digits
that snprintf.c gets from the C library, so ordinary values need nothing.
The degenerate cases differ, and runs do reach them (e.g. a throttled run
whose transactions were all skipped prints ``avg NaN``):

* dividing by zero raises ``ZeroDivisionError`` in Python, while C yields
  ``±inf`` or, for ``0/0``, a NaN;
* ``math.sqrt`` of a (rounding-error) negative number raises; C returns NaN;
* PostgreSQL prints NaN as ``NaN`` (never signed) and infinities as
  ``Infinity``/``-Infinity``, padded to the field width; Python prints
  ``nan``/``inf``.

These helpers are tiny and pure so that the report and progress modules can
follow pgbench's expressions operation by operation.
"""

from __future__ import annotations

import math

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
