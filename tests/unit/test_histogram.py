"""Latency histogram: merge identity, percentile error bound against exact
sorted data, bucket geometry, encoding round trips and bad input."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsurge.stats.histogram import ENCODING, Histogram, merged, nearest_rank

values = st.lists(
    st.one_of(st.integers(0, 3000), st.integers(0, 10**7), st.integers(0, 2**45)),
    max_size=60,
)
percents = st.one_of(
    st.sampled_from([0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]),
    st.floats(0, 100, allow_nan=False),
)


def hist_of(vals: list[int], digits: int = 3) -> Histogram:
    h = Histogram(digits)
    for v in vals:
        h.record(v)
    return h


@given(st.lists(values, min_size=1, max_size=5))
def test_merging_parts_equals_recording_the_whole(parts: list[list[int]]) -> None:
    whole = hist_of([v for part in parts for v in part])
    acc = Histogram()
    for part in parts:
        acc.merge(hist_of(part))
    assert acc == whole
    assert merged([hist_of(p) for p in parts]) == whole
    assert acc.count == whole.count == sum(len(p) for p in parts)
    assert acc.total == whole.total


@settings(deadline=None)
@given(
    st.lists(
        st.one_of(st.integers(0, 10**6), st.integers(0, 2**40)), min_size=1, max_size=80
    ),
    percents,
    st.integers(1, 5),
)
def test_percentile_within_stated_precision(
    vals: list[int], p: float, digits: int
) -> None:
    h = hist_of(vals, digits)
    exact = sorted(vals)[nearest_rank(p, len(vals)) - 1]
    got = h.percentile(p)
    assert min(vals) <= got <= max(vals)
    assert exact <= got <= exact + exact * 10.0**-digits
    assert h.percentiles([p, 50.0]) == [got, h.percentile(50.0)]


def test_exact_region_and_extremes() -> None:
    vals = list(range(1, 2001))
    h = hist_of(vals)
    # below 2048 every value has its own bucket at 3 digits
    assert h.percentile(50) == 1000
    assert h.percentile(99.9) == 1998
    assert h.percentile(0) == 1
    assert h.percentile(100) == 2000
    assert (h.min, h.max, h.count) == (1, 2000, 2000)
    assert h.mean == pytest.approx(1000.5)


def test_percentile_is_clamped_to_max_and_min() -> None:
    h = hist_of([1_000_001])
    # the bucket of 1000001 reaches higher, but no value was above it
    assert h.bounds(h.index_of(1_000_001))[1] > 1_000_001
    assert h.percentile(50) == 1_000_001
    assert h.percentile(0) == 1_000_001


def test_nearest_rank_uses_decimal_percent() -> None:
    assert nearest_rank(99.9, 1000) == 999
    assert nearest_rank(50, 3) == 2
    assert nearest_rank(0, 10) == 1
    assert nearest_rank(100, 10) == 10
    with pytest.raises(ValueError):
        nearest_rank(100.5, 10)


@given(st.integers(0, 2**62), st.integers(1, 5))
def test_bucket_geometry(value: int, digits: int) -> None:
    h = Histogram(digits)
    low, high = h.bounds(h.index_of(value))
    assert low <= value <= high
    assert high - low <= value * 10.0**-digits
    # neighbours tile the line without gaps
    idx = h.index_of(value)
    if idx > 0:
        assert h.bounds(idx - 1)[1] == low - 1
    assert h.bounds(idx + 1)[0] == high + 1


def test_empty_histogram() -> None:
    h = Histogram()
    assert (h.count, h.min, h.max, h.total) == (0, 0, 0, 0)
    assert math.isnan(h.mean)
    assert h.percentile(99) == 0
    assert h.percentiles([50.0, 99.0]) == [0, 0]
    assert Histogram.from_dict(h.to_dict()) == h
    h.merge(Histogram())
    assert h.count == 0


def test_errors() -> None:
    h = Histogram()
    with pytest.raises(ValueError, match="negative"):
        h.record(-1)
    with pytest.raises(ValueError, match="negative"):
        h.record(-(10**9))
    with pytest.raises(ValueError):
        Histogram(0)
    with pytest.raises(ValueError):
        Histogram(6)
    with pytest.raises(ValueError, match="precision"):
        h.merge(Histogram(2))
    with pytest.raises(ValueError):
        h.percentile(101)


def test_huge_values_grow_the_buckets() -> None:
    h = hist_of([5, 2**62])
    assert h.max == 2**62
    assert h.percentile(100) == 2**62
    assert h.percentile(50) == 5


@settings(deadline=None)
@given(values, st.integers(1, 4))
def test_dict_round_trip_through_json(vals: list[int], digits: int) -> None:
    h = hist_of(vals, digits)
    data = json.loads(json.dumps(h.to_dict()))
    assert data["encoding"] == ENCODING
    back = Histogram.from_dict(data)
    assert back == h
    assert back.percentiles([50.0, 99.0]) == h.percentiles([50.0, 99.0])
    # the decoded histogram keeps recording and merging correctly
    back.record(7)
    h.record(7)
    assert back == h


def test_five_digits_round_trip() -> None:
    h = hist_of([1, 123_456, 10**9], 5)
    assert Histogram.from_dict(json.loads(json.dumps(h.to_dict()))) == h
    assert h.percentile(50) == 123_456


def test_pickle_round_trip_keeps_a_working_record() -> None:
    h = hist_of([1, 50_000, 3])
    back = pickle.loads(pickle.dumps(h))
    assert back == h
    back.record(9)
    assert back.count == 4
    assert h.copy() == h


def test_pickle_carries_only_the_buckets_up_to_the_largest_value() -> None:
    """A worker's histograms go to the parent pickled: the empty buckets
    past the largest value stay behind, and the restored histogram grows
    again as it records, merges and reads like the original."""
    h = hist_of([120, 900, 4_000])
    data = pickle.dumps(h)
    assert len(data) < len(pickle.dumps(h._counts)) / 2  # all its buckets
    back = pickle.loads(data)
    assert len(back._counts) == h.index_of(4_000) + 1
    assert back == h and back.percentiles([50, 99]) == h.percentiles([50, 99])
    back.record(10**8)  # far past the buckets it came with
    back.merge(hist_of([10**9, 7]))
    assert (back.count, back.max, back.min) == (6, 10**9, 7)
    empty = pickle.loads(pickle.dumps(Histogram()))
    assert empty == Histogram() and empty.count == 0
    empty.record(5)
    assert empty.percentile(50) == 5


def test_reset() -> None:
    h = hist_of([10, 20, 10**9])
    h.reset()
    assert h == Histogram()
    h.record(4)
    assert (h.min, h.max, h.count) == (4, 4, 1)


@given(st.lists(values, min_size=1, max_size=5))
def test_reset_and_reuse_as_the_recorder_does(parts: list[list[int]]) -> None:
    # one interval histogram, folded into the totals and reset after each
    # interval: reset and merge touch only the span of the values recorded
    cur, total = Histogram(), Histogram()
    for part in parts:
        for v in part:
            cur.record(v)
        assert cur == hist_of(part)
        total.merge(cur)
        cur.reset()
        assert cur == Histogram() and cur.count == 0
    assert total == hist_of([v for part in parts for v in part])


def test_encoding_is_compact() -> None:
    h = hist_of([100 + (i * 7919) % 100_000 for i in range(100_000)])
    assert len(json.dumps(h.to_dict())) < 40_000


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(encoding="raw"), "encoding"),
        (lambda d: d.update(counts="!!!"), "corrupt"),
        (lambda d: d.update(count=d["count"] + 1), "add up"),
        (lambda d: d.update(min=0), "min/max"),
        (lambda d: d.update(max=10**12), "min/max"),
    ],
)
def test_from_dict_rejects_inconsistent_data(mutate, message) -> None:
    data = hist_of([500, 7000, 123_456]).to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=message):
        Histogram.from_dict(data)


def test_buckets_listing() -> None:
    h = hist_of([1, 1, 5000])
    rows = list(h.buckets())
    assert rows[0] == (1, 1, 2)
    low, high, n = rows[1]
    assert low <= 5000 <= high and n == 1


# ---------------------------------------------------------------- recorder

from pgsurge.stats.counters import FailureKind, StatsData  # noqa: E402
from pgsurge.stats.results import (  # noqa: E402
    RunFacts,
    RunResult,
    ScriptInfo,
    WorkerResult,
)
from pgsurge.stats.series import (  # noqa: E402
    IntervalStats,
    LatencyHistograms,
    WorkerRecorder,
    merge_series,
)

SECOND = 1_000_000


def simulate(
    wid: int, txs: list[tuple[int, int, int]], *, anchor: int, end: int, interval: int
) -> tuple[WorkerResult, list[int]]:
    """A worker finishing transactions (time, script, latency) as the engine
    would drive the recorder; latency 0 means a serialization failure."""
    w = WorkerResult.empty(wid, 1, [2, 1])
    rec = WorkerRecorder(w.total, [2, 1], anchor_us=anchor, interval_us=interval)
    lats = []
    for now, script, lat in txs:
        if now >= rec.next_us:
            rec.advance(now)
        if lat == 0:
            w.total.record(0, failure=FailureKind.SERIALIZATION)
            continue
        w.total.record(lat, lat // 10)
        rec.latency(lat)
        rec.lag(lat // 10)
        rec.script[script](lat)
        rec.command[script][0](lat // 2)
        lats.append(lat)
    w.histograms, w.intervals = rec.finish(end)
    w.bench_start_us, w.end_us = anchor, end
    return w, lats


tx_lists = st.lists(
    st.tuples(st.integers(0, 5 * SECOND - 1), st.integers(0, 1), st.integers(0, 10**6)),
    max_size=40,
).map(sorted)


@settings(deadline=None, max_examples=50)
@given(tx_lists, tx_lists)
def test_recorder_series_and_worker_merge(a, b) -> None:
    anchor, end = 10 * SECOND, 10 * SECOND + 4_500_000
    a = [(anchor + t, s, lat) for t, s, lat in a if anchor + t < end]
    b = [(anchor + t, s, lat) for t, s, lat in b if anchor + t < end]
    w0, lats0 = simulate(0, a, anchor=anchor, end=end, interval=SECOND)
    w1, lats1 = simulate(1, b, anchor=anchor, end=end, interval=SECOND)
    # 4 whole intervals and a partial fifth one, empty ones included
    for w in (w0, w1):
        assert [(iv.start_us - anchor) // SECOND for iv in w.intervals] == [
            0,
            1,
            2,
            3,
            4,
        ]
        assert [iv.duration_us for iv in w.intervals][-2:] == [SECOND, SECOND // 2]
        assert sum(iv.stats.cnt for iv in w.intervals) == w.total.cnt
        assert sum(iv.stats.failures for iv in w.intervals) == w.total.failures
        assert sum(iv.latency_hist().count for iv in w.intervals) == w.total.cnt
    facts = RunFacts(
        pgsurge_version="0",
        server_version_num=180006,
        server_version="18.6",
        scripts=(ScriptInfo("a", 1, ("x", "y")), ScriptInfo("b", 1, ("z",))),
    )
    result = RunResult.from_workers([w0, w1], facts)
    assert result.histograms is not None
    assert result.histograms.latency == hist_of(lats0 + lats1)
    assert result.histograms.lag == hist_of([v // 10 for v in lats0 + lats1])
    assert sum(h.count for h in result.histograms.per_script) == len(lats0 + lats1)
    assert result.histograms.per_command[0][0].count + result.histograms.per_command[1][
        0
    ].count == len(lats0 + lats1)
    # intervals merge by start time; each interval's stats match its values
    assert len(result.intervals) == 5
    for k, iv in enumerate(result.intervals):
        lo, hi = anchor + k * SECOND, anchor + (k + 1) * SECOND
        in_iv = [lat for t, _, lat in a + b if lo <= t < hi and lat]
        assert iv.stats.cnt == len(in_iv)
        assert iv.latency_hist() == hist_of(in_iv)
        if in_iv:
            assert (iv.stats.latency.min, iv.stats.latency.max) == (
                min(in_iv),
                max(in_iv),
            )
            assert iv.stats.latency.sum == sum(in_iv)
    # everything survives JSON and pickling
    again = RunResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert pickle.loads(pickle.dumps(w0)) == w0
    assert WorkerResult.from_dict(json.loads(json.dumps(w0.to_dict()))) == w0


def test_recorder_without_series_keeps_totals_only() -> None:
    totals = StatsData()
    rec = WorkerRecorder(totals, [1], anchor_us=0)
    for v in (5, 7, 9):
        totals.record(v)
        rec.latency(v)
    rec.advance(10**12)
    hists, intervals = rec.finish(10**12)
    assert intervals == []
    assert hists.latency == hist_of([5, 7, 9])


def test_interval_merge_rejects_other_starts_and_series_merge() -> None:
    a = IntervalStats(0, 10)
    with pytest.raises(ValueError):
        a.merge(IntervalStats(1, 10))
    merged_series = merge_series([[IntervalStats(0, 10)], [IntervalStats(10, 5)]])
    assert [iv.start_us for iv in merged_series] == [0, 10]


def test_latency_histograms_shape_errors() -> None:
    a = LatencyHistograms.empty([1, 2])
    with pytest.raises(ValueError):
        a.merge(LatencyHistograms.empty([1]))
    with pytest.raises(ValueError):
        a.merge(LatencyHistograms.empty([1, 3]))


def test_old_result_dicts_still_load() -> None:
    facts = RunFacts(
        pgsurge_version="0",
        server_version_num=180006,
        server_version="18.6",
        scripts=(ScriptInfo("a", 1),),
    )
    data = RunResult(facts=facts).to_dict()
    for key in ("histograms", "intervals", "worker_cpu", "epoch_shift_us"):
        del data[key]
    assert RunResult.from_dict(data) == RunResult(facts=facts)
