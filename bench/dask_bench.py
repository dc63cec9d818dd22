"""The cost of running on Dask: ``--dask local:1`` against a plain run.

Run::

    .venv/bin/python bench/dask_bench.py [CONNINFO] [--duration 10] [--pairs 4]
        [-c 4] [-j 2] [--hosts 1] [--args "MORE RUN OPTIONS"]

CONNINFO names a maintenance database on the server (default:
``$PGSURGE_BENCH_DSN``, else ``$PGSURGE_TEST_DSN``, else a new embedded
PostgreSQL 18.6 in a temporary directory, removed at the end). A database
``pgsurge_dask_bench`` is created there at scale 1 and dropped at the end.

Both variants run the select-only builtin (``-S``) with the same clients and
workers for ``--duration`` seconds, as ``python -m pgsurge`` (what a user
types); the Dask one adds ``--dask local:1`` (``--hosts N``: ``local:N``):
a local cluster of one worker process on loopback, which starts
pgsurge's worker processes from its task and relays their progress.
Pairs run ABBA (plain first in even pairs, Dask first in odd ones, after
an uncounted warm-up pair), each run after a CHECKPOINT, so slow drifts of
the server hit both alike.

Output: one line per run (its tps, "without initial connection time", as
the report prints it), then each variant's median tps and the median over
pairs of the ratio Dask / plain in the same pair. The issue's target is a
ratio of at least 0.95: the coordinator and the Dask worker must stay out
of the hot path.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer
from _suite_stats import abba_order

PLAIN = "plain"
_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)$", re.M)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _run(variant: str, dsn: str, opts: argparse.Namespace) -> float:
    """One run's tps; ``variant`` is PLAIN or a ``--dask`` value."""
    args = [sys.executable, "-m", "pgsurge", "-n", "-S", "-c", str(opts.clients)]
    args += ["-j", str(opts.jobs), "-T", str(opts.duration), *shlex.split(opts.args)]
    if variant != PLAIN:
        args += ["--dask", variant]
    proc = subprocess.run(
        [*args, dsn], capture_output=True, text=True, env=_env(), timeout=600
    )
    found = _TPS.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"{variant} failed ({proc.returncode}):\n{proc.stderr}")
    return float(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dsn", nargs="?")
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("-c", "--clients", type=int, default=4)
    p.add_argument("-j", "--jobs", type=int, default=2)
    p.add_argument("--args", default="", help="more options for both variants")
    p.add_argument(
        "--hosts", type=int, default=1, help="N of --dask local:N (default 1)"
    )
    opts = p.parse_args()
    dsn = (
        opts.dsn
        or os.environ.get("PGSURGE_BENCH_DSN")
        or os.environ.get("PGSURGE_TEST_DSN")
    )
    dask = f"local:{opts.hosts}"
    with SuiteServer(dsn) as server:
        db = server.recreate_db("pgsurge_dask_bench")
        subprocess.run(
            [sys.executable, "-m", "pgsurge", "-i", "-s", "1", "-q", db],
            check=True,
            capture_output=True,
            env=_env(),
        )
        tps: dict[str, list[float]] = {PLAIN: [], dask: []}
        ratios = []
        for pair in range(-1, opts.pairs):
            got = {}
            for variant in abba_order(pair, PLAIN, dask):
                server.checkpoint()
                got[variant] = _run(variant, db, opts)
                label = "warm-up" if pair < 0 else f"pair {pair}"
                print(f"{label:8} {variant:13} tps {got[variant]:10.1f}", flush=True)
            if pair >= 0:
                for variant, value in got.items():
                    tps[variant].append(value)
                ratios.append(got[dask] / got[PLAIN])
        print()
        for variant, values in tps.items():
            print(f"median tps {variant:13} {statistics.median(values):10.1f}")
        ratio = statistics.median(ratios)
        print(
            f"median ratio dask/plain {ratio:.3f} "
            f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)}); target >= 0.95: "
            + ("met" if ratio >= 0.95 else "NOT met")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
