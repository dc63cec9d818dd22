"""The cost of running on Dask: ``--dask local:1`` against a plain run.

Run::

    .venv/bin/python bench/dask_bench.py [CONNINFO] [--duration 10] [--pairs 4]
        [-c 4] [-j 2] [--hosts 1] [--args "MORE RUN OPTIONS"] [--json FILE]

CONNINFO names a maintenance database on the server (default:
``$PGSURGE_BENCH_DSN``, else ``$PGSURGE_TEST_DSN``, else a new embedded
PostgreSQL 18.6 in a temporary directory, removed at the end). A database
``pgsurge_dask_bench`` is created there at scale 1 and dropped at the end.

Every variant runs the select-only builtin (``-S``) with the same clients
and workers for ``--duration`` seconds, as ``python -m pgsurge`` (what a
user types), with ``--client-cpu``:

* ``plain``: this machine's worker processes;
* ``dask``: the same with ``--dask local:1`` (``--hosts N``: ``local:N``),
  a local cluster of one worker process on loopback, whose task starts
  pgsurge's worker processes and relays their progress;
* ``plain-aa``: ``plain`` again, the A/A control: its ratio to ``plain``
  is what noise alone gives, the band a real difference must leave.

Each pair (round) runs the three in rotation, forward in even pairs and
reversed in odd ones (plain dask plain-aa, plain-aa dask plain: ABBA for
each comparison), after an uncounted warm-up pair, each run after a
CHECKPOINT, so that slow drifts of the server or of the machine's other
load hit every variant alike. Ratios are taken within a pair, against
``plain``, and their medians over pairs are the figures.

Per run: tps ("without initial connection time", as the report prints
it); the workers' client CPU per transaction (``--client-cpu``: what each
worker process measured over the benchmark, the hot path); the whole
process tree's CPU per transaction (``RUSAGE_CHILDREN``: the coordinator,
the Dask scheduler, nanny and worker processes and their start-up
included) and the CPU seconds of the machinery (tree minus workers:
start-up, setup connection, and for ``dask`` the cluster).

The issue's target is a tps ratio dask/plain of at least 0.95, which on a
machine shared with other load must be read against the A/A band.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer, pgsurge_argv, run_measured
from _suite_stats import median, rotation_order, spread

PLAIN, DASK, AA = "plain", "dask", "plain-aa"
VARIANTS = (PLAIN, DASK, AA)
TARGET = 0.95
_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)$", re.M)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.M)
_CLIENT_CPU = re.compile(r"^client CPU: user ([0-9.]+) s, sys ([0-9.]+) s", re.M)


@dataclass(frozen=True, slots=True)
class Result:
    variant: str
    pair: int
    tps: float
    tx: int
    #: the workers' CPU per transaction (µs)
    worker_cpu_us: float
    #: the whole process tree's CPU per transaction (µs)
    tree_cpu_us: float
    #: the tree's CPU seconds beyond the workers'
    machinery_cpu_s: float


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def run_one(variant: str, pair: int, dsn: str, opts: argparse.Namespace) -> Result:
    """One run of ``variant``, measured."""
    argv = [*pgsurge_argv(), "-n", "-S", "-c", str(opts.clients)]
    argv += ["-j", str(opts.jobs), "-T", str(opts.duration), "--client-cpu"]
    argv += shlex.split(opts.args)
    if variant == DASK:
        argv += ["--dask", f"local:{opts.hosts}"]
    m = run_measured([*argv, dsn], _env(), timeout=600)
    tps = _TPS.search(m.stdout)
    tx = _PROCESSED.search(m.stdout)
    cpu = _CLIENT_CPU.search(m.stdout)
    if m.returncode != 0 or tps is None or tx is None or cpu is None:
        raise SystemExit(f"{variant} failed ({m.returncode}):\n{m.stderr}")
    processed = int(tx.group(1))
    workers = float(cpu.group(1)) + float(cpu.group(2))
    tree = m.user_s + m.sys_s
    return Result(
        variant,
        pair,
        float(tps.group(1)),
        processed,
        1e6 * workers / processed,
        1e6 * tree / processed,
        tree - workers,
    )


def summarize(results: Sequence[Result], pairs: int) -> dict[str, dict[str, float]]:
    """Per variant: medians, and the per-pair ratios to ``plain`` (median,
    min, max) of tps and of both CPU figures."""
    by = {(r.variant, r.pair): r for r in results}
    out: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        mine = [r for r in results if r.variant == variant]
        entry = {
            "tps": median(r.tps for r in mine),
            "worker_cpu_us": median(r.worker_cpu_us for r in mine),
            "tree_cpu_us": median(r.tree_cpu_us for r in mine),
            "machinery_cpu_s": median(r.machinery_cpu_s for r in mine),
        }
        if variant != PLAIN:
            for key in ("tps", "worker_cpu_us", "tree_cpu_us"):
                values = []
                for pair in range(pairs):
                    base, cand = by.get((PLAIN, pair)), by.get((variant, pair))
                    if base is not None and cand is not None:
                        values.append(getattr(cand, key) / getattr(base, key))
                low, high = spread(values)
                entry[f"{key}_ratio"] = median(values)
                entry[f"{key}_min"], entry[f"{key}_max"] = low, high
        out[variant] = entry
    return out


def print_summary(s: dict[str, dict[str, float]]) -> None:
    print()
    print(
        "| variant | tps | tps ratio (min–max) | workers CPU/tx µs | ratio (min–max) "
        "| tree CPU/tx µs | ratio | machinery CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for variant in VARIANTS:
        e = s[variant]
        if variant == PLAIN:
            tps_r = cpu_r = tree_r = "1"
        else:
            tps_r = f"{e['tps_ratio']:.3f} ({e['tps_min']:.3f}–{e['tps_max']:.3f})"
            cpu_r = (
                f"{e['worker_cpu_us_ratio']:.3f} "
                f"({e['worker_cpu_us_min']:.3f}–{e['worker_cpu_us_max']:.3f})"
            )
            tree_r = f"{e['tree_cpu_us_ratio']:.3f}"
        print(
            f"| {variant} | {e['tps']:.0f} | {tps_r} | {e['worker_cpu_us']:.2f} | "
            f"{cpu_r} | {e['tree_cpu_us']:.2f} | {tree_r} | "
            f"{e['machinery_cpu_s']:.2f} |"
        )
    aa, dask = s[AA], s[DASK]
    # the A/A ratios' range, widened to hold 1 (no difference)
    low, high = min(aa["tps_min"], 1.0), max(aa["tps_max"], 1.0)
    ratio = dask["tps_ratio"]
    verdict = "met" if ratio >= TARGET else "NOT met"
    band = "inside" if low <= ratio <= high else "outside"
    print(
        f"\ntps ratio dask/plain {ratio:.3f}: target >= {TARGET} {verdict}; "
        f"{band} the A/A band {low:.3f}–{high:.3f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("dsn", nargs="?")
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--pairs", type=int, default=4, help="counted rounds")
    p.add_argument("-c", "--clients", type=int, default=4)
    p.add_argument("-j", "--jobs", type=int, default=2)
    p.add_argument("--args", default="", help="more options for every variant")
    p.add_argument(
        "--hosts", type=int, default=1, help="N of --dask local:N (default 1)"
    )
    p.add_argument("--json", help="write every run and the summary to this file")
    opts = p.parse_args(argv)
    dsn = (
        opts.dsn
        or os.environ.get("PGSURGE_BENCH_DSN")
        or os.environ.get("PGSURGE_TEST_DSN")
    )
    with SuiteServer(dsn) as server:
        db = server.recreate_db("pgsurge_dask_bench")
        subprocess.run(
            [*pgsurge_argv(), "-i", "-s", "1", "-q", db],
            check=True,
            capture_output=True,
            env=_env(),
        )
        print(
            f"# -S -c {opts.clients} -j {opts.jobs} -T {opts.duration} "
            f"{opts.args}; dask: local:{opts.hosts}; {opts.pairs} pairs + warm-up"
        )
        results = []
        for pair in range(-1, opts.pairs):
            for variant in rotation_order(max(pair, 0), VARIANTS):
                server.checkpoint()
                r = run_one(variant, pair, db, opts)
                label = "warm-up" if pair < 0 else f"pair {pair}"
                print(
                    f"{label:8} {variant:9} tps {r.tps:9.1f}  workers "
                    f"{r.worker_cpu_us:6.2f} us/tx  tree {r.tree_cpu_us:6.2f} "
                    f"us/tx  machinery {r.machinery_cpu_s:5.2f} s",
                    flush=True,
                )
                if pair >= 0:
                    results.append(r)
    summary = summarize(results, opts.pairs)
    print_summary(summary)
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(
                {
                    "options": vars(opts),
                    "runs": [asdict(r) for r in results],
                    "summary": summary,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
