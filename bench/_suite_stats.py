"""Pure figures for bench/suite.py: run records, ABBA order, medians, ratios.

Nothing here starts a process or touches a server, so the arithmetic the
suite's verdicts rest on is unit-tested (tests/unit/test_bench_suite.py).

Vocabulary:

* a *run* is one execution of one tool (:class:`Run`);
* a *pair* is one run of each tool back to back; pair ``i`` runs the
  reference first when ``i`` is even and second when it is odd (ABBA), so a
  slow drift of the machine (caches warming, WAL growing, a neighbour's
  load) favours neither tool;
* a *ratio* is always ``candidate / reference`` within one pair, and a
  case's figure is the median of its per-pair ratios (not the ratio of the
  medians: pairing cancels the drift that the two medians would keep);
* a run may carry a *short run* of the same tool and arguments, measured
  in the same pair (``suite.py --short``): the two run lengths split the
  CPU into a per-transaction slope and a per-run constant (start-up,
  connections, the end of the run), :func:`two_lengths`.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# -- parsing a pgbench-format report ------------------------------------------

_TPS = re.compile(r"^tps = ([0-9.]+)", re.M)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.M)
_LATENCY = re.compile(r"^latency average = ([0-9.]+) ms", re.M)
_LAG = re.compile(r"^rate limit schedule lag: avg ([0-9.]+) \(max [0-9.]+\) ms", re.M)
_DONE_IN = re.compile(r"^done in ([0-9.]+) s", re.M)


@dataclass(frozen=True, slots=True)
class ReportFigures:
    """The figures the suite reads from a run's standard output."""

    tps: float | None
    transactions: int | None
    latency_ms: float | None
    lag_ms: float | None
    done_in_s: float | None


def parse_report(stdout: str) -> ReportFigures:
    """Read tps, transactions, latency and lag averages, and ``done in``."""

    def num(rx: re.Pattern[str]) -> float | None:
        m = rx.search(stdout)
        return float(m.group(1)) if m else None

    m = _PROCESSED.search(stdout)
    return ReportFigures(
        tps=num(_TPS),
        transactions=int(m.group(1)) if m else None,
        latency_ms=num(_LATENCY),
        lag_ms=num(_LAG),
        done_in_s=num(_DONE_IN),
    )


# -- one run -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """One measured execution of a tool (everything the JSON keeps)."""

    tool: str
    #: -1 for the uncounted warm-up pair
    pair: int
    #: 0 when it ran first in its pair, 1 when second
    position: int
    argv: tuple[str, ...]
    returncode: int
    wall_s: float
    #: user and system CPU of the tool's whole process tree (RUSAGE_CHILDREN)
    user_s: float
    sys_s: float
    tps: float | None = None
    transactions: int | None = None
    latency_ms: float | None = None
    lag_ms: float | None = None
    done_in_s: float | None = None
    #: peak of the summed VmRSS / Pss of the tool's processes (KiB), if sampled
    peak_rss_kib: int | None = None
    peak_pss_kib: int | None = None
    error: str | None = None
    #: the tool's standard output and the end of its standard error
    stdout: str = ""
    stderr_tail: str = ""
    #: CPU seconds and transactions of the same tool's short run in this
    #: pair (None: no short run, or it failed)
    short_cpu_s: float | None = None
    short_transactions: int | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.error is None

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def cpu_us_per_tx(self) -> float:
        """Client CPU per processed transaction, start-up and workers included."""
        return cpu_us_per_tx(self.cpu_s, self.transactions)

    @property
    def net_cpu_us_per_tx(self) -> float:
        """Client CPU per transaction with the per-run constant cancelled."""
        return self._two_lengths()[0]

    @property
    def startup_ms(self) -> float:
        """The per-run constant: start-up, connections, end of the run (ms)."""
        return self._two_lengths()[1]

    def _two_lengths(self) -> tuple[float, float]:
        if not self.ok or self.short_cpu_s is None:
            return math.nan, math.nan
        return two_lengths(
            self.cpu_s, self.transactions, self.short_cpu_s, self.short_transactions
        )


def two_lengths(
    cpu_s: float, transactions: int | None, short_cpu_s: float, short_tx: int | None
) -> tuple[float, float]:
    """(µs per transaction, ms per run) from a long and a short run.

    CPU = constant + slope × transactions; two runs of different lengths
    give both. NaNs when a count is missing or the two are equal.
    """
    if not transactions or short_tx is None or transactions <= short_tx:
        return math.nan, math.nan
    slope = (cpu_s - short_cpu_s) / (transactions - short_tx)
    return 1e6 * slope, 1e3 * (short_cpu_s - slope * short_tx)


def cpu_us_per_tx(cpu_s: float, transactions: int | None) -> float:
    """CPU seconds per transaction, in µs (NaN when nothing was processed)."""
    if not transactions:
        return math.nan
    return 1e6 * cpu_s / transactions


# -- order ---------------------------------------------------------------------


def abba_order(pair: int, a: str, b: str) -> tuple[str, str]:
    """The run order of pair ``pair``: A B for even pairs, B A for odd ones.

    The warm-up pair (index -1) runs A B too: it is not counted.
    """
    return (a, b) if pair % 2 == 0 or pair < 0 else (b, a)


def rotation_order(round_: int, variants: Sequence[str]) -> list[str]:
    """Several variants per round: forward in even rounds, reversed in odd ones."""
    return list(variants) if round_ % 2 == 0 else list(reversed(variants))


