"""``pgsurge report --history … -o trend.html``: a workload's history as a page.

The same selection and change points as ``pgsurge history`` (the same
options: ``--store``, ``--label``, ``--metric``, ``--workload``), drawn as
a self-contained page: the metric run after run (an inline SVG, no
script), each change point a dashed line with its size, each run a point
that links to the run's own report. The runs' reports are written beside
the page, in ``<page name>-runs/run-<id>.html`` (``report/html.py``, as
``pgsurge report RESULT.json`` would draw them); with ``-o -`` the page
goes to stdout and the points link nowhere.
"""

from __future__ import annotations

import html
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from pgsurge.errors import PgsurgeError
from pgsurge.report.command import write_html
from pgsurge.report.html import RunDoc, render_html
from pgsurge.store.history import History, describe_change

__all__ = ["render_trend", "write_trend"]

_W, _H, _PAD = 900, 320, 56


def _x_label(h: History, i: int) -> str:
    run = h.rows[i].run
    commit = run.labels.get("commit")
    return f"{run.id}" + (f" {commit}" if commit else "")


def _svg(h: History, links: Sequence[str | None]) -> str:
    points = [(i, r.value) for i, r in enumerate(h.rows) if r.value is not None]
    if not points:
        return "<p>No run has this metric.</p>"
    lo = min(v for _, v in points)
    hi = max(v for _, v in points)
    span = (hi - lo) or abs(hi) or 1.0
    lo, hi = lo - 0.1 * span, hi + 0.1 * span
    n = max(len(h.rows) - 1, 1)

    def x(i: float) -> float:
        return _PAD + (_W - 2 * _PAD) * i / n

    def y(v: float) -> float:
        return _H - _PAD - (_H - 2 * _PAD) * (v - lo) / (hi - lo)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" role="img">',
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" '
        'stroke="#888"/>',
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#888"/>',
    ]
    parts.extend(
        f'<text x="{_PAD - 6}" y="{y(v):.1f}" text-anchor="end" '
        f'font-size="11">{v:.4g}</text>'
        for v in (lo + 0.1 * span, hi - 0.1 * span)
    )
    series_index = {r.run.id: i for i, r in enumerate(h.rows)}
    for c in h.changes:
        i = series_index[h.series_rows[c.index].run.id] - 0.5
        parts.append(
            f'<line class="change" x1="{x(i):.1f}" y1="{_PAD}" x2="{x(i):.1f}" '
            f'y2="{_H - _PAD}" stroke="#c0392b" stroke-dasharray="5,4"/>'
            f'<text x="{x(i) + 4:.1f}" y="{_PAD - 8}" font-size="12" '
            f'fill="#c0392b">{c.change * 100:+.1f} %</text>'
        )
    path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in points)
    parts.append(f'<polyline points="{path}" fill="none" stroke="#2c6fbb"/>')
    for i, v in points:
        dot = (
            f'<circle class="run" cx="{x(i):.1f}" cy="{y(v):.1f}" r="4" '
            f'fill="#2c6fbb"><title>run {html.escape(_x_label(h, i))}: '
            f"{v:.4g}</title></circle>"
        )
        link = links[i]
        parts.append(f'<a href="{html.escape(link)}">{dot}</a>' if link else dot)
        if len(h.rows) <= 40:
            parts.append(
                f'<text x="{x(i):.1f}" y="{_H - _PAD + 16}" font-size="10" '
                f'text-anchor="middle">{html.escape(_x_label(h, i))}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def render_trend(
    h: History, links: Sequence[str | None], warnings: Sequence[str] = ()
) -> str:
    """The page (see the module doc); ``links[i]`` is row i's report."""
    unit = f" ({h.metric.unit})" if h.metric.unit else ""
    rows = []
    for row, link in zip(h.rows, links, strict=True):
        r = row.run
        run = f'<a href="{html.escape(link)}">{r.id}</a>' if link else str(r.id)
        labels = " ".join(f"{k}={v}" for k, v in sorted(r.labels.items()))
        value = "-" if row.value is None else f"{row.value:.4g}"
        rows.append(
            f"<tr><td>{run}</td><td>{html.escape(r.started_at or r.stored_at)}</td>"
            f"<td>{value}</td><td>{html.escape(row.excluded or '')}</td>"
            f"<td>{html.escape(labels)}</td></tr>"
        )
    changes = "".join(
        f"<li>{html.escape(describe_change(h, c))}</li>" for c in h.changes
    )
    notes = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    title = f"pgsurge history: {h.metric.label}, workload {h.workload_key}"
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{padding:2px 10px;text-align:left}tr:nth-child(even){background:#f4f4f4}"
        "</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"{_svg(h, links)}"
        f"<h2>Change points</h2><ul>{changes or '<li>none</li>'}</ul>"
        + (f"<h2>Environment changes</h2><ul>{notes}</ul>" if notes else "")
        + f"<h2>Runs, newest last</h2><table><tr><th>run</th><th>start</th>"
        f"<th>{html.escape(h.metric.label + unit)}</th><th></th><th>labels</th>"
        f"</tr>{''.join(rows)}</table></body></html>\n"
    )


def _runs_folder(folder: Path) -> None:
    """The folder of the runs' pages: made 0700, or an existing directory
    of ours. The page may go into a directory another user can write to:
    a symbolic link of theirs planted at ``<page>-runs`` (or a directory
    of theirs there) had root's pages written wherever they liked, as a
    link at an output file would (``report.output`` refuses that one)."""
    try:
        folder.mkdir(mode=0o700)
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise PgsurgeError(
            f'could not create "{folder}": {exc.strerror or exc}'
        ) from None
    from pgsurge.server.safedir import user_name

    try:
        link = os.lstat(folder)
        st = os.stat(folder)
    except OSError as exc:
        raise PgsurgeError(f'could not use "{folder}": {exc.strerror or exc}') from None
    mine = {0, os.geteuid()}
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in mine:
        raise PgsurgeError(
            f'refusing to write the runs\' reports into "{folder}": it is a '
            f'symbolic link owned by "{user_name(link.st_uid)}"'
        )
    if not stat.S_ISDIR(st.st_mode):
        raise PgsurgeError(f'could not use "{folder}": it is not a directory')
    if st.st_uid != os.geteuid():
        raise PgsurgeError(
            f'refusing to write the runs\' reports into "{folder}": it is '
            f'owned by "{user_name(st.st_uid)}"'
        )


def write_trend(
    h: History, output: str, warnings: Sequence[str], stdout: TextIO
) -> None:
    """The page at ``output`` and the runs' reports beside it."""
    links: list[str | None] = [None] * len(h.rows)
    if output != "-":
        page = Path(output)
        folder = page.with_name(page.stem + "-runs")
        _runs_folder(folder)
        for i, row in enumerate(h.rows):
            name = f"run-{row.run.id}.html"
            label = f"run {row.run.id}"
            write_html(render_html([RunDoc(label, row.run.doc)]), str(folder / name))
            links[i] = os.path.join(folder.name, name)
    write_html(render_trend(h, links, warnings), output, stdout)
