"""The pieces of the HTML report's page: number formats, tables, sections.

Pure functions of (parts of) one result document, each returning escaped
HTML; ``html.py`` assembles them into the page. Absent figures show as
``–``; a section whose data are absent returns ``""``.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "MAX_TABLE_ROWS",
    "SUMMARY_HEAD",
    "chart",
    "command_line",
    "commands_table",
    "cpu_section",
    "dig",
    "errors_section",
    "esc",
    "fmt",
    "generic",
    "header",
    "interval_table",
    "kv_table",
    "pct",
    "run_tps",
    "scripts_table",
    "section",
    "settings_section",
    "summary_row",
    "table",
    "waits_section",
]

#: the noscript interval table shows at most this many rows (groups beyond)
MAX_TABLE_ROWS = 120

# -- figures -------------------------------------------------------------------


def dig(m: Any, *keys: str) -> Any:
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


def pct(x: Any, digits: int = 1) -> str:
    v = _num(x)
    return "–" if v is None else f"{100 * v:.{digits}f}%"


def run_tps(doc: Mapping[str, Any]) -> float | None:
    return _num(dig(doc, "totals", "tps"))


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
        ("--warmup", cfg.get("warmup_s")),
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


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    cls: str = "",
    raw: bool = False,
) -> str:
    """A table; cells are escaped unless ``raw`` (already HTML)."""
    cell = (lambda c: c) if raw else esc
    out = [f'<table class="{cls}">' if cls else "<table>", "<thead><tr>"]
    out.extend(f"<th>{esc(h)}</th>" for h in head)
    out.append("</tr></thead><tbody>")
    out.extend(
        "<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    out.append("</tbody></table>")
    return "".join(out)


def kv_table(pairs: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
        for k, v in pairs
        if v is not None
    )
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def section(title: str, body: str, sid: str) -> str:
    return f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>{body}</section>'


def chart(name: str, title: str, note: str = "") -> str:
    """A placeholder the page's script fills with a uPlot chart."""
    small = f'<p class="note">{esc(note)}</p>' if note else ""
    return (
        f'<figure class="chart"><figcaption>{esc(title)}</figcaption>'
        f'<div class="plot" data-chart="{esc(name)}"></div>{small}</figure>'
    )


# -- sections ----------------------------------------------------------------------


def _lat(summary: Any, key: str) -> Any:
    if not isinstance(summary, Mapping):
        return None
    if key in ("avg", "max", "min", "stddev"):
        return summary.get(key)
    return dig(summary, "percentiles", key)


def header(doc: Mapping[str, Any]) -> str:
    """The key facts of a run, as a two-column table."""
    conn = dig(doc, "config", "conn") or {}
    dbname = str(conn.get("dbname") or "")
    if dig(doc, "config", "embedded_server"):
        target = "embedded server"
    elif "=" in dbname or "://" in dbname:
        target = dbname  # a conninfo string or a URI, as libpq expands it
    else:
        target = " ".join(f"{k}={v}" for k, v in conn.items() if v)
    pairs = [
        ("command (equivalent)", command_line(doc)),
        ("tool", f"{dig(doc, 'tool', 'name')} {dig(doc, 'tool', 'version')}"),
        ("server", f"PostgreSQL {dig(doc, 'server', 'version')}"),
        ("target", target or None),
        ("start (UTC)", doc.get("start")),
        ("end (UTC)", doc.get("end")),
        ("duration", f"{fmt(doc.get('duration_s'))} s"),
        (
            "warm-up (not counted)",
            f"{doc['warmup_s']} s before the start" if doc.get("warmup_s") else None,
        ),
        ("scale", dig(doc, "run", "scale")),
        (
            "clients / threads",
            f"{dig(doc, 'run', 'clients')} / {dig(doc, 'run', 'threads')}",
        ),
    ]
    return kv_table(pairs)


def summary_row(label: str, side: str, doc: Mapping[str, Any]) -> list[str]:
    """A run's line in the table of runs (``SUMMARY_HEAD``)."""
    t = doc.get("totals") or {}
    lat = t.get("latency_ms")
    return [
        label,
        side,
        fmt(t.get("tps"), 1),
        fmt(t.get("transactions")),
        fmt(t.get("failed")),
        fmt(_lat(lat, "avg")),
        fmt(_lat(lat, "50")),
        fmt(_lat(lat, "99")),
        fmt(_lat(lat, "max")),
        str(doc.get("start") or "–"),
    ]


