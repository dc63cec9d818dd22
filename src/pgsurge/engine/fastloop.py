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
* the run has none of -l, -C, --debug, and no output that needs
  latency histograms (--percentiles, --json); -R (the worker's Poisson
  schedule, from its throttle stream), -L (skipped slots, late
  transactions), -r (each command's latency, timed as client.py does)
  and -T/-t are all supported;
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
values, ...) runs on the Python loop unchanged. -P is supported:
the C loop returns at each tick and :class:`FastEventLoop` sends the
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
from pgsurge.engine import fastpq
from pgsurge.engine import state as C
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
FASTLOOP_API = 4

#: the C loop keeps this many variables, and SQL commands, at most
_MAX_SLOTS = 64
#: parameters of an extended/prepared command (pgbench's limit, which
#: script.compile enforces; a variable read twice is two)
_MAX_PARAMS = 255

# the C plan's op codes (_fastloop.c)
_OP_END = 0
_OP_SET_CONST = 1
_OP_SET_RANDOM = 2
_OP_SQL = 3
_OP_SLEEP_CONST = 4
_OP_SLEEP_VAR = 5

# what _fastloop.FastLoop.run returns besides a LoopOutcome
_TICK = 3


def disabled() -> bool:
    """True when ``PGSURGE_NO_FASTLOOP`` asks for the Python loop."""
    return os.environ.get("PGSURGE_NO_FASTLOOP", "") not in ("", "0")


def _load() -> ModuleType | None:
    if not fastpq.available:
        return None
    module = _native.load("_fastloop", FASTLOOP_API)
    if module is None:
        return None
    # the state and mode numbers the C code is written for
    expected = {
        "CHOOSE_SCRIPT": C.CHOOSE_SCRIPT,
        "START_TX": C.START_TX,
        "PREPARE_THROTTLE": C.PREPARE_THROTTLE,
        "THROTTLE": C.THROTTLE,
        "SLEEP": C.SLEEP,
        "START_COMMAND": C.START_COMMAND,
        "WAIT_RESULT": C.WAIT_RESULT,
        "END_COMMAND": C.END_COMMAND,
        "WAIT_ROLLBACK_RESULT": C.WAIT_ROLLBACK_RESULT,
        "END_TX": C.END_TX,
        "ABORTED": C.ABORTED,
        "FINISHED": C.FINISHED,
        "MODE_SIMPLE": C.MODE_SIMPLE,
        "MODE_EXTENDED": C.MODE_EXTENDED,
        "MODE_PREPARED": C.MODE_PREPARED,
    }
    if any(getattr(module, k) != v for k, v in expected.items()):
        return None
    return module


_module = _load()

#: whether the C loop is built, current and may be used in this process
#: (``PGSURGE_NO_FASTLOOP`` is read per run, by :func:`plan_for`)
available: bool = _module is not None

#: (var_names, nset, weights, scripts): the C loop's view of the scripts
FastPlan = tuple[
    tuple[str, ...], int, tuple[int, ...], tuple[tuple[tuple[Any, ...], ...], ...]
]


def run_excluded(cfg: RunConfig) -> str | None:
    """Why this run's options keep it on the Python loop, or None."""
    if cfg.log:
        return "-l"
    if cfg.connect_each_tx:
        return "-C"
    if cfg.debug:
        return "--debug"
    if cfg.percentiles is not None or cfg.json_path or cfg.html_path:
        return "histograms"
    if any(s.python for s in cfg.scripts):
        # a generator is advanced by the Python state machine only
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
) -> tuple[Any, ...] | None:
    """The C op of an eligible ``\\set``, or None."""
    if not valid_variable_name(cmd.var):
        return None
    value = _const_int(cmd.expr)
    if value is not None:
        return (_OP_SET_CONST, slot, value)
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
    return (_OP_SET_RANDOM, slot, lo, hi)


