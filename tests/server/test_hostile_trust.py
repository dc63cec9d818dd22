"""Hostile-tester regressions on what a run keeps when the world around it
misbehaves (signals, a server that hangs, files and other users).

* A run interrupted (SIGTERM, Ctrl-C) while its server hung (a stopped
  postmaster, a host gone without a reset): the worker's cancel request
  (``PQcancel``, no time limit) blocked until the parent killed the worker
  after its grace, and everything the worker had measured was lost
  ("number of transactions actually processed: 0", "worker died: killed
  by signal 9", the run called aborted). The cancel requests now take at
  most ``engine.interrupt.CANCEL_S`` together, and the report counts what
  ran.
* The same with ``--server-stats`` or ``--waits``: the monitor's end
  snapshot (or its sampling thread, which the end joins) waited in
  ``PQexec`` for a server that never answered. The report never came,
  and not even the third SIGTERM, which ends the program at once, did
  anything (no signal handler runs while C waits). The monitor now
  waits for an answer at most ``insight.own.ANSWER_WAIT_S``, in steps
  that let the handlers run; so does ``--pooler-admin``'s console (a
  PgBouncer that hung).
* ``--server-stats`` lists the server's settings that are not the
  defaults in the --json file: a standby's ``primary_conninfo`` went
  there with its replication password in clear (the HTML page and the
  store masked it). Settings are masked where they are read now.
* ``--server-stats``' top statements: ``pg_stat_statements`` keeps a
  utility statement's literals, so ``ALTER ROLE … PASSWORD '…'`` run by
  any session during the run showed the password in the report, the
  JSON, the page and the store. SQL's ``PASSWORD '…'`` is masked now
  (``pgsurge.redact``).
* ``ab``/``sweep``/``capacity`` killed with SIGKILL (a CI timeout, the OOM
  killer): the current run, in a process group of its own, went on
  loading the server for its whole ``-T``, under the next experiment or a
  ``--resume``. The kernel now sends it SIGTERM when the experiment dies
  (``PR_SET_PDEATHSIG``): it stops and keeps what it measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.fix_pooler import start_pooler
from tests.fix_run import PGSURGE, UnixRelay, tool_env

pytestmark = pytest.mark.server

TIMEOUT = 120  # a loaded 2-core machine


class FreezingRelay(UnixRelay):
    """A relay that forwards until :meth:`freeze`, then forwards nothing more
    either way and leaves new connections unanswered: a server that hangs
    (SIGSTOP) while its clients wait for results."""

    def __init__(self, dsn: str, directory: Path) -> None:
        self.frozen = threading.Event()
        super().__init__(dsn, directory)

    def freeze(self) -> None:
        self.frozen.set()

    def serve(self, client: socket.socket) -> None:
        if self.frozen.is_set():
            return  # accepted (the kernel's backlog), never answered
        server = self.connect()
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()
        self._pump(client, server)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if self.frozen.is_set():
                    return  # dropped: the bytes stop here, the socket stays open
                dst.sendall(data)


class QueryFreezingRelay(FreezingRelay):
    """A :class:`FreezingRelay` that freezes by itself at the first query a
    client sends: the connection opens, the answer never comes."""

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if data[:1] == b"Q":  # a simple query (the server sends none)
                    self.freeze()
                if self.frozen.is_set():
                    return
                dst.sendall(data)


#: reads the counter after the run as the runner does, in a process of its
#: own (libpq's blocking connect holds the GIL: in the test's process the
#: relay's threads could not forward it)
READ_AFTER = """
import sys
from pgsurge.cli.options import parse_command_line
from pgsurge.runner import setup
setup.AFTER_RUN_WAIT_S = 5  # libpq's connect_timeout is at least 2
cfg = parse_command_line(["-n", "-S", sys.argv[1]], environ={})
print(setup.read_counter_after(cfg, None, "SELECT 42"))
"""


@pytest.mark.parametrize("hangs", ["", "connecting", "answering"])
def test_the_counter_read_after_the_run_gives_up_on_a_hung_server(
    fresh_db: str, tmp_path: Path, hangs: str
) -> None:
    # a bundled workload (tpcc-like) reads its counter again after the run
    # on a new connection: connecting and its query waited with no limit,
    # so on a server that hung at the end the report's figures never came
    relay = (QueryFreezingRelay if hangs == "answering" else FreezingRelay)(
        fresh_db, tmp_path
    )
    if hangs == "connecting":
        relay.freeze()
    env = {k: v for k, v in tool_env(None).items() if k != "PGCONNECT_TIMEOUT"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", READ_AFTER, relay.dsn],
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT,  # it never came back before
            check=False,
        )
    finally:
        relay.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("None\n" if hangs else "42\n"), proc.stderr


def _run_until_frozen(
    dsn: str, tmp_path: Path, loop: str, extra: list[str]
) -> tuple[int, str, str, Path]:
    """A run through a :class:`FreezingRelay` frozen once it has committed
    some transactions, then SIGTERM: (status, stdout, stderr, --json file)."""
    relay = FreezingRelay(dsn, tmp_path)
    out = tmp_path / "run.json"
    args = ["-n", "-c", "4", "-j", "2", "-T", "600", "--json", str(out), *extra]
    proc = subprocess.Popen(
        [*PGSURGE, *args, relay.dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=tool_env(None, loop=loop),  # type: ignore[arg-type]
    )
    try:
        # transactions committed (each TPC-B one inserts a history row),
        # then the server stops answering in the middle of the next ones
        deadline = time.monotonic() + TIMEOUT
        while _history_rows(dsn) < 20:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no transaction committed"
            time.sleep(0.2)
        relay.freeze()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        relay.close()
    return proc.returncode, stdout.decode(), stderr.decode(), out


def _processed(stdout: str) -> int:
    line = next(
        line
        for line in stdout.splitlines()
        if line.startswith("number of transactions actually processed:")
    )
    return int(line.split(":")[1])


def _history_rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pgbench_history").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["c", "python"])
def test_an_interrupted_run_on_a_hung_server_keeps_what_it_measured(
    bench_db: str, tmp_path: Path, loop: str
) -> None:
    status, stdout, stderr, out = _run_until_frozen(bench_db, tmp_path, loop, [])
    assert status == -signal.SIGTERM, stderr
    assert "died" not in stderr and "aborted" not in stderr, stderr
    assert "run interrupted by SIGTERM" in stderr
    assert _processed(stdout) >= 20, stdout
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is not None
    assert doc["totals"]["processed"] >= 20


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--server-stats", "--waits"])
def test_the_monitor_of_a_run_on_a_hung_server_gives_up(
    bench_db: str, tmp_path: Path, option: str
) -> None:
    status, stdout, stderr, out = _run_until_frozen(
        bench_db, tmp_path, "auto", [option]
    )
    assert status == -signal.SIGTERM, stderr
    assert "run interrupted by SIGTERM" in stderr
    assert "the server did not answer within 15 s" in stderr
    assert "Traceback" not in stderr
    assert _processed(stdout) >= 20, stdout
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is not None
    assert doc["totals"]["processed"] >= 20


def _run_with_outputs(
    args: list[str], dsn: str, cwd: Path
) -> subprocess.CompletedProcess[bytes]:
    """pgsurge ``args`` with every output a secret could reach: an HTML
    page and a store beside the test's --json, in ``cwd``."""
    return subprocess.run(
        [*PGSURGE, *args, "--html", "r.html", "--store=s.sqlite", dsn],
        capture_output=True,
        cwd=cwd,
        env=tool_env(None),
        timeout=TIMEOUT,
        check=False,
    )


