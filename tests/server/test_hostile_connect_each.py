"""Hostile cases of -C's one-connection-at-a-time wait (issue 22).

Under -C the C loop now waits for each transaction's connection in its
worker (``connect_wait`` in ``_fastloop_client.c``), as pgbench's
``PQconnectdb`` and the Python engine's ``ramp.open_one`` do. Each test is
a finding of the hostile pass over that wait: what ends it (-T's end, a
signal, the parent's Stop), what it delays, and what pgbench reports in
the same conditions.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.fix_run import (
    LONG_GRACE,
    PGSURGE,
    Loop,
    Outcome,
    UnixRelay,
    communicate_or_kill,
    killed_on_failure,
    run_pgbench,
    tool_env,
)

pytestmark = pytest.mark.server

#: how each variant of pgsurge runs: the C loop on threads (the default),
#: on processes, side by side (the old model), opening its connections
#: through Python's psycopg object, and the Python engine
VARIANTS: dict[str, tuple[Loop, dict[str, str]]] = {
    "c": ("c", {}),
    "c-processes": ("c", {"PGSURGE_WORKERS": "processes"}),
    "c-concurrent": ("c", {"PGSURGE_CONNECT": "concurrent"}),
    "c-python-opens": ("c", {"PGSURGE_PY_CONNECT": "1"}),
    "python": ("python", {}),
}


class _Silent(UnixRelay):
    """A relay forwarding its first ``forward`` connections and leaving
    every later one unanswered, with no ``connect_timeout``: a server that
    accepts and hangs before its greeting. ``accepted`` counts them all."""

    def __init__(self, dsn: str, directory: Path, forward: int) -> None:
        self.forward = forward
        self.accepted = 0
        self.cond = threading.Condition()
        super().__init__(dsn, directory)

    def serve(self, client: socket.socket) -> None:
        with self.cond:
            self.accepted += 1
            answer = self.accepted <= self.forward
            self.cond.notify_all()
        if answer:
            super().serve(client)

    def wait_accepted(self, count: int, timeout: float = 60) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.accepted >= count, timeout)


def _start(
    args: list[str], dsn: str, variant: str, cwd: Path | None = None
) -> subprocess.Popen[str]:
    """pgsurge ``args dsn`` in ``variant``, in its own process group (a
    hung run is killed whole by communicate_or_kill); with ``cwd``, in that
    directory with a 60 s grace (LONG_GRACE): an end that the parent's
    Stop after the grace would bring is then a minute away, and a bound
    tells it from the end under test by a margin no loaded box eats."""
    loop, env = VARIANTS[variant]
    return subprocess.Popen(
        [*(PGSURGE if cwd is None else LONG_GRACE), *args, dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=tool_env(env, loop=loop),
        start_new_session=True,
    )


def _ends_at_T(args: list[str], dsn: str, tmp_path: Path, variant: str) -> Outcome:
    """``args`` (a -C run with -T 2) through a relay that answers the set-up
    connection and five transactions' and then hangs: the run ends soon
    after -T, cleanly, with those five."""
    relay = _Silent(dsn, tmp_path, forward=6)
    try:
        t0 = time.monotonic()
        proc = _start(args, relay.dsn, variant, tmp_path)
        out, err = communicate_or_kill(proc, 90)
        elapsed = time.monotonic() - t0
    finally:
        relay.close()
    got = Outcome(proc.returncode, out, err)
    assert got.status == 0, err
    assert err == ""
    # soon after -T (the start-up included), not at the Stop after the
    # grace (60 s here) nor never
    assert elapsed < 20, f"{elapsed:.1f} s for -T 2"
    assert got.number("number of transactions actually processed:") == "5"
    return got


@pytest.mark.parametrize("jobs", [1, 2], ids=["j1", "j2"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_T_ends_while_a_connection_hangs(
    bench_db: str, pgbench_bin: Path, tmp_path: Path, variant: str, jobs: int
) -> None:
    """-C -T 2 with no connect_timeout: the setup connection and five
    transactions' are answered, every later one never is. pgbench's
    blocking connect waits forever (so did pgsurge, C loop and Python
    engine alike: nothing looked at -T's end during the wait). Now the run
    ends at -T: the clients still connecting finish without a transaction,
    nothing aborted, the report is pgbench's -T report (as a pgbench -T
    run against the server itself prints it) with the five transactions
    and their connection time only."""
    args = ["-n", "-S", "-C", "-c", "2", "-j", str(jobs), "-T", "2"]
    got = _ends_at_T(args, bench_db, tmp_path, variant)
    # the hung attempts (a second and more) are no connection time
    assert float(got.number("average connection time =").split()[0]) < 500
    ref = run_pgbench(pgbench_bin, args, bench_db, timeout=60)
    assert ref.status == 0, ref.stderr
    assert got.report == ref.report


@pytest.mark.parametrize("variant", ["c", "c-processes", "python"])
def test_T_ends_a_python_workload_while_a_connection_hangs(
    bench_db: str, tmp_path: Path, variant: str
) -> None:
    """As above with a Python workload (py-tpcb), whose generators the C
    loop steps holding the GIL (the wait gives it up): the run ends at -T
    with the five transactions whose connections were answered."""
    args = ["-n", "-b", "py-tpcb", "-C", "-c", "1", "-j", "1", "-T", "2"]
    got = _ends_at_T(args, bench_db, tmp_path, variant)
    assert "number of failed transactions: 0 (0.000%)" in got.stdout


@pytest.mark.parametrize(
    ("variant", "sig", "group"),
    [
        ("c", signal.SIGINT, True),
        ("c", signal.SIGTERM, False),
        ("c-processes", signal.SIGINT, True),
        ("c-processes", signal.SIGTERM, False),
        ("c-concurrent", signal.SIGINT, True),
        ("python", signal.SIGINT, True),
        ("python", signal.SIGTERM, False),
    ],
)
def test_a_signal_ends_a_hung_connect_at_once(
    bench_db: str, variant: str, sig: int, group: bool, tmp_path: Path
) -> None:
    """-C, the sixth transaction's connection never answered: one Ctrl-C
    (the whole group) or SIGTERM (the parent alone) ends the run within
    the end's 0.5 s grace for a connection still opening, with the five
    transactions' report. The first signal flags the end as -T's does, and
    the wait for a connection now ends on that flag; before, it ended only
    at the parent's Stop, sent after the grace: 60 s here (LONG_GRACE), so
    that the bound below, loose for a loaded box, tells the two apart."""
    relay = _Silent(bench_db, tmp_path, forward=6)
    args = ["-n", "-S", "-C", "-c", "1", "-j", "1", "-T", "60"]
    try:
        proc = _start(args, relay.dsn, variant, tmp_path)
        with killed_on_failure(proc):
            relay.wait_accepted(7)
        time.sleep(0.3)  # into the wait for the answer
        t0 = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = communicate_or_kill(proc, 90)
        elapsed = time.monotonic() - t0
    finally:
        relay.close()
    assert proc.returncode == -sig, err
    assert "died" not in err and "Traceback" not in err, err
    name = signal.Signals(sig).name
    assert f"pgsurge: run interrupted by {name} after " in err, err
    assert "number of transactions actually processed: 5\n" in out, out
    # the end's 0.5 s grace, not the Stop after the grace (60 s here)
    assert elapsed < 20, f"{elapsed:.2f} s after the signal"


class _StartingUp(UnixRelay):
    """A server that is starting up: each connection's startup packet is
    answered with pgbench's FATAL 57P03 ("cannot connect now"), on which
    libpq goes on to the next host of the conninfo, closing this socket
    and opening the next one (whose descriptor is usually the same
    number)."""

    def serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            head = _recv_exactly(client, 4)
            _recv_exactly(client, int.from_bytes(head, "big") - 4)
            fields = b"".join(
                code + text + b"\0"
                for code, text in (
                    (b"S", b"FATAL"),
                    (b"V", b"FATAL"),
                    (b"C", b"57P03"),
                    (b"M", b"the database system is starting up"),
                )
            )
            body = fields + b"\0"
            client.sendall(b"E" + (len(body) + 4).to_bytes(4, "big") + body)
            client.shutdown(socket.SHUT_RDWR)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        more = sock.recv(count - len(data))
        if not more:
            raise OSError("closed")
        data += more
    return data


@pytest.mark.parametrize("variant", ["c", "c-concurrent", "c-python-opens", "python"])
def test_connect_each_goes_on_to_the_next_host_of_one_starting_up(
    bench_db: str, pgbench_bin: Path, tmp_path: Path, variant: str
) -> None:
    """-C with ``host=A,B``, A a server starting up (57P03): libpq goes on
    to B within one PQconnectPoll call, on a new socket that usually has
    the old one's number. The C loop's epoll set lost the old socket when
    libpq closed it, and changing its events (EPOLL_CTL_MOD) of a number
    no longer in the set failed with ENOENT: side by side
    (PGSURGE_CONNECT=concurrent) the worker died of "No such file or
    directory" where pgbench runs every transaction."""
    starting = tmp_path / "a"
    starting.mkdir()
    relay = _StartingUp(bench_db, starting)
    params = conninfo_to_dict(bench_db)
    dsn = make_conninfo(
        bench_db,
        host=f"{starting},{params['host']}",
        port=f"5432,{params.get('port') or 5432}",
    )
    args = ["-n", "-S", "-C", "-c", "2", "-j", "1", "-t", "20"]
    try:
        ref = run_pgbench(pgbench_bin, args, dsn, timeout=60)
        proc = _start(args, dsn, variant)
        out, err = communicate_or_kill(proc, 60)
    finally:
        relay.close()
    got = Outcome(proc.returncode, out, err)
    assert ref.status == 0, ref.stderr
    assert got.status == 0, err
    assert got.stderr == ref.stderr.replace("pgbench:", "pgsurge:")
    assert got.number("number of transactions actually processed:") == "40/40"
    assert got.report == ref.report


