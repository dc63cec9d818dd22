"""The arithmetic behind bench/suite.py's verdicts: order, medians, ratios.

bench/ is not a package, so its pure modules are loaded from their files.
No server and no process is involved.
"""

from __future__ import annotations

import math

import pytest

from tests.fix_run import load_bench_module

# in dependency order: each module imports the previous ones by name
stats = load_bench_module("_suite_stats")
cases = load_bench_module("_suite_cases")
report = load_bench_module("_suite_report")

PGBENCH_OUTPUT = """\
pgbench (18.6)
transaction type: <builtin: select only>
scaling factor: 10
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 412345
number of failed transactions: 0 (0.000%)
latency average = 0.194 ms
rate limit schedule lag: avg 0.041 (max 2.513) ms
initial connection time = 12.345 ms
tps = 41234.567890 (without initial connection time)
"""


def run(tool: str, tps: float, cpu_s: float, tx: int, **kw: object) -> object:
    return stats.Run(
        tool=tool,
        pair=0,
        position=0,
        argv=(),
        returncode=kw.pop("returncode", 0),
        wall_s=10.0,
        user_s=cpu_s,
        sys_s=0.0,
        tps=tps,
        transactions=tx,
        **kw,
    )


def test_parse_report_reads_pgbench_lines() -> None:
    rep = stats.parse_report(PGBENCH_OUTPUT)
    assert rep.tps == pytest.approx(41234.56789)
    assert rep.transactions == 412345
    assert rep.latency_ms == pytest.approx(0.194)
    assert rep.lag_ms == pytest.approx(0.041)
    assert rep.done_in_s is None


def test_parse_report_init_and_missing_lines() -> None:
    rep = stats.parse_report(
        "creating tables...\ndone in 12.34 s (drop tables 0.00 s, ...).\n"
    )
    assert rep.done_in_s == pytest.approx(12.34)
    assert rep.tps is None and rep.transactions is None and rep.lag_ms is None


def test_abba_order_alternates_and_warmup_runs_ab() -> None:
    orders = [stats.abba_order(i, "A", "B") for i in range(-1, 6)]
    assert orders == [
        ("A", "B"),  # warm-up
        ("A", "B"),
        ("B", "A"),
        ("A", "B"),
        ("B", "A"),
        ("A", "B"),
        ("B", "A"),
    ]
    # over an even number of counted pairs each tool runs first equally often
    firsts = [stats.abba_order(i, "A", "B")[0] for i in range(6)]
    assert firsts.count("A") == firsts.count("B") == 3


def test_rotation_order() -> None:
    v = ["x", "y", "z"]
    assert stats.rotation_order(0, v) == v
    assert stats.rotation_order(1, v) == ["z", "y", "x"]
    assert stats.rotation_order(2, v) == v


def test_median_ignores_nan_and_handles_even_counts() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert stats.median([math.nan, 5.0, 1.0]) == 3.0
    assert math.isnan(stats.median([]))
    assert stats.spread([0.9, math.nan, 1.1, 1.0]) == (0.9, 1.1)


def test_cpu_per_transaction() -> None:
    r = run("pgsurge", 1000.0, cpu_s=2.0, tx=100_000)
    assert r.cpu_us_per_tx == pytest.approx(20.0)
    assert math.isnan(stats.cpu_us_per_tx(1.0, 0))
    assert math.isnan(stats.cpu_us_per_tx(1.0, None))


def test_ratios_are_per_pair_medians_not_ratio_of_medians() -> None:
    # the machine halves its speed in the second pair: per-pair ratios stay 0.9
    pairs = [
        (run("pgbench", 1000, 1.0, 10_000), run("pgsurge", 900, 1.2, 9_000)),
        (run("pgbench", 500, 1.0, 5_000), run("pgsurge", 450, 1.2, 4_500)),
        (run("pgbench", 800, 1.0, 8_000), run("pgsurge", 720, 1.2, 7_200)),
    ]
    s = stats.summarize_pairs(pairs)
    assert s.tps.median == pytest.approx(0.9)
    assert (s.tps.low, s.tps.high) == (pytest.approx(0.9), pytest.approx(0.9))
    assert s.tps.n == 3
    assert s.ref_tps == 800 and s.cand_tps == 720
    # CPU/tx: pgbench 100, 200, 125 µs; pgsurge 133.3, 266.7, 166.7 µs
    assert s.ref_cpu_us == pytest.approx(125.0)
    assert s.cand_cpu_us == pytest.approx(1.2e6 / 7_200)
    assert s.cpu.median == pytest.approx(1.2 / 0.9)
    assert s.failed_runs == 0


