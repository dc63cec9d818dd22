"""py-tpcb (the Python workload, on the C loop) against pgbench 18.6's tpcb-like.

Issue 23's target: a transaction written in Python costs at most 1.3x the
client CPU per transaction of pgbench running its builtin tpcb-like, with
tps inside the A/A band. pgsurge runs py-tpcb on the C loop, which steps
its generators (``PGSURGE_FASTLOOP=require``: the run fails if the C loop
is not taken; every worker's ``--client-cpu`` line must name it); pgbench
is the binary of the embedded PostgreSQL 18.6 tree.

Runs alternate A B B A (A = pgbench tpcb-like, B = pgsurge py-tpcb), each
``-T`` seconds against the same pgbench tables (``-n``; a CHECKPOINT
before each run), so that a slow drift of a shared machine hits both
alike. For each run: tps, and client CPU per transaction: the user + sys
time of the whole client process tree (RUSAGE_CHILDREN, pgsurge's start-up
included) over the transactions it processed; for pgsurge also its
workers' own figure (``--client-cpu``, start-up excluded). The report:
medians per variant, the median over the rounds of B / A in the same
round, and the A/A control (the two pgbench runs of a round, A2 / A1):
the band a difference must leave to mean something.

``--engine-only`` measures, without a server, what the two programs cost
the Python engine itself: the Python engine's real ``advance`` runs one
client over a stand-in connection whose every statement completes at
once, so that libpq, the kernel and the server are left out, and the sends
go through the Python parameter path (no ``_fastpq`` connection).

    .venv/bin/python bench/pyworkload_bench.py                # embedded server
    .venv/bin/python bench/pyworkload_bench.py --dsn "host=/tmp dbname=postgres"
    .venv/bin/python bench/pyworkload_bench.py -T 10 --rounds 4 -c 8 -j 2 -s 10
    .venv/bin/python bench/pyworkload_bench.py -T 10 --rounds 4 -c 8 -j 2 -s 10 --pin
    .venv/bin/python bench/pyworkload_bench.py --engine-only -M prepared
    .venv/bin/python bench/pyworkload_bench.py --tpcc -T 10 --rounds 3 -c 4 -s 1

``--pin`` (``--pin CLIENT,SERVER``, default 0,1) puts the server's
processes on one CPU and the tools on another: the clients' CPU no longer
competes with the server's, so what tps difference is left comes from
their latency alone.

``--tpcc`` runs tpcc-like on the C loop and reports its workers' client
CPU per transaction and per New-Order transaction.
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

from _suite_proc import (
    SuiteServer,
    parse_pin,
    pg_bindir,
    pgsurge_argv,
    pin_tree,
    postmaster_of,
    run_measured,
)

from pgsurge.stats.cpu import IMPL_C_LOOP

_TPS = re.compile(r"^tps = ([\d.]+)", re.MULTILINE)
_COUNT = re.compile(r"actually processed: (\d+)")
_CPU = re.compile(r"^client CPU: .* ([\d.]+) us per transaction", re.MULTILINE)
#: the New-Orders processed (the per-script lines of the report)
_NEW_ORDERS = re.compile(
    r"new_order.*\n.*\n.*\n - number of transactions actually processed: (\d+)"
)
#: a worker's --client-cpu line ends with what ran its transactions
_ENGINE = re.compile(r"^client CPU worker \d+: .*\), (.+)$", re.MULTILINE)

VARIANTS = ("tpcb-like", "py-tpcb")


def one_run(
    dsn: str, variant: str, args: argparse.Namespace
) -> tuple[float, float, float]:
    """tps, client CPU µs per transaction (the process tree), and for
    pgsurge its workers' own figure (0.0 for pgbench)."""
    common = ["-n", "-c", str(args.clients), "-j", str(args.jobs)]
    common += ["-T", str(args.duration), "-M", args.mode]
    env = dict(os.environ)
    if variant == "tpcb-like":
        argv = [str(pg_bindir() / "pgbench"), "-b", "tpcb-like", *common, dsn]
    else:
        argv = [*pgsurge_argv(), "-b", "py-tpcb", *common, "--client-cpu", dsn]
        env["PGSURGE_FASTLOOP"] = "require"
    m = run_measured(argv, env, timeout=args.duration * 4 + 60)
    tps, count = _TPS.search(m.stdout), _COUNT.search(m.stdout)
    if m.returncode != 0 or tps is None or count is None or not int(count.group(1)):
        sys.exit(f"{variant} failed ({m.returncode}):\n{m.stdout}\n{m.stderr}")
    per_tx = (m.user_s + m.sys_s) / int(count.group(1)) * 1e6
    own = 0.0
    if variant == "py-tpcb":
        engines = set(_ENGINE.findall(m.stdout))
        cpu = _CPU.search(m.stdout)
        if engines != {IMPL_C_LOOP} or cpu is None:
            sys.exit(f"py-tpcb: not every worker ran on the C loop:\n{m.stdout}")
        own = float(cpu.group(1))
    return float(tps.group(1)), per_tx, own