def test_server_stats_settings_hold_no_password(
    pgss_server: str, tmp_path: Path
) -> None:
    # a standby's primary_conninfo holds the replication password (as
    # pg_basebackup -R writes it); a setting named for a secret may hold one
    secret = "HostileSetting7"
    with psycopg.connect(pgss_server, autocommit=True) as conn:
        conn.execute(
            "ALTER SYSTEM SET primary_conninfo = "
            f"'host=10.0.0.9 user=repl password={secret}'"
        )
        conn.execute(f"ALTER SYSTEM SET ssl_passphrase_command = 'echo {secret}x'")
        conn.execute("SELECT pg_reload_conf()")
    (tmp_path / "one.sql").write_text("SELECT 1;\n")
    args = ["-n", "-f", "one.sql", "-t", "5", "--server-stats", "--json", "r.json"]
    deadline = time.monotonic() + TIMEOUT
    while True:  # the reload reaches new sessions at once, but not in order
        proc = _run_with_outputs(args, pgss_server, tmp_path)
        assert proc.returncode == 0, proc.stderr.decode()
        doc = json.loads((tmp_path / "r.json").read_text())
        shown = {s["name"]: s["setting"] for s in doc["server_stats"]["settings"]}
        if "ssl_passphrase_command" in shown or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert shown["primary_conninfo"] == "host=10.0.0.9 user=repl password=********"
    assert shown["ssl_passphrase_command"] == "********"
    assert secret.encode() not in proc.stdout + proc.stderr
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path


