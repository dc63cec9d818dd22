"""The statistics of a comparison: pure functions of per-run values.

The run is the unit. Between-run variance (buffer state, CPU frequency,
where the data landed) is invisible inside one run, and per-second figures
of one run are autocorrelated (checkpoints, autovacuum), so a comparison
tests one value per run: Welch's t on the logarithms of the per-run values
gives the ratio NEW/BASE of their geometric means and its confidence
interval, ``exp(d ± t·se)``. Within-run batch means are only the fallback
for a single run per side, and the caller says so.

The distributions (Student's t, the permutation test, Spearman's ρ) are
``scipy.stats``'; what is written here is the arithmetic around them:

* ``log_ratio_ci``: the ratio and its CI (Welch; with one run on a side,
  the other side's variance stands for both);
* ``permutation_p``: the exact two-sided permutation p-value of the mean
  log difference, for up to ``EXACT_PERMUTATION_MAX`` runs per side;
* ``classify``: the verdict of a CI against a ±threshold band (criterion's
  rule, extended with equivalence): wholly above → ``UP``, wholly below →
  ``DOWN``, wholly inside → ``SAME``, otherwise ``UNCLEAR``;
* the noise: ``cv``, ``pooled_log_sd``, ``min_detectable_effect`` (80 %
  power), ``runs_needed``, ``drift_rho`` (Spearman ρ of value against run
  order) and ``modified_z`` (Iglewicz–Hoaglin outlier scores);
* ``batch_values``: per-batch ratios of sums of a per-interval series.

Effects and thresholds are fractions (0.02 for 2 %) of the ratio: a change
of +T means ratio ≥ 1 + T, −T means ratio ≤ 1 − T.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

__all__ = [
    "DRIFT_MIN_RUNS",
    "DRIFT_RHO",
    "EXACT_PERMUTATION_MAX",
    "MAX_RUNS_NEEDED",
    "OUTLIER_MIN_RUNS",
    "OUTLIER_Z",
    "POWER",
    "Direction",
    "Estimate",
    "batch_values",
    "classify",
    "cv",
    "drift_rho",
    "log_ratio_ci",
    "min_detectable_effect",
    "modified_z",
    "permutation_p",
    "pooled_log_sd",
    "runs_needed",
]

#: power at which the minimum detectable effect is computed
POWER = 0.8
#: |modified z| above which a run is reported as an outlier (Iglewicz and
#: Hoaglin's cut-off)
OUTLIER_Z = 3.5
#: fewer runs give no outlier scores: the MAD of 3 or 4 values is too
#: unstable (with 3, one deviation is always 0)
OUTLIER_MIN_RUNS = 5
#: |Spearman ρ| of value against run order above which a side drifts
DRIFT_RHO = 0.8
#: fewer runs cannot show drift: with 3 runs a random order is monotonic
#: one time in three
DRIFT_MIN_RUNS = 4
#: the exact permutation p-value enumerates C(n+m, n) splits: 184 756 at 10+10
EXACT_PERMUTATION_MAX = 10
#: ``runs_needed`` gives up beyond this many runs per side
MAX_RUNS_NEEDED = 1_000_000


class Method(enum.StrEnum):
    """How an estimate's standard error was obtained."""

    #: Welch's t, at least two values per side
    WELCH = "welch"
    #: one side has a single value: the other side's variance stands for both
    POOLED = "pooled"
    #: single run per side: batch means within each run (run-to-run
    #: variance not measured)
    BATCH_MEANS = "batch-means"


@dataclass(frozen=True, slots=True)
class Estimate:
    """NEW/BASE as a ratio of geometric means, and its confidence interval.

    Invariant: ``low <= ratio <= high``, all > 0; ``p_value`` is Welch's
    two-sided p for "the log means are equal".
    """

    ratio: float
    low: float
    high: float
    confidence: float
    p_value: float
    df: float
    method: Method

    @property
    def significant(self) -> bool:
        """The interval excludes a ratio of 1."""
        return self.low > 1.0 or self.high < 1.0

    def recentred(self, ratio: float, method: Method) -> Estimate:
        """The same relative interval around another point estimate (the
        ratio of whole-run figures, when the interval came from batches)."""
        scale = ratio / self.ratio
        return replace(
            self,
            ratio=ratio,
            low=self.low * scale,
            high=self.high * scale,
            method=method,
        )


