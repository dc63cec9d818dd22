"""Writing a rendered report (JSON, HTML) to its file, or to stdout for ``-``.

One place for the rule every output option follows: ``-`` is stdout
(flushed), anything else a file written whole, and a file that cannot be
written is a one-line error naming it, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from typing import TextIO

from pgsurge.errors import PgsurgeError

__all__ = ["write_output"]


def write_output(text: str, path: str, what: str, stdout: TextIO | None = None) -> None:
    """Write ``text`` to ``path`` (``-``: ``stdout``); ``what`` names the
    output in the error message, e.g. ``"JSON result"``.

    A regular file (or a new one) is written beside itself and renamed
    over: a write that fails half way (a full disk) leaves no truncated
    document, and an earlier result at that path stays whole. Anything
    else (a symlink, a FIFO, ``/dev/stderr``) is written in place."""
    if path == "-":
        out = stdout if stdout is not None else sys.stdout
        try:
            _write_stream(text, out)
        except BrokenPipeError:
            raise  # the reader went away: quiet, as SIGPIPE (cli.dispatch)
        except OSError as exc:
            raise PgsurgeError(
                f"could not write {what} to standard output: "
                f"{os.strerror(exc.errno or 0)}"
            ) from None
        return
    _refuse_foreign_link(path, what)
    try:
        if not _write_renamed(text, path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    except OSError as exc:
        raise PgsurgeError(
            f'could not write {what} to "{path}": {os.strerror(exc.errno or 0)}'
        ) from None


def _refuse_foreign_link(path: str, what: str) -> None:
    """A symlink at ``path`` is written through only when it is ours or
    root's (``/dev/stderr``, a link of our own): one planted by another
    user in a directory they can write would aim our write (as root, at
    ``/etc/shadow``) wherever they like. The kernel's protected_symlinks
    guards sticky directories only."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.geteuid()):
        import pwd

        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        raise PgsurgeError(
            f'refusing to write {what} to "{path}": it is a symbolic link '
            f'owned by "{owner}"'
        )


def _write_stream(text: str, out: TextIO) -> None:
    """``text`` on ``out``, whole or an error: through its descriptor when
    it has one, as Python's buffered writer takes a short write of a big
    text (a disk that fills half way) for a whole one and drops the rest."""
    out.flush()
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # (io.UnsupportedOperation) no descriptor
        out.write(text)
        out.flush()
        return
    data = text.encode(getattr(out, "encoding", None) or "utf-8", "surrogateescape")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_renamed(text: str, path: str) -> bool:
    """Write through a temporary file renamed over ``path``; False when
    ``path`` is not a plain file or its directory takes no new file (the
    caller writes in place then)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        mode = 0o666  # as open() would create it, less the umask
    except OSError:
        return False
    else:
        if not stat.S_ISREG(st.st_mode):
            return False
        # an existing file's mode, when it is ours: another user's file
        # planted at the path (0666, say) must not open our result to all
        mode = stat.S_IMODE(st.st_mode) if st.st_uid == os.geteuid() else 0o666
    tmp = os.path.join(
        os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.getpid()}.tmp"
    )
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if mode != 0o666:
                os.fchmod(f.fileno(), mode)  # an existing file's mode, exactly
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True
