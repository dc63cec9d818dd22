"""A started run's workers, from the start-up barriers to the merged result.

Steps 4 to 6 of :mod:`pgsurge.runner`, on this machine's worker processes
(:func:`drive_local`, the default driver):

* the start-up barriers (:func:`_start`): every worker says READY, the
  parent sends STEADY (the run's start time: the clients connect), every
  worker says it is connected, the parent sends GO, so that every client
  starts together and the initial connection time is measured apart from
  the benchmark;
* during the run (:func:`_collect`), the workers' cumulative snapshots,
  merged into pgbench's progress line for all clients (``-P``, on stderr)
  or the live panel, once every worker has passed a tick;
* at the end (:func:`_merge`), the workers' results merged into the run's.

With the live panel up, the workers' fd 2 is a pipe that the parent reads
(:class:`_Echo`): their lines, and the parent's own during the run, are
printed above the panel, so that the panel's redraws neither erase them nor
leave pieces of itself between them.

A worker that dies (the OOM killer's SIGKILL) is named with how it ended;
the others stop gracefully and the result is what the parent received: the
dead worker's clients count as aborted, with its last progress figures.
A signal that would kill pgbench (SIGHUP) kills the workers first and the
parent then dies of it; SIGINT and SIGTERM stop the run gracefully
(``pgsurge.engine.interrupt``).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TextIO

from pgsurge.config import RunConfig
from pgsurge.deferred import in_main_thread
from pgsurge.engine import threaded
from pgsurge.engine.forked import PipeEnd, wait
from pgsurge.engine.interrupt import ParentStop, describe_exit, inherited_ignore
from pgsurge.engine.pool import RunFailed, StderrRelay, WorkerPool
from pgsurge.engine.protocol import (
    Connected,
    Crash,
    Done,
    Fatal,
    Go,
    ParentMessage,
    Progress,
    Ready,
    Steady,
    Stop,
    WorkerMessage,
)
from pgsurge.engine.worker import WorkerSpec, wants_histograms
from pgsurge.errors import PROG, ExitStatus, PgsurgeError
from pgsurge.report.live import proc_cpu_seconds
from pgsurge.runner.setup import clock_us, epoch_shift_us
from pgsurge.stats.counters import StatsData
from pgsurge.stats.results import RunFacts, RunResult, WorkerResult

if TYPE_CHECKING:
    from pgsurge.insight import Monitor
    from pgsurge.report.live_panel import LivePanel
    from pgsurge.stats.progress import ProgressReporter

__all__ = ["drive", "drive_local", "writer"]

#: signals whose default action kills pgbench, threads and all, and that
#: do not interrupt a run gracefully (SIGINT and SIGTERM do: ParentStop)
_KILLING_SIGNALS = (signal.SIGHUP,)


class _Sink(Protocol):
    """Where the parent's messages go: a text stream, or :class:`_Echo`."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> None: ...


def writer(stream: _Sink) -> Callable[[str], None]:
    """A function that writes to ``stream`` and flushes it (for the insight
    monitor, which writes from its own thread)."""

    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write


def drive_local(
    specs: Sequence[WorkerSpec],
    facts: RunFacts,
    err: TextIO,
    *,
    show_live: bool = False,
    monitor: Monitor | None = None,
) -> RunResult:
    """The default driver: the workers are this machine's processes."""
    try:
        workers = WorkerPool(
            specs,
            relay_stderr=show_live,
            threads=threaded.wanted(specs, show_live=show_live),
        )
    except OSError as exc:  # pgbench: "could not create thread: %m"
        raise PgsurgeError(
            f"could not start worker process: {os.strerror(exc.errno or 0)}",
            hint='Raise the open-file limit ("ulimit -n") or use fewer -j.'
            if exc.errno == errno.EMFILE
            else None,
        ) from None
    echo = _Echo(workers.relay, err)
    try:
        with _stop_workers_on_signal(workers), _parent_stop(workers) as stopper:
            result = drive(
                workers,
                specs[0].config,
                facts,
                echo,
                stopper=stopper,
                show_live=show_live,
                monitor=monitor,
            )
    except BaseException:
        workers.stop()
        raise
    else:
        workers.join()
    finally:
        echo.close()
    return result


