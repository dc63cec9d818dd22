"""The C event loop (``pgsurge._fastloop``): which runs may use it, and its glue.

``pgsurge._fastloop`` runs a worker's event loop and its clients' plain
transactions in C, handing a client to the Python engine (``advance``, or
``resume`` of :class:`pgsurge.engine.client.Engine`) for anything else; see the
design comment at the top of src/pgsurge/_native/_fastloop.c. The Python engine is
the reference: a run takes the C loop only when :func:`plan_for` finds it
eligible, which is exactly:

* the extension is built and current, ``pgsurge._fastpq`` is bound (its
  libpq functions are the C loop's), epoll is there, and neither
  ``PGSURGE_PURE`` nor ``PGSURGE_NO_FASTLOOP`` is set;
* the run has no --debug; -C (a connection per transaction, opened
  by C: :func:`_connect_spec`), -R (the
  worker's Poisson schedule, from its throttle stream), -L (skipped
  slots, late transactions), -r (each command's latency, timed as
  client.py does), -T/-t, -P, the latency histograms and interval series
  of --percentiles, --json and --html (C counts into buckets of the
  recorder's layout and adds them to its Histogram objects before Python
  reads them; run() returns at each interval end, as at a progress tick)
  and -l's logs, --sampling-rate and --aggregate-interval included (C
  formats lines into a buffer it hands to the TxLogWriter, or records
  into the writer's current interval) are all supported;
* every command of every script is one of: an SQL command (with or
  without ``\\gset``/``\\aset``), ``\\startpipeline``/``\\syncpipeline``/
  ``\\endpipeline`` (libpq's pipeline mode; an error inside a pipeline,
  ``-M simple``'s refusal, a ``\\gset`` in a pipeline and the first
  prepares of a pipeline's statements -- but under -C, where C prepares
  them on each connection it opens -- go to Python), a ``\\sleep``, a
  ``\\set`` whose expression :func:`pgsurge.engine.fastexpr.compile_expr`
  accepts (the whole language but ``debug()``: NULL, booleans, ints and
  doubles, every operator and function), or an
  ``\\if``/``\\elif``/``\\else``/``\\endif`` on such an expression;
* every variable a command reads is assigned by a ``\\set`` of the
  scripts, is ``client_id``, an initial int or -D text, or, with a
  ``\\gset``/``\\aset`` in the scripts, any other valid name; any number
  of them, and of commands. What a variable holds is
  checked at run time: C hands the client to Python at a command reading
  one it does not hold (an undefined variable, text it leaves to Python's
  typing: a boolean word, " 7"), and at any
  expression error (overflow, division by zero, a coercion pgbench
  refuses, ...), which Python evaluates again and reports.

Anything else (shell commands, ``debug()``, --debug)
runs on the Python loop unchanged; :func:`decide` says why, and under
``PGSURGE_FASTLOOP=require`` the worker fails with that reason. -P is
supported: the C loop returns at each tick and :class:`FastEventLoop`
sends the progress snapshot as :class:`~pgsurge.engine.loop.EventLoop`
does.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pgsurge import _native, pgconn
from pgsurge.cnum import INT64_MAX, INT64_MIN, wrap_int32
from pgsurge.engine import abi, fastpq, ramp
from pgsurge.engine.abi import (
    MAX_PARAMS,
    OUT_TICK,
    Else,
    End,
    Endif,
    If,
    Pipeline,
    PlanOp,
    RunFlags,
    SetConst,
    SetExpr,
    SetRandom,
    SleepConst,
    SleepVar,
    Sql,
)
from pgsurge.engine.fastexpr import Unsupported, compile_expr
from pgsurge.engine.loop import EventLoop, absorb
from pgsurge.engine.program import reported_ops
from pgsurge.engine.state import K_PY, PREPARING
from pgsurge.script.ast import (
    Call,
    Const,
    ElseCommand,
    EndifCommand,
    Expr,
    GsetKind,
    IfCommand,
    PipelineCommand,
    PipelineOp,
    SetCommand,
    ShellCommand,
    SleepCommand,
    SqlCommand,
    Var,
)
from pgsurge.script.functions import FUNCTIONS, FuncKind
from pgsurge.script.sqlvars import valid_variable_name

if TYPE_CHECKING:
    from pgsurge.config import RunConfig
    from pgsurge.engine.client import Engine
    from pgsurge.engine.state import Client, Op, Settings, WorkerState
    from pgsurge.script.ast import ParsedScript
    from pgsurge.stats.histogram import Histogram
    from pgsurge.stats.txlog import TxLogWriter

__all__ = [
    "FASTLOOP_API",
    "FastEventLoop",
    "FastPlan",
    "available",
    "concurrent_connect",
    "disabled",
    "flags_for",
    "plan_for",
    "refusal",
    "run_excluded",
]

#: the interface version of pgsurge._fastloop this code expects (10: run()
#: gives the GIL up while a script's loop runs, ``FastLoop.gil_takes``; a
#: worker run as a thread relies on it; 11: clients share
#: ``WorkerState.shared_variables`` until they write one)
FASTLOOP_API = 12


def disabled() -> bool:
    """True when ``PGSURGE_NO_FASTLOOP`` asks for the Python loop."""
    return os.environ.get("PGSURGE_NO_FASTLOOP", "") not in ("", "0")


def required() -> bool:
    """True when ``PGSURGE_FASTLOOP=require``: a run the C loop does not
    take fails (with the reason) instead of running on the Python loop."""
    return os.environ.get("PGSURGE_FASTLOOP", "") == "require"


#: the environment variable that chooses how the C loop opens -C's
#: connections: "concurrent" (side by side on the loop) or unset/"" (one
#: at a time per worker, as pgbench's blocking PQconnectdb)
CONNECT_ENV = "PGSURGE_CONNECT"


def concurrent_connect() -> bool:
    """Whether ``PGSURGE_CONNECT`` asks for -C's connections side by side
    (a :class:`~pgsurge.errors.PgsurgeError` for anything but "" or
    "concurrent": a misspelt choice silently ignored would measure the
    connection pattern the user did not ask for; the runner calls this
    before connecting, as it calls ``threaded.requested``)."""
    choice = os.environ.get(CONNECT_ENV, "")
    if choice not in ("", "concurrent"):
        from pgsurge.errors import PgsurgeError

        raise PgsurgeError(
            f'{CONNECT_ENV} must be "concurrent" or empty, not "{choice}"'
        )
    return choice == "concurrent"


#: why the extension cannot be used in this process ("" when it can)
_unusable = ""


def _load() -> ModuleType | None:
    global _unusable
    if not fastpq.available:
        _unusable = "pgsurge._fastpq is not usable"
        return None
    module = _native.load("_fastloop", FASTLOOP_API)
    if module is None:
        _unusable = "pgsurge._fastloop is not built, stale, or turned off"
        return None
    # every number the C code is written with (pgsurge.engine.abi)
    differ = abi.check_module(module)
    if differ is not None:
        _unusable = f"pgsurge._fastloop's {differ}"
        return None
    return module


_module = _load()

#: whether the C loop is built, current and may be used in this process
#: (``PGSURGE_NO_FASTLOOP`` is read per run, by :func:`plan_for`)
available: bool = _module is not None

#: (var_names, nset, weights, scripts): the C loop's view of the scripts
FastPlan = tuple[tuple[str, ...], int, tuple[int, ...], tuple[tuple[PlanOp, ...], ...]]


def run_excluded(cfg: RunConfig) -> str | None:
    """Why this run's options keep it on the Python loop, or None."""
    if cfg.debug:
        return "--debug"
    if any(s.python for s in cfg.scripts):
        # scripts only here: a run of Python transactions alone takes the C
        # loop through engine.fastgen, one mixed with scripts does not
        return "Python workload"
    return None


