"""Tables for bench/suite.py: rows of finished results, as text or Markdown.

Reports are pure functions of finished results: :func:`build_rows` turns
the suite's result documents (the same dicts its JSON file holds) into
:class:`Row` values, printed twice (an aligned table for the terminal, a
pipe table to paste into a README). ``suite.py --report FILE`` re-renders a
saved run through :func:`summaries_of`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from _suite_cases import (
    AA_CASE,
    ALL_CASES,
    PAIRED_CASES,
    PGBENCH,
    PGSURGE,
    TPS_FLOOR,
    PairedCase,
)
from _suite_stats import (
    PairedSummary,
    RatioStats,
    Run,
    at_most,
    ratio,
    summarize_pairs,
    tps_verdict,
    verdict_text,
    within,
)

MAIN_HEADER = (
    "case",
    "tps ratio",
    "per-pair min–max",
    "CPU/tx pgsurge µs",
    "CPU/tx pgbench µs",
    "CPU ratio",
    "CPU ratio, start-up cancelled",
    "start-up ms pgsurge / pgbench",
    "target",
    "met?",
)
OTHER_HEADER = ("measure", "pgsurge", "pgbench", "ratio", "target", "met?")


@dataclass(frozen=True, slots=True)
class Row:
    """One line of a table: already formatted cells."""

    cells: tuple[str, ...]


def fmt(value: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals; "–" when missing."""
    if value is None or math.isnan(value):
        return "–"
    return f"{value:.{digits}f}"


def fmt_range(low: float, high: float, digits: int = 2) -> str:
    if math.isnan(low) or math.isnan(high):
        return "–"
    return f"{low:.{digits}f}–{high:.{digits}f}"


def text_table(header: Sequence[str], rows: Sequence[Row]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    table = [tuple(header), *(r.cells for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            numeric = i > 0 and _looks_numeric(cell)
            out.append(cell.rjust(widths[i]) if numeric else cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r.cells) for r in rows)])


