"""Renderings of a finished ``Comparison``: the text table and the JSON
document. Pure functions: they neither compute statistics nor write.

The text is meant to be pasted into a mail: one line per metric,

    tps  5 vs 5 runs  41 230 → 42 310  +2.6 %  95 % CI [+1.1 %, +4.1 %]  verdict

(medians per side; the change and its CI are the ratio of geometric means
from Welch's t on log values), then the noise: run-to-run CV per side, the
smallest change these runs detect and the runs the threshold needs, the
permutation p-value, drift and outlier flags.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from pgsurge.experiment.compare import (
    METRICS,
    Comparison,
    MetricResult,
    Side,
    side_stats,
)
from pgsurge.experiment.results import RunSummary
from pgsurge.stats import compare as stats
from pgsurge.stats.compare import (
    DRIFT_MIN_RUNS,
    DRIFT_RHO,
    MAX_RUNS_NEEDED,
    OUTLIER_MIN_RUNS,
    OUTLIER_Z,
    POWER,
    Method,
)

__all__ = [
    "COMPARE_SCHEMA",
    "fmt_value",
    "render_json",
    "render_repeat",
    "render_text",
    "repeat_json",
    "run_line",
]

#: version of the ``compare --json`` document
COMPARE_SCHEMA = 1


def fmt_value(v: float | None) -> str:
    """A figure for people: digits grouped by spaces from 1000 on, one
    decimal from 100, else three significant digits."""
    if v is None or not math.isfinite(v):
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}".replace(",", " ")
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:#.3g}"


def fmt_change(frac: float) -> str:
    return f"{frac * 100:+.1f} %"


def _pct(frac: float | None) -> str:
    return "–" if frac is None else f"{frac * 100:.1f} %"


def _runs(n_base: int, n_new: int) -> str:
    return f"{n_base} vs {n_new} run{'s' if max(n_base, n_new) > 1 else ''}"


def _count(runs: Sequence[RunSummary]) -> str:
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}"


def _names(runs: Sequence[RunSummary]) -> str:
    names = [r.name for r in runs]
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]}"


def _workload_line(run: RunSummary) -> str:
    w = run.workload
    scripts = ", ".join(
        s.desc if len(w.scripts) == 1 else f"{s.desc}@{s.weight}" for s in w.scripts
    )
    parts = [scripts or "no script", f"scale {w.scale}"]
    opts = f"-c {w.clients} -j {w.jobs} -M {w.query_mode}"
    if w.duration_s:
        opts += f" -T {w.duration_s}"
    elif w.transactions is not None:
        opts += f" -t {w.transactions}"
    if w.rate is not None:
        opts += f" -R {w.rate:g}"
    parts += [opts, f"server {w.server_version}"]
    return "workload: " + ", ".join(parts)


def _row(c: Comparison, r: MetricResult) -> list[str]:
    unit = f" {r.metric.unit}" if r.metric.unit else ""
    values = f"{fmt_value(r.base.median)} → {fmt_value(r.new.median)}{unit}"
    est = r.estimate
    if est is not None:
        change = fmt_change(est.ratio - 1)
        # batch means within one run per side: not a run-to-run interval
        within = "within-run " if est.method is Method.BATCH_MEANS else ""
        ci = (
            f"{within}{c.confidence * 100:g} % CI "
            f"[{fmt_change(est.low - 1)}, {fmt_change(est.high - 1)}]"
        )
    else:
        change, ci = "", ""
        if r.base.median and r.new.median:
            change = fmt_change(r.new.median / r.base.median - 1)
    return [
        r.metric.label,
        _runs(r.base.n, r.new.n),
        values,
        change,
        ci,
        r.verdict(c.threshold),
    ]


def _failure_row(c: Comparison) -> list[str]:
    f = c.failures
    values = f"{f.base_failed} → {f.new_failed}"
    if not f.any:
        verdict = "none on either side"
    else:
        values += (
            f" ({_pct(_mean(f.base_rates)).replace(' %', '')} → "
            f"{_pct(_mean(f.new_rates))} of transactions)"
        )
        verdict = (
            f"Welch p = {f.p_value:.2g}"
            if f.p_value is not None
            else "no test (too few runs)"
        )
    return [
        "failures",
        _runs(len(f.base_rates), len(f.new_rates)),
        values,
        "",
        "",
        verdict,
    ]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            cell.rjust(w) if i == 3 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return out


def _noise_lines(c: Comparison) -> list[str]:
    lines = []
    p = c.primary_result
    label = p.metric.label
    if c.single_run:
        if c.batches is not None:
            b = c.batches
            how = (
                f"within-run CIs from {b.batches}+{b.batches} batch means of "
                f"{b.seconds:.3g} s, which understate it: no verdict"
            )
        else:
            how = "no CI: the runs are too short for batch means; no verdict"
        lines.append(f"single run per side: run-to-run variance not measured ({how})")
        lines.append("noise: unknown; repeat runs (pgsurge ab --runs 5) to measure it")
        return lines
    cvs = ", ".join(
        f"{r.metric.label} {_pct(r.base.cv)} / {_pct(r.new.cv)}"
        for r in c.metrics
        if r.base.values and r.new.values
    )
    lines.append(f"noise (run-to-run CV, base / new): {cvs}")
    band = f"±{c.threshold * 100:g} %"
    if p.mde is not None:
        needs = _needs(p.runs_needed)
        lines.append(
            f"{label}: {p.base.n}+{p.new.n} runs detect a change of ≥ "
            f"{p.mde * 100:.1f} % ({POWER * 100:g} % power); {band} needs {needs}"
        )
    elif min(p.base.n, p.new.n) < 2:
        lines.append(
            f"{label}: noise not measured (one run on a side); {band} needs runs "
            "on both sides"
        )
    else:
        lines.append(f"{label}: noise not measured ({p.missing or 'no values'})")
    if p.estimate is not None:
        tests = []
        if p.permutation_p is not None:
            splits = math.comb(p.base.n + p.new.n, p.base.n)
            tests.append(
                f"exact permutation p = {p.permutation_p:.2g} ({splits} splits)"
            )
        tests.append(f"Welch p = {p.estimate.p_value:.2g}")
        lines.append(f"{label}: " + ", ".join(tests))
    return lines


def _needs(runs: int | None) -> str:
    if runs is None:
        return f"more than {fmt_value(MAX_RUNS_NEEDED)} runs per side"
    n = f"{runs:,}".replace(",", " ")
    return f"{n}+{n} runs"


def _flag_lines(c: Comparison) -> list[str]:
    """Drift and outlier runs on the primary metric (the other metrics'
    flags are counted here and listed in the JSON document: percentiles of
    short runs sit on few histogram buckets and would flood the text)."""
    if c.single_run:
        return []
    p = c.primary_result
    label = p.metric.label
    drift: list[str] = []
    outliers: list[str] = []
    for side_name, side in (("base", p.base), ("new", p.new)):
        if side.drift is not None:
            way = "rises" if side.drift > 0 else "falls"
            drift.append(
                f"{side_name} {label} {way} with run order "
                f"(Spearman ρ = {side.drift:+.2f})"
            )
        outliers.extend(
            f"{side_name} {name} {label} {_value_of(side, name)} "
            f"(modified z = {z:+.1f})"
            for name, z in side.outliers
        )
    others = [r for r in c.metrics if r is not p]
    more_drift = sum(s.drift is not None for r in others for s in (r.base, r.new))
    more_out = sum(len(s.outliers) for r in others for s in (r.base, r.new))
    lines = []
    few = min(len(c.base), len(c.new))
    if drift:
        line = "drift: " + "; ".join(drift)
    elif few < DRIFT_MIN_RUNS:
        line = f"drift: not assessed (fewer than {DRIFT_MIN_RUNS} runs a side)"
    else:
        line = f"drift: none in {label} (|Spearman ρ| ≤ {DRIFT_RHO:g} within each side)"
    if more_drift:
        line += f"; {more_drift} in other metrics (see --json)"
    lines.append(line)
    if outliers:
        line = "outlier runs (reported, not dropped): " + "; ".join(outliers)
    elif few < OUTLIER_MIN_RUNS:
        line = f"outlier runs: not assessed (fewer than {OUTLIER_MIN_RUNS} runs a side)"
    else:
        line = f"outlier runs: none in {label} (modified z ≤ {OUTLIER_Z:g})"
    if more_out:
        line += f"; {more_out} in other metrics (see --json)"
    lines.append(line)
    return lines


def _value_of(side: Side, name: str) -> str:
    return fmt_value(side.values[side.names.index(name)])


def arm_of(runs: Sequence[RunSummary]) -> str | None:
    """What a side's runs were, from ``ab``'s record in their JSON (masked
    there), when they all share it: e.g. ``-M prepared PGOPTIONS='-c …'``."""
    arms = {_arm_words(r.arm) for r in runs if r.arm is not None}
    if len(arms) != 1 or any(r.arm is None for r in runs):
        return None
    return arms.pop()


def _arm_words(arm: Mapping[str, Any]) -> str:
    words = shlex.join(arm["args"]) or "(no arguments)"
    return words + "".join(f" {k}={shlex.quote(v)}" for k, v in arm["env"].items())


def _arm_lines(c: Comparison) -> list[str]:
    """The arms compared (``ab`` runs): arms that differ only in their
    environment look the same in every other line."""
    lines = []
    for name, runs in (("base", c.base), ("new", c.new)):
        arm = arm_of(runs)
        if arm is not None:
            lines.append(f"{name} arm: {arm}")
    return lines


def render_text(c: Comparison) -> str:
    """The comparison for people, ending with a newline."""
    lines = [
        f"base: {_count(c.base)} ({_names(c.base)}); "
        f"new: {_count(c.new)} ({_names(c.new)})",
        *_arm_lines(c),
        _workload_line(c.base[0]),
    ]
    if c.differences:
        lines.append(f"differs ({c.differences_reason}): " + " | ".join(c.differences))
    lines.extend(f"note: {n}" for n in c.notes)
    lines.append("")
    rows = [_row(c, r) for r in c.metrics if r.base.values or r.new.values]
    rows.append(_failure_row(c))
    lines.extend(_table(rows))
    lines.append(
        "(medians per side; change and CI: ratio of geometric means, Welch's t on "
        "log values per run)"
    )
    lines.append("")
    lines.extend(_noise_lines(c))
    lines.extend(_flag_lines(c))
    lines.extend(_waits_lines(c))
    return "\n".join(lines) + "\n"


#: wait events shown side by side
WAITS_TOP = 8


def mean_waits(runs: Sequence[RunSummary]) -> dict[str, float]:
    """Each wait event's share, averaged over the runs that have ``--waits``."""
    with_waits = [r.waits for r in runs if r.waits]
    totals: dict[str, float] = {}
    for waits in with_waits:
        for label, share in waits.items():
            totals[label] = totals.get(label, 0.0) + share
    return {k: v / len(with_waits) for k, v in totals.items()}


