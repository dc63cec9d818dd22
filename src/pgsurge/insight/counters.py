"""Server counters around a run (``--server-stats``): snapshots and deltas.

A snapshot reads the cumulative statistics views listed in
:data:`SOURCES` (a table: the view, the first server version that has it,
the columns that name a row) as ``to_jsonb`` of each row, so that every
column of whatever release the server runs comes along and nothing here
depends on a column list (PostgreSQL 18 replaced ``op_bytes`` by
``*_bytes`` in ``pg_stat_io`` and dropped ``wal_write``/``wal_sync`` from
``pg_stat_wal``). A delta is the difference of every numeric column
between two snapshots, per row; a few columns are levels, not counters
(``n_dead_tup``...), and are reported as their end value.

Each snapshot is one transaction, with ``stats_fetch_consistency =
snapshot`` where the server has it (15+), so that its views agree with
each other. The numbers lag: a busy backend flushes its pending counters
at most once a second (``PGSTAT_MIN_INTERVAL``), and at exit. So the
start snapshot is read before the workers connect, the end snapshot after
the run's backends have exited (the monitor waits for their pids to leave
``pg_stat_activity``): the run's totals are complete. The ``-P`` interval
figures may each be off by up to a second's work, moved into the next
interval; their sum is the total.

``pg_stat_statements`` rows are keyed by user, query id and nesting
level. A user without ``pg_read_all_stats`` sees other users' rows with
the query id (and text) hidden: they cannot be told apart, so they are
left out and counted (:func:`hidden_statements`), never diffed. The
monitor's own statements are left out by their text (``own``: see
``insight/own.py``), not by a comment PostgreSQL 18 drops.

Everything here but :func:`take_snapshot` is pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgsurge import pgconn
from pgsurge.redact import redact_text

__all__ = [
    "SOURCES",
    "Snapshot",
    "StatSource",
    "checkpoints",
    "delta",
    "hidden_statements",
    "interval_figures",
    "per_transaction",
    "resets",
    "run_deltas",
    "take_snapshot",
    "touched_tables",
]

Row = dict[str, Any]
TAG = "/* pgsurge monitor */"


@dataclass(frozen=True, slots=True)
class StatSource:
    """One view read by a snapshot."""

    #: the key in the JSON ``server_stats.deltas``
    name: str
    view: str
    #: the first server version that has the view
    min_version: int
    #: the columns that identify a row (none: one row)
    key: tuple[str, ...] = ()
    #: the rows to read (``$1``: the touched tables' names)
    where: str = ""
    #: read at start and end only (large, or pointless per interval)
    ends_only: bool = False
    #: an extension's view: its absence is no warning
    optional: bool = False

    def sql(self) -> str:
        where = f" WHERE {self.where}" if self.where else ""
        return f"{TAG} SELECT pg_catalog.to_jsonb(s)::text FROM {self.view} s{where}"

    @property
    def takes_tables(self) -> bool:
        return "$1" in self.where


SOURCES: tuple[StatSource, ...] = (
    StatSource(
        "database",
        "pg_catalog.pg_stat_database",
        0,
        where="datname = pg_catalog.current_database()",
    ),
    StatSource("wal", "pg_catalog.pg_stat_wal", 140000),
    StatSource(
        "io", "pg_catalog.pg_stat_io", 160000, ("backend_type", "object", "context")
    ),
    StatSource("checkpointer", "pg_catalog.pg_stat_checkpointer", 170000),
    StatSource("bgwriter", "pg_catalog.pg_stat_bgwriter", 0),
    StatSource(
        "tables",
        "pg_catalog.pg_stat_user_tables",
        0,
        ("schemaname", "relname"),
        where="relname = ANY($1::text[])",
    ),
    StatSource(
        "statements",
        "pg_stat_statements",
        130000,
        ("userid", "queryid", "toplevel"),
        where="dbid = (SELECT oid FROM pg_catalog.pg_database"
        " WHERE datname = pg_catalog.current_database())"
        " AND query NOT LIKE '%pgsurge monitor%'",
        ends_only=True,
        optional=True,
    ),
)

#: columns that are levels, not counters: reported as their end value
LEVELS = frozenset(
    {
        "n_live_tup",
        "n_dead_tup",
        "n_mod_since_analyze",
        "n_ins_since_vacuum",
        "numbackends",
        "op_bytes",
        "stddev_exec_time",
        "min_exec_time",
        "max_exec_time",
        "mean_exec_time",
        "stddev_plan_time",
        "min_plan_time",
        "max_plan_time",
        "mean_plan_time",
        "stddev_time",
        "min_time",
        "max_time",
        "mean_time",
    }
)
#: identifiers that are numbers but no counters
_IDS = frozenset({"datid", "relid", "userid", "dbid", "queryid", "toplevel"})
#: the top statements kept, by execution time in the run
TOP_STATEMENTS = 10


@dataclass(slots=True)
class Snapshot:
    """The rows of each source at one time (monotonic µs)."""

    taken_us: int
    rows: dict[str, list[Row]] = field(default_factory=dict)


def touched_tables(texts: Iterable[str]) -> list[str]:
    """Every identifier-like word of the scripts: the tables they may touch
    are among them (``pg_stat_user_tables`` keeps the ones that exist)."""
    words: set[str] = set()
    for text in texts:
        words.update(w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_$]*", text))
    return sorted(words)


def take_snapshot(
    conn: pgconn.PgConn,
    sources: Sequence[StatSource],
    tables: Sequence[str],
    now_us: int,
    *,
    consistent: bool,
) -> tuple[Snapshot, StatSource | None, str]:
    """Read ``sources`` in one transaction. On a failure, returns the
    source that failed and the message (the caller drops it and retries)."""
    snap = Snapshot(now_us)
    status, _res = conn.exec_status("BEGIN")
    if status != pgconn.COMMAND_OK:
        # no source's fault: the connection refused the transaction (a
        # statement pooler closes it: "transaction blocks not allowed")
        raise pgconn.LibpqError(_first_line(conn.error_message()))
    if consistent:
        conn.exec_status("SET LOCAL stats_fetch_consistency = 'snapshot'")
    array = "{" + ",".join('"' + t.replace('"', '\\"') + '"' for t in tables) + "}"
    for src in sources:
        if src.takes_tables:
            status, res = conn.exec_params(src.sql(), [array])
        else:
            status, res = conn.exec_status(src.sql())
        if status != pgconn.TUPLES_OK:
            message = pgconn.strip_newline(conn.error_message())
            conn.exec_status("ROLLBACK")
            return snap, src, message
        snap.rows[src.name] = [
            json.loads(pgconn.value_text(res, r, 0)) for r in range(res.ntuples)
        ]
    conn.exec_status("COMMIT")
    return snap, None, ""


def _first_line(message: str) -> str:
    """libpq's message without what it adds after a lost connection."""
    return message.strip().splitlines()[0] if message.strip() else "failed"


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _row_delta(before: Row | None, after: Row, src: StatSource) -> Row:
    out: Row = {k: after.get(k) for k in src.key}
    for k, v in after.items():
        if k in src.key or k in _IDS or not _number(v):
            continue
        if k in LEVELS:
            out[k] = v
            continue
        b = before.get(k) if before else 0
        out[k] = v - b if _number(b) else v
    return out


