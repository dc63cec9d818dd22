"""The live view: a small panel on the terminal while a run goes on.

When stderr is a terminal and neither ``-P`` nor ``--no-live`` is given,
the parent shows what the workers' one-second snapshots say — elapsed and
remaining time, tps and latency of the last second and of the run so far,
failures, each worker's client CPU — in a panel drawn by ``rich`` on
stderr. The panel is *transient*: it is erased when the run ends, so what
remains on the terminal is exactly what pgbench prints (and what a pipe
receives, where the panel never appears). Whatever else reaches the
terminal while the panel is up must go through :meth:`LivePanel.print_above`
(the runner relays the workers' stderr there): a line written behind
rich's back is erased by the next redraw, which also leaves pieces of the
panel above it. Latency is shown only when the workers time transactions
(``timed``): an untimed one is recorded with a latency of 0. Under
--warmup the head says ``warm-up`` until the window opens; the workers
reset their figures there, and the run's figures count from it.

The panel takes plain values only: merged :class:`StatsData` snapshots,
the monotonic clock and the workers' CPU seconds, which the parent reads
from ``/proc`` (the workers send nothing for it but the snapshot they send
for ``-P`` anyway). ``rich`` is imported only when a panel is shown, and
so is the panel itself (:class:`pgsurge.report.live_panel.LivePanel`):
every run asks :func:`live_wanted`, and a module is memory in each
process of a run (issue 25).
"""

from __future__ import annotations

import os
from typing import TextIO

__all__ = ["SNAPSHOT_S", "live_wanted", "proc_cpu_seconds"]

#: the interval of the workers' snapshots while the panel is shown (s)
SNAPSHOT_S = 1

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def live_wanted(stream: TextIO, *, progress_s: int, disabled: bool) -> bool:
    """Whether to show the panel on ``stream``: a terminal (not dumb), no
    ``-P`` (pgbench's progress lines win), not turned off."""
    if disabled or progress_s:
        return False
    if os.environ.get("TERM", "") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``), or
    None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: split after its ")"
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (IndexError, ValueError):
        return None
