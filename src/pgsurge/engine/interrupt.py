"""Stopping a run early without losing what it measured.

pgbench dies of the first SIGINT or SIGTERM with nothing printed. pgsurge
keeps what ran (the issue "never lose a measurement"):

* the **first** SIGINT or SIGTERM (Ctrl-C reaches the parent and its
  workers, which share the process group; ``kill`` reaches the parent only)
  makes every worker stop *starting* transactions: the parent sends each
  :data:`STOP_SIGNAL`, and a worker's handler sets the flag that the end of
  ``-T`` sets (pgbench's ``timer_exceeded``, which both the Python engine
  and the C loop read after every wait), so that the transactions in
  flight finish and every worker sends its result as at the end of a run;
* after :data:`GRACE_S` the parent sends :class:`~.protocol.Stop` on the
  pipes of the workers still running (a client in a long ``\\sleep``, a
  slow statement): the worker's pipe is its loop's control descriptor, so
  the loop returns, the worker cancels what its clients still run (cancel
  requests given up after :data:`CANCEL_S`: a hung server answers none),
  closes their connections and sends its result;
* a worker that has still not answered :data:`GRACE_S` later is killed
  and counted as dead;
* a **second** SIGINT or SIGTERM skips the grace: the Stop goes out at
  once (what the clients run is cancelled), and the report of what ran
  still comes (two quick Ctrl-Cs must not lose what the first promised);
* a **third** ends the parent and the workers at once, with no report
  (the parent kills them: a worker counts no signals, so that a Ctrl-C
  reaching it twice does not lose its result).

The parent then prints the report of what ran, one stderr line saying the
run was interrupted and after how long, the ``--json`` document marked
``interrupted``, and dies of the signal it got (see
:class:`~pgsurge.errors.RunInterrupted`). While it does, the signals stay
counted (:meth:`ParentStop.__exit__` leaves them held until
:func:`release_held`): one more does not cut the report short, the third
ends the program at once (a report blocked on a full pipe). So are they
while a finished run is reported: a Ctrl-C then (a report blocked on a
pager) leaves the report, ``--json``, ``--html`` and ``--store`` whole, and
is delivered once they are out, the program dying of it as pgbench would
have.

The handlers only set fields, send signals and write a byte to a pipe:
a Python handler runs between two bytecodes of the main thread, which may
hold a lock (a stream's, a Queue's), so it takes none and writes to no
stream; the messages come from the normal flow.

The same graceful stop ends the run when a worker dies (see
``pgsurge.runner``): the others stop and their results are reported.

This module holds both sides: :class:`WorkerStop` for a worker (installed
before its barriers, so that an early Ctrl-C does not kill it half-way),
:class:`ParentStop` for the parent (installed while the workers run).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from pgsurge import pgconn
from pgsurge.engine import state as C
from pgsurge.engine.forked import PipeEnd
from pgsurge.engine.protocol import Stop
from pgsurge.engine.state import Client, WorkerState

__all__ = [
    "CANCEL_S",
    "GRACE_S",
    "INTERRUPTING_SIGNALS",
    "STOP_SIGNAL",
    "ParentStop",
    "UserCodeStopped",
    "UserCodeWatch",
    "WorkerStop",
    "cancel_in_flight",
    "describe_exit",
    "inherited_ignore",
    "release_held",
    "take_stop",
]

#: how long the transactions in flight may take to finish once interrupted
#: (and, after the Stop message, how long a worker may take to answer)
GRACE_S = 2.0
#: how long a stopped worker's cancel requests may take, all together (well
#: within GRACE_S, after which the parent kills the worker)
CANCEL_S = GRACE_S / 4
#: parent -> worker: finish the transactions in flight, then report
STOP_SIGNAL = signal.SIGUSR1
#: the signals that interrupt a run gracefully the first time
INTERRUPTING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: after the grace, how often a worker looks whether a Python workload's
#: code still runs (see :class:`UserCodeWatch`)
USER_CODE_POLL_S = 0.25
#: the signal (counting the run's) that ends an interrupted run at once
_LAST_SIGNAL = 3
#: the handlers that :func:`release_held` puts back (by signal)
_HELD: dict[int, Any] = {}
#: the first signal held during a finished run's report (release_held)
_PENDING: list[int] = []


def inherited_ignore(signum: int) -> bool:
    """Whether ``signum`` was ignored when pgsurge started (``cmd &`` in a
    script ignores SIGINT, ``nohup`` SIGHUP): pgbench keeps running through
    such a signal, so pgsurge leaves it ignored rather than handling it."""
    return signal.getsignal(signum) is signal.SIG_IGN


def _die_of(signum: int) -> None:
    """End this process by ``signum``'s default action (a shell sees it)."""
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)