class _SlowGreeting(UnixRelay):
    """A relay whose server answers each new connection ``delay`` seconds
    late, and which records, per connection, whether the client ended it
    with a Terminate message (a clean close) rather than cutting it."""

    def __init__(self, dsn: str, directory: Path, delay: float) -> None:
        self.delay = delay
        self.lock2 = threading.Lock()
        self.clean: list[bool] = []
        super().__init__(dsn, directory)

    def serve(self, client: socket.socket) -> None:
        server = self.connect()

        def to_client() -> None:
            time.sleep(self.delay)  # the greeting comes late
            with contextlib.suppress(OSError):
                while data := server.recv(65536):
                    client.sendall(data)
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)

        threading.Thread(target=to_client, daemon=True).start()
        tail = b""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                tail = (tail + data)[-5:]
                server.sendall(data)
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)
        with self.lock2:
            self.clean.append(tail == b"X\x00\x00\x00\x04")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_end_waits_for_a_connection_a_server_answers(
    bench_db: str, tmp_path: Path, variant: str
) -> None:
    """-T's end comes while a connection is opening on a server that
    answers (150 ms late): the connection is waited for, its transaction
    runs as pgbench's does after its PQconnectdb, and every connection is
    closed with a Terminate. Given up at once at the end, each -T run cut
    one connection a worker mid-start-up, which the server logged as
    "could not send data to client: Broken pipe" and a FATAL."""
    relay = _SlowGreeting(bench_db, tmp_path, 0.15)
    try:
        proc = _start(
            ["-n", "-S", "-C", "-c", "2", "-j", "2", "-T", "2"], relay.dsn, variant
        )
        with killed_on_failure(proc):
            out, err = communicate_or_kill(proc, 60)
    finally:
        relay.close()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert "number of failed transactions: 0 (0.000%)" in out, out
    assert relay.clean and all(relay.clean), relay.clean
