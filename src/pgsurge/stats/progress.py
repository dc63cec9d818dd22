"""-P progress lines, formatted exactly as pgbench's ``printProgressReport``.

A progress line covers the interval since the previous one: the caller
keeps cumulative ``StatsData`` snapshots merged over all workers (the
previous and the current one) and the times, and gets back the line to
write to stderr. ``ProgressReporter`` keeps that state for the caller.

The arithmetic follows pgbench operation by operation (C double semantics,
see ``pgsurge.cnum``), so that the printed digits match, including its oddities:
latency and stddev print as 0.000 when no transaction finished in the
interval, and a stddev whose radicand rounds below zero prints ``NaN``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pgsurge.cnum import c_div, c_fmt, c_sqrt
from pgsurge.stats.counters import StatsData
from pgsurge.stats.results import RunFacts


def format_progress(
    prev: StatsData,
    cur: StatsData,
    *,
    now_us: int,
    last_report_us: int,
    test_start_us: int,
    throttled: bool,
    latency_limited: bool,
    max_tries: int,
    epoch_shift_us: int | None = None,
) -> str:
    """One progress line, without the trailing newline.

    ``prev``/``cur``: cumulative stats at the previous report (or zeroed at
    the start) and now. ``test_start_us``: when the run started (pgbench:
    thread 0's start, before connecting); the elapsed time printed is
    ``now - test_start``. ``last_report_us``: the previous report's time
    (``test_start_us`` for the first one); tps is over this interval.
    With --progress-timestamp pass ``epoch_shift_us`` (Unix time minus
    monotonic time, in µs): the line then shows the Unix time of ``now``.
    """
    run = now_us - last_report_us
    cnt = cur.cnt - prev.cnt
    total_run = (now_us - test_start_us) / 1000000.0
    tps = c_div(1000000.0 * cnt, run)
    if cnt > 0:
        latency = 0.001 * (cur.latency.sum - prev.latency.sum) / cnt
        sqlat = 1.0 * (cur.latency.sum2 - prev.latency.sum2) / cnt
        stdev = 0.001 * c_sqrt(sqlat - 1000000.0 * latency * latency)
        lag = 0.001 * (cur.lag.sum - prev.lag.sum) / cnt
    else:
        latency = stdev = lag = 0.0
    failures = cur.failures - prev.failures
    retried = cur.retried - prev.retried

    if epoch_shift_us is not None:
        when = c_fmt("%.3f", 0.000001 * (now_us + epoch_shift_us)) + " s"
    else:
        # whole seconds are expected, but the report may come a bit late
        when = c_fmt("%.1f", total_run) + " s"

    parts = [
        f"progress: {when}, {c_fmt('%.1f', tps)} tps, "
        f"lat {c_fmt('%.3f', latency)} ms stddev {c_fmt('%.3f', stdev)}, "
        f"{failures} failed"
    ]
    if throttled:
        parts.append(f", lag {c_fmt('%.3f', lag)} ms")
        if latency_limited:
            parts.append(f", {cur.skipped - prev.skipped} skipped")
    # retries can only happen when max_tries != 1
    if max_tries != 1:
        parts.append(f", {retried} retried, {cur.retries - prev.retries} retries")
    return "".join(parts)


@dataclass(slots=True)
class ProgressReporter:
    """Keeps the previous snapshot and the report schedule (pgbench's
    ``last``, ``last_report`` and ``next_report`` of thread 0)."""

    test_start_us: int
    interval_s: int
    throttled: bool = False
    latency_limited: bool = False
    max_tries: int = 1
    #: set for --progress-timestamp: Unix time minus monotonic time, in µs
    epoch_shift_us: int | None = None
    last: StatsData = field(default_factory=StatsData)
    last_report_us: int = 0
    next_report_us: int = 0
    #: --warmup: the measured window's start (monotonic µs; 0: none). The
    #: lines of ticks up to it say "(warm-up)"; the workers reset their
    #: figures there, so the first line after it counts from it
    window_us: int = 0

    def __post_init__(self) -> None:
        if self.last_report_us == 0:
            self.last_report_us = self.test_start_us
        if self.next_report_us == 0:
            self.next_report_us = self.test_start_us + 1000000 * self.interval_s

    @classmethod
    def for_run(
        cls,
        facts: RunFacts,
        test_start_us: int,
        *,
        epoch_shift_us: int | None = None,
    ) -> ProgressReporter:
        return cls(
            test_start_us=test_start_us,
            interval_s=facts.progress_s,
            throttled=facts.throttled,
            latency_limited=facts.latency_limit_us != 0,
            max_tries=facts.max_tries,
            epoch_shift_us=epoch_shift_us,
            window_us=test_start_us + 1000000 * facts.warmup_s if facts.warmup_s else 0,
        )

    def due(self, now_us: int) -> bool:
        return now_us >= self.next_report_us

    def report(self, cur: StatsData, now_us: int, tick: int | None = None) -> str:
        """The line for cumulative stats ``cur`` at ``now_us``; remembers
        them and schedules the next report strictly after ``now_us`` (a
        late report skips the missed ticks, as pgbench does).

        ``tick`` (the workers' tick number) says under --warmup whether the
        figures are the warm-up's: a worker sends a tick's figures before
        it opens the window at the same instant."""
        warm = False
        if self.window_us:
            if tick is None:
                at = now_us
            else:
                at = self.test_start_us + 1000000 * self.interval_s * tick
            warm = at <= self.window_us
            if not warm:
                # the first line of the window: counted from its start
                self.last = StatsData()
                self.last_report_us = max(self.last_report_us, self.window_us)
                self.window_us = 0
        line = format_progress(
            self.last,
            cur,
            now_us=now_us,
            last_report_us=self.last_report_us,
            test_start_us=self.test_start_us,
            throttled=self.throttled,
            latency_limited=self.latency_limited,
            max_tries=self.max_tries,
            epoch_shift_us=self.epoch_shift_us,
        )
        self.last = cur.copy()
        self.last_report_us = now_us
        step = 1000000 * self.interval_s
        while step > 0 and now_us >= self.next_report_us:
            self.next_report_us += step
        if warm:
            head, sep, rest = line.partition(", ")
            line = f"{head} (warm-up){sep}{rest}"
        return line