def _static(expr: Expr) -> bool:
    """No variable, no random function, no debug(): compile-time foldable.

    Walked with an explicit stack: pgbench accepts operator chains of some
    20000 terms, deeper than a recursive walk may go."""
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, Const):
            continue
        if not isinstance(node, Call):
            return False
        spec = FUNCTIONS.get(node.name)
        if spec is None or spec.kind not in (FuncKind.PURE, FuncKind.LAZY):
            return False
        todo.extend(node.args)
    return True


def _const_int(expr: Expr) -> int | None:
    """The int an expression folds to, or None (not constant, an error, or
    another type)."""
    if not _static(expr):
        return None
    from pgsurge.script.evaluate import EvalContext, evaluate

    try:
        value = evaluate(expr, EvalContext())
    except Exception:
        return None
    return value if type(value) is int else None


def _scaled(expr: Expr, base: dict[str, Any], assigned: set[str]) -> int | None:
    """``k * :var`` / ``:var * k`` of an initial int variable: its value."""
    if not isinstance(expr, Call) or expr.name != "*" or len(expr.args) != 2:
        return None
    a, b = expr.args
    if isinstance(a, Var):
        a, b = b, a
    if not isinstance(b, Var) or b.name in assigned:
        return None
    k = _const_int(a)
    v = base.get(b.name)
    if k is None or type(v) is not int:
        return None
    return int(k * v)


