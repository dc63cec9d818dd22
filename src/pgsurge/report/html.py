"""The self-contained HTML report: loaded ``--json`` documents → one page.

``render_html`` is a pure function of result documents (as ``json.load``
returns them: a report never sees live objects) and gives the text of one
HTML file that opens offline in any browser:

* everything is inline: the vendored uPlot build (``vendor/``, MIT, see
  ``tools/vendor_uplot.sh``), the page's own script (``html_report.js``)
  and css (``html_template.html``); no request leaves the page (no CDN, no
  web font, no image);
* the data are embedded once, in ``<script type="application/json"
  id="pgsurge-data">``: the runs' documents with absolute paths shortened
  (see ``redact``) plus what is derived here, the latency percentile curves
  decoded from the encoded histograms. In the JSON text ``<``, ``>``, ``&``
  and U+2028/U+2029 are written as ``\\uXXXX`` escapes, so that no script
  name or SQL text can end the element or the script (``JSON.parse``
  restores them);
* every table is rendered here, as static HTML that needs no script; the
  script only draws the charts into their placeholders, and a
  ``<noscript>`` block holds the per-interval table in their place;
* sections whose data are absent are left out (percentile curves without
  histograms, per-command tables without ``-r``, ...); keys this module does
  not know, such as ``waits`` and ``server_stats`` (issue 13), are shown as
  generic tables, and ``waits.events`` (a list of ``{type, event, share}``)
  as a top-10 table.

Several runs per side (``pgsurge report A1.json A2.json --vs B1.json``)
draw faint per-run lines and a bold median per side, a dot plot of each
run's tps with the interval of each side's mean (server-side SVG), and the
verdict card of ``verdict.compare_tps``.
"""

from __future__ import annotations

import html
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from pgsurge.report.verdict import DEFAULT_THRESHOLD, Verdict, compare_tps
from pgsurge.stats.histogram import Histogram

__all__ = [
    "DATA_ELEMENT_ID",
    "RunDoc",
    "command_line",
    "embed_json",
    "percentile_curve",
    "redact",
    "render_html",
]

DATA_ELEMENT_ID = "pgsurge-data"
#: the format of the embedded data object (not the result schema)
DATA_FORMAT = 1
#: the charts' highest "nines" (99.9999%): beyond, histograms say little
_MAX_NINES = 6.0
_NINES_STEP = 0.05
#: the noscript interval table shows at most this many rows (groups beyond)
_MAX_TABLE_ROWS = 120
_KNOWN_KEYS = frozenset(
    {
        "schema",
        "tool",
        "server",
        "start",
        "end",
        "duration_s",
        "initial_connection_time_ms",
        "connection_time_total_ms",
        "config",
        "run",
        "totals",
        "scripts",
        "intervals",
        "histograms",
        "client_cpu",
        "aborted",
        "aborted_clients",
        "clients_finished",
        "abort_messages",
    }
)
# an absolute path: at least two components, not part of a URL or a word
_ABS_PATH = re.compile(r"(?<![\w.:/~-])/(?:[\w.@%+~-]+/)+([\w.@%+~-]*)")


@dataclass(frozen=True, slots=True)
class RunDoc:
    """One result document to render, with its label (e.g. the file name)
    and side: ``"A"`` (the base, or the only side) or ``"B"`` (``--vs``)."""

    label: str
    doc: Mapping[str, Any]
    side: str = "A"


# -- data --------------------------------------------------------------------


