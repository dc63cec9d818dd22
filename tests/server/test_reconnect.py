"""``--reconnect`` across a server restart (issue 11, item 4), and one client's
outage beside healthy clients of its worker (issue 21, item 6).

The restart uses a dedicated embedded server (not the session's: it is
restarted mid-run, ``pg_ctl stop -m fast`` then start, which is what
``pg_ctl restart -m fast`` does), initialized by the reference pgbench;
the outage of one client, a TCP relay in front of the session's server.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.server import EmbeddedServer
from tests.fix_run import COMMITTED, plain_env, run_pgsurge, wait_on_server

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def own_server(pgbench_bin: Path) -> Iterator[tuple[EmbeddedServer, str]]:
    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-reconnect-"))
    if os.geteuid() == 0:
        os.chmod(tmp, 0o711)  # let the server's system user pass
    server = EmbeddedServer(tmp / "srv")
    try:
        items = server.ensure_running().conninfo_items()
        items.pop("fallback_application_name", None)
        dsn = psycopg.conninfo.make_conninfo(**items)
        subprocess.run(
            [str(pgbench_bin), "-i", "-q", dsn],
            check=True,
            capture_output=True,
            env=plain_env(),
        )
        yield server, dsn
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _run_across_restart(
    server: EmbeddedServer, dsn: str, cwd: Path, extra: list[str]
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    args = ["-c", "4", "-j", "2", "-T", "8", "-P", "1", *extra, dsn]
    # (the server's history holds the module's earlier runs: emptied, so
    # that COMMITTED below is this run's)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("truncate pgbench_history")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsurge", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=plain_env(),
    )
    # the run under way (a transaction committed), then some intervals of
    # it before the restart; a fixed 3.5 s from the program's start could
    # restart the server before a loaded box's run had connected
    wait_on_server(proc, dsn, COMMITTED)
    time.sleep(2)
    assert server.stop()
    server.ensure_running()
    out, err = proc.communicate(timeout=120)
    return proc, out, err  # type: ignore[return-value]


def test_reconnect_across_restart(own_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, dsn = own_server
    proc, out, err = _run_across_restart(
        server,
        dsn,
        tmp_path,
        ["--reconnect", "--failures-detailed", "-l", "--json", "r.json"],
    )
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lost = int(out.split("number of connection failures: ")[1].split()[0])
    assert 1 <= lost <= 4  # at most the 4 transactions in flight
    assert f"number of failed transactions: {lost} " in out
    assert err.count(" reconnected after ") == 4, err
    assert err.count(" lost its connection ") == 4, err
    assert " aborted" not in err, err  # they did not abort (issue 21, item 6)
    # the progress lines show the gap, then the recovery
    tps = [
        float(line.split(", ")[1].split()[0])
        for line in err.splitlines()
        if line.startswith("progress: ")
    ]
    # (how deep the dip goes depends on how fast the server restarts: the
    # interval of the restart has fewer transactions and the failures)
    failed = [
        line
        for line in err.splitlines()
        if line.startswith("progress: ") and not line.endswith(" 0 failed")
    ]
    assert len(tps) >= 6 and min(tps) < 0.8 * max(tps) and failed, err
    assert tps[-1] > max(tps) / 4, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["totals"]["connection_failures"] == lost
    assert doc["config"]["reconnect"] == 10
    assert not doc["aborted"]
    logged = [
        line
        for path in tmp_path.glob("pgbench_log.*")
        for line in path.read_text().splitlines()
        if " connection " in line
    ]
    assert len(logged) == lost


def test_without_reconnect_clients_abort(own_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """pgbench's behaviour: every client aborts, status 2."""
    server, dsn = own_server
    proc, out, err = _run_across_restart(server, dsn, tmp_path, [])
    assert proc.returncode == 2, err
    assert "connection failures" not in out
    assert "reconnected" not in err
    assert "Run was aborted; the above results are incomplete." in err


# -- one client of a worker reconnecting, the others going on (issue 21, item 6)


class _Relay:
    """A TCP relay to the test server that can drop one connection and
    refuse new ones for a while: an outage of one client only.

    Each relayed connection gets two pump threads. 1.5 s after the
    ``clients``-th connection, the last one is closed (both ends:
    its client sees the server go away) and the listener is closed for
    ``outage_s`` seconds (connection refused), then opened again on the
    same port.
    """

    def __init__(self, target: tuple[int, Any], clients: int, outage_s: float):
        self._family, self._address = target
        self._clients = clients
        self._outage_s = outage_s
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.outage_at = 0.0
        self.outage_end = 0.0
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._start_accepting()

    def _listen(self, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(16)
        return s

    def _start_accepting(self) -> None:
        threading.Thread(
            target=self._accept, args=(self._listener,), daemon=True
        ).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed: the outage, or the end
                return
            server = socket.socket(self._family, socket.SOCK_STREAM)
            server.connect(self._address)
            with self._lock:
                self._pairs.append((client, server))
                if len(self._pairs) == self._clients:
                    threading.Timer(1.5, self._outage).start()
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _outage(self) -> None:
        self.outage_at = time.monotonic()
        self._stop_listening()
        # the last one opened is a client's (the first may be the runner's
        # set-up connection, closed by now)
        with self._lock:
            victim = self._pairs[-1]
        for s in victim:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        time.sleep(self._outage_s)
        if not self._closed:
            self._listener = self._listen(self.port)
            self._start_accepting()
        self.outage_end = time.monotonic()

    def _stop_listening(self) -> None:
        # close() alone leaves the socket listening while accept() blocks
        # on it in another thread; shutdown() wakes that and stops it
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    def close(self) -> None:
        self._closed = True
        self._stop_listening()
        with self._lock:
            for pair in self._pairs:
                for s in pair:
                    s.close()


@pytest.fixture
def relay(fresh_db: str) -> Iterator[tuple[_Relay, str]]:
    """A relay to ``fresh_db``'s server and the conninfo through it."""
    items = psycopg.conninfo.conninfo_to_dict(fresh_db)
    host = str(items.get("host") or "/tmp")
    port = int(items.get("port") or 5432)
    target: tuple[int, Any] = (
        (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        if host.startswith("/")
        else (socket.AF_INET, (host, port))
    )
    r = _Relay(target, clients=4, outage_s=3.0)
    items.update(host="127.0.0.1", port=str(r.port))
    items.pop("hostaddr", None)
    try:
        yield r, psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in items.items()})
    finally:
        r.close()