def _waits_lines(c: Comparison) -> list[str]:
    """Both sides' top wait events next to each other (runs with --waits)."""
    base, new = mean_waits(c.base), mean_waits(c.new)
    if not base or not new:
        return []
    labels = sorted(
        set(base) | set(new), key=lambda k: (-max(base.get(k, 0), new.get(k, 0)), k)
    )
    rows = [["wait event", "base", "new", "change"]]
    rows.extend(
        [
            k,
            f"{100 * base.get(k, 0.0):.1f} %",
            f"{100 * new.get(k, 0.0):.1f} %",
            f"{100 * (new.get(k, 0.0) - base.get(k, 0.0)):+.1f} pt",
        ]
        for k in labels[:WAITS_TOP]
    )
    return [
        "",
        "wait events (share of samples, mean over the runs with --waits):",
        *_table(rows),
    ]


def _side_dict(side: Side) -> dict[str, Any]:
    return {
        "runs": side.n,
        "files": list(side.names),
        "values": list(side.values),
        "median": side.median,
        "min": side.min,
        "max": side.max,
        "cv": side.cv,
        "drift_rho": side.drift,
        "outliers": [{"file": n, "modified_z": z} for n, z in side.outliers],
    }


def _metric_dict(c: Comparison, r: MetricResult) -> dict[str, Any]:
    est = r.estimate
    within = est is not None and est.method is Method.BATCH_MEANS
    return {
        "metric": r.metric.key,
        "label": r.metric.label,
        "unit": r.metric.unit or None,
        "higher_is_better": r.metric.higher_is_better,
        "base": _side_dict(r.base),
        "new": _side_dict(r.new),
        "ratio": est.ratio if est else None,
        # a within-run interval (one run per side) is not a CI of the
        # change between runs: its own key, so that no reader takes it as one
        "ci": [est.low, est.high] if est and not within else None,
        "within_run_ci": [est.low, est.high] if est and within else None,
        "method": str(est.method) if est else None,
        "welch_p": est.p_value if est else None,
        "df": est.df if est else None,
        "permutation_p": r.permutation_p,
        "direction": r.direction.value if r.direction else None,
        "significant": est.significant if est else None,
        "verdict": r.verdict(c.threshold),
        "min_detectable_effect": r.mde,
        "runs_needed": r.runs_needed,
    }


