"""What a transaction costs the server, counted: pgbench's tpcb-like against
py-tpcb on the C loop (issue 23).

A tps difference between two clients that send the same transactions has
two possible causes: the server does more work per transaction for one of
them (another protocol shape, more statements, more round trips), or one
client takes more of the machine's CPU from the server. Timing cannot
tell them apart on a small shared machine; counts can. For each tool this
runs ``-t LOW`` and ``-t HIGH`` per client, alternating the tools, and
divides the difference of every counter by the difference of the
transactions, so start-up and connection set-up cancel out:

* the server's processes (``perf stat`` attached to the postmaster; the
  backends forked during the run inherit it): system calls, context
  switches, futex waits (lock waits), fdatasync (commits' WAL flushes),
  task-clock (timing, indicative only);
* the server's own statistics: WAL records, full-page images and bytes
  (``pg_stat_wal``), buffer hits, tuples fetched and commits
  (``pg_stat_database``), HOT updates and index scans
  (``pg_stat_user_tables``), and with ``pg_stat_statements`` installed in
  the database, the statements executed;
* the client's process tree: system calls by kind, context switches.

::

    python bench/tx_shape_bench.py                       # own embedded server
    python bench/tx_shape_bench.py --dsn "host=/tmp dbname=bench" --rounds 2

``--dsn`` names a local database that ``pgbench -i -s 10`` (or more)
initialised; the server must run on this machine (its postmaster is found
through /proc). Needs ``perf`` with the ``syscalls`` tracepoints (root, or
kernel.perf_event_paranoid <= -1). The protocol messages themselves are
best read with ``strace -f -e trace=sendto,recvfrom -s 200`` on a ``-c 1
-t 5`` run of each tool.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer, pg_bindir, pgsurge_argv, postmaster_of

#: short name -> perf event, for the server's processes
SERVER_EVENTS = {
    "syscalls": "raw_syscalls:sys_enter",
    "ctx switches": "context-switches",
    "futex": "syscalls:sys_enter_futex",
    "fdatasync": "syscalls:sys_enter_fdatasync",
    "epoll_wait": "syscalls:sys_enter_epoll_wait",
    "task-clock µs": "task-clock",
}
#: ... and for the client's process tree
CLIENT_EVENTS = {
    "syscalls": "raw_syscalls:sys_enter",
    "sendto": "syscalls:sys_enter_sendto",
    "recvfrom": "syscalls:sys_enter_recvfrom",
    "epoll_wait": "syscalls:sys_enter_epoll_wait",
    "ppoll": "syscalls:sys_enter_ppoll",
    "ctx switches": "context-switches",
}
STATS_SQL = """
SELECT (SELECT wal_records FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal),
       (SELECT wal_bytes FROM pg_stat_wal),
       blks_hit, tup_fetched, xact_commit,
       (SELECT sum(n_tup_hot_upd) FROM pg_stat_user_tables),
       (SELECT sum(idx_scan) FROM pg_stat_user_tables)
FROM pg_stat_database WHERE datname = current_database()
"""
STATS = (
    "wal records",
    "wal fpi",
    "wal bytes",
    "blks hit",
    "tup fetched",
    "commits",
    "hot updates",
    "idx scans",
)
#: with pg_stat_statements: the statements executed (not the catalog
#: queries, nor the scale query; prepared BEGIN and END are counted at
#: their first execution only, by both tools alike)
PGSS_SQL = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query !~* 'pg_catalog|pg_stat|count\\(\\*\\)'
"""


