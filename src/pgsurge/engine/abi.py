"""The contract between the Python reference engine and the C loop, as code.

``pgsurge._fastloop`` (src/pgsurge/_native/_fastloop*.c) runs what
:mod:`pgsurge.engine.client` runs, on the same objects. Everything the two
sides must agree on is here, once:

* :data:`MIRRORED`: every number C is compiled with that Python also
  defines (states, query modes, op codes, outcomes, resume events, the
  drain codes, limits). :func:`check_module` compares it *in full* with the
  constants the extension exports when it is loaded: a constant missing on
  either side, or different, keeps the run on the Python loop;
* the plan's ops, one named tuple per kind (:class:`SetConst`, ...): C
  reads them by position, Python code and tests by name;
* :class:`RunFlags`: the run's flags, derived once by :func:`run_flags`
  from the Settings, for ``make_engine`` and the C loop alike;
* the result codes of ``read_results``/``note_error`` (:data:`R_WAIT`, ...)
  and :data:`NEXT_STATE`, the one table of "what a read result makes of the
  client" used by ``advance`` and ``resume``;
* the attributes C reads and writes are exported by C itself
  (``_fastloop.READS``, pairs of owner class and attribute name);
  tests/unit/test_abi.py checks them against the owners' ``__slots__``.

See ENGINE.md beside this file for who owns a client when.
"""

# (no ``from __future__ import annotations``: typing.NamedTuple makes a
# ForwardRef of each string annotation, compiling it, and the first
# builtin compile() of a process makes all of the ast module's node types,
# some 200 KiB of every run: issue 25)
from types import ModuleType
from typing import NamedTuple

from pgsurge.engine import fastexpr, fastpq
from pgsurge.engine import state as C
from pgsurge.engine.loop import LOOK_US, LoopOutcome
from pgsurge.engine.state import Settings

__all__ = [
    "LOOK_US",
    "MAX_PARAMS",
    "MIRRORED",
    "NEXT_STATE",
    "OP_ELSE",
    "OP_END",
    "OP_ENDIF",
    "OP_IF",
    "OP_PEND",
    "OP_PSTART",
    "OP_PSYNC",
    "OP_PY",
    "OP_PYONLY",
    "OP_SET_CONST",
    "OP_SET_EXPR",
    "OP_SET_RANDOM",
    "OP_SLEEP_CONST",
    "OP_SLEEP_VAR",
    "OP_SQL",
    "OUT_TICK",
    "RESUME_CONNECT_FAILED",
    "RESUME_FLUSH",
    "RESUME_PREPARE_FAILED",
    "RESUME_SEND_FAILED",
    "RESUME_SYNC_FAILED",
    "R_ABORT",
    "R_DONE",
    "R_ERROR",
    "R_READ_ON",
    "R_WAIT",
    "Else",
    "End",
    "Endif",
    "If",
    "Pipeline",
    "PlanOp",
    "RunFlags",
    "SetConst",
    "SetExpr",
    "SetRandom",
    "SleepConst",
    "SleepVar",
    "Sql",
    "check_module",
    "run_flags",
]

# -- result codes --------------------------------------------------------------

#: ``read_results``/``note_error``/``finish_drain``: wait for the socket
R_WAIT = 0
#: the command's results are all in, successfully
R_DONE = 1
#: a failure that may be retried or counted (ERROR state)
R_ERROR = 2
#: the client aborts (the message was given)
R_ABORT = 3
#: ``note_error`` only: go on reading (and discarding) the command's results
R_READ_ON = -1

#: what a result code makes of a client in WAIT_RESULT: its next state
#: (R_WAIT: it stays, and waits for its socket)
NEXT_STATE: tuple[int, int, int, int] = (
    C.WAIT_RESULT,
    C.END_COMMAND,
    C.ERROR,
    C.ABORTED,
)