def _latencies(cwd: Path) -> dict[int, list[int]]:
    """Each client's -l latencies (µs), failed transactions left out."""
    got: dict[int, list[int]] = {}
    for path in cwd.glob("pgbench_log.*"):
        for line in path.read_text().splitlines():
            fields = line.split()
            lat = got.setdefault(int(fields[0]), [])
            if fields[2].isdigit():
                lat.append(int(fields[2]))
    return got


def test_reconnect_does_not_stall_the_other_clients(relay, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One client of a worker cannot reconnect for 3 s: the worker's other
    clients keep their latency (before, the back-off slept in the worker:
    they had a 3 s transaction, and -P divided a stall's transactions by
    a near-zero interval)."""
    r, dsn = relay
    (tmp_path / "sleep.sql").write_text("SELECT pg_sleep(0.05);\n")
    out = run_pgsurge(
        [
            *("-n", "-f", "sleep.sql", "-c", "4", "-j", "1", "-T", "9", "-P", "1"),
            *("--reconnect", "--failures-detailed", "-l"),
        ],
        dsn,
        cwd=tmp_path,
    )
    assert out.status == 0, out.stderr
    assert r.outage_end > r.outage_at > 0, "the outage did not happen"
    assert "Traceback" not in out.stderr
    lost = [line for line in out.stderr.splitlines() if " lost its connection " in line]
    assert len(lost) == 1, out.stderr
    victim = int(lost[0].split("client ")[1].split()[0])
    # refused during the outage: it took several attempts
    attempts = int(
        out.stderr.split(f"client {victim} reconnected after ")[1].split()[0]
    )
    assert attempts >= 3, out.stderr
    assert " aborted" not in out.stderr, out.stderr
    assert "number of connection failures: 1 " in out.stdout, out.stdout
    lat = _latencies(tmp_path)
    assert sorted(lat) == [0, 1, 2, 3]
    assert lat[victim], "the victim ran nothing after reconnecting"
    for cid, values in lat.items():
        if cid == victim:
            continue
        # ~50 ms each; the outage lasts 3 s: a stall shows as a 60x outlier
        med = statistics.median(values)
        assert max(values) < 10 * med, (cid, med, max(values))
        assert len(values) > 50, (cid, len(values))
    # -P: no interval's tps far above what 4 clients sleeping 50 ms can do
    tps = [
        float(line.split(", ")[1].split()[0])
        for line in out.stderr.splitlines()
        if line.startswith("progress: ")
    ]
    assert tps and max(tps) < 4 / 0.05 * 1.5, out.stderr


def test_terminated_backend_reconnects_without_aborting(
    fresh_db: str, tmp_path: Path
) -> None:
    """pg_terminate_backend: the client gets the server's FATAL, says it
    lost its connection (not pgbench's "client N script 0 aborted in
    command 0 query 0: FATAL: ..."), and reconnects."""
    (tmp_path / "sleep.sql").write_text("SELECT pg_sleep(0.05);\n")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "pgsurge", "-n", "-f", "sleep.sql"),
            *("-c", "2", "-T", "6", "--reconnect", fresh_db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=plain_env(),
    )
    try:
        dbname = psycopg.conninfo.conninfo_to_dict(fresh_db)["dbname"]
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            pids: list[int] = []
            deadline = time.monotonic() + 60
            while len(pids) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
                pids = [
                    row[0]
                    for row in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                        " AND pid <> pg_backend_pid()"
                        " AND query LIKE 'SELECT pg_sleep(0.05)%%'",
                        (dbname,),
                    )
                ]
            # both clients seen running their script (the run started: not
            # the set-up connection, nor a client before its first
            # transaction, as 0.5 s after two connections could be)
            assert len(pids) == 2, "pgsurge's clients did not run"
            conn.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lost = [line for line in err.splitlines() if " lost its connection " in line]
    assert len(lost) == 1 and "terminating connection" in lost[0], err
    victim = lost[0].split("client ")[1].split()[0]
    assert f"client {victim} reconnected after 1 attempt\n" in err, err
    assert " aborted" not in err, err
    assert "number of failed transactions: 1 " in out, out
