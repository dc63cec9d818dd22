"""A comparison of two sides of runs: per metric, the ratio, its CI, the
verdict and the noise.

``compare(base, new, ...)`` is a pure function of loaded results
(``RunSummary`` values) that returns a ``Comparison``; ``render.py`` turns
that into text or JSON. The rules:

* the run is the unit: each metric is one value per run (tps, the latency
  average, p50/p90/p99 from that run's own histogram, client CPU per
  transaction); per-transaction samples are never pooled across runs;
* two or more runs on a side: Welch's t on log values (``stats``); one
  run on one side: the other side's variance stands for both; one run per
  side: batch means over the per-interval series within each run give a
  *within-run* interval, shown as such, and **no verdict** (nor a
  ``--fail-on`` failure): batch means understate the variance between
  runs, and an A/A pair of single runs was called "+76.8 %" with them;
* no verdict either when a side's spread is not measured: one run against
  runs of identical values, or a side of several runs all equal (a file
  given twice is refused earlier, ``results.check_distinct``);
* the verdict of the primary metric (``tps`` unless asked otherwise)
  drives the exit status; every metric has its own verdict line;
* runs of different workloads (``results.WORKLOAD_FIELDS``) are refused
  unless forced, naming what differs; ``pgsurge ab`` passes the
  differences its arms ask for as expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from pgsurge.errors import PgsurgeError
from pgsurge.experiment.results import Interval, RunSummary, workload_differences
from pgsurge.stats import compare as stats
from pgsurge.stats.compare import Direction, Estimate, Method
from pgsurge.stats.histogram import DEFAULT_DIGITS, Histogram

__all__ = [
    "METRICS",
    "Comparison",
    "FailureResult",
    "Metric",
    "MetricResult",
    "Side",
    "check_whole_runs",
    "check_workloads",
    "compare",
    "side_stats",
]

#: length of a batch for the single-run fallback, in seconds
BATCH_S = 10.0
#: the fallback wants at least this many batches per run (shorter batches
#: on short runs)
MIN_BATCHES = 5

#: exit statuses of ``compare``/``ab`` beyond pgbench's 0/1/2
EXIT_FAIL_ON = 3


Series = tuple[list[float], list[float]]


@dataclass(frozen=True, slots=True)
class Metric:
    """A per-run figure and how to read its change."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    #: the verdict words for a change for the better and for the worse
    better: str
    worse: str
    value: Callable[[RunSummary], float | None]
    #: per-interval (numerators, denominators) for batch means, if any
    series: Callable[[Sequence[Interval]], Series] | None


def _tps_series(ivs: Sequence[Interval]) -> Series:
    return [float(i.processed) for i in ivs], [i.duration_s for i in ivs]


def _latency_series(ivs: Sequence[Interval]) -> Series:
    num = [(i.latency_avg_ms or 0.0) * i.latency_count for i in ivs]
    return num, [float(i.latency_count) for i in ivs]


def _pct_series(label: str) -> Callable[[Sequence[Interval]], Series]:
    # a count-weighted mean of per-interval percentiles: an approximation
    # of the batch's percentile, good enough for its spread
    def series(ivs: Sequence[Interval]) -> Series:
        num, den = [], []
        for i in ivs:
            v = i.percentiles.get(label)
            num.append(v * i.latency_count if v is not None else 0.0)
            den.append(float(i.latency_count) if v is not None else 0.0)
        return num, den

    return series


def _pct(label: str) -> Callable[[RunSummary], float | None]:
    return lambda run: run.percentiles.get(label)


