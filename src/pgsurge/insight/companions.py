"""``--idle-sessions N[:MODE]``: companion sessions held open for a whole run.

"pgbench plus one idle open transaction": the contention a long-lived
session adds to a benchmark. Each session is a connection of its own,
opened before the workers connect and closed after they are done (on
abort and Ctrl-C too: the runner closes them in a ``finally``; a process
killed outright closes its sockets, and the server ends the sessions):

* ``idle``: connected, doing nothing (a backend slot, a ``pg_stat_activity``
  row);
* ``xact``: idle in a transaction that holds a transaction id
  (``txid_current()``): every snapshot of the run lists it as running, and
  the xmin horizon cannot pass it;
* ``snapshot``: idle in a ``REPEATABLE READ`` transaction that took its
  snapshot: the xmin horizon stays where it was, so no row version
  deleted or updated during the run can be vacuumed away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgsurge import pgconn
from pgsurge.config import IdleMode
from pgsurge.errors import ConnectError

__all__ = ["Companions", "open_companions"]

#: the statements that put a fresh session in each mode
_START: dict[IdleMode, tuple[str, ...]] = {
    IdleMode.IDLE: (),
    IdleMode.XACT: ("BEGIN", "SELECT pg_catalog.txid_current()"),
    IdleMode.SNAPSHOT: ("BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT 1"),
}

DESCRIPTION = {
    IdleMode.IDLE: "idle",
    IdleMode.XACT: "idle in a transaction holding an xid",
    IdleMode.SNAPSHOT: "idle in a REPEATABLE READ transaction holding a snapshot",
}


@dataclass(slots=True)
class Companions:
    mode: IdleMode
    conns: list[pgconn.PgConn] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)

    def header_line(self) -> str:
        n = len(self.conns)
        noun = "session" if n == 1 else "sessions"
        return (
            f"idle sessions: {n} {noun} {DESCRIPTION[self.mode]} "
            f"({self.mode.value}), held open for the run\n"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": len(self.conns),
            "mode": self.mode.value,
            "description": DESCRIPTION[self.mode],
            "pids": list(self.pids),
        }

    def close(self) -> None:
        """End every session (an open transaction is rolled back by the
        server as the connection closes). Idempotent."""
        conns, self.conns = self.conns, []
        for conn in conns:
            conn.finish()


def open_companions(
    items: dict[str, str], password: str | None, count: int, mode: IdleMode
) -> Companions:
    """Open ``count`` sessions in ``mode``; on a failure close those opened
    and raise :class:`ConnectError`."""
    comp = Companions(mode)
    items = {**items, "application_name": "pgsurge idle session"}
    try:
        for _ in range(count):
            conn = pgconn.connect_or_raise(items, password)
            comp.conns.append(conn)
            comp.pids.append(conn.backend_pid)
            for sql in _START[mode]:
                status, _res = conn.exec_status(sql)
                if status not in (pgconn.COMMAND_OK, pgconn.TUPLES_OK):
                    # the first line: a statement pooler closes the
                    # connection, and libpq adds its lines about that
                    message = conn.error_message().strip()
                    raise ConnectError(
                        "could not start an idle session: "
                        + (message.splitlines()[0] if message else "failed")
                        + (
                            " (a statement pooler allows no transaction "
                            "block: --monitor DSN opens them on the server)"
                            if "statement pooling" in message
                            else ""
                        )
                    )
    except BaseException:
        comp.close()
        raise
    return comp
