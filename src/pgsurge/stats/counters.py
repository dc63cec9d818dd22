"""Benchmark counters: ``StatsData`` (per worker, script or interval) and
``CommandStats`` (per script command, for ``-r``), and ``FailureKind``.

Plain, mergeable values, filled by the engine and merged by the parent;
``results`` builds the per-worker and per-run values on them, ``series``
the per-interval recordings.

Units: times are integer or float **microseconds** of CLOCK_MONOTONIC
(``time.monotonic_ns() // 1000``), like pgbench's ``pg_time_usec_t``. On
Linux that clock is shared by all processes, so worker timestamps compare.

Transaction accounting (pgbench's ``StatsData`` rules), for any StatsData::

    all transactions = skipped + cnt + failures
    failures         = serialization_failures + deadlock_failures
                       + other_failures          (other: --continue-on-error)
    cnt              = directly successful + successfully retried
    retried          = retried transactions, whether they finally
                       succeeded or failed            (retried <= cnt + failures)
    retries          = sum over retried transactions of (tries - 1)
                                                      (retries >= retried)
    latency.count    = cnt   (only successes have a latency)
    lag.count        = cnt when throttling (-R), else 0

All of these identities survive ``merge``.
"""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any

from pgsurge.records import record
from pgsurge.stats.simple import SimpleStats

__all__ = ["CommandStats", "FailureKind", "StatsData"]


class FailureKind(enum.Enum):
    """Why a transaction finally failed (after any retries)."""

    SERIALIZATION = "serialization"  # SQLSTATE 40001
    DEADLOCK = "deadlock"  # SQLSTATE 40P01
    OTHER = "other"  # any other SQL error, counted under --continue-on-error
    #: the connection was lost mid-transaction and the client reconnected
    #: (--reconnect; without it the client aborts, as with pgbench)
    CONNECTION = "connection"


_SERIALIZATION = FailureKind.SERIALIZATION
_DEADLOCK = FailureKind.DEADLOCK
_CONNECTION = FailureKind.CONNECTION