def drive(
    workers: WorkerPool,
    cfg: RunConfig,
    facts: RunFacts,
    err: TextIO | _Echo,
    *,
    stopper: ParentStop | None = None,
    show_live: bool = False,
    monitor: Monitor | None = None,
) -> RunResult:
    """The barriers, the progress lines (or the live panel) and the results
    of a started run.

    A worker that dies, or an interrupt (``stopper``), stops the others
    gracefully; the result is then what the parent received: a dead
    worker counts its clients as aborted, with its last progress figures.
    """
    echo = err if isinstance(err, _Echo) else _Echo(None, err)
    start_us = _start(workers, cfg, echo, stopper, monitor)
    got = _Received.at_start(len(workers.pipes), start_us)
    got.connected_us = clock_us()
    display = _Display.open(workers, cfg, facts, echo, start_us, show_live, monitor)
    echo.panel = display.panel
    try:
        _collect(workers, got, echo, stopper, display)
    finally:
        echo.panel = None
        display.close()
        # what came after the last message, below where the panel was
        echo.pump()
    return _merge(workers, got, facts, start_us, stopper)


# -- the phases of a run ---------------------------------------------------------


def _start(
    workers: WorkerPool,
    cfg: RunConfig,
    err: _Echo,
    stopper: ParentStop | None,
    monitor: Monitor | None,
) -> int:
    """The start-up barriers (READY, STEADY, connected, GO); the run's start
    time, the zero of its progress ticks."""
    _barrier(workers, Ready, err, stopper)
    start_us = clock_us()
    # --warmup: the measured window opens at one instant for every worker,
    # and -T counts from there
    window_us = start_us + cfg.warmup * 1000000 if cfg.warmup else 0
    end_us = (window_us or start_us) + cfg.duration * 1000000 if cfg.duration else 0
    workers.send_all(Steady(start_us, end_us, window_us))
    connected = _barrier(workers, Connected, err, stopper)
    if monitor is not None:  # the run's backends, from libpq at connect
        pids = [pid for m in connected if isinstance(m, Connected) for pid in m.pids]
        monitor.go(pids, start_us, writer(err), window_us)
    # the parent counts the run as started before the first worker can
    # start it: a signal in between stops the run with its report, never
    # kills it without one (the workers stop gracefully from READY on, and
    # GO is on every pipe before any Stop the parent may send next)
    if stopper is not None:
        stopper.start_run()
    workers.send_all(Go())
    return start_us


class _Received:
    """What the parent holds of each worker (by index) while the run goes on.

    A plain class, not a dataclass: every run imports it, and generated
    methods would cost start-up time and buy nothing for this
    working state (never compared, copied or printed).
    """

    __slots__ = (
        "connected_us",
        "dead",
        "nows",
        "pending",
        "results",
        "shown",
        "snapshots",
        "ticks",
    )

    #: the last progress tick each worker sent (sys.maxsize once it ended)
    ticks: list[int]
    #: when each worker took its last snapshot
    nows: list[int]
    #: each worker's last cumulative figures (its total once done)
    snapshots: list[StatsData]
    #: the workers still running
    pending: set[int]
    results: dict[int, WorkerResult]
    #: worker -> when its death was seen
    dead: dict[int, int]
    #: the last tick shown
    shown: int
    #: when the parent had every worker's Connected (just after GO)
    connected_us: int

    def __init__(
        self,
        ticks: list[int],
        nows: list[int],
        snapshots: list[StatsData],
        pending: set[int],
    ) -> None:
        self.ticks = ticks
        self.nows = nows
        self.snapshots = snapshots
        self.pending = pending
        self.results = {}
        self.dead = {}
        self.shown = 0
        self.connected_us = 0

    @classmethod
    def at_start(cls, n: int, start_us: int) -> _Received:
        return cls(
            ticks=[0] * n,
            nows=[start_us] * n,
            snapshots=[StatsData() for _ in range(n)],
            pending=set(range(n)),
        )

    def ended(self, index: int) -> None:
        self.ticks[index] = sys.maxsize
        self.pending.discard(index)

    def shown_at(self) -> int:
        """The time of the figures shown once every running worker passed a
        tick: the earliest of their snapshots. pgbench reads all threads'
        counters at one moment; here each worker snapshots at its own tick,
        and one that was late (a stall) must not move the line past the
        others' snapshots: the next interval would be short and hold a
        whole interval of their transactions (issue 21's ``136373.1 tps``)."""
        return min(self.nows[i] for i in self.pending)

    def merged(self) -> StatsData:
        total = StatsData()
        for snap in self.snapshots:
            total.merge(snap)
        return total