def pin(server: SuiteServer, spec: str) -> None:
    """--pin CLIENT,SERVER: the server's processes (and every backend it
    forks later) on one CPU, this process and the tools it starts on the
    other, so that a client's CPU cannot take the server's: a tps
    difference left then is the clients' latency, not their CPU."""
    try:
        client, cpu = parse_pin(spec, os.cpu_count())
        pinned = pin_tree(postmaster_of(server.backend_pid()), {cpu})
    except (ValueError, OSError) as exc:
        sys.exit(f"--pin: {exc}")
    os.sched_setaffinity(0, {client})
    print(
        f"pinned: tools on CPU {client}, the server ({len(pinned)} processes "
        f"and its new backends) on CPU {cpu}",
        flush=True,
    )


def server_bench(args: argparse.Namespace) -> None:
    with SuiteServer(args.dsn) as server:
        dsn = server.recreate_db("pgsurge_pyworkload_bench")
        init = run_measured(
            [*pgsurge_argv(), "-i", "-q", "-s", str(args.scale), dsn], timeout=600
        )
        if init.returncode != 0:
            sys.exit(init.stderr)
        if args.pin is not None:
            pin(server, args.pin)
        runs: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
        ratios_tps: list[float] = []
        ratios_cpu: list[float] = []
        ratios_own: list[float] = []
        aa_tps: list[float] = []
        aa_cpu: list[float] = []
        for r in range(args.rounds):
            got: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
            for variant in ("tpcb-like", "py-tpcb", "py-tpcb", "tpcb-like"):
                server.checkpoint()
                run = one_run(dsn, variant, args)
                got[variant].append(run)
                runs[variant].append(run)
                own = f"  (workers {run[2]:6.1f})" if run[2] else ""
                print(
                    f"round {r + 1} {variant:>9}: tps {run[0]:9.1f}  "
                    f"client CPU {run[1]:7.1f} us/tx{own}",
                    flush=True,
                )
            a, b = got["tpcb-like"], got["py-tpcb"]
            ratios_tps.append(
                statistics.fmean(t for t, _, _ in b)
                / statistics.fmean(t for t, _, _ in a)
            )
            ratios_cpu.append(
                statistics.fmean(c for _, c, _ in b)
                / statistics.fmean(c for _, c, _ in a)
            )
            ratios_own.append(
                statistics.fmean(o for _, _, o in b)
                / statistics.fmean(c for _, c, _ in a)
            )
            aa_tps.append(a[1][0] / a[0][0])
            aa_cpu.append(a[1][1] / a[0][1])
    print()
    print(
        f"-c {args.clients} -j {args.jobs} -T {args.duration} -M {args.mode} "
        f"-s {args.scale}, {args.rounds} ABBA rounds; A = pgbench 18.6 tpcb-like, "
        "B = pgsurge py-tpcb on the C loop"
    )
    for name, values in runs.items():
        print(
            f"{name:>9}: median tps {statistics.median(t for t, _, _ in values):9.1f}"
            f"  median client CPU {statistics.median(c for _, c, _ in values):7.1f}"
            " us/tx"
        )
    print(
        "  py-tpcb workers only (--client-cpu): median "
        f"{statistics.median(o for _, _, o in runs['py-tpcb']):7.1f} us/tx; "
        "its workers / pgbench's process: "
        f"{statistics.median(ratios_own):.3f}x (pgsurge's start-up left out, as "
        "pgbench's few ms are)"
    )
    print(
        "A/A (pgbench's two runs of a round): "
        f"tps {min(aa_tps):.3f}-{max(aa_tps):.3f}x, "
        f"client CPU per tx {min(aa_cpu):.3f}-{max(aa_cpu):.3f}x"
    )
    print(
        f"py-tpcb / tpcb-like: client CPU per tx {statistics.median(ratios_cpu):.3f}x "
        f"(target <= 1.3), tps {statistics.median(ratios_tps):.3f}x "
        f"(rounds: {', '.join(f'{x:.3f}' for x in ratios_tps)})"
    )