def plan_for(
    cfg: RunConfig,
    parsed: Sequence[ParsedScript],
    compiled: Sequence[Sequence[Op]],
    variables: Sequence[tuple[str, Any]],
    set_client_id: bool,
) -> FastPlan | None:
    """The C loop's plan when this run is eligible (module docstring)."""
    if _module is None or disabled() or run_excluded(cfg) is not None:
        return None
    if not EventLoop.uses_epoll():
        return None
    base = dict(variables)
    assigned: set[str] = set()
    for script in parsed:
        for cmd in script.commands:
            if isinstance(cmd, SetCommand):
                assigned.add(cmd.var)
            elif isinstance(cmd, SleepCommand):
                continue
            elif not isinstance(cmd, SqlCommand) or cmd.gset is not GsetKind.NONE:
                return None
    set_names = sorted(assigned)
    const_names: list[str] = []
    slots = {name: i for i, name in enumerate(set_names)}
    mode = cfg.query_mode.name
    scripts: list[tuple[tuple[Any, ...], ...]] = []
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
        out: list[tuple[Any, ...]] = []
        done: set[str] = set()
        for cmd, op in zip(script.commands, ops, strict=False):
            if isinstance(cmd, SetCommand):
                spec = _set_op(cmd, slots[cmd.var], base, assigned)
                if spec is None:
                    return None
                out.append(spec)
                done.add(cmd.var)
                continue
            if isinstance(cmd, SleepCommand):
                if type(op.amount) is int:
                    # meta.sleep_usec of a constant, done once
                    out.append((_OP_SLEEP_CONST, wrap_int32(op.amount * op.unit_us)))
                    continue
                slot = slot_of(str(op.amount), done)
                if slot is None:
                    return None
                out.append((_OP_SLEEP_VAR, slot, op.unit_us))
                continue
            assert isinstance(cmd, SqlCommand)
            names = cmd.simple_parts[1::2] if mode == "SIMPLE" else cmd.param_vars
            if mode != "SIMPLE" and len(names) > _MAX_PARAMS:
                return None
            refs: list[int] = []
            for name in names:
                slot = slot_of(name, done)
                if slot is None:
                    return None
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
            out.append((_OP_SQL, text, tuple(refs), lits))
            nsql += 1
        out.append((_OP_END,))
        scripts.append(tuple(out))
    if len(slots) > _MAX_SLOTS or nsql > _MAX_SLOTS:
        return None
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
        flags: tuple[int | float, ...],
    ) -> None:
        """Build the C loop over this loop's clients and epoll instance."""
        assert _module is not None
        hooks: tuple[Callable[..., None], ...] = (
            engine.advance,
            engine.resume,
            partial(absorb, self),
        )
        control = -1 if self._control_fd is None else self._control_fd
        self._fast = _module.FastLoop(
            list(self.clients),
            script_ops,
            plan,
            w,
            hooks,
            self.waiter.epoll_fd(),
            control,
            flags,
        )

    def run(self) -> int:
        fast = self._fast
        if fast is None:
            return super().run()
        progress_us = self._progress_us
        start = self._progress_start_us
        next_report = start + progress_us if progress_us else 0
        while True:
            outcome: int = fast.run(next_report)
            self.idle_us = fast.idle_us
            if outcome != _TICK:
                return outcome
            # a progress tick, as EventLoop.run does it
            now: int = fast.now_us
            tick = (now - start) // progress_us
            if self._on_progress is not None:
                self._on_progress(tick, now)
            next_report = start + (tick + 1) * progress_us


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
) -> tuple[int | float, ...]:
    """The C loop's run flags (the same derivations as ``make_engine``):
    ``end_us`` is Settings.end_us (0 without -T), ``throttle_delay`` the
    worker's mean Poisson delay (0.0 without -R), ``per_command`` -r."""
    return (
        query_mode,
        nxacts,
        end_us,
        int(detailed),
        int(tx_clock),
        int(max_tries != 1),
        # restart_inline of make_engine (no -C, no --debug here)
        int(nscripts == 1 and throttle_delay <= 0.0),
        int(exit_on_abort),
        latency_limit_us,
        float(throttle_delay),
        int(per_command),
    )
