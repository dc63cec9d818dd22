"""The coordinator of a multi-host run: ``pgsurge --dask ADDRESS|local:N``.

``runner.run`` prepares the run as for one machine (options, scripts, the
setup connection, every worker's spec and PRNG states) and hands the specs
to :func:`drive` (``cli`` passes it in: the runner knows nothing of Dask).
The coordinator then:

1. connects to the Dask scheduler (``local:N``: starts a local cluster of N
   single-threaded worker processes on loopback) and takes as load hosts
   the Dask workers that offer the ``pgsurge`` resource;
2. starts its heartbeat to the hosts (``watch``), deals the worker specs
   over the hosts (``plan.deal_specs``) and submits one long-running
   :func:`~pgsurge.distributed.host.host_task` per host, pinned to it
   (``workers=[address]``, no other worker allowed, no retry: a task
   rescheduled elsewhere would start a second load). A task waits for
   its host while another run holds it (the ``pgsurge`` resource): the
   coordinator says so and waits;
3. when every host is ready (processes started, scripts compiled, its
   clock offset measured by NTP-style exchanges with the coordinator's
   own port, ``clock``; else by round trips through the scheduler),
   publishes one common start a moment ahead, in each host's own clock;
   when every host has connected all its clients, says go, and every
   host starts at that instant;
4. prints the ``-P`` lines from the hosts' tick snapshots (``progress``);
5. merges, interval by interval, the per-interval deltas (counts and
   latency histograms) the hosts stream with their ``-P`` events
   (``intervals``), when the run records histograms: the run's series;
6. merges the hosts' worker results exactly (counters, histograms, on the
   coordinator's clock) into one :class:`~pgsurge.stats.results.RunResult`
   with that series, which the runner reports as any run, with the hosts,
   their clock offsets and figures in the JSON.

Failures keep what was measured, as a local run does. A host whose Dask
worker leaves the cluster, or that sends nothing (not even its heartbeat)
for :data:`LOSS_GRACE_S`, is lost (``host … lost`` on stderr); when the
scheduler goes away, all are. What a lost host streamed counts
(``salvage``: its last snapshot, its intervals and histograms, its
clients as aborted); the other hosts stop gracefully and return their
results; the run is reported with status 2. A worker process that dies
on a host is named (through the host) and ends the run the same way.
The first SIGINT or SIGTERM stops every host gracefully and the report of
what ran follows, the run marked interrupted (the program then dies of
the signal, as a local run does); a second cancels what still runs, a
third ends the program at once. SIGHUP, or a signal before the start,
stops the hosts and ends the program by the signal. A host whose
coordinator falls silent (SIGKILL, a lost link) stops on its own
(``watch.COORDINATOR_GRACE_S``).

Connection parameters (passwords included) travel inside the task's
arguments (``host.Sealed``, never shown) and are never printed or logged;
the hosts' error messages come back and are printed with their names.
"""

from __future__ import annotations

import queue
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import suppress
from functools import partial
from typing import Any, TextIO

from pgsurge.distributed.clock import ClockServer
from pgsurge.distributed.cluster import (
    check_pgsurge,
    check_reachable,
    clear_text_peers,
    client_of,
    host_of,
    load_hosts,
    logs_after_run,
)
from pgsurge.distributed.cluster import probe as clock_probe
from pgsurge.distributed.host import (
    HostOutcome,
    Sealed,
    host_task,
    monotonic_us,
    names,
)
from pgsurge.distributed.intervals import decode_interval
from pgsurge.distributed.plan import (
    HostInfo,
    deal_specs,
    to_coordinator_clock,
)
from pgsurge.distributed.progress import ProgressBoard
from pgsurge.distributed.salvage import HostState, merge_hosts
from pgsurge.distributed.signals import Die, Signals, die_of
from pgsurge.distributed.watch import COORDINATOR_GRACE_S, Beat
from pgsurge.engine.pool import RunFailed
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import PROG, ExitStatus, PgsurgeError
from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.results import RunFacts, RunResult
from pgsurge.stats.series import IntervalStats, merge_series

__all__ = ["dask_driver", "drive"]

