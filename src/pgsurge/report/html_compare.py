"""The comparison pieces of the HTML report: verdict card, dot plot.

The dot plot is server-side SVG (no script needed): each run's tps as a
dot per side, and the 95% interval of each side's geometric mean as a bar.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pgsurge.report.html_parts import dig, esc, fmt, kv_table, pct, table
from pgsurge.report.verdict import Verdict, mean_ci

__all__ = ["dot_plot_svg", "verdict_card", "waits_side_by_side", "workload_differences"]


def verdict_card(v: Verdict) -> str:
    """The verdict of ``verdict.compare_tps`` as a card."""
    ci = (
        f"{100 * (v.ci[0] - 1):+.1f}% … {100 * (v.ci[1] - 1):+.1f}%"
        if v.ci
        else "not computed"
    )
    cls = {"faster": "good", "slower": "bad"}.get(v.verdict, "neutral")
    pairs = [
        ("runs", f"{v.n_a} (A) vs {v.n_b} (B)"),
        ("median tps", f"{fmt(v.median_a, 1)} → {fmt(v.median_b, 1)}"),
        ("change (ratio of geometric means)", f"{100 * (v.ratio - 1):+.2f}%"),
        (f"{100 * v.confidence:g}% confidence interval", ci),
        ("band of no practical difference", f"±{100 * v.threshold:g}%"),
        ("run-to-run CV", f"A {pct(v.cv_a)}, B {pct(v.cv_b)}"),
    ]
    return (
        f'<div class="card {cls}"><p class="verdict">tps: '
        f"<strong>{esc(v.verdict)}</strong></p>"
        f'<p class="note">{esc(v.note)}</p>{kv_table(pairs)}</div>'
    )


_WORKLOAD_KEYS = (
    ("config", "scripts"),
    ("config", "clients"),
    ("config", "jobs"),
    ("config", "duration_s"),
    ("config", "transactions"),
    ("config", "query_mode"),
    ("config", "rate"),
    ("run", "scale"),
    ("server", "version"),
)


def workload_differences(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The workload settings in which the documents differ."""
    out = []
    for keys in _WORKLOAD_KEYS:
        values = {json.dumps(dig(d, *keys), sort_keys=True) for d in docs}
        if len(values) > 1:
            out.append(".".join(keys))
    return out


def dot_plot_svg(a: Sequence[float], b: Sequence[float]) -> str:
    """Per-run tps of each side as dots, with the 95% interval of each
    side's geometric mean as a bar (when scipy and 2+ runs allow it)."""
    values = [*a, *b]
    lo, hi = min(values), max(values)
    bars = [mean_ci(side) for side in (a, b)]
    # the scale follows the dots (a wider interval, of few runs, is
    # clipped), on round ticks; when it does not start at 0, it says so
    pad = (hi - lo) * 0.5 or hi * 0.05 or 1.0
    if lo - pad < hi - lo + 2 * pad:  # 0 costs less than the dots' span
        lo = pad
    step = _round_step((hi + pad) - max(0.0, lo - pad))
    lo = max(0.0, math.floor((lo - pad) / step) * step)
    hi = math.ceil((hi + pad) / step) * step
    ticks = [lo + k * step for k in range(round((hi - lo) / step) + 1)]
    width, height, left, top, bottom = 420, 260, 70, 20, 35

    def y(v: float) -> float:
        v = min(max(v, lo), hi)
        return top + (height - top - bottom) * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg class="dotplot" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="tps per run, by side">'
    ]
    digits = _decimals(step)
    parts.extend(
        f'<line x1="{left}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
        'class="grid"/>'
        f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
        f"{v:,.{digits}f}</text>"
        for v in ticks
    )
    if lo > 0:
        parts.append(
            f'<text class="note" x="{left + 4}" y="{top - 3}">'
            f"axis starts at {lo:,.{digits}f}, not 0</text>"
        )
    for i, (side, name) in enumerate(((a, "A"), (b, "B"))):
        cx = left + (width - left) * (0.3 + 0.4 * i)
        parts.append(
            f'<text x="{cx:.1f}" y="{height - 10}" text-anchor="middle">'
            f"{name} ({len(side)} run{'s' if len(side) != 1 else ''})</text>"
        )
        for j, v in enumerate(side):
            dx = (j % 5 - 2) * 5
            parts.append(
                f'<circle class="dot side{name}" cx="{cx - 20 + dx:.1f}" '
                f'cy="{y(v):.1f}" r="4"><title>{v:,.1f} tps</title></circle>'
            )
        bar = bars[i]
        if bar:
            bx = cx + 20
            clipped = " (clipped)" if bar[0] < lo or bar[2] > hi else ""
            parts.append(
                f"<g><title>mean {bar[1]:,.1f} tps, 95% interval {bar[0]:,.1f} "
                f"… {bar[2]:,.1f}{clipped}</title>"
                f'<line class="ci side{name}" x1="{bx:.1f}" x2="{bx:.1f}" '
                f'y1="{y(bar[0]):.1f}" y2="{y(bar[2]):.1f}"/>'
                f'<line class="ci side{name}" x1="{bx - 6:.1f}" x2="{bx + 6:.1f}" '
                f'y1="{y(bar[1]):.1f}" y2="{y(bar[1]):.1f}"/></g>'
            )
    parts.append(
        f'<text x="12" y="{height / 2}" transform="rotate(-90 12 {height / 2})" '
        'text-anchor="middle">tps</text></svg>'
    )
    return "".join(parts)


def _wait_shares(docs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each event's share of the samples, averaged over the runs that have
    ``--waits`` (a run without the event counts it as 0)."""
    runs = [
        d["waits"]["events"]
        for d in docs
        if isinstance(d.get("waits"), Mapping)
        and isinstance(d["waits"].get("events"), list)
    ]
    totals: dict[str, float] = {}
    for events in runs:
        for e in events:
            if not isinstance(e, Mapping):
                continue
            label = f"{e.get('type', '')}:{e.get('event', '')}".strip(":")
            totals[label] = totals.get(label, 0.0) + float(e.get("share") or 0.0)
    return {k: v / len(runs) for k, v in totals.items()} if runs else {}


def waits_side_by_side(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], top: int = 10
) -> str:
    """The top wait events of both sides next to each other (empty when a
    side has no ``--waits``)."""
    sa, sb = _wait_shares(a), _wait_shares(b)
    if not sa or not sb:
        return ""
    labels = sorted(
        set(sa) | set(sb), key=lambda k: (-max(sa.get(k, 0), sb.get(k, 0)), k)
    )
    rows = [
        [
            k,
            pct(sa.get(k, 0.0)),
            pct(sb.get(k, 0.0)),
            f"{100 * (sb.get(k, 0.0) - sa.get(k, 0.0)):+.1f} pt",
        ]
        for k in labels[:top]
    ]
    return table(("event", "A: share", "B: share", "B − A"), rows, cls="num")


def _round_step(span: float) -> float:
    """A tick step of 1, 2 or 5 times a power of ten giving 4 to 10 ticks
    over ``span``."""
    if span <= 0:
        return 1.0
    base = 10.0 ** math.floor(math.log10(span / 4))
    for m in (1, 2, 5, 10):
        if span / (m * base) <= 10:
            return float(m * base)
    return 10.0 * base


def _decimals(step: float) -> int:
    """Digits after the point that show every tick of ``step`` exactly."""
    return max(0, -math.floor(math.log10(step) + 1e-9))
