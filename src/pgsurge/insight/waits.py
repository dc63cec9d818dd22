"""The wait-event profile of a run: samples in, shares and series out (pure).

A *sample* is what one server process was doing at one instant, reduced to
a label ``(type, event)``:

* the run's own backends (attributed by their pids, taken from libpq at
  connect): active with no wait event is ``("CPU", "")``; active and
  waiting is the event (``("Lock", "relation")``, ``("LWLock",
  "WALInsert")``); idle, waiting for the next command, is ``("Client",
  "ClientRead")``: the server waits for the *client* to start a
  transaction; idle *in a transaction* (a round trip of the client's in
  the middle of one, with its locks held) is ``("Client", "ClientRead in
  transaction")`` apart: a share of that says little about the client's
  speed and much about the transaction's round trips (``pg_wait_sampling``
  has no state: there both are ``ClientRead``);
* the server's background processes (checkpointer, walwriter, autovacuum,
  io workers, ...) are a separate group, labelled ``(backend_type, type,
  event)``; their idle main-loop waits (type ``Activity``) are not busy
  time and are not counted.

:class:`WaitProfile` accumulates counts (a ``pg_stat_activity`` sample adds
1 per row and one *tick*; a ``pg_wait_sampling`` profile delta adds its
counts and as many ticks as its own sampling period fits in the elapsed
time), per run, per interval of the JSON series and since the last ``-P``
line. Shares are fractions of the own backends' samples; *average active
sessions* (``aas``) are counts per tick. ``summary()`` gives the JSON
section, ``interval_points()`` the per-interval series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLIENT_READ",
    "CLIENT_READ_IN_XACT",
    "CPU",
    "Label",
    "WaitProfile",
    "classify_background",
    "classify_own",
    "label_text",
]

#: (wait_event_type, wait_event)
Label = tuple[str, str]
#: (backend_type, wait_event_type, wait_event)
BgLabel = tuple[str, str, str]

CPU: Label = ("CPU", "")
CLIENT_READ: Label = ("Client", "ClientRead")
CLIENT_READ_IN_XACT: Label = ("Client", "ClientRead in transaction")
#: the events shown per interval in the JSON series (plus CPU, client, other)
SERIES_TOP = 5
#: the events listed in the text report and in ``waits.events`` of the JSON
TOP_EVENTS = 10


def label_text(label: Label) -> str:
    """``Type:Event``, or ``CPU``."""
    return label[0] if not label[1] else f"{label[0]}:{label[1]}"


def classify_own(state: str, wait_type: str, wait_event: str) -> Label:
    """The label of one of the run's own backends (see the module doc)."""
    if state.startswith("idle in transaction") and (
        not wait_type or (wait_type, wait_event) == CLIENT_READ
    ):
        return CLIENT_READ_IN_XACT
    if wait_type:
        return (wait_type, wait_event)
    if state in ("", "active", "fastpath function call"):
        return CPU
    # idle or idle in transaction without an event: between two reads of
    # the client's socket, waiting for it all the same
    return CLIENT_READ


def classify_background(
    backend_type: str, wait_type: str, wait_event: str
) -> BgLabel | None:
    """The label of a background process's sample, None when it is idle."""
    if wait_type == "Activity":
        return None
    if not wait_type:
        return (backend_type, "CPU", "")
    return (backend_type, wait_type, wait_event)


@dataclass(slots=True)
class _Bucket:
    ticks: float = 0.0
    counts: Counter[Label] = field(default_factory=Counter)

    def add(self, counts: Mapping[Label, int], ticks: float) -> None:
        self.ticks += ticks
        self.counts.update(counts)

    @property
    def samples(self) -> int:
        return sum(self.counts.values())


