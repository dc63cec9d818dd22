"""``--pooler-admin DSN``: PgBouncer's admin console, read once per interval.

The console (the ``pgbouncer`` database of a PgBouncer, speaking only the
simple query protocol, which ``PQexec`` is) answers ``SHOW POOLS`` (the
clients and server connections of each pool, now) and ``SHOW STATS``
(cumulative totals per database since PgBouncer started). Each interval
of the run's series gets, for the run's database (all users' pools
summed):

* from ``SHOW POOLS`` at the interval's end: clients active and waiting
  for a server connection, server connections active, idle and used, and
  the longest wait of a client then (``maxwait``, in ms);
* from the difference of two ``SHOW STATS``: the transactions and queries
  the pooler passed on, and the clients' wait for a server connection per
  transaction (ms).

Other poolers (pgcat, Odyssey) have consoles of their own; a command that
fails stops the reading with one warning (the caller's), the run goes on.
:class:`PoolAdmin` holds the connection; :func:`pool_point` and
:func:`stats_point` are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgsurge import pgconn
from pgsurge.errors import ConnectError

__all__ = [
    "PoolAdmin",
    "PoolAdminError",
    "check_columns",
    "pool_point",
    "stats_point",
]

Row = dict[str, str]

#: SHOW POOLS columns summed over the database's pools (JSON name, column)
POOL_SUMS: tuple[tuple[str, str], ...] = (
    ("cl_active", "cl_active"),
    ("cl_waiting", "cl_waiting"),
    ("sv_active", "sv_active"),
    ("sv_idle", "sv_idle"),
    ("sv_used", "sv_used"),
)
#: SHOW STATS totals whose differences make an interval's figures
STAT_TOTALS = ("total_xact_count", "total_query_count", "total_wait_time")

#: the columns each command must answer: without one the figures read
#: as 0 (PgBouncer before 1.8 named SHOW STATS's totals otherwise)
NEEDED: dict[str, tuple[str, ...]] = {
    "SHOW POOLS": ("database", *(col for _, col in POOL_SUMS), "maxwait"),
    "SHOW STATS": ("database", *STAT_TOTALS),
}

#: how long a console command may take to answer (they take milliseconds)
ANSWER_WAIT_S = 15.0
#: ... and the connection, when the DSN sets no ``connect_timeout``: a
#: console that accepts and never answers held the run before its start
CONNECT_WAIT_S = 15


class PoolAdminError(Exception):
    """A console command failed; the text is the pooler's message."""


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def check_columns(command: str, names: Sequence[str]) -> None:
    """Raise :class:`PoolAdminError` when the answer to ``command`` lacks
    a column the figures come from: another version's or another pooler's
    console, whose figures would otherwise be zeros that look measured."""
    missing = [c for c in NEEDED.get(command, ()) if c not in names]
    if missing:
        raise PoolAdminError(
            f"{command} has no column {', '.join(missing)} (PgBouncer 1.8 or "
            "later answers with them): not a console pgsurge can read"
        )


def pool_point(rows: Sequence[Mapping[str, str]], database: str) -> dict[str, float]:
    """The pools of ``database`` at one time (see the module doc)."""
    mine = [r for r in rows if r.get("database") == database]
    out: dict[str, float] = {
        name: float(sum(_int(r.get(col)) for r in mine)) for name, col in POOL_SUMS
    }
    wait_ms = 0.0
    for r in mine:
        us = _int(r.get("maxwait")) * 1_000_000 + _int(r.get("maxwait_us"))
        wait_ms = max(wait_ms, us / 1000.0)
    out["maxwait_ms"] = wait_ms
    return out


def _totals(rows: Sequence[Mapping[str, str]], database: str) -> dict[str, int]:
    for r in rows:
        if r.get("database") == database:
            return {k: _int(r.get(k)) for k in STAT_TOTALS}
    return dict.fromkeys(STAT_TOTALS, 0)


def stats_point(
    before: Mapping[str, int], after: Mapping[str, int]
) -> dict[str, float]:
    """The differences of two ``SHOW STATS`` totals of the database."""
    xacts = after["total_xact_count"] - before["total_xact_count"]
    wait_us = after["total_wait_time"] - before["total_wait_time"]
    return {
        "xacts": float(xacts),
        "queries": float(after["total_query_count"] - before["total_query_count"]),
        "wait_ms_per_xact": wait_us / 1000.0 / xacts if xacts > 0 else 0.0,
    }


