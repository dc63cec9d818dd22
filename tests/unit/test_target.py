"""The connection-target rule: user's server or the embedded one (no server)."""

from __future__ import annotations

import io
import os
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from pgsurge.config import ConnParams
from pgsurge.errors import UsageError
from pgsurge.server import target
from pgsurge.server.target import (
    TARGET_ENV_VARS,
    embedded_conn,
    libpq_default_address,
    named_target,
    resolve_target,
    wants_embedded,
)
from tests.fix_run import python_c

NOTHING = ConnParams()


def _never() -> bool:
    raise AssertionError("the default-server probe must not run here")


@pytest.mark.parametrize(
    ("conn", "env", "expected"),
    [
        (NOTHING, {}, None),
        (ConnParams(host="/tmp"), {}, "-h"),
        (ConnParams(port="5433"), {}, "-p"),
        (ConnParams(dbname="bench"), {}, "-d"),
        (ConnParams(dbname="host=db1 dbname=x"), {}, "-d"),
        *[(NOTHING, {name: "x"}, name) for name in TARGET_ENV_VARS],
        # a role is not a server
        (ConnParams(user="alice"), {"PGUSER": "alice"}, None),
        # empty variables count as unset; unrelated ones never count
        (NOTHING, {"PGHOST": "", "PGPORT": ""}, None),
        # ... and so do empty options, left to the variables as by libpq
        # (pgbench's -h "" connects where no -h would: compat hostile pass)
        (ConnParams(host="", port="", dbname=""), {}, None),
        (ConnParams(host=""), {"PGHOST": "/x"}, "PGHOST"),
        (NOTHING, {"PGPASSWORD": "s", "PGSSLMODE": "require"}, None),
    ],
)
def test_named_target(
    conn: ConnParams, env: dict[str, str], expected: str | None
) -> None:
    assert named_target(conn, env) == expected


@pytest.mark.parametrize("listening", [True, False])
def test_no_target_depends_on_default_server(listening: bool) -> None:
    calls: list[None] = []

    def probe() -> bool:
        calls.append(None)
        return listening

    assert (
        wants_embedded(
            NOTHING,
            {"PGUSER": "bob"},
            force_embedded=False,
            default_server_listening=probe,
        )
        is not listening
    )
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("conn", "env"),
    [
        (ConnParams(host="db1"), {}),
        (ConnParams(dbname="postgresql://db1/x"), {}),
        (NOTHING, {"PGHOST": "/var/run/postgresql"}),
        (NOTHING, {"PGSERVICE": "bench"}),
    ],
)
def test_named_target_is_used_without_probe(
    conn: ConnParams, env: dict[str, str]
) -> None:
    assert not wants_embedded(
        conn, env, force_embedded=False, default_server_listening=_never
    )


@pytest.mark.parametrize(
    ("conn", "env"),
    [
        (NOTHING, {}),
        (NOTHING, {"PGHOST": "db1", "PGDATABASE": "x"}),  # options beat variables
        (ConnParams(user="alice", dbname="bench"), {}),
    ],
)
def test_forced_embedded(conn: ConnParams, env: dict[str, str]) -> None:
    assert wants_embedded(
        conn, env, force_embedded=True, default_server_listening=_never
    )


@pytest.mark.parametrize("conn", [ConnParams(host="db1"), ConnParams(port="5433")])
def test_forced_embedded_conflicts_with_host_port(conn: ConnParams) -> None:
    with pytest.raises(UsageError, match="--embedded cannot be combined"):
        wants_embedded(conn, {}, force_embedded=True, default_server_listening=_never)


def test_embedded_conn_keeps_explicit_role_and_database() -> None:
    server = ConnParams("/srv/run", "5432", "postgres", "postgres", embedded=True)
    assert embedded_conn(NOTHING, server) == server
    got = embedded_conn(ConnParams(user="alice", dbname="bench"), server)
    assert got == ConnParams("/srv/run", "5432", "alice", "bench", embedded=True)


def test_embedded_conn_takes_pguser_as_dash_u() -> None:
    """PGUSER and -U behave alike on the embedded server (issue 11)."""
    server = ConnParams("/srv/run", "5432", "postgres", "postgres", embedded=True)
    assert embedded_conn(NOTHING, server, {"PGUSER": "bob"}).user == "bob"
    assert embedded_conn(ConnParams(user="al"), server, {"PGUSER": "bob"}).user == "al"
    assert embedded_conn(NOTHING, server, {"PGUSER": ""}).user == "postgres"


def test_embedded_line_as_root_says_shared_and_kept() -> None:
    from pgsurge.server.target import embedded_line

    line = embedded_line("18.6", "/var/lib/pgsurge/data", forced=True, shared=True)
    assert "/var/lib/pgsurge/data" in line and "pgsurge server stop" in line
    assert "\n" not in line


def test_resolve_target_leaves_named_target_alone() -> None:
    err = io.StringIO()
    conn = ConnParams(host="db1", user="u")
    assert resolve_target(conn, force_embedded=False, env={}, stderr=err) is conn
    assert err.getvalue() == ""


