"""The libpq surface pgsurge uses, and nothing more (the only ``psycopg.pq`` user).

The run engine talks to PostgreSQL through non-blocking libpq connections,
as pgbench does: send a command, wait for the socket to be readable, consume
what arrived, fetch results only when libpq says a whole one is buffered.
This module wraps exactly those calls (psycopg's ``pq.abc`` style) so that
the rest of pgsurge never imports ``psycopg.pq``:

* :func:`connect` opens a connection (blocking, like pgbench at start-up and
  under ``-C``) and returns a :class:`PgConn`; :func:`connect_start` opens
  one without blocking (``PQconnectStart``/``PQconnectPoll``, for
  ``--reconnect``: the event loop waits on its socket);
* a :class:`PgConn` exposes libpq's own bound methods as attributes
  (``send_query_prepared``, ``consume_input``, ``is_busy``, ``get_result``,
  ``flush``, pipeline calls…); the engine's hot path calls them on the
  psycopg ``PGconn`` behind it (``Client.raw``), paying no wrapper call;
* result and status codes are plain ``int`` module constants (comparing
  ints is cheaper than comparing enum members);

Raised errors: psycopg raises ``psycopg.OperationalError`` when a send,
consume or flush fails (libpq returned an error); callers catch
:data:`LibpqError` and read :meth:`PgConn.error_message` for libpq's text.
Passwords never appear in anything this module prints or raises.

Importing psycopg's package costs a run's start-up more than all of
pgsurge's own modules (connections, cursors, copy, the type adapters, some
200M instructions), and a run only needs ``psycopg.pq`` (with
``psycopg.errors``, whose SQLSTATE classes are made on first need:
``pgsurge.deferred_errors``). :func:`_import_psycopg_pq`
imports just those when nothing has imported psycopg yet, and leaves the
package to complete itself, exactly as ``import psycopg`` would, on the
first use of anything else it has (see there).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, LiteralString, Self, TextIO

from pgsurge.deferred import deferred_run_imports, in_main_thread, standing_in
from pgsurge.deferred_errors import sqlstate_classes_deferred

#: the parts of psycopg pgsurge's runs use
PSYCOPG_PARTS = ("psycopg.pq", "psycopg.errors")


def _import_psycopg_pq() -> None:
    """Import :data:`PSYCOPG_PARTS` without running psycopg's ``__init__``
    if psycopg is not imported yet; else (or on any surprise) import it
    whole, as usual.

    ``import psycopg.pq`` runs the package's ``__init__`` first, which
    imports the whole adapter (connections, cursors, pipelines, copy) and
    registers its type adapters; ``psycopg.pq`` itself and the two modules
    beside it only import each other, psycopg's implementation packages
    (``psycopg_binary``) and the standard library. So the package's module
    is created from its spec but not executed, the parts are imported
    into it, and a module ``__getattr__`` (PEP 562) executes the
    package's ``__init__`` into that same module object on the first
    access to a name it does not have yet (``psycopg.connect``,
    ``psycopg.Error``, ``from psycopg import sql``): from then on it is
    the module a plain ``import psycopg`` gives, holding the same
    submodules, classes and libpq. Should a part need the package (an
    ``AttributeError``/``ImportError`` from a future psycopg), the
    package is executed at once, as a normal import would have done.
    ``PGSURGE_PSYCOPG=full`` imports it whole from the start.
    """
    if "psycopg" in sys.modules or os.environ.get("PGSURGE_PSYCOPG") == "full":
        importlib.import_module("psycopg")
        return
    _preset_binary_version()
    # asyncio and ssl: imported by psycopg's parts for (next to) nothing;
    # psycopg.errors' SQLSTATE classes: made when one is needed
    with deferred_run_imports(), sqlstate_classes_deferred():
        package, complete = _import_parts()
    if package is None:
        return  # imported whole
    if complete:
        # a part that needs the package: complete it now, with the real
        # asyncio and ssl (a part that failed was removed from sys.modules
        # and is imported again by the package's own imports; an error
        # there is raised as usual)
        _complete_psycopg(package)
        return

    def complete_on_access(name: str) -> object:
        if _in_submodule_import(name):
            # ``from . import x`` of a psycopg module imported before the
            # package is complete (``import psycopg.conninfo`` first): the
            # submodule alone, as the package's own import order gives it;
            # the package's __init__ now would meet the half-imported
            # module in its circular imports
            return importlib.import_module(f"psycopg.{name}")
        _complete_psycopg(package)
        return getattr(package, name)

    package.__getattr__ = complete_on_access  # type: ignore[method-assign]


def _in_submodule_import(name: str) -> bool:
    """Whether a psycopg module is being imported (its spec is marked
    initializing while it executes) and ``name`` is a submodule of the
    package not imported yet."""
    if f"psycopg.{name}" in sys.modules or name.startswith("__"):
        return False
    initializing = any(
        getattr(getattr(module, "__spec__", None), "_initializing", False)
        for key, module in list(sys.modules.items())
        if key.startswith("psycopg.")
    )
    if not initializing:
        return False
    try:
        return importlib.util.find_spec(f"psycopg.{name}") is not None
    except (ImportError, ValueError):
        return False


def _import_parts() -> tuple[ModuleType | None, bool]:
    """psycopg's package module, not executed, with :data:`PSYCOPG_PARTS`
    imported into it, and True when they need the package executed (None
    when the package was imported whole)."""
    spec = importlib.util.find_spec("psycopg")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        importlib.import_module("psycopg")  # raises as usual when it is missing
        return None, False
    package = importlib.util.module_from_spec(spec)
    sys.modules["psycopg"] = package
    # of psycopg._compat the parts read only Self (typing's on Python 3.11+);
    # executed, it imports typing_extensions (and with it inspect) and
    # builds a dataclass (pgsurge.deferred.standing_in)
    try:
        with standing_in("psycopg._compat", Self=Self, LiteralString=LiteralString):
            for name in PSYCOPG_PARTS:
                importlib.import_module(name)
    except Exception:
        return package, True
    return package, False


def _preset_binary_version() -> None:
    """Put ``psycopg_binary.version`` in place, read from the distribution's
    metadata file, before psycopg imports it.

    That module asks ``importlib.metadata`` for the version of the
    ``psycopg-binary`` distribution; importing ``importlib.metadata``
    (email, zipfile, csv, ...) costs some 77 million instructions, a tenth
    of a run's start-up, for a string nothing of a run reads but psycopg's
    messages. The string is the ``Version:`` line of the ``METADATA`` file
    in the distribution's ``.dist-info`` directory beside the package,
    which is what ``importlib.metadata`` reads too. With no such single
    directory (another layout, an editable build) nothing is done and the
    module is imported as usual.
    """
    if "psycopg_binary" in sys.modules or "psycopg_binary.version" in sys.modules:
        return
    try:
        spec = importlib.util.find_spec("psycopg_binary")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    site = os.path.dirname(os.path.abspath(spec.submodule_search_locations[0]))
    try:
        infos = [
            n
            for n in os.listdir(site)
            if n.startswith("psycopg_binary-") and n.endswith(".dist-info")
        ]
        if len(infos) != 1:
            return
        with open(os.path.join(site, infos[0], "METADATA"), encoding="utf-8") as f:
            version = next(
                (line[8:].strip() for line in f if line.startswith("Version:")), None
            )
    except OSError:
        return
    if not version:
        return
    module = ModuleType("psycopg_binary.version")
    module.__version__ = version  # type: ignore[attr-defined]
    sys.modules["psycopg_binary.version"] = module


def _complete_psycopg(package: ModuleType) -> None:
    """Execute psycopg's ``__init__`` into its module (once)."""
    vars(package).pop("__getattr__", None)
    spec = package.__spec__
    assert spec is not None and spec.loader is not None
    try:
        spec.loader.exec_module(package)
    except BaseException:
        # what a failed import leaves: no module under that name
        if sys.modules.get("psycopg") is package:
            del sys.modules["psycopg"]
        raise


