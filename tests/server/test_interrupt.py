"""Never lose a measurement (issue 11): interrupts, dead workers, logs in time.

Real runs of ``python -m pgsurge`` against the test server, signalled from
here: the first SIGINT/SIGTERM leaves the report, the ``--json`` document
(marked interrupted) and a complete ``-l`` log, then the program dies of
the signal; ``kill -9`` of a worker names it; a slow ``-R`` run's log
reaches the file while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.fix_run import (
    COMMITTED,
    LONG_GRACE,
    SELECT_ONLY,
    plain_env,
    pump,
    running_like,
    stop_listening,
    wait_logged,
    wait_on_server,
    wait_stopping,
)
from tests.fix_run import communicate_or_kill as _communicate
from tests.fix_run import killed_on_failure as _killed_on_failure
from tests.fix_run import log_lines as _log_lines
from tests.fix_run import start_in_session as _start
from tests.fix_run import valid_json as _valid
from tests.fix_run import worker_pids as _workers

pytestmark = pytest.mark.server


@pytest.fixture
def bench_db(fresh_db: str, pgbench_bin: Path) -> str:
    """The fresh database, initialized by the real pgbench at scale 1."""
    subprocess.run(
        [str(pgbench_bin), "-i", "-s", "1", "-q", fresh_db],
        check=True,
        capture_output=True,
        env=plain_env(),
    )
    return fresh_db


#: the tests of what happens to worker *processes* (killed, their pipes):
#: not threads, which a run of the C loop has by default
PROCESSES = {"PGSURGE_WORKERS": "processes"}


@pytest.mark.parametrize(
    ("sig", "group", "fastloop"),
    [
        (signal.SIGINT, True, ""),  # Ctrl-C: the whole process group
        (signal.SIGTERM, False, ""),  # kill: the parent alone
        (signal.SIGINT, True, "1"),
    ],
)
def test_interrupt_keeps_report_json_log(
    bench_db: str, tmp_path: Path, sig: int, group: bool, fastloop: str
) -> None:
    """Ctrl-C well into a ``-T 30 -l --json`` run: report, valid JSON
    marked interrupted, a log line per finished transaction and no cut
    line, and the process dies of the signal."""
    started = time.monotonic()
    proc = _start(
        ["-c", "4", "-j", "2", "-T", "30", "-l", "--json", "r.json", bench_db],
        tmp_path,
        PGSURGE_NO_FASTLOOP=fastloop,
    )
    with _killed_on_failure(proc):
        wait_logged(proc, tmp_path)
    # the run started before its first line: it is over 1.5 s old at the
    # signal, whatever the box's load
    time.sleep(1.5)
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, err = _communicate(proc)
    # the transactions in flight finish (the grace is short): the end is
    # the signal's, not -T 30's, some 25 s later
    assert time.monotonic() - t0 < 15, "it ran on after the signal"
    lifetime = time.monotonic() - started
    assert proc.returncode == -sig, err
    assert "number of transactions actually processed: " in out, err
    name = signal.Signals(sig).name
    assert f"pgsurge: run interrupted by {name} after " in err, err
    assert "Traceback" not in err
    processed = int(out.split("actually processed: ")[1].split()[0])
    assert processed > 0
    doc = json.loads((tmp_path / "r.json").read_text())
    _valid(doc)
    assert doc["interrupted"]["signal"] == name
    assert 1.5 < doc["interrupted"]["after_s"] < lifetime
    assert doc["totals"]["transactions"] == processed
    assert len(_log_lines(tmp_path)) == processed
    assert not doc["aborted"]


def test_interrupt_fast_path_t(bench_db: str, tmp_path: Path) -> None:
    """A -t run on the C loop stops too (it reads the same flag)."""
    proc = _start(
        ["-n", "-S", "-c", "2", "-j", "1", "-t", "100000000", bench_db], tmp_path
    )
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like(SELECT_ONLY, 2))
    os.killpg(proc.pid, signal.SIGINT)
    out, err = _communicate(proc)
    assert proc.returncode == -signal.SIGINT, err
    assert "actually processed: " in out, err
    assert "interrupted by SIGINT" in err


def test_interrupt_grace_cancels_long_statement(bench_db: str, tmp_path: Path) -> None:
    """A statement that outlives the grace is cancelled through libpq; the
    report still comes, the server has no session left."""
    path = tmp_path / "slow.sql"
    path.write_text("select pg_sleep(60);\n")
    proc = _start(["-n", "-f", str(path), "-c", "2", "-T", "120", bench_db], tmp_path)
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like("select pg_sleep(60)%", 2))
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = _communicate(proc)
    # cancelled at the grace's end (2 s), not waited for (60 s)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == -signal.SIGTERM, err
    assert "actually processed: 0" in out, err
    assert "interrupted by SIGTERM" in err
    with psycopg.connect(bench_db, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = conn.execute(
                "select count(*) from pg_stat_activity where query like "
                "'select pg_sleep(60)%' and pid <> pg_backend_pid()"
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.1)
        assert row is not None and row[0] == 0


def test_second_signal_cancels_at_once(bench_db: str, tmp_path: Path) -> None:
    """A second Ctrl-C skips the grace (the long statements are cancelled
    now) but keeps the report of what ran; a third ends it with none."""
    path = tmp_path / "slow.sql"
    path.write_text("select pg_sleep(60);\n")
    args = ["-n", "-f", str(path), "-c", "2", "-T", "120", bench_db]
    proc = _start(args, tmp_path, LONG_GRACE)
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like("select pg_sleep(60)%", 2))
        os.killpg(proc.pid, signal.SIGINT)
        wait_stopping(proc, tmp_path)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = _communicate(proc, 90)
    # not at the end of the grace (60 s here) nor of the statements'
    assert time.monotonic() - t0 < 20, "the second signal did not skip the grace"
    assert proc.returncode == -signal.SIGINT, err
    assert "actually processed: 0" in out, err
    assert "pgsurge: run interrupted by SIGINT after " in err
    assert "Traceback" not in err


def test_third_signal_ends_at_once(bench_db: str, tmp_path: Path) -> None:
    path = tmp_path / "slow.sql"
    path.write_text("select pg_sleep(60);\n")
    args = ["-n", "-f", str(path), "-c", "2", "-T", "120", bench_db]
    proc = _start(args, tmp_path, LONG_GRACE)
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like("select pg_sleep(60)%", 2))
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the run stops gracefully
        wait_stopping(proc, tmp_path)
    # two more, both pending at once (two SIGTERMs would make one): the
    # second's Stop cannot have brought the report before the third. Sent
    # to the stopped process: sent back to back to a running one, the
    # first was at times handled, and its report out, before the second
    # came (a loaded box's stall between the two sends)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGSTOP)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    os.kill(proc.pid, signal.SIGCONT)
    out, err = _communicate(proc, 90)
    assert time.monotonic() - t0 < 20, "not at once (the grace is 60 s here)"
    # of the third, whichever of the two was handled last
    assert proc.returncode in (-signal.SIGINT, -signal.SIGTERM), err
    assert "actually processed" not in out
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("first", "gap"),
    [
        (signal.SIGINT, 0.0),  # 0: one pending signal
        (signal.SIGINT, 0.05),
        (signal.SIGINT, 0.3),
        (signal.SIGTERM, 0.05),  # kill, then Ctrl-C
    ],
)
def test_two_quick_ctrl_c_keep_note_and_json(
    bench_db: str, tmp_path: Path, first: int, gap: float
) -> None:
    """Two Ctrl-Cs in quick succession mid-run: whether the second lands
    in the grace or in the report, the report, the "interrupted" note and
    the --json/--html files all come (they lacked the note and the JSON)."""
    proc = _start(
        [
            *("-c", "4", "-j", "2", "-T", "30"),
            *("--json", "r.json", "--html", "r.html", bench_db),
        ],
        tmp_path,
    )
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, COMMITTED)
    if first == signal.SIGINT:
        os.killpg(proc.pid, first)
    else:
        proc.send_signal(first)
    time.sleep(gap)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = _communicate(proc)
    name = signal.Signals(first).name
    assert proc.returncode == -first, err  # the first signal's death
    assert "number of transactions actually processed: " in out, err
    assert f"pgsurge: run interrupted by {name} after " in err, err
    assert "died" not in err and "aborted" not in err, err
    assert "Traceback" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["interrupted"]["signal"] == name
    assert not doc["aborted"]
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")


@pytest.mark.parametrize("progress", [False, True])
def test_dead_worker_is_named(bench_db: str, tmp_path: Path, progress: bool) -> None:
    """``kill -9`` of one worker (the OOM killer): named, the others stop,
    the report of what the parent received, status 2."""
    extra = ["-P", "1"] if progress else []
    proc = _start(
        ["-n", "-S", "-c", "4", "-j", "2", "-T", "60", *extra, bench_db],
        tmp_path,
        **PROCESSES,
    )
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like(SELECT_ONLY, 4))
    victim = _workers(proc.pid)[1]
    os.kill(victim, signal.SIGKILL)
    out, err = _communicate(proc)
    assert proc.returncode == 2, err
    assert f"pgsurge: error: worker 1 (pid {victim}) died: killed by signal 9\n" in err
    assert "actually processed: " in out, err
    assert int(out.split("actually processed: ")[1].split()[0]) > 0
    assert "pgsurge: error: Run was aborted; the above results are incomplete." in err
    assert "Traceback" not in err


def test_rate_log_reaches_file_within_2s(bench_db: str, tmp_path: Path) -> None:
    """A ``-R 10`` run's log has lines long before a buffer's worth (they
    were buffered 8192 bytes at a time: still empty after 8 s at -R 50).
    The log's first bytes are looked at as soon as there are any: fewer
    than 8192 of them (at -R 10, some 20 s of lines), and no cut line; then
    it grows, a few lines at a time, while the run goes on."""
    proc = _start(["-n", "-S", "-R", "10", "-T", "120", "-l", bench_db], tmp_path)
    try:
        wait_logged(proc, tmp_path)
        first = sum(p.stat().st_size for p in tmp_path.glob("pgbench_log.*"))
        assert 0 < first < 8192, first
        _log_lines(tmp_path)  # whole lines only
        deadline = time.monotonic() + 60
        while len(_log_lines(tmp_path)) < 5:
            assert proc.poll() is None
            assert time.monotonic() < deadline, "the log does not grow"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        _communicate(proc)
    assert proc.returncode == -signal.SIGINT


def _limit_file_size() -> None:
    # a full disk, without mounting one: writes past 64 KiB fail (EFBIG)
    # instead of killing the writer with SIGXFSZ (ignored: kept across exec)
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))


@pytest.mark.parametrize(
    "loop", [{"PGSURGE_FASTLOOP": "require"}, {"PGSURGE_NO_FASTLOOP": "1"}]
)
def test_log_write_failure_keeps_the_run(
    bench_db: str, tmp_path: Path, loop: dict[str, str]
) -> None:
    """A log that cannot be written (disk full, quota) costs the log, not
    the run: pgbench ignores its write errors and reports; pgsurge reports
    too, says once per file that the log is incomplete, and cuts each file
    back to whole lines."""
    proc = subprocess.run(
        [
            # -t: each client logs 5000 lines (well over 64 KiB) however
            # slow the box (2 s of -T were not always enough under load)
            *(sys.executable, "-m", "pgsurge", "-n", "-S", "-t", "5000"),
            *("-c", "2", "-j", "2", "-l", "--log-prefix", "full", bench_db),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**plain_env(), **loop},
        preexec_fn=_limit_file_size,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "number of transactions actually processed:" in proc.stdout
    assert "tps = " in proc.stdout
    logs = sorted(tmp_path.glob("full.*"))
    assert len(logs) == 2
    warnings = [ln for ln in proc.stderr.splitlines() if "could not write" in ln]
    # each file hit the limit (5000 lines of select-only are over 64 KiB)
    assert sorted(warnings) == sorted(
        f'pgsurge: warning: could not write log file "{p.name}": '
        "File too large; the log is incomplete"
        for p in logs
    ), proc.stderr
    for p in logs:
        data = p.read_bytes()
        assert 0 < len(data) <= 65536
        assert data.endswith(b"\n")  # no cut line
        for line in data.decode().splitlines():
            assert len(line.split()) == 6, line


@pytest.mark.parametrize("program", ["pgsurge", "pgbench"])
def test_ctrl_c_during_init_cancels_the_copy(
    fresh_db: str, tmp_path: Path, pgbench_bin: Path, program: str
) -> None:
    """pgbench's init does not die of Ctrl-C: it sends the server a cancel
    request ("Cancel request sent"), the running COPY fails, and init ends
    with that error (status 1). pgsurge does the same; pgbench is checked
    against the same expectations."""
    cmd = (
        [sys.executable, "-m", "pgsurge"]
        if program == "pgsurge"
        else [str(pgbench_bin)]
    )
    proc = subprocess.Popen(
        [*cmd, "-i", "-s", "20", fresh_db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=plain_env(),
        start_new_session=True,  # so that _communicate can kill it all
    )
    assert proc.stderr is not None
    seen: list[str] = []
    with _killed_on_failure(proc):
        for line in proc.stderr:  # until the COPY of pgbench_accounts is under way
            seen.append(line)
            if "of pgbench_accounts done" in line:
                break
    proc.send_signal(signal.SIGINT)
    _, rest = _communicate(proc, 60)
    err = "".join(seen) + rest
    assert proc.returncode == 1, err
    assert "Cancel request sent\n" in err
    assert "ERROR:  canceling statement due to user request\n" in err
    assert err.endswith(f"{program}: error: PQendcopy failed\n"), err
    assert "done in" not in err


class _SilentServer:
    """A TCP listener that accepts connections and never answers (a server
    hung before its greeting), optionally forwarding the first ``forward``
    connections to ``target`` (a real server: the setup connection gets
    through, the workers' hang)."""

    def __init__(self, target: tuple[int, object] | None = None, forward: int = 0):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._cond = threading.Condition()
        self._target, self._forward = target, forward
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._held.append(conn)
            if self._target is not None and self.accepted < self._forward:
                family, address = self._target
                upstream = socket.socket(family)  # type: ignore[call-overload]
                upstream.connect(address)
                self._held.append(upstream)
                for a, b in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=pump, args=(a, b), daemon=True).start()
            with self._cond:
                self.accepted += 1
                self._cond.notify_all()

    def wait_accepted(self, count: int, timeout: float = 60) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.accepted >= count, timeout)

    def close(self) -> None:
        stop_listening(self.sock)
        for conn in self._held:
            conn.close()