class _Display:
    """Where the merged figures go during the run: pgbench's progress line
    (``-P``, with the insight monitor's suffix), else the live panel, else
    nowhere."""

    def __init__(
        self,
        err: _Sink,
        workers: WorkerPool,
        reporter: ProgressReporter | None,
        panel: LivePanel | None,
        monitor: Monitor | None,
    ) -> None:
        self._err = err
        self._workers = workers
        self._reporter = reporter
        self._panel = panel
        self._monitor = monitor

    @property
    def panel(self) -> LivePanel | None:
        return self._panel

    @classmethod
    def open(
        cls,
        workers: WorkerPool,
        cfg: RunConfig,
        facts: RunFacts,
        err: _Echo,
        start_us: int,
        show_live: bool,
        monitor: Monitor | None,
    ) -> _Display:
        reporter = None
        if cfg.progress_s:
            from pgsurge.stats.progress import ProgressReporter  # only for -P

            shift = epoch_shift_us() if cfg.progress_timestamp else None
            reporter = ProgressReporter.for_run(facts, start_us, epoch_shift_us=shift)
        panel = None
        if show_live:
            # imported here: a run without the panel does without it
            from pgsurge.report.live_panel import LivePanel

            panel = LivePanel(
                err.stream,
                start_us=start_us,
                duration_s=cfg.duration,
                transactions=cfg.transactions,
                clients=cfg.clients,
                nworkers=len(workers.pipes),
                # untimed transactions are recorded with a latency of 0
                timed=facts.measure_latency or wants_histograms(cfg),
                warmup_s=cfg.warmup,
            )
            panel.start()
        return cls(err, workers, reporter, panel, monitor)

    def show(self, merged: StatsData, now: int, tick: int) -> None:
        if self._reporter is not None:
            line = self._reporter.report(merged, now, tick)
            if self._monitor is not None:
                line += self._monitor.progress_suffix()
            self._err.write(line + "\n")
            self._err.flush()
        elif self._panel is not None:
            cpu = [proc_cpu_seconds(p.pid) for p in self._workers.procs]
            self._panel.update(merged, now, cpu, tick)

    def close(self) -> None:
        if self._panel is not None:
            self._panel.stop()


def _collect(
    workers: WorkerPool,
    got: _Received,
    err: _Echo,
    stopper: ParentStop | None,
    display: _Display,
) -> None:
    """Receive until every worker has sent its result or died; show the
    merged figures whenever every running worker has passed a new tick."""
    wake: list[Any] = [] if stopper is None else [stopper.wake_fd]
    wake += err.waitables()
    while got.pending:
        timeout = None if stopper is None else stopper.timeout()
        ready = wait([*(workers.pipes[i] for i in got.pending), *wake], timeout)
        # before any message: a worker's lines precede what it sends next
        err.pump()
        if stopper is not None:
            _escalate(workers, got, stopper, ready, err)
        for pipe in ready:
            if pipe in workers.pipes:
                index = workers.pipes.index(pipe)
                if index in got.pending:  # (not one given up on just now)
                    _receive(workers, index, got, err, stopper)
        tick = min(got.ticks)
        if got.pending and tick > got.shown:
            got.shown = tick
            display.show(got.merged(), got.shown_at(), tick)


def _escalate(
    workers: WorkerPool,
    got: _Received,
    stopper: ParentStop,
    ready: list[Any],
    err: _Sink,
) -> None:
    """The later steps of a graceful stop, when their time has come."""
    if stopper.wake_fd in ready:
        stopper.drain()
    step = stopper.due()
    if step == 2:  # the grace is over: cancel what still runs
        for i in got.pending:
            _send_quietly(workers.pipes[i], Stop())
    elif step == 3:  # no answer: they are dead to us
        for i in sorted(got.pending):
            workers.procs[i].kill()
            if workers.threaded:
                # a killed process's pipe ends, and _receive reports its
                # death; a thread given up on (a \shell command, a stuck
                # call) keeps its end open, and would be waited for
                _died(workers, i, got, err, stopper)


