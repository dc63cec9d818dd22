"""A long run's memory: the parent's and every worker's RSS over time.

Run: ``.venv/bin/python bench/soak.py [--every S] [--csv FILE] -- PGSURGE-ARGS``,
for instance the issue's ``-- -c 500 -j 2 -T 600 -P 10 DSN``.

Starts ``python -m pgsurge PGSURGE-ARGS`` and samples the resident set
size (``VmRSS`` in ``/proc``, Linux) of the parent and of each worker
process every ``--every`` seconds until it ends. Prints one line per
process: RSS at the first sample after the workers are running, the last
sample, the maximum, and the slope of a least-squares line through the
samples of the second half of the run (KiB per minute: near 0 means flat;
start-up allocations are left out by taking the second half). ``--csv``
writes every sample (time, pid, role, RSS KiB). The pgsurge run's own
output is passed through.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _slope_per_min(points: list[tuple[float, int]]) -> float:
    """KiB per minute of a least-squares line through the second half."""
    half = points[len(points) // 2 :]
    if len(half) < 2:
        return 0.0
    n = len(half)
    mt = sum(t for t, _ in half) / n
    mr = sum(r for _, r in half) / n
    var = sum((t - mt) ** 2 for t, _ in half)
    if var == 0:
        return 0.0
    cov = sum((t - mt) * (r - mr) for t, r in half)
    return cov / var * 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--csv", help="write every sample to this file")
    ap.add_argument(
        "args", nargs=argparse.REMAINDER, help="-- then pgsurge's arguments"
    )
    ns = ap.parse_args()
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    proc = subprocess.Popen([sys.executable, "-m", "pgsurge", *args])
    t0 = time.monotonic()
    samples: list[tuple[float, int, str, int]] = []
    while proc.poll() is None:
        now = time.monotonic() - t0
        workers = _children(proc.pid)
        for pid, role in [(proc.pid, "parent")] + [(w, "worker") for w in workers]:
            rss = _rss_kib(pid)
            if rss is not None and workers:  # once the workers are running
                samples.append((now, pid, role, rss))
        time.sleep(ns.every)
    status = proc.wait()
    if ns.csv:
        with open(ns.csv, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["t_s", "pid", "role", "rss_kib"])
            out.writerows(samples)
    by_pid: dict[int, list[tuple[float, int]]] = {}
    roles: dict[int, str] = {}
    for t, pid, role, rss in samples:
        by_pid.setdefault(pid, []).append((t, rss))
        roles[pid] = role
    print(f"soak: pgsurge exited with {status}; {len(samples)} samples", flush=True)
    for pid, points in by_pid.items():
        rss = [r for _, r in points]
        print(
            f"soak: {roles[pid]:6} {pid}: RSS first {rss[0] / 1024:.1f} MiB, "
            f"last {rss[-1] / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB, "
            f"second-half slope {_slope_per_min(points):+.1f} KiB/min "
            f"over {points[-1][0] - points[0][0]:.0f} s"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
