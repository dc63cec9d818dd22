"""The monitor's own statements, to leave them out of ``pg_stat_statements``.

``--server-stats`` lists the run's top statements from
``pg_stat_statements``, and the monitor runs its own queries on the same
database as the same user. The view has no pid or ``application_name``
column, and a marker comment is no help: PostgreSQL 18 stores a
statement's text without its leading comment. So the monitor's
connection is a :class:`RecordingConn`: it keeps the text of every
statement it sends, and a row of the view whose text is one of them
(compared in :func:`canonical` form: the view replaces constants by
``$n`` placeholders and may drop comments) is the monitor's. Transaction
control (``BEGIN``, ``COMMIT``...) is never left out: the workers run
the same statements, counted in the same row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pgsurge import pgconn

__all__ = ["RecordingConn", "canonical"]

_COMMENTS = re.compile(r"/\*.*?\*/|--[^\n]*", re.S)
# string constants, $n parameters, numbers: all are $n in the view's text
_CONSTANTS = re.compile(r"'(?:[^']|'')*'|\$\d+|(?<![\w$])\d+(?:\.\d+)?(?![\w$])")
_SPACE = re.compile(r"\s+")
#: how long the monitor waits for the answer to one of its statements (they
#: take milliseconds; a server under a heavy run, a second or two)
ANSWER_WAIT_S = 15.0
#: statements the workers run too (their rows are shared): never left out
_TRANSACTION_CONTROL = frozenset(
    {"begin", "commit", "rollback", "end", "start transaction", "abort"}
)


def canonical(text: str) -> str:
    """``text`` with comments gone, constants and parameters as ``?``,
    whitespace collapsed, lower case, no trailing semicolon."""
    text = _COMMENTS.sub(" ", text)
    text = _CONSTANTS.sub("?", text)
    return _SPACE.sub(" ", text).strip().rstrip(";").strip().lower()


class RecordingConn(pgconn.PgConn):
    """A :class:`pgconn.PgConn` that keeps the canonical text of every
    statement sent through its blocking helpers (the monitor uses only
    those), and waits for each answer at most :data:`ANSWER_WAIT_S`
    (``pgconn.exec_bounded``): a server that hangs must not hold the
    run's report (the monitor reads the end counters after the run), nor
    keep the program's signals from ending it. A statement that got no
    answer in time leaves the connection lost: every later one raises at
    once, as on a connection the server closed."""

    __slots__ = ("lost", "sent")

    def __init__(self, raw: Any) -> None:
        super().__init__(raw)
        self.sent: set[str] = set()
        #: why the connection is unusable (no answer in time), or None
        self.lost: str | None = None

    @classmethod
    def adopt(cls, conn: pgconn.PgConn) -> RecordingConn:
        """The same libpq connection, recording from now on."""
        return cls(conn._pgconn)

    def _record(self, sql: str) -> None:
        form = canonical(sql)
        if form and form not in _TRANSACTION_CONTROL:
            self.sent.add(form)

    def _exec(self, send: Callable[[Any], object]) -> tuple[int, Any]:
        if self.lost is not None:
            raise pgconn.LibpqError(self.lost)
        try:
            res = pgconn.exec_bounded(self, send, ANSWER_WAIT_S)
        except pgconn.LibpqError as exc:
            if self._pgconn.is_busy():  # no answer: the statement is in flight
                self.lost = str(exc)
            raise
        return int(res.status), res

    def error_message(self) -> str:
        return self.lost if self.lost is not None else super().error_message()

    def prepare(self, name: bytes, sql: bytes) -> str | None:
        self._record(sql.decode("utf-8", "replace"))
        status, _res = self._exec(lambda raw: raw.send_prepare(name, sql))
        return None if status == pgconn.COMMAND_OK else self.error_message()

    def exec_status(self, sql: str) -> tuple[int, Any]:
        self._record(sql)
        return self._exec(lambda raw: raw.send_query(sql.encode()))

    def exec_params(self, sql: str, params: Any) -> tuple[int, Any]:
        self._record(sql)
        values = [None if p is None else p.encode() for p in params]
        return self._exec(lambda raw: raw.send_query_params(sql.encode(), values))

    def exec_prepared(self, name: bytes, params: Any) -> tuple[int, Any]:
        values = [None if p is None else p.encode() for p in params]
        return self._exec(lambda raw: raw.send_query_prepared(name, values))

    def is_own(self, query: str) -> bool:
        """Whether a ``pg_stat_statements`` text is one of ours."""
        return canonical(query) in self.sent