class Direction(enum.Enum):
    """Where a confidence interval lies against the ±threshold band."""

    UP = "up"
    DOWN = "down"
    SAME = "same"
    UNCLEAR = "unclear"


def _logs(values: Sequence[float]) -> np.ndarray | None:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        return None
    return np.asarray(np.log(arr))


def log_ratio_ci(
    base: Sequence[float], new: Sequence[float], confidence: float
) -> Estimate | None:
    """The ratio NEW/BASE of geometric means with its CI, or None when it
    cannot be had (a side without values, a value ≤ 0, one value per side).
    """
    x = _logs(base)
    y = _logs(new)
    if x is None or y is None:
        return None
    nx, ny = x.size, y.size
    d = float(y.mean() - x.mean())
    if nx >= 2 and ny >= 2:
        vx = float(x.var(ddof=1)) / nx
        vy = float(y.var(ddof=1)) / ny
        se = math.sqrt(vx + vy)
        # Welch–Satterthwaite degrees of freedom
        denom = vx * vx / (nx - 1) + vy * vy / (ny - 1)
        df = (vx + vy) ** 2 / denom if denom > 0 else float(nx + ny - 2)
        method = Method.WELCH
    elif nx >= 2 or ny >= 2:
        other = x if nx >= 2 else y
        se = math.sqrt(float(other.var(ddof=1)) * (1.0 / nx + 1.0 / ny))
        df = float(other.size - 1)
        method = Method.POOLED
    else:
        return None
    if se == 0.0:
        low = high = d
        p = 1.0 if d == 0.0 else 0.0
    else:
        tcrit = float(sps.t.ppf(0.5 + confidence / 2.0, df))
        low, high = d - tcrit * se, d + tcrit * se
        p = float(2.0 * sps.t.sf(abs(d) / se, df))
    return Estimate(
        ratio=math.exp(d),
        low=math.exp(low),
        high=math.exp(high),
        confidence=confidence,
        p_value=p,
        df=df,
        method=method,
    )


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.asarray(np.mean(y, axis=axis) - np.mean(x, axis=axis))


def permutation_p(base: Sequence[float], new: Sequence[float]) -> float | None:
    """Exact two-sided permutation p-value of the difference of mean log
    values, over every split of the pooled runs; None with fewer than two
    values on a side, more than ``EXACT_PERMUTATION_MAX``, or a value ≤ 0.
    With 3 runs per side it can never be below 0.10."""
    x = _logs(base)
    y = _logs(new)
    if x is None or y is None:
        return None
    if min(x.size, y.size) < 2 or max(x.size, y.size) > EXACT_PERMUTATION_MAX:
        return None
    if np.ptp(np.concatenate([x, y])) == 0.0:
        return 1.0
    res = sps.permutation_test(
        (x, y),
        _mean_diff,
        permutation_type="independent",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    )
    return min(1.0, float(res.pvalue))


def classify(estimate: Estimate, threshold: float) -> Direction:
    """The verdict of ``estimate``'s CI against the band ±``threshold``."""
    if estimate.low > 1.0 + threshold:
        return Direction.UP
    if estimate.high < 1.0 - threshold:
        return Direction.DOWN
    if estimate.low >= 1.0 - threshold and estimate.high <= 1.0 + threshold:
        return Direction.SAME
    return Direction.UNCLEAR


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation (sample stddev / mean), None below 2 values."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 or not np.all(np.isfinite(arr)):
        return None
    mean = float(arr.mean())
    if mean == 0.0:
        return None
    return float(arr.std(ddof=1)) / abs(mean)


