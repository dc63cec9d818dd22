"""A client's SQL phase: send a command, read its results without blocking.

``make_sql`` builds, once per worker, the steps that talk to the server for
the state machine in :mod:`pgsurge.engine.client`:

* sending: ``send_command`` is START_COMMAND's send outside a pipeline
  (C: ``send_sql`` in ``_fastloop_client.c``): through pgsurge._fastpq
  (``send_fast``, one call that also builds the parameters) when the
  connection allows it, else ``send_sql`` in the run's query mode (simple
  with ``:var`` substitution, extended or prepared with parameters) and
  ``flush_sent`` to push the data or wait for writability; ``prepare`` on
  a statement's first use in a pipeline (blocking, as pgbench's
  ``prepareCommand``);
* reading: ``wait_result`` is WAIT_RESULT (C: ``fl_advance``'s
  WAIT_RESULT and ``fl_wait_gset``): a plain command's results through
  pgsurge._fastpq's ``drain`` (``after_drain`` makes a result code of what
  it found, for ``resume`` too), else ``read_results``, which fetches every
  result libpq holds, storing ``\\gset``/``\\aset`` variables, reading a
  whole pipeline up to its last sync, and draining a failed command;
  ``note_error`` and ``finish_drain`` classify the error (serialization,
  deadlock, other) when the command's results are all in;
  ``discard_until_sync`` empties an aborted pipeline; ``read_lost`` reads
  what a connection left when it failed mid-command; ``queue_in_pipeline``
  is a command's send inside ``\\startpipeline``.

Result codes of the readers (``abi.R_*``): 0 wait for the socket, 1 the
command completed, 2 a retryable (or ``--continue-on-error``) error, 3
abort the client.
"""

# ruff: noqa: SIM109

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from pgsurge import pgconn
from pgsurge.engine import fastpq
from pgsurge.engine.abi import R_ABORT, R_DONE, R_READ_ON, R_WAIT
from pgsurge.engine.fastpq import DRAIN_BUSY, DRAIN_DONE, SEND_FALLBACK, ErrorResult
from pgsurge.engine.state import (
    BACKEND_DIED,
    E_CONN,
    E_DEADLOCK,
    E_META,
    E_OTHER,
    E_SERIALIZATION,
    GSET_ALL,
    GSET_ONE,
    GSET_PY,
    MISSING,
    MODE_EXTENDED,
    MODE_PREPARED,
    PREPARING,
    Client,
    IoHooks,
    Op,
    Settings,
    Support,
    mark_prepared,
)
from pgsurge.script.ast import Value
from pgsurge.script.values import to_text

__all__ = ["SqlSteps", "make_sql", "params_of", "substitute"]

_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns


def params_of(
    variables: dict[str, Value], names: tuple[str, ...]
) -> list[bytes | None]:
    """Parameter values for ``$1..$n`` (pgbench ``getQueryParams``).

    A variable's text form is sent; an undefined variable is sent as an SQL
    NULL, as pgbench passes libpq a NULL pointer for it.
    """
    out: list[bytes | None] = []
    append = out.append
    for name in names:
        v = variables.get(name, MISSING)
        t = type(v)
        if t is int:
            append(b"%d" % v)
        elif t is str:
            # surrogateescape: bytes that are not UTF-8 (from -D, \gset of a
            # SQL_ASCII database) go to the server as they came, as in pgbench
            append(v.encode("utf-8", "surrogateescape"))
        elif v is MISSING:
            append(None)
        else:
            append(to_text(v).encode())
    return out


def substitute(variables: dict[str, Value], parts: tuple[str, ...]) -> bytes:
    """Simple mode: replace ``:name`` by the variable's text (pgbench
    ``assignVariables``); an undefined variable is left as written."""
    out = []
    for i, part in enumerate(parts):
        if i & 1:
            v = variables.get(part, MISSING)
            out.append(":" + part if v is MISSING else to_text(v))
        else:
            out.append(part)
    return "".join(out).encode("utf-8", "surrogateescape")