#: the metrics, in table order; the first is the default primary one
METRICS: tuple[Metric, ...] = (
    Metric("tps", "tps", "", True, "faster", "slower", lambda r: r.tps, _tps_series),
    Metric(
        "latency",
        "latency avg",
        "ms",
        False,
        "faster",
        "slower",
        lambda r: r.latency_avg_ms,
        _latency_series,
    ),
    *(
        Metric(
            f"p{p}", f"p{p}", "ms", False, "faster", "slower", _pct(p), _pct_series(p)
        )
        for p in ("50", "90", "99")
    ),
    Metric(
        "cpu",
        "CPU/tx",
        "µs",
        False,
        "less CPU",
        "more CPU",
        lambda r: r.cpu_us_per_tx,
        None,
    ),
)
METRIC_KEYS = tuple(m.key for m in METRICS)


@dataclass(frozen=True, slots=True)
class Side:
    """One side's values of a metric, in the order the files were given."""

    names: tuple[str, ...]
    values: tuple[float, ...]
    median: float | None
    min: float | None
    max: float | None
    cv: float | None
    #: Spearman ρ against run order, when |ρ| > DRIFT_RHO
    drift: float | None
    #: (file name, modified z) of outlier runs
    outliers: tuple[tuple[str, float], ...]

    @property
    def n(self) -> int:
        return len(self.values)


def _run_order(runs: Sequence[RunSummary]) -> list[int]:
    """Indexes of ``runs`` in the order they ran: by start time when every
    run has one, else as given."""
    if all(r.start for r in runs):
        return sorted(range(len(runs)), key=lambda i: runs[i].start or "")
    return list(range(len(runs)))


def side_stats(runs: Sequence[RunSummary], metric: Metric) -> Side:
    pairs = [(r, metric.value(r)) for r in runs]
    kept = [(r, v) for r, v in pairs if v is not None and math.isfinite(v)]
    values = tuple(v for _, v in kept)
    names = tuple(r.name for r, _ in kept)
    if not values:
        return Side(names, values, None, None, None, None, None, ())
    order = _run_order([r for r, _ in kept])
    rho = stats.drift_rho([values[i] for i in order])
    z = stats.modified_z(values)
    return Side(
        names=names,
        values=values,
        median=float(np.median(values)),
        min=min(values),
        max=max(values),
        cv=stats.cv(values),
        drift=rho if rho is not None and abs(rho) > stats.DRIFT_RHO else None,
        outliers=tuple(
            (names[i], zi) for i, zi in enumerate(z) if abs(zi) > stats.OUTLIER_Z
        ),
    )


@dataclass(frozen=True, slots=True)
class MetricResult:
    """The comparison of one metric."""

    metric: Metric
    base: Side
    new: Side
    estimate: Estimate | None
    direction: Direction | None
    #: exact permutation p-value (primary metric, ≤ 10 runs per side)
    permutation_p: float | None
    #: minimum detectable effect (fraction) at 80 % power, and runs per side
    #: the threshold would need (None: more than stats.MAX_RUNS_NEEDED)
    mde: float | None
    runs_needed: int | None
    #: why there is no estimate, when there is none
    missing: str | None

    @property
    def word(self) -> str | None:
        """faster/slower (or the metric's words) for a change beyond the
        threshold, else None."""
        m = self.metric
        if self.direction is Direction.UP:
            return m.better if m.higher_is_better else m.worse
        if self.direction is Direction.DOWN:
            return m.worse if m.higher_is_better else m.better
        return None

    @property
    def worse(self) -> bool:
        return self.word is not None and self.word == self.metric.worse

    def verdict(self, threshold: float) -> str:
        """The verdict as the table prints it."""
        band = f"±{_pct_number(threshold)} %"
        if self.estimate is None and self.word is not None:
            # no ratio to a side that processed nothing, yet a sure change
            return f"{self.word} ({self.missing})"
        if self.estimate is None or self.direction is None:
            return f"no verdict ({self.missing})" if self.missing else "no verdict"
        if self.word is not None:
            return self.word
        if self.direction is Direction.SAME:
            return f"no difference (within {band})"
        sig = "significant; " if self.estimate.significant else ""
        return f"inconclusive ({sig}threshold {band})"