def _set_op(
    cmd: SetCommand, slot: int, base: dict[str, Any], assigned: set[str]
) -> PlanOp | None:
    """The C op of an eligible ``\\set``, or None."""
    if not valid_variable_name(cmd.var):
        return None
    value = _const_int(cmd.expr)
    if value is not None:
        return SetConst.of(slot, value)
    e = cmd.expr
    if not (isinstance(e, Call) and e.name == "random" and len(e.args) == 2):
        return None
    lo = _const_int(e.args[0])
    hi = _const_int(e.args[1])
    if hi is None:
        hi = _scaled(e.args[1], base, assigned)
        # the compiled expression's own test before its inline draw
        if hi is None or hi > INT64_MAX:
            return None
    if lo is None or not (INT64_MIN <= lo <= hi) or hi - lo >= INT64_MAX:
        return None
    return SetRandom.of(slot, lo, hi)


def plan_for(
    cfg: RunConfig,
    parsed: Sequence[ParsedScript],
    compiled: Sequence[Sequence[Op]],
    variables: Sequence[tuple[str, Any]],
    set_client_id: bool,
) -> FastPlan | None:
    """The C loop's plan when this run is eligible (module docstring)."""
    plan = decide(cfg, parsed, compiled, variables, set_client_id)
    return None if isinstance(plan, str) else plan


def refusal(cfg: RunConfig, parsed: Sequence[ParsedScript]) -> str | None:
    """Why the C loop cannot run this run at all (the part of
    :func:`decide` that needs no compiled script: the parent asks it
    before it starts the workers, ``engine.threaded``), or None."""
    if _module is None:
        return _unusable
    if disabled():
        return "PGSURGE_NO_FASTLOOP is set"
    excluded = run_excluded(cfg)
    if excluded is not None:
        return f"{excluded} is not supported by the C loop"
    if not EventLoop.uses_epoll():
        return "epoll is not available"
    for k, script in enumerate(parsed):
        for i, cmd in enumerate(script.commands):
            if not isinstance(
                cmd,
                SetCommand
                | SqlCommand
                | SleepCommand
                | IfCommand
                | ElseCommand
                | EndifCommand
                | PipelineCommand,
            ):
                return f"{_where(k, script, i)}: {_kind(cmd)}"
    return None


