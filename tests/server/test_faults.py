"""Faults that must end in one clear line, never a traceback (issue 21).

Real runs of ``python -m pgsurge`` against the test server under hostile
conditions: a stdout that cannot be written (``/dev/full``, closed, a
"full disk" made with RLIMIT_FSIZE), a script error with a byte that is
not UTF-8 (compared byte for byte with pgbench 18.6), a low open-file
limit, a killed worker, more workers than are useful, and clients whose
connecting outlasts ``-T``.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fix_run import (
    SELECT_ONLY,
    UnixRelay,
    plain_env,
    running_like,
    tool_env,
    wait_on_server,
)

pytestmark = pytest.mark.server

PGSURGE = (sys.executable, "-m", "pgsurge")


def _pgsurge(
    args: list[str], *, stdout: int | None = subprocess.PIPE, **kw: object
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [*PGSURGE, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=kw.pop("env", tool_env()),
        timeout=120,
        check=False,
        **kw,
    )


# -- item 5: an unwritable stdout ------------------------------------------------


def test_dev_full_is_one_line(bench_db: str) -> None:
    with open("/dev/full", "w") as full:
        proc = _pgsurge(["-n", "-t", "5", bench_db], stdout=full.fileno())
    assert proc.stderr == (
        b"pgsurge: error: could not write to standard output: No space left on device\n"
    )
    assert proc.returncode == 1


def test_closed_stdout_is_one_line(bench_db: str) -> None:
    # the shell closes descriptor 1 (">&-") before it runs pgsurge
    proc = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", *PGSURGE, "-n", "-t", "5", bench_db],
        stderr=subprocess.PIPE,
        env=tool_env(),
        timeout=120,
        check=False,
    )
    assert proc.stderr == (
        b"pgsurge: error: could not write to standard output: Bad file descriptor\n"
    )
    assert proc.returncode == 1


def test_closed_stdout_leaves_init_alone(bench_db: str) -> None:
    """-i prints nothing on stdout: it runs, as pgbench's does."""
    proc = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", *PGSURGE, "-i", "-q", bench_db],
        stderr=subprocess.PIPE,
        env=tool_env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"done in" in proc.stderr


def test_help_to_dev_full_is_one_line() -> None:
    with open("/dev/full", "w") as full:
        proc = _pgsurge(["--help"], stdout=full.fileno())
    assert proc.stderr == (
        b"pgsurge: error: could not write to standard output: No space left on device\n"
    )
    assert proc.returncode == 1


def _small_files() -> None:
    # a full disk, without mounting one: writes past 64 bytes fail (EFBIG)
    # instead of killing the writer with SIGXFSZ (ignored: kept across exec)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


def test_json_to_full_disk_is_one_line(bench_db: str, tmp_path: Path) -> None:
    """--json - on a disk that fills: the text report (on stderr) is whole,
    then one line says the document could not be written."""
    with open(tmp_path / "out.json", "w") as out:
        proc = _pgsurge(
            ["-n", "-t", "5", "--json", "-", bench_db],
            stdout=out.fileno(),
            preexec_fn=_small_files,
        )
    err = proc.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "tps = " in err
    assert err.count("error") == 1, err
    assert err.endswith(
        "pgsurge: error: could not write JSON result to standard output: "
        "File too large\n"
    ), err
    assert proc.returncode == 1


# -- item 8: a byte that is not UTF-8, in a script error --------------------------


