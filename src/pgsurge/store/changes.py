"""Change points in a history of one metric: where its level moved, by how much.

``find_changes(values)`` returns the points where the series' mean shifts,
each with its size (the relative change of the mean from the segment before
to the segment after) and a confidence interval for that size.

The search is ``ruptures``' PELT (exact, penalised least squares over
every segmentation) on the series scaled by a robust estimate of its noise:
the median absolute deviation of successive differences, which a step in
the mean barely moves (each step spoils one difference of n - 1). The
penalty per change point is :data:`PENALTY` x log(n) in those units, a
BIC-like price that keeps noise from buying segments. Each point PELT
proposes is then tested: Welch's t-test (as ``scipy.stats.ttest_ind``'s,
unequal variances) between the runs of its segment before and after it
must give p < :data:`ALPHA` / (the number of positions a change could
take, n - 5): Bonferroni's price for a position chosen by the data,
0.01 in 10 runs, 0.002 in 30; the others are dropped. Welch's, not
Student's pooled t: a segment PELT cuts around a noisy stretch (one bad
run among three, a machine that got noisier without getting slower)
has more spread than the long quiet one before it, and pooling lent it
the quiet side's small variance; on simulated 100-run histories with
heavy-tailed noise (Student's t, 3 df) Student's pooled test called a
change in 28 of 100, and in half of the 30-run histories whose noise
alone grew eightfold for the last 5 to 10 runs (hostile finding); Welch's,
1 to 3 in 100. Welch's degrees of freedom are fewer: at a fixed
p < 0.001 it missed an eightfold drop of a real 10-run history (5 + 5
runs, one side four times as spread: p = 0.004), hence the level by the
number of positions. A step in the last three or four runs, whose
spread is then estimated from those few, is found less often until more
runs come.
Then a permutation test (:func:`_permutation_p`), first over the
whole series and then over the runs around each point: the Welch test
assumes normal noise, and benchmark runs are often bimodal (fast or slow
at random); PELT, which sizes its penalty from the noise's spread,
cuts such a series into many segments whose boundaries the data chose,
and Welch's p then passed a third of such histories (hostile finding).
The random orders of the same runs hold the level whatever the noise's
shape.
Both run on the logarithms of the values when none is negative (as tps
and latencies; a zero counts as half the smallest value measured):
benchmark noise is multiplicative (a noisy neighbour takes a share of
the machine, not a fixed number of transactions), so a
run at half speed is as far from its level on a fast machine as on a slow
one, and sizes are ratios (of geometric means) in any case.
Two filters, because each alone lets through about one noise history in
ten or twenty (measured on simulated histories of 30 runs with 2 % noise:
tests/unit/test_store.py holds the null rate under 5 % and finds
a 5 % step at its run ± 1).

Why ruptures: it installs from a wheel with only numpy and scipy (scipy is
already ours), is maintained and documented, and gives the exact optimal
segmentation. Apache Otava (Hunter's E-divisive with a t-test) pins numpy
to one minor version and pulls BigQuery, Slack and Graphite clients;
MongoDB's signal-processing-algorithms is an sdist for Python 3.11 only
with numpy < 2. Otava's idea (segment, then test each split) is kept here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ALPHA", "MIN_RUNS", "PENALTY", "Change", "find_changes"]

#: the penalty per change point, in units of the noise variance x log(n)
PENALTY = 3.0
#: the significance level of the whole search: a proposed change point's
#: Welch p must be below ALPHA / (the positions a change could take)
ALPHA = 0.05
#: the fewest runs on each side of a change point
MIN_SEGMENT = 3
#: no search in a shorter history (nothing could be tested)
MIN_RUNS = 2 * MIN_SEGMENT
#: the confidence level of each change's interval
CONFIDENCE = 0.95
#: random orders of a segment's runs in the permutation test
PERMUTATIONS = 999


@dataclass(frozen=True, slots=True)
class Change:
    """A shift of the level between ``values[:index]``'s last segment and
    ``values[index:]``'s first (levels: geometric means of positive
    series, else arithmetic)."""

    #: the position of the first value of the new level (0-based)
    index: int
    #: the segments compared: values[start:index] and values[index:end]
    start: int
    end: int
    mean_before: float
    mean_after: float
    #: (mean_after - mean_before) / mean_before, and its confidence interval
    change: float
    low: float
    high: float
    p_value: float


def _noise(values: Sequence[float]) -> float:
    """The noise's standard deviation, from successive differences (MAD)."""
    import numpy as np

    d = np.diff(np.asarray(values, dtype=float))
    mad = float(np.median(np.abs(d - np.median(d))))
    sigma = mad / 0.6745 / math.sqrt(2)
    if sigma > 0:
        return sigma
    spread = float(np.std(values))
    return spread if spread > 0 else 1.0


def _segments(values: Sequence[float]) -> list[int]:
    """PELT's change positions (each the index of a new segment's start)."""
    import numpy as np
    import ruptures

    y = np.asarray(values, dtype=float)
    z = (y - y.mean()) / _noise(values)
    algo = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(z.reshape(-1, 1))
    ends: list[int] = algo.predict(pen=PENALTY * math.log(len(values)))
    return [int(e) for e in ends[:-1]]


def _var_of_mean(values: Sequence[float]) -> float:
    """The variance of the mean of ``values``: 0 for equal values (not the
    ~1e-31 floating point leaves, which gave p = 1e-233 for a 1 % step
    between two constant stretches)."""
    if min(values) == max(values):
        return 0.0
    m = sum(values) / len(values)
    return sum((x - m) ** 2 for x in values) / (len(values) - 1) / len(values)


