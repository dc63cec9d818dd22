"""A client's transaction-level steps: script choice, accounting, connections,
errors and retries.

``make_tx`` builds, once per worker, what the state machine in
:mod:`pgsurge.engine.client` does around the commands of a transaction:

* ``choose_script``: pgbench's weighted choice with the worker's stream;
* ``process_xact``: pgbench's ``processXactStats`` — count an ended
  transaction (success, failure or skip) into the worker's and script's
  ``StatsData``, the latency histograms when an output needs them, and the
  ``-l`` log (C: ``process_xact`` and its inline first-try case in
  ``fl_advance``'s END_TX);
* ``connect``/``disconnect`` of a client's connection (every transaction
  under ``-C``), registered with the event loop; ``connect`` gives None
  when the parent's Stop, or -T's end, ended the attempt
  (``ramp.open_one``);
* the error states: ``on_error`` (leave an aborted pipeline, roll back an
  open transaction block) and ``on_rollback_result`` (wait for that), both
  ending in ``RETRY``, ``FAILURE``, ``FINISHED`` or ``ABORTED`` — or in
  ``WAIT_ROLLBACK_RESULT``, which means: wait for the socket;
  ``do_retry`` is pgbench's ``doRetry``, ``verbose_retry`` its
  ``--verbose-errors`` lines.
"""

# ruff: noqa: SIM109

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pgsurge import pgconn
from pgsurge.engine.fastpq import usable_with
from pgsurge.engine.ramp import open_one
from pgsurge.engine.state import (
    ABORTED,
    BACKEND_DIED,
    E_DEADLOCK,
    E_NONE,
    E_SERIALIZATION,
    FAILURE,
    FAILURE_OF,
    FINISHED,
    NONE_PREPARED,
    RETRY,
    WAIT_ROLLBACK_RESULT,
    Client,
    IoHooks,
    Settings,
    Support,
    WorkerState,
)

if TYPE_CHECKING:
    # annotations only: a run on the C loop builds no engine (and so
    # imports no SqlSteps) until it hands a client back
    from pgsurge.engine.sql import SqlSteps

__all__ = ["TxSteps", "make_tx"]

_monotonic_ns = time.monotonic_ns


class TxSteps:
    """The transaction-level steps of one worker's clients.

    A plain class, not a dataclass: every run imports it, and generated
    methods would cost start-up time and buy nothing for a bundle of
    closures (never compared, copied or printed).
    """

    __slots__ = (
        "choose_script",
        "connect",
        "disconnect",
        "on_error",
        "on_rollback_result",
        "process_xact",
        "tx_status_error",
        "verbose_retry",
    )

    choose_script: Callable[[], int]
    #: (client, clock or 0, skipped) -> the clock, read if it was needed
    process_xact: Callable[[Client, int, bool], int]
    #: open the client's connection; False when it failed (message given),
    #: None when the parent's Stop ended the attempt
    connect: Callable[[Client], bool | None]
    disconnect: Callable[[Client], None]
    #: the transaction status is neither idle nor in a block (messages given)
    tx_status_error: Callable[[Client], None]
    #: (client, clock or 0) -> the next state
    on_error: Callable[[Client, int], int]
    on_rollback_result: Callable[[Client, int], int]
    #: (client, clock or 0, retrying?) -> the clock, read if it was needed
    verbose_retry: Callable[[Client, int, bool], int]

    def __init__(
        self,
        choose_script: Callable[[], int],
        process_xact: Callable[[Client, int, bool], int],
        connect: Callable[[Client], bool | None],
        disconnect: Callable[[Client], None],
        tx_status_error: Callable[[Client], None],
        on_error: Callable[[Client, int], int],
        on_rollback_result: Callable[[Client, int], int],
        verbose_retry: Callable[[Client, int, bool], int],
    ) -> None:
        self.choose_script = choose_script
        self.process_xact = process_xact
        self.connect = connect
        self.disconnect = disconnect
        self.tx_status_error = tx_status_error
        self.on_error = on_error
        self.on_rollback_result = on_rollback_result
        self.verbose_retry = verbose_retry


