"""Multi-host runs on Dask (``--dask``) against a real server, on loopback.

In-process runs with ``--dask local:2`` (a LocalCluster of two worker
processes) check the merged result: exactly the transactions of a
one-host run, the merged histogram equal to the merge of the hosts', the
same per-client random values whatever the layout, the aggregate ``-R``
rate, one ``-P`` line per interval, the interval series merged from the
deltas the hosts stream. A real cluster (``dask scheduler`` and
two ``dask worker`` processes started here, as a user would start them on
their machines) runs the command line, and loses one of its workers in
the middle of a run.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.distributed import dask_driver
from pgsurge.distributed.coordinator import LOSS_GRACE_S
from pgsurge.distributed.coordinator import drive as dask_drive
from pgsurge.errors import ExitStatus
from pgsurge.report.json import JSON_PERCENTILES
from pgsurge.runner import run
from pgsurge.stats.histogram import Histogram, merged
from pgsurge.stats.results import RunResult
from pgsurge.stats.series import IntervalStats
from tests.fix_dask import (
    SLACK_S,
    Cluster,
    base_env,
    committed,
    count_clients,
    pgsurge_cmd,
    run_cli,
    wait_running_clients,
)

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture
def bench_db(fresh_db: str, pgbench_bin: Path) -> str:
    subprocess.run(
        [str(pgbench_bin), "-i", "-s", "1", "-q", fresh_db],
        check=True,
        capture_output=True,
        env=base_env(),
    )
    return fresh_db


def run_inprocess(
    args: list[str], dsn: str, drive: Any = None
) -> tuple[ExitStatus, RunResult, str, str]:
    cfg = parse_command_line([*args, dsn])
    assert isinstance(cfg, RunConfig)
    if drive is None and cfg.dask:
        drive = dask_driver(cfg.dask)
    results: list[RunResult] = []
    out, err = io.StringIO(), io.StringIO()
    status = run(cfg, stdout=out, stderr=err, on_result=results.append, drive=drive)
    assert results, err.getvalue()
    return status, results[0], out.getvalue(), err.getvalue()


#: report lines that depend on timing
_TIMED = re.compile(r"^(latency|initial connection|tps|  *[0-9.]+ ms)")


def test_two_hosts_process_exactly_the_transactions_of_one(bench_db: str) -> None:
    args = ["-n", "-S", "-t", "1000", "-c", "8", "-j", "2", "--percentiles"]
    status1, one, out1, _ = run_inprocess(args, bench_db)
    status2, two, out2, err2 = run_inprocess(["--dask", "local:2", *args], bench_db)
    assert status1 == status2 == ExitStatus.SUCCESS, err2
    assert one.total.cnt == two.total.cnt == 8000
    assert two.total.failures == 0 and two.aborted_clients == 0
    assert two.clients_finished == 8 and two.workers == 2
    # the report is the one-host report but for the timings
    keep = [line for line in out1.splitlines() if not _TIMED.match(line)]
    assert keep == [line for line in out2.splitlines() if not _TIMED.match(line)]
    assert "number of transactions actually processed: 8000/8000" in out2
    # two hosts, four clients each, their own figures and clock offsets
    assert [(h["clients"], h["transactions"]) for h in two.hosts] == [
        (4, 4000),
        (4, 4000),
    ]
    assert all(abs(h["clock_offset_us"]) <= h["clock_rtt_us"] for h in two.hosts)
    assert "dask: host 0 tcp://127.0.0.1:" in err2
    # the run's histogram is the exact merge of the hosts' histograms
    hists = [Histogram.from_dict(h["latency_histogram"]) for h in two.hosts]
    merged = Histogram(hists[0].digits)
    for h in hists:
        merged.merge(h)
    assert two.histograms is not None
    assert merged == two.histograms.latency
    assert merged.count == 8000
    ps = (50.0, 90.0, 99.0, 99.9)
    assert merged.percentiles(ps) == two.histograms.latency.percentiles(ps)


SEED_SCRIPT = """\
\\set r random(1, 1000000000)
\\set z random_zipfian(1, 1000, 1.5)
insert into dask_seed (client, r, z) values (:client_id, :r, :z);
"""


def _per_client(dsn: str) -> dict[int, list[tuple[int, int]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select client, array_agg(array[r, z] order by id)"
            " from dask_seed group by client order by client"
        ).fetchall()
        conn.execute("truncate dask_seed")
    return {c: [tuple(p) for p in values] for c, values in rows}


def test_random_seed_gives_the_same_values_on_one_and_two_hosts(
    fresh_db: str, tmp_path: Path
) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(
            "create table dask_seed (id bigserial, client int, r bigint, z bigint)"
        )
    script = tmp_path / "seed.sql"
    script.write_text(SEED_SCRIPT)
    args = ["-n", "-f", str(script), "-t", "20", "-c", "6", "--random-seed", "4242"]
    status, _, _, err = run_inprocess([*args, "-j", "1"], fresh_db)
    assert status == ExitStatus.SUCCESS, err
    one_host = _per_client(fresh_db)
    status, res, _, err = run_inprocess(
        ["--dask", "local:2", *args, "-j", "3"], fresh_db
    )
    assert status == ExitStatus.SUCCESS, err
    assert [h["clients"] for h in res.hosts] == [4, 2]  # 3 workers: 2 + 1
    two_hosts = _per_client(fresh_db)
    assert sorted(one_host) == list(range(6))
    assert all(len(v) == 20 for v in one_host.values())
    assert two_hosts == one_host


def test_rate_and_progress_over_two_hosts(bench_db: str) -> None:
    status, res, _, err = run_inprocess(
        [
            *("--dask", "local:2", "-n", "-S", "-c", "4", "-j", "2"),
            *("-R", "2000", "-T", "6", "-P", "1", "--percentiles"),
        ],
        bench_db,
    )
    assert status == ExitStatus.SUCCESS, err
    tps = res.total.cnt * 1e6 / res.total_duration_us
    assert abs(tps - 2000) / 2000 < 0.03, tps
    # each host's share in proportion to its workers (one each): half
    assert [h["workers"] for h in res.hosts] == [1, 1]
    assert all(abs(h["tps"] - 1000) / 1000 < 0.05 for h in res.hosts), res.hosts
    # one line per interval, every host in each, in order
    times = [
        float(m.group(1)) for m in re.finditer(r"^progress: ([0-9.]+) s", err, re.M)
    ]
    assert times[:5] == [1.0, 2.0, 3.0, 4.0, 5.0], err
    assert len(times) in (5, 6) and times == sorted(set(times)), err
    assert "hosts " not in err  # no host was late
    # the interval series of the hosts line up on the common start
    assert len(res.intervals) >= 6
    assert sum(iv.stats.cnt for iv in res.intervals) == res.total.cnt


def test_interval_series_is_the_merge_of_the_hosts_streamed_deltas(
    bench_db: str, tmp_path: Path
) -> None:
    deltas: list[tuple[int, IntervalStats, bool]] = []
    drive = partial(
        dask_drive, "local:2", on_interval=lambda *delta: deltas.append(delta)
    )
    out_json = tmp_path / "run.json"
    status, res, _, err = run_inprocess(
        [
            *("--dask", "local:2", "-n", "-S", "-c", "4", "-j", "2"),
            *("-T", "4", "-P", "1", "--json", str(out_json)),
        ],
        bench_db,
        drive,
    )
    assert status == ExitStatus.SUCCESS, err
    # every host streamed its complete intervals while the run went on (only
    # each worker's last one comes with the results)
    for host in (0, 1):
        streamed = [iv for h, iv, s in deltas if h == host and s]
        assert len(streamed) >= 3, deltas
    by_start: dict[int, list[Histogram]] = {}
    counts: dict[int, int] = {}
    for _, iv, _ in deltas:
        by_start.setdefault(iv.start_us, []).append(iv.latency_hist())
        counts[iv.start_us] = counts.get(iv.start_us, 0) + iv.stats.cnt
    assert all(len(hists) == 2 for hists in by_start.values()), by_start
    # the run's series: the hosts' deltas merged interval by interval
    assert [iv.start_us for iv in res.intervals] == sorted(by_start)
    assert [iv.stats.cnt for iv in res.intervals] == [counts[s] for s in sorted(counts)]
    assert sum(counts.values()) == res.total.cnt
    for iv in res.intervals:
        assert iv.latency_hist() == merged(by_start[iv.start_us])
    # the JSON's per-interval percentiles are those of the merged histogram,
    # computed as for a one-host run
    doc = json.loads(out_json.read_text())
    ps = sorted(JSON_PERCENTILES)
    assert len(doc["intervals"]) == len(by_start)
    for point, start in zip(doc["intervals"], sorted(by_start), strict=True):
        assert point["processed"] == counts[start]
        want = [v / 1000.0 for v in merged(by_start[start]).percentiles(ps)]
        assert list(point["latency_ms"]["percentiles"].values()) == want
    # and each host's deltas add up to its own run-total histogram
    for host in doc["hosts"]:
        mine = merged([iv.latency_hist() for h, iv, _ in deltas if h == host["index"]])
        assert mine == Histogram.from_dict(host["latency_histogram"])


#: pgbench's -l line without -R and --max-tries: client_id transaction_no
#: time script_no time_epoch time_us
_LOG_LINE = re.compile(r"^(\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$")


def _log_lines(paths: list[Path]) -> list[tuple[int, ...]]:
    lines = []
    for path in paths:
        for line in path.read_text().splitlines():
            m = _LOG_LINE.match(line)
            assert m, (path.name, line)
            lines.append(tuple(int(x) for x in m.groups()))
    return lines


def test_log_files_of_two_hosts_are_written_and_collected(
    bench_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, out_dir = tmp_path / "run", tmp_path / "collected"
    run_dir.mkdir()
    out_dir.mkdir()
    monkeypatch.chdir(run_dir)  # the local cluster's workers start here
    t0 = time.time()
    status, res, _, err = run_inprocess(
        [
            *("--dask", "local:2", "-n", "-S", "-c", "4", "-j", "2"),
            *("-t", "100", "-l", "--dask-collect-logs", str(out_dir)),
        ],
        bench_db,
    )
    t1 = time.time()
    assert status == ExitStatus.SUCCESS, err
    assert res.total.cnt == 400
    # a one-machine run's names (the coordinator's pid, global worker
    # numbers): one file per worker, worker 0 on host 0, worker 1 on host 1
    names = [f"pgbench_log.{os.getpid()}", f"pgbench_log.{os.getpid()}.1"]
    # the hosts wrote them in their working directory (with local:N, ours)
    assert sorted(p.name for p in run_dir.iterdir()) == names
    assert sorted(p.name for p in out_dir.iterdir()) == names
    for name in names:
        assert (out_dir / name).read_bytes() == (run_dir / name).read_bytes()
    assert f'dask: 2 -l files in "{out_dir}"' in err
    # every transaction has exactly one line, in pgbench's format
    lines = _log_lines(sorted(out_dir.iterdir()))
    assert sorted((c, n) for c, n, *_ in lines) == [
        (c, n) for c in range(4) for n in range(1, 101)
    ]
    assert {script for _, _, _, script, _, _ in lines} == {0}
    assert all(int(t0) <= epoch <= t1 for *_, epoch, _ in lines)
    assert all(0 < lat < 10_000_000 for _, _, lat, *_ in lines)


def test_collecting_logs_follows_no_planted_link(
    bench_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted in --dask-collect-logs' directory under a log's name
    is not written through (hostile finding: root overwrote what it named)."""
    run_dir, out_dir = tmp_path / "run", tmp_path / "collected"
    run_dir.mkdir()
    out_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = out_dir / f"pgbench_log.{os.getpid()}"
    planted.symlink_to(victim)
    monkeypatch.chdir(run_dir)
    _, res, _, err = run_inprocess(
        [
            *("--dask", "local:2", "-n", "-S", "-c", "2", "-j", "2"),
            *("-t", "20", "-l", "--dask-collect-logs", str(out_dir)),
        ],
        bench_db,
    )
    assert res.total.cnt == 40, err
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink()
    assert f'could not collect "pgbench_log.{os.getpid()}"' in err, err
    # the other host's file is collected as usual
    other = f"pgbench_log.{os.getpid()}.1"
    assert (out_dir / other).read_bytes() == (run_dir / other).read_bytes()


