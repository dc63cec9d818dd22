"""Was the run in a steady state? A pure function of a finished ``RunResult``.

A benchmark's figures are a rate: they mean something when the rate held
still over the measured window. A run whose throughput keeps falling (a
table growing under a scan, caches filling, a checkpoint at the end) or
rising (a cold cache warming) reports the average of a moving target.
``steady_check`` tests the per-interval tps for a monotonic trend and
calls the run **not steady** when both hold:

* the trend is significant: Mann-Kendall's S (the count of rising pairs
  of intervals less the falling ones), its normal approximation beyond
  the two-sided 99 % point (|z| > 2.576) — a rank test, so that a curve
  that falls fast then slowly (a growing table) counts as a trend;
* it matters: the Theil–Sen slope (the median of the pairwise slopes)
  times the window is more than ``MIN_CHANGE`` (10 %) of the mean tps.

The series leaves out the first interval (it holds the start-up; after
a --warmup the series starts with the measured window, the warm-up's
intervals are not in it and the first one is kept), any interval before
the window, and a last one shorter than the others; fewer than
``MIN_INTERVALS`` (5) left give no verdict (None). The arithmetic is
written out here: a plain run does not load scipy.
"""

from __future__ import annotations

import math
from typing import Any

from pgsurge.stats.results import RunResult

__all__ = ["MIN_CHANGE", "MIN_INTERVALS", "Z99", "steady_check"]

MIN_CHANGE = 0.10
MIN_INTERVALS = 5
#: |z| of Mann-Kendall's S beyond which the trend is significant (99 %)
Z99 = 2.576


def steady_check(result: RunResult) -> dict[str, Any] | None:
    """``{"steady", "intervals", "tps_change", "z"}`` (``tps_change``: the
    fitted change over the window as a fraction of the mean tps), or None
    when the run has too few intervals."""
    window = result.window_us
    ivs = [iv for iv in result.intervals if iv.start_us >= window]
    full = max((iv.duration_us for iv in ivs), default=0)
    if ivs and ivs[-1].duration_us < 0.9 * full:
        ivs.pop()
    if not window:
        ivs = ivs[1:]
    if len(ivs) < MIN_INTERVALS or full <= 0:
        return None
    xs = [(iv.start_us - ivs[0].start_us) / 1e6 for iv in ivs]
    ys = [iv.stats.cnt * 1e6 / iv.duration_us for iv in ivs]
    n = len(xs)
    mean = sum(ys) / n
    if mean <= 0:
        return None
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    s_stat = sum((ys[j] > ys[i]) - (ys[j] < ys[i]) for i, j in pairs)
    var = n * (n - 1) * (2 * n + 5) / 18.0
    z = (s_stat - math.copysign(1, s_stat)) / math.sqrt(var) if s_stat else 0.0
    slopes = sorted((ys[j] - ys[i]) / (xs[j] - xs[i]) for i, j in pairs)
    mid = len(slopes) // 2
    slope = slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2
    change = slope * (xs[-1] - xs[0]) / mean
    steady = not (abs(z) > Z99 and abs(change) > MIN_CHANGE)
    return {"steady": steady, "intervals": n, "tps_change": change, "z": z}
