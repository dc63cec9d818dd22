"""One benchmark client's state machine: pgbench's ``advanceConnectionState``.

A client runs scripts over its own non-blocking connection. It never waits
itself: :func:`make_advance` builds the ``advance(client)`` function that
moves a client through its states until it must wait — for the server
(its socket), for a ``\\sleep`` or ``--rate`` deadline — and returns; the
worker's event loop (``loop.py``) calls it again when the socket is
readable or the deadline has passed. The clock is read lazily, at most
once per call unless a blocking step (a connection, a shell command, an
expression) runs in between, as pgbench does.

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
    Record the command's latency under ``-r``; next command.
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
"""

# Chained == on ints beats "in (A, B)", which builds a tuple of closure
# constants on every test; this is the hot path.
# ruff: noqa: SIM108, SIM109

from __future__ import annotations

import enum
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pgsurge import pgconn
from pgsurge.errors import PROG, EvalError
from pgsurge.prng import PgPrng
from pgsurge.script.ast import Value
from pgsurge.script.evaluate import EvalContext
from pgsurge.script.values import to_text, truth
from pgsurge.stats.results import CommandStats, FailureKind, StatsData
from pgsurge.throttle import is_late, poisson_delay

if TYPE_CHECKING:
    from pgsurge.stats.series import WorkerRecorder

__all__ = [
    "Client",
    "ConnectionState",
    "IoHooks",
    "Op",
    "OpKind",
    "WorkerState",
    "make_advance",
]


class ConnectionState(enum.IntEnum):
    """pgbench's ``ConnectionStateEnum`` (see the module docstring)."""

    CHOOSE_SCRIPT = 0
    START_TX = 1
    PREPARE_THROTTLE = 2
    THROTTLE = 3
    START_COMMAND = 4
    WAIT_RESULT = 5
    SLEEP = 6
    END_COMMAND = 7
    SKIP_COMMAND = 8
    ERROR = 9
    WAIT_ROLLBACK_RESULT = 10
    RETRY = 11
    FAILURE = 12
    END_TX = 13
    ABORTED = 14
    FINISHED = 15


# Plain ints on the hot path: comparing ints beats comparing enum members.
CHOOSE_SCRIPT = int(ConnectionState.CHOOSE_SCRIPT)
START_TX = int(ConnectionState.START_TX)
PREPARE_THROTTLE = int(ConnectionState.PREPARE_THROTTLE)
THROTTLE = int(ConnectionState.THROTTLE)
START_COMMAND = int(ConnectionState.START_COMMAND)
WAIT_RESULT = int(ConnectionState.WAIT_RESULT)
SLEEP = int(ConnectionState.SLEEP)
END_COMMAND = int(ConnectionState.END_COMMAND)
SKIP_COMMAND = int(ConnectionState.SKIP_COMMAND)
ERROR = int(ConnectionState.ERROR)
WAIT_ROLLBACK_RESULT = int(ConnectionState.WAIT_ROLLBACK_RESULT)
RETRY = int(ConnectionState.RETRY)
FAILURE = int(ConnectionState.FAILURE)
END_TX = int(ConnectionState.END_TX)
ABORTED = int(ConnectionState.ABORTED)
FINISHED = int(ConnectionState.FINISHED)


class OpKind(enum.IntEnum):
    """What a compiled command does."""

    SQL = 0
    SET = 1
    SLEEP = 2
    SHELL = 3
    IF = 4
    ELIF = 5
    ELSE = 6
    ENDIF = 7
    PIPELINE_START = 8
    PIPELINE_SYNC = 9
    PIPELINE_END = 10
    #: a sentinel after a script's last command
    END = 11


K_SQL = int(OpKind.SQL)
K_SET = int(OpKind.SET)
K_SLEEP = int(OpKind.SLEEP)
K_SHELL = int(OpKind.SHELL)
K_IF = int(OpKind.IF)
K_ELIF = int(OpKind.ELIF)
K_ELSE = int(OpKind.ELSE)
K_ENDIF = int(OpKind.ENDIF)
K_PSTART = int(OpKind.PIPELINE_START)
K_PSYNC = int(OpKind.PIPELINE_SYNC)
K_PEND = int(OpKind.PIPELINE_END)
K_END = int(OpKind.END)

# Query modes
MODE_SIMPLE = 0
MODE_EXTENDED = 1
MODE_PREPARED = 2

