"""``--host-stats``: the client host's load during a run, by ``-P`` interval.

The monitor (``monitor.py``) owns one :class:`HostWatch`: a snapshot of
the host's counters (``stats.host``) at GO, one at each ``-P`` boundary
(on the monitor's thread, with the server counters when both are asked
for) and one at the end. Each interval gets the host's CPU split (user,
system, iowait, steal, idle), context switches per second, memory
available and dirty, and, when the server is on this host, its disks'
reads and writes (``/proc/diskstats``): a checkpoint's I/O burst, a noisy
neighbour's steal, next to the interval's tps. The whole run gets the
same figures from GO to the end (``host_stats`` in the document).

Only whole disks are counted and only when the target is local (a Unix
socket, ``localhost``, a loopback address, the embedded server): a remote
server's I/O is not on this host's disks.
"""

from __future__ import annotations

from typing import Any

from pgsurge.config import ConnParams
from pgsurge.stats.host import HostSnapshot, host_figures

__all__ = ["HostWatch", "server_is_local"]

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def server_is_local(conn: ConnParams) -> bool:
    """Whether the target runs on this host (see the module doc)."""
    if conn.embedded:
        return True
    hosts = [h.strip() for h in (conn.host or "").split(",")]
    return all(not h or h.startswith("/") or h in _LOOPBACK for h in hosts)


class HostWatch:
    """Snapshots at GO, at each boundary and at the end (module doc)."""

    def __init__(self, *, disks: bool) -> None:
        self.disks = disks
        self.first = HostSnapshot.take(disks=disks)
        self.last = self.first
        #: interval start (monotonic µs) → figures
        self.intervals: dict[int, dict[str, Any]] = {}

    def go(self) -> None:
        """GO: the run's figures start here."""
        self.first = self.last = HostSnapshot.take(disks=self.disks)

    def boundary(self, interval_start_us: int) -> None:
        """The end of the interval that started at ``interval_start_us``."""
        snap = HostSnapshot.take(disks=self.disks)
        if snap is not None and self.last is not None:
            self.intervals[interval_start_us] = host_figures(self.last, snap)
        self.last = snap

    def finish(self, tail_start_us: int | None) -> dict[str, Any] | None:
        """The run's section (None off Linux); the last, partial interval
        (starting at ``tail_start_us``) is closed too."""
        end = HostSnapshot.take(disks=self.disks)
        if end is None or self.first is None:
            return None
        if tail_start_us is not None and self.last is not None:
            self.intervals[tail_start_us] = host_figures(self.last, end)
        return {
            "source": "/proc",
            "disks_counted": self.disks,
            "elapsed_s": end.taken_s - self.first.taken_s,
            **host_figures(self.first, end),
        }