def _upstream(dsn: str) -> tuple[int, object]:
    """The socket family and address of the server of ``dsn``."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    host = str(params.get("host") or "/tmp")
    port = int(str(params.get("port") or 5432))
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


def _interrupt_connecting(
    args: list[str],
    tmp_path: Path,
    server: _SilentServer,
    accepts: int,
    prog: list[str] | None = None,
) -> tuple[float, subprocess.Popen[str], str]:
    """Start ``args``, wait until the listener accepted ``accepts``
    connections (it is connecting: no timing guess), give it a moment to
    sit in the wait, Ctrl-C its process group; the seconds to its exit."""
    proc = _start(args, tmp_path, prog)
    with _killed_on_failure(proc):
        server.wait_accepted(accepts)
    time.sleep(0.3)  # into the wait for the answer (the bound runs from the signal)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = _communicate(proc, 30)
    return time.monotonic() - t0, proc, err


@pytest.mark.parametrize(
    "args",
    [
        ["-c", "1", "-T", "60"],  # the parent's setup connection
        ["-c", "2", "-j", "2", "-T", "60"],
        ["-i", "-s", "1"],  # init's connection
    ],
    ids=["setup", "setup-j2", "init"],
)
@pytest.mark.parametrize("program", ["pgsurge", "pgbench"])
def test_ctrl_c_while_connecting_to_a_silent_server(
    tmp_path: Path, pgbench_bin: Path, args: list[str], program: str
) -> None:
    """A server that accepts and never answers: Ctrl-C ends the program at
    once by the signal, as it ends pgbench (it was ignored: libpq's blocking
    connect retries its poll, so Python's handler never ran)."""
    server = _SilentServer()
    try:
        cmd = [*args, "-h", "127.0.0.1", "-p", str(server.port), "db"]
        prog = [str(pgbench_bin)] if program == "pgbench" else None
        elapsed, proc, err = _interrupt_connecting(cmd, tmp_path, server, 1, prog)
    finally:
        server.close()
    assert proc.returncode == -signal.SIGINT, err
    # at once: a connection never answered waits forever (no
    # connect_timeout); the bound leaves a loaded box its stalls
    assert elapsed < 10, f"{elapsed:.2f} s after the signal"
    assert "Traceback" not in err


def test_ctrl_c_while_workers_connect(fresh_db: str, tmp_path: Path) -> None:
    """The setup connection gets through, the workers' connections hang:
    Ctrl-C still ends the run at once, workers and all."""
    server = _SilentServer(_upstream(fresh_db), forward=1)
    script = tmp_path / "one.sql"
    script.write_text("select 1;\n")
    target = psycopg.conninfo.make_conninfo(
        fresh_db, host="127.0.0.1", port=str(server.port)
    )
    try:
        args = ["-n", "-f", str(script), "-c", "2", "-j", "2", "-T", "60", target]
        elapsed, proc, err = _interrupt_connecting(args, tmp_path, server, 3)
    finally:
        server.close()
    assert proc.returncode == -signal.SIGINT, err
    assert elapsed < 10, f"{elapsed:.2f} s after the signal (a hang is forever)"
    assert "Traceback" not in err


@pytest.mark.parametrize("fastloop", ["", "1"], ids=["c", "python"])
def test_ctrl_c_while_a_connect_each_transaction_hangs_keeps_what_ran(
    bench_db: str, tmp_path: Path, fastloop: str
) -> None:
    """-C with no connect_timeout: the setup connection and five
    transactions' get through, the sixth's is never answered. Ctrl-C keeps
    the five: the Python engine's connect watches the worker's pipe, so the
    parent's Stop ends it (libpq's blocking connect retried its poll, the
    worker was killed after the grace and the report said 0 transactions,
    hostile finding); the C loop's wait for a -C connection watches the
    stop and signal descriptors too."""
    server = _SilentServer(_upstream(bench_db), forward=6)
    target = psycopg.conninfo.make_conninfo(
        bench_db, host="127.0.0.1", port=str(server.port)
    )
    args = ["-n", "-S", "-C", "-c", "1", "-j", "1", "-T", "60", target]
    try:
        proc = _start(args, tmp_path, PGSURGE_NO_FASTLOOP=fastloop)
        with _killed_on_failure(proc):
            server.wait_accepted(7)
        time.sleep(0.3)  # into the wait for the answer
        os.killpg(proc.pid, signal.SIGINT)
        out, err = _communicate(proc, 30)
    finally:
        server.close()
    assert proc.returncode == -signal.SIGINT, err
    assert "died" not in err and "Traceback" not in err, err
    assert "pgsurge: run interrupted by SIGINT after " in err, err
    assert "number of transactions actually processed: 5\n" in out, out


def test_interrupted_run_with_store_says_it_was_not_stored(
    bench_db: str, tmp_path: Path
) -> None:
    """--store and Ctrl-C: the report and --json are out, the store holds
    no cut run, and stderr says so (it used to be silent)."""
    store = tmp_path / "s.sqlite"
    proc = _start(
        ["-S", "-c", "1", "-T", "30", "--json", "r.json", f"--store={store}", bench_db],
        tmp_path,
    )
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like(SELECT_ONLY, 1))
        os.killpg(proc.pid, signal.SIGINT)
        out, err = _communicate(proc)
    assert proc.returncode == -signal.SIGINT, err
    assert "actually processed: " in out, err
    assert err.endswith(
        "pgsurge: the run was not stored: it was interrupted by SIGINT\n"
    ), err
    assert json.loads((tmp_path / "r.json").read_text())["interrupted"]
    assert "Traceback" not in err