@pytest.fixture
def sock_path() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-sock-"))
    yield tmp / ".s.PGSQL.5432"
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()


def test_unix_probe(sock_path: Path) -> None:
    assert not target._unix_listening(str(sock_path))  # no file
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(str(sock_path))
        assert not target._unix_listening(str(sock_path))  # bound, not listening
        srv.listen(1)
        assert target._unix_listening(str(sock_path))
    # a stale socket file left behind by a dead server
    assert sock_path.exists() and not target._unix_listening(str(sock_path))


def test_libpq_default_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq's defaults as the psycopg in use has them: a socket directory
    and port 5432 (read without contacting any server)."""
    for name in TARGET_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    host, port = libpq_default_address()
    assert host is not None and os.path.isabs(host)
    assert port == 5432


def test_libpq_default_address_leaves_psycopg_unimported() -> None:
    """The probe goes through pgconn's bare libpq: it must not complete the
    import of psycopg's package (a run without a target would pay for it),
    and it reads what psycopg.connect's failed attempts report."""
    code = (
        "import sys\n"
        "from pgsurge.server import target\n"
        "print(*target.libpq_default_address())\n"
        "print('psycopg.connection' in sys.modules)\n"
        "import psycopg\n"
        "def via_psycopg(conninfo, attr):\n"
        "    try:\n"
        "        psycopg.connect(conninfo + ' connect_timeout=2').close()\n"
        "    except psycopg.OperationalError as exc:\n"
        "        return getattr(exc.pgconn, attr).decode()\n"
        "print(via_psycopg('port=1', 'host'),"
        " via_psycopg('host=/nonexistent/pgsurge-probe', 'port'))\n"
    )
    out = python_c(code).splitlines()
    assert out[1] == "False"
    assert out[0] == out[2]


# -- sockets found without a target: only trusted owners (issue 21, security 2)

IS_ROOT = os.geteuid() == 0


class _FakeEmbedded:
    """Stands in for the embedded server: records that the run went on to it."""

    version = "18.6"
    data_dir = Path("/fake/pgsurge/data")
    started: ClassVar[list[bool]] = []

    def ensure_running(self) -> ConnParams:
        self.started.append(True)
        return ConnParams("/fake/run", "5432", "postgres", "postgres", embedded=True)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, socket.socket]]:
    """A listening ``.s.PGSQL.5432`` in a fresh socket directory (0700, ours)
    standing in for ``/tmp``; no target in the environment; the embedded
    server faked."""
    from pgsurge.server import embedded

    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-sock-"))
    for name in (*TARGET_ENV_VARS, "PGUSER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(target, "PGBENCH_SOCKET_DIR", str(tmp))
    monkeypatch.setattr(target, "libpq_default_address", lambda: ("/nonexistent", 5432))
    monkeypatch.setattr(embedded, "EmbeddedServer", _FakeEmbedded)
    _FakeEmbedded.started.clear()
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(tmp / ".s.PGSQL.5432"))
    srv.listen(1)
    try:
        yield tmp, srv
    finally:
        srv.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _nobody_uid() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user 'nobody'")


def _resolve() -> tuple[ConnParams, list[str]]:
    err = io.StringIO()
    conn = resolve_target(ConnParams(), force_embedded=False, stderr=err)
    return conn, err.getvalue().splitlines()


@pytest.mark.skipif(not IS_ROOT, reason="needs root to give the socket to nobody")
def test_tmp_socket_of_another_user_is_skipped(
    planted: tuple[Path, socket.socket],
) -> None:
    tmp, _ = planted
    uid = _nobody_uid()
    os.lchown(tmp / ".s.PGSQL.5432", uid, -1)
    conn, lines = _resolve()
    assert conn.embedded and _FakeEmbedded.started == [True]
    assert lines[0] == (
        f"pgsurge: skipping the socket in {tmp} (port 5432): its socket "
        'is owned by "nobody", not by you, root or a PostgreSQL server account'
    )
    assert lines[1].startswith("pgsurge: using the embedded PostgreSQL 18.6 server")
    assert len(lines) == 2


