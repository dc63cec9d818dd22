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
of the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgsurge.distributed.plan import HostInfo
from pgsurge.stats.counters import StatsData
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import WorkerResult
from pgsurge.stats.series import IntervalStats, LatencyHistograms

__all__ = ["host_figures", "lost_host_result"]


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
) -> WorkerResult:
    """A lost host's share of the run (coordinator clock): its last
    snapshot, its streamed intervals and their histograms (with
    ``shape``'s per-script and per-command lists, empty: another host's
    histograms, to merge with)."""
    result = WorkerResult(worker_id, info.clients, total=last.copy())
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
