"""Python transactions on the state machine: a generator as a script.

A workload written in Python (``pgsurge.workloads``) gives the engine plain
values: per transaction its generator function, its statements (SQL with
``$n`` parameters) and a few factories (:class:`PyTransactionSpec`). This
module turns one into ``Op`` records that the ordinary state machine runs,
so that sending, reading, errors, retries, ``-r``, ``-R``/``-L``, logs and
the accounting are those of scripts, and adds the one step scripts lack:
advancing the generator (:func:`make_py`'s ``py_step``).

The ops of a transaction of n statements::

    0        K_PY  start: a new generator (a retry restarts here)
    2k-1     K_SQL statement k (1..n), parameters in variables "$1".."$m"
    2k       K_PY  resume: send the statement's result into the generator
    2n+1     K_SLEEP target of ``yield ctx.sleep(s)`` (never started itself)
    2n+2     K_PY  resume after the sleep
    (extended and prepared modes: a yielded batch as a pipeline)
    2n+3     K_PSTART, 2n+4 K_PY, 2n+5 K_PEND (gset GSET_PY), 2n+6 K_PY
    2n+5+2k  K_SQL statement k again, its result left to K_PEND (k=1..n)
    2n+6+2k  K_PY  queue the batch's next statement, or K_PEND
    (simple mode: a yielded batch as one multi-statement query)
    2n+3     K_SQL (gset GSET_PY), its text set by the driver; 2n+4 K_PY
    last     K_END

A batch (``yield [s1(a), s2(b)]``) gives the generator the list of its
results, and is one implicit transaction in every mode (unless it runs
inside the code's own BEGIN): in a pipeline (\\startpipeline, the
statements, \\endpipeline: one sync), or in simple mode, where libpq has
no pipeline, one Query message of the statements separated by ``;``,
which the server runs as one implicit transaction. ``sql.store_gset``
collects the results of either.

A statement's error goes into the generator (``Support.py_error``, which
``sql.finish_drain`` asks first): ``SqlError`` is thrown at the ``yield``
that sent it. A generator that catches it goes on from what it yields
next (the statement counts as done, the transaction as a success); one
that lets it out gets a script's handling (retry, failure or abort),
with messages naming the file and line of that ``yield``. In a pipeline,
a caught error's batch is read to its sync first (the server skipped
its other statements).

A driver op sets ``client.command`` to the statement the generator yielded
and returns to START_COMMAND, which sends it as any SQL command;
END_COMMAND then steps to the next index, a resume driver. A script pays one
int comparison per command for this (START_COMMAND tests ``K_PY`` first,
so that the statement a driver chose is sent in the same pass), and a
statement whose result the generator wants has ``gset == GSET_PY``, which
keeps it off the plain result path (the result is stored by
``sql.store_gset``). Statements declared with ``fetch=False``
stay on that path: the generator receives None for them.

The generator is advanced in the client's own step, on its own PRNG
stream (``ctx.random*``): a retry restores the stream and restarts the
generator, which then draws the same values, as a script's retry does.
An exception in the generator aborts the client with the user's
traceback (frames of the workload's files only).
"""

from __future__ import annotations

import linecache
import time
import traceback
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pgsurge import pgconn
from pgsurge.config import QueryMode
from pgsurge.engine import state as C
from pgsurge.engine.interrupt import GRACE_S, UserCodeStopped
from pgsurge.engine.state import (
    ABORTED,
    E_DEADLOCK,
    E_META,
    E_OTHER,
    E_SERIALIZATION,
    END_TX,
    FINISHED,
    SLEEP,
    START_COMMAND,
    Client,
    Op,
    Settings,
    Support,
)
from pgsurge.errors import WorkloadUsageError
from pgsurge.prng import PgPrng

__all__ = [
    "PyClient",
    "PyProgram",
    "PyStatementSpec",
    "PyTransactionSpec",
    "compile_py",
    "make_py",
    "reported_ops",
]

#: the variables holding a statement's parameters ($n's value is "$n")
PARAM_NAMES = tuple(f"${i}" for i in range(1, 65536))

_monotonic_ns = time.monotonic_ns