# -- summaries -----------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """Median of the finite values; NaN when there is none."""
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def spread(values: Iterable[float]) -> tuple[float, float]:
    """(min, max) of the finite values; NaNs when there is none."""
    vals = [v for v in values if not math.isnan(v)]
    return (min(vals), max(vals)) if vals else (math.nan, math.nan)


def ratio(candidate: float | None, reference: float | None) -> float:
    """candidate / reference, NaN when either is missing or the reference is 0."""
    if candidate is None or reference is None or reference == 0:
        return math.nan
    return candidate / reference


@dataclass(frozen=True, slots=True)
class RatioStats:
    """Median and range of per-pair ratios."""

    median: float
    low: float
    high: float
    n: int


def ratio_stats(
    pairs: Sequence[tuple[Run, Run]], key: Callable[[Run], float | None]
) -> RatioStats:
    """Per-pair ``key(candidate) / key(reference)``: median and min-max.

    ``pairs`` holds (reference, candidate) tuples; pairs where a run failed
    are left out (their count shows in ``n``).
    """
    values = [ratio(key(c), key(r)) for r, c in pairs if r.ok and c.ok]
    low, high = spread(values)
    return RatioStats(median(values), low, high, sum(not math.isnan(v) for v in values))


def _tps(run: Run) -> float | None:
    return run.tps


def _cpu(run: Run) -> float:
    return run.cpu_us_per_tx


def _cpu_net(run: Run) -> float:
    return run.net_cpu_us_per_tx


def _startup(run: Run) -> float:
    return run.startup_ms


def _latency(run: Run) -> float | None:
    return run.latency_ms


def _lag(run: Run) -> float | None:
    return run.lag_ms


@dataclass(frozen=True, slots=True)
class PairedSummary:
    """The figures a run case (or the A/A control) reports."""

    tps: RatioStats
    cpu: RatioStats
    latency: RatioStats
    lag: RatioStats
    ref_tps: float
    cand_tps: float
    ref_cpu_us: float
    cand_cpu_us: float
    ref_latency_ms: float
    cand_latency_ms: float
    ref_lag_ms: float
    cand_lag_ms: float
    failed_runs: int
    #: CPU per transaction with the per-run constant cancelled (short runs)
    cpu_net: RatioStats = RatioStats(math.nan, math.nan, math.nan, 0)
    ref_cpu_net_us: float = math.nan
    cand_cpu_net_us: float = math.nan
    #: the per-run constant of each tool, ms (median over pairs)
    ref_startup_ms: float = math.nan
    cand_startup_ms: float = math.nan


def summarize_pairs(pairs: Sequence[tuple[Run, Run]]) -> PairedSummary:
    """Medians per tool and medians of per-pair ratios for (ref, cand) pairs."""
    good = [(r, c) for r, c in pairs if r.ok and c.ok]

    def med(side: int, key: Callable[[Run], float | None]) -> float:
        values = (key(p[side]) for p in good)
        return median(v for v in values if v is not None)

    return PairedSummary(
        tps=ratio_stats(pairs, _tps),
        cpu=ratio_stats(pairs, _cpu),
        latency=ratio_stats(pairs, _latency),
        lag=ratio_stats(pairs, _lag),
        ref_tps=med(0, _tps),
        cand_tps=med(1, _tps),
        ref_cpu_us=med(0, _cpu),
        cand_cpu_us=med(1, _cpu),
        ref_latency_ms=med(0, _latency),
        cand_latency_ms=med(1, _latency),
        ref_lag_ms=med(0, _lag),
        cand_lag_ms=med(1, _lag),
        failed_runs=sum((not r.ok) + (not c.ok) for r, c in pairs),
        cpu_net=ratio_stats(pairs, _cpu_net),
        ref_cpu_net_us=med(0, _cpu_net),
        cand_cpu_net_us=med(1, _cpu_net),
        ref_startup_ms=med(0, _startup),
        cand_startup_ms=med(1, _startup),
    )


# -- verdicts ------------------------------------------------------------------


def at_most(value: float, limit: float) -> bool | None:
    """value ≤ limit; None (unknown) when the value is missing."""
    return None if math.isnan(value) else value <= limit


def within(value: float, target: float, tolerance: float) -> bool | None:
    """|value - target| ≤ tolerance; None when the value is missing."""
    return None if math.isnan(value) else abs(value - target) <= tolerance + 1e-12


def tps_verdict(tps: RatioStats, floor: float, aa: RatioStats | None) -> bool | None:
    """tps target: median ratio ≥ ``floor`` and not below the A/A band.

    The A/A band is the range of the control's per-pair ratios (pgbench
    against itself): a median below its low end is slower than the noise
    explains. Above the band only means faster, which the target allows.
    """
    if math.isnan(tps.median):
        return None
    ok = tps.median >= floor
    if aa is not None and not math.isnan(aa.low):
        ok = ok and tps.median >= aa.low
    return ok


def verdict_text(*checks: tuple[str, bool | None]) -> str:
    """ "yes", or "no (cpu, tps)" naming the failed checks; "?" when unknown."""
    failed = [name for name, ok in checks if ok is False]
    unknown = [name for name, ok in checks if ok is None]
    if failed:
        return "no (" + ", ".join(failed) + ")"
    if unknown:
        return "? (" + ", ".join(unknown) + ")"
    return "yes"
