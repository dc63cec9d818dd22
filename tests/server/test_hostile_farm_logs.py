"""Hostile-tester regressions on a load farm's ``-l`` files (``--dask
--dask-collect-logs``, issue 24); see ``test_hostile_farm``.

Once the run is over, the coordinator copies every host's files through
Dask. Findings fixed, each test failing without its fix: a host that died
as its files were asked for hung the coordinator for ever (the copy's
task waited for a worker that would never come back); Ctrl-C during the
copy (a slow or hung host) ended the program without the report of the
run, nor its JSON; the scheduler lost during the copy gave Dask's own
two-line message for every file.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fix_dask import Cluster, Run, assert_hosts_add_up, processed, start_run

pytestmark = [pytest.mark.server, pytest.mark.slow]


#: a Dask worker preload: the host dies (its nanny and its worker, killed)
#: when asked for its first -l file after the run
_DIES_WHEN_COLLECTED = """\
import os, signal
import pgsurge.distributed.logs as logs

def file_id(path):
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)

logs.file_id = file_id
"""


def test_a_host_that_dies_while_its_logs_are_collected(
    bench_db: str, tmp_path: Path
) -> None:
    """-l --dask-collect-logs: a host that died once the run was over, as
    its files were asked for, hung the coordinator for ever (the copy's
    task waited for a worker that would never come back): now that host's
    files are said to stay on it, the others' are collected, and the
    report of the whole run follows."""
    preload = tmp_path / "dies.py"
    preload.write_text(_DIES_WHEN_COLLECTED)
    out_dir = tmp_path / "collected"
    out_dir.mkdir()
    out_json = tmp_path / "run.json"
    cluster = Cluster(tmp_path, 2, worker_args={1: ["--preload", str(preload)]})
    try:
        run = Run(
            [
                *("--dask", cluster.address, "-n", "-S", "-t", "50", "-c", "2"),
                *("-j", "2", "-l", "--log-prefix", str(tmp_path / "txlog")),
                *("--dask-collect-logs", str(out_dir), "--json", str(out_json)),
                bench_db,
            ],
            tmp_path,
        )
        status = run.wait(120)
    finally:
        cluster.close()
    assert "Traceback" not in run.stderr, run.stderr
    assert processed(run.stdout) == 100, run.stderr
    doc = json.loads(out_json.read_text())
    assert_hosts_add_up(doc)
    assert re.search(
        r'pgsurge: error: could not collect "[^"]*txlog\.\d+(\.1)?" from host '
        r"tcp://[^:]+:\d+: its Dask worker left the cluster",
        run.stderr,
    ), run.stderr
    assert "dask: 1 -l files in" in run.stderr, run.stderr
    assert len(list(out_dir.iterdir())) == 1
    assert status == 0, run.stderr  # (the run itself went well)


#: a Dask worker preload: the host hangs when asked for its -l files,
#: once it has said so in the file MARKER
_HANGS_WHEN_COLLECTED = """\
import time
import pgsurge.distributed.logs as logs

def file_id(path):
    open(MARKER, "w").close()
    time.sleep(3600)

logs.file_id = file_id
"""


def _while_collecting(
    tmp_path: Path, bench_db: str, act: Callable[[Cluster, Run], None]
) -> tuple[Run, int]:
    """A -t run of two hosts whose second hangs when its -l files are
    asked for: ``act`` is done once the copy reached that host (whatever
    the machine's load made the run take), then the run is waited for."""
    marker = tmp_path / "collecting"
    preload = tmp_path / "hangs.py"
    preload.write_text(f"MARKER = {str(marker)!r}\n" + _HANGS_WHEN_COLLECTED)
    out_dir = tmp_path / "collected"
    out_dir.mkdir()
    cluster = Cluster(tmp_path, 2, worker_args={1: ["--preload", str(preload)]})
    try:
        run = start_run(
            [
                *("--dask", cluster.address, "-n", "-S", "-t", "50", "-c", "2"),
                *("-j", "2", "-l", "--log-prefix", str(tmp_path / "txlog")),
                *("--dask-collect-logs", str(out_dir)),
                *("--json", str(tmp_path / "run.json"), bench_db),
            ],
            tmp_path,
        )
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert run.proc.poll() is None, run.stderr
            assert time.monotonic() < deadline, "the copy never reached the host"
            time.sleep(0.2)
        act(cluster, run)
        status = run.wait(90)
    finally:
        cluster.close()
    return run, status


def test_an_interrupt_while_the_logs_are_collected_keeps_the_report(
    bench_db: str, tmp_path: Path
) -> None:
    """Ctrl-C while -l files are copied from a slow or hung host (the run
    is over): the program died with a KeyboardInterrupt and the report of
    the whole run, measured, was never printed nor the --json written.
    Now the copy stops, says so, and the report follows."""
    run, status = _while_collecting(
        tmp_path, bench_db, lambda _cluster, run: run.proc.send_signal(signal.SIGINT)
    )
    out_json = tmp_path / "run.json"
    assert "Traceback" not in run.stderr, run.stderr
    assert processed(run.stdout) == 100, run.stderr
    assert (
        "pgsurge: error: collecting the -l files was interrupted by SIGINT: "
        "those not yet collected stay on the hosts\n"
    ) in run.stderr
    doc = json.loads(out_json.read_text())
    assert doc["totals"]["processed"] == 100
    assert_hosts_add_up(doc)
    assert status == 0, run.stderr  # (the run itself went well)


def test_the_scheduler_lost_while_the_logs_are_collected(
    bench_db: str, tmp_path: Path
) -> None:
    """The scheduler killed while a host's -l file is asked for: every
    file not yet collected was one error of two lines, the second Dask's
    own ("Client lost the connection to the scheduler. Please check your
    connection and re-run your work."); now one line says it, and the
    report follows."""
    run, status = _while_collecting(
        tmp_path, bench_db, lambda cluster, _run: cluster.kill_scheduler()
    )
    out_json = tmp_path / "run.json"
    assert processed(run.stdout) == 100, run.stderr
    lines = run.stderr.splitlines()
    assert all(ln.startswith("pgsurge: ") for ln in lines), run.stderr
    assert [ln for ln in lines if ": error: " in ln] == [
        "pgsurge: error: collecting the -l files lost the Dask scheduler: "
        "those not yet collected stay on the hosts"
    ], run.stderr
    assert json.loads(out_json.read_text())["totals"]["processed"] == 100
    assert status == 0, run.stderr
