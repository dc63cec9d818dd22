"""Writing a rendered report (JSON, HTML) to its file, or to stdout for ``-``.

One place for the rule every output option follows: ``-`` is stdout
(flushed), anything else a file written whole, and a file that cannot be
written is a one-line error naming it, never a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from pgsurge.errors import PgsurgeError

__all__ = ["write_output"]


def write_output(text: str, path: str, what: str, stdout: TextIO | None = None) -> None:
    """Write ``text`` to ``path`` (``-``: ``stdout``); ``what`` names the
    output in the error message, e.g. ``"JSON result"``."""
    if path == "-":
        out = stdout if stdout is not None else sys.stdout
        out.write(text)
        out.flush()
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise PgsurgeError(
            f'could not write {what} to "{path}": {os.strerror(exc.errno or 0)}'
        ) from None
