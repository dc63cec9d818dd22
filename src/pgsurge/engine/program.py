"""A worker's program: parsed scripts turned into the engine's ``Op`` tuples.

The script language (``pgsurge.script``) gives a :class:`ParsedScript` per
script: commands as plain values. The engine runs ``Op`` records
(``state.Op``): each command with what running it needs computed once per
worker — SQL text encoded for libpq, prepared statement names, parameter
names, the ``\\if`` jump targets, the ``--debug`` traces; expression
closures are compiled when the Python engine first evaluates them (the C
loop, which runs most scripts, never does). Both loops run these ops;
``fastloop.plan_for`` then derives the C loop's plan from them. A Python transaction (a
``PyTransactionSpec`` from ``pgsurge.workloads``) in place of a script is
compiled by ``pyworkload.compile_py``; :func:`reported_ops` and
:func:`connect_hook` answer for both kinds, :func:`python_step` gives the
state machine its step for Python ops. ``pyworkload`` is imported
only by runs that have a Python transaction: its import (a table of 65535
parameter names, Protocol classes) is some 10 ms of every run's start-up,
which the client-CPU-per-transaction figures pay.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from pgsurge import pgconn
from pgsurge.config import QueryMode
from pgsurge.engine import state as C
from pgsurge.engine.state import Client, Op, Settings, Support
from pgsurge.script.ast import (
    Call,
    Command,
    ElseCommand,
    EndifCommand,
    Expr,
    GsetKind,
    IfCommand,
    ParsedScript,
    PipelineCommand,
    PipelineOp,
    SetCommand,
    ShellCommand,
    SleepCommand,
    SqlCommand,
    Value,
)
from pgsurge.script.sqlvars import valid_variable_name

if TYPE_CHECKING:
    from pgsurge.engine.pyworkload import PyTransactionSpec

    # annotations only: the Python evaluator is imported where an
    # expression is first evaluated (a plain run of SQL evaluates none)
    from pgsurge.script.evaluate import CompiledExpr, EvalContext

__all__ = [
    "ScriptLike",
    "compile_scripts",
    "connect_hook",
    "python_step",
    "reported_ops",
]

#: what a worker runs: a parsed script or a Python transaction (spelled as
#: a string: the Python side's module is not imported at run time)
ScriptLike: TypeAlias = "ParsedScript | PyTransactionSpec"

_GSET = {
    GsetKind.NONE: C.GSET_NONE,
    GsetKind.GSET: C.GSET_ONE,
    GsetKind.ASET: C.GSET_ALL,
}


def compile_scripts(
    scripts: tuple[ScriptLike, ...], mode: QueryMode, *, debug: bool = False
) -> tuple[tuple[Op, ...], ...]:
    """Turn parsed scripts into the engine's ``Op`` tuples (once per worker).

    Prepared statement names are ``P_<n>`` numbered over the SQL commands
    of all scripts in order, as pgbench 18 names them. Under ``debug``
    (--debug) every ``\\set`` takes the branch that prints its trace.
    """
    prepnum = 0
    compiled: list[tuple[Op, ...]] = []
    for script in scripts:
        if not isinstance(script, ParsedScript):
            from pgsurge.engine.pyworkload import compile_py  # see the docstring

            compiled.append(compile_py(script, mode))
            continue
        commands = script.commands
        ops: list[Op] = []
        for index, cmd in enumerate(commands):
            op, prepnum = _compile_command(cmd, index, commands, mode, prepnum)
            if debug and op.kind == C.K_SET:
                op.uses_debug = True
            ops.append(op)
        # \startpipeline under -M prepared prepares what follows it first
        for i, op in enumerate(ops):
            if op.kind == C.K_PSTART:
                inner: list[Op] = []
                for nxt in ops[i + 1 :]:
                    if nxt.kind == C.K_PEND:
                        break
                    if nxt.kind == C.K_SQL:
                        inner.append(nxt)
                op.pipeline_ops = tuple(inner)
        # a sentinel: START_COMMAND finds the end without a length test
        ops.append(Op(C.K_END, len(ops), ""))
        compiled.append(tuple(ops))
    return tuple(compiled)


def reported_ops(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """The ops whose figures -r reports: a script's commands (all but its
    final ``K_END``), or a Python transaction's statements and sleeps."""
    if ops[0].kind == C.K_PY:
        from pgsurge.engine.pyworkload import reported_ops as py_reported

        return py_reported(ops)
    return ops[:-1]


def python_step(
    s: Settings, sup: Support, scripts: Sequence[tuple[Op, ...]]
) -> Callable[[Client, Op], int]:
    """The state machine's step for ``K_PY`` ops (``pyworkload.make_py``);
    in a run without Python transactions, one that is never called."""
    if not any(ops[0].kind == C.K_PY for ops in scripts):
        return _no_python_step
    from pgsurge.engine.pyworkload import make_py

    return make_py(s, sup)


def _no_python_step(st: Client, op: Op) -> int:
    raise AssertionError(f"client {st.id}: a Python op in a run of scripts")


def connect_hook(
    scripts: Sequence[ScriptLike],
) -> Callable[[pgconn.PgConn], str | None] | None:
    """What to run on each new connection: the ``@setup`` of the run's
    Python workloads (``pyworkload.connect_hook``); None for scripts."""
    if all(isinstance(s, ParsedScript) for s in scripts):
        return None
    from pgsurge.engine.pyworkload import connect_hook as py_hook

    return py_hook(scripts)


