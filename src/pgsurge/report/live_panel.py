"""The live view's panel, drawn by ``rich`` on the terminal while a run goes on.

What it shows and when is in :mod:`pgsurge.report.live`, which the runner
asks every run; this module is imported only for a run that shows the
panel.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from pgsurge.report.live import SNAPSHOT_S
from pgsurge.stats.counters import StatsData

__all__ = ["LivePanel"]


class _Figures:
    """What the panel shows, updated by :meth:`LivePanel.update`.

    Slots rather than a dataclass: the panel rewrites these figures at
    every snapshot and never compares, copies or prints them.
    """

    __slots__ = (
        "cpu",
        "cpu_share",
        "duration_s",
        "last",
        "last_span_us",
        "now_us",
        "run_start_us",
        "start_us",
        "total",
        "transactions",
    )

    start_us: int
    #: where the run's figures count from (the window, after --warmup)
    run_start_us: int
    duration_s: int | None
    transactions: int | None
    total: StatsData
    last: StatsData
    last_span_us: int
    now_us: int
    cpu: list[float | None]
    cpu_share: list[float | None]

    def __init__(
        self,
        start_us: int,
        duration_s: int | None,
        transactions: int | None,
    ) -> None:
        self.start_us = self.run_start_us = start_us
        self.duration_s = duration_s
        self.transactions = transactions
        self.total = StatsData()
        self.last = StatsData()
        self.last_span_us = 0
        self.now_us = 0
        self.cpu = []
        self.cpu_share = []


def _ms(us: float) -> str:
    return f"{us / 1000.0:.3f} ms"


class LivePanel:
    """The transient panel of one run (see the module docstring).

    ``start`` draws it, ``update`` feeds it a merged snapshot, ``stop``
    erases it; ``stop`` is safe to call more than once and after errors.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        start_us: int,
        duration_s: int | None,
        transactions: int | None,
        clients: int,
        nworkers: int,
        timed: bool = False,
        warmup_s: int = 0,
    ) -> None:
        self._stream = stream
        #: --warmup: its length, and whether the figures are still its
        self._warmup_s = warmup_s
        self._warm = warmup_s > 0
        # whether the workers time each transaction: an untimed one is
        # recorded with a latency of 0, which the panel must not average
        self._timed = timed
        self._fig = _Figures(
            start_us, duration_s + warmup_s if duration_s else duration_s, transactions
        )
        self._fig.cpu = [None] * nworkers
        self._fig.cpu_share = [None] * nworkers
        self._clients = clients
        self._prev = StatsData()
        self._prev_us = start_us
        self._prev_cpu: list[float | None] = [None] * nworkers
        self._live: Any = None

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=self._stream, highlight=False, soft_wrap=False)
        self._live = Live(
            _Renderable(self),
            console=console,
            transient=True,
            refresh_per_second=4,
            # pgbench's output goes to stdout afterwards, untouched
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def print_above(self, text: str) -> None:
        """Print ``text`` (whole lines) above the panel, which is redrawn
        below it; without a panel, to the stream."""
        live = self._live
        if live is None:
            self._stream.write(text)
            self._stream.flush()
            return
        # soft_wrap: the terminal wraps a long line, rich neither wraps nor
        # crops it; no markup or highlighting of a server's error text
        live.console.print(
            text, end="", markup=False, highlight=False, emoji=False, soft_wrap=True
        )

    def stop(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()
            self._stream.flush()

    # -- data -----------------------------------------------------------------

    def update(
        self,
        total: StatsData,
        now_us: int,
        worker_cpu: list[float | None],
        tick: int | None = None,
    ) -> None:
        """A merged cumulative snapshot at ``now_us`` (of the workers'
        snapshot ``tick``) and the workers' CPU seconds so far."""
        fig = self._fig
        if self._warm and tick is not None and tick * SNAPSHOT_S > self._warmup_s:
            # the window opened: the workers' figures count from there (a
            # tick at its very start still sends the warm-up's)
            self._warm = False
            fig.run_start_us = fig.start_us + 1_000_000 * self._warmup_s
            self._prev = StatsData()
            self._prev_us = max(self._prev_us, fig.run_start_us)
        last = total.copy()
        _subtract(last, self._prev)
        fig.last = last
        fig.last_span_us = max(1, now_us - self._prev_us)
        fig.total = total
        fig.now_us = now_us
        span_s = fig.last_span_us / 1e6
        for i, cpu in enumerate(worker_cpu):
            prev = self._prev_cpu[i]
            fig.cpu[i] = cpu
            fig.cpu_share[i] = (
                None if cpu is None or prev is None else (cpu - prev) / span_s
            )
            self._prev_cpu[i] = cpu
        self._prev = total.copy()
        self._prev_us = now_us

    def lines(self, now_us: int | None = None) -> list[str]:
        """The panel's text (a few lines; also what tests read)."""
        fig = self._fig
        now = now_us if now_us is not None else time.monotonic_ns() // 1000
        elapsed = max(0.0, (now - fig.start_us) / 1e6)
        if fig.duration_s:
            left = max(0.0, fig.duration_s - elapsed)
            head = f"elapsed {elapsed:6.1f} s   remaining {left:6.1f} s"
        elif fig.transactions:
            goal = fig.transactions * self._clients
            done = fig.total.cnt + fig.total.failures + fig.total.skipped
            head = f"elapsed {elapsed:6.1f} s   transactions {done}/{goal}"
        else:
            head = f"elapsed {elapsed:6.1f} s"
        if self._warm:
            head += "   warm-up"
        last, total = fig.last, fig.total
        span_s = fig.last_span_us / 1e6
        run_s = max(1e-6, (fig.now_us - fig.run_start_us) / 1e6)
        lines = [f"pgsurge live   {head}"]
        if fig.now_us:
            lines.append(
                f"tps {last.cnt / span_s:10.1f} (last {span_s:.1f} s)   "
                f"{total.cnt / run_s:10.1f} (run)"
            )
            if self._timed and total.latency.count:
                # only when the workers time each transaction (-R, -L,
                # --percentiles, --json, -l...): the panel adds no timing
                lat_last = (
                    _ms(last.latency.sum / last.latency.count)
                    if last.latency.count
                    else "-"
                )
                lat_run = _ms(total.latency.sum / total.latency.count)
                worst = _ms(total.latency.max)
                lines.append(
                    f"latency avg {lat_last} (last), {lat_run} (run), max {worst}"
                )
            lines.append(
                f"transactions {total.cnt}   failures {total.failures}   "
                f"retried {total.retried}   skipped {total.skipped}"
            )
        cpus = [
            f"w{i} {'-' if c is None else f'{100.0 * c:3.0f}%'}"
            for i, c in enumerate(fig.cpu_share)
        ]
        if cpus:
            lines.append("client CPU " + "  ".join(cpus))
        return lines


def _subtract(acc: StatsData, prev: StatsData) -> None:
    """``acc`` minus ``prev`` for the counters the panel shows (a minimum
    or maximum cannot be subtracted: the panel shows the run's)."""
    acc.cnt -= prev.cnt
    acc.skipped -= prev.skipped
    acc.retried -= prev.retried
    acc.retries -= prev.retries
    acc.serialization_failures -= prev.serialization_failures
    acc.deadlock_failures -= prev.deadlock_failures
    acc.other_failures -= prev.other_failures
    acc.latency.count -= prev.latency.count
    acc.latency.sum -= prev.latency.sum


class _Renderable:
    """Re-rendered by rich at each refresh: the elapsed time moves between
    snapshots."""

    def __init__(self, panel: LivePanel) -> None:
        self._panel = panel

    def __rich__(self) -> Any:
        from rich.panel import Panel
        from rich.text import Text

        return Panel(Text("\n".join(self._panel.lines())), expand=False)
