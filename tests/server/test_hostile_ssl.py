"""Runs over TLS, and Python's OpenSSL used after libpq's (hostile checks).

``pgconn`` imports psycopg's parts with Python's ``ssl`` (and ``asyncio``)
not executed (``pgsurge.deferred``): psycopg's ``pq`` imports ``ssl`` so
that Python's OpenSSL is set up before libpq's, and a run now sets up
libpq's (the wheel's own ``libssl``/``libcrypto``) first. These runs go
to a server that accepts TLS connections only (``hostssl``; a CA and a
certificate for 127.0.0.1 made with the ``openssl`` command): both
loops, ``sslmode=require`` and ``verify-full``, ``-C`` (a TLS handshake
per transaction), the monitor connection of ``--waits``; and a Python
workload whose module imports an asyncio submodule first and whose
sessions and transactions do TLS handshakes with Python's ``ssl`` and run
``asyncio`` while libpq's TLS connections are open in the same process.

The embedded PostgreSQL 18.6 (and its pgbench's libpq) is built without
SSL, so the server is Debian's PostgreSQL 15 (``tests/fix_pg15.py``; its
absence fails the test) and pgbench 18.6's report is taken over the same
server's Unix socket.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fix_dask import TlsFiles
from tests.fix_pg15 import cluster as pg15_cluster
from tests.fix_run import Loop, run_pgbench, run_pgsurge

pytestmark = pytest.mark.server

PORT = 5893


@pytest.fixture(scope="module")
def tls_server(pgbench_bin: Path) -> Iterator[tuple[str, str, TlsFiles]]:
    """A PostgreSQL 15 taking TCP connections over TLS only, with pgbench's
    tables: (TCP conninfo without sslmode, Unix-socket conninfo, files)."""
    made: list[TlsFiles] = []

    def prepare(data: Path, owner: str | None) -> None:
        tls_dir = data.parent / "tls"
        tls_dir.mkdir()
        tls = TlsFiles(tls_dir)
        made.append(tls)
        for src, name in ((tls.cert, "server.crt"), (tls.key, "server.key")):
            shutil.copyfile(src, data / name)
            os.chmod(data / name, 0o600)
            if owner:
                pw = pwd.getpwnam(owner)
                os.chown(data / name, pw.pw_uid, pw.pw_gid)
        (data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostssl all all 127.0.0.1/32 trust\n"
            "hostnossl all all 127.0.0.1/32 reject\n"
        )

    settings = "-c listen_addresses=127.0.0.1 -c ssl=on -c fsync=off"
    with pg15_cluster("pgsurge-tls-", PORT, settings, prepare) as (top, user):
        local = f"host={top} port={PORT} user={user} dbname=postgres"
        tcp = f"host=127.0.0.1 port={PORT} user={user} dbname=postgres"
        init = run_pgbench(pgbench_bin, ["-i", "-s", "1", "-q"], local)
        assert init.status == 0, init.stderr
        yield tcp, local, made[0]


def test_the_server_takes_tls_connections_only(
    tls_server: tuple[str, str, TlsFiles],
) -> None:
    tcp, _, _ = tls_server
    with psycopg.connect(tcp + " sslmode=require") as conn:
        row = conn.execute(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchone()
        assert row == (True,)
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(tcp + " sslmode=disable")


@pytest.mark.parametrize("loop", ["python", "c"])
@pytest.mark.parametrize(
    "args",
    [["-S", "-t", "30", "-c", "2", "-j", "2"], ["-t", "10", "-c", "2", "-C", "-r"]],
    ids=["select-only", "tpcb-connect-r"],
)
def test_a_run_over_tls_reports_as_pgbench(
    tls_server: tuple[str, str, TlsFiles],
    pgbench_bin: Path,
    tmp_path: Path,
    args: list[str],
    loop: Loop,
) -> None:
    tcp, local, tls = tls_server
    ref = run_pgbench(pgbench_bin, args, local, cwd=tmp_path)
    require = run_pgsurge(args, tcp + " sslmode=require", cwd=tmp_path, loop=loop)
    verified = f"{tcp} sslmode=verify-full sslrootcert={tls.ca}"
    verify = run_pgsurge(args, verified, cwd=tmp_path, loop=loop)
    for ours in (require, verify):
        assert ours.status == ref.status == 0, (ref.stderr, ours.stderr)
        assert "Traceback" not in ours.stderr
        assert ours.report == ref.report, f"pgbench:\n{ref.stdout}\n{ours.stdout}"
        assert ours.messages == ref.messages


def test_the_monitor_connection_over_tls(
    tls_server: tuple[str, str, TlsFiles], tmp_path: Path
) -> None:
    tcp, _, tls = tls_server
    dsn = f"{tcp} sslmode=verify-full sslrootcert={tls.ca}"
    out = run_pgsurge(
        ["-S", "-t", "200", "-c", "2", "-j", "2", "--waits=20", "--server-stats"],
        dsn,
        cwd=tmp_path,
    )
    assert out.status == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "number of transactions actually processed: 400/400" in out.stdout
    assert "wait events of 2 backends" in out.stdout
    assert "server counters (over" in out.stdout


#: Python's ssl and asyncio executed in the workers after libpq's TLS
#: connections exist (neither is loaded before), ssl by four threads at
#: once, asyncio by a submodule: a TLS handshake and a message through
#: memory BIOs (the test's CA and certificate) per session and per
#: transaction
_WORKLOAD = """
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from pgsurge.workloads import setup, sql, transaction

