"""Mergeable high-dynamic-range histogram of integer microseconds.

Percentiles of latency need every value, and a run can record hundreds of
millions of them, so each worker counts values into buckets whose width
grows with the value (HdrHistogram's log-linear layout): values below
``2 * half`` are counted exactly; above, each power-of-two range
``[2**k, 2**(k+1))`` is split into ``half`` equal buckets, where ``half``
is the smallest power of two ``>= 10**digits``. A bucket is then never
wider than ``1 / half <= 10**-digits`` of the values it holds, which is the
stated precision, and memory is bounded by the bit length of the largest
value (about 1024 buckets per power of two at 3 digits: ~22 000 list slots
cover an hour in µs), whatever the run length.

Why our own code rather than the ``hdrhistogram`` package (HdrHistogram_py,
whose API shape this follows: ``record``/``merge``/``percentile``/encode):
measured with ``bench/histogram_bench.py --hdrh`` (200 000 log-normal
values, 3 digits, best of several repeats, 2-CPU dev box), its pure-Python
``record_value`` costs 1.2-2.4 µs per value, over the 1 µs budget of the
worker's hot path, while ``Histogram.record`` below costs about 0.1 µs
(95-115 ns): the bucket index is computed inline with the layout constants
bound as fast locals, and nothing else is done per value but one list
increment, a sum and two comparisons. It also needs no dependency. Unlike
hdrh, bad input is an error, never a silent ``False``: negative values
raise ``ValueError``; there is no upper bound (the bucket list grows).

Invariants:

* ``a.merge(b)`` equals recording ``a``'s and ``b``'s values into one
  histogram (same counts, count, min, max and sum; same digits required);
* ``percentile(p)`` is the nearest-rank value of the recorded data (the
  ``ceil(p/100 * count)``-th smallest, at least the first) rounded up to
  its bucket's upper bound and clamped to ``[min, max]``, hence
  ``v <= percentile(p) <= v * (1 + 10**-digits)`` for the exact value ``v``;
* ``from_dict(h.to_dict()) == h``; the encoding is compact (the span of
  non-empty buckets as uint64, zlib, base64) so JSON results can be
  merged later, and fast enough to keep closed intervals encoded.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable, Iterator
from operator import add
from types import MethodType
from typing import Any

#: the encoding tag written in ``to_dict``; readers reject others
ENCODING = "u64le-zlib-base64"
DEFAULT_DIGITS = 3
_MAX_DIGITS = 5
# initial list length: all exact buckets plus the next 8 powers of two
_INITIAL_RANGES = 8
_INITIAL_MAX = 1 << 14  # more precise layouts start smaller and grow
_EMPTY_LO = 1 << 63


def _layout(digits: int) -> tuple[int, int]:
    """(sub_bits, half_bits) for a precision of ``digits`` decimal digits."""
    if not 1 <= digits <= _MAX_DIGITS:
        raise ValueError(f"significant digits must be 1 to {_MAX_DIGITS}")
    half_bits = math.ceil(math.log2(10**digits))
    return half_bits + 1, half_bits


def _make_record(sub_bits: int, half_bits: int) -> Callable[[Histogram, int], None]:
    """The ``record`` method for one bucket layout.

    The layout constants are default arguments, which CPython reads as
    fast locals: about a third cheaper than reading them from slots, and
    this is the one function of the module on the hot path. The value
    count is not kept here either (it is the sum of the buckets).
    """

    def record(
        self: Histogram,
        value: int,
        _top: int = (1 << sub_bits) - 1,
        _sb: int = sub_bits,
        _hb: int = half_bits,
    ) -> None:
        if value > _top:
            shift = value.bit_length() - _sb
            idx = (shift << _hb) + (value >> shift)
        elif value >= 0:
            idx = value
        else:
            raise ValueError(f"cannot record a negative value: {value}")
        try:
            self._counts[idx] += 1
        except IndexError:
            self._grow(idx)
            self._counts[idx] += 1
        self.total += value
        if value > self.hi:
            self.hi = value
        if value < self.lo:
            self.lo = value

    return record


def nearest_rank(p: float, count: int) -> int:
    """The 1-based rank of percentile ``p`` (0..100) among ``count`` values.

    ``ceil(p / 100 * count)``, at least 1, computed on the decimal value of
    ``p`` as written (99.9 means 999/10, not the nearest double), so that
    ranks do not wobble by one through floating-point rounding.
    """
    if not 0 <= p <= 100:
        raise ValueError("percentile must be between 0 and 100")
    # here, not at the top: fractions imports decimal, no part of a run
    # without percentiles (each of a run's processes would hold them)
    from fractions import Fraction

    rank = math.ceil(Fraction(repr(float(p))) * count / 100)
    return max(1, min(rank, count))


class Histogram:
    """Counts of integer values (µs) in log-linear buckets; see the module doc.

    ``record`` is the hot method: bind it once (``rec = hist.record``) and
    call it with an ``int`` per value.
    """

    __slots__ = (
        "_counts",
        "_half_bits",
        "_sub_bits",
        "digits",
        "hi",
        "lo",
        "record",
        "total",
    )

    #: count one value (a non-negative ``int``); see ``_make_record``
    record: Callable[[int], None]

    def __init__(self, digits: int = DEFAULT_DIGITS) -> None:
        self._sub_bits, self._half_bits = _layout(digits)
        self.digits = digits
        self._counts: list[int] = [0] * min(
            (_INITIAL_RANGES + 2) << self._half_bits, _INITIAL_MAX
        )
        #: exact sum of the recorded values
        self.total = 0
        # exact extremes; hi == -1 means empty (see min/max)
        self.lo = _EMPTY_LO
        self.hi = -1
        self.record = MethodType(_make_record(self._sub_bits, self._half_bits), self)

    def _grow(self, idx: int) -> None:
        # one more power of two than needed: values tend to creep upwards
        counts = self._counts
        counts.extend([0] * (idx + 1 + (1 << self._half_bits) - len(counts)))

    # -- bucket geometry -----------------------------------------------------

    def index_of(self, value: int) -> int:
        """The bucket index of ``value`` (same computation as ``record``)."""
        if value < 0:
            raise ValueError(f"negative value: {value}")
        shift = value.bit_length() - self._sub_bits
        return (shift << self._half_bits) + (value >> shift) if shift > 0 else value

    def bounds(self, idx: int) -> tuple[int, int]:
        """The lowest and highest value counted in bucket ``idx``."""
        if idx < 1 << self._sub_bits:
            return idx, idx
        shift = (idx >> self._half_bits) - 1
        low = (idx - (shift << self._half_bits)) << shift
        return low, low + (1 << shift) - 1

    # -- reading -------------------------------------------------------------

    @property
    def count(self) -> int:
        """Number of recorded values (a sum over the buckets: not free)."""
        if self.hi < 0:
            return 0
        first, last = self._span()
        return sum(self._counts[first : last + 1])

    @property
    def min(self) -> int:
        """Smallest recorded value (0 when empty)."""
        return self.lo if self.hi >= 0 else 0

    @property
    def max(self) -> int:
        """Largest recorded value (0 when empty)."""
        return self.hi if self.hi >= 0 else 0

    @property
    def mean(self) -> float:
        """Exact mean of the recorded values (NaN when empty, like C's 0/0)."""
        count = self.count
        return self.total / count if count else math.nan

    def value_at_rank(self, rank: int) -> int:
        """The ``rank``-th smallest value (1-based) to the histogram's
        precision: its bucket's upper bound, clamped to ``[min, max]``."""
        count = self.count
        if count == 0:
            return 0
        rank = max(1, min(rank, count))
        seen = 0
        for idx, n in enumerate(self._counts):
            if n:
                seen += n
                if seen >= rank:
                    high = self.bounds(idx)[1]
                    return max(self.lo, min(high, self.hi))
        raise AssertionError("counts and count disagree")  # pragma: no cover

    def percentile(self, p: float) -> int:
        """Nearest-rank percentile ``p`` in 0..100 (0 when empty)."""
        count = self.count
        if count == 0:
            if not 0 <= p <= 100:
                raise ValueError("percentile must be between 0 and 100")
            return 0
        return self.value_at_rank(nearest_rank(p, count))

    def percentiles(self, ps: tuple[float, ...] | list[float]) -> list[int]:
        """Several percentiles in one pass over the buckets."""
        count = self.count
        if count == 0:
            return [self.percentile(p) for p in ps]
        ranks = sorted((nearest_rank(p, count), i) for i, p in enumerate(ps))
        out = [0] * len(ps)
        pos = 0
        seen = 0
        for idx, n in enumerate(self._counts):
            if not n:
                continue
            seen += n
            while pos < len(ranks) and ranks[pos][0] <= seen:
                high = self.bounds(idx)[1]
                out[ranks[pos][1]] = max(self.lo, min(high, self.hi))
                pos += 1
            if pos == len(ranks):
                break
        return out

    def buckets(self) -> Iterator[tuple[int, int, int]]:
        """The non-empty buckets as ``(low, high, count)``, ascending."""
        for idx, n in enumerate(self._counts):
            if n:
                low, high = self.bounds(idx)
                yield low, high, n

    def layout(self) -> tuple[int, int]:
        """``(sub_bits, half_bits)``: the bucket layout (``index_of``), for
        code that counts values into buckets itself (the C loop)."""
        return self._sub_bits, self._half_bits

    # -- combining -----------------------------------------------------------

    def add_counts(self, offset: int, raw: bytes, total: int, lo: int, hi: int) -> None:
        """Add values counted elsewhere in this layout: ``raw`` holds the
        counts of buckets ``offset``, ``offset + 1``, ... as native uint64,
        ``total``/``lo``/``hi`` the sum, min and max of those values (at
        least one). The same as recording each of them (the C loop counts
        into its own buckets and adds them here before Python reads)."""
        arr = array("Q")
        arr.frombytes(raw)
        counts = self._counts
        end = offset + len(arr)
        if end > len(counts):
            self._grow(end - 1)
        # element-wise at C speed (the loop returns here once per interval)
        counts[offset:end] = map(add, counts[offset:end], arr)
        self.total += total
        if hi > self.hi:
            self.hi = hi
        if lo < self.lo:
            self.lo = lo

    def merge(self, other: Histogram) -> None:
        """Add ``other``'s values into this histogram."""
        if other.digits != self.digits:
            raise ValueError("cannot merge histograms of different precision")
        if other.hi < 0:
            return
        mine = self._counts
        # only the span of ``other``'s values has counts (lo and hi are
        # exact), added element-wise at C speed
        first, last = other._span()
        if last >= len(mine):
            mine.extend([0] * (last + 1 - len(mine)))
        end = last + 1
        mine[first:end] = map(add, mine[first:end], other._counts[first:end])
        self.total += other.total
        self.hi = max(self.hi, other.hi)
        self.lo = min(self.lo, other.lo)

    def reset(self) -> None:
        """Forget all values (keeps the allocated buckets)."""
        if self.hi >= 0:
            # the buckets outside the span of the values are empty already
            first, last = self._span()
            self._counts[first : last + 1] = [0] * (last + 1 - first)
        self.total = 0
        self.lo = _EMPTY_LO
        self.hi = -1

    def __reduce__(self) -> tuple[Any, ...]:
        # the bound ``record`` cannot be pickled; rebuild it on load. Only
        # the buckets up to the last non-empty one travel: a worker sends
        # its histograms (one per command with --json) to the parent at
        # the end of a run, and the 16,384 buckets of each, mostly empty
        # past the largest latency, were most of that pickle's work
        counts = self._counts[: self._span()[1] + 1]
        return (_restore, (self.digits, counts, self.total, self.lo, self.hi))

    def copy(self) -> Histogram:
        new = Histogram(self.digits)
        new._counts = list(self._counts)
        new.total, new.lo, new.hi = self.total, self.lo, self.hi
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (
            self.digits == other.digits
            and self.total == other.total
            and self.min == other.min
            and self.max == other.max
            and list(self._nonzero()) == list(other._nonzero())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Histogram(digits={self.digits}, count={self.count}, "
            f"min={self.min}, max={self.max})"
        )

    def _nonzero(self) -> Iterator[tuple[int, int]]:
        for idx, n in enumerate(self._counts):
            if n:
                yield idx, n

    # -- encoding ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready, compact description (see ``ENCODING``).

        ``offset`` is the first non-empty bucket; ``counts`` the buckets
        from there to the last non-empty one as little-endian uint64,
        zlib-compressed (runs of empty buckets shrink to almost nothing),
        base64. Encoding and decoding run at C speed (tens of µs).
        """
        # imported here: only the JSON and HTML reports encode (every
        # module a run imports is memory in each of its processes)
        import base64
        import zlib

        counts = self._counts
        first, last = self._span()
        arr = array("Q", counts[first : last + 1] if last >= first else [])
        if sys.byteorder == "big":  # pragma: no cover - no such CI machine
            arr.byteswap()
        return {
            "digits": self.digits,
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.total,
            "encoding": ENCODING,
            "offset": first if last >= first else 0,
            "counts": base64.b64encode(zlib.compress(arr.tobytes(), 1)).decode("ascii"),
        }

    def _span(self) -> tuple[int, int]:
        """First and last non-empty bucket indexes ((0, -1) when empty)."""
        if self.hi < 0:
            return 0, -1
        return self.index_of(self.lo), self.index_of(self.hi)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Histogram:
        """Inverse of ``to_dict``; ``ValueError`` for anything inconsistent."""
        if data.get("encoding") != ENCODING:
            raise ValueError(f"unknown histogram encoding: {data.get('encoding')!r}")
        import base64  # see to_dict
        import zlib

        hist = cls(int(data["digits"]))
        try:
            raw = zlib.decompress(base64.b64decode(data["counts"], validate=True))
        except (ValueError, zlib.error) as exc:
            raise ValueError(f"corrupt histogram counts: {exc}") from None
        if len(raw) % 8:
            raise ValueError("corrupt histogram counts: truncated")
        arr = array("Q")
        arr.frombytes(raw)
        if sys.byteorder == "big":  # pragma: no cover
            arr.byteswap()
        offset = int(data["offset"])
        if offset < 0:
            raise ValueError("corrupt histogram counts: negative offset")
        counts = hist._counts
        end = offset + len(arr)
        if end > len(counts):
            counts.extend([0] * (end - len(counts)))
        counts[offset:end] = arr.tolist()
        count = sum(arr)
        if count != int(data["count"]):
            raise ValueError("histogram counts do not add up to its count")
        hist.total = int(data["sum"])
        if count:
            hist.lo = int(data["min"])
            hist.hi = int(data["max"])
            if (
                not 0 <= hist.lo <= hist.hi
                or (hist.index_of(hist.lo), hist.index_of(hist.hi)) != (offset, end - 1)
                or not arr[0]
                or not arr[-1]
            ):
                raise ValueError("histogram min/max do not match its buckets")
        return hist


def _restore(digits: int, counts: list[int], total: int, lo: int, hi: int) -> Histogram:
    hist = Histogram(digits)
    hist._counts = counts
    hist.total, hist.lo, hist.hi = total, lo, hi
    return hist


def merged(
    hists: list[Histogram] | tuple[Histogram, ...], digits: int = DEFAULT_DIGITS
) -> Histogram:
    """A new histogram holding the values of all ``hists``."""
    out = Histogram(hists[0].digits if hists else digits)
    for h in hists:
        out.merge(h)
    return out
