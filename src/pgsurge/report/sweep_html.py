"""The HTML page of a sweep: tps and p99 against the swept variable.

``render_sweep_html(doc)`` is a pure function of the sweep's JSON document
(``pgsurge sweep --json``: ``kind`` ``pgsurge-sweep-result``) and gives one
self-contained page, inline like ``html.py``'s (the vendored uPlot, no
request leaves the page, the data embedded once as escaped JSON):

* the x axis is the first ``--vary`` spec (a log-2 axis when it is ``-c``
  or ``--client``; a categorical axis of positions when its values are not
  numbers); every combination of the other specs and every arm is a line
  of medians with its interval band (the cell's ``tps.ci``) and a dot per
  run;
* one chart of tps and one of p99 (a log axis), and with ``-R`` varied, the
  same p99 chart reads as latency against offered rate (``capacity``'s
  page, which draws its latency target there as a dashed line);
* the knees as a table under the charts, and the cells as the text
  table's rows (static HTML: the numbers need no script).

When every chart is drawn the script sets ``window.pgsurgeReady`` and
``window.pgsurgeCharts`` (their number), as the run report does.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from pgsurge.redact import redact_text
from pgsurge.report.html import _vendor, embed_json, redact

__all__ = ["render_sweep_html", "sweep_chart_data"]

_LOG2_OPTIONS = ("-c", "--client")
_COLORS = ("#1f6feb", "#d9480f", "#2f9e44", "#7048e8", "#e8590c", "#0c8599")


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def sweep_chart_data(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the charts draw: the x positions and labels, and per line
    (arm × other values) the median, interval and per-run values of tps
    and p99 at each x."""
    vary = doc["vary"]
    first = vary[0]
    label = "SET " + first["name"] if first["kind"] == "setting" else first["name"]
    xs_raw = list(first["values"])
    nums = [_num(v) for v in xs_raw]
    numeric = all(n is not None for n in nums)
    xs = (
        [float(n) for n in nums if n is not None]
        if numeric
        else list(range(len(xs_raw)))
    )
    others = [v for v in vary[1:]]
    lines: dict[str, dict[str, Any]] = {}
    for cell in doc["cells"]:
        values = cell["values"]
        xi = xs_raw.index(values[label])
        rest = ", ".join(
            f"{'SET ' + o['name'] if o['kind'] == 'setting' else o['name']} "
            f"{values['SET ' + o['name'] if o['kind'] == 'setting' else o['name']]}"
            for o in others
        )
        for arm, a in cell["arms"].items():
            name = arm + (f" ({rest})" if rest else "")
            line = lines.setdefault(
                name,
                {
                    "name": name,
                    "arm": arm,
                    **{
                        f"{m}_{k}": [None] * len(xs)
                        for m in ("tps", "p99")
                        for k in ("median", "low", "high")
                    },
                    "tps_runs": [[] for _ in xs],
                    "p99_runs": [[] for _ in xs],
                },
            )
            tps, p99 = a["tps"], a["p99_ms"]
            line["tps_median"][xi] = tps["median"]
            if tps.get("ci"):
                line["tps_low"][xi], line["tps_high"][xi] = tps["ci"]
            line["p99_median"][xi] = p99["median"]
            if len(p99["values"]) >= 2:
                line["p99_low"][xi] = min(p99["values"])
                line["p99_high"][xi] = max(p99["values"])
            line["tps_runs"][xi] = list(tps["values"])
            line["p99_runs"][xi] = list(p99["values"])
    for i, line in enumerate(lines.values()):
        line["color"] = _COLORS[i % len(_COLORS)]
        line["knee"] = None
    # the knees lie on the x axis when it is the client count
    for knee in doc.get("knees") or [] if first["name"] in _LOG2_OPTIONS else []:
        where = ", ".join(f"{k} {v}" for k, v in (knee.get("where") or {}).items())
        name = knee["arm"] + (f" ({where})" if where else "")
        if name in lines and knee["clients"] in xs:
            lines[name]["knee"] = xs.index(knee["clients"])
    return {
        "x": xs,
        "x_labels": xs_raw,
        "x_label": label,
        "numeric": numeric,
        "log2": numeric and first["name"] in _LOG2_OPTIONS and min(xs) > 0,
        "lines": list(lines.values()),
    }


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _table(doc: Mapping[str, Any]) -> str:
    labels = [
        "SET " + v["name"] if v["kind"] == "setting" else v["name"] for v in doc["vary"]
    ]
    arms = list(doc["cells"][0]["arms"]) if doc["cells"] else []
    head = [*labels]
    for a in arms:
        head += [f"{a} tps", f"{a} 95 % CI", f"{a} p99 ms"]
    two = len(arms) == 2
    if two:
        head += ["B/A tps", "verdict"]
    rows = []
    for cell in doc["cells"]:
        row = [str(cell["values"][lab]) for lab in labels]
        for a in arms:
            c = cell["arms"][a]
            ci = c["tps"]["ci"]
            row += [
                _fmt(c["tps"]["median"]),
                f"{_fmt(ci[0])}–{_fmt(ci[1])}" if ci else "–",
                _fmt(c["p99_ms"]["median"]),
            ]
        if two:
            comp = cell.get("comparison") or {}
            tps = (comp.get("metrics") or [{}])[0]
            ratio = tps.get("ratio")
            row += [
                f"{(ratio - 1) * 100:+.1f} %" if ratio else "–",
                str(comp.get("verdict") or "–"),
            ]
        rows.append(row)
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return (
        f'<table class="num"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
    )