def test_server_stats_statements_hold_no_password(pgss_db: str, tmp_path: Path) -> None:
    # pg_stat_statements keeps a utility statement's literals: a password
    # set during the run (here by the run itself; by any session of the
    # database as well) was among the top statements, in the report, the
    # JSON, the page and the store
    secret = "HostileStmt9"
    role = "hostile_stmt_role"
    with psycopg.connect(pgss_db, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role}")
    (tmp_path / "pw.sql").write_text(f"ALTER ROLE {role} PASSWORD '{secret}';\n")
    args = ["-n", "-f", "pw.sql", "-t", "3", "--server-stats", "--json", "r.json"]
    try:
        proc = _run_with_outputs(args, pgss_db, tmp_path)
    finally:
        with psycopg.connect(pgss_db, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}")
    assert proc.returncode == 0, proc.stderr.decode()
    doc = json.loads((tmp_path / "r.json").read_text())
    queries = [s["query"] for s in doc["server_stats"]["deltas"]["statements"]]
    assert f"ALTER ROLE {role} PASSWORD '********'" in queries
    assert secret.encode() not in proc.stdout + proc.stderr
    del doc["scripts"]  # the script's own lines, as written (-r prints them)
    assert secret not in json.dumps(doc)
    for name in ("r.html", "s.sqlite"):
        assert secret.encode() not in (tmp_path / name).read_bytes(), name


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()]


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return status != "Z"


@pytest.mark.slow
def test_a_killed_experiment_takes_its_run_with_it(
    bench_db: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    own = ["--runs", "1", "--warmup", "0", "--out", str(out)]
    ab = subprocess.Popen(
        [*PGSURGE, "ab", *own, "--", "-S", "-c", "1", "-T", "600", "-P", "1", bench_db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=tool_env(None),
    )
    runs: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        log = out / "run-1-A.log"
        while not (log.exists() and "progress:" in log.read_text()):
            assert ab.poll() is None, "ab ended"
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.2)
        runs = _children(ab.pid)
        assert len(runs) == 1
        ab.kill()  # SIGKILL: no handler of ab's runs
        ab.wait()
        while _alive(runs[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(runs[0]), "the run went on without its experiment"
    finally:
        for pid in runs:  # an orphan's workers die with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if ab.poll() is None:
            ab.kill()
            ab.wait()
    # it stopped as on kill: what it measured is kept, marked interrupted
    doc = json.loads((out / "run-1-A.json").read_text())
    assert doc["interrupted"]["signal"] == "SIGTERM"
    assert doc["totals"]["processed"] > 0


@pytest.mark.slow
def test_a_hung_pooler_console_is_given_up(
    server_dsn: str, bench_db: str, tmp_path: Path
) -> None:
    # --pooler-admin's console commands waited in PQexec with no limit: a
    # PgBouncer that hung (stopped) held the interrupted run's report for
    # ever, and its signals
    pooler = start_pooler(server_dsn, "session")
    try:
        (tmp_path / "s.sql").write_text("select pg_sleep(0.01);\n")
        result = tmp_path / "r.json"
        args = ["-n", "-f", "s.sql", "-c", "2", "-T", "600", "-P", "1"]
        args += [f"--pooler-admin={pooler.admin_dsn}", f"--json={result}"]
        proc = subprocess.Popen(
            [*PGSURGE, *args, pooler.pooled(bench_db)],
            cwd=tmp_path,
            env=tool_env(None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr is not None
            progress = 0
            while progress < 3:  # the console was read at the first boundaries
                line = proc.stderr.readline()
                assert line, proc.communicate()
                progress += line.startswith("progress: ")
            pooler.process.send_signal(signal.SIGSTOP)
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=TIMEOUT)
        finally:
            pooler.process.send_signal(signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        pooler.stop()
        shutil.rmtree(pooler.directory, ignore_errors=True)
    assert proc.returncode == -signal.SIGTERM, err
    assert "did not answer within 15 s" in err, err
    assert "Traceback" not in err
    section = json.loads(result.read_text())["pooler_admin"]
    assert section["reads"] >= 1 and section["xacts"] > 0, section
    assert section["stopped"], section
