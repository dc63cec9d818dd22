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
from typing import Any

from pgsurge import pgconn

__all__ = ["RecordingConn", "canonical"]

_COMMENTS = re.compile(r"/\*.*?\*/|--[^\n]*", re.S)
# string constants, $n parameters, numbers: all are $n in the view's text
_CONSTANTS = re.compile(r"'(?:[^']|'')*'|\$\d+|(?<![\w$])\d+(?:\.\d+)?(?![\w$])")
_SPACE = re.compile(r"\s+")
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
    those)."""

    __slots__ = ("sent",)

    def __init__(self, raw: Any) -> None:
        super().__init__(raw)
        self.sent: set[str] = set()

    @classmethod
    def adopt(cls, conn: pgconn.PgConn) -> RecordingConn:
        """The same libpq connection, recording from now on."""
        return cls(conn._pgconn)

    def _record(self, sql: str) -> None:
        form = canonical(sql)
        if form and form not in _TRANSACTION_CONTROL:
            self.sent.add(form)

    def prepare(self, name: bytes, sql: bytes) -> str | None:
        self._record(sql.decode("utf-8", "replace"))
        return super().prepare(name, sql)

    def exec_status(self, sql: str) -> tuple[int, Any]:
        self._record(sql)
        return super().exec_status(sql)

    def exec_params(self, sql: str, params: Any) -> tuple[int, Any]:
        self._record(sql)
        return super().exec_params(sql, params)

    def is_own(self, query: str) -> bool:
        """Whether a ``pg_stat_statements`` text is one of ours."""
        return canonical(query) in self.sent