#: how long hosts may take to start their processes and compile
READY_TIMEOUT_S = 60.0
#: the common start is this far ahead of the moment it is published
START_LEAD_US = 2_000_000
#: a -P line waits this long after its interval for late hosts
PROGRESS_GRACE_US = 2_000_000
#: a host silent this long (it beats every second, whatever -P) is lost
LOSS_GRACE_S = 5.0
#: how long the hosts may take to stop when told (their workers' graceful
#: stop takes up to twice engine.interrupt.GRACE_S)
STOP_WAIT_S = 8.0
#: how long a finished host's last stderr lines may lag behind its result
TEXT_WAIT_S = 2.0
#: a host task not started after this long: say why the run waits
QUEUED_NOTE_S = 1.5

INSTALL_HINT = "Install it with: pip install 'pgsurge[dask]'"

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
    check_reachable(address)
    return partial(drive, address)


class _Coordinator:
    def __init__(
        self,
        client: Any,
        address: str,
        facts: RunFacts,
        err: TextIO,
        run_id: str,
        on_interval: IntervalHook | None = None,
    ) -> None:
        self.client = client
        self.address = address
        self.on_interval = on_interval
        self.facts = facts
        self.err = err
        self.run_id = run_id
        self.names = names(run_id)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.hosts: list[HostState] = []
        self.loss_grace_s = LOSS_GRACE_S
        self.started = False
        self.start_at = 0
        self.board: ProgressBoard | None = None
        #: after a host was lost or an interrupt: until when the others
        #: may take to stop
        self.stop_deadline = 0.0
        self.next_member_check = 0.0
        self.scheduler_lost = False
        self.beat: Beat | None = None
        self.signals = Signals()
        self.seen_signals = 0
        self.interrupted_by: int | None = None
        self.interrupted_at_us = 0
        self.waiting_said = False
        self.submitted = time.monotonic()
        self.stop_level = 0

    # -- messages ----------------------------------------------------------

    def on_event(self, event: tuple[float, dict[str, Any]]) -> None:
        """Client.subscribe_topic's handler (on the client's loop thread)."""
        self.events.put(event[1])

    def say(self, text: str) -> None:
        self.err.write(text)
        self.err.flush()

    def pump(self, timeout_s: float = 0.2) -> None:
        """Take in the hosts' events and finished tasks; find lost hosts;
        act on signals."""
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
        self.on_signals()
        self.check_scheduler()
        for host in self.hosts:
            if host.live and host.future.done():
                self.on_finished(host)
        now = time.monotonic()
        for host in self.hosts:
            silent = now - host.last_seen
            if host.live and host.phase != "queued" and silent > self.loss_grace_s:
                self.lose(host, f"no word from it for {silent:.1f} s")
        self.check_members()
        if self.board is not None:
            for line in self.board.lines(monotonic_us(), PROGRESS_GRACE_US):
                self.say(line + "\n")

    def on_message(self, msg: dict[str, Any]) -> None:
        index = int(msg.get("host", -1))
        if not 0 <= index < len(self.hosts):
            return
        host = self.hosts[index]
        kind = msg.get("kind")
        if kind == "text":  # (even from a host that is done: its last words)
            host.texts += 1
            self.relay_text(host, str(msg.get("text", "")))
            return
        if not host.live:
            # lost, or its results are in (a late event adds nothing)
            return
        host.last_seen = time.monotonic()
        offset = host.info.clock_offset_us
        if kind == "hello":
            host.phase = "started"
            host.last_seen = time.monotonic()
        elif kind == "ready":
            host.phase = "ready"
            if "clock_offset_us" in msg:
                host.clock = (int(msg["clock_offset_us"]), int(msg["clock_rtt_us"]))
        elif kind == "connected":
            host.phase = "connected"
            host.steady_us = int(msg.get("steady_us", 0)) - offset
            host.connected_us = int(msg.get("connected_us", 0)) - offset
        elif kind == "failed":
            # a worker of the host died: the others stop, as a local run's
            self.stop_all(1)
        elif kind == "progress":
            tick = int(msg["tick"])
            stats = StatsData.from_dict(msg["stats"])
            if tick > host.tick:
                host.tick = tick
                host.now_us = int(msg["now_us"]) - offset
                host.stats = stats
                if "per_script" in msg:
                    host.per_script = [
                        StatsData.from_dict(s) for s in msg["per_script"]
                    ]
                    host.per_command = [
                        [CommandStats.from_dict(c) for c in s]
                        for s in msg["per_command"]
                    ]
            if self.board is not None:
                self.board.add(index, tick, stats)
        for data in msg.get("intervals", ()):
            self.add_interval(host, decode_interval(data, offset), True)

    def relay_text(self, host: HostState, text: str) -> None:
        """A host's stderr lines, each with the host's name."""
        tag = f"{PROG}: host {host.info.index} ({host.info.name}): "
        for line in text.splitlines():
            self.say(tag + line.removeprefix(f"{PROG}: ") + "\n")

    def add_interval(self, host: HostState, iv: IntervalStats, streamed: bool) -> None:
        host.series[iv.start_us] = iv
        if self.on_interval is not None:
            self.on_interval(host.info.index, iv, streamed)

    def await_texts(self, host: HostState, count: int) -> None:
        """The host's text events up to ``count`` (they may come after the
        task's end), for a little while."""
        deadline = time.monotonic() + TEXT_WAIT_S
        while host.texts < count and time.monotonic() < deadline:
            try:
                self.on_message(self.events.get(timeout=0.1))
            except queue.Empty:
                pass

    def on_finished(self, host: HostState) -> None:
        """A host task ended: its result, or the end of the run."""
        try:
            outcome: HostOutcome = host.future.result()
        except Exception as e:
            if not self.check_scheduler():
                return  # (the future was cancelled with the scheduler)
            outcome = HostOutcome("aborted", text=f"{type(e).__name__}\n")
        self.await_texts(host, outcome.texts)
        match outcome.status:
            case "done" | "stopped":
                host.outcome = outcome
                host.last_seen = time.monotonic()
                host.info.partial = outcome.status == "stopped"
                offset = host.info.clock_offset_us
                outcome.results = [
                    to_coordinator_clock(r, offset) for r in outcome.results
                ]
                host.connected_us = outcome.connected_us - offset
                host.steady_us = outcome.steady_us - offset
                # the intervals that were not streamed: those that ended
                # with a process's end (the last one of each), and any
                # whose event has not arrived yet
                for iv in merge_series([r.intervals for r in outcome.results]):
                    if iv.start_us not in host.series:
                        self.add_interval(host, iv, False)
                total = StatsData()
                for r in outcome.results:
                    total.merge(r.total)
                host.stats = total
                if self.board is not None:
                    self.board.finish(host.info.index, total)
            case "fatal":
                host.outcome = outcome
                self.stop_all(2)
                # the worker printed its message (relayed), or left it to
                # the parent (us)
                if outcome.text:
                    self.relay_text(host, outcome.text)
                elif not outcome.texts:
                    self.say(
                        f"{PROG}: error: host {host.info.index} ({host.info.name}) "
                        "failed (its messages are on its stderr)\n"
                    )
                raise RunFailed(ExitStatus.ERROR)
            case "aborted":
                host.outcome = outcome
                self.stop_all(2)
                if outcome.text:
                    self.relay_text(host, outcome.text)
                self.say(
                    f"{PROG}: error: host {host.info.index} "
                    f"({host.info.name}) failed ({outcome.status})\n"
                )
                raise RunFailed(ExitStatus.RUN_ABORTED)
            case _:  # orphaned, stale: it stopped without us
                self.lose(host, f"its task ended ({outcome.status})")

    def lose(self, host: HostState, why: str, *, quiet: bool = False) -> None:
        """Give ``host`` up (what it streamed counts); stop the others,
        which return what they measured until then."""
        host.info.lost = True
        if self.board is not None:
            self.board.lose(host.info.index)
        if not quiet:
            self.say(
                f"{PROG}: error: host {host.info.index} ({host.info.name}, "
                f"{host.info.address}) lost: {why}\n"
            )
        if not self.scheduler_lost:
            with suppress(Exception):
                self.client.cancel([host.future])
        if not self.started:
            self.stop_all(2)
            raise RunFailed(ExitStatus.RUN_ABORTED)
        self.stop_all(1)

    def check_members(self) -> None:
        """A host whose Dask worker left the cluster is lost at once (a
        killed worker's connection to the scheduler closes); all are when
        the scheduler is gone."""
        now = time.monotonic()
        if now < self.next_member_check or self.scheduler_lost:
            return
        self.next_member_check = now + 1.0
        try:
            # asked of the scheduler itself: Client.scheduler_info() hands
            # back its cached identity when the scheduler does not answer,
            # and the client's own periodic refresh caches one without the
            # workers, so a dead scheduler looked like every host gone
            info = self.client.sync(
                self.client.scheduler.identity, n_workers=-1, callback_timeout=2
            )
            present = set(info["workers"])
        except Exception:
            return  # the silence grace still applies
        for host in self.hosts:
            if host.live and host.info.address not in present:
                self.lose(host, "its Dask worker left the cluster")
        self.check_queued(present)

    def check_scheduler(self) -> bool:
        """Whether the client is still connected to the scheduler; when
        it is not, every host is lost (what they streamed counts), and
        they stop on their own (``watch``)."""
        if self.scheduler_lost:
            return False
        if self.client.status in ("running", "newly-created"):
            return True
        self.scheduler_lost = True
        self.say(
            f"{PROG}: error: the Dask scheduler {self.address} was lost; "
            f"the hosts stop on their own within {COORDINATOR_GRACE_S:.0f} s\n"
        )
        for host in self.hosts:
            if host.live:
                self.lose(host, "", quiet=True)
        return False

    def check_queued(self, present: set[str]) -> None:
        """Say once why the run waits when some hosts' tasks have not
        started after a while: their workers are busy with another run."""
        queued = [h for h in self.hosts if h.live and h.phase == "queued"]
        if self.waiting_said or not queued:
            return
        if time.monotonic() - self.submitted < QUEUED_NOTE_S:
            return
        with suppress(Exception):
            busy = self.client.processing([h.info.address for h in queued])
            others = [
                h
                for h in queued
                if any(
                    not str(k).startswith(f"pgsurge-{self.run_id}")
                    for k in busy.get(h.info.address, ())
                )
            ]
            if others:
                self.waiting_said = True
                self.say(
                    f"{PROG}: dask: waiting for {len(others)} load hosts: "
                    "busy with another run\n"
                )

    # -- signals -----------------------------------------------------------

    def on_signals(self) -> None:
        """What the signals received since the last look call for: SIGHUP
        (or any before the start) stops the hosts now and ends the program
        by the signal; the first SIGINT/SIGTERM of a started run stops them
        gracefully (the report of what ran follows), the second cancels
        what they still run."""
        received = self.signals.received
        while self.seen_signals < len(received):
            signum = received[self.seen_signals]
            self.seen_signals += 1
            if signum == signal.SIGHUP or not self.started:
                self.stop_all(2)
                raise Die(signum)
            if self.interrupted_by is None:
                self.interrupted_by = signum
                self.interrupted_at_us = monotonic_us()
                self.stop_all(1)
            else:
                self.stop_all(2)

    # -- phases ------------------------------------------------------------

    def wait_phase(self, phase: str, timeout_s: float) -> None:
        """Every live host at ``phase``; the time allowed counts once
        every task has started (a queued one waits, with no limit, for
        the run that keeps its host busy to end)."""
        deadline = 0.0
        while any(h.live and h.phase != phase for h in self.hosts):
            if any(h.live and h.phase == "queued" for h in self.hosts):
                deadline = 0.0
            elif not deadline:
                deadline = time.monotonic() + timeout_s
            elif time.monotonic() > deadline:
                late = [h.info.name for h in self.hosts if h.phase != phase]
                self.say(f"{PROG}: error: hosts not {phase}: {', '.join(late)}\n")
                self.stop_all(2)
                raise RunFailed(ExitStatus.RUN_ABORTED)
            self.pump()

    def start(self, specs: Sequence[WorkerSpec]) -> None:
        """Offsets, the common start, and go once all hosts connected."""
        from distributed import Event, Variable

        for host in self.hosts:
            if host.clock is not None:  # measured by the host, directly
                host.info.clock_offset_us, host.info.clock_rtt_us = host.clock
                host.info.clock_method = "direct"
            else:
                probe = clock_probe(self.client, host.info.address)
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
                f"host {h.info.index} {h.info.address} ({h.info.clients} "
                f"client{'' if h.info.clients == 1 else 's'}, "
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
            shift = time.time_ns() // 1000 - monotonic_us()
            self.board = ProgressBoard(
                self.facts,
                len(self.hosts),
                self.start_at,
                epoch_shift_us=shift if cfg.progress_timestamp else None,
            )

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
        result = merge_hosts(self.hosts, self.facts, self.start_at)
        if self.interrupted_by is not None:
            result.interrupted_by = signal.Signals(self.interrupted_by).name
            result.interrupted_after_us = max(
                0, self.interrupted_at_us - result.bench_start_us
            )
        return result

    def stop_all(self, level: int) -> None:
        """Tell every host to stop (1: gracefully, 2: now), once."""
        if level <= self.stop_level:
            return
        self.stop_level = level
        self.stop_deadline = time.monotonic() + STOP_WAIT_S
        if self.scheduler_lost:
            return
        if self.beat is not None:
            self.beat.stop_hosts(level)
        from distributed import Event

        with suppress(Exception):
            Event(self.names["stop"], client=self.client).set()