def redact(value: Any) -> Any:
    """A copy with every absolute path in a string shortened to ``…/last``.

    A report goes into mails and tickets: it must not show the machine's
    directories (the embedded server's socket directory, a script's full
    path, a venv in an error message). Encoded histograms (objects with an
    ``encoding``) are kept as they are: their base64 is not a path.
    """
    if isinstance(value, str):
        return _ABS_PATH.sub(r"…/\1", value)
    if isinstance(value, Mapping):
        if "encoding" in value:
            return dict(value)
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def embed_json(data: Any) -> str:
    """JSON text that is safe inside a ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _hist(doc: Mapping[str, Any]) -> Histogram | None:
    hists = doc.get("histograms")
    if not isinstance(hists, Mapping) or not isinstance(hists.get("latency"), Mapping):
        return None
    try:
        hist = Histogram.from_dict(dict(hists["latency"]))
    except (ValueError, KeyError, TypeError):
        return None
    return hist if hist.count else None


def nines(p: float) -> float:
    """The position of percentile ``p`` on the "nines" axis: 90 → 1, 99 → 2."""
    return -math.log10(1 - p / 100) if p < 100 else _MAX_NINES


def percentile_curve(doc: Mapping[str, Any]) -> dict[str, list[float]] | None:
    """Latency percentiles (ms) on a grid of the nines axis, from the run's
    latency histogram: ``{"x": [nines...], "ms": [...]}``, up to the rank of
    the single slowest transaction (at most 99.9999%), then the maximum."""
    hist = _hist(doc)
    if hist is None:
        return None
    top = min(_MAX_NINES, math.log10(hist.count))
    xs = [round(i * _NINES_STEP, 6) for i in range(int(top / _NINES_STEP) + 1)]
    xs = [x for x in xs if x < top - 1e-9]
    ps = [100 * (1 - 10**-x) for x in xs]
    # the last point: the maximum, at the rank of the slowest transaction
    xs.append(round(top, 6))
    ps.append(100.0)
    values = hist.percentiles(ps)
    return {"x": xs, "ms": [v / 1000.0 for v in values]}


# -- figures -------------------------------------------------------------------


def _g(m: Any, *keys: str) -> Any:
    """``m[k1][k2]...``, or None as soon as a level is missing."""
    for k in keys:
        if not isinstance(m, Mapping):
            return None
        m = m.get(k)
    return m


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def fmt(x: Any, digits: int = 3) -> str:
    """A number for a table: ``–`` when absent; thousands separated."""
    v = _num(x)
    if v is None:
        return "–"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}".replace(",", "\u2009")
    if v != 0 and abs(v) < 10 ** (-digits):
        return f"{v:.{digits}g}"
    return f"{v:,.{digits}f}".replace(",", "\u2009")


def _pct(x: Any, digits: int = 1) -> str:
    v = _num(x)
    return "–" if v is None else f"{100 * v:.{digits}f}%"


def _tps(doc: Mapping[str, Any]) -> float | None:
    return _num(_g(doc, "totals", "tps"))


def command_line(doc: Mapping[str, Any]) -> str:
    """An equivalent pgsurge command line rebuilt from the recorded settings
    (the document keeps no argv; it never holds a password)."""
    cfg = doc.get("config") or {}
    words = ["pgsurge"]
    if cfg.get("embedded_server"):
        words.append("--embedded")
    scripts = cfg.get("scripts") or []
    default = (
        len(scripts) == 1
        and scripts[0].get("builtin")
        and scripts[0].get("name") == "tpcb-like"
        and scripts[0].get("weight") == 1
    )
    if not default:
        for s in scripts:
            opt = "-b" if s.get("builtin") else "-f"
            words.append(f"{opt} {s.get('name')}@{s.get('weight')}")
    simple: list[tuple[str, Any]] = [
        ("-c", cfg.get("clients")),
        ("-j", cfg.get("jobs")),
        ("-T", cfg.get("duration_s")),
        ("-t", cfg.get("transactions")),
        ("-R", cfg.get("rate")),
        ("-L", cfg.get("latency_limit_ms")),
        ("-P", cfg.get("progress_s") or None),
        ("--sampling-rate", cfg.get("sampling_rate")),
        ("--aggregate-interval", cfg.get("aggregate_interval_s")),
    ]
    words.extend(f"{opt} {_plain(v)}" for opt, v in simple if v is not None)
    mode = cfg.get("query_mode")
    if mode and mode != "simple":
        words.append(f"-M {mode}")
    if cfg.get("max_tries") not in (None, 1):
        words.append(f"--max-tries {cfg.get('max_tries')}")
    flags = [
        ("connect_each_tx", "-C"),
        ("log", "-l"),
        ("report_per_command", "-r"),
        ("failures_detailed", "--failures-detailed"),
        ("continue_on_error", "--continue-on-error"),
        ("exit_on_abort", "--exit-on-abort"),
    ]
    words.extend(opt for key, opt in flags if cfg.get(key))
    if cfg.get("random_seed") is not None:
        words.append(f"--random-seed {cfg.get('random_seed')}")
    for name, value in (cfg.get("defines") or {}).items():
        words.append(f"-D {_shell_quote(f'{name}={value}')}")
    if cfg.get("percentiles"):
        words.append("--percentiles=" + ",".join(_plain(p) for p in cfg["percentiles"]))
    conn = cfg.get("conn") or {}
    for opt, key in (("-h", "host"), ("-p", "port"), ("-U", "user")):
        if conn.get(key) and not cfg.get("embedded_server"):
            words.append(f"{opt} {_shell_quote(str(conn[key]))}")
    if conn.get("dbname") and not cfg.get("embedded_server"):
        words.append(_shell_quote(str(conn["dbname"])))
    return " ".join(words)


def _plain(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def _shell_quote(s: str) -> str:
    if s and re.fullmatch(r"[\w@%+=:,./…-]+", s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


# -- HTML helpers ------------------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    cls: str = "",
    raw: bool = False,
) -> str:
    """A table; cells are escaped unless ``raw`` (already HTML)."""
    cell = (lambda c: c) if raw else _e
    out = [f'<table class="{cls}">' if cls else "<table>", "<thead><tr>"]
    out.extend(f"<th>{_e(h)}</th>" for h in head)
    out.append("</tr></thead><tbody>")
    out.extend(
        "<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    out.append("</tbody></table>")
    return "".join(out)


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in pairs if v is not None
    )
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def _section(title: str, body: str, sid: str) -> str:
    return f'<section id="{_e(sid)}"><h2>{_e(title)}</h2>{body}</section>'


def _chart(name: str, title: str, note: str = "") -> str:
    """A placeholder the page's script fills with a uPlot chart."""
    small = f'<p class="note">{_e(note)}</p>' if note else ""
    return (
        f'<figure class="chart"><figcaption>{_e(title)}</figcaption>'
        f'<div class="plot" data-chart="{_e(name)}"></div>{small}</figure>'
    )


