"""Where wait samples come from: ``pg_stat_activity`` or ``pg_wait_sampling``.

Both run on the monitor's own connection, never in a worker.

* :class:`ActivitySampler` runs one prepared statement per period
  (``--waits=MS``, 100 ms by default) and classifies each row (see
  ``waits``). Prepared, because parsing and planning the view's query costs
  ten times its execution (~0.05 ms prepared with a few backends, ~0.5 ms
  simple: design notes, section 2). Each sample is its own transaction: a
  backend-status snapshot is cached until the transaction ends.
* :class:`ProfileSampler` reads the ``pg_wait_sampling_profile`` view of
  the extension (an in-server collector sampling every
  ``pg_wait_sampling.profile_period``, 10 ms by default) once per interval
  of the series and adds the *differences* since the previous read. It
  never resets the profile (other users share it); a count that went down
  (someone reset it) counts from zero again.

Rows are selected by the run's own pids; under ``-C`` (a new backend per
transaction: no pids to know in advance) and behind a pooler by the
workers' ``application_name`` in the same database instead, which counts
any other client with that name too, but no session idle since before
sampling started (a pooler's server sessions outlive the run that named
them). Background processes come with their
``backend_type`` when the monitor may see them (``pg_read_all_stats``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from pgsurge import pgconn
from pgsurge.insight.waits import BgLabel, Label, WaitProfile
from pgsurge.insight.waits import classify_background as _bg
from pgsurge.insight.waits import classify_own as _own

__all__ = ["ActivitySampler", "ProfileSampler", "SamplerError", "pg_array"]

#: the statements' comment, to tell them apart in pg_stat_statements
TAG = "/* pgsurge monitor */"

_ACTIVITY_SQL = f"""{TAG}
SELECT pid, coalesce(state, ''), coalesce(wait_event_type, ''),
       coalesce(wait_event, ''), coalesce(backend_type, '')
FROM pg_catalog.pg_stat_activity
WHERE pid = ANY($1::int[])
   OR ($2::text IS NOT NULL
       AND (application_name = $2
            OR pg_catalog.starts_with(application_name, $2 || ' - '))
       AND backend_type = 'client backend'
       AND datname = pg_catalog.current_database()
       AND pid <> pg_catalog.pg_backend_pid() AND pid <> ALL($3::int[])
       AND (state IS DISTINCT FROM 'idle'
            OR state_change >= pg_catalog.to_timestamp($5::float8)))
   OR ($4::bool AND backend_type <> 'client backend')"""
# the server's clock when sampling starts (seconds since the epoch)
_NOW_SQL = f"{TAG} SELECT extract(epoch FROM pg_catalog.clock_timestamp())::text"

# counts per pid and event, with the process's backend type when it still
# runs (a gone backend's counts stay in the profile: they are its own)
_PROFILE_SQL = f"""{TAG}
SELECT p.pid, coalesce(p.event_type, ''), coalesce(p.event, ''),
       coalesce(a.backend_type, ''), sum(p.count)::int8
FROM pg_wait_sampling_profile p
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = p.pid
WHERE p.pid = ANY($1::int[]) OR ($2::bool AND a.backend_type <> 'client backend')
GROUP BY 1, 2, 3, 4"""


class SamplerError(Exception):
    """A sampling query failed; the text is the server's message."""