@dataclass
class PoolAdmin:
    """The console connection and what it read (see the module doc)."""

    conn: pgconn.PgConn
    #: the run's database as the pooler names it
    database: str
    first: dict[str, int] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    points: int = 0
    max_cl_waiting: float = 0.0
    max_sv_active: float = 0.0
    max_wait_ms: float = 0.0
    pool_mode: str = ""
    #: why the reading stopped before the end of the run (empty: it did
    #: not); what was read until then is kept
    stopped: str = ""

    @classmethod
    def connect(cls, dsn: str, database: str, password: str | None) -> PoolAdmin:
        """Connect to the console; raises :class:`ConnectError`."""
        try:
            items = {"dbname": dsn, "fallback_application_name": "pgsurge"}
            conn = pgconn.connect_or_raise(
                pgconn.bounded(items, CONNECT_WAIT_S), password
            )
        except ConnectError as exc:  # say which connection failed
            raise ConnectError(f"--pooler-admin: {exc}") from None
        admin = cls(conn, database)
        command = "SHOW STATS"
        try:
            admin.first = admin.last = _totals(admin._rows(command), database)
            command = "SHOW POOLS"
            pools = admin._rows(command)
        except PoolAdminError as exc:
            conn.finish()
            text = str(exc)
            if not text.startswith(command):
                text = f"{command}: {text}"
            raise ConnectError(f"--pooler-admin: {text}") from None
        modes = {r.get("pool_mode", "") for r in pools if r.get("database") == database}
        admin.pool_mode = ",".join(sorted(m for m in modes if m))
        return admin

    def _rows(self, command: str) -> list[Row]:
        # at most ANSWER_WAIT_S: a PgBouncer that hangs (stopped) held the
        # end of the run, its report and its signals (pgconn.exec_bounded)
        try:
            res = pgconn.exec_bounded(
                self.conn, lambda raw: raw.send_query(command.encode()), ANSWER_WAIT_S
            )
        except pgconn.LibpqError as exc:
            raise PoolAdminError(pgconn.strip_newline(str(exc))) from None
        status = int(res.status)
        if status != pgconn.TUPLES_OK:
            raise PoolAdminError(pgconn.strip_newline(self.conn.error_message()))
        names = [pgconn.field_name(res, c) for c in range(res.nfields)]
        check_columns(command, names)
        return [
            {n: pgconn.value_text(res, r, c) for c, n in enumerate(names)}
            for r in range(res.ntuples)
        ]

    def read(self) -> dict[str, float]:
        """One interval's figures: the pools now, the totals since the
        previous read. Raises :class:`PoolAdminError`."""
        point = pool_point(self._rows("SHOW POOLS"), self.database)
        totals = _totals(self._rows("SHOW STATS"), self.database)
        point.update(stats_point(self.last, totals))
        self.last = totals
        self.points += 1
        self.max_cl_waiting = max(self.max_cl_waiting, point["cl_waiting"])
        self.max_sv_active = max(self.max_sv_active, point["sv_active"])
        self.max_wait_ms = max(self.max_wait_ms, point["maxwait_ms"])
        return point

    def summary(self) -> dict[str, Any]:
        """The run's ``pooler_admin`` JSON section."""
        total = stats_point(self.first, self.last)
        return {
            "database": self.database,
            "pool_mode": self.pool_mode or None,
            "reads": self.points,
            "xacts": int(total["xacts"]),
            "queries": int(total["queries"]),
            "wait_ms_per_xact": total["wait_ms_per_xact"],
            "max_cl_waiting": int(self.max_cl_waiting),
            "max_sv_active": int(self.max_sv_active),
            "max_wait_ms": self.max_wait_ms,
            # the figures cover the run up to the last read only
            **({"stopped": self.stopped} if self.stopped else {}),
        }

    def restart(self) -> None:
        """--warmup's window opens: the run's figures count from here (the
        interval points go on from the previous read). Raises
        :class:`PoolAdminError`."""
        self.first = _totals(self._rows("SHOW STATS"), self.database)
        self.points = 0
        self.max_cl_waiting = self.max_sv_active = self.max_wait_ms = 0.0

    def stop(self, reason: str) -> None:
        """The console failed: no more reads, the figures so far kept."""
        self.stopped = reason
        self.conn.finish()

    def close(self) -> None:
        if not self.stopped:
            self.conn.finish()
