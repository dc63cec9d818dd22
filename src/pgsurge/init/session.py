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

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

import psycopg

from pgsurge import pgconn
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


def _plain(text: str) -> str:
    # pg_log_* drops one trailing newline of the message it prints.
    return text[:-1] if text.endswith("\n") else text


def libpq_error_text(exc: psycopg.Error, encoding: str) -> str:
    """The message libpq would return for ``exc`` (severity included)."""
    if exc.pgresult is not None and exc.pgresult.error_message:
        return exc.pgresult.error_message.decode(encoding, "replace")
    if exc.pgconn is not None and exc.pgconn.error_message:
        return exc.pgconn.error_message.decode(encoding, "replace")
    return str(exc) + "\n"


#: the sessions open now, which a Ctrl-C cancels (see cancel_on_interrupt)
_OPEN: set[Session] = set()
_OPEN_LOCK = threading.Lock()


class _Interrupt:
    """What a Ctrl-C during init left for the normal flow to see: plain
    attributes, as the signal handler may neither take a lock (the code it
    interrupted may hold it: ``Output._lock``, an Event's condition) nor
    write to a stream."""

    #: set by the SIGINT handler
    requested = False
    #: set once the cancel request went out: a COPY stops sending rows the
    #: server will refuse
    cancelled = False


_INTERRUPT = _Interrupt()


def cancel_open_sessions(out: Output) -> None:
    """What pgbench's init does on SIGINT: a cancel request for the
    statement each open session runs (none: the server ignores it), with
    pgbench's one line; the statement's error then ends init as any
    failure does. Not for a signal handler: it takes locks and writes."""
    with _OPEN_LOCK:
        sessions = list(_OPEN)
    for session in sessions:
        try:
            session.conn.cancel()
        except psycopg.Error as exc:
            out.write(
                f"Could not send cancel request: {pgconn.strip_newline(str(exc))}\n"
            )
        else:
            out.write("Cancel request sent\n")
    _INTERRUPT.cancelled = True


def _on_sigint(signum: int, frame: object) -> None:
    # runs in the main thread between two bytecodes of whatever it ran,
    # perhaps inside Output.write: a flag only (issue 21, item 16: the
    # cancel and its message here waited for the lock the write held)
    _INTERRUPT.requested = True


def _cancel_on_wakeup(fd: int, out: Output) -> None:
    """The canceller thread: a byte per signal on ``fd`` (Python's C-level
    handler writes it, see :func:`signal.set_wakeup_fd`), the cancel for a
    SIGINT; until ``fd`` reaches its end."""
    while data := os.read(fd, 64):
        if signal.SIGINT in data:
            cancel_open_sessions(out)


@contextlib.contextmanager
def cancel_on_interrupt(out: Output) -> Iterator[None]:
    """Within the block, SIGINT cancels the running statements instead of
    killing the program, as pgbench's init does (then restored).

    pgbench sends the cancel from its handler (``PQcancel`` is
    signal-safe). A Python handler runs only when the main thread returns
    to the interpreter, perhaps while it holds a lock, and not at all while
    it waits in libpq (a COPY write blocked on a full socket). So the
    handler only sets a flag, and the signal's wakeup byte, which Python's
    C-level handler writes to a pipe at once, wakes a thread that sends the
    cancel and prints pgbench's line.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _INTERRUPT.requested = _INTERRUPT.cancelled = False
    r, w = os.pipe()
    os.set_blocking(w, False)  # set_wakeup_fd's requirement
    canceller = threading.Thread(
        target=_cancel_on_wakeup, args=(r, out), name="init-cancel", daemon=True
    )
    canceller.start()
    # an inherited ignore (``cmd &`` in a script) stays: pgbench's -i runs on
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else _on_sigint)
    previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous)
        os.close(w)  # the thread reads what is left, then the end
        canceller.join()  # its "Cancel request sent" precedes init's error
        os.close(r)


class Session:
    """An autocommit connection running pgbench's init statements."""

    def __init__(
        self, conn: psycopg.Connection[Any], out: Output, password: str | None
    ) -> None:
        self.conn = conn
        self.out = out
        self.password = password
        conn.add_notice_handler(self._notice)
        with _OPEN_LOCK:
            _OPEN.add(self)

    @classmethod
    def open(
        cls, params: ConnParams, out: Output, password: str | None = None
    ) -> Session:
        """Connect as pgbench's doConnect does (conninfo in the database
        name expanded, one password prompt if the server asks for one)."""
        items = params.conninfo_items()
        try:
            conn = psycopg.connect(
                pgconn.conninfo(items, password),
                autocommit=True,
                prepare_threshold=None,
            )
        except psycopg.Error as exc:
            first: Exception = exc
        except UnicodeEncodeError as exc:
            # an argument that is not UTF-8 (kept as surrogate escapes):
            # psycopg cannot send it; libpq's answer below is the message
            first = exc
        else:
            return cls(conn, out, password)
        # psycopg resolves host names and checks some options itself, so its
        # messages differ from libpq's; on this (failure) path, ask libpq.
        try:
            probe, message, needs = pgconn.connect(items, password)
        except psycopg.Error as exc:  # a conninfo libpq cannot even parse
            raise InitConnectError(pgconn.strip_newline(str(exc))) from None
        if probe is not None:  # it worked this time
            probe.finish()
            message = (
                "a connection parameter is not valid UTF-8"
                if isinstance(first, UnicodeEncodeError)
                else str(first)
            )
        elif needs and password is None:
            return cls.open(params, out, pgconn.ask_password(sys.stderr))
        raise InitConnectError(pgconn.strip_newline(message))

    def reopen(self, params: ConnParams) -> Session:
        """Another connection like this one (same password, same output)."""
        return Session.open(params, self.out, self.password)

    def close(self) -> None:
        with _OPEN_LOCK:
            _OPEN.discard(self)
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
                # a Ctrl-C before this COPY ran cancelled nothing (pgbench's
                # init goes on then): only one from now on stops the rows
                _INTERRUPT.cancelled = False
                for data, done in chunks:
                    if _INTERRUPT.cancelled:
                        break  # the end of the copy brings the server's error
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
