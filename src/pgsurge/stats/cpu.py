"""Client CPU accounting: how busy each worker was, to tell a client-bound run.

A benchmark client that saturates its CPU measures itself, not the server
(pgbench once spent as much time in the kernel as in user code on a shared
``random()`` lock). Each worker is one Python thread of execution, so its
CPU time over its wall time is its utilisation: near 100% means the worker
could not keep up and more workers (-j) would raise the figures.

``CpuMeter`` reads the calling thread's own user and system time
(``RUSAGE_THREAD``, Linux; the whole process elsewhere, which is the same
thing for a worker process): start it at GO and stop it when the worker's
clients are done, on the thread that runs the worker's loop. ``WorkerCpu``
is the per-worker figure a ``RunResult`` carries to the reports; with the
time the worker's loop spent blocked waiting (``idle_us``, measured by the
engine around its poll/select calls) it also gives the busy fraction, which
stays right when the machine is oversubscribed and CPU time lags wall time.
"""

from __future__ import annotations

import resource
from typing import Any

from pgsurge.records import record

__all__ = [
    "BUSY_THRESHOLD",
    "IMPL_C_LOOP",
    "IMPL_FASTPQ",
    "IMPL_PURE",
    "CpuMeter",
    "CpuTimes",
    "WorkerCpu",
    "thread_cpu",
]

#: what ran a worker's transactions: the C event loop (pgsurge._fastloop),
#: the Python engine with its libpq calls fused in C (pgsurge._fastpq), or
#: the Python engine alone
IMPL_C_LOOP = "C event loop"
IMPL_FASTPQ = "Python engine, C libpq calls"
IMPL_PURE = "pure Python"

#: a worker busier than this fraction of its wall time is the bottleneck
BUSY_THRESHOLD = 0.90

_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


@record(frozen=True, slots=True)
class CpuTimes:
    """User and system CPU seconds."""

    user_s: float = 0.0
    sys_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.user_s + self.sys_s

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user_s - other.user_s, self.sys_s - other.sys_s)


def thread_cpu() -> CpuTimes:
    """CPU time used so far by the calling thread (process on non-Linux)."""
    ru = resource.getrusage(_WHO)
    return CpuTimes(ru.ru_utime, ru.ru_stime)


class CpuMeter:
    """CPU used by the calling thread between ``start`` and ``stop``."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start = CpuTimes()

    def start(self) -> None:
        self._start = thread_cpu()

    def stop(self) -> CpuTimes:
        """CPU used since ``start`` (call on the same thread)."""
        return thread_cpu() - self._start


@record(frozen=True, slots=True)
class WorkerCpu:
    """One worker's CPU over its benchmark time."""

    worker_id: int
    user_s: float
    sys_s: float
    #: the worker's wall time over which the CPU was measured (GO to end)
    wall_us: int
    #: time its loop spent blocked waiting for sockets or timers in that
    #: span; -1 when the engine did not measure it
    idle_us: int = -1
    #: what ran the worker's transactions (``IMPLEMENTATIONS``); "" unknown
    implementation: str = ""

    @property
    def utilisation(self) -> float:
        """(user + sys) / wall, 0.0 when the wall time is not known."""
        if self.wall_us <= 0:
            return 0.0
        return (self.user_s + self.sys_s) / (self.wall_us / 1e6)

    @property
    def busy_fraction(self) -> float:
        """Share of the wall time the worker was not waiting: 1 - idle/wall
        when the idle time is known, else its CPU utilisation. On a loaded
        machine a runnable worker gets less CPU than wall time, but it is
        the bottleneck all the same: the idle time tells, the CPU may not."""
        if self.idle_us < 0 or self.wall_us <= 0:
            return self.utilisation
        return max(0.0, 1.0 - self.idle_us / self.wall_us)

    @property
    def busy(self) -> bool:
        return self.busy_fraction > BUSY_THRESHOLD

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "user_s": self.user_s,
            "sys_s": self.sys_s,
            "wall_us": self.wall_us,
            "idle_us": self.idle_us,
            "implementation": self.implementation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerCpu:
        return cls(
            int(data["worker_id"]),
            float(data["user_s"]),
            float(data["sys_s"]),
            int(data["wall_us"]),
            int(data.get("idle_us", -1)),
            str(data.get("implementation", "")),
        )