def pg_array(values: Sequence[int]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def _clock() -> int:
    return time.monotonic_ns() // 1000


#: a sampler used alone (tests) needs no lock around its profile
_NO_LOCK: AbstractContextManager[Any] = nullcontext()


def _fail(conn: pgconn.PgConn) -> SamplerError:
    return SamplerError(pgconn.strip_newline(conn.error_message()))


@dataclass(slots=True)
class ActivitySampler:
    """``pg_stat_activity`` samples, one prepared statement each."""

    conn: pgconn.PgConn
    pids: tuple[int, ...]
    #: under -C: the workers' application_name (None: select by pids)
    app_name: str | None
    #: pids never to count under -C (the idle sessions)
    exclude: tuple[int, ...]
    background: bool
    #: a named prepared statement (not through a transaction pooler)
    prepared: bool = True
    name: bytes = b"pgsurge_waits"
    params: list[str | None] = field(default_factory=list)
    own_pids: frozenset[int] = frozenset()
    #: by name: the server pids sampled (behind a pooler, its sessions)
    seen: set[int] = field(default_factory=set)

    source = "pg_stat_activity"

    def prepare(self) -> None:
        if self.prepared:
            error = self.conn.prepare(self.name, _ACTIVITY_SQL.encode())
            if error is not None:
                raise SamplerError(pgconn.strip_newline(error))
        # by name, a session idle since before sampling started is none of
        # the run's: a pooler's server session left from an earlier run
        # (or another client's), which would count as the client's wait
        since = "0"
        if self.app_name is not None:
            status, res = self.conn.exec_status(_NOW_SQL)
            if status != pgconn.TUPLES_OK or res.ntuples == 0:
                raise _fail(self.conn)
            since = pgconn.value_text(res, 0, 0)
        self.params = [
            pg_array(self.pids),
            self.app_name,
            pg_array(self.exclude),
            "true" if self.background else "false",
            since,
        ]
        self.own_pids = frozenset(self.pids)

    def sample(
        self, profile: WaitProfile, lock: AbstractContextManager[Any] = _NO_LOCK
    ) -> None:
        """One sample into ``profile``, changed under ``lock`` only: the
        query may wait (behind a pooler that holds the clients, up to the
        answer bound), and the -P lines read the profile meanwhile."""
        t0 = _clock()
        if self.prepared:
            status, res = self.conn.exec_prepared(self.name, self.params)
        else:
            status, res = self.conn.exec_params(_ACTIVITY_SQL, self.params)
        now = _clock()
        if status != pgconn.TUPLES_OK:
            raise _fail(self.conn)
        own: list[Label] = []
        bg: list[BgLabel] = []
        text = pgconn.value_text
        by_app = self.app_name is not None
        for row in range(res.ntuples):
            pid = int(text(res, row, 0))
            state, wtype, wevent, btype = (text(res, row, c) for c in (1, 2, 3, 4))
            if pid in self.own_pids or (by_app and btype == "client backend"):
                own.append(_own(state, wtype, wevent))
                if by_app:
                    self.seen.add(pid)
            elif (label := _bg(btype, wtype, wevent)) is not None:
                bg.append(label)
        with lock:
            profile.record_query(now - t0)
            profile.add_rows(now, own, bg)


@dataclass(slots=True)
class ProfileSampler:
    """Differences of the ``pg_wait_sampling`` profile (see the module doc)."""

    conn: pgconn.PgConn
    pids: tuple[int, ...]
    background: bool
    #: the collector's sampling period
    period_ms: float
    name: bytes = b"pgsurge_wait_profile"
    last: dict[tuple[int, str, str, str], int] = field(default_factory=dict)
    last_us: int = 0

    source = "pg_wait_sampling"

    def prepare(self) -> None:
        error = self.conn.prepare(self.name, _PROFILE_SQL.encode())
        if error is not None:
            raise SamplerError(pgconn.strip_newline(error))
        self.last = self._read()
        self.last_us = _clock()

    def _read(self) -> dict[tuple[int, str, str, str], int]:
        params = [pg_array(self.pids), "true" if self.background else "false"]
        status, res = self.conn.exec_prepared(self.name, params)
        if status != pgconn.TUPLES_OK:
            raise _fail(self.conn)
        text = pgconn.value_text
        out: dict[tuple[int, str, str, str], int] = {}
        for row in range(res.ntuples):
            key = (
                int(text(res, row, 0)),
                text(res, row, 1),
                text(res, row, 2),
                text(res, row, 3),
            )
            out[key] = int(text(res, row, 4))
        return out

    def sample(
        self, profile: WaitProfile, lock: AbstractContextManager[Any] = _NO_LOCK
    ) -> None:
        """As :meth:`ActivitySampler.sample`."""
        t0 = _clock()
        current = self._read()
        now = _clock()
        own: Counter[Label] = Counter()
        bg: Counter[BgLabel] = Counter()
        pids = frozenset(self.pids)
        for key, count in current.items():
            before = self.last.get(key, 0)
            delta = count - before if count >= before else count
            if delta <= 0:
                continue
            pid, wtype, wevent, btype = key
            # the profile has no state: an idle backend waits in ClientRead,
            # an active one on the CPU has no event
            if pid in pids:
                own[_own("active", wtype, wevent)] += delta
            elif (label := _bg(btype, wtype, wevent)) is not None:
                bg[label] += delta
        ticks = (now - self.last_us) / (self.period_ms * 1000.0)
        self.last, self.last_us = current, now
        with lock:
            profile.record_query(now - t0)
            profile.add(now, own, bg, ticks)
