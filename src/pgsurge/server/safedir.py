"""Checked directories and no-follow file writes for the data location.

pgsurge runs as root on shared machines, and its data location may be
named by anyone who can set ``PGSURGE_DATA_DIR`` or plant a symlink at
``/var/lib/pgsurge``. Every file it writes there as root could be turned
into a write to ``/etc/shadow`` by a symlink or a hard link. So:

* a location (and its ``data/``) is used only when it is a real directory
  (not a symlink), owned by us or by the server's account, and not
  writable by group or others; the directories above it must be owned by
  us or root and not writable by others (unless sticky, as ``/tmp``), and
  a symlink on the way must be ours or root's (in such a directory): the
  path is walked component by component and only the resolved path is
  used afterwards;
* the checks run on an open directory fd (``O_NOFOLLOW | O_DIRECTORY``,
  then ``fstat``), so a swap between check and open cannot win, and files
  are opened relative to that fd with ``O_NOFOLLOW``;
* a file is replaced by writing a new one (``O_CREAT | O_EXCL``) and
  renaming it over the old name: a planted symlink is replaced, never
  followed; ownership is given with ``fchown`` on the open file.

A refusal is a :class:`ServerError` of one line naming the path and why.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import stat
from collections.abc import Collection, Iterator
from pathlib import Path

from ..errors import ServerError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def user_name(uid: int) -> str:
    """The account name of ``uid`` (the number when it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _refuse(path: Path | str, why: str) -> ServerError:
    return ServerError(f"refusing to use {path}: {why}")


def check_dir_stat(
    st: os.stat_result, path: Path | str, owners: Collection[int]
) -> None:
    """Refuse a directory not owned by one of ``owners`` or writable by
    group or others (``st`` from ``fstat`` of the open directory)."""
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a directory")
    if st.st_uid not in owners:
        names = " or ".join(f'"{user_name(u)}"' for u in sorted(set(owners)))
        raise _refuse(path, f'it is owned by "{user_name(st.st_uid)}", not by {names}')
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise _refuse(path, f"it is writable by group or others (mode {mode:04o})")


#: symlinks followed among the ancestors before giving up (as the kernel)
_MAX_LINKS = 40


def check_ancestors(path: Path) -> Path:
    """Refuse ``path`` when a directory above it, or a symlink on the way to
    it, could be changed by another user (who could then swap ``path`` for a
    directory of theirs); return ``path`` with those links resolved.

    The path is walked one component at a time with ``lstat``: each real
    directory must be owned by us or root and not writable by others
    (unless sticky); a symlink must be owned by us or root, and lies in a
    directory so checked, so only its trusted owner can re-point it. Use
    only the returned path afterwards: the links are not looked at again.
    The last component is not resolved (``open_dir`` refuses a link there).
    Missing ancestors end the walk (we create them), as does a file
    (creating below it then fails).
    """
    absolute = path.absolute()
    final = absolute.name
    if final in ("", ".", ".."):
        raise _refuse(path, "it does not end in a directory name")
    pending = list(absolute.parent.parts[1:])
    current = Path("/")
    _check_ancestor_dir(path, current, _lstat(path, current))
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            # ``current`` holds no links, so its parent is the real one
            current = current.parent
            continue
        entry = current / part
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            # the rest is missing: make_dirs creates it below ``current``
            return Path(current, part, *pending, final)
        except OSError as exc:
            raise _refuse(path, f"cannot check {entry}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise _refuse(path, "too many symbolic links on the way to it")
            if st.st_uid not in (0, os.geteuid()):
                raise _refuse(
                    path,
                    f'the symbolic link {entry} on the way to it is owned by "'
                    f'{user_name(st.st_uid)}" (who could re-point it)',
                )
            target = os.readlink(entry)
            if target.startswith("/"):
                current = Path("/")
            pending[:0] = Path(target).parts[1 if target.startswith("/") else 0 :]
            continue
        if not stat.S_ISDIR(st.st_mode):
            # a file in a checked directory: creating below it fails with
            # "Not a directory", which says it best
            return Path(entry, *pending, final)
        _check_ancestor_dir(path, entry, st)
        current = entry
    return current / final


def _lstat(path: Path, directory: Path) -> os.stat_result:
    try:
        return os.lstat(directory)
    except OSError as exc:
        raise _refuse(path, f"cannot check {directory}: {exc.strerror}") from None


def _check_ancestor_dir(path: Path, directory: Path, st: os.stat_result) -> None:
    if st.st_uid not in (0, os.geteuid()):
        raise _refuse(
            path,
            f'the directory {directory} above it is owned by "'
            f'{user_name(st.st_uid)}" (another user could replace it)',
        )
    # sticky directories (/tmp) let no one rename or remove our entries;
    # a group of our own alone (umask 002 systems) is no other user
    writable = st.st_mode & 0o002 or (
        st.st_mode & 0o020 and not own_private_group(st.st_gid)
    )
    if writable and not st.st_mode & stat.S_ISVTX:
        raise _refuse(
            path,
            f"the directory {directory} above it is writable by group or "
            f"others (mode {stat.S_IMODE(st.st_mode):04o})",
        )


def own_private_group(gid: int) -> bool:
    """Whether ``gid`` is our primary group with no other listed members
    (a "user private group"; its members by primary gid are not listed,
    so this trusts that such groups have only their user)."""
    if gid != os.getegid():
        return False
    try:
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return False
    return members <= {user_name(os.geteuid())}


def open_dir(
    name: str | Path,
    owners: Collection[int],
    *,
    dir_fd: int | None = None,
    shown: Path | None = None,
) -> int:
    """Open directory ``name`` (relative to ``dir_fd``) without following a
    symlink, check it with :func:`check_dir_stat` and return its fd.

    ``FileNotFoundError`` passes through (the caller may create it).
    """
    where = shown or Path(name)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, dir_fd):
            raise _refuse(where, "it is a symbolic link") from None
        raise
    try:
        check_dir_stat(os.fstat(fd), where, owners)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def opened_dir(
    name: str | Path,
    owners: Collection[int],
    *,
    dir_fd: int | None = None,
    shown: Path | None = None,
) -> Iterator[int]:
    """:func:`open_dir` as a context manager that closes the fd."""
    fd = open_dir(name, owners, dir_fd=dir_fd, shown=shown)
    try:
        yield fd
    finally:
        os.close(fd)


def _is_link(name: str | Path, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def make_dirs(path: Path, mode: int) -> None:
    """Create ``path`` and missing parents with ``mode``; touch nothing else
    (call :func:`check_ancestors` first: it vouches for the parents)."""
    missing: list[Path] = []
    for p in [path, *path.parents]:
        if os.path.lexists(p):
            break
        missing.append(p)
    for p in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, mode)
            # our new directory: undo the umask, through the directory itself
            fd = os.open(p, _DIR_FLAGS)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)