class UserCodeStopped(BaseException):
    """Raised into a Python workload's own code that still runs
    :data:`GRACE_S` after the run's end (``-T``, a Ctrl-C): a loop that
    never yields, a blocking call. The engine ends that client without
    counting its transaction, as a statement cancelled at the end is not
    counted. A BaseException: the workload's ``except Exception`` does not
    swallow it. ``str()`` is the ``file:line`` it interrupted."""


class UserCodeWatch:
    """Interrupts a Python workload's code that outlives the run.

    The worker's loop ends a run by a flag it reads between steps; code of
    the workload that does not come back to the loop (``while True: pass``,
    ``time.sleep(3600)``) would keep the worker, and with it the whole run,
    going forever past ``-T``, and a Ctrl-C's last resort (the parent
    killing the worker) would lose everything it measured. So once the
    run's end has come, :meth:`arm` starts an interval timer: after
    :data:`GRACE_S`, and then every :data:`USER_CODE_POLL_S`, its SIGALRM
    handler looks at the frames the signal interrupted and, when one is
    the workload's (``files``), raises :class:`UserCodeStopped` there.
    Between steps the engine's own frames are interrupted, and nothing
    happens: no cost while the run goes on, no marker per call. (SIGALRM
    is free once the run's end has come: ``-T``'s alarm is what set it, or
    the stop made it moot.)"""

    def __init__(self, files: frozenset[str]) -> None:
        self.files = files
        self.armed = False

    def arm(self) -> None:
        """The run's end has come (called from a signal handler)."""
        if self.armed or not self.files:
            return
        self.armed = True
        signal.signal(signal.SIGALRM, self._look)
        signal.setitimer(signal.ITIMER_REAL, GRACE_S, USER_CODE_POLL_S)

    def disarm(self) -> None:
        """The loop is over: no more alarms."""
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.armed = False

    def _look(self, signum: int, frame: Any) -> None:
        files = self.files
        while frame is not None:
            if frame.f_code.co_filename in files:
                raise UserCodeStopped(f"{frame.f_code.co_filename}:{frame.f_lineno}")
            frame = frame.f_back


class WorkerStop:
    """A worker's handlers: any SIGINT/SIGTERM (Ctrl-C reaches the whole
    process group), or :data:`STOP_SIGNAL` from the parent, sets
    ``timer_exceeded`` (no new transaction starts) and arms the worker's
    :class:`UserCodeWatch`. What a repeated Ctrl-C means is the parent's
    to decide, which counts them: it sends :class:`Stop` at the second and
    kills the workers at the third (a worker dying of the second would
    lose its result)."""

    def __init__(self, wstate: WorkerState, watch: UserCodeWatch | None = None) -> None:
        self.wstate = wstate
        self.watch = watch
        self.requested = False

    def install(self) -> None:
        for sig in (*INTERRUPTING_SIGNALS, STOP_SIGNAL):
            if sig == STOP_SIGNAL or not inherited_ignore(sig):
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.request()

    def request(self) -> None:
        """Stop starting transactions (from a handler: sets fields only)."""
        self.requested = True
        self.wstate.timer_exceeded = True
        if self.watch is not None:
            self.watch.arm()


def take_stop(pipe: PipeEnd) -> bool:
    """After the loop returned STOPPED: whether the parent asked for a
    :class:`Stop` (False when it went away or sent anything else)."""
    try:
        return pipe.poll(0) and isinstance(pipe.recv(), Stop)
    except (EOFError, OSError):
        return False


def cancel_in_flight(clients: Sequence[Client]) -> None:
    """Cancel what the clients still run, close their connections and count
    them as finished: the interrupted transactions are neither successes
    nor failures, they are not counted.

    The cancel requests take at most :data:`CANCEL_S` together, so that
    the worker sends its result before the parent's grace ends and it is
    killed, its figures lost: a server that hangs never answers them."""
    running = [st for st in clients if st.state != C.FINISHED and st.state != C.ABORTED]
    pgconn.cancel_all([st.conn for st in running if st.conn is not None], CANCEL_S)
    for st in running:
        if st.conn is not None:
            st.conn.finish()
            st.conn = None
            st.raw = None
        st.state = C.FINISHED


def release_held() -> None:
    """The run's report is out: the handlers from before the run again (see
    :meth:`ParentStop.__exit__`), and a signal held during a finished run's
    report delivered to them now (an interrupted run dies of its own)."""
    for sig, handler in _HELD.items():
        signal.signal(sig, handler)
    _HELD.clear()
    if _PENDING:
        signal.raise_signal(_PENDING.pop())