def decide(
    cfg: RunConfig,
    parsed: Sequence[ParsedScript],
    compiled: Sequence[Sequence[Op]],
    variables: Sequence[tuple[str, Any]],
    set_client_id: bool,
) -> FastPlan | str:
    """The C loop's plan when this run is eligible (module docstring), else
    why it is not (a phrase: "the C loop is not taken: <reason>")."""
    refused = refusal(cfg, parsed)
    if refused is not None:
        return refused
    base = dict(variables)
    assigned: set[str] = set()
    any_gset = False
    for script in parsed:
        for cmd in script.commands:
            if isinstance(cmd, SetCommand):
                assigned.add(cmd.var)
            elif isinstance(cmd, SqlCommand):
                any_gset = any_gset or cmd.gset is not GsetKind.NONE
    set_names = sorted(assigned)
    other_names: list[str] = []
    slots = {name: i for i, name in enumerate(set_names)}
    mode = cfg.query_mode.name
    scripts: list[tuple[PlanOp, ...]] = []

    def slot_of(name: str) -> int | None:
        """The slot of a variable C may read, or None. C checks at run time
        that it holds its value (else Python runs the command)."""
        if name not in assigned and not (
            (name == "client_id" and set_client_id)
            # an initial int, or -D text (typed when read)
            or name in base
            # a \gset may assign it
            or (any_gset and name not in base and valid_variable_name(name))
        ):
            return None
        if name not in slots:
            slots[name] = len(set_names) + len(other_names)
            other_names.append(name)
        return slots[name]

    for k, (script, ops) in enumerate(zip(parsed, compiled, strict=True)):
        out: list[PlanOp] = []
        for i, (cmd, op) in enumerate(zip(script.commands, ops, strict=False)):
            where = _where(k, script, i)
            try:
                if isinstance(cmd, SetCommand):
                    out.append(_set_plan(cmd, slots[cmd.var], base, assigned, slot_of))
                elif isinstance(cmd, IfCommand):
                    code = compile_expr(cmd.expr, slot_of)
                    out.append(
                        If.of(
                            code,
                            op.false_next,
                            op.false_to_elif,
                            op.end_next,
                            cmd.is_elif,
                        )
                    )
                elif isinstance(cmd, ElseCommand):
                    out.append(Else.of(op.end_next))
                elif isinstance(cmd, EndifCommand):
                    out.append(Endif())
                elif isinstance(cmd, PipelineCommand):
                    out.append(Pipeline(_PIPELINE_OPS[cmd.op]))
                elif isinstance(cmd, SleepCommand):
                    if type(op.amount) is int:
                        # meta.sleep_usec of a constant, done once
                        usec = wrap_int32(op.amount * op.unit_us)
                        out.append(SleepConst.of(usec))
                        continue
                    slot = slot_of(str(op.amount))
                    if slot is None:
                        return f"{where}: \\sleep of a variable C cannot hold"
                    out.append(SleepVar.of(slot, op.unit_us))
                else:
                    assert isinstance(cmd, SqlCommand)
                    out.append(_sql_plan(cmd, op, mode, slot_of))
            except Unsupported as e:
                return f"{where}: {e.args[0]}"
        out.append(End())
        scripts.append(tuple(out))
    names_all = tuple(set_names) + tuple(other_names)
    weights = tuple(s.weight for s in cfg.scripts)
    return names_all, len(set_names), weights, tuple(scripts)


_PIPELINE_OPS = {
    PipelineOp.START: abi.OP_PSTART,
    PipelineOp.SYNC: abi.OP_PSYNC,
    PipelineOp.END: abi.OP_PEND,
}


def _kind(cmd: object) -> str:
    if isinstance(cmd, ShellCommand):
        return "\\shell and \\setshell are not supported by the C loop"
    return "a command the C loop does not run"


def _set_plan(
    cmd: SetCommand,
    slot: int,
    base: dict[str, Any],
    assigned: set[str],
    slot_of: Callable[[str], int | None],
) -> PlanOp:
    """The C op of a ``\\set``: an int constant, ``random(lo, hi)`` of
    constants, else an expression (raises Unsupported)."""
    if not valid_variable_name(cmd.var):
        raise Unsupported("\\set of an invalid variable name")
    spec = _set_op(cmd, slot, base, assigned)
    if spec is not None:
        return spec
    return SetExpr.of(slot, compile_expr(cmd.expr, slot_of))