def private_dir(
    dir_fd: int | None, name: str | Path, uid: int, gid: int, *, shown: Path
) -> None:
    """Make (or take) directory ``name`` (relative to ``dir_fd``): 0700 and
    owned by ``uid``, changed through its fd, never by following a link.
    An existing one must be ours or ``uid``'s and closed to others."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    fd = open_dir(name, {os.geteuid(), uid}, dir_fd=dir_fd, shown=shown)
    try:
        os.fchmod(fd, 0o700)
        if uid != os.geteuid():
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def open_lock_file(dir_fd: int, name: str, shown: Path) -> int:
    """Open (creating) the lock file ``name`` under ``dir_fd``: never through
    a symlink, and only a plain file of ours with a single link (a hard link
    to someone's file would otherwise be opened and locked)."""
    try:
        fd = os.open(
            name,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(shown, "it is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(shown, "it is not a regular file")
        if st.st_uid != os.geteuid():
            raise _refuse(shown, f'it is owned by "{user_name(st.st_uid)}"')
        if st.st_nlink != 1:
            raise _refuse(shown, "it has other hard links")
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_file(
    dir_fd: int, name: str, data: bytes, *, uid: int | None = None, gid: int = -1
) -> None:
    """Write ``data`` as file ``name`` under ``dir_fd`` (mode 0600), owned
    by ``uid`` when given: a new file renamed over the old name, so whatever
    ``name`` was (a symlink, a hard link) is replaced and never written to."""
    tmp = f".{name}.pgsurge-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
        if uid is not None and uid != os.geteuid():
            os.fchown(fd, uid, gid)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def append_own_file(dir_fd: int, name: str, data: bytes, owner: int) -> None:
    """Append to an existing plain file ``name`` under ``dir_fd`` that
    ``owner`` owns, never through a symlink or into a hard-linked file."""
    fd = os.open(
        name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != owner or st.st_nlink != 1:
            raise ServerError(
                f"refusing to write to {name}: not a plain file of its own"
            )
        os.write(fd, data)
    finally:
        os.close(fd)


def read_file_at(dir_fd: int, name: str, shown: Path, limit: int = 65536) -> str:
    """Read the plain file ``name`` under ``dir_fd``: never through a
    symlink (refused: a link of the server's account could point at a secret
    of root's) and never blocking (``O_NONBLOCK``: a FIFO would hang us; any
    file that is not regular is refused). ``FileNotFoundError`` passes."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(shown, "it is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(shown, "it is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit).decode(errors="replace")
    finally:
        os.close(fd)


def read_own_text(path: Path, limit: int = -1) -> str:
    """Read a text file without following a final symlink (a file the
    server's account could have replaced by a link to a secret of root's,
    which an error message would then print)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit).decode(errors="replace")
    finally:
        os.close(fd)
