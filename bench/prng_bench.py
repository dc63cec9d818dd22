"""The PRNG's cost, pure Python against the compiled extension, two ways.

1. Micro: ns per call of each draw (``uint64``, ``int64_range``, ``double``,
   ``double_normal``), of the hashes and of ``permute``, for
   ``PurePgPrng`` and for ``pgsurge._speedups`` (best of several timeit
   repeats).
2. End to end (``--e2e``): pgsurge itself with ``PGSURGE_PURE=1`` and
   without, alternating (ABBA) on the same database, reporting tps and
   client CPU µs per transaction (getrusage of the child process tree),
   median over the pairs. This isolates what the extension saves in a
   real run; bench/suite.py compares against pgbench.

Run::

    .venv/bin/python bench/prng_bench.py
    .venv/bin/python bench/prng_bench.py --e2e --pairs 4 --duration 8 \\
        [--dsn CONNINFO] [--args "-b tpcb-like -M prepared -c 8 -j 2"]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable

from _suite_proc import SuiteServer, pg_bindir

from pgsurge.prng import PurePgPrng
from pgsurge.script import functions as F

try:
    from pgsurge import _speedups
except ImportError:
    _speedups = None  # type: ignore[assignment]


def _ns(fn: Callable[[], object], number: int) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5))
    return 1e9 * best / number


def micro(number: int) -> None:
    impls: list[tuple[str, type]] = [("pure", PurePgPrng)]
    if _speedups is not None:
        impls.append(("compiled", _speedups.PgPrng))
    else:
        print("(pgsurge._speedups is not built: pure only)")
    print(f"{'ns per call':28}" + "".join(f"{n:>10}" for n, _ in impls))
    rows: list[tuple[str, list[float]]] = []
    for label, make in (
        ("uint64()", lambda r: r.uint64),
        ("int64_range(1, 100000)", lambda r: lambda: r.int64_range(1, 100000)),
        ("int64_range(1, 10**6)", lambda r: lambda: r.int64_range(1, 1000000)),
        ("double()", lambda r: r.double),
        ("double_normal()", lambda r: r.double_normal),
    ):
        rows.append((label, [_ns(make(cls(42)), number) for _, cls in impls]))
    hashes: list[tuple[str, list[Callable[[], object]]]] = [
        (
            "hash_murmur2",
            [lambda: F.pure_hash_murmur2(123456, 42)]
            + ([lambda: _speedups.hash_murmur2(123456, 42)] if _speedups else []),
        ),
        (
            "hash_fnv1a",
            [lambda: F.pure_hash_fnv1a(123456, 42)]
            + ([lambda: _speedups.hash_fnv1a(123456, 42)] if _speedups else []),
        ),
        (
            "permute(size 10**6)",
            [lambda: F.pure_permute(123456, 1000000, 42)]
            + ([lambda: _speedups.permute(123456, 1000000, 42)] if _speedups else []),
        ),
    ]
    for label, fns in hashes:
        n = max(1, number // 20) if label.startswith("permute") else number
        rows.append((label, [_ns(fn, n) for fn in fns]))
    for label, values in rows:
        print(f"{label:28}" + "".join(f"{v:10.0f}" for v in values))


_TPS = re.compile(r"^tps = ([0-9.]+)", re.M)
_DONE = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


def _run(pure: bool, args: list[str], dsn: str) -> tuple[float, float]:
    env = dict(os.environ)
    env.pop("PGSURGE_PURE", None)
    if pure:
        env["PGSURGE_PURE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, dsn],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tps = _TPS.search(proc.stdout)
    done = _DONE.search(proc.stdout)
    if not tps or not done:
        sys.exit(f"cannot parse pgsurge output:\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(tps.group(1)), 1e6 * cpu / int(done.group(1))


def e2e(dsn: str, args: list[str], pairs: int) -> None:
    _run(True, args, dsn)  # warm-up
    _run(False, args, dsn)
    figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    ratios = []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {pure: _run(pure, args, dsn) for pure in order}
        for pure, fig in got.items():
            figures[pure].append(fig)
        ratios.append(got[False][1] / got[True][1])
        print(
            f"  pair {i}: pure {got[True][0]:9.0f} tps {got[True][1]:6.2f} us/tx | "
            f"compiled {got[False][0]:9.0f} tps {got[False][1]:6.2f} us/tx",
            flush=True,
        )
    for pure in (True, False):
        name = "pure" if pure else "compiled"
        tps = statistics.median(f[0] for f in figures[pure])
        cpu = statistics.median(f[1] for f in figures[pure])
        print(f"{name:9} median {tps:9.0f} tps {cpu:6.2f} us/tx")
    print(f"compiled/pure CPU per tx, median of pairs: {statistics.median(ratios):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=200000, help="calls per repeat")
    ap.add_argument("--e2e", action="store_true", help="also run pgsurge A/B")
    ap.add_argument(
        "--dsn", help="maintenance database (default: a new embedded server)"
    )
    ap.add_argument("--args", default="-S -M prepared -c 8 -j 2")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--duration", type=int, default=8)
    opts = ap.parse_args()
    micro(opts.number)
    if opts.e2e:
        args = [*shlex.split(opts.args), "-T", str(opts.duration), "-n"]
        print(f"\npgsurge {' '.join(args)}: PGSURGE_PURE=1 against compiled")
        with SuiteServer(opts.dsn) as server:
            dsn = server.recreate_db("pgsurge_prng_bench")
            subprocess.run(
                [str(pg_bindir() / "pgbench"), "-i", "-q", "-s", "10", dsn], check=True
            )
            e2e(dsn, args, opts.pairs)


if __name__ == "__main__":
    main()
