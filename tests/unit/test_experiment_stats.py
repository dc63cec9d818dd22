"""The statistics of ``pgsurge compare`` on synthetic runs (no server).

Runs are drawn log-normal around a true value with a known coefficient of
variation, from fixed seeds, so every figure here is deterministic: the
known ratio lies in the CI, A/A experiments rarely say faster/slower, a
real 10 % change is found, and the helpers match scipy's own tests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pgsurge.stats import compare as stats
from pgsurge.stats.compare import Direction, Method


def _runs(rng: np.random.Generator, center: float, cv: float, n: int) -> list[float]:
    # log-normal with the given coefficient of variation
    sigma = math.sqrt(math.log1p(cv * cv))
    return [float(v) for v in center * np.exp(rng.normal(0.0, sigma, n))]


def _verdict(base: list[float], new: list[float], threshold: float = 0.02) -> Direction:
    est = stats.log_ratio_ci(base, new, 0.95)
    assert est is not None
    return stats.classify(est, threshold)


# -- acceptance: known ratios, false alarms, power --------------------------------


@pytest.mark.parametrize("ratio", [0.90, 0.98, 1.00, 1.10])
def test_known_ratio_is_inside_the_ci(ratio: float) -> None:
    # exactly the ratio of geometric means: the same deviations, reordered
    dev = [0.97, 1.02, 1.0, 0.99, 1.03]
    base = [40_000 * d for d in dev]
    new = [40_000 * ratio * d for d in reversed(dev)]
    est = stats.log_ratio_ci(base, new, 0.95)
    assert est is not None and est.method is Method.WELCH
    assert est.ratio == pytest.approx(ratio)
    assert est.low < ratio < est.high


@pytest.mark.parametrize("ratio", [0.90, 0.98, 1.00, 1.10])
def test_known_ratio_coverage_on_random_runs(ratio: float) -> None:
    # 95 % intervals: over 400 random 5+5 experiments at CV 3 % the true
    # ratio is inside about 95 % of the time
    rng = np.random.default_rng(20_240_512)
    inside = 0
    for _ in range(400):
        est = stats.log_ratio_ci(
            _runs(rng, 40_000, 0.03, 5), _runs(rng, 40_000 * ratio, 0.03, 5), 0.95
        )
        assert est is not None
        inside += est.low <= ratio <= est.high
    assert 0.92 <= inside / 400 <= 0.98


def test_aa_experiments_rarely_say_faster_or_slower() -> None:
    rng = np.random.default_rng(12)
    calls = [
        _verdict(_runs(rng, 40_000, 0.03, 5), _runs(rng, 40_000, 0.03, 5))
        for _ in range(1000)
    ]
    wrong = sum(d in (Direction.UP, Direction.DOWN) for d in calls)
    assert wrong / 1000 <= 0.05
    # and a significant-looking CI is not a verdict: most say inconclusive
    assert calls.count(Direction.UNCLEAR) > 900


def _ten_percent(seed: int, ratio: float) -> tuple[float, float]:
    """(share of significant changes the right way, share of verdicts
    beyond the ±2 % band) over 1000 experiments of 5+5 runs at CV 3 %."""
    rng = np.random.default_rng(seed)
    found = beyond = 0
    for _ in range(1000):
        base = _runs(rng, 40_000, 0.03, 5)
        est = stats.log_ratio_ci(base, _runs(rng, 40_000 * ratio, 0.03, 5), 0.95)
        assert est is not None
        found += est.low > 1.0 if ratio > 1 else est.high < 1.0
        beyond += stats.classify(est, 0.02) is (
            Direction.UP if ratio > 1 else Direction.DOWN
        )
    return found / 1000, beyond / 1000


@pytest.mark.parametrize(("seed", "ratio"), [(7, 1.10), (8, 1 / 1.10)])
def test_ten_percent_at_cv_3_is_found(seed: int, ratio: float) -> None:
    # found: the CI excludes "no change" on the right side, so the verdict
    # is "faster"/"slower" or "inconclusive (significant; …)"
    found, beyond = _ten_percent(seed, ratio)
    assert found >= 0.95
    # the verdict proper needs the whole CI beyond the ±2 % band, which 5+5
    # runs at CV 3 % reach some 92 % of the time (CI half-width ≈ 4.7 %)
    assert beyond >= 0.90


def test_no_difference_needs_a_tight_ci() -> None:
    rng = np.random.default_rng(3)
    same = sum(
        _verdict(_runs(rng, 40_000, 0.005, 10), _runs(rng, 40_000, 0.005, 10))
        is Direction.SAME
        for _ in range(200)
    )
    assert same / 200 > 0.9


# -- the estimate ---------------------------------------------------------------


def test_welch_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    base, new = _runs(rng, 100, 0.05, 5), _runs(rng, 103, 0.02, 4)
    est = stats.log_ratio_ci(base, new, 0.90)
    ref = sps.ttest_ind(np.log(new), np.log(base), equal_var=False)
    ci = ref.confidence_interval(0.90)
    assert est is not None
    assert est.low == pytest.approx(math.exp(ci.low))
    assert est.high == pytest.approx(math.exp(ci.high))
    assert est.p_value == pytest.approx(ref.pvalue)
    assert est.df == pytest.approx(ref.df)


def test_one_run_on_a_side_borrows_the_other_sides_variance() -> None:
    est = stats.log_ratio_ci([100.0, 102.0, 98.0], [110.0], 0.95)
    assert est is not None and est.method is Method.POOLED
    assert est.df == 2
    assert est.low < 110 / stats_gmean([100.0, 102.0, 98.0]) < est.high
    assert stats.log_ratio_ci([100.0], [110.0], 0.95) is None


def stats_gmean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def test_degenerate_inputs() -> None:
    assert stats.log_ratio_ci([], [1.0, 2.0], 0.95) is None
    assert stats.log_ratio_ci([0.0, 1.0], [1.0, 2.0], 0.95) is None
    same = stats.log_ratio_ci([5.0, 5.0], [5.0, 5.0], 0.95)
    assert same is not None
    assert (same.ratio, same.low, same.high, same.p_value) == (1.0, 1.0, 1.0, 1.0)
    assert stats.classify(same, 0.02) is Direction.SAME
    point = stats.log_ratio_ci([5.0, 5.0], [6.0, 6.0], 0.95)
    assert point is not None and point.low == point.high == pytest.approx(1.2)
    assert stats.classify(point, 0.02) is Direction.UP


def test_recentred_keeps_the_relative_width() -> None:
    est = stats.log_ratio_ci([100.0, 104.0, 98.0], [101.0, 99.0, 103.0], 0.95)
    assert est is not None
    moved = est.recentred(1.5, Method.BATCH_MEANS)
    assert moved.method is Method.BATCH_MEANS
    assert moved.high / moved.low == pytest.approx(est.high / est.low)
    assert moved.ratio == 1.5


@pytest.mark.parametrize(
    ("low", "high", "expected", "significant"),
    [
        (1.03, 1.08, Direction.UP, True),
        (0.90, 0.97, Direction.DOWN, True),
        (0.99, 1.015, Direction.SAME, False),
        (1.005, 1.015, Direction.SAME, True),
        (1.01, 1.04, Direction.UNCLEAR, True),
        (0.95, 1.04, Direction.UNCLEAR, False),
    ],
)
def test_classify(
    low: float, high: float, expected: Direction, significant: bool
) -> None:
    est = stats.Estimate(
        ratio=(low + high) / 2,
        low=low,
        high=high,
        confidence=0.95,
        p_value=0.5,
        df=8,
        method=Method.WELCH,
    )
    assert stats.classify(est, 0.02) is expected
    assert est.significant is significant


# -- permutation ----------------------------------------------------------------


def test_exact_permutation_p_values() -> None:
    # the smallest two-sided p of a split: 2 / C(n+m, n)
    assert stats.permutation_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert stats.permutation_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert stats.permutation_p(range(1, 6), range(6, 11)) == pytest.approx(2 / 252)
    assert stats.permutation_p([3.0, 3.0], [3.0, 3.0]) == 1.0
    p = stats.permutation_p([1, 3, 5, 7], [2, 4, 6, 8])
    assert p is not None and p > 0.5
    assert stats.permutation_p([1.0], [2.0, 3.0]) is None
    assert stats.permutation_p(range(1, 12), range(2, 13)) is None


# -- noise ----------------------------------------------------------------------


def test_min_detectable_effect_matches_the_design_notes() -> None:
    # run CV 1.5 %: 4.6 % at 3+3 runs, 3.0 % at 5+5, 2.0 % at 10+10
    for n, mde in ((3, 0.046), (5, 0.030), (10, 0.020)):
        assert stats.min_detectable_effect(0.015, n, n, 0.95) == pytest.approx(
            mde, abs=0.001
        )


def test_runs_needed() -> None:
    assert stats.runs_needed(0.015, 0.02, 0.95) in (10, 11)
    n = stats.runs_needed(0.03, 0.02, 0.95)
    assert n is not None
    assert stats.min_detectable_effect(0.03, n, n, 0.95) <= 0.02
    assert stats.min_detectable_effect(0.03, n - 1, n - 1, 0.95) > 0.02
    assert stats.runs_needed(0.0, 0.02, 0.95) == 2
    assert stats.runs_needed(2.0, 0.001, 0.95) is None


def test_cv_and_pooled_sd() -> None:
    assert stats.cv([1.0]) is None
    assert stats.cv([9.0, 11.0]) == pytest.approx(math.sqrt(2) / 10)
    assert stats.pooled_log_sd([5.0]) is None
    sd, df = stats.pooled_log_sd([1.0, math.e], [5.0], [2.0, 2.0]) or (0, 0)
    assert df == 2
    assert sd == pytest.approx(math.sqrt(0.5 / 2))


def test_drift() -> None:
    assert stats.drift_rho([1.0, 2.0, 3.0]) is None  # too few runs
    assert stats.drift_rho([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(1.0)
    assert stats.drift_rho([5.0, 4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert stats.drift_rho([2.0, 2.0, 2.0, 2.0]) is None
    rho = stats.drift_rho([3.0, 1.0, 4.0, 1.5, 5.0, 2.0])
    assert rho is not None and abs(rho) < stats.DRIFT_RHO


def test_modified_z() -> None:
    z = stats.modified_z([100.0, 101.0, 99.0, 100.5, 130.0])
    assert [abs(v) > stats.OUTLIER_Z for v in z] == [False] * 4 + [True]
    assert stats.modified_z([1.0, 2.0, 50.0]) == [0.0] * 3  # too few to tell
    assert stats.modified_z([5.0] * 6) == [0.0] * 6
    # zero MAD: the mean absolute deviation takes over
    z = stats.modified_z([5.0, 5.0, 5.0, 5.0, 9.0])
    assert z[-1] > stats.OUTLIER_Z and z[0] == 0.0


def test_batch_values() -> None:
    num = [10.0, 20.0, 30.0, 40.0, 50.0]
    den = [1.0, 1.0, 1.0, 1.0, 1.0]
    assert stats.batch_values(num, den, 2) == [15.0, 35.0]  # the last is dropped
    assert stats.batch_values(num, den, 1) == num
    assert stats.batch_values([1.0, 2.0], [0.0, 0.0], 1) == []