def test_a_failed_output_loses_none_of_the_others(
    bench_db: str, tmp_path: Path
) -> None:
    """--json on a full device (/dev/full): the HTML page is still written
    and the run still stored (both were skipped after the JSON error), then
    the one error line and status 1."""
    store = tmp_path / "s.sqlite"
    html = tmp_path / "r.html"
    args = ["-S", "-c", "1", "-T", "1", "--json", "/dev/full", "--html", str(html)]
    proc = _start([*args, f"--store={store}", bench_db], tmp_path)
    with _killed_on_failure(proc):
        out, err = _communicate(proc, timeout=60)
    assert proc.returncode == 1, err
    assert "actually processed: " in out, err
    assert err.endswith(
        'pgsurge: error: could not write JSON result to "/dev/full": '
        "No space left on device\n"
    ), err
    assert f"pgsurge: stored as run 1 in {store}\n" in err
    assert "<html" in html.read_text()
    assert "Traceback" not in err


def _ignoring(*signums: int):  # type: ignore[no-untyped-def]
    """A preexec_fn: the child starts with ``signums`` ignored, as ``cmd &``
    in a script starts it with SIGINT ignored and ``nohup`` with SIGHUP."""

    def preexec() -> None:
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)

    return preexec


@pytest.mark.parametrize("tool", ["pgsurge", "pgbench"])
def test_an_inherited_ignore_keeps_the_run_going(
    bench_db: str, pgbench_bin: Path, tmp_path: Path, tool: str
) -> None:
    """Hostile finding E: started with SIGINT and SIGHUP ignored (a script's
    ``cmd &``, ``nohup``), pgbench runs through both signals; pgsurge
    installed its own handlers over the ignore and stopped."""
    prog = (
        [str(pgbench_bin)] if tool == "pgbench" else [sys.executable, "-m", "pgsurge"]
    )
    proc = subprocess.Popen(
        [*prog, "-n", "-S", "-c", "2", "-j", "2", "-T", "4", bench_db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=plain_env(),
        start_new_session=True,
        preexec_fn=_ignoring(signal.SIGINT, signal.SIGHUP),
    )
    with _killed_on_failure(proc):
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGHUP)
        out, err = _communicate(proc)
    assert proc.returncode == 0, err
    assert "duration: 4 s" in out and "interrupted" not in err


