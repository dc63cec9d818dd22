"""--json: the finished run as a versioned, machine-readable document.

``build_document`` is a pure function of a ``RunResult`` and the
``RunConfig`` that produced it; ``write_json`` writes it to a file or to
stdout (``-``). The layout is ``"schema": 1`` and is described by the JSON
Schema ``result.schema.json`` beside this module (tests validate every
document against it). Within schema 1, fields may be added, never renamed
or removed.

What it holds: tool and server versions; the effective configuration
(connection items host/port/user/dbname only: no password ever, not even
one embedded in a conninfo or URI given as the database name, and nothing
is read from the environment; the configuration and the abort messages
also pass through ``pgsurge.redact``); start/end times; totals with pgbench's
counters and the exact sums that make two results mergeable; per-script
and per-command stats; the per-interval series; encoded histograms
(``Histogram.to_dict``) so that results can be merged or compared later;
client CPU per worker; aborts. Undefined figures (a mean of nothing) are
``null``: the document never contains NaN or infinities.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any, TextIO

import psycopg

from pgsurge.config import ConnParams, RunConfig
from pgsurge.redact import redact_text, redact_value
from pgsurge.report.extras import busy_workers, percentile_label, target_figures
from pgsurge.report.output import write_output
from pgsurge.report.rate import rate_check
from pgsurge.report.steady import steady_check
from pgsurge.stats.counters import StatsData
from pgsurge.stats.cpu import IMPL_C_LOOP
from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import RunResult
from pgsurge.stats.simple import SimpleStats

__all__ = [
    "JSON_PERCENTILES",
    "SCHEMA_VERSION",
    "build_document",
    "load_schema",
    "safe_conninfo",
    "write_json",
]

SCHEMA_VERSION = 1
#: percentiles always present in the document (plus any --percentiles)
JSON_PERCENTILES: tuple[float, ...] = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0)
_SECRET_KEYS = frozenset({"password", "passfile", "sslpassword"})


def load_schema() -> dict[str, Any]:
    """The JSON Schema of the document (shipped with the package)."""
    text = resources.files("pgsurge.report").joinpath("result.schema.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def safe_conninfo(params: ConnParams) -> dict[str, str | None]:
    """host/port/user/dbname, with any secret removed from a dbname that is
    itself a conninfo string or a URI (libpq expands those)."""
    dbname = params.dbname
    if dbname is not None and ("=" in dbname or "://" in dbname):
        try:
            items = psycopg.conninfo.conninfo_to_dict(dbname)
        except psycopg.Error:
            # libpq would not expand it either: it is a plain name, but keep
            # nothing that could hide a password
            dbname = "<unparsable conninfo>"
        else:
            kept = {k: v for k, v in items.items() if k not in _SECRET_KEYS}
            dbname = psycopg.conninfo.make_conninfo(
                **{k: str(v) for k, v in kept.items()}
            )
    return {
        "host": params.host,
        "port": params.port,
        "user": params.user,
        "dbname": dbname,
    }


def _num(x: float) -> float | None:
    """A JSON-safe float: None for NaN/infinity."""
    return None if math.isnan(x) or math.isinf(x) else x


def _ms(us: float) -> float | None:
    return _num(us / 1000.0)


def _percentiles(
    hist: Histogram | None, ps: Sequence[float]
) -> dict[str, float] | None:
    if hist is None or hist.count == 0:
        return None
    return {
        percentile_label(p): v / 1000.0
        for p, v in zip(ps, hist.percentiles(list(ps)), strict=True)
    }


def _summary(
    ss: SimpleStats, hist: Histogram | None, ps: Sequence[float]
) -> dict[str, Any] | None:
    """Latency-like figures in ms, or None when nothing was measured."""
    if ss.count <= 0:
        return None
    return {
        "count": ss.count,
        "avg": _ms(ss.mean),
        "stddev": _ms(ss.stddev),
        "min": _ms(ss.min),
        "max": _ms(ss.max),
        "percentiles": _percentiles(hist, ps),
    }


def _counters(s: StatsData, duration_s: float) -> dict[str, Any]:
    return {
        "transactions": s.total,
        "processed": s.cnt,
        "failed": s.failures,
        "serialization_failures": s.serialization_failures,
        "deadlock_failures": s.deadlock_failures,
        "other_failures": s.other_failures,
        "skipped": s.skipped,
        "retried": s.retried,
        "retries": s.retries,
        "tps": _num(s.cnt / duration_s) if duration_s > 0 else None,
        # pgsurge's --reconnect only: absent from other runs' documents
        **(
            {"connection_failures": s.connection_failures}
            if s.connection_failures
            else {}
        ),
    }


def _iso(unix_us: int) -> str:
    t = dt.datetime.fromtimestamp(unix_us / 1e6, tz=dt.UTC)
    return t.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _config(config: RunConfig) -> dict[str, Any]:
    return {
        "conn": safe_conninfo(config.conn),
        "embedded_server": config.conn.embedded,
        "scripts": [
            {"name": s.name, "weight": s.weight, "builtin": s.builtin}
            for s in config.scripts
        ],
        "clients": config.clients,
        "jobs": config.jobs,
        "transactions": None if config.duration else config.transactions,
        "duration_s": config.duration,
        **({"warmup_s": config.warmup} if config.warmup else {}),
        "query_mode": config.query_mode.value,
        "connect_each_tx": config.connect_each_tx,
        "rate": config.rate,
        "latency_limit_ms": config.latency_limit_ms,
        "max_tries": config.max_tries,
        "progress_s": config.progress_s,
        "log": config.log,
        "sampling_rate": config.sampling_rate,
        "aggregate_interval_s": config.aggregate_interval,
        "failures_detailed": config.failures_detailed,
        "continue_on_error": config.continue_on_error,
        **({"reconnect": config.reconnect} if config.reconnect else {}),
        "exit_on_abort": config.exit_on_abort,
        "report_per_command": config.report_per_command,
        "random_seed": config.random_seed,
        "defines": {name: value for name, value in config.defines},
        "percentiles": None if config.percentiles is None else list(config.percentiles),
        "waits_ms": config.waits_ms,
        "server_stats": config.server_stats,
        "idle_sessions": config.idle_sessions,
        "idle_mode": config.idle_mode.value if config.idle_sessions else None,
    }


def build_document(result: RunResult, config: RunConfig) -> dict[str, Any]:
    """The --json document of a finished run."""
    facts = result.facts
    shift = result.epoch_shift_us
    duration_s = result.total_duration_us / 1e6
    ps = tuple(sorted(set(JSON_PERCENTILES) | set(config.percentiles or ())))
    hists = result.histograms

    totals: dict[str, Any] = _counters(result.total, duration_s)
    totals.update(
        latency_late=result.latency_late,
        latency_ms=_summary(result.total.latency, hists.latency if hists else None, ps),
        lag_ms=_summary(result.total.lag, hists.lag if hists else None, ps),
        stats=result.total.to_dict(),
    )

    scripts = []
    for i, info in enumerate(facts.scripts):
        sstats = result.per_script[i] if i < len(result.per_script) else StatsData()
        shist = hists.per_script[i] if hists and i < len(hists.per_script) else None
        commands = []
        for j, line in enumerate(info.commands):
            cmd = (
                result.per_command[i][j]
                if i < len(result.per_command) and j < len(result.per_command[i])
                else None
            )
            chist = (
                hists.per_command[i][j]
                if hists
                and i < len(hists.per_command)
                and j < len(hists.per_command[i])
                else None
            )
            commands.append(
                {
                    "line": line,
                    "failures": cmd.failures if cmd else 0,
                    "retries": cmd.retries if cmd else 0,
                    "latency_ms": _summary(cmd.latency, chist, ps) if cmd else None,
                }
            )
        entry: dict[str, Any] = {"desc": info.desc, "weight": info.weight}
        if facts.per_script_stats:
            entry.update(_counters(sstats, duration_s))
            entry["latency_ms"] = _summary(sstats.latency, shist, ps)
        entry["commands"] = commands
        scripts.append(entry)

    # the monitor's per-interval figures (--waits, --server-stats -P)
    extras = {e["start_us"]: e for e in result.insight.get("intervals", [])}
    intervals = []
    for iv in result.intervals:
        length_s = iv.duration_us / 1e6
        lat = iv.latency_hist()
        lag = iv.lag_hist()
        point: dict[str, Any] = {
            # from the measured window's start (after --warmup)
            "offset_s": (iv.start_us - result.measured_start_us) / 1e6,
            "unix_s": (iv.start_us + shift) / 1e6 if shift else None,
            "duration_s": length_s,
        }
        point.update(_counters(iv.stats, length_s))
        point["latency_ms"] = _summary(iv.stats.latency, lat, ps)
        point["lag_ms"] = _summary(iv.stats.lag, lag, ps) if facts.throttled else None
        if iv.hosts is not None:  # (a multi-host run that lost a host)
            point["hosts"] = {"counted": iv.hosts[0], "of": iv.hosts[1]}
        point.update(
            (k, v) for k, v in extras.get(iv.start_us, {}).items() if k != "start_us"
        )
        intervals.append(point)

    cpu_total = result.cpu_user_s + result.cpu_sys_s
    all_tx = result.total.total
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "tool": {"name": "pgsurge", "version": facts.pgsurge_version},
        "server": {
            "version": facts.server_version,
            "version_num": facts.server_version_num,
        },
        "start": _iso(result.measured_start_us + shift) if shift else None,
        "end": _iso(result.end_us + shift) if shift else None,
        "duration_s": duration_s,
        # --warmup: the seconds run before "start", not counted
        **({"warmup_s": facts.warmup_s} if facts.warmup_s else {}),
        "initial_connection_time_ms": result.conn_elapsed_us / 1000.0,
        "connection_time_total_ms": result.conn_total_us / 1000.0,
        # belt and braces past safe_conninfo: a -D PGPASSWORD=… or a
        # password in an unexpected place is masked too (pgsurge.redact)
        "config": redact_value(_config(config)),
        "run": {
            "scale": facts.scale,
            "partition_method": facts.partition_method,
            "partitions": facts.partitions,
            "clients": facts.clients,
            "threads": facts.threads,
            "max_tries": facts.max_tries,
        },
        "totals": totals,
        "scripts": scripts,
        "intervals": intervals,
        "histograms": hists.to_dict() if hists else None,
        "client_cpu": {
            "user_s": result.cpu_user_s,
            "sys_s": result.cpu_sys_s,
            "us_per_transaction": cpu_total * 1e6 / all_tx if all_tx else None,
            "client_limited": bool(busy_workers(result.worker_cpu)),
            "workers": [
                {
                    **w.to_dict(),
                    "utilisation": w.utilisation,
                    "busy_fraction": w.busy_fraction,
                }
                for w in result.worker_cpu
            ],
        },
        "aborted": result.aborted,
        "aborted_clients": result.aborted_clients,
        "clients_finished": result.clients_finished,
        "abort_messages": [redact_text(m) for m in result.abort_messages],
    }
    if result.interrupted_by is not None:
        # only in an interrupted run's document (schema 1 lists it as optional)
        doc["interrupted"] = {
            "signal": result.interrupted_by,
            "after_s": result.interrupted_after_us / 1e6,
        }
    # --waits, --server-stats, --idle-sessions (pgsurge.insight)
    doc.update((k, v) for k, v in result.insight.items() if k != "intervals")
    check = rate_check(result)
    if check is not None:
        doc["rate_check"] = check
    steady = steady_check(result)
    if steady is not None:
        doc["steady_state"] = steady
    if result.hosts:  # a multi-host run (--dask)
        doc["hosts"] = [dict(h) for h in result.hosts]
        lost = [h["name"] for h in result.hosts if h.get("lost")]
        if lost:  # what the lost hosts streamed before they were lost
            doc["degraded"] = {"lost_hosts": lost}
    if result.environment:
        doc["environment"] = _environment(result)
    if config.labels:
        doc["labels"] = redact_value(dict(config.labels))
    if result.targets:  # a multi-host connection string's servers
        doc["targets"] = target_figures(result)
    return doc


#: the version of the ``environment`` section's layout (fields may be added)
ENVIRONMENT_VERSION = 1


def _environment(result: RunResult) -> dict[str, Any]:
    """Where the run ran: the client host, the server, pgsurge and its
    engine (the fingerprint ``compare`` and ``history`` check)."""
    env = result.environment
    server = env.get("server", {})
    impls = sorted({w.implementation for w in result.worker_cpu if w.implementation})
    return {
        "version": ENVIRONMENT_VERSION,
        "client": dict(env.get("client", {})),
        "server": {
            "version": result.facts.server_version,
            "version_num": result.facts.server_version_num,
            "settings": redact_value(dict(server.get("settings", {}))),
            "data_bytes": server.get("data_bytes"),
        },
        "pgsurge": {
            "version": result.facts.pgsurge_version,
            "c_loop": IMPL_C_LOOP in impls,
            "engines": impls,
        },
    }


def write_json(
    result: RunResult, config: RunConfig, path: str, stdout: TextIO | None = None
) -> None:
    """Write the document to ``path``, or to ``stdout`` for ``-``."""
    text = json.dumps(build_document(result, config), indent=2, allow_nan=False) + "\n"
    write_output(text, path, "JSON result", stdout)