#: what ``next(gen, DONE)`` returns once a transaction's generator is done
DONE: Any = object()


class PyStatementSpec(Protocol):
    """A declared statement, as the engine needs it."""

    #: unique in the run: names the prepared statement
    @property
    def key(self) -> int: ...
    @property
    def sql(self) -> str: ...
    @property
    def nparams(self) -> int: ...
    #: the text split at its parameters: literal text at even indexes,
    #: parameter numbers (1-based) at odd ones
    @property
    def simple_parts(self) -> tuple[str | int, ...]: ...
    #: whether the generator receives the result (else None)
    @property
    def fetch(self) -> bool: ...
    @property
    def first_line(self) -> str: ...


class PyTransactionSpec(Protocol):
    """A loaded Python transaction (``pgsurge.workloads.loader.Transaction``)."""

    @property
    def source(self) -> str: ...
    @property
    def fn(self) -> Callable[[Any], Generator[Any, Any, Any]]: ...
    #: every statement of the workload; the first ``nreported`` are those
    #: the transaction's code names, which -r reports
    @property
    def statements(self) -> tuple[PyStatementSpec, ...]: ...
    @property
    def nreported(self) -> int: ...
    #: the code calls ``sleep``: -r reports a row for it
    @property
    def uses_sleep(self) -> bool: ...
    #: the type of ``ctx.sleep()``'s value (a statement call is a
    #: ``(statement, args)`` tuple)
    @property
    def sleep_type(self) -> type: ...
    #: files whose frames a traceback shows (the workload's own code)
    @property
    def user_files(self) -> frozenset[str]: ...
    def new_context(
        self, rng: PgPrng, variables: dict[str, Any], client_id: int
    ) -> Any: ...
    def wrap_result(self, res: Any) -> Any: ...
    #: the rows -r reports (each with a ``first_line``)
    @property
    def commands(self) -> tuple[Any, ...]: ...
    #: what a statement's error is thrown into the generator as, and its
    #: factory: (sqlstate, the server's text, the statement, "file:line")
    @property
    def error_type(self) -> type[BaseException]: ...
    def sql_error(
        self, sqlstate: str, text: str, statement: Any, where: str
    ) -> BaseException: ...


@dataclass(slots=True, eq=False)
class PyProgram:
    """One transaction compiled for a worker (on each of its ``K_PY`` ops).

    What ``py_step`` reads of the spec is copied here once: the hot path
    reads slots, not the spec's properties.
    """

    spec: PyTransactionSpec
    #: statement -> index of its K_SQL op
    index: dict[Any, int] = field(default_factory=dict)
    #: op index -> the number of parameters its statement takes (0 for
    #: ops that are not statements): a hand-made (statement, args) tuple
    #: with fewer values would otherwise send the $n of an earlier call
    counts: list[int] = field(default_factory=list)
    sleep_index: int = 0
    #: a batch in a pipeline (extended and prepared modes): where its
    #: \startpipeline and \endpipeline are, statement -> its op in it
    pstart_index: int = 0
    pend_index: int = 0
    batch_index: dict[Any, int] = field(default_factory=dict)
    #: the ops -r reports, in the order of ``spec``'s report rows
    reported: tuple[Op, ...] = ()
    fn: Callable[[Any], Generator[Any, Any, Any]] | None = None
    sleep_type: type | None = None
    wrap: Callable[[Any], Any] | None = None
    #: op index -> the statement a K_SQL op sends (None for other ops)
    stmt_at: list[Any] = field(default_factory=list)
    #: simple mode: the op of a batch's multi-statement query
    sbatch_index: int = 0


@dataclass(slots=True, eq=False)
class PyClient:
    """A client's Python side: its context, generator, last result."""

    ctx: Any
    gen: Generator[Any, Any, Any] | None = None
    res: Any = None
    #: a yielded batch: the statement calls still to send (None: no batch)
    batch: list[Any] | None = None
    #: the batch's results so far (in a pipeline, stored by sql.store_gset)
    results: list[Any] | None = None
    #: the pipeline's \endpipeline was sent (or, in simple mode, the
    #: batch's query was)
    batch_sent: bool = False
    #: the current batch's statement calls, in order (errors name the one
    #: that failed)
    batch_items: list[Any] | None = None
    #: what the generator yielded after catching an error, filed by the
    #: next K_PY op (``batch`` is ``CAUGHT`` meanwhile)
    thrown: Any = None
    #: an error was caught in a pipeline: its other results are skipped
    discarding: bool = False


