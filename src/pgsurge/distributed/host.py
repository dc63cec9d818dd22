"""The task that runs on each load host of a multi-host run (a Dask worker).

One long-running task per host (see ``coordinator``). It never runs an
event loop of its own in the Dask worker's thread: it starts pgsurge's
worker processes for its share of the run (``engine.pool``, the processes
of a local run, with their specs unchanged but for this host's clocks)
and relays between them and the coordinator, blocking on their pipes
(which releases the GIL, so the Dask worker's own event loop stays
responsive). The barriers are those of a local run, with the
coordinator's word in between:

1. start the processes, wait for their READY; measure this host's clock
   offset with the coordinator (``clock``); say ``ready`` with it;
2. wait for the coordinator's ``start`` (the common start on this host's
   clock, measured by the coordinator meanwhile); send STEADY with it,
   wait for every process's CONNECTED (all clients connected); say
   ``connected``;
3. wait for the coordinator's ``go`` (every host connected), then for the
   common start on this host's clock, and send GO;
4. relay each ``-P`` tick that every process has passed (their snapshots
   of that tick merged) as a ``progress`` event, with the series
   intervals that every process has closed, merged
   (``intervals.HostSeries``); return the workers' results.

Events go to the coordinator through ``Worker.log_event`` on the run's
topic (the client subscribes to it); the coordinator's word comes back
through Dask ``Event``/``Variable`` objects named after the run. A
``heartbeat`` event every second tells the coordinator the host is alive;
the coordinator's own heartbeat and stop requests come through the run's
``beats`` topic and ``beat`` variable (``watch``). The workers' stderr
(their clients' error messages, a failed connection's) is relayed as
``text`` events, which the coordinator prints with the host's name.

Stopping, as a local run's parent does (``engine.interrupt``): when the
coordinator asks (Ctrl-C, another host lost or failed), the workers stop
starting transactions, those in flight finish, and their complete
results come back; after ``GRACE_S`` what still runs is cancelled, and a
worker silent ``GRACE_S`` later is killed and counted as dead with its
last snapshot. A worker that dies on its own is named, its clients count
as aborted with its last snapshot, the others stop, and the coordinator
is told (``failed``) to stop the other hosts. When the coordinator has
been silent for ``watch.COORDINATOR_GRACE_S``, the host cancels what its
clients run, closes their connections and ends its workers on its own.

A task that finds the run already started (Dask rescheduled it after its
worker was lost) returns at once: it never starts a second load.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from typing import Any

from pgsurge.distributed.clock import exchange
from pgsurge.distributed.intervals import HostSeries, encode_interval
from pgsurge.distributed.watch import Watch
from pgsurge.engine.interrupt import GRACE_S, STOP_SIGNAL, describe_exit
from pgsurge.engine.pool import WorkerPool
from pgsurge.engine.protocol import (
    Connected,
    Crash,
    Detail,
    Done,
    ExitOnAbort,
    Fatal,
    Go,
    Progress,
    Ready,
    Steady,
    Stop,
    WorkerMessage,
)
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import PROG
from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.results import WorkerResult

__all__ = ["HostOutcome", "Sealed", "host_task", "monotonic_us", "names"]

#: seconds between heartbeats (and between looks at the coordinator's word)
HEARTBEAT_S = 1.0
#: the most bytes of the workers' stderr relayed in one event
TEXT_CHUNK = 16384
#: how long a host waits for the pad of its specs (set before its task)
PAD_TIMEOUT_S = 30


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
        "beat": f"{base}-beat",
        "beats": f"{base}-beats",
        "pad": f"{base}-pad",
    }


def build() -> str:
    """This pgsurge's version and a fingerprint of what a host unpickles
    (the fields of a worker's spec and of the run's options): a host whose
    build differs would run the coordinator's specs with other code."""
    import dataclasses
    import hashlib

    from pgsurge import __version__
    from pgsurge.config import RunConfig

    shape = [f.name for t in (WorkerSpec, RunConfig) for f in dataclasses.fields(t)]
    digest = hashlib.sha256(" ".join(shape).encode()).hexdigest()[:8]
    return f"{__version__} (specs {digest})"


