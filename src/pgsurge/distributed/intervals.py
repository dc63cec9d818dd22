"""The interval series of a multi-host run, streamed while it runs.

Every worker of a run that records histograms closes an interval every
``-P`` seconds (1 without ``-P``), all of them counted from the common
start (``stats.series.WorkerRecorder``). On a multi-host run each worker
sends the intervals it closed with each tick (``Progress.intervals``);
the host merges its workers' intervals of the same start once every one of
its workers has delivered it (:class:`HostSeries`) and sends the merged
delta to the coordinator with its ``progress`` event; the coordinator
merges the hosts' deltas per interval, which gives the run's series (the
JSON ``intervals`` and their percentiles) exactly as one machine's workers
would.

On the wire (``Worker.log_event`` takes msgpack-able values only) an
interval is a dict of plain numbers, its histograms in a compact form of
the same bucket layout (``stats.histogram``): only the non-empty buckets,
as a flat list ``[index, count, gap, count, ...]`` where each ``gap`` is
the distance from the previous non-empty bucket's index (small numbers,
one byte each in msgpack), with the exact sum, minimum and maximum.
Decoding gives back an equal ``Histogram`` (``decode_histogram(
encode_histogram(h)) == h``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from pgsurge.stats.counters import StatsData
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.series import IntervalStats, merge_series

__all__ = [
    "HostSeries",
    "decode_histogram",
    "decode_interval",
    "encode_histogram",
    "encode_interval",
]

#: "never": a worker that is done has delivered all its intervals
_ALL = 1 << 62


def encode_histogram(hist: Histogram) -> dict[str, Any]:
    """``hist`` as its non-empty buckets (see the module docstring)."""
    flat: list[int] = []
    prev = 0
    index_of = hist.index_of
    for low, _high, count in hist.buckets():
        idx = index_of(low)
        flat += (idx - prev, count)
        prev = idx
    return {
        "digits": hist.digits,
        "sum": hist.total,
        "min": hist.min,
        "max": hist.max,
        "buckets": flat,
    }


def decode_histogram(data: dict[str, Any]) -> Histogram:
    """Inverse of :func:`encode_histogram`; ``ValueError`` for anything
    inconsistent."""
    hist = Histogram(int(data["digits"]))
    flat = data["buckets"]
    if not flat:
        return hist
    if len(flat) % 2:
        raise ValueError("histogram buckets: an index without its count")
    gaps, counts = flat[0::2], flat[1::2]
    if gaps[0] < 0 or min(gaps[1:], default=1) <= 0 or min(counts) <= 0:
        raise ValueError("histogram buckets out of order or empty")
    indexes = list(accumulate(gaps))
    first = indexes[0]
    dense = array("Q", bytes(8 * (indexes[-1] - first + 1)))
    for idx, count in zip(indexes, counts, strict=True):
        dense[idx - first] = count
    lo, hi = int(data["min"]), int(data["max"])
    if (hist.index_of(lo), hist.index_of(hi)) != (first, indexes[-1]):
        raise ValueError("histogram min/max do not match its buckets")
    hist.add_counts(first, dense.tobytes(), int(data["sum"]), lo, hi)
    return hist


def encode_interval(iv: IntervalStats) -> dict[str, Any]:
    """An interval (its histograms as ``IntervalStats`` keeps them) for the
    wire, on the sender's clock."""
    return {
        "start_us": iv.start_us,
        "duration_us": iv.duration_us,
        "stats": iv.stats.to_dict(),
        "latency": encode_histogram(iv.latency_hist()),
        "lag": encode_histogram(iv.lag_hist()),
    }


def decode_interval(data: dict[str, Any], offset_us: int = 0) -> IntervalStats:
    """Inverse of :func:`encode_interval`, moved to the receiver's clock
    (``offset_us``: sender's clock minus receiver's)."""
    stats = StatsData.from_dict(data["stats"])
    if stats.start_us:
        stats.start_us -= offset_us
    return IntervalStats(
        int(data["start_us"]) - offset_us,
        int(data["duration_us"]),
        stats,
        decode_histogram(data["latency"]).to_dict(),
        decode_histogram(data["lag"]).to_dict(),
    )


class HostSeries:
    """A host's workers' intervals, merged per start once complete.

    An interval is complete when every worker has delivered it: each
    worker's intervals are contiguous from the common start, so a worker
    whose delivered intervals reach past an interval's start has delivered
    that one (or none of that start, when it finished earlier under
    ``-t``: its last interval is shorter); a finished worker has delivered
    all of its own.
    """

    def __init__(self, nworkers: int) -> None:
        self._pending: dict[int, list[IntervalStats]] = {}
        #: the end of each worker's last delivered interval (µs)
        self._reached = [0] * nworkers
        #: how many intervals each worker delivered
        self._delivered = [0] * nworkers

    def add(self, worker: int, intervals: Sequence[IntervalStats]) -> None:
        """Intervals ``worker`` closed (in order, none twice)."""
        for iv in intervals:
            self._pending.setdefault(iv.start_us, []).append(iv)
            self._reached[worker] = max(
                self._reached[worker], iv.start_us + iv.duration_us
            )
        self._delivered[worker] += len(intervals)

    def finish(self, worker: int, intervals: Sequence[IntervalStats]) -> None:
        """``worker`` is done: ``intervals`` is its whole series (those it
        delivered with its ticks first)."""
        self.add(worker, intervals[self._delivered[worker] :])
        self._reached[worker] = _ALL

    def take_complete(self) -> list[IntervalStats]:
        """The intervals completed since the last call, merged, in order."""
        upto = min(self._reached, default=_ALL)
        ready = sorted(start for start in self._pending if start < upto)
        if not ready:
            return []
        return merge_series([[iv for s in ready for iv in self._pending.pop(s)]])
