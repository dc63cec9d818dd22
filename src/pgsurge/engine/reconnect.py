"""``--reconnect[=N]``: a client whose connection is lost reconnects and goes on.

pgbench aborts a client whose connection breaks (a server restart, a
failover, a killed backend), and so does pgsurge without the option. With
it, for people testing failover:

* the transaction in flight is lost: it counts as a failure of the kind
  ``connection`` (``StatsData.connection_failures``: in the failed
  transactions of the report, in ``--failures-detailed``, the JSON result
  and ``-l`` logs, where ``--failures-detailed`` writes ``connection``);
  pgbench's error line about the lost connection is still printed;
* the client then reconnects, waiting ``BACKOFF_S`` doubling up to
  ``MAX_BACKOFF_S`` between attempts, at most N attempts for this loss
  (the wait blocks its worker, whose other clients have usually lost their
  connection to the same restart); it says so on stderr and starts a new
  transaction. When every attempt failed, or the run ended meanwhile, the
  client ends as pgbench's would (aborted, or finished at the end of -T);
* ``-P`` shows the gap (intervals with failures and no transactions) and
  the recovery.

It wraps the engine's ``advance``: a client that ``advance`` left ABORTED
after its connection went bad (seen when the engine detaches the socket,
before it closes the connection) is recovered here. Such runs use the
Python engine (the C loop hands lost connections to it anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pgsurge import pgconn
from pgsurge.engine import fastpq
from pgsurge.engine import state as C
from pgsurge.engine.client import Engine
from pgsurge.engine.loop import EventLoop
from pgsurge.engine.state import Client, Settings, WorkerState
from pgsurge.errors import PROG
from pgsurge.stats.counters import FailureKind

__all__ = ["BACKOFF_S", "MAX_BACKOFF_S", "with_reconnect"]

#: the first wait before a reconnection attempt, doubled after each failure
BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0

_CONNECTION = FailureKind.CONNECTION


def with_reconnect(
    engine: Engine,
    settings: Settings,
    w: WorkerState,
    loop: EventLoop,
    log: Callable[[str], None],
    attempts: int,
) -> Engine:
    """``engine`` whose clients reconnect after a lost connection."""
    lost: set[int] = set()
    detach = loop.detach

    def watching_detach(st: Client) -> None:
        # the engine detaches a client's socket right before it closes the
        # connection: the last moment its status tells a lost connection
        if st.conn is not None and st.conn.bad:
            lost.add(st.id)
        detach(st)

    loop.detach = watching_detach  # type: ignore[method-assign,assignment]
    advance = engine.advance

    def account_loss(st: Client) -> None:
        """The lost transaction, as pgbench's processXactStats counts a
        failed one (no latency)."""
        now = time.monotonic_ns() // 1000
        w.stats.record(0, None, failure=_CONNECTION, tries=st.tries)
        if w.per_script is not None:
            w.per_script[st.script].record(0, None, failure=_CONNECTION, tries=st.tries)
        st.cnt += 1
        if w.txlog is not None:
            w.txlog(now, st.id, st.cnt, st.script, 0, 0, False, _CONNECTION, st.tries)

    def reconnect(st: Client) -> bool:
        wait = BACKOFF_S
        for attempt in range(1, attempts + 1):
            time.sleep(wait)
            if w.timer_exceeded:
                return False
            conn, message, _needs = pgconn.connect(settings.conninfo, settings.password)
            if conn is not None:
                conn.set_nonblocking()
                st.conn = conn
                st.raw = conn._pgconn
                st.ptr = fastpq.usable_with(conn)
                st.prepared = set()
                st.in_pipeline = False
                st.num_syncs = 0
                loop.attach(st)
                log(
                    f"{PROG}: client {st.id} reconnected after {attempt} "
                    f"attempt{'s' if attempt > 1 else ''}\n"
                )
                return True
            wait = min(wait * 2, MAX_BACKOFF_S)
        log(
            f"{PROG}: error: client {st.id} could not reconnect in {attempts} "
            f"attempts: {pgconn.strip_newline(message)}\n"
        )
        return False

    def advance_or_reconnect(st: Client) -> None:
        advance(st)
        if st.state != C.ABORTED or st.id not in lost:
            return
        lost.discard(st.id)
        account_loss(st)
        if reconnect(st):
            if w.abort_messages:  # it did not abort after all
                w.abort_messages.pop()
            st.estatus = C.E_NONE
            st.tries = 1
            st.command = 0
            st.pending = None
            st.drain_state = None
            st.state = C.CHOOSE_SCRIPT
        elif w.timer_exceeded:
            if w.abort_messages:
                w.abort_messages.pop()
            st.state = C.FINISHED

    return Engine(advance_or_reconnect, engine.resume, engine.gset)
