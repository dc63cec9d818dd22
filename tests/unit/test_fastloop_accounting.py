"""The C loop's per-transaction accounting against the Python engine's.

Two pieces of pgsurge._fastloop that run once per transaction and are not
plain calls into libpq: SimpleStats.add of a latency (its sum of squares
is computed in int64 when the square fits, in 128 bits beyond) and the
integer fields of an -l line (formatted by hand, not by sprintf). Both
must give what the Python engine gives, for every int64. No server.
"""

from __future__ import annotations

import random

import pytest

from pgsurge.cnum import INT64_MAX, INT64_MIN
from pgsurge.engine import fastloop
from pgsurge.stats.simple import SimpleStats

pytestmark = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)

# the largest magnitude whose square fits an int64, and its neighbours
_EDGE = 3037000499
_VALUES = [
    0,
    1,
    9,
    10,
    99,
    100,
    123456,
    _EDGE - 1,
    _EDGE,
    _EDGE + 1,
    2**32,
    2**40 + 12345,
    2**53 + 1,
    INT64_MAX,
    -1,
    -_EDGE,
    -_EDGE - 1,
    INT64_MIN + 1,
    INT64_MIN,
]


def _module():  # type: ignore[no-untyped-def]
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    return _fastloop


def _python_stats(values: list[int]) -> tuple[int, float, float, float, float]:
    s = SimpleStats()
    for v in values:
        s.add(v)
    return (s.count, float(s.min), float(s.max), s.sum, s.sum2)


@pytest.mark.parametrize("value", _VALUES)
def test_one_latency_as_simple_stats(value: int) -> None:
    # each alone: a huge square next to small ones would hide their bits
    assert _module()._stats_add([value]) == _python_stats([value])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sums_as_simple_stats(seed: int) -> None:
    rng = random.Random(seed)
    values = [int(rng.lognormvariate(6, 3)) for _ in range(20000)]
    values += [_EDGE - 1, _EDGE, _EDGE + 1, 2**40]
    rng.shuffle(values)
    assert _module()._stats_add(values) == _python_stats(values)


def test_log_fields_as_python_writes_them() -> None:
    rng = random.Random(7)
    values = _VALUES + [rng.randrange(INT64_MIN, INT64_MAX) for _ in range(2000)]
    assert _module()._log_fields(values) == " ".join(map(str, values))
    assert _module()._log_fields([42]) == "42"
    assert _module()._log_fields([]) == ""