def _sql_plan(
    cmd: SqlCommand, op: Op, mode: str, slot_of: Callable[[str], int | None]
) -> PlanOp:
    names = cmd.simple_parts[1::2] if mode == "SIMPLE" else cmd.param_vars
    if mode != "SIMPLE" and len(names) > MAX_PARAMS:
        raise Unsupported(f"more than {MAX_PARAMS} parameters")
    # each name asked once (a 4 MB statement holds 500,000 references to
    # a few variables), in the order of first use, as slot_of numbers them
    slot_by_name: dict[str, int] = {}
    for name in dict.fromkeys(names):
        slot = slot_of(name)
        if slot is None:
            raise Unsupported(f"variable {name} is not one C holds")
        slot_by_name[name] = slot
    refs = list(map(slot_by_name.__getitem__, names))
    lits: tuple[bytes, ...] | None = None
    if mode == "SIMPLE":
        if op.parts is None:
            text = op.sql
            refs = []
        else:
            text = b""
            # encoded in one call, NUL separating the parts (script text
            # ends at its first NUL: none in a part read from a file)
            literal = op.parts[0::2]
            joined = "\0".join(literal)
            if joined.count("\0") == len(literal) - 1:
                lits = tuple(joined.encode("utf-8", "surrogateescape").split(b"\0"))
            else:
                lits = tuple(p.encode("utf-8", "surrogateescape") for p in literal)
    else:
        text = op.prepname if mode == "PREPARED" else op.sql
    sql = op.sql if mode == "PREPARED" else b""
    return Sql.of(text, tuple(refs), lits, op.gset, op.prefix, sql)


