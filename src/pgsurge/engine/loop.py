"""One worker's event loop: wait on the sockets, advance the clients that can move.

This is pgbench's ``threadRun`` loop, event-driven instead of scanning every
client each time:

* a client waiting for the server has its socket registered for reading
  (and for writing while libpq still holds unsent data), and is advanced
  only when the socket is ready — no client is ever polled in a busy loop;
* a client in ``\\sleep``, ``--rate`` throttling or ``--reconnect``'s
  back-off sits in a heap of deadlines, and the wait's timeout is the
  nearest one (or the next progress tick); a client reconnecting waits on
  the socket of its connection being opened, as for a result;
* a client that just finished a transaction is runnable at once; it runs in
  the next iteration after a non-blocking check of the sockets, so that a
  script of meta commands only cannot starve the others.

Waiting (:class:`Waiter`) is kept apart from deciding what to do next (the
``advance`` function from ``client.py``). ``epoll`` has millisecond
timeouts, too coarse for ``--rate``; for a finite timeout the loop waits on
the epoll descriptor itself with ``select()``, which takes microseconds,
as pgbench prefers ``ppoll`` over ``poll`` for the same reason.
"""

# Chained == on ints beats "in (A, B)" with closure constants (hot path).
# ruff: noqa: SIM109

from __future__ import annotations

import select
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from pgsurge.engine import state as C
from pgsurge.engine.state import Client

if TYPE_CHECKING:
    import selectors

    from pgsurge.stats.series import WorkerRecorder

__all__ = ["LOOK_US", "EventLoop", "LoopOutcome", "Waiter", "absorb"]

READ = 1
WRITE = 4
#: µs between the looks at the control descriptor while clients stay
#: runnable (``EventLoop.run``; the C loop's too, with its signal one)
LOOK_US = 1000
_EPOLL = hasattr(select, "epoll")


class Waiter:
    """Readiness of a set of file descriptors, with µs-precision timeouts.

    ``wait(timeout)`` returns ``(fd, mask)`` pairs with ``READ``/``WRITE``
    bits; ``timeout`` is in seconds, ``None`` to wait without limit.
    Linux uses epoll; elsewhere the ``selectors`` default.
    """

    def __init__(self) -> None:
        self.poll_now: Callable[[], list[tuple[int, int]]]
        self.wait_forever: Callable[[], list[tuple[int, int]]]
        if _EPOLL:
            self._ep = select.epoll()
            self._sel: selectors.BaseSelector | None = None
            self._fd = self._ep.fileno()
            # bound C calls: no Python frame on the hot path
            self.poll_now = partial(self._ep.poll, 0)
            self.wait_forever = partial(self._ep.poll, -1)
        else:  # pragma: no cover - not Linux
            # imported only here: every run on Linux would load it (with
            # ``math``) in each of its processes for nothing
            import selectors

            self._sel = selectors.DefaultSelector()
            self.poll_now = partial(self.wait, 0.0)
            self.wait_forever = partial(self.wait, None)

    def register(self, fd: int, mask: int) -> None:
        if self._sel is None:
            self._ep.register(fd, _to_epoll(mask))
        else:  # pragma: no cover
            self._sel.register(fd, _to_selectors(mask))

    def modify(self, fd: int, mask: int) -> None:
        if self._sel is None:
            self._ep.modify(fd, _to_epoll(mask))
        else:  # pragma: no cover
            self._sel.modify(fd, _to_selectors(mask))

    def unregister(self, fd: int) -> None:
        try:
            if self._sel is None:
                self._ep.unregister(fd)
            else:  # pragma: no cover
                self._sel.unregister(fd)
        except (KeyError, OSError, ValueError):
            pass

    def wait(self, timeout: float | None) -> list[tuple[int, int]]:
        if self._sel is not None:  # pragma: no cover
            import selectors

            events = self._sel.select(timeout)
            return [
                (
                    key.fd,
                    (READ if ev & selectors.EVENT_READ else 0)
                    | (WRITE if ev & selectors.EVENT_WRITE else 0),
                )
                for key, ev in events
            ]
        if timeout is None:
            return self._ep.poll(-1)
        if timeout <= 0.0:
            return self._ep.poll(0)
        # select() on the epoll descriptor: microsecond timeout, then fetch
        ready, _, _ = select.select([self._fd], [], [], timeout)
        return self._ep.poll(0) if ready else []

    def epoll_fd(self) -> int:
        """The epoll instance's descriptor (Linux only), for the C loop of
        ``pgsurge._fastloop``, which waits on it."""
        return self._fd

    def close(self) -> None:
        if self._sel is None:
            self._ep.close()
        else:  # pragma: no cover
            self._sel.close()