def close_client(io: IoHooks, st: Client) -> None:
    """A client's connection closed and forgotten (``disconnect``; also
    what the C loop's finished clients get before the engine is built,
    :func:`pgsurge.engine.client.make_engine_lazily`)."""
    if st.conn is not None:
        io.detach(st)
        st.conn.finish()
        st.conn = None
        st.raw = None
        st.ptr = 0


def make_tx(
    s: Settings,
    w: WorkerState,
    nscripts: int,
    io: IoHooks,
    sup: Support,
    sql: SqlSteps,
) -> TxSteps:
    latency_limit = s.latency_limit_us
    detailed = s.detailed
    max_tries = s.max_tries
    weights = s.weights
    total_weight = sum(weights)
    throttled = s.throttle_delay > 0.0
    stats = w.stats
    record = stats.record
    per_script = w.per_script
    choose_rng = w.choose_rng
    rec = w.recorder
    # histogram recording, bound once: None when no output needs it
    rec_latency = rec.latency if rec is not None else None
    rec_lag = rec.lag if rec is not None and throttled else None
    rec_script = rec.script if rec is not None and nscripts > 1 else None
    monotonic_ns = _monotonic_ns
    libpq_error = pgconn.LibpqError
    COMMAND_OK = pgconn.COMMAND_OK
    TRANS_IDLE = pgconn.TRANS_IDLE
    TRANS_INTRANS = pgconn.TRANS_INTRANS
    TRANS_INERROR = pgconn.TRANS_INERROR
    strip_nl = pgconn.strip_newline
    error = sup.error
    info = sup.info
    trace = sup.debug
    debug = s.debug
    flush_sent = sql.flush_sent
    discard_until_sync = sql.discard_until_sync

    def choose_script() -> int:
        if nscripts == 1:
            return 0
        wv = choose_rng.int64_range(0, total_weight - 1)
        i = 0
        while True:
            wv -= weights[i]
            i += 1
            if wv < 0:
                return i - 1

    def process_xact(st: Client, now: int, skipped: bool) -> int:
        """pgbench ``processXactStats``; returns the (possibly read) clock."""
        latency = 0
        lag = 0
        estatus = st.estatus
        if detailed and not skipped and estatus == E_NONE:
            if not now:
                now = monotonic_ns() // 1000
            latency = now - st.txn_scheduled
            lag = st.txn_begin - st.txn_scheduled
        failure = FAILURE_OF[estatus] if estatus else None
        if rec_latency is not None and not skipped and estatus == E_NONE:
            rec_latency(latency)
            if rec_lag is not None:
                rec_lag(lag)
            if rec_script is not None:
                rec_script[st.script](latency)
        record(
            latency,
            lag if throttled else None,
            skipped=skipped,
            failure=failure,
            tries=st.tries,
        )
        if latency_limit and latency > latency_limit:
            w.latency_late += 1
        st.cnt += 1
        if skipped:
            st.skipped += 1
        elif failure is not None:
            st.failed += 1
        txlog = w.txlog
        if txlog is not None:
            txlog(
                monotonic_ns() // 1000,
                st.id,
                st.cnt,
                st.script,
                latency,
                lag,
                skipped,
                failure,
                st.tries,
            )
        if per_script is not None:
            per_script[st.script].record(
                latency,
                lag if throttled else None,
                skipped=skipped,
                failure=failure,
                tries=st.tries,
            )
        return now

    def ended() -> bool:
        """-T's end, or a stop: a connection still opening is given up."""
        return w.timer_exceeded

    def connect(st: Client) -> bool | None:
        stop_fd = w.control_fd
        rest = st.connect_rest
        st.connect_rest = None
        if stop_fd is None:
            conn, message, _needs = pgconn.connect(s.conninfo, s.password)
        else:
            # a worker's: the parent's Stop, or -T's end, ends the attempt
            # (ramp.open_one)
            conn, stopped_or_message = open_one(
                s.conninfo,
                s.password,
                stop_fd,
                None if rest is None else rest[:2],
                ended,
            )
            if stopped_or_message is None and conn is None:
                return None
            message = stopped_or_message or ""
        if conn is None:
            error(strip_nl(message))
            return False
        if s.on_connect is not None:
            failed = s.on_connect(conn)
            if failed:
                error(failed)
                conn.finish()
                return False
        conn.set_nonblocking()
        st.conn = conn
        st.raw = conn._pgconn
        st.ptr = usable_with(conn)
        st.prepared = NONE_PREPARED
        st.in_pipeline = False
        st.num_syncs = 0
        io.attach(st)
        return True

    def disconnect(st: Client) -> None:
        close_client(io, st)

    def do_retry(st: Client, now: int) -> bool:
        """pgbench ``doRetry``: may this failed transaction run again?"""
        if st.estatus != E_SERIALIZATION and st.estatus != E_DEADLOCK:
            return False
        if max_tries and st.tries >= max_tries:
            return False
        if latency_limit:
            if not now:
                now = monotonic_ns() // 1000
            if now - st.txn_scheduled > latency_limit:
                return False
        return not w.timer_exceeded

    def verbose_retry(st: Client, now: int, is_retry: bool) -> int:
        what = (
            "repeats the transaction after the error"
            if is_retry
            else "ends the failed transaction"
        )
        text = f"client {st.id} {what} (try {st.tries}"
        if max_tries:
            text += f"/{max_tries}"
        if latency_limit:
            if not now:
                now = monotonic_ns() // 1000
            used = 100.0 * (now - st.txn_scheduled) / latency_limit
            text += f", {used:.3f}% of the maximum time of tries was used"
        info(text + ")")
        return now

    def tx_status_error(st: Client) -> None:
        if sup.reconnecting(st):
            sup.lost(st, BACKEND_DIED)
            return
        if st.conn is None or st.conn.bad:
            error("perhaps the backend died while processing")
        error(f"client {st.id} aborted while receiving the transaction status")

    def on_error(st: Client, now: int) -> int:
        """The ERROR state: pgbench's error handling before a retry."""
        if st.in_pipeline:
            # discard up to a fresh sync, then leave pipeline mode
            try:
                st.raw.pipeline_sync()
            except libpq_error:
                error(f"client {st.id} aborted: failed to send a pipeline sync")
                return ABORTED
            st.discarding = True
            st.sync_seen = False
            if not flush_sent(st):
                return ABORTED
            r = discard_until_sync(st)
            if r == 0:
                return WAIT_ROLLBACK_RESULT
            if r == 3:
                return ABORTED
        tstatus = st.raw.transaction_status
        if tstatus == TRANS_INTRANS or tstatus == TRANS_INERROR:
            try:
                st.raw.send_query(b"ROLLBACK")
            except libpq_error:
                error(
                    f"client {st.id} aborted: failed to send sql command for "
                    "rolling back the failed transaction"
                )
                return ABORTED
            st.rollback_ok = False
            if not flush_sent(st):
                return ABORTED
            return WAIT_ROLLBACK_RESULT
        if tstatus == TRANS_IDLE:
            if w.timer_exceeded:
                return FINISHED
            return RETRY if do_retry(st, now) else FAILURE
        tx_status_error(st)
        return ABORTED

    def on_rollback_result(st: Client, now: int) -> int:
        """WAIT_ROLLBACK_RESULT: the socket is readable."""
        if debug:
            trace(f"client {st.id} receiving")
        raw = st.raw
        try:
            raw.consume_input()
        except libpq_error:
            sup.rollback_failed(st)
            return ABORTED
        if st.flush_pending and not flush_sent(st):
            return ABORTED
        if st.discarding:
            r = discard_until_sync(st)
            if r == 0:
                return WAIT_ROLLBACK_RESULT
            return on_error(st, now) if r == 1 else ABORTED
        while True:
            if raw.is_busy():
                return WAIT_ROLLBACK_RESULT
            res = raw.get_result()
            if res is None:
                break
            if res.status == COMMAND_OK:
                st.rollback_ok = True
            else:
                conn = st.conn
                assert conn is not None
                error(
                    f"client {st.id} aborted while rolling back the "
                    f"transaction after an error; "
                    f"{strip_nl(conn.error_message())}"
                )
                return ABORTED
        if not st.rollback_ok:
            return ABORTED
        if w.timer_exceeded:
            return FINISHED
        return RETRY if do_retry(st, now) else FAILURE

    return TxSteps(
        choose_script,
        process_xact,
        connect,
        disconnect,
        tx_status_error,
        on_error,
        on_rollback_result,
        verbose_retry,
    )