# -- sections ----------------------------------------------------------------------


def _lat(summary: Any, key: str) -> Any:
    if not isinstance(summary, Mapping):
        return None
    if key in ("avg", "max", "min", "stddev"):
        return summary.get(key)
    return _g(summary, "percentiles", key)


def _header(run: RunDoc) -> str:
    doc = run.doc
    conn = _g(doc, "config", "conn") or {}
    dbname = str(conn.get("dbname") or "")
    if _g(doc, "config", "embedded_server"):
        target = "embedded server"
    elif "=" in dbname or "://" in dbname:
        target = dbname  # a conninfo string or a URI, as libpq expands it
    else:
        target = " ".join(f"{k}={v}" for k, v in conn.items() if v)
    pairs = [
        ("command (equivalent)", command_line(doc)),
        ("tool", f"{_g(doc, 'tool', 'name')} {_g(doc, 'tool', 'version')}"),
        ("server", f"PostgreSQL {_g(doc, 'server', 'version')}"),
        ("target", target or None),
        ("start (UTC)", doc.get("start")),
        ("end (UTC)", doc.get("end")),
        ("duration", f"{fmt(doc.get('duration_s'))} s"),
        ("scale", _g(doc, "run", "scale")),
        (
            "clients / threads",
            f"{_g(doc, 'run', 'clients')} / {_g(doc, 'run', 'threads')}",
        ),
    ]
    return _kv(pairs)


