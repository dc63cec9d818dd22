"""py-tpcb (the Python workload) against the builtin tpcb-like, same engine.

Issue 15's target: a transaction written in Python costs at most 1.3x the
client CPU per transaction of the builtin script, and reaches at least
0.95x its tps. Both run on the Python engine (``PGSURGE_NO_FASTLOOP=1``:
the C loop does not run Python workloads, and the comparison is between
the two programs on one engine, not between engines).

Runs alternate A B B A (A = tpcb-like, B = py-tpcb), each ``-T`` seconds
against the same pgbench tables (``-n``; a CHECKPOINT before each run), so
that a slow drift of a shared machine hits both alike. For each run:
tps, and client CPU per transaction as the workers measure it over the
benchmark (``--client-cpu``: user + sys of the worker processes, start-up
excluded). The report: medians per variant, and the median over the
rounds of B / A in the same round.

    .venv/bin/python bench/pyworkload_bench.py                # embedded server
    .venv/bin/python bench/pyworkload_bench.py --dsn "host=/tmp dbname=postgres"
    .venv/bin/python bench/pyworkload_bench.py -T 10 --rounds 3 -c 4 -j 1 -M prepared
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer, pgsurge_argv, run_measured

_TPS = re.compile(r"^tps = ([\d.]+)", re.MULTILINE)
_CPU = re.compile(r"^client CPU: .* ([\d.]+) us per transaction", re.MULTILINE)


def one_run(dsn: str, builtin: str, args: argparse.Namespace) -> tuple[float, float]:
    argv = [
        *pgsurge_argv(),
        "-n",
        "-b",
        builtin,
        "-c",
        str(args.clients),
        "-j",
        str(args.jobs),
        "-T",
        str(args.duration),
        "-M",
        args.mode,
        "--client-cpu",
        dsn,
    ]
    env = dict(os.environ, PGSURGE_NO_FASTLOOP="1")
    m = run_measured(argv, env, timeout=args.duration * 4 + 60)
    tps, cpu = _TPS.search(m.stdout), _CPU.search(m.stdout)
    if m.returncode != 0 or tps is None or cpu is None:
        sys.exit(f"{builtin} failed ({m.returncode}):\n{m.stdout}\n{m.stderr}")
    return float(tps.group(1)), float(cpu.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("PGSURGE_BENCH_DSN"))
    p.add_argument("-T", "--duration", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="ABBA rounds")
    p.add_argument("-c", "--clients", type=int, default=4)
    p.add_argument("-j", "--jobs", type=int, default=1)
    p.add_argument("-M", "--mode", default="prepared")
    p.add_argument("-s", "--scale", type=int, default=1)
    args = p.parse_args()

    with SuiteServer(args.dsn) as server:
        dsn = server.recreate_db("pgsurge_pyworkload_bench")
        init = run_measured(
            [*pgsurge_argv(), "-i", "-q", "-s", str(args.scale), dsn], timeout=600
        )
        if init.returncode != 0:
            sys.exit(init.stderr)
        runs: dict[str, list[tuple[float, float]]] = {"tpcb-like": [], "py-tpcb": []}
        ratios_tps: list[float] = []
        ratios_cpu: list[float] = []
        for r in range(args.rounds):
            got: dict[str, list[tuple[float, float]]] = {"tpcb-like": [], "py-tpcb": []}
            for builtin in ("tpcb-like", "py-tpcb", "py-tpcb", "tpcb-like"):
                server.checkpoint()
                tps, cpu = one_run(dsn, builtin, args)
                got[builtin].append((tps, cpu))
                runs[builtin].append((tps, cpu))
                print(
                    f"round {r + 1} {builtin:>9}: tps {tps:9.1f}  "
                    f"client CPU {cpu:7.1f} us/tx",
                    flush=True,
                )
            a_tps = statistics.fmean(t for t, _ in got["tpcb-like"])
            b_tps = statistics.fmean(t for t, _ in got["py-tpcb"])
            a_cpu = statistics.fmean(c for _, c in got["tpcb-like"])
            b_cpu = statistics.fmean(c for _, c in got["py-tpcb"])
            ratios_tps.append(b_tps / a_tps)
            ratios_cpu.append(b_cpu / a_cpu)
        print()
        print(
            f"-c {args.clients} -j {args.jobs} -T {args.duration} -M {args.mode} "
            f"-s {args.scale}, {args.rounds} ABBA rounds, PGSURGE_NO_FASTLOOP=1"
        )
        for name, values in runs.items():
            print(
                f"{name:>9}: median tps {statistics.median(t for t, _ in values):9.1f}"
                f"  median client CPU {statistics.median(c for _, c in values):7.1f}"
                " us/tx"
            )
        cpu_ratio = statistics.median(ratios_cpu)
        tps_ratio = statistics.median(ratios_tps)
        print(
            f"py-tpcb / tpcb-like: client CPU per tx {cpu_ratio:.3f}x (target <= 1.3),"
            f" tps {tps_ratio:.3f}x (target >= 0.95)"
        )


if __name__ == "__main__":
    main()