#: what ``resume`` is told besides a result of ``fastpq.drain`` (>= 0):
#: the send left data to flush; the send (or its flush) failed
RESUME_FLUSH = -1
RESUME_SEND_FAILED = -2
#: \\endpipeline's sync could not be flushed
RESUME_SYNC_FAILED = -3
#: -C: ``(RESUME_CONNECT_FAILED, message)``, a connection C could not open
#: (libpq's message as bytes; psycopg's object under PGSURGE_PY_CONNECT=1)
RESUME_CONNECT_FAILED = -4
#: -C: ``(RESUME_PREPARE_FAILED, message)``, a pipeline's statement C could
#: not prepare at ``\\startpipeline``
RESUME_PREPARE_FAILED = -5

# -- the plan's ops ------------------------------------------------------------

#: parameters of an extended/prepared command (pgbench's limit, which
#: script.compile enforces; a variable read twice is two)
MAX_PARAMS = 255

#: what FastLoop.run returns besides a LoopOutcome: a progress tick is due
OUT_TICK = 3

OP_END = 0
OP_SET_CONST = 1
OP_SET_RANDOM = 2
OP_SQL = 3
OP_SLEEP_CONST = 4
OP_SLEEP_VAR = 5
OP_SET_EXPR = 6
OP_IF = 7
OP_ELSE = 8
OP_ENDIF = 9
OP_PSTART = 10
OP_PSYNC = 11
OP_PEND = 12
#: a Python workload (_fastloop_gen.c): step its generator; an op C leaves
#: to Python (a batch's, the target of ctx.sleep)
OP_PY = 13
OP_PYONLY = 14


class End(NamedTuple):
    """Past a script's last command."""

    kind: int = OP_END


class SetConst(NamedTuple):
    """``\\set`` of an int constant into a variable slot."""

    kind: int
    slot: int
    value: int

    @classmethod
    def of(cls, slot: int, value: int) -> "SetConst":
        return cls(OP_SET_CONST, slot, value)


class SetRandom(NamedTuple):
    """``\\set`` of ``random(lo, hi)`` (the client's stream) into a slot."""

    kind: int
    slot: int
    lo: int
    hi: int

    @classmethod
    def of(cls, slot: int, lo: int, hi: int) -> "SetRandom":
        return cls(OP_SET_RANDOM, slot, lo, hi)


class Sql(NamedTuple):
    """An SQL command: the prepared name (-M prepared), the query text
    (extended, and simple without variables) or b"" (simple with
    variables: ``lits`` are the literal parts around the variables);
    ``params`` the variable slots in $n order (simple: in text order);
    ``gset`` state.GSET_NONE/ONE/ALL and the variables' ``prefix``;
    under -M prepared, the statement's ``sql`` (C prepares it on the
    connections it opens under -C)."""

    kind: int
    text: bytes
    params: tuple[int, ...]
    lits: tuple[bytes, ...] | None
    gset: int = 0
    prefix: str = ""
    sql: bytes = b""

    @classmethod
    def of(
        cls,
        text: bytes,
        params: tuple[int, ...],
        lits: tuple[bytes, ...] | None,
        gset: int = 0,
        prefix: str = "",
        sql: bytes = b"",
    ) -> "Sql":
        return cls(OP_SQL, text, params, lits, gset, prefix, sql)


class SetExpr(NamedTuple):
    """``\\set`` of an expression: the slot, and the program of
    :func:`pgsurge.engine.fastexpr.compile_expr`."""

    kind: int
    slot: int
    code: tuple[int, ...]

    @classmethod
    def of(cls, slot: int, code: tuple[int, ...]) -> "SetExpr":
        return cls(OP_SET_EXPR, slot, code)


class If(NamedTuple):
    """``\\if``/``\\elif``: the condition's program and the Op's jumps
    (``false_next``, ``false_to_elif``, ``end_next``: see state.Op)."""

    kind: int
    code: tuple[int, ...]
    false_next: int
    false_to_elif: int
    end_next: int
    is_elif: int

    @classmethod
    def of(
        cls,
        code: tuple[int, ...],
        false_next: int,
        false_to_elif: bool,
        end_next: int,
        is_elif: bool,
    ) -> "If":
        return cls(OP_IF, code, false_next, int(false_to_elif), end_next, int(is_elif))