def _welch(
    before: Sequence[float], after: Sequence[float]
) -> tuple[float, float, float]:
    """Welch's two-sample t-test of after vs before: (p, difference of
    means, half-width of its CONFIDENCE interval). The same figures as
    ``scipy.stats.ttest_ind(after, before, equal_var=False)`` (checked by
    the tests), written out for a side of equal values, where scipy warns
    of catastrophic cancellation."""
    from scipy import stats

    na, nb = len(before), len(after)
    diff = sum(after) / nb - sum(before) / na
    va, vb = _var_of_mean(before), _var_of_mean(after)
    se2 = va + vb
    if se2 == 0:
        # no spread on either side: t is undefined, and the data cannot
        # give p = 0. The exact permutation test can: the split seen is the
        # most extreme of the comb(n, na) splits (two-sided: it and its
        # mirror)
        p = min(1.0, 2 / math.comb(na + nb, na)) if diff else 1.0
        return p, diff, 0.0
    # Welch-Satterthwaite degrees of freedom
    df = se2**2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    se = math.sqrt(se2)
    p = float(2 * stats.t.sf(abs(diff) / se, df))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * se
    return p, diff, half


def _split_gap(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The scan statistic of every split of each row of ``x`` with at
    least MIN_SEGMENT runs a side: |mean after - mean before| x
    sqrt(n_before x n_after / n), shape (rows, columns - 2 * MIN_SEGMENT +
    1), column i the split before run MIN_SEGMENT + i. The difference of
    the means in units of its own standard error when the runs share one
    spread (which a random order gives them, so the spread itself, the same
    for every order, is left out). Not Welch's t: a side of three runs has
    two degrees of freedom, so the largest t over the splits is nearly
    always at an end, and a real 3 % step in the middle of 30 runs with
    2.5 % noise lost to the splits that random orders make there."""
    import numpy as np

    m = x.shape[1]
    s1 = np.cumsum(x - x.mean(axis=1, keepdims=True), axis=1)
    na = np.arange(MIN_SEGMENT, m - MIN_SEGMENT + 1, dtype=float)
    nb = m - na
    left = s1[:, MIN_SEGMENT - 1 : m - MIN_SEGMENT]
    # the centred sums: the after side's is -left
    gap: np.ndarray[Any, Any] = np.abs(left / na + left / nb) * np.sqrt(na * nb / m)
    return gap


def _permutation_p(segment: Sequence[float], cut: int | None) -> float:
    """The permutation p of a change at ``cut`` (an index into
    ``segment``; None: at the segment's farthest split): how often the
    runs of the segment in a random order give some split at least as far
    apart (the largest :func:`_split_gap` over every split a change could
    take) as the data's at ``cut``. The runs of a
    segment without a change could come in any order, whatever the shape
    of their noise; the search's choice of the split is in the statistic
    (its maximum over the splits). Welch's p alone assumes normal noise:
    runs that come out fast or slow at random (two modes 20 % apart, as
    CPU frequency or a placement makes them) gave a change point in 26 to
    47 of 100 histories without one (hostile finding); this keeps such a
    history at the test's level. The random orders are the same for the
    same data: a history gives the same answer every time."""
    import numpy as np

    x = np.asarray(segment, dtype=float)
    gaps = _split_gap(x[None, :])[0]
    observed = float(gaps.max() if cut is None else gaps[cut - MIN_SEGMENT])
    rng = np.random.default_rng(len(x))
    orders = rng.permuted(np.broadcast_to(x, (PERMUTATIONS, len(x))), axis=1)
    top = _split_gap(orders).max(axis=1)
    # a tie counts against the change (>=, with a relative margin for the
    # rounding of two equal splits computed in another order)
    hits = int(np.count_nonzero(top >= observed * (1 - 1e-9)))
    return (1 + hits) / (PERMUTATIONS + 1)


def find_changes(values: Sequence[float]) -> list[Change]:
    """The significant change points of ``values`` (in order; see the
    module doc). Fewer than :data:`MIN_RUNS` values: none."""
    n = len(values)
    if n < MIN_RUNS:
        return []
    ratios = all(v >= 0 for v in values) and any(v > 0 for v in values)
    if ratios:
        # a zero is a value below the measurement's resolution (a latency
        # under 1 µs): it counts as half the smallest value measured
        floor = min(v for v in values if v > 0) / 2
        series = [math.log(max(v, floor)) for v in values]
    else:
        series = list(values)
    # the whole history first: if the runs in a random order often split as
    # far apart as they do, there is no change to locate (PELT and the
    # segment tests below pick their segments from the data, so they alone
    # do not hold their level for noise that is not normal)
    if _permutation_p(series, None) >= ALPHA:
        return []
    cuts = _segments(series)
    # Bonferroni over the positions PELT could have chosen
    alpha = ALPHA / (n - 2 * MIN_SEGMENT + 1)
    edges = [0, *cuts, n]
    found = []
    for i, cut in enumerate(cuts):
        start, end = edges[i], edges[i + 2]
        before = series[start:cut]
        p, diff, half = _welch(before, series[cut:end])
        if p >= alpha or _permutation_p(series[start:end], cut - start) >= ALPHA:
            continue
        level = sum(before) / len(before)
        if ratios:
            mean_before = math.exp(level)
            sizes = [math.expm1(d) for d in (diff, diff - half, diff + half)]
        else:
            mean_before = level
            base = level if level else 1.0
            sizes = [d / base for d in (diff, diff - half, diff + half)]
        found.append(
            Change(
                index=cut,
                start=start,
                end=end,
                mean_before=mean_before,
                mean_after=mean_before * (1 + sizes[0]),
                change=sizes[0],
                low=sizes[1],
                high=sizes[2],
                p_value=p,
            )
        )
    return found
