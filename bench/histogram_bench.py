"""Per-value cost of recording latencies into ``pgsurge.stats.histogram``.

Run: ``.venv/bin/python bench/histogram_bench.py [-n VALUES] [--hdrh]``.
Records log-normal µs values (median ~1.1 ms, a long tail; the shape of
OLTP latencies) through a bound ``Histogram.record`` and prints the mean
ns per value, best of nine repeats, with the bare loop's cost subtracted
and shown apart. ``--hdrh`` also times the ``hdrhistogram`` package's
``record_value`` when it can be imported (it is not a dependency: put it
on PYTHONPATH, e.g. ``pip install --target /tmp/hdrh hdrhistogram``).
Also times ``merge``, ``percentile`` and ``to_dict`` of the result, which
run off the hot path.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from pgsurge.stats.histogram import Histogram


def _best(fn: Callable[[], object], repeat: int = 9) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200_000, help="values per repeat")
    ap.add_argument("--hdrh", action="store_true", help="also time hdrhistogram")
    ap.add_argument("--digits", type=int, default=3)
    args = ap.parse_args()

    rnd = random.Random(42)
    values = [int(rnd.lognormvariate(7.0, 1.0)) + 1 for _ in range(args.n)]

    def baseline() -> None:
        for _v in values:
            pass

    base = _best(baseline)

    def run_ours() -> None:
        rec = Histogram(args.digits).record
        for v in values:
            rec(v)

    ours = _best(run_ours)
    per = (ours - base) / args.n * 1e9
    print(f"loop baseline:           {base / args.n * 1e9:7.1f} ns/value")
    print(f"Histogram.record:        {per:7.1f} ns/value (digits={args.digits})")

    if args.hdrh:
        try:
            from hdrh.histogram import HdrHistogram  # type: ignore[import-not-found]
        except ImportError:
            print("hdrhistogram:            not importable (see --help)")
        else:

            def run_hdrh() -> None:
                rec = HdrHistogram(1, 3_600_000_000, args.digits).record_value
                for v in values:
                    rec(v)

            t = _best(run_hdrh, repeat=3)
            print(f"hdrh record_value:       {(t - base) / args.n * 1e9:7.1f} ns/value")

    hist = Histogram(args.digits)
    for v in values:
        hist.record(v)
    other = hist.copy()
    t = _best(lambda: hist.copy().merge(other))
    print(f"copy+merge:              {t * 1e3:7.3f} ms")
    t = _best(lambda: hist.percentiles([50.0, 90.0, 99.0, 99.9]))
    print(f"4 percentiles:           {t * 1e3:7.3f} ms")
    t = _best(hist.to_dict)
    size = len(hist.to_dict()["counts"])
    print(f"to_dict:                 {t * 1e3:7.3f} ms ({size} base64 chars)")


if __name__ == "__main__":
    main()