@dataclass(frozen=True, slots=True)
class FailureResult:
    """Failed transactions: per-run failure rates and their difference."""

    base_rates: tuple[float, ...]
    new_rates: tuple[float, ...]
    base_failed: int
    new_failed: int
    #: Welch p of the per-run rates (None below 2 runs per side or no failure)
    p_value: float | None

    @property
    def any(self) -> bool:
        return self.base_failed > 0 or self.new_failed > 0


@dataclass(frozen=True, slots=True)
class Comparison:
    """A finished comparison; ``render`` prints it."""

    base: tuple[RunSummary, ...]
    new: tuple[RunSummary, ...]
    confidence: float
    threshold: float
    primary: str
    single_run: bool
    #: the single-run fallback's batches
    batches: BatchPlan | None
    #: workload differences between the sides that were accepted (--force,
    #: or the arms of an A/B experiment), and why
    differences: tuple[str, ...]
    differences_reason: str | None
    metrics: tuple[MetricResult, ...]
    failures: FailureResult
    notes: tuple[str, ...]

    @property
    def primary_result(self) -> MetricResult:
        return next(m for m in self.metrics if m.metric.key == self.primary)

    def exit_status(self, fail_on: str | None) -> int:
        """0, or ``EXIT_FAIL_ON`` when ``fail_on`` ("slower" or "change")
        matches the primary metric's verdict."""
        res = self.primary_result
        if fail_on == "slower" and res.worse:
            return EXIT_FAIL_ON
        if fail_on == "change" and res.word is not None:
            return EXIT_FAIL_ON
        return 0


def _pct_number(frac: float) -> str:
    return f"{frac * 100:g}"


def check_workloads(
    base: Sequence[RunSummary],
    new: Sequence[RunSummary],
    *,
    force: bool,
    across_expected: bool = False,
) -> list[str]:
    """The workload differences found, between the sides (first run of
    each) then within a side.

    Runs within a side must share their workload, and the sides must too,
    unless ``force``; with ``across_expected`` (the arms of ``ab``),
    differences between the sides are returned rather than refused.
    """
    within = [
        f"{side[0].name} and {run.name}: {'; '.join(diff)}"
        for side in (base, new)
        for run in side[1:]
        if (diff := workload_differences(side[0].workload, run.workload))
    ]
    across = workload_differences(base[0].workload, new[0].workload)
    found = (["; ".join(across)] if across else []) + within
    refused = within if across_expected else found
    if refused and not force:
        raise PgsurgeError(
            f"different workloads: {' | '.join(refused)} (--force compares anyway)"
        )
    return found


def _partial(run: RunSummary) -> str | None:
    """Why ``run``'s figures are not a whole run's, or None."""
    if run.interrupted:
        return f"{run.name}: the run was {run.interrupted}"
    if run.aborted:
        return f"{run.name}: the run was aborted (some clients failed)"
    return None


def check_whole_runs(runs: Sequence[RunSummary], *, force: bool) -> list[str]:
    """The runs cut short (a signal) or aborted, refused unless ``force``.

    Their figures cover part of the run, or fewer clients: an interrupted
    -T 60 run measured its first seconds, and was compared as a whole run
    of the same workload with no word (hostile finding)."""
    found = [p for r in runs if (p := _partial(r)) is not None]
    if found and not force:
        raise PgsurgeError(
            f"partial runs: {' | '.join(found)}: "
            + (
                "its figures are not a whole run's"
                if len(found) == 1
                else "their figures are not whole runs'"
            )
            + " (--force compares anyway)"
        )
    return found


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The single-run fallback's batches, common to both runs."""

    #: intervals per batch, and their length
    size: int
    seconds: float
    #: batches per run (the shorter run's count)
    batches: int