def describe_exit(exitcode: int | None) -> str:
    """How a worker process ended, for "worker N (pid P) died: ..."."""
    if exitcode is None:
        return "it closed its pipe"
    if exitcode < 0:
        return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class ParentStop:
    """The parent's side while its workers run (a context manager).

    ``tell()`` asks every live worker to stop starting transactions
    (:data:`STOP_SIGNAL` to a process). The handler only records the
    signal, tells the workers and wakes the parent's wait through a pipe
    (:attr:`wake_fd`, to pass to ``forked.wait``);
    the parent's loop calls :meth:`due` to know what to do next.
    Before :meth:`start_run` (the barriers), a signal ends everything at
    once: nothing has been measured yet.
    """

    def __init__(self, tell: Callable[[], None], kill_all: Callable[[], None]):
        self._tell = tell
        self._kill_all = kill_all
        self.signum: int | None = None
        #: monotonic µs of the first signal (or of the first dead worker)
        self.at_us = 0
        self.running = False
        self._deadline = 0.0
        self._phase = 0  # 0: none, 1: graceful, 2: Stop sent, 3: kill
        self._count = 0  # the interrupting signals received
        self._previous: dict[int, Any] = {}
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        #: the signal wake-up descriptor before ours (None: not ours to undo)
        self._old_wakeup: int | None = None

    @property
    def wake_fd(self) -> int:
        return self._r

    def __enter__(self) -> ParentStop:
        for sig in INTERRUPTING_SIGNALS:
            if not inherited_ignore(sig):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        # The kernel gives a signal to any thread of the process that does
        # not block it: with the workers as threads (engine/threaded.py),
        # one that comes while the main thread has another pending lands
        # on a worker's thread, whose wait it interrupts, not the main
        # thread's, where Python runs the handler. Python's own handler
        # writes to this descriptor, which the parent's waits watch
        # (wake_fd), so the main thread wakes to run ours at once.
        self._old_wakeup = -1
        try:
            self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            self._old_wakeup = None
        else:
            if self._old_wakeup != -1:  # someone else's: theirs stays
                signal.set_wakeup_fd(self._old_wakeup)
                self._old_wakeup = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.signum is not None or (self.running and exc[0] is None):
            # the report of the run is next: hold the signals until it is
            # out (release_held), counting on from the run's; a finished
            # run's report is what was measured as much as an interrupted
            # one's (its --json, --html and --store written whole)
            _HELD.update(self._previous)
            for held in self._previous:
                signal.signal(held, self._on_held_signal)
        else:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
        if self._old_wakeup is not None:
            signal.set_wakeup_fd(-1)
        os.close(self._r)
        os.close(self._w)

    def _on_held_signal(self, signum: int, frame: object) -> None:
        self._count += 1
        if self._count >= _LAST_SIGNAL:
            _die_of(signum)
        if self.signum is None and not _PENDING:
            # a finished run's: delivered once the report is out
            _PENDING.append(signum)

    def start_run(self) -> None:
        """The workers were sent GO: a signal stops them gracefully now."""
        self.running = True

    def _on_signal(self, signum: int, frame: object) -> None:
        self._count += 1
        if not self.running or self._count >= _LAST_SIGNAL:
            self._kill_all()
            _die_of(signum)
            return
        if self.signum is None:
            self.signum = signum
            self.stop(time.monotonic_ns() // 1000)
        else:
            self._hurry()

    def _hurry(self) -> None:
        """The second signal: the next step (Stop) is due now."""
        if self._phase == 1:
            self._deadline = 0.0
            self._wake()

    def stop(self, now_us: int) -> None:
        """Stop the workers gracefully (a signal, or a dead worker)."""
        if self._phase:
            return
        self._phase = 1
        self.at_us = now_us
        self._deadline = time.monotonic() + GRACE_S
        self._tell()
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def drain(self) -> None:
        try:
            os.read(self._r, 64)
        except BlockingIOError:
            pass

    @property
    def stopping(self) -> bool:
        return self._phase > 0

    def timeout(self) -> float | None:
        """How long the parent may wait before :meth:`due` has news."""
        if not self._phase or self._phase == 3:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def due(self) -> int:
        """0: nothing to do; 2: send Stop to the workers still running;
        3: kill those still running (each step once, when its time came)."""
        if not self._phase or self._phase == 3 or time.monotonic() < self._deadline:
            return 0
        self._phase += 1
        self._deadline = time.monotonic() + GRACE_S
        return self._phase