class Sealed:
    """A host's worker specs in the task's arguments. The specs hold the
    connection parameters, passwords included, and Dask may show a task's
    arguments (a failed task's log line, its repr) or, when a host cannot
    unpickle the task (an old pgsurge there), log the pickled bytes
    themselves. So they travel pickled and masked by a one-time pad of
    random bytes (``pad``), which is not pickled with them: the
    coordinator hands it over apart, in the run's ``pad`` variable
    (:func:`names`), and a host opens the specs with it only once it has
    found its own :func:`build` the coordinator's."""

    __slots__ = ("blob", "build", "pad")

    def __init__(self, specs: Sequence[WorkerSpec]) -> None:
        import pickle

        self.build = build()
        plain = pickle.dumps(tuple(specs), protocol=pickle.HIGHEST_PROTOCOL)
        self.pad = os.urandom(len(plain))
        self.blob = _xor(plain, self.pad)

    def __getstate__(self) -> tuple[str, bytes]:
        return self.build, self.blob  # (never the pad)

    def __setstate__(self, state: tuple[str, bytes]) -> None:
        self.build, self.blob = state
        self.pad = b""

    def open(self, pad: bytes) -> tuple[WorkerSpec, ...]:
        """The specs, with the pad the coordinator handed over."""
        import pickle

        if len(pad) != len(self.blob):
            raise ValueError("not the pad of these specs")
        specs: tuple[WorkerSpec, ...] = pickle.loads(_xor(self.blob, pad))
        return specs

    def __repr__(self) -> str:
        return "<pgsurge worker specs>"

    __str__ = __repr__


def _xor(data: bytes, pad: bytes) -> bytes:
    n = len(data)
    return (int.from_bytes(data, "big") ^ int.from_bytes(pad, "big")).to_bytes(n, "big")


@dataclass(slots=True)
class HostOutcome:
    """What a host task returns (pickled back to the coordinator).

    ``status``: ``done`` (``results`` holds every worker's, a dead one's
    made up from its last snapshot), ``stopped`` (the coordinator said
    stop: ``results`` holds what was measured until then, or nothing
    before the start), ``fatal`` (pgbench's ``pg_fatal`` in a worker, or
    this host's pgsurge is not the coordinator's build:
    ``text`` to print, the run ends with status 1), ``aborted``
    (``--exit-on-abort``, a crash: status 2), ``orphaned`` (the
    coordinator fell silent: the host stopped on its own), ``stale`` (the
    run had started before this task did).
    """

    status: str
    results: list[WorkerResult] = field(default_factory=list)
    text: str = ""
    #: when the host sent STEADY and when all its clients were connected
    #: (host clock, µs)
    steady_us: int = 0
    connected_us: int = 0
    #: how many ``text`` events the host sent (the coordinator prints them
    #: all before it acts on the outcome)
    texts: int = 0


class _Stop(Exception):
    def __init__(self, outcome: HostOutcome) -> None:
        self.outcome = outcome


class _Orphaned(Exception):
    """The coordinator has been silent for the grace period."""


