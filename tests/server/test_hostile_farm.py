"""Hostile-tester regressions on a load farm (``--dask``, issue 24).

A performance engineer's farm, attacked with real ``dask scheduler`` and
``dask worker`` processes (``tests.fix_dask``; a worker's ``--preload``
injects a host's fault at an exact phase, ``unshare --time`` moves a
host's clock). Findings fixed, each test failing without its fix:

* a host on another pgsurge build ran the coordinator's specs with its
  own code: now refused before any load, one line;
* the ``-l`` files' collection: see ``test_hostile_farm_logs``;
* a second run needing one host of three waited for a busy host while
  one stood idle;
* a host that cannot fork said only ``OSError``;
* a host without pgsurge looked merely lost: now named before the run;
* a host that cannot read its task (an old pgsurge) had Dask log the
  task's pickled bytes, the target's password in clear.

The rest held and stays as regression tests: a host frozen past the
loss grace, killed or frozen before the start, dead with its results, its
Dask worker restarted at the same address; backends terminated under the
farm; a host's clock 100000 s off; two interrupts; a suspended
coordinator; a local cluster's coordinator killed; the scheduler killed
before the start; the hosts' figures, the series and the histograms add
up to the totals.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from pgsurge.distributed.watch import COORDINATOR_GRACE_S
from tests.fix_dask import (
    SLACK_S,
    Cluster,
    Run,
    assert_hosts_add_up,
    assert_kept,
    assert_progress_honest,
    count_clients,
    processed,
    start_run,
    wait_no_load,
)

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _args(cluster: Cluster, dsn: str, *more: str) -> list[str]:
    return [
        *("--dask", cluster.address, "-n", "-S", "-T", "60", "-c", "4", "-j", "2"),
        *("-P", "1", *more, dsn),
    ]


def _on_two_hosts(
    tmp_path: Path,
    argv: list[str],
    *,
    worker_args: dict[int, list[str]] | None = None,
    worker_prefix: dict[int, list[str]] | None = None,
) -> tuple[Run, int, list[str]]:
    """``pgsurge --dask ADDRESS ARGV`` on a cluster of two hosts of its own
    (host 1 started with ``worker_args``/``worker_prefix``), waited for
    (90 s at most): the run, its status and the cluster's logs."""
    cluster = Cluster(tmp_path, 2, worker_args=worker_args, worker_prefix=worker_prefix)
    try:
        run = Run(["--dask", cluster.address, *argv], tmp_path)
        status = run.wait(90)
        logs = [log.read_text(errors="replace") for log in cluster.logs]
    finally:
        cluster.close()
    return run, status, logs


def test_a_frozen_host_is_lost_and_stops_when_it_thaws(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        load = cluster.load_processes() - before
        cluster.signal_host(1, signal.SIGSTOP)
        frozen = time.monotonic()
        status = run.wait(60)
        ended = time.monotonic()
        cluster.signal_host(1, signal.SIGCONT)
        thawed = time.monotonic()
    finally:
        cluster.signal_host(1, signal.SIGCONT)
        run.kill()
    assert status == 2, run.stderr
    assert ended - frozen < 5 + 8 + SLACK_S
    assert re.search(r"error: host \d \(load1, tcp://[^)]+\) lost", run.stderr)
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert_hosts_add_up(doc)
    # thawed, the host finds its coordinator silent and stops its load
    wait_no_load(bench_db, load, thawed, COORDINATOR_GRACE_S + SLACK_S)


def test_the_server_restarted_under_the_farm(
    bench_db: str, cluster: Cluster, tmp_path: Path, server_dsn: str
) -> None:
    import psycopg

    out_json = tmp_path / "run.json"
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        with psycopg.connect(bench_db, autocommit=True) as conn:
            conn.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity"
                " where application_name = 'pgsurge'"
            )
        status = run.wait(60)
    finally:
        run.kill()
    assert status == 2, run.stderr
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert_hosts_add_up(doc)
    assert count_clients(bench_db) == 0