def _clock_server(client: Any, address: str) -> ClockServer | None:
    """The coordinator's clock port, on the address it reaches the
    scheduler from (None when that cannot be told: the hosts' offsets
    are then measured through the scheduler)."""
    if address.startswith("local:"):
        local = "127.0.0.1"
    else:
        try:
            local = host_of(str(client.scheduler_comm.comm.local_address))
        except Exception:
            return None
    try:
        return ClockServer(local)
    except OSError:
        return None


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
    try:
        return _drive(address, specs, facts, err, on_interval)
    except Die as die:
        err.flush()
        die_of(die.signum)
        raise RunFailed(ExitStatus.ERROR) from None  # (not reached)


def _drive(
    address: str,
    specs: Sequence[WorkerSpec],
    facts: RunFacts,
    err: TextIO,
    on_interval: IntervalHook | None,
) -> RunResult:
    from distributed import Variable

    with client_of(address) as client:
        hosts = load_hosts(client)
        groups = deal_specs(specs, len(hosts))
        check_pgsurge(client, hosts[: len(groups)])
        if len(groups) < len(hosts):
            err.write(
                f"{PROG}: note: {len(specs)} workers (-j) use {len(groups)} of "
                f"the {len(hosts)} Dask hosts\n"
            )
        if any(s.password for s in specs):
            peers = clear_text_peers(address, [a for a, _ in hosts])
            if peers:
                err.write(
                    f"{PROG}: warning: the connection password travels in clear "
                    f"over tcp:// to {', '.join(peers)}: use a tls:// cluster\n"
                )
        run_id = uuid.uuid4().hex[:16]
        coord = _Coordinator(client, address, facts, err, run_id, on_interval)
        client.subscribe_topic(coord.names["topic"], coord.on_event)
        coord.beat = Beat(
            Variable(coord.names["beat"], client=client),
            partial(client.log_event, coord.names["beats"]),
        )
        coord.beat.start()
        clocks = _clock_server(client, address)
        # the specs travel masked, their pads apart (host.Sealed)
        sealed = [Sealed(group) for group in groups]
        pads = Variable(coord.names["pad"], client=client)
        try:
            pads.set({str(i): s.pad for i, s in enumerate(sealed)})
            with coord.signals:
                for index, ((address_, name), group) in enumerate(
                    zip(hosts, groups, strict=False)
                ):
                    future = client.submit(
                        host_task,
                        run_id,
                        index,
                        sealed[index],
                        None if clocks is None else clocks.address,
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
                    coord.hosts.append(
                        HostState(
                            info,
                            future,
                            time.monotonic(),
                            first_worker=group[0].worker_id,
                        )
                    )
                coord.submitted = time.monotonic()
                result = coord.run(specs)
            if specs[0].config.log and not coord.scheduler_lost:
                infos = [h.info for h in coord.hosts]
                logs_after_run(client, address, infos, groups, err)
            return result
        except BaseException:
            coord.stop_all(2)
            raise
        finally:
            if clocks is not None:
                clocks.close()
            coord.beat.close()
            if not coord.scheduler_lost:
                with suppress(Exception):
                    pads.delete()
                with suppress(Exception):
                    client.unsubscribe_topic(coord.names["topic"])
                with suppress(Exception):
                    client.cancel([h.future for h in coord.hosts if h.outcome is None])
            sys.stderr.flush()
