"""The coordinator of a multi-host run: ``pgsurge --dask ADDRESS|local:N``.

``runner.run`` prepares the run as for one machine (options, scripts, the
setup connection, every worker's spec and PRNG states) and hands the specs
to :func:`drive` (``cli`` passes it in: the runner knows nothing of Dask).
The coordinator then:

1. connects to the Dask scheduler (``local:N``: starts a local cluster of N
   single-threaded worker processes on loopback) and takes as load hosts
   the Dask workers that offer the ``pgsurge`` resource;
2. deals the worker specs over the hosts (``plan.deal_specs``) and submits
   one long-running :func:`~pgsurge.distributed.host.host_task` per host,
   pinned to it (``workers=[address]``, no other worker allowed, no retry:
   a task rescheduled elsewhere would start a second load);
3. when every host is ready (processes started, scripts compiled), measures
   each host's clock offset (best of several round trips through
   ``Client.run``) and publishes one common start a moment ahead, in each
   host's own clock; when every host has connected all its clients, says
   go, and every host starts at that instant;
4. prints the ``-P`` line of an interval once every host has reported it
   (``Worker.log_event`` on the run's topic, received with
   ``Client.subscribe_topic``), or, a grace period after the interval's
   end, without the late ones, marked ``hosts N/M``;
5. merges, interval by interval, the per-interval deltas (counts and
   latency histograms) the hosts stream with their ``-P`` events
   (``intervals``), when the run records histograms: the run's series;
6. merges the hosts' worker results exactly (counters, histograms, on the
   coordinator's clock) into one :class:`~pgsurge.stats.results.RunResult`
   with that series, which the runner reports as any run, with the hosts,
   their clock offsets and figures in the JSON.

A host whose Dask worker leaves the cluster, or that sends nothing (not
even its heartbeat) for a grace period, is lost: ``host … lost`` on
stderr. The other hosts are then stopped and return what they measured
(their workers' last ``-P`` snapshots: hosts always tick at least every
second), and the run ends as an aborted one (status 2) with that partial
merged result, the lost host's clients counted as aborted. A worker
failure on a host (a client that cannot connect, ``--exit-on-abort``)
ends the run as it would on one machine, after the other hosts are told
to stop. Ctrl-C stops every host.
Connection parameters (passwords included) travel inside the task's
arguments and are never printed or logged.
"""

from __future__ import annotations

import queue
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TextIO

from pgsurge.distributed.host import HostOutcome, host_task, monotonic_us, names
from pgsurge.distributed.intervals import decode_interval
from pgsurge.distributed.logs import collect_logs
from pgsurge.distributed.plan import (
    ClockProbe,
    HostInfo,
    best_offset,
    deal_specs,
    to_coordinator_clock,
)
from pgsurge.engine.pool import RunFailed
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import PROG, ExitStatus, PgsurgeError
from pgsurge.stats.counters import StatsData
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import RunFacts, RunResult, WorkerResult
from pgsurge.stats.series import IntervalStats, merge_series

__all__ = ["dask_driver", "drive"]

#: how long hosts may take to start their processes and compile
READY_TIMEOUT_S = 60.0
#: the common start is this far ahead of the moment it is published
START_LEAD_US = 2_000_000
#: clock probes per host (the one with the smallest round trip is kept)
CLOCK_PROBES = 5
#: a -P line waits this long after its interval for late hosts
PROGRESS_GRACE_US = 2_000_000
#: a host silent this long (it beats every second, whatever -P) is lost
LOSS_GRACE_S = 5.0
#: how long the other hosts may take to stop after a host was lost
STOP_WAIT_S = 5.0

#: a local cluster shares this machine with the load: its worker processes
#: must be allowed to have children (pgsurge's workers), and Dask's own
#: periodic chores that a pgsurge run does not need are off or rarer (the
#: statistical profiler samples a busy task's thread 100 times a second)
LOCAL_CLUSTER_CONFIG: dict[str, Any] = {
    "distributed.worker.daemon": False,
    "distributed.worker.profile.enabled": False,
    "distributed.scheduler.work-stealing": False,
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.admin.system-monitor.disk": False,
    "distributed.admin.tick.interval": "500ms",
    "distributed.worker.memory.monitor-interval": "1s",
}