def test_totals_add_up(bench_db: str, cluster: Cluster, tmp_path: Path) -> None:
    out_json = tmp_path / "run.json"
    run = Run(
        [
            *("--dask", cluster.address, "-n", "-S", "-T", "4", "-c", "3", "-j", "3"),
            *("-P", "1", "--json", str(out_json), "-r", bench_db),
        ],
        tmp_path,
    )
    status = run.wait(90)
    assert status == 0, run.stderr
    doc = json.loads(out_json.read_text())
    assert_hosts_add_up(doc)
    assert processed(run.stdout) == doc["totals"]["processed"]
    # the run's average latency is the hosts' weighted by their counts; its
    # tps, the hosts' added up (each over its own span: close, not equal)
    hosts, totals = doc["hosts"], doc["totals"]
    weighted = sum(h["latency_avg_ms"] * h["transactions"] for h in hosts)
    assert weighted / totals["processed"] == pytest.approx(
        totals["latency_ms"]["avg"], rel=1e-9
    )
    assert sum(h["tps"] for h in hosts) == pytest.approx(totals["tps"], rel=0.05)


def test_a_host_on_another_pgsurge_version_is_refused(
    bench_db: str, tmp_path: Path
) -> None:
    """A load host whose pgsurge is another version (a farm upgraded by
    halves) ran the coordinator's specs with its own code, silently:
    now the run stops before any load with one line naming the host."""
    preload = tmp_path / "other_version.py"
    preload.write_text("import pgsurge\npgsurge.__version__ = '0.0.9'\n")
    run, status, _logs = _on_two_hosts(
        tmp_path,
        [
            *("-n", "-S", "-T", "30"),
            *("-c", "2", "-j", "2", bench_db),
        ],
        worker_args={1: ["--preload", str(preload)]},
    )
    assert status == 1, run.stderr
    assert "Traceback" not in run.stderr
    errors = [ln for ln in run.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1, run.stderr
    assert re.fullmatch(
        r"pgsurge: host \d \(load1\): error: this host runs pgsurge 0\.0\.9 "
        r"\(specs [0-9a-f]{8}\), the coordinator 0\.1\.0 \(specs [0-9a-f]{8}\): "
        r"install the same pgsurge on every load host",
        errors[0],
    ), errors
    assert "processed" not in run.stdout  # no report: no run
    assert count_clients(bench_db) == 0


def test_a_host_whose_clock_is_far_off(bench_db: str, tmp_path: Path) -> None:
    """Host 1's monotonic clock 100000 s ahead (a time namespace): its
    offset is measured, the common start and the series line up."""
    out_json = tmp_path / "run.json"
    ahead = ["unshare", "--time", "--monotonic", "100000", "--fork", sys.executable]
    run, status, _logs = _on_two_hosts(
        tmp_path,
        [
            *("-n", "-S", "-T", "4", "-c", "4"),
            *("-j", "2", "-P", "1", "--json", str(out_json), bench_db),
        ],
        worker_prefix={1: ahead},
    )
    assert status == 0, run.stderr
    doc = json.loads(out_json.read_text())
    offsets = {h["name"]: h["clock_offset_us"] for h in doc["hosts"]}
    assert abs(offsets["load0"]) < 1_000_000, offsets
    assert abs(offsets["load1"] - 100_000 * 1_000_000) < 1_000_000, offsets
    assert_hosts_add_up(doc)
    lines = assert_progress_honest(run.stderr)
    assert len(lines) >= 3 and "hosts 1/2" not in run.stderr, run.stderr
    # the merged series: one interval a second, from both hosts
    assert 4 <= len(doc["intervals"]) <= 5, doc["intervals"]
    assert (
        sum(iv["transactions"] for iv in doc["intervals"])
        == (doc["totals"]["processed"])
    )


def test_two_interrupts_stop_every_host_at_once(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        load = cluster.load_processes() - before
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        run.proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        status = run.wait(60)
    finally:
        run.kill()
    assert status == -signal.SIGINT, run.stderr
    assert "run interrupted by SIGINT after" in run.stderr
    assert "Traceback" not in run.stderr and "lost" not in run.stderr, run.stderr
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert_hosts_add_up(doc)
    wait_no_load(bench_db, load, signalled, SLACK_S)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=str)
def test_a_host_lost_before_the_start_leaves_no_load(
    sig: signal.Signals, bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    """Killed or frozen while its clients connect (the common start is 2 s
    ahead of the ``dask:`` line): the run ends, status 2, and no host
    starts its load, not even the frozen one once it thaws."""
    run = start_run(_args(cluster, bench_db), tmp_path)
    try:
        cluster.signal_host(1, sig)
        status = run.wait(60)
        cluster.signal_host(1, signal.SIGCONT)
        thawed = time.monotonic()
    finally:
        cluster.signal_host(1, signal.SIGCONT)
        run.kill()
    assert status == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert re.search(r"error: host \d \(load1, tcp://[^)]+\) lost", run.stderr)
    deadline = thawed + COORDINATOR_GRACE_S + SLACK_S
    while time.monotonic() < deadline:
        if count_clients(bench_db) == 0 and not cluster.load_processes():
            break
        time.sleep(0.3)
    # and none comes back
    time.sleep(2)
    assert count_clients(bench_db) == 0
    assert cluster.load_processes() == set()


def test_a_password_in_the_target_shows_nowhere_when_a_host_dies(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    """The password written in the target (the test server trusts it,
    but the hosts carry it): a host killed mid-run makes Dask log its
    lost task and worker; neither the coordinator's output nor the
    scheduler's and workers' logs nor the run's events show it."""
    from distributed import Client

    password = "Farm-s3cret-pw"
    target = f"{bench_db} password={password}"
    out_json = tmp_path / "run.json"
    run = start_run(_args(cluster, target, "--json", str(out_json)), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        with Client(cluster.address, timeout="30s") as client:
            events = client.sync(client.scheduler.events)
        cluster.kill_worker(1)
        status = run.wait(60)
    finally:
        run.kill()
    assert status == 2, run.stderr
    assert events and any(k.startswith("pgsurge-") for k in events), list(events)
    assert password not in repr(events)
    for text in (run.stdout, run.stderr, out_json.read_text()):
        assert password not in text
    for log in cluster.logs:
        assert password not in log.read_text(errors="replace"), log


#: a Dask worker preload: the host dies once its workers are done, before
#: it returns their results
_DIES_WITH_ITS_RESULTS = """\
import os, signal
from pgsurge.engine.pool import WorkerPool

def join(self, *args, **kwargs):
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)

WorkerPool.join = join
"""


def test_a_host_that_dies_with_its_results_counts_what_it_streamed(
    bench_db: str, tmp_path: Path
) -> None:
    preload = tmp_path / "dies.py"
    preload.write_text(_DIES_WITH_ITS_RESULTS)
    out_json = tmp_path / "run.json"
    run, status, _logs = _on_two_hosts(
        tmp_path,
        [
            *("-n", "-S", "-T", "4", "-c", "4"),
            *("-j", "2", "-P", "1", "--json", str(out_json), bench_db),
        ],
        worker_args={1: ["--preload", str(preload)]},
    )
    assert status == 2, run.stderr
    assert re.search(r"error: host \d \(load1, tcp://[^)]+\) lost", run.stderr)
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert_hosts_add_up(doc)
    lost = [h for h in doc["hosts"] if h["lost"]]
    assert [h["name"] for h in lost] == ["load1"]
    assert lost[0]["transactions"] > 0


def test_a_second_run_takes_the_free_host_rather_than_wait(
    bench_db: str, tmp_path: Path
) -> None:
    """Three hosts, a first run holding two of them: a second run that
    needs one host waited for a busy one (the hosts were taken in the
    order of their addresses) while the third stood idle."""
    cluster = Cluster(tmp_path, 3)
    first = second = None
    try:
        first = start_run(
            [
                *("--dask", cluster.address, "-n", "-S", "-T", "60", "-c", "2"),
                *("-j", "2", "-P", "1", bench_db),
            ],
            tmp_path,
        )
        first.wait_for("progress: 1.0 s")
        second = Run(
            [
                *("--dask", cluster.address, "-n", "-S", "-t", "100", "-c", "1"),
                *("-j", "1", bench_db),
            ],
            tmp_path,
        )
        # it ends while the first still runs (60 s)
        assert second.wait(45) == 0, second.stderr
        assert first.proc.poll() is None, first.stderr
    finally:
        for run in (first, second):
            if run is not None:
                run.kill()
        cluster.close()
    assert "waiting for" not in second.stderr, second.stderr
    assert "processed: 100/100" in second.stdout


@pytest.mark.parametrize("when", ["ramp", "run"])
def test_a_dask_worker_restarted_by_its_nanny_on_the_same_address(
    when: str, bench_db: str, tmp_path: Path
) -> None:
    """Host 1's Dask worker (not its nanny) killed, with a fixed worker
    port: the nanny starts a new one at the same address, where Dask may
    run the host's task again. The run ends (status 2), the host is lost,
    and the restarted worker starts no load."""
    from tests.fix_dask import children, free_port

    port = free_port()
    cluster = Cluster(tmp_path, 2, worker_args={1: ["--worker-port", str(port)]})
    run = None
    try:
        run = start_run(_args(cluster, bench_db), tmp_path)
        if when == "run":
            run.wait_for("progress: 2.0 s")
        (worker,) = [
            pid
            for pid in children(cluster.workers[1].pid)
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        status = run.wait(60)
        assert status == 2, run.stderr
        assert "Traceback" not in run.stderr, run.stderr
        assert re.search(r"error: host \d \(load1, tcp://[^)]+\) lost", run.stderr)
        deadline = killed + COORDINATOR_GRACE_S + SLACK_S
        while count_clients(bench_db) or cluster.load_processes():
            assert time.monotonic() < deadline, run.stderr
            time.sleep(0.3)
        time.sleep(3)  # and none comes back
        assert count_clients(bench_db) == 0
        assert cluster.load_processes() == set()
    finally:
        if run is not None:
            run.kill()
        cluster.close()


def test_a_suspended_coordinator_leaves_no_load_and_reports_when_resumed(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    """Ctrl-Z on the coordinator (SIGSTOP here: SIGTSTP's effect): the
    hosts, their coordinator silent, stop their load; resumed, the
    coordinator reports what the hosts streamed, and says they were lost."""
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        load = cluster.load_processes() - before
        run.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        wait_no_load(bench_db, load, stopped, COORDINATOR_GRACE_S + SLACK_S)
        run.proc.send_signal(signal.SIGCONT)
        status = run.wait(60)
    finally:
        run.proc.send_signal(signal.SIGCONT)
        run.kill()
    assert status == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert_hosts_add_up(doc)


#: a Dask worker preload: the host cannot fork (out of memory)
_CANNOT_FORK = """\
import errno, os

def fork():
    raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

os.fork = fork
"""


def test_a_host_that_cannot_start_its_workers_says_why(
    bench_db: str, tmp_path: Path
) -> None:
    """A host out of memory (its fork fails): the run ended with
    ``error: OSError``, the name of the exception and nothing else."""
    preload = tmp_path / "nofork.py"
    preload.write_text(_CANNOT_FORK)
    run, status, _logs = _on_two_hosts(
        tmp_path,
        [
            *("-n", "-S", "-T", "30"),
            *("-c", "2", "-j", "2", bench_db),
        ],
        worker_args={1: ["--preload", str(preload)]},
    )
    assert status == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert re.search(
        r"pgsurge: host \d \(load1\): error: could not start the workers: "
        r"\[Errno 12\] Cannot allocate memory",
        run.stderr,
    ), run.stderr
    assert count_clients(bench_db) == 0


def test_a_killed_coordinator_of_a_local_cluster_leaves_no_process(
    bench_db: str, tmp_path: Path
) -> None:
    """``--dask local:2`` and SIGKILL on the coordinator: its local
    cluster's processes (nannies, Dask workers, pgsurge workers) must not
    outlive it, nor their load."""
    from tests.fix_dask import children

    run = start_run(
        [
            *("--dask", "local:2", "-n", "-S", "-T", "60", "-c", "2", "-j", "2"),
            *("-P", "1", bench_db),
        ],
        tmp_path,
    )
    try:
        run.wait_for("progress: 1.0 s")
        tree: set[int] = set()
        todo = [run.proc.pid]
        while todo:
            kids = children(todo.pop())
            tree |= kids
            todo.extend(kids)
        assert len(tree) >= 4, tree  # 2 Dask workers, 2 pgsurge workers
        run.proc.kill()
        killed = time.monotonic()
        run.wait(30)
    finally:
        run.kill()
    wait_no_load(bench_db, tree, killed, COORDINATOR_GRACE_S + SLACK_S)


def test_the_scheduler_killed_before_the_start_leaves_no_load(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    run = start_run(_args(cluster, bench_db), tmp_path)
    try:
        cluster.kill_scheduler()
        killed = time.monotonic()
        status = run.wait(60)
    finally:
        run.kill()
    assert status == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "error: the Dask scheduler tcp://127.0.0.1:" in run.stderr
    deadline = killed + COORDINATOR_GRACE_S + SLACK_S
    while count_clients(bench_db) or cluster.load_processes():
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_a_host_that_cannot_read_its_task_logs_no_password(
    bench_db: str, tmp_path: Path
) -> None:
    """A load host whose pgsurge has no ``pgsurge.distributed`` (an old
    one): Dask cannot unpickle the task there and logs its pickled bytes,
    in which the password of the target stood in clear (now masked, its
    pad sent apart)."""
    preload = tmp_path / "old_pgsurge.py"
    preload.write_text("import sys\nsys.modules['pgsurge.distributed'] = None\n")
    password = "Farm-s3cret-pw"
    run, status, logs = _on_two_hosts(
        tmp_path,
        [
            *("-n", "-S", "-T", "30"),
            *("-c", "2", "-j", "2", f"{bench_db} password={password}"),
        ],
        worker_args={1: ["--preload", str(preload)]},
    )
    # Dask did log the task it could not read: without the password
    assert "Failed to deserialize" in logs[2], logs[2][-2000:]
    for text in (run.stdout, run.stderr, *logs):
        assert password not in text
    # (Dask's worker drops its connection over the message it cannot
    # read: the host is lost, and the run ends before any load)
    assert status == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert re.search(r"error: host \d \(load1, tcp://[^)]+\) lost", run.stderr)
    assert count_clients(bench_db) == 0


def test_a_host_where_pgsurge_is_not_installed_is_named(
    bench_db: str, tmp_path: Path
) -> None:
    """A load host whose Python has Dask but no pgsurge (its site-packages
    without pgsurge's own path): the host's Dask worker dropped its
    connection over the task it could not read, and the run said only that
    the host was lost ("its Dask worker left the cluster"). Now the hosts
    are asked first, and the run stops there with one line naming it."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    bare = ["env", f"PYTHONPATH={site}", sys.executable, "-S"]
    run, status, _logs = _on_two_hosts(
        tmp_path,
        [
            *("-n", "-S", "-T", "30"),
            *("-c", "2", "-j", "2", bench_db),
        ],
        worker_prefix={1: bare},
    )
    assert status == 1, run.stderr
    assert re.fullmatch(
        r"pgsurge: error: pgsurge cannot be imported on the Dask worker "
        r"load1 \(tcp://[^)]+\)\n"
        r"pgsurge: hint: Install it there, the same version on every load "
        r"host: pip install 'pgsurge\[dask\]'\n",
        run.stderr,
    ), run.stderr
    assert count_clients(bench_db) == 0
