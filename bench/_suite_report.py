"""Tables for bench/suite.py: rows of finished results, as text or Markdown.

Rendering is a pure function of the rows: the suite builds :class:`Row`
values from its summaries, then prints them twice (an aligned table for the
terminal, a pipe table to paste into the README).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAIN_HEADER = (
    "case",
    "tps ratio",
    "per-pair min–max",
    "CPU/tx pgsurge µs",
    "CPU/tx pgbench µs",
    "CPU ratio",
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
