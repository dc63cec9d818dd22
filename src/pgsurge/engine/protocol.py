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

The messages are plain classes on one small base (:class:`_Message`:
positional ``match`` patterns, equality and repr from ``__match_args__``),
not dataclasses: every run imports them, and ten dataclasses cost 4 ms of
generated methods at each start. Nothing assigns to a message once built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgsurge.stats.counters import CommandStats, StatsData
from pgsurge.stats.results import WorkerResult

if TYPE_CHECKING:
    # annotations only: the series and histograms are imported where a run
    # that records them makes them (issue 25: memory of the runs that do not)
    from pgsurge.stats.series import IntervalStats

__all__ = [
    "Connected",
    "Crash",
    "Detail",
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


class _Message:
    """What every message has: ``__match_args__`` names its fields, in
    ``__init__``'s order; equal when of the same class with equal fields."""

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Message)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self.__match_args__
        )
        return f"{type(self).__name__}({fields})"


class Ready(_Message):
    """The worker is set up and waits for :class:`Steady`."""

    __slots__ = ()


class Steady(_Message):
    """The run's start and end on the shared monotonic clock (µs; end 0
    when the run is counted in transactions), and under --warmup the start
    of the measured window (0: none), where every worker resets its
    figures."""

    __slots__ = __match_args__ = ("start_us", "end_us", "window_us")

    start_us: int
    end_us: int
    window_us: int

    def __init__(self, start_us: int, end_us: int, window_us: int = 0) -> None:
        self.start_us = start_us
        self.end_us = end_us
        self.window_us = window_us


class Connected(_Message):
    """Every client of the worker is connected; it waits for :class:`Go`.

    ``pids``: the clients' server process ids (libpq's, no query; empty
    under ``-C``), for the parent's wait sampling (``--waits``)."""

    __slots__ = __match_args__ = ("pids",)

    pids: tuple[int, ...]

    def __init__(self, pids: tuple[int, ...] = ()) -> None:
        self.pids = pids


class Go(_Message):
    """Start the benchmark."""

    __slots__ = ()


#: a worker's per-script figures and its [script][command] figures (-r;
#: empty without it), as ``WorkerResult`` holds them
Detail = tuple[list[StatsData], list[list[CommandStats]]]


class Progress(_Message):
    """A ``-P`` tick: the worker's cumulative stats at ``now_us``.

    ``intervals``: the series intervals closed since the previous tick,
    histograms included, when the spec asks for them (``stream_intervals``:
    a multi-host run's host relays them to the coordinator as they close).
    ``detail``: with them, the per-script and (-r) per-command figures at
    the tick, so that a host lost in the middle of the run still has its
    share of those.
    """

    __slots__ = __match_args__ = ("tick", "now_us", "stats", "intervals", "detail")

    tick: int
    now_us: int
    stats: StatsData
    intervals: tuple[IntervalStats, ...]
    detail: Detail | None

    def __init__(
        self,
        tick: int,
        now_us: int,
        stats: StatsData,
        intervals: tuple[IntervalStats, ...] = (),
        detail: Detail | None = None,
    ) -> None:
        self.tick = tick
        self.now_us = now_us
        self.stats = stats
        self.intervals = intervals
        self.detail = detail


class Done(_Message):
    """The worker's clients are finished: its whole result."""

    __slots__ = __match_args__ = ("result",)

    result: WorkerResult

    def __init__(self, result: WorkerResult) -> None:
        self.result = result


class ExitOnAbort(_Message):
    """A client aborted under ``--exit-on-abort`` (its messages are printed)."""

    __slots__ = ()


class Fatal(_Message):
    """pgbench's ``pg_fatal``: the run ends with status 1. ``text``, when
    given, is for the parent to print (only the first failing worker's)."""

    __slots__ = __match_args__ = ("text",)

    text: str | None

    def __init__(self, text: str | None = None) -> None:
        self.text = text


class Crash(_Message):
    """An unexpected exception in the worker, with its traceback."""

    __slots__ = __match_args__ = ("traceback",)

    traceback: str

    def __init__(self, traceback: str) -> None:
        self.traceback = traceback


class Stop(_Message):
    """The run was interrupted and its grace is over: cancel the
    transactions in flight and send the result now."""

    __slots__ = ()


WorkerMessage = Ready | Connected | Progress | Done | ExitOnAbort | Fatal | Crash
ParentMessage = Steady | Go | Stop
