"""What a multi-host run keeps of a host, whatever became of it.

A host that finished (or stopped when told) returns its workers'
results. A lost one (its Dask worker killed, its machine cut off, the
scheduler gone) returns nothing, but it streamed while it ran: its last
``-P`` snapshot (every second at least: its counters), its ``connected``
event (when it sent STEADY and when its clients were connected) and the
series intervals it closed (with their latency histograms, when the run
records them). :func:`lost_host_result` makes one worker result of those,
on the coordinator's clock, its clients counted as aborted, as a local
run counts a dead worker's. :func:`host_figures` fills a host's own line
of the JSON; :func:`merge_hosts` the run's result of all of them
(``HostState``: what the coordinator holds of a host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pgsurge.distributed.host import HostOutcome
from pgsurge.distributed.plan import HostInfo
from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import RunFacts, RunResult, WorkerResult
from pgsurge.stats.series import IntervalStats, LatencyHistograms, merge_series

__all__ = ["HostState", "host_figures", "lost_host_result", "merge_hosts"]


@dataclass(slots=True)
class HostState:
    """What the coordinator holds of one host while the run goes on."""

    info: HostInfo
    future: Any
    last_seen: float
    #: the latest -P snapshot: tick, time (coordinator clock), stats
    tick: int = 0
    now_us: int = 0
    stats: StatsData = field(default_factory=StatsData)
    #: the per-script and (-r) per-command figures of that snapshot
    per_script: list[StatsData] = field(default_factory=list)
    per_command: list[list[CommandStats]] = field(default_factory=list)
    #: queued (its task waits for the pgsurge resource), started, ready,
    #: connected
    phase: str = "queued"
    outcome: HostOutcome | None = None
    #: the host's per-interval deltas by start (coordinator clock)
    series: dict[int, IntervalStats] = field(default_factory=dict)
    #: when it sent STEADY and had every client connected (coordinator clock)
    steady_us: int = 0
    connected_us: int = 0
    #: the text events printed
    texts: int = 0
    #: the global number of its first worker
    first_worker: int = 0
    #: its clock offset and round trip, measured directly (``clock``)
    clock: tuple[int, int] | None = None

    @property
    def live(self) -> bool:
        return not self.info.lost and self.outcome is None


def lost_host_result(
    info: HostInfo,
    worker_id: int,
    last: StatsData,
    series: Sequence[IntervalStats],
    *,
    conn_start_us: int,
    go_us: int,
    end_us: int,
    shape: LatencyHistograms | None = None,
    per_script: Sequence[StatsData] = (),
    per_command: Sequence[Sequence[CommandStats]] = (),
) -> WorkerResult:
    """A lost host's share of the run (coordinator clock): its last
    snapshot (with that snapshot's per-script and per-command figures),
    its streamed intervals and their histograms (with ``shape``'s
    per-script and per-command lists, empty: another host's histograms,
    to merge with; the intervals carry no per-script histograms)."""
    result = WorkerResult(worker_id, info.clients, total=last.copy())
    result.per_script = [s.copy() for s in per_script]
    result.per_command = [[c.copy() for c in s] for s in per_command]
    result.aborted_clients = info.clients
    result.client_tx_counts = [0] * info.clients
    result.conn_start_us = conn_start_us
    result.bench_start_us = go_us
    result.end_us = max(end_us, go_us)
    result.abort_messages = [f"host {info.index} ({info.name}) lost"]
    ordered = sorted(series, key=lambda iv: iv.start_us)
    result.intervals = ordered
    if ordered and ordered[0].latency:
        digits = ordered[0].latency_hist().digits
        hists = LatencyHistograms(digits, Histogram(digits), Histogram(digits))
        if shape is not None:
            hists.per_script = [Histogram(digits) for _ in shape.per_script]
            hists.per_command = [
                [Histogram(digits) for _ in s] for s in shape.per_command
            ]
        for iv in ordered:
            hists.latency.merge(iv.latency_hist())
            hists.lag.merge(iv.lag_hist())
        result.histograms = hists
    return result


def host_figures(info: HostInfo, results: Sequence[WorkerResult]) -> None:
    """The host's own figures (its workers merged) into ``info``."""
    if not results:
        return
    total = StatsData()
    for r in results:
        total.merge(r.total)
    info.transactions = total.cnt
    info.failed = total.failures
    if total.latency.count:
        info.latency_avg_ms = total.latency.sum / total.latency.count / 1000.0
    span = max(r.end_us for r in results) - min(r.bench_start_us for r in results)
    info.tps = total.cnt * 1e6 / span if span > 0 else None
    info.cpu_s = sum(r.cpu_user_s + r.cpu_sys_s for r in results)
    hists = [r.histograms.latency for r in results if r.histograms is not None]
    if hists:
        merged = Histogram(hists[0].digits)
        for h in hists:
            merged.merge(h)
        info.latency_histogram = merged.to_dict()


def merge_hosts(
    hosts: Sequence[HostState], facts: RunFacts, start_at: int
) -> RunResult:
    """The run's result: the hosts' worker results, a lost host's made of
    what it streamed (``start_at``: the common start)."""
    shape = next(
        (
            r.histograms
            for h in hosts
            if h.outcome is not None
            for r in h.outcome.results
            if r.histograms is not None
        ),
        None,
    )
    results: list[WorkerResult] = []
    for host in hosts:
        if host.outcome is not None:
            mine = host.outcome.results
        else:  # lost: what it streamed
            mine = [
                lost_host_result(
                    host.info,
                    host.first_worker,
                    host.stats,
                    list(host.series.values()),
                    conn_start_us=host.steady_us or start_at,
                    go_us=start_at,
                    end_us=host.now_us,
                    shape=shape,
                    per_script=host.per_script,
                    per_command=host.per_command,
                )
            ]
        results.extend(mine)
        host_figures(host.info, mine)
    result = RunResult.from_workers(results, facts)
    # pgbench's "initial connection time": from the first connection
    # attempt to the last host's last client connected (the hosts then
    # wait for the common start, which is not connection time)
    connected = [h.connected_us for h in hosts if h.connected_us]
    first = min(r.conn_start_us for r in results)
    result.conn_elapsed_us = max(0, max(connected, default=first) - first)
    lost = [h for h in hosts if h.info.lost]
    if result.intervals:
        # the series merged interval by interval from the hosts' deltas
        # (equal to the merge of every worker's series); a lost host
        # streamed its intervals up to a point: those after it are the
        # surviving hosts' only, and say so (hosts k/n)
        result.intervals = merge_series([list(h.series.values()) for h in hosts])
        for iv in result.intervals:
            missing = sum(1 for h in lost if iv.start_us not in h.series)
            if missing:
                iv.hosts = (len(hosts) - missing, len(hosts))
    result.hosts = [h.info.to_dict() for h in hosts]
    return result