@dataclass(slots=True)
class WaitProfile:
    """Counts of labelled samples; see the module doc.

    Invariants: ``total.counts`` is the sum of the interval buckets' counts,
    and of every ``take_recent()`` plus what is still in ``recent``.
    """

    #: the JSON series' grid: intervals of ``interval_us`` from ``anchor_us``
    anchor_us: int
    interval_us: int
    total: _Bucket = field(default_factory=_Bucket)
    background: Counter[BgLabel] = field(default_factory=Counter)
    intervals: dict[int, _Bucket] = field(default_factory=dict)
    recent: _Bucket = field(default_factory=_Bucket)
    #: the sampler's own query latency (µs): count, sum, max
    query_count: int = 0
    query_sum_us: int = 0
    query_max_us: int = 0

    def add(
        self,
        now_us: int,
        own: Mapping[Label, int],
        background: Mapping[BgLabel, int] | None = None,
        ticks: float = 1.0,
    ) -> None:
        """Add the samples taken at ``now_us`` (``ticks`` sampling ticks)."""
        index = max(0, (now_us - self.anchor_us) // self.interval_us)
        self.total.add(own, ticks)
        self.intervals.setdefault(index, _Bucket()).add(own, ticks)
        self.recent.add(own, ticks)
        if background:
            self.background.update(background)

    def add_rows(
        self, now_us: int, own: Iterable[Label], background: Iterable[BgLabel]
    ) -> None:
        """One ``pg_stat_activity`` sample: one tick, one count per row."""
        self.add(now_us, Counter(own), Counter(background), 1.0)

    def restart(self, anchor_us: int) -> None:
        """--warmup's window start: the samples so far were the warm-up's;
        the series counts from ``anchor_us``."""
        self.anchor_us = anchor_us
        self.total = _Bucket()
        self.background = Counter()
        self.intervals = {}
        self.recent = _Bucket()

    def record_query(self, elapsed_us: int) -> None:
        self.query_count += 1
        self.query_sum_us += elapsed_us
        self.query_max_us = max(self.query_max_us, elapsed_us)

    def take_recent(self) -> list[tuple[Label, float]]:
        """Shares since the previous call, largest first (for ``-P`` lines)."""
        bucket, self.recent = self.recent, _Bucket()
        n = bucket.samples
        if not n:
            return []
        return [(label, c / n) for label, c in bucket.counts.most_common()]

    def summary(self) -> dict[str, Any]:
        """The ``waits`` figures of the JSON document (without the source)."""
        n = self.total.samples
        ticks = self.total.ticks
        events = [
            {
                "type": label[0],
                "event": label[1],
                "samples": count,
                "share": count / n,
                "aas": count / ticks if ticks else None,
            }
            for label, count in self.total.counts.most_common()
        ]
        background = [
            {
                "backend_type": bt,
                "type": wt,
                "event": we,
                "samples": count,
                "aas": count / ticks if ticks else None,
            }
            for (bt, wt, we), count in self.background.most_common(TOP_EVENTS)
        ]
        return {
            "samples": n,
            "ticks": ticks,
            "events": events,
            "client_wait_share": self.total.counts[CLIENT_READ] / n if n else None,
            "client_wait_in_transaction_share": (
                self.total.counts[CLIENT_READ_IN_XACT] / n if n else None
            ),
            "cpu_share": self.total.counts[CPU] / n if n else None,
            "background": background,
            "sampler_query_ms": {
                "count": self.query_count,
                "avg": (
                    self.query_sum_us / self.query_count / 1000.0
                    if self.query_count
                    else None
                ),
                "max": self.query_max_us / 1000.0,
            },
        }

    def interval_points(self) -> list[tuple[int, dict[str, float]]]:
        """Per interval (its start, monotonic µs): the shares of the run's
        top events, CPU and the client wait, the rest as ``other``."""
        top = [
            label
            for label, _ in self.total.counts.most_common()
            if label not in (CPU, CLIENT_READ)
        ][:SERIES_TOP]
        shown = [CPU, CLIENT_READ, *top]
        points = []
        for index in sorted(self.intervals):
            bucket = self.intervals[index]
            n = bucket.samples
            if not n:
                continue
            shares = {label_text(lb): bucket.counts[lb] / n for lb in shown}
            rest = n - sum(bucket.counts[lb] for lb in shown)
            if rest:
                shares["other"] = rest / n
            points.append((self.anchor_us + index * self.interval_us, shares))
        return points