# \gset kinds
GSET_NONE = 0
GSET_ONE = 1
GSET_ALL = 2

# pgbench's EStatus
E_NONE = 0
E_META = 1
E_CONN = 2
E_SERIALIZATION = 3
E_DEADLOCK = 4
E_OTHER = 5

_FAILURE_OF = {
    E_SERIALIZATION: FailureKind.SERIALIZATION,
    E_DEADLOCK: FailureKind.DEADLOCK,
    E_OTHER: FailureKind.OTHER,
}

NO_SIMPLE_PIPELINE = "cannot use pipeline mode with the simple query protocol"
BACKEND_DIED = "perhaps the backend died while processing"

#: transactions a client may run in one ``advance`` call when each of them
#: found its results without waiting (see ``advance``)
TX_BUDGET = 4

#: pgbench's SHELL_COMMAND_SIZE: the joined command must stay below it
SHELL_COMMAND_SIZE = 256

_VALID_NAME = re.compile(r"[A-Za-z_\x80-\U0010ffff][0-9A-Za-z_\x80-\U0010ffff]*")

_MISSING: Any = object()


@dataclass(slots=True, eq=False)
class Op:
    """One script command, compiled once per worker for the engine.

    Only the fields of its ``kind`` are meaningful. ``stats`` is the
    worker's per-command accumulator (latency, failures, retries).
    """

    kind: int
    index: int
    #: what -r prints and messages quote
    first_line: str
    stats: CommandStats = field(default_factory=CommandStats)
    # SQL
    sql: bytes = b""
    #: simple mode with variables: literal text at even indexes, names at odd
    parts: tuple[str, ...] | None = None
    #: extended/prepared parameters: variable names in $n order
    names: tuple[str, ...] = ()
    prepname: bytes = b""
    #: the only parameter's variable name, when there is exactly one
    param1: str = ""
    gset: int = GSET_NONE
    prefix: str = ""
    # \set, \if, \elif
    var: str = ""
    expr: Callable[[EvalContext], Value] | None = None
    #: meta command name for messages ("set", "if", "elif", "sleep", ...)
    name: str = ""
    #: \set target is a valid variable name (checked once, not per run)
    var_ok: bool = True
    #: the expression calls debug(), which reports the script and command
    uses_debug: bool = False
    #: \if/\elif false: where to go, and whether that is an \elif to evaluate
    false_next: int = -1
    false_to_elif: bool = False
    #: \elif/\else reached after a true branch: past the matching \endif
    end_next: int = -1
    # \sleep
    amount: int | str = 0
    unit_us: int = 1
    # \shell/\setshell
    argv: tuple[str, ...] = ()
    #: \startpipeline under -M prepared: the SQL ops up to \endpipeline
    pipeline_ops: tuple[Op, ...] = ()
    #: under -r with histograms: records each execution's elapsed µs
    rec: Callable[[int], None] | None = None


@dataclass(slots=True, eq=False)
class Client:
    """pgbench's ``CState``: one client's connection, variables and progress."""

    id: int
    variables: dict[str, Value]
    rng: PgPrng
    ctx: EvalContext
    state: int = CHOOSE_SCRIPT
    conn: pgconn.PgConn | None = None
    #: the raw libpq connection (hot path attribute access), or None
    raw: Any = None
    fd: int = -1
    script: int = 0
    ops: tuple[Op, ...] = ()
    command: int = 0
    txn_scheduled: int = 0
    txn_begin: int = 0
    stmt_begin: int = 0
    sleep_until: int = 0
    estatus: int = E_NONE
    tries: int = 1
    #: transactions ended (successful, failed or skipped), for -t
    cnt: int = 0
    #: PRNG state at the start of the transaction (for retries)
    saved_rng: tuple[int, int] = (0, 0)
    #: statements prepared on the current connection
    prepared: set[bytes] = field(default_factory=set)
    in_pipeline: bool = False
    num_syncs: int = 0
    # result reading
    qrynum: int = 0
    pending: Any = None  # \gset lookahead: the previous result
    #: error seen while draining the rest of a command's results
    drain_state: str | None = None
    drain_msg: str = ""
    drain_fatal: bool = False
    #: \gset/\aset failed: abort once the results are drained
    meta_failed: bool = False
    # ERROR / WAIT_ROLLBACK_RESULT
    discarding: bool = False
    sync_seen: bool = False
    rollback_ok: bool = False
    flush_pending: bool = False
    #: the next START_COMMAND evaluates an \elif (reached by a false jump)
    eval_elif: bool = False