_import_psycopg_pq()

# (after the function above has set up the package's module)
from psycopg import pq  # noqa: E402
from psycopg.errors import Error, OperationalError, ProgrammingError  # noqa: E402

from pgsurge.errors import ConnectError  # noqa: E402

#: what a failed libpq call raises (send, consume, flush, pipeline calls):
#: ``psycopg.OperationalError`` (named from its module: the package's own
#: name would complete the package)
LibpqError = OperationalError
#: the base of everything psycopg raises (``psycopg.Error``), e.g. for a
#: connection string it cannot parse
PsycopgError = Error

# Result statuses (PQresultStatus)
EMPTY_QUERY = int(pq.ExecStatus.EMPTY_QUERY)
COMMAND_OK = int(pq.ExecStatus.COMMAND_OK)
TUPLES_OK = int(pq.ExecStatus.TUPLES_OK)
COPY_OUT = int(pq.ExecStatus.COPY_OUT)
COPY_IN = int(pq.ExecStatus.COPY_IN)
COPY_BOTH = int(pq.ExecStatus.COPY_BOTH)
NONFATAL_ERROR = int(pq.ExecStatus.NONFATAL_ERROR)
FATAL_ERROR = int(pq.ExecStatus.FATAL_ERROR)
PIPELINE_SYNC = int(pq.ExecStatus.PIPELINE_SYNC)
PIPELINE_ABORTED = int(pq.ExecStatus.PIPELINE_ABORTED)

# Transaction statuses (PQtransactionStatus)
TRANS_IDLE = int(pq.TransactionStatus.IDLE)
TRANS_ACTIVE = int(pq.TransactionStatus.ACTIVE)
TRANS_INTRANS = int(pq.TransactionStatus.INTRANS)
TRANS_INERROR = int(pq.TransactionStatus.INERROR)
TRANS_UNKNOWN = int(pq.TransactionStatus.UNKNOWN)

# Pipeline statuses (PQpipelineStatus)
PIPELINE_OFF = int(pq.PipelineStatus.OFF)
PIPELINE_ON = int(pq.PipelineStatus.ON)
PIPELINE_ABORTED_STATUS = int(pq.PipelineStatus.ABORTED)

CONNECTION_OK = int(pq.ConnStatus.OK)
CONNECTION_BAD = int(pq.ConnStatus.BAD)

_DIAG_SQLSTATE = int(pq.DiagnosticField.SQLSTATE)

# What PQconnectPoll asks for next (PostgresPollingStatusType)
POLL_FAILED = int(pq.PollingStatus.FAILED)
POLL_READING = int(pq.PollingStatus.READING)
POLL_WRITING = int(pq.PollingStatus.WRITING)
POLL_OK = int(pq.PollingStatus.OK)