def markdown_table(header: Sequence[str], rows: Sequence[Row]) -> str:
    """A GitHub pipe table; numeric columns right-aligned."""
    numeric = [
        i > 0 and bool(rows) and all(_looks_numeric(r.cells[i]) for r in rows)
        for i in range(len(header))
    ]
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    for r in rows:
        cells = [c.replace("|", "\\|") for c in r.cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _looks_numeric(cell: str) -> bool:
    return cell == "–" or (bool(cell) and (cell[0].isdigit() or cell[0] == "-"))


# -- rows of the suite's results -------------------------------------------------


def summaries_of(results: dict[str, dict[str, Any]]) -> dict[str, PairedSummary]:
    """Recompute the paired summaries from the raw runs of a JSON document."""
    out = {}
    for name, r in results.items():
        if r.get("kind") in ("paired", "aa"):
            pairs = [(_run_of_dict(a), _run_of_dict(b)) for a, b in r["pairs"]]
            out[name] = summarize_pairs(pairs)
    return out


def _run_of_dict(d: dict[str, Any]) -> Run:
    names = {f.name for f in dataclasses.fields(Run)}
    kw = {k: v for k, v in d.items() if k in names}
    kw["argv"] = tuple(kw.get("argv", ()))
    return Run(**kw)


def build_rows(
    res: dict[str, dict[str, Any]], summaries: dict[str, PairedSummary]
) -> tuple[list[Row], list[Row]]:
    """The run-case table and the other-targets table."""
    aa: PairedSummary | None = None
    if res.get(AA_CASE, {}).get("kind") == "aa":
        aa = summaries[AA_CASE]
    main: list[Row] = []
    other: list[Row] = []
    for name in ALL_CASES:
        r = res.get(name)
        if r is None:
            continue
        if r["kind"] == "skipped":
            main.append(Row((name, *["–"] * 7, "", f"skipped: {r['reason']}")))
            continue
        if r["kind"] in ("paired", "aa"):
            case = next((c for c in PAIRED_CASES if c.name == name), PAIRED_CASES[0])
            s = summaries[name]
            main.append(_paired_row(name, case, s, aa, r["kind"] == "aa"))
            if case.accuracy is not None and r["kind"] == "paired":
                other += _accuracy_rows(name, case.accuracy, s)
        elif r["kind"] == "memory":
            other += _memory_rows(r)
        elif r["kind"] == "init":
            other += _init_rows(r, int(r.get("jobs", 2)))
        elif r["kind"] == "help":
            w = r["wall_median_s"]
            other.append(
                Row(
                    (
                        "`--help` start-up, median wall (s)",
                        fmt(w[PGSURGE], 3),
                        fmt(w[PGBENCH], 3),
                        fmt(ratio(w[PGSURGE], w[PGBENCH])),
                        "< 0.3 s",
                        verdict_text(("time", at_most(w[PGSURGE], 0.3 - 1e-9))),
                    )
                )
            )
    return main, other


def _paired_row(
    name: str, case: PairedCase, s: PairedSummary, aa: PairedSummary | None, is_aa: bool
) -> Row:
    # with short runs, the CPU target is judged on the per-transaction
    # figure (the per-run constant cancelled, shown apart); without, on the
    # whole run's CPU over its transactions
    cpu = s.cpu if math.isnan(s.cpu_net.median) else s.cpu_net
    if is_aa:
        target, met = "noise band (A/A)", "–"
        name = f"{AA_CASE} (pgbench/pgbench, {case.name})"
    else:
        checks: list[tuple[str, bool | None]] = []
        parts = []
        if case.cpu_max is not None:
            parts.append(f"CPU ≤ {case.cpu_max}")
            checks.append(("cpu", at_most(cpu.median, case.cpu_max)))
        if case.accuracy is not None:
            parts.append(f"lat & lag ±{case.accuracy:.0%}")
            checks.append(("lat", within(s.latency.median, 1.0, case.accuracy)))
            checks.append(("lag", within(s.lag.median, 1.0, case.accuracy)))
        else:
            parts.append(f"tps ≥ {TPS_FLOOR} & in A/A band")
            checks.append(("tps", tps_verdict(s.tps, TPS_FLOOR, aa and aa.tps)))
        target, met = "; ".join(parts), verdict_text(*checks)
        if aa is not None and checks and checks[0] == ("cpu", False):
            # a CPU ratio inside the control's own band is not a difference
            band = aa.cpu if cpu is s.cpu else aa.cpu_net
            if not math.isnan(band.high) and cpu.median <= max(band.high, 1.0):
                met += " (CPU inside the A/A band)"
    return Row(
        (
            name,
            fmt(s.tps.median, 3),
            fmt_range(s.tps.low, s.tps.high, 3),
            fmt(s.cand_cpu_us, 1),
            fmt(s.ref_cpu_us, 1),
            _with_range(s.cpu, 3) if is_aa else fmt(s.cpu.median, 3),
            _with_range(s.cpu_net, 3) if is_aa else fmt(s.cpu_net.median, 3),
            f"{fmt(s.cand_startup_ms, 0)} / {fmt(s.ref_startup_ms, 0)}",
            target,
            met,
        )
    )


def _with_range(r: RatioStats, digits: int = 2) -> str:
    """The median ratio and, in parentheses, the per-pair range."""
    if math.isnan(r.median):
        return "–"
    return f"{fmt(r.median, 3)} ({fmt_range(r.low, r.high, digits)})"


def _accuracy_rows(name: str, tol: float, s: PairedSummary) -> list[Row]:
    band = f"ratio {1 - tol:.2f}–{1 + tol:.2f}"
    return [
        Row(
            (
                f"{name}: latency average (ms)",
                fmt(s.cand_latency_ms, 3),
                fmt(s.ref_latency_ms, 3),
                _with_range(s.latency),
                band,
                verdict_text(("lat", within(s.latency.median, 1.0, tol))),
            )
        ),
        Row(
            (
                f"{name}: schedule lag average (ms)",
                fmt(s.cand_lag_ms, 3),
                fmt(s.ref_lag_ms, 3),
                _with_range(s.lag),
                band,
                verdict_text(("lag", within(s.lag.median, 1.0, tol))),
            )
        ),
    ]


def _memory_rows(r: dict[str, Any]) -> list[Row]:
    n = r["clients"]
    runs = {x["tool"]: x for x in r["runs"]}
    cand, ref = runs.get(PGSURGE, {}), runs.get(PGBENCH, {})

    def per_client(x: dict[str, Any], key: str) -> float | None:
        v = x.get(key)
        return v / n if v else None

    rows = [
        Row(
            (
                f"-c {n} -j 2 `SELECT 1`: tps",
                fmt(cand.get("tps"), 0),
                fmt(ref.get("tps"), 0),
                fmt(ratio(cand.get("tps"), ref.get("tps"))),
                "–",
                "–",
            )
        )
    ]
    for key, label in (("peak_rss_kib", "RSS"), ("peak_pss_kib", "PSS")):
        c, p = per_client(cand, key), per_client(ref, key)
        runs_ok = cand.get("returncode") == 0 and cand.get("error") is None
        rows.append(
            Row(
                (
                    f"-c {n} -j 2 peak {label} per client (KiB)",
                    fmt(c, 1),
                    fmt(p, 1),
                    fmt(ratio(c, p)),
                    "runs; reported",
                    "yes" if runs_ok else f"no (exit {cand.get('returncode')})",
                )
            )
        )
    return rows


def _init_rows(r: dict[str, Any], jobs: int) -> list[Row]:
    summ = r["summary"]
    base = summ[PGBENCH]["wall_median_s"]
    rows = []
    for name, s in summ.items():
        if name == PGBENCH:
            continue
        with_jobs = "--init-jobs" in name
        target = "≤ 0.7" if with_jobs else "–"
        met = (
            verdict_text(("wall", at_most(s["wall_ratio_median"], 0.7)))
            if with_jobs
            else "–"
        )
        label = f"`-i -s {r['scale']}`" + (
            f" `--init-jobs {jobs}`" if with_jobs else ""
        )
        rows.append(
            Row(
                (
                    f"{label} wall, median (s)",
                    fmt(s["wall_median_s"]),
                    fmt(base),
                    fmt(s["wall_ratio_median"]),
                    target,
                    met,
                )
            )
        )
    return rows


def render(res: dict[str, dict[str, Any]], summaries: dict[str, PairedSummary]) -> str:
    """Print both tables, then their Markdown; return the Markdown."""
    main, other = build_rows(res, summaries)
    md = []
    if main:
        md.append(markdown_table(MAIN_HEADER, main))
    if other:
        md.append(markdown_table(OTHER_HEADER, other))
    print()
    if main:
        print(text_table(MAIN_HEADER, main))
        print()
    if other:
        print(text_table(OTHER_HEADER, other))
        print()
    print("Markdown:\n")
    text = "\n\n".join(md)
    print(text)
    return text