@dataclass(slots=True, eq=False)
class WorkerState:
    """pgbench's ``TState``: what a worker's clients share and accumulate."""

    stats: StatsData
    per_script: list[StatsData] | None
    choose_rng: PgPrng
    throttle_rng: PgPrng
    throttle_trigger: int = 0
    latency_late: int = 0
    conn_total_us: int = 0
    #: µs spent off the CPU in blocking calls outside the event loop's
    #: waits (connections under -C, first prepares, shell commands): time
    #: the worker waited although its loop did not
    blocked_us: int = 0
    #: pgbench's ``timer_exceeded``: set when -T is over (by the worker's alarm)
    timer_exceeded: bool = False
    #: -l: ``TxLogWriter.log`` of this worker, or None
    txlog: Callable[..., None] | None = None
    #: latency histograms and interval series, when an output needs them
    recorder: WorkerRecorder | None = None
    #: why each aborted client aborted (its last error message)
    abort_messages: list[str] = field(default_factory=list)


class IoHooks(Protocol):
    """What the event loop does for a client's socket."""

    def attach(self, client: Client) -> None:
        """Start watching a newly opened connection."""

    def detach(self, client: Client) -> None:
        """Stop watching the connection before it closes."""

    def want_write(self, client: Client) -> None:
        """``flush()`` could not send everything: wait for writability too
        (sets ``client.flush_pending``)."""

    def write_done(self, client: Client) -> None:
        """Everything was sent: wait for readability only again (clears
        ``client.flush_pending``)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The run settings the state machine reads (plain values)."""

    nclients: int
    query_mode: int
    #: -t per client, 0 under -T
    nxacts: int
    #: -T end (monotonic µs), 0 without -T
    end_us: int
    #: per-worker mean Poisson delay in µs (-R), 0.0 when not throttled
    throttle_delay: float
    latency_limit_us: int
    #: time each transaction (-P, -R, -L, -l, several scripts)
    detailed: bool
    per_command: bool
    max_tries: int
    verbose_errors: bool
    continue_on_error: bool
    connect_each_tx: bool
    #: script weights, in order
    weights: tuple[int, ...]
    conninfo: dict[str, str]
    password: str | None = None
    #: -l: every transaction goes to the worker's log
    log: bool = False


def _clock() -> int:
    return time.monotonic_ns() // 1000


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
        v = variables.get(name, _MISSING)
        t = type(v)
        if t is int:
            append(b"%d" % v)
        elif t is str:
            append(v.encode())
        elif v is _MISSING:
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
            v = variables.get(part, _MISSING)
            out.append(":" + part if v is _MISSING else to_text(v))
        else:
            out.append(part)
    return "".join(out).encode()


def variable_text(variables: dict[str, Value], name: str) -> str | None:
    v = variables.get(name, _MISSING)
    return None if v is _MISSING else to_text(v)


def valid_variable_name(name: str) -> bool:
    """pgbench's ``valid_variable_name``: not empty, no leading digit."""
    return _VALID_NAME.fullmatch(name) is not None


