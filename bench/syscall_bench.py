"""Per-transaction syscalls and CPU of pgsurge and pgbench, deterministic enough
for a noisy machine (issue 10).

Wall-clock CPU ratios swing by ±30 % on a small shared machine; the number of
system calls a client makes per transaction, by kind, does not. For each
case this runs the tool under ``perf stat`` (tracepoints, software events)
twice, with ``-t LOW`` and ``-t HIGH``, and divides the difference of every
counter by the difference of the transactions processed: start-up and
connection set-up cancel out, what is left is the cost of a transaction::

    python bench/syscall_bench.py                       # every case, own server
    python bench/syscall_bench.py --cases so-json,tp-log --dsn "host=/tmp dbname=bench"
    python bench/syscall_bench.py --pgsurge "env PYTHONPATH=/other/src pgsurge"

The cases are those of bench/suite.py's issue-10 targets (plain, --json
--percentiles, -l, the logic script) and -P 1; pgbench runs each without
pgsurge's extra options. ``--dsn`` names a database initialized by
``pgbench -i`` (scale 10 or more); without it an embedded server is created
and initialized, and removed at the end. Needs ``perf`` with access to the
``syscalls`` tracepoints (root, or kernel.perf_event_paranoid <= -1).

Output, per case and tool: syscalls per transaction (all, and the kinds
that a client loop makes: sendto, recvfrom, the waits, write, clock and
rusage reads, futex), context switches and task-clock µs per transaction,
and the task-clock of what is not the transactions (``fixed ms``: the
start-up, the connections, the exit). The task-clock is timing, hence
indicative only; the counts are not.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_cases import ASYNC_COMMIT, JSON_OUT, SELECT_ONLY, TPCB_LIKE
from _suite_proc import (
    SuiteServer,
    parse_pin,
    pg_bindir,
    pgsurge_argv,
    pin_tree,
    postmaster_of,
)

#: the counters, short name -> perf event
EVENTS = {
    "all": "raw_syscalls:sys_enter",
    "sendto": "syscalls:sys_enter_sendto",
    "recvfrom": "syscalls:sys_enter_recvfrom",
    "epoll_wait": "syscalls:sys_enter_epoll_wait",
    "epoll_pwait2": "syscalls:sys_enter_epoll_pwait2",
    "ppoll": "syscalls:sys_enter_ppoll",
    "poll": "syscalls:sys_enter_poll",
    "write": "syscalls:sys_enter_write",
    "read": "syscalls:sys_enter_read",
    "clock_gettime": "syscalls:sys_enter_clock_gettime",
    "getrusage": "syscalls:sys_enter_getrusage",
    "futex": "syscalls:sys_enter_futex",
    "epoll_ctl": "syscalls:sys_enter_epoll_ctl",
    "cs": "context-switches",
    "task_ms": "task-clock",
}


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    args: tuple[str, ...]
    #: pgsurge's extra options (pgbench runs without them)
    extra: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: -t of the two runs (per client)
    low: int = 500
    high: int = 4000


CASES = (
    Case("so", SELECT_ONLY),
    Case("so-json", SELECT_ONLY, JSON_OUT),
    Case("so-log", (*SELECT_ONLY, "-l")),
    Case("so-P1", (*SELECT_ONLY, "-P", "1")),
    Case("tp", TPCB_LIKE, env=(ASYNC_COMMIT,), low=100, high=800),
    Case("tp-json", TPCB_LIKE, JSON_OUT, (ASYNC_COMMIT,), 100, 800),
    Case("tp-log", (*TPCB_LIKE, "-l"), env=(ASYNC_COMMIT,), low=100, high=800),
    Case("logic", ("-f", "{bench}/logic.sql", "-M", "prepared", "-c", "8", "-j", "2")),
    # issue 22: a pipeline of 10 SELECTs, and a connection per transaction
    Case(
        "pipe",
        ("-f", "{bench}/pipeline.sql", "-M", "prepared", "-c", "8", "-j", "2"),
        low=100,
        high=800,
    ),
    Case("conn", ("-C", "-b", "select-only", "-c", "8", "-j", "2"), low=50, high=300),
    Case(
        "conn-json",
        ("-C", "-b", "select-only", "-c", "8", "-j", "2"),
        JSON_OUT,
        low=50,
        high=300,
    ),
    # the same clients on one worker and on one worker each: with --pin, how
    # much of conn's cost is the workers' sharing one CPU (processes switch
    # address spaces where pgbench's threads do not)
    Case(
        "conn-j1", ("-C", "-b", "select-only", "-c", "8", "-j", "1"), low=50, high=300
    ),
    Case(
        "conn-j8", ("-C", "-b", "select-only", "-c", "8", "-j", "8"), low=50, high=300
    ),
    # issue 25: a thousand clients (the server's max_connections must allow them)
    Case(
        "c1000",
        ("-n", "-f", "{bench}/select1.sql", "-c", "1000", "-j", "2"),
        low=20,
        high=220,
    ),
)


def measure(
    argv: Sequence[str], env: dict[str, str], dsn: str, t: int
) -> tuple[int, dict[str, float]]:
    """One run under perf stat: (transactions processed, counters)."""
    with tempfile.TemporaryDirectory(prefix="pgsurge-sysc-") as tmp:
        where = {"tmp": tmp, "bench": str(Path(__file__).resolve().parent)}
        args = [a.format(**where) if "{" in a else a for a in argv]
        cmd = ["perf", "stat", "-x", ",", "-e", ",".join(EVENTS.values()), "--"]
        cmd += [*args, "-t", str(t), dsn]
        p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
    m = re.search(r"actually processed: (\d+)", p.stdout)
    if p.returncode or m is None:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    by_event = {v: k for k, v in EVENTS.items()}
    counts: dict[str, float] = {}
    for line in p.stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] in by_event:
            counts[by_event[f[2]]] = float(f[0]) if f[0][:1].isdigit() else 0.0
    return int(m.group(1)), counts


def per_tx(
    argv: Sequence[str], env: dict[str, str], dsn: str, case: Case, rounds: int
) -> dict[str, float]:
    """Counter deltas between -t high and -t low over transaction deltas;
    and ``fixed_ms``, the task-clock of a run that is not the transactions'
    (start-up, connections, exit): the low run's less its transactions at
    the per-transaction figure, the mean over the rounds."""
    dtx = 0
    sums = dict.fromkeys(EVENTS, 0.0)
    low: list[tuple[int, float]] = []
    for _ in range(rounds):
        t0, c0 = measure(argv, env, dsn, case.low)
        t1, c1 = measure(argv, env, dsn, case.high)
        dtx += t1 - t0
        low.append((t0, c0.get("task_ms", 0.0)))
        for k in sums:
            sums[k] += c1.get(k, 0.0) - c0.get(k, 0.0)
    out = {k: v / dtx for k, v in sums.items()}
    out["fixed_ms"] = sum(ms - tx * out["task_ms"] for tx, ms in low) / len(low)
    return out


def pin(dsn: str, spec: str) -> None:
    """--pin CLIENT,SERVER: the server's processes (and the backends it
    forks later) on one CPU, this process and the tools it starts on the
    other (as bench/suite.py's --pin), so that the tools' processes share
    one CPU as they do in the suite."""
    import psycopg

    try:
        client, cpu = parse_pin(spec, os.cpu_count())
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pin_tree(postmaster_of(int(row[0])), {cpu})
    except (ValueError, OSError, psycopg.Error) as exc:
        sys.exit(f"--pin: {exc}")
    os.sched_setaffinity(0, {client})
    print(f"pinned: tools on CPU {client}, the server on CPU {cpu}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases", help="comma-separated: " + ",".join(c.name for c in CASES)
    )
    ap.add_argument("--dsn", help="a database pgbench -i initialized (scale >= 10)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="low/high pairs per case and tool, the tools' order alternating "
        "from round to round; with more than one, the medians are printed too",
    )
    ap.add_argument("--pgsurge", metavar="CMD", help="command that starts pgsurge")
    ap.add_argument(
        "--also",
        metavar="NAME=CMD",
        action="append",
        default=[],
        help="one more pgsurge command to measure as the tool NAME (a branch's "
        "tree, an environment variable); repeatable",
    )
    ap.add_argument("--tools", default="pgbench,pgsurge", help="which tools, in order")
    ap.add_argument(
        "--aa",
        action="store_true",
        help="measure pgbench twice in each round (tool pgbench-aa): the A/A "
        "control of the timed ratio",
    )
    ap.add_argument(
        "--pin",
        metavar="CLIENT,SERVER",
        help="the tools on one CPU, the server on another",
    )
    o = ap.parse_args(argv)
    if shutil.which("perf") is None:
        ap.error("perf is not installed")
    cases: tuple[Case, ...] = CASES
    if o.cases:
        wanted = o.cases.split(",")
        cases = tuple(c for c in CASES if c.name in wanted)
        if len(cases) != len(wanted):
            ap.error(f"unknown case in {o.cases}")
    pgbench = [str(pg_bindir() / "pgbench")]
    commands = {"pgsurge": shlex.split(o.pgsurge) if o.pgsurge else pgsurge_argv()}
    for spec in o.also:
        name, sep, cmd = spec.partition("=")
        if not sep or not name or not cmd:
            ap.error(f"--also wants NAME=CMD, not {spec!r}")
        commands[name] = shlex.split(cmd)
    tools = o.tools.split(",") + [n for n in commands if n != "pgsurge"]
    if o.aa:
        tools.append("pgbench-aa")
    server = None
    dsn = o.dsn
    if dsn is None:
        server = SuiteServer(None)
        dsn = server.recreate_db("pgsurge_sysc")
        subprocess.run([*pgbench, "-i", "-q", "-s", "10", dsn], check=True)
    if o.pin:
        pin(dsn, o.pin)
    shown = [k for k in EVENTS if k not in ("task_ms",)]
    header = " ".join(f"{k:>9.9}" for k in shown)
    print(f"{'case':8} {'tool':8} {header}  cpu µs  fixed ms")

    def line(case: str, tool: str, r: dict[str, float]) -> str:
        return (
            f"{case:8} {tool:8} "
            + " ".join(f"{r[k]:9.3f}" for k in shown)
            + f"  {r['task_ms'] * 1000:6.2f}  {r['fixed_ms']:8.1f}"
        )

    try:
        for case in cases:
            results: dict[str, list[dict[str, float]]] = {t: [] for t in tools}
            for rnd in range(o.rounds):
                for tool in tools if rnd % 2 == 0 else tools[::-1]:
                    env = dict(os.environ)
                    env.update(case.env)
                    if tool in ("pgbench", "pgbench-aa"):
                        run_argv = [*pgbench, *case.args]
                    else:
                        # a run the C loop does not take fails instead of being measured
                        env["PGSURGE_FASTLOOP"] = "require"
                        run_argv = [*commands[tool], *case.args, *case.extra]
                    r = per_tx(run_argv, env, dsn, case, 1)
                    results[tool].append(r)
                    print(line(case.name, tool, r), flush=True)
            if o.rounds > 1:
                for tool in tools:
                    med = {
                        k: statistics.median(r[k] for r in results[tool])
                        for k in results[tool][0]
                    }
                    print(line(case.name, f"{tool[:6]}~", med), flush=True)
                if "pgbench" in results:
                    base = statistics.median(r["task_ms"] for r in results["pgbench"])
                    for tool in tools:
                        if tool != "pgbench":
                            m = statistics.median(r["task_ms"] for r in results[tool])
                            print(
                                f"{case.name:8} {tool}: median cpu per transaction "
                                f"{m / base:.3f}x pgbench's (indicative: timing)",
                                flush=True,
                            )
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
