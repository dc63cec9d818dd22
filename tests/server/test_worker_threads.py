"""Workers as threads (``PGSURGE_WORKERS=threads``, engine/threaded.py).

Real runs of ``python -m pgsurge`` against the test server with the
workers as threads of the one process: no worker process is forked, the
figures are those of the same run with processes, and everything a
process got from the kernel still works on a thread: the end of ``-T``
(a timer that wakes the loop), a SIGTERM's graceful stop and a second
one's cancel, ``--exit-on-abort``, a failed connection. Runs that a
thread cannot carry (a Python workload, whose stuck code a SIGALRM
handler interrupts) keep their processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fix_run import (
    LONG_GRACE,
    SELECT_ONLY,
    plain_env,
    running_like,
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

THREADS = {"PGSURGE_WORKERS": "threads"}


def _tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _wait_threads(proc: subprocess.Popen[str], nworkers: int) -> None:
    """Until pgsurge ``proc`` has its main thread and ``nworkers`` more."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ended early: {proc.communicate()}")
        if _tasks(proc.pid) >= nworkers + 1:
            return
        time.sleep(0.05)
    pytest.fail("the worker threads never started")


def _start_sleeping(
    bench_db: str, tmp_path: Path, seconds: float, prog: list[str] | None = None
) -> subprocess.Popen[str]:
    """A threads run of ``-c 2 -j 2 -T 120`` whose clients sit in
    ``pg_sleep(seconds)``, once both are seen in it (the run started)."""
    path = tmp_path / "slow.sql"
    path.write_text(f"select pg_sleep({seconds});\n")
    proc = _start(
        ["-n", "-f", str(path), "-c", "2", "-j", "2", "-T", "120", bench_db],
        tmp_path,
        prog,
        **THREADS,
    )
    with _killed_on_failure(proc):
        wait_on_server(proc, bench_db, running_like(f"select pg_sleep({seconds})%", 2))
    return proc


def _task_children(pid: int) -> list[int]:
    """The child processes of any thread of process ``pid``."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            children += map(int, (task / "children").read_text().split())
    return children


def _processed(out: str) -> int:
    match = re.search(r"actually processed: (\d+)", out)
    assert match is not None, out
    return int(match.group(1))


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**plain_env(), **env},
        timeout=120,
    )


def test_threads_fork_no_worker_and_a_stop_keeps_the_report(
    bench_db: str, tmp_path: Path
) -> None:
    """-j 2 as threads: no child process while it runs; SIGTERM stops it
    gracefully with the report, the JSON and a complete -l log."""
    proc = _start(
        ["-nS", "-c4", "-j2", "-T60", "-l", "--json", "r.json", bench_db],
        tmp_path,
        **THREADS,
    )
    with _killed_on_failure(proc):
        _wait_threads(proc, 2)
        # all four clients under way (the run started: a signal before
        # ends it with no report; a fixed 1.5 s did not cover a loaded box)
        wait_on_server(proc, bench_db, running_like(SELECT_ONLY, 4))
        assert _workers(proc.pid) == [], "a worker process was forked"
        proc.send_signal(signal.SIGTERM)
        out, err = _communicate(proc)
    assert proc.returncode == -signal.SIGTERM, err
    assert "pgsurge: run interrupted by SIGTERM after " in err, err
    assert "Traceback" not in err
    processed = _processed(out)
    assert processed > 0
    doc = json.loads((tmp_path / "r.json").read_text())
    _valid(doc)
    assert doc["totals"]["transactions"] == processed
    assert len(_log_lines(tmp_path)) == processed
    workers = doc["client_cpu"]["workers"]
    assert [w["implementation"] for w in workers] == ["C event loop"] * 2
    # each thread's own CPU (RUSAGE_THREAD), not the process's twice
    assert all(w["user_s"] + w["sys_s"] > 0 for w in workers)


def test_a_c_loop_run_builds_no_python_engine(bench_db: str, tmp_path: Path) -> None:
    """A run the C loop carries on threads hands no client back: the
    Python engine's step modules are never imported (engine.client imports
    them when it builds the engine), no client got an expression context
    or a prepared set of its own, and psycopg.errors' SQLSTATE classes
    were never needed (issue 25: memory)."""
    script = tmp_path / "set.sql"
    script.write_text("\\set x random(1, 10)\nSELECT :x;\n")
    code = (
        "import sys\n"
        "from pgsurge.cli import main\n"
        "from pgsurge.engine import worker\n"
        "seen = []\n"
        "make = worker._make_clients\n"
        "def spy(*args):\n"
        "    clients = make(*args)\n"
        "    seen.extend(clients)\n"
        "    return clients\n"
        "worker._make_clients = spy\n"
        f"status = main(['pgsurge', '-n', '-f', {str(script)!r},"
        f" '-c', '4', '-j', '2', '-t', '20', {bench_db!r}])\n"
        "from pgsurge.engine.state import NONE_PREPARED\n"
        "from pgsurge.deferred_errors import is_deferred\n"
        "steps = [m for m in ('pgsurge.engine.sql', 'pgsurge.engine.meta',"
        " 'pgsurge.engine.handback') if m in sys.modules]\n"
        "print(status, len(seen), steps,"
        " [st.ctx for st in seen if st.ctx is not None],"
        " [st.id for st in seen if st.prepared is not NONE_PREPARED],"
        " is_deferred(sys.modules['psycopg.errors']))\n"
    )
    env = {**plain_env(), **THREADS, "PGSURGE_FASTLOOP": "require"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # (nor were psycopg.errors' SQLSTATE classes made: pgsurge.deferred_errors)
    assert done.stdout.splitlines()[-1] == "0 4 [] [] [] True", done.stdout


def test_a_python_workload_keeps_its_processes(tmp_path: Path, fresh_db: str) -> None:
    """A Python workload under PGSURGE_WORKERS=threads still forks (its
    stuck code is interrupted by a process's SIGALRM handler)."""
    path = tmp_path / "w.py"
    path.write_text(
        "import time\n"
        "from pgsurge.workloads import sql, transaction\n"
        "one = sql('SELECT 1')\n"
        "@transaction\n"
        "def tx(ctx):\n"
        "    time.sleep(0.01)\n"
        "    yield one()\n"
    )
    proc = _start(
        ["-n", "-f", str(path), "-c", "2", "-j", "2", "-T", "60", fresh_db],
        tmp_path,
        **THREADS,
    )
    with _killed_on_failure(proc):
        deadline = time.monotonic() + 30
        while len(_workers(proc.pid)) < 2 and time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"ended early: {proc.communicate()}")
            time.sleep(0.05)
        assert len(_workers(proc.pid)) == 2
        proc.send_signal(signal.SIGTERM)
        _out, err = _communicate(proc)
    assert proc.returncode == -signal.SIGTERM, err


