"""Workers as threads of this process.

pgbench's workers are threads of one process; pgsurge's are forked
processes by default (``engine.forked``), each a copy of the interpreter.
At a thousand clients the copies' private pages are most of what pgsurge
costs above pgbench, and at ``-C`` two worker processes on one CPU switch
address spaces at every turn. A :class:`ThreadWorker` runs the same
worker (``engine.worker.worker_main``) on a thread, talking to the parent
over the same socket pair of pickled messages, so the parent's side of a
run (``runner.drive``) does not know which it has.

What a process gets from the kernel, a thread gets here:

* the stop (a Ctrl-C, SIGTERM, a dead worker) and the end of ``-T``: the
  main thread's handler or a timer calls :meth:`ThreadWorker.request_stop`
  (or :meth:`ThreadWorker.fire_alarm`), which runs the worker's stop
  function (it sets ``timer_exceeded``, as the worker process's signal
  handler does) and writes a byte to the worker's wake-up pipe, which the
  C loop watches as it watches a process's signal wake-up descriptor;
* the exit status: the worker's body returns it instead of ``os._exit``;
* the CPU it used: ``RUSAGE_THREAD`` instead of ``RUSAGE_SELF``.

A thread cannot be killed: :meth:`ThreadWorker.kill` (the last resort of
an interrupted run, for a worker that ignored its stop and its Stop
message) marks it dead and leaves it; it is a daemon thread, which the
interpreter abandons at exit.

Which runs (:func:`wanted`): ``PGSURGE_WORKERS=threads`` or
``processes`` chooses; unset, the runs the C loop carries, when
:data:`AUTO`. Never a Python workload, whose code is interrupted at a
run's end by a SIGALRM handler (``interrupt.UserCodeWatch``), which only
a process's main thread has, nor a run with the live panel, which takes
the workers' file descriptor 2. A multi-host run's hosts
(``distributed``) keep processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading

__all__ = ["ThreadWorker", "files_fit", "requested", "wanted"]

#: the environment variable that chooses how workers run: "threads",
#: "processes", or unset (the default, :data:`AUTO`)
ENV = "PGSURGE_WORKERS"
#: whether, unasked, the runs that the C loop carries have their workers
#: as threads
AUTO = True


def requested() -> str:
    """What the environment asks for: "threads", "processes" or "" (a
    :class:`~pgsurge.errors.PgsurgeError` for anything else: a misspelt
    choice silently ignored would measure what the user did not ask)."""
    choice = os.environ.get(ENV, "")
    if choice not in ("", "threads", "processes"):
        from pgsurge.errors import PgsurgeError

        raise PgsurgeError(f'{ENV} must be "threads" or "processes", not "{choice}"')
    return choice


def wanted(specs: Sequence[Any], *, show_live: bool) -> bool:
    """Whether this run's workers are threads (see the module docstring):
    never with the live panel or a Python workload; when asked for,
    every other run; unasked (:data:`AUTO`), the runs whose every worker
    runs on the C loop, the only ones that run without the GIL (two
    workers on the Python engine would take turns on one CPU)."""
    choice = requested()
    if choice == "processes" or show_live or not specs:
        return False
    from pgsurge.script.ast import ParsedScript

    scripts = specs[0].scripts
    if not all(isinstance(s, ParsedScript) for s in scripts):
        return False
    if choice == "threads":
        files_fit(specs)  # (asked for: threads even where they do not fit)
        return True
    if not AUTO:
        return False
    from pgsurge.engine import fastloop

    cfg = specs[0].config
    return (
        not cfg.reconnect
        and fastloop.refusal(cfg, scripts) is None
        and files_fit(specs)
    )


#: the exit status of a thread given up on (:meth:`ThreadWorker.kill`):
#: a killed process's, SIGKILL
GIVEN_UP = -9

#: a worker thread's descriptors besides its clients' sockets: both ends
#: of its pipe to the parent, both of its wake-up pipe, its epoll instance
#: and a -l file
WORKER_FILES = 6
#: this process's own besides (stdio, the parent's stop pipe, Python's)
BASE_FILES = 64


def files_fit(specs: Sequence[Any]) -> bool:
    """Whether this process may open what the run's workers need as its
    threads: every client's socket and each worker's own descriptors in
    one process, where a worker process holds only its own (the CLI makes
    room for the clients and a fixed margin, not for -j workers' worth).
    Raises the soft limit toward that where the hard limit allows."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return True
    need: int = sum(s.nclients for s in specs) + WORKER_FILES * len(specs)
    need += BASE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return True
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return False
    return target >= need


class ThreadWorker:
    """One worker on a daemon thread, with a process's interface as
    ``engine.pool`` uses it (``pid``, ``exitcode``, ``start``,
    ``is_alive``, ``join``, ``kill``). ``target(*args, worker)`` runs on
    the thread and returns the exit status."""

    def __init__(
        self, target: Callable[..., int | None], args: tuple[Any, ...], name: str
    ) -> None:
        # imported here: a run whose workers are processes does without it
        # (start-up counts in every run's client CPU)
        import threading

        self.name = name
        self.pid: int | None = None
        #: None while it runs; the worker's exit status once it has ended
        self.exitcode: int | None = None
        self._target = target
        self._args = args
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        #: set by the worker once it has something to stop (its state)
        self._on_stop: Callable[[], None] | None = None
        self._stop_requested = False
        self._given_up = False
        self._timer: threading.Timer | None = None
        # the wake-up pipe: written by request_stop and fire_alarm, watched
        # by the worker's loop (non-blocking both ends: a full pipe already
        # has the loop's attention, and draining must not block)
        self.wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # held while the pipe is written to or closed: once the thread has
        # closed it, its descriptor numbers may be another's (a -C
        # connection of another worker, a log file), which a late stop or
        # alarm must not write to (see _wake)
        self._pipe_lock = threading.Lock()
        self._pipe_open = True

    # -- the parent's side -----------------------------------------------------

    def start(self) -> None:
        self.pid = os.getpid()
        self._thread.start()

    def is_alive(self) -> bool:
        return self.exitcode is None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end; not for one given up on (:meth:`kill`):
        it may never end, and nothing waits for it."""
        if not self._given_up:
            self._thread.join(timeout)

    def wait_end(self, timeout: float) -> None:
        """Wait at most ``timeout`` for the thread to end, even one given
        up on (``WorkerPool.stop``: its connections close as it ends)."""
        self._thread.join(timeout)

    def kill(self) -> None:
        """Give up on the worker: it counts as ended by a signal (as a
        killed process does), and is left to end on its own (the parent
        closing its pipe's end makes its loop return)."""
        self.request_stop()
        if self.exitcode is None:
            self.exitcode = GIVEN_UP
            self._given_up = True

    def request_stop(self) -> None:
        """Stop starting transactions (a process's STOP_SIGNAL). Safe from
        a signal handler of the main thread: it takes no lock a Python
        handler could be holding when the thread itself takes it (the
        worker's stop function only sets fields)."""
        self._stop_requested = True
        on_stop = self._on_stop
        if on_stop is not None:
            on_stop()
        self._wake()

    # -- the worker's side -----------------------------------------------------

    def on_stop(self, stop: Callable[[], None]) -> None:
        """The worker's stop function; run now if a stop came before it."""
        self._on_stop = stop
        if self._stop_requested:
            stop()

    def set_alarm(self, delay_s: float, fire: Callable[[], None]) -> None:
        """Call ``fire`` after ``delay_s`` (the end of -T) from a timer
        thread, then wake the loop (a process's SIGALRM)."""

        import threading

        def alarm() -> None:
            fire()
            self._wake()

        timer = threading.Timer(delay_s, alarm)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def cancel_alarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake(self) -> None:
        # never waits for the lock: a signal handler of the main thread
        # may run while the main thread holds it (kill, then a Ctrl-C).
        # Whoever holds it is waking the loop already, or closing the pipe
        # of a worker that has ended: nothing to wake either way.
        if not self._pipe_lock.acquire(blocking=False):
            return
        try:
            if self._pipe_open:
                os.write(self._wake_w, b"x")
        except OSError:  # full: the loop has been woken
            pass
        finally:
            self._pipe_lock.release()

    def _main(self) -> None:
        code: int | None = 1
        try:
            code = self._target(*self._args, self)
        finally:
            self.cancel_alarm()
            if self.exitcode is None:
                self.exitcode = code or 0
            # the worker is done with its pipe ends: closed here, not by the
            # parent, so that they are never closed under a running loop
            with self._pipe_lock:
                self._pipe_open = False
                for fd in (self.wake_r, self._wake_w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