def _summary_row(run: RunDoc) -> list[str]:
    t = run.doc.get("totals") or {}
    lat = t.get("latency_ms")
    return [
        run.label,
        run.side,
        fmt(t.get("tps"), 1),
        fmt(t.get("transactions")),
        fmt(t.get("failed")),
        fmt(_lat(lat, "avg")),
        fmt(_lat(lat, "50")),
        fmt(_lat(lat, "99")),
        fmt(_lat(lat, "max")),
        str(run.doc.get("start") or "–"),
    ]


_SUMMARY_HEAD = (
    "run",
    "side",
    "tps",
    "transactions",
    "failed",
    "avg ms",
    "p50 ms",
    "p99 ms",
    "max ms",
    "start (UTC)",
)


def _scripts_table(doc: Mapping[str, Any]) -> str:
    scripts = doc.get("scripts") or []
    if not scripts:
        return ""
    totals = doc.get("totals") or {}
    rows = []
    for i, s in enumerate(scripts):
        src = s if "transactions" in s else (totals if len(scripts) == 1 else {})
        lat = src.get("latency_ms")
        rows.append(
            [
                str(i + 1),
                s.get("desc", ""),
                str(s.get("weight", "")),
                fmt(src.get("transactions")),
                fmt(src.get("tps"), 1),
                fmt(src.get("failed")),
                fmt(src.get("retried")),
                fmt(_lat(lat, "avg")),
                fmt(_lat(lat, "50")),
                fmt(_lat(lat, "90")),
                fmt(_lat(lat, "99")),
                fmt(_lat(lat, "max")),
            ]
        )
    counts = ("#", "script", "weight", "transactions", "tps", "failed", "retried")
    times = ("avg ms", "p50 ms", "p90 ms", "p99 ms", "max ms")
    return _table((*counts, *times), rows, cls="num")


def _commands_table(doc: Mapping[str, Any]) -> str:
    rows = []
    for i, s in enumerate(doc.get("scripts") or []):
        for c in s.get("commands") or []:
            lat = c.get("latency_ms")
            if lat is None and not c.get("failures") and not c.get("retries"):
                continue
            rows.append(
                [
                    str(i + 1),
                    f"<code>{_e(c.get('line', ''))}</code>",
                    fmt(lat.get("count") if isinstance(lat, Mapping) else None),
                    fmt(_lat(lat, "avg")),
                    fmt(_lat(lat, "50")),
                    fmt(_lat(lat, "99")),
                    fmt(_lat(lat, "max")),
                    fmt(c.get("failures")),
                    fmt(c.get("retries")),
                ]
            )
    if not rows:
        return ""
    head = ("script", "command", "count", "avg ms", "p50 ms", "p99 ms", "max ms")
    return _table((*head, "failures", "retries"), rows, cls="num cmd", raw=True)


_FAILURE_KINDS = (
    ("serialization_failures", "serialization failure", "40001"),
    ("deadlock_failures", "deadlock", "40P01"),
    ("other_failures", "other SQL error (--continue-on-error)", "various"),
)


def _errors(doc: Mapping[str, Any]) -> str:
    t = doc.get("totals") or {}
    rows = [
        [label, code, fmt(t.get(key))]
        for key, label, code in _FAILURE_KINDS
        if t.get(key)
    ]
    for key, label in (
        ("skipped", "skipped (late for -L under -R)"),
        ("latency_late", "late (over -L)"),
    ):
        if t.get(key):
            rows.append([label, "–", fmt(t.get(key))])
    body = ""
    if rows:
        body += _table(("kind", "SQLSTATE", "transactions"), rows, cls="num")
    if t.get("retried"):
        body += (
            f"<p>{fmt(t.get('retried'))} transactions were retried "
            f"({fmt(t.get('retries'))} retries).</p>"
        )
    aborted = doc.get("aborted_clients") or 0
    messages = doc.get("abort_messages") or []
    if aborted or doc.get("aborted") or messages:
        body += f'<p class="bad">{_e(aborted)} client(s) aborted.</p>'
        if messages:
            body += (
                '<ul class="msgs">'
                + "".join(f"<li><code>{_e(m)}</code></li>" for m in messages[:50])
                + "</ul>"
            )
    return body or '<p class="good">No failures, retries or aborts.</p>'