class SqlSteps:
    """The SQL steps of one worker's clients (see the module docstring).

    A plain class, not a dataclass: every run imports it, and generated
    methods would cost start-up time and buy nothing for a bundle of
    closures (never compared, copied or printed).
    """

    __slots__ = (
        "after_drain",
        "discard_until_sync",
        "flush_sent",
        "note_error",
        "prepare",
        "queue_in_pipeline",
        "read_lost",
        "read_results",
        "send_command",
        "send_sql",
        "wait_result",
    )

    #: after a send: push the data, wait for writability if needed; False
    #: when the connection failed
    flush_sent: Callable[[Client], bool]
    prepare: Callable[[Client, Op], None]
    #: queue the command (the caller flushes); False when libpq refused
    send_sql: Callable[[Client, Op], bool]
    #: START_COMMAND's send and flush outside a pipeline; False: it failed
    send_command: Callable[[Client, Op], bool]
    #: WAIT_RESULT: read what arrived; a result code
    wait_result: Callable[[Client, Op], int]
    #: what pgsurge._fastpq's drain() returned, as a result code
    after_drain: Callable[[Client, Op, object], int]
    read_results: Callable[[Client, Op], int]
    #: an error result arrived: -1 to go on draining, else a result code
    note_error: Callable[[Client, Any], int]
    discard_until_sync: Callable[[Client], int]
    #: the connection failed while the command's results were awaited
    read_lost: Callable[[Client, Op], int]
    #: in a pipeline: queue the command (1), or abort the client (3)
    queue_in_pipeline: Callable[[Client, Op], int]

    def __init__(
        self,
        flush_sent: Callable[[Client], bool],
        prepare: Callable[[Client, Op], None],
        send_sql: Callable[[Client, Op], bool],
        send_command: Callable[[Client, Op], bool],
        wait_result: Callable[[Client, Op], int],
        after_drain: Callable[[Client, Op, object], int],
        read_results: Callable[[Client, Op], int],
        note_error: Callable[[Client, Any], int],
        discard_until_sync: Callable[[Client], int],
        read_lost: Callable[[Client, Op], int],
        queue_in_pipeline: Callable[[Client, Op], int],
    ) -> None:
        self.flush_sent = flush_sent
        self.prepare = prepare
        self.send_sql = send_sql
        self.send_command = send_command
        self.wait_result = wait_result
        self.after_drain = after_drain
        self.read_results = read_results
        self.note_error = note_error
        self.discard_until_sync = discard_until_sync
        self.read_lost = read_lost
        self.queue_in_pipeline = queue_in_pipeline


