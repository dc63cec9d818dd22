"""Was the ``-R`` rate sustained? A pure function of a finished ``RunResult``.

Under ``--rate`` every transaction has a scheduled start, and its latency
counts from there (pgbench's rule). A server that keeps up leaves a schedule
lag of a few transaction times, whatever the rate; one that cannot keep up
falls behind more and more: the lag grows without bound (by the excess
rate's share of every second), and with ``-L`` ever more transactions are
skipped. The run then measures the backlog, not the server at that rate.

``rate_check`` says the rate was **not sustained** when one of these holds:

* more than ``MAX_SKIPPED`` (5 %) of the scheduled transactions were
  skipped (``-L``);
* the offered rate is more than the clients can finish (below);
* the schedule lag at the end — the average lag of the last interval
  that is at least half as long as the others (the whole run without
  ``-P``/intervals) — is over ``LAG_FLOOR_MS`` (50 ms) and over
  ``LAG_SERVICE_FACTOR`` (3) times the average time transactions took
  once started (latency minus lag): a queue that long at the end is a
  backlog, not a wait for a free client.

The clients' ceiling: each of the ``-c`` clients runs one transaction at
a time, so they finish at most clients / (the average time a transaction
took once started) per second, and a schedule beyond it is a queue that
grows however short the run (a 2 s run of 0.5 s transactions shows no lag
over the floor, yet cannot be kept up).

The runner prints the warning for runs of 1 s or more, as the
client-limited one (a shorter run's lag says little, and pgbench's own
short ``-R``/``-L`` runs keep its exact stderr); the JSON has the check
whatever the length.

The floor keeps the scheduling hiccups of a loaded machine (a 10 ms stall)
from counting; the factor keeps slow transactions (a 100 ms report query)
from being flagged for the wait a stable queue of them has.
"""

from __future__ import annotations

from typing import Any

from pgsurge.stats.results import RunResult

__all__ = ["LAG_FLOOR_MS", "MAX_SKIPPED", "rate_check", "rate_warning"]

MAX_SKIPPED = 0.05
LAG_FLOOR_MS = 50.0
LAG_SERVICE_FACTOR = 3.0


def _end_lag_ms(result: RunResult) -> float | None:
    """The average lag of the last interval long enough to count, in ms."""
    ivs = [iv for iv in result.intervals if iv.stats.lag.count > 0]
    full = max((iv.duration_us for iv in ivs), default=0)
    for iv in reversed(ivs):
        if iv.duration_us >= full / 2:
            return iv.stats.lag.sum / iv.stats.lag.count / 1000.0
    lag = result.total.lag
    return lag.sum / lag.count / 1000.0 if lag.count else None


def rate_check(result: RunResult) -> dict[str, Any] | None:
    """``{"sustained", "reason", "end_lag_ms", "skipped_fraction"}`` for a
    ``-R`` run, None for any other."""
    facts = result.facts
    if facts.rate is None:
        return None
    total = result.total
    scheduled = total.cnt + total.skipped + total.failures
    skipped = total.skipped / scheduled if scheduled else 0.0
    end_lag = _end_lag_ms(result)
    service = None
    if total.latency.count and total.lag.count:
        service = (total.latency.sum - total.lag.sum) / total.latency.count / 1000.0
    reason = None
    if skipped > MAX_SKIPPED:
        reason = (
            f"{skipped * 100:.1f}% of the scheduled transactions were skipped "
            f"(over {MAX_SKIPPED * 100:g}%)"
        )
    elif service and facts.rate * service / 1000.0 > facts.clients:
        ceiling = facts.clients * 1000.0 / service
        reason = (
            f"{facts.clients} client{'' if facts.clients == 1 else 's'} of "
            f"{service:.1f} ms transactions can "
            f"finish at most {ceiling:.1f} tps"
        )
    elif (
        end_lag is not None
        and end_lag > LAG_FLOOR_MS
        and (service is None or end_lag > LAG_SERVICE_FACTOR * service)
    ):
        reason = f"the schedule lag grew to {end_lag:.1f} ms at the end of the run" + (
            f" (transactions took {service:.1f} ms)" if service is not None else ""
        )
    return {
        "sustained": reason is None,
        "reason": reason,
        "end_lag_ms": end_lag,
        "skipped_fraction": skipped,
    }


def rate_warning(result: RunResult, progname: str = "pgsurge") -> str:
    """One stderr line (with its newline) when the ``-R`` rate was not
    sustained, else an empty string."""
    check = rate_check(result)
    if check is None or check["sustained"]:
        return ""
    rate = result.facts.rate or 0.0
    return (
        f"{progname}: warning: the rate of {rate:g} tps was not sustained: "
        f"{check['reason']}; the latencies measure the backlog\n"
    )
