"""A real PgBouncer in front of the session's test server (issue 25).

``pgbouncer_transaction`` and ``pgbouncer_session`` (session fixtures)
each start one ``pgbouncer`` process, in that pooling mode, listening on
a free TCP port of 127.0.0.1 and forwarding every database (``* =``) to
the test server: its Unix socket directory for the embedded server, its
host and port for a ``PGSURGE_TEST_DSN``. Authentication is ``trust``
with an ``auth_file`` naming the test server's user (PgBouncer still
wants every user listed there); :meth:`Pooler.allow` adds a role (a
non-privileged one) and reloads. PgBouncer refuses to run as root, so
under root it runs as the owner of the server's socket directory (the
embedded server's system user), who can reach that socket.

``pooled(dsn)`` gives the same conninfo through the pooler, database and
user unchanged. ``admin_dsn`` is its console (``SHOW POOLS``...).

The binary is Debian's ``pgbouncer`` package (``.ci/run`` installs it). A
missing binary, or one that does not come up, fails the test: it never
skips.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

#: where Debian's package puts it (not on root's PATH in every shell)
CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
#: the pool's server connections per database and user
POOL_SIZE = 20
START_TIMEOUT_S = 30.0


def pgbouncer_binary() -> str:
    """The pgbouncer program; fails the test when it is not installed."""
    found = shutil.which("pgbouncer")
    for path in (found, *CANDIDATES):
        if path and os.access(path, os.X_OK):
            return path
    pytest.fail(
        "pgbouncer is not installed (apt-get install pgbouncer; .ci/run does it)",
        pytrace=False,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Pooler:
    """One running pgbouncer; see the module doc."""

    mode: str
    port: int
    directory: Path
    user: str
    process: subprocess.Popen[bytes]
    users: list[str] = field(default_factory=list)

    def pooled(self, dsn: str) -> str:
        """``dsn`` through this pooler (database, user and the rest kept)."""
        return psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=self.port)

    @property
    def admin_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=pgbouncer user={self.user}"

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _write_users(self) -> None:
        text = "".join(f'"{u}" ""\n' for u in self.users)
        (self.directory / "users.txt").write_text(text)

    def allow(self, user: str) -> None:
        """Let ``user`` log in through the pooler (then RELOAD)."""
        if user in self.users:
            return
        self.users.append(user)
        self._write_users()
        self.admin("RELOAD")

    def admin(self, command: str) -> list[tuple[object, ...]]:
        """A command on the console (simple query protocol: all it speaks)."""
        with psycopg.connect(
            self.admin_dsn, autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cur = conn.execute(command)
            return cur.fetchall() if cur.description else []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _server_target(server_dsn: str) -> tuple[str, str, str]:
    """(host, port, user) of the test server, as the pooler should reach it."""
    info = psycopg.conninfo.conninfo_to_dict(server_dsn)
    host = str(info.get("host") or "/tmp")
    port = str(info.get("port") or "5432")
    user = str(info.get("user") or pwd.getpwuid(os.geteuid()).pw_name)
    return host, port, user


def start_pooler(server_dsn: str, mode: str, extra: str = "") -> Pooler:
    """Start pgbouncer in ``mode`` (transaction, session) before the test
    server, with ``extra`` lines in its ``[pgbouncer]`` section; wait until
    it answers."""
    binary = pgbouncer_binary()
    host, port, user = _server_target(server_dsn)
    directory = Path(tempfile.mkdtemp(prefix=f"pgsurge-pgbouncer-{mode}-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        # the owner of the server's socket directory can use its socket
        owner = os.stat(host).st_uid if host.startswith("/") else None
        name = pwd.getpwuid(owner).pw_name if owner else "nobody"
        run_as = ["-u", name]
        pw = pwd.getpwnam(name)
        os.chmod(directory, 0o755)
        os.chown(directory, pw.pw_uid, pw.pw_gid)
    listen = _free_port()
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={host} port={port}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {listen}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'users.txt'}\n"
        f"admin_users = {user}\n"
        f"pool_mode = {mode}\n"
        "max_client_conn = 1000\n"
        f"default_pool_size = {POOL_SIZE}\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
        f"pidfile = {directory / 'pgbouncer.pid'}\n"
        "server_reset_query = DISCARD ALL\n"
        "ignore_startup_parameters = extra_float_digits\n"
        f"{extra}"
    )
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    for path in directory.iterdir():
        os.chmod(path, 0o644)
    process = subprocess.Popen(
        [binary, *run_as, str(ini)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pooler = Pooler(mode, listen, directory, user, process, [user])
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            pooler.admin("SHOW VERSION")
            return pooler
        except psycopg.Error as exc:
            if pooler.process.poll() is not None or time.monotonic() > deadline:
                pooler.stop()
                log = pooler.log()
                shutil.rmtree(directory, ignore_errors=True)
                pytest.fail(
                    f"pgbouncer ({mode}) did not start: {exc}\n{log}", pytrace=False
                )
            time.sleep(0.05)


@pytest.fixture(scope="session")
def pgbouncer_transaction(server_dsn: str) -> Iterator[Pooler]:
    """PgBouncer in transaction pooling before the test server."""
    pooler = start_pooler(server_dsn, "transaction")
    yield pooler
    pooler.stop()
    shutil.rmtree(pooler.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer_session(server_dsn: str) -> Iterator[Pooler]:
    """PgBouncer in session pooling before the test server."""
    pooler = start_pooler(server_dsn, "session")
    yield pooler
    pooler.stop()
    shutil.rmtree(pooler.directory, ignore_errors=True)
