"""py-tpcb (the Python workload) against the builtin tpcb-like, same engine.

Issue 15's target: a transaction written in Python costs at most 1.3x the
client CPU per transaction of the builtin script, and reaches at least
0.95x its tps. Both run on the Python engine (``PGSURGE_NO_FASTLOOP=1``
for both: the C loop does not run Python workloads, and the comparison is
between the two programs on one engine, not between engines). The bench
checks that it is so: every worker of every run must report the same
Python engine in its ``--client-cpu`` line (never the C event loop), or
the bench stops; the report says which engine ran.

Runs alternate A B B A (A = tpcb-like, B = py-tpcb), each ``-T`` seconds
against the same pgbench tables (``-n``; a CHECKPOINT before each run), so
that a slow drift of a shared machine hits both alike. For each run:
tps, and client CPU per transaction as the workers measure it over the
benchmark (``--client-cpu``: user + sys of the worker processes, start-up
excluded). The report: medians per variant, and the median over the
rounds of B / A in the same round.

``--engine-only`` measures, without a server, what the two programs cost
the engine itself: the Python engine's real ``advance`` runs one client
over a stand-in connection whose every statement completes at once, so
that libpq, the kernel and the server (most of a real run's CPU, and
most of its noise) are left out, and the sends go through the Python
parameter path (no ``_fastpq`` connection). The difference between the
two is what the generator path costs the engine, with warm caches; the
ratio is much higher than a real run's, whose CPU is mostly what both
pay alike.

    .venv/bin/python bench/pyworkload_bench.py                # embedded server
    .venv/bin/python bench/pyworkload_bench.py --dsn "host=/tmp dbname=postgres"
    .venv/bin/python bench/pyworkload_bench.py -T 10 --rounds 3 -c 4 -j 1 -M prepared
    .venv/bin/python bench/pyworkload_bench.py --engine-only -M prepared
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer, pgsurge_argv, run_measured

from pgsurge.stats.cpu import IMPL_C_LOOP

_TPS = re.compile(r"^tps = ([\d.]+)", re.MULTILINE)
_CPU = re.compile(r"^client CPU: .* ([\d.]+) us per transaction", re.MULTILINE)
#: a worker's --client-cpu line ends with what ran its transactions
_ENGINE = re.compile(r"^client CPU worker \d+: .*\), (.+)$", re.MULTILINE)

VARIANTS = ("tpcb-like", "py-tpcb")


def one_run(
    dsn: str, builtin: str, args: argparse.Namespace
) -> tuple[float, float, str]:
    """tps, client CPU per transaction, and the engine every worker used."""
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
    engines = set(_ENGINE.findall(m.stdout))
    if m.returncode != 0 or tps is None or cpu is None:
        sys.exit(f"{builtin} failed ({m.returncode}):\n{m.stdout}\n{m.stderr}")
    if len(engines) != 1 or IMPL_C_LOOP in engines:
        sys.exit(
            f"{builtin}: the workers did not all run on the Python engine "
            f"({', '.join(sorted(engines)) or 'no worker line'}):\n{m.stdout}"
        )
    return float(tps.group(1)), float(cpu.group(1)), engines.pop()


def server_bench(args: argparse.Namespace) -> None:
    with SuiteServer(args.dsn) as server:
        dsn = server.recreate_db("pgsurge_pyworkload_bench")
        init = run_measured(
            [*pgsurge_argv(), "-i", "-q", "-s", str(args.scale), dsn], timeout=600
        )
        if init.returncode != 0:
            sys.exit(init.stderr)
        runs: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        engines: dict[str, set[str]] = {v: set() for v in VARIANTS}
        ratios_tps: list[float] = []
        ratios_cpu: list[float] = []
        for r in range(args.rounds):
            got: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
            for builtin in ("tpcb-like", "py-tpcb", "py-tpcb", "tpcb-like"):
                server.checkpoint()
                tps, cpu, engine = one_run(dsn, builtin, args)
                got[builtin].append((tps, cpu))
                runs[builtin].append((tps, cpu))
                engines[builtin].add(engine)
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
    if engines["tpcb-like"] != engines["py-tpcb"]:
        sys.exit(f"the variants ran on different engines: {engines}")
    print()
    print(
        f"-c {args.clients} -j {args.jobs} -T {args.duration} -M {args.mode} "
        f"-s {args.scale}, {args.rounds} ABBA rounds, PGSURGE_NO_FASTLOOP=1"
    )
    print(
        "engine: both variants on the Python event loop "
        f"(every worker reported: {', '.join(sorted(engines['py-tpcb']))})"
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


# -- --engine-only: the Python engine on a stand-in connection -----------------


class _Done:
    """A result: every statement succeeds with no rows."""

    __slots__ = ()
    status = 1  # PGRES_COMMAND_OK


class _Conn:
    """What ``advance`` calls on a connection (``pgconn.PgConn`` and its
    raw libpq object at once, with no _fastpq pointer): every send
    completes at once, with one result."""

    transaction_status = 0  # PQTRANS_IDLE

    def __init__(self) -> None:
        self.result: _Done | None = None

    def send_query_prepared(self, name: bytes, params: object) -> None:
        self.result = _DONE

    def send_query_params(self, sql: bytes, params: object) -> None:
        self.result = _DONE

    def send_query(self, sql: bytes) -> None:
        self.result = _DONE

    def flush(self) -> int:
        return 0

    def consume_input(self) -> None:
        pass

    def is_busy(self) -> bool:
        return False

    def get_result(self) -> _Done | None:
        res, self.result = self.result, None
        return res

    def finish(self) -> None:
        pass


_DONE = _Done()


class _Io:
    def attach(self, client: object) -> None:
        pass

    detach = want_write = write_done = attach


def engine_us_per_tx(script: Any, mode: str, count: int, scale: int) -> float:
    """CPU µs per transaction of ``advance`` running ``script`` ``count``
    times for one client on a :class:`_Conn`."""
    from pgsurge import pgconn
    from pgsurge.config import QueryMode
    from pgsurge.engine.client import make_engine
    from pgsurge.engine.program import compile_scripts
    from pgsurge.engine.state import (
        FINISHED,
        K_SQL,
        MODE_EXTENDED,
        MODE_PREPARED,
        MODE_SIMPLE,
        Client,
        Settings,
        WorkerState,
    )
    from pgsurge.prng import PgPrng
    from pgsurge.script.evaluate import EvalContext
    from pgsurge.stats.counters import StatsData

    assert _Done.status == pgconn.COMMAND_OK
    assert _Conn.transaction_status == pgconn.TRANS_IDLE
    qmode = QueryMode[mode.upper()]
    mode_no = {"SIMPLE": MODE_SIMPLE, "EXTENDED": MODE_EXTENDED}
    ops = compile_scripts((script,), qmode)
    s = Settings(
        nclients=1, query_mode=mode_no.get(qmode.name, MODE_PREPARED),
        nxacts=count, end_us=0, throttle_delay=0.0, latency_limit_us=0,
        detailed=False, per_command=False, max_tries=1, verbose_errors=False,
        continue_on_error=False, connect_each_tx=False, weights=(1,), conninfo={},
    )  # fmt: skip
    w = WorkerState(StatsData(), None, PgPrng(1), PgPrng(2))
    advance = make_engine(s, w, ops, _Io(), sys.stderr.write).advance
    rng = PgPrng(7)
    variables: dict[str, Any] = {"scale": scale}
    st = Client(0, variables, rng, EvalContext(variables, rng))
    st.ops = ops[0]
    st.conn = st.raw = _Conn()  # type: ignore[assignment]
    # prepared already: the first prepare is not what is measured
    st.prepared = {op.prepname for op in ops[0] if op.kind == K_SQL}
    start = time.process_time()
    while st.state != FINISHED:
        advance(st)
    elapsed = time.process_time() - start
    if st.cnt != count or w.stats.cnt != count:
        sys.exit(f"engine-only run ended early: {st.cnt} of {count} transactions")
    return elapsed / count * 1e6


def engine_bench(args: argparse.Namespace) -> None:
    from pgsurge.script.builtins import find_builtin
    from pgsurge.script.compile import parse_script
    from pgsurge.workloads.bundled import find_bundled
    from pgsurge.workloads.loader import load_file

    bundled = find_bundled("py-tpcb")
    assert bundled is not None and not isinstance(bundled, list)
    (py_tx,) = load_file(bundled.path, name=bundled.name).transactions
    scripts = {
        "tpcb-like": parse_script("tpcb-like", find_builtin("tpcb-like").text),
        "py-tpcb": py_tx,
    }
    count = args.transactions
    per: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ratios: list[float] = []
    for r in range(args.rounds):
        got: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for name in ("tpcb-like", "py-tpcb", "py-tpcb", "tpcb-like"):
            got[name].append(
                engine_us_per_tx(scripts[name], args.mode, count, args.scale)
            )
        for name in VARIANTS:
            per[name].extend(got[name])
        ratios.append(
            statistics.fmean(got["py-tpcb"]) / statistics.fmean(got["tpcb-like"])
        )
        print(
            f"round {r + 1}: tpcb-like {statistics.fmean(got['tpcb-like']):6.2f}"
            f"  py-tpcb {statistics.fmean(got['py-tpcb']):6.2f} us/tx",
            flush=True,
        )
    print()
    print(
        f"engine only (advance on a stand-in connection, no server), -M {args.mode},"
        f" {count} transactions a run, {args.rounds} ABBA rounds"
    )
    for name in VARIANTS:
        print(f"{name:>9}: median {statistics.median(per[name]):6.2f} us/tx")
    print(f"py-tpcb / tpcb-like: engine CPU per tx {statistics.median(ratios):.3f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("PGSURGE_BENCH_DSN"))
    p.add_argument("-T", "--duration", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="ABBA rounds")
    p.add_argument("-c", "--clients", type=int, default=4)
    p.add_argument("-j", "--jobs", type=int, default=1)
    p.add_argument("-M", "--mode", default="prepared")
    p.add_argument("-s", "--scale", type=int, default=1)
    p.add_argument(
        "--engine-only",
        action="store_true",
        help="no server: the engine's own CPU per transaction",
    )
    p.add_argument(
        "--transactions",
        type=int,
        default=100_000,
        help="transactions per run with --engine-only",
    )
    args = p.parse_args()
    if args.engine_only:
        engine_bench(args)
    else:
        server_bench(args)


if __name__ == "__main__":
    main()