def render_json(c: Comparison, fail_on: str | None) -> dict[str, Any]:
    """The comparison for machines (``compare --json``)."""
    f = c.failures
    return {
        "schema": COMPARE_SCHEMA,
        "kind": "pgsurge-compare",
        "confidence": c.confidence,
        "threshold": c.threshold,
        "primary": c.primary,
        "base": [r.path for r in c.base],
        "new": [r.path for r in c.new],
        "arms": {"base": arm_of(c.base), "new": arm_of(c.new)},
        "single_run": c.single_run,
        "batches": (
            {"per_run": c.batches.batches, "seconds": c.batches.seconds}
            if c.batches
            else None
        ),
        "differences": list(c.differences),
        "differences_accepted_by": c.differences_reason,
        "notes": list(c.notes),
        "metrics": [_metric_dict(c, r) for r in c.metrics],
        "failures": {
            "base_failed": f.base_failed,
            "new_failed": f.new_failed,
            "base_rates": list(f.base_rates),
            "new_rates": list(f.new_rates),
            "welch_p": f.p_value,
        },
        "verdict": c.primary_result.verdict(c.threshold),
        "exit_status": c.exit_status(fail_on),
        "waits": {"base": mean_waits(c.base), "new": mean_waits(c.new)},
    }


# -- one arm: the repeat summary -------------------------------------------------