def _compile_command(
    cmd: Command,
    index: int,
    commands: tuple[Command, ...],
    mode: QueryMode,
    prepnum: int,
) -> tuple[Op, int]:
    line = cmd.first_line
    if isinstance(cmd, SqlCommand):
        op = Op(C.K_SQL, index, line, gset=_GSET[cmd.gset], prefix=cmd.gset_prefix)
        if mode is QueryMode.SIMPLE:
            op.sql = cmd.text.encode("utf-8", "surrogateescape")
            if len(cmd.simple_parts) > 1:
                op.parts = cmd.simple_parts
        else:
            op.sql = cmd.param_text.encode("utf-8", "surrogateescape")
            op.names = cmd.param_vars
            if mode is QueryMode.PREPARED:
                op.prepname = b"P_%d" % prepnum
                prepnum += 1
        return op, prepnum
    if isinstance(cmd, SetCommand):
        op = Op(C.K_SET, index, line, var=cmd.var, name="set", trace=f"\\set {cmd.var}")
        op.expr = _compiled_on_first_call(op, cmd.expr)
        op.var_ok = valid_variable_name(cmd.var)
        op.uses_debug = _uses_debug(line, cmd.expr)
        return op, prepnum
    if isinstance(cmd, IfCommand):
        kind = C.K_ELIF if cmd.is_elif else C.K_IF
        name = "elif" if cmd.is_elif else "if"
        op = Op(kind, index, line, name=name, trace="\\" + name)
        op.expr = _compiled_on_first_call(op, cmd.expr)
        op.uses_debug = _uses_debug(line, cmd.expr)
        target = cmd.false_jump
        landing = commands[target] if target < len(commands) else None
        if isinstance(landing, EndifCommand):
            # pgbench skips over the \endif of a false branch without running it
            op.false_next = target + 1
        else:
            op.false_next = target
            op.false_to_elif = isinstance(landing, IfCommand) and landing.is_elif
        op.end_next = cmd.end_jump + 1
        return op, prepnum
    if isinstance(cmd, ElseCommand):
        op = Op(C.K_ELSE, index, line, end_next=cmd.end_jump + 1, trace="\\else")
        return op, prepnum
    if isinstance(cmd, EndifCommand):
        return Op(C.K_ENDIF, index, line, trace="\\endif"), prepnum
    if isinstance(cmd, SleepCommand):
        op = Op(C.K_SLEEP, index, line, amount=cmd.amount, unit_us=cmd.unit_us)
        op.trace = _sleep_trace(line)
        return op, prepnum
    if isinstance(cmd, ShellCommand):
        op = Op(C.K_SHELL, index, line, var=cmd.var or "", argv=cmd.argv)
        op.name = "setshell" if cmd.var is not None else "shell"
        var = () if cmd.var is None else (cmd.var,)
        op.trace = "\\" + " ".join((op.name, *var, *cmd.argv))
        return op, prepnum
    if isinstance(cmd, PipelineCommand):
        kind = {
            PipelineOp.START: C.K_PSTART,
            PipelineOp.SYNC: C.K_PSYNC,
            PipelineOp.END: C.K_PEND,
        }[cmd.op]
        return Op(kind, index, line, trace="\\" + cmd.op.value), prepnum
    raise TypeError(f"unknown command {cmd!r}")


def _sleep_trace(first_line: str) -> str:
    """``\\sleep`` as --debug shows it: pgbench's words, where ``10ms``
    (digits glued to a unit) also gives the unit as a third word."""
    words = first_line.split()
    if len(words) == 2 and not words[1].startswith(":"):
        word = words[1]
        start = 1 if word[:1] in ("+", "-") else 0
        end = start
        while end < len(word) and word[end] in "0123456789":
            end += 1
        if start < end < len(word):
            words.append(word[end:])
    return " ".join(words)


def _compiled_on_first_call(op: Op, expr: Expr) -> CompiledExpr:
    """``op.expr``: a stand-in that compiles ``expr`` into its closure
    (:func:`~pgsurge.script.evaluate.compile_expr`) when the Python engine
    first evaluates it, puts the closure in its place and returns its value.

    When the C loop runs a script (``fastloop``), the Python engine
    evaluates an expression only for a client handed back to it at that
    command, if ever; and compiling every ``\\set`` of a worker's scripts
    up front cost a 10,000-line script a third of a second per worker.
    Compiling raises nothing for a tree the parser built: pgbench's
    expression errors all happen at run time, and are raised by the
    closure then, as before.
    """

    def first_call(ctx: EvalContext) -> Value:
        from pgsurge.script.evaluate import compile_expr

        fn = compile_expr(expr)
        op.expr = fn
        return fn(ctx)

    return first_call


#: "debug" in any letter case: a tree calls debug() only when the
#: command's text holds the function's name (case-insensitive, ASCII)
_DEBUG_NAME = re.compile("debug", re.IGNORECASE | re.ASCII)


def _uses_debug(line: str, expr: Expr) -> bool:
    """Whether ``expr``, the tree of the command whose text is ``line``,
    calls debug() anywhere.

    Only a command whose text names the function is walked (the name is
    one ASCII identifier in it: a continuation cannot cut it). The walk
    has an explicit stack: pgbench accepts operator chains of tens of
    thousands of terms (a tree that deep), which a recursive walk
    through a generator turned into a RecursionError.
    """
    if _DEBUG_NAME.search(line) is None:
        return False
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Call):
            if node.name == "debug":
                return True
            stack.extend(node.args)
    return False