@record(slots=True)
class StatsData:
    """Transaction counters for a worker, a script, or a time interval.

    ``start_us`` is the start of the interval these stats cover (used by
    --aggregate-interval logs); merging keeps the accumulator's.
    """

    start_us: int = 0
    #: successful transactions (not including skipped or failed ones)
    cnt: int = 0
    #: transactions skipped under --rate with --latency-limit
    skipped: int = 0
    #: retries of all transactions (successful or failed)
    retries: int = 0
    #: transactions that were retried at least once
    retried: int = 0
    serialization_failures: int = 0
    deadlock_failures: int = 0
    other_failures: int = 0
    #: latency of successful transactions (µs), from their scheduled start
    latency: SimpleStats = field(default_factory=SimpleStats)
    #: schedule lag of successful transactions (µs), only under --rate
    lag: SimpleStats = field(default_factory=SimpleStats)
    #: transactions lost with their connection (--reconnect only)
    connection_failures: int = 0

    def record(
        self,
        latency_us: float,
        lag_us: float | None = None,
        *,
        skipped: bool = False,
        failure: FailureKind | None = None,
        tries: int = 1,
    ) -> None:
        """Account for one finished transaction (pgbench ``accumStats``).

        * ``skipped``: only ``skipped`` grows; latency, lag and tries are
          ignored (the transaction never ran).
        * otherwise ``tries - 1`` is added to ``retries`` and ``retried``
          grows when ``tries > 1``, for successes and failures alike;
        * ``failure`` set: the failure counter of that kind grows; no
          latency is recorded;
        * success: ``cnt`` grows, ``latency_us`` is recorded, and
          ``lag_us`` too unless it is ``None``. Callers pass a lag only
          under --rate (pgbench records lag only when throttling), so that
          ``lag.count == 0`` means "not throttled".
        """
        if skipped:
            self.skipped += 1
            return
        if tries > 1:
            self.retries += tries - 1
            self.retried += 1
        if failure is None:
            self.cnt += 1
            self.latency.add(latency_us)
            if lag_us is not None:
                self.lag.add(lag_us)
        elif failure is _SERIALIZATION:
            self.serialization_failures += 1
        elif failure is _DEADLOCK:
            self.deadlock_failures += 1
        elif failure is _CONNECTION:
            self.connection_failures += 1
        else:
            self.other_failures += 1

    @property
    def failures(self) -> int:
        """All failed transactions (pgbench ``getFailures``)."""
        return (
            self.serialization_failures
            + self.deadlock_failures
            + self.other_failures
            + self.connection_failures
        )

    @property
    def total(self) -> int:
        """All transactions: successful + skipped + failed."""
        return self.cnt + self.skipped + self.failures

    def merge(self, other: StatsData) -> None:
        """Add ``other``'s counts into this object."""
        self.cnt += other.cnt
        self.skipped += other.skipped
        self.retries += other.retries
        self.retried += other.retried
        self.serialization_failures += other.serialization_failures
        self.deadlock_failures += other.deadlock_failures
        self.other_failures += other.other_failures
        self.connection_failures += other.connection_failures
        self.latency.merge(other.latency)
        self.lag.merge(other.lag)

    def clear(self) -> None:
        """Every counter back to 0, in place (--warmup's window start: the
        engines, and the C loop, hold this object and its two summaries)."""
        self.cnt = self.skipped = self.retries = self.retried = 0
        self.serialization_failures = self.deadlock_failures = 0
        self.other_failures = self.connection_failures = 0
        self.latency.clear()
        self.lag.clear()

    def copy(self) -> StatsData:
        return StatsData(
            self.start_us,
            self.cnt,
            self.skipped,
            self.retries,
            self.retried,
            self.serialization_failures,
            self.deadlock_failures,
            self.other_failures,
            self.latency.copy(),
            self.lag.copy(),
            self.connection_failures,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_us": self.start_us,
            "cnt": self.cnt,
            "skipped": self.skipped,
            "retries": self.retries,
            "retried": self.retried,
            "serialization_failures": self.serialization_failures,
            "deadlock_failures": self.deadlock_failures,
            "other_failures": self.other_failures,
            "latency": self.latency.to_dict(),
            "lag": self.lag.to_dict(),
            "connection_failures": self.connection_failures,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatsData:
        return cls(
            int(data["start_us"]),
            int(data["cnt"]),
            int(data["skipped"]),
            int(data["retries"]),
            int(data["retried"]),
            int(data["serialization_failures"]),
            int(data["deadlock_failures"]),
            int(data["other_failures"]),
            SimpleStats.from_dict(data["latency"]),
            SimpleStats.from_dict(data["lag"]),
            int(data.get("connection_failures", 0)),
        )


@record(slots=True)
class CommandStats:
    """Per script command, for -r (pgbench keeps these in each Command).

    ``latency`` holds the elapsed time of each execution in µs (pgbench
    stores seconds; the report converts). ``failures`` counts transactions
    that failed on this command, ``retries`` the retries it caused.
    """

    latency: SimpleStats = field(default_factory=SimpleStats)
    failures: int = 0
    retries: int = 0

    def merge(self, other: CommandStats) -> None:
        self.latency.merge(other.latency)
        self.failures += other.failures
        self.retries += other.retries

    def clear(self) -> None:
        """Back to nothing, in place (the C loop holds the summary)."""
        self.latency.clear()
        self.failures = self.retries = 0

    def copy(self) -> CommandStats:
        return CommandStats(self.latency.copy(), self.failures, self.retries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency": self.latency.to_dict(),
            "failures": self.failures,
            "retries": self.retries,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommandStats:
        return cls(
            SimpleStats.from_dict(data["latency"]),
            int(data["failures"]),
            int(data["retries"]),
        )