@pytest.mark.parametrize("engine", ["c", "python"])
def test_threads_count_what_processes_count(
    bench_db: str, tmp_path: Path, engine: str
) -> None:
    """The same -t run, with -r, as threads and as processes: the same
    transactions, the same per-command lines, no failure (on the C loop
    and on the Python engine)."""
    script = tmp_path / "s.sql"
    script.write_text(
        "\\set aid random_gaussian(1, 100000, 2.5)\n"
        "\\set r random(1, 1000) * 0.5\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "SELECT :r::float8;\n"
    )
    args = ["-n", "-f", str(script), "-c", "4", "-j", "2", "-t", "300", "-r", bench_db]
    env = {"PGSURGE_NO_FASTLOOP": "1"} if engine == "python" else {}
    got = {}
    for model in ("threads", "processes"):
        done = _run(args, tmp_path, PGSURGE_WORKERS=model, **env)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        out = done.stdout
        assert "number of transactions actually processed: 1200/1200" in out
        assert "number of failed transactions: 0 (0.000%)" in out
        commands = [
            line.split(None, 2)[2]
            for line in out.splitlines()
            if re.match(r"\s+\d+\.\d+\s+\d+\s+\S", line)
        ]
        got[model] = commands
    assert got["threads"] == got["processes"]
    assert len(got["threads"]) == 4


def test_threads_end_at_T_with_clients_asleep(bench_db: str, tmp_path: Path) -> None:
    """-T's end reaches a thread by a timer that wakes its loop: clients
    that sleep between statements (the loop waits on timers) end on time."""
    script = tmp_path / "s.sql"
    script.write_text("\\sleep 20 ms\nSELECT 1;\n")
    t0 = time.monotonic()
    done = _run(
        ["-n", "-f", str(script), "-c", "4", "-j", "2", "-T", "2", bench_db],
        tmp_path,
        **THREADS,
    )
    assert done.returncode == 0, done.stderr
    assert "duration: 2 s" in done.stdout
    assert _processed(done.stdout) > 0
    # generous: a loaded box; without the wake the run would never end
    assert time.monotonic() - t0 < 60


