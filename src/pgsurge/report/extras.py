"""Opt-in text report lines beyond pgbench's, and the client-limited warning.

The default report stays byte-identical to pgbench's; these lines are
printed only when asked for, after it:

* ``--percentiles[=50,90,99,99.9]``: a ``latency percentiles:`` line for
  the run (plus the schedule lag's under -R), and one per script when
  several are used; values in ms with pgbench's 3 decimals, nearest-rank
  percentiles from the merged histograms (exact to 3 significant digits,
  never above the maximum);
* ``--client-cpu``: the client's CPU (user and system seconds, CPU per
  transaction) and each worker's utilisation, (user + sys) / wall time,
  and its busy share (wall time not spent waiting) when measured.

Whatever the options, ``client_limited_warning`` returns one stderr line
when a worker was busy more than 90% of its run time (not waiting for the
server or a timer; its CPU share when that was not measured): the figures
then measure the client as much as the server.

``nothing_processed_warning`` returns one stderr line when a ``-T`` run
processed no transaction because connecting its clients took the whole
duration (which counts from before connecting, in pgbench too): pgbench
then prints only "number of transactions actually processed: 0" and
exits 0, which reads as a server that did nothing.

All functions are pure functions of a ``RunResult``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgsurge.stats.cpu import BUSY_THRESHOLD, WorkerCpu
from pgsurge.stats.results import RunResult

if TYPE_CHECKING:
    # annotations only: the series and histograms are imported where a run
    # that records them makes them (issue 25: memory of the runs that do not)
    from pgsurge.stats.histogram import Histogram

__all__ = [
    "DEFAULT_PERCENTILES",
    "client_cpu_lines",
    "client_limited_warning",
    "nothing_processed_warning",
    "percentile_label",
    "percentile_lines",
    "render_extras",
    "target_figures",
    "targets_line",
]

#: --percentiles without a value
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)


def percentile_label(p: float) -> str:
    """``50`` for 50.0, ``99.9`` for 99.9: as a user would write it."""
    return f"{p:g}"


def _ms(us: int | float) -> str:
    return f"{us / 1000.0:.3f}"


def _values(hist: Histogram, ps: Sequence[float]) -> str:
    values = hist.percentiles(list(ps))
    return ", ".join(
        f"p{percentile_label(p)} = {_ms(v)} ms" for p, v in zip(ps, values, strict=True)
    )


def percentile_lines(
    result: RunResult, ps: Sequence[float] = DEFAULT_PERCENTILES
) -> list[str]:
    """The --percentiles lines (empty when no histograms were recorded)."""
    hists = result.histograms
    if hists is None:
        return []
    lines = []
    if hists.latency.count:
        lines.append(f"latency percentiles: {_values(hists.latency, ps)}")
    else:
        lines.append("latency percentiles: no successful transaction")
    if result.facts.throttled and hists.lag.count:
        lines.append(f"rate limit schedule lag percentiles: {_values(hists.lag, ps)}")
    if result.facts.per_script_stats:
        for i, hist in enumerate(hists.per_script):
            if hist.count:
                lines.append(
                    f"SQL script {i + 1} latency percentiles: {_values(hist, ps)}"
                )
    return lines


def client_cpu_lines(result: RunResult) -> list[str]:
    """The --client-cpu lines."""
    user, system = result.cpu_user_s, result.cpu_sys_s
    txs = result.total.total
    per_tx = f"{(user + system) * 1e6 / txs:.1f} us" if txs else "n/a"
    lines = [
        f"client CPU: user {user:.3f} s, sys {system:.3f} s, {per_tx} per transaction"
    ]
    lines.extend(_worker_line(w) for w in result.worker_cpu)
    return lines


def _worker_line(w: WorkerCpu) -> str:
    busy = f"busy {100.0 * w.busy_fraction:.1f}%, " if w.idle_us >= 0 else ""
    impl = f", {w.implementation}" if w.implementation else ""
    return (
        f"client CPU worker {w.worker_id}: {busy}CPU {100.0 * w.utilisation:.1f}% "
        f"(user {w.user_s:.3f} s, sys {w.sys_s:.3f} s, wall {w.wall_us / 1e6:.3f} s)"
        f"{impl}"
    )


def busy_workers(workers: Sequence[WorkerCpu]) -> list[WorkerCpu]:
    """Workers busier than the threshold, busiest first."""
    return sorted(
        (w for w in workers if w.busy),
        key=lambda w: (-w.busy_fraction, w.worker_id),
    )


def target_figures(result: RunResult) -> list[dict[str, Any]]:
    """Per server of a multi-host connection string the clients reached
    (``host:port``, by libpq's ``PQhost``/``PQport`` at connect): its
    clients (where they ended: --reconnect may move one to another
    server), transactions (where they ran) and tps over the run's duration
    (they sum to the run's), and its latency average
    (:func:`_server_latency_ms`). Empty unless the clients reached two or
    more."""
    seconds = result.total_duration_us / 1e6
    return [
        {
            "target": target,
            "clients": clients,
            "transactions": tx,
            "tps": tx / seconds if seconds > 0 else None,
            "latency_ms": _server_latency_ms(result, clients, tx, seconds),
        }
        for target, (clients, tx) in sorted(result.targets.items())
    ]


def _server_latency_ms(
    result: RunResult, clients: int, tx: int, seconds: float
) -> float | None:
    """A server's latency average as pgbench computes a run's without
    per-transaction timing: the time its clients were busy over its
    transactions (``seconds × clients / transactions``). Each client runs
    one transaction after the other for the whole of a ``-T`` run, so this
    is their mean latency; not under ``-R`` (a client waits for its slot
    between transactions), ``-t`` (a client that finished early is idle to
    the end), when a client aborted (it stopped early) or moved to
    another server (--reconnect: its time was split between them): None
    then."""
    facts = result.facts
    if (
        result.target_moves
        or facts.duration_s is None
        or facts.rate is not None
        or result.aborted_clients
        or tx <= 0
        or seconds <= 0
    ):
        return None
    return 1000.0 * seconds * clients / tx


def targets_line(result: RunResult, prog: str) -> str:
    """The stderr line of :func:`target_figures` (empty without them)."""
    figures = target_figures(result)
    if not figures:
        return ""
    parts = [
        f"{f['target']} {f['clients']} clients, {f['transactions']} transactions"
        + (f" ({f['tps']:.1f} tps" if f["tps"] is not None else "")
        + (
            f", latency average {f['latency_ms']:.3f} ms"
            if f["latency_ms"] is not None
            else ""
        )
        + (")" if f["tps"] is not None else "")
        for f in figures
    ]
    moves = result.target_moves
    moved = (
        f" ({moves} reconnection{'s' if moves > 1 else ''} went to another "
        "server: clients counted where they ended, transactions where they ran)"
        if moves
        else ""
    )
    return (
        f"{prog}: the clients reached {len(figures)} servers: "
        f"{'; '.join(parts)}{moved}\n"
    )


def client_limited_warning(
    result: RunResult, progname: str = "pgsurge", *, cpus: int = 0
) -> str:
    """One stderr line (with its newline) when the client was the bottleneck,
    else an empty string. ``cpus``: the cores this machine gives the run
    (0: unknown)."""
    busy = busy_workers(result.worker_cpu)
    if not busy:
        return ""
    facts = result.facts
    # more workers only help while some worker has several clients, and
    # while a core is left for another one
    if facts.threads >= facts.clients:
        hint = "try more client machines"
    elif cpus and facts.threads >= cpus:
        hint = (
            f"the {cpus} cores of this machine all run a worker: try more "
            "client machines"
        )
    else:
        hint = "try more -j"
    top = busy[0]
    pct = f"{100.0 * top.busy_fraction:.0f}%"
    if len(busy) == 1:
        who = f"worker {top.worker_id} was busy {pct} of the run"
    else:
        who = (
            f"{len(busy)} of {len(result.worker_cpu)} workers were busy more than "
            f"{100 * BUSY_THRESHOLD:.0f}% of the run (worker {top.worker_id}: {pct})"
        )
    return f"{progname}: warning: {who}: the client may be the bottleneck ({hint})\n"


def render_extras(
    result: RunResult,
    *,
    percentiles: Sequence[float] | None = None,
    client_cpu: bool = False,
) -> str:
    """The extra stdout lines for the options given ('' when none)."""
    lines: list[str] = []
    if percentiles is not None:
        lines.extend(percentile_lines(result, percentiles or DEFAULT_PERCENTILES))
    if client_cpu:
        lines.extend(client_cpu_lines(result))
    return "".join(line + "\n" for line in lines)


def nothing_processed_warning(result: RunResult, progname: str = "pgsurge") -> str:
    """One stderr line (with its newline) when a ``-T`` run processed
    nothing because connecting outlasted it, else an empty string (see the
    module docstring)."""
    facts, total = result.facts, result.total
    if not facts.duration_s or total.cnt + total.skipped + total.failures > 0:
        return ""
    if result.conn_elapsed_us < facts.duration_s * 1_000_000:
        return ""
    return (
        f"{progname}: warning: no transaction was processed: connecting the "
        f"{facts.clients} clients took {result.conn_elapsed_us / 1e6:.3f} s, "
        f"the whole -T {facts.duration_s} s (which counts from before "
        "connecting); use a longer -T or fewer clients\n"
    )
