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
  (see ``redact``) plus what is derived here (``html_charts.py``): the
  latency percentile curves decoded from the encoded histograms (per run,
  and per side of a comparison from its merged histogram) and the stacked
  wait shares. In the JSON text ``<``, ``>``, ``&``
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

The tables and sections are ``html_parts.py``'s, the comparison pieces
(verdict card, dot plot) ``html_compare.py``'s; this module holds the data
side and assembles the page.

Several runs per side (``pgsurge report A1.json A2.json --vs B1.json``)
draw faint per-run lines and a bold median per side (for the percentile
curve: the curve of the side's merged histogram), a dot plot of each
run's tps with the interval of each side's mean (server-side SVG), and the
verdict card of ``verdict.compare_tps``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from pgsurge.redact import redact_text
from pgsurge.report.html_charts import (
    MAX_NINES,
    curve_of,
    latency_histogram,
    merged_curve,
    wait_stack,
)
from pgsurge.report.html_compare import (
    dot_plot_svg,
    verdict_card,
    waits_side_by_side,
    workload_differences,
)
from pgsurge.report.html_parts import (
    SUMMARY_HEAD,
    chart,
    command_line,
    commands_table,
    cpu_section,
    dig,
    errors_section,
    esc,
    generic,
    header,
    interval_table,
    run_tps,
    scripts_table,
    section,
    settings_section,
    summary_row,
    table,
    waits_section,
)
from pgsurge.report.verdict import DEFAULT_THRESHOLD, Verdict, compare_tps

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
_KNOWN_KEYS = frozenset(
    {
        "schema",
        "tool",
        "server",
        "start",
        "end",
        "duration_s",
        "warmup_s",
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
    """A copy with every password masked (``pgsurge.redact``) and every
    absolute path in a string shortened to ``…/last``.

    A report goes into mails and tickets: it must not show a password nor
    the machine's directories (the embedded server's socket directory, a
    script's full path, a venv in an error message). Encoded histograms
    (objects with an ``encoding``) are kept as they are: their base64 is
    neither a path nor a password.
    """
    if isinstance(value, str):
        return _ABS_PATH.sub(r"…/\1", redact_text(value))
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


def nines(p: float) -> float:
    """The position of percentile ``p`` on the "nines" axis: 90 → 1, 99 → 2."""
    return -math.log10(1 - p / 100) if p < 100 else MAX_NINES


def percentile_curve(doc: Mapping[str, Any]) -> dict[str, list[float]] | None:
    """Latency percentiles (ms) on a grid of the nines axis, from the run's
    latency histogram: ``{"x": [nines...], "ms": [...]}``, up to the rank of
    the single slowest transaction (at most 99.9999%), then the maximum."""
    hist = latency_histogram(doc)
    return None if hist is None else curve_of(hist)


# -- the page ----------------------------------------------------------------------


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
        # several runs: the bold curve of each side, its merged histogram's
        "side_curves": {
            side: curve
            for side in ("A", "B")
            if len(runs) > 1
            and (curve := merged_curve([r.doc for r in runs if r.side == side]))
        },
        # the stacked wait shares of the first run that has them
        "wait_stack": next(
            (stack for r in runs if (stack := wait_stack(r.doc)) is not None), None
        ),
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
    parts = [f"<h3>About the run</h3>{header(run.doc)}"] if many else []
    scripts = scripts_table(doc)
    if scripts:
        parts.append(f"<h3>Scripts</h3>{scripts}")
    commands = commands_table(doc)
    if commands:
        parts.append(f"<h3>Commands (-r)</h3>{commands}")
    parts.append(f"<h3>Errors and failures</h3>{errors_section(doc)}")
    cpu = cpu_section(doc)
    if cpu:
        parts.append(f"<h3>Client CPU per worker</h3>{cpu}")
    waits = waits_section(doc)
    if waits:
        parts.append(f"<h3>Wait events</h3>{waits}")
    if doc.get("server_stats") is not None:
        parts.append(f"<h3>Server counters</h3>{generic(doc.get('server_stats'), 1)}")
    parts.extend(
        f"<h3>{esc(key)}</h3>{generic(doc[key], 1)}"
        for key in doc
        if key not in _KNOWN_KEYS and key not in ("waits", "server_stats")
    )
    parts.append(f"<h3>Settings</h3>{settings_section(doc)}")
    per_interval = interval_table(doc)
    if per_interval:
        parts.append(
            "<noscript><h3>Per interval</h3>"
            '<p class="note">The charts need JavaScript; their data:</p>'
            f"{per_interval}</noscript>"
        )
    body = "".join(parts)
    attr = "" if many else " open"
    return (
        f'<details class="run"{attr}><summary>{esc(run.label)} '
        f'<span class="side">side {esc(run.side)}</span></summary>{body}</details>'
    )


def _arm_words(doc: Mapping[str, Any]) -> str | None:
    """An ``ab`` run's arm as its ``experiment`` section records it (already
    masked by ``ab``), e.g. ``-M prepared PGOPTIONS='-c jit=off'``."""
    exp = doc.get("experiment")
    if not isinstance(exp, Mapping):
        return None
    args, env = exp.get("args"), exp.get("env")
    args = args if isinstance(args, list) else []
    env = env if isinstance(env, Mapping) else {}
    words = " ".join(str(a) for a in args) or "(no arguments)"
    return words + "".join(f" {k}={v}" for k, v in env.items())


def _default_title(runs: Sequence[RunDoc]) -> str:
    """The page title: the run, the number of runs, or for ``ab`` runs
    what each side was (arms that differ only in their environment must be
    told apart)."""
    sides = []
    for side in ("A", "B"):
        arms = {a for r in runs if r.side == side if (a := _arm_words(r.doc))}
        if len(arms) == 1:
            sides.append(f"{side}: {arms.pop()}")
    if sides:
        return f"pgsurge report: {len(runs)} runs, " + " vs ".join(sides)
    return "pgsurge report: " + (
        runs[0].label if len(runs) == 1 else f"{len(runs)} runs"
    )


def _partial(doc: Mapping[str, Any]) -> bool:
    """The run was cut short by a signal or aborted."""
    return doc.get("interrupted") is not None or bool(doc.get("aborted"))


def _kept_schedule(docs: Sequence[Mapping[str, Any]]) -> bool:
    """Every run ran under -R and none fell behind: their tps is the
    schedule's, not the server's (compare gives it no verdict either)."""

    def rated(doc: Mapping[str, Any]) -> bool:
        config = doc.get("config")
        check = doc.get("rate_check")
        return (
            isinstance(config, Mapping)
            and bool(config.get("rate"))
            and not (isinstance(check, Mapping) and check.get("sustained") is False)
        )

    return all(rated(d) for d in docs)


def render_html(
    runs: Sequence[RunDoc],
    *,
    title: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    within_run: tuple[float, float] | None = None,
) -> str:
    """The report page of ``runs`` (at least one); see the module doc.

    ``within_run``: the tps ratio's interval from batch means within one
    run per side (``pgsurge ab --runs 1``), shown beside "no verdict" and
    labelled as such: it understates the variance between runs."""
    if not runs:
        raise ValueError("nothing to report")
    safe = [RunDoc(redact(r.label), redact(dict(r.doc)), r.side) for r in runs]
    side_a = [r for r in safe if r.side == "A"]
    side_b = [r for r in safe if r.side == "B"]
    comparing = bool(side_a and side_b)
    verdict = None
    body: list[str] = []

    if len(safe) > 1:
        rows = [summary_row(r.label, r.side, r.doc) for r in safe]
        body.append(section("Runs", table(SUMMARY_HEAD, rows, cls="num"), "runs"))
    else:
        body.append(section("Run", header(safe[0].doc), "runs"))

    if comparing:
        tps_a = [t for r in side_a if (t := run_tps(r.doc))]
        tps_b = [t for r in side_b if (t := run_tps(r.doc))]
        card = ""
        if tps_a and tps_b:
            verdict = compare_tps(tps_a, tps_b, threshold=threshold)
            partial = [r.label for r in (*side_a, *side_b) if _partial(r.doc)]
            if partial:
                # an interrupted or aborted run's tps covers part of the run
                # or fewer clients: no verdict on it (hostile finding)
                verdict = replace(
                    verdict,
                    ci=None,
                    verdict="no verdict",
                    note=f"partial runs ({', '.join(partial)}: interrupted or "
                    "aborted): their figures are not whole runs'",
                )
            elif _kept_schedule([r.doc for r in (*side_a, *side_b)]):
                verdict = replace(
                    verdict,
                    ci=None,
                    verdict="no verdict",
                    note="-R set the rate and every run kept it: tps is the "
                    "schedule's; compare latencies",
                )
            card = verdict_card(verdict)
            if within_run is not None:
                lo, hi = (100 * (x - 1) for x in within_run)
                card += (
                    '<p class="note">within-run interval (batch means, one run '
                    f"per side): {lo:+.1f}% … {hi:+.1f}%; it understates the "
                    "variance between runs and gives no verdict</p>"
                )
            diff = workload_differences([r.doc for r in safe])
            if diff:
                card += (
                    '<p class="bad">The runs differ in: '
                    f"{esc(', '.join(diff))}: the comparison may not be fair.</p>"
                )
            card += (
                '<figure class="chart"><figcaption>tps per run (dots) and the '
                "95% interval of each side's mean (bar)</figcaption>"
                f"{dot_plot_svg(tps_a, tps_b)}</figure>"
            )
        else:
            card = "<p>No throughput to compare.</p>"
        body.append(section("Verdict: B against A", card, "verdict"))
        waits = waits_side_by_side([r.doc for r in side_a], [r.doc for r in side_b])
        if waits:
            body.append(section("Wait events: A and B (--waits)", waits, "waits"))

    charts = []
    many = len(safe) > 1
    if _has_intervals(safe):
        charts.append(
            chart(
                "tps",
                "Throughput per interval (tps)" + ("" if many else " and failures"),
                "faint: each run; bold: the median of the runs per side"
                if many
                else "",
            )
        )
        charts.append(
            chart(
                "latency",
                "Latency per interval (ms, log scale)"
                + (": p99" if many else ": p50, p90, p99, max"),
            )
        )
        if any(dig(iv, "lag_ms") for r in safe for iv in r.doc.get("intervals") or []):
            charts.append(chart("lag", "Schedule lag per interval (ms, log scale)"))
    if any(percentile_curve(r.doc) for r in safe):
        charts.append(
            chart(
                "percentiles",
                "Latency percentiles of the run (ms, log scale)",
                "x axis in nines: 90%, 99%, 99.9%, …; the last point is the maximum"
                + (
                    "; faint: each run; bold: all runs of a side together"
                    if many
                    else ""
                ),
            )
        )
    if any(wait_stack(r.doc) for r in safe):
        charts.append(chart("waits", "Wait events per interval (share of samples)"))
    if any(iv.get("host") for r in safe for iv in r.doc.get("intervals") or []):
        charts.append(
            chart(
                "host",
                "Client host CPU per interval (--host-stats)",
                "user, system, iowait and steal, in % of all the host's CPUs"
                + ("; the first run that has them" if many else ""),
            )
        )
    if charts:
        body.append(section("Charts", "".join(charts), "charts"))

    details = "".join(_details(r, many) for r in safe)
    body.append(section("Details" if many else "Run details", details, "details"))

    page_title = redact_text(title or _default_title(safe))
    template = _resource("html_template.html")
    values = {
        "title": esc(page_title),
        "uplot_css": _vendor("uPlot.min.css"),
        "uplot_js": _vendor("uPlot.iife.min.js").replace("</script", "<\\/script"),
        "app_js": _resource("html_report.js"),
        "body": "".join(body),
        "data_id": DATA_ELEMENT_ID,
        "data": embed_json(_payload(safe, verdict)),
        "generator": esc(
            f"{dig(safe[0].doc, 'tool', 'name')} {dig(safe[0].doc, 'tool', 'version')}"
        ),
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)