def _sockets(pid: int) -> set[str]:
    """The sockets ``pid`` holds (``socket:[inode]``)."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:"):
                held.add(target)
    return held


def test_a_worker_holds_no_end_of_the_parents_pipes(
    bench_db: str, tmp_path: Path
) -> None:
    # each forked worker inherited the parent's end of its own pipe and of
    # every pipe of the workers forked before it: a worker's pipe stayed
    # open after the parent died (its peer held by the worker itself and
    # its siblings), so no worker could see the parent go by its pipe
    script = tmp_path / "s.sql"
    script.write_text("select pg_sleep(0.05);\n")
    proc = _start(
        ["-n", "-f", str(script), "-c", "3", "-j", "3", "-T", "60", bench_db],
        tmp_path,
        **PROCESSES,
    )
    with _killed_on_failure(proc):
        # every worker's client connected and the run started (a fixed
        # 0.5 s after the workers appeared could find a client still
        # connecting on a loaded box: one socket, and no report)
        wait_on_server(proc, bench_db, running_like("select pg_sleep(0.05)%", 3))
        workers = _workers(proc.pid)
        assert len(workers) == 3
        parent = _sockets(proc.pid)
        held = {pid: _sockets(pid) for pid in workers}
        os.killpg(proc.pid, signal.SIGINT)
        out, err = _communicate(proc)
    assert "number of transactions actually processed" in out, err
    # the parent holds one end of each worker's pipe; a worker, the other
    # end of its own (and its client's connection)
    assert len(parent) >= 3
    for pid, sockets in held.items():
        assert sockets.isdisjoint(parent), (pid, sockets & parent)
        assert len(sockets) == 2, (pid, sockets)


#: a workload whose code never comes back to the loop once each worker has
#: run a few transactions: a busy loop, or a blocking call; it leaves a
#: marker first, so that the test signals it only once it is stuck
STUCK = """
import os, time
from pgsurge.workloads import sql, transaction
one = sql("SELECT 1")
done = [0]
@transaction
def stuck(ctx):
    yield one()
    done[0] += 1
    if done[0] > 5:
        open(os.path.join({dir!r}, f"marker.{{os.getpid()}}"), "a").close()
        {how}