#: libpq's version, e.g. 180006
LIBPQ_VERSION = pq.version()


def _text(data: bytes | None) -> str:
    """libpq's bytes as text; bytes that are not UTF-8 (a LATIN1 server's
    message) are kept as surrogate escapes, to be written back as they came,
    as pgbench echoes them."""
    return data.decode("utf-8", "surrogateescape") if data else ""


def strip_newline(message: str) -> str:
    """libpq messages end with a newline; pgbench's logging drops one."""
    return message[:-1] if message.endswith("\n") else message


#: the libpq calls a PgConn exposes as psycopg's bound methods
_BOUND = frozenset(
    {
        "consume_input",
        "enter_pipeline_mode",
        "exit_pipeline_mode",
        "flush",
        "get_result",
        "is_busy",
        "pipeline_sync",
        "send_flush_request",
        "send_prepare",
        "send_query",
        "send_query_params",
        "send_query_prepared",
    }
)


class PgConn:
    """One libpq connection, in non-blocking mode once :meth:`set_nonblocking`.

    The public attributes named after libpq calls are psycopg's bound
    methods of the underlying ``PGconn`` (bytes in, ``None`` or an ``int``
    out, :data:`LibpqError` on failure), looked up on each use
    (:meth:`__getattr__`). The engine's steps call them on that ``PGconn``
    itself (``Client.raw``), with no lookup here.
    """

    # two slots only: a PgConn per client, and a thousand clients (issue
    # 25); a slot per bound call, filled on first use, cost 96 bytes each
    __slots__ = ("_pgconn", "socket")

    send_query: Any
    send_query_params: Any
    send_query_prepared: Any
    send_prepare: Any
    consume_input: Any
    is_busy: Any
    get_result: Any
    flush: Any
    pipeline_sync: Any
    send_flush_request: Any
    enter_pipeline_mode: Any
    exit_pipeline_mode: Any

    def __init__(self, pgconn: Any) -> None:
        self._pgconn = pgconn
        try:
            self.socket: int = pgconn.socket
        except OperationalError:
            # lost already: a -C connection the C loop opened, adopted at
            # a hand-back after the server closed it (a shutdown)
            self.socket = -1

    def __getattr__(self, name: str) -> Any:
        """A libpq call's bound method (psycopg's ``PGconn``'s own). Not
        kept: bound at once they cost some 800 bytes a connection, and
        kept in slots on first use 96 bytes, which a client the C loop
        runs never uses (at 10,000 clients, 8 MB and 1 MB)."""
        if name not in _BOUND:
            raise AttributeError(name)
        return getattr(self._pgconn, name)

    # -- state ------------------------------------------------------------

    def set_nonblocking(self) -> None:
        self._pgconn.nonblocking = 1

    @property
    def status(self) -> int:
        return int(self._pgconn.status)

    @property
    def bad(self) -> bool:
        return int(self._pgconn.status) == CONNECTION_BAD

    @property
    def transaction_status(self) -> int:
        return int(self._pgconn.transaction_status)

    @property
    def pipeline_status(self) -> int:
        return int(self._pgconn.pipeline_status)

    @property
    def server_version(self) -> int:
        return int(self._pgconn.server_version)

    @property
    def backend_pid(self) -> int:
        """``PQbackendPID``: the server process id (no query)."""
        return int(self._pgconn.backend_pid)

    @property
    def dbname(self) -> str:
        return _text(self._pgconn.db)

    def several_hosts(self) -> bool:
        """Whether its conninfo names several hosts (``host=a,b``)."""
        return any(
            opt.keyword in (b"host", b"hostaddr") and b"," in (opt.val or b"")
            for opt in self._pgconn.info
        )

    def each_host(self) -> list[dict[str, str]]:
        """Its conninfo once per host of ``host=a,b`` (with that host's
        address and port), as libpq resolved it (the environment and the
        defaults applied): to reach each server of a multi-host target in
        turn. Whatever chooses among the hosts (``load_balance_hosts``,
        ``target_session_attrs``) is left out."""
        resolved = {
            opt.keyword.decode(): _text(opt.val)
            for opt in self._pgconn.info
            if opt.val  # (an empty value is libpq's unset)
        }
        lists = {
            key: resolved.pop(key).split(",")
            for key in ("host", "hostaddr", "port")
            if key in resolved
        }
        for key in ("load_balance_hosts", "target_session_attrs"):
            resolved.pop(key, None)
        count = max(len(lists.get("host", ())), len(lists.get("hostaddr", ())))
        out: list[dict[str, str]] = []
        for i in range(count):
            items = dict(resolved)
            for key, values in lists.items():
                # libpq: one port for every host, else one each
                items[key] = values[0] if len(values) == 1 else values[i]
            out.append(items)
        return out

    @property
    def target(self) -> str:
        """``host:port`` of the server this connection reached (``PQhost``,
        ``PQport``: one of a multi-host connection string's)."""
        return f"{_text(self._pgconn.host)}:{_text(self._pgconn.port)}"

    def parameter_status(self, name: str) -> str | None:
        value = self._pgconn.parameter_status(name.encode())
        return None if value is None else _text(value)

    def error_message(self) -> str:
        """``PQerrorMessage``: libpq's text for the last failure, as is."""
        return _text(self._pgconn.error_message)

    # -- blocking helpers (start-up, -C, the pre-run statements) ------------

    def prepare(self, name: bytes, sql: bytes) -> str | None:
        """``PQprepare`` (blocking, as pgbench does on first use).

        Returns ``None`` on success, else the error text to report.
        """
        res = self._pgconn.prepare(name, sql)
        if res.status != COMMAND_OK:
            return self.error_message()
        return None

    def exec_status(self, sql: str) -> tuple[int, Any]:
        """``PQexec`` (blocking); returns the result status and result.

        A connection that is gone (the server restarted) gives a
        ``PGRES_FATAL_ERROR`` result with the connection's message ("no
        connection to the server"), as pgbench's ``PQresultStatus`` of
        PQexec's NULL does; psycopg raises on that NULL instead, which
        ended the set-up's ``tryExecuteStatement`` steps with a traceback."""
        try:
            res = self._pgconn.exec_(sql.encode())
        except OperationalError:
            res = self._pgconn.make_empty_result(pq.ExecStatus.FATAL_ERROR)
        return int(res.status), res

    def cancel(self) -> None:
        """``PQcancel``: ask the server to cancel what this connection runs
        (blocking, a separate short connection; failures are ignored: the
        connection is closed next anyway)."""
        try:
            self._pgconn.get_cancel().cancel()
        except Exception:  # best effort on the way out
            pass

    def exec_params(self, sql: str, params: Sequence[str | None]) -> tuple[int, Any]:
        """``PQexecParams`` (blocking), text parameters; status and result."""
        res = self._pgconn.exec_params(
            sql.encode(), [None if p is None else p.encode() for p in params]
        )
        return int(res.status), res

    def exec_prepared(
        self, name: bytes, params: Sequence[str | None]
    ) -> tuple[int, Any]:
        """``PQexecPrepared`` (blocking), text parameters; status and result."""
        res = self._pgconn.exec_prepared(
            name, [None if p is None else p.encode() for p in params]
        )
        return int(res.status), res

    def finish(self) -> None:
        self._pgconn.finish()


