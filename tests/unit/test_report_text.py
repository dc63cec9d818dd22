"""Differential golden tests of the text report against real pgbench 18.6 output.

tests/data/reports/NAME.txt is what the reference pgbench printed on stdout
for the arguments in NAME.args (see capture.sh there). Each test reads the
*measurements* back out of that text (counts, averages, durations), builds
a RunResult whose *settings* come from the arguments, renders it, and
compares the whole report byte for byte (the banner line aside). So which
lines appear, in which order and with which formatting is decided by our
code from the options alone, and checked against pgbench.

Durations are not printed as such: the test searches the integer
microsecond values (total duration, connection time) that make our
formulas print pgbench's tps, computed latency average and connection
time. If pgbench computed them differently, no value would fit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from pgsurge.report.text import render_abort_notice, render_banner, render_text
from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.results import RunFacts, RunResult, ScriptInfo
from pgsurge.stats.simple import SimpleStats

DATA = Path(__file__).resolve().parent.parent / "data" / "reports"
CASES = sorted(p.stem for p in DATA.glob("*.args"))


# --------------------------------------------------------------------------
# The settings, from the pgbench arguments (a tiny subset of the CLI)


@dataclass
class Args:
    clients: int = 1
    jobs: int = 1
    transactions: int | None = None
    duration: int | None = None
    max_tries: int = 1
    latency_limit_ms: float | None = None
    rate: float | None = None
    progress: int = 0
    progress_timestamp: bool = False
    log: bool = False
    failures_detailed: bool = False
    per_command: bool = False
    connect: bool = False
    query_mode: str = "simple"
    weights: list[int] = field(default_factory=list)


def parse_args(text: str) -> Args:
    a = Args()
    words = text.split()
    i = 0

    def value() -> str:
        nonlocal i
        i += 1
        return words[i]

    while i < len(words):
        w = words[i]
        opt, eq, inline = w.partition("=")
        if w == "-c":
            a.clients = int(value())
        elif w == "-j":
            a.jobs = int(value())
        elif w == "-t":
            a.transactions = int(value())
        elif w == "-T":
            a.duration = int(value())
        elif opt == "--max-tries":
            a.max_tries = int(inline if eq else value())
        elif w == "-L":
            a.latency_limit_ms = float(value())
        elif w == "-R":
            a.rate = float(value())
        elif w == "-P":
            a.progress = int(value())
        elif w == "--progress-timestamp":
            a.progress_timestamp = True
        elif w == "-l":
            a.log = True
        elif w == "--failures-detailed":
            a.failures_detailed = True
        elif w == "-r":
            a.per_command = True
        elif w == "-C":
            a.connect = True
        elif w == "-M":
            a.query_mode = value()
        elif w in ("-b", "-f"):
            spec = value()
            a.weights.append(int(spec.rsplit("@", 1)[1]) if "@" in spec else 1)
        elif w in ("-S", "-N"):
            a.weights.append(1)
        elif w == "-s":
            value()  # the scale is read back from the report
        elif w in ("-n",) or opt == "--log-prefix":
            pass
        else:
            raise AssertionError(f"test parser does not know {w!r}")
        i += 1
    if not a.weights:
        a.weights = [1]  # the default tpcb-like script
    return a


# --------------------------------------------------------------------------
# The measurements, from pgbench's report


NUM = r"(-?[0-9.]+|NaN)"


def fnum(s: str) -> float:
    return float("nan") if s == "NaN" else float(s)


def find(pattern: str, lines: list[str]) -> re.Match[str] | None:
    rx = re.compile(pattern)
    for line in lines:
        m = rx.fullmatch(line)
        if m:
            return m
    return None


def ms_stats(count: int, avg_ms: float, stddev_ms: float) -> SimpleStats:
    """A SimpleStats of ``count`` values (µs) with this mean and stddev."""
    mean = avg_ms * 1000.0
    sd = stddev_ms * 1000.0
    return SimpleStats(
        count=count,
        min=mean - sd,
        max=mean + sd,
        sum=mean * count,
        sum2=count * (mean * mean + sd * sd),
    )


def stats_from_block(lines: list[str], prefix: str, detailed: bool) -> StatsData:
    """Counters of the whole run (prefix "") or of one script (" - ")."""
    p = re.escape(prefix)
    s = StatsData()
    m = find(p + r"number of transactions actually processed: (\d+).*", lines)
    s.cnt = int(m.group(1)) if m else 0
    m = find(p + r"number of failed transactions: (\d+) .*", lines)
    failures = int(m.group(1)) if m else 0
    if detailed:
        m1 = find(p + r"number of serialization failures: (\d+) .*", lines)
        m2 = find(p + r"number of deadlock failures: (\d+) .*", lines)
        assert m1 and m2
        s.serialization_failures = int(m1.group(1))
        s.deadlock_failures = int(m2.group(1))
        assert s.failures == failures
    else:
        s.serialization_failures = failures
    m = find(p + r"number of transactions retried: (\d+) .*", lines)
    s.retried = int(m.group(1)) if m else 0
    m = find(p + r"total number of retries: (\d+)", lines)
    s.retries = int(m.group(1)) if m else 0
    m = find(p + r"number of transactions skipped: (\d+) .*", lines)
    s.skipped = int(m.group(1)) if m else 0
    m = find(p + rf"latency average = {NUM} ms", lines)
    m2 = find(p + rf"latency stddev = {NUM} ms", lines)
    if m and m2:
        s.latency = ms_stats(s.cnt, fnum(m.group(1)), fnum(m2.group(1)))
    m = find(rf"rate limit schedule lag: avg {NUM} \(max {NUM}\) ms", lines)
    if m and not prefix:
        avg, mx = fnum(m.group(1)), fnum(m.group(2))
        s.lag = ms_stats(s.cnt, 0.0 if s.cnt == 0 else avg, 0.0)
        s.lag.max = mx * 1000.0
    return s


def command_rows(
    block: list[str], with_retries: bool
) -> list[tuple[str, CommandStats]]:
    """The -r table: "   %11.3f  %10d [%10d] first_line"."""
    rows = []
    for line in block:
        avg = float(line[3:14])
        failures = int(line[16:26])
        if with_retries:
            retries, text = int(line[27:37]), line[38:]
        else:
            retries, text = 0, line[27:]
        lat = SimpleStats(1, avg * 1000, avg * 1000, avg * 1000, (avg * 1000) ** 2)
        rows.append((text, CommandStats(lat, failures, retries)))
    return rows


def split_scripts(lines: list[str]) -> list[list[str]]:
    """The per-script sections (or the lone -r table) after the totals."""
    starts = [
        i
        for i, line in enumerate(lines)
        if line.startswith("SQL script ")
        or line.startswith("statement latencies in milliseconds")
    ]
    if not starts:
        return []
    ends = [*starts[1:], len(lines)]
    return [lines[a:b] for a, b in zip(starts, ends, strict=True)]


def build_result(args: Args, expected: str, stderr: str) -> RunResult:
    lines = expected.splitlines()
    assert lines[0].startswith("pgbench (18.6")
    lines = lines[1:]
    nscripts = len(args.weights)
    detailed = args.failures_detailed

    m = find(r"scaling factor: (\d+)", lines)
    assert m
    scale = int(m.group(1))
    mp = find(r"partition method: (\w+)", lines)
    mn = find(r"partitions: (\d+)", lines)

    sections = split_scripts(lines)
    descs: list[str] = []
    commands: list[list[tuple[str, CommandStats]]] = []
    per_script: list[StatsData] = []
    if nscripts == 1:
        m = find(r"transaction type: (.*)", lines)
        assert m
        descs.append(m.group(1))
    for sec in sections:
        if sec[0].startswith("SQL script "):
            descs.append(sec[0].split(": ", 1)[1])
            st = stats_from_block(sec, " - ", detailed)
            mt = find(r" - (\d+) transactions .*", sec)
            assert mt
            # skipped lines print only under -R with -L; else it must be 0
            if not (args.rate and args.latency_limit_ms):
                st.skipped = int(mt.group(1)) - st.cnt - st.failures
            assert st.total == int(mt.group(1))
            per_script.append(st)
        table = [ln for ln in sec if ln.startswith("   ")]
        if args.per_command:
            commands.append(command_rows(table, args.max_tries != 1))
    if args.per_command:
        assert len(commands) == nscripts
    else:
        commands = [[] for _ in range(nscripts)]

    facts = RunFacts(
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        scripts=tuple(
            ScriptInfo(desc, w, tuple(text for text, _ in cmds))
            for desc, w, cmds in zip(descs, args.weights, commands, strict=True)
        ),
        scale=scale,
        partition_method=mp.group(1) if mp else "none",
        partitions=int(mn.group(1)) if mn else 0,
        query_mode=args.query_mode,
        clients=args.clients,
        threads=min(args.jobs, args.clients),
        transactions_per_client=None if args.duration else (args.transactions or 10),
        duration_s=args.duration,
        max_tries=args.max_tries,
        latency_limit_us=(
            int(args.latency_limit_ms * 1000) if args.latency_limit_ms else 0
        ),
        rate=args.rate,
        progress_s=args.progress,
        log=args.log,
        failures_detailed=detailed,
        report_per_command=args.per_command,
        connect_each_tx=args.connect,
    )
    total = stats_from_block(lines, "", detailed)
    if not per_script:
        per_script = [total.copy()] if nscripts == 1 else []
    m = find(r"number of transactions above the .* limit: (\d+)/(\d+) .*", lines)
    late = int(m.group(1)) if m else 0
    m = find(rf"initial connection time = {NUM} ms", lines)
    conn_elapsed = round(float(m.group(1)) * 1000) if m else 0
    aborted = len(re.findall(r"^pgbench: error: client \d+ .*aborted", stderr, re.M))
    return RunResult(
        facts=facts,
        total=total,
        per_script=per_script,
        per_command=[[c for _, c in cmds] for cmds in commands],
        latency_late=late,
        conn_elapsed_us=conn_elapsed,
        aborted_clients=aborted,
        clients_finished=args.clients - aborted,
    )


def fit(
    result: RunResult,
    expected: str,
    attr: str,
    guess: float,
    keep: Callable[[str], bool],
) -> RunResult:
    """Find the integer µs value of ``attr`` near ``guess`` for which the
    lines selected by ``keep`` render as pgbench printed them."""
    want = [ln for ln in expected.splitlines() if keep(ln)]
    center = round(guess)
    span = max(50, int(abs(guess) * 2e-6))
    for delta in sorted(range(-span, span + 1), key=abs):
        candidate = replace(result, **{attr: center + delta})
        got = [ln for ln in render_text(candidate).splitlines() if keep(ln)]
        if got == want:
            return candidate
    return replace(result, **{attr: center})  # let the comparison show the diff


def fitted_result(name: str) -> tuple[RunResult, str]:
    args = parse_args((DATA / f"{name}.args").read_text())
    expected = (DATA / f"{name}.txt").read_text()
    stderr = (DATA / f"{name}.stderr").read_text()
    result = build_result(args, expected, stderr)
    lines = expected.splitlines()

    total = result.total
    m = find(rf"tps = {NUM} .*", lines)
    tps = fnum(m.group(1)) if m else 0.0
    mc = find(
        rf"latency average = {NUM} ms \(including failures\)|"
        rf"latency average = {NUM} ms",
        lines,
    )
    if total.cnt > 0 and tps > 0:
        guess = total.cnt / tps * 1e6
    elif mc and not result.facts.latency_reported:
        avg = fnum(mc.group(1) or mc.group(2))
        guess = avg * 1000 * total.total / result.facts.clients
    else:
        guess = 1e6 * (args.duration or 1)
    result = fit(
        result,
        expected,
        "total_duration_us",
        guess,
        lambda ln: "tps" in ln or ln.startswith("latency average"),
    )
    m = find(rf"average connection time = {NUM} ms", lines)
    if m:
        conn_guess = fnum(m.group(1)) * 1000 * (total.cnt + total.failures)
        result = fit(
            result,
            expected,
            "conn_total_us",
            conn_guess,
            lambda ln: ln.startswith("average connection time"),
        )
    return result, expected


@pytest.mark.parametrize("name", CASES)
def test_report_matches_pgbench(name: str) -> None:
    result, expected = fitted_result(name)
    got = render_text(result)
    banner, _, body = got.partition("\n")
    assert banner == "pgsurge (0.1.0, server 18.6)"
    assert body == expected.partition("\n")[2]


@pytest.mark.parametrize("name", CASES)
def test_abort_notice_matches_pgbench(name: str) -> None:
    result, _ = fitted_result(name)
    stderr = (DATA / f"{name}.stderr").read_text()
    notice = render_abort_notice(result, progname="pgbench")
    if notice:
        assert stderr.endswith(notice)
    else:
        assert "Run was aborted" not in stderr


@pytest.mark.parametrize("name", CASES)
def test_result_round_trips_through_dict(name: str) -> None:
    result, _ = fitted_result(name)
    again = RunResult.from_dict(result.to_dict())
    assert render_text(again) == render_text(result)


def test_cases_cover_the_report_features() -> None:
    """Guard against the data set losing the configurations that matter."""
    text = "".join((DATA / f"{n}.txt").read_text() for n in CASES)
    for needle in [
        "partition method: hash",
        "duration: ",
        "number of transactions per client",
        "total number of retries",
        "number of transactions skipped",
        "latency limit",
        "(including failures)",
        "latency stddev",
        "rate limit schedule lag: avg NaN",
        "average connection time",
        "(including reconnection times)",
        "SQL script 2",
        " - 0 transactions (0.0% of total)",
        " - statement latencies in milliseconds, failures and retries:",
        "statement latencies in milliseconds and failures:",
        "query mode: prepared",
        "query mode: extended",
        "scaling factor: 7",
        "number of threads: 2",
    ]:
        assert needle in text, needle
    for rx in [
        r"number of serialization failures: [1-9]",
        r"number of deadlock failures: [1-9]",
        r"number of failed transactions: [1-9]\d* \(.*\n(?!number of ser)",
        r"total number of retries: [1-9]",
        r"number of transactions skipped: [1-9]",
        r"\n - number of transactions retried: [1-9]",
    ]:
        assert re.search(rx, text), rx
    assert any(
        "maximum number of tries" not in (DATA / f"{n}.txt").read_text() for n in CASES
    )


def test_banner() -> None:
    assert render_banner("0.1.0", "17.4") == "pgsurge (0.1.0, server 17.4)\n"


def base_facts(**kw: object) -> RunFacts:
    facts = RunFacts(
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        scripts=(ScriptInfo("<builtin: select only>", 1, ("SELECT 1;",)),),
    )
    return replace(facts, **kw)  # type: ignore[arg-type]


def test_nothing_processed_stops_after_the_counts() -> None:
    # pgbench's early return when no transaction ended (all clients aborted)
    result = RunResult(facts=base_facts(), aborted_clients=1, clients_finished=0)
    body = render_text(result, banner=False)
    assert body.endswith("number of transactions actually processed: 0/10\n")
    assert render_abort_notice(result) == (
        "pgsurge: error: Run was aborted; the above results are incomplete.\n"
    )


def test_other_failures_line_only_with_continue_on_error() -> None:
    total = StatsData(cnt=8, other_failures=2)
    result = RunResult(
        facts=base_facts(failures_detailed=True, continue_on_error=True),
        total=total,
        total_duration_us=1_000_000,
    )
    body = render_text(result, banner=False)
    assert "number of failed transactions: 2 (20.000%)\n" in body
    assert "number of other failures: 2 (20.000%)\n" in body
    assert "(including failures)" in body
    plain = render_text(replace(result, facts=base_facts(failures_detailed=True)))
    assert "other failures" not in plain


def test_transactions_product_wraps_like_a_c_int() -> None:
    result = RunResult(
        facts=base_facts(clients=3, transactions_per_client=1_000_000_000)
    )
    body = render_text(result, banner=False)
    assert "processed: 0/-1294967296\n" in body


def test_zero_duration_prints_postgres_nan_and_infinity() -> None:
    total = StatsData(cnt=3)
    result = RunResult(facts=base_facts(), total=total, total_duration_us=0)
    body = render_text(result, banner=False)
    assert "tps = Infinity (without initial connection time)\n" in body
    assert "latency average = 0.000 ms\n" in body