def _receive(
    workers: WorkerPool,
    index: int,
    got: _Received,
    err: _Sink,
    stopper: ParentStop | None,
) -> None:
    """One message of worker ``index`` during the run."""
    match _recv(workers, index, err):
        case Progress(tick, now, stats):
            got.ticks[index], got.nows[index], got.snapshots[index] = tick, now, stats
        case Done(done):
            got.results[index] = done
            got.snapshots[index] = done.total
            got.ended(index)
        case _Died():
            _died(workers, index, got, err, stopper)
        case Fatal() as fatal:
            _fatal(fatal, err)
        case _:  # ExitOnAbort, or a message out of order
            raise RunFailed(ExitStatus.RUN_ABORTED)


def _died(
    workers: WorkerPool,
    index: int,
    got: _Received,
    err: _Sink,
    stopper: ParentStop | None,
) -> None:
    """Worker ``index`` died (or was given up on): say so, count it out,
    and stop the others (without a stopper, the run fails)."""
    _report_death(workers, index, err)
    got.dead[index] = clock_us()
    got.ended(index)
    if stopper is None:
        raise RunFailed(ExitStatus.RUN_ABORTED)
    stopper.stop(clock_us())


def _merge(
    workers: WorkerPool,
    got: _Received,
    facts: RunFacts,
    start_us: int,
    stopper: ParentStop | None,
) -> RunResult:
    """The run's result from the workers' (a dead one's made up from what
    it last sent), and the interrupt that stopped it, if one did."""
    # a dead worker's own start is lost with it: it counts from the
    # survivors' earliest (so the initial connection time is theirs, not
    # 0), or, when none survived, from when the parent saw every client
    # connected, a real bound of the same moment
    survivors = [r.bench_start_us for r in got.results.values()]
    go_us = min(survivors) if survivors else got.connected_us
    for index, when in got.dead.items():
        got.results[index] = _dead_result(
            workers.nclients[index], index, got.snapshots[index], start_us, when
        )
        got.results[index].bench_start_us = go_us
    result = RunResult.from_workers(
        [got.results[i] for i in range(len(workers.pipes))], facts, start_us=start_us
    )
    if stopper is not None and stopper.signum is not None:
        result.interrupted_by = signal.Signals(stopper.signum).name
        result.interrupted_after_us = max(0, stopper.at_us - result.bench_start_us)
    return result


# -- messages, deaths and signals ------------------------------------------------


class _Died:
    """What :func:`_recv` returns for a worker whose pipe closed."""


def _recv(workers: WorkerPool, index: int, err: _Sink) -> WorkerMessage | _Died:
    try:
        msg: WorkerMessage = workers.pipes[index].recv()
    except (EOFError, OSError):
        return _Died()
    if isinstance(msg, Crash):
        err.write(msg.traceback)
        err.write(f"{PROG}: error: worker {index} failed\n")
        err.flush()
        raise RunFailed(ExitStatus.RUN_ABORTED)
    return msg


def _fatal(msg: Fatal, err: _Sink) -> NoReturn:
    """A worker's :class:`Fatal`: pgbench's ``pg_fatal`` in a thread, which
    ends the process with status 1. The text, when the worker left it to
    the parent, is printed here: only the first failing worker's."""
    if msg.text is not None:
        err.write(msg.text)
        err.flush()
    raise RunFailed(ExitStatus.ERROR)


def _barrier(
    workers: WorkerPool,
    expected: type[Ready | Connected],
    err: _Echo,
    stopper: ParentStop | None = None,
) -> list[WorkerMessage]:
    """Wait for every worker's ``expected`` message (a fatal one ends the
    run); the messages, by worker. (The stopper's descriptor wakes the
    wait for a signal's handler, which ends the run before GO.)"""
    got: dict[int, WorkerMessage] = {}
    waiting = set(range(len(workers.pipes)))
    wake: list[Any] = [] if stopper is None else [stopper.wake_fd]
    while waiting:
        ready = wait([*(workers.pipes[i] for i in waiting), *wake, *err.waitables()])
        if stopper is not None and stopper.wake_fd in ready:
            stopper.drain()
        err.pump()
        for pipe in ready:
            if pipe not in workers.pipes:
                continue
            index = workers.pipes.index(pipe)
            msg = _recv(workers, index, err)
            if isinstance(msg, _Died):
                _report_death(workers, index, err)
                raise RunFailed(ExitStatus.RUN_ABORTED)
            if isinstance(msg, Fatal):
                _fatal(msg, err)
            if not isinstance(msg, expected):
                raise RunFailed(ExitStatus.RUN_ABORTED)
            got[index] = msg
            waiting.discard(index)
    return [got[i] for i in sorted(got)]