def test_threads_cancel_a_long_statement_at_the_second_signal(
    bench_db: str, tmp_path: Path
) -> None:
    """Clients in a 60 s statement: the second SIGTERM cancels them at once
    and the report of what ran still comes. (A 60 s grace, LONG_GRACE: the
    2 s one ended the run as soon, and two signals sent too close are one:
    the second goes out once the first was handled.)"""
    proc = _start_sleeping(bench_db, tmp_path, 60, LONG_GRACE)
    with _killed_on_failure(proc):
        proc.send_signal(signal.SIGTERM)
        wait_stopping(proc, tmp_path)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out, err = _communicate(proc, 90)
    assert time.monotonic() - t0 < 20, "the second signal did not skip the grace"
    assert proc.returncode == -signal.SIGTERM, err
    assert "actually processed: 0" in out, err
    assert "interrupted by SIGTERM" in err
    assert "Traceback" not in err


def test_threads_exit_on_abort_reports_once(bench_db: str, tmp_path: Path) -> None:
    """--exit-on-abort with both worker threads failing: one report, status 2."""
    path = tmp_path / "bad.sql"
    path.write_text("SELECT 1/0;\n")
    done = _run(
        ["-n", "-f", str(path), "-c4", "-j2", "-T10", "--exit-on-abort", bench_db],
        tmp_path,
        **THREADS,
    )
    assert done.returncode == 2, done.stderr
    reports = done.stderr.count("Run was aborted due to an error in thread")
    assert reports == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_threads_a_failed_connection_is_pgbenchs_error(
    fresh_db: str, tmp_path: Path
) -> None:
    """A client that cannot connect: pgbench's message and status 1."""
    done = _run(
        ["-n", "-S", "-c", "4", "-j", "2", "-T", "5", f"{fresh_db} dbname=no_such_db"],
        tmp_path,
        **THREADS,
    )
    assert done.returncode == 1, done.stderr
    assert 'database "no_such_db" does not exist' in done.stderr
    assert "Traceback" not in done.stderr


def test_threads_a_worker_stuck_in_shell_is_given_up(
    bench_db: str, tmp_path: Path
) -> None:
    """Both worker threads in a 60 s ``\\shell`` command, which no stop
    reaches: as with processes, they are given up on (counted as killed)
    after the grace and the Stop's, and the report comes; the parent does
    not wait for the threads' pipes, which they keep open."""
    script = tmp_path / "shell.sql"
    script.write_text("\\shell sleep 60\n")
    # files, not pipes: the sleep commands hold what they inherited open
    with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "pgsurge", "-nf", str(script), "-c2", "-j2"),
                *("-T120", bench_db),
            ],
            stdout=out,
            stderr=err,
            cwd=tmp_path,
            env={**plain_env(), **THREADS},
            start_new_session=True,
        )
    try:
        # both clients in their command (the run started: a signal before
        # ends it with no report; a fixed 1 s did not cover a loaded box)
        deadline = time.monotonic() + 60
        while len(_task_children(proc.pid)) < 2:
            assert proc.poll() is None, (tmp_path / "err").read_text()
            assert time.monotonic() < deadline, "no \\shell command started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        # GRACE_S twice (4 s) on a loaded box; without the fix, the 60 s
        proc.wait(timeout=40)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the sleep commands
        proc.wait()
    stdout = (tmp_path / "out").read_text()
    stderr = (tmp_path / "err").read_text()
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "actually processed: 0" in stdout, stderr
    assert stderr.count("(a thread) died: it did not stop, and was given up on") == 2
    assert "signal 9" not in stderr  # no thread was killed
    assert "interrupted by SIGTERM" in stderr
    assert "Traceback" not in stderr


