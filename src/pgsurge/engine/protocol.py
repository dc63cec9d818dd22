"""The messages between the parent of a run and its worker processes.

Each is a small frozen record sent whole over the worker's pipe (pickled
by ``multiprocessing``); both sides ``match`` on the class. The order of a
normal run, pgbench's barriers:

* worker → parent: :class:`Ready` (scripts compiled, log open);
* parent → worker: :class:`Steady` (the run's common start and end);
* worker → parent: :class:`Connected` (every client connected);
* parent → worker: :class:`Go`;
* worker → parent: :class:`Progress` at every ``-P`` tick, then
  :class:`Done` with the worker's result.

Any time, a worker may instead send :class:`Fatal` (pgbench's
``pg_fatal``: the run ends with status 1), :class:`ExitOnAbort` (a client
aborted under ``--exit-on-abort``: status 2) or :class:`Crash` (an
unexpected exception, with its traceback: status 2).

Once the run is interrupted (``pgsurge.engine.interrupt``), the parent may
send :class:`Stop`: the worker cancels what its clients still run and
sends :class:`Done` at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgsurge.stats.counters import StatsData
from pgsurge.stats.results import WorkerResult
from pgsurge.stats.series import IntervalStats

__all__ = [
    "Connected",
    "Crash",
    "Done",
    "ExitOnAbort",
    "Fatal",
    "Go",
    "ParentMessage",
    "Progress",
    "Ready",
    "Steady",
    "Stop",
    "WorkerMessage",
]


@dataclass(frozen=True, slots=True)
class Ready:
    """The worker is set up and waits for :class:`Steady`."""


@dataclass(frozen=True, slots=True)
class Steady:
    """The run's start and end on the shared monotonic clock (µs; end 0
    when the run is counted in transactions)."""

    start_us: int
    end_us: int


@dataclass(frozen=True, slots=True)
class Connected:
    """Every client of the worker is connected; it waits for :class:`Go`.

    ``pids``: the clients' server process ids (libpq's, no query; empty
    under ``-C``), for the parent's wait sampling (``--waits``)."""

    pids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Go:
    """Start the benchmark."""


@dataclass(frozen=True, slots=True)
class Progress:
    """A ``-P`` tick: the worker's cumulative stats at ``now_us``.

    ``intervals``: the series intervals closed since the previous tick,
    histograms included, when the spec asks for them (``stream_intervals``:
    a multi-host run's host relays them to the coordinator as they close).
    """

    tick: int
    now_us: int
    stats: StatsData
    intervals: tuple[IntervalStats, ...] = ()


@dataclass(frozen=True, slots=True)
class Done:
    """The worker's clients are finished: its whole result."""

    result: WorkerResult


@dataclass(frozen=True, slots=True)
class ExitOnAbort:
    """A client aborted under ``--exit-on-abort`` (its messages are printed)."""


@dataclass(frozen=True, slots=True)
class Fatal:
    """pgbench's ``pg_fatal``: the run ends with status 1. ``text``, when
    given, is for the parent to print (only the first failing worker's)."""

    text: str | None = None


@dataclass(frozen=True, slots=True)
class Crash:
    """An unexpected exception in the worker, with its traceback."""

    traceback: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The run was interrupted and its grace is over: cancel the
    transactions in flight and send the result now."""


WorkerMessage = Ready | Connected | Progress | Done | ExitOnAbort | Fatal | Crash
ParentMessage = Steady | Go | Stop
