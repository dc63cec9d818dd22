"""Client CPU per transaction of two pgsurge source trees, alternated.

A quick A/B of two builds (e.g. a commit before and after a change), both
run with this interpreter: each tree's ``src`` goes first on PYTHONPATH, so
it needs its extensions built in place (``python setup.py build_ext
--inplace`` in the tree). Rounds alternate ABBA; each run's CPU is the
RUSAGE_CHILDREN delta of its whole process tree over the transactions it
processed, start-up included::

    python bench/ab_trees.py --a /tmp/base/src --b src --rounds 6 \\
        --dsn "$(pgsurge server uri)" -- -b tpcb-like -M prepared -c 8 -j 2 -T 5

Prints each tree's median CPU µs per transaction and tps, and the runs.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile


def run(src: str, args: list[str], dsn: str, cwd: str) -> tuple[float, float]:
    """One run of the tree at ``src``: (CPU µs per transaction, tps)."""
    env = dict(os.environ, PYTHONPATH=src)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, dsn],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for name in os.listdir(cwd):  # -l files, JSON results
        os.unlink(os.path.join(cwd, name))
    processed = re.search(r"actually processed: (\d+)", out.stdout)
    tps = re.search(r"tps = ([\d.]+)", out.stdout)
    if out.returncode != 0 or processed is None or tps is None:
        raise SystemExit(f"run failed ({src}): {out.stderr.strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu / int(processed.group(1)) * 1e6, float(tps.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="src directory of tree A")
    ap.add_argument("--b", required=True, help="src directory of tree B")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("args", nargs="+", help="pgsurge's arguments (after --)")
    o = ap.parse_args()
    cwd = tempfile.mkdtemp(prefix="pgsurge-ab-")
    got: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    try:
        for i in range(o.rounds):
            for key in ("A", "B") if i % 2 == 0 else ("B", "A"):
                src = o.a if key == "A" else o.b
                got[key].append(run(os.path.abspath(src), o.args, o.dsn, cwd))
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    for key, runs in got.items():
        cpu = statistics.median(r[0] for r in runs)
        tps = statistics.median(r[1] for r in runs)
        each = " ".join(f"{r[0]:.1f}" for r in runs)
        print(f"{key}: CPU/tx median {cpu:.2f} µs, tps median {tps:.0f}  ({each})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
