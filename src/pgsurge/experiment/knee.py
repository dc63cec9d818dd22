"""The knee of a client sweep, and the interval of one arm's runs.

Pure functions of per-run values, built on ``stats.compare``'s
statistics (Welch's t on log values), so that a sweep's figures read like
``compare``'s:

* ``arm_interval``: the confidence interval of the typical run of one
  arm in one cell — the geometric mean of its runs' values, ``exp(mean ±
  t·sd/√n)`` on their logarithms (the one-sample form of ``compare``'s
  ratio interval); none from a single run;
* ``find_knee``: where adding clients stops adding throughput.

The knee rule. With ``P`` the point of highest median tps (the peak),
the knee is the fewest clients whose median tps is within ``gain``
(default 10 %) of the peak's: from there on, more clients buy less than
``gain`` more throughput. Its interval is a range of client counts: from
the first point whose ratio to the peak (``compare``'s ratio and CI over
the two points' runs) *could* be within the band (CI upper bound ≥ 1 −
gain) to the first point that *surely* is (CI lower bound ≥ 1 − gain),
or the peak itself when none is sure. With one run per point there is no
CI and the range is the knee alone. At every step the growth of p99 is
set against that of tps: beyond the knee, latency grows faster than
throughput, and ``latency_knee`` is the first step where p99 surely grows
by a factor more than ``1 + gain`` times that of tps (the interval of the
ratio of the runs' p99/tps above ``1 + gain``; the medians with one run
at a point).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from pgsurge.stats import compare as stats

__all__ = ["DEFAULT_GAIN", "Knee", "KneePoint", "arm_interval", "find_knee"]

#: the knee's band: within 10 % of the peak is "no more throughput"
DEFAULT_GAIN = 0.10


def arm_interval(
    values: Sequence[float], confidence: float
) -> tuple[float, float] | None:
    """The CI of the geometric mean of ``values`` (None below 2 values or
    for a value ≤ 0)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size < 2 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        return None
    logs = np.log(arr)
    mean = float(logs.mean())
    se = float(logs.std(ddof=1)) / math.sqrt(arr.size)
    t = float(sps.t.ppf(0.5 + confidence / 2.0, arr.size - 1))
    return math.exp(mean - t * se), math.exp(mean + t * se)


@dataclass(frozen=True, slots=True)
class KneePoint:
    """One client count of the sweep, for one arm."""

    clients: float
    tps: tuple[float, ...]
    p99: tuple[float, ...]
    client_limited: bool

    @property
    def median(self) -> float:
        return float(np.median(self.tps)) if self.tps else 0.0

    @property
    def p99_median(self) -> float | None:
        return float(np.median(self.p99)) if self.p99 else None


@dataclass(frozen=True, slots=True)
class Knee:
    """The knee of one arm's client curve."""

    clients: float
    #: the range of client counts that the intervals allow
    low: float
    high: float
    peak_clients: float
    peak_tps: float
    gain: float
    #: the first client count whose step grew p99 more than tps (None: none)
    latency_knee: float | None
    #: the knee or a point after it ran with a busy client
    client_limited: bool
    #: the "knee" is the last client count swept: tps still grew past the
    #: band there, and nothing beyond it was measured, so no knee was shown
    #: (it said "more clients add less than 10 %" of clients never run)
    open_ended: bool = False

    def describe(self) -> str:
        """One line for the table's foot."""
        if self.open_ended:
            text = (
                f"no knee up to {_n(self.clients)} clients: the last point is "
                f"more than {self.gain * 100:g} % above the others "
                f"({_fmt(self.peak_tps)} tps at {_n(self.peak_clients)}); "
                "sweep more clients to find it"
            )
            if self.client_limited:
                text += "; warning: the client was busy at the last point"
            return text
        rng = (
            f"{_n(self.low)}–{_n(self.high)} clients"
            if self.low != self.high
            else _c(self.low)
        )
        text = (
            f"knee at {_c(self.clients)} (range {rng}): more clients "
            f"add less than {self.gain * 100:g} % to the peak "
            f"({_fmt(self.peak_tps)} tps at {_n(self.peak_clients)})"
        )
        if self.latency_knee is not None:
            text += f"; p99 grows faster than tps from {_c(self.latency_knee)}"
        if self.client_limited:
            text += (
                "; warning: the client was busy at or after the knee: it may be "
                "the client's knee, not the server's"
            )
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "clients": None if self.open_ended else self.clients,
            "open_ended": self.open_ended,
            "range": [self.low, self.high],
            "peak_clients": self.peak_clients,
            "peak_tps": self.peak_tps,
            "gain": self.gain,
            "latency_knee": self.latency_knee,
            "client_limited": self.client_limited,
        }