TLS = os.environ["PGSURGE_TEST_TLS"]
on_tls = sql("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")


def python_tls_round_trip():
    import ssl

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(f"{TLS}/node.pem", f"{TLS}/node.key")
    client_ctx = ssl.create_default_context(cafile=f"{TLS}/ca.pem")
    bios = [ssl.MemoryBIO() for _ in range(4)]
    server = server_ctx.wrap_bio(bios[0], bios[1], server_side=True)
    client = client_ctx.wrap_bio(bios[2], bios[3], server_hostname="127.0.0.1")
    done = set()
    for _ in range(20):
        for end in (client, server):
            if end not in done:
                try:
                    end.do_handshake()
                    done.add(end)
                except ssl.SSLWantReadError:
                    pass
        bios[2].write(bios[1].read())
        bios[0].write(bios[3].read())
    assert len(done) == 2
    client.write(b"ping")
    bios[0].write(bios[3].read())
    assert server.read() == b"ping"


first = []


def make_context(_):
    import ssl

    return ssl.create_default_context()


def first_use():
    # Python's OpenSSL is not loaded before this process's first TLS
    # connection (the session's, or under -C the transaction's) is open
    if not first:
        first.append("_ssl" in sys.modules)
        assert first == [False]


@setup
def session(conn):
    first_use()
    # four threads reaching for ssl at once (its import in this process)
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(make_context, range(8)))
    assert {type(c).__name__ for c in made} == {"SSLContext"}
    python_tls_round_trip()
    # asyncio's first import in this process: a submodule first
    from asyncio.subprocess import PIPE
    import asyncio

    async def later(value):
        await asyncio.sleep(0)
        return value

    assert asyncio.run(later(PIPE)) == PIPE


@transaction
def check(ctx):
    assert (yield on_tls()).scalar() is True
    first_use()
    python_tls_round_trip()
"""


@pytest.mark.parametrize("loop", ["python", "c"])
def test_python_openssl_after_libpq_tls_in_one_process(
    tls_server: tuple[str, str, TlsFiles], tmp_path: Path, loop: Loop
) -> None:
    tcp, _, tls = tls_server
    workload = tmp_path / "after.py"
    workload.write_text(_WORKLOAD)
    dsn = f"{tcp} sslmode=verify-full sslrootcert={tls.ca}"
    env = {"PGSURGE_TEST_TLS": str(tls.ca.parent)}
    for extra in ([], ["-C"]):
        out = run_pgsurge(
            ["-n", "-f", str(workload), "-t", "10", "-c", "2", "-j", "2", *extra],
            dsn,
            cwd=tmp_path,
            env=env,
            # -C with the workload's @setup goes to the Python engine
            # (the C loop would skip @setup on its own connections)
            loop="auto" if extra else loop,
        )
        assert out.status == 0, out.stderr
        assert "Traceback" not in out.stderr
        assert "number of transactions actually processed: 20/20" in out.stdout
        assert "number of failed transactions: 0 " in out.stdout