def server_stats(conn: Any, pgss: bool) -> list[float]:
    """The cumulative counters once the last run's backends are gone (each
    flushes its counters as it exits) and they stopped moving."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
        if row[0] == 0:
            break
        time.sleep(0.1)
    last: list[float] = []
    while time.monotonic() < deadline:
        time.sleep(0.5)
        row = conn.execute(STATS_SQL).fetchone()
        values = [float(v or 0) for v in row]
        if pgss:
            values.append(float(conn.execute(PGSS_SQL).fetchone()[0]))
        if values[:6] == last[:6]:  # the commit and WAL counters did not move
            return values
        last = values
    sys.exit("the server's counters did not settle within 60 s")


def parse_perf(text: str, events: dict[str, str]) -> dict[str, float]:
    by_event = {v: k for k, v in events.items()}
    out: dict[str, float] = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] in by_event:
            value = float(f[0]) if f[0][:1].isdigit() else 0.0
            # task-clock is in ms: µs
            out[by_event[f[2]]] = value * (1000.0 if f[2] == "task-clock" else 1.0)
    return out


def one_run(
    tool: str, t: int, args: argparse.Namespace, dsn: str, conn: Any, pgss: bool
) -> tuple[int, dict[str, float]]:
    """Run one tool with -t t: (transactions, every counter's total)."""
    common = ["-n", "-M", args.mode, "-c", str(args.clients), "-j", str(args.jobs)]
    common += ["-t", str(t)]
    env = dict(os.environ)
    if tool == "pgbench":
        argv = [str(pg_bindir() / "pgbench"), "-b", "tpcb-like", *common, dsn]
    else:
        argv = [*pgsurge_argv(), "-b", "py-tpcb", *common, dsn]
        env["PGSURGE_FASTLOOP"] = "require"
    postmaster = postmaster_of(int(conn.info.backend_pid))
    conn.execute("CHECKPOINT")
    before = server_stats(conn, pgss)
    srv = subprocess.Popen(
        [
            *("perf", "stat", "-x", ",", "-e", ",".join(SERVER_EVENTS.values())),
            *("-p", str(postmaster)),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)  # perf attached
    cmd = ["perf", "stat", "-x", ",", "-e", ",".join(CLIENT_EVENTS.values()), "--"]
    p = subprocess.run([*cmd, *argv], env=env, capture_output=True, text=True)
    time.sleep(0.2)
    srv.send_signal(signal.SIGINT)
    _, srv_err = srv.communicate()
    after = server_stats(conn, pgss)
    m = re.search(r"actually processed: (\d+)", p.stdout)
    if p.returncode or m is None:
        sys.exit(f"{tool} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    perf_counts = parse_perf(srv_err, SERVER_EVENTS)
    counts = {f"server {k}": v for k, v in perf_counts.items()}
    names = [*STATS, "statements"] if pgss else list(STATS)
    for name, a, b in zip(names, before, after, strict=True):
        counts[f"server {name}"] = b - a
    counts.update(
        {f"client {k}": v for k, v in parse_perf(p.stderr, CLIENT_EVENTS).items()}
    )
    return int(m.group(1)), counts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a local database pgbench -i made (scale >= 10)")
    ap.add_argument("--rounds", type=int, default=1, help="low/high pairs per tool")
    ap.add_argument("--low", type=int, default=200, help="-t of the first run")
    ap.add_argument("--high", type=int, default=1200, help="-t of the second run")
    ap.add_argument("-c", "--clients", type=int, default=8)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("-M", "--mode", default="prepared")
    o = ap.parse_args(argv)
    if shutil.which("perf") is None:
        ap.error("perf is not installed")
    import psycopg

    server = None
    dsn = o.dsn
    if dsn is None:
        server = SuiteServer(None)
        dsn = server.recreate_db("pgsurge_tx_shape")
        pgbench = str(pg_bindir() / "pgbench")
        subprocess.run([pgbench, "-i", "-q", "-s", "10", dsn], check=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            pgss = bool(
                conn.execute(
                    "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
                ).fetchone()
            )
            tools = ("pgbench", "pgsurge")
            sums: dict[str, dict[str, float]] = {t: {} for t in tools}
            dtx = dict.fromkeys(tools, 0)
            for r in range(o.rounds):
                # alternate which tool goes first, so a drift hits both alike
                for tool in tools if r % 2 == 0 else tools[::-1]:
                    n0, c0 = one_run(tool, o.low, o, dsn, conn, pgss)
                    n1, c1 = one_run(tool, o.high, o, dsn, conn, pgss)
                    dtx[tool] += n1 - n0
                    for k, v in c1.items():
                        sums[tool][k] = sums[tool].get(k, 0.0) + v - c0.get(k, 0.0)
    finally:
        if server is not None:
            server.close()
    print(
        f"per transaction, -M {o.mode} -c {o.clients} -j {o.jobs}, -t {o.high} minus "
        f"-t {o.low}, {o.rounds} round(s); pgbench = tpcb-like, pgsurge = py-tpcb "
        "on the C loop"
    )
    print(f"{'counter':28} {'pgbench':>10} {'pgsurge':>10} {'ratio':>7}")
    for k in sums["pgbench"]:
        a = sums["pgbench"][k] / dtx["pgbench"]
        b = sums["pgsurge"].get(k, 0.0) / dtx["pgsurge"]
        ratio = f"{b / a:7.3f}" if a else "      -"
        print(f"{k:28} {a:10.2f} {b:10.2f} {ratio}")
    print("task-clock is timing (indicative only); every other line is a count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
