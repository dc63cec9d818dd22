"""Load a workload: a user's ``.py`` file or a bundled one, as plain values.

``load_file(path)`` executes the file as a fresh module and collects what
it declares (:mod:`pgsurge.workloads.api`): statements, transactions,
the ``@setup`` and ``@load`` hooks, an optional ``SCALE_QUERY`` (the
SQL giving ``ctx.scale`` when ``-s`` is not given), and for the bundled
workloads ``FIGURES`` (the figures printed after a run: ``"tpcc"``,
``"ycsb"``; :mod:`pgsurge.workloads.figures`) with ``COUNTER_QUERY`` (an
SQL count read before and after the run, such as committed New-Orders). Each transaction
becomes a :class:`LoadedTransaction`, the value the engine runs
(``engine.pyworkload.PyTransactionSpec``): its generator function, the
workload's statements (those its code names first: -r reports them) and
the factories of its context and results.

Problems are :class:`WorkloadError` (exit status 1) naming the file and
line: a syntax error, an exception while importing (with the user's
traceback), no transaction, a transaction that is not a generator.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
import types
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from pgsurge import pgconn
from pgsurge.errors import PgsurgeError
from pgsurge.prng import PgPrng
from pgsurge.workloads.api import (
    Context,
    Result,
    Sleep,
    SqlError,
    Statement,
    Transaction,
    _Hook,
)

__all__ = ["LoadedTransaction", "Workload", "WorkloadError", "load_file"]

#: what ``FIGURES`` may name (``pgsurge.workloads.figures``)
FIGURE_KINDS = ("tpcc", "ycsb")


class WorkloadError(PgsurgeError):
    """A workload file that cannot be used (exit status 1)."""


@dataclass(frozen=True, slots=True)
class ReportRow:
    """A row of -r: a statement or the sleeps."""

    first_line: str


_SLEEP_ROW = ReportRow("ctx.sleep()")


@dataclass(frozen=True, slots=True, eq=False)
class LoadedTransaction:
    """One transaction of a loaded workload (see the module docstring)."""

    name: str
    #: how messages and reports name it
    source: str
    fn: Callable[[Any], Generator[Any, Any, Any]]
    weight: int
    statements: tuple[Statement, ...]
    nreported: int
    uses_sleep: bool
    user_files: frozenset[str]
    #: the file it was loaded from (reloaded there by a spawned worker)
    path: str
    workload: str
    #: SQL whose one value is ``ctx.scale`` when -s is not given
    scale_query: str | None = None
    #: the workload's ``@setup(conn)``, run on each new connection
    setup: Callable[[Any], None] | None = None
    #: the figures printed after a run (``workloads.figures``), or None
    figures: str | None = None
    #: SQL whose one value the runner reads before and after the run
    counter_query: str | None = None
    #: some statement names one of pgbench's tables (``pgbench_*``): the
    #: run vacuums them first, as pgbench does
    uses_pgbench_tables: bool = False

    def __getattr__(self, name: str) -> Any:
        # setup_connection exists only when there is a setup (the engine
        # looks for it), so it is provided here
        if name == "setup_connection" and self.setup is not None:
            return self._setup_connection
        raise AttributeError(name)

    def _setup_connection(self, conn: Any) -> str | None:
        """Run ``@setup`` on a new connection (``pgconn.PgConn``): None,
        or the message of its failure, with the user's traceback."""
        assert self.setup is not None
        try:
            self.setup(SetupConnection(conn))
        except BaseException as e:  # SystemExit, asyncio.CancelledError too
            # (KeyboardInterrupt too: a worker's Ctrl-C sets a flag, raises
            # nothing, so this one is the workload's own)
            files = set(self.user_files) | {self.setup.__code__.co_filename}
            return import_error(e, files, self.source, "@setup failed").message
        return None

    @property
    def sleep_type(self) -> type:
        return Sleep

    def new_context(
        self, rng: PgPrng, variables: dict[str, Any], client_id: int
    ) -> Context:
        return Context(rng, variables, client_id)

    def wrap_result(self, res: Any) -> Result:
        return Result(res)

    @property
    def error_type(self) -> type[BaseException]:
        return SqlError

    def sql_error(
        self, sqlstate: str, text: str, statement: Any, where: str
    ) -> BaseException:
        return SqlError(sqlstate, text, statement, where)

    @property
    def commands(self) -> tuple[ReportRow, ...]:
        """The rows -r reports, in order (``engine.pyworkload.reported_ops``)."""
        rows = [ReportRow(s.first_line) for s in self.statements[: self.nreported]]
        if self.uses_sleep:
            rows.append(_SLEEP_ROW)
        return tuple(rows)

    def __reduce__(self) -> tuple[Any, ...]:
        # a spawned worker loads the file again (functions do not pickle)
        return (_reload, (self.path, self.workload, self.name))