def _key(row: Row, src: StatSource) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in src.key)


def delta(src: StatSource, start: Sequence[Row], end: Sequence[Row]) -> list[Row]:
    """Per row of ``end``: its counters minus ``start``'s (rows only at the
    end count from zero); rows in which nothing moved are left out."""
    before = {_key(r, src): r for r in start}
    out = []
    for row in end:
        d = _row_delta(before.get(_key(row, src)), row, src)
        if any(v for k, v in d.items() if k not in src.key and k not in LEVELS):
            out.append(d)
    return out


def _sum(rows: Sequence[Row], column: str) -> float | None:
    values = [r[column] for r in rows if _number(r.get(column))]
    return sum(values) if values else None


def checkpoints(rows: Mapping[str, Sequence[Row]]) -> float | None:
    """The checkpoints counted in ``rows`` (a snapshot's, or a delta's):
    ``num_done`` (18), else timed + requested (17: skipped ones included;
    before 17, ``pg_stat_bgwriter``'s)."""
    cp = rows.get("checkpointer")
    if cp:
        done = _sum(cp, "num_done")
        if done is not None:
            return done
        timed, req = _sum(cp, "num_timed"), _sum(cp, "num_requested")
        if timed is not None or req is not None:
            return (timed or 0) + (req or 0)
    bg = rows.get("bgwriter")
    if bg:
        timed, req = _sum(bg, "checkpoints_timed"), _sum(bg, "checkpoints_req")
        if timed is not None or req is not None:
            return (timed or 0) + (req or 0)
    return None


#: the compact per-interval figures: (JSON name, source, column)
INTERVAL_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("xact_commit", "database", "xact_commit"),
    ("xact_rollback", "database", "xact_rollback"),
    ("blks_read", "database", "blks_read"),
    ("blks_hit", "database", "blks_hit"),
    ("temp_bytes", "database", "temp_bytes"),
    ("wal_records", "wal", "wal_records"),
    ("wal_fpi", "wal", "wal_fpi"),
    ("wal_bytes", "wal", "wal_bytes"),
)


def _deltas(
    start: Snapshot, end: Snapshot, sources: Sequence[StatSource]
) -> dict[str, list[Row]]:
    return {
        s.name: delta(s, start.rows[s.name], end.rows[s.name])
        for s in sources
        if s.name in start.rows and s.name in end.rows
    }