def _cpu(doc: Mapping[str, Any]) -> str:
    cpu = doc.get("client_cpu")
    if not isinstance(cpu, Mapping):
        return ""
    workers = cpu.get("workers") or []
    busiest = max(
        workers, key=lambda w: _num(w.get("busy_fraction")) or 0.0, default=None
    )
    if cpu.get("client_limited"):
        verdict = (
            '<p class="bad verdict-line">Client-limited: a worker was busy more '
            "than 90% of the run, so the figures measure the client as much as "
            "the server (try more -j, or more client machines).</p>"
        )
    else:
        top = _pct(busiest.get("busy_fraction")) if busiest else "–"
        verdict = (
            '<p class="good verdict-line">Not client-limited '
            f"(busiest worker {top} busy).</p>"
        )
    rows = [
        [
            str(w.get("worker_id")),
            fmt(w.get("user_s")),
            fmt(w.get("sys_s")),
            fmt((_num(w.get("wall_us")) or 0) / 1e6),
            _pct(w.get("utilisation")),
            _pct(w.get("busy_fraction")) if (_num(w.get("idle_us")) or 0) >= 0 else "–",
        ]
        for w in workers
    ]
    total = (
        f"<p>Client CPU: user {fmt(cpu.get('user_s'))} s, sys "
        f"{fmt(cpu.get('sys_s'))} s, {fmt(cpu.get('us_per_transaction'), 1)} µs "
        "per transaction.</p>"
    )
    head = ("worker", "user s", "sys s", "wall s", "CPU", "busy")
    return verdict + total + _table(head, rows, cls="num")


def _flatten(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, Mapping):
        if not value:
            yield prefix, "{}"
        for k, v in value.items():
            yield from _flatten(f"{prefix}.{k}" if prefix else str(k), v)
    elif isinstance(value, list):
        if value and all(isinstance(v, Mapping) for v in value):
            for i, v in enumerate(value):
                yield from _flatten(f"{prefix}[{i}]", v)
        else:
            yield prefix, ", ".join(_plain(v) for v in value) if value else "[]"
    else:
        yield prefix, _plain(value)


def _settings(doc: Mapping[str, Any]) -> str:
    pairs = list(_flatten("", doc.get("config") or {}))
    pairs += list(_flatten("run", doc.get("run") or {}))
    pairs += [
        ("initial connection time ms", fmt(doc.get("initial_connection_time_ms"))),
    ]
    return _kv(pairs)


def _generic(value: Any, depth: int = 0) -> str:
    """Any JSON value as nested tables (for sections this module does not
    know yet); lists of objects become one table with a column per key."""
    if isinstance(value, Mapping):
        scalars = [
            (k, v) for k, v in value.items() if not isinstance(v, Mapping | list)
        ]
        nested = [(k, v) for k, v in value.items() if isinstance(v, Mapping | list)]
        out = _kv((k, _plain(v)) for k, v in scalars)
        if not scalars:
            out = ""
        for k, v in nested:
            level = min(3 + depth, 6)
            out += f"<h{level}>{_e(k)}</h{level}>" + _generic(v, depth + 1)
        return out
    if isinstance(value, list):
        if value and all(isinstance(v, Mapping) for v in value):
            cols: list[str] = []
            for v in value:
                cols.extend(k for k in v if k not in cols)
            rows = [[_cell(v.get(c)) for c in cols] for v in value[:200]]
            more = (
                f'<p class="note">{len(value) - 200} more rows not shown.</p>'
                if len(value) > 200
                else ""
            )
            return _table(cols, rows, cls="num") + more
        return f"<p>{_e(', '.join(_cell(v) for v in value[:200]))}</p>"
    return f"<p>{_e(_cell(value))}</p>"


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, Mapping | list):
        return json.dumps(v, ensure_ascii=False)[:200]
    if isinstance(v, float):
        return fmt(v)
    return str(v)


