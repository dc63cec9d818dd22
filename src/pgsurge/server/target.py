"""Which server a run connects to: the user's, or pgsurge's embedded one.

The rule (``wants_embedded``, a pure function):

* ``--embedded`` always uses the embedded server. It cannot be combined with
  ``-h``/``-p``; an explicit ``-U`` or database name is kept.
* Otherwise, if a connection target is named anywhere — ``-h``, ``-p``, a
  database name (which may be a whole conninfo or URI), or one of
  ``PGHOST``, ``PGHOSTADDR``, ``PGPORT``, ``PGDATABASE``, ``PGSERVICE`` in
  the environment — we connect where the user said, as pgbench would.
* With no target named at all, we connect where libpq would by default if
  something listens there (silently, as pgbench); else where pgbench and a
  source-built PostgreSQL put the socket, ``/tmp``, if a server listens
  there (one stderr line says so: libpq as psycopg's wheel builds it looks
  in ``/var/run/postgresql``); and only then start or reuse the embedded
  server (one stderr line says so too).

A socket found this way is used only when it is owned by us, root or a
PostgreSQL server account (``postgres``, or ``pgsurge``, root's embedded
server) and lies in a directory others cannot write to (unless sticky, as
``/tmp``): anyone can create ``/tmp/.s.PGSQL.5432``, and a server planted
there would receive root's password and make up the results. Such a
socket is skipped with one stderr line naming its owner. A target named
by the user is never second-guessed.

``PGUSER`` (and ``-U``) name a role, not a server, so they do not count as a
target. On the embedded server both are honoured alike (the role must then
exist there: create it with ``psql "$(pgsurge server uri)"``); without
either, pgsurge connects as its superuser ``postgres``. Empty variables
count as unset.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TextIO

from ..config import ConnParams
from ..errors import PROG, UsageError

#: environment variables through which libpq is told which server to use
TARGET_ENV_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGSERVICE")
#: libpq's compiled-in port when it cannot be read from libpq itself
_FALLBACK_PORT = 5432
#: accounts PostgreSQL servers run as, trusted besides root and ourselves
#: ("pgsurge" runs root's embedded server)
SERVER_ACCOUNTS = ("postgres", "pgsurge")

#: told one line when a socket is skipped (see the module doc)
Say = Callable[[str], None]


def named_target(conn: ConnParams, env: Mapping[str, str]) -> str | None:
    """What names a connection target (an option or variable), or None.
    An empty option (``-h ""``) names none: libpq skips it, as pgbench's
    ``PQconnectdbParams`` does (pgbench then connects where it would
    without the option)."""
    for option, value in (("-h", conn.host), ("-p", conn.port), ("-d", conn.dbname)):
        if value:
            return option
    for name in TARGET_ENV_VARS:
        if env.get(name):
            return name
    return None


def wants_embedded(
    conn: ConnParams,
    env: Mapping[str, str],
    *,
    force_embedded: bool,
    default_server_listening: Callable[[], bool],
) -> bool:
    """Whether to use the embedded server (see the module doc for the rule).

    ``default_server_listening`` is called only when it matters, so the probe
    costs nothing when a target was given.
    """
    if force_embedded:
        if conn.host is not None or conn.port is not None:
            raise UsageError("--embedded cannot be combined with -h or -p")
        return True
    if named_target(conn, env) is not None:
        return False
    return not default_server_listening()


#: where pgbench (a libpq built from source) looks for a server by default
PGBENCH_SOCKET_DIR = "/tmp"


def embedded_conn(
    given: ConnParams, server: ConnParams, env: Mapping[str, str] | None = None
) -> ConnParams:
    """The embedded server's address, keeping an explicit ``-U``/dbname and
    ``PGUSER`` (which then behaves as ``-U``)."""
    user = given.user
    if user is None and env is not None and env.get("PGUSER"):
        user = env["PGUSER"]
    return replace(
        server,
        user=user if user is not None else server.user,
        dbname=given.dbname if given.dbname is not None else server.dbname,
    )


def embedded_line(version: str, data_dir: str, *, forced: bool, shared: bool) -> str:
    """The stderr line of a run on the embedded server. ``shared``: root's
    server, run by a system user, used by every root run and left running."""
    line = f"{PROG}: using the embedded PostgreSQL {version} server in {data_dir}"
    if shared:
        line += (
            " (shared by root's runs, run by the system user pgsurge; it keeps "
            "running: pgsurge server stop)"
        )
    if not forced:
        line += " (give -h/-p/-d or set PGHOST to use your own server)"
    return line


def resolve_target(
    conn: ConnParams,
    *,
    force_embedded: bool,
    env: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
) -> ConnParams:
    """``conn`` itself, or the embedded server's address after starting it.

    When the embedded server is used, one line on stderr says so and where
    its data lives. Raises ``ServerError`` when it cannot be started.
    """
    env = os.environ if env is None else env
    tmp_port: list[int] = []

    def say(line: str) -> None:
        print(line, file=stderr or sys.stderr, flush=True)

    def listening() -> bool:
        if default_server_listening(say):
            return True
        port = pgbench_default_listening(say)
        if port is not None:
            tmp_port.append(port)
            return True
        return False

    if not wants_embedded(
        conn, env, force_embedded=force_embedded, default_server_listening=listening
    ):
        if tmp_port:
            print(
                f"{PROG}: using the server listening in {PGBENCH_SOCKET_DIR} "
                f"(port {tmp_port[0]}), where pgbench looks (none in libpq's "
                "default socket directory)",
                file=stderr or sys.stderr,
                flush=True,
            )
            return replace(conn, host=PGBENCH_SOCKET_DIR, port=str(tmp_port[0]))
        return conn
    # lazily: not needed for user servers
    from .embedded import ENV_DATA_DIR, EmbeddedServer

    server = EmbeddedServer()
    line = embedded_line(
        server.version,
        str(server.data_dir),
        forced=force_embedded,
        shared=os.geteuid() == 0 and ENV_DATA_DIR not in env,
    )
    print(line, file=stderr or sys.stderr, flush=True)
    return embedded_conn(conn, server.ensure_running(), env)


def default_server_listening(say: Say | None = None) -> bool:
    """Whether a server listens where libpq connects when told nothing
    (a socket we do not trust is skipped, and ``say`` told why)."""
    host, port = libpq_default_address()
    if host is None:
        return False
    if host.startswith("/"):
        return _trusted_listening(host, port, say)
    return _tcp_listening(host, port)


def pgbench_default_listening(say: Say | None = None) -> int | None:
    """The port of a trusted server listening in ``/tmp`` when libpq's
    default socket directory is another one (None: no such server)."""
    host, port = libpq_default_address()
    if host == PGBENCH_SOCKET_DIR:
        return None  # probed already
    return port if _trusted_listening(PGBENCH_SOCKET_DIR, port, say) else None


def _trusted_listening(directory: str, port: int, say: Say | None) -> bool:
    path = os.path.join(directory, f".s.PGSQL.{port}")
    if not os.path.lexists(path):
        return False
    # checked before connecting: a connect() alone tells a planted socket's
    # owner that a run is starting (and a fake server could answer it)
    why = untrusted_socket(path)
    if why is None:
        return _unix_listening(path)
    if say is not None:
        say(f"{PROG}: skipping the socket in {directory} (port {port}): {why}")
    return False


def trusted_uids() -> set[int]:
    """Who may own a socket we connect to unasked: us, root, and the
    PostgreSQL server accounts that exist here."""
    import pwd  # lazily: only the no-target probe needs it

    uids = {os.geteuid(), 0}
    for name in SERVER_ACCOUNTS:
        with contextlib.suppress(KeyError):
            uids.add(pwd.getpwnam(name).pw_uid)
    return uids


def trusted_gids() -> set[int]:
    """Groups that may write to a socket directory: root's, ours, and the
    server accounts' (Debian's /var/run/postgresql is 2775 postgres:postgres)."""
    import grp  # lazily: only the no-target probe needs it
    import pwd

    gids = {0, os.getegid()}
    for name in SERVER_ACCOUNTS:
        with contextlib.suppress(KeyError):
            gids.add(pwd.getpwnam(name).pw_gid)
        with contextlib.suppress(KeyError):
            gids.add(grp.getgrnam(name).gr_gid)
    return gids


def untrusted_socket(path: str) -> str | None:
    """Why the socket at ``path`` must not be trusted (None: it may be).

    The file itself (a symlink is judged as the link, whose owner planted
    it) must be a socket of a trusted owner, and its directory must be one
    others cannot change: else its owner, or anyone, could swap it after
    this check.
    """
    import pwd  # lazily: only the no-target probe needs it

    def owner(uid: int) -> str:
        try:
            return f'"{pwd.getpwuid(uid).pw_name}"'
        except KeyError:
            return f"uid {uid}"

    try:
        st = os.lstat(path)
        dir_st = os.stat(os.path.dirname(path) or ".")
    except OSError as exc:
        return f"its socket cannot be checked ({exc.strerror})"
    trusted = trusted_uids()
    if st.st_uid not in trusted:
        return (
            f"its socket is owned by {owner(st.st_uid)}, not by you, root or a "
            "PostgreSQL server account"
        )
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket but a symbolic link"
    writable = dir_st.st_mode & 0o002 or (
        dir_st.st_mode & 0o020 and dir_st.st_gid not in trusted_gids()
    )
    if dir_st.st_uid not in trusted or (writable and not dir_st.st_mode & stat.S_ISVTX):
        return (
            "its directory can be changed by others (owned by "
            f"{owner(dir_st.st_uid)}, mode {stat.S_IMODE(dir_st.st_mode):04o})"
        )
    return None


@functools.cache
def libpq_default_address() -> tuple[str | None, int]:
    """libpq's default host (a socket directory, usually) and port.

    Read from libpq itself, as the psycopg build in use has it compiled in
    (psycopg's binary wheel: /var/run/postgresql; upstream builds: /tmp).
    libpq fills in its default host and port before it validates the other
    options, so an invalid ``target_session_attrs`` makes it stop right
    there, the defaults known and nothing connected to: a real attempt
    would reach ``<default dir>/.s.PGSQL.1``, which in /tmp anyone can
    plant. Call only when the PG* target variables are unset.
    """
    host = _probe_param("", "host")
    port_text = _probe_param("", "port")
    try:
        port = int(port_text) if port_text else _FALLBACK_PORT
    except ValueError:
        port = _FALLBACK_PORT
    return host, port


def _probe_param(conninfo: str, attr: str) -> str | None:
    # through pgconn's bare libpq: psycopg.connect would complete the
    # import of psycopg's whole package, a fifth of a run's start-up
    from .. import pgconn  # lazily: pgsurge --help must not pay for it

    invalid = " target_session_attrs=pgsurge-no-connect"
    value = pgconn.attempt_param(conninfo + invalid + " connect_timeout=2", attr)
    if value is None:
        return None
    return value.decode(errors="replace") or None


def _unix_listening(path: str) -> bool:
    # socket only here: a run given its server never probes, and the
    # module (with selectors and its enums) is memory in every process
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return False
        except OSError:
            # e.g. permission denied: a server is there, libpq will say more
            return True
        return True


def _tcp_listening(host: str, port: int) -> bool:
    import socket  # see _unix_listening

    try:
        sock = socket.create_connection((host, port), timeout=1.0)
    except OSError:
        return False
    with contextlib.closing(sock):
        return True
