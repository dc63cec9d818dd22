"""-l log writer: per-transaction fields and conditions, sampling draws,
aggregate intervals (alignment, empty and final intervals, gated fields),
file names and buffering. Differential checks against pgbench 18.6 are in
tests/server/test_txlog_diff.py."""

from __future__ import annotations

import io
import os

import pytest

from pgsurge.config import ConnParams, RunConfig, ScriptSource
from pgsurge.errors import PgsurgeError
from pgsurge.prng import PgPrng
from pgsurge.stats.counters import FailureKind, StatsData
from pgsurge.stats.txlog import TxLogOptions, TxLogWriter, format_aggregate, log_path

SER = FailureKind.SERIALIZATION
DL = FailureKind.DEADLOCK
OTHER = FailureKind.OTHER
# monotonic 5 s is Unix 1_700_000_000.25 s with this shift
SHIFT = 1_700_000_000_250_000 - 5_000_000


def writer(opts: TxLogOptions, **kw) -> tuple[TxLogWriter, io.StringIO]:
    out = io.StringIO()
    w = TxLogWriter("unused", opts, epoch_shift_us=SHIFT, stream=out, **kw)
    return w, out


def lines(w: TxLogWriter, out: io.StringIO, now: int | None = None) -> list[str]:
    w.close(now)
    return out.getvalue().splitlines()


def test_file_names() -> None:
    assert log_path(None, 4242, 0) == "pgbench_log.4242"
    assert log_path(None, 4242, 3) == "pgbench_log.4242.3"
    assert log_path("my/pre", 7, 1) == "my/pre.7.1"


def test_plain_lines() -> None:
    w, out = writer(TxLogOptions())
    w.log(5_000_000, 0, 1, 0, 1234, 0, False, None, 1)
    w.log(5_000_001, 3, 2, 1, 77, 0, False, None, 1)
    w.log(6_000_000, 1, 9, 0, 0, 0, False, SER, 1)
    assert lines(w, out) == [
        "0 1 1234 0 1700000000 250000",
        "3 2 77 1 1700000000 250001",
        "1 9 failed 0 1700000001 250000",
    ]


def test_rate_retries_and_detailed_failures() -> None:
    opts = TxLogOptions(throttled=True, max_tries=3, failures_detailed=True)
    w, out = writer(opts)
    w.log(5_000_000, 0, 1, 0, 900, 15, False, None, 2)
    w.log(5_000_000, 0, 2, 0, 0, 15, True, None, 1)
    w.log(5_000_000, 1, 1, 1, 0, 15, False, SER, 3)
    w.log(5_000_000, 1, 2, 1, 0, 15, False, DL, 1)
    w.log(5_000_000, 1, 3, 1, 0, 15, False, OTHER, 1)
    assert lines(w, out) == [
        "0 1 900 0 1700000000 250000 15 1",
        # no lag for a transaction that did not succeed, as pgbench
        "0 2 skipped 0 1700000000 250000 0 0",
        "1 1 serialization 1 1700000000 250000 0 2",
        "1 2 deadlock 1 1700000000 250000 0 0",
        "1 3 other 1 1700000000 250000 0 0",
    ]


def test_unlimited_tries_prints_retries() -> None:
    w, out = writer(TxLogOptions(max_tries=0))
    w.log(5_000_000, 0, 1, 0, 10, 0, False, None, 5)
    assert lines(w, out) == ["0 1 10 0 1700000000 250000 4"]


def test_sampling_draws_from_the_worker_stream() -> None:
    rate = 0.3
    w, out = writer(TxLogOptions(sample_rate=rate), sample_rng=PgPrng(99))
    for i in range(1, 201):
        w.log(5_000_000 + i, 0, i, 0, i, 0, False, None, 1)
    kept = [int(line.split()[1]) for line in lines(w, out)]
    ref = PgPrng(99)
    expected = [i for i in range(1, 201) if not ref.double() > rate]
    assert kept == expected
    assert 30 < len(kept) < 100


def test_sampling_needs_a_stream() -> None:
    with pytest.raises(ValueError):
        writer(TxLogOptions(sample_rate=0.5))


def test_aggregate_alignment_empty_and_final_intervals() -> None:
    opts = TxLogOptions(aggregate_interval_s=2)
    # GO at monotonic 5.0 s = Unix ...000.25 s: first interval starts at ...000
    w, out = writer(opts, agg_start_us=5_000_000)
    w.log(5_100_000, 0, 1, 0, 100, 0, False, None, 1)
    w.log(6_000_000, 0, 2, 0, 300, 0, False, None, 1)
    w.log(6_600_000, 1, 1, 0, 0, 0, False, SER, 1)  # in [002, 004)
    w.log(11_800_000, 1, 2, 0, 50, 0, False, None, 1)  # in [006, 008)
    # ends at Unix ...008.05: [008, 010) is partial and dropped
    got = lines(w, out, now=12_800_000)
    assert got == [
        "1700000000 2 400 100000 100 300 0 0 0 0 0 0 0 0 0",
        "1700000002 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        "1700000004 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        "1700000006 1 50 2500 50 50 0 0 0 0 0 0 0 0 0",
    ]