def _waits(doc: Mapping[str, Any]) -> str:
    waits = doc.get("waits")
    if waits is None:
        return ""
    events = waits.get("events") if isinstance(waits, Mapping) else None
    body = ""
    if isinstance(events, list) and all(isinstance(e, Mapping) for e in events):
        rows = [
            [
                f"{e.get('type', '')}:{e.get('event', '')}".strip(":"),
                _pct(e.get("share")),
                fmt(e.get("aas") or e.get("average_active_sessions"), 2),
            ]
            for e in events[:10]
        ]
        body += "<h3>Top 10 wait events</h3>" + _table(
            ("event", "share of samples", "avg active sessions"), rows, cls="num"
        )
        rest = {k: v for k, v in waits.items() if k != "events"}
        if rest:
            body += _generic(rest, 1)
    else:
        body += _generic(waits, 1)
    return body


def _interval_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    ivs = [iv for iv in doc.get("intervals") or [] if isinstance(iv, Mapping)]
    size = max(1, math.ceil(len(ivs) / _MAX_TABLE_ROWS))
    rows = []
    for k in range(0, len(ivs), size):
        group = ivs[k : k + size]
        dur = sum(_num(iv.get("duration_s")) or 0 for iv in group)
        tx = sum(iv.get("processed") or 0 for iv in group)
        failed = sum(iv.get("failed") or 0 for iv in group)

        def worst(key: str, grp: list[Mapping[str, Any]] = group) -> float | None:
            vals = [_num(_lat(iv.get("latency_ms"), key)) for iv in grp]
            present = [v for v in vals if v is not None]
            return max(present) if present else None

        rows.append(
            [
                fmt(_num(group[0].get("offset_s")), 0),
                fmt(tx / dur if dur else None, 1),
                fmt(failed),
                fmt(worst("50")),
                fmt(worst("90")),
                fmt(worst("99")),
                fmt(worst("max")),
            ]
        )
    return rows


def _interval_table(doc: Mapping[str, Any]) -> str:
    rows = _interval_rows(doc)
    if not rows:
        return ""
    n = len(doc.get("intervals") or [])
    note = ""
    if n > _MAX_TABLE_ROWS:
        size = math.ceil(n / _MAX_TABLE_ROWS)
        note = (
            f'<p class="note">{n} intervals in groups of {size}: tps over the '
            "group, latency the worst interval's.</p>"
        )
    head = ("start s", "tps", "failed", "p50 ms", "p90 ms", "p99 ms", "max ms")
    return note + _table(head, rows, cls="num")


# -- comparison ----------------------------------------------------------------------