class Else(NamedTuple):
    """``\\else``: reached after a true branch, jump to ``end_next``."""

    kind: int
    end_next: int

    @classmethod
    def of(cls, end_next: int) -> "Else":
        return cls(OP_ELSE, end_next)


class Endif(NamedTuple):
    """``\\endif``: nothing to do."""

    kind: int = OP_ENDIF


class Pipeline(NamedTuple):
    """``\\startpipeline`` (OP_PSTART), ``\\syncpipeline`` (OP_PSYNC) or
    ``\\endpipeline`` (OP_PEND): C enters libpq's pipeline mode, queues the
    commands, sends syncs and reads the results at the end."""

    kind: int


class SleepConst(NamedTuple):
    """``\\sleep`` of a constant, in µs (already wrapped as C's int)."""

    kind: int
    usec: int

    @classmethod
    def of(cls, usec: int) -> "SleepConst":
        return cls(OP_SLEEP_CONST, usec)


class SleepVar(NamedTuple):
    """``\\sleep :var unit``: the variable's slot and the unit in µs."""

    kind: int
    slot: int
    unit_us: int

    @classmethod
    def of(cls, slot: int, unit_us: int) -> "SleepVar":
        return cls(OP_SLEEP_VAR, slot, unit_us)


class PyStep(NamedTuple):
    """A Python transaction's K_PY op: C steps the generator
    (_fastloop_gen.c)."""

    kind: int = OP_PY


class PyOnly(NamedTuple):
    """An op of a Python transaction C leaves to Python (a batch's, the
    target of ``ctx.sleep``, whose SLEEP C runs itself)."""

    kind: int = OP_PYONLY


PlanOp = (
    End
    | SetConst
    | SetRandom
    | Sql
    | SleepConst
    | SleepVar
    | SetExpr
    | If
    | Else
    | Endif
    | Pipeline
    | PyStep
    | PyOnly
)

# -- the run's flags -----------------------------------------------------------


class RunFlags(NamedTuple):
    """What the state machine derives from the Settings, once, for both
    engines (C reads it by position: keep the order)."""

    query_mode: int
    #: -t per client (0 under -T)
    nxacts: int
    #: the end of -T (monotonic µs; 0 without -T)
    end_us: int
    #: time every transaction
    detailed: int
    #: START_TX reads the clock (latency, lag, -L retry limits)
    tx_clock: int
    #: remember the PRNG state at each transaction start (retries)
    save_rng: int
    exit_on_abort: int
    latency_limit_us: int
    #: the worker's mean Poisson delay in µs (0.0 without -R)
    throttle_delay: float
    #: -r
    per_command: int


def run_flags(s: Settings, exit_on_abort: bool = False) -> RunFlags:
    """The flags of a worker's run (``make_engine`` and the C loop)."""
    return RunFlags(
        query_mode=s.query_mode,
        nxacts=s.nxacts,
        end_us=s.end_us,
        detailed=int(s.detailed),
        tx_clock=int(s.detailed or s.latency_limit_us > 0 or s.verbose_errors),
        save_rng=int(s.max_tries != 1),
        exit_on_abort=int(exit_on_abort),
        latency_limit_us=s.latency_limit_us,
        throttle_delay=float(s.throttle_delay),
        per_command=int(s.per_command),
    )


# -- the constants C mirrors ---------------------------------------------------