class FastEventLoop(EventLoop):
    """An :class:`EventLoop` whose ``run`` is the C loop once :meth:`use_c`
    gave it the plan; the IoHooks (and the epoll instance) stay Python's."""

    _fast: Any = None
    #: C opens the connections from the conninfo itself, the initial ones
    #: (:meth:`open_all`) and -C's (no Python call per connection;
    #: ``PGSURGE_PY_CONNECT=1`` has Python open each one instead:
    #: engine/ramp.py, ``pgconn.start_raw`` under -C)
    raw_connect = False
    #: on a thread (engine.threaded): the read end of the pipe that a stop
    #: or -T's end writes to, watched as a process's signal wake-up pipe
    wake_fd = -1

    def use_c(
        self,
        plan: FastPlan,
        engine: Engine,
        w: WorkerState,
        script_ops: tuple[tuple[Op, ...], ...],
        flags: RunFlags,
        connect: Settings | None = None,
    ) -> None:
        """Build the C loop over this loop's clients and epoll instance (the
        -l writer comes later: :meth:`set_txlog`); with ``connect`` (-C),
        C opens a connection per transaction with these settings."""
        assert _module is not None
        hooks: tuple[Callable[..., object], ...] = (
            engine.advance,
            engine.resume,
            partial(absorb, self),
            engine.gset,
        )
        control = -1 if self._control_fd is None else self._control_fd
        rec = self.recorder
        targets = None if rec is None else rec.targets()
        if targets is not None and script_ops and script_ops[0][0].kind == K_PY:
            targets = _per_op_targets(targets, script_ops)
        self._fast = _module.FastLoop(
            list(self.clients),
            script_ops,
            plan,
            w,
            hooks,
            self.waiter.epoll_fd(),
            control,
            flags,
            targets,
        )
        if connect is not None:
            self._fast.set_connect(_connect_spec(self, connect))
        if not os.environ.get("PGSURGE_PY_CONNECT"):
            # C opens the connections itself (the initial ones, -C's): no
            # Python call each
            probe = pgconn.raw_probe()
            try:
                self.raw_connect = bool(self._fast.set_connect_raw(probe))
            finally:
                probe.finish()

    def open_all(
        self, items: dict[str, str], password: str | None, count: int
    ) -> tuple[list[pgconn.PgConn], int, str] | None:
        """The worker's initial connections opened by C (``FastLoop.
        open_all``, the C mirror of :func:`pgsurge.engine.ramp.
        open_connections`): ``(conns, -1, "")``, or ``([], index,
        message)`` for the lowest client that failed; None when C does not
        open connections (the Python loop, ``PGSURGE_PY_CONNECT``, and
        ``connect_timeout`` with several hosts: Python's ramp takes each
        connection on to the next host when one is given up on)."""
        if self._fast is None or not self.raw_connect:
            return None
        info = pgconn.conninfo(items, password).encode("utf-8", "surrogateescape")
        timeout_us = int(pgconn.connect_timeout_s(info) * 1_000_000)
        if timeout_us and pgconn.names_several_hosts(info):
            return None
        got = self._fast.open_all(info, count, ramp.WINDOW, timeout_us)
        if type(got) is tuple:
            index, message, at_limit = got
            if type(message) is not bytes:  # timed out: psycopg's object
                text = pgconn.timeout_text(message)
                message.finish()
                return [], index, text
            return [], index, pgconn.connect_failure_message(message, bool(at_limit))
        return [pgconn.adopt(obj) for obj in got], -1, ""

    def set_python(self, spec: tuple[Any, ...]) -> None:
        """A run of Python transactions: C steps their generators
        (``engine.fastgen.spec``)."""
        assert self._fast is not None
        self._fast.set_python(spec)

    def set_txlog(self, txlog: TxLogWriter) -> None:
        """The worker's -l writer, opened once the run starts (aggregated
        logs count their intervals from there): C writes its lines, or
        accumulates its intervals, as the writer's ``log`` does."""
        if self._fast is not None:
            self._fast.set_log(_log_spec(txlog))

    @property
    def uses_c(self) -> bool:
        """Whether :meth:`use_c` gave it the C loop."""
        return self._fast is not None

    def run(self) -> int:
        fast = self._fast
        if fast is None:
            return super().run()
        if self.wake_fd >= 0:
            fast.set_signal_fd(self.wake_fd)
            try:
                return self._run_c(fast)
            finally:
                fast.set_signal_fd(-1)
        with _signal_wakeup(fast):
            return self._run_c(fast)

    def _run_c(self, fast: Any) -> int:
        progress_us = self._progress_us
        start = self._progress_start_us
        next_report = start + progress_us if progress_us else 0
        # the nearest periodic deadline (progress tick, interval end, the
        # window's start), 0: none
        next_tick = self._next_tick(next_report)
        while True:
            outcome: int = fast.run(next_tick)
            self.idle_us = fast.idle_us
            if outcome != OUT_TICK:
                return outcome
            # as EventLoop.run: the end of a recorder interval (C wrote its
            # counts and histograms back before returning), a progress
            # tick, the window's start (C reloads what it reset)
            next_report = self._at_tick(fast.now_us, next_report)
            next_tick = self._next_tick(next_report)


@contextmanager
def _signal_wakeup(fast: Any) -> Iterator[None]:
    """Have the signals wake the C loop while it runs: Python's handlers
    (the -T alarm, a stop) write to a pipe (:func:`signal.set_wakeup_fd`)
    whose read end C watches, and C runs them and reads ``timer_exceeded``
    when it is readable instead of after every wait. Outside the main
    thread, or where a wakeup descriptor is set already (someone else's),
    C looks after every wait as before."""
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        try:
            old = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            yield
            return
        if old != -1:
            signal.set_wakeup_fd(old)
            yield
            return
        try:
            fast.set_signal_fd(rfd)
            try:
                yield
            finally:
                fast.set_signal_fd(-1)
        finally:
            signal.set_wakeup_fd(-1)
    finally:
        os.close(rfd)
        os.close(wfd)


def flags_for(
    query_mode: int,
    nxacts: int,
    end_us: int,
    detailed: bool,
    tx_clock: bool,
    max_tries: int,
    exit_on_abort: bool,
    latency_limit_us: int = 0,
    throttle_delay: float = 0.0,
    per_command: bool = False,
) -> RunFlags:
    """Run flags given field by field (tests that drive the C loop without
    Settings); a run derives them with :func:`pgsurge.engine.abi.run_flags`."""
    return RunFlags(
        query_mode,
        nxacts,
        end_us,
        int(detailed),
        int(tx_clock),
        int(max_tries != 1),
        int(exit_on_abort),
        latency_limit_us,
        float(throttle_delay),
        int(per_command),
    )


