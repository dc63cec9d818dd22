"""Multi-host runs that survive failure (issue 24), on a real cluster.

A ``dask scheduler`` and two ``dask worker`` processes on loopback
(``tests.fix_dask``), pgsurge's command line run against them, and then
something goes wrong in the middle of the run: the coordinator is killed
or interrupted, a host or one of its pgsurge workers is killed, the
scheduler dies, a host stops for a while. Every time no load is left
behind, what was measured is reported (the report, the JSON: at least
what the progress lines showed), and the exit status is a local run's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pgsurge.distributed.watch import COORDINATOR_GRACE_S
from tests.fix_dask import (
    SLACK_S,
    Cluster,
    Run,
    assert_kept,
    assert_progress_honest,
    base_env,
    count_clients,
    pgsurge_cmd,
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


def _load(cluster: Cluster, before: set[int], dsn: str, run: Run) -> set[int]:
    """The run's pgsurge workers, once its first -P line is out."""
    run.wait_for("progress: 1.0 s")
    assert count_clients(dsn) == 4
    load = cluster.load_processes() - before
    assert len(load) == 2, load  # one worker on each host
    return load


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name
)
def test_the_coordinators_death_stops_every_host(
    sig: signal.Signals, bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db), tmp_path)
    try:
        load = _load(cluster, before, bench_db, run)
        time.sleep(1)
        run.proc.send_signal(sig)
        signalled = time.monotonic()
        status = run.wait(30)
    finally:
        run.kill()
    # within the documented grace (SIGKILL: the hosts notice the silence)
    wait_no_load(bench_db, load, signalled, COORDINATOR_GRACE_S + SLACK_S)
    assert status == -sig, run.stderr
    if sig == signal.SIGTERM:  # as a local run: the report of what ran
        assert "run interrupted by SIGTERM after" in run.stderr
        assert processed(run.stdout) > 0
    # and none starts again
    time.sleep(2)
    assert count_clients(bench_db) == 0


