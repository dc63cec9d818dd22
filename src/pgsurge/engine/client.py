"""One benchmark client's state machine: pgbench's ``advanceConnectionState``.

A client runs scripts over its own non-blocking connection. It never waits
itself: :func:`make_engine` builds the ``advance(client)`` function that
moves a client through its states until it must wait — for the server
(its socket), for a ``\\sleep`` or ``--rate`` deadline — and returns; the
worker's event loop (``loop``) calls it again when the socket is
readable or the deadline has passed. The clock is read lazily, at most
once per call unless a blocking step (a connection, a shell command, an
expression) runs in between, as pgbench does; under ``-r`` each command's
start and end are fresh readings, so that a command's latency runs from
its send to its last result and nothing else.

States (:class:`ConnectionState`, pgbench's ``ConnectionStateEnum``):

``CHOOSE_SCRIPT``
    Weighted choice of the next script with the worker's choose stream;
    reset the error status and tries. Then ``PREPARE_THROTTLE`` under
    ``-R``, ``START_TX`` otherwise, ``FINISHED`` when ``-T`` is over.
``PREPARE_THROTTLE``
    Draw the next slot of the worker's Poisson schedule; with ``-L`` skip
    (and count) slots that are already too late; ``FINISHED`` when the
    slot is past the end of ``-T``, else ``THROTTLE``.
``THROTTLE``
    Wait until the slot, then ``START_TX`` (or ``FINISHED`` after ``-T``).
``START_TX``
    Connect under ``-C``; remember the PRNG state for retries; record the
    start time (and the schedule when not throttled); first command.
``START_COMMAND``
    Send an SQL command (``WAIT_RESULT``; in a pipeline only queue it and go
    on), or run a meta command (``END_COMMAND``, ``SLEEP`` or ``ABORTED``).
    Past the last command: ``END_TX``.
``WAIT_RESULT``
    Read what arrived; once libpq holds a whole result, check it (store
    ``\\gset``/``\\aset`` variables); after the command's last result,
    ``END_COMMAND``. A serialization or deadlock error (or any SQL error
    under ``--continue-on-error``) goes to ``ERROR``; others abort.
``SLEEP``
    Wait for the end of a ``\\sleep``, then ``END_COMMAND``.
``END_COMMAND``
    Record the command's latency under ``-r`` (from ``START_COMMAND``'s
    reading to a fresh one); next command.
``SKIP_COMMAND``
    pgbench walks the commands of a false ``\\if`` branch one by one. The
    parser precomputes the branch targets, so here a false condition jumps
    straight to its target and this state is never entered; it is kept so
    that the numbering and the documentation match pgbench's.
``ERROR``
    In a pipeline, discard results up to a new sync and leave pipeline
    mode; roll back an open transaction block (``WAIT_ROLLBACK_RESULT``);
    then ``RETRY`` or ``FAILURE``.
``WAIT_ROLLBACK_RESULT``
    Wait for the pipeline discard and the ``ROLLBACK``.
``RETRY``
    Restore the PRNG state of the transaction start and run the script
    again from its first command.
``FAILURE``
    Count the failure on the failing command, then ``END_TX``.
``END_TX``
    Account the transaction; abort if it left a transaction block open;
    disconnect under ``-C``; ``FINISHED`` after ``-t`` transactions or once
    ``-T`` is over, else ``CHOOSE_SCRIPT``. Returns to the loop, so that a
    script of meta commands only cannot monopolize the worker.
``ABORTED``/``FINISHED``
    Final: the connection is closed.

Messages (client aborts, ``--verbose-errors``) go through the worker's
``log`` sink with pgbench's wording; nothing here prints directly.

This module is the dispatch on the state, the reference that the C loop's
``fl_advance`` (``_native/_fastloop_client.c``) copies state for state for
the plain case; each state calls the step named after its C counterpart.
Only ``\\set`` and the branches of ``\\if`` run here; the phases live
beside it: ``state`` (the structs and constants), ``sql`` (``send_command``
and ``wait_result``, with pgsurge._fastpq's calls where the connection
allows them), ``meta`` (meta commands), ``tx`` (``process_xact``,
connections, errors and retries), ``handback`` (the C loop's ``resume``
and ``gset``). Their steps are closures built once per worker and bound
here as closure variables, so a call costs what it did when they were
nested functions.
"""

