"""Script errors that pgbench reports as a plain ``error:`` line.

Most script errors use pgbench's ``syntax_error`` layout (file, line,
command, caret), which :class:`pgsurge.errors.ScriptError` formats. A few
are reported without that frame (``pg_fatal``/``pg_log_error``):
conditional structure errors, an empty script, too many SQL parameters.
They are still ``ScriptError``\\s, so callers catch one type.
"""

from __future__ import annotations

from pgsurge.errors import PgsurgeError, ScriptError


class PlainScriptError(ScriptError):
    """A ScriptError whose whole text is ``message``."""

    def __init__(self, source: str, message: str) -> None:
        PgsurgeError.__init__(self, message)
        self.source = source
        self.lineno = 0
        self.line = None
        self.command = None
        self.column = None
        self.syntax_detail = None