def test_a_rescheduled_host_task_starts_no_load() -> None:
    """A host task that Dask would run again after the run started (its
    worker lost mid-run) returns at once, without starting processes."""
    from distributed import Client, Event, LocalCluster

    from pgsurge.distributed.host import Sealed, host_task, names

    with (
        # in this process (its own worker thread): no load can start here
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        Event(names("r1")["start"], client=client).set()
        outcome = client.submit(host_task, "r1", 0, Sealed([]), pure=False).result(30)
        assert (outcome.status, outcome.results) == ("stale", [])
        Event(names("r2")["stop"], client=client).set()
        outcome = client.submit(host_task, "r2", 0, Sealed([]), pure=False).result(30)
        assert outcome.status == "stale"


# -- a real cluster: dask scheduler + dask worker processes -------------------


SECRET = "xyzzy-t16-secret"


@pytest.fixture
def secret_dsn(bench_db: str) -> Iterator[str]:
    """``bench_db`` as a role with a password given in the conninfo (the
    server may trust local connections: the password is then unused)."""
    role = "dask_secret_user"
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(f"create role {role} login password '{SECRET}'")
        conn.execute(f"grant select on all tables in schema public to {role}")
    yield psycopg.conninfo.make_conninfo(bench_db, user=role, password=SECRET)
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(f"drop owned by {role}")
        conn.execute(f"drop role {role}")


def test_real_cluster_runs_the_command_line(
    secret_dsn: str, cluster: Cluster, tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    here = tmp_path / "coordinator"
    here.mkdir()
    status, out, err, pid = run_cli(
        [
            *("--dask", cluster.address, "-n", "-S", "-t", "1000", "-c", "8"),
            *("-j", "2", "--json", str(out_json), "-l", "--sampling-rate", "0.1"),
            *("--dask-collect-logs", ".", secret_dsn),
        ],
        cwd=here,
    )
    assert status == 0, err
    assert "number of transactions actually processed: 8000/8000" in out
    doc = json.loads(out_json.read_text())
    hosts = doc["hosts"]
    assert sorted(h["name"] for h in hosts) == ["load0", "load1"]
    assert [h["transactions"] for h in hosts] == [4000, 4000]
    assert not any(h["lost"] or h["partial"] for h in hosts)
    # each host's clock offset, measured directly with the coordinator:
    # one machine's monotonic clock, so the true offset (0) is within the
    # error bound
    for h in hosts:
        assert h["clock_method"] == "direct"
        assert h["clock_error_us"] == (h["clock_rtt_us"] + 1) // 2
        assert abs(h["clock_offset_us"]) <= h["clock_error_us"], h
    # the password went to the hosts (inside the tasks) and nowhere else
    for text in (out, err, out_json.read_text()):
        assert SECRET not in text
    for log in cluster.logs:
        assert SECRET not in log.read_text(errors="replace"), log
    # each host wrote its worker's -l file in its own working directory;
    # they were brought here, as a one-machine run names them
    # (which Dask worker became host 0 is the scheduler's choice)
    names = [f"pgbench_log.{pid}", f"pgbench_log.{pid}.1"]
    written = {}
    for cwd in cluster.dirs:
        (name,) = [p.name for p in cwd.iterdir()]
        written[name] = cwd
    assert sorted(written) == names
    for name, cwd in written.items():
        assert (here / name).read_bytes() == (cwd / name).read_bytes()
    assert sorted(p.name for p in here.iterdir()) == names
    lines = _log_lines([here / n for n in names])
    assert 400 < len(lines) < 1200  # about 10 % of 8000
    assert len({(c, n) for c, n, *_ in lines}) == len(lines)


def test_log_files_already_in_place_are_left_alone(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    # every host of this machine writes into the directory collected into
    shared = tmp_path / "shared"
    shared.mkdir()
    status, _, err, pid = run_cli(
        [
            *("--dask", cluster.address, "-n", "-S", "-t", "50", "-c", "2"),
            *("-j", "2", "-l", "--log-prefix", str(shared / "x")),
            *("--dask-collect-logs", str(shared), bench_db),
        ]
    )
    assert status == 0, err
    assert f'dask: 2 -l files in "{shared}" (0 bytes copied' in err
    names = sorted(p.name for p in shared.iterdir())
    assert names == [f"x.{pid}", f"x.{pid}.1"]
    assert len(_log_lines(sorted(shared.iterdir()))) == 100


def test_lost_host_ends_the_run_with_a_partial_report(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    err_path = tmp_path / "stderr"
    out_json = tmp_path / "run.json"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            pgsurge_cmd(
                *("--dask", cluster.address, "-n", "-S", "-T", "60", "-c", "4"),
                *("-j", "2", "--json", str(out_json), bench_db),
            ),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=base_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while "pgsurge: dask:" not in err_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # the hosts under way and some load measured (the common start is
        # 2 s ahead of the dask: line, a fixed 4 s did not always cover it
        # on a loaded box): each host then has far more than 100 in
        wait_running_clients(bench_db, 4, proc)
        base = committed(bench_db)
        while committed(bench_db) - base < 2000:
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline + 60, "no load measured"
            time.sleep(0.2)
        cluster.kill_worker(1)
        killed = time.monotonic()
        stdout, _ = proc.communicate(timeout=30)
        elapsed = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = err_path.read_text()
    assert proc.returncode == 2, stderr
    # lost within the grace, not at -T 60's end (SLACK_S: what a loaded box adds)
    assert elapsed < LOSS_GRACE_S + SLACK_S, elapsed
    # (hosts are numbered in the order of their addresses)
    lost = re.findall(
        r"error: host [01] \(load[01], tcp://127\.0\.0\.1:\d+\) lost", stderr
    )
    assert len(lost) == 1, stderr
    assert "Run was aborted" in stderr
    # the partial report: what the hosts measured until then
    processed = re.search(r"number of transactions actually processed: (\d+)", stdout)
    assert processed is not None, stdout
    assert int(processed.group(1)) > 100
    doc = json.loads(out_json.read_text())
    assert doc["aborted"] and doc["aborted_clients"] == 2
    assert sorted((h["lost"], h["partial"]) for h in doc["hosts"]) == [
        (False, True),
        (True, False),
    ]
    # no load is left, and none starts again (Dask does not rerun the lost
    # host's task on the other worker)
    deadline = time.monotonic() + 10
    while count_clients(bench_db):
        assert time.monotonic() < deadline, "a host kept running"
        time.sleep(0.2)
    time.sleep(2)
    assert count_clients(bench_db) == 0


def test_interrupt_stops_every_host(
    bench_db: str, cluster: Cluster, tmp_path: Path
) -> None:
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            pgsurge_cmd(
                *("--dask", cluster.address, "-n", "-S", "-T", "60", "-c", "4"),
                *("-j", "2", bench_db),
            ),
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=base_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while "pgsurge: dask:" not in err_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # every client under way (a fixed 3 s did not always cover the
        # hosts' start on a loaded box)
        wait_running_clients(bench_db, 4, proc)
        assert count_clients(bench_db) == 4
        proc.send_signal(signal.SIGINT)  # the coordinator only, as a Ctrl-C
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the hosts stop their workers: their connections go away
    deadline = time.monotonic() + 10
    while count_clients(bench_db):
        assert time.monotonic() < deadline, "the hosts kept running"
        time.sleep(0.2)
