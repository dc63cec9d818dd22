"""The vocabulary of the client state machine: states, compiled commands, structs.

Everything the phase modules of a benchmark client share, and nothing that
runs: the state numbers (pgbench's ``ConnectionStateEnum``, documented with
the state machine in :mod:`pgsurge.engine.client`), the compiled script command
:class:`Op`, the per-client :class:`Client` (pgbench's ``CState``), the
per-worker :class:`WorkerState` (``TState``), the run :class:`Settings`,
the :class:`IoHooks` the event loop provides, and :class:`Support`: the
message sink and the small services every phase uses.

The engine is split by phase: ``sql`` sends SQL and reads results,
``meta`` runs meta commands, ``tx`` accounts transactions and
handles errors, retries and (re)connections, and ``client`` dispatches on
the state. Enum members are plain ``int``
constants here, since comparing ints is what the hot path does.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Set
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from pgsurge import pgconn
from pgsurge.errors import PROG
from pgsurge.prng import PgPrng
from pgsurge.records import record
from pgsurge.script.ast import Value
from pgsurge.script.sqlvars import valid_variable_name
from pgsurge.stats.counters import CommandStats, FailureKind, StatsData

if TYPE_CHECKING:
    # annotations only: the Python evaluator is imported where an
    # expression is first evaluated (a plain run of SQL evaluates none)
    from pgsurge.script.evaluate import EvalContext
    from pgsurge.stats.series import WorkerRecorder

__all__ = [
    "NONE_PREPARED",
    "Client",
    "ConnectionState",
    "IoHooks",
    "Op",
    "OpKind",
    "Settings",
    "Support",
    "WorkerState",
    "mark_prepared",
    "own_variables",
]


class ConnectionState(enum.IntEnum):
    """pgbench's ``ConnectionStateEnum`` (documented in ``pgsurge.engine.client``)."""

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
    # pgsurge's own, for --reconnect (engine/reconnect.py; never in the C
    # loop, which does not run such runs): waiting for the back-off's end,
    # and for the socket of a connection being opened
    RECONNECT_WAIT = 16
    CONNECTING = 17


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
RECONNECT_WAIT = int(ConnectionState.RECONNECT_WAIT)
CONNECTING = int(ConnectionState.CONNECTING)


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
    #: a Python transaction's driver: advance its generator (engine.pyworkload)
    PY = 12


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
K_PY = int(OpKind.PY)

# Query modes
MODE_SIMPLE = 0
MODE_EXTENDED = 1
MODE_PREPARED = 2

# \gset kinds
GSET_NONE = 0
GSET_ONE = 1
GSET_ALL = 2
#: a Python transaction's statement whose last result goes to its generator
GSET_PY = 3

# pgbench's EStatus
E_NONE = 0
E_META = 1
E_CONN = 2
E_SERIALIZATION = 3
E_DEADLOCK = 4
E_OTHER = 5

#: the failure kind a transaction ending in an error status counts as
FAILURE_OF = {
    E_SERIALIZATION: FailureKind.SERIALIZATION,
    E_DEADLOCK: FailureKind.DEADLOCK,
    E_OTHER: FailureKind.OTHER,
}

BACKEND_DIED = "perhaps the backend died while processing"

# "[^\x00-\x7f]" for the non-ASCII range: the same set as "\x80-\U0010ffff" inside
# a class, but compiled in 0.1 ms instead of 14 (re builds a charset table)
#: a variable lookup's default: no variable of that name
MISSING: Any = object()

#: ``Client.drain_state`` while a statement's first prepare is in flight
#: (compared by identity: no SQLSTATE is this object)
PREPARING = "<preparing>"


@record(slots=True, eq=False)
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
    gset: int = GSET_NONE
    prefix: str = ""
    # \set, \if, \elif
    var: str = ""
    #: the expression's closure (program.py: compiled on its first call)
    expr: Callable[[EvalContext], Value] | None = None
    #: meta command name for messages ("set", "if", "elif", "sleep", ...)
    name: str = ""
    #: \set target is a valid variable name (checked once, not per run)
    var_ok: bool = True
    #: the expression calls debug(), which reports the script and command;
    #: also set on every \set under --debug, whose trace line is printed
    #: there (the branch costs nothing more in a normal run)
    uses_debug: bool = False
    #: a meta command as --debug shows it: pgbench's argv joined by blanks
    trace: str = ""
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
    #: K_PY: the transaction's ``engine.pyworkload.PyProgram``
    py: Any = None


#: the statements prepared on a connection that has none, shared: a set
#: each is 216 bytes, 210 KiB of a thousand clients' memory that a run in
#: simple or extended mode, or on the C loop (which keeps its own), never
#: fills
NONE_PREPARED: frozenset[bytes] = frozenset()


