"""The text of ``--waits`` and ``--server-stats``: pure functions of the
JSON sections (``waits``, ``server_stats``) that ``pgsurge.insight`` made.

Printed after pgbench's report and pgsurge's other extra lines, only when
the option was given (nothing changes in pgbench's lines without it). They
read the documented JSON layout, so that a loaded ``--json`` document
prints the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["insight_warnings", "render_insight"]

#: a client wait share above this says the client may be the bottleneck
CLIENT_BOUND_SHARE = 0.5
_TOP = 10


def _label(e: Mapping[str, Any]) -> str:
    text = str(e.get("type", "")) if not e.get("event") else f"{e['type']}:{e['event']}"
    if text == "Client:ClientRead":
        text += " (idle: waiting for the client to start a transaction)"
    elif text == "Client:ClientRead in transaction":
        text += " (waiting for the client mid-transaction, locks held)"
    return text


def _num(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def _client_bound(share: float, pooler: Any = None, admin: Any = None) -> str:
    """The line saying the server mostly waited for its client. Behind a
    pooler that client is the pooler: "the client may be the bottleneck"
    pointed at pgsurge while clients queued for a server connection."""
    head = f"the server waited for the client in {100 * share:.0f}% of the samples"
    if not isinstance(pooler, Mapping):
        return f"{head}: the client may be the bottleneck"
    # the count is read at an interval's end only, and is 0 whenever the
    # clients happen to be between transactions then (a loaded client
    # box); the console's summed wait counts every wait of the run
    figures = admin if isinstance(admin, Mapping) else {}
    waiting = figures.get("max_cl_waiting")
    per_xact = figures.get("wait_ms_per_xact")
    counted = isinstance(waiting, int | float) and waiting > 0
    summed = isinstance(per_xact, int | float) and per_xact > 0
    if counted or summed:
        most = f"up to {waiting:.0f} at once" if counted else "none at a read"
        each = f", {per_xact:.3f} ms per transaction" if summed else ""
        return (
            f"{head}, while clients waited for a server connection ({most}"
            f"{each}; the pooler's console): the pooler may be the "
            "bottleneck, not the clients"
        )
    return (
        f"{head}: behind a connection pooler that client is the pooler: it, "
        "or the clients behind it, may be the bottleneck (--pooler-admin "
        "tells whether clients wait for a server connection)"
    )


def render_waits(w: Mapping[str, Any], pooler: Any = None, admin: Any = None) -> str:
    """The --waits block; ``pooler``/``admin``: the run's ``pooler`` and
    ``pooler_admin`` sections (the client-bound line names the pooler)."""
    q = w.get("sampler_query_ms") or {}
    how = (
        f"{w.get('source')} every {_num(w.get('period_ms'), 0)} ms"
        if w.get("source") == "pg_stat_activity"
        else f"{w.get('source')} profile, read every {_num(w.get('period_ms'), 0)} ms"
    )
    if w.get("attribution") == "pids":
        who = f"{w.get('backends')} backends"
    elif "server_backends_seen" in w:
        who = (
            "the run's server sessions, by application_name "
            f"({w['server_backends_seen']} seen)"
        )
    else:
        who = "the sessions named like the workers (-C)"
    lines = [
        f"wait events of {who} ({how}: {w.get('samples')} samples; sampler "
        f"query {_num(q.get('avg'), 3)} ms avg, {_num(q.get('max'), 3)} ms max):",
        "   share  sessions  event",
    ]
    lines.extend(
        f"  {100 * e['share']:5.1f}%  {_num(e.get('aas'), 2):>8}  {_label(e)}"
        for e in (w.get("events") or [])[:_TOP]
    )
    if not w.get("events"):
        lines.append("  (no samples)")
    # only the idle share: a wait inside a transaction is its round trips
    client = w.get("client_wait_share")
    if client is not None and client > CLIENT_BOUND_SHARE:
        lines.append(_client_bound(client, pooler, admin))
    bg = w.get("background") or []
    if bg:
        parts = [
            f"{b['backend_type']} "
            f"{b['type'] if not b.get('event') else b['type'] + ':' + b['event']} "
            f"{_num(b.get('aas'), 2)}"
            for b in bg[:5]
        ]
        lines.append("background processes (average busy): " + ", ".join(parts))
    return "".join(line + "\n" for line in lines)


def _first(deltas: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    v = deltas.get(name)
    return v if isinstance(v, Mapping) else {}


def render_server_stats(s: Mapping[str, Any]) -> str:
    deltas = s.get("deltas") or {}
    # a source reset during the run (pg_stat_reset, a crash restart) has
    # deltas that are no work done: none are shown (the warning says why)
    reset = set(s.get("stats_reset_during_run") or ())
    gone = "reset during the run: no figures"
    db = _first(deltas, "database")
    wal = _first(deltas, "wal")
    per = s.get("per_transaction") or {}
    since = (
        "the window's start (--warmup)"
        if s.get("from_window")
        else "before the clients connected"
    )
    lines = [
        f"server counters (over {_num(s.get('elapsed_s'), 1)} s, from {since} "
        "to after their sessions exited):"
    ]
    if "database" in reset:
        lines.append(f"  database: {gone}")
    elif db:
        lines.append(
            f"  database: {db.get('xact_commit', 0)} commits, "
            f"{db.get('xact_rollback', 0)} rollbacks, {db.get('blks_read', 0)} "
            f"blocks read, {db.get('blks_hit', 0)} hit, {db.get('temp_files', 0)} "
            f"temp files, {db.get('deadlocks', 0)} deadlocks"
        )
    if "wal" in reset:
        lines.append(f"  WAL: {gone}")
    elif wal:
        lines.append(
            f"  WAL: {_bytes(float(wal.get('wal_bytes', 0)))} in "
            f"{wal.get('wal_records', 0)} records, {wal.get('wal_fpi', 0)} "
            "full-page images"
        )
    if s.get("transactions") and not reset & {"database", "wal"}:
        ratio = per.get("hit_ratio")
        lines.append(
            f"  per transaction: {_num(per.get('wal_bytes'), 1)} WAL bytes, "
            f"{_num(per.get('wal_fpi'), 3)} FPI, {_num(per.get('blks_read'), 3)} "
            f"buffer reads, {_num(per.get('blks_hit'), 1)} buffer hits"
            + (f" (hit ratio {100 * ratio:.2f}%)" if ratio is not None else "")
        )
    if s.get("checkpoints") is not None and "checkpointer" not in reset:
        busy = " (one was in progress)" if s.get("checkpoint_in_progress_seen") else ""
        lines.append(f"  checkpoints completed: {s['checkpoints']:g}{busy}")
    if "tables" in reset:
        lines.append(f"  tables: {gone}")
    lines.extend(
        f"  {t.get('schemaname')}.{t.get('relname')}: "
        f"{t.get('n_tup_ins', 0)} inserted, {t.get('n_tup_upd', 0)} updated "
        f"({t.get('n_tup_hot_upd', 0)} HOT), {t.get('n_tup_del', 0)} deleted; "
        f"{t.get('n_dead_tup', 0)} dead tuples at the end"
        for t in ([] if "tables" in reset else deltas.get("tables") or [])
    )
    stmts = deltas.get("statements") or []
    hidden = s.get("statements_hidden") or 0
    if stmts or hidden:
        lines.append("  top statements by execution time:")
        for st in stmts[:5]:
            query = " ".join(str(st.get("query") or "").split())[:60]
            lines.append(
                f"    {_num(st.get('total_exec_time_ms'), 1):>10} ms "
                f"{st.get('calls'):>8} calls  {query}"
            )
        if hidden:
            noun = "statement" if hidden == 1 else "statements"
            lines.append(
                f"    ({hidden} {noun} of other users left out: their query id "
                "is hidden without pg_read_all_stats)"
            )
    return "".join(line + "\n" for line in lines)


def render_pooler_admin(p: Mapping[str, Any]) -> str:
    """The ``--pooler-admin`` line."""
    mode = f", {p['pool_mode']} pooling" if p.get("pool_mode") else ""
    return (
        f"pooler console (database {p.get('database')}{mode}, {p.get('reads')} "
        f"reads): {p.get('xacts')} transactions passed on, up to "
        f"{p.get('max_cl_waiting')} clients waiting for a server connection "
        f"(longest wait {_num(p.get('max_wait_ms'), 1)} ms, "
        f"{_num(p.get('wait_ms_per_xact'), 3)} ms per transaction), up to "
        f"{p.get('max_sv_active')} server connections active"
        + (f" (until the console failed: {p['stopped']})" if p.get("stopped") else "")
        + "\n"
    )


def render_insight(doc: Mapping[str, Any]) -> str:
    """The text blocks of the sections present in ``doc``."""
    out = ""
    if isinstance(doc.get("waits"), Mapping):
        out += render_waits(doc["waits"], doc.get("pooler"), doc.get("pooler_admin"))
    if isinstance(doc.get("server_stats"), Mapping):
        out += render_server_stats(doc["server_stats"])
    if isinstance(doc.get("pooler_admin"), Mapping):
        out += render_pooler_admin(doc["pooler_admin"])
    return out


#: a sampler query that took this long (and ten periods) left a gap
SAMPLER_STALL_MS = 1000.0


def _sampler_stall(w: Mapping[str, Any], prog: str, pooled: bool) -> str:
    """--waits whose sampler query was held (behind a pooler it waits for
    a server connection as the clients do: PAUSE, a full pool; on a direct
    connection, a machine too busy to answer): nothing was sampled
    meanwhile, and the shares said nothing of it. ``pooled``: the run went
    through a pooler (a direct run's warning names none)."""
    if w.get("source") != "pg_stat_activity":
        return ""  # a profile extension samples on the server meanwhile
    q = w.get("sampler_query_ms") or {}
    worst = q.get("max") or 0.0
    period = w.get("period_ms") or 0.0
    if worst < max(SAMPLER_STALL_MS, 10 * period):
        return ""
    why = (
        " (behind a pooler it waits for a server connection as the clients "
        "do; --monitor DSN goes straight to the server)"
        if pooled
        else ""
    )
    return (
        f"{prog}: warning: --waits: a sampler query took {worst / 1000:.1f} s "
        f"(one is due every {period:.0f} ms): nothing was sampled meanwhile"
        f"{why}\n"
    )


def insight_warnings(doc: Mapping[str, Any], prog: str) -> str:
    """Warnings for stderr: a --waits sampler held up, a checkpoint or a
    stats reset during the run."""
    w = doc.get("waits")
    pooled = isinstance(doc.get("pooler"), Mapping)
    out = _sampler_stall(w, prog, pooled) if isinstance(w, Mapping) else ""
    s = doc.get("server_stats")
    if not isinstance(s, Mapping):
        return out
    if s.get("checkpoint_during_run"):
        out += (
            f"{prog}: warning: a checkpoint ran during the measurement: its "
            "I/O is in the figures (compare runs without one, or CHECKPOINT "
            "before the run)\n"
        )
    resets = s.get("stats_reset_during_run") or []
    if resets:
        out += (
            f"{prog}: warning: statistics were reset during the run "
            f"({', '.join(resets)}): their deltas are wrong\n"
        )
    return out