def test_aggregate_abort_writes_no_pending_interval() -> None:
    w, out = writer(TxLogOptions(aggregate_interval_s=1), agg_start_us=5_000_000)
    w.log(5_100_000, 0, 1, 0, 100, 0, False, None, 1)
    w.log(6_500_000, 0, 2, 0, 100, 0, False, None, 1)  # Unix ...001.75
    assert lines(w, out) == ["1700000000 1 100 10000 100 100 0 0 0 0 0 0 0 0 0"]


def test_aggregate_gated_fields() -> None:
    agg = StatsData(start_us=1_700_000_010_000_000)
    agg.record(1000, 40, tries=2)
    agg.record(3000, 60)
    agg.record(0, skipped=True)
    agg.record(0, failure=SER, tries=3)
    agg.record(0, failure=DL)
    agg.record(0, failure=OTHER)
    everything = TxLogOptions(
        throttled=True,
        latency_limited=True,
        max_tries=3,
        failures_detailed=True,
        continue_on_error=True,
    )
    assert format_aggregate(agg, everything) == (
        "1700000010 2 4000 10000000 1000 3000 100 5200 40 60 1 2 3 1 1 1\n"
    )
    assert format_aggregate(agg, TxLogOptions()) == (
        "1700000010 2 4000 10000000 1000 3000 0 0 0 0 0 0 0 0 0\n"
    )
    # --continue-on-error without --failures-detailed: a zero 16th field
    assert format_aggregate(agg, TxLogOptions(continue_on_error=True)).split()[15:] == [
        "0"
    ]


def test_aggregate_records_lag_only_when_throttled() -> None:
    w, out = writer(TxLogOptions(aggregate_interval_s=1), agg_start_us=5_000_000)
    w.log(5_100_000, 0, 1, 0, 100, 999, False, None, 1)
    w.close(6_000_000)
    assert out.getvalue() == "1700000000 1 100 10000 100 100 0 0 0 0 0 0 0 0 0\n"


def test_aggregate_needs_a_start() -> None:
    with pytest.raises(ValueError):
        writer(TxLogOptions(aggregate_interval_s=1))


def test_buffered_until_limit_then_written(tmp_path) -> None:
    path = tmp_path / "log"
    w = TxLogWriter(str(path), TxLogOptions(), epoch_shift_us=SHIFT, buffer_lines=3)
    w.log(5_000_000, 0, 1, 0, 1, 0, False, None, 1)
    w.log(5_000_000, 0, 2, 0, 1, 0, False, None, 1)
    assert path.read_text() == ""
    w.log(5_000_000, 0, 3, 0, 1, 0, False, None, 1)
    assert len(path.read_text().splitlines()) == 3
    w.log(5_000_000, 0, 4, 0, 1, 0, False, None, 1)
    w.close()
    w.close()
    assert len(path.read_text().splitlines()) == 4


def test_written_at_least_once_a_second(tmp_path) -> None:
    """A slow run's lines reach the file within a second of a later line,
    whatever the buffer size (issue 11)."""
    path = tmp_path / "log"
    w = TxLogWriter(str(path), TxLogOptions(), epoch_shift_us=SHIFT)
    w.log(5_000_000, 0, 1, 0, 1, 0, False, None, 1)
    w.log(5_500_000, 0, 2, 0, 1, 0, False, None, 1)
    assert path.read_text() == ""
    w.log(6_000_000, 0, 3, 0, 1, 0, False, None, 1)
    assert len(path.read_text().splitlines()) == 3
    w.log(6_100_000, 0, 4, 0, 1, 0, False, None, 1)
    assert len(path.read_text().splitlines()) == 3
    w.close()
    assert len(path.read_text().splitlines()) == 4


def test_open_failure_is_a_user_error(tmp_path) -> None:
    bad = os.path.join(tmp_path, "missing", "pgbench_log.1")
    with pytest.raises(PgsurgeError) as info:
        TxLogWriter(bad, TxLogOptions(), epoch_shift_us=0)
    assert info.value.message == (
        f'could not open logfile "{bad}": No such file or directory'
    )


def test_options_from_config() -> None:
    cfg = RunConfig(
        conn=ConnParams(),
        scripts=(ScriptSource("x", "select 1"),),
        log=True,
        log_prefix="pfx",
        rate=100.0,
        latency_limit_ms=0.0001,  # truncates to 0 µs: not limited, as pgbench
        max_tries=0,
        aggregate_interval=5,
        failures_detailed=True,
    )
    opts = TxLogOptions.from_config(cfg)
    assert opts == TxLogOptions(
        prefix="pfx",
        throttled=True,
        latency_limited=False,
        max_tries=0,
        failures_detailed=True,
        aggregate_interval_s=5,
    )
    assert TxLogOptions.from_config(
        RunConfig(
            conn=ConnParams(), scripts=(), latency_limit_ms=2.0, sampling_rate=0.5
        )
    ) == TxLogOptions(latency_limited=True, sample_rate=0.5)
