"""Errors that end pgsurge with a message, and the exit statuses they map to.

Every user-facing failure is a :class:`PgsurgeError`. ``cli.main`` is the one
place that turns them into output and an exit status, the way pgbench ends
with ``pg_fatal``: ``pgsurge: error: <message>`` on stderr, then optional
``detail:``/``hint:`` lines, and status 1 (static problems) or 2 (the run
failed after it started).
"""

from __future__ import annotations

import enum

PROG = "pgsurge"


class ExitStatus(enum.IntEnum):
    """pgbench's exit statuses (PG18 doc, "Exit Status")."""

    SUCCESS = 0
    #: invalid options, bad scripts, failed initial connection, init errors
    ERROR = 1
    #: errors during the run: some client aborted
    RUN_ABORTED = 2


class PgsurgeError(Exception):
    """Base of every error pgsurge reports to the user without a traceback.

    ``message`` is printed after ``pgsurge: error: ``; ``detail`` and ``hint``
    follow on their own lines as ``pgsurge: detail: …`` / ``pgsurge: hint: …``.
    ``raw`` messages (already fully formatted, e.g. script errors that carry
    their own caret line) are printed after the prefix as they are.
    """

    exit_status: ExitStatus = ExitStatus.ERROR

    def __init__(
        self,
        message: str,
        *,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.hint = hint

    def format(self) -> str:
        """The complete stderr text for this error, ending with a newline."""
        lines = [f"{PROG}: error: {self.message}"]
        if self.detail:
            lines.append(f"{PROG}: detail: {self.detail}")
        if self.hint:
            lines.append(f"{PROG}: hint: {self.hint}")
        return "\n".join(lines) + "\n"


class UsageError(PgsurgeError):
    """Bad command line: unknown option, bad value, conflicting options."""


class ScriptError(PgsurgeError):
    """A script pgbench would reject when it parses it.

    Formatted like pgbench's ``syntax_error()``::

        pgsurge: error: FILE:LINE: MESSAGE[ (DETAIL)] in command "CMD"
        <the offending line>
        <spaces>^ error found here

    The caret line is present only when a column is known.
    """

    def __init__(
        self,
        source: str,
        lineno: int,
        message: str,
        *,
        line: str | None = None,
        detail: str | None = None,
        command: str | None = None,
        column: int | None = None,
    ) -> None:
        self.source = source
        self.lineno = lineno
        self.line = line
        self.command = command
        self.column = column
        self.syntax_detail = detail
        head = f"{source}:{lineno}: {message}"
        if detail:
            head += f" ({detail})"
        if column is not None and column >= 0 and line is None:
            head += f" at column {column + 1}"
        if command:
            head += f' in command "{command}"'
        super().__init__(head)

    def format(self) -> str:
        text = f"{PROG}: error: {self.message}\n"
        if self.line is not None:
            text += self.line + "\n"
            if self.column is not None and self.column >= 0:
                text += " " * self.column + "^ error found here\n"
        return text


class EvalError(PgsurgeError):
    """An expression failed at run time (overflow, division by zero, …).

    At run time this aborts the client, as in pgbench; it is not fatal for
    the whole program.
    """


# here, below both, so that workloads.api raises it and the engine shows it
# as a message with the workload's line rather than as a traceback
class WorkloadUsageError(Exception):
    """A Python workload misuses the API (a wrong parameter count, no row
    where one was expected): raised in the user's code, whose line the
    client's abort message names."""


class ConnectError(PgsurgeError):
    """A connection could not be made; ``message`` is libpq's text."""


class InitError(PgsurgeError):
    """Initialization (``-i``) failed."""


class ServerError(PgsurgeError):
    """The embedded PostgreSQL server could not be set up or started."""


class RunInterrupted(BaseException):
    """A run was interrupted by ``signum`` and everything it measured has
    been printed and written: the program now dies of the same signal (as
    pgbench does, so that shells and scripts see what they see with it).
    A BaseException, as KeyboardInterrupt: no handler of errors takes it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
