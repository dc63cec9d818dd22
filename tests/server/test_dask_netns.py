"""A multi-host run with one host in a network namespace behind a link
that fails (issue 24): ``load0`` on loopback, ``load1`` in a namespace
whose every connection (to the scheduler, from it, to PostgreSQL) crosses
a userspace relay that delays, stalls or cuts (``tests.fix_netns``).

A host cut off from the coordinator stops its own load within the
documented grace, and the coordinator reports what was measured; a slow
or stalled host never makes the ``-P`` lines lie.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from pgsurge.distributed.watch import COORDINATOR_GRACE_S
from tests.fix_dask import (
    SLACK_S,
    assert_kept,
    assert_progress_honest,
    count_clients,
    processed,
    run_cli,
    start_run,
    wait_no_load,
)
from tests.fix_netns import NetnsCluster

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _args(cluster: NetnsCluster, seconds: int, *more: str) -> list[str]:
    return [
        *("--dask", cluster.address, "-n", "-S", "-T", str(seconds), "-c", "4"),
        *("-j", "2", "-P", "1", *more, cluster.dsn),
    ]


#: two scripts and -r: the report has per-script and per-command figures
TWO_SCRIPTS = ("-b", "select-only@3", "-b", "simple-update", "-r")


def _lost_line(cluster: NetnsCluster) -> re.Pattern[str]:
    return re.compile(
        rf"error: host \d \(load1, {re.escape(cluster.ns_address)}\) lost: "
    )


@pytest.mark.parametrize(
    "how",
    ["partition", "reset", "whole-link"],
)
def test_a_host_cut_off_stops_its_own_load(
    how: str, bench_db: str, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """The namespaced host's Dask connections stall (a partition: nothing
    crosses, nothing closes) or are reset, PostgreSQL still reachable; or
    its whole link stalls, PostgreSQL's connections too."""
    cluster = netns_cluster
    out_json = tmp_path / "run.json"
    args = _args(cluster, 60, "--json", str(out_json), *TWO_SCRIPTS)
    args.remove("-S")
    run = start_run(args, tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        assert count_clients(bench_db) == 4
        load = cluster.namespace_load()
        assert len(load) == 1, load  # the host's pgsurge worker
        time.sleep(1)
        if how == "reset":
            cluster.link.cut(("dask",))
        else:
            cluster.link.stall(("dask",) if how == "partition" else ("dask", "pg"))
        cut = time.monotonic()
        status = run.wait(60)
    finally:
        run.kill()
    # the coordinator: what was measured, the host named as lost
    assert status == 2, run.stderr
    assert _lost_line(cluster).search(run.stderr), run.stderr
    doc = json.loads(out_json.read_text())
    assert_kept(run.stdout, run.stderr, doc)
    assert doc["degraded"]["lost_hosts"], doc["degraded"]
    assert [h["name"] for h in doc["hosts"] if h["lost"]] == ["load1"], run.stderr
    # the lost host's last snapshot counts per script and per command too
    total = processed(run.stdout)
    per_script = [int(n) for n in re.findall(r" - (\d+) transactions \(", run.stdout)]
    assert len(per_script) == 2 and sum(per_script) == total, run.stdout
    assert sum(s["processed"] for s in doc["scripts"]) == total
    assert len(re.findall(r"statement latencies in milliseconds", run.stdout)) == 2
    # the series: the intervals both hosts delivered, then the survivor's,
    # marked
    marks = [p.get("hosts") for p in doc["intervals"]]
    lost_at = marks.index({"counted": 1, "of": 2})
    assert lost_at >= 1 and all(m is None for m in marks[:lost_at]), marks
    assert all(m == {"counted": 1, "of": 2} for m in marks[lost_at:]), marks
    # the host, cut off: its workers stop on their own within the grace
    deadline = cut + COORDINATOR_GRACE_S + SLACK_S
    while left := cluster.namespace_load():
        assert time.monotonic() < deadline, cluster.describe(left)
        time.sleep(0.2)
    if how == "whole-link":
        # its backends wait for the link: when it is back, they end and no
        # load comes back with it
        cluster.link.resume()
        cut = time.monotonic()
    wait_no_load(bench_db, load, cut, COORDINATOR_GRACE_S + SLACK_S)
    time.sleep(2)
    assert count_clients(bench_db) == 0
    left = cluster.namespace_load()
    assert not left, cluster.describe(left)


def test_progress_stays_honest_behind_a_slow_link(
    netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """2.5 s more on every byte to and from the namespaced host for a
    while: its ticks come late, the lines never go back or lie."""
    cluster = netns_cluster
    run = start_run(_args(cluster, 14), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        cluster.link.set_delay(2.5)
        time.sleep(5)
        cluster.link.set_delay(0)
        status = run.wait(90)
    finally:
        run.kill()
    assert status == 0, run.stderr
    lines = assert_progress_honest(run.stderr)
    assert len(lines) >= 10, run.stderr
    assert processed(run.stdout) >= sum(tps for _, tps, _ in lines) - len(lines)
    assert "lost" not in run.stderr


def test_progress_stays_honest_when_the_namespaced_host_stalls(
    netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    cluster = netns_cluster
    run = start_run(_args(cluster, 12), tmp_path)
    try:
        run.wait_for("progress: 2.0 s")
        cluster.signal_host(1, signal.SIGSTOP)
        time.sleep(3.5)
        cluster.signal_host(1, signal.SIGCONT)
        status = run.wait(90)
    finally:
        cluster.signal_host(1, signal.SIGCONT)
        run.kill()
    assert status == 0, run.stderr
    lines = assert_progress_honest(run.stderr)
    assert len(lines) >= 10, run.stderr
    assert processed(run.stdout) >= sum(tps for _, tps, _ in lines) - len(lines)


def test_a_password_over_plain_tcp_to_another_host_is_warned_about(
    netns_cluster: NetnsCluster, password_role: tuple[str, str], tmp_path: Path
) -> None:
    """The namespaced host is another machine for the network: the
    password would cross to it in clear on ``tcp://``."""
    import psycopg

    cluster = netns_cluster
    role, password = password_role
    target = psycopg.conninfo.make_conninfo(cluster.dsn, user=role, password=password)
    status, out, err, _ = run_cli(
        [
            "--dask",
            cluster.address,
            "-n",
            "-S",
            "-t",
            "50",
            "-c",
            "2",
            "-j",
            "2",
            target,
        ]
    )
    assert status == 0, err
    assert "processed: 100/100" in out
    warning = re.search(
        r"pgsurge: warning: the connection password travels in clear over "
        r"tcp:// to (.*): use a tls:// cluster",
        err,
    )
    assert warning is not None, err
    assert warning.group(1) == cluster.ns_address  # (not the loopback ones)
    assert password not in out + err
