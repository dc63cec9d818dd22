"""Opt-in report lines: percentiles, client CPU, and the client-limited
warning; all pure functions of a RunResult."""

from __future__ import annotations

import time

import pytest

from pgsurge.report.extras import (
    client_cpu_lines,
    client_limited_warning,
    nothing_processed_warning,
    percentile_lines,
    render_extras,
)
from pgsurge.stats.cpu import CpuMeter, CpuTimes, WorkerCpu, thread_cpu
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import RunFacts, RunResult, ScriptInfo, WorkerResult
from pgsurge.stats.series import WorkerRecorder
from tests.fix_data import make_result


def facts(nscripts: int = 1, **kw) -> RunFacts:
    scripts = tuple(ScriptInfo(f"s{i}", 1, ("q",)) for i in range(nscripts))
    return RunFacts(
        pgsurge_version="0.1",
        server_version_num=180006,
        server_version="18.6",
        scripts=scripts,
        **kw,
    )


def result_with(
    latencies: list[list[int]],
    *,
    cpu: list[tuple[float, float, int]] = (),
    idle: list[int] = (),
    **kw,
) -> RunResult:
    """One worker per entry of ``cpu`` (or one), script i gets latencies[i]."""
    f = facts(len(latencies), **kw)
    workers = []
    for wid, (user, system, wall) in enumerate(cpu or [(0.0, 0.0, 1_000_000)]):
        w = WorkerResult.empty(wid, 1, [1] * len(latencies))
        rec = WorkerRecorder(w.total, [1] * len(latencies), anchor_us=0)
        if wid == 0:
            for i, lats in enumerate(latencies):
                for v in lats:
                    w.total.record(v, v // 100 if f.throttled else None)
                    w.per_script[i].record(v)
                    rec.latency(v)
                    rec.lag(v // 100)
                    rec.script[i](v)
        w.histograms, w.intervals = rec.finish(wall)
        w.cpu_user_s, w.cpu_sys_s = user, system
        w.bench_start_us, w.end_us = 0, wall
        if idle:
            w.idle_us = idle[wid]
        workers.append(w)
    return RunResult.from_workers(workers, f)


def test_percentile_line() -> None:
    r = result_with([list(range(1, 1001))])
    assert percentile_lines(r, (50, 90, 99, 99.9)) == [
        "latency percentiles: p50 = 0.500 ms, p90 = 0.900 ms, p99 = 0.990 ms, "
        "p99.9 = 0.999 ms"
    ]


def test_percentiles_per_script_and_lag() -> None:
    r = result_with([[1000, 2000], [5000]], rate=100.0)
    assert percentile_lines(r, (50, 100)) == [
        "latency percentiles: p50 = 2.000 ms, p100 = 5.000 ms",
        "rate limit schedule lag percentiles: p50 = 0.020 ms, p100 = 0.050 ms",
        "SQL script 1 latency percentiles: p50 = 1.000 ms, p100 = 2.000 ms",
        "SQL script 2 latency percentiles: p50 = 5.000 ms, p100 = 5.000 ms",
    ]


def test_percentiles_without_data() -> None:
    assert percentile_lines(result_with([[]])) == [
        "latency percentiles: no successful transaction"
    ]
    r = result_with([[5]])
    r.histograms = None
    assert percentile_lines(r) == []


def test_percentiles_never_exceed_max() -> None:
    r = result_with([[1_000_001, 1_000_001, 1_000_001]])
    assert percentile_lines(r, (99,)) == ["latency percentiles: p99 = 1000.001 ms"]


def test_client_cpu_lines() -> None:
    r = result_with([[100] * 4], cpu=[(1.5, 0.25, 2_000_000), (0.1, 0.0, 1_000_000)])
    assert client_cpu_lines(r) == [
        "client CPU: user 1.600 s, sys 0.250 s, 462500.0 us per transaction",
        "client CPU worker 0: CPU 87.5% (user 1.500 s, sys 0.250 s, wall 2.000 s)",
        "client CPU worker 1: CPU 10.0% (user 0.100 s, sys 0.000 s, wall 1.000 s)",
    ]
    r = result_with(
        [[100]], cpu=[(0.5, 0.1, 1_000_000), (0.1, 0.0, 1_000_000)], idle=[20_000, 0]
    )
    assert client_cpu_lines(r)[1:] == [
        "client CPU worker 0: busy 98.0%, CPU 60.0% "
        "(user 0.500 s, sys 0.100 s, wall 1.000 s)",
        "client CPU worker 1: busy 100.0%, CPU 10.0% "
        "(user 0.100 s, sys 0.000 s, wall 1.000 s)",
    ]
    assert render_extras(r) == ""
    assert render_extras(r, percentiles=(), client_cpu=True).splitlines() == [
        *percentile_lines(r),
        *client_cpu_lines(r),
    ]


@pytest.mark.parametrize(
    "cpu, clients, threads, expected",
    [
        ([(0.5, 0.2, 1_000_000)], 4, 1, ""),
        ([(0.9, 0.0, 1_000_000)], 4, 1, ""),  # exactly 90% is not "more than"
        (
            [(0.87, 0.1, 1_000_000)],
            32,
            1,
            "pgsurge: warning: worker 0 was busy 97% of the run: "
            "the client may be the bottleneck (try more -j)\n",
        ),
        (
            [(0.95, 0.0, 1_000_000), (0.99, 0.0, 1_000_000), (0.2, 0.0, 1_000_000)],
            3,
            3,
            "pgsurge: warning: 2 of 3 workers were busy more than 90% of the run "
            "(worker 1: 99%): the client may be the bottleneck "
            "(try more client machines)\n",
        ),
    ],
)
def test_client_limited_warning(cpu, clients, threads, expected) -> None:
    r = result_with([[100]], cpu=cpu, clients=clients, threads=threads)
    assert client_limited_warning(r) == expected


def test_client_limited_uses_idle_time_when_measured() -> None:
    # an oversubscribed machine: 60% CPU, but the loop never waited
    r = result_with([[100]], cpu=[(0.6, 0.0, 1_000_000)], idle=[30_000], clients=8)
    assert client_limited_warning(r) == (
        "pgsurge: warning: worker 0 was busy 97% of the run: "
        "the client may be the bottleneck (try more -j)\n"
    )
    # 95% CPU but mostly waiting: not the client's fault
    r = result_with([[100]], cpu=[(0.95, 0.0, 1_000_000)], idle=[500_000])
    assert client_limited_warning(r) == ""


def test_worker_cpu_utilisation() -> None:
    assert WorkerCpu(0, 0.5, 0.5, 2_000_000).utilisation == 0.5
    assert WorkerCpu(0, 0.5, 0.5, 0).utilisation == 0.0
    assert WorkerCpu(0, 0.95, 0.0, 1_000_000).busy
    assert WorkerCpu(0, 0.1, 0.0, 1_000_000, idle_us=50_000).busy_fraction == 0.95
    assert WorkerCpu.from_dict(WorkerCpu(3, 1.0, 2.0, 5, 1).to_dict()) == WorkerCpu(
        3, 1.0, 2.0, 5, 1
    )


def test_cpu_meter_measures_this_thread() -> None:
    meter = CpuMeter()
    meter.start()
    # spin until this thread has used 0.1 s of CPU, however loaded the
    # machine is; the meter must agree with the kernel's thread clock
    c0 = time.thread_time()
    h = Histogram()
    while time.thread_time() - c0 < 0.1:
        h.record(12345)
    used = meter.stop()
    expected = time.thread_time() - c0
    assert 0.09 < used.total_s <= expected + 0.01
    meter.start()
    time.sleep(0.2)
    assert meter.stop().total_s < 0.05
    assert thread_cpu().user_s > 0
    assert CpuTimes(2.0, 1.0) - CpuTimes(0.5, 0.5) == CpuTimes(1.5, 0.5)


def test_client_limited_hint_counts_the_cores() -> None:
    """On a 2-core machine already running 2 workers, more -j cannot help
    (issue 11); with a core left it still may."""
    cpu = [(0.99, 0.0, 1_000_000), (0.99, 0.0, 1_000_000)]
    r = result_with([[100]], cpu=cpu, clients=8, threads=2)
    assert client_limited_warning(r, cpus=2).endswith(
        "(the 2 cores of this machine all run a worker: try more client machines)\n"
    )
    assert client_limited_warning(r, cpus=8).endswith("(try more -j)\n")
    assert client_limited_warning(r).endswith("(try more -j)\n")  # cores unknown


def test_worker_line_names_the_implementation() -> None:
    from pgsurge.report.extras import _worker_line
    from pgsurge.stats.cpu import IMPL_C_LOOP

    line = _worker_line(WorkerCpu(0, 0.5, 0.1, 1_000_000, 200_000, IMPL_C_LOOP))
    assert line.endswith("wall 1.000 s), C event loop")
    assert (
        WorkerCpu.from_dict(WorkerCpu(1, 0, 0, 1, -1, "x").to_dict()).implementation
        == "x"
    )


def test_nothing_processed_warning_only_when_connecting_took_the_run() -> None:
    assert nothing_processed_warning(make_result()) == ""  # it processed some
    nothing = make_result(empty=True)  # -T 3, 1 s connecting
    assert nothing_processed_warning(nothing) == ""  # not connecting's fault
    nothing.conn_elapsed_us = 3_500_000
    assert nothing_processed_warning(nothing, "pgsurge") == (
        "pgsurge: warning: no transaction was processed: connecting the 4 "
        "clients took 3.500 s, the whole -T 3 s (which counts from before "
        "connecting); use a longer -T or fewer clients\n"
    )