def run_line(label: str, run: RunSummary) -> str:
    """One run in a line: tps, p99, client CPU per transaction, failures."""
    parts = [label, f"tps {fmt_value(run.tps)}"]
    parts.append(f"p99 {fmt_value(run.percentiles.get('99'))} ms")
    if run.cpu_us_per_tx is not None:
        parts.append(f"CPU {fmt_value(run.cpu_us_per_tx)} µs/tx")
    if run.failed:
        parts.append(f"failed {run.failed}")
    return "  ".join(parts)


def _repeat_sides(runs: Sequence[RunSummary]) -> list[tuple[str, str, Side]]:
    return [
        (m.label, m.unit, side) for m in METRICS if (side := side_stats(runs, m)).values
    ]


def _repeat_noise(
    runs: Sequence[RunSummary], confidence: float, threshold: float
) -> str | None:
    pooled = stats.pooled_log_sd([r.tps for r in runs if r.tps])
    if pooled is None:
        return None
    sd, _ = pooled
    n = len(runs)
    mde = stats.min_detectable_effect(sd, n, n, confidence)
    needed = stats.runs_needed(sd, threshold, confidence)
    need = _needs(needed)
    return (
        f"noise: an A/B of {n}+{n} such runs would detect a tps change of ≥ "
        f"{mde * 100:.1f} % ({POWER * 100:g} % power); ±{threshold * 100:g} % "
        f"needs {need}"
    )


def render_repeat(
    runs: Sequence[RunSummary], confidence: float, threshold: float
) -> str:
    """The summary of repeated runs of one configuration."""
    lines = [f"{_count(runs)} ({_names(runs)})", _workload_line(runs[0]), ""]
    rows = []
    for label, unit, side in _repeat_sides(runs):
        u = f" {unit}" if unit else ""
        rows.append(
            [
                label,
                _count(runs),
                f"median {fmt_value(side.median)}{u}",
                f"min {fmt_value(side.min)}",
                f"max {fmt_value(side.max)}",
                f"CV {_pct(side.cv)}",
            ]
        )
    lines.extend(_table(rows))
    lines.append("")
    noise = _repeat_noise(runs, confidence, threshold)
    if noise:
        lines.append(noise)
    flags = []
    for label, _, side in _repeat_sides(runs):
        if side.drift is not None:
            way = "rises" if side.drift > 0 else "falls"
            flags.append(
                f"drift: {label} {way} with run order (Spearman ρ = {side.drift:+.2f})"
            )
        flags.extend(
            f"outlier (reported, not dropped): {name} {label} "
            f"{_value_of(side, name)} (modified z = {z:+.1f})"
            for name, z in side.outliers
        )
    lines.extend(flags)
    lines.append("runs:")
    lines.extend(run_line(f"  {r.name}", r) for r in runs)
    return "\n".join(lines) + "\n"


def repeat_json(
    runs: Sequence[RunSummary], confidence: float, threshold: float
) -> dict[str, Any]:
    """The repeat summary for machines."""
    return {
        "schema": COMPARE_SCHEMA,
        "kind": "pgsurge-repeat",
        "confidence": confidence,
        "threshold": threshold,
        "runs": [r.path for r in runs],
        "metrics": [
            {"label": label, "unit": unit or None, **_side_dict(side)}
            for label, unit, side in _repeat_sides(runs)
        ],
    }
