"""A finished sweep as the table people paste, as JSON, and its knees.

Pure functions of the grid and each cell's finished runs (``RunSummary``
values per arm); the statistics are ``compare``'s and ``knee``'s:

* per arm and cell: the median tps of its runs with the 95 % interval of
  the typical run (``knee.arm_interval``), the median p99 and client CPU
  per transaction, the top wait event (``--waits``), and how many runs
  had a busy client (``*`` in the table);
* with two arms, per cell: ``compare(A runs, B runs)`` exactly as
  ``pgsurge compare A… --vs B…`` computes it (``across_expected``: the
  arms may differ in what they run), its tps ratio, interval and verdict;
  the JSON cell holds that comparison's whole document;
* the knee of each arm along a varied ``-c`` (``knee.find_knee``), per
  combination of the other varied options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pgsurge.experiment.compare import Comparison, compare
from pgsurge.experiment.grid import Cell, Vary
from pgsurge.experiment.knee import (
    DEFAULT_GAIN,
    Knee,
    KneePoint,
    arm_interval,
    find_knee,
)
from pgsurge.experiment.render import fmt_change, fmt_value, mean_waits, render_json

__all__ = [
    "CellResult",
    "Knees",
    "cell_results",
    "find_knees",
    "sweep_json",
    "sweep_text",
]

#: the options whose variation makes a client curve
CLIENT_OPTIONS = ("-c", "--client")

Runs = Mapping[str, Sequence[Any]]


@dataclass(frozen=True, slots=True)
class ArmCell:
    """One arm's runs in one cell, summarized."""

    arm: str
    files: tuple[str, ...]
    tps: tuple[float, ...]
    tps_median: float | None
    tps_ci: tuple[float, float] | None
    p99: tuple[float, ...]
    p99_median: float | None
    cpu_median: float | None
    top_wait: tuple[str, float] | None
    client_limited: int
    unsteady: int
    #: -R runs that did not sustain their rate (a sweep over -R: their p99
    #: is the backlog's, and the table said nothing of it)
    unsustained: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": len(self.files),
            "files": list(self.files),
            "tps": {
                "values": list(self.tps),
                "median": self.tps_median,
                "ci": list(self.tps_ci) if self.tps_ci else None,
            },
            "p99_ms": {"values": list(self.p99), "median": self.p99_median},
            "cpu_us_per_tx": self.cpu_median,
            "top_wait": (
                {"event": self.top_wait[0], "share": self.top_wait[1]}
                if self.top_wait
                else None
            ),
            "client_limited_runs": self.client_limited,
            "unsteady_runs": self.unsteady,
            "rate_not_sustained_runs": self.unsustained,
        }


@dataclass(frozen=True, slots=True)
class CellResult:
    cell: Cell
    arms: tuple[ArmCell, ...]
    comparison: Comparison | None
    #: why there is no comparison with two arms (an arm without runs)
    missing: str | None


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


def _arm_cell(arm: str, runs: Sequence[Any], confidence: float) -> ArmCell:
    tps = tuple(r.tps for r in runs if r.tps is not None)
    p99 = tuple(r.percentiles["99"] for r in runs if "99" in r.percentiles)
    cpu = [r.cpu_us_per_tx for r in runs if r.cpu_us_per_tx is not None]
    waits = mean_waits(runs)
    top = max(waits.items(), key=lambda kv: (kv[1], kv[0])) if waits else None
    return ArmCell(
        arm=arm,
        files=tuple(r.path for r in runs),
        tps=tps,
        tps_median=_median(tps),
        tps_ci=arm_interval(tps, confidence),
        p99=p99,
        p99_median=_median(p99),
        cpu_median=_median(cpu),
        top_wait=top,
        client_limited=sum(bool(r.client_limited) for r in runs),
        unsteady=sum(bool(r.unsteady) for r in runs),
        unsustained=sum(bool(r.rate_unsustained) for r in runs),
    )