def test_latin1_byte_in_meta_command_error_as_pgbench(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """pgbench echoes the raw byte; Python's stderr printed ``\\udce9``."""
    path = tmp_path / "latin1.sql"
    path.write_bytes(b"\\set x caf\xe9\n")
    args = ["-n", "-t", "1", "-f", str(path), bench_db]
    ours = _pgsurge(args)
    theirs = subprocess.run(
        ["pgbench", *args],
        executable=pgbench_bin,
        capture_output=True,
        env=tool_env(),
        timeout=120,
        check=False,
    )
    assert b"caf\xe9" in theirs.stderr
    assert ours.stderr == theirs.stderr.replace(b"pgbench: ", b"pgsurge: ")
    assert ours.returncode == theirs.returncode == 1


# -- item 8: a killed worker ------------------------------------------------------


def _workers(pid: int) -> list[int]:
    """The worker processes of pgsurge ``pid`` (its children)."""
    return [
        int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    ]


def test_dead_worker_keeps_the_connection_time(bench_db: str, tmp_path: Path) -> None:
    """The report after ``kill -9`` of a worker gives the survivors' initial
    connection time (it said 0.000 ms: the dead one counted from STEADY)."""
    proc = subprocess.Popen(
        [*PGSURGE, "-n", "-S", "-c", "4", "-j", "2", "-T", "60", bench_db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        # worker processes, one to kill (threads are not killed apart)
        env={**plain_env(), "PGSURGE_WORKERS": "processes"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_workers(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # every client running (a fixed 2.5 s did not cover a loaded box's
        # connections: a kill before the run's start leaves no tps)
        wait_on_server(proc, bench_db, running_like(SELECT_ONLY, 4))
        os.kill(_workers(proc.pid)[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 2, err
    conn_ms = float(out.split("initial connection time = ")[1].split()[0])
    assert conn_ms > 0.0, out
    tps = float(out.split("tps = ")[1].split()[0])
    assert tps > 0.0, out


# -- item 8: near the open-file limit ---------------------------------------------


def _open_files(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_fd_limit_in_a_worker_says_what_failed(bench_db: str) -> None:
    """40 clients in one worker at a limit of 43 (pgbench's own check,
    clients + 3, passes): libpq's socket() fails with an empty message,
    which pgbench prints as a bare ``pgbench: error: ``."""
    proc = _pgsurge(
        ["-n", "-c", "40", "-j", "1", "-t", "1", bench_db],
        preexec_fn=lambda: _open_files(43),
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "pgsurge: error: \n" not in err
    # which descriptor runs out first depends on the worker's own (the C
    # loop's, the relay's): either way the line says what failed
    assert err.startswith("pgsurge: error: "), err
    assert "Too many open files" in err, err
    assert "limit of 43 open files" in err or 'open-file limit ("ulimit -n")' in err
    assert "Traceback" not in err


def test_fd_limit_starting_workers_is_one_error(bench_db: str) -> None:
    """Two workers' pipes at a limit of 8: the parent could not start them
    (a traceback, then a hang at exit waiting for the started one)."""
    proc = _pgsurge(
        ["-n", "-c", "2", "-j", "2", "-t", "1", bench_db],
        preexec_fn=lambda: _open_files(8),
    )
    assert proc.stderr == (
        b"pgsurge: error: could not start worker process: Too many open files\n"
        b'pgsurge: hint: Raise the open-file limit ("ulimit -n") or use fewer -j.\n'
    )
    assert proc.returncode == 1


@pytest.mark.slow
def test_every_fd_limit_is_a_clear_outcome(bench_db: str) -> None:
    """A hostile sweep: at each limit from the least pgbench's check lets
    through up to one that is enough, pgsurge runs, or fails with lines that
    each say something (a worker's wake-up pipe crashed it at 14)."""
    statuses = set()
    for limit in range(5, 21):
        proc = _pgsurge(
            ["-n", "-c", "2", "-j", "2", "-t", "1", bench_db],
            preexec_fn=lambda limit=limit: _open_files(limit),
        )
        err = proc.stderr.decode()
        assert "Traceback" not in err, (limit, err)
        assert "pgsurge: error: \n" not in err, (limit, err)
        assert proc.returncode in (0, 1), (limit, err)
        if proc.returncode == 1:
            assert err.startswith("pgsurge: error: ") and "open files" in err, (
                limit,
                err,
            )
        statuses.add(proc.returncode)
    assert statuses == {0, 1}


# -- item 7: more workers than useful; connecting that outlasts -T --------------


def _one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def test_jobs_capped_per_core(bench_db: str) -> None:
    """On one core, -j 6 runs 4 workers (4 per core), says so once, and
    the report gives the workers that ran; -c is kept."""
    proc = _pgsurge(
        ["-n", "-c", "6", "-j", "6", "-t", "2", bench_db], preexec_fn=_one_cpu
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err
    assert err == (
        "pgsurge: warning: -j 6 capped at 4 workers (4 per core of the "
        "1 this run may use): more would only cost memory and connecting time\n"
    )
    assert "number of clients: 6\n" in out
    assert "number of threads: 4\n" in out
    assert "number of transactions actually processed: 12/12\n" in out


def test_jobs_within_the_cap_unchanged(bench_db: str) -> None:
    proc = _pgsurge(
        ["-n", "-c", "4", "-j", "4", "-t", "2", bench_db], preexec_fn=_one_cpu
    )
    assert proc.stderr == b"", proc.stderr
    assert b"number of threads: 4\n" in proc.stdout


class _SlowRelay(UnixRelay):
    """A relay forwarding each connection to the test server after
    ``delay`` seconds."""

    def __init__(self, dsn: str, directory: Path, delay: float) -> None:
        self.delay = delay
        super().__init__(dsn, directory)

    def serve(self, client: socket.socket) -> None:
        time.sleep(self.delay)
        super().serve(client)


def test_connecting_outlasting_the_run_is_said(bench_db: str, tmp_path: Path) -> None:
    """Each connection takes 1.5 s (a relay): one worker connects its 4
    clients (in parallel, engine/ramp.py; pgbench in turn), longer than a
    -T 1 run that counts from before connecting (as pgbench's does).
    pgbench's report of it is only "actually processed: 0"; pgsurge keeps
    that report and says why on stderr."""
    relay = _SlowRelay(bench_db, tmp_path, 1.5)
    try:
        proc = _pgsurge(["-n", "-c", "4", "-j", "1", "-T", "1", relay.dsn])
    finally:
        relay.close()
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err
    assert out.endswith("number of transactions actually processed: 0\n"), out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(
        "pgsurge: warning: no transaction was processed: connecting the 4 clients took "
    ), err
    assert lines[0].endswith(
        " s, the whole -T 1 s (which counts from before connecting); use a "
        "longer -T or fewer clients"
    ), err