INSTALL_HINT = "Install it with: pip install 'pgsurge[dask]'"
WORKER_HINT = (
    "Start each load host with: dask worker tcp://SCHEDULER:8786 "
    "--nthreads 1 --resources pgsurge=1"
)

Driver = Callable[[Sequence[WorkerSpec], RunFacts, TextIO], RunResult]
#: ``drive``'s observer of the hosts' interval deltas: (host index, the
#: delta on the coordinator's clock, whether it was streamed during the
#: run rather than taken from the host's final results)
IntervalHook = Callable[[int, IntervalStats, bool], None]


def dask_driver(address: str) -> Driver:
    """The runner's driver for ``--dask ADDRESS``; fails (status 1) when
    Dask's distributed package is not installed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise PgsurgeError(
            "--dask needs the Dask distributed package, which is not installed",
            hint=INSTALL_HINT,
        ) from None
    return partial(drive, address)


@contextmanager
def _client(address: str) -> Iterator[Any]:
    """A Dask client of ``address`` (``local:N``: of a new local cluster,
    closed at the end)."""
    import dask
    from distributed import Client, LocalCluster

    cluster = None
    try:
        if address.startswith("local:"):
            nworkers = int(address.removeprefix("local:"))
            with dask.config.set(LOCAL_CLUSTER_CONFIG):
                cluster = LocalCluster(
                    n_workers=nworkers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    resources={"pgsurge": 1},
                )
            client = Client(cluster)
            client.wait_for_workers(nworkers)
        else:
            client = Client(address, timeout="10s")
    except (OSError, TimeoutError) as e:
        if cluster is not None:
            cluster.close()
        raise PgsurgeError(
            f'could not connect to the Dask scheduler "{address}": {e}'
        ) from None
    try:
        yield client
    finally:
        with suppress(Exception):
            client.close()
        if cluster is not None:
            with suppress(Exception):
                cluster.close()


def _load_hosts(client: Any) -> list[tuple[str, str]]:
    """(address, name) of every Dask worker offering the pgsurge resource."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    hosts = [
        (addr, str(info.get("name", addr)))
        for addr, info in workers.items()
        if (info.get("resources") or {}).get("pgsurge", 0) >= 1
    ]
    if not hosts:
        raise PgsurgeError(
            f"no Dask worker offers the pgsurge resource ({len(workers)} workers)",
            hint=WORKER_HINT,
        )
    return sorted(hosts)


def _probe(client: Any, address: str) -> ClockProbe:
    probes = []
    for _ in range(CLOCK_PROBES):
        sent = monotonic_us()
        host_us = client.run(monotonic_us, workers=[address])[address]
        probes.append(ClockProbe(sent, int(host_us), monotonic_us()))
    return best_offset(probes)


@dataclass(slots=True)
class _Host:
    info: HostInfo
    future: Any
    last_seen: float
    #: the latest -P snapshot: tick, time (coordinator clock), stats
    tick: int = 0
    now_us: int = 0
    stats: StatsData = field(default_factory=StatsData)
    phase: str = "starting"
    outcome: HostOutcome | None = None
    #: the host's per-interval deltas by start (coordinator clock)
    series: dict[int, IntervalStats] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return not self.info.lost and self.outcome is None


