"""Mergeable statistics: properties of SimpleStats/StatsData, worker merging,
plain-data round trips, and the C number-formatting helpers."""

from __future__ import annotations

import json
import math
import pickle
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgsurge.cnum import c_div, c_fmt, c_sqrt
from pgsurge.config import ConnParams, QueryMode, RunConfig, ScriptSource
from pgsurge.stats import (
    CommandStats,
    FailureKind,
    RunFacts,
    RunResult,
    ScriptInfo,
    SimpleStats,
    StatsData,
    WorkerResult,
)

# integer µs latencies keep sums exact, whatever the order of additions
latencies = st.lists(st.integers(0, 10_000_000).map(float), max_size=40)


def collect(values: list[float]) -> SimpleStats:
    ss = SimpleStats()
    for v in values:
        ss.add(v)
    return ss


@given(latencies, latencies)
def test_merge_equals_recording_everything(a: list[float], b: list[float]) -> None:
    merged = collect(a)
    merged.merge(collect(b))
    whole = collect(a + b)
    assert merged.count == whole.count == len(a) + len(b)
    assert merged.sum == whole.sum
    assert math.isclose(merged.sum2, whole.sum2, rel_tol=1e-12)
    if a or b:
        assert merged.min == whole.min == min(a + b)
        assert merged.max == whole.max == max(a + b)


@given(latencies)
def test_empty_is_neutral(values: list[float]) -> None:
    left = SimpleStats()
    left.merge(collect(values))
    right = collect(values)
    right.merge(SimpleStats())
    assert left == right == collect(values)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40))
def test_mean_and_stddev_follow_the_population_formulas(values: list[float]) -> None:
    ss = collect(values)
    assert math.isclose(ss.mean, statistics.fmean(values), rel_tol=1e-9, abs_tol=1e-6)
    sd = ss.stddev
    # pgbench's sum2 formula loses precision, and may even give NaN, when
    # the spread is tiny compared with the values
    if not math.isnan(sd):
        bound = 1e-6 * max(abs(v) for v in values) + 1e-9
        assert math.isclose(sd, statistics.pstdev(values), rel_tol=1e-6, abs_tol=bound)


def test_empty_stats_have_nan_mean_and_stddev() -> None:
    assert math.isnan(SimpleStats().mean)
    assert math.isnan(SimpleStats().stddev)


def test_stddev_of_equal_values_can_be_nan_like_pgbench() -> None:
    # sum2/count - mean² rounds below zero: C's sqrt gives NaN, so do we
    ss = collect([0.1] * 3)
    assert ss.sum2 / 3 - ss.mean**2 < 0
    assert math.isnan(ss.stddev)


# a transaction outcome: (latency, lag, skipped, failure, tries)
outcomes = st.tuples(
    st.integers(0, 5_000_000).map(float),
    st.integers(0, 100_000).map(float),
    st.booleans(),
    st.sampled_from([None, None, *FailureKind]),
    st.integers(1, 5),
)


def record_all(
    items: list[tuple[float, float, bool, FailureKind | None, int]], throttled: bool
) -> StatsData:
    s = StatsData()
    for lat, lag, skipped, failure, tries in items:
        s.record(
            lat,
            lag if throttled else None,
            skipped=skipped,
            failure=failure,
            tries=tries,
        )
    return s


def check_identities(s: StatsData, throttled: bool) -> None:
    assert s.total == s.skipped + s.cnt + s.failures
    assert s.failures == (
        s.serialization_failures
        + s.deadlock_failures
        + s.other_failures
        + s.connection_failures
    )
    assert s.latency.count == s.cnt
    assert s.lag.count == (s.cnt if throttled else 0)
    assert s.retried <= s.cnt + s.failures
    assert s.retries >= s.retried
    assert (s.retries == 0) == (s.retried == 0)