#: how often a bounded wait (:func:`exec_bounded`) lets the main thread's
#: signal handlers run
_WAIT_STEP_S = 0.2


def exec_bounded(conn: PgConn, send: Callable[[Any], object], timeout_s: float) -> Any:
    """What ``PQexec`` does, at most ``timeout_s`` long: ``send(raw)`` (a
    ``PQsend*`` call on the libpq connection), then the results, the last
    one returned (libpq's error result for a connection lost on the way).

    ``PQexec`` waits for the answer in C with no time limit: a server that
    hangs held the caller for ever, and in the main thread no signal
    handler ran meanwhile (the program's third Ctrl-C or SIGTERM, which
    ends it at once, did nothing). Here the wait is in steps of
    :data:`_WAIT_STEP_S`; an exception a handler raises meanwhile
    (``KeyboardInterrupt``) is held until the answer came, as it was
    around ``PQexec``. No answer by ``timeout_s`` raises :data:`LibpqError`
    (the held exception instead, if any) and leaves the connection with
    the statement in flight: the caller closes it."""
    import select
    import time

    pg = conn._pgconn
    deadline = time.monotonic() + timeout_s
    send(pg)
    held: BaseException | None = None
    last = None
    lost = False
    while True:
        while not lost and pg.is_busy():
            left = deadline - time.monotonic()
            if left <= 0:
                if held is not None:
                    raise held
                raise LibpqError(f"the server did not answer within {timeout_s:g} s")
            poller = select.poll()
            poller.register(pg.socket, select.POLLIN)
            try:
                poller.poll(min(left, _WAIT_STEP_S) * 1000.0)
            except BaseException as exc:  # a signal handler's: after the answer
                held = held or exc
            try:
                pg.consume_input()
            except LibpqError:
                lost = True  # the next result is libpq's error
        res = pg.get_result()
        if res is None:
            break
        last = res
    if held is not None:
        raise held
    if last is None:
        raise LibpqError(f"executing query failed: {conn.error_message()}")
    return last


#: cancel requests :func:`cancel_all` keeps open at once (file descriptors)
_CANCEL_WINDOW = 64


def cancel_all(conns: Sequence[PgConn], timeout_s: float) -> int:
    """Ask the server to cancel what each connection runs, given up after
    ``timeout_s``; how many requests the server took.

    ``PQcancel`` blocks until the server closes the cancel connection, with
    no time limit: a server that hangs (a stopped postmaster, a host gone
    without a reset) held an interrupted run's worker in it until the
    parent killed the worker, and what the worker had measured was lost.
    Here the requests go out without blocking (``PQcancelStart``/
    ``PQcancelPoll``), :data:`_CANCEL_WINDOW` at a time, and whatever has
    not been answered at the deadline is dropped (the caller closes the
    connections next anyway)."""
    import select
    import time

    deadline = time.monotonic() + timeout_s
    todo = list(conns)
    # cancel connection -> what its last poll asked for
    pending: dict[Any, int] = {}
    answered = 0
    while todo or pending:
        while todo and len(pending) < _CANCEL_WINDOW:
            try:
                cc = todo.pop()._pgconn.cancel_conn()
                cc.start()
            except Exception:  # a connection already lost: nothing to cancel
                continue
            pending[cc] = POLL_WRITING  # as after PQconnectStart
        left = deadline - time.monotonic()
        if left <= 0 or not pending:
            break
        poller = select.poll()
        by_fd: dict[int, Any] = {}
        for cc, want in pending.items():
            try:
                fd = cc.socket
            except Exception:
                fd = -1
            if fd < 0:
                continue
            by_fd[fd] = cc
            poller.register(
                fd, select.POLLIN if want == POLL_READING else select.POLLOUT
            )
        for fd, _ in poller.poll(left * 1000.0) if by_fd else ():
            cc = by_fd[fd]
            try:
                status = int(cc.poll())
            except Exception:
                status = POLL_FAILED
            if status in (POLL_OK, POLL_FAILED):
                answered += status == POLL_OK
                cc.finish()
                del pending[cc]
            else:
                pending[cc] = status
        if not by_fd:
            break  # no socket to wait on: none will be answered
    for cc in pending:
        cc.finish()
    return answered