@record(slots=True, eq=False)
class Client:
    """pgbench's ``CState``: one client's connection, variables and progress."""

    id: int
    #: its variables; in a C loop run the worker's shared initial ones
    #: until it writes one (:func:`own_variables`)
    variables: dict[str, Value]
    rng: PgPrng
    #: the context its \set and \if expressions run in, made at the first
    #: (:meth:`Support.eval_context`): a client the C loop runs needs none
    ctx: EvalContext | None = None
    state: int = CHOOSE_SCRIPT
    conn: pgconn.PgConn | None = None
    #: the raw libpq connection (hot path attribute access), or None
    raw: Any = None
    #: its PGconn address when pgsurge._fastpq drives the hot path, else 0
    #: (see pgsurge.engine.fastpq)
    ptr: int = 0
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
    #: ... of which failed and skipped (the per-server figures count the
    #: others, as the report's processed transactions)
    failed: int = 0
    skipped: int = 0
    #: PRNG state at the start of the transaction (for retries)
    saved_rng: tuple[int, int] = (0, 0)
    #: statements prepared on the current connection: :data:`NONE_PREPARED`
    #: until the first (:func:`mark_prepared`)
    prepared: Set[bytes] = NONE_PREPARED
    in_pipeline: bool = False
    num_syncs: int = 0
    # result reading
    qrynum: int = 0
    pending: Any = None  # \gset lookahead: the previous result
    #: SQLSTATE of an error seen while draining the rest of a command's
    #: results; PREPARING while the command's prepare is in flight. Either
    #: keeps WAIT_RESULT off its plain path, at no cost to that path.
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
    #: the socket is attached but out of the event loop's wait set: it became
    #: readable while the client was not waiting for a result (a notice, or a
    #: FATAL and the close), and is watched again once the client waits for
    #: its next result, which then reads what came (as pgbench does)
    unwatched: bool = False
    #: the next START_COMMAND evaluates an \elif (reached by a false jump)
    eval_elif: bool = False
    #: a Python transaction's generator, context and last result
    #: (``engine.pyworkload.PyClient``), None until one runs
    py: Any = None
    #: -C: where the next connect goes on (the conninfo of the hosts after
    #: one that outlasted connect_timeout, that host's message, and the
    #: clock when the attempt began, 0: unknown), set when the C loop hands
    #: such a client back
    connect_rest: tuple[bytes, str, int] | None = None


def mark_prepared(st: Client, name: bytes) -> None:
    """Note ``name`` prepared on ``st``'s connection: in a set of its own
    from the first (the shared :data:`NONE_PREPARED` stays empty)."""
    prepared = st.prepared
    if isinstance(prepared, set):
        prepared.add(name)
    else:
        st.prepared = {name}


def own_variables(st: Client, w: WorkerState) -> dict[str, Value]:
    """``st``'s variables in a dict of its own: a copy of the worker's
    shared initial ones (``WorkerState.shared_variables``) with its
    ``client_id``, made on the first call, which every writer (and the
    Python engine, before it runs the client) makes first.

    A dict of four variables is some 200 bytes, 200 KiB of a thousand
    clients' memory (issue 25) that a client the C loop runs never needs:
    C reads the shared values (and the client's id as ``client_id``) when
    it takes the client over, and makes the copy itself when it writes
    (``own_vars`` in _native/_fastloop_sync.c, this function's mirror).
    """
    variables = st.variables
    if variables is w.shared_variables:
        variables = dict(variables)
        if w.set_client_id:
            variables["client_id"] = st.id
        st.variables = variables
    return variables


@record(slots=True, eq=False)
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
    #: transactions failed (and gone on from) on a prepared statement the
    #: server session did not have (a transaction pooler's)
    lost_prepared: int = 0
    #: the worker's pipe from the parent (its loop's control descriptor),
    #: which a blocking connect under -C also watches; None outside a worker
    control_fd: int | None = None
    #: the initial variables (-D, scale, seeds) that every client of a C
    #: loop run holds until it writes one (:func:`own_variables`), None
    #: when each client has its own dict from the start; and whether a
    #: client's own dict gets ``client_id`` (not when -D gave it)
    shared_variables: dict[str, Value] | None = None
    set_client_id: bool = False


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


@record(frozen=True, slots=True)
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
    #: --debug: pgbench's debug lines (scripts, commands, sends, receives)
    debug: bool = False
    #: each script's description, as --debug names it
    script_descs: tuple[str, ...] = ()
    #: run on every new connection before use (a Python workload's
    #: ``@setup``): None when it went well, else the error message
    on_connect: Callable[[pgconn.PgConn], str | None] | None = None
    #: --reconnect's attempts per lost connection (0: off, abort as pgbench)
    reconnect: int = 0