def test_failed_runs_are_left_out_and_counted() -> None:
    pairs = [
        (run("pgbench", 1000, 1.0, 10_000), run("pgsurge", 1100, 1.0, 11_000)),
        (run("pgbench", 1000, 1.0, 10_000), run("pgsurge", 0, 0.1, 0, returncode=2)),
        (run("pgbench", 1000, 1.0, 10_000), run("pgsurge", 900, 1.0, 9_000)),
    ]
    s = stats.summarize_pairs(pairs)
    assert s.tps.n == 2
    assert s.tps.median == pytest.approx(1.0)
    assert (s.tps.low, s.tps.high) == (pytest.approx(0.9), pytest.approx(1.1))
    assert s.failed_runs == 1


def test_latency_and_lag_ratios() -> None:
    pairs = [
        (
            run("pgbench", 2000, 1, 20_000, latency_ms=2.0, lag_ms=0.10),
            run("pgsurge", 2000, 1, 20_000, latency_ms=2.1, lag_ms=0.12),
        ),
    ]
    s = stats.summarize_pairs(pairs)
    assert s.latency.median == pytest.approx(1.05)
    assert s.lag.median == pytest.approx(1.2)
    assert stats.within(s.latency.median, 1.0, 0.10) is True
    assert stats.within(s.lag.median, 1.0, 0.10) is False
    assert stats.within(math.nan, 1.0, 0.10) is None
    assert stats.within(1.1, 1.0, 0.10) is True  # the edge is inside


def test_tps_verdict_uses_floor_and_aa_band() -> None:
    rs = stats.RatioStats
    aa = rs(median=1.0, low=0.95, high=1.06, n=6)
    assert stats.tps_verdict(rs(0.99, 0.9, 1.1, 6), 0.97, aa) is True
    assert stats.tps_verdict(rs(0.96, 0.9, 1.1, 6), 0.97, aa) is False
    # above the floor but below what pgbench vs pgbench ever showed
    narrow = rs(median=1.0, low=0.99, high=1.01, n=6)
    assert stats.tps_verdict(rs(0.98, 0.9, 1.1, 6), 0.97, narrow) is False
    # faster than the band is fine
    assert stats.tps_verdict(rs(1.2, 1.1, 1.3, 6), 0.97, aa) is True
    assert stats.tps_verdict(rs(0.98, 0.9, 1.1, 6), 0.97, None) is True
    assert stats.tps_verdict(rs(math.nan, math.nan, math.nan, 0), 0.97, aa) is None


def test_ratio_and_verdict_text() -> None:
    assert stats.ratio(3.0, 2.0) == 1.5
    assert math.isnan(stats.ratio(None, 2.0))
    assert math.isnan(stats.ratio(1.0, 0.0))
    assert stats.at_most(1.3, 1.3) is True
    assert stats.at_most(1.31, 1.3) is False
    assert stats.verdict_text(("cpu", True), ("tps", True)) == "yes"
    assert stats.verdict_text(("cpu", False), ("tps", None)) == "no (cpu)"
    assert stats.verdict_text(("cpu", True), ("tps", None)) == "? (tps)"


def test_tables_render_the_same_rows() -> None:
    rows = [
        report.Row(("select-only", "0.981", "0.95–1.02", "x")),
        report.Row(("tpcb-like", "–", "–", "y")),
    ]
    header = ("case", "tps", "range", "note")
    md = report.markdown_table(header, rows).splitlines()
    assert md[0] == "| case | tps | range | note |"
    assert md[1] == "|---|---:|---:|---|"
    assert md[2] == "| select-only | 0.981 | 0.95–1.02 | x |"
    text = report.text_table(header, rows).splitlines()
    assert len(text) == 4 and text[0].startswith("case")
    assert text[3].split() == ["tpcb-like", "–", "–", "y"]
    assert report.fmt(math.nan) == "–" and report.fmt(1.23456, 3) == "1.235"


def _doc_run(tool: str, pair: int, tps: float, cpu_s: float) -> dict[str, object]:
    return {
        "tool": tool,
        "pair": pair,
        "position": 0,
        "argv": ["x"],
        "returncode": 0,
        "wall_s": 10.0,
        "user_s": cpu_s,
        "sys_s": 0.0,
        "tps": tps,
        "transactions": int(tps * 10),
        "cpu_us_per_tx": 1e6 * cpu_s / (tps * 10),  # derived; ignored on load
    }


