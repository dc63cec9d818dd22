"""Where the results store is: a SQLite file or a PostgreSQL database.

A store is named by ``--store[=PATH|URI]``, else by ``PGSURGE_STORE``:

* ``postgresql://…`` or ``postgres://…`` (a libpq URI): a PostgreSQL
  database, shared by a team; the URI may carry a password, which is used
  to connect and never shown (every message masks it) nor stored;
* any other value: the path of a SQLite file (created 0600 if missing);
* nothing (``--store`` alone, ``PGSURGE_STORE`` unset or empty): the
  default store, ``results.sqlite`` in pgsurge's data location (the
  embedded server's: ``PGSURGE_DATA_DIR``, else the user's data directory,
  ``/var/lib/pgsurge`` for root). That directory is held to the embedded
  server's rules (``server.safedir``): created 0700, refused when it is a
  symbolic link, someone else's or open to others, or when a directory
  above it could be swapped by another user.

A store file is never followed through a symbolic link, and permissions
are never loosened: an existing file keeps its mode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pgsurge.errors import PgsurgeError
from pgsurge.redact import redact_text

__all__ = [
    "ENV_STORE",
    "STORE_FILE",
    "Location",
    "StoreError",
    "default_path",
    "resolve",
]

ENV_STORE = "PGSURGE_STORE"
#: the default store's file name in the data location
STORE_FILE = "results.sqlite"
_URI_PREFIXES = ("postgresql://", "postgres://")


class StoreError(PgsurgeError):
    """A store that cannot be opened, read or written (exit status 1)."""


@dataclass(frozen=True, slots=True)
class Location:
    """A resolved store: ``kind`` "sqlite" (``target`` a path) or
    "postgresql" (``target`` the URI, secret: show ``shown``)."""

    kind: str
    target: str
    shown: str


def is_uri(spec: str) -> bool:
    return spec.startswith(_URI_PREFIXES)


def resolve(spec: str | None, environ: Mapping[str, str] | None = None) -> Location:
    """The store named by ``spec`` ("" or None: ``PGSURGE_STORE``, else the
    default store)."""
    env = os.environ if environ is None else environ
    if not spec:
        spec = env.get(ENV_STORE, "")
    if is_uri(spec):
        return Location("postgresql", spec, redact_text(spec))
    if not spec:
        path = default_path()
        return Location("sqlite", str(path), str(path))
    path = Path(spec).expanduser().absolute()
    return Location("sqlite", str(path), str(path))


def default_path() -> Path:
    """The default store's file, its directory made or checked (module doc)."""
    from pgsurge.errors import ServerError
    from pgsurge.server.embedded import default_location
    from pgsurge.server.runas import server_account_uids
    from pgsurge.server.safedir import check_ancestors, make_dirs, open_dir

    location = default_location()
    try:
        real = check_ancestors(location)
        make_dirs(real, 0o700)
        fd = open_dir(real, {os.geteuid(), *server_account_uids()}, shown=location)
        os.close(fd)
    except ServerError as exc:
        raise StoreError(f"results store: {exc.message}") from None
    except OSError as exc:
        raise StoreError(
            f"results store: could not create {location}: {exc.strerror}"
        ) from None
    return real / STORE_FILE


def check_place(path: str) -> None:
    """Refuse a SQLite store that another user could tamper with.

    SQLite keeps a store's ``-wal`` and ``-shm`` files beside it, under
    fixed names, and uses the ones it finds: in a directory another user
    can write to (even a sticky one such as ``/tmp``) they can plant their
    own, with frames SQLite replays into the store as the runs it holds.
    So the directory must be ours or root's and closed to others (a group
    of our own aside), the directories above it and the links on the way
    held to the data location's rules (``server.safedir.check_ancestors``),
    and an existing store file must be ours: another user's file would
    give them what we store and let them write the history we read."""
    from pgsurge.errors import ServerError
    from pgsurge.server.safedir import check_ancestors, own_private_group, user_name

    shown = f'results store "{path}"'
    try:
        real = check_ancestors(Path(path))
    except ServerError as exc:
        why = exc.message.split(": ", 1)[-1]
        raise StoreError(f"refusing to use {shown}: {why}") from None
    directory = real.parent
    try:
        st = os.stat(directory)
    except OSError:
        return  # missing: prepare_file cannot create the store, and says so
    if st.st_uid not in (0, os.geteuid()):
        raise StoreError(
            f'refusing to use {shown}: its directory {directory} is owned by "'
            f'{user_name(st.st_uid)}"'
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002 or (mode & 0o020 and not own_private_group(st.st_gid)):
        raise StoreError(
            f"refusing to use {shown}: its directory {directory} is writable by "
            f"other users (mode {mode:04o}), who could plant its -wal or -shm file"
        )
    try:
        owner = os.lstat(real).st_uid
    except FileNotFoundError:
        return
    except OSError:
        return  # prepare_file says what is wrong with it
    if owner != os.geteuid():
        raise StoreError(
            f'refusing to use {shown}: it is owned by "{user_name(owner)}", not by you'
        )


def prepare_file(path: str) -> None:
    """A SQLite store file ready to open: created 0600 when missing (never
    through a symbolic link); an existing one must be a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
        except FileExistsError:
            return prepare_file(path)  # another run made it meanwhile
        except OSError as exc:
            raise StoreError(
                f'could not create results store "{path}": {exc.strerror}'
            ) from None
        os.close(fd)
        return None
    except OSError as exc:
        raise StoreError(
            f'could not open results store "{path}": {exc.strerror}'
        ) from None
    if stat.S_ISLNK(st.st_mode):
        raise StoreError(
            f'refusing to use results store "{path}": it is a symbolic link'
        )
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(
            f'refusing to use results store "{path}": it is not a regular file'
        )
    return None
