"""One initialization connection: statements, COPY, notices, errors.

pgbench runs its init steps over a plain libpq connection in autocommit
mode and reports failures in fixed layouts; this module reproduces them on
top of high-level psycopg:

* a failed statement: ``error: query failed: <libpq message>`` plus
  ``detail: Query was: <sql>``;
* a failed connection: libpq's message, then ``error: could not create
  connection for initialization``;
* a COPY that fails at its end: the server's message printed as libpq
  prints a notice, then ``error: PQendcopy failed``;
* server notices (``NOTICE:  table … does not exist, skipping``) go to
  stderr in libpq's default layout, as they arrive.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import psycopg
from psycopg import conninfo as pg_conninfo

from pgsurge.config import ConnParams
from pgsurge.errors import PROG, ConnectError, InitError
from pgsurge.init.schema import RELKIND_SQL, RELKIND_SQL_SHOWN


class Output:
    """Unbuffered, thread-safe writes to stderr (pgbench's stderr is unbuffered)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.isatty = bool(getattr(stream, "isatty", lambda: False)())
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()


class InitConnectError(ConnectError):
    """The init connection failed: libpq's message, then pgbench's own line."""

    def format(self) -> str:
        return (
            f"{PROG}: error: {self.message}\n"
            f"{PROG}: error: could not create connection for initialization\n"
        )


class CopyEndError(InitError):
    """COPY failed when it ended; libpq printed the server error before."""

    def __init__(self, server_message: str) -> None:
        super().__init__("PQendcopy failed")
        self.server_message = server_message

    def format(self) -> str:
        text = self.server_message
        if text and not text.endswith("\n"):
            text += "\n"
        return text + super().format()


def connect_kwargs(params: ConnParams) -> dict[str, str]:
    """libpq keywords for ``params``, expanding a conninfo/URI given as dbname.

    pgbench connects with ``expand_dbname`` so ``-d "host=… dbname=…"`` or a
    URI works; its settings override -h/-p/-U, as they come later in
    pgbench's keyword array. psycopg would pass it as a literal name.
    """
    items = params.conninfo_items()
    dbname = items.get("dbname")
    if dbname is not None and (
        "=" in dbname or dbname.startswith(("postgresql://", "postgres://"))
    ):
        del items["dbname"]
        try:
            expanded = pg_conninfo.conninfo_to_dict(dbname)
        except psycopg.ProgrammingError as exc:
            raise InitConnectError(_plain(str(exc))) from None
        fallback = items.pop("fallback_application_name", None)
        items.update({k: str(v) for k, v in expanded.items() if v is not None})
        if fallback is not None:
            items["fallback_application_name"] = fallback
    return items


def _plain(text: str) -> str:
    # pg_log_* drops one trailing newline of the message it prints.
    return text[:-1] if text.endswith("\n") else text


def _connect_message(exc: psycopg.Error, kwargs: dict[str, str]) -> str:
    """libpq's own text for a failed connection, as pgbench prints it."""
    pgconn = exc.pgconn
    if pgconn is None or not pgconn.error_message:
        return str(exc)
    text = _plain(pgconn.error_message.decode("utf-8", "replace"))
    # psycopg resolves host names itself and hands libpq a hostaddr, so
    # libpq names only the address; pgbench (one libpq call) names both.
    host = kwargs.get("host", "")
    if host and not host.startswith("/") and "," not in host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            text = _name_host(text, host)
    return text


def _name_host(text: str, host: str) -> str:
    prefix = 'connection to server at "'
    if text.startswith(prefix):
        addr, sep, rest = text[len(prefix) :].partition('"')
        if sep and addr != host:
            return f'{prefix}{host}" ({addr}){rest}'
    return text


def libpq_error_text(exc: psycopg.Error, encoding: str) -> str:
    """The message libpq would return for ``exc`` (severity included)."""
    if exc.pgresult is not None and exc.pgresult.error_message:
        return exc.pgresult.error_message.decode(encoding, "replace")
    if exc.pgconn is not None and exc.pgconn.error_message:
        return exc.pgconn.error_message.decode(encoding, "replace")
    return str(exc) + "\n"


class Session:
    """An autocommit connection running pgbench's init statements."""

    def __init__(self, conn: psycopg.Connection[Any], out: Output) -> None:
        self.conn = conn
        self.out = out
        conn.add_notice_handler(self._notice)

    @classmethod
    def open(cls, params: ConnParams, out: Output) -> Session:
        kwargs = connect_kwargs(params)
        try:
            conn = psycopg.connect(
                pg_conninfo.make_conninfo("", **kwargs),
                autocommit=True,
                prepare_threshold=None,
            )
        except psycopg.Error as exc:
            raise InitConnectError(_connect_message(exc, kwargs)) from None
        return cls(conn, out)

    def close(self) -> None:
        self.conn.close()

    @property
    def server_version(self) -> int:
        return self.conn.info.server_version

    @property
    def encoding(self) -> str:
        try:
            return self.conn.info.encoding
        except psycopg.Error:
            return "utf-8"

    def _notice(self, diag: psycopg.errors.Diagnostic) -> None:
        # libpq's default notice processor prints the result's error text;
        # for a notice that is severity, primary message, DETAIL and HINT.
        text = f"{diag.severity}:  {diag.message_primary}\n"
        if diag.message_detail:
            text += f"DETAIL:  {diag.message_detail}\n"
        if diag.message_hint:
            text += f"HINT:  {diag.message_hint}\n"
        self.out.write(text)

    def _query_failed(self, exc: psycopg.Error, shown_sql: str) -> InitError:
        message = _plain(libpq_error_text(exc, self.encoding))
        return InitError(f"query failed: {message}", detail=f"Query was: {shown_sql}")

    def execute(self, sql: str) -> None:
        """Run one statement; a failure ends init as pgbench's does."""
        try:
            self.conn.execute(sql)
        except psycopg.Error as exc:
            raise self._query_failed(exc, sql) from None

    def relkind(self, table: str) -> str:
        """pg_class.relkind of ``table`` (pgbench's get_table_relkind)."""
        try:
            row = self.conn.execute(RELKIND_SQL, (table,)).fetchone()
        except psycopg.Error as exc:
            raise self._query_failed(exc, RELKIND_SQL_SHOWN) from None
        assert row is not None
        return str(row[0])

    def copy_in(
        self,
        statement: str,
        chunks: Iterable[tuple[bytes, int]],
        on_chunk: Callable[[int], None],
        before_end: Callable[[], None],
    ) -> None:
        """COPY FROM STDIN: send each ``(data, rows_so_far)`` chunk in order.

        ``on_chunk(rows_so_far)`` runs once the chunk is handed to libpq, so
        progress follows what the server is being sent (as pgbench's, whose
        puts block once libpq's buffer is full); ``before_end`` runs before
        the end of the copy is sent (pgbench clears its progress line there).
        """
        cursor = self.conn.cursor()
        phase = "start"
        try:
            with cursor.copy(statement) as copy:
                phase = "data"
                for data, done in chunks:
                    copy.write(data)
                    on_chunk(done)
                before_end()
                phase = "end"
        except psycopg.Error as exc:
            text = libpq_error_text(exc, self.encoding)
            if phase == "start":
                raise InitError(f"unexpected copy in result: {_plain(text)}") from None
            if phase == "data":
                raise InitError("PQputline failed") from None
            raise CopyEndError(text) from None
        finally:
            cursor.close()