def _report_death(workers: WorkerPool, index: int, err: _Sink) -> None:
    """A worker's pipe closed without a result: say which and how it ended."""
    proc = workers.procs[index]
    proc.join(1.0)
    if workers.threaded:
        # a thread is not killed: it was given up on (a \shell command, a
        # stuck call), or ended without a result (its traceback came)
        how = (
            "it did not stop, and was given up on"
            if proc.exitcode == threaded.GIVEN_UP
            else describe_exit(proc.exitcode)
        )
        err.write(f"{PROG}: error: worker {index} (a thread) died: {how}\n")
    else:
        err.write(
            f"{PROG}: error: worker {index} (pid {proc.pid}) died: "
            f"{describe_exit(proc.exitcode)}\n"
        )
    err.flush()


class _Echo:
    """The parent's stderr during a run, and the workers' relayed one.

    While the live panel is up (``panel``), both are printed through it,
    above it; otherwise the parent's text goes to ``stream`` and the
    workers' bytes to its binary buffer as they came (a Latin-1 byte of a
    script stays that byte, as pgbench echoes it). A worker's partial line
    waits for its end, so that a redraw never splits it.
    """

    def __init__(self, relay: StderrRelay | None, stream: TextIO) -> None:
        self.relay = relay
        self.stream = stream
        self.panel: LivePanel | None = None
        self._partial = b""

    def waitables(self) -> list[Any]:
        return [] if self.relay is None else [self.relay]

    def write(self, text: str, /) -> object:
        panel = self.panel
        if panel is not None:
            panel.print_above(text)
        else:
            self.stream.write(text)
        return len(text)

    def flush(self) -> None:
        if self.panel is None:
            self.stream.flush()

    def pump(self, *, final: bool = False) -> None:
        """Print the complete lines the workers have written so far (all
        of it when ``final``)."""
        if self.relay is None:
            return
        data = self._partial + self.relay.read()
        cut = len(data) if final else data.rfind(b"\n") + 1
        data, self._partial = data[:cut], data[cut:]
        if not data:
            return
        panel = self.panel
        if panel is not None:
            panel.print_above(data.decode("utf-8", "replace"))
            return
        binary = getattr(self.stream, "buffer", None)
        self.stream.flush()
        if binary is not None:
            binary.write(data)
            binary.flush()
        else:
            self.stream.write(data.decode("utf-8", "surrogateescape"))
            self.stream.flush()

    def close(self) -> None:
        """The run is over (or failed): the rest, and the pipe closed."""
        self.panel = None
        if self.relay is not None:
            self.pump(final=True)
            self.relay.close()
            self.relay = None


def _send_quietly(pipe: PipeEnd, msg: ParentMessage) -> None:
    try:
        pipe.send(msg)
    except OSError:  # it died meanwhile: its pipe says so next
        pass


def _dead_result(
    nclients: int, index: int, last: StatsData, start_us: int, when: int
) -> WorkerResult:
    """A dead worker's share of the result: its clients aborted, with the
    figures of its last progress snapshot (none without -P); its start is
    set by the caller (see ``_merge``)."""
    result = WorkerResult(index, nclients, total=last)
    result.aborted_clients = nclients
    result.client_tx_counts = [0] * nclients
    result.conn_start_us = result.bench_start_us = start_us
    result.end_us = when
    result.abort_messages = [f"worker {index} died"]
    return result


@contextmanager
def _stop_workers_on_signal(workers: WorkerPool) -> Iterator[None]:
    """While the workers run, a killing signal terminates them, then this
    process dies of it (see the module docstring)."""
    if not in_main_thread():
        yield  # (run() called from a thread: only the main one has handlers)
        return

    def die(signum: int, frame: object) -> None:
        workers.abandon()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    previous = {
        sig: signal.signal(sig, die)
        for sig in _KILLING_SIGNALS
        if not inherited_ignore(sig)  # nohup: pgbench runs on, and so do we
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _parent_stop(workers: WorkerPool) -> Iterator[ParentStop | None]:
    """The graceful stop of a running benchmark (main thread only: only it
    has signal handlers)."""
    if not in_main_thread():
        yield None
        return
    with ParentStop(workers.request_stop, workers.abandon) as stopper:
        yield stopper
