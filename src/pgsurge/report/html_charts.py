"""The data of the HTML report's charts that take more than a lookup.

Pure functions of result documents; ``html.py`` embeds what they return
and ``html_report.js`` only draws it. Computing them here, not in the
page's script, lets the unit tests check the properties a reader relies on:

* a latency-percentile curve comes from one histogram, so it never goes
  down; a side of a comparison gets the curve of its runs' *merged*
  histogram (a median of curves, nine by nine, can go down and has holes
  where one run's curve ends);
* the wait-share chart is a stack: each event's band starts where the one
  below ends, the first at 0, in a colour of its own ("other" grey).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pgsurge.report.html_parts import dig
from pgsurge.stats.histogram import Histogram

__all__ = [
    "MAX_NINES",
    "OTHER_COLOR",
    "WAIT_COLORS",
    "curve_of",
    "latency_histogram",
    "merged_curve",
    "wait_stack",
]

#: the right end of the nines axis (99.9999 %)
MAX_NINES = 6.0
#: the grid step of a curve on the nines axis
_NINES_STEP = 0.05

#: the events drawn one by one; the rest are summed into "other"
_TOP_EVENTS = 8
#: one colour per event, distinct in hue (none grey: grey is "other")
WAIT_COLORS = (
    "#1f6feb",  # blue
    "#d9480f",  # orange
    "#1a7f37",  # green
    "#8250df",  # purple
    "#c62828",  # red
    "#0a9396",  # teal
    "#b8860b",  # ochre
    "#d63384",  # pink
)
OTHER_COLOR = "#a0a4ab"


def latency_histogram(doc: Mapping[str, Any]) -> Histogram | None:
    """The run's latency histogram, None when absent, unreadable or empty."""
    hists = doc.get("histograms")
    if not isinstance(hists, Mapping) or not isinstance(hists.get("latency"), Mapping):
        return None
    try:
        hist = Histogram.from_dict(dict(hists["latency"]))
    except (ValueError, KeyError, TypeError):
        return None
    return hist if hist.count else None


def curve_of(hist: Histogram) -> dict[str, list[float]]:
    """Latency percentiles (ms) of ``hist`` on a grid of the nines axis:
    ``{"x": [nines...], "ms": [...]}``, up to the rank of the single
    slowest transaction (at most 99.9999%), then the maximum."""
    top = min(MAX_NINES, math.log10(hist.count))
    xs = [round(i * _NINES_STEP, 6) for i in range(int(top / _NINES_STEP) + 1)]
    xs = [x for x in xs if x < top - 1e-9]
    ps = [100 * (1 - 10**-x) for x in xs]
    # the last point: the maximum, at the rank of the slowest transaction
    xs.append(round(top, 6))
    ps.append(100.0)
    values = hist.percentiles(ps)
    return {"x": xs, "ms": [v / 1000.0 for v in values]}


def merged_curve(docs: Sequence[Mapping[str, Any]]) -> dict[str, list[float]] | None:
    """The curve of the runs' latency histograms merged: every transaction
    of the side counts once, so the curve is monotone and reaches as far
    as the side's count allows. None when no run has a histogram (or they
    are of different precisions, which cannot be merged)."""
    merged: Histogram | None = None
    for doc in docs:
        hist = latency_histogram(doc)
        if hist is None:
            continue
        if merged is None:
            merged = hist
            continue
        try:
            merged.merge(hist)
        except ValueError:
            return None
    return None if merged is None else curve_of(merged)


def _share(v: Any) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok and v > 0 else 0.0


def wait_stack(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The per-interval wait shares of one run as a stack, or None.

    ``{"x": [interval start (s)...], "names": [...], "colors": [...],
    "lo": [[...] per band], "hi": [[...] per band], "ymax": float}``: band
    ``i`` spans ``lo[i]``..``hi[i]``, ``lo[0]`` is all zeros and ``lo[i+1]
    == hi[i]``; the bands are the top events of the run, largest first,
    then "other". An interval without waits is ``None`` in every band.
    Intervals shorter than half a step (the run's last few ms) are left
    out, as in the other interval charts.
    """
    step = dig(doc, "config", "progress_s")
    step = step if isinstance(step, int | float) and step > 0 else 1
    rows: dict[float, Mapping[str, Any] | None] = {}
    for iv in doc.get("intervals") or []:
        if not isinstance(iv, Mapping):
            continue
        duration = iv.get("duration_s")
        offset = iv.get("offset_s")
        if not isinstance(duration, int | float) or duration < step / 2:
            continue
        if not isinstance(offset, int | float):
            continue
        waits = iv.get("waits")
        key = round(offset / step) * step
        rows[key] = waits if isinstance(waits, Mapping) else None
    if not any(rows.values()):
        return None
    xs = sorted(rows)
    totals: dict[str, float] = {}
    for waits in rows.values():
        for name, v in (waits or {}).items():
            totals[name] = totals.get(name, 0.0) + _share(v)
    names = sorted(totals, key=lambda n: (-totals[n], n))
    shown, rest = names[:_TOP_EVENTS], names[_TOP_EVENTS:]
    if len(rest) == 1:  # an "other" of one event says less than its name
        shown, rest = names, []
    colors = [WAIT_COLORS[i % len(WAIT_COLORS)] for i in range(len(shown))]
    bands = [[_band(rows[x], (n,)) for x in xs] for n in shown]
    if rest:
        shown.append("other")
        colors.append(OTHER_COLOR)
        bands.append([_band(rows[x], rest) for x in xs])
    lo: list[list[float | None]] = []
    hi: list[list[float | None]] = []
    below: list[float | None] = [0.0 if rows[x] else None for x in xs]
    for band in bands:
        top = [
            None if b is None or v is None else b + v
            for b, v in zip(below, band, strict=True)
        ]
        lo.append(below)
        hi.append(top)
        below = top
    peak = max((v for v in below if v is not None), default=0.0)
    # shares of samples add up to at most 1: the axis ends there unless a
    # document says otherwise
    ymax = 1.0 if peak <= 1.0 else math.ceil(peak * 10) / 10
    return {
        "x": xs,
        "names": shown,
        "colors": colors,
        "lo": lo,
        "hi": hi,
        "ymax": ymax,
    }


def _band(waits: Mapping[str, Any] | None, names: Sequence[str]) -> float | None:
    if not waits:
        return None
    return sum(_share(waits.get(n)) for n in names)
