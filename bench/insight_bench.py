"""The cost of server insight: plain runs against --waits and --server-stats.

Each round runs every variant once, in rotation (forward in even rounds,
reversed in odd ones: A B C D, D C B A, ...), so that slow drifts of a
shared machine hit every variant alike; a warm-up round is not counted.
The variants:

* ``plain`` and ``plain-aa``: the same plain run twice, the A/A control
  that gives the noise band;
* ``waits``: ``--waits=100`` (a pg_stat_activity sample every 100 ms);
* ``server-stats``: ``--server-stats`` (snapshots at start and end; with
  ``-P`` at each interval too).

Every run has ``--client-cpu``: the workers' own CPU per transaction
(``getrusage`` in each worker, the parent excluded) is what must not move;
the whole process tree's CPU (``RUSAGE_CHILDREN``: the parent and its
monitor thread included) is shown beside it. Ratios are taken within a
round against ``plain``; the medians over rounds are printed, with the A/A
ratios' range as the band.

    .venv/bin/python bench/insight_bench.py                 # embedded server
    .venv/bin/python bench/insight_bench.py --rounds 6 --time 10 --args="-S -M prepared"
    .venv/bin/python bench/insight_bench.py "host=/tmp dbname=postgres"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer, pgsurge_argv, run_measured, snapshot_source
from _suite_stats import median, parse_report, rotation_order, spread

VARIANTS: dict[str, list[str]] = {
    "plain": [],
    "waits": ["--waits=100"],
    "server-stats": ["--server-stats"],
    "plain-aa": [],
}
_CLIENT_CPU = re.compile(r"^client CPU: user ([0-9.]+) s, sys ([0-9.]+) s", re.M)
DB = "pgsurge_insight_bench"


@dataclass(frozen=True, slots=True)
class Result:
    variant: str
    round: int
    tps: float
    tx: int
    worker_cpu_us: float  # workers' CPU per transaction
    tree_cpu_us: float  # the whole process tree's, per transaction
    sampler_ms: float | None


def run_one(
    dsn: str, variant: str, rnd: int, args: Sequence[str], seconds: int
) -> Result:
    argv = [*pgsurge_argv(), "-n", "-T", str(seconds), "--client-cpu", *args]
    argv += VARIANTS[variant]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    m = run_measured([*argv, dsn], env)
    if m.returncode != 0:
        sys.exit(f"run failed ({m.returncode}): {' '.join(argv)}\n{m.stderr}")
    fig = parse_report(m.stdout)
    cpu = _CLIENT_CPU.search(m.stdout)
    assert fig.tps is not None and fig.transactions and cpu, m.stdout
    worker_cpu = float(cpu.group(1)) + float(cpu.group(2))
    sampler = re.search(r"sampler query ([0-9.]+) ms avg", m.stdout)
    return Result(
        variant,
        rnd,
        fig.tps,
        fig.transactions,
        1e6 * worker_cpu / fig.transactions,
        1e6 * (m.user_s + m.sys_s) / fig.transactions,
        float(sampler.group(1)) if sampler else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dsn", nargs="?", default=os.environ.get("PGSURGE_BENCH_DSN"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=int, default=10, help="seconds per run (>= 10)")
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument(
        "--args",
        default="-S -M prepared -c 8 -j 2",
        help="pgsurge options for every run (default: %(default)s)",
    )
    ap.add_argument("--json", help="write every run and the summary to this file")
    ap.add_argument(
        "--snapshot",
        action="store_true",
        help="measure the committed src/ at HEAD (a copy): edits made to the "
        "working tree while the benchmark runs do not reach it",
    )
    o = ap.parse_args(argv)
    args = shlex.split(o.args)
    with contextlib.ExitStack() as stack:
        if o.snapshot:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            commit = snapshot_source(Path(__file__).resolve().parent.parent, tmp)
            # the children import pgsurge from the copy: PYTHONPATH precedes
            # the editable install's path
            old = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = str(tmp / "src") + (f":{old}" if old else "")
            print(f"# measuring a snapshot of {commit[:12]}")
        results = _measure(o, args)
    summary = summarize(results, o.rounds)
    print_summary(summary)
    if o.json:
        Path(o.json).write_text(
            json.dumps(
                {
                    "options": vars(o),
                    "runs": [asdict(r) for r in results],
                    "summary": summary,
                },
                indent=2,
            )
        )
    return 0


def _measure(o: argparse.Namespace, args: list[str]) -> list[Result]:
    with SuiteServer(o.dsn) as srv:
        dsn = srv.recreate_db(DB)
        subprocess.run(
            [*pgsurge_argv(), "-i", "-q", "-s", str(o.scale), dsn],
            check=True,
            capture_output=True,
        )
        srv.disable_autovacuum(DB)
        srv.checkpoint()
        print(
            f"# pgsurge {' '.join(args)} -T {o.time}, scale {o.scale}, "
            f"{o.rounds} rounds + 1 warm-up, variants {', '.join(VARIANTS)}"
        )
        results: list[Result] = []
        for rnd in range(-1, o.rounds):
            for variant in rotation_order(max(rnd, 0), list(VARIANTS)):
                r = run_one(dsn, variant, rnd, args, o.time)
                tag = "warm-up" if rnd < 0 else f"round {rnd}"
                print(
                    f"{tag:8} {variant:13} tps {r.tps:10.1f}  "
                    f"workers {r.worker_cpu_us:6.2f} us/tx  "
                    f"tree {r.tree_cpu_us:6.2f} us/tx"
                    + (f"  sampler {r.sampler_ms:.3f} ms" if r.sampler_ms else ""),
                    flush=True,
                )
                if rnd >= 0:
                    results.append(r)
    return results


def summarize(results: Sequence[Result], rounds: int) -> dict[str, dict[str, float]]:
    by = {(r.variant, r.round): r for r in results}
    out: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        if variant == "plain":
            continue
        ratios: dict[str, list[float]] = {"tps": [], "worker_cpu": [], "tree_cpu": []}
        for rnd in range(rounds):
            base, cand = by.get(("plain", rnd)), by.get((variant, rnd))
            if base is None or cand is None:
                continue
            ratios["tps"].append(cand.tps / base.tps)
            ratios["worker_cpu"].append(cand.worker_cpu_us / base.worker_cpu_us)
            ratios["tree_cpu"].append(cand.tree_cpu_us / base.tree_cpu_us)
        entry: dict[str, float] = {}
        for key, values in ratios.items():
            lo, hi = spread(values)
            entry[f"{key}_ratio"] = median(values)
            entry[f"{key}_min"], entry[f"{key}_max"] = lo, hi
        mine = [r for r in results if r.variant == variant]
        entry["tps"] = median(r.tps for r in mine)
        entry["worker_cpu_us"] = median(r.worker_cpu_us for r in mine)
        entry["tree_cpu_us"] = median(r.tree_cpu_us for r in mine)
        samplers = [r.sampler_ms for r in mine if r.sampler_ms is not None]
        entry["sampler_ms"] = median(samplers) if samplers else math.nan
        out[variant] = entry
    plain = [r for r in results if r.variant == "plain"]
    out["plain"] = {
        "tps": median(r.tps for r in plain),
        "worker_cpu_us": median(r.worker_cpu_us for r in plain),
        "tree_cpu_us": median(r.tree_cpu_us for r in plain),
    }
    return out


def print_summary(s: dict[str, dict[str, float]]) -> None:
    aa = s["plain-aa"]
    # the A/A ratios' range, widened to hold 1 (no difference)
    band = (min(aa["worker_cpu_min"], 1.0), max(aa["worker_cpu_max"], 1.0))
    print()
    print(
        "| variant | tps (median) | tps ratio (min–max) | workers CPU/tx µs | "
        "workers CPU ratio (min–max) | tree CPU/tx µs | tree CPU ratio | "
        "sampler ms | met? |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    p = s["plain"]
    print(
        f"| plain | {p['tps']:.0f} | 1 | {p['worker_cpu_us']:.2f} | 1 | "
        f"{p['tree_cpu_us']:.2f} | 1 | – | – |"
    )
    for name in ("plain-aa", "waits", "server-stats"):
        e = s[name]
        met = (
            "A/A band"
            if name == "plain-aa"
            else (
                "yes"
                if e["tps_ratio"] >= 0.98
                and band[0] - 1e-9 <= e["worker_cpu_ratio"] <= band[1] + 1e-9
                else "no"
            )
        )
        sampler = "–" if math.isnan(e["sampler_ms"]) else f"{e['sampler_ms']:.3f}"
        print(
            f"| {name} | {e['tps']:.0f} | {e['tps_ratio']:.3f} ({e['tps_min']:.3f}–"
            f"{e['tps_max']:.3f}) | {e['worker_cpu_us']:.2f} | "
            f"{e['worker_cpu_ratio']:.3f} "
            f"({e['worker_cpu_min']:.3f}–{e['worker_cpu_max']:.3f}) | "
            f"{e['tree_cpu_us']:.2f} | {e['tree_cpu_ratio']:.3f} | {sampler} | {met} |"
        )
    print(
        f"\ntarget: tps ratio >= 0.98 and workers' CPU/tx ratio inside the A/A band "
        f"{band[0]:.3f}–{band[1]:.3f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
