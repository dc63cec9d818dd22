"""``pgsurge history``'s analysis: one workload's runs, a metric, its change points.

``choose_workload`` picks one workload among the stored ones (the newest
run's unless a key is given: only that workload's documents are read),
``build_history`` takes its runs (oldest first), reads the metric of
each with ``compare``'s definitions (``experiment.compare.METRICS``: tps,
latency, p50/p90/p99, cpu) and finds the change points of the series
(``changes.find_changes``). Runs that aborted or lack the metric are
listed but left out of the series. ``render_history`` is the text: a table
newest last, then one line per change point (size, interval, the runs on
each side) and the fingerprint warnings. ``History.regression`` is what
``--fail-on regression`` tests: the latest change point, when it makes the
metric worse by more than the threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pgsurge.experiment.compare import METRICS, Metric
from pgsurge.experiment.fingerprint import fingerprint, fingerprint_differences
from pgsurge.experiment.results import parse_result
from pgsurge.store.backend import StoredRun
from pgsurge.store.changes import MIN_RUNS, Change, find_changes

__all__ = [
    "History",
    "Row",
    "build_history",
    "choose_workload",
    "history_json",
    "render_history",
]

#: at most this many fingerprint warnings are printed (then a count)
MAX_WARNINGS = 5


@dataclass(frozen=True, slots=True)
class Row:
    """One stored run of the workload."""

    run: StoredRun
    value: float | None
    #: why the run is out of the series (None: in it)
    excluded: str | None


@dataclass(frozen=True, slots=True)
class History:
    metric: Metric
    workload_key: str
    rows: tuple[Row, ...]
    #: the change points, ``index`` counted in ``series_rows``
    changes: tuple[Change, ...]
    series_rows: tuple[Row, ...]
    #: other workloads among the matching runs: key → run count
    other_workloads: dict[str, int]
    warnings: tuple[str, ...]
    #: why no change point was sought (the series mixes an experiment's
    #: arms), or None
    mixed: str | None = None

    def worse(self, change: Change) -> bool:
        up = change.change > 0
        return up != self.metric.higher_is_better and change.change != 0

    def regression(self, threshold: float) -> Change | None:
        """The latest change point, if it is surely worse beyond
        ``threshold``: its whole interval, as compare's "slower" (hostile
        finding: a change of -2.8 % whose interval reached -1.5 % was a
        "regression beyond 2 %")."""
        if not self.changes:
            return None
        last = self.changes[-1]
        if not self.worse(last):
            return None
        near = last.high if last.change < 0 else last.low
        if abs(near) > threshold and (near < 0) == (last.change < 0):
            return last
        return None


def _metric(key: str) -> Metric:
    for m in METRICS:
        if m.key == key:
            return m
    raise ValueError(key)


def choose_workload(
    keys: Sequence[tuple[str, int]], prefix: str | None
) -> tuple[str | None, dict[str, int]]:
    """The workload to show among ``keys`` (key, run count; the newest
    run's last): the newest matching ``prefix``, else the newest run's; and
    the others with their run counts."""
    found = [k for k, _ in keys if prefix is None or k.startswith(prefix)]
    if not found:
        return None, {}
    key = found[-1]
    return key, {k: n for k, n in keys if k != key}


def build_history(
    runs: Sequence[StoredRun],
    *,
    metric: str,
    workload: str,
    others: dict[str, int] | None = None,
) -> History:
    """See the module doc: ``runs`` are the stored runs of ``workload``,
    oldest first; ``others`` the other workloads' run counts."""
    m = _metric(metric)
    rows = []
    seen: dict[tuple[object, ...], int] = {}
    for r in runs:
        summary = parse_result(f"run {r.id}", r.doc)
        value = m.value(summary)
        # an edited copy of a stored run (another title, labels added by
        # hand) is stored again, as another document: the same start time
        # and figures are the same run, counted once (as compare refuses it)
        same = (summary.start, summary.transactions, summary.tps, summary.workload)
        twin = seen.setdefault(same, r.id) if summary.start else r.id
        excluded = (
            "aborted"
            if summary.aborted
            # a run cut short by a signal measured its first seconds (one
            # imported with store import entered the series as a whole run)
            else "interrupted"
            if summary.interrupted
            else f"no {m.label}"
            if value is None
            else None
        )
        if excluded is None and twin != r.id:
            excluded = f"same run as run {twin}"
        if excluded is None and any(
            r.labels.get(k) == "warmup" for k in ("ab", "sweep")
        ):
            # an experiment's warm-up run: discarded by the experiment itself
            # (a cold cache, a first connection), and so out of the series
            excluded = "warm-up"
        if excluded is None and value == 0 and m.higher_is_better:
            # a run that processed nothing: no ratio to it means anything
            # (it counted as half the smallest run once, a made-up -50 %)
            excluded = "nothing processed"
        rows.append(Row(r, value, excluded))
    series = tuple(r for r in rows if r.excluded is None)
    arms = sorted({r.run.labels["arm"] for r in series if "arm" in r.run.labels})
    mixed = None
    if len(arms) > 1:
        # the arms of an experiment alternate (ABBA): two configurations in
        # one series, whose every turn could be called a change (hostile
        # finding); their workload key is the same when they differ in the
        # server's settings or the environment only
        mixed = (
            f"the runs are of {len(arms)} arms of an experiment "
            f"({', '.join(f'arm={a}' for a in arms)}): --label arm={arms[0]} "
            "follows one"
        )
    changes = (
        [] if mixed else find_changes([r.value for r in series if r.value is not None])
    )
    return History(
        metric=m,
        workload_key=workload,
        rows=tuple(rows),
        changes=tuple(changes),
        series_rows=series,
        other_workloads=dict(others or {}),
        warnings=tuple(_fingerprint_warnings(rows)),
        mixed=mixed,
    )


def _fingerprint_warnings(rows: Sequence[Row]) -> list[str]:
    """One line per run whose environment differs from the run before it."""
    out = []
    prev: Row | None = None
    for row in rows:
        if prev is not None and row.run.fingerprint_key != prev.run.fingerprint_key:
            diff = fingerprint_differences(
                fingerprint(prev.run.doc), fingerprint(row.run.doc)
            )
            if diff:
                out.append(
                    f"run {row.run.id} ran in another environment than run "
                    f"{prev.run.id}: {'; '.join(diff)}"
                )
        prev = row
    return out


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3f}"