def _atoi(text: str) -> int:
    """C ``atoi``: leading blanks, a sign, digits; 0 when there are none."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    if not m:
        return 0
    value = int(m.group(1))
    # C int overflow is undefined; wrap like the x86 binary
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _c_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def make_advance(
    s: Settings,
    w: WorkerState,
    scripts: tuple[tuple[Op, ...], ...],
    io: IoHooks,
    log: Callable[[str], None],
) -> Callable[[Client], None]:
    """Build ``advance(client)`` for one worker.

    ``log`` receives complete stderr lines (newline included). Settings are
    bound into the closure once, so the hot path reads locals and cells.
    """
    query_mode = s.query_mode
    nxacts = s.nxacts
    end_us = s.end_us
    throttle_delay = s.throttle_delay
    latency_limit = s.latency_limit_us
    detailed = s.detailed
    per_command = s.per_command
    max_tries = s.max_tries
    verbose_errors = s.verbose_errors
    continue_on_error = s.continue_on_error
    connect_each_tx = s.connect_each_tx
    weights = s.weights
    nscripts = len(scripts)
    total_weight = sum(weights)
    stats = w.stats
    record = stats.record
    per_script = w.per_script
    choose_rng = w.choose_rng
    throttle_rng = w.throttle_rng
    throttled = throttle_delay > 0.0
    latency_count = stats.latency
    #: whether START_TX must read the clock (latency, lag, -L retry limits)
    tx_clock = detailed or latency_limit > 0 or verbose_errors
    #: END_TX may account a success inline: no lag, no per-script stats, no log
    plain_accounting = not throttled and per_script is None and not s.log
    save_rng = max_tries != 1
    clock = _clock
    monotonic_ns = _monotonic_ns
    thread_time_ns = _thread_time_ns
    libpq_error = pgconn.LibpqError
    TUPLES_OK = pgconn.TUPLES_OK
    COMMAND_OK = pgconn.COMMAND_OK
    EMPTY_QUERY = pgconn.EMPTY_QUERY
    PIPELINE_SYNC = pgconn.PIPELINE_SYNC
    TRANS_IDLE = pgconn.TRANS_IDLE
    TRANS_INTRANS = pgconn.TRANS_INTRANS
    TRANS_INERROR = pgconn.TRANS_INERROR
    strip_nl = pgconn.strip_newline
    rec = w.recorder
    # histogram recording, bound once: None when no output needs it
    rec_latency = rec.latency if rec is not None else None
    rec_lag = rec.lag if rec is not None and throttled else None
    rec_script = rec.script if rec is not None and nscripts > 1 else None
    #: the last error message, which tells why a client aborts
    last_error = ""

    def error(message: str) -> None:
        nonlocal last_error
        last_error = message
        log(f"{PROG}: error: {message}\n")

    def info(message: str) -> None:
        log(f"{PROG}: {message}\n")

    def command_failed(st: Client, cmd: str, message: str) -> None:
        error(
            f"client {st.id} aborted in command {st.command} ({cmd}) "
            f"of script {st.script}; {message}"
        )

    # -- transactions ------------------------------------------------------

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
        failure = _FAILURE_OF[estatus] if estatus else None
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

    def connect(st: Client) -> bool:
        conn, message, _needs = pgconn.connect(s.conninfo, s.password)
        if conn is None:
            error(strip_nl(message))
            return False
        conn.set_nonblocking()
        st.conn = conn
        st.raw = conn._pgconn
        st.prepared = set()
        st.in_pipeline = False
        st.num_syncs = 0
        io.attach(st)
        return True

    def disconnect(st: Client) -> None:
        if st.conn is not None:
            io.detach(st)
            st.conn.finish()
            st.conn = None
            st.raw = None

    def flush_sent(st: Client) -> bool:
        """After a send: push the data; wait for writability if needed."""
        try:
            if st.raw.flush():
                if not st.flush_pending:
                    io.want_write(st)
            elif st.flush_pending:
                io.write_done(st)
        except libpq_error:
            return False
        return True

    def blocked_since(start_us: int, cpu_ns: int) -> int:
        """Account a blocking call that began at ``start_us`` (monotonic)
        with ``cpu_ns`` of thread CPU: its time off the CPU was waiting.
        Returns the clock."""
        now = monotonic_ns() // 1000
        off_cpu = now - start_us - (thread_time_ns() - cpu_ns) // 1000
        if off_cpu > 0:
            w.blocked_us += off_cpu
        return now

    def prepare(st: Client, op: Op) -> None:
        """pgbench ``prepareCommand``: blocking PQprepare on first use."""
        start, cpu = monotonic_ns() // 1000, thread_time_ns()
        msg = st.conn.prepare(op.prepname, op.sql)  # type: ignore[union-attr]
        blocked_since(start, cpu)
        if msg is not None:
            error(strip_nl(msg))
        st.prepared.add(op.prepname)

    def send_sql(st: Client, op: Op) -> bool:
        conn = st.conn
        assert conn is not None
        try:
            if query_mode == MODE_PREPARED:
                if op.prepname not in st.prepared:
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

    def do_retry(st: Client, now: int) -> tuple[bool, int]:
        """pgbench ``doRetry``: may this failed transaction run again?"""
        if st.estatus != E_SERIALIZATION and st.estatus != E_DEADLOCK:
            return False, now
        if max_tries and st.tries >= max_tries:
            return False, now
        if latency_limit:
            if not now:
                now = clock()
            if now - st.txn_scheduled > latency_limit:
                return False, now
        if w.timer_exceeded:
            return False, now
        return True, now

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
                now = clock()
            used = 100.0 * (now - st.txn_scheduled) / latency_limit
            text += f", {used:.3f}% of the maximum time of tries was used"
        info(text + ")")
        return now

    def tx_status_error(st: Client) -> None:
        if st.conn is None or st.conn.bad:
            error("perhaps the backend died while processing")
        error(f"client {st.id} aborted while receiving the transaction status")

    # -- meta commands -------------------------------------------------------

    def run_shell(st: Client, op: Op, now: int) -> bool:
        """pgbench ``runShellCommand``; blocks this worker while it runs."""
        argv = op.argv
        words = []
        length = 0
        for i, arg in enumerate(argv):
            if not arg.startswith(":"):
                text = arg
            elif arg.startswith("::"):
                text = arg[1:]
            else:
                value = variable_text(st.variables, arg[1:])
                if value is None:
                    error(f'{argv[0]}: undefined variable "{arg}"')
                    return False
                text = value
            add = len(text.encode()) + (1 if i > 0 else 0)
            if length + add >= SHELL_COMMAND_SIZE - 1:
                error(f"{argv[0]}: shell command is too long")
                return False
            length += add
            words.append(text)
        command = " ".join(words)
        if op.var == "":
            rc = subprocess.call(command, shell=True)
            if rc != 0:
                if not w.timer_exceeded:
                    error(f"{argv[0]}: could not launch shell command")
                return False
            return True
        try:
            proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE)
        except OSError:
            error(f"{argv[0]}: could not launch shell command")
            return False
        assert proc.stdout is not None
        line = proc.stdout.readline(63)
        proc.stdout.close()
        proc.wait()
        if not line:
            if not w.timer_exceeded:
                error(f"{argv[0]}: could not read result of shell command")
            return False
        res: str = line.decode("utf-8", "replace")
        # strtol, then only white space may follow (no digits at all reads 0)
        m = re.match(r"[ \t\n\v\f\r]*[+-]?[0-9]+", res)
        number = int(m.group(0)) if m else 0
        rest = res[m.end() :] if m else res
        if rest.lstrip(" \t\n\v\f\r"):
            error(f'{argv[0]}: shell command must return an integer (not "{res}")')
            return False
        number = max(min(number, 2**63 - 1), -(2**63))  # strtol saturates
        return store_variable(st, "setshell", op.var, _c_int(number))

    def store_variable(st: Client, context: str, name: str, value: Value) -> bool:
        variables = st.variables
        if name not in variables and not valid_variable_name(name):
            error(f'{context}: invalid variable name: "{name}"')
            return False
        variables[name] = value
        return True

    def evaluate(st: Client, op: Op) -> tuple[bool, Value]:
        ctx = st.ctx
        if op.uses_debug:
            ctx.script = st.script
            ctx.command = st.command
        try:
            return True, op.expr(ctx)  # type: ignore[misc]
        except EvalError as e:
            if e.message:
                error(e.message)
            command_failed(st, op.name, "evaluation of meta-command failed")
            return False, None

    def sleep_usec(st: Client, op: Op) -> int | None:
        amount = op.amount
        if type(amount) is str:
            text = variable_text(st.variables, amount)
            if text is None:
                error(f'sleep: undefined variable "{amount}"')
                return None
            usec = _atoi(text)
            if usec == 0 and not text[:1].isdigit():
                error(f'sleep: invalid sleep time "{text}" for variable "{amount}"')
                return None
        else:
            usec = int(amount)
        return _c_int(usec * op.unit_us)

    # -- results -------------------------------------------------------------

    def store_gset(st: Client, op: Op, res: Any, is_last: bool) -> bool:
        """pgbench ``readCommandResponse``'s \\gset/\\aset handling."""
        status = res.status
        gset = op.gset
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

    def read_results(st: Client, op: Op) -> int:
        """Fetch every result libpq holds without blocking.

        Returns 0 to wait for more data, 1 when the command completed,
        2 on a retryable (or --continue-on-error) error, 3 to abort.
        In a pipeline (after ``\\endpipeline``) the results of every queued
        query are read in turn, up to the last sync.
        """
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
            if verbose_errors:
                info(
                    f"client {st.id} got an error in command {st.command} (SQL) "
                    f"of script {st.script}; {strip_nl(message)}"
                )
            return 2
        error(
            f"client {st.id} script {st.script} aborted in command {st.command} "
            f"query {st.qrynum}: {strip_nl(message)}"
        )
        return 3

    def discard_until_sync(st: Client) -> int:
        """Non-blocking pgbench ``discardUntilSync``: 0 wait, 1 done, 3 abort."""
        raw = st.raw
        while True:
            if st.conn.bad:  # type: ignore[union-attr]
                error(
                    f"client {st.id} aborted while rolling back the transaction "
                    "after an error; perhaps the backend died while processing"
                )
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

    # -- the state machine ----------------------------------------------------

    def advance(st: Client) -> None:
        nonlocal last_error
        now = 0
        jump = -1
        # After a transaction that talked to the server, go straight on with
        # the next one instead of round the loop (a few times at most, for
        # fairness); pgbench returns after every transaction so that a script
        # of meta commands only cannot monopolize the thread, and so do we
        # for those.
        io_done = False
        budget = TX_BUDGET
        state = st.state
        while True:
            if state == END_COMMAND:
                if per_command:
                    if not now:
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
                if kind != K_END:
                    if per_command:
                        if not now:
                            now = monotonic_ns() // 1000
                        st.stmt_begin = now
                    if kind == K_SQL:
                        if st.in_pipeline:
                            if op.gset:
                                cmd = "gset" if op.gset == GSET_ONE else "aset"
                                command_failed(
                                    st, cmd, f"\\{cmd} is not allowed in pipeline mode"
                                )
                                st.estatus = E_META
                                state = ABORTED
                                continue
                            if not send_sql(st, op):
                                command_failed(st, "SQL", "SQL command send failed")
                                state = ABORTED
                                continue
                            state = END_COMMAND
                            continue
                        raw = st.raw
                        try:
                            # the common cases inline: one call into libpq
                            if (
                                query_mode == MODE_PREPARED
                                and op.prepname in st.prepared
                            ):
                                if op.param1:
                                    v = st.variables.get(op.param1, _MISSING)
                                    if type(v) is int:
                                        raw.send_query_prepared(
                                            op.prepname, [b"%d" % v]
                                        )
                                    else:
                                        raw.send_query_prepared(
                                            op.prepname,
                                            params_of(st.variables, op.names),
                                        )
                                elif op.names:
                                    raw.send_query_prepared(
                                        op.prepname, params_of(st.variables, op.names)
                                    )
                                else:
                                    raw.send_query_prepared(op.prepname, None)
                            elif query_mode == MODE_SIMPLE and op.parts is None:
                                raw.send_query(op.sql)
                            elif not send_sql(st, op):
                                raise libpq_error("send failed")
                            if raw.flush():
                                if not st.flush_pending:
                                    io.want_write(st)
                            elif st.flush_pending:
                                io.write_done(st)
                        except libpq_error:
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
                        ctx = st.ctx
                        if op.uses_debug:
                            ctx.script = st.script
                            ctx.command = i
                        try:
                            value = op.expr(ctx)  # type: ignore[misc]
                        except EvalError as e:
                            if e.message:
                                error(e.message)
                            command_failed(
                                st, "set", "evaluation of meta-command failed"
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        if op.var_ok:
                            st.variables[op.var] = value
                        elif not store_variable(st, "set", op.var, value):
                            command_failed(
                                st, "set", "assignment of meta-command failed"
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        now = 0
                        state = END_COMMAND
                        continue
                    elif kind == K_IF or (kind == K_ELIF and st.eval_elif):
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
                            command_failed(
                                st, "sleep", "execution of meta-command failed"
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        if not now:
                            now = monotonic_ns() // 1000
                        st.sleep_until = now + usec
                        state = SLEEP
                        continue
                    elif kind == K_SHELL:
                        start, cpu = monotonic_ns() // 1000, thread_time_ns()
                        ok = run_shell(st, op, now)
                        blocked_since(start, cpu)
                        if not ok:
                            command_failed(
                                st,
                                "setshell" if op.var else "shell",
                                "execution of meta-command failed",
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                    elif kind == K_PSTART:
                        if query_mode == MODE_SIMPLE:
                            command_failed(
                                st,
                                "startpipeline",
                                NO_SIMPLE_PIPELINE,
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        if query_mode == MODE_PREPARED:
                            for pop in op.pipeline_ops:
                                if pop.prepname not in st.prepared:
                                    prepare(st, pop)
                        if st.in_pipeline:
                            command_failed(
                                st, "startpipeline", "already in pipeline mode"
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        try:
                            st.raw.enter_pipeline_mode()
                        except libpq_error:
                            command_failed(
                                st, "startpipeline", "failed to enter pipeline mode"
                            )
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        st.in_pipeline = True
                    elif kind == K_PSYNC or kind == K_PEND:
                        cmd = "syncpipeline" if kind == K_PSYNC else "endpipeline"
                        if not st.in_pipeline:
                            command_failed(st, cmd, "not in pipeline mode")
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        try:
                            st.raw.pipeline_sync()
                        except libpq_error:
                            command_failed(st, cmd, "failed to send a pipeline sync")
                            st.estatus = E_META
                            state = ABORTED
                            continue
                        st.num_syncs += 1
                        if kind == K_PEND:
                            if not flush_sent(st):
                                command_failed(
                                    st, cmd, "failed to send a pipeline sync"
                                )
                                st.estatus = E_META
                                state = ABORTED
                                continue
                            st.qrynum = 0
                            st.state = WAIT_RESULT
                            return
                    # expressions and shell commands may take time: re-read the clock
                    now = 0
                    state = END_COMMAND
                    continue
                # past the last command
                if st.in_pipeline:
                    error(
                        f"client {st.id} aborted: end of script reached "
                        "with pipeline open"
                    )
                    state = ABORTED
                    continue
                state = END_TX  # falls through

            if state == END_TX:
                if st.estatus == E_NONE and st.tries == 1 and plain_accounting:
                    # StatsData.record of a first-try success, without the calls
                    stats.cnt += 1
                    st.cnt += 1
                    lat_stats = latency_count
                    if detailed:
                        if not now:
                            now = monotonic_ns() // 1000
                        latency = now - st.txn_scheduled
                        if lat_stats.count == 0:
                            lat_stats.min = lat_stats.max = latency
                        elif latency < lat_stats.min:
                            lat_stats.min = latency
                        elif latency > lat_stats.max:
                            lat_stats.max = latency
                        lat_stats.sum += latency
                        lat_stats.sum2 += latency * latency
                        if latency_limit and latency > latency_limit:
                            w.latency_late += 1
                        if rec_latency is not None:
                            rec_latency(latency)
                    # not detailed: SimpleStats.add(0.0) moves only the count
                    lat_stats.count += 1
                else:
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
                if not io_done or not budget:
                    st.state = CHOOSE_SCRIPT
                    return
                # start the next transaction right away
                io_done = False
                budget -= 1
                now = 0
                if nscripts != 1 or throttled or connect_each_tx:
                    state = CHOOSE_SCRIPT
                    continue
                # CHOOSE_SCRIPT and START_TX of the common case, inline
                st.estatus = E_NONE
                st.tries = 1
                if tx_clock:
                    now = monotonic_ns() // 1000
                    st.txn_begin = now
                    st.txn_scheduled = now
                if save_rng:
                    st.saved_rng = st.rng.getstate()
                st.command = 0
                state = START_COMMAND
                continue

            if state == WAIT_RESULT:
                raw = st.raw
                try:
                    raw.consume_input()
                except libpq_error:
                    command_failed(st, "SQL", BACKEND_DIED)
                    state = ABORTED
                    continue
                if st.flush_pending and not flush_sent(st):
                    command_failed(st, "SQL", BACKEND_DIED)
                    state = ABORTED
                    continue
                op = st.ops[st.command]
                if not op.gset and not st.in_pipeline and st.drain_state is None:
                    # a plain command: count its results up to the end
                    q = st.qrynum
                    is_busy = raw.is_busy
                    get_result = raw.get_result
                    while True:
                        if is_busy():
                            st.qrynum = q
                            st.state = WAIT_RESULT
                            return
                        res = get_result()
                        if res is None:
                            break
                        status = res.status
                        if (
                            status == TUPLES_OK
                            or status == COMMAND_OK
                            or status == EMPTY_QUERY
                        ):
                            q += 1
                            continue
                        break
                    st.qrynum = q
                    if res is None:
                        if q:
                            io_done = True
                            state = END_COMMAND
                        else:
                            error(f"client {st.id} command {st.command}: no results")
                            state = ABORTED
                        continue
                    r = note_error(st, res)
                    if r == -1:
                        r = read_results(st, op)
                else:
                    r = read_results(st, op)
                if r == 0:
                    st.state = WAIT_RESULT
                    return
                if r == 1:
                    io_done = True
                    state = END_COMMAND
                elif r == 2:
                    state = ERROR
                else:
                    state = ABORTED
                continue

            if state == CHOOSE_SCRIPT:
                if nscripts != 1:
                    script = choose_script()
                    st.script = script
                    st.ops = scripts[script]
                st.estatus = E_NONE
                st.tries = 1
                if w.timer_exceeded:
                    state = FINISHED
                    continue
                state = PREPARE_THROTTLE if throttled else START_TX
                continue

            if state == START_TX:
                if tx_clock and not now:
                    now = monotonic_ns() // 1000
                if st.conn is None:
                    start = now if now else monotonic_ns() // 1000
                    cpu = thread_time_ns()
                    if not connect(st):
                        error(f"client {st.id} aborted while establishing connection")
                        state = ABORTED
                        continue
                    now = blocked_since(start, cpu)
                    w.conn_total_us += now - start
                if save_rng:
                    st.saved_rng = st.rng.getstate()
                st.txn_begin = now
                if not throttled:
                    st.txn_scheduled = now
                st.command = 0
                state = START_COMMAND
                continue

            if state == SLEEP:
                if not now:
                    now = monotonic_ns() // 1000
                if now < st.sleep_until:
                    st.state = SLEEP
                    return
                state = END_COMMAND
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

            if state == ERROR:
                if st.in_pipeline:
                    # discard up to a fresh sync, then leave pipeline mode
                    try:
                        st.raw.pipeline_sync()
                    except libpq_error:
                        error(f"client {st.id} aborted: failed to send a pipeline sync")
                        state = ABORTED
                        continue
                    st.discarding = True
                    st.sync_seen = False
                    if not flush_sent(st):
                        state = ABORTED
                        continue
                    r = discard_until_sync(st)
                    if r == 0:
                        st.state = WAIT_ROLLBACK_RESULT
                        return
                    if r == 3:
                        state = ABORTED
                        continue
                tstatus = st.raw.transaction_status
                if tstatus == TRANS_INTRANS or tstatus == TRANS_INERROR:
                    try:
                        st.raw.send_query(b"ROLLBACK")
                    except libpq_error:
                        error(
                            f"client {st.id} aborted: failed to send sql command for "
                            "rolling back the failed transaction"
                        )
                        state = ABORTED
                        continue
                    st.rollback_ok = False
                    if not flush_sent(st):
                        state = ABORTED
                        continue
                    st.state = WAIT_ROLLBACK_RESULT
                    return
                if tstatus == TRANS_IDLE:
                    if w.timer_exceeded:
                        state = FINISHED
                        continue
                    ok, now = do_retry(st, now)
                    state = RETRY if ok else FAILURE
                    continue
                tx_status_error(st)
                state = ABORTED
                continue

            if state == WAIT_ROLLBACK_RESULT:
                raw = st.raw
                try:
                    raw.consume_input()
                except libpq_error:
                    error(
                        f"client {st.id} aborted while rolling back the transaction "
                        "after an error; perhaps the backend died while processing"
                    )
                    state = ABORTED
                    continue
                if st.flush_pending and not flush_sent(st):
                    state = ABORTED
                    continue
                if st.discarding:
                    r = discard_until_sync(st)
                    if r == 0:
                        st.state = WAIT_ROLLBACK_RESULT
                        return
                    state = ERROR if r == 1 else ABORTED
                    continue
                aborted = False
                while True:
                    if raw.is_busy():
                        st.state = WAIT_ROLLBACK_RESULT
                        return
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
                        aborted = True
                        break
                if aborted or not st.rollback_ok:
                    state = ABORTED
                    continue
                if w.timer_exceeded:
                    state = FINISHED
                    continue
                ok, now = do_retry(st, now)
                state = RETRY if ok else FAILURE
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
                    w.abort_messages.append(last_error or f"client {st.id} aborted")
                    last_error = ""
                disconnect(st)
                st.state = state
                return

            raise AssertionError(f"unexpected client state {state}")

    return advance
