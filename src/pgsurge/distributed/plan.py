"""The layout of a multi-host run and its clocks, as plain data (no Dask).

The parent of the run (``runner.run``) derives every worker's spec as for
one machine with ``-j`` workers: pgbench's dealing of ``-c`` clients over
``-j`` workers, each client's PRNG state drawn by its global client
number, each worker's choose/throttle/sample streams by its global worker
number, ``-R`` split evenly over workers (pgbench's ``throttle_delay *
nthreads``). A multi-host run only deals those specs over the hosts, by
the same rule (the first ``workers mod hosts`` hosts get one more): so
``--random-seed`` gives every client the same stream whatever the layout,
and each host's share of ``-R`` is in proportion to its workers.

Each host runs on its own monotonic clock. The coordinator measures each
host's offset (host clock minus coordinator clock, from the probe with the
smallest round trip), gives each host the common start in its own clock
(``start + offset``, so that every host's ``-P`` intervals and series
start at the same instant), and maps the hosts' timestamps back by
subtracting the same integer offset: merged interval series line up
exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pgsurge.engine.pool import split_clients
from pgsurge.engine.worker import WorkerSpec
from pgsurge.stats.results import WorkerResult

__all__ = [
    "ClockProbe",
    "HostInfo",
    "best_offset",
    "deal_specs",
    "to_coordinator_clock",
]


def deal_specs(
    specs: Sequence[WorkerSpec], nhosts: int
) -> list[tuple[WorkerSpec, ...]]:
    """The workers of each host (contiguous, pgbench's dealing rule); no
    more hosts than workers are used."""
    used = min(nhosts, len(specs))
    return [
        tuple(specs[first : first + count])
        for first, count in split_clients(len(specs), used)
    ]


@dataclass(frozen=True, slots=True)
class ClockProbe:
    """One round trip: coordinator send/receive times and the host's clock
    read in between (µs, each on its own monotonic clock)."""

    sent_us: int
    host_us: int
    received_us: int

    @property
    def rtt_us(self) -> int:
        return self.received_us - self.sent_us

    @property
    def offset_us(self) -> int:
        """Host clock minus coordinator clock, assuming the host read its
        clock half way through the round trip (error at most rtt/2)."""
        return self.host_us - (self.sent_us + self.received_us) // 2


def best_offset(probes: Sequence[ClockProbe]) -> ClockProbe:
    """The probe with the smallest round trip (the tightest bound)."""
    if not probes:
        raise ValueError("no clock probes")
    return min(probes, key=lambda p: p.rtt_us)


def to_coordinator_clock(result: WorkerResult, offset_us: int) -> WorkerResult:
    """A host's worker result with its timestamps on the coordinator's
    clock (interval starts included, so that series of hosts merge)."""
    out = replace(result)
    for name in ("conn_start_us", "bench_start_us", "end_us"):
        setattr(out, name, getattr(result, name) - offset_us)
    out.intervals = []
    for iv in result.intervals:
        stats = iv.stats.copy()
        if stats.start_us:
            stats.start_us -= offset_us
        out.intervals.append(replace(iv, start_us=iv.start_us - offset_us, stats=stats))
    return out


@dataclass(slots=True)
class HostInfo:
    """One load host of a run, as the JSON result records it."""

    index: int
    address: str
    name: str
    workers: int
    clients: int
    #: host clock minus coordinator clock (µs), and the round trip it was
    #: measured with (its error is at most half of that)
    clock_offset_us: int = 0
    clock_rtt_us: int = 0
    #: how: "direct" (NTP-style over a connection of the host's own to
    #: the coordinator, ``clock``), "scheduler" (round trips through it)
    clock_method: str = "scheduler"
    lost: bool = False
    #: stopped before its end (another host was lost): its figures are
    #: its workers' last -P snapshots
    partial: bool = False
    #: the host's own figures (its workers merged), when it finished
    transactions: int = 0
    failed: int = 0
    latency_avg_ms: float | None = None
    tps: float | None = None
    cpu_s: float = 0.0
    #: the host's run-total latency histogram (``Histogram.to_dict``),
    #: when histograms were recorded: the run's is their exact merge
    latency_histogram: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "address": self.address,
            "name": self.name,
            "workers": self.workers,
            "clients": self.clients,
            "clock_offset_us": self.clock_offset_us,
            "clock_rtt_us": self.clock_rtt_us,
            "clock_error_us": (self.clock_rtt_us + 1) // 2,
            "clock_method": self.clock_method,
            "lost": self.lost,
            "partial": self.partial,
            "transactions": self.transactions,
            "failed": self.failed,
            "latency_avg_ms": self.latency_avg_ms,
            "tps": self.tps,
            "cpu_s": self.cpu_s,
            "latency_histogram": self.latency_histogram,
        }