def pooled_log_sd(*sides: Sequence[float]) -> tuple[float, int] | None:
    """The pooled standard deviation of log values over the sides that have
    two or more, and its degrees of freedom; None when no side has two."""
    ss = 0.0
    df = 0
    for side in sides:
        logs = _logs(side)
        if logs is None or logs.size < 2:
            continue
        ss += float(((logs - logs.mean()) ** 2).sum())
        df += logs.size - 1
    if df == 0:
        return None
    return math.sqrt(ss / df), df


def min_detectable_effect(
    log_sd: float,
    n_base: int,
    n_new: int,
    confidence: float,
    power: float = POWER,
    df: float | None = None,
) -> float:
    """The smallest true change (a fraction) that ``n_base``+``n_new`` runs
    detect with probability ``power`` at the two-sided level ``1 -
    confidence``, for a run-to-run log standard deviation ``log_sd``:
    ``exp((t₁₋α/₂ + t_power) · sd · √(1/n₁ + 1/n₂)) − 1``."""
    if df is None:
        df = float(max(1, n_base + n_new - 2))
    t_alpha = float(sps.t.ppf(0.5 + confidence / 2.0, df))
    t_power = float(sps.t.ppf(power, df))
    return math.expm1((t_alpha + t_power) * log_sd * math.sqrt(1 / n_base + 1 / n_new))


def runs_needed(
    log_sd: float, threshold: float, confidence: float, power: float = POWER
) -> int | None:
    """The fewest runs per side whose minimum detectable effect is within
    ``threshold``; None beyond ``MAX_RUNS_NEEDED``."""
    if log_sd == 0.0:
        return 2

    def enough(n: int) -> bool:
        return min_detectable_effect(log_sd, n, n, confidence, power) <= threshold

    if not enough(MAX_RUNS_NEEDED):
        return None
    # the effect shrinks as runs grow: bisect for the first n that is
    # enough (invariant: ``high`` is enough, ``low`` is not or is 1)
    low, high = 1, MAX_RUNS_NEEDED
    while high - low > 1:
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid
    return high


def drift_rho(values_in_run_order: Sequence[float]) -> float | None:
    """Spearman's ρ of the values against their run order; None below
    ``DRIFT_MIN_RUNS`` values or when they are all equal."""
    arr = np.asarray(values_in_run_order, dtype=float)
    if arr.size < DRIFT_MIN_RUNS or np.ptp(arr) == 0.0:
        return None
    res = sps.spearmanr(np.arange(arr.size), arr)
    return float(res.statistic)


def modified_z(values: Sequence[float]) -> list[float]:
    """Iglewicz–Hoaglin modified z-scores, ``0.6745 (x − median) / MAD``
    (with a zero MAD, the mean absolute deviation scaled by 1.2533); all 0
    below ``OUTLIER_MIN_RUNS`` values or when the values do not spread."""
    arr = np.asarray(values, dtype=float)
    if arr.size < OUTLIER_MIN_RUNS:
        return [0.0] * int(arr.size)
    med = float(np.median(arr))
    dev = np.abs(arr - med)
    mad = float(np.median(dev))
    if mad > 0.0:
        z = 0.6745 * (arr - med) / mad
    else:
        meanad = float(dev.mean())
        if meanad == 0.0:
            return [0.0] * int(arr.size)
        z = (arr - med) / (1.253314 * meanad)
    return [float(v) for v in z]


def batch_values(
    numerators: Sequence[float], denominators: Sequence[float], size: int
) -> list[float]:
    """Per-batch ratios sum(numerator)/sum(denominator) over consecutive
    batches of ``size`` intervals (a last, shorter batch is dropped, and so
    is a batch with nothing in its denominator)."""
    out: list[float] = []
    n = min(len(numerators), len(denominators))
    for start in range(0, n - size + 1, size):
        den = sum(denominators[start : start + size])
        if den > 0:
            out.append(sum(numerators[start : start + size]) / den)
    return out
