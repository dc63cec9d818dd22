"""The verdict card of an HTML comparison: side B's tps against side A's.

A pure function of the per-run tps of each side. The run is the unit
(design notes, section 1): Welch's t on ``log(tps)`` per run gives the
ratio of geometric means B/A with a confidence interval,
``exp(Δ ± t·se)``; the verdict compares that interval with a band of
±``threshold`` around no change:

* wholly above +T: **faster**; wholly below -T: **slower**;
* wholly inside ±T: **no difference (within ±T)**;
* otherwise **inconclusive**, "significant" when it excludes 0.

With fewer than two runs on a side there is no run-to-run variance, so no
interval and no verdict: only the ratio, said plainly; the same when a
side's runs all have the same tps (copies of one run: no measured
spread). The statistics are ``pgsurge.stats.compare``'s, the same as
``pgsurge compare`` (which adds the noise, drift and outliers, and the
other metrics); this card is the summary for people looking at the charts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as sps

from pgsurge.stats import compare as stats

__all__ = ["DEFAULT_THRESHOLD", "Verdict", "compare_tps", "mean_ci"]

#: the ± band of "no practical difference", as a fraction
DEFAULT_THRESHOLD = 0.02


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the card shows; ratios are B/A (1.0 = no change)."""

    n_a: int
    n_b: int
    median_a: float
    median_b: float
    #: ratio of the geometric means of the runs' tps
    ratio: float
    #: the confidence interval of ``ratio``, when it could be computed
    ci: tuple[float, float] | None
    confidence: float
    threshold: float
    #: faster, slower, no difference, inconclusive, or no verdict
    verdict: str
    #: a sentence that qualifies the verdict (significance, why none)
    note: str
    #: coefficient of variation of tps per side (None with one run)
    cv_a: float | None
    cv_b: float | None


def _cv(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def compare_tps(
    tps_a: Sequence[float],
    tps_b: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = 0.95,
) -> Verdict:
    """The verdict on B's tps against A's; every tps must be > 0."""
    if not tps_a or not tps_b:
        raise ValueError("each side needs at least one run")
    if min(*tps_a, *tps_b) <= 0:
        raise ValueError("tps must be positive to compare")
    delta = statistics.fmean(math.log(v) for v in tps_b) - statistics.fmean(
        math.log(v) for v in tps_a
    )
    ci, verdict, note = _interval(tps_a, tps_b, threshold, confidence)
    return Verdict(
        n_a=len(tps_a),
        n_b=len(tps_b),
        median_a=statistics.median(tps_a),
        median_b=statistics.median(tps_b),
        ratio=math.exp(delta),
        ci=ci,
        confidence=confidence,
        threshold=threshold,
        verdict=verdict,
        note=note,
        cv_a=_cv(tps_a),
        cv_b=_cv(tps_b),
    )


def mean_ci(
    values: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """(low, geometric mean, high) of one side's values, the interval of the
    mean of their logarithms (Student's t); None below two values."""
    if len(values) < 2 or min(values) <= 0:
        return None
    logs = [math.log(v) for v in values]
    m = statistics.fmean(logs)
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    t = float(sps.t.ppf(0.5 + confidence / 2, len(logs) - 1))
    return math.exp(m - t * se), math.exp(m), math.exp(m + t * se)


def _interval(
    tps_a: Sequence[float],
    tps_b: Sequence[float],
    threshold: float,
    confidence: float,
) -> tuple[tuple[float, float] | None, str, str]:
    """(interval of the ratio, verdict, note)."""
    flat = [name for name, side in (("A", tps_a), ("B", tps_b)) if len(set(side)) == 1]
    if len(tps_a) >= 2 and len(tps_b) >= 2 and flat:
        # identical values are no measured spread (a run given twice, or
        # copies): a zero-width interval would claim certainty
        return (
            None,
            "no verdict",
            f"side {flat[0]}'s runs all have the same tps: its spread is not "
            "measured; give distinct runs",
        )
    est = (
        stats.log_ratio_ci(tps_a, tps_b, confidence)
        if len(tps_a) >= 2 and len(tps_b) >= 2
        else None
    )
    if est is None:
        return (
            None,
            "no verdict",
            "single run on a side: run-to-run variance not measured; repeat "
            "the runs (2 or more per side, 5 or more to detect a few %)",
        )
    ci = (est.low, est.high)
    match stats.classify(est, threshold):
        case stats.Direction.UP:
            return ci, "faster", "the whole interval is above the band"
        case stats.Direction.DOWN:
            return ci, "slower", "the whole interval is below the band"
        case stats.Direction.SAME:
            return (
                ci,
                f"no difference (within ±{100 * threshold:g}%)",
                "the whole interval is inside the band",
            )
    return (
        ci,
        "inconclusive",
        "significant, but the interval crosses the band"
        if est.significant
        else "the interval crosses the band; more runs would narrow it",
    )