def _verdict_card(v: Verdict) -> str:
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
        ("run-to-run CV", f"A {_pct(v.cv_a)}, B {_pct(v.cv_b)}"),
    ]
    return (
        f'<div class="card {cls}"><p class="verdict">tps: '
        f"<strong>{_e(v.verdict)}</strong></p>"
        f'<p class="note">{_e(v.note)}</p>{_kv(pairs)}</div>'
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


def _workload_differences(runs: Sequence[RunDoc]) -> list[str]:
    out = []
    for keys in _WORKLOAD_KEYS:
        values = {json.dumps(_g(r.doc, *keys), sort_keys=True) for r in runs}
        if len(values) > 1:
            out.append(".".join(keys))
    return out


def dot_plot_svg(a: Sequence[float], b: Sequence[float]) -> str:
    """Per-run tps of each side as dots, with the 95% interval of each
    side's geometric mean as a bar (when scipy and 2+ runs allow it)."""
    from pgsurge.report.verdict import t_quantile

    values = [*a, *b]
    lo, hi = min(values), max(values)
    bars: list[tuple[float, float, float] | None] = []
    for side in (a, b):
        logs = [math.log(v) for v in side]
        if len(logs) < 2:
            bars.append(None)
            continue
        m = statistics.fmean(logs)
        se = statistics.stdev(logs) / math.sqrt(len(logs))
        t = t_quantile(0.975, len(logs) - 1)
        if t is None:
            bars.append(None)
            continue
        bars.append((math.exp(m - t * se), math.exp(m), math.exp(m + t * se)))
    # the scale follows the dots; a wider interval (few runs) is clipped
    pad = (hi - lo) * 0.5 or hi * 0.05 or 1.0
    lo, hi = max(0.0, lo - pad), hi + pad
    width, height, left, top, bottom = 420, 260, 70, 15, 35

    def y(v: float) -> float:
        v = min(max(v, lo), hi)
        return top + (height - top - bottom) * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg class="dotplot" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="tps per run, by side">'
    ]
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            'class="grid"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
            f"{v:,.0f}</text>"
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


# -- the page ----------------------------------------------------------------------


@dataclass(slots=True)
class _Page:
    runs: list[RunDoc]
    title: str
    threshold: float
    sections: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)


def _resource(name: str) -> str:
    return resources.files("pgsurge.report").joinpath(name).read_text("utf-8")


def _vendor(name: str) -> str:
    vendor = resources.files("pgsurge.report").joinpath("vendor")
    return vendor.joinpath(name).read_text("utf-8")


def _payload(runs: Sequence[RunDoc], verdict: Verdict | None) -> dict[str, Any]:
    return {
        "format": DATA_FORMAT,
        "runs": [
            {
                "label": r.label,
                "side": r.side,
                "doc": r.doc,
                "curve": percentile_curve(r.doc),
            }
            for r in runs
        ],
        "compare": None
        if verdict is None
        else {
            "ratio": verdict.ratio,
            "ci": list(verdict.ci) if verdict.ci else None,
            "verdict": verdict.verdict,
            "threshold": verdict.threshold,
        },
    }


def _has_intervals(runs: Sequence[RunDoc]) -> bool:
    return any(r.doc.get("intervals") for r in runs)


def _details(run: RunDoc, many: bool) -> str:
    """Everything about one run that is not a chart (the header is at the
    top of the page when there is only one run)."""
    doc = run.doc
    parts = [f"<h3>About the run</h3>{_header(run)}"] if many else []
    scripts = _scripts_table(doc)
    if scripts:
        parts.append(f"<h3>Scripts</h3>{scripts}")
    commands = _commands_table(doc)
    if commands:
        parts.append(f"<h3>Commands (-r)</h3>{commands}")
    parts.append(f"<h3>Errors and failures</h3>{_errors(doc)}")
    cpu = _cpu(doc)
    if cpu:
        parts.append(f"<h3>Client CPU per worker</h3>{cpu}")
    waits = _waits(doc)
    if waits:
        parts.append(f"<h3>Wait events</h3>{waits}")
    if doc.get("server_stats") is not None:
        parts.append(f"<h3>Server counters</h3>{_generic(doc.get('server_stats'), 1)}")
    parts.extend(
        f"<h3>{_e(key)}</h3>{_generic(doc[key], 1)}"
        for key in doc
        if key not in _KNOWN_KEYS and key not in ("waits", "server_stats")
    )
    parts.append(f"<h3>Settings</h3>{_settings(doc)}")
    table = _interval_table(doc)
    if table:
        parts.append(
            "<noscript><h3>Per interval</h3>"
            '<p class="note">The charts need JavaScript; their data:</p>'
            f"{table}</noscript>"
        )
    body = "".join(parts)
    attr = "" if many else " open"
    return (
        f'<details class="run"{attr}><summary>{_e(run.label)} '
        f'<span class="side">side {_e(run.side)}</span></summary>{body}</details>'
    )