def _steady(run: RunSummary) -> Sequence[Interval]:
    """The run's intervals without the first (it holds the start-up; not
    after a --warmup, whose series starts with the measured window) and
    without a last, partial one."""
    ivs = list(run.intervals)
    full = max((i.duration_s for i in ivs), default=0.0)
    if ivs and ivs[-1].duration_s < 0.9 * full:
        ivs.pop()
    return ivs[1:] if len(ivs) >= 3 and not run.warmup_s else ivs


def _batch_plan(runs: Sequence[RunSummary]) -> BatchPlan | None:
    """Batches of ``BATCH_S`` seconds, shorter when that leaves fewer than
    ``MIN_BATCHES``; None when a run has fewer than ``MIN_BATCHES`` steady
    intervals."""
    series = [_steady(r) for r in runs]
    n = min(len(s) for s in series)
    if n < MIN_BATCHES:
        return None
    step = float(np.median([i.duration_s for s in series for i in s])) or 1.0
    size = max(1, round(BATCH_S / step))
    if n // size < MIN_BATCHES:
        size = max(1, n // MIN_BATCHES)
    return BatchPlan(size, size * step, n // size)


def _batch_estimate(
    metric: Metric,
    base: RunSummary,
    new: RunSummary,
    plan: BatchPlan,
    confidence: float,
) -> Estimate | None:
    if metric.series is None:
        return None
    sides = [
        stats.batch_values(*metric.series(_steady(run)), plan.size)
        for run in (base, new)
    ]
    est = stats.log_ratio_ci(sides[0], sides[1], confidence)
    b, n = metric.value(base), metric.value(new)
    if est is None or b is None or n is None or b <= 0 or n <= 0:
        return None
    # the whole-run ratio, with the spread the batches show
    return est.recentred(n / b, Method.BATCH_MEANS)


#: why a single run per side gets no verdict, even with a within-run interval
SINGLE_RUN_NO_VERDICT = "single run per side: within-run interval only"


def _nothing_processed(
    metric: Metric, bside: Side, nside: Side
) -> tuple[Direction, str] | None:
    """For tps: the direction and why, when every run of one side (two or
    more) processed nothing and every run of the other side did."""
    if not metric.higher_is_better or min(bside.n, nside.n) < 2:
        return None
    for zero, other, direction in (
        (nside, bside, Direction.DOWN),
        (bside, nside, Direction.UP),
    ):
        if zero.max == 0 and other.min is not None and other.min > 0:
            name = "new" if zero is nside else "base"
            return direction, f"every {name} run processed nothing"
    return None


def _flat_side(bside: Side, nside: Side) -> str | None:
    """The side of several runs whose values are all equal (its spread, and
    with one run on the other side the only spread, is not measured); None
    when the spreads are usable."""
    for name, side in (("base", bside), ("new", nside)):
        if side.n >= 2 and side.min == side.max:
            return f"{side.n} {name} runs"
    return None


def _schedule_reason(metric: Metric, runs: Sequence[RunSummary]) -> str | None:
    """Why ``-R`` leaves ``metric`` without a verdict, or None.

    A run that fell behind its schedule measured the backlog: its latencies
    (counted from the scheduled start) grow with the run's length, not
    with the server's speed. Runs that all kept their schedule ran the
    rate asked, so their tps is the schedule's (a patch twice as slow
    would show "no difference" as long as it keeps up). Hostile finding:
    compare and ab gave verdicts on both."""
    behind = sum(r.rate_unsustained for r in runs)
    if metric.key in ("latency", "p50", "p90", "p99") and behind:
        return (
            f"{behind} of {len(runs)} runs fell behind -R: their latencies "
            "measure the backlog"
        )
    if metric.key == "tps" and not behind and all(r.workload.rate for r in runs):
        return "-R set the rate: tps is the schedule's; compare latencies"
    return None


#: the percentiles' metrics: values read off a latency histogram
_PERCENTILE_KEYS = frozenset(("p50", "p90", "p99"))


def _step(value_ms: float) -> float:
    """The relative step in which a percentile of ``value_ms`` is measured:
    a latency is counted in whole microseconds, and above 2 ms in the
    histogram's buckets (at its default 3 digits, 1/1024 of the power of
    two the value lies in), so a percentile read 0.020 ms may be anything
    from 20 to 21 µs."""
    us = max(1, round(value_ms * 1000))
    layout = Histogram(DEFAULT_DIGITS)
    low, high = layout.bounds(layout.index_of(us))
    return (high - low + 1) / us


def _with_resolution(est: Estimate, bside: Side, nside: Side) -> Estimate:
    """``est`` with its interval widened by the steps the percentiles of
    each side are measured in (the coarsest of its values): each run's
    figure may be off by up to one step, and runs of the same length at
    the same latency are off alike, so their spread does not show it.
    Hostile finding: p50s of 20 and 21 µs (one step apart, every run)
    were 'slower' by 5 % with an interval of 4.6 to 5.4 %, where the
    latencies could differ by anything from 0 to 10 %."""
    grow = (1 + max(map(_step, bside.values))) * (1 + max(map(_step, nside.values)))
    return replace(est, low=est.low / grow, high=est.high * grow)


def _metric(
    metric: Metric,
    base: Sequence[RunSummary],
    new: Sequence[RunSummary],
    *,
    confidence: float,
    threshold: float,
    primary: bool,
    plan: BatchPlan | None,
) -> MetricResult:
    bside, nside = side_stats(base, metric), side_stats(new, metric)
    missing = None
    mde = runs = perm = None
    if not bside.values or not nside.values:
        est = None
        missing = "not in every result" if (bside.values or nside.values) else "n/a"
    elif len(base) == 1 and len(new) == 1:
        est = None
        if plan is not None:
            est = _batch_estimate(metric, base[0], new[0], plan, confidence)
        if est is None:
            missing = (
                "single run per side, no per-interval series"
                if plan is not None or metric.series is None
                else "single run per side, too short for batch means"
            )
        else:
            missing = SINGLE_RUN_NO_VERDICT
    elif nothing := _nothing_processed(metric, bside, nside):
        # every run of one side processed nothing, every run of the other
        # something: no log ratio, but no doubt either (hostile finding: a
        # B whose every transaction failed got "no verdict (no spread in
        # the 3 new runs: identical values)" and passed --fail-on slower)
        direction, missing = nothing
        return MetricResult(
            metric, bside, nside, None, direction, None, None, None, missing
        )
    elif flat := _flat_side(bside, nside):
        est = None
        missing = f"no spread in the {flat}: identical values"
    else:
        est = stats.log_ratio_ci(bside.values, nside.values, confidence)
        if est is None:
            missing = "zero values"
        elif metric.key in _PERCENTILE_KEYS:
            est = _with_resolution(est, bside, nside)
        pooled = stats.pooled_log_sd(bside.values, nside.values)
        if pooled is not None:
            sd, df = pooled
            mde = stats.min_detectable_effect(
                sd, bside.n, nside.n, confidence, df=float(df)
            )
            runs = stats.runs_needed(sd, threshold, confidence)
        if primary:
            perm = stats.permutation_p(bside.values, nside.values)
    # a within-run interval is shown, but it decides nothing
    within_run = est is not None and est.method is Method.BATCH_MEANS
    withheld = _schedule_reason(metric, [*base, *new])
    if withheld is not None and bside.values and nside.values:
        # the noise stays (it is measured); the ratio's interval and the
        # verdict go. The schedule's reason comes before any other (a side
        # without spread, a single run): more runs would not help (CI
        # finding: two base runs of 2 ms sleeps under -R 50 kept their
        # schedule to the microsecond and the verdict said "no spread")
        est, missing = None, withheld
    return MetricResult(
        metric=metric,
        base=bside,
        new=nside,
        estimate=est,
        direction=(
            stats.classify(est, threshold)
            if est is not None and not within_run
            else None
        ),
        permutation_p=perm,
        mde=mde,
        runs_needed=runs,
        missing=missing,
    )


def _failures(base: Sequence[RunSummary], new: Sequence[RunSummary]) -> FailureResult:
    def rates(runs: Sequence[RunSummary]) -> tuple[float, ...]:
        return tuple(r.failed / r.transactions if r.transactions else 0.0 for r in runs)

    br, nr = rates(base), rates(new)
    bf, nf = sum(r.failed for r in base), sum(r.failed for r in new)
    p = None
    if (bf or nf) and len(br) >= 2 and len(nr) >= 2 and np.ptp(br + nr) > 0:
        p = _welch_p(br, nr)
    return FailureResult(br, nr, bf, nf, p)


def _welch_p(x: Sequence[float], y: Sequence[float]) -> float:
    """Welch's two-sided p for the means of ``x`` and ``y`` (as
    ``scipy.stats.ttest_ind(equal_var=False)``), with a side of equal
    values taken as no spread: scipy warned of catastrophic cancellation
    on the user's terminal for a side whose every transaction failed
    (rates 1.0, 1.0, 1.0). No spread on either side: the exact
    permutation p of the split seen, 2 / comb(n, len(x))."""

    def var_of_mean(v: Sequence[float]) -> float:
        return 0.0 if np.ptp(v) == 0 else float(np.var(v, ddof=1)) / len(v)

    vx, vy = var_of_mean(x), var_of_mean(y)
    diff = float(np.mean(y) - np.mean(x))
    if vx + vy == 0:
        return min(1.0, 2 / math.comb(len(x) + len(y), len(x))) if diff else 1.0
    df = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    return float(2 * sps.t.sf(abs(diff) / math.sqrt(vx + vy), df))


def compare(
    base: Sequence[RunSummary],
    new: Sequence[RunSummary],
    *,
    confidence: float = 0.95,
    threshold: float = 0.02,
    primary: str = "tps",
    force: bool = False,
    across_expected: bool = False,
) -> Comparison:
    """Compare NEW against BASE (``threshold`` as a fraction)."""
    if not base:
        raise PgsurgeError("no BASE results to compare")
    if not new:
        raise PgsurgeError("no NEW results to compare (give them after --vs)")
    if primary not in METRIC_KEYS:
        raise PgsurgeError(f'unknown metric "{primary}"')
    found = check_workloads(base, new, force=force, across_expected=across_expected)
    partial = check_whole_runs([*base, *new], force=force)
    single = len(base) == 1 and len(new) == 1
    plan = _batch_plan([base[0], new[0]]) if single else None
    results = tuple(
        _metric(
            m,
            base,
            new,
            confidence=confidence,
            threshold=threshold,
            primary=m.key == primary,
            plan=plan,
        )
        for m in METRICS
    )
    notes = [f"{p}; its figures are partial (--force)" for p in partial]
    # what a sweep marks (* and ~), said here too: a run whose client was
    # the bottleneck measured the client, one that trended was not steady
    # (hostile finding: compare and ab said nothing of either)
    for flag, what in (
        ("client_limited", "a busy client: the client may be the bottleneck"),
        ("unsteady", "a tps that trended over the run: not steady"),
    ):
        names = [r.name for r in (*base, *new) if getattr(r, flag)]
        if names:
            runs = f"{len(names)} run{'s' if len(names) != 1 else ''}"
            notes.append(f"{runs} had {what} ({', '.join(names)})")
    reason = None
    if found:
        # without force, only the arms of an A/B experiment get here
        reason = "--force" if force else "the arms' arguments"
    return Comparison(
        base=tuple(base),
        new=tuple(new),
        confidence=confidence,
        threshold=threshold,
        primary=primary,
        single_run=single,
        batches=plan,
        differences=tuple(found),
        differences_reason=reason,
        metrics=results,
        failures=_failures(base, new),
        notes=tuple(notes),
    )