class _Relay:
    """This host's processes and its line to the coordinator."""

    def __init__(
        self,
        host: int,
        pool: WorkerPool,
        emit: Callable[[dict[str, Any]], None],
        watch: Watch,
        ids: Sequence[int],
    ) -> None:
        self.host = host
        self.ids = list(ids)
        self.pool = pool
        self._emit = emit
        self.watch = watch
        self.next_beat = 0.0
        n = len(pool.pipes)
        #: each process's snapshots by tick not yet relayed, its latest
        #: snapshot and its time, and the results of those done
        self.ticks: list[dict[int, StatsData]] = [{} for _ in range(n)]
        #: each process's per-script and per-command figures by tick, and
        #: its latest (a done one's final)
        self.tick_details: list[dict[int, Detail]] = [{} for _ in range(n)]
        self.details: list[Detail | None] = [None] * n
        self.last = [0] * n
        self.snaps = [StatsData() for _ in range(n)]
        self.nows = [0] * n
        self.done: dict[int, WorkerResult] = {}
        self.pending = set(range(n))
        self.go_us = 0
        self.texts = 0
        self._partial = b""
        #: the graceful stop: 0 none, 1 asked to finish, 2 Stop sent, 3 kill
        self.stop_phase = 0
        self.stop_deadline = 0.0
        self.stopped_by_coordinator = False

    def emit(self, msg: dict[str, Any]) -> None:
        msg["host"] = self.host
        self._emit(msg)

    # -- the workers' stderr -------------------------------------------------

    def relay_text(self, final: bool = False) -> None:
        """The workers' complete lines (all of it when ``final``) to this
        host's stderr and to the coordinator."""
        relay = self.pool.relay
        if relay is None:
            return
        data = self._partial + relay.read()
        cut = len(data) if final else data.rfind(b"\n") + 1
        data, self._partial = data[:cut], data[cut:]
        for first in range(0, len(data), TEXT_CHUNK):
            chunk = data[first : first + TEXT_CHUNK]
            with _quiet():
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            self.emit({"kind": "text", "text": chunk.decode("utf-8", "replace")})
            self.texts += 1

    def say(self, text: str) -> None:
        """A line of this host's own for the coordinator to print."""
        self.emit({"kind": "text", "text": text})
        self.texts += 1

    # -- the coordinator's word ----------------------------------------------

    def beat(self) -> None:
        """A heartbeat once a second, the workers' stderr, and a look at
        the coordinator's word."""
        self.relay_text()
        if self.watch.orphaned:
            raise _Orphaned
        level = self.watch.stop_level
        if level:
            if not self.go_us:
                raise _Stop(HostOutcome("stopped"))
            self.stopped_by_coordinator = True
            self.begin_stop(level)
        now = time.monotonic()
        if self.stop_phase and now >= self.stop_deadline:
            self.escalate()
        if now < self.next_beat:
            return
        self.next_beat = now + HEARTBEAT_S
        self.emit({"kind": "heartbeat"})

    def begin_stop(self, level: int) -> None:
        """Stop the workers as an interrupted local run does: level 1,
        finish the transactions in flight; level 2, cancel them now."""
        if self.stop_phase == 0:
            self.stop_phase = 1
            self.stop_deadline = time.monotonic() + GRACE_S
            for i in self.pending:
                with _quiet():
                    os.kill(self.pool.procs[i].pid, STOP_SIGNAL)
        if level >= 2 and self.stop_phase == 1:
            self.stop_deadline = 0.0
            self.escalate()

    def escalate(self) -> None:
        """The next step of the stop, its time having come."""
        self.stop_phase += 1
        self.stop_deadline = time.monotonic() + GRACE_S
        for i in sorted(self.pending):
            if self.stop_phase == 2:
                with _quiet():
                    self.pool.pipes[i].send(Stop())
            else:
                self.pool.procs[i].kill()

    # -- the workers' messages -----------------------------------------------

    def recv(self, index: int) -> WorkerMessage | None:
        """``index``'s next message; None when it died."""
        try:
            msg: WorkerMessage = self.pool.pipes[index].recv()
        except (EOFError, OSError):
            return None
        match msg:
            case Crash(text):
                raise _Stop(HostOutcome("aborted", text=text))
            case Fatal(text):
                raise _Stop(HostOutcome("fatal", text=text or ""))
            case ExitOnAbort():
                raise _Stop(HostOutcome("aborted"))
        return msg

    def died(self, index: int) -> None:
        """Worker ``index`` died: named, counted with its last snapshot,
        the others stopped (and the coordinator told to stop the rest)."""
        proc = self.pool.procs[index]
        proc.join(1.0)
        if self.stop_phase < 3:  # (not one we killed: it is said below)
            how = describe_exit(proc.exitcode)
        else:
            how = "it did not stop when told, killed"
        self.relay_text(final=True)
        self.say(f"{PROG}: error: worker {index} (pid {proc.pid}) died: {how}\n")
        self.done[index] = _dead_result(
            self.pool.nclients[index],
            self.ids[index],
            self.snaps[index],
            self.go_us,
            max(self.nows[index], self.go_us),
            self.details[index],
        )
        self.pending.discard(index)
        if self.stop_phase == 0:
            self.emit({"kind": "failed"})
            self.begin_stop(1)

    def barrier(self, expected: type[Ready | Connected]) -> None:
        """Every process's ``expected`` message, beating meanwhile."""
        pipes = self.pool.pipes
        waiting = set(range(len(pipes)))
        while waiting:
            self.beat()
            for pipe in wait([pipes[i] for i in waiting], HEARTBEAT_S / 2):
                index = pipes.index(pipe)
                msg = self.recv(index)
                if msg is None:
                    proc = self.pool.procs[index]
                    proc.join(1.0)
                    self.relay_text(final=True)
                    raise _Stop(
                        HostOutcome(
                            "aborted",
                            text=f"{PROG}: error: worker {index} (pid {proc.pid}) "
                            f"died: {describe_exit(proc.exitcode)}\n",
                        )
                    )
                if not isinstance(msg, expected):
                    raise _Stop(HostOutcome("aborted", text=f"unexpected {msg!r}\n"))
                waiting.discard(index)

    def await_event(self, is_set: Callable[[float], bool]) -> None:
        while not is_set(HEARTBEAT_S / 2):
            self.beat()

    def results(self) -> list[WorkerResult]:
        """Relay -P ticks until every process is done; their results."""
        pipes = self.pool.pipes
        n = len(pipes)
        series = HostSeries(n)
        sent = 0
        while self.pending:
            self.beat()
            ready = wait([pipes[i] for i in self.pending], HEARTBEAT_S / 2)
            for pipe in ready:
                index = pipes.index(pipe)
                match self.recv(index):
                    case None:
                        self.died(index)
                        series.finish(index, [])
                    case Progress(tick, now, stats, intervals, detail):
                        self.ticks[index][tick] = stats
                        if detail is not None:
                            self.tick_details[index][tick] = detail
                            self.details[index] = detail
                        self.last[index] = tick
                        self.nows[index], self.snaps[index] = now, stats
                        series.add(index, intervals)
                    case Done(result):
                        self.done[index] = result
                        self.snaps[index] = result.total
                        self.details[index] = (result.per_script, result.per_command)
                        self.pending.discard(index)
                        series.finish(index, result.intervals)
                    case other:
                        raise _Stop(
                            HostOutcome("aborted", text=f"unexpected {other!r}\n")
                        )
            if self.pending:
                sent = self.send_ticks(sent, series)
        return [self.done[i] for i in range(n)]

    def send_ticks(self, sent: int, series: HostSeries) -> int:
        """A ``progress`` event for each tick after ``sent`` that every
        running process has passed (a tick that one of them skipped,
        stalled, is skipped: its figures would span several intervals);
        the last tick sent."""
        upto = min(self.last[i] for i in self.pending)
        events = []
        for tick in range(sent + 1, upto + 1):
            if any(tick not in self.ticks[i] for i in self.pending):
                continue
            merged = StatsData()
            for i, snap in enumerate(self.snaps):
                merged.merge(self.ticks[i][tick] if i in self.pending else snap)
            event = {
                "kind": "progress",
                "tick": tick,
                "now_us": max(self.nows[i] for i in self.pending),
                "stats": merged.to_dict(),
            }
            detail = _merge_details(
                [
                    self.tick_details[i].get(tick) if i in self.pending else d
                    for i, d in enumerate(self.details)
                ]
            )
            if detail is not None:
                event["per_script"] = [s.to_dict() for s in detail[0]]
                event["per_command"] = [[c.to_dict() for c in s] for s in detail[1]]
            events.append(event)
        if upto > sent:
            for i in self.pending:
                for tick in [t for t in self.ticks[i] if t <= upto]:
                    del self.ticks[i][tick]
                    self.tick_details[i].pop(tick, None)
        complete = series.take_complete()
        if complete:
            if not events:
                events.append({"kind": "intervals"})
            # (those completed by a process's end without a tick after it
            # reach the coordinator with the results)
            events[-1]["intervals"] = [encode_interval(iv) for iv in complete]
        for event in events:
            self.emit(event)
        return max(sent, upto)


