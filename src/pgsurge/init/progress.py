"""Progress lines of client-side data generation, in pgbench's format.

pgbench checks after every row: without ``-q`` it prints a line whenever the
row count is a multiple of 100,000; with ``-q`` it looks at the clock every
100 rows and prints when 5 s more have passed (and at the last row, if the
table's row count is a multiple of 100). We generate rows in blocks whose
boundaries fall on every multiple of 100,000, so the non-quiet lines come
out at exactly the same counts; quiet lines are decided at block
boundaries, i.e. at most one block (a few tens of ms) later than pgbench.

On a terminal the lines overwrite each other (``\\r``) and the last one is
blanked out when the table is done; a line shorter than the previous one is
padded with spaces — also when stderr is not a terminal, as pgbench does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from pgsurge.init.session import Output

#: pgbench's cadences
ROWS_PER_LINE = 100_000
QUIET_CHECK_ROWS = 100
QUIET_SECONDS = 5


class Progress:
    """Progress of loading one table of ``total`` rows."""

    def __init__(
        self,
        out: Output,
        table: str,
        total: int,
        *,
        quiet: bool,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.out = out
        self.table = table
        self.total = total
        self.quiet = quiet
        self.clock = clock
        self.start = clock()
        self.eol = "\r" if out.isatty else "\n"
        self.chars = 0
        self.prev_chars = 0
        self.log_interval = 1

    def advance_to(self, done: int) -> None:
        """``done`` rows are sent; called at block boundaries only."""
        if not self.quiet:
            if done % ROWS_PER_LINE == 0:
                self._line(done, self.clock() - self.start)
        elif done % QUIET_CHECK_ROWS == 0:
            elapsed = self.clock() - self.start
            if done == self.total or elapsed >= self.log_interval * QUIET_SECONDS:
                self._line(done, elapsed)
                self.log_interval = math.ceil(elapsed / QUIET_SECONDS)

    def _line(self, done: int, elapsed: float) -> None:
        remaining = (self.total - done) * elapsed / done
        text = (
            f"{done} of {self.total} tuples ({done * 100 // self.total}%) "
            f"of {self.table} done "
            f"(elapsed {elapsed:.2f} s, remaining {remaining:.2f} s)"
        )
        self.chars = len(text)
        if self.prev_chars > self.chars:
            text += " " * (self.prev_chars - self.chars)
        self.out.write(text + self.eol)
        self.prev_chars = self.chars

    def finish(self) -> None:
        """Blank out the last line on a terminal."""
        if self.chars and self.eol != "\n":
            self.out.write(" " * self.chars + "\r")