def conninfo(items: dict[str, str], password: str | None = None) -> str:
    """A conninfo string for ``items`` with pgbench's keyword precedence.

    pgbench calls ``PQconnectdbParams`` with ``expand_dbname``: when the
    database name is itself a conninfo string or a URI, its settings
    override the host, port and user given before it (``-h -p -U``).
    ``PQconnectdbParams`` also skips an empty value (``-h ""``), leaving
    the keyword to ``PGHOST`` and the other defaults; in a conninfo string
    an empty value would be set, so it is left out here.
    """
    params: dict[str, str] = {}
    for key in ("host", "port", "user"):
        if items.get(key):
            params[key] = items[key]
    if password is not None:
        params["password"] = password
    dbname = items.get("dbname")
    if dbname is not None:
        if "=" in dbname or dbname.startswith(("postgresql://", "postgres://")):
            try:
                parsed = conninfo_to_dict(dbname)
            except Error as exc:  # libpq's text quotes the whole URI
                raise type(exc)(_connect_failure_text(str(exc).encode())) from None
            for key, value in parsed.items():
                if value is not None:
                    params[key] = str(value)
        elif dbname:
            params["dbname"] = dbname
    for key, value in items.items():
        if key not in ("host", "port", "user", "dbname"):
            params.setdefault(key, value)
    if any(_has_surrogates(v) for v in params.values()):
        # bytes that are not UTF-8 (an argument kept as surrogate escapes):
        # psycopg's builder cannot encode them; libpq takes them as they
        # are, as pgbench passes them
        return " ".join(f"{k}={_quote(v)}" for k, v in params.items())
    return make_conninfo(params)


# psycopg.conninfo's two functions a run uses, written here: importing that
# module imports its connection attempts (sync and async), the ipaddress
# module, psycopg.abc and a dataclass, about 3 ms of every start-up for two
# functions of a few lines; these give the same strings and errors


def conninfo_to_dict(text: str) -> dict[str, str]:
    """``psycopg.conninfo.conninfo_to_dict(text)``: the keywords libpq's
    ``PQconninfoParse`` finds set in ``text``, with their values."""
    return {
        opt.keyword.decode(): opt.val.decode()
        for opt in _parse_conninfo(text)
        if opt.val is not None
    }


def make_conninfo(params: dict[str, str]) -> str:
    """``psycopg.conninfo.make_conninfo("", **params)``: ``key=value``
    pairs, each value escaped as psycopg escapes it, checked by libpq."""
    if not params:
        return ""
    text = " ".join(f"{k}={_param_escape(v)}" for k, v in params.items())
    _parse_conninfo(text)
    return text


def _parse_conninfo(text: str) -> list[Any]:
    """libpq's parse of ``text``; its error raised as psycopg's
    ``ProgrammingError`` (as psycopg.conninfo does)."""
    try:
        return list(pq.Conninfo.parse(text.encode()))
    except OperationalError as exc:
        raise ProgrammingError(str(exc)) from None


def _param_escape(value: str) -> str:
    """A value as psycopg's ``make_conninfo`` writes it: ``''`` when empty,
    backslash and quote escaped, quoted when it holds white space (the
    characters ``\\s`` matches: ``str.isspace``'s)."""
    if not value:
        return "''"
    value = value.replace("\\", "\\\\").replace("'", "\\'")
    if any(c.isspace() for c in value):
        value = "'" + value + "'"
    return value


#: what :func:`resolved_params` leaves out: the password goes apart; the
#: password file and the service file were read here, their content is
#: in the other parameters (the hosts need neither file)
_NOT_RESOLVED = frozenset({"password", "passfile", "service", "servicefile"})


def resolved_params(conn: PgConn) -> tuple[dict[str, str], str | None]:
    """The parameters libpq connected ``conn`` with, the environment
    (``PG*``), the service file and the password file applied, as explicit
    keywords (those that differ from libpq's compiled-in defaults, the
    host and port it actually used), and the password (given, from
    ``PGPASSWORD`` or from the password file), for the hosts of a
    multi-host run, whose environment may hold none of that."""
    pg = conn._pgconn
    items: dict[str, str] = {}
    for opt in pg.info:
        key = opt.keyword.decode()
        if key in _NOT_RESOLVED or not opt.val or opt.val == opt.compiled:
            continue
        items[key] = opt.val.decode("utf-8", "surrogateescape")
    for key, value in (("host", pg.host), ("port", pg.port)):
        if value:
            items[key] = value.decode("utf-8", "surrogateescape")
    if "hostaddr" in items and pg.hostaddr:
        items["hostaddr"] = pg.hostaddr.decode()
    password = pg.password
    return items, password.decode("utf-8", "surrogateescape") if password else None


