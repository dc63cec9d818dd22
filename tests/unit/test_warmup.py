"""--warmup's parts without a server (issue 26): the option and its
refusals, the -P lines of the warm-up, the report's line, and the
steady-state check's series after a warm-up. The runs themselves, on both
engines, are in tests/server/test_warmup.py."""

from __future__ import annotations

import dataclasses

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.report.html import RunDoc, render_html
from pgsurge.report.steady import steady_check
from pgsurge.report.text import render_text
from pgsurge.stats.counters import StatsData
from pgsurge.stats.progress import ProgressReporter
from pgsurge.stats.results import RunResult
from pgsurge.stats.series import IntervalStats
from tests.fix_cli import run_cli
from tests.fix_data import SECOND, make_result, result_doc


def test_the_option() -> None:
    cfg = parse_command_line(["--warmup", "2", "-T", "3"], environ={})
    assert isinstance(cfg, RunConfig)
    assert (cfg.warmup, cfg.duration) == (2, 3)
    cfg = parse_command_line(["--warmup=0", "-t", "3"], environ={})
    assert isinstance(cfg, RunConfig)
    assert cfg.warmup == 0  # 0: no warm-up, with -t too


def test_refusals_name_the_option() -> None:
    for args in (["--warmup", "2"], ["--warmup", "2", "-t", "5"]):
        r = run_cli([*args, "host=/nonexistent"])
        assert r.status == 1
        assert r.stderr.startswith(
            "pgsurge: error: --warmup is allowed only with a duration (-T)\n"
        ), r.stderr
        assert "Traceback" not in r.stderr
    r = run_cli(["--warmup", "-1", "-T", "3", "host=/nonexistent"])
    assert r.status == 1
    assert r.stderr.splitlines()[0].startswith("pgsurge: ")
    assert "--warmup" in r.stderr
    r = run_cli(["--warmup", "x", "-T", "3", "host=/nonexistent"])
    assert (r.status, r.stderr.splitlines()[0]) == (
        1,
        'pgsurge: error: invalid value "x" for option --warmup',
    )
    r = run_cli(["--warmup", "1", "-T", "3", "--dask", "local:1", "host=/nonexistent"])
    assert (r.status, r.stderr.splitlines()[0]) == (
        1,
        "pgsurge: error: --warmup cannot be used with --dask",
    )


def _facts(result: RunResult, **kw: object) -> RunResult:
    result.facts = dataclasses.replace(result.facts, **kw)  # type: ignore[arg-type]
    return result


def test_progress_marks_the_warm_up_and_counts_the_window_from_its_start() -> None:
    facts = _facts(make_result(), warmup_s=2, progress_s=1).facts
    rep = ProgressReporter.for_run(facts, 10 * SECOND)
    lines = [
        rep.report(StatsData(cnt=100), 11 * SECOND, 1),
        rep.report(StatsData(cnt=300), 12 * SECOND + 7, 2),
        # the workers reset at the window: 50 since 12 s
        rep.report(StatsData(cnt=50), 13 * SECOND, 3),
        rep.report(StatsData(cnt=130), 14 * SECOND, 4),
    ]
    assert [ln.split(" tps")[0] for ln in lines] == [
        "progress: 1.0 s (warm-up), 100.0",
        "progress: 2.0 s (warm-up), 200.0",
        "progress: 3.0 s, 50.0",
        "progress: 4.0 s, 80.0",
    ]
    # a window inside an interval (-P 5, --warmup 2): the first line of the
    # window is over the 3 s since its start
    facts = _facts(make_result(), warmup_s=2, progress_s=5).facts
    rep = ProgressReporter.for_run(facts, 10 * SECOND)
    line = rep.report(StatsData(cnt=300), 15 * SECOND, 1)
    assert line.startswith("progress: 5.0 s, 100.0 tps")
    # no warm-up: pgbench's line
    facts = _facts(make_result(), progress_s=1).facts
    rep = ProgressReporter.for_run(facts, 10 * SECOND)
    assert rep.report(StatsData(cnt=7), 11 * SECOND, 1).startswith(
        "progress: 1.0 s, 7.0 tps"
    )


def test_report_says_after_a_warm_up_only_with_the_option() -> None:
    plain = render_text(make_result(), banner=False)
    assert "warm-up" not in plain
    warm = render_text(_facts(make_result(), warmup_s=5), banner=False)
    assert warm == plain.replace(
        "duration: 3 s\n", "duration: 3 s\nafter a warm-up of 5 s (not counted)\n"
    )


def _series(window_us: int) -> RunResult:
    result = make_result()
    counts = [10, 50, 100, 101, 99, 100, 102, 98]  # warming, then flat
    result.intervals = [
        IntervalStats(k * SECOND, SECOND, StatsData(cnt=c))
        for k, c in enumerate(counts)
    ]
    result.window_us = window_us
    return result


def test_steady_check_leaves_the_warm_up_out() -> None:
    # without a warm-up the first interval is dropped (start-up), the
    # warming second one stays and makes a trend
    plain = steady_check(_series(0))
    assert plain is not None and plain["intervals"] == 7
    # after --warmup 2 the warm-up's intervals are out and the window's
    # first one stays: flat
    warm = steady_check(_series(2 * SECOND))
    assert warm == {
        "steady": True,
        "intervals": 6,
        "tps_change": warm["tps_change"],
        "z": warm["z"],
    }
    assert abs(warm["tps_change"]) < 0.05


def test_html_page_names_the_warm_up() -> None:
    doc = result_doc()
    plain = render_html([RunDoc("run.json", doc)])
    assert "warm-up" not in plain and "--warmup" not in plain
    doc["warmup_s"] = 5
    doc["config"]["warmup_s"] = 5
    page = render_html([RunDoc("run.json", doc)])
    assert "<th>warm-up (not counted)</th><td>5 s before the start</td>" in page
    assert "--warmup 5" in page
    assert "<h3>warmup_s</h3>" not in page  # a known key, not an unknown one