@pytest.mark.skipif(not IS_ROOT, reason="needs root to give the socket to nobody")
def test_default_dir_socket_of_another_user_is_skipped(
    planted: tuple[Path, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in libpq's own default socket directory."""
    tmp, _ = planted
    os.lchown(tmp / ".s.PGSQL.5432", _nobody_uid(), -1)
    monkeypatch.setattr(target, "PGBENCH_SOCKET_DIR", "/nonexistent-tmp")
    monkeypatch.setattr(target, "libpq_default_address", lambda: (str(tmp), 5432))
    conn, lines = _resolve()
    assert conn.embedded
    assert lines[0].startswith(f"pgsurge: skipping the socket in {tmp} ")
    assert len(lines) == 2


def test_tmp_socket_of_our_own_is_used(planted: tuple[Path, socket.socket]) -> None:
    tmp, _ = planted
    conn, lines = _resolve()
    assert not conn.embedded and (conn.host, conn.port) == (str(tmp), "5432")
    assert lines == [
        f"pgsurge: using the server listening in {tmp} (port 5432), where pgbench "
        "looks (none in libpq's default socket directory)"
    ]


def test_socket_in_directory_open_to_all_is_skipped(
    planted: tuple[Path, socket.socket],
) -> None:
    """Our own socket, but in a directory anyone may change (not sticky):
    it could be swapped for another right after the check."""
    tmp, _ = planted
    os.chmod(tmp, 0o777)
    conn, lines = _resolve()
    assert conn.embedded
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert lines[0] == (
        f"pgsurge: skipping the socket in {tmp} (port 5432): its "
        f'directory can be changed by others (owned by "{me}", mode 0777)'
    )


def test_socket_symlink_is_skipped(planted: tuple[Path, socket.socket]) -> None:
    """A link to a real server's socket: whoever made it chose the server."""
    tmp, _ = planted
    real = tmp / "real"
    real.mkdir()
    (tmp / ".s.PGSQL.5432").rename(real / ".s.PGSQL.5432")
    (tmp / ".s.PGSQL.5432").symlink_to(real / ".s.PGSQL.5432")
    if IS_ROOT:
        os.lchown(tmp / ".s.PGSQL.5432", _nobody_uid(), -1)
        why = 'its socket is owned by "nobody"'
    else:
        why = f"{tmp / '.s.PGSQL.5432'} is not a socket but a symbolic link"
    conn, lines = _resolve()
    assert conn.embedded
    assert lines[0].startswith(
        f"pgsurge: skipping the socket in {tmp} (port 5432): {why}"
    )


def test_named_target_keeps_an_untrusted_socket(
    planted: tuple[Path, socket.socket],
) -> None:
    """PGHOST names the directory: the user chose it, nothing is checked."""
    tmp, _ = planted
    if IS_ROOT:
        os.lchown(tmp / ".s.PGSQL.5432", _nobody_uid(), -1)
    err = io.StringIO()
    conn = ConnParams()
    got = resolve_target(
        conn, force_embedded=False, env={"PGHOST": str(tmp)}, stderr=err
    )
    assert got is conn and err.getvalue() == "" and _FakeEmbedded.started == []


@pytest.mark.skipif(not IS_ROOT, reason="needs root to change the group")
def test_socket_dir_writable_by_server_group_is_trusted(
    planted: tuple[Path, socket.socket],
) -> None:
    """Debian's /var/run/postgresql is 2775 postgres:postgres: the group of a
    server account may write there, another group may not."""
    tmp, _ = planted
    accounts = [a for a in target.SERVER_ACCOUNTS if _account(a) is not None]
    if not accounts:
        pytest.skip("no PostgreSQL server account here")
    server_gid = _account(accounts[0]).pw_gid  # type: ignore[union-attr]
    os.chown(tmp, 0, server_gid)
    os.chmod(tmp, 0o2775)
    conn, lines = _resolve()
    assert not conn.embedded and conn.host == str(tmp), lines
    other = pwd.getpwnam("nobody").pw_gid if _account("nobody") else None
    if other is None or other == server_gid:
        return
    os.chown(tmp, 0, other)
    conn, lines = _resolve()
    assert conn.embedded
    assert "its directory can be changed by others" in lines[0]


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _connected(srv: socket.socket) -> bool:
    """Whether someone connected to the listener (without waiting)."""
    srv.setblocking(False)
    try:
        peer, _ = srv.accept()
    except BlockingIOError:
        return False
    peer.close()
    return True


def test_untrusted_socket_is_never_connected_to(
    planted: tuple[Path, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner of a planted socket must not even see a connect(): the
    owner check comes first (our socket is made "someone else's" here)."""
    tmp, srv = planted
    monkeypatch.setattr(target, "trusted_uids", lambda: {os.geteuid() + 1})
    said: list[str] = []
    assert not target._trusted_listening(str(tmp), 5432, said.append)
    assert said and said[0].startswith(f"pgsurge: skipping the socket in {tmp} ")
    assert not _connected(srv)


def test_trusted_socket_is_still_probed(planted: tuple[Path, socket.socket]) -> None:
    tmp, srv = planted
    assert target._trusted_listening(str(tmp), 5432, None)
    assert _connected(srv)
    assert not target._trusted_listening(str(tmp), 5433, None)


def test_libpq_default_address_connects_nowhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading libpq's defaults must not connect to ``<dir>/.s.PGSQL.1``,
    which in /tmp anyone could plant (PGHOST stands in for the compiled-in
    directory here)."""
    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-probe-"))
    srv = socket.socket(socket.AF_UNIX)
    try:
        srv.bind(str(tmp / ".s.PGSQL.1"))
        srv.listen(1)
        monkeypatch.setenv("PGHOST", str(tmp))
        monkeypatch.delenv("PGPORT", raising=False)
        host, port = target.libpq_default_address.__wrapped__()
        assert (host, port) == (str(tmp), 5432)
        assert not _connected(srv)
    finally:
        srv.close()
        shutil.rmtree(tmp, ignore_errors=True)
