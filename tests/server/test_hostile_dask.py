"""Hostile-tester regressions on ``--dask`` addresses (issue 24).

``--dask tcp://HOST:PORT`` at a port that is not a Dask scheduler's, a
common slip (the dashboard's 8787 for the scheduler's 8786, the database's
own port):

* a port that accepts and says nothing (an HTTP server, PostgreSQL, which
  waits for its startup packet) hung the run for ever: Dask's client waits
  for the scheduler's handshake with no deadline;
* a port that says something else (an SSH banner) had Dask read it as a
  frame length of exabytes: a 40-line MemoryError traceback.

Both are now one error line (and the hint), exit status 1, in a bounded
time.

``--dask local:N`` while another program held port 8787 (another local
cluster, a Dask dashboard): the local scheduler's HTTP server, started
whatever the dashboard setting, printed Dask's four-line "Port 8787 is
already in use" warning among the run's lines.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgsurge.distributed.watch import COORDINATOR_GRACE_S
from tests.fix_dask import (
    SLACK_S,
    Cluster,
    Run,
    base_env,
    count_clients,
    pgsurge_cmd,
    start_run,
    wait_no_load,
)

pytestmark = [pytest.mark.server, pytest.mark.slow]


class _Listener:
    """A loopback TCP port that accepts and then sends ``greeting`` (or
    nothing), keeping each connection open until closed."""

    def __init__(self, greeting: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.greeting = greeting
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)
            if self.greeting:
                conn.sendall(self.greeting)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture(params=["silent", "ssh"])
def listener(request: pytest.FixtureRequest) -> Iterator[_Listener]:
    greeting = b"" if request.param == "silent" else b"SSH-2.0-OpenSSH_9.2\r\n" * 4
    lst = _Listener(greeting)
    try:
        yield lst
    finally:
        lst.close()


def test_a_port_that_is_not_a_scheduler_is_one_error_line(
    listener: _Listener, bench_db: str, tmp_path: Path
) -> None:
    address = f"tcp://127.0.0.1:{listener.port}"
    proc = subprocess.run(
        pgsurge_cmd("--dask", address, "-n", "-S", "-T", "1", bench_db),
        capture_output=True,
        text=True,
        env=base_env(),
        cwd=tmp_path,
        timeout=90,  # it used to wait for ever
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert errors == [
        f'pgsurge: error: could not connect to the Dask scheduler "{address}": '
        + (
            "it accepted the connection but said nothing in 10 s: not a Dask scheduler"
            if not listener.greeting
            else "what answered is not a Dask scheduler"
        )
    ], proc.stderr
    assert "pgsurge: hint: Give the scheduler's own port (8786" in proc.stderr
    assert listener.accepted  # it was asked


def test_a_scheduler_that_is_not_there_is_found_before_the_target_is_touched(
    bench_db: str, tmp_path: Path
) -> None:
    # nothing listens on the port: the run said so only when it sought the
    # hosts, after its setup connection had vacuumed the target (hostile
    # finding); now before, with -n or without
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    proc = subprocess.run(
        pgsurge_cmd("--dask", address, "-S", "-T", "1", bench_db),
        capture_output=True,
        text=True,
        env=base_env(),
        cwd=tmp_path,
        timeout=90,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        f'pgsurge: error: could not connect to the Dask scheduler "{address}": '
        "Connection refused\n"
    )
    assert proc.stdout == ""  # no "starting vacuum...end."


def test_a_local_cluster_says_nothing_of_a_busy_dashboard_port(
    bench_db: str, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        try:
            held = socket.create_server(("127.0.0.1", 8787))
            stack.enter_context(held)
        except OSError:
            pass  # held already, by someone else: busy all the same
        with pytest.raises(OSError):
            socket.create_server(("127.0.0.1", 8787)).close()
        proc = subprocess.run(
            pgsurge_cmd(
                *("--dask", "local:2", "-n", "-S", "-t", "50", "-c", "2", "-j", "2"),
                bench_db,
            ),
            capture_output=True,
            text=True,
            env=base_env(),
            cwd=tmp_path,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert "processed: 100/100" in proc.stdout
    assert "8787" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    # one client on each host, said so
    assert proc.stderr.count("(1 client, clock") == 2, proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_coordinator_that_dies_waiting_for_busy_hosts_leaves_no_load(
    sig: signal.Signals, bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    """The second run's host tasks wait in the scheduler for the hosts the
    first one holds; its coordinator dies while they wait: when the first
    run ends, they must not start a load nobody watches. The first run
    ends when told (a Ctrl-C), not at a -T of its own: a second coordinator
    slow to start on a loaded box came after a -T 8 run had ended and took
    the hosts itself."""
    first = start_run(
        [
            *("--dask", cluster.address, "-n", "-S", "-T", "600", "-c", "2"),
            *("-j", "2", "-P", "1", bench_db),
        ],
        tmp_path,
    )
    second = None
    try:
        first.wait_for("progress: 1.0 s")
        first_load = cluster.load_processes()
        second = Run(
            [
                *("--dask", cluster.address, "-n", "-S", "-T", "60", "-c", "6"),
                *("-j", "2", bench_db),
            ],
            tmp_path,
        )
        second.wait_for("waiting for 2 load hosts: busy with another run", 30)
        second.proc.send_signal(sig)
        second.wait(30)
        first.proc.send_signal(signal.SIGINT)  # the hosts are free again
        assert first.wait(60) == -signal.SIGINT, first.stderr
        assert "run interrupted by SIGINT after" in first.stderr
        assert "lost" not in first.stderr, first.stderr
        # the first run's clients and workers go (a worker may outlive its
        # coordinator's exit by a moment: a listing on a loaded box found two);
        # then the second's 6 must never come
        wait_no_load(bench_db, first_load, time.monotonic(), SLACK_S)
        deadline = time.monotonic() + COORDINATOR_GRACE_S + SLACK_S
        while time.monotonic() < deadline:
            assert count_clients(bench_db) == 0
            assert cluster.load_processes() == set()
            time.sleep(0.3)
    finally:
        first.kill()
        if second is not None:
            second.kill()