def _pct(frac: float) -> str:
    return f"{frac * 100:+.1f} %"


def _labels(run: StoredRun) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))


def describe_change(h: History, c: Change) -> str:
    """``change at run 20 (commit=abc): tps 1000.0 -> 950.0, -5.0 % (95 %
    interval -6.1 % to -3.9 %; runs 1-19 vs 20-30, p = 1e-06): slower``
    (the labels of the first run of the new level, if any)."""
    rows = h.series_rows
    first, last = rows[c.start].run.id, rows[c.index - 1].run.id
    new_first, new_last = rows[c.index].run.id, rows[c.end - 1].run.id
    word = h.metric.worse if h.worse(c) else h.metric.better
    unit = f" {h.metric.unit}" if h.metric.unit else ""
    labels = _labels(rows[c.index].run)
    where = f"{new_first} ({labels})" if labels else f"{new_first}"
    return (
        f"change at run {where}: {h.metric.label} {_fmt(c.mean_before)} -> "
        f"{_fmt(c.mean_after)}{unit}, {_pct(c.change)} (95 % interval "
        f"{_pct(c.low)} to {_pct(c.high)}; runs {first}-{last} vs "
        f"{new_first}-{new_last}, p = {c.p_value:.2g}): {word}"
    )


def render_history(h: History) -> str:
    """The text of ``pgsurge history`` (see the module doc)."""
    unit = f" ({h.metric.unit})" if h.metric.unit else ""
    starts = {h.series_rows[c.index].run.id for c in h.changes}
    table = [["run", "start", h.metric.label + unit, "", "labels"]]
    for row in h.rows:
        r = row.run
        mark = "<- change" if r.id in starts else (row.excluded or "")
        when = (r.started_at or r.stored_at)[:19].replace("T", " ")
        table.append([str(r.id), when, _fmt(row.value), mark, _labels(r)])
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [f"workload {h.workload_key}: {len(h.rows)} runs, newest last"]
    for line in table:
        cells = [
            c.rjust(w) if i in (0, 2) else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    if h.changes:
        lines.extend(describe_change(h, c) for c in h.changes)
    elif h.mixed:
        lines.append(f"no change points sought: {h.mixed}")
    elif len(h.series_rows) < MIN_RUNS:
        lines.append(
            f"no change points: {len(h.series_rows)} runs are too few to tell "
            f"({MIN_RUNS} or more)"
        )
    else:
        lines.append("no change points")
    if h.other_workloads:
        n = sum(h.other_workloads.values())
        keys = ", ".join(sorted(h.other_workloads))
        lines.append(
            f"({n} other matching runs are of other workloads: {keys}; "
            "--workload KEY shows one)"
        )
    return "\n".join(lines) + "\n"


def history_json(h: History, threshold: float) -> dict[str, Any]:
    """``history --json``: the table, the change points and the verdict."""
    rows = h.series_rows

    def change(c: Change) -> dict[str, Any]:
        return {
            "run": rows[c.index].run.id,
            "labels": dict(rows[c.index].run.labels),
            "before_runs": [r.run.id for r in rows[c.start : c.index]],
            "after_runs": [r.run.id for r in rows[c.index : c.end]],
            "level_before": c.mean_before,
            "level_after": c.mean_after,
            "change": c.change,
            "interval": [c.low, c.high],
            "p_value": c.p_value,
            "worse": h.worse(c),
        }

    bad = h.regression(threshold)
    return {
        "workload": h.workload_key,
        "metric": h.metric.key,
        "unit": h.metric.unit,
        "higher_is_better": h.metric.higher_is_better,
        "runs": [
            {
                "id": r.run.id,
                "start": r.run.started_at,
                "stored_at": r.run.stored_at,
                "labels": dict(r.run.labels),
                "value": r.value,
                "excluded": r.excluded,
            }
            for r in h.rows
        ],
        "changes": [change(c) for c in h.changes],
        "not_sought": h.mixed,
        "threshold": threshold,
        "regression": None if bad is None else change(bad),
        "environment_warnings": list(h.warnings),
        "other_workloads": dict(h.other_workloads),
    }