class _Coordinator:
    def __init__(
        self,
        client: Any,
        facts: RunFacts,
        err: TextIO,
        run_id: str,
        on_interval: IntervalHook | None = None,
    ) -> None:
        self.client = client
        self.on_interval = on_interval
        self.facts = facts
        self.err = err
        self.run_id = run_id
        self.names = names(run_id)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.hosts: list[_Host] = []
        self.loss_grace_s = LOSS_GRACE_S
        self.started = False
        self.start_at = 0
        self.reporter: Any = None
        self.printed = 0
        #: after a host was lost: until when the others may take to stop
        self.stop_deadline = 0.0
        self.next_member_check = 0.0

    # -- messages ----------------------------------------------------------

    def on_event(self, event: tuple[float, dict[str, Any]]) -> None:
        """Client.subscribe_topic's handler (on the client's loop thread)."""
        self.events.put(event[1])

    def say(self, text: str) -> None:
        self.err.write(text)
        self.err.flush()

    def pump(self, timeout_s: float = 0.2) -> None:
        """Take in the hosts' events and finished tasks; find lost hosts."""
        try:
            msg: dict[str, Any] | None = self.events.get(timeout=timeout_s)
        except queue.Empty:
            msg = None
        while msg is not None:
            self.on_message(msg)
            try:
                msg = self.events.get_nowait()
            except queue.Empty:
                msg = None
        for host in self.hosts:
            if host.live and host.future.done():
                self.on_finished(host)
        now = time.monotonic()
        for host in self.hosts:
            if host.live and now - host.last_seen > self.loss_grace_s:
                self.lose(host, f"no word from it for {now - host.last_seen:.1f} s")
        self.check_members()
        if self.reporter is not None:
            self.progress()

    def on_message(self, msg: dict[str, Any]) -> None:
        index = int(msg.get("host", -1))
        if not 0 <= index < len(self.hosts):
            return
        host = self.hosts[index]
        if not host.live:
            # lost, or its results are in (a late event adds nothing)
            return
        host.last_seen = time.monotonic()
        kind = msg.get("kind")
        if kind in ("ready", "connected"):
            host.phase = str(kind)
        elif kind == "progress":
            tick = int(msg["tick"])
            if tick > host.tick:
                host.tick = tick
                host.now_us = int(msg["now_us"]) - host.info.clock_offset_us
                host.stats = StatsData.from_dict(msg["stats"])
            for data in msg.get("intervals", ()):
                self.add_interval(
                    host, decode_interval(data, host.info.clock_offset_us), True
                )

    def add_interval(self, host: _Host, iv: IntervalStats, streamed: bool) -> None:
        host.series[iv.start_us] = iv
        if self.on_interval is not None:
            self.on_interval(host.info.index, iv, streamed)

    def on_finished(self, host: _Host) -> None:
        """A host task ended: its result, or the end of the run."""
        try:
            outcome: HostOutcome = host.future.result()
        except Exception as e:
            outcome = HostOutcome("aborted", text=f"{type(e).__name__}: {e}\n")
        host.outcome = outcome
        host.last_seen = time.monotonic()
        match outcome.status:
            case "done" | "stopped":
                host.info.partial = outcome.status == "stopped"
                offset = host.info.clock_offset_us
                outcome.results = [
                    to_coordinator_clock(r, offset) for r in outcome.results
                ]
                outcome.connected_us -= offset
                # the intervals that were not streamed: those that ended
                # with a process's end (the last one of each), and any
                # whose event has not arrived yet
                for iv in merge_series([r.intervals for r in outcome.results]):
                    if iv.start_us not in host.series:
                        self.add_interval(host, iv, False)
                host.tick = 1 << 62
                total = StatsData()
                for r in outcome.results:
                    total.merge(r.total)
                host.stats = total
            case "fatal":
                # the worker printed its message on the host's stderr, or
                # left it to the parent (us)
                self.say(
                    outcome.text
                    or f"{PROG}: error: host {host.info.index} "
                    f"({host.info.address}) failed (its messages are on its "
                    "stderr)\n"
                )
                raise RunFailed(ExitStatus.ERROR)
            case _:
                if outcome.text:
                    self.say(outcome.text)
                self.say(
                    f"{PROG}: error: host {host.info.index} "
                    f"({host.info.name}) failed ({outcome.status})\n"
                )
                raise RunFailed(ExitStatus.RUN_ABORTED)

    def lose(self, host: _Host, why: str) -> None:
        """Give ``host`` up; stop the others, which return what they
        measured until then (the run's report is of that)."""
        host.info.lost = True
        self.say(
            f"{PROG}: error: host {host.info.index} ({host.info.address}) lost: {why}\n"
        )
        with suppress(Exception):
            self.client.cancel([host.future])
        if not self.started:
            raise RunFailed(ExitStatus.RUN_ABORTED)
        if not self.stop_deadline:
            self.stop_all()
            self.stop_deadline = time.monotonic() + STOP_WAIT_S

    def check_members(self) -> None:
        """A host whose Dask worker left the cluster is lost at once (a
        killed worker's connection to the scheduler closes)."""
        now = time.monotonic()
        if now < self.next_member_check:
            return
        self.next_member_check = now + 1.0
        try:
            present = set(self.client.scheduler_info()["workers"])
        except Exception:
            return  # the silence grace still applies
        for host in self.hosts:
            if host.live and host.info.address not in present:
                self.lose(host, "its Dask worker left the cluster")

    # -- phases ------------------------------------------------------------

    def wait_phase(self, phase: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(h.live and h.phase != phase for h in self.hosts):
            if time.monotonic() > deadline:
                late = [h.info.name for h in self.hosts if h.phase != phase]
                self.say(f"{PROG}: error: hosts not {phase}: {', '.join(late)}\n")
                raise RunFailed(ExitStatus.RUN_ABORTED)
            self.pump()

    def start(self, specs: Sequence[WorkerSpec]) -> None:
        """Offsets, the common start, and go once all hosts connected."""
        from distributed import Event, Variable

        for host in self.hosts:
            probe = _probe(self.client, host.info.address)
            host.info.clock_offset_us = probe.offset_us
            host.info.clock_rtt_us = probe.rtt_us
            host.last_seen = time.monotonic()
        cfg = specs[0].config
        self.start_at = monotonic_us() + START_LEAD_US
        starts: dict[str, int] = {
            str(h.info.index): self.start_at + h.info.clock_offset_us
            for h in self.hosts
        }
        starts["duration_us"] = (cfg.duration or 0) * 1_000_000
        Variable(self.names["start_at"], client=self.client).set(starts)
        Event(self.names["start"], client=self.client).set()
        self.say(
            f"{PROG}: dask: "
            + ", ".join(
                f"host {h.info.index} {h.info.address} ({h.info.clients} clients, "
                f"clock {h.info.clock_offset_us / 1000:+.3f} ms "
                f"± {h.info.clock_rtt_us / 2000:.3f})"
                for h in self.hosts
            )
            + "\n"
        )
        self.wait_phase("connected", READY_TIMEOUT_S)
        Event(self.names["go"], client=self.client).set()
        self.started = True
        if cfg.progress_s:
            from pgsurge.stats.progress import ProgressReporter

            shift = time.time_ns() // 1000 - monotonic_us()
            self.reporter = ProgressReporter.for_run(
                self.facts,
                self.start_at,
                epoch_shift_us=shift if cfg.progress_timestamp else None,
            )

    def progress(self) -> None:
        """The -P line of the next interval, when every host has reported
        it or its grace period is over."""
        reporter = self.reporter
        live = [h for h in self.hosts if not h.info.lost]
        if not any(h.live for h in self.hosts):
            return
        step = self.facts.progress_s * 1_000_000
        k = self.printed + 1
        have = [h for h in self.hosts if h.tick >= k and not h.info.lost]
        complete = len(have) == len(live)
        if not complete and monotonic_us() < self.start_at + k * step + (
            PROGRESS_GRACE_US
        ):
            return
        if complete:
            k = min(h.tick for h in live)
        merged = StatsData()
        for h in self.hosts:
            merged.merge(h.stats)
        pending = [h.now_us for h in have if h.live]
        now = max(pending) if pending else self.start_at + k * step
        line = reporter.report(merged, now)
        if len(have) < len(self.hosts):
            line += f", hosts {len(have)}/{len(self.hosts)}"
        self.say(line + "\n")
        self.printed = k

    def run(self, specs: Sequence[WorkerSpec]) -> RunResult:
        self.wait_phase("ready", READY_TIMEOUT_S)
        self.start(specs)
        while any(h.live for h in self.hosts):
            self.pump()
            if self.stop_deadline and time.monotonic() > self.stop_deadline:
                for host in self.hosts:
                    if host.live:
                        self.lose(host, "it did not stop when told")
        return self.merge()

    def merge(self) -> RunResult:
        results: list[WorkerResult] = []
        for host in self.hosts:
            if host.outcome is None:
                continue
            results.extend(host.outcome.results)
            _host_figures(host.info, host.outcome.results)
        if not results:
            self.say(f"{PROG}: error: no host finished the run\n")
            raise RunFailed(ExitStatus.RUN_ABORTED)
        result = RunResult.from_workers(results, self.facts)
        # pgbench's "initial connection time": from the first connection
        # attempt to the last host's last client connected (the hosts then
        # wait for the common start, which is not connection time)
        connected = [h.outcome.connected_us for h in self.hosts if h.outcome]
        first = min(r.conn_start_us for r in results)
        result.conn_elapsed_us = max(0, max(connected) - first)
        result.aborted_clients += sum(h.info.clients for h in self.hosts if h.info.lost)
        if any(h.info.lost or h.info.partial for h in self.hosts):
            # histograms and series of only some hosts would pass for the
            # run's: a partial run reports counters only
            result.histograms = None
            result.intervals = []
        elif result.intervals:
            # the series merged interval by interval from the hosts' deltas
            # (equal to the merge of every worker's series)
            result.intervals = merge_series(
                [list(h.series.values()) for h in self.hosts]
            )
        result.hosts = [h.info.to_dict() for h in self.hosts]
        return result

    def stop_all(self) -> None:
        from distributed import Event

        with suppress(Exception):
            Event(self.names["stop"], client=self.client).set()


def _host_figures(info: HostInfo, results: Sequence[WorkerResult]) -> None:
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


def _logs_after_run(
    client: Any,
    address: str,
    hosts: Sequence[_Host],
    groups: Sequence[Sequence[WorkerSpec]],
    err: TextIO,
) -> None:
    """-l: bring the hosts' files back (--dask-collect-logs), or say where
    they are (a local cluster writes them in our working directory)."""
    dest = groups[0][0].config.dask_collect_logs
    for host in hosts:
        if host.info.lost:
            err.write(
                f"{PROG}: error: the -l files of host {host.info.index} "
                f"({host.info.address}) stay on it: it was lost\n"
            )
    kept = [
        (h.info.address, group)
        for h, group in zip(hosts, groups, strict=False)
        if not h.info.lost
    ]
    if dest is not None:
        collect_logs(client, kept, dest, err)
    elif not address.startswith("local:"):
        err.write(
            f"{PROG}: dask: the -l files are on the hosts, in each Dask worker's "
            "working directory (--dask-collect-logs DIR brings them here)\n"
        )
    err.flush()


def drive(
    address: str,
    specs: Sequence[WorkerSpec],
    facts: RunFacts,
    err: TextIO,
    *,
    on_interval: IntervalHook | None = None,
) -> RunResult:
    """Run ``specs`` on the hosts of the Dask cluster at ``address``;
    ``on_interval`` sees every host's interval deltas (tests)."""
    with _client(address) as client:
        hosts = _load_hosts(client)
        groups = deal_specs(specs, len(hosts))
        if len(groups) < len(hosts):
            err.write(
                f"{PROG}: note: {len(specs)} workers (-j) use {len(groups)} of "
                f"the {len(hosts)} Dask hosts\n"
            )
        run_id = uuid.uuid4().hex[:16]
        coord = _Coordinator(client, facts, err, run_id, on_interval)
        client.subscribe_topic(coord.names["topic"], coord.on_event)
        try:
            for index, ((address_, name), group) in enumerate(
                zip(hosts, groups, strict=False)
            ):
                future = client.submit(
                    host_task,
                    run_id,
                    index,
                    group,
                    key=f"pgsurge-{run_id}-host-{index}",
                    workers=[address_],
                    allow_other_workers=False,
                    resources={"pgsurge": 1},
                    retries=0,
                    pure=False,
                )
                info = HostInfo(
                    index,
                    address_,
                    name,
                    workers=len(group),
                    clients=sum(s.nclients for s in group),
                )
                coord.hosts.append(_Host(info, future, time.monotonic()))
            result = coord.run(specs)
            if specs[0].config.log:
                _logs_after_run(client, address, coord.hosts, groups, err)
            return result
        except BaseException:
            coord.stop_all()
            raise
        finally:
            with suppress(Exception):
                client.unsubscribe_topic(coord.names["topic"])
            with suppress(Exception):
                client.cancel([h.future for h in coord.hosts if h.outcome is None])
            sys.stderr.flush()