#: an in-process run (``cli.main``) with threads, then what it left: the
#: collector's settings, threads, descriptors (the ``multiprocessing``
#: value of --exit-on-abort's shared memory aside: it stays, as with
#: processes), and the run's backends on the server
_IN_PROCESS = r"""
import contextlib, gc, io, json, os, sys, threading, time
import psycopg
from pgsurge.cli import main

dsn, script = sys.argv[1], sys.argv[2]
db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]

def fds():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/shm/"):
                out.add(fd)
    return out

def run(*args):
    # the workers write to descriptor 2 itself
    with open("stderr", "w+") as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    main(["pgsurge", *args])
                except SystemExit:
                    pass
            sys.stderr.flush()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return err.read()

def backends():
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()", (db,)
        ).fetchone()[0]

gc0 = (gc.get_threshold(), gc.get_freeze_count())
run("-n", "-c2", "-j2", "-t20", dsn)
gc1 = (gc.get_threshold(), gc.get_freeze_count())
fds0 = fds()
errs = "".join(
    run("-n", "-f", script, "-c4", "-j2", "-T10", "--exit-on-abort", dsn)
    for _ in range(3)
)
deadline = time.monotonic() + 30
while (left := backends()) and time.monotonic() < deadline:
    time.sleep(0.1)
print(json.dumps({
    "gc": [gc0, gc1],
    "threads": [t.name for t in threading.enumerate()],
    "new_fds": sorted(fds() - fds0),
    "backends": left,
    "stderr": errs,
}))
"""


def test_threads_in_process_runs_leave_nothing_behind(
    bench_db: str, tmp_path: Path
) -> None:
    """pgsurge run in-process with its workers as threads: the collector's
    settings are the caller's again (a worker thread tunes them for the
    whole process), and runs ended by --exit-on-abort leave no thread,
    descriptor or backend and print no traceback (the thread that did not
    report found its parent gone)."""
    script = tmp_path / "bad.sql"
    script.write_text("SELECT 1/0;\n")
    env = {**plain_env(), **THREADS}
    got = json.loads(
        subprocess.run(
            [sys.executable, "-c", _IN_PROCESS, bench_db, str(script)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=True,
            timeout=120,
        ).stdout
    )
    gc0, gc1 = got["gc"]
    assert gc1 == gc0
    assert got["threads"] == ["MainThread"]
    assert got["new_fds"] == []
    assert got["backends"] == 0
    assert "Traceback" not in got["stderr"]
    assert got["stderr"].count("Run was aborted due to an error in thread") == 3


def _at_60_files() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (60, 60))


def test_threads_at_the_open_file_limit_say_what_helps(
    bench_db: str, tmp_path: Path
) -> None:
    """50 clients under a hard limit of 60 files: pgbench's clients + 3
    fit, and so do -j 2 processes of 25 clients each; threads hold all 50
    and both workers' pipes in one process, and fail at the limit. The
    hint must not be "use more -j" (more threads, more files), but the
    processes that do hold them."""
    args = [sys.executable, "-m", "pgsurge", "-n", "-S", "-c50", "-j2", "-t5", bench_db]
    got = {}
    for model in ("processes", "threads"):
        got[model] = subprocess.run(
            args,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**plain_env(), "PGSURGE_WORKERS": model},
            preexec_fn=_at_60_files,
            timeout=120,
        )
    assert got["processes"].returncode == 0, got["processes"].stderr
    failed = got["threads"]
    assert failed.returncode == 1, failed.stderr
    assert "limit of 60 open files" in failed.stderr
    assert "more -j" not in failed.stderr
    assert "use PGSURGE_WORKERS=processes" in failed.stderr


#: tgkill's system call number, by machine
_TGKILL = {"x86_64": 234, "aarch64": 131}


def _tgkill(pid: int, tid: int, sig: int) -> None:
    """Send ``sig`` to one thread of process ``pid`` (Linux ``tgkill``)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    sys_tgkill = _TGKILL[os.uname().machine]
    if libc.syscall(sys_tgkill, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


def test_a_signal_on_a_worker_thread_stops_the_run(
    bench_db: str, tmp_path: Path
) -> None:
    """A SIGTERM the kernel gives to a worker's thread (it does when the
    main thread has a signal pending) is handled at once by the main
    thread: the wake-up descriptor wakes its wait. Without it the main
    thread slept on until -T's end."""
    proc = _start_sleeping(bench_db, tmp_path, 0.2)
    with _killed_on_failure(proc):
        tids = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        worker = next(t for t in tids if t != proc.pid)
        t0 = time.monotonic()
        _tgkill(proc.pid, worker, signal.SIGTERM)
        out, err = _communicate(proc, 60)
    assert time.monotonic() - t0 < 30  # the grace is 2 s; -T's end 120 s
    assert proc.returncode == -signal.SIGTERM, err
    assert "interrupted by SIGTERM" in err
    assert _processed(out) > 0