class SetupConnection:
    """The connection ``@setup(conn)`` receives: blocking statements."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str) -> None:
        """Run one statement; an error raises (and fails the connection)."""
        status, _res = self._conn.exec_status(sql)
        if status not in (pgconn.COMMAND_OK, pgconn.TUPLES_OK):
            raise RuntimeError(
                f"{sql}: {pgconn.strip_newline(self._conn.error_message())}"
            )


def _reload(path: str, workload: str, name: str) -> LoadedTransaction:
    for tx in load_file(path, name=workload).transactions:
        if tx.name == name:
            return tx
    raise WorkloadError(f'{path}: transaction "{name}" is gone')


@dataclass(frozen=True, slots=True, eq=False)
class Workload:
    """A loaded workload: its transactions and hooks."""

    name: str
    path: str
    transactions: tuple[LoadedTransaction, ...]
    setup: Callable[[Any], None] | None = None
    loader: Callable[[Any], None] | None = None
    scale_query: str | None = None
    figures: str | None = None
    counter_query: str | None = None


def _syntax_error(e: SyntaxError, path: str) -> WorkloadError:
    lineno = e.lineno or 0
    text = (e.text or "").rstrip("\n")
    message = f"{path}:{lineno}: syntax error in workload file: {e.msg}"
    if text:
        stripped = text.lstrip()
        col = max(0, (e.offset or 1) - 1 - (len(text) - len(stripped)))
        message += f"\n    {stripped}\n    {' ' * col}^"
    return WorkloadError(message)


def import_error(
    e: BaseException,
    files: set[str],
    path: str,
    what: str = "the workload file failed to load",
) -> WorkloadError:
    """An exception in the workload's code, with its frames only."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename in files]
    text = "".join(traceback.format_exception_only(type(e), e)).rstrip("\n")
    tb = ""
    if frames:
        tb = "Traceback (most recent call last):\n" + "".join(
            traceback.format_list(frames)
        )
    return WorkloadError(f"{path}: {what}:\n{tb}{text}")


