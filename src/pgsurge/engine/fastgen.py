"""Python workloads on the C loop: the plan and the spec of ``set_python``.

A Python transaction compiles to ops (``engine.pyworkload.compile_py``):
K_PY ops that advance its generator, one K_SQL op per declared statement
(parameters in the variables "$1".."$n"), the target of ``ctx.sleep`` and
the ops of a batch. On the C loop (``_fastloop_gen.c``) each K_PY op is a
:class:`~pgsurge.engine.abi.PyStep`: C sends the last result into the
generator and files what it yields -- a statement call (its arguments
bound straight into libpq's parameters, not through the variables, so the
plan's statements have no variable slots), ``ctx.sleep`` or the end; the
statements are plain :class:`~pgsurge.engine.abi.Sql` ops whose results C
reads, keeping the last one of a fetched statement for the generator. A
batch, anything the generator yields by mistake, an exception, an error
result (thrown into the generator by Python's ``py_error``), retries and
a statement's first prepare go to Python's engine, which stays the
reference; the batch's ops and the sleep's are
:class:`~pgsurge.engine.abi.PyOnly`.

:func:`decide` is ``fastloop.decide`` for a run of Python transactions:
a plan, or why the C loop is not taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgsurge.config import QueryMode
from pgsurge.engine import fastloop
from pgsurge.engine import state as C
from pgsurge.engine.abi import End, PlanOp, PyOnly, PyStep, Sql
from pgsurge.engine.loop import EventLoop

if TYPE_CHECKING:
    from pgsurge.config import RunConfig
    from pgsurge.engine.pyworkload import PyProgram
    from pgsurge.engine.state import Op

__all__ = ["decide", "is_python", "spec"]


def is_python(compiled: Sequence[Sequence[Op]]) -> bool:
    """Whether the run's scripts are all Python transactions."""
    return bool(compiled) and all(ops[0].kind == C.K_PY for ops in compiled)


def decide(cfg: RunConfig, compiled: Sequence[Sequence[Op]]) -> fastloop.FastPlan | str:
    """The C loop's plan for a run of Python transactions, or why not."""
    if fastloop._module is None:
        return fastloop._unusable
    if fastloop.disabled():
        return "PGSURGE_NO_FASTLOOP is set"
    if cfg.debug:
        return "--debug is not supported by the C loop"
    if not is_python(compiled):
        return "a Python workload with scripts is not supported by the C loop"
    if not EventLoop.uses_epoll():
        return "epoll is not available"
    if cfg.connect_each_tx and any(
        getattr(ops[0].py.spec, "setup_connection", None) is not None
        for ops in compiled
    ):
        # C opens -C's connections itself, without the hook
        return "-C with a workload's @setup is not supported by the C loop"
    prepared = cfg.query_mode is QueryMode.PREPARED
    scripts: list[tuple[PlanOp, ...]] = []
    for ops in compiled:
        prog: PyProgram = ops[0].py
        statements = set(prog.index.values())
        out: list[PlanOp] = []
        for i, op in enumerate(ops):
            if op.kind == C.K_PY:
                out.append(PyStep())
            elif i in statements:
                # -M simple: the text of a statement without parameters
                # (fl_gen_send splices the others' literals in)
                text = op.prepname if prepared else op.sql
                out.append(
                    Sql.of(text, (), None, C.GSET_NONE, "", op.sql if prepared else b"")
                )
            elif op.kind == C.K_END:
                out.append(End())
            else:
                out.append(PyOnly())
        scripts.append(tuple(out))
    weights = tuple(s.weight for s in cfg.scripts)
    return (), 0, weights, tuple(scripts)


def spec(compiled: Sequence[Sequence[Op]], simple: bool = False) -> tuple[Any, ...]:
    """``FastLoop.set_python``'s argument: CAUGHT, Raised and
    ``bind_params`` (for what C leaves to Python), and per transaction its
    function, {statement: op index}, each op's parameter count, which ops'
    results the generator receives, the Result wrapper, the type of
    ``ctx.sleep()``, the sleep's op, a resume op (where a hand-back
    lets ``py_step`` file what the generator yielded) and, under ``-M
    simple``, each statement's text split at its parameters (literal
    bytes, then the 0-based argument, ...)."""
    # only a run of Python transactions imports their engine (a script
    # run's start-up stays without it: tests/unit/test_startup.py)
    from pgsurge.engine.pyworkload import CAUGHT, Raised, bind_params, bind_simple

    scripts = []
    for ops in compiled:
        prog: PyProgram = ops[0].py
        statements = set(prog.index.values())
        parts: list[tuple[bytes | int, ...] | None] = [None] * len(ops)
        if simple:
            for stmt, i in prog.index.items():
                if stmt.nparams:
                    parts[i] = tuple(
                        p.encode("utf-8", "surrogateescape")
                        if k % 2 == 0
                        else int(p) - 1
                        for k, p in enumerate(stmt.simple_parts)
                    )
        fetch = bytes(
            int(i in statements and op.gset == C.GSET_PY) for i, op in enumerate(ops)
        )
        scripts.append(
            (
                prog.fn,
                dict(prog.index),
                tuple(prog.counts),
                fetch,
                prog.wrap,
                prog.sleep_type,
                prog.sleep_index,
                prog.sleep_index + 1,
                tuple(parts),
            )
        )
    return CAUGHT, Raised, bind_simple if simple else bind_params, tuple(scripts)
