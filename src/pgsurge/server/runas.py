"""Which operating-system user runs the embedded server, and how we run as it.

PostgreSQL refuses to run as root. A normal user runs the server as
themselves. Root gets a dedicated system account, ``pgsurge``, created once
with ``useradd --system`` (no home, no login shell), and every server program
(initdb, pg_ctl, postgres) is started as that account through ``subprocess``'s
``user=``/``group=`` parameters.

Nothing here changes the permissions of a directory that already existed:
:func:`can_traverse` only *checks* whether an account can reach a path, so
callers can choose another location (or copy files there) instead of
loosening a user's home.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServerError

#: the account that runs the embedded server when pgsurge is run as root
SYSTEM_USER = "pgsurge"


@dataclass(frozen=True, slots=True)
class OsUser:
    """An operating-system account: the one the server processes run as."""

    name: str
    uid: int
    gid: int

    @property
    def is_current(self) -> bool:
        """True when we already are this user (no switch needed)."""
        return self.uid == os.geteuid()


def current_user() -> OsUser:
    """The account pgsurge itself runs as."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # containers sometimes run with a uid missing from passwd
        name = str(uid)
    return OsUser(name, uid, os.getegid())


def server_user() -> OsUser:
    """The account the embedded server runs as; creates ``pgsurge`` for root."""
    if os.geteuid() != 0:
        return current_user()
    return ensure_system_user(SYSTEM_USER)


def ensure_system_user(name: str) -> OsUser:
    """Look up system account ``name``, creating it (once) if it is missing."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        _create_system_user(name)
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise ServerError(
                f'could not create the system user "{name}"',
                hint=f"create it yourself, e.g.: useradd --system {name}",
            ) from None
    return OsUser(pw.pw_name, pw.pw_uid, pw.pw_gid)


def _create_system_user(name: str) -> None:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    shell = next(
        (s for s in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(s)),
        "/bin/false",
    )
    cmd = [
        useradd,
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        shell,
        "--comment",
        "pgsurge embedded PostgreSQL server",
        name,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ServerError(
            f'could not create the system user "{name}": {exc.strerror}',
            hint="PostgreSQL cannot run as root; run pgsurge as a normal user, "
            f'or create a system user "{name}" yourself',
        ) from None
    # exit status 9: another pgsurge created it meanwhile, which is fine
    if proc.returncode not in (0, 9):
        raise ServerError(
            f'could not create the system user "{name}"',
            detail=proc.stderr.strip() or None,
            hint="PostgreSQL cannot run as root; run pgsurge as a normal user, "
            f'or create a system user "{name}" yourself',
        )


def _groups_of(user: OsUser) -> set[int]:
    try:
        return set(os.getgrouplist(user.name, user.gid))
    except (KeyError, OSError):
        return {user.gid}


def _grants(st: os.stat_result, user: OsUser, groups: set[int], bits: int) -> bool:
    """Whether the mode bits in ``st`` give ``user`` all of rwx ``bits`` (0-7)."""
    if user.uid == 0:
        return True
    if st.st_uid == user.uid:
        shift = 6
    elif st.st_gid in groups:
        shift = 3
    else:
        shift = 0
    return (st.st_mode >> shift) & bits == bits


def can_traverse(path: Path, user: OsUser) -> bool:
    """Whether ``user`` can reach ``path``: search permission on every ancestor.

    This reads the classic mode bits only (ACLs are not consulted); a false
    "no" just makes the caller use a location of its own.
    """
    groups = _groups_of(user)
    for directory in path.absolute().parents:
        try:
            st = os.stat(directory)
        except OSError:
            return False
        if not _grants(st, user, groups, 0o1):
            return False
    return True


def can_use_file(path: Path, user: OsUser, *, execute: bool = False) -> bool:
    """Whether ``user`` can read (and, with ``execute``, run) ``path``."""
    if not can_traverse(path, user):
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    need = 0o4 | (0o1 if execute or stat.S_ISDIR(st.st_mode) else 0)
    return _grants(st, user, _groups_of(user), need)


def run_as(
    user: OsUser,
    cmd: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdout: int | None = None,
    stderr: int | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``cmd`` as ``user`` (switching only when we are root), umask 077."""
    switch = not user.is_current
    return subprocess.run(
        [os.fspath(c) for c in cmd],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        timeout=timeout,
        umask=0o077,
        check=False,
        user=user.uid if switch else None,
        group=user.gid if switch else None,
        extra_groups=[] if switch else None,
    )


def chown_to(path: Path, user: OsUser) -> None:
    """Give a directory *we just created* to ``user`` (no-op when that is us).

    ``lchown``: should ``path`` have become a symlink, the link changes
    hands, never the file it points to.
    """
    if not user.is_current:
        os.lchown(path, user.uid, user.gid)


def server_account_uids() -> set[int]:
    """The uid of the account root's embedded server runs as, when we are
    root and it exists (looked up only: it is created on first start)."""
    if os.geteuid() != 0:
        return set()
    try:
        return {pwd.getpwnam(SYSTEM_USER).pw_uid}
    except KeyError:
        return set()
