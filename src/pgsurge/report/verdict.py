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
interval and no verdict: only the ratio, said plainly. The t quantile comes
from ``scipy.stats`` when it is installed; without it the card shows the
ratio and per-side spread, and says that the interval was not computed
(``pgsurge compare``, issue 12, is the full statistical treatment; this card
is a summary for people looking at the charts).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_THRESHOLD", "Verdict", "compare_tps", "t_quantile"]

#: the ± band of "no practical difference", as a fraction
DEFAULT_THRESHOLD = 0.02


def t_quantile(q: float, df: float) -> float | None:
    """Student's t quantile from scipy, or None when scipy is missing."""
    try:
        from scipy import stats  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return None
    return float(stats.t.ppf(q, df))


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
    la = [math.log(v) for v in tps_a]
    lb = [math.log(v) for v in tps_b]
    delta = statistics.fmean(lb) - statistics.fmean(la)
    ci, verdict, note = _interval(la, lb, delta, threshold, confidence)
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


def _interval(
    la: Sequence[float],
    lb: Sequence[float],
    delta: float,
    threshold: float,
    confidence: float,
) -> tuple[tuple[float, float] | None, str, str]:
    """(interval of the ratio, verdict, note) from the logs of the tps."""
    if len(la) < 2 or len(lb) < 2:
        return (
            None,
            "no verdict",
            "single run on a side: run-to-run variance not measured; repeat "
            "the runs (2 or more per side, 5 or more to detect a few %)",
        )
    va = statistics.variance(la) / len(la)
    vb = statistics.variance(lb) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        df = float(len(la) + len(lb) - 2)
    else:
        # Welch–Satterthwaite
        df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    t = t_quantile(0.5 + confidence / 2, df)
    if t is None:
        return (
            None,
            "no verdict",
            "the confidence interval needs scipy (pip install scipy)",
        )
    lo, hi = math.exp(delta - t * se), math.exp(delta + t * se)
    up, down = 1 + threshold, 1 - threshold
    if lo > up:
        return (lo, hi), "faster", "the whole interval is above the band"
    if hi < down:
        return (lo, hi), "slower", "the whole interval is below the band"
    if lo >= down and hi <= up:
        return (
            (lo, hi),
            f"no difference (within ±{100 * threshold:g}%)",
            "the whole interval is inside the band",
        )
    significant = lo > 1 or hi < 1
    return (
        (lo, hi),
        "inconclusive",
        "significant, but the interval crosses the band"
        if significant
        else "the interval crosses the band; more runs would narrow it",
    )
