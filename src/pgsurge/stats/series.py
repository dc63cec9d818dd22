"""Latency histograms of a worker and its per-interval series.

When an output needs latency distributions (--percentiles, --json, later
the HTML report), each worker owns a ``WorkerRecorder``:

* hot path: after each successful transaction, ``rec.latency(us)`` and,
  under -R, ``rec.lag(us)``; with several scripts also
  ``rec.script[script_no](us)``; under -r, ``rec.command[s][c](us)`` per
  executed command. These are bound ``Histogram.record`` methods (~0.1 µs).
* once per loop iteration: ``if now >= rec.next_us: rec.advance(now)``
  closes the intervals that ended (empty ones too), snapshotting the
  worker's cumulative ``StatsData`` (the recorder holds a reference to it:
  the engine must update that object in place) and the interval's
  histograms, which then start afresh;
* at the end: ``rec.finish(end_us)`` returns the worker's
  ``LatencyHistograms`` and its list of ``IntervalStats``.

The run totals are the merge of the interval histograms, so each latency
is recorded once. Memory stays bounded for any run length: live
histograms are a few per worker; a closed interval keeps its histogram
pair encoded (a few KB). Interval boundaries are
``anchor_us + k * interval_us`` (monotonic µs): give every worker the same
anchor so that the parent can merge intervals by start time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any

from pgsurge.records import record
from pgsurge.stats.counters import StatsData
from pgsurge.stats.histogram import DEFAULT_DIGITS, Histogram
from pgsurge.stats.simple import SimpleStats

__all__ = [
    "IntervalStats",
    "LatencyHistograms",
    "WorkerRecorder",
    "merge_series",
    "stats_delta",
]


def _hist_list(data: list[dict[str, Any]]) -> list[Histogram]:
    return [Histogram.from_dict(d) for d in data]


@record(slots=True)
class LatencyHistograms:
    """A worker's (or the run's) latency distributions, in µs.

    ``latency``/``lag`` cover successful transactions as ``StatsData``'s
    ``latency``/``lag`` do (lag only under -R); ``per_script`` holds one
    latency histogram per script (filled with several scripts) and
    ``per_command`` one per script command (filled under -r).
    """

    digits: int = DEFAULT_DIGITS
    latency: Histogram = field(default_factory=Histogram)
    lag: Histogram = field(default_factory=Histogram)
    per_script: list[Histogram] = field(default_factory=list)
    per_command: list[list[Histogram]] = field(default_factory=list)

    @classmethod
    def empty(
        cls, script_commands: Sequence[int], digits: int = DEFAULT_DIGITS
    ) -> LatencyHistograms:
        return cls(
            digits,
            Histogram(digits),
            Histogram(digits),
            [Histogram(digits) for _ in script_commands],
            [[Histogram(digits) for _ in range(n)] for n in script_commands],
        )

    def merge(self, other: LatencyHistograms) -> None:
        self.latency.merge(other.latency)
        self.lag.merge(other.lag)
        if not self.per_script:
            self.per_script = [Histogram(self.digits) for _ in other.per_script]
        if not self.per_command:
            self.per_command = [
                [Histogram(self.digits) for _ in s] for s in other.per_command
            ]
        if len(self.per_script) != len(other.per_script):
            raise ValueError("per-script histograms of different script lists")
        for mine, theirs in zip(self.per_script, other.per_script, strict=True):
            mine.merge(theirs)
        if len(self.per_command) != len(other.per_command):
            raise ValueError("per-command histograms of different script lists")
        for ms, ts in zip(self.per_command, other.per_command, strict=True):
            if len(ms) != len(ts):
                raise ValueError("per-command histograms of different scripts")
            for mine, theirs in zip(ms, ts, strict=True):
                mine.merge(theirs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "digits": self.digits,
            "latency": self.latency.to_dict(),
            "lag": self.lag.to_dict(),
            "per_script": [h.to_dict() for h in self.per_script],
            "per_command": [[h.to_dict() for h in s] for s in self.per_command],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistograms:
        return cls(
            int(data["digits"]),
            Histogram.from_dict(data["latency"]),
            Histogram.from_dict(data["lag"]),
            _hist_list(data["per_script"]),
            [_hist_list(s) for s in data["per_command"]],
        )


@record(slots=True)
class IntervalStats:
    """What happened in one time interval (a point of the JSON series).

    ``stats`` counts the transactions accounted in the interval; its
    latency/lag ``SimpleStats`` have exact count/sum/sum2/min/max. The
    interval's histograms are kept encoded (``Histogram.to_dict``): a few
    KB each instead of a live bucket list, so that long runs with many
    intervals stay small; ``latency_hist()``/``lag_hist()`` decode them.
    """

    #: monotonic µs at which the interval starts
    start_us: int
    #: its length (the last interval of a run may be shorter)
    duration_us: int
    stats: StatsData = field(default_factory=StatsData)
    latency: dict[str, Any] = field(default_factory=lambda: Histogram().to_dict())
    lag: dict[str, Any] = field(default_factory=lambda: Histogram().to_dict())
    #: a multi-host run's interval that a lost host did not deliver:
    #: (the hosts it counts, all the run's hosts); None when complete
    hosts: tuple[int, int] | None = None

    def latency_hist(self) -> Histogram:
        return Histogram.from_dict(self.latency)

    def lag_hist(self) -> Histogram:
        return Histogram.from_dict(self.lag)

    def merge(self, other: IntervalStats) -> None:
        """Add another worker's interval with the same start."""
        if other.start_us != self.start_us:
            raise ValueError("merging intervals of different start times")
        self.duration_us = max(self.duration_us, other.duration_us)
        self.stats.merge(other.stats)
        for name in ("latency", "lag"):
            acc = Histogram.from_dict(getattr(self, name))
            acc.merge(Histogram.from_dict(getattr(other, name)))
            setattr(self, name, acc.to_dict())

    def to_dict(self) -> dict[str, Any]:
        out = {
            "start_us": self.start_us,
            "duration_us": self.duration_us,
            "stats": self.stats.to_dict(),
            "latency": dict(self.latency),
            "lag": dict(self.lag),
        }
        if self.hosts is not None:
            out["hosts"] = list(self.hosts)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IntervalStats:
        # decoding validates the histograms
        hosts = data.get("hosts")
        return cls(
            int(data["start_us"]),
            int(data["duration_us"]),
            StatsData.from_dict(data["stats"]),
            Histogram.from_dict(data["latency"]).to_dict(),
            Histogram.from_dict(data["lag"]).to_dict(),
            None if hosts is None else (int(hosts[0]), int(hosts[1])),
        )