def render_html(
    runs: Sequence[RunDoc],
    *,
    title: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> str:
    """The report page of ``runs`` (at least one); see the module doc."""
    if not runs:
        raise ValueError("nothing to report")
    safe = [RunDoc(redact(r.label), redact(dict(r.doc)), r.side) for r in runs]
    side_a = [r for r in safe if r.side == "A"]
    side_b = [r for r in safe if r.side == "B"]
    comparing = bool(side_a and side_b)
    verdict = None
    body: list[str] = []

    if len(safe) > 1:
        rows = [_summary_row(r) for r in safe]
        body.append(_section("Runs", _table(_SUMMARY_HEAD, rows, cls="num"), "runs"))
    else:
        body.append(_section("Run", _header(safe[0]), "runs"))

    if comparing:
        tps_a = [t for r in side_a if (t := _tps(r.doc))]
        tps_b = [t for r in side_b if (t := _tps(r.doc))]
        card = ""
        if tps_a and tps_b:
            verdict = compare_tps(tps_a, tps_b, threshold=threshold)
            card = _verdict_card(verdict)
            diff = _workload_differences(safe)
            if diff:
                card += (
                    '<p class="bad">The runs differ in: '
                    f"{_e(', '.join(diff))}: the comparison may not be fair.</p>"
                )
            card += (
                '<figure class="chart"><figcaption>tps per run (dots) and the '
                "95% interval of each side's mean (bar)</figcaption>"
                f"{dot_plot_svg(tps_a, tps_b)}</figure>"
            )
        else:
            card = "<p>No throughput to compare.</p>"
        body.append(_section("Verdict: B against A", card, "verdict"))

    charts = []
    many = len(safe) > 1
    if _has_intervals(safe):
        charts.append(
            _chart(
                "tps",
                "Throughput per interval (tps)" + ("" if many else " and failures"),
                "faint: each run; bold: the median of the runs per side"
                if many
                else "",
            )
        )
        charts.append(
            _chart(
                "latency",
                "Latency per interval (ms, log scale)"
                + (": p99" if many else ": p50, p90, p99, max"),
            )
        )
        if any(_g(iv, "lag_ms") for r in safe for iv in r.doc.get("intervals") or []):
            charts.append(_chart("lag", "Schedule lag per interval (ms, log scale)"))
    if any(percentile_curve(r.doc) for r in safe):
        charts.append(
            _chart(
                "percentiles",
                "Latency percentiles of the run (ms, log scale)",
                "x axis in nines: 90%, 99%, 99.9%, …; the last point is the maximum",
            )
        )
    if any(
        isinstance(iv.get("waits"), Mapping)
        for r in safe
        for iv in r.doc.get("intervals") or []
        if isinstance(iv, Mapping)
    ):
        charts.append(_chart("waits", "Wait events per interval (share of samples)"))
    if charts:
        body.append(_section("Charts", "".join(charts), "charts"))

    details = "".join(_details(r, many) for r in safe)
    body.append(_section("Details" if many else "Run details", details, "details"))

    page_title = title or (
        "pgsurge report: " + (safe[0].label if not many else f"{len(safe)} runs")
    )
    template = _resource("html_template.html")
    values = {
        "title": _e(page_title),
        "uplot_css": _vendor("uPlot.min.css"),
        "uplot_js": _vendor("uPlot.iife.min.js").replace("</script", "<\\/script"),
        "app_js": _resource("html_report.js"),
        "body": "".join(body),
        "data_id": DATA_ELEMENT_ID,
        "data": embed_json(_payload(safe, verdict)),
        "generator": _e(
            f"{_g(safe[0].doc, 'tool', 'name')} {_g(safe[0].doc, 'tool', 'version')}"
        ),
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)
