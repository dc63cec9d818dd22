"""The C loop's latency histograms (pgsurge._fastloop) against stats.histogram.

The C loop counts latencies into its own buckets of the Python layout and
adds them to the worker's Histogram objects (``Histogram.add_counts``)
before Python reads them; the result must be the Histogram that recording
each value in Python gives, bucket by bucket. No server.
"""

from __future__ import annotations

import random

import pytest

from pgsurge.engine import fastloop
from pgsurge.stats.histogram import Histogram

pytestmark = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)


def _c_record(hist: Histogram, values: list[int]) -> None:
    from pgsurge import _fastloop  # type: ignore[attr-defined]

    _fastloop._record_into(hist, values)


def _values(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    out = [int(rng.lognormvariate(6, 2)) for _ in range(n)]
    # the edges of the exact range and of powers of two, and far beyond
    out += [0, 1, 2047, 2048, 2049, 4095, 4096, 2**20 - 1, 2**20, 2**40 + 12345]
    return out


@pytest.mark.parametrize("digits", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_buckets_as_record(digits: int, seed: int) -> None:
    values = _values(seed, 5000)
    ref = Histogram(digits)
    for v in values:
        ref.record(v)
    ours = Histogram(digits)
    _c_record(ours, values)
    assert ours == ref
    assert list(ours.buckets()) == list(ref.buckets())
    assert ours.count == ref.count == len(values)
    assert ours.to_dict() == ref.to_dict()


def test_adds_to_what_python_recorded() -> None:
    # Python-owned clients record into the same Histogram between C flushes
    first, second = _values(3, 1000), _values(4, 1000)
    ref = Histogram()
    for v in first + second:
        ref.record(v)
    ours = Histogram()
    for v in first:
        ours.record(v)
    _c_record(ours, second)
    _c_record(ours, [])
    assert ours == ref


def test_negative_value_is_an_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        _c_record(Histogram(), [5, -1])