def make_sql(s: Settings, io: IoHooks, sup: Support) -> SqlSteps:
    query_mode = s.query_mode
    verbose_errors = s.verbose_errors
    continue_on_error = s.continue_on_error
    libpq_error = pgconn.LibpqError
    TUPLES_OK = pgconn.TUPLES_OK
    COMMAND_OK = pgconn.COMMAND_OK
    EMPTY_QUERY = pgconn.EMPTY_QUERY
    PIPELINE_SYNC = pgconn.PIPELINE_SYNC
    strip_nl = pgconn.strip_newline
    monotonic_ns = _monotonic_ns
    thread_time_ns = _thread_time_ns
    error = sup.error
    info = sup.info
    command_failed = sup.command_failed
    trace = sup.debug
    debug = s.debug
    store_variable = sup.store_variable
    blocked_since = sup.blocked_since
    # pgsurge._fastpq's calls; used only for clients whose ``ptr`` is set
    fast_send_prepared = fastpq.send_prepared
    fast_send_query = fastpq.send_query
    fast_send_params = fastpq.send_params
    fast_send_prepared_vars = fastpq.send_prepared_vars
    fast_send_params_vars = fastpq.send_params_vars
    fast_send_query_parts = fastpq.send_query_parts
    fast_drain = fastpq.drain

    def flushed(st: Client, left: int) -> None:
        """After a flush: wait for writability while data is left (1), stop
        waiting once all is sent (0)."""
        if left:
            if not st.flush_pending:
                io.want_write(st)
        elif st.flush_pending:
            io.write_done(st)

    def flush_sent(st: Client) -> bool:
        try:
            flushed(st, st.raw.flush())
        except libpq_error:
            return False
        return True

    def prepare(st: Client, op: Op) -> None:
        """pgbench ``prepareCommand``: blocking PQprepare, for the commands
        of a pipeline (prepared before it starts, as pgbench does)."""
        if debug:
            trace(f"client {st.id} preparing {op.prepname.decode()}")
        start, cpu = monotonic_ns() // 1000, thread_time_ns()
        msg = st.conn.prepare(op.prepname, op.sql)  # type: ignore[union-attr]
        blocked_since(start, cpu)
        if msg is not None:
            error(strip_nl(msg))
        mark_prepared(st, op.prepname)

    def send_sql(st: Client, op: Op) -> bool:
        # psycopg's PGconn itself: its calls need no lookup in the PgConn
        conn = st.raw
        assert conn is not None
        try:
            if query_mode == MODE_PREPARED:
                if op.prepname not in st.prepared:
                    if not st.in_pipeline:
                        # First use on this connection: pgbench prepares
                        # with a blocking PQprepare; here only the prepare
                        # is sent, and read_results sends the query once
                        # its result is in, so that the worker's other
                        # clients go on meanwhile (every transaction under
                        # -C prepares anew).
                        if debug:
                            trace(f"client {st.id} preparing {op.prepname.decode()}")
                        conn.send_prepare(op.prepname, op.sql)
                        st.drain_state = PREPARING
                        st.drain_msg = ""
                        return True
                    prepare(st, op)
                conn.send_query_prepared(
                    op.prepname, params_of(st.variables, op.names) if op.names else None
                )
            elif query_mode == MODE_EXTENDED:
                conn.send_query_params(
                    op.sql, params_of(st.variables, op.names) if op.names else None
                )
            elif op.parts is None:
                conn.send_query(op.sql)
            else:
                conn.send_query(substitute(st.variables, op.parts))
        except libpq_error:
            return False
        # the caller flushes; in a pipeline data goes with the next sync
        return True

    def send_sql_traced(st: Client, op: Op) -> bool:
        """``send_sql`` with pgbench's --debug lines (``advance`` sends
        everything through here under --debug)."""
        if query_mode == MODE_PREPARED:
            if op.prepname not in st.prepared:
                if not st.in_pipeline:
                    # only the prepare goes now; finish_prepare traces the send
                    return send_sql(st, op)
                prepare(st, op)
            shown = op.prepname
        elif query_mode == MODE_EXTENDED or op.parts is None:
            shown = op.sql
        else:
            shown = substitute(st.variables, op.parts)
        trace(f"client {st.id} sending {shown.decode('utf-8', 'surrogateescape')}")
        if send_sql(st, op):
            return True
        trace(
            f"client {st.id} could not send {op.sql.decode('utf-8', 'surrogateescape')}"
        )
        return False

    def send_fast(st: Client, op: Op) -> int | None:
        """``send_sql`` and the flush in one call into pgsurge._fastpq (C:
        ``send_sql`` in _fastloop_client.c): 0 all sent, 1 data left, < 0
        the send or flush failed; None for a statement not yet prepared on
        this connection (``send_sql`` prepares it). A value that needs
        Python's formatting (a double, a boolean, NULL) is built here."""
        ptr = st.ptr
        if query_mode == MODE_PREPARED:
            if op.prepname not in st.prepared:
                return None
            sent = fast_send_prepared_vars(ptr, op.prepname, st.variables, op.names)
            if sent == SEND_FALLBACK:
                params = params_of(st.variables, op.names)
                sent = fast_send_prepared(ptr, op.prepname, params)
        elif query_mode == MODE_EXTENDED:
            sent = fast_send_params_vars(ptr, op.sql, st.variables, op.names)
            if sent == SEND_FALLBACK:
                sent = fast_send_params(ptr, op.sql, params_of(st.variables, op.names))
        elif op.parts is None:
            sent = fast_send_query(ptr, op.sql)
        else:
            sent = fast_send_query_parts(ptr, op.parts, st.variables)
            if sent == SEND_FALLBACK:
                sent = fast_send_query(ptr, substitute(st.variables, op.parts))
        return sent

    def send_command(st: Client, op: Op) -> bool:
        """START_COMMAND's send outside a pipeline, flushed (or a wait for
        writability asked); False when the send failed. Under --debug
        everything goes through ``send_sql``, which prints pgbench's lines."""
        if st.ptr and not debug:
            try:
                sent = send_fast(st, op)
            except UnicodeEncodeError:
                # a variable holding bytes that are not UTF-8 (surrogate-
                # escaped): pgsurge._fastpq encodes strictly and sent
                # nothing; send_sql passes the bytes as they are, as
                # pgbench does
                sent = None
            if sent is not None:
                if sent < 0:
                    return False
                flushed(st, sent)
                return True
        return send(st, op) and flush_sent(st)

    def store_gset(st: Client, op: Op, res: Any, is_last: bool) -> bool:
        """pgbench ``readCommandResponse``'s \\gset/\\aset handling."""
        gset = op.gset
        if gset == GSET_PY:
            # a Python transaction's statement: its last result goes to the
            # generator; in a batch (a pipeline's \endpipeline, or one
            # multi-statement query), every result (engine.pyworkload)
            results = st.py.results
            if results is not None:
                results.append(res)
            elif is_last:
                st.py.res = res
            return True
        status = res.status
        if gset == GSET_ONE and not is_last:
            return True
        if status != TUPLES_OK:
            if gset == GSET_ONE:  # COMMAND_OK / EMPTY_QUERY as the last result
                error(
                    f"client {st.id} script {st.script} command {st.command} "
                    f"query {st.qrynum}: expected one row, got 0"
                )
                return False
            return True
        ntuples = res.ntuples
        if gset == GSET_ONE and ntuples != 1:
            error(
                f"client {st.id} script {st.script} command {st.command} "
                f"query {st.qrynum}: expected one row, got {ntuples}"
            )
            return False
        if ntuples <= 0:
            return True
        context = "aset" if gset == GSET_ALL else "gset"
        for col in range(res.nfields):
            name = op.prefix + pgconn.field_name(res, col)
            if not store_variable(
                st, context, name, pgconn.value_text(res, ntuples - 1, col)
            ):
                error(
                    f"client {st.id} script {st.script} command {st.command} "
                    f"query {st.qrynum}: error storing into variable {name}"
                )
                return False
        return True

    def finish_prepare(st: Client, op: Op) -> int:
        """The prepare sent by ``send_sql``: once its result is in, report a
        failure as pgbench does (then the query fails, as there), and send
        the query itself. 0: wait for the socket; 3: abort."""
        raw = st.raw
        conn = st.conn
        assert conn is not None
        handed = st.drain_msg
        while True:
            if conn.bad:
                # lost (a FATAL, then the close): PQprepare returns with the
                # message so far; reading on would add libpq's "invalid socket"
                msg = conn.error_message()
                if handed and msg == handed + "connection not open\n":
                    # the C loop handed over libpq's words when it saw the
                    # loss; a read since added libpq's "connection not open"
                    msg = handed
                st.drain_msg = msg
                break
            if raw.is_busy():
                return 0
            res = raw.get_result()
            if res is None:
                break
            if res.status != COMMAND_OK:
                # kept until the end of the results: more may take a wait
                st.drain_msg = conn.error_message()
        st.drain_state = None
        if st.drain_msg:
            error(strip_nl(st.drain_msg))
            st.drain_msg = ""
        mark_prepared(st, op.prepname)
        if debug:
            trace(f"client {st.id} sending {op.prepname.decode()}")
        try:
            raw.send_query_prepared(
                op.prepname, params_of(st.variables, op.names) if op.names else None
            )
        except libpq_error:
            command_failed(st, "SQL", "SQL command send failed")
            return 3
        if not flush_sent(st):
            command_failed(st, "SQL", "SQL command send failed")
            return 3
        st.qrynum = 0
        return 0

    def wait_result(st: Client, op: Op) -> int:
        """WAIT_RESULT: read what arrived without blocking (C: the
        WAIT_RESULT case of ``fl_advance``, ``fl_wait_gset``)."""
        if debug and st.drain_state is not PREPARING:
            # pgbench's prepare is a blocking PQprepare: its --debug shows
            # "preparing" then "sending", no look at the socket between
            trace(f"client {st.id} receiving")
        if (
            st.ptr
            and not op.gset
            and not st.in_pipeline
            and st.drain_state is None
            and not st.flush_pending
        ):
            # a plain command through pgsurge._fastpq: consume and count
            # its results in one call (read_results does the same with
            # psycopg's calls)
            return after_drain(st, op, fast_drain(st.ptr, st.qrynum))
        try:
            st.raw.consume_input()
        except libpq_error:
            return read_lost(st, op)
        if st.flush_pending and not flush_sent(st):
            return read_lost(st, op)
        return read_results(st, op)

    def after_drain(st: Client, op: Op, got: object) -> int:
        """What pgsurge._fastpq's ``drain`` returned (here or in the C loop,
        which hands the client back with it) as a result code: the count
        of results and a code, or a failed result, read and cleared."""
        if type(got) is int:
            q = got >> 2
            st.qrynum = q
            code = got & 3
            if code == DRAIN_BUSY:
                return R_WAIT
            if code == DRAIN_DONE:
                if q:
                    return R_DONE
                error(f"client {st.id} command {st.command}: no results")
                return R_ABORT
            command_failed(st, "SQL", BACKEND_DIED)
            return R_ABORT
        q, status, sqlstate, message = cast(fastpq.Failed, got)
        st.qrynum = q
        r = note_error(st, ErrorResult(status, sqlstate, message))
        if r == R_READ_ON:
            r = read_results(st, op)
        return r

    def read_results(st: Client, op: Op) -> int:
        """Fetch every result libpq holds without blocking.

        In a pipeline (after ``\\endpipeline``) the results of every queued
        query are read in turn, up to the last sync.
        """
        if st.drain_state is PREPARING:
            return finish_prepare(st, op)
        raw = st.raw
        is_busy = raw.is_busy
        get_result = raw.get_result
        gset = op.gset
        while True:
            if is_busy():
                return 0
            res = get_result()
            if res is None:
                if st.drain_state is not None or st.meta_failed:
                    return finish_drain(st)
                pending = st.pending
                if pending is not None:
                    st.pending = None
                    if not store_gset(st, op, pending, True):
                        st.estatus = E_META
                        return 3
                    st.qrynum += 1
                if st.qrynum == 0:
                    error(f"client {st.id} command {st.command}: no results")
                    return 3
                if st.in_pipeline:
                    st.qrynum = 0  # next queued query
                    continue
                return 1
            if st.drain_state is not None or st.meta_failed:
                continue  # discarding the rest of a failed command
            if gset:
                pending = st.pending
                if pending is not None:
                    st.pending = None
                    if not store_gset(st, op, pending, False):
                        st.meta_failed = True
                        continue
                    st.qrynum += 1
            status = res.status
            if status == TUPLES_OK or status == COMMAND_OK or status == EMPTY_QUERY:
                if gset:
                    st.pending = res
                else:
                    st.qrynum += 1
                continue
            if status == PIPELINE_SYNC:
                if debug:
                    trace(
                        f"client {st.id} pipeline ending, ongoing syncs: {st.num_syncs}"
                    )
                st.num_syncs -= 1
                if st.num_syncs == 0:
                    try:
                        raw.exit_pipeline_mode()
                    except libpq_error:
                        error(
                            f"client {st.id} failed to exit pipeline mode: "
                            f"{strip_nl(pgconn.result_error_message(res))}"
                        )
                    else:
                        st.in_pipeline = False
                st.qrynum += 1
                continue
            r = note_error(st, res)
            if r != -1:
                return r

    def note_error(st: Client, res: Any) -> int:
        """A command got an error (or an unexpected result): remember it.

        Returns -1 to go on reading (and discarding) the command's other
        results, else what ``read_results`` returns.
        """
        status = res.status
        if (
            status == pgconn.COPY_IN
            or status == pgconn.COPY_OUT
            or (status == pgconn.COPY_BOTH)
        ):
            error("COPY is not supported in pgbench, aborting")
            return 3
        st.pending = None
        st.drain_state = pgconn.sqlstate(res) or ""
        st.drain_msg = pgconn.result_error_message(res)
        st.drain_fatal = status != pgconn.FATAL_ERROR and status != (
            pgconn.NONFATAL_ERROR
        )
        if st.in_pipeline:
            # ERROR discards up to a sync; no need to read on here
            return finish_drain(st)
        return -1

    def finish_drain(st: Client) -> int:
        """The failed command's results are all read: classify the error."""
        if st.meta_failed:
            st.meta_failed = False
            st.drain_state = None
            st.estatus = E_META
            return 3
        state = st.drain_state
        st.drain_state = None
        message = st.drain_msg
        if sup.py_error is not None:
            r = sup.py_error(st, state or "", message)
            if r is not None:
                return r
        if st.drain_fatal:
            estatus = E_OTHER
            retry_ok = False
        else:
            conn = st.conn
            assert conn is not None
            if conn.bad:
                estatus = E_CONN
            elif state == "40001":
                estatus = E_SERIALIZATION
            elif state == "40P01":
                estatus = E_DEADLOCK
            else:
                estatus = E_OTHER
            retry_ok = (
                estatus == E_SERIALIZATION
                or estatus == E_DEADLOCK
                or (continue_on_error and estatus == E_OTHER)
            )
        st.estatus = estatus
        if retry_ok:
            if estatus == E_OTHER:
                sup.failed_on(state or "")
            if verbose_errors:
                info(
                    f"client {st.id} got an error in command {st.command} (SQL) "
                    f"of script {st.script}; {strip_nl(message)}"
                )
            return 2
        sup.query_failed(st, st.qrynum, strip_nl(message))
        return 3

    def discard_until_sync(st: Client) -> int:
        """Non-blocking pgbench ``discardUntilSync``: 0 wait, 1 done, 3 abort."""
        raw = st.raw
        while True:
            if st.conn.bad:  # type: ignore[union-attr]
                sup.rollback_failed(st)
                return 3
            if raw.is_busy():
                return 0
            res = raw.get_result()
            if res is not None and res.status == PIPELINE_SYNC:
                st.sync_seen = True
            elif res is None and st.sync_seen:
                st.num_syncs = 0
                break
            else:
                st.sync_seen = False
        try:
            raw.exit_pipeline_mode()
        except libpq_error:
            error(
                f"client {st.id} aborted: failed to exit pipeline mode for "
                "rolling back the failed transaction"
            )
            return 3
        st.in_pipeline = False
        st.discarding = False
        return 1

    def read_lost(st: Client, op: Op) -> int:
        """The connection failed while the command's results were awaited:
        2 (the error the backend sent before it closed) or 3 (abort).

        A backend that ends with a FATAL error (pg_terminate_backend, a
        timeout) sends its message, then closes: libpq turns the message
        into an error result, which ``note_error`` has noted when the loss
        is seen (libpq waits for more results after an error). pgbench
        reports that error as it reads it; so does this, by finishing the
        drain of the failed command. Without an error noted, the backend
        died silently: pgbench's "perhaps the backend died".

        A prepare in flight (first use under -M prepared) is pgbench's
        blocking PQprepare, which returns the FATAL as its error: finishing
        it prints that, then the query's send fails, as in pgbench.
        """
        drain = st.drain_state
        if drain is PREPARING:
            if read_results(st, op) == 3:
                return 3
        elif drain is not None:
            r = read_results(st, op)
            if r == 2 or r == 3:
                return r
        command_failed(st, "SQL", BACKEND_DIED)
        return 3

    send = send_sql_traced if debug else send_sql

    def queue_in_pipeline(st: Client, op: Op) -> int:
        """In a pipeline a command is only queued (its results are read
        at the sync): 1, or 3 when the client aborts (a ``\\gset`` or
        ``\\aset``, which a pipeline does not allow, or a refused send)."""
        if op.gset:
            cmd = "gset" if op.gset == GSET_ONE else "aset"
            command_failed(st, cmd, f"\\{cmd} is not allowed in pipeline mode")
            st.estatus = E_META
            return 3
        if not send(st, op):
            command_failed(st, "SQL", "SQL command send failed")
            return 3
        return 1

    return SqlSteps(
        flush_sent,
        prepare,
        send,
        send_command,
        wait_result,
        after_drain,
        read_results,
        note_error,
        discard_until_sync,
        read_lost,
        queue_in_pipeline,
    )