"""


#: the C loop (required: the run fails rather than falling back to Python)
#: and the Python engine
ENGINES = [{"PGSURGE_FASTLOOP": "require"}, {"PGSURGE_NO_FASTLOOP": "1"}]


def _stuck_workload(tmp_path: Path, how: str) -> Path:
    path = tmp_path / "stuck.py"
    path.write_text(STUCK.format(dir=str(tmp_path), how=how))
    return path


def _check_interrupted_code(out: str, err: str, path: Path) -> int:
    """Each stuck client was interrupted in the workload's line, said so,
    and what the workers measured before is in the report."""
    assert "Traceback" not in err, err
    stuck = re.findall(
        r"^pgsurge: client \d+: the Python code of its transaction was still "
        r"running \(at (.*):(\d+)\) 2 s after the run's end: interrupted, the "
        r"transaction is not counted$",
        err,
        re.MULTILINE,
    )
    assert len(stuck) == 2, err  # one client per worker, both stuck
    assert {f for f, _ in stuck} == {str(path)}
    processed = int(out.split("actually processed: ")[1].split()[0])
    assert processed >= 2 * 5, out  # not lost with the stuck clients
    return processed


@pytest.mark.parametrize("engine", ENGINES, ids=["c-loop", "python-engine"])
@pytest.mark.parametrize("how", ["while True: pass", "time.sleep(3600)"])
def test_stuck_workload_code_ends_at_T(
    bench_db: str, tmp_path: Path, how: str, engine: dict[str, str]
) -> None:
    """A Python workload's code that never yields back (a busy loop, a
    blocking call) does not keep the run going past -T forever: 2 s after
    the end it is interrupted, the client ends without counting that
    transaction, and the report keeps everything measured (exit 0)."""
    path = _stuck_workload(tmp_path, how)
    proc = _start(
        ["-n", "-f", str(path), "-c", "2", "-j", "2", "-T", "2", bench_db],
        tmp_path,
        **engine,
    )
    out, err = _communicate(proc, timeout=120)  # it never ended before
    assert proc.returncode == 0, err
    _check_interrupted_code(out, err, path)
    assert "aborted" not in err


@pytest.mark.parametrize("engine", ENGINES, ids=["c-loop", "python-engine"])
def test_stuck_workload_code_sigterm_keeps_report(
    bench_db: str, tmp_path: Path, engine: dict[str, str]
) -> None:
    """SIGTERM while both workers are stuck in the workload's code: the
    report of what ran, then death by the signal; before, the parent's
    last resort killed the workers and the report said 0 transactions."""
    path = _stuck_workload(tmp_path, "while True: pass")
    proc = _start(
        ["-n", "-f", str(path), "-c", "2", "-j", "2", "-T", "600", bench_db],
        tmp_path,
        **engine,
    )
    with _killed_on_failure(proc):
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("marker.*"))) < 2:
            assert time.monotonic() < deadline, "the workers never got stuck"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    out, err = _communicate(proc, timeout=120)
    assert proc.returncode == -signal.SIGTERM, err
    _check_interrupted_code(out, err, path)
    assert "pgsurge: run interrupted by SIGTERM after " in err
    assert "died" not in err


def _patched(patch: str) -> list[str]:
    """A command line running pgsurge after ``patch`` (Python code, with
    ``os``, ``signal`` and ``sys`` imported) has replaced one of its
    functions."""
    return [
        sys.executable,
        "-c",
        "import os, runpy, signal, sys\n"
        + patch
        + 'sys.argv[0] = "pgsurge"\n'
        + 'runpy.run_module("pgsurge", run_name="__main__")\n',
    ]


#: pgsurge whose parent gets a SIGINT the moment it has sent its workers
#: GO: the handler runs at the next bytecode boundary after ``send_all``
#: returns, the instant between the workers starting and the parent
#: knowing it (runner/drive.py ``_start``), a window too narrow for a
#: signal from outside to be aimed at
SIGNAL_AT_GO = _patched(
    """from pgsurge.engine import pool, protocol
