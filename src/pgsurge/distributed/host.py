"""The task that runs on each load host of a multi-host run (a Dask worker).

One long-running task per host (see ``coordinator``). It never runs an
event loop of its own in the Dask worker's thread: it starts pgsurge's
worker processes for its share of the run (``engine.pool``, the processes
of a local run, with their specs unchanged but for this host's clocks)
and relays between them and the coordinator, blocking on their pipes
(which releases the GIL, so the Dask worker's own event loop stays
responsive). The barriers are those of a local run, with the
coordinator's word in between:

1. start the processes, wait for their READY; say ``ready``;
2. wait for the coordinator's ``start`` (the common start on this host's
   clock, measured by the coordinator meanwhile); send STEADY with it,
   wait for every process's CONNECTED (all clients connected); say
   ``connected``;
3. wait for the coordinator's ``go`` (every host connected), then for the
   common start on this host's clock, and send GO;
4. relay each ``-P`` tick (the processes' cumulative stats merged) as a
   ``progress`` event, with the series intervals that every process has
   closed, merged (``intervals.HostSeries``: the per-interval counts and
   latency histograms, when the run records them); return the workers'
   results.

Events go to the coordinator through ``Worker.log_event`` on the run's
topic (the client subscribes to it); the coordinator's word comes back
through Dask ``Event``/``Variable`` objects named after the run. A
``heartbeat`` event every second tells the coordinator the host is alive.
When the run's ``stop`` event is set (Ctrl-C, another host failed), the
processes are terminated. A task that finds the run already started (Dask
rescheduled it after its worker was lost) returns at once: it never
starts a second load.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from pgsurge.distributed.intervals import HostSeries, encode_interval
from pgsurge.engine.pool import WorkerPool
from pgsurge.engine.protocol import (
    Connected,
    Crash,
    Done,
    ExitOnAbort,
    Fatal,
    Go,
    Progress,
    Ready,
    Steady,
    WorkerMessage,
)
from pgsurge.engine.worker import WorkerSpec
from pgsurge.stats.counters import StatsData
from pgsurge.stats.results import WorkerResult

__all__ = ["HostOutcome", "host_task", "monotonic_us", "names"]

#: seconds between heartbeats (and between looks at the stop event)
HEARTBEAT_S = 1.0


def monotonic_us() -> int:
    """This host's clock (the coordinator's clock probes call it)."""
    return time.monotonic_ns() // 1000


def names(run_id: str) -> dict[str, str]:
    """The Dask names of a run: its event topic and coordination objects."""
    base = f"pgsurge-{run_id}"
    return {
        "topic": base,
        "start": f"{base}-start",
        "start_at": f"{base}-start-at",
        "go": f"{base}-go",
        "stop": f"{base}-stop",
    }


@dataclass(slots=True)
class HostOutcome:
    """What a host task returns (pickled back to the coordinator).

    ``status``: ``done`` (``results`` holds every worker's), ``stopped``
    (the coordinator said stop: ``results`` holds what was measured until
    then, see ``_Relay.partial``), ``fatal`` (pgbench's ``pg_fatal`` in a
    worker: ``text`` to print, the run ends with status 1), ``aborted``
    (``--exit-on-abort``, a crash or a lost worker process: status 2),
    ``stale`` (the run had started before this task did).
    """

    status: str
    results: list[WorkerResult] = field(default_factory=list)
    text: str = ""
    #: when every client of the host was connected (host clock, µs)
    connected_us: int = 0


class _Stop(Exception):
    def __init__(self, outcome: HostOutcome) -> None:
        self.outcome = outcome


def _aborted(text: str) -> _Stop:
    return _Stop(HostOutcome("aborted", text=f"{text}\n"))


class _Relay:
    """This host's processes and its line to the coordinator."""

    def __init__(
        self,
        host: int,
        pool: WorkerPool,
        emit: Callable[[dict[str, Any]], None],
        stop_set: Callable[[], bool],
    ) -> None:
        self.host = host
        self.pool = pool
        self.emit = emit
        self.stop_set = stop_set
        self.next_beat = 0.0
        n = len(pool.pipes)
        #: each process's latest -P snapshot and its time, and the results
        #: of those done: what a stopped host returns
        self.snaps = [StatsData() for _ in range(n)]
        self.nows = [0] * n
        self.done: dict[int, WorkerResult] = {}
        self.go_us = 0

    def beat(self) -> None:
        """A heartbeat once a second, and a look at the stop event."""
        now = time.monotonic()
        if now < self.next_beat:
            return
        self.next_beat = now + HEARTBEAT_S
        self.emit({"kind": "heartbeat", "host": self.host})
        if self.stop_set():
            raise _Stop(HostOutcome("stopped"))

    def recv(self, pipe: Connection) -> WorkerMessage:
        try:
            msg: WorkerMessage = pipe.recv()
        except (EOFError, OSError):
            raise _Stop(
                HostOutcome("aborted", text="a worker process died\n")
            ) from None
        match msg:
            case Crash(text):
                raise _Stop(HostOutcome("aborted", text=text))
            case Fatal(text):
                raise _Stop(HostOutcome("fatal", text=text or ""))
            case ExitOnAbort():
                raise _Stop(HostOutcome("aborted"))
        return msg

    def barrier(self, expected: type[Ready | Connected]) -> None:
        """Every process's ``expected`` message, beating meanwhile."""
        pipes = self.pool.pipes
        waiting = set(range(len(pipes)))
        while waiting:
            self.beat()
            for pipe in wait([pipes[i] for i in waiting], HEARTBEAT_S / 2):
                index = pipes.index(pipe)  # type: ignore[arg-type]
                msg = self.recv(pipes[index])
                if not isinstance(msg, expected):
                    raise _aborted(f"unexpected {msg!r}")
                waiting.discard(index)

    def await_event(self, is_set: Callable[[float], bool]) -> None:
        while not is_set(HEARTBEAT_S / 2):
            self.beat()

    def results(self) -> list[WorkerResult]:
        """Relay -P ticks until every process is done; their results."""
        pipes = self.pool.pipes
        n = len(pipes)
        ticks = [0] * n
        nows, snaps, results = self.nows, self.snaps, self.done
        series = HostSeries(n)
        sent = 0
        pending = set(range(n))
        while pending:
            self.beat()
            for pipe in wait([pipes[i] for i in pending], HEARTBEAT_S / 2):
                index = pipes.index(pipe)  # type: ignore[arg-type]
                match self.recv(pipes[index]):
                    case Progress(tick, now, stats, intervals):
                        ticks[index], nows[index], snaps[index] = tick, now, stats
                        series.add(index, intervals)
                    case Done(result):
                        results[index] = result
                        snaps[index] = result.total
                        ticks[index] = 1 << 62
                        pending.discard(index)
                        series.finish(index, result.intervals)
                    case other:
                        raise _Stop(
                            HostOutcome("aborted", text=f"unexpected {other!r}\n")
                        )
            tick = min(ticks)
            if pending and tick > sent:
                merged = StatsData()
                for snap in snaps:
                    merged.merge(snap)
                now = max(nows[i] for i in pending)
                event: dict[str, Any] = {
                    "kind": "progress",
                    "host": self.host,
                    "tick": tick,
                    "now_us": now,
                    "stats": merged.to_dict(),
                }
                # (those completed by a process's end without a tick after
                # it reach the coordinator with the results)
                complete = series.take_complete()
                if complete:
                    event["intervals"] = [encode_interval(iv) for iv in complete]
                self.emit(event)
                sent = tick
        return [results[i] for i in range(n)]

    def partial(self, specs: Sequence[WorkerSpec]) -> list[WorkerResult]:
        """What was measured when the run was stopped: the results of the
        processes done, the last -P snapshot of the others (counters only:
        no histograms, no per-command figures)."""
        out = []
        for i, spec in enumerate(specs):
            if i in self.done:
                out.append(self.done[i])
                continue
            result = WorkerResult(spec.worker_id, spec.nclients, total=self.snaps[i])
            result.conn_start_us = result.bench_start_us = self.go_us
            result.end_us = max(self.nows[i], self.go_us)
            result.client_tx_counts = [0] * spec.nclients
            out.append(result)
        return out


def _allow_children() -> None:
    """Dask runs a nanny's worker as a daemonic process by default, and
    ``multiprocessing`` refuses to start children from one (they could be
    orphaned). The workers kill themselves when their parent dies (the
    kernel's parent-death signal, see ``engine.pool``), so lift it."""
    me: Any = multiprocessing.current_process()
    if me.daemon:
        me._config["daemon"] = False


#: the Dask worker's periodic callbacks paused while a host task runs: its
#: statistical profiler samples the frames of a running task's thread 100
#: times a second, in the Dask worker process, beside the load
_PAUSED_CALLBACKS = ("profile", "profile-cycle")


def _pause_profiler(worker: Any) -> Callable[[], None]:
    """Pause the worker's profiler (on its event loop); the resume function."""
    callbacks = [
        pc
        for name, pc in getattr(worker, "periodic_callbacks", {}).items()
        if name in _PAUSED_CALLBACKS and pc.is_running()
    ]
    for pc in callbacks:
        worker.loop.add_callback(pc.stop)

    def resume() -> None:
        for pc in callbacks:
            worker.loop.add_callback(pc.start)

    return resume


def host_task(run_id: str, host: int, specs: Sequence[WorkerSpec]) -> HostOutcome:
    """The task of one host; see the module docstring."""
    from distributed import Event, get_worker

    worker = get_worker()
    n = names(run_id)
    topic = n["topic"]
    start_ev, go_ev, stop_ev = Event(n["start"]), Event(n["go"]), Event(n["stop"])
    if start_ev.is_set() or stop_ev.is_set():
        return HostOutcome("stale")

    def emit(msg: dict[str, Any]) -> None:
        worker.log_event(topic, msg)

    # -l timestamps: Unix time on this host's clock; a -P tick every second
    # at least, so that a stopped host can tell what it measured
    shift = time.time_ns() // 1000 - monotonic_us()
    specs = [
        replace(
            s,
            epoch_shift_us=shift,
            snapshot_s=s.snapshot_s or 1,
            stream_intervals=True,
        )
        for s in specs
    ]
    _allow_children()
    resume = _pause_profiler(worker)
    try:
        return _host(host, specs, emit, start_ev, go_ev, stop_ev, n["start_at"])
    finally:
        resume()


def _host(
    host: int,
    specs: Sequence[WorkerSpec],
    emit: Callable[[dict[str, Any]], None],
    start_ev: Any,
    go_ev: Any,
    stop_ev: Any,
    start_at_name: str,
) -> HostOutcome:
    from distributed import Variable

    pool = WorkerPool(specs)
    relay = _Relay(host, pool, emit, stop_ev.is_set)
    try:
        relay.barrier(Ready)
        emit({"kind": "ready", "host": host})
        relay.await_event(lambda t: bool(start_ev.wait(t)))
        starts: dict[str, int] = Variable(start_at_name).get()
        start_us = starts[str(host)]
        end_us = start_us + starts["duration_us"] if starts["duration_us"] else 0
        pool.send_all(Steady(start_us, end_us))
        relay.barrier(Connected)
        connected_us = monotonic_us()
        emit({"kind": "connected", "host": host})
        relay.await_event(lambda t: bool(go_ev.wait(t)))
        delay = start_us - monotonic_us()
        if delay > 0:
            time.sleep(delay / 1e6)
        relay.go_us = monotonic_us()
        pool.send_all(Go())
        results = relay.results()
    except _Stop as stop:
        pool.stop()
        if stop.outcome.status == "stopped" and relay.go_us:
            stop.outcome.results = relay.partial(specs)
        emit({"kind": stop.outcome.status, "host": host, "text": stop.outcome.text})
        return stop.outcome
    except BaseException:
        pool.stop()
        raise
    pool.join()
    return HostOutcome("done", results, connected_us=connected_us)