def merge_series(series: Sequence[Sequence[IntervalStats]]) -> list[IntervalStats]:
    """Merge several workers' interval lists by start time (new objects)."""
    groups: dict[int, list[IntervalStats]] = {}
    for worker in series:
        for iv in worker:
            groups.setdefault(iv.start_us, []).append(iv)
    out = []
    for start in sorted(groups):
        group = groups[start]
        stats = StatsData(start_us=group[0].stats.start_us)
        latency = Histogram.from_dict(group[0].latency)
        lag = Histogram.from_dict(group[0].lag)
        stats.merge(group[0].stats)
        for iv in group[1:]:
            stats.merge(iv.stats)
            latency.merge(Histogram.from_dict(iv.latency))
            lag.merge(Histogram.from_dict(iv.lag))
        duration = max(iv.duration_us for iv in group)
        out.append(
            IntervalStats(start, duration, stats, latency.to_dict(), lag.to_dict())
        )
    return out


def _delta_simple(cur: SimpleStats, prev: SimpleStats, hist: Histogram) -> SimpleStats:
    count = cur.count - prev.count
    if count <= 0:
        return SimpleStats()
    return SimpleStats(
        count,
        float(hist.min),
        float(hist.max),
        cur.sum - prev.sum,
        cur.sum2 - prev.sum2,
    )


def stats_delta(
    cur: StatsData, prev: StatsData, latency: Histogram, lag: Histogram
) -> StatsData:
    """The counts of ``cur`` minus those of an earlier snapshot ``prev``;
    min/max come from the interval's histograms (cumulative stats cannot
    give them)."""
    return StatsData(
        start_us=prev.start_us,
        cnt=cur.cnt - prev.cnt,
        skipped=cur.skipped - prev.skipped,
        retries=cur.retries - prev.retries,
        retried=cur.retried - prev.retried,
        serialization_failures=cur.serialization_failures - prev.serialization_failures,
        deadlock_failures=cur.deadlock_failures - prev.deadlock_failures,
        other_failures=cur.other_failures - prev.other_failures,
        latency=_delta_simple(cur.latency, prev.latency, latency),
        lag=_delta_simple(cur.lag, prev.lag, lag),
    )