# Chained == on ints beats "in (A, B)", which builds a tuple of closure
# constants on every test; this is the hot path.
# ruff: noqa: SIM108, SIM109

from __future__ import annotations

import time
from collections.abc import Callable

from pgsurge import pgconn
from pgsurge.engine.abi import (
    NEXT_STATE,
    R_WAIT,
    RESUME_FLUSH,
    RESUME_SEND_FAILED,
    run_flags,
)
from pgsurge.engine.program import python_step
from pgsurge.engine.state import (
    ABORTED,
    CHOOSE_SCRIPT,
    E_META,
    E_NONE,
    END_COMMAND,
    END_TX,
    ERROR,
    FAILURE,
    FINISHED,
    K_ELIF,
    K_ELSE,
    K_END,
    K_ENDIF,
    K_IF,
    K_PY,
    K_SET,
    K_SLEEP,
    K_SQL,
    PREPARE_THROTTLE,
    RETRY,
    SLEEP,
    START_COMMAND,
    START_TX,
    THROTTLE,
    WAIT_RESULT,
    WAIT_ROLLBACK_RESULT,
    Client,
    ConnectionState,
    IoHooks,
    Op,
    OpKind,
    Settings,
    Support,
    WorkerState,
    own_variables,
)
from pgsurge.engine.throttle import is_late, poisson_delay
from pgsurge.engine.tx import close_client, make_tx
from pgsurge.errors import EvalError
from pgsurge.script.values import truth

__all__ = [
    "RESUME_FLUSH",
    "RESUME_SEND_FAILED",
    "Client",
    "ConnectionState",
    "Engine",
    "IoHooks",
    "Op",
    "OpKind",
    "Settings",
    "WorkerState",
    "import_engine",
    "make_engine",
    "make_engine_lazily",
]

_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns


class Engine:
    """A worker's state machine: ``advance``, and ``resume`` for the C loop.

    ``resume(client, event)`` continues a client that ``pgsurge._fastloop``
    hands back after it has done part of a step itself: ``event`` is what
    its own ``fastpq.drain`` returned for the command in flight (a failed
    result, a lost connection, no result at all), or :data:`RESUME_FLUSH`
    / :data:`RESUME_SEND_FAILED` after a send. It does what ``advance``
    does at that point, then calls ``advance``.

    A plain class, not a dataclass: every run imports it, and generated
    methods would cost start-up time and buy nothing for a bundle of
    closures (never compared, copied or printed).
    """

    __slots__ = ("advance", "gset", "resume")

    advance: Callable[[Client], None]
    resume: Callable[[Client, object], None]
    #: the C loop's \\gset/\\aset: (client, script, command, qrynum, got,
    #: context, name, value) -> stored? Stores a value into a variable C
    #: does not hold (``name``), or reports ``got`` rows where one was
    #: expected (``name`` None); gives pgbench's messages on failure
    gset: Callable[[Client, int, int, int, int, str, str | None, str], bool]

    def __init__(
        self,
        advance: Callable[[Client], None],
        resume: Callable[[Client, object], None],
        gset: Callable[[Client, int, int, int, int, str, str | None, str], bool],
    ) -> None:
        self.advance = advance
        self.resume = resume
        self.gset = gset


def import_engine() -> None:
    """Import the modules :func:`make_engine` imports when it runs: before
    the workers are forked, so that the processes share their pages and
    none spends the time (a forked worker builds its engine at once on the
    Python engine, at a hand-back on the C loop)."""
    from pgsurge.engine import handback, meta, sql  # noqa: F401


