"""Regression guards from a hostile tester's pass over issue 21 (security).

Behaviour verified correct on main, kept from coming back:

* a plain run never prints or writes a password it was given, in any form
  (URI ``user:PW@``, ``password=`` in a conninfo, quoted or not,
  ``PGPASSWORD``, a password file): stdout, stderr, ``--json``, ``--html``,
  ``-l`` logs and ``--debug``;
* nor in its error messages when connecting fails (refused, or a server
  that rejects the password it asked for);
* as root, another user ("nobody") cannot connect to the embedded server's
  socket.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from tests.fix_run import tool_env
from tests.fix_server import ENV_TEST_DSN, nobody_user, python_for

pytestmark = pytest.mark.server

IS_ROOT = os.geteuid() == 0
SECRET = "Hostile7Secret"
TIMEOUT = 180  # a loaded 2-core machine


def _pgsurge(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        cwd=cwd,
        env=tool_env(env),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


def _leaks(proc: subprocess.CompletedProcess[bytes], where: Path) -> list[str]:
    """Where the secret shows up: the output streams, or a file in ``where``."""
    found = [
        name
        for name, data in (("stdout", proc.stdout), ("stderr", proc.stderr))
        if SECRET.encode() in data
    ]
    found.extend(
        str(path)
        for path in sorted(where.rglob("*"))
        if path.is_file() and SECRET.encode() in path.read_bytes()
    )
    return found


def _targets(
    items: dict[str, str], tmp: Path, *, secret: str = SECRET
) -> dict[str, tuple[str, dict[str, str]]]:
    """Each way to hand the password to pgsurge: (target, extra env)."""
    host = items.get("host", "")
    port = items.get("port", "5432")
    user = items.get("user", "postgres")
    db = items.get("dbname", "postgres")
    base = {k: v for k, v in items.items() if k != "password"}
    conninfo = " ".join(f"{k}={v}" for k, v in base.items())
    if host.startswith("/"):
        uri = (
            f"postgresql://{quote(user, safe='')}:{secret}@/{quote(db, safe='')}"
            f"?host={quote(host, safe='')}&port={port}"
        )
    else:
        uri = f"postgresql://{quote(user, safe='')}:{secret}@{host}:{port}/{db}"
    passfile = tmp / "pgpass"
    passfile.write_text(f"*:*:*:*:{secret}\n")
    passfile.chmod(0o600)
    return {
        "uri": (uri, {}),
        "conninfo": (f"{conninfo} password={secret}", {}),
        "conninfo-quoted": (f"{conninfo} password='{secret} x'", {}),
        "pgpassword": (conninfo, {"PGPASSWORD": secret}),
        "pgpassfile": (conninfo, {"PGPASSFILE": str(passfile)}),
    }


FORMS = ["uri", "conninfo", "conninfo-quoted", "pgpassword", "pgpassfile"]


@pytest.mark.parametrize("form", FORMS)
def test_run_artefacts_hold_no_password(
    server_dsn: str, tmp_path: Path, form: str
) -> None:
    items = psycopg.conninfo.conninfo_to_dict(server_dsn)
    items = {k: str(v) for k, v in items.items()}
    if "password" in items:
        pytest.skip("the test server's own conninfo carries a password")
    target, env = _targets(items, tmp_path)[form]
    out = tmp_path / "out"
    out.mkdir()
    init = _pgsurge(["-i", "-s", "1", "-q", target], out, env)
    assert init.returncode == 0, init.stderr.decode(errors="replace")
    proc = _pgsurge(
        [
            "-c", "2", "-j", "2", "-t", "5", "-l", "--debug",
            "--json", "run.json", "--html", "run.html", target,
        ],
        out,
        env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert (out / "run.json").stat().st_size > 0
    assert (out / "run.html").stat().st_size > 0
    assert list(out.glob("pgbench_log.*")), "no -l log written"
    assert _leaks(init, out) == []
    assert _leaks(proc, out) == []


class _PasswordServer:
    """A TCP listener that asks for a cleartext password, records it and
    rejects it (what a hostile server would do to collect passwords)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(10)
                try:
                    self._answer(conn)
                except OSError:
                    pass

    def _answer(self, conn: socket.socket) -> None:
        data = conn.recv(65536)
        if data[4:8] == struct.pack("!i", 80877103):  # SSLRequest
            conn.sendall(b"N")
            data = conn.recv(65536)
        if data[4:8] == struct.pack("!i", 80877104):  # GSSENCRequest
            conn.sendall(b"N")
            data = conn.recv(65536)
        conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # cleartext password
        self.received += conn.recv(65536)
        msg = b"SFATAL\x00C28P01\x00M"
        msg += b'password authentication failed for user "x"\x00\x00'
        conn.sendall(b"E" + struct.pack("!i", len(msg) + 4) + msg)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def password_server() -> Iterator[_PasswordServer]:
    server = _PasswordServer()
    yield server
    server.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("form", FORMS)
def test_failed_authentication_shows_no_password(
    password_server: _PasswordServer, tmp_path: Path, form: str
) -> None:
    items = {
        "host": "127.0.0.1",
        "port": str(password_server.port),
        "user": "bob",
        "dbname": "postgres",
        "sslmode": "disable",
        "gssencmode": "disable",
    }
    target, env = _targets(items, tmp_path)[form]
    if form == "uri":
        target += "?sslmode=disable&gssencmode=disable"
    out = tmp_path / "out"
    out.mkdir()
    proc = _pgsurge(["-c", "1", "-t", "1", "--json", "run.json", target], out, env)
    assert proc.returncode == 1
    assert b"password authentication failed" in proc.stderr
    # the password was really used (sent to the server that asked for it)
    assert SECRET.encode() in password_server.received
    assert _leaks(proc, out) == []


@pytest.mark.parametrize("form", FORMS)
def test_refused_connection_shows_no_password(tmp_path: Path, form: str) -> None:
    items = {"host": "127.0.0.1", "port": str(_closed_port()), "user": "bob"}
    items["dbname"] = "postgres"
    target, env = _targets(items, tmp_path)[form]
    out = tmp_path / "out"
    out.mkdir()
    for args in (["-c", "1", "-t", "1"], ["-i"]):
        proc = _pgsurge([*args, target], out, env)
        assert proc.returncode == 1
        assert b"Connection refused" in proc.stderr
        assert _leaks(proc, out) == []


@pytest.mark.skipif(not IS_ROOT, reason="needs root to act as nobody")
def test_nobody_cannot_connect_to_roots_embedded_server(server_dsn: str) -> None:
    if os.environ.get(ENV_TEST_DSN):
        pytest.skip("the tests use a server of their own, not the embedded one")
    items = psycopg.conninfo.conninfo_to_dict(server_dsn)
    host = str(items.get("host", ""))
    if not host.startswith("/"):
        pytest.skip("the embedded server is not on a Unix socket")
    path = os.path.join(host, f".s.PGSQL.{items.get('port', 5432)}")
    assert os.path.exists(path)
    user = nobody_user()
    python = python_for(user) if user is not None else None
    if user is None or python is None:
        pytest.skip("no user 'nobody' that can run this Python")
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except PermissionError:\n"
        "    print('denied')\n"
        "else:\n"
        "    print('connected')\n"
    )
    proc = subprocess.run(
        [python[0], "-c", probe, path],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        user=user.uid,
        group=user.gid,
        extra_groups=[],
    )
    assert proc.stdout.strip() == "denied", proc.stderr