def _per_op_targets(
    targets: tuple[Any, Any, Any, tuple[tuple[Histogram, ...], ...]],
    script_ops: tuple[tuple[Op, ...], ...],
) -> tuple[Any, Any, Any, tuple[tuple[Histogram, ...], ...]]:
    """-r's histograms of Python transactions as C records them, one per op
    (a script's commands are its ops): a reported statement's (or sleep's)
    own, one nobody reads for the others (engine.fastgen)."""
    # (the recorder that gave the targets imported it)
    from pgsurge.stats.histogram import Histogram

    lat, lag, per_script, per_command = targets
    out = []
    for ops, hists in zip(script_ops, per_command, strict=True):
        mine = dict(zip((op.index for op in reported_ops(ops)), hists, strict=True))
        spare = Histogram(hists[0].digits) if hists else Histogram()
        out.append(tuple(mine.get(i, spare) for i in range(len(ops) - 1)))
    return lat, lag, per_script, tuple(out)


def _log_spec(txlog: TxLogWriter) -> tuple[Any, ...]:
    """What the C loop needs to write -l lines as TxLogWriter does: the
    writer (its write_chunk), the epoch shift, the sampling rate (-1.0:
    none) and stream, and whether lines end with the lag and the retries."""
    o = txlog.options
    sampling = o.sample_rate is not None and txlog.sample_rng is not None
    return (
        txlog,
        txlog.epoch_shift_us,
        float(o.sample_rate) if sampling else -1.0,  # type: ignore[arg-type]
        txlog.sample_rng if sampling else None,
        int(o.throttled),
        int(o.max_tries != 1),
        txlog.interval_us,
    )


def _connect_spec(loop: EventLoop, s: Settings) -> tuple[Any, ...]:
    """-C on the C loop (``FastLoop.set_connect``): C opens every
    transaction's connection with ``PQconnectStart`` and drives
    ``PQconnectPoll``, one connection at a time per worker as pgbench's
    ``PQconnectdb`` (``PGSURGE_CONNECT=concurrent``: side by side on the
    loop), and closes it at the transaction's end; Python's side
    is the conninfo, the psycopg object (:func:`pgsurge.pgconn.start_raw`),
    a connection C opened made the client's when C hands the client back
    (``adopt``: what tx.connect sets up), and the closing of a connection
    Python opened (``release``: tx.disconnect)."""
    info = pgconn.conninfo(s.conninfo, s.password).encode("utf-8", "surrogateescape")

    def adopt(st: Client, raw: Any) -> None:
        conn = pgconn.adopt(raw)
        st.conn = conn
        st.raw = raw
        st.ptr = fastpq.usable_with(conn)
        # a set of its own: C adds the statements it prepared on the
        # connection into it (PySet_Add)
        st.prepared = set()
        st.in_pipeline = False
        st.num_syncs = 0
        loop.attach(st)

    def release(st: Client) -> None:
        conn = st.conn
        if conn is not None:
            loop.detach(st)
            conn.finish()
            st.conn = None
            st.raw = None
            st.ptr = 0

    # connect_timeout as pgbench's blocking PQconnectdb applies it: C gives
    # up a connection still opening then (the words are handback.py's)
    timeout_us = int(pgconn.connect_timeout_s(info) * 1_000_000)
    return (
        info,
        pgconn.start_raw,
        adopt,
        release,
        PREPARING,
        timeout_us,
        concurrent_connect(),
    )


def _where(number: int, script: ParsedScript, index: int) -> str:
    """The command a refusal is about, numbered as pgbench's messages number
    them (from 0) and named as they name it: ``(SQL)`` or the meta
    command's word, e.g. ``script 1 command 3 (\\shell) of 'x.sql'``."""
    first = script.commands[index].first_line
    word = first.split(None, 1)[0] if first.startswith("\\") else "SQL"
    return f"script {number} command {index} ({word}) of {script.source!r}"