def _to_epoll(mask: int) -> int:
    ev = 0
    if mask & READ:
        ev |= select.EPOLLIN
    if mask & WRITE:
        ev |= select.EPOLLOUT
    return ev


def _to_selectors(mask: int) -> int:  # pragma: no cover - not Linux
    import selectors

    ev = 0
    if mask & READ:
        ev |= selectors.EVENT_READ
    if mask & WRITE:
        ev |= selectors.EVENT_WRITE
    return ev


class LoopOutcome:
    """How :meth:`EventLoop.run` ended."""

    #: every client finished or aborted
    DONE = 0
    #: a client aborted under --exit-on-abort
    EXIT_ON_ABORT = 1
    #: the control descriptor became readable (the parent went away)
    STOPPED = 2


def _clock() -> int:
    return time.monotonic_ns() // 1000


class EventLoop:
    """Runs a worker's clients to completion; also the clients' ``IoHooks``.

    ``on_progress(tick, now_us)`` is called once per ``progress_us``
    interval counted from ``progress_start_us`` (tick 1 at the first
    interval), so that the parent can merge every worker's figures.
    A ``recorder`` has its intervals closed on time (its ``next_us`` is a
    deadline of the wait, like a progress tick). ``idle_us`` accumulates
    the time spent blocked in waits, which tells whether the worker
    itself was the bottleneck.
    """

    def __init__(
        self,
        clients: Sequence[Client],
        *,
        exit_on_abort: bool = False,
        progress_us: int = 0,
        progress_start_us: int = 0,
        on_progress: Callable[[int, int], None] | None = None,
        control_fd: int | None = None,
        recorder: WorkerRecorder | None = None,
    ) -> None:
        self.clients = list(clients)
        self.waiter = Waiter()
        self._by_fd: dict[int, Client] = {}
        self._exit_on_abort = exit_on_abort
        self._progress_us = progress_us
        self._progress_start_us = progress_start_us
        self._on_progress = on_progress
        self._control_fd = control_fd
        if control_fd is not None:
            self.waiter.register(control_fd, READ)
        self.advance: Callable[[Client], None] | None = None
        self.recorder = recorder
        self._window_us = 0
        self._on_window: Callable[[int], None] | None = None
        #: µs spent blocked in waits during ``run``
        self.idle_us = 0

    def set_window(self, window_us: int, on_window: Callable[[int], None]) -> None:
        """--warmup: call ``on_window(now_us)`` once, at the first round at
        or after ``window_us`` (a deadline of the wait, like a progress
        tick, and after the tick of that instant: its line is the
        warm-up's last), where the worker resets its figures."""
        self._window_us = window_us
        self._on_window = on_window

    def _next_tick(self, next_report: int) -> int:
        """The nearest periodic deadline: a progress tick, the end of a
        recorder interval, the window's start; 0: none."""
        next_tick = next_report
        rec = self.recorder
        if rec is not None and (not next_tick or rec.next_us < next_tick):
            next_tick = rec.next_us
        window = self._window_us
        if window and (not next_tick or window < next_tick):
            next_tick = window
        return next_tick

    def _at_tick(self, now: int, next_report: int) -> int:
        """What comes due at a tick (``now`` past the nearest deadline): the
        recorder's intervals, the progress tick, the window's start; the
        next progress deadline."""
        rec = self.recorder
        if rec is not None and now >= rec.next_us:
            rec.advance(now)
        progress_us = self._progress_us
        if next_report and now >= next_report:
            start = self._progress_start_us
            tick = (now - start) // progress_us
            if self._on_progress is not None:
                self._on_progress(tick, now)
            next_report = start + (tick + 1) * progress_us
        window = self._window_us
        if window and now >= window:
            self._window_us = 0
            if self._on_window is not None:
                self._on_window(now)
        return next_report

    @staticmethod
    def uses_epoll() -> bool:
        """Whether the Waiter is epoll-based (the C loop needs it)."""
        return _EPOLL

    # -- IoHooks ----------------------------------------------------------------

    def attach(self, client: Client) -> None:
        assert client.conn is not None
        fd = client.conn.socket
        client.fd = fd
        client.flush_pending = False
        client.unwatched = False
        if fd < 0:
            # a connection lost before it was attached (pgconn.PgConn): no
            # socket to wait on; its client's next step finds it broken
            return
        self._by_fd[fd] = client
        self.waiter.register(fd, READ)

    def detach(self, client: Client) -> None:
        fd = client.fd
        if fd >= 0:
            if self._by_fd.get(fd) is client:
                del self._by_fd[fd]
                self.waiter.unregister(fd)
            client.fd = -1
        client.flush_pending = False
        client.unwatched = False

    def want_write(self, client: Client) -> None:
        client.flush_pending = True
        if client.fd >= 0:
            if client.unwatched:
                self.watch(client)
            else:
                self.waiter.modify(client.fd, READ | WRITE)

    def write_done(self, client: Client) -> None:
        client.flush_pending = False
        # an unwatched socket is not in the set: watch() registers it with
        # the right mask once the client waits
        if client.fd >= 0 and not client.unwatched:
            self.waiter.modify(client.fd, READ)

    def wait_connect(self, client: Client, fd: int, mask: int) -> None:
        """Wait for a connection being opened (--reconnect): its socket
        ``fd`` ready for ``mask``. libpq may have closed the previous
        socket and opened another (the next address), perhaps with the
        same number, so the old registration is dropped every time."""
        self.detach(client)
        if fd >= 0:
            client.fd = fd
            self._by_fd[fd] = client
            self.waiter.register(fd, mask)

    def watch(self, client: Client) -> None:
        """Put back into the wait set a socket that :func:`absorb` took
        out, when its client is about to wait on it."""
        client.unwatched = False
        if client.fd >= 0:
            mask = READ | WRITE if client.flush_pending else READ
            self.waiter.register(client.fd, mask)

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        """Advance the clients until all are done; returns a LoopOutcome."""
        # imported here: a run on the C loop (FastEventLoop.run) never gets
        # here, and every module is memory in each process (issue 25)
        from heapq import heappop, heappush

        advance = self.advance
        assert advance is not None
        by_fd = self._by_fd
        wait = self.waiter.wait
        control_fd = self._control_fd
        exit_on_abort = self._exit_on_abort
        progress_us = self._progress_us
        next_report = self._progress_start_us + progress_us if progress_us else 0
        # the nearest periodic deadline (progress tick, interval end, the
        # window's start), 0: none
        next_tick = self._next_tick(next_report)
        idle = 0
        clock = _clock
        WAIT_RESULT = C.WAIT_RESULT
        WAIT_ROLLBACK_RESULT = C.WAIT_ROLLBACK_RESULT
        CHOOSE_SCRIPT = C.CHOOSE_SCRIPT
        SLEEP = C.SLEEP
        THROTTLE = C.THROTTLE
        ABORTED = C.ABORTED
        FINISHED = C.FINISHED
        RECONNECT_WAIT = C.RECONNECT_WAIT
        CONNECTING = C.CONNECTING
        timers: list[tuple[int, int, Client]] = []
        runq: list[Client] = []
        remains = 0
        for st in self.clients:
            if st.state != FINISHED and st.state != ABORTED:
                remains += 1
                runq.append(st)
        aborted_exit = False
        watch = self.watch

        def settle(st: Client) -> None:
            """File a client that ``advance`` left in a state other than
            waiting for its socket."""
            nonlocal remains, aborted_exit
            state = st.state
            if state == CHOOSE_SCRIPT:
                runq.append(st)
            elif state == SLEEP:
                heappush(timers, (st.sleep_until, st.id, st))
            elif state == THROTTLE:
                heappush(timers, (st.txn_scheduled, st.id, st))
            elif state == RECONNECT_WAIT:
                heappush(timers, (st.sleep_until, st.id, st))
            elif state == FINISHED or state == ABORTED:
                remains -= 1
                if exit_on_abort and state == ABORTED:
                    aborted_exit = True
            elif state == WAIT_RESULT or state == WAIT_ROLLBACK_RESULT:
                # it sent while out of the wait set (absorb): watch it again
                # (the events part never needs this: a client it advances
                # was watched, and only absorb unwatches)
                if st.unwatched:
                    watch(st)
            elif state == CONNECTING:
                # its socket is watched (wait_connect); with a deadline
                # too (-T's end): a server that accepted and went silent
                # never makes it ready. The client may leave the state
                # before, by its socket: the timer then goes off stale
                if st.sleep_until:
                    heappush(timers, (st.sleep_until, st.id, st))
            else:
                raise AssertionError(f"client stopped in state {state}")

        poll_now = self.waiter.poll_now
        wait_forever = self.waiter.wait_forever
        control_ready: Callable[[], list[tuple[int, int]]] | None = None
        if control_fd is not None:
            control = select.poll()
            control.register(control_fd, select.POLLIN)
            control_ready = partial(control.poll, 0)
        looked = clock()
        events: Sequence[tuple[int, int]]
        while remains > 0:
            # -- wait: not at all when clients are runnable, else until the
            # nearest deadline (a sleep, a throttle slot, a progress tick).
            # pgbench's round: clients that finished a transaction run again
            # before any socket is looked at, and the answers of those that
            # wait are read once no client is runnable. How often a client
            # runs again while its backend is still on the CPU decides how
            # much the server switches between backends: reading the ready
            # sockets at every round cost a thousand clients 7-9 % of
            # pgbench's tps. Every LOOK_US the control descriptor alone is
            # looked at, so that a run whose clients never wait (a script of
            # meta-commands only) still sees a stop.
            if runq:
                events = ()
                now = clock()
                if now - looked >= LOOK_US:
                    looked = now
                    if control_ready is not None and control_ready():
                        events = poll_now()
            else:
                deadline = timers[0][0] if timers else 0
                if next_tick and (not deadline or next_tick < deadline):
                    deadline = next_tick
                t0 = clock()
                if deadline:
                    delta = deadline - t0
                    events = wait(delta / 1e6 if delta > 0 else 0.0)
                else:
                    events = wait_forever()
                looked = clock()
                idle += looked - t0

            # -- clients whose socket is ready
            for fd, _mask in events:
                owner = by_fd.get(fd)
                if owner is None:
                    if fd == control_fd:
                        self.idle_us = idle
                        return LoopOutcome.STOPPED
                    continue
                state = owner.state
                if (
                    state != WAIT_RESULT
                    and state != WAIT_ROLLBACK_RESULT
                    and state != CONNECTING
                ):
                    absorb(self, owner)
                    continue
                advance(owner)
                if owner.state != WAIT_RESULT:
                    settle(owner)
                    if aborted_exit:
                        self.idle_us = idle
                        return LoopOutcome.EXIT_ON_ABORT
            # -- clients whose deadline has come
            if timers:
                now = clock()
                while timers and timers[0][0] <= now:
                    st = heappop(timers)[2]
                    state = st.state
                    if (
                        state != SLEEP
                        and state != THROTTLE
                        and state != RECONNECT_WAIT
                        and state != CONNECTING
                    ):
                        continue  # a CONNECTING deadline gone stale
                    advance(st)
                    settle(st)
                    if aborted_exit:
                        self.idle_us = idle
                        return LoopOutcome.EXIT_ON_ABORT
            # -- clients that finished a transaction in the previous round
            if runq:
                batch = runq
                runq = []
                for st in batch:
                    advance(st)
                    settle(st)
                    if aborted_exit:
                        self.idle_us = idle
                        return LoopOutcome.EXIT_ON_ABORT

            # -- progress ticks (pgbench: thread 0 only; here every worker)
            # and the end of a recorder interval
            if next_tick:
                now = clock()
                if now >= next_tick:
                    next_report = self._at_tick(now, next_report)
                    next_tick = self._next_tick(next_report)
        self.idle_us = idle
        return LoopOutcome.DONE

    def close(self) -> None:
        self.waiter.close()


def absorb(loop: EventLoop, st: Client) -> None:
    """A socket is ready while its client is not waiting for it.

    The server may send a notice, or a FATAL message and close the
    connection (idle_in_transaction_session_timeout), at any time. pgbench
    does not watch such a socket and reads nothing: its next send still
    succeeds, and what came is read with that command's results (a FATAL
    becomes the command's error). So the socket is taken out of the wait
    set, unread, with the client still attached, rather than left in it:
    the wait is level-triggered, and a closed peer reports readable (and
    EPOLLHUP, whatever the mask) until the descriptor is removed. The
    client is watched again (:meth:`EventLoop.watch`; the C loop's own
    sends do the same) once it waits for a result; a client that never
    sends again leaves nothing in the wait set.
    """
    if st.raw is None:
        loop.detach(st)
        return
    if st.fd >= 0 and not st.unwatched:
        loop.waiter.unregister(st.fd)
        st.unwatched = True