def make_engine_lazily(
    s: Settings,
    w: WorkerState,
    scripts: tuple[tuple[Op, ...], ...],
    io: IoHooks,
    log: Callable[[str], None],
) -> Engine:
    """An :class:`Engine` that builds the real one (:func:`make_engine`)
    on the first call that needs it: for the C loop, which calls it only
    to hand a client back (an error, a command C does not run) and, at
    the end, with each finished client, which ``advance`` would only
    disconnect (:func:`pgsurge.engine.tx.close_client`, done here without
    the engine).

    Building the engine makes some hundred closures, and making one
    writes to its code object (the reference count): a forked worker
    that builds it copies that many pages it shared with the parent, some
    600 KiB of a ``-c 2 -j 2`` run's memory. What the builder reads of
    ``w`` (its stats, recorder, random states) is set before this and only
    changed in place after.

    A client handed back gets its own variables first
    (:func:`pgsurge.engine.state.own_variables`): the engine's steps read
    and write ``st.variables`` as the client's own.
    """
    built: list[Engine] = []

    def engine() -> Engine:
        if not built:
            built.append(make_engine(s, w, scripts, io, log))
        return built[0]

    def advance(st: Client) -> None:
        if not built and st.state == FINISHED:
            close_client(io, st)  # what advance does with a finished client
            return
        own_variables(st, w)
        engine().advance(st)

    def resume(st: Client, event: object) -> None:
        own_variables(st, w)
        engine().resume(st, event)

    def gset(
        st: Client,
        script: int,
        command: int,
        qrynum: int,
        got: int,
        context: str,
        name: str | None,
        value: str,
    ) -> bool:
        own_variables(st, w)
        return engine().gset(st, script, command, qrynum, got, context, name, value)

    return Engine(advance, resume, gset)