@given(st.lists(outcomes, max_size=30), st.lists(outcomes, max_size=30), st.booleans())
def test_statsdata_merge_and_identities(a: list, b: list, throttled: bool) -> None:
    sa = record_all(a, throttled)
    sb = record_all(b, throttled)
    check_identities(sa, throttled)
    merged = sa.copy()
    merged.merge(sb)
    whole = record_all(a + b, throttled)
    check_identities(merged, throttled)
    assert merged.latency.sum == whole.latency.sum
    assert math.isclose(merged.latency.sum2, whole.latency.sum2, rel_tol=1e-12)
    merged.latency.sum2 = whole.latency.sum2
    merged.lag.sum2 = whole.lag.sum2
    assert merged == whole
    assert StatsData.from_dict(json.loads(json.dumps(whole.to_dict()))) == whole


def test_record_follows_accumstats() -> None:
    s = StatsData()
    s.record(1500.0, 20.0, tries=2)
    s.record(0.0, skipped=True, tries=3)  # skipped: tries are ignored
    s.record(9999.0, 5.0, failure=FailureKind.DEADLOCK, tries=2)  # no latency
    s.record(1.0, failure=FailureKind.OTHER)
    s.record(7.0, failure=FailureKind.SERIALIZATION, tries=4)
    assert (s.cnt, s.skipped, s.failures) == (1, 1, 3)
    assert (s.deadlock_failures, s.serialization_failures, s.other_failures) == (
        1,
        1,
        1,
    )
    assert (s.retried, s.retries) == (3, 1 + 1 + 3)
    assert s.latency == SimpleStats(1, 1500.0, 1500.0, 1500.0, 1500.0**2)
    assert s.lag == SimpleStats(1, 20.0, 20.0, 20.0, 400.0)


def worker(
    wid: int, n_success: int, *, conn_start: int, start: int, end: int
) -> WorkerResult:
    w = WorkerResult.empty(wid, 2, [2, 1])
    for i in range(n_success):
        w.total.record(100.0 * (i + 1))
        w.per_script[i % 2].record(100.0 * (i + 1))
        w.per_command[0][1].latency.add(10.0)
    w.per_command[1][0].failures += 1
    w.latency_late = wid
    w.conn_total_us = 1000 * (wid + 1)
    w.conn_start_us, w.bench_start_us, w.end_us = conn_start, start, end
    w.clients_finished = 2
    w.cpu_user_s = 0.5
    return w


def facts(**kw: object) -> RunFacts:
    base = RunFacts(
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        scripts=(ScriptInfo("a", 2, ("x", "y")), ScriptInfo("b", 1, ("z",))),
        clients=4,
        threads=2,
    )
    return RunFacts.from_dict({**base.to_dict(), **kw})


def test_run_result_from_workers() -> None:
    w0 = worker(0, 3, conn_start=1_000, start=5_000, end=1_005_000)
    w1 = worker(1, 4, conn_start=1_200, start=4_000, end=1_010_000)
    # workers travel between processes
    w1 = pickle.loads(pickle.dumps(w1))
    assert WorkerResult.from_dict(json.loads(json.dumps(w1.to_dict()))) == w1
    result = RunResult.from_workers([w0, w1], facts())
    assert result.total.cnt == 7
    assert [s.cnt for s in result.per_script] == [4, 3]
    assert result.per_command[0][1].latency.count == 7
    assert result.per_command[1][0].failures == 2
    assert result.latency_late == 1
    assert result.conn_total_us == 3000
    # tps time: earliest GO to latest end; connecting: earliest start to GO
    assert result.bench_start_us == 4_000
    assert result.total_duration_us == 1_010_000 - 4_000
    assert result.conn_elapsed_us == 4_000 - 1_000
    assert result.cpu_user_s == 1.0
    assert result.workers == 2
    assert not result.aborted
    # the inputs are not modified by the merge
    assert w0.total.cnt == 3
    explicit = RunResult.from_workers([w0, w1], facts(), start_us=0, end_us=2_000_000)
    assert explicit.conn_elapsed_us == 4_000
    assert explicit.total_duration_us == 2_000_000 - 4_000
    again = RunResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result