def interval_figures(
    prev: Snapshot, cur: Snapshot, sources: Sequence[StatSource]
) -> dict[str, float]:
    """The few counters shown per ``-P`` interval."""
    deltas = _deltas(prev, cur, [s for s in sources if not s.ends_only])
    out: dict[str, float] = {}
    for name, src, column in INTERVAL_FIGURES:
        if src in deltas:
            out[name] = _sum(deltas[src], column) or 0
    before, after = checkpoints(prev.rows), checkpoints(cur.rows)
    if before is not None and after is not None:
        out["checkpoints"] = after - before
    return out


def per_transaction(
    deltas: Mapping[str, Sequence[Row]], transactions: int
) -> dict[str, float | None]:
    """WAL bytes, full-page images, buffer reads and hits per transaction."""

    def per(src: str, column: str) -> float | None:
        if src not in deltas or not transactions:
            return None
        return (_sum(deltas[src], column) or 0) / transactions

    hit = _sum(deltas.get("database", []), "blks_hit")
    read = _sum(deltas.get("database", []), "blks_read")
    ratio = (
        hit / (hit + read)
        if hit is not None and read is not None and hit + read
        else None
    )
    return {
        "wal_bytes": per("wal", "wal_bytes"),
        "wal_records": per("wal", "wal_records"),
        "wal_fpi": per("wal", "wal_fpi"),
        "blks_read": per("database", "blks_read"),
        "blks_hit": per("database", "blks_hit"),
        "hit_ratio": ratio,
    }


def _top_statements(rows: Sequence[Row]) -> list[Row]:
    time_key = "total_exec_time"
    if rows and time_key not in rows[0]:
        time_key = "total_time"
    moved = [r for r in rows if (r.get("calls") or 0) > 0]
    moved.sort(key=lambda r: -(r.get(time_key) or 0))
    out = []
    for r in moved[:TOP_STATEMENTS]:
        calls = r.get("calls") or 0
        total = r.get(time_key) or 0
        out.append(
            {
                "queryid": r.get("queryid"),
                # another session's ALTER ROLE … PASSWORD '…' is kept
                # with its literal by pg_stat_statements
                "query": redact_text(str(r.get("query") or ""))[:300],
                "calls": calls,
                "total_exec_time_ms": total,
                "mean_exec_time_ms": total / calls if calls else None,
                "rows": r.get("rows"),
                "shared_blks_hit": r.get("shared_blks_hit"),
                "shared_blks_read": r.get("shared_blks_read"),
                "wal_bytes": r.get("wal_bytes"),
            }
        )
    return out


def _visible(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.get("queryid") is not None]


def hidden_statements(end: Snapshot) -> int:
    """The ``pg_stat_statements`` rows of the end snapshot whose query id
    the user may not see (other users', without ``pg_read_all_stats``)."""
    return sum(1 for r in end.rows.get("statements", []) if r.get("queryid") is None)


def run_deltas(
    start: Snapshot,
    end: Snapshot,
    sources: Sequence[StatSource],
    own: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """The whole run's deltas, by source (statements: the top ones, without
    hidden rows nor those whose text ``own`` says is the monitor's)."""
    out: dict[str, Any] = {}
    for s in sources:
        if s.name not in start.rows or s.name not in end.rows:
            continue
        if s.name == "statements":
            end_rows = _visible(end.rows[s.name])
            if own is not None:
                end_rows = [r for r in end_rows if not own(str(r.get("query") or ""))]
            rows = delta(s, _visible(start.rows[s.name]), end_rows)
        else:
            rows = delta(s, start.rows[s.name], end.rows[s.name])
        if s.name == "statements":
            # the query text is no counter: take it from the end rows
            text = {_key(r, s): r.get("query") for r in end.rows[s.name]}
            for r in rows:
                r["query"] = text.get(_key(r, s))
            out[s.name] = _top_statements(rows)
        elif s.key:
            out[s.name] = rows
        else:
            out[s.name] = rows[0] if rows else {}
    return out


def _went_back(src: StatSource, start: Sequence[Row], end: Sequence[Row]) -> bool:
    """Whether a counter of a row is lower at the end than at the start:
    reset without a ``stats_reset`` to say so (a table's counters, a crash
    restart, which discards every counter)."""
    before = {_key(r, src): r for r in start}
    for row in end:
        old = before.get(_key(row, src))
        if old is None:
            continue
        for k, v in row.items():
            if k in src.key or k in _IDS or k in LEVELS or not _number(v):
                continue
            b = old.get(k)
            if _number(b) and v < b:
                return True
    return False


def resets(start: Snapshot, end: Snapshot) -> list[str]:
    """The sources whose counters were reset between two snapshots."""
    by_name = {src.name: src for src in SOURCES}
    out = []
    for name, rows in end.rows.items():
        before = {json.dumps(r.get("stats_reset")) for r in start.rows.get(name, [])}
        after = {json.dumps(r.get("stats_reset")) for r in rows if "stats_reset" in r}
        src = by_name.get(name)
        if (after and before and not after <= before) or (
            src is not None and _went_back(src, start.rows.get(name, []), rows)
        ):
            out.append(name)
    return out
