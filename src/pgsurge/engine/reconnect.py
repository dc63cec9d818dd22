"""``--reconnect[=N]``: a client whose connection is lost reconnects and goes on.

pgbench aborts a client whose connection breaks (a server restart, a
failover, a killed backend), and so does pgsurge without the option. With
it, for people testing failover:

* the transaction in flight is lost: it counts as a failure of the kind
  ``connection`` (``StatsData.connection_failures``: in the failed
  transactions of the report, in ``--failures-detailed``, the JSON result
  and ``-l`` logs, where ``--failures-detailed`` writes ``connection``);
  instead of pgbench's abort line, stderr says ``client N lost its
  connection in command C of script S; <why>`` (``Support.lost``);
* the client then reconnects, waiting ``BACKOFF_S`` doubling up to
  ``MAX_BACKOFF_S`` between attempts, at most N attempts for this loss; it
  says so on stderr and starts a new transaction. When every attempt
  failed, the client aborts (``could not reconnect``); when the run ends
  meanwhile (``-T``, ``-t`` reached by the lost transaction, Ctrl-C), it
  finishes as pgbench's would;
* ``-P`` shows the gap (intervals with failures and no transactions) and
  the recovery.

Nothing here blocks the worker: its other clients go on meanwhile. Two
states of pgsurge's own (``state.RECONNECT_WAIT``, ``state.CONNECTING``)
are filed by the event loop like ``SLEEP`` (a deadline in its heap) and
``WAIT_RESULT`` (a watched socket); their steps are here:

``RECONNECT_WAIT``
    The back-off is over (or the run): start a connection without blocking
    (``pgconn.connect_start``), then ``CONNECTING``.
``CONNECTING``
    Its socket is ready: ``PQconnectPoll``; wait again for what libpq asks,
    or, connected, ``CHOOSE_SCRIPT``; failed, ``RECONNECT_WAIT`` with the
    doubled wait, or ``ABORTED`` after the last attempt.

(A host name is still resolved inside ``PQconnectStart``, as libpq does.)

It wraps the engine's ``advance``: a client that ``advance`` left ABORTED
after its connection went bad (seen when the engine detaches the socket,
before it closes the connection) is recovered here. Such runs use the
Python engine (``fastloop.decide`` is not asked; the C loop would hand
lost connections to Python anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pgsurge import pgconn
from pgsurge.engine import fastpq
from pgsurge.engine import state as C
from pgsurge.engine.client import Engine
from pgsurge.engine.loop import READ, WRITE, EventLoop
from pgsurge.engine.state import NONE_PREPARED, Client, Settings, WorkerState
from pgsurge.errors import PROG
from pgsurge.stats.counters import FailureKind

__all__ = ["BACKOFF_S", "MAX_BACKOFF_S", "with_reconnect"]

#: the first wait before a reconnection attempt, doubled after each failure
BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0

_CONNECTION = FailureKind.CONNECTION
_RECONNECT_WAIT = C.RECONNECT_WAIT
_CONNECTING = C.CONNECTING


def _clock() -> int:
    return time.monotonic_ns() // 1000


class _Attempts:
    """One client's reconnection since its loss."""

    __slots__ = ("made", "pending", "wait_us")

    def __init__(self) -> None:
        #: attempts started
        self.made = 0
        #: the connection being opened, in CONNECTING
        self.pending: pgconn.Connecting | None = None
        #: the back-off before the next attempt
        self.wait_us = int(BACKOFF_S * 1e6)