def _has_surrogates(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return True
    return False


def _quote(value: str) -> str:
    """A conninfo value in libpq's quoting."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _connect_failure_text(message: bytes | None) -> str:
    """libpq's text for a connection that could not be opened, passwords
    masked: libpq quotes a URI it cannot parse whole (``missing "]" in
    IPv6 host address in URI: "postgres://bob:PW@[::1"``), and pgbench
    prints that as it is."""
    from pgsurge.redact import redact_text  # lazily: only on a failure

    return redact_text(_text(message))


def ask_password(err: TextIO) -> str:
    """pgbench's ``simple_prompt("Password: ", false)``: on the terminal
    (``/dev/tty``) without echo; without one, the prompt and a line break
    on stderr and the password read from stdin (a script piping it in, as
    pgbench reads it; an empty one at its end)."""
    try:
        tty = open("/dev/tty", "r+b", buffering=0)  # noqa: SIM115 - closed below
    except OSError:
        err.write("Password: ")
        err.flush()
        try:
            line = sys.stdin.readline()
        except OSError:  # stdin closed (``<&-``): nothing read, as fgets
            line = ""
        err.write("\n")
        err.flush()
        return line.removesuffix("\n").removesuffix("\r")
    tty.close()
    import getpass  # lazily, as the prompt is rare (it pulls in termios)

    return getpass.getpass("Password: ")


def connect(
    items: dict[str, str], password: str | None = None
) -> tuple[PgConn | None, str, bool]:
    """Open a blocking connection (pgbench's ``doConnect``).

    Returns ``(conn, "", False)`` on success, or ``(None, message, needs)``
    where ``message`` is libpq's error text (ending in a newline, as libpq
    gives it) and ``needs`` tells that the server asked for a password
    that was not supplied (pgbench then prompts once).
    """
    with sigint_kills():
        pgconn = pq.PGconn.connect(
            conninfo(items, password).encode("utf-8", "surrogateescape")
        )
    if pgconn.status != pq.ConnStatus.OK:
        message = _connect_failure_text(pgconn.error_message)
        needs = bool(pgconn.needs_password) and password is None
        pgconn.finish()
        return None, message or _silent_failure(), needs
    pgconn.notice_handler = _write_notice
    return PgConn(pgconn), "", False


def _on_worker_thread() -> bool:
    """Whether this runs on a worker thread (``engine.threaded``, whose
    threads are named ``pgsurge-worker-N``), not in a worker process."""
    threading = sys.modules.get("threading")
    return threading is not None and threading.current_thread().name.startswith(
        "pgsurge-worker-"
    )


def _silent_failure(at_limit: bool | None = None) -> str:
    """What failed when libpq says nothing: at the open-file limit its
    failed ``socket()`` leaves an empty message (pgbench then prints a bare
    ``pgbench: error: ``). The limit is the usual cause, so test for it
    (unless ``at_limit`` says what a test at the failure found)."""
    try:
        if at_limit:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        if at_limit is None:
            os.close(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        import resource  # only on this failure

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # more -j spreads the clients over more worker processes; worker
        # threads (engine.threaded) all hold theirs in this one process
        fewer = (
            "or use PGSURGE_WORKERS=processes so that each worker process "
            "holds fewer clients"
            if _on_worker_thread()
            else "or use more -j so that each worker holds fewer clients"
        )
        return (
            f"could not create socket: {os.strerror(exc.errno or 0)} (this "
            f"process has reached its limit of {soft} open files; raise it "
            f'("ulimit -n"), {fewer})\n'
        )
    return "connection failed, and libpq gave no reason\n"


class Connecting:
    """A connection being opened without blocking (``PQconnectStart``).

    The caller waits until :attr:`socket` is ready for what the last
    :meth:`poll` asked (``POLL_READING`` or ``POLL_WRITING``; right after
    :func:`connect_start`, writing, as libpq documents), then calls
    :meth:`poll` again, until ``POLL_OK`` (:meth:`opened` gives the
    :class:`PgConn`) or ``POLL_FAILED`` (:meth:`error_message` says why;
    :meth:`finish` frees it). The socket may change between polls (libpq
    tries the next address of a host), so it is read again after each.
    """

    __slots__ = ("_pgconn",)

    def __init__(self, pgconn: Any) -> None:
        self._pgconn = pgconn

    @property
    def socket(self) -> int:
        """The socket to wait on, -1 when there is none (failed)."""
        try:
            return int(self._pgconn.socket)
        except OperationalError:  # psycopg's "the connection is lost"
            return -1

    def poll(self) -> int:
        """``PQconnectPoll``: what to wait for next, ``POLL_OK`` or
        ``POLL_FAILED``."""
        return int(self._pgconn.connect_poll())

    def error_message(self) -> str:
        return _connect_failure_text(self._pgconn.error_message) or _silent_failure()

    @property
    def bad(self) -> bool:
        """It failed (else it is still connecting: given up at a timeout)."""
        return int(self._pgconn.status) == CONNECTION_BAD

    def failure_message(self) -> str:
        """Why it did not open: :meth:`error_message` when it failed, else
        (given up while still connecting) :meth:`timeout_message`."""
        return self.error_message() if self.bad else self.timeout_message()

    def several_hosts(self) -> bool:
        """Whether the conninfo names several hosts (``host=a,b``): libpq's
        blocking connect goes on to the next one when ``connect_timeout``
        expires on one, where a connection opened without blocking fails."""
        for opt in self._pgconn.info:
            if opt.keyword in (b"host", b"hostaddr") and b"," in (opt.val or b""):
                return True
        return False

    def rest_of_hosts(self) -> bytes | None:
        """The conninfo of the hosts after the one being tried, as libpq
        expanded it (``host=a,b,c`` while trying ``a``: ``b,c``, with their
        ports and addresses): where libpq's blocking connect goes on when
        ``connect_timeout`` expires on one. None when there is no host after
        it, or when which one is being tried cannot be told for sure
        (``load_balance_hosts=random`` shuffles them; a host named twice):
        the caller then opens the connection as libpq's blocking connect
        does, from the first host."""
        values: dict[str, str] = {}
        for opt in self._pgconn.info:
            if opt.val is not None:
                value = opt.val.decode("utf-8", "surrogateescape")
                values[opt.keyword.decode()] = value
        if values.get("load_balance_hosts", "disable") != "disable":
            return None
        lists = {
            k: values[k].split(",") for k in ("host", "hostaddr", "port") if k in values
        }
        count = max((len(v) for v in lists.values()), default=0)
        if count < 2:
            return None
        hosts = lists.get("host") or [""] * count
        addrs = lists.get("hostaddr") or [""] * count
        if len(hosts) != count or len(addrs) != count:
            return None
        names = [hosts[i] or addrs[i] for i in range(count)]
        current = _text(self._pgconn.host)
        if names.count(current) != 1:
            return None
        index = names.index(current)
        if index + 1 >= count:
            return None
        for key, items in lists.items():
            if len(items) == count:
                values[key] = ",".join(items[index + 1 :])
        return make_conninfo(values).encode("utf-8", "surrogateescape")

    def timeout_message(self) -> str:
        """libpq's text for a connection that outlasted ``connect_timeout``
        (its blocking connect's words, naming the server it was trying)."""
        return timeout_text(self._pgconn)

    def opened(self) -> PgConn:
        """The connection, once :meth:`poll` returned ``POLL_OK``."""
        self._pgconn.notice_handler = _write_notice
        return PgConn(self._pgconn)

    def finish(self) -> None:
        self._pgconn.finish()


def connect_start(items: dict[str, str], password: str | None = None) -> Connecting:
    """Start opening a connection without blocking (``PQconnectStart``;
    the same conninfo as :func:`connect`). A failure, even an immediate one
    (no memory, a bad conninfo), shows in the first :meth:`Connecting.poll`.
    """
    return Connecting(
        pq.PGconn.connect_start(
            conninfo(items, password).encode("utf-8", "surrogateescape")
        )
    )


def connect_start_info(info: bytes) -> Connecting:
    """:func:`connect_start` of an encoded :func:`conninfo` (a worker opens
    all its clients' connections with the one string)."""
    pgconn = pq.PGconn.connect_start(info)
    return Connecting(pgconn)


def start_raw(info: bytes) -> Any:
    """``PQconnectStart`` of an encoded :func:`conninfo`: psycopg's
    ``PGconn``, notices written as :func:`connect`'s are. Its polling is
    the caller's (the C loop under -C drives ``PQconnectPoll`` on its
    ``pgconn_ptr``); :func:`adopt` makes it a :class:`PgConn` once open,
    :class:`Connecting` reads why it failed."""
    pgconn = pq.PGconn.connect_start(info)
    pgconn.notice_handler = _write_notice
    return pgconn


def names_several_hosts(info: bytes) -> bool:
    """Whether the encoded conninfo ``info``, as libpq expands it (a
    ``dbname`` conninfo included), names several hosts: libpq's blocking
    connect goes on to the next one when ``connect_timeout`` expires on
    one, and so must a connection opened without blocking."""
    probe = pq.PGconn.connect_start(info)
    try:
        return Connecting(probe).several_hosts()
    finally:
        probe.finish()


def endpoint(items: dict[str, str]) -> tuple[str, str, str]:
    """The hosts, ports and user a connection of ``items`` would use, as
    libpq resolves them (the environment, the service file and its
    compiled-in defaults applied): a password typed for one server is
    given to another connection only when these are the same (psql's rule
    for reusing a password at ``\\connect``). The probe is closed before
    it sends its start-up message."""
    probe = pq.PGconn.connect_start(conninfo(items).encode("utf-8", "surrogateescape"))
    try:
        values = {
            opt.keyword: (opt.val or b"").decode("utf-8", "surrogateescape")
            for opt in probe.info
            if opt.keyword in (b"host", b"hostaddr", b"port", b"user")
        }
    finally:
        probe.finish()
    return (
        values.get(b"host") or values.get(b"hostaddr", ""),
        values.get(b"port", ""),
        values.get(b"user", ""),
    )


def connect_timeout_s(info: bytes) -> float:
    """libpq's ``connect_timeout`` for the encoded conninfo ``info`` (or
    ``PGCONNECT_TIMEOUT``), in seconds as its blocking connect applies it:
    0.0 for none; libpq before 17 waited at least 2 s, 17 and later wait
    the seconds given (1 s for 1: pgbench 18 gives up on a silent server
    after 1 s, and -C's connect waited 2 s here, hostile finding)."""
    value = None
    try:
        for opt in pq.Conninfo.parse(info):
            if opt.keyword == b"connect_timeout" and opt.val is not None:
                value = opt.val.decode("utf-8", "replace")
    except Error:
        return 0.0
    if value is None:
        value = os.environ.get("PGCONNECT_TIMEOUT", "")
    try:
        seconds = int(value.strip() or "0")
    except ValueError:
        return 0.0
    if seconds <= 0:
        return 0.0
    return float(seconds if pq.version() >= 170000 else max(seconds, 2))


def bounded(items: dict[str, str], seconds: int) -> dict[str, str]:
    """``items`` with ``connect_timeout`` set to ``seconds`` where neither
    the conninfo nor ``PGCONNECT_TIMEOUT`` sets one: for a connection of
    pgsurge's own (--monitor, --pooler-admin) to a server that accepts
    and never answers (a wrong port, a host gone silent), whose blocking
    connect would otherwise hold the run forever."""
    try:
        info = conninfo(items).encode("utf-8", "surrogateescape")
    except Error:
        return items  # libpq says why when it connects
    if connect_timeout_s(info) > 0:
        return items
    return {**items, "connect_timeout": str(seconds)}


def timeout_text(pgconn: Any) -> str:
    """What libpq's blocking connect says when ``connect_timeout`` expires,
    for psycopg's ``PGconn`` ``pgconn`` (still connecting): the server it
    was trying, as libpq names it (a socket file, a host and address)."""
    host, port = _text(pgconn.host), _text(pgconn.port)
    if not host or host.startswith(("/", "@")):
        where = f'on socket "{host or "/tmp"}/.s.PGSQL.{port}"'
    else:
        addr = _text(pgconn.hostaddr)
        where = f'at "{host}"' + (f" ({addr})" if addr and addr != host else "")
        where += f", port {port}"
    return f"connection to server {where} failed: timeout expired\n"


def connect_failure_message(message: bytes, at_limit: bool | None = None) -> str:
    """What :meth:`Connecting.error_message` says, from libpq's text of a
    connection the C loop opened and freed itself; ``at_limit``: whether
    the open-file limit was reached when it failed (None: test it now)."""
    text = _connect_failure_text(message)
    if text or at_limit is None:
        return text or _silent_failure()
    return _silent_failure(at_limit)


def raw_probe() -> Any:
    """A psycopg ``PGconn`` holding a libpq connection that never connects
    (an unknown option makes ``PQconnectStart`` fail at once, without a
    socket): the C loop finds in it where psycopg keeps the pointer, to
    wrap connections it opened itself (``FastLoop.set_connect_raw``). The
    caller finishes it."""
    return pq.PGconn.connect_start(b"pgsurge_probe=1")


def adopt(pgconn: Any) -> PgConn:
    """The :class:`PgConn` of a ``PGconn`` from :func:`start_raw`, open."""
    return PgConn(pgconn)


@contextlib.contextmanager
def sigint_kills() -> Iterator[None]:
    """Around a blocking libpq call: SIGINT kills the process at once.

    libpq's blocking calls (``PQconnectdb`` waiting for a server that
    accepted and never answers) retry their ``poll`` when a signal
    interrupts it, so Python's handler, which raises KeyboardInterrupt,
    would only run once the call returned: Ctrl-C seemed ignored (issue 21,
    item 4). pgbench has no handler then and dies of the signal; so does
    pgsurge, by the default action. Only where Python's default handler is
    in place (the program would end anyway) and in the main thread; a
    caller with its own handler (a worker, an interrupted run) keeps it.
    """
    if (
        not in_main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _write_notice(res: Any) -> None:
    """Print a server notice or warning as libpq's default processor does.

    pgbench leaves libpq's default in place, which writes the message to
    stderr as it is (``NOTICE:  …`` with its newline); psycopg's PGconn
    installs a receiver that drops messages unless a handler is set.
    Written unbuffered, like C's stderr, so that it lands in order with the
    rest of a worker's messages.
    """
    message = res.error_message
    if message:
        try:
            os.write(2, message)
        except OSError:  # stderr closed: nothing to tell
            pass


def attempt_param(conninfo: str, name: str) -> bytes | None:
    """libpq's value of the connection parameter ``name`` (``host``,
    ``port``) after connecting with ``conninfo``, whether that connected or
    not (blocking; the connection is closed again): how pgsurge reads the
    defaults compiled into the libpq in use."""
    with sigint_kills():
        pgconn = pq.PGconn.connect(conninfo.encode("utf-8", "surrogateescape"))
    try:
        value = getattr(pgconn, name, None)
    finally:
        pgconn.finish()
    return value if isinstance(value, bytes) else None


def connect_or_raise(items: dict[str, str], password: str | None = None) -> PgConn:
    """:func:`connect`, raising :class:`ConnectError` with libpq's text."""
    conn, message, _needs = connect(items, password)
    if conn is None:
        raise ConnectError(strip_newline(message))
    return conn


def sqlstate(res: Any) -> str | None:
    state = res.error_field(_DIAG_SQLSTATE)
    return None if state is None else _text(state)


def result_error_message(res: Any) -> str:
    """``PQresultErrorMessage`` text (with libpq's trailing newline)."""
    return _text(res.error_message)


def field_name(res: Any, column: int) -> str:
    return _text(res.fname(column))


def value_text(res: Any, row: int, column: int) -> str:
    """A cell as text; NULL reads as the empty string, as in pgbench."""
    value = res.get_value(row, column)
    return "" if value is None else value.decode("utf-8", "surrogateescape")
