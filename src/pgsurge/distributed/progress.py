"""The ``-P`` lines of a multi-host run, from the hosts' tick snapshots.

Each host sends, for every ``-P`` tick all its workers passed, its
workers' cumulative figures at that tick (``host``); a host that fell
behind (stalled, its link slow) sends its ticks late, and one whose
workers skipped a tick (stopped for longer than an interval) has a gap.

Line ``k`` covers the interval ``[(k-1)P, kP)``; its label is ``kP``
exactly (after the common start), so labels only grow. It is printed
when every host still in the run has reported tick ``k``, or, once the
grace after the interval's end is over, from the hosts that have: the
figures of a host count in line ``k`` only when it reported both ticks
``k-1`` and ``k`` (a difference over several intervals would be summed
into one), and such a line says ``hosts j/n`` (an interval that no host
could give has no line). A late host's ticks are merged into the lines
not yet printed. The rate of a line is always that
interval's: the hosts' differences over one interval length.
"""

from __future__ import annotations

from pgsurge.stats.counters import StatsData
from pgsurge.stats.progress import format_progress
from pgsurge.stats.results import RunFacts

__all__ = ["ProgressBoard"]

#: "every tick from now on": a finished host's total holds for all of them
_END = 1 << 62


class ProgressBoard:
    """The hosts' snapshots by tick, and the lines printed so far."""

    def __init__(
        self,
        facts: RunFacts,
        nhosts: int,
        start_us: int,
        *,
        epoch_shift_us: int | None = None,
    ) -> None:
        self.facts = facts
        self.step_us = facts.progress_s * 1_000_000
        self.start_us = start_us
        self.epoch_shift_us = epoch_shift_us
        #: per host: tick -> cumulative figures (tick 0: nothing yet)
        self.snaps: list[dict[int, StatsData]] = [
            {0: StatsData()} for _ in range(nhosts)
        ]
        #: per host: the tick from which its final total holds
        self.final: list[tuple[int, StatsData] | None] = [None] * nhosts
        self.lost = [False] * nhosts
        self.printed = 0

    def add(self, host: int, tick: int, stats: StatsData) -> None:
        if tick > self.printed - 1:  # (older ones are of no more use)
            self.snaps[host][tick] = stats

    def finish(self, host: int, total: StatsData) -> None:
        """``host`` is done: ``total`` holds from the tick after its last."""
        last = max(self.snaps[host], default=self.printed)
        self.final[host] = (last + 1, total)

    def lose(self, host: int) -> None:
        self.lost[host] = True

    def _at(self, host: int, tick: int) -> StatsData | None:
        snap = self.snaps[host].get(tick)
        if snap is not None:
            return snap
        final = self.final[host]
        if final is not None and tick >= final[0]:
            return final[1]
        return None

    def lines(self, now_us: int, grace_us: int) -> list[str]:
        """The lines due at ``now_us`` (coordinator clock), in order."""
        out = []
        while True:
            k = self.printed + 1
            end = self.start_us + k * self.step_us
            if now_us < end:
                break
            hosts = [h for h in range(len(self.snaps)) if not self.lost[h]]
            have = [h for h in hosts if self._at(h, k) is not None]
            if len(have) < len(hosts) and now_us < end + grace_us:
                break
            line = self.line(k, have)
            if line is not None:  # (no host reported it: no rate to show)
                out.append(line)
            self.printed = k
            for snaps in self.snaps:
                for tick in [t for t in snaps if t < k]:
                    del snaps[tick]
        return out

    def line(self, k: int, have: list[int]) -> str | None:
        prev, cur = StatsData(), StatsData()
        counted = 0
        for h in have:
            before, after = self._at(h, k - 1), self._at(h, k)
            if before is None or after is None:
                continue
            prev.merge(before)
            cur.merge(after)
            counted += 1
        if not counted:
            return None
        facts = self.facts
        line = format_progress(
            prev,
            cur,
            now_us=self.start_us + k * self.step_us,
            last_report_us=self.start_us + (k - 1) * self.step_us,
            test_start_us=self.start_us,
            throttled=facts.throttled,
            latency_limited=facts.latency_limit_us != 0,
            max_tries=facts.max_tries,
            epoch_shift_us=self.epoch_shift_us,
        )
        if counted < len(self.snaps):
            line += f", hosts {counted}/{len(self.snaps)}"
        return line