def test_ctrl_c_keeps_what_was_measured(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        load = _load(cluster, before, bench_db, run)
        time.sleep(3)
        run.proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        status = run.wait(30)
    finally:
        run.kill()
    assert status == -signal.SIGINT, run.stderr
    assert "run interrupted by SIGINT after" in run.stderr
    doc = json.loads(out_json.read_text())
    assert doc["interrupted"]["signal"] == "SIGINT"
    assert_kept(run.stdout, run.stderr, doc)
    # the hosts stopped gracefully: every transaction in flight finished,
    # each host's figures are complete (histograms too)
    assert not any(h["lost"] for h in doc["hosts"])
    assert all(h["latency_histogram"] for h in doc["hosts"])
    assert doc["histograms"]["latency"]["count"] == doc["totals"]["processed"]
    assert doc["intervals"]
    wait_no_load(bench_db, load, signalled, SLACK_S)


def test_a_killed_host_counts_what_it_streamed(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        load = _load(cluster, before, bench_db, run)
        time.sleep(4)
        cluster.kill_worker(1)
        killed = time.monotonic()
        status = run.wait(40)
    finally:
        run.kill()
    assert status == 2, run.stderr
    assert re.search(r"error: host \d \(load1, tcp://[^)]+\) lost", run.stderr)
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert doc["aborted"] and doc["aborted_clients"] == 2
    lost = [h for h in doc["hosts"] if h["lost"]]
    assert [h["name"] for h in lost] == ["load1"]
    # the lost host's streamed figures count: its transactions, its
    # histogram (from its intervals), the intervals every host delivered
    assert lost[0]["transactions"] > 0 and lost[0]["latency_histogram"]
    assert doc["intervals"]
    assert "degraded" in doc
    wait_no_load(bench_db, load, killed, SLACK_S)


def test_a_killed_worker_process_on_a_host_keeps_the_report(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        load = _load(cluster, before, bench_db, run)
        (victim,) = cluster.host_processes(1) & load
        time.sleep(3)
        signal_kill = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        status = run.wait(40)
    finally:
        run.kill()
    assert status == 2, run.stderr
    assert re.search(
        rf"pgsurge: host \d \(load1\): error: worker \d \(pid {victim}\) died: "
        "killed by signal 9",
        run.stderr,
    ), run.stderr
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert doc["aborted_clients"] == 2
    assert not any(h["lost"] for h in doc["hosts"])
    wait_no_load(bench_db, load, signal_kill, SLACK_S)


def test_a_dead_scheduler_keeps_what_was_streamed(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    before = cluster.load_processes()
    run = start_run(_args(cluster, bench_db, "--json", str(out_json)), tmp_path)
    try:
        load = _load(cluster, before, bench_db, run)
        time.sleep(3)
        cluster.kill_scheduler()
        killed = time.monotonic()
        status = run.wait(60)
    finally:
        run.kill()
    assert status == 2, run.stderr
    assert "error: the Dask scheduler tcp://127.0.0.1:" in run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert all(h["lost"] for h in doc["hosts"])
    # the hosts, cut off, stop on their own
    wait_no_load(bench_db, load, killed, COORDINATOR_GRACE_S + SLACK_S)


def test_progress_stays_honest_when_a_host_stalls(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    args = _args(cluster, bench_db)
    args[args.index("60")] = "12"
    run = start_run(args, tmp_path)
    try:
        time.sleep(5)
        cluster.signal_host(1, signal.SIGSTOP)
        time.sleep(3.5)
        cluster.signal_host(1, signal.SIGCONT)
        status = run.wait(60)
    finally:
        cluster.signal_host(1, signal.SIGCONT)
        run.kill()
    assert status == 0, run.stderr
    lines = assert_progress_honest(run.stderr)
    assert len(lines) >= 10, run.stderr
    assert processed(run.stdout) >= sum(tps for _, tps, _ in lines) - len(lines)


def test_a_second_run_waits_for_the_busy_hosts(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    # the first run ends when told, once the second waits for its hosts:
    # a -T of its own (20 s) could end before a second coordinator slow to
    # start on a loaded box came (test_hostile_dask's -T 8 run did)
    args = _args(cluster, bench_db)
    args[args.index("60")] = "600"
    first = start_run(args, tmp_path)
    second = None
    try:
        first.wait_for("progress: 1.0 s")
        second = Run(
            [
                *("--dask", cluster.address, "-n", "-S", "-t", "100", "-c", "2"),
                *("-j", "2", bench_db),
            ],
            tmp_path,
        )
        try:
            second.wait_for("waiting for 2 load hosts: busy with another run", 30)
        except AssertionError:
            raise AssertionError(first.stderr + "\n----\n" + second.stderr) from None
        first.proc.send_signal(signal.SIGINT)
        assert first.wait(60) == -signal.SIGINT, first.stderr
        assert second.wait(60) == 0, second.stderr
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert "lost" not in first.stderr + second.stderr
    assert "run interrupted by SIGINT after" in first.stderr
    assert "processed: 200/200" in second.stdout
    assert second.stderr.count("waiting for") == 1


def test_ctrl_c_on_a_local_cluster_reaches_no_dask_worker(
    bench_db: str, tmp_path: Path
) -> None:
    """Ctrl-C reaches the terminal's whole process group: with ``local:N``
    that includes the local cluster's Dask workers, which must not die of
    it (every host would be lost)."""
    out_json = tmp_path / "run.json"
    err = tmp_path / "stderr"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            pgsurge_cmd(
                *("--dask", "local:2", "-n", "-S", "-T", "60", "-c", "2", "-j", "2"),
                *("-P", "1", "--json", str(out_json), bench_db),
            ),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=base_env(),
            start_new_session=True,  # its own process group, as a terminal's
        )
    try:
        deadline = time.monotonic() + 90
        while "progress: 2.0 s" not in err.read_text():
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # as the terminal sends Ctrl-C
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr_text = err.read_text()
    assert proc.returncode == -signal.SIGINT, stderr_text
    assert "run interrupted by SIGINT after" in stderr_text
    assert "lost" not in stderr_text and "Traceback" not in stderr_text
    doc = json.loads(out_json.read_text())
    assert doc["interrupted"]["signal"] == "SIGINT"
    assert_kept(stdout, stderr_text, doc)
