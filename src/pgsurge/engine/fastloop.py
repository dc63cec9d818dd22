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
* the run has none of -l, -C, --debug; -R (the worker's Poisson
  schedule, from its throttle stream), -L (skipped slots, late
  transactions), -r (each command's latency, timed as client.py does),
  -T/-t and the latency histograms and interval series of --percentiles,
  --json and --html (C counts into buckets of the recorder's layout and
  adds them to its Histogram objects before Python reads them; run()
  returns at each interval end, as at a progress tick) are all supported;
* every command of every script is an SQL command without ``\\gset`` or
  ``\\aset``, a ``\\sleep`` of a constant or of a variable the SQL
  commands could read (rule below), or a ``\\set`` to a valid name whose
  expression is an int
  constant (after folding: no variable, no random function, no
  ``debug()``), or ``random(lo, hi)`` whose bounds are such constants, the
  upper one possibly ``k * :var`` (or ``:var * k``) of an initial int
  variable no ``\\set`` assigns -- pgbench's builtins' ``random(1, 100000 *
  :scale)`` -- with ``lo <= hi`` and a span below 2**63-1 (otherwise the
  Python code raises pgbench's error, so Python runs it);
* every variable an SQL command (or a ``\\sleep``) reads is assigned by an
  eligible ``\\set`` earlier in the same script, or is never assigned and
  is an initial int variable (or ``client_id``); at most 64 such variables
  and 64 SQL commands in all.

Anything else (pipelines, ``\\if``, shell commands, string or double
values, ...) runs on the Python loop unchanged; :func:`decide` says why,
and under ``PGSURGE_FASTLOOP=require`` the worker fails with that reason.
-P is supported: the C loop returns at each tick and :class:`FastEventLoop` sends the
progress snapshot as :class:`~pgsurge.engine.loop.EventLoop` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pgsurge import _native
from pgsurge.cnum import INT64_MAX, INT64_MIN, wrap_int32
from pgsurge.engine import abi, fastpq
from pgsurge.engine.abi import (
    MAX_PARAMS,
    MAX_VARS,
    OUT_TICK,
    End,
    PlanOp,
    RunFlags,
    SetConst,
    SetRandom,
    SleepConst,
    SleepVar,
    Sql,
)
from pgsurge.engine.loop import EventLoop, absorb
from pgsurge.script.ast import (
    Call,
    Const,
    Expr,
    GsetKind,
    SetCommand,
    SleepCommand,
    SqlCommand,
    Var,
)
from pgsurge.script.evaluate import EvalContext, evaluate
from pgsurge.script.functions import FUNCTIONS, FuncKind
from pgsurge.script.sqlvars import valid_variable_name

if TYPE_CHECKING:
    from pgsurge.config import RunConfig
    from pgsurge.engine.client import Engine
    from pgsurge.engine.state import Op, WorkerState
    from pgsurge.script.ast import ParsedScript

__all__ = [
    "FASTLOOP_API",
    "FastEventLoop",
    "FastPlan",
    "available",
    "disabled",
    "flags_for",
    "plan_for",
    "run_excluded",
]

#: the interface version of pgsurge._fastloop this code expects
FASTLOOP_API = 5


def disabled() -> bool:
    """True when ``PGSURGE_NO_FASTLOOP`` asks for the Python loop."""
    return os.environ.get("PGSURGE_NO_FASTLOOP", "") not in ("", "0")


def required() -> bool:
    """True when ``PGSURGE_FASTLOOP=require``: a run the C loop does not
    take fails (with the reason) instead of running on the Python loop."""
    return os.environ.get("PGSURGE_FASTLOOP", "") == "require"


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
    if cfg.log:
        return "-l"
    if cfg.connect_each_tx:
        return "-C"
    if cfg.debug:
        return "--debug"
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


def decide(
    cfg: RunConfig,
    parsed: Sequence[ParsedScript],
    compiled: Sequence[Sequence[Op]],
    variables: Sequence[tuple[str, Any]],
    set_client_id: bool,
) -> FastPlan | str:
    """The C loop's plan when this run is eligible (module docstring), else
    why it is not (a phrase: "the C loop is not taken: <reason>")."""
    if _module is None:
        return _unusable
    if disabled():
        return "PGSURGE_NO_FASTLOOP is set"
    excluded = run_excluded(cfg)
    if excluded is not None:
        return f"{excluded} is not supported by the C loop"
    if not EventLoop.uses_epoll():
        return "epoll is not available"
    base = dict(variables)
    assigned: set[str] = set()
    for script in parsed:
        for i, cmd in enumerate(script.commands):
            if isinstance(cmd, SetCommand):
                assigned.add(cmd.var)
            elif isinstance(cmd, SleepCommand):
                continue
            elif not isinstance(cmd, SqlCommand):
                return f"{_where(script, i)}: only SQL, \\set and \\sleep"
            elif cmd.gset is not GsetKind.NONE:
                return f"{_where(script, i)}: \\gset and \\aset"
    set_names = sorted(assigned)
    const_names: list[str] = []
    slots = {name: i for i, name in enumerate(set_names)}
    mode = cfg.query_mode.name
    scripts: list[tuple[PlanOp, ...]] = []
    nsql = 0

    def slot_of(name: str, done: set[str]) -> int | None:
        """The slot of a variable C may read after the ``\\set``s of
        ``done`` (in this script), or None."""
        if name in assigned:
            if name not in done:
                return None
        elif name == "client_id" and set_client_id:
            pass
        elif type(base.get(name)) is not int:
            return None
        if name not in slots:
            slots[name] = len(set_names) + len(const_names)
            const_names.append(name)
        return slots[name]

    for script, ops in zip(parsed, compiled, strict=True):
        out: list[PlanOp] = []
        done: set[str] = set()
        for i, (cmd, op) in enumerate(zip(script.commands, ops, strict=False)):
            if isinstance(cmd, SetCommand):
                spec = _set_op(cmd, slots[cmd.var], base, assigned)
                if spec is None:
                    return f"{_where(script, i)}: \\set of another expression"
                out.append(spec)
                done.add(cmd.var)
                continue
            if isinstance(cmd, SleepCommand):
                if type(op.amount) is int:
                    # client_meta.sleep_usec of a constant, done once
                    out.append(SleepConst.of(wrap_int32(op.amount * op.unit_us)))
                    continue
                slot = slot_of(str(op.amount), done)
                if slot is None:
                    return f"{_where(script, i)}: \\sleep of a variable C cannot hold"
                out.append(SleepVar.of(slot, op.unit_us))
                continue
            assert isinstance(cmd, SqlCommand)
            names = cmd.simple_parts[1::2] if mode == "SIMPLE" else cmd.param_vars
            if mode != "SIMPLE" and len(names) > MAX_PARAMS:
                return f"{_where(script, i)}: more than {MAX_PARAMS} parameters"
            refs: list[int] = []
            for name in names:
                slot = slot_of(name, done)
                if slot is None:
                    return f"{_where(script, i)}: variable {name} is not an int C holds"
                refs.append(slot)
            lits: tuple[bytes, ...] | None = None
            if mode == "SIMPLE":
                if op.parts is None:
                    text = op.sql
                    refs = []
                else:
                    text = b""
                    lits = tuple(p.encode() for p in op.parts[0::2])
            else:
                text = op.prepname if mode == "PREPARED" else op.sql
            out.append(Sql.of(text, tuple(refs), lits))
            nsql += 1
        out.append(End())
        scripts.append(tuple(out))
    if len(slots) > MAX_VARS or nsql > MAX_VARS:
        return f"more than {MAX_VARS} variables or SQL commands"
    names_all = tuple(set_names) + tuple(const_names)
    weights = tuple(s.weight for s in cfg.scripts)
    return names_all, len(set_names), weights, tuple(scripts)


class FastEventLoop(EventLoop):
    """An :class:`EventLoop` whose ``run`` is the C loop once :meth:`use_c`
    gave it the plan; the IoHooks (and the epoll instance) stay Python's."""

    _fast: Any = None

    def use_c(
        self,
        plan: FastPlan,
        engine: Engine,
        w: WorkerState,
        script_ops: tuple[tuple[Op, ...], ...],
        flags: RunFlags,
    ) -> None:
        """Build the C loop over this loop's clients and epoll instance."""
        assert _module is not None
        hooks: tuple[Callable[..., None], ...] = (
            engine.advance,
            engine.resume,
            partial(absorb, self),
        )
        control = -1 if self._control_fd is None else self._control_fd
        rec = self.recorder
        self._fast = _module.FastLoop(
            list(self.clients),
            script_ops,
            plan,
            w,
            hooks,
            self.waiter.epoll_fd(),
            control,
            flags,
            None if rec is None else rec.targets(),
        )

    def run(self) -> int:
        fast = self._fast
        if fast is None:
            return super().run()
        progress_us = self._progress_us
        start = self._progress_start_us
        next_report = start + progress_us if progress_us else 0
        rec = self.recorder
        # the nearest periodic deadline (progress tick or interval end), 0: none
        next_tick = next_report
        if rec is not None and (not next_tick or rec.next_us < next_tick):
            next_tick = rec.next_us
        while True:
            outcome: int = fast.run(next_tick)
            self.idle_us = fast.idle_us
            if outcome != OUT_TICK:
                return outcome
            # as EventLoop.run: the end of a recorder interval (C wrote its
            # counts and histograms back before returning), a progress tick
            now: int = fast.now_us
            if rec is not None and now >= rec.next_us:
                rec.advance(now)
            if next_report and now >= next_report:
                tick = (now - start) // progress_us
                if self._on_progress is not None:
                    self._on_progress(tick, now)
                next_report = start + (tick + 1) * progress_us
            next_tick = next_report
            if rec is not None and (not next_tick or rec.next_us < next_tick):
                next_tick = rec.next_us


def flags_for(
    query_mode: int,
    nxacts: int,
    end_us: int,
    detailed: bool,
    tx_clock: bool,
    max_tries: int,
    nscripts: int,
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
        int(nscripts == 1 and throttle_delay <= 0.0),
        int(exit_on_abort),
        latency_limit_us,
        float(throttle_delay),
        int(per_command),
    )


def _where(script: ParsedScript, index: int) -> str:
    return f"command {index} of script {script.source!r}"
