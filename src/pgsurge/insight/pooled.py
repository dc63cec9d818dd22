"""What the monitor does differently behind a connection pooler.

A pooler's server sessions outlive the run's clients and serve other
clients in turn (``monitor``'s docstring), so:

* the totals of ``--server-stats`` wait until the sessions have reported
  their counters (:func:`wait_for_flush`): a backend that goes idle less
  than a second after its last report keeps its counters for 10 s
  (PostgreSQL's idle stats interval), and a direct run's end snapshot
  waits for its backends' exit instead, when they report everything;
* what no wait fixes gets a warning (:func:`commits_warning`);
* ``--idle-sessions`` through a transaction pooler do not do what they do
  on a server (:func:`idle_sessions_warning`).

The functions return the warning lines (empty: none); the monitor keeps
or prints them.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pgsurge import pgconn
from pgsurge.errors import PROG
from pgsurge.insight.sampling import TAG

__all__ = [
    "FLUSH_AFTER_S",
    "FLUSH_WAIT_S",
    "IDLE_APP",
    "MONITOR_APP",
    "SERVER_STATS_WARNING",
    "commits_warning",
    "idle_sessions_warning",
    "signals_interrupt",
    "wait_before_start",
    "wait_for_flush",
]

#: every session of the database idle this long: its counters are reported
FLUSH_AFTER_S = 10.5
#: ... waiting at most this long after the run (a busy neighbour)
FLUSH_WAIT_S = 13.0
#: the monitor's own sessions (by name: behind a pooler pids are no help)
MONITOR_APP = "pgsurge monitor"
IDLE_APP = "pgsurge idle session"

# the seconds since the newest idle session of this database went idle,
# and how many are not idle (all but ours)
_IDLE_AGE_SQL = f"""{TAG} SELECT
  extract(epoch FROM pg_catalog.clock_timestamp() - max(state_change))::float8,
  count(*) FILTER (WHERE state IS DISTINCT FROM 'idle')
FROM pg_catalog.pg_stat_activity
WHERE backend_type = 'client backend' AND datname = pg_catalog.current_database()
  AND pid <> pg_catalog.pg_backend_pid()
  AND NOT pg_catalog.starts_with(application_name, '{MONITOR_APP}')
  AND NOT pg_catalog.starts_with(application_name, '{IDLE_APP}')"""


def _warning(what: str, text: str) -> str:
    return f"{PROG}: warning: {what}: {text}\n"


SERVER_STATS_WARNING = _warning(
    "--server-stats",
    "behind a connection pooler the server sessions outlive the clients and "
    f"report their counters up to {FLUSH_AFTER_S - 0.5:.0f} s after going "
    "idle: the totals wait for that (the -P interval figures lag by as much)",
)


def idle_sessions_warning(mode: str) -> str:
    """--idle-sessions (``mode``) through a transaction pooler."""
    if mode == "idle":
        text = (
            "behind a transaction pooler an idle session holds no server "
            "session at all: it adds nothing to the server"
        )
    else:
        text = (
            f"behind a transaction pooler each {mode} session "
            "pins one of the pool's server connections for the whole run (the "
            "clients share the rest); --monitor DSN opens them on the server"
        )
    return _warning("--idle-sessions", text)


# the seconds until every session of this database that went idle in the
# FLUSH_AFTER_S before $1 (the set-up's start: not the set-up's sessions)
# has reported its counters (NULL: none)
_EARLIER_SQL = f"""{TAG} SELECT max(
  extract(epoch FROM state_change)
  + {FLUSH_AFTER_S} - extract(epoch FROM pg_catalog.clock_timestamp()))::float8