def _fmt(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}".replace(",", " ")
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:#.3g}"


def _knees(doc: Mapping[str, Any]) -> str:
    items = []
    for k in doc.get("knees") or []:
        where = ", ".join(f"{a} {b}" for a, b in (k.get("where") or {}).items())
        lo, hi = k["range"]
        who = f"{k['arm']}{' (' + where + ')' if where else ''}"
        if k.get("clients") is None:  # open-ended: tps still grew at the end
            text = (
                f"{who}: no knee up to {k['peak_clients']:g} clients (tps still "
                f"grew at the last point: {_fmt(k['peak_tps'])} tps)"
            )
        else:
            text = (
                f"{who}: knee at {k['clients']:g} clients (range {lo:g}–{hi:g}), "
                f"peak {_fmt(k['peak_tps'])} tps at {k['peak_clients']:g}"
            )
        if k.get("client_limited"):
            text += " — the client was busy at or after it: maybe the client's knee"
        items.append(f"<li>{_esc(text)}</li>")
    return f"<h2>Knee</h2><ul>{''.join(items)}</ul>" if items else ""


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>{{title}}</title>
<style>{{uplot_css}}</style>
<style>
body { font: 14px/1.45 system-ui, sans-serif; color: #1d2330; margin: 0 auto;
       padding: 16px 24px 48px; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #d9dde4; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #d9dde4; padding: 3px 12px 3px 0; text-align: left; }
.chart { min-height: 340px; }
.note { color: #5d6675; font-size: 12px; }
</style>
</head>
<body>
<h1>{{title}}</h1>
<p class="note">{{note}}</p>
<p>{{legend}}</p>
<h2>Throughput</h2><div class="chart" id="chart-tps"></div>
<h2>{{latency}} latency</h2><div class="chart" id="chart-p99"></div>
{{knees}}
<h2>Grid</h2>{{table}}
<script type="application/json" id="pgsurge-data">{{data}}</script>
<script type="application/json" id="pgsurge-latency">{{latency_json}}</script>
<script>{{uplot_js}}</script>
<script>{{app_js}}</script>
</body>
</html>
"""


def render_sweep_html(
    doc: Mapping[str, Any],
    title: str | None = None,
    latency: str = "p99",
    target_ms: float | None = None,
) -> str:
    """The page of a sweep's JSON document (``latency``: what its
    ``p99_ms`` figures are, for the headings: ``capacity`` draws its
    target's percentile there, and ``target_ms``, its target, as a line)."""
    safe = redact(doc)
    common = " ".join(str(w) for w in safe.get("common") or [])
    vary = "; ".join(
        f"{v['name']} {','.join(v['values'])}" for v in safe.get("vary") or []
    )
    page_title = redact_text(title or f"pgsurge sweep: {vary}")
    lines: Sequence[Any] = sweep_chart_data(safe)["lines"]
    note = (
        f"common arguments: {common or '(none)'}; lines: median of the runs, band: "
        f"the {safe.get('confidence', 0.95) * 100:g} % interval of tps (p99: the "
        f"runs' range), dots: each run, rings: the knee; {len(lines)} line(s)"
    )
    if target_ms is not None:
        note += f"; dashed red line: the latency target ({target_ms:g} ms)"
    values = {
        "title": _esc(page_title),
        "note": _esc(note),
        "uplot_css": _vendor("uPlot.min.css"),
        "uplot_js": _vendor("uPlot.iife.min.js").replace("</script", "<\\/script"),
        "app_js": resources.files("pgsurge.report")
        .joinpath("sweep_html.js")
        .read_text("utf-8"),
        "knees": _knees(safe),
        "latency": _esc(latency),
        "latency_json": embed_json({"label": latency, "target_ms": target_ms}),
        "legend": " ".join(
            f'<span style="color:{line["color"]}">&#9632; {_esc(line["name"])}</span>'
            for line in lines
        ),
        "table": _table(safe),
        "data": embed_json({"chart": sweep_chart_data(safe), "sweep": safe}),
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], _PAGE)