def make_engine(
    s: Settings,
    w: WorkerState,
    scripts: tuple[tuple[Op, ...], ...],
    io: IoHooks,
    log: Callable[[str], None],
) -> Engine:
    """Build ``advance(client)`` (and ``resume``) for one worker.

    ``log`` receives complete stderr lines (newline included). Settings are
    bound into the closure once, so the hot path reads locals and cells.
    """
    # imported here: a run on the C loop builds the engine only when it
    # hands a client back (make_engine_lazily), and most never do (the
    # three modules' code and functions are some 80 KiB of its memory)
    from pgsurge.engine.handback import make_handback
    from pgsurge.engine.meta import make_meta
    from pgsurge.engine.sql import make_sql

    nxacts = s.nxacts
    end_us = s.end_us
    throttle_delay = s.throttle_delay
    latency_limit = s.latency_limit_us
    per_command = s.per_command
    verbose_errors = s.verbose_errors
    connect_each_tx = s.connect_each_tx
    nscripts = len(scripts)
    throttle_rng = w.throttle_rng
    throttled = throttle_delay > 0.0
    flags = run_flags(s)
    #: whether START_TX must read the clock (latency, lag, -L retry limits)
    tx_clock = flags.tx_clock
    save_rng = flags.save_rng
    monotonic_ns = _monotonic_ns
    thread_time_ns = _thread_time_ns
    TRANS_IDLE = pgconn.TRANS_IDLE
    TRANS_INTRANS = pgconn.TRANS_INTRANS
    TRANS_INERROR = pgconn.TRANS_INERROR

    # the phases' steps, bound as closure variables of advance
    sup = Support(w, log, s.reconnect > 0)
    # --debug: pgbench's debug lines (the steps print their own)
    debug = s.debug
    trace = sup.debug
    descs = s.script_descs
    error = sup.error
    command_failed = sup.command_failed
    store_variable = sup.store_variable
    eval_context = sup.eval_context
    blocked_since = sup.blocked_since
    sql = make_sql(s, io, sup)
    send_command = sql.send_command
    wait_result = sql.wait_result
    queue_in_pipeline = sql.queue_in_pipeline
    meta = make_meta(s, w, sup, sql)
    evaluate = meta.evaluate
    sleep_usec = meta.sleep_usec
    run_meta = meta.run_meta
    tx = make_tx(s, w, nscripts, io, sup, sql)
    choose_script = tx.choose_script
    process_xact = tx.process_xact
    connect = tx.connect
    disconnect = tx.disconnect
    tx_status_error = tx.tx_status_error
    on_error = tx.on_error
    on_rollback_result = tx.on_rollback_result
    verbose_retry = tx.verbose_retry
    py_step = python_step(s, sup, scripts)

    # -- the state machine ----------------------------------------------------
    # State for state with fl_advance in _fastloop_client.c (the C loop's
    # copy of the plain case); each step is named after its C counterpart.

    def advance(st: Client) -> None:
        now = 0
        jump = -1
        state = st.state
        while True:
            if state == END_COMMAND:
                if per_command:
                    # a fresh reading, never the cached one: a result that
                    # came while the client was not running (on a busy
                    # machine, often before the first look after the send)
                    # must not count as taking no time
                    now = monotonic_ns() // 1000
                    op = st.ops[st.command]
                    op.stats.latency.add(now - st.stmt_begin)
                    if op.rec is not None:
                        op.rec(now - st.stmt_begin)
                if jump >= 0:
                    st.command = jump
                    jump = -1
                else:
                    st.command += 1
                state = START_COMMAND  # falls through

            if state == START_COMMAND:
                i = st.command
                op = st.ops[i]
                kind = op.kind
                if kind == K_END:
                    # past the last command
                    if st.in_pipeline:
                        error(
                            f"client {st.id} aborted: end of script reached "
                            "with pipeline open"
                        )
                        state = ABORTED
                        continue
                    state = END_TX
                    continue
                if kind == K_PY:
                    # a Python transaction: its generator yields the statement
                    # to send now (engine.pyworkload)
                    state = py_step(st, op)
                    if state != START_COMMAND:
                        now = 0
                        continue
                    op = st.ops[st.command]
                    kind = op.kind
                if per_command:
                    # fresh too: the client's work since the clock was last
                    # read (the previous command's accounting, a Python
                    # transaction's step) is no command's
                    now = monotonic_ns() // 1000
                    st.stmt_begin = now
                if kind == K_SQL:
                    if st.in_pipeline:
                        state = NEXT_STATE[queue_in_pipeline(st, op)]
                        continue
                    if not send_command(st, op):
                        command_failed(st, "SQL", "SQL command send failed")
                        state = ABORTED
                        continue
                    st.qrynum = 0
                    # Like pgbench, look for the answer at once: on a busy
                    # machine the server has often replied already, which
                    # saves a wait on the socket.
                    state = WAIT_RESULT
                    continue
                # meta commands
                if kind == K_SET:
                    ctx = st.ctx or eval_context(st)
                    if op.uses_debug:  # always under --debug
                        ctx.script = st.script
                        ctx.command = i
                        if debug:
                            trace(f"client {st.id} executing {op.trace}")
                    try:
                        value = op.expr(ctx)  # type: ignore[misc]
                    except EvalError as e:
                        if e.message:
                            error(e.message)
                        command_failed(st, "set", "evaluation of meta-command failed")
                        st.estatus = E_META
                        state = ABORTED
                        continue
                    if op.var_ok:
                        st.variables[op.var] = value
                    elif not store_variable(st, "set", op.var, value):
                        command_failed(st, "set", "assignment of meta-command failed")
                        st.estatus = E_META
                        state = ABORTED
                        continue
                    now = 0
                    state = END_COMMAND
                    continue
                if debug:
                    trace(f"client {st.id} executing {op.trace}")
                if kind == K_IF or (kind == K_ELIF and st.eval_elif):
                    st.eval_elif = False
                    ok, value = evaluate(st, op)
                    if not ok:
                        st.estatus = E_META
                        state = ABORTED
                        continue
                    if not truth(value):
                        jump = op.false_next
                        st.eval_elif = op.false_to_elif
                elif kind == K_ELIF or kind == K_ELSE:
                    # reached at the end of a true branch: skip to the \endif
                    jump = op.end_next
                elif kind == K_ENDIF:
                    pass
                elif kind == K_SLEEP:
                    usec = sleep_usec(st, op)
                    if usec is None:
                        command_failed(st, "sleep", "execution of meta-command failed")
                        st.estatus = E_META
                        state = ABORTED
                        continue
                    if not now:
                        now = monotonic_ns() // 1000
                    st.sleep_until = now + usec
                    state = SLEEP
                    continue
                else:
                    # shell and pipeline commands
                    state = run_meta(st, op)
                    if state == WAIT_RESULT:
                        st.state = WAIT_RESULT
                        return
                    if state == ABORTED:
                        continue
                # expressions and shell commands may take time: re-read the clock
                now = 0
                state = END_COMMAND
                continue

            if state == WAIT_RESULT:
                r = wait_result(st, st.ops[st.command])
                if r == R_WAIT:
                    st.state = WAIT_RESULT
                    return
                state = NEXT_STATE[r]
                continue

            if state == SLEEP:
                if not now:
                    now = monotonic_ns() // 1000
                if now < st.sleep_until:
                    st.state = SLEEP
                    return
                state = END_COMMAND
                continue

            if state == END_TX:
                now = process_xact(st, now, False)
                tstatus = st.raw.transaction_status
                if tstatus == TRANS_INTRANS or tstatus == TRANS_INERROR:
                    error(
                        f"client {st.id} aborted: end of script reached without "
                        "completing the last transaction"
                    )
                    state = ABORTED
                    continue
                if tstatus != TRANS_IDLE:
                    tx_status_error(st)
                    state = ABORTED
                    continue
                if connect_each_tx:
                    start = now if now else monotonic_ns() // 1000
                    cpu = thread_time_ns()
                    disconnect(st)
                    now = blocked_since(start, cpu)
                    w.conn_total_us += now - start
                if end_us:
                    if w.timer_exceeded:
                        state = FINISHED
                        continue
                elif st.cnt >= nxacts:
                    state = FINISHED
                    continue
                # as pgbench, back to the loop after every transaction: the
                # next one starts in its next round (EventLoop.run says why)
                st.state = CHOOSE_SCRIPT
                return

            if state == CHOOSE_SCRIPT:
                if nscripts != 1:
                    script = choose_script()
                    st.script = script
                    st.ops = scripts[script]
                if debug:
                    trace(f'client {st.id} executing script "{descs[st.script]}"')
                st.estatus = E_NONE
                st.tries = 1
                if w.timer_exceeded:
                    state = FINISHED
                    continue
                state = PREPARE_THROTTLE if throttled else START_TX
                continue

            if state == PREPARE_THROTTLE:
                w.throttle_trigger += poisson_delay(throttle_rng, throttle_delay)
                st.txn_scheduled = w.throttle_trigger
                if latency_limit:
                    if not now:
                        now = monotonic_ns() // 1000
                    if is_late(w.throttle_trigger, now, latency_limit):
                        now = process_xact(st, now, True)
                        if w.timer_exceeded or (nxacts > 0 and st.cnt >= nxacts):
                            state = FINISHED
                        continue
                if end_us and st.txn_scheduled > end_us:
                    state = FINISHED
                else:
                    state = THROTTLE
                continue

            if state == THROTTLE:
                if not now:
                    now = monotonic_ns() // 1000
                if now < st.txn_scheduled:
                    st.state = THROTTLE
                    return
                state = FINISHED if w.timer_exceeded else START_TX
                continue

            if state == START_TX:
                if tx_clock and not now:
                    now = monotonic_ns() // 1000
                if st.conn is None:
                    start = now if now else monotonic_ns() // 1000
                    cpu = thread_time_ns()
                    # the C loop's attempt on an earlier host (handback.py)
                    # is connection time too, as in pgbench's blocking connect
                    began = st.connect_rest[2] if st.connect_rest is not None else 0
                    connected = connect(st)
                    # waited for the server even when it failed (a
                    # connect_timeout spent is no busy client)
                    now = blocked_since(start, cpu)
                    if connected is None:
                        # the parent's Stop, or -T's end, came while the
                        # server had not answered: no transaction began,
                        # none is lost (the C loop: fl_connect_give_up)
                        state = FINISHED
                        continue
                    if not connected:
                        error(f"client {st.id} aborted while establishing connection")
                        state = ABORTED
                        continue
                    w.conn_total_us += now - (began or start)
                if save_rng:
                    st.saved_rng = st.rng.getstate()
                st.txn_begin = now
                if not throttled:
                    st.txn_scheduled = now
                st.command = 0
                state = START_COMMAND
                continue

            if state == ERROR:
                state = on_error(st, now)
                now = 0
                if state == WAIT_ROLLBACK_RESULT:
                    st.state = WAIT_ROLLBACK_RESULT
                    return
                continue

            if state == WAIT_ROLLBACK_RESULT:
                state = on_rollback_result(st, now)
                now = 0
                if state == WAIT_ROLLBACK_RESULT:
                    st.state = WAIT_ROLLBACK_RESULT
                    return
                continue

            if state == RETRY:
                if verbose_errors:
                    now = verbose_retry(st, now, True)
                st.tries += 1
                st.ops[st.command].stats.retries += 1
                st.rng.setstate(st.saved_rng)
                st.command = 0
                st.estatus = E_NONE
                state = START_COMMAND
                continue

            if state == FAILURE:
                st.ops[st.command].stats.failures += 1
                if verbose_errors:
                    now = verbose_retry(st, now, False)
                state = END_TX
                continue

            if state == ABORTED or state == FINISHED:
                if state == ABORTED:
                    sup.aborted(st)
                disconnect(st)
                st.state = state
                return

            raise AssertionError(f"unexpected client state {state}")

    resume, gset = make_handback(io, sup, sql, advance)
    return Engine(advance, resume, gset)