def test_rows_from_a_saved_document() -> None:
    """--report path: raw runs -> summaries -> rows with verdicts."""

    def pairs(ratios: list[tuple[float, float]]) -> list[list[dict[str, object]]]:
        return [
            [_doc_run("pgbench", i, 1000.0, 1.0), _doc_run("pgsurge", i, 1000 * t, c)]
            for i, (t, c) in enumerate(ratios)
        ]

    results = {
        "select-only-prepared": {
            "kind": "paired",
            "pairs": pairs([(0.99, 1.2), (1.01, 1.2), (0.98, 1.1)]),
        },
        "aa-control": {
            "kind": "aa",
            "pairs": pairs([(0.95, 1.0), (1.05, 1.0), (1.0, 1.0)]),
        },
        "select-only-prepared-256": {
            "kind": "paired",
            "pairs": pairs([(0.99, 1.2), (1.0, 1.2)]),
        },
        "help-startup": {
            "kind": "help",
            "wall_median_s": {"pgsurge": 0.12, "pgbench": 0.01},
        },
    }
    summaries = report.summaries_of(results)
    assert summaries["aa-control"].tps.low == pytest.approx(0.95)
    main, other = report.build_rows(results, summaries)
    by_case = {r.cells[0].split()[0]: r.cells for r in main}
    sel = by_case["select-only-prepared"]
    assert sel[1] == "0.990" and sel[2] == "0.980–1.010"
    # CPU/tx 1.2/9.9 vs 1.0/10 per pair -> ratios 1.212, 1.188, 1.122
    assert sel[5] == "1.188"
    assert sel[-1] == "yes"
    # 256 clients: CPU target 1.0 -> missed
    assert by_case["select-only-prepared-256"][-1] == "no (cpu)"
    assert by_case["aa-control"][-1] == "–"
    assert other[0].cells[1] == "0.120" and other[0].cells[-1] == "yes"
    assert cases.PAIRED_CASES[0].name == "select-only-prepared"


def test_two_lengths_split_slope_and_constant() -> None:
    # 0.2 s of start-up, then 10 µs a transaction
    slope, const = stats.two_lengths(
        0.2 + 50_000 * 1e-5, 50_000, 0.2 + 10_000 * 1e-5, 10_000
    )
    assert slope == pytest.approx(10.0)
    assert const == pytest.approx(200.0)
    # no usable short run: unknown, not a guess
    assert all(math.isnan(v) for v in stats.two_lengths(1.0, 100, 0.5, 100))
    assert all(math.isnan(v) for v in stats.two_lengths(1.0, None, 0.5, 10))


def test_net_cpu_ratio_cancels_a_start_up_the_whole_ratio_keeps() -> None:
    # same per-transaction cost; the candidate starts up 0.3 s longer
    ref = run(
        "pgbench",
        5000,
        0.01 + 50_000 * 1e-5,
        50_000,
        short_cpu_s=0.01 + 10_000 * 1e-5,
        short_transactions=10_000,
    )
    cand = run(
        "pgsurge",
        5000,
        0.31 + 50_000 * 1e-5,
        50_000,
        short_cpu_s=0.31 + 10_000 * 1e-5,
        short_transactions=10_000,
    )
    s = stats.summarize_pairs([(ref, cand)])
    assert s.cpu.median == pytest.approx(0.81 / 0.51)
    assert s.cpu_net.median == pytest.approx(1.0)
    assert s.cand_startup_ms == pytest.approx(310.0)
    assert s.ref_startup_ms == pytest.approx(10.0)
    # runs without a short run keep the old figures and no net ones
    plain = stats.summarize_pairs(
        [(run("pgbench", 1, 1.0, 10), run("pgsurge", 1, 1.0, 10))]
    )
    assert plain.cpu.median == pytest.approx(1.0)
    assert math.isnan(plain.cpu_net.median) and math.isnan(plain.cand_startup_ms)


def test_report_judges_cpu_on_the_net_ratio_when_there_is_one() -> None:
    case = next(c for c in cases.PAIRED_CASES if c.name == "tpcb-like-simple")
    ref = run(
        "pgbench",
        5000,
        0.01 + 50_000 * 1e-5,
        50_000,
        short_cpu_s=0.01 + 10_000 * 1e-5,
        short_transactions=10_000,
    )
    cand = run(
        "pgsurge",
        5000,
        0.31 + 50_000 * 1e-5,
        50_000,
        short_cpu_s=0.31 + 10_000 * 1e-5,
        short_transactions=10_000,
    )
    s = stats.summarize_pairs([(ref, cand)])
    row = report._paired_row(case.name, case, s, None, False)
    assert row.cells[-1] == "yes"
    assert row.cells[5] == "1.588" and row.cells[6] == "1.000"
    assert row.cells[7] == "310 / 10"