#: every int constant pgsurge._fastloop exports, with the value Python uses
#: (API_VERSION is checked by the loader; SOURCE_HASH is a string)
MIRRORED: dict[str, int] = {
    # pgsurge.engine.state's states
    "CHOOSE_SCRIPT": C.CHOOSE_SCRIPT,
    "START_TX": C.START_TX,
    "PREPARE_THROTTLE": C.PREPARE_THROTTLE,
    "THROTTLE": C.THROTTLE,
    "START_COMMAND": C.START_COMMAND,
    "WAIT_RESULT": C.WAIT_RESULT,
    "SLEEP": C.SLEEP,
    "END_COMMAND": C.END_COMMAND,
    "WAIT_ROLLBACK_RESULT": C.WAIT_ROLLBACK_RESULT,
    "END_TX": C.END_TX,
    "ABORTED": C.ABORTED,
    "FINISHED": C.FINISHED,
    "CONNECTING": C.CONNECTING,
    # query modes
    "MODE_SIMPLE": C.MODE_SIMPLE,
    "MODE_EXTENDED": C.MODE_EXTENDED,
    "MODE_PREPARED": C.MODE_PREPARED,
    # the plan's op codes
    "OP_END": OP_END,
    "OP_SET_CONST": OP_SET_CONST,
    "OP_SET_RANDOM": OP_SET_RANDOM,
    "OP_SQL": OP_SQL,
    "OP_SLEEP_CONST": OP_SLEEP_CONST,
    "OP_SLEEP_VAR": OP_SLEEP_VAR,
    "OP_SET_EXPR": OP_SET_EXPR,
    "OP_IF": OP_IF,
    "OP_ELSE": OP_ELSE,
    "OP_ENDIF": OP_ENDIF,
    "OP_PSTART": OP_PSTART,
    "OP_PSYNC": OP_PSYNC,
    "OP_PEND": OP_PEND,
    "OP_PY": OP_PY,
    "OP_PYONLY": OP_PYONLY,
    # \gset kinds
    "GSET_NONE": C.GSET_NONE,
    "GSET_ONE": C.GSET_ONE,
    "GSET_ALL": C.GSET_ALL,
    # the expression evaluator's stack
    "MAX_STACK": fastexpr.MAX_STACK,
    # the expression evaluator's op codes (their pops: check_module)
    **fastexpr.CODES,
    # FastLoop.run's outcomes: LoopOutcome's, and a progress tick
    "OUT_DONE": int(LoopOutcome.DONE),
    "OUT_EXIT_ON_ABORT": int(LoopOutcome.EXIT_ON_ABORT),
    "OUT_STOPPED": int(LoopOutcome.STOPPED),
    "OUT_TICK": OUT_TICK,
    # what resume() is told besides a drain() result
    "RESUME_CONNECT_FAILED": RESUME_CONNECT_FAILED,
    "RESUME_PREPARE_FAILED": RESUME_PREPARE_FAILED,
    "RESUME_FLUSH": RESUME_FLUSH,
    "RESUME_SEND_FAILED": RESUME_SEND_FAILED,
    "RESUME_SYNC_FAILED": RESUME_SYNC_FAILED,
    # pgsurge._fastpq's drain() codes (low two bits)
    "DRAIN_BUSY": fastpq.DRAIN_BUSY,
    "DRAIN_DONE": fastpq.DRAIN_DONE,
    "DRAIN_FAILED": fastpq.DRAIN_FAILED,
    # the loop's looks at its control descriptor while clients run
    "LOOK_US": LOOK_US,
    # the plan's limit: parameters per command
    "MAX_PARAMS": MAX_PARAMS,
}

#: exported by the module but not numbers both sides define
_NOT_MIRRORED = frozenset({"API_VERSION"})


def check_module(module: ModuleType) -> str | None:
    """Compare :data:`MIRRORED` with the extension's int constants, in full:
    None when they agree, else what differs."""
    exported = {
        name: getattr(module, name)
        for name in dir(module)
        if name.isupper()
        and type(getattr(module, name)) is int
        and name not in _NOT_MIRRORED
    }
    missing = sorted(set(MIRRORED) - set(exported))
    extra = sorted(set(exported) - set(MIRRORED))
    wrong = sorted(
        k for k in MIRRORED.keys() & exported.keys() if MIRRORED[k] != exported[k]
    )
    if missing or extra or wrong:
        return f"constants differ: missing {missing}, unknown {extra}, unequal {wrong}"
    pops = getattr(module, "EXPR_POPS", None)
    if pops != fastexpr.POPS:
        return f"expression pops differ: {pops} is not {fastexpr.POPS}"
    return None