class _quiet:
    """Ignore an OSError (a process or pipe that went away meanwhile)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError)


def _merge_details(details: Sequence[Detail | None]) -> Detail | None:
    """The workers' per-script and per-command figures added up; None
    when one of them has none (a tick it did not report them at)."""
    if not details or any(d is None for d in details):
        return None
    first = details[0]
    assert first is not None
    per_script = [StatsData() for _ in first[0]]
    per_command = [[CommandStats() for _ in s] for s in first[1]]
    for d in details:
        assert d is not None
        for acc, s in zip(per_script, d[0], strict=True):
            acc.merge(s)
        for accs, cmds in zip(per_command, d[1], strict=True):
            for acc_c, c in zip(accs, cmds, strict=True):
                acc_c.merge(c)
    return per_script, per_command


def _dead_result(
    nclients: int,
    worker_id: int,
    last: StatsData,
    go_us: int,
    when_us: int,
    detail: Detail | None = None,
) -> WorkerResult:
    """A dead worker's share: its clients aborted, with the figures of its
    last snapshot (its per-script and per-command ones too, when it sent
    them)."""
    result = WorkerResult(worker_id, nclients, total=last)
    if detail is not None:
        result.per_script, result.per_command = detail
    result.aborted_clients = nclients
    result.client_tx_counts = [0] * nclients
    result.conn_start_us = result.bench_start_us = go_us
    result.end_us = when_us
    result.abort_messages = [f"worker {worker_id} died"]
    return result


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


def host_task(
    run_id: str,
    host: int,
    sealed: Sealed,
    clock_at: tuple[str, int] | None = None,
) -> HostOutcome:
    """The task of one host; see the module docstring."""
    from distributed import Event, Variable, get_client, get_worker

    worker = get_worker()
    n = names(run_id)
    topic = n["topic"]
    mine = build()
    if sealed.build != mine:  # (before its specs are unpickled)
        return HostOutcome(
            "fatal",
            text=f"{PROG}: error: this host runs pgsurge {mine}, the coordinator "
            f"{sealed.build}: install the same pgsurge on every load host\n",
        )
    start_ev, go_ev, stop_ev = Event(n["start"]), Event(n["go"]), Event(n["stop"])
    if start_ev.is_set() or stop_ev.is_set():
        return HostOutcome("stale")

    def emit(msg: dict[str, Any]) -> None:
        worker.log_event(topic, msg)

    emit({"kind": "hello", "host": host})
    # -l timestamps: Unix time on this host's clock; a -P tick every second
    # at least, so that a stopped host can tell what it measured
    shift = time.time_ns() // 1000 - monotonic_us()
    try:
        pads: dict[str, bytes] = Variable(n["pad"]).get(timeout=PAD_TIMEOUT_S)
        pad = pads[str(host)]
    except Exception:
        return HostOutcome(
            "aborted",
            text=f"{PROG}: error: the coordinator's key to this host's share "
            "of the run did not come\n",
        )
    try:
        opened = sealed.open(pad)
    except Exception as e:  # (its message might quote what it read)
        return HostOutcome(
            "aborted",
            text=f"{PROG}: error: could not read this host's share of the run: "
            f"{type(e).__name__}\n",
        )
    specs = [
        replace(
            s,
            epoch_shift_us=shift,
            snapshot_s=s.snapshot_s or 1,
            stream_intervals=True,
        )
        for s in opened
    ]
    _allow_children()
    resume = _pause_profiler(worker)
    client = get_client()
    watch = Watch(
        Variable(n["beat"]),
        subscribe=lambda handler: client.subscribe_topic(n["beats"], handler),
    )
    watch.start()
    try:
        return _host(host, specs, emit, watch, start_ev, go_ev, n["start_at"], clock_at)
    except Exception as e:  # never a traceback with the task's arguments
        return HostOutcome("aborted", text=f"{PROG}: error: {type(e).__name__}\n")
    finally:
        watch.close()
        with suppress(Exception):
            client.unsubscribe_topic(n["beats"])
        resume()


def _host(
    host: int,
    specs: Sequence[WorkerSpec],
    emit: Callable[[dict[str, Any]], None],
    watch: Watch,
    start_ev: Any,
    go_ev: Any,
    start_at_name: str,
    clock_at: tuple[str, int] | None,
) -> HostOutcome:
    from distributed import Variable

    try:
        pool = WorkerPool(specs, relay_stderr=True)
    except OSError as e:  # (out of memory, of processes: say which)
        return HostOutcome(
            "aborted", text=f"{PROG}: error: could not start the workers: {e}\n"
        )
    relay = _Relay(host, pool, emit, watch, [s.worker_id for s in specs])
    steady_us = connected_us = 0
    try:
        relay.barrier(Ready)
        ready: dict[str, Any] = {"kind": "ready"}
        clock = exchange(clock_at) if clock_at is not None else None
        if clock is not None:
            ready["clock_offset_us"], ready["clock_rtt_us"] = clock
        relay.emit(ready)
        relay.await_event(lambda t: bool(start_ev.wait(t)))
        starts: dict[str, int] = Variable(start_at_name).get()
        start_us = starts[str(host)]
        end_us = start_us + starts["duration_us"] if starts["duration_us"] else 0
        steady_us = monotonic_us()
        pool.send_all(Steady(start_us, end_us))
        relay.barrier(Connected)
        connected_us = monotonic_us()
        relay.emit(
            {"kind": "connected", "steady_us": steady_us, "connected_us": connected_us}
        )
        relay.await_event(lambda t: bool(go_ev.wait(t)))
        delay = start_us - monotonic_us()
        if delay > 0:
            time.sleep(delay / 1e6)
        relay.go_us = monotonic_us()
        pool.send_all(Go())
        results = relay.results()
    except _Orphaned:
        _abandon(pool, started=bool(relay.go_us))
        return HostOutcome("orphaned")
    except _Stop as stop:
        pool.stop()
        relay.relay_text(final=True)
        stop.outcome.texts = relay.texts
        relay.emit({"kind": stop.outcome.status, "text": stop.outcome.text})
        return stop.outcome
    except BaseException:
        pool.stop()
        raise
    pool.join()
    relay.relay_text(final=True)
    if pool.relay is not None:
        pool.relay.close()
    status = "stopped" if relay.stopped_by_coordinator else "done"
    return HostOutcome(
        status,
        results,
        steady_us=steady_us,
        connected_us=connected_us,
        texts=relay.texts,
    )


def _abandon(pool: WorkerPool, *, started: bool) -> None:
    """The coordinator is gone: cancel what the clients run and close
    their connections (the Stop message), then end the workers (before
    the start, at once: their connections are idle)."""
    for pipe in pool.pipes if started else ():
        with _quiet():
            pipe.send(Stop())
    deadline = time.monotonic() + GRACE_S
    for proc in pool.procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    pool.stop()
    if pool.relay is not None:
        pool.relay.close()