FROM pg_catalog.pg_stat_activity
WHERE backend_type = 'client backend' AND datname = pg_catalog.current_database()
  AND pid <> pg_catalog.pg_backend_pid() AND state = 'idle'
  AND state_change < pg_catalog.to_timestamp($1::float8)
  AND state_change > pg_catalog.to_timestamp($1::float8) - interval '{FLUSH_AFTER_S} s'
  AND NOT pg_catalog.starts_with(application_name, '{MONITOR_APP}')
  AND NOT pg_catalog.starts_with(application_name, '{IDLE_APP}')"""


def wait_before_start(
    conn: pgconn.PgConn, found_at: float, say: Callable[[str], None]
) -> float:
    """Before the start snapshot: until the server sessions that served an
    earlier client less than :data:`FLUSH_AFTER_S` before the set-up
    (``found_at``, the server's clock) have reported their counters, which
    would otherwise count as the run's: the seconds waited, after one
    notice to ``say`` (none when nothing was waited for). Ctrl-C ends the
    program, as anywhere before the run."""
    status, res = conn.exec_params(_EARLIER_SQL, [repr(found_at)])
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return 0.0
    left = pgconn.value_text(res, 0, 0)
    if not left or float(left) <= 0:
        return 0.0
    wait = min(float(left), FLUSH_WAIT_S)
    notice = (
        f"{PROG}: notice: --server-stats: the pooler's server sessions served "
        "another client just before this run: waiting "
        f"{wait:.1f} s for their counters, which would count as the run's\n"
    )
    say(notice)
    time.sleep(wait)
    return wait


def _idle_age(conn: pgconn.PgConn) -> tuple[float | None, int]:
    """(seconds since the newest session of the database went idle,
    sessions not idle), ours left out; (None, 0) on a failure."""
    status, res = conn.exec_status(_IDLE_AGE_SQL)
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return None, 0
    age = pgconn.value_text(res, 0, 0)
    busy = int(pgconn.value_text(res, 0, 1) or 0)
    return (float(age) if age else None), busy


def wait_for_flush(conn: pgconn.PgConn) -> tuple[float, str]:
    """Until every server session of this database has been idle
    :data:`FLUSH_AFTER_S`, at most :data:`FLUSH_WAIT_S`: the seconds waited
    and a warning (empty when they were)."""
    t0 = time.monotonic()
    try:
        with signals_interrupt():
            return _wait(conn, t0)
    except KeyboardInterrupt:
        # the run is over: Ctrl-C cuts the wait short, not the report
        return time.monotonic() - t0, _warning(
            "--server-stats",
            f"the wait for the pooler's server sessions' counters was "
            f"interrupted after {time.monotonic() - t0:.1f} s: the totals "
            "may miss some of their work",
        )


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM raise ``KeyboardInterrupt``:
    the waits after the run (for the counters of the run's sessions) catch
    it and cut the wait short, not the report, and the signal is spent on
    that. Outside such a wait the parent holds a signal that comes while a
    finished run is reported and delivers it once the report is out (the
    program dies of it, engine/interrupt.py); SIGTERM's default action
    would end the program at once. In the main thread only, and never for
    a signal the program inherited ignored (nohup)."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if handler is not signal.SIG_IGN:
                previous[sig] = handler
                signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait(conn: pgconn.PgConn, t0: float) -> tuple[float, str]:
    deadline = t0 + FLUSH_WAIT_S
    while True:
        age, busy = _idle_age(conn)
        if (age is None and not busy) or (
            not busy and age is not None and age >= FLUSH_AFTER_S
        ):
            return time.monotonic() - t0, ""
        if time.monotonic() >= deadline:
            return time.monotonic() - t0, _warning(
                "--server-stats",
                "the pooler's server sessions were not all idle for "
                f"{FLUSH_AFTER_S:g} s: the totals may miss some of their work",
            )
        # few polls: each is a transaction of its own in the counters
        left = FLUSH_AFTER_S - (age or 0) + 0.05 if not busy else 0.5
        time.sleep(max(0.0, min(left, deadline - time.monotonic())))


def commits_warning(stats: dict[str, Any], transactions: int) -> str:
    """A warning when the server counted fewer transactions than the run
    made (by more than 1 %). A session reports the commits of
    transactions that touched no table only along with other counters or
    at its exit, and the pooler's sessions do not exit."""
    db = (stats.get("deltas") or {}).get("database") or {}
    counted = (db.get("xact_commit") or 0) + (db.get("xact_rollback") or 0)
    if counted >= 0.99 * transactions:
        return ""
    return _warning(
        "--server-stats",
        f"the server counted {counted:g} transactions of the run's "
        f"{transactions}: a pooled session reports the commits of "
        "transactions that touched no table only with other counters "
        "or when it exits, which the pooler's sessions do not",
    )
