"""The worker processes of one machine: start them, talk to them, stop them.

pgbench's threads are pgsurge's worker processes (``engine.worker``), or
with ``PGSURGE_WORKERS=threads`` threads of this process
(``engine.threaded``). This module starts them with their
:class:`~pgsurge.engine.worker.WorkerSpec`, holds the parent end of each
one's pipe and stops them; it is shared by the parent of a local run
(``runner``) and by the host task of a multi-host run (``distributed``),
which both drive the same barriers over these pipes. It also holds
pgbench's rule for dealing clients over threads, used to deal clients
over workers and workers over hosts.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from pgsurge.engine import forked, threaded
from pgsurge.engine.interrupt import STOP_SIGNAL
from pgsurge.engine.protocol import ParentMessage
from pgsurge.engine.worker import (
    WorkerSpec,
    import_for_workers,
    worker_body,
    worker_main,
)
from pgsurge.errors import ExitStatus
from pgsurge.prng import speedups

__all__ = ["RunFailed", "StderrRelay", "WorkerPool", "mp_context", "split_clients"]


class RunFailed(Exception):
    """The run ends with ``status`` and no report (what went wrong has
    been printed already)."""

    def __init__(self, status: ExitStatus) -> None:
        super().__init__(status)
        self.status = status


#: how long :meth:`WorkerPool.stop` waits for its threads to end
STOP_WAIT_S = 2.0


def split_clients(nclients: int, nthreads: int) -> list[tuple[int, int]]:
    """``(first client id, count)`` per worker, as pgbench deals clients."""
    out = []
    dealt = 0
    for i in range(nthreads):
        n = (nclients - dealt + nthreads - i - 1) // (nthreads - i)
        out.append((dealt, n))
        dealt += n
    return out


def start_method() -> str:
    """How workers start.

    ``fork`` where the platform has it: a spawned worker re-imports pgsurge
    and psycopg, about 0.2 s of CPU each, a few µs per transaction of a
    10 s run; the parent has no threads and no open connection when it
    forks. Not ``forkserver``: its children are not this process's
    children, so their CPU time would escape ``getrusage(RUSAGE_CHILDREN)``
    of whoever measures pgsurge (bench/suite.py does). Elsewhere
    ``spawn``. ``PGSURGE_START_METHOD`` overrides (for measurements).
    ``fork`` is :mod:`pgsurge.engine.forked`'s (no ``multiprocessing``
    import), the others ``multiprocessing``'s (:func:`mp_context`).
    """
    return os.environ.get("PGSURGE_START_METHOD") or (
        "fork" if hasattr(os, "fork") else "spawn"
    )


def mp_context() -> Any:
    """``multiprocessing``'s context for :func:`start_method` (imported
    here: a forked run does without it)."""
    import multiprocessing

    return multiprocessing.get_context(start_method())


def _thread_entry(
    spec: WorkerSpec, pipe: Any, abort_owner: Any, host: threaded.ThreadWorker
) -> int | None:
    try:
        return worker_body(spec, pipe, abort_owner, host)
    finally:
        pipe.close()


def _worker_entry(
    spec: WorkerSpec,
    pipe: Any,
    parent: int,
    abort_owner: Any,
    relay: StderrRelay | None,
) -> None:
    _die_with_parent(parent)
    if relay is not None:
        relay.become_stderr()
    worker_main(spec, pipe, abort_owner)


class StderrRelay:
    """A pipe that the workers' fd 2 points to, read by the parent.

    For the live panel: a forked worker writing to the terminal behind the
    panel's back has its line erased by the next redraw and leaves panel
    fragments behind. Redirecting fd 2 itself (not a Python stream) also
    catches what C writes there: the fast loop, libpq's notice processor,
    the stderr of ``\\shell`` commands. The parent reads the pipe
    (:meth:`read`, non-blocking) and prints what came above the panel.
    Only with ``fork``: a spawned worker inherits no descriptor.
    """

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)

    def fileno(self) -> int:
        """The read end (for ``forked.wait``)."""
        return self._read_fd

    def become_stderr(self) -> None:
        """In a worker: fd 2 is now the pipe."""
        os.close(self._read_fd)
        os.dup2(self._write_fd, 2)
        os.close(self._write_fd)

    def forked(self) -> None:
        """In the parent, once every worker is started: only the workers
        hold the write end, so the pipe ends when they all have."""
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def read(self) -> bytes:
        """Whatever the workers have written so far (b"" if nothing)."""
        chunks = []
        while self._read_fd >= 0:
            try:
                chunk = os.read(self._read_fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.forked()
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1


def _die_with_parent(parent: int) -> None:
    """On Linux, have the kernel kill this worker when the parent dies,
    even of SIGKILL (no handler sees it: ``timeout -s KILL``, a test
    harness's timeout, the OOM killer); the worker would run on, orphaned."""
    if not sys.platform.startswith("linux"):
        return
    if speedups is not None:
        try:
            speedups.die_with_parent(signal.SIGKILL)
        except OSError:
            return  # as without the call: the worker runs on
    else:
        # without the C extension (PGSURGE_PURE): through ctypes, which a
        # run otherwise does not import (pgsurge.deferred)
        import ctypes

        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            return
        pr_set_pdeathsig = 1
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request: too late
        os._exit(1)


def _trim_heap() -> None:
    """Hand the free memory glibc's malloc keeps back to the kernel.

    A page the parent and its forked workers share is counted once, until
    one of them writes to it. What start-up's imports and parsing let go
    (about 1 MiB) stays in malloc's free lists, where each worker's first
    allocations would land, copying the page first; trimmed, they get new
    pages of their own and the parent's are gone.
    """
    if not sys.platform.startswith("linux"):
        return
    if speedups is not None:
        speedups.trim_heap()
        return
    import ctypes  # without the C extension (see _die_with_parent)

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


class WorkerPool:
    """The worker processes and their pipes, with clean shutdown."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        *,
        relay_stderr: bool = False,
        threads: bool = False,
    ) -> None:
        fork = start_method() == "fork"
        ctx = None if fork or threads else mp_context()
        #: whether the workers are threads of this process (engine.threaded)
        self.threaded = threads
        #: the workers' stderr, when asked for and the workers are forked
        self.relay: StderrRelay | None = None
        if relay_stderr and fork and not threads:
            self.relay = StderrRelay()
        #: the parent ends of the pipes (``forked.Connection`` or, for
        #: another start method, ``multiprocessing``'s: the same methods)
        self.pipes: list[Any] = []
        self.nclients = [spec.nclients for spec in specs]
        self.procs: list[Any] = []
        # --exit-on-abort: the id of the first worker to report an abort,
        # shared, so that only it reports (pgbench's first aborting thread
        # ends the process before another can print)
        abort_owner = None
        if specs and specs[0].config.exit_on_abort:
            abort_owner = (ctx or mp_context()).Value("i", -1)
        if fork and not threads:
            if specs:
                import_for_workers(specs[0].config)
            _trim_heap()
        elif threads:
            # glibc gives each thread that allocates a malloc arena of its
            # own: the worker threads never reuse what start-up let go in
            # the main thread's, which stayed in the process's memory (some
            # 190 KiB of a -c 1000 -j 2 run's peak RSS, issue 25)
            _trim_heap()
        #: threads: the collector's thresholds and frozen count before the
        #: run (see _restore_gc)
        self._gc: tuple[tuple[int, ...], int] | None = None
        if threads:
            self._gc = (gc.get_threshold(), gc.get_freeze_count())
        try:
            for spec in specs:
                args = (os.getpid(), abort_owner, self.relay)
                name = f"pgsurge-worker-{spec.worker_id}"
                proc: Any
                if threads:
                    parent_end, child_end = forked.pipe()
                    # the thread closes its end when it is done with it
                    proc = threaded.ThreadWorker(
                        _thread_entry, (spec, child_end, abort_owner), name
                    )
                    self.pipes.append(parent_end)
                    proc.start()
                    self.procs.append(proc)
                    continue
                if ctx is None:
                    parent_end, child_end = forked.pipe()
                    # the child closes the parent's ends, its own included
                    proc = forked.ForkedProcess(
                        _worker_entry,
                        (spec, child_end, *args),
                        name,
                        [*self.pipes, parent_end],
                    )
                else:
                    parent_end, child_end = ctx.Pipe(duplex=True)
                    proc = ctx.Process(
                        target=_worker_entry,
                        args=(spec, child_end, *args),
                        name=name,
                        daemon=True,
                    )
                self.pipes.append(parent_end)
                try:
                    proc.start()
                finally:
                    child_end.close()
                self.procs.append(proc)
        except BaseException:
            # (EMFILE at the open-file limit): the started ones wait for a
            # STEADY that never comes, and multiprocessing's exit handler
            # would wait for them forever
            self.stop()
            if self.relay is not None:
                self.relay.close()
            raise
        if self.relay is not None:
            self.relay.forked()

    def send_all(self, msg: ParentMessage) -> None:
        for pipe in self.pipes:
            pipe.send(msg)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None and p.is_alive()]

    def request_stop(self) -> None:
        """Tell every live worker to stop starting transactions (from the
        main thread's signal handler: it only sends signals or sets fields
        and writes to pipes)."""
        for proc in self.procs:
            if not proc.is_alive():
                continue
            if self.threaded:
                proc.request_stop()
            else:
                try:
                    os.kill(proc.pid, STOP_SIGNAL)
                except ProcessLookupError:
                    pass

    def stop(self, wait: bool = True) -> None:
        """Kill the workers (they stop gracefully on SIGTERM, which is for
        an interrupted run: here their work is to be thrown away). Threads
        are waited for at most :data:`STOP_WAIT_S` unless ``wait`` is
        False (from a signal handler, before this process dies)."""
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        if self.threaded:
            # threads cannot be killed: the end of their pipes makes their
            # loops return (a STOPPED with no Stop), and they end, closing
            # their connections (worker._release); waited for a while, so
            # that a run in this process leaves none behind. A stuck one is
            # a daemon thread that the interpreter abandons at exit.
            for pipe in self.pipes:
                pipe.close()
            if wait:
                deadline = time.monotonic() + STOP_WAIT_S
                for proc in self.procs:
                    proc.wait_end(max(0.0, deadline - time.monotonic()))
            self._restore_gc()
            return
        for proc in self.procs:
            proc.join(5)
        for pipe in self.pipes:
            pipe.close()

    def abandon(self) -> None:
        """:meth:`stop` without waiting (this process is about to die)."""
        self.stop(wait=False)

    def join(self) -> None:
        for proc in self.procs:
            proc.join()
        for pipe in self.pipes:
            pipe.close()
        self._restore_gc()

    def _restore_gc(self) -> None:
        """Threads: the collector as it was before the run. A worker tunes
        it for its loop (``worker._bench``: its objects frozen, rare
        passes), which a process does for itself alone and a thread for
        the whole process, the caller of an in-process run included."""
        saved, self._gc = self._gc, None
        if saved is None:
            return
        threshold, frozen = saved
        gc.set_threshold(*threshold)
        if not frozen:
            gc.unfreeze()
