"""``--rate`` scheduling and ``--latency-limit`` skipping, as pure functions.

pgbench throttles per thread: each thread (pgsurge worker) keeps one
schedule shared by its clients, advanced by an exponentially distributed
delay each time a client is about to start a transaction. The mean delay
is ``1e6 / rate`` µs multiplied by the number of threads, so that the
threads together aim at the requested rate. The schedule never adapts:
late transactions can catch up (pgbench's documented behaviour).

``poisson_delay`` is pgbench's ``getPoissonRand``: inverse transform
sampling of an exponential with the given mean, rounded to whole µs, drawn
from the worker's throttle stream (a ``PgPrng``), so that a given seed
gives the same schedule as pgbench.
"""

from __future__ import annotations

import math

from pgsurge.cnum import INT64_MAX
from pgsurge.prng import PgPrng

__all__ = ["is_late", "poisson_delay", "worker_delay_us"]

_log = math.log


def worker_delay_us(rate: float, nthreads: int) -> float:
    """Mean delay between transaction starts of one worker, in µs.

    pgbench: ``throttle_delay = 1000000.0 / rate`` then ``*= nthreads``
    (after ``nthreads`` was capped at the number of clients).
    """
    return 1000000.0 / rate * nthreads


def poisson_delay(rng: PgPrng, center: float) -> int:
    """pgbench ``getPoissonRand``: ``(int64) (-log(u) * center + 0.5)``
    with ``u = 1 - pg_prng_double()`` in (0, 1]."""
    uniform = 1.0 - rng.double()
    return int(-_log(uniform) * center + 0.5)


def is_late(slot_us: int, now_us: int, latency_limit_us: int) -> bool:
    """Under ``-L``, a slot that cannot meet the limit even if the
    transaction completed at once is skipped (pgbench: ``trigger < now -
    latency_limit``).

    The difference is an int64 as in pgbench, wrapping: ``-L inf`` makes
    the limit INT64_MIN (C's conversion of an infinite double), and
    ``now - INT64_MIN`` wraps to a large negative number there, so that no
    slot is ever late (the C loop computes it so too).
    """
    bound = now_us - latency_limit_us
    if bound > INT64_MAX:
        bound -= 1 << 64
    return slot_us < bound