class WorkerRecorder:
    """A worker's histograms and interval series; see the module doc.

    ``interval_us == 0`` keeps no series (only the run totals).
    """

    __slots__ = (
        "_cur_lag",
        "_cur_latency",
        "_hists",
        "_interval_us",
        "_prev",
        "_start_us",
        "_totals",
        "command",
        "intervals",
        "lag",
        "latency",
        "next_us",
        "script",
    )

    latency: Callable[[int], None]
    lag: Callable[[int], None]

    def __init__(
        self,
        totals: StatsData,
        script_commands: Sequence[int],
        *,
        anchor_us: int,
        interval_us: int = 0,
        digits: int = DEFAULT_DIGITS,
    ) -> None:
        self._totals = totals
        self._hists = LatencyHistograms.empty(script_commands, digits)
        self._cur_latency = Histogram(digits)
        self._cur_lag = Histogram(digits)
        self.latency = self._cur_latency.record
        self.lag = self._cur_lag.record
        self.script = [h.record for h in self._hists.per_script]
        self.command = [[h.record for h in s] for s in self._hists.per_command]
        self._interval_us = interval_us
        self._start_us = anchor_us
        self._prev = totals.copy()
        self.intervals: list[IntervalStats] = []
        #: monotonic µs at which the current interval ends (never, without one)
        self.next_us = anchor_us + interval_us if interval_us > 0 else 1 << 62

    def targets(
        self,
    ) -> tuple[
        Histogram, Histogram, tuple[Histogram, ...], tuple[tuple[Histogram, ...], ...]
    ]:
        """The histograms ``latency``, ``lag``, ``script`` and ``command``
        record into, for code that adds values to them itself (the C loop,
        through ``Histogram.add_counts``): they stay the same objects for
        the whole run (an interval's are reset in place)."""
        return (
            self._cur_latency,
            self._cur_lag,
            tuple(self._hists.per_script),
            tuple(tuple(s) for s in self._hists.per_command),
        )

    def advance(self, now_us: int) -> None:
        """Close every interval that ended at or before ``now_us``."""
        while now_us >= self.next_us:
            self._close(self.next_us)

    def _close(self, end_us: int) -> None:
        cur = self._totals.copy()
        delta = stats_delta(cur, self._prev, self._cur_latency, self._cur_lag)
        delta.start_us = self._start_us
        self.intervals.append(
            IntervalStats(
                self._start_us,
                end_us - self._start_us,
                delta,
                self._cur_latency.to_dict(),
                self._cur_lag.to_dict(),
            )
        )
        self._fold()
        self._prev = cur
        self._start_us = end_us
        self.next_us = end_us + self._interval_us

    def _fold(self) -> None:
        # the run totals are the merge of the intervals
        self._hists.latency.merge(self._cur_latency)
        self._hists.lag.merge(self._cur_lag)
        self._cur_latency.reset()
        self._cur_lag.reset()

    def restart(self, at_us: int) -> None:
        """--warmup's window start: forget what was recorded (histograms in
        place: the C loop adds to them) and start the series at ``at_us``,
        after the worker's totals were cleared."""
        hists = self._hists
        for h in (hists.latency, hists.lag, self._cur_latency, self._cur_lag):
            h.reset()
        for h in hists.per_script:
            h.reset()
        for script in hists.per_command:
            for h in script:
                h.reset()
        self.intervals.clear()
        self._prev = self._totals.copy()
        self._start_us = at_us
        if self._interval_us > 0:
            self.next_us = at_us + self._interval_us

    def finish(self, end_us: int) -> tuple[LatencyHistograms, list[IntervalStats]]:
        """Close the series at ``end_us`` (the last interval may be partial)."""
        if self._interval_us > 0:
            self.advance(end_us)
            if end_us > self._start_us:
                self._close(end_us)
        self._fold()
        return self._hists, self.intervals
