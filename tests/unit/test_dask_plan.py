"""Multi-host runs without a cluster: the layout and clock arithmetic of
``distributed.plan``, the streamed interval deltas of
``distributed.intervals``, the ``--dask`` option, and the message when
Dask is not installed."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgsurge.cli import main
from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.distributed.intervals import (
    HostSeries,
    decode_histogram,
    decode_interval,
    encode_histogram,
    encode_interval,
)
from pgsurge.distributed.plan import (
    ClockProbe,
    best_offset,
    deal_specs,
    to_coordinator_clock,
)
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import UsageError
from pgsurge.prng import derive_streams
from pgsurge.stats.counters import StatsData
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import WorkerResult
from pgsurge.stats.series import IntervalStats, merge_series


def _specs(nworkers: int) -> list[WorkerSpec]:
    cfg = parse_command_line(["-S", "db"])
    assert isinstance(cfg, RunConfig)
    plan = derive_streams(1, nworkers, nworkers)
    return [
        WorkerSpec(
            worker_id=i,
            config=cfg,
            scripts=(),
            first_client=i,
            nclients=1,
            nthreads=nworkers,
            client_rngs=plan.clients[i : i + 1],
            streams=plan.threads[i],
            variables=(),
            set_client_id=True,
            detailed=False,
        )
        for i in range(nworkers)
    ]


def test_workers_dealt_over_hosts_like_clients_over_threads() -> None:
    specs = _specs(5)
    groups = deal_specs(specs, 2)
    assert [[s.worker_id for s in g] for g in groups] == [[0, 1, 2], [3, 4]]
    # no more hosts than workers: the spare hosts stay idle
    assert [len(g) for g in deal_specs(specs[:2], 4)] == [1, 1]
    # the specs themselves (seeds by global client number) are unchanged
    assert groups[1][0] is specs[3]


def test_best_clock_probe_is_the_shortest_round_trip() -> None:
    probes = [
        ClockProbe(sent_us=0, host_us=5_000, received_us=4_000),
        ClockProbe(sent_us=10_000, host_us=13_600, received_us=11_000),
        ClockProbe(sent_us=20_000, host_us=30_000, received_us=26_000),
    ]
    best = best_offset(probes)
    assert best.rtt_us == 1_000
    assert best.offset_us == 13_600 - 10_500
    with pytest.raises(ValueError):
        best_offset([])


def test_host_timestamps_map_back_exactly() -> None:
    offset = 123_457
    start = 1_000_000
    result = WorkerResult(0, 1)
    result.conn_start_us = start + offset - 50
    result.bench_start_us = start + offset
    result.end_us = start + offset + 2_500_000
    result.intervals = [
        IntervalStats(start + offset + k * 1_000_000, 1_000_000, StatsData())
        for k in range(3)
    ]
    mapped = to_coordinator_clock(result, offset)
    assert mapped.bench_start_us == start
    assert mapped.end_us - mapped.bench_start_us == 2_500_000
    assert [iv.start_us for iv in mapped.intervals] == [
        start + k * 1_000_000 for k in range(3)
    ]
    assert result.bench_start_us == start + offset  # the original is untouched


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("local:2", "local:2"),
        ("local:02", "local:2"),
        ("tcp://10.0.0.1:8786", "tcp://10.0.0.1:8786"),
        ("sched:8786", "sched:8786"),
    ],
)
def test_dask_option(value: str, stored: str) -> None:
    cfg = parse_command_line(["--dask", value, "-S", "db"])
    assert isinstance(cfg, RunConfig)
    assert cfg.dask == stored


_ADDRESS_HINT = (
    ': expecting a Dask scheduler address "[tcp://|tls://]HOST:PORT" or "local:N"'
)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("local:0", "--dask must be in range 1..64"),
        ("local:x", 'invalid value "local:x" for option --dask'),
        ("", f'invalid value "" for option --dask{_ADDRESS_HINT}'),
        ("tcp://a b", f'invalid value "tcp://a b" for option --dask{_ADDRESS_HINT}'),
    ],
)
def test_dask_option_errors(value: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_command_line(["--dask", value, "-S", "db"])
    assert info.value.message == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-l"], "--dask-collect-logs is allowed only with --dask"),
        (
            ["--dask", "local:2"],
            "--dask-collect-logs is allowed only when logging transactions (-l)",
        ),
    ],
)
def test_collect_logs_needs_dask_and_l(
    args: list[str], message: str, tmp_path: Any
) -> None:
    with pytest.raises(UsageError) as info:
        parse_command_line([*args, "--dask-collect-logs", str(tmp_path), "-S", "db"])
    assert info.value.message == message


def test_collect_logs_needs_an_existing_directory(tmp_path: Any) -> None:
    base = ["--dask", "local:2", "-l", "-S", "db"]
    cfg = parse_command_line(["--dask-collect-logs", str(tmp_path), *base])
    assert isinstance(cfg, RunConfig)
    assert cfg.dask_collect_logs == str(tmp_path)
    for bad in (str(tmp_path / "missing"), ""):
        with pytest.raises(UsageError) as info:
            parse_command_line(["--dask-collect-logs", bad, *base])
        assert info.value.message == (
            f'invalid value "{bad}" for option --dask-collect-logs'
        )
        assert info.value.detail == "Expecting an existing directory."


def test_without_dask_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    err = io.StringIO()
    with redirect_stderr(err):
        status = main(["pgsurge", "--dask", "local:2", "-S", "-t", "1", "nosuchdb"])
    assert status == 1
    text = err.getvalue()
    assert "--dask needs the Dask distributed package" in text
    assert "pip install 'pgsurge[dask]'" in text


def _board(nhosts: int = 2) -> Any:
    from pgsurge.distributed.progress import ProgressBoard

    facts = SimpleNamespace(
        progress_s=1, throttled=False, latency_limit_us=0, max_tries=1
    )
    return ProgressBoard(facts, nhosts, 10_000_000)  # type: ignore[arg-type]


def _at(k: float) -> int:
    """The coordinator's clock k seconds after the board's start."""
    return 10_000_000 + int(k * 1_000_000)


def test_progress_line_waits_for_every_host_then_marks_the_late() -> None:
    from pgsurge.distributed.coordinator import PROGRESS_GRACE_US as grace

    board = _board()
    board.add(0, 1, StatsData(cnt=100))
    assert board.lines(_at(1.5), grace) == []  # host 1 has not reported tick 1
    board.add(1, 1, StatsData(cnt=300))
    assert board.lines(_at(1.5), grace) == [
        "progress: 1.0 s, 400.0 tps, lat 0.000 ms stddev 0.000, 0 failed"
    ]
    # interval 2: host 1 is late; within the grace, no line
    board.add(0, 2, StatsData(cnt=300))
    assert board.lines(_at(2.5), grace) == []
    # past the grace, the line goes with host 0's rate of that interval
    assert board.lines(_at(4.1), grace) == [
        "progress: 2.0 s, 200.0 tps, lat 0.000 ms stddev 0.000, 0 failed, hosts 1/2"
    ]
    # host 1 comes back with ticks 2 and 3: tick 3's line has both hosts'
    # rates of interval 3 only (never host 1's two intervals summed)
    board.add(1, 2, StatsData(cnt=700))
    board.add(1, 3, StatsData(cnt=800))
    board.add(0, 3, StatsData(cnt=350))
    assert board.lines(_at(4.2), grace) == [
        "progress: 3.0 s, 150.0 tps, lat 0.000 ms stddev 0.000, 0 failed"
    ]


def test_progress_labels_only_grow_and_a_gap_is_not_a_rate() -> None:
    from pgsurge.distributed.coordinator import PROGRESS_GRACE_US as grace

    board = _board()
    board.add(0, 1, StatsData(cnt=10))
    board.add(1, 1, StatsData(cnt=10))
    # host 1 stalled through ticks 2 and 3 (its workers skipped them)
    for k in (2, 3, 4):
        board.add(0, k, StatsData(cnt=10 * k))
    board.add(1, 4, StatsData(cnt=1000))
    lines = board.lines(_at(5.5), grace)
    labels = [line.split(",")[0] for line in lines]
    assert labels == [f"progress: {k}.0 s" for k in (1, 2, 3, 4)]
    # line 4: host 1's tick 3 is missing, its jump 10 -> 1000 is no rate
    assert lines[3].startswith("progress: 4.0 s, 10.0 tps")
    assert lines[3].endswith("hosts 1/2")
    # a lost host is left out; a finished one's total holds, rate 0
    board.lose(0)
    board.finish(1, StatsData(cnt=1000))
    assert board.lines(_at(5.5), grace) == [
        "progress: 5.0 s, 0.0 tps, lat 0.000 ms stddev 0.000, 0 failed, hosts 1/2"
    ]
    # an interval no host reported has no line (no rate to show)
    board.lose(1)
    assert board.lines(_at(9), grace) == []
    assert board.printed == 9


# -- interval deltas on the wire ---------------------------------------------

_latencies = st.lists(st.integers(0, 10**9), max_size=300)


@given(_latencies, st.sampled_from([1, 2, 3]))
def test_histogram_wire_form_round_trips(values: list[int], digits: int) -> None:
    hist = Histogram(digits)
    for v in values:
        hist.record(v)
    wire = encode_histogram(hist)
    # what Worker.log_event accepts: msgpack-able plain values
    assert msgpack.unpackb(msgpack.packb(wire)) == wire
    back = decode_histogram(wire)
    assert back == hist
    assert back.count == len(values)
    # compact: one (gap, count) pair per non-empty bucket, nothing else
    assert len(wire["buckets"]) == 2 * len(list(hist.buckets()))


def test_histogram_wire_form_rejects_inconsistent_data() -> None:
    hist = Histogram()
    for v in (5, 5, 900, 70_000):
        hist.record(v)
    wire = encode_histogram(hist)
    assert wire["buckets"][:2] == [5, 2]  # index 5 (exact), twice
    for bad in (
        {**wire, "buckets": wire["buckets"][:-1]},  # a count missing
        {**wire, "buckets": [5, 2, 0, 1]},  # the same bucket twice
        {**wire, "buckets": [5, 0]},  # an empty bucket
        {**wire, "max": 6},  # max below the last bucket
    ):
        with pytest.raises(ValueError):
            decode_histogram(bad)
    assert decode_histogram({**wire, "buckets": [], "sum": 0}).count == 0


def _interval(start: int, length: int, latencies: list[int]) -> IntervalStats:
    hist = Histogram()
    stats = StatsData(start_us=start)
    for v in latencies:
        hist.record(v)
        stats.cnt += 1
        stats.latency.add(float(v))
    return IntervalStats(start, length, stats, hist.to_dict())


def test_interval_wire_form_moves_to_the_receiver_clock() -> None:
    iv = _interval(5_000_000, 1_000_000, [120, 130, 4_500])
    back = decode_interval(encode_interval(iv), offset_us=1_234)
    assert back.start_us == back.stats.start_us == 5_000_000 - 1_234
    assert back.duration_us == iv.duration_us
    assert back.stats.cnt == 3 and back.stats.latency.sum == iv.stats.latency.sum
    assert back.latency_hist() == iv.latency_hist()
    assert back.lag_hist().count == 0


def test_host_series_hands_out_intervals_every_worker_delivered() -> None:
    second = 1_000_000
    series = HostSeries(2)
    w0 = [_interval(k * second, second, [100 + k]) for k in range(3)]
    w1 = [_interval(k * second, second, [200 + k, 300]) for k in range(2)]
    series.add(0, w0[:2])
    assert series.take_complete() == []  # worker 1 has delivered nothing
    series.add(1, w1[:1])
    (first,) = series.take_complete()
    assert first.start_us == 0 and first.stats.cnt == 3
    assert first.latency_hist().count == 3
    assert series.take_complete() == []  # nothing handed out twice
    series.add(0, w0[2:])
    # worker 1 ends under -t in its second interval: its final series holds
    # what it delivered, the second interval (short) and nothing after
    w1_end = [*w1[:1], _interval(second, second // 5, [250])]
    series.finish(1, w1_end)
    assert [(iv.start_us, iv.stats.cnt) for iv in series.take_complete()] == [
        (second, 2),
        (2 * second, 1),
    ]
    series.finish(0, w0)
    assert series.take_complete() == []
    # what was handed out is the merge of both workers' whole series
    merged = merge_series([w0, w1_end])
    assert [iv.stats.cnt for iv in merged] == [3, 2, 1]


def test_a_password_over_plain_tcp_to_another_machine_is_named() -> None:
    from pgsurge.distributed.cluster import clear_text_peers

    here = "tcp://127.0.0.1:8786"
    assert clear_text_peers(here, ["tcp://127.0.0.1:4001", "tcp://[::1]:4002"]) == []
    assert clear_text_peers("tcp://localhost:8786", ["tcp://127.0.0.2:1"]) == []
    # (TEST-NET addresses: never this machine's)
    far = ["tcp://192.0.2.7:4001", "tcp://127.0.0.1:4002"]
    assert clear_text_peers(here, far) == ["tcp://192.0.2.7:4001"]
    assert clear_text_peers("tcp://198.51.100.1:8786", []) == [
        "tcp://198.51.100.1:8786"
    ]
    # encrypted, or on loopback by construction
    assert clear_text_peers("tls://192.0.2.1:8786", far) == []
    assert clear_text_peers("local:2", far) == []


def test_clock_exchange_finds_the_offset_within_its_bound() -> None:
    from pgsurge.distributed.clock import ClockServer, exchange

    server = ClockServer("127.0.0.1")
    try:
        measured = exchange(server.address)
    finally:
        server.close()
    assert measured is not None
    offset, rtt = measured
    # one machine, one monotonic clock: the true offset, 0, is within the
    # error bound (half the round trip)
    assert rtt >= 0 and abs(offset) <= (rtt + 1) // 2
    # a coordinator out of reach: no measurement (the scheduler's probes
    # are used instead)
    assert exchange(server.address) is None