#: ``PyClient.batch`` after a caught error: the next K_PY op goes to
#: ``batch_done``, off the hot path, which files ``PyClient.thrown``
CAUGHT: list[Any] = []


class Raised:
    """What the C loop files as ``PyClient.thrown`` when the generator
    raised (``_fastloop_gen.c``): py_step reports it as its own."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def bind_simple(st: Client, args: tuple[Any, ...]) -> None:
    """``bind_params`` of ``-M simple``: ints as they are, the other values
    as SQL literals (``set_params``'s simple mode)."""
    variables = st.variables
    for name, v in zip(PARAM_NAMES, args, strict=False):
        variables[name] = v if type(v) is int else _literal(v)


def bind_params(st: Client, args: tuple[Any, ...]) -> None:
    """A statement's parameters into the variables "$1".."$n", as
    ``make_py``'s ``set_params`` does in extended and prepared modes: what
    Python's send reads when the C loop hands a client back with a
    statement it has not sent (its first prepare) or may send again."""
    variables = st.variables
    for name, v in zip(PARAM_NAMES, args, strict=False):
        tv = type(v)
        if tv is int:
            variables[name] = v
        elif tv is str:
            variables[name] = _no_nul(v)
        elif v is None:
            variables.pop(name, None)
        else:
            variables[name] = _text(v)


def compile_py(spec: PyTransactionSpec, mode: QueryMode) -> tuple[Op, ...]:
    """The ops of one transaction (layout in the module docstring)."""
    prog = PyProgram(spec)
    prog.fn = spec.fn
    prog.sleep_type = spec.sleep_type
    prog.wrap = spec.wrap_result
    ops: list[Op] = [Op(C.K_PY, 0, spec.source, py=prog)]
    for stmt in spec.statements:
        prog.index[stmt] = len(ops)
        ops.append(_statement_op(stmt, len(ops), mode))
        ops.append(Op(C.K_PY, len(ops), spec.source, py=prog))
    prog.sleep_index = len(ops)
    sleep_op = Op(C.K_SLEEP, len(ops), "ctx.sleep()", name="sleep")
    ops.append(sleep_op)
    ops.append(Op(C.K_PY, len(ops), spec.source, py=prog))
    if mode is not QueryMode.SIMPLE:
        # a batch (a yielded list) as a pipeline: \startpipeline, the
        # statements (copies that leave their results to \endpipeline,
        # which gives them all to the generator), \endpipeline
        pstart = Op(C.K_PSTART, len(ops), "", trace="\\startpipeline")
        prog.pstart_index = len(ops)
        ops.append(pstart)
        ops.append(Op(C.K_PY, len(ops), spec.source, py=prog))
        prog.pend_index = len(ops)
        pend = Op(C.K_PEND, len(ops), "", gset=C.GSET_PY, trace="\\endpipeline")
        ops.append(pend)
        ops.append(Op(C.K_PY, len(ops), spec.source, py=prog))
        inner = []
        for stmt in spec.statements:
            prog.batch_index[stmt] = len(ops)
            op = _statement_op(stmt, len(ops), mode)
            op.gset = C.GSET_NONE
            inner.append(op)
            ops.append(op)
            ops.append(Op(C.K_PY, len(ops), spec.source, py=prog))
        pstart.pipeline_ops = tuple(inner)
    else:
        # a batch as one multi-statement query: its text is the driver's
        prog.sbatch_index = len(ops)
        ops.append(Op(C.K_SQL, len(ops), "batch", gset=C.GSET_PY))
        ops.append(Op(C.K_PY, len(ops), spec.source, py=prog))
    ops.append(Op(C.K_END, len(ops), ""))
    prog.counts = [0] * len(ops)
    prog.stmt_at = [None] * len(ops)
    for stmt, i in (*prog.index.items(), *prog.batch_index.items()):
        prog.stmt_at[i] = stmt
    for stmt in spec.statements:
        prog.counts[prog.index[stmt]] = stmt.nparams
        if stmt in prog.batch_index:
            prog.counts[prog.batch_index[stmt]] = stmt.nparams
    reported = [ops[prog.index[s]] for s in spec.statements[: spec.nreported]]
    if spec.uses_sleep:
        reported.append(sleep_op)
    prog.reported = tuple(reported)
    return tuple(ops)


def connect_hook(
    scripts: Sequence[object],
) -> Callable[[pgconn.PgConn], str | None] | None:
    """What to run on each new connection: the ``@setup`` of every Python
    workload of the run (once per workload), or None. A transaction of a
    workload with one has a ``setup_connection(conn)`` returning None, or
    the message of its failure."""
    hooks: dict[str, Callable[[pgconn.PgConn], str | None]] = {}
    for script in scripts:
        hook = getattr(script, "setup_connection", None)
        if hook is not None:
            hooks.setdefault(str(getattr(script, "workload", "")), hook)
    if not hooks:
        return None
    todo = tuple(hooks.values())

    def on_connect(conn: pgconn.PgConn) -> str | None:
        for hook in todo:
            failed = hook(conn)
            if failed:
                return failed
        return None

    return on_connect


def reported_ops(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """The ops whose figures -r reports: a script's commands, or a Python
    transaction's statements (and its sleeps)."""
    if ops[0].kind == C.K_PY:
        prog: PyProgram = ops[0].py
        return prog.reported
    return ops[:-1]


def _statement_op(stmt: PyStatementSpec, index: int, mode: QueryMode) -> Op:
    op = Op(C.K_SQL, index, stmt.first_line)
    op.gset = C.GSET_PY if stmt.fetch else C.GSET_NONE
    n = stmt.nparams
    if mode is QueryMode.SIMPLE:
        op.sql = stmt.sql.encode()
        if n:
            op.parts = tuple(
                str(p) if i % 2 == 0 else PARAM_NAMES[int(p) - 1]
                for i, p in enumerate(stmt.simple_parts)
            )
    else:
        op.sql = stmt.sql.encode()
        op.names = PARAM_NAMES[:n]
        if mode is QueryMode.PREPARED:
            op.prepname = b"PY_%d" % stmt.key
    return op


def _literal(value: object) -> str:
    """A parameter as an SQL literal (simple mode substitutes text)."""
    if value is None:
        return "NULL"
    if type(value) is bool:
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if type(value) is float else str(value)
    # bytes as _text sends them: not UTF-8 reaches the server as it is
    # (which refuses it with its message, not a traceback of the worker)
    text = (
        value.decode("utf-8", "surrogateescape")
        if isinstance(value, bytes)
        else str(value)
    )
    return "'" + _no_nul(text).replace("'", "''") + "'"


def _text(value: object) -> str | int:
    """A parameter as the text sent (extended and prepared modes)."""
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is float:
        return repr(value)
    if isinstance(value, bytes):
        return _no_nul(value.decode("utf-8", "surrogateescape"))
    return _no_nul(str(value))


def _no_nul(text: str) -> str:
    """``text``, refused when it holds a NUL: libpq sends parameters and
    queries as C strings, so the value would silently end there (the
    client aborts with this instead, as psycopg refuses one)."""
    if "\x00" in text:
        raise ValueError(
            "a text parameter contains a NUL character (0x00), "
            "which PostgreSQL's text values cannot hold"
        )
    return text


def user_traceback(exc: BaseException, files: frozenset[str]) -> str:
    """The exception with the frames of the workload's files only.

    A :class:`WorkloadUsageError` is pgsurge's own check of the API's use,
    whose message names the workload's line already: the message, that
    line and a caret under the call, as a script's error is shown (a
    traceback would show pgsurge's check, not the user's mistake)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in files]
    if isinstance(exc, WorkloadUsageError):
        if not frames:
            return str(exc)
        last = frames[-1]
        # a result's check (one(): no row) does not know the caller's line
        at = f"{last.filename}:{last.lineno}: "
        return ("" if str(exc).startswith(at) else at) + str(exc) + _caret(last)
    text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    if not frames:
        return text
    return (
        "Traceback (most recent call last):\n"
        + "".join(traceback.format_list(frames))
        + text
    )


def _caret(frame: traceback.FrameSummary) -> str:
    """The frame's source line and a caret under its call (3.11's column
    positions), as lines to append; empty when the source is not there."""
    # FrameSummary.line is stripped; the columns count from the raw line
    line = linecache.getline(frame.filename, frame.lineno or 0).rstrip("\n")
    if not line.strip():
        return ""
    indent = len(line) - len(line.lstrip())
    shown = line.strip()
    col, end = frame.colno, frame.end_colno
    if col is None or end is None or frame.end_lineno != frame.lineno or col < indent:
        return f"\n    {shown}"
    width = max(1, end - col)
    return f"\n    {shown}\n    {' ' * (col - indent)}{'^' * width}"


def make_py(s: Settings, sup: Support) -> Callable[[Client, Op], int]:
    """``py_step(client, op)``: run a ``K_PY`` op; returns the next state."""
    simple = s.query_mode == C.MODE_SIMPLE
    names = PARAM_NAMES
    error = sup.error
    info = sup.info
    continue_on_error = s.continue_on_error
    verbose_errors = s.verbose_errors
    strip_nl = pgconn.strip_newline
    monotonic_ns = _monotonic_ns
    next_item = next
    end_us = s.end_us

    def stop(st: Client, py: PyClient) -> int:
        """The client's run ends inside a transaction (-T is over)."""
        gen = py.gen
        py.gen = py.res = py.thrown = None
        if gen is not None:
            try:
                gen.close()
            except BaseException:
                pass
        return FINISHED

    def fail(st: Client, prog: PyProgram, message: str) -> int:
        error(
            f"client {st.id} aborted in script {st.script} "
            f"({prog.spec.source}):\n{message}"
        )
        py = st.py
        if py is not None:
            py.gen = None
            py.res = None
        st.estatus = E_META
        return ABORTED

    def raised(st: Client, prog: PyProgram, e: BaseException) -> int:
        """The workload's code raised ``e``: the client aborts with it,
        unless the run's end interrupted that code (``UserCodeStopped``):
        then the client ends there and its transaction is not counted."""
        if type(e) is not UserCodeStopped:
            return fail(st, prog, user_traceback(e, prog.spec.user_files))
        info(
            f"client {st.id}: the Python code of its transaction was still "
            f"running (at {e}) {GRACE_S:g} s after the run's end: interrupted, "
            "the transaction is not counted"
        )
        py = st.py
        if py is not None:
            py.gen = None
            py.res = None
        return FINISHED

    def where(gen: Generator[Any, Any, Any]) -> str:
        frame = getattr(gen, "gi_frame", None)
        if frame is None:
            return ""
        return f'File "{frame.f_code.co_filename}", line {frame.f_lineno}: '

    def bad_item(st: Client, prog: PyProgram, gen: Any, item: object) -> int:
        """The generator yielded something that is not a statement call of
        this workload nor a sleep."""
        if type(item) is tuple and len(item) == 2 and hasattr(item[0], "first_line"):
            what = f"the statement {item[0]!r} is not one of this workload's"
        else:
            what = (
                f"yielded {item!r} ({type(item).__name__}), not a statement "
                "call or ctx.sleep()"
            )
        return fail(st, prog, where(gen) + what)

    def new_generator(st: Client, prog: PyProgram) -> PyClient | None:
        """The first step of a try: a new generator (a retry restarts it);
        None (the client aborted) when calling the function failed."""
        py: PyClient | None = st.py
        if py is None:
            py = st.py = PyClient(prog.spec.new_context(st.rng, st.variables, st.id))
        elif py.gen is not None:
            try:
                py.gen.close()
            except BaseException:
                pass
        py.res = None
        py.batch = py.results = py.batch_items = py.thrown = None
        py.discarding = False
        try:
            py.gen = prog.fn(py.ctx)  # type: ignore[misc]
        except BaseException as e:
            fail(st, prog, user_traceback(e, prog.spec.user_files))
            return None
        return py

    def set_params(st: Client, args: tuple[Any, ...]) -> int:
        """A statement's parameters into the variables "$1".."$n": how
        many, or -1 when they are not a sequence of at most 65535 values.

        Indexed rather than zipped: zip(names, args) builds an object and
        two iterators per statement (and zip(strict=) parses its keyword
        on every call), twice what the loop itself costs."""
        variables = st.variables
        k = 0
        try:
            if simple:
                for v in args:
                    variables[names[k]] = v if type(v) is int else _literal(v)
                    k += 1
                return k
            for v in args:
                tv = type(v)
                if tv is int or tv is str:
                    variables[names[k]] = v
                elif v is None:
                    variables.pop(names[k], None)
                else:
                    variables[names[k]] = _text(v)
                k += 1
        except (TypeError, IndexError):
            return -1
        return k

    def bad_params(st: Client, prog: PyProgram, gen: Any, item: tuple[Any, Any]) -> int:
        """A statement call whose parameters are not a sequence of at most
        65535 values (a tuple made by hand: calling a statement makes a
        good one)."""
        args = item[1]
        try:
            n = len(args)
        except TypeError:
            what = f"parameters {args!r} ({type(args).__name__}), not a sequence"
        else:
            if n > len(names):
                what = f"{n} parameters, more than {len(names)}"
            else:
                want = getattr(item[0], "nparams", "another number of")
                what = f"{n} parameter{'s' if n != 1 else ''}, it takes {want}"
        return fail(st, prog, where(gen) + f"the statement {item[0]!r} got {what}")

    def batch_step(st: Client, prog: PyProgram, py: PyClient) -> int:
        """The next step of a batch: a state, or -1 once its results are
        all in ``py.results``.

        In a pipeline: each statement is queued in turn, then
        \\endpipeline, whose results ``sql.store_gset`` appends to
        ``py.results``. In simple mode the batch went as one query
        (``simple_batch``): its results are in."""
        batch = py.batch
        assert batch is not None
        if batch:
            item = batch.pop(0)
            i = -1
            if type(item) is tuple and len(item) == 2:
                i = prog.batch_index.get(item[0], -1)
            if i < 0:
                py.batch = None
                return bad_item(st, prog, py.gen, item)
            if set_params(st, item[1]) != prog.counts[i]:
                py.batch = None
                return bad_params(st, prog, py.gen, item)
            py.batch_sent = True
            st.command = i
            return START_COMMAND
        if not simple and py.batch_sent and st.command != prog.pend_index + 1:
            # every statement is queued: \\endpipeline, then the results
            st.command = prog.pend_index
            return START_COMMAND
        py.batch = None
        return -1

    def simple_batch(
        st: Client, prog: PyProgram, py: PyClient, items: list[Any]
    ) -> int:
        """Simple mode: the batch as one Query of its statements, their
        parameters written in as literals; the server runs it as one
        implicit transaction and sends a result per statement (up to the
        first error)."""
        texts = []
        for item in items:
            try:
                stmt = item[0]
                i = prog.index[stmt] if type(item) is tuple and len(item) == 2 else -1
            except (KeyError, IndexError, TypeError):
                i = -1
            if i < 0:
                return bad_item(st, prog, py.gen, item)
            parts = stmt.simple_parts
            args = item[1]
            try:
                if len(args) != prog.counts[i]:
                    return bad_params(st, prog, py.gen, item)
                text = "".join(
                    [
                        p if k % 2 == 0 else _literal(args[p - 1])
                        for k, p in enumerate(parts)
                    ]
                )
            except (TypeError, IndexError):
                return bad_params(st, prog, py.gen, item)
            texts.append(text)
        op = st.ops[prog.sbatch_index]
        # a line break before each ";": a statement may end in a -- comment
        op.sql = "\n;\n".join(texts).encode("utf-8", "surrogateescape")
        py.batch = []
        py.batch_sent = True
        st.command = prog.sbatch_index
        return START_COMMAND

    def resume(st: Client, prog: PyProgram, py: PyClient, value: Any) -> int:
        """Send ``value`` into the generator; file what it yields next
        (``py_step`` has the same inline)."""
        gen = py.gen
        try:
            item = next_item(gen, DONE) if value is None else gen.send(value)  # type: ignore[arg-type,union-attr]
        except StopIteration:
            py.gen = None
            return END_TX
        except BaseException as e:
            return raised(st, prog, e)
        return file_item(st, prog, py, item)

    def file_item(st: Client, prog: PyProgram, py: PyClient, item: Any) -> int:
        """What the generator yielded: the state that runs it."""
        gen = py.gen
        if type(item) is tuple:
            try:
                i = prog.index[item[0]]
            except (KeyError, IndexError, TypeError):
                return bad_item(st, prog, gen, item)
            if set_params(st, item[1]) != prog.counts[i]:
                return bad_params(st, prog, gen, item)
            st.command = i
            return START_COMMAND
        return other_item(st, prog, py, item)

    def other_item(st: Client, prog: PyProgram, py: PyClient, item: Any) -> int:
        """What the generator yielded is not a statement call: the end, a
        sleep, a batch, or a mistake."""
        if item is DONE:
            py.gen = None
            return END_TX
        if type(item) is Raised:
            # the generator raised while the C loop stepped it
            return raised(st, prog, item.exc)
        if type(item) is prog.sleep_type:
            st.command = prog.sleep_index
            st.sleep_until = monotonic_ns() // 1000 + item.usec  # type: ignore[attr-defined]
            return SLEEP
        if type(item) is list:
            # a batch: a pipeline (extended, prepared) or one query (simple)
            if not item:
                return resume(st, prog, py, [])
            py.batch_items = items = list(item)
            py.results = []
            py.batch_sent = False
            if simple:
                return simple_batch(st, prog, py, items)
            py.batch = list(items)
            st.command = prog.pstart_index
            return START_COMMAND
        return bad_item(st, prog, py.gen, item)

    def batch_done(st: Client, prog: PyProgram, py: PyClient) -> int:
        """A step inside a batch: the next statement, or, once the results
        are all in, the list of them into the generator. Also the step
        after a caught error (``py.batch`` is ``CAUGHT``): what the
        generator yielded then."""
        if py.batch is CAUGHT:
            py.batch = None
            py.discarding = False
            item = py.thrown
            py.thrown = None
            if end_us and type(item) is not Raised and monotonic_ns() // 1000 >= end_us:
                # -T is over: a generator that catches its errors must not
                # run on (a loop of them never ends the transaction); it
                # stops here, as pgbench stops retrying at -T, uncounted
                return stop(st, py)
            return file_item(st, prog, py, item)
        state = batch_step(st, prog, py)
        if state >= 0:
            return state
        results = py.results or []
        py.results = py.batch_items = None
        wrap = prog.wrap
        values = [None if r is None else wrap(r) for r in results]  # type: ignore[misc]
        return resume(st, prog, py, values)

    def py_step(st: Client, op: Op) -> int:
        """Send the last result into the generator (None first, and for a
        statement not fetched); file what it yields.

        This runs once per statement, so the common case (a statement
        call after a statement) is inline and allocates nothing of its
        own: a None result goes in through ``next(gen, DONE)``, which
        also ends a transaction without the StopIteration that
        ``gen.send`` raises; the parameters go straight into the
        variables the send reads."""
        prog: PyProgram = op.py
        py: PyClient = st.py
        if op.index == 0:
            started = new_generator(st, prog)
            if started is None:
                return ABORTED
            py = started
            value = None
        elif py.batch is not None:
            return batch_done(st, prog, py)
        else:
            value = py.res
            if value is not None:
                py.res = None
                value = prog.wrap(value)  # type: ignore[misc]
        gen = py.gen
        try:
            item = next_item(gen, DONE) if value is None else gen.send(value)  # type: ignore[arg-type,union-attr]
        except StopIteration:
            py.gen = None
            return END_TX
        except BaseException as e:
            return raised(st, prog, e)
        if type(item) is not tuple:
            if item is DONE:
                py.gen = None
                return END_TX
            return other_item(st, prog, py, item)
        try:
            i = prog.index[item[0]]
        except (KeyError, IndexError, TypeError):
            return bad_item(st, prog, gen, item)
        args = item[1]
        if args or type(args) is not tuple:  # () is BEGIN's, END's...
            # set_params, inline
            variables = st.variables
            k = 0
            try:
                if simple:
                    for v in args:
                        variables[names[k]] = v if type(v) is int else _literal(v)
                        k += 1
                else:
                    for v in args:
                        tv = type(v)
                        if tv is int:
                            variables[names[k]] = v
                        elif tv is str:
                            variables[names[k]] = _no_nul(v)
                        elif v is None:
                            variables.pop(names[k], None)
                        else:
                            variables[names[k]] = _text(v)
                        k += 1
            except (TypeError, IndexError):
                return bad_params(st, prog, gen, item)
            except BaseException as e:
                # a value whose str() raised (the workload's own class):
                # the client aborts with it, as with the generator's own
                return raised(st, prog, e)
            if k != prog.counts[i]:
                return bad_params(st, prog, gen, item)
        elif prog.counts[i]:
            return bad_params(st, prog, gen, item)
        st.command = i
        return START_COMMAND

    def yield_site(gen: Any) -> str:
        """``file:line`` of the ``yield`` a generator waits at (through
        ``yield from``)."""
        while True:
            inner = getattr(gen, "gi_yieldfrom", None)
            if inner is None or getattr(inner, "gi_frame", None) is None:
                break
            gen = inner
        frame = getattr(gen, "gi_frame", None)
        if frame is None:
            return "?"
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"

    def py_error(st: Client, sqlstate: str, message: str) -> int | None:
        """A statement of a Python transaction failed (its results are
        read, or, in a pipeline, its error result is): throw the error into
        the generator. A read result code (1: caught, the statement is
        done; -1: caught in a pipeline, read on to its sync; 2: retry or
        fail; 3: abort), or None for the scripts' handling (a script's
        command, a lost connection, an unexpected result)."""
        py = st.py
        if py is None or st.ops[0].kind != C.K_PY:
            return None
        if py.discarding:
            # a statement the server skipped after the caught error
            st.qrynum += 1
            return -1
        gen = py.gen
        conn = st.conn
        if st.drain_fatal or gen is None or conn is None or conn.bad:
            return None
        prog: PyProgram = st.ops[0].py
        items = py.batch_items
        stmt = None
        if items is not None:
            k = len(py.results or ())
            if k < len(items) and type(items[k]) is tuple:
                stmt = items[k][0]
        else:
            stmt = prog.stmt_at[st.command]
        where = yield_site(gen)
        text = strip_nl(message)
        spec = prog.spec
        err = spec.sql_error(sqlstate, text, stmt, where)
        py.batch = py.results = py.batch_items = None
        try:
            item = gen.throw(err)
        except StopIteration:
            item = DONE
        except spec.error_type:
            py.gen = None
            return uncaught(st, prog, sqlstate, text, stmt, where)
        except BaseException as e:
            py.gen = None
            # 3: the client aborts (read_results has no "finished" answer;
            # a handler still running at the run's end says so all the same)
            raised(st, prog, e)
            return 3
        if verbose_errors:
            info(
                f"client {st.id} caught an error at {where} in script "
                f"{st.script}; {text}"
            )
        py.thrown = item
        py.batch = CAUGHT
        if st.in_pipeline:
            py.discarding = True
            st.qrynum += 1
            return -1
        return 1

    def uncaught(
        st: Client, prog: PyProgram, sqlstate: str, text: str, stmt: Any, where: str
    ) -> int:
        """The generator let the error out: a script's handling (pgbench's
        classification), with messages naming the ``yield``."""
        if sqlstate == "40001":
            estatus = E_SERIALIZATION
        elif sqlstate == "40P01":
            estatus = E_DEADLOCK
        else:
            estatus = E_OTHER
        st.estatus = estatus
        if estatus != E_OTHER or continue_on_error:
            if verbose_errors:
                info(
                    f"client {st.id} got an error at {where} in script "
                    f"{st.script}; {text}"
                )
            return 2
        name = getattr(stmt, "name", None) or getattr(stmt, "first_line", "?")
        error(
            f"client {st.id} aborted in script {st.script} ({prog.spec.source}) "
            f"at {where} (statement {name}): {text}"
        )
        return 3

    sup.py_error = py_error
    return py_step