SUMMARY_HEAD = (
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


def scripts_table(doc: Mapping[str, Any]) -> str:
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
    return table((*counts, *times), rows, cls="num")


def commands_table(doc: Mapping[str, Any]) -> str:
    rows = []
    for i, s in enumerate(doc.get("scripts") or []):
        for c in s.get("commands") or []:
            lat = c.get("latency_ms")
            if lat is None and not c.get("failures") and not c.get("retries"):
                continue
            rows.append(
                [
                    str(i + 1),
                    f"<code>{esc(c.get('line', ''))}</code>",
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
    return table((*head, "failures", "retries"), rows, cls="num cmd", raw=True)


_FAILURE_KINDS = (
    ("serialization_failures", "serialization failure", "40001"),
    ("deadlock_failures", "deadlock", "40P01"),
    ("other_failures", "other SQL error (--continue-on-error)", "various"),
)


def errors_section(doc: Mapping[str, Any]) -> str:
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
        body += table(("kind", "SQLSTATE", "transactions"), rows, cls="num")
    if t.get("retried"):
        body += (
            f"<p>{fmt(t.get('retried'))} transactions were retried "
            f"({fmt(t.get('retries'))} retries).</p>"
        )
    aborted = doc.get("aborted_clients") or 0
    messages = doc.get("abort_messages") or []
    if aborted or doc.get("aborted") or messages:
        body += f'<p class="bad">{esc(aborted)} client(s) aborted.</p>'
        if messages:
            body += (
                '<ul class="msgs">'
                + "".join(f"<li><code>{esc(m)}</code></li>" for m in messages[:50])
                + "</ul>"
            )
    return body or '<p class="good">No failures, retries or aborts.</p>'


def cpu_section(doc: Mapping[str, Any]) -> str:
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
        top = pct(busiest.get("busy_fraction")) if busiest else "–"
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
            pct(w.get("utilisation")),
            pct(w.get("busy_fraction")) if (_num(w.get("idle_us")) or 0) >= 0 else "–",
        ]
        for w in workers
    ]
    total = (
        f"<p>Client CPU: user {fmt(cpu.get('user_s'))} s, sys "
        f"{fmt(cpu.get('sys_s'))} s, {fmt(cpu.get('us_per_transaction'), 1)} µs "
        "per transaction.</p>"
    )
    head = ("worker", "user s", "sys s", "wall s", "CPU", "busy")
    return verdict + total + table(head, rows, cls="num")


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


def settings_section(doc: Mapping[str, Any]) -> str:
    pairs = list(_flatten("", doc.get("config") or {}))
    pairs += list(_flatten("run", doc.get("run") or {}))
    pairs += [
        ("initial connection time ms", fmt(doc.get("initial_connection_time_ms"))),
    ]
    return kv_table(pairs)


def generic(value: Any, depth: int = 0) -> str:
    """Any JSON value as nested tables (for sections this module does not
    know yet); lists of objects become one table with a column per key."""
    if isinstance(value, Mapping):
        scalars = [
            (k, v) for k, v in value.items() if not isinstance(v, Mapping | list)
        ]
        nested = [(k, v) for k, v in value.items() if isinstance(v, Mapping | list)]
        out = kv_table((k, _plain(v)) for k, v in scalars)
        if not scalars:
            out = ""
        for k, v in nested:
            level = min(3 + depth, 6)
            out += f"<h{level}>{esc(k)}</h{level}>" + generic(v, depth + 1)
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
            return table(cols, rows, cls="num") + more
        return f"<p>{esc(', '.join(_cell(v) for v in value[:200]))}</p>"
    return f"<p>{esc(_cell(value))}</p>"


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, Mapping | list):
        return json.dumps(v, ensure_ascii=False)[:200]
    if isinstance(v, float):
        return fmt(v)
    return str(v)


def waits_section(doc: Mapping[str, Any]) -> str:
    waits = doc.get("waits")
    if waits is None:
        return ""
    events = waits.get("events") if isinstance(waits, Mapping) else None
    body = ""
    if isinstance(events, list) and all(isinstance(e, Mapping) for e in events):
        rows = [
            [
                f"{e.get('type', '')}:{e.get('event', '')}".strip(":"),
                pct(e.get("share")),
                fmt(e.get("aas") or e.get("average_active_sessions"), 2),
            ]
            for e in events[:10]
        ]
        body += "<h3>Top 10 wait events</h3>" + table(
            ("event", "share of samples", "avg active sessions"), rows, cls="num"
        )
        rest = {k: v for k, v in waits.items() if k != "events"}
        if rest:
            body += generic(rest, 1)
    else:
        body += generic(waits, 1)
    return body


def _interval_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    ivs = [iv for iv in doc.get("intervals") or [] if isinstance(iv, Mapping)]
    size = max(1, math.ceil(len(ivs) / MAX_TABLE_ROWS))
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


def interval_table(doc: Mapping[str, Any]) -> str:
    rows = _interval_rows(doc)
    if not rows:
        return ""
    n = len(doc.get("intervals") or [])
    note = ""
    if n > MAX_TABLE_ROWS:
        size = math.ceil(n / MAX_TABLE_ROWS)
        note = (
            f'<p class="note">{n} intervals in groups of {size}: tps over the '
            "group, latency the worst interval's.</p>"
        )
    head = ("start s", "tps", "failed", "p50 ms", "p90 ms", "p99 ms", "max ms")
    return note + table(head, rows, cls="num")