def _c(x: float) -> str:
    """A client count with its noun ("1 client", "4 clients")."""
    return f"{_n(x)} client" + ("" if x == 1 else "s")


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _fmt(v: float) -> str:
    return f"{v:,.0f}".replace(",", " ") if v >= 1000 else f"{v:.1f}"


def _within(
    point: KneePoint, peak: KneePoint, gain: float, confidence: float
) -> tuple[bool, bool]:
    """(could be, surely is) within ``gain`` of the peak."""
    if point is peak:
        return True, True
    est = stats.log_ratio_ci(peak.tps, point.tps, confidence)
    if est is None:
        hit = point.median >= (1.0 - gain) * peak.median
        return hit, hit
    return est.high >= 1.0 - gain, est.low >= 1.0 - gain


def _not_above(
    point: KneePoint, base: KneePoint, gain: float, confidence: float
) -> bool:
    """Whether ``point`` is surely no more than the band above ``base``
    (``base`` within ``gain`` of it)."""
    est = stats.log_ratio_ci(base.tps, point.tps, confidence)
    if est is None:
        return point.median * (1.0 - gain) <= base.median
    return est.high * (1.0 - gain) <= 1.0


def _latency_outgrows(
    a: KneePoint, b: KneePoint, gain: float, confidence: float
) -> bool:
    """Whether p99 grew from ``a`` to ``b`` by more than ``1 + gain`` times
    tps did. With two or more runs at both points, surely: the interval of
    the ratio of the runs' p99/tps (``compare``'s ratio and CI) lies above
    ``1 + gain``. Hostile finding: the medians alone said "p99 grows
    faster than tps from 2 clients" of two runs a point whose p99 spread
    by a factor of two (the guide's own example). One run at a point: the
    medians, as the knee itself."""
    pa, pb = a.p99_median, b.p99_median
    if not (pa and pb and a.median > 0):
        return False

    def per_run(p: KneePoint) -> list[float] | None:
        pairs = list(zip(p.p99, p.tps, strict=False))
        if len(p.p99) != len(p.tps) or len(pairs) < 2:
            return None
        if any(t <= 0 or q <= 0 for q, t in pairs):
            return None
        return [q / t for q, t in pairs]

    qa, qb = per_run(a), per_run(b)
    if qa is not None and qb is not None:
        est = stats.log_ratio_ci(qa, qb, confidence)
        if est is not None:
            return est.low > 1 + gain
    return pb / pa > (1 + gain) * b.median / a.median


def find_knee(
    points: Sequence[KneePoint],
    *,
    confidence: float = 0.95,
    gain: float = DEFAULT_GAIN,
) -> Knee | None:
    """The knee of ``points`` (any order); None below 2 points or without
    throughput."""
    pts = sorted((p for p in points if p.tps), key=lambda p: p.clients)
    if len(pts) < 2:
        return None
    peak = max(pts, key=lambda p: p.median)
    if peak.median <= 0:
        return None
    knee = next(p for p in pts if p.median >= (1.0 - gain) * peak.median)
    could = [p for p in pts if _within(p, peak, gain, confidence)[0]]
    sure = [p for p in pts if _within(p, peak, gain, confidence)[1]]
    low = min(could[0].clients, knee.clients) if could else knee.clients
    high = max(sure[0].clients, knee.clients) if sure else peak.clients
    # nor can the knee be later than the first point that no later one
    # surely outgrows by the band: with the peak at the first point and
    # intervals of 2.7–372 844 tps, the range said "1 clients", as if the
    # later points had been shown not to be higher
    settled = next(
        (
            k
            for i, k in enumerate(pts)
            if all(_not_above(q, k, gain, confidence) for q in pts[i + 1 :])
        ),
        pts[-1],
    )
    high = max(high, settled.clients)
    latency_knee = next(
        (
            b.clients
            for a, b in itertools.pairwise(pts)
            if _latency_outgrows(a, b, gain, confidence)
        ),
        None,
    )
    return Knee(
        clients=knee.clients,
        low=low,
        high=high,
        peak_clients=peak.clients,
        peak_tps=peak.median,
        gain=gain,
        latency_knee=latency_knee,
        client_limited=any(p.client_limited for p in pts if p.clients >= knee.clients),
        open_ended=knee is pts[-1],
    )