_send_all = pool.WorkerPool.send_all
def send_all(self, msg):
    _send_all(self, msg)
    if isinstance(msg, protocol.Go):
        os.kill(os.getpid(), signal.SIGINT)
pool.WorkerPool.send_all = send_all
"""
)


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_a_signal_as_the_workers_are_sent_go_keeps_the_run(
    bench_db: str, tmp_path: Path, workers: str
) -> None:
    """Once GO is sent the workers may be running transactions: a signal
    then stops them gracefully with a report, as any signal after it does,
    and never kills the run without one (the parent learned it had started
    only after sending GO)."""
    proc = _start(
        ["-n", "-S", "-c", "2", "-j", "2", "-T", "60", "--json", "r.json", bench_db],
        tmp_path,
        SIGNAL_AT_GO,
        PGSURGE_WORKERS=workers,
    )
    out, err = _communicate(proc, timeout=50)
    assert proc.returncode == -signal.SIGINT, err
    assert "number of transactions actually processed: " in out, err
    assert "pgsurge: run interrupted by SIGINT after " in err, err
    assert "Traceback" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    _valid(doc)
    assert doc["interrupted"]["signal"] == "SIGINT"


#: pgsurge that gets ``SIG`` (an environment variable) as its report of a
#: finished run starts, as a Ctrl-C reaches a report blocked on a pager
SIGNAL_AT_REPORT = _patched(
    """import pgsurge.runner as runner
_report = runner._report
def report(*args, **kwargs):
    os.kill(os.getpid(), getattr(signal, os.environ["SIG"]))
    return _report(*args, **kwargs)
runner._report = report
"""
)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_a_finished_runs_report_keeps_it_whole(
    bench_db: str, tmp_path: Path, sig: str
) -> None:
    """The report of a run that ended by -t is written whole (text, --json,
    --html) when a signal comes while it is written; the program then dies
    of that signal, as pgbench, which has no report files to lose, does."""
    proc = _start(
        [
            *("-n", "-S", "-c", "2", "-j", "2", "-t", "50", "-r", "--percentiles"),
            *("--json", "r.json", "--html", "r.html", bench_db),
        ],
        tmp_path,
        SIGNAL_AT_REPORT,
        SIG=sig,
    )
    out, err = _communicate(proc)
    assert proc.returncode == -getattr(signal, sig), err
    assert "number of transactions actually processed: 100/100" in out, err
    assert "statement latencies in milliseconds" in out, out
    assert "Traceback" not in err
    assert "interrupted" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    _valid(doc)
    assert doc["totals"]["transactions"] == 100
    assert "interrupted" not in doc or not doc["interrupted"]
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")