def cell_results(
    grid: Sequence[Cell],
    arms: Sequence[str],
    runs: Mapping[tuple[int, str], Sequence[Any]],
    *,
    confidence: float,
    threshold: float,
) -> list[CellResult]:
    """Each cell's summary; ``runs[(cell index, arm)]`` its finished runs."""
    out = []
    for cell in grid:
        per_arm = [runs.get((cell.index, a), ()) for a in arms]
        comp, missing = None, None
        if len(arms) == 2:
            if per_arm[0] and per_arm[1]:
                comp = compare(
                    per_arm[0],
                    per_arm[1],
                    confidence=confidence,
                    threshold=threshold,
                    across_expected=True,
                )
            else:
                missing = "no finished runs on both arms"
        out.append(
            CellResult(
                cell,
                tuple(
                    _arm_cell(a, r, confidence)
                    for a, r in zip(arms, per_arm, strict=True)
                ),
                comp,
                missing,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Knees:
    """The knees found: (arm, the other varied values, knee)."""

    items: tuple[tuple[str, tuple[tuple[str, str], ...], Knee], ...]
    #: cell index → "knee A" marks for the table
    marks: Mapping[int, str]


def find_knees(
    specs: Sequence[Vary],
    results: Sequence[CellResult],
    *,
    confidence: float,
    gain: float = DEFAULT_GAIN,
) -> Knees:
    """The knee of each arm along the client axis, per combination of the
    other varied options; none when ``-c`` is not varied over 3+ values."""
    axis = next(
        (
            i
            for i, s in enumerate(specs)
            if s.kind == "option" and s.name in CLIENT_OPTIONS
        ),
        None,
    )
    if axis is None or len(specs[axis].values) < 3 or not specs[axis].numeric:
        return Knees((), {})
    groups: dict[tuple[str, ...], list[CellResult]] = {}
    for res in results:
        other = res.cell.values[:axis] + res.cell.values[axis + 1 :]
        groups.setdefault(other, []).append(res)
    labels = [s.label for i, s in enumerate(specs) if i != axis]
    items = []
    marks: dict[int, list[str]] = {}
    for other, group in groups.items():
        for k in range(len(group[0].arms)):
            points = [
                KneePoint(
                    float(res.cell.values[axis]),
                    res.arms[k].tps,
                    res.arms[k].p99,
                    res.arms[k].client_limited > 0,
                )
                for res in group
            ]
            knee = find_knee(points, confidence=confidence, gain=gain)
            if knee is None:
                continue
            arm = group[0].arms[k].arm
            items.append((arm, tuple(zip(labels, other, strict=True)), knee))
            for res in group:
                if not knee.open_ended and float(res.cell.values[axis]) == knee.clients:
                    marks.setdefault(res.cell.index, []).append(arm)
    return Knees(
        tuple(items),
        {i: "knee " + "/".join(a) for i, a in marks.items()},
    )


def _tps_text(a: ArmCell) -> str:
    text = fmt_value(a.tps_median)
    if a.tps_ci:
        text += f" [{fmt_value(a.tps_ci[0])}–{fmt_value(a.tps_ci[1])}]"
    if a.client_limited:
        text += " *"
    if a.unsteady:
        text += " ~"
    if a.unsustained:
        text += " !"
    return text


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def sweep_text(
    specs: Sequence[Vary],
    results: Sequence[CellResult],
    knees: Knees,
    *,
    confidence: float,
    waits: bool,
) -> str:
    """The table, one row per grid point, and its foot."""
    arms = [a.arm for a in results[0].arms] if results else []
    two = len(arms) == 2
    pct = f"{confidence * 100:g} %"
    head = [s.label for s in specs]
    for a in arms:
        prefix = f"{a} " if two else ""
        head += [f"{prefix}tps [{pct} CI]", f"{prefix}p99 ms", f"{prefix}CPU µs/tx"]
        if waits:
            head.append(f"{prefix}top wait")
    if two:
        head += ["B/A tps", f"{pct} CI", "verdict"]
    head.append("")
    rows = [head]
    for res in results:
        row = list(res.cell.values)
        for ac in res.arms:
            row += [_tps_text(ac), fmt_value(ac.p99_median), fmt_value(ac.cpu_median)]
            if waits:
                row.append(
                    f"{ac.top_wait[0]} {ac.top_wait[1] * 100:.0f} %"
                    if ac.top_wait
                    else "–"
                )
        if two:
            row += _verdict_cells(res)
        row.append(knees.marks.get(res.cell.index, ""))
        rows.append(row)
    lines = _table(rows)
    runs = max((len(a.files) for r in results for a in r.arms), default=0)
    lines.append("")
    lines.append(
        f"{runs} run{'s' if runs != 1 else ''} per cell; tps: median and the "
        f"{pct} interval of the typical run (geometric mean)"
        + ("; B/A: compare's ratio of the arms" if two else "")
    )
    if any(a.client_limited for r in results for a in r.arms):
        lines.append("*: some runs had a busy client (it may be the bottleneck)")
    if any(a.unsteady for r in results for a in r.arms):
        lines.append("~: some runs were not steady (their tps trended over the run)")
    if any(a.unsustained for r in results for a in r.arms):
        lines.append(
            "!: some -R runs did not sustain their rate (their latencies measure "
            "the backlog; see rate_check in their JSON)"
        )
    for arm, other, knee in knees.items:
        where = ", ".join(f"{k} {v}" for k, v in other)
        who = f"{arm}" + (f" ({where})" if where else "")
        lines.append(f"{who}: {knee.describe()}")
    return "\n".join(lines) + "\n"


def _verdict_cells(res: CellResult) -> list[str]:
    c = res.comparison
    if c is None:
        return ["–", "–", f"no verdict ({res.missing})"]
    tps = c.primary_result
    est = tps.estimate
    ratio = fmt_change(est.ratio - 1) if est else "–"
    if est is None and tps.base.median and tps.new.median:
        ratio = fmt_change(tps.new.median / tps.base.median - 1)
    ci = f"[{fmt_change(est.low - 1)}, {fmt_change(est.high - 1)}]" if est else "–"
    return [ratio, ci, tps.verdict(c.threshold)]


def sweep_json(
    specs: Sequence[Vary],
    results: Sequence[CellResult],
    knees: Knees,
    *,
    confidence: float,
    threshold: float,
    manifest: Mapping[str, Any],
) -> dict[str, Any]:
    """The sweep for machines: each cell's summaries, per cell the
    ``compare --json`` document of its arms, and the knees."""
    return {
        "schema": 1,
        "kind": "pgsurge-sweep-result",
        "confidence": confidence,
        "threshold": threshold,
        "vary": [s.to_dict() for s in specs],
        "arms": manifest.get("arms", []),
        "common": manifest.get("common", []),
        "state": manifest.get("state"),
        "cells": [
            {
                "cell": res.cell.index,
                "values": dict(
                    zip([s.label for s in specs], res.cell.values, strict=True)
                ),
                "arms": {a.arm: a.to_dict() for a in res.arms},
                "comparison": (
                    render_json(res.comparison, None) if res.comparison else None
                ),
            }
            for res in results
        ],
        "knees": [
            {"arm": arm, "where": dict(other), **knee.to_dict()}
            for arm, other, knee in knees.items
        ],
    }
