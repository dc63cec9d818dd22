"""Progress lines (-P) against real pgbench 18.6 stderr, and the reporter's schedule.

For each ``progress:`` line pgbench wrote in tests/data/reports/*.stderr,
the test builds two cumulative snapshots whose difference holds the
interval's counts (read back from the line), takes which fields appear
from the run's arguments, formats the line and compares it byte for byte.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from pgsurge.stats.counters import FailureKind, StatsData
from pgsurge.stats.progress import ProgressReporter, format_progress
from pgsurge.stats.results import RunFacts, ScriptInfo
from pgsurge.stats.simple import SimpleStats

DATA = Path(__file__).resolve().parent.parent / "data" / "reports"

LINE = re.compile(
    r"progress: (?P<when>[0-9.]+) s, (?P<tps>[0-9.]+) tps, "
    r"lat (?P<lat>[0-9.]+) ms stddev (?P<sd>[0-9.]+|NaN), (?P<failed>\d+) failed"
    r"(?:, lag (?P<lag>[0-9.]+) ms)?(?:, (?P<skipped>\d+) skipped)?"
    r"(?:, (?P<retried>\d+) retried, (?P<retries>\d+) retries)?"
)


def progress_lines() -> list[tuple[str, str, str]]:
    cases = []
    for stderr in sorted(DATA.glob("*.stderr")):
        args = stderr.with_suffix(".args").read_text()
        lines = stderr.read_text().splitlines()
        cases.extend(
            (stderr.stem, args, ln) for ln in lines if ln.startswith("progress: ")
        )
    return cases


CASES = progress_lines()


def option(args: str, name: str) -> str | None:
    words = args.split()
    for i, w in enumerate(words):
        if w == name:
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


# an earlier snapshot, so that the line is computed from differences
PREVIOUS = StatsData(
    cnt=123_456,
    skipped=77,
    retries=50,
    retried=40,
    serialization_failures=9,
    deadlock_failures=3,
    latency=SimpleStats(123_456, 10.0, 90_000.0, 61_728_000.0, 9.87e10),
    lag=SimpleStats(123_456, 0.0, 5000.0, 1_234_560.0, 1.0e9),
)


def snapshot_after(m: re.Match[str]) -> tuple[StatsData, int]:
    """The cumulative stats after an interval matching the line, and the
    interval length (µs) that makes the tps come out as printed."""
    # tps = 1e6 * cnt / run: with run = 10 s the printed tenths are exact
    cnt = round(float(m["tps"]) * 10)
    run_us = 10_000_000
    cur = PREVIOUS.copy()
    cur.cnt += cnt
    cur.serialization_failures += int(m["failed"])
    cur.skipped += int(m["skipped"] or 0)
    cur.retried += int(m["retried"] or 0)
    cur.retries += int(m["retries"] or 0)
    if cnt:
        mean_us = float(m["lat"]) * 1000
        cur.latency.sum += mean_us * cnt
        lat = 0.001 * (cur.latency.sum - PREVIOUS.latency.sum) / cnt
        base = 1000000.0 * lat * lat
        # a NaN stddev: pgbench's radicand went (slightly) negative
        var = -1e-9 * base if m["sd"] == "NaN" else (float(m["sd"]) * 1000) ** 2
        cur.latency.sum2 += cnt * (base + var)
        sqlat = (cur.latency.sum2 - PREVIOUS.latency.sum2) / cnt
        step = 0
        while var >= 0 and sqlat - base < 0 and step < 64:  # rounding went below 0
            cur.latency.sum2 = math.nextafter(cur.latency.sum2, math.inf)
            sqlat = (cur.latency.sum2 - PREVIOUS.latency.sum2) / cnt
            step += 1
        if m["lag"]:
            cur.lag.sum += float(m["lag"]) * 1000 * cnt
    return cur, run_us


@pytest.mark.parametrize(("name", "args", "line"), CASES)
def test_progress_line_matches_pgbench(name: str, args: str, line: str) -> None:
    m = LINE.fullmatch(line)
    assert m, line
    cur, run_us = snapshot_after(m)
    max_tries = option(args, "--max-tries")
    when = float(m["when"])
    if "--progress-timestamp" in args:
        now_us = 5_000_000_000  # any monotonic time
        epoch_shift: int | None = round(when * 1e6) - now_us
        test_start = now_us - 1_000_000
    else:
        test_start = 1_000_000_000
        now_us = test_start + round(when * 1e6)
        epoch_shift = None
    got = format_progress(
        PREVIOUS,
        cur,
        now_us=now_us,
        last_report_us=now_us - run_us,
        test_start_us=test_start,
        throttled=option(args, "-R") is not None,
        latency_limited=option(args, "-L") is not None,
        max_tries=int(max_tries) if max_tries is not None else 1,
        epoch_shift_us=epoch_shift,
    )
    assert got == line


def test_cases_cover_the_progress_fields() -> None:
    text = "\n".join(line for _, _, line in CASES)
    for needle in [
        "lag ",
        "skipped",
        "retried",
        "stddev NaN",
        "0.0 tps, lat 0.000 ms stddev 0.000",
        " failed, lag",
    ]:
        assert needle in text, needle
    assert re.search(r"[1-9]\d* failed", text)
    assert re.search(r"progress: \d{10}\.\d{3} s", text)


def test_late_report_shows_real_elapsed_time() -> None:
    line = format_progress(
        StatsData(),
        StatsData(),
        now_us=2_049_999,
        last_report_us=1_000_000,
        test_start_us=0,
        throttled=False,
        latency_limited=False,
        max_tries=1,
    )
    assert line == "progress: 2.0 s, 0.0 tps, lat 0.000 ms stddev 0.000, 0 failed"
    line = format_progress(
        StatsData(),
        StatsData(),
        now_us=2_050_001,
        last_report_us=1_000_000,
        test_start_us=0,
        throttled=False,
        latency_limited=False,
        max_tries=1,
    )
    assert line.startswith("progress: 2.1 s,")


def facts(**kw: object) -> RunFacts:
    base = dict(
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        scripts=(ScriptInfo("x", 1, ()),),
        progress_s=5,
    )
    base.update(kw)
    return RunFacts(**base)  # type: ignore[arg-type]


def test_reporter_intervals_and_schedule() -> None:
    rep = ProgressReporter.for_run(facts(rate=100.0, max_tries=3), test_start_us=1_000)
    assert not rep.due(5_000_999)
    assert rep.due(5_001_000)
    cur = StatsData()
    for _ in range(10):
        cur.record(2000.0, 100.0)
    cur.record(0.0, skipped=True)
    cur.record(0.0, failure=FailureKind.SERIALIZATION, tries=3)
    line = rep.report(cur, 5_001_000)
    assert line == (
        "progress: 5.0 s, 2.0 tps, lat 2.000 ms stddev 0.000, 1 failed, "
        "lag 0.100 ms, 1 retried, 2 retries"
    )
    assert rep.next_report_us == 10_001_000
    # the next line covers only what happened since, even when late: the
    # schedule skips the missed tick (pgbench keeps reports on the grid)
    cur.record(4000.0, 0.0)
    line = rep.report(cur, 16_001_000)
    assert line.startswith(
        "progress: 16.0 s, 0.1 tps, lat 4.000 ms stddev 0.000, 0 failed"
    )
    assert rep.next_report_us == 20_001_000
    # the reporter kept a copy: mutating the live stats changes nothing
    cur.record(1.0, 0.0)
    assert rep.last.cnt == 11


def test_reporter_timestamp_mode() -> None:
    rep = ProgressReporter.for_run(
        facts(), test_start_us=0, epoch_shift_us=1_700_000_000_000_000
    )
    line = rep.report(StatsData(), 5_000_000)
    assert line.startswith("progress: 1700000005.000 s, 0.0 tps")


def test_a_stalled_worker_does_not_inflate_the_next_interval() -> None:
    """Worker 1 stalls from 1.5 s to 4.9 s (issue 21: --reconnect's back-off
    slept in its worker); worker 0 runs 1000 tx/s throughout. Every line's
    tps stays near the true rate; the time of the line shown at tick 4 was
    the stalled worker's 4.9 s, and the next interval, 0.1 s long, held
    worker 0's whole second (about 11000 tps)."""
    from pgsurge.runner.drive import _Received  # the parent's merge of ticks

    got = _Received.at_start(2, 0)
    reporter = ProgressReporter(test_start_us=0, interval_s=1)

    def tick(worker: int, number: int, now_s: float, cnt: int) -> None:
        snap = StatsData()
        snap.cnt = cnt
        got.ticks[worker], got.nows[worker], got.snapshots[worker] = (
            number,
            int(now_s * 1e6),
            snap,
        )

    lines = []
    # (worker, tick, when, cumulative count): worker 1 idle-stalled, then
    # catching up at 4.9 s; worker 0 at 1000 tx/s
    for event in [
        (0, 1, 1.0, 1000),
        (1, 1, 1.0, 1000),
        (0, 2, 2.0, 2000),
        (0, 3, 3.0, 3000),
        (0, 4, 4.0, 4000),
        (1, 4, 4.9, 1500),
        (0, 5, 5.0, 5000),
        (1, 5, 5.0, 1600),
        (0, 6, 6.0, 6000),
        (1, 6, 6.0, 2600),
    ]:
        tick(*event)
        if min(got.ticks) > got.shown:
            got.shown = min(got.ticks)
            lines.append(reporter.report(got.merged(), got.shown_at()))
    tps = [float(line.split(", ")[1].split()[0]) for line in lines]
    assert len(tps) == 4, lines
    assert max(tps) < 2500, lines  # two workers: 2000 tps at most