_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns


class Support:
    """What every phase of a worker's clients shares.

    ``log`` receives complete stderr lines; ``error``/``info`` give them
    pgbench's prefixes. The last error is kept: when a client aborts, it
    tells why (``WorkerState.abort_messages``, the JSON result).
    """

    __slots__ = ("_log", "_reconnect", "_w", "last_error", "py_error")

    def __init__(
        self, w: WorkerState, log: Callable[[str], None], reconnect: bool = False
    ) -> None:
        self._w = w
        self._log = log
        #: --reconnect: a client that lost its connection does not abort
        self._reconnect = reconnect
        self.last_error = ""
        #: a run with Python transactions: ``(client, sqlstate, message)``
        #: -> a read result code, or None for the scripts' handling
        #: (``engine.pyworkload``: the error goes into the generator)
        self.py_error: Callable[[Client, str, str], int | None] | None = None

    def eval_context(self, st: Client) -> EvalContext:
        """``st``'s expression context, made on its first expression (72
        bytes a client, 70 KiB at -c 1000, that the C loop's clients
        never use); ``debug()`` writes its lines to the worker's log."""
        ctx = st.ctx
        if ctx is None:
            from pgsurge.script.evaluate import EvalContext

            ctx = st.ctx = EvalContext(st.variables, st.rng, debug=self._log)
        return ctx

    def error(self, message: str) -> None:
        self.last_error = message
        self._log(f"{PROG}: error: {message}\n")

    def info(self, message: str) -> None:
        self._log(f"{PROG}: {message}\n")

    def debug(self, message: str) -> None:
        """pgbench's ``pg_log_debug``: no level label; like every
        ``pg_log_*``, one trailing newline of the message is dropped."""
        if message.endswith("\n"):
            message = message[:-1]
        self._log(f"{PROG}: {message}\n")

    def command_failed(self, st: Client, cmd: str, message: str) -> None:
        if self.reconnecting(st):
            self.lost(st, message)
            return
        self.error(
            f"client {st.id} aborted in command {st.command} ({cmd}) "
            f"of script {st.script}; {message}"
        )

    def query_failed(self, st: Client, qrynum: int, message: str) -> None:
        """pgbench's abort on an error result (``message`` stripped)."""
        if self.reconnecting(st):
            self.lost(st, message)
            return
        self.error(
            f"client {st.id} script {st.script} aborted in command {st.command} "
            f"query {qrynum}: {message}"
        )

    def rollback_failed(self, st: Client) -> None:
        """The connection failed while rolling back after an error."""
        if self.reconnecting(st):
            self.lost(st, BACKEND_DIED)
            return
        self.error(
            f"client {st.id} aborted while rolling back the transaction "
            f"after an error; {BACKEND_DIED}"
        )

    def reconnecting(self, st: Client) -> bool:
        """Under --reconnect, a client whose connection is lost goes on
        (engine/reconnect.py) instead of aborting: it must not say it
        aborted."""
        return self._reconnect and st.conn is not None and st.conn.bad

    def lost(self, st: Client, message: str) -> None:
        """--reconnect: the client lost its connection; it reconnects."""
        self.last_error = f"client {st.id} lost its connection; {message}"
        self._log(
            f"{PROG}: client {st.id} lost its connection in command "
            f"{st.command} of script {st.script}; {message}\n"
        )

    def failed_on(self, sqlstate: str) -> None:
        """A transaction failed and the client goes on (not an abort): one
        on a prepared statement its server session lacks is counted."""
        if sqlstate == "26000":
            self._w.lost_prepared += 1

    def aborted(self, st: Client) -> None:
        """``st`` has just aborted: file the reason."""
        self._w.abort_messages.append(self.last_error or f"client {st.id} aborted")
        self.last_error = ""

    def store_variable(self, st: Client, context: str, name: str, value: Value) -> bool:
        """Assign a variable (``\\set`` to a new name, ``\\setshell``,
        ``\\gset``): a new name must be valid, as pgbench's ``putVariable``."""
        variables = st.variables
        if name not in variables and not valid_variable_name(name):
            self.error(f'{context}: invalid variable name: "{name}"')
            return False
        variables[name] = value
        return True

    def blocked_since(self, start_us: int, cpu_ns: int) -> int:
        """Account a blocking call that began at ``start_us`` (monotonic µs)
        with ``cpu_ns`` of thread CPU used: its time off the CPU was spent
        waiting although the event loop was not. Returns the clock (µs)."""
        now = _monotonic_ns() // 1000
        off_cpu = now - start_us - (_thread_time_ns() - cpu_ns) // 1000
        if off_cpu > 0:
            self._w.blocked_us += off_cpu
        return now