def test_run_result_aborted_and_shape_errors() -> None:
    w = worker(0, 1, conn_start=0, start=1, end=2)
    w.aborted_clients = 1
    assert RunResult.from_workers([w], facts()).aborted
    with pytest.raises(ValueError):
        RunResult.from_workers([], facts())
    bad = worker(0, 1, conn_start=0, start=1, end=2)
    bad.per_command[0].pop()
    with pytest.raises(ValueError):
        RunResult.from_workers([bad], facts())
    bad = worker(0, 1, conn_start=0, start=1, end=2)
    bad.per_script.pop()
    with pytest.raises(ValueError):
        RunResult.from_workers([bad], facts())


def test_command_stats_merge() -> None:
    a = CommandStats(failures=1, retries=2)
    a.latency.add(5.0)
    b = a.copy()
    b.merge(a)
    assert (b.latency.count, b.failures, b.retries) == (2, 2, 4)
    assert a.latency.count == 1


def test_facts_from_config() -> None:
    cfg = RunConfig(
        conn=ConnParams(),
        scripts=(
            ScriptSource(
                "tpcb-like",
                "",
                3,
                builtin=True,
                description="<builtin: TPC-B (sort of)>",
            ),
            ScriptSource("my.sql", "SELECT 1;", 1),
        ),
        clients=2,
        jobs=8,
        transactions=None,
        duration=60,
        query_mode=QueryMode.PREPARED,
        rate=100.5,
        latency_limit_ms=0.0505,
        max_tries=0,
    )
    f = RunFacts.from_config(
        cfg,
        pgsurge_version="0.1.0",
        server_version_num=170004,
        server_version="17.4",
        script_commands=[["BEGIN;"], ["SELECT 1;"]],
        scale=10,
        partition_method="range",
        partitions=4,
    )
    assert f.threads == 2  # clamped to the clients, as pgbench does
    assert (f.transactions_per_client, f.duration_s) == (None, 60)
    assert f.latency_limit_us == 50  # (int64) (0.0505 * 1000)
    assert f.scripts[0] == ScriptInfo("<builtin: TPC-B (sort of)>", 3, ("BEGIN;",))
    assert f.scripts[1].desc == "my.sql"
    assert f.query_mode == "prepared"
    assert f.total_weight == 4
    assert (
        f.throttled and f.latency_reported and f.per_script_stats and f.measure_latency
    )
    assert RunFacts.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    plain = RunFacts.from_config(
        RunConfig(conn=ConnParams(), scripts=(cfg.scripts[1],)),
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        script_commands=[["SELECT 1;"]],
    )
    assert (plain.transactions_per_client, plain.duration_s) == (10, None)
    assert not (
        plain.latency_reported or plain.measure_latency or plain.per_script_stats
    )
    with pytest.raises(ValueError):
        RunFacts.from_config(
            cfg,
            pgsurge_version="0.1.0",
            server_version_num=180006,
            server_version="18.6",
            script_commands=[],
        )


@pytest.mark.parametrize(
    ("spec", "value", "text"),
    [
        ("%.3f", 1.0005, "1.000"),  # 1.0005 is just below in binary
        ("%.3f", -0.0, "-0.000"),
        ("%.3f", -0.0001, "-0.000"),
        ("%.3f", math.nan, "NaN"),
        ("%11.3f", math.nan, "        NaN"),
        ("%f", math.inf, "Infinity"),
        ("%f", -math.inf, "-Infinity"),
        ("%.1f", 0.05, "0.1"),
        ("%.1f", 0.25, "0.2"),  # exact binary tie: round half to even
        ("%11.3f", 1234.5678, "   1234.568"),
    ],
)
def test_c_fmt(spec: str, value: float, text: str) -> None:
    assert c_fmt(spec, value) == text


def test_c_div_and_sqrt() -> None:
    assert math.isnan(c_div(0.0, 0))
    assert c_div(1.0, 0) == math.inf
    assert c_div(-1.0, 0) == -math.inf
    assert c_div(1.0, -0.0) == -math.inf
    assert c_div(3.0, 2) == 1.5
    assert math.isnan(c_sqrt(-1e-12))
    assert c_sqrt(4.0) == 2.0