def _names_used(fn: Any, module_globals: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Global and attribute names a function's code uses, following the
    module's own functions it calls; and the files of that code."""
    names: set[str] = set()
    files: set[str] = set()
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        files.add(code.co_filename)
        codes = [code]
        while codes:
            c = codes.pop()
            for name in c.co_names:
                names.add(name)
                target = getattr(f, "__globals__", module_globals).get(name)
                if inspect.isfunction(target) and id(target.__code__) not in seen:
                    todo.append(target)
            codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names, files


def load_file(path: str, *, name: str | None = None) -> Workload:
    """Execute the workload file at ``path`` and collect its declarations;
    ``name`` names the workload in reports (default: the path)."""
    display = name or path
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise WorkloadError(f'could not open file "{path}": {e.strerror}') from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise _syntax_error(e, path) from None
    stem = os.path.splitext(os.path.basename(path))[0]
    module = types.ModuleType(f"pgsurge_workload_{stem}")
    module.__file__ = path
    sys.modules[module.__name__] = module
    try:
        exec(code, module.__dict__)
    except SyntaxError as e:  # compile() inside the module
        raise _syntax_error(e, e.filename or path) from None
    except (Exception, SystemExit) as e:
        # sys.exit() in the file: an error of the file's, not pgsurge's exit
        # (it ended the program with the file's status and no message)
        raise import_error(e, {path}, path) from None
    return _collect(module.__dict__, path, display)


def _collect(env: dict[str, Any], path: str, display: str) -> Workload:
    statements: list[Statement] = []
    txs: list[Transaction] = []
    hooks: dict[str, Callable[[Any], None]] = {}
    #: statements in a list, tuple or dict (a statement call made once is
    #: a (statement, args) tuple): the names of their containers
    container: dict[Statement, set[str]] = {}
    for gname, value in env.items():
        if isinstance(value, Statement):
            if value.name is None:
                value.name = gname
            if value not in statements:
                statements.append(value)
        elif isinstance(value, list | tuple | dict):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(v, Statement):
                    if v.name is None:
                        v.name = f"{gname}[{k!r}]"
                    if v not in statements:
                        statements.append(v)
                    container.setdefault(v, set()).add(gname)
        elif isinstance(value, Transaction):
            if value not in txs:
                txs.append(value)
        elif isinstance(value, _Hook):
            hooks[value.kind] = value.fn
    if not txs:
        raise WorkloadError(
            f"{path}: the workload file defines no transaction",
            hint="Declare one with @transaction on a generator function "
            "(from pgsurge.workloads import transaction).",
        )
    statements.sort(key=lambda s: s.key)
    txs.sort(key=lambda t: t.order)
    scale_query = env.get("SCALE_QUERY")
    if scale_query is not None and not isinstance(scale_query, str):
        raise WorkloadError(f"{path}: SCALE_QUERY must be a string of SQL")
    counter_query = env.get("COUNTER_QUERY")
    if counter_query is not None and not isinstance(counter_query, str):
        raise WorkloadError(f"{path}: COUNTER_QUERY must be a string of SQL")
    figures = env.get("FIGURES")
    if figures is not None and figures not in FIGURE_KINDS:
        raise WorkloadError(
            f"{path}: FIGURES must be one of {', '.join(map(repr, FIGURE_KINDS))}"
        )
    pgbench_tables = any("pgbench_" in s.sql.lower() for s in statements)
    loaded = []
    for tx in txs:
        fn = tx.fn
        if not inspect.isgeneratorfunction(fn):
            code = getattr(fn, "__code__", None)
            where = f"{code.co_filename}:{code.co_firstlineno}" if code else path
            raise WorkloadError(
                f'{where}: transaction "{tx.name}" is not a generator function',
                hint="A transaction yields its statements: "
                "row = (yield stmt(args)).one()",
            )
        names, files = _names_used(fn, env)
        used = [
            s
            for s in statements
            if (s.name in names and env.get(s.name) is s)
            or not container.get(s, set()).isdisjoint(names)
        ]
        others = [s for s in statements if s not in used]
        files.add(path)
        loaded.append(
            LoadedTransaction(
                name=tx.name,
                source=f"{display}: {tx.name}",
                fn=fn,
                weight=tx.weight,
                statements=tuple(used + others),
                nreported=len(used),
                uses_sleep="sleep" in names,
                user_files=frozenset(files),
                path=path,
                workload=display,
                scale_query=scale_query,
                setup=hooks.get("setup"),
                figures=figures,
                counter_query=counter_query,
                uses_pgbench_tables=pgbench_tables,
            )
        )
    return Workload(
        name=display,
        path=path,
        transactions=tuple(loaded),
        setup=hooks.get("setup"),
        loader=hooks.get("load"),
        scale_query=scale_query,
        figures=figures,
        counter_query=counter_query,
    )
