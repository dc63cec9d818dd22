"""SimpleStats: count, min, max, sum and sum of squares of a series of values.

This is pgbench's ``SimpleStats``: cheap to update on the hot path (no
allocation, five fields), and mergeable, so that each worker keeps its own
and the parent adds them up. The mean and standard deviation are derived at
report time with pgbench's formula (population stddev from ``sum2``), which
the final report and the progress lines must reproduce bit for bit.

Invariants (for any two stats ``a`` and ``b`` of the same quantity):

* ``a.merge(b)`` gives the same ``count``, ``min``, ``max`` as recording all
  of ``a``'s and ``b``'s values into one object, and the same ``sum`` and
  ``sum2`` up to floating-point rounding;
* an empty object (``count == 0``) is the neutral element of ``merge``; its
  ``min``/``max`` are meaningless (0.0) and are never used.
"""

from __future__ import annotations

from typing import Any

from pgsurge.cnum import NAN, c_sqrt
from pgsurge.records import record


@record(slots=True)
class SimpleStats:
    """Running summary of float values (pgbench's units: microseconds)."""

    count: int = 0
    min: float = 0.0
    max: float = 0.0
    sum: float = 0.0
    sum2: float = 0.0

    def add(self, value: float) -> None:
        """Record one value (pgbench ``addToSimpleStats``)."""
        if self.count == 0:
            self.min = value
            self.max = value
        elif value < self.min:
            self.min = value
        elif value > self.max:
            self.max = value
        self.count += 1
        self.sum += value
        self.sum2 += value * value

    def merge(self, other: SimpleStats) -> None:
        """Add ``other``'s values into this object (``mergeSimpleStats``).

        Merging an empty ``other`` is a no-op; pgbench copies its
        meaningless min/max when ``self`` is empty too, we keep ours: both
        are unused while ``count == 0``.
        """
        if other.count == 0:
            return
        if self.count == 0 or other.min < self.min:
            self.min = other.min
        if self.count == 0 or other.max > self.max:
            self.max = other.max
        self.count += other.count
        self.sum += other.sum
        self.sum2 += other.sum2

    def copy(self) -> SimpleStats:
        return SimpleStats(self.count, self.min, self.max, self.sum, self.sum2)

    def clear(self) -> None:
        """Back to empty, in place (the C loop holds this object)."""
        self.count = 0
        self.min = self.max = self.sum = self.sum2 = 0.0

    @property
    def mean(self) -> float:
        """``sum / count``; NaN (C's ``0/0``) when empty."""
        if self.count == 0:
            return NAN
        return self.sum / self.count

    @property
    def stddev(self) -> float:
        """Population standard deviation, ``sqrt(sum2/count - mean²)``.

        Computed exactly as pgbench does, including its weakness: with
        nearly equal values rounding can make the radicand slightly
        negative, and the result is then NaN, as pgbench prints.
        """
        if self.count == 0:
            return NAN
        mean = self.sum / self.count
        return c_sqrt(self.sum2 / self.count - mean * mean)

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.sum,
            "sum2": self.sum2,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimpleStats:
        return cls(
            int(data["count"]),
            float(data["min"]),
            float(data["max"]),
            float(data["sum"]),
            float(data["sum2"]),
        )