def tpcc_bench(args: argparse.Namespace) -> None:
    """tpcc-like on the C loop: client CPU per transaction and per
    New-Order (what a TPC-C user divides by), ``--rounds`` runs."""
    with SuiteServer(args.dsn) as server:
        dsn = server.recreate_db("pgsurge_pyworkload_tpcc")
        init = run_measured(
            [
                *pgsurge_argv(),
                "-i",
                "-q",
                "-b",
                "tpcc-like",
                "-s",
                str(args.scale),
                dsn,
            ],
            timeout=1800,
        )
        if init.returncode != 0:
            sys.exit(init.stderr)
        per_tx: list[float] = []
        per_no: list[float] = []
        for r in range(args.rounds):
            server.checkpoint()
            argv = [*pgsurge_argv(), "-n", "-b", "tpcc-like", "-c", str(args.clients)]
            argv += ["-j", str(args.jobs), "-T", str(args.duration), "-M", args.mode]
            argv += ["--max-tries=10", "--client-cpu", dsn]
            env = dict(os.environ, PGSURGE_FASTLOOP="require")
            m = run_measured(argv, env, timeout=args.duration * 4 + 60)
            cpu, count = _CPU.search(m.stdout), _COUNT.search(m.stdout)
            new_orders = _NEW_ORDERS.search(m.stdout)
            if m.returncode or cpu is None or count is None or new_orders is None:
                sys.exit(f"tpcc-like failed ({m.returncode}):\n{m.stdout}\n{m.stderr}")
            tx, no = int(count.group(1)), int(new_orders.group(1))
            per_tx.append(float(cpu.group(1)))
            per_no.append(float(cpu.group(1)) * tx / no)
            print(
                f"round {r + 1}: {tx} transactions, {no} New-Orders; workers' "
                f"client CPU {per_tx[-1]:7.1f} us/tx, {per_no[-1]:7.1f} us/New-Order",
                flush=True,
            )
    print(
        f"tpcc-like on the C loop, -c {args.clients} -j {args.jobs} -T "
        f"{args.duration} -M {args.mode}, {args.scale} warehouse(s): median client "
        f"CPU {statistics.median(per_tx):.1f} us per transaction, "
        f"{statistics.median(per_no):.1f} us per New-Order"
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
        "--pin",
        nargs="?",
        const="0,1",
        metavar="CLIENT,SERVER",
        help="the tools on one CPU, the server on another (default 0,1)",
    )
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
    p.add_argument(
        "--tpcc",
        action="store_true",
        help="tpcc-like's client CPU per transaction and per New-Order",
    )
    args = p.parse_args()
    if args.tpcc:
        tpcc_bench(args)
    elif args.engine_only:
        engine_bench(args)
    else:
        server_bench(args)


if __name__ == "__main__":
    main()