def with_reconnect(
    engine: Engine,
    settings: Settings,
    w: WorkerState,
    loop: EventLoop,
    log: Callable[[str], None],
    attempts: int,
    reconnected: Callable[[Client, pgconn.PgConn], None] | None = None,
) -> Engine:
    """``engine`` whose clients reconnect after a lost connection;
    ``reconnected(client, conn)`` is told of each new connection (a
    multi-host connection string's may reach another server)."""
    lost: set[int] = set()
    reconnecting: dict[int, _Attempts] = {}
    detach = loop.detach
    end_us = settings.end_us
    nxacts = settings.nxacts
    max_wait_us = int(MAX_BACKOFF_S * 1e6)

    def watching_detach(st: Client) -> None:
        # the engine detaches a client's socket right before it closes the
        # connection: the last moment its status tells a lost connection
        if st.conn is not None and st.conn.bad:
            lost.add(st.id)
        detach(st)

    loop.detach = watching_detach  # type: ignore[method-assign,assignment]
    advance = engine.advance

    def account_loss(st: Client, now: int) -> None:
        """The lost transaction, as pgbench's processXactStats counts a
        failed one (no latency)."""
        w.stats.record(0, None, failure=_CONNECTION, tries=st.tries)
        if w.per_script is not None:
            w.per_script[st.script].record(0, None, failure=_CONNECTION, tries=st.tries)
        st.cnt += 1
        st.failed += 1
        if w.txlog is not None:
            w.txlog(now, st.id, st.cnt, st.script, 0, 0, False, _CONNECTION, st.tries)

    def run_over(now: int) -> bool:
        # the alarm may come a little after end_us: the clock decides too
        return w.timer_exceeded or (end_us > 0 and now >= end_us)

    def back_off(st: Client, now: int, wait_us: int) -> None:
        """RECONNECT_WAIT until ``now + wait_us``, or the end of -T."""
        until = now + wait_us
        st.sleep_until = min(until, end_us) if end_us else until
        st.state = _RECONNECT_WAIT

    def finish(st: Client) -> None:
        """The run ended before the client could reconnect: it did not
        abort (pgbench's FINISHED at the end of -T)."""
        reconnecting.pop(st.id, None)
        st.state = C.FINISHED

    def give_up(st: Client, att: _Attempts, message: str) -> None:
        """Every attempt failed: the client aborts."""
        del reconnecting[st.id]
        text = (
            f"client {st.id} could not reconnect in {att.made} "
            f"attempt{'s' if att.made > 1 else ''}: {pgconn.strip_newline(message)}"
        )
        w.abort_messages.append(text)
        log(f"{PROG}: error: {text}\n")
        st.state = C.ABORTED

    def reconnect_wait(st: Client) -> None:
        """RECONNECT_WAIT: the back-off is over; start an attempt."""
        now = _clock()
        if run_over(now):
            finish(st)
            return
        att = reconnecting[st.id]
        att.made += 1
        att.pending = pgconn.connect_start(settings.conninfo, settings.password)
        # libpq: after PQconnectStart, act as if PQconnectPoll said WRITING;
        # the loop also wakes it at -T's end (a server that accepted and
        # went silent answers never)
        st.sleep_until = end_us
        st.state = _CONNECTING
        loop.wait_connect(st, att.pending.socket, WRITE)
        if att.pending.socket < 0:
            connecting(st)  # failed at once: no socket to wait on

    def connecting(st: Client) -> None:
        """CONNECTING: the socket of the connection being opened is ready."""
        att = reconnecting[st.id]
        pending = att.pending
        assert pending is not None
        if run_over(_clock()):
            # the run ended while the server had not answered: the attempt
            # is given up, the client finishes (pgbench's FINISHED at -T's
            # end; no transaction began, none is lost)
            detach(st)
            att.pending = None
            pending.finish()
            finish(st)
            return
        status = pending.poll() if pending.socket >= 0 else pgconn.POLL_FAILED
        if status == pgconn.POLL_READING or status == pgconn.POLL_WRITING:
            mask = READ if status == pgconn.POLL_READING else WRITE
            loop.wait_connect(st, pending.socket, mask)
            return
        detach(st)
        att.pending = None
        if status == pgconn.POLL_OK:
            opened(st, att, pending.opened())
            return
        message = pending.error_message()
        pending.finish()
        now = _clock()
        if run_over(now):
            finish(st)
        elif att.made >= attempts:
            give_up(st, att, message)
        else:
            att.wait_us = min(att.wait_us * 2, max_wait_us)
            back_off(st, now, att.wait_us)

    def opened(st: Client, att: _Attempts, conn: pgconn.PgConn) -> None:
        """Connected again: set the client up as tx.connect does, and start
        a new transaction."""
        if settings.on_connect is not None:
            failed = settings.on_connect(conn)  # a workload's @setup (blocking)
            if failed:
                conn.finish()
                give_up(st, att, failed)
                return
        del reconnecting[st.id]
        if reconnected is not None:
            reconnected(st, conn)
        conn.set_nonblocking()
        st.conn = conn
        st.raw = conn._pgconn
        st.ptr = fastpq.usable_with(conn)
        st.prepared = NONE_PREPARED
        st.in_pipeline = False
        st.num_syncs = 0
        loop.attach(st)
        log(
            f"{PROG}: client {st.id} reconnected after {att.made} "
            f"attempt{'s' if att.made > 1 else ''}\n"
        )
        st.estatus = C.E_NONE
        st.tries = 1
        st.command = 0
        st.pending = None
        st.drain_state = None
        st.meta_failed = False
        st.state = C.CHOOSE_SCRIPT

    def advance_or_reconnect(st: Client) -> None:
        state = st.state
        if state == _CONNECTING:
            connecting(st)
            return
        if state == _RECONNECT_WAIT:
            reconnect_wait(st)
            return
        advance(st)
        if st.state != C.ABORTED or st.id not in lost:
            return
        lost.discard(st.id)
        # advance filed the loss as the client's abort reason: it has not
        # aborted (yet), and other clients may abort while it reconnects
        if w.abort_messages:
            w.abort_messages.pop()
        now = _clock()
        account_loss(st, now)
        if run_over(now) or (nxacts and st.cnt >= nxacts):
            finish(st)  # the lost transaction was the last one
            return
        reconnecting[st.id] = att = _Attempts()
        back_off(st, now, att.wait_us)

    return Engine(advance_or_reconnect, engine.resume, engine.gset)
