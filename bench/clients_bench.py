"""Many clients: memory, connection ramp and client CPU against pgbench 18.6.

Two cases (issue 25, item 3), each as ABBA pairs of pgbench and pgsurge
running ``SELECT 1`` (``-n -f select1.sql -j 2 -T SECONDS``; -T counts
from before the clients connect, in both tools):

* ``direct``: ``-c 1000`` (``--direct-clients``) straight to the server;
* ``pooled``: ``-c 10000`` (``--pooled-clients``) through a PgBouncer in
  transaction pooling (Debian's ``pgbouncer``, started here with
  ``max_client_conn`` above the clients and the open-file limit to match).

Before each run the bench waits until the previous run's backends have
left the server. Each pair runs every tool twice. A *memory* run gives the peak of the
summed VmRSS and Pss of the tool's process tree (sampled every 0.1 s,
bench/_suite_proc.py), divided by the clients, and the same minus a
``-c 2`` run's peak (the *marginal* cost of a client, without the fixed
cost of the process itself: the Python interpreter, its modules and
libraries). A *CPU* run, without the sampler (reading smaps costs the
machine CPU the server would have had, more for pgsurge's larger process),
gives ``initial connection time`` from the report, the transactions, and
the CPU of the process tree (user + system, start-up included) per
transaction; pgbench runs a second CPU run in each pair, the A/A control
(``pgbench-aa``): how far two runs of the same tool differ.
pgsurge's modules are byte-compiled first, as an installed pgsurge's are.
Medians over the pairs, pgsurge / pgbench ratios.

    .venv/bin/python bench/clients_bench.py                # both cases, 2 pairs
    .venv/bin/python bench/clients_bench.py --case direct --pairs 1 --time 5
"""

from __future__ import annotations

import argparse
import os
import pwd
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _suite_proc import (
    Measured,
    SuiteServer,
    byte_compile,
    pg_bindir,
    pgsurge_argv,
    pgsurge_package_dir,
    postmaster_of,
    process_tree,
    run_measured,
)

PGBOUNCER = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


@dataclass
class Figures:
    """One run's figures."""

    tool: str
    clients: int
    peak_rss_kib: int
    peak_pss_kib: int
    conn_ms: float
    cpu_s: float
    transactions: int
    ok: bool
    error: str = ""


def _number_after(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :].split()[0].split("/")[0])
    return float("nan")


def _figures(tool: str, clients: int, m: Measured) -> Figures:
    ok = m.returncode == 0
    return Figures(
        tool=tool,
        clients=clients,
        peak_rss_kib=m.peak_rss_kib or 0,
        peak_pss_kib=m.peak_pss_kib or 0,
        conn_ms=_number_after(m.stdout, "initial connection time = "),
        cpu_s=m.user_s + m.sys_s,
        transactions=int(
            _number_after(m.stdout, "number of transactions actually processed: ")
            if ok
            else 0
        ),
        ok=ok,
        error="" if ok else m.stderr.strip().splitlines()[-1:][0] if m.stderr else "",
    )


def _argv(tool: str) -> list[str]:
    if tool.startswith("pgbench"):
        return [str(pg_bindir() / "pgbench")]
    return pgsurge_argv()


def _raise_nofile(limit: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(limit, hard) if hard != resource.RLIM_INFINITY else limit
    if soft == resource.RLIM_INFINITY or soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class Bouncer:
    """A PgBouncer in transaction pooling before ``server_dsn``'s server
    (as tests/fix_pooler.py starts one, with room for ``clients``)."""

    def __init__(self, server_dsn: str, clients: int) -> None:
        from psycopg.conninfo import conninfo_to_dict

        binary = next((p for p in PGBOUNCER if os.access(p, os.X_OK)), None)
        if binary is None:
            sys.exit("pgbouncer is not installed (apt-get install pgbouncer)")
        info = conninfo_to_dict(server_dsn)
        host, port = str(info.get("host")), str(info.get("port") or 5432)
        self.user = str(info.get("user") or pwd.getpwuid(os.geteuid()).pw_name)
        self.dir = Path(tempfile.mkdtemp(prefix="pgsurge-clients-bouncer-"))
        run_as: list[str] = []
        if os.geteuid() == 0:
            owner = os.stat(host).st_uid if host.startswith("/") else 0
            name = pwd.getpwuid(owner).pw_name if owner else "nobody"
            run_as = ["-u", name]
            pw = pwd.getpwnam(name)
            os.chmod(self.dir, 0o755)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            f"admin_users = {self.user}\n"
            "pool_mode = transaction\n"
            f"max_client_conn = {clients + 100}\n"
            "default_pool_size = 20\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        for path in self.dir.iterdir():
            os.chmod(path, 0o644)
        self.process = subprocess.Popen(
            [binary, *run_as, str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: _raise_nofile(clients + 200),
        )
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.dsn(str(info.get("dbname")))).close()
                return
            except psycopg.Error:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    sys.exit("pgbouncer did not start")
                time.sleep(0.1)

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={dbname}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Settle:
    """Waits, before each run, until the previous run's backends have left
    the server: a thousand backends still exiting as the next run connects
    take its CPU (a pgbench run right after a pgbench run read 0.91x the
    transactions of one after a pgsurge run, which takes longer to exit)."""

    def __init__(self, server_dsn: str) -> None:
        import psycopg

        with psycopg.connect(server_dsn) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.postmaster = postmaster_of(int(row[0]))
        self.base = len(process_tree(self.postmaster))

    def __call__(self) -> None:
        """Until the server has no more processes than before the first
        run, or their number held for a second (a pooler keeps its server
        connections); 120 s at most."""
        deadline = time.monotonic() + 120
        last = -1
        while time.monotonic() < deadline:
            now = len(process_tree(self.postmaster))
            if now <= self.base or now == last:
                return
            last = now
            time.sleep(1.0)
        print("  (the server's processes did not settle in 120 s)", flush=True)


def run_case(
    name: str,
    dsn: str,
    clients: int,
    seconds: int,
    pairs: int,
    script: Path,
    settle: Settle,
) -> dict[str, list[Figures]]:
    """ABBA pairs of ``-c clients`` (memory runs, then CPU runs with the
    A/A control), and one ``-c 2`` run of each tool."""
    base = ["-n", "-f", str(script), "-j", "2", "-T"]
    out: dict[str, list[Figures]] = {
        "pgbench": [],
        "pgsurge": [],
        "base": [],
        "cpu-pgbench": [],
        "cpu-pgsurge": [],
        "cpu-pgbench-aa": [],
    }
    for tool in ("pgbench", "pgsurge"):
        m = run_measured(
            [*_argv(tool), *base, "2", "-c", "2", dsn],
            sample_memory=True,
            timeout=120,
        )
        out["base"].append(_figures(tool, 2, m))
    for pair in range(pairs):
        order = ("pgbench", "pgsurge") if pair % 2 == 0 else ("pgsurge", "pgbench")
        for tool in order:
            settle()
            m = run_measured(
                [*_argv(tool), *base, str(seconds), "-c", str(clients), dsn],
                sample_memory=True,
                timeout=seconds + 300,
            )
            f = _figures(tool, clients, m)
            out[tool].append(f)
            print(
                f"  {name} pair {pair} {tool} (memory): rc {m.returncode}, "
                f"peak RSS {f.peak_rss_kib / 1024:.1f} MiB, "
                f"PSS {f.peak_pss_kib / 1024:.1f} MiB {f.error}",
                flush=True,
            )
        cpu_order = ("pgbench", "pgsurge", "pgbench-aa")
        for tool in cpu_order if pair % 2 == 0 else cpu_order[::-1]:
            settle()
            m = run_measured(
                [*_argv(tool), *base, str(seconds), "-c", str(clients), dsn],
                timeout=seconds + 300,
            )
            f = _figures(tool, clients, m)
            out[f"cpu-{tool}"].append(f)
            print(
                f"  {name} pair {pair} {tool} (CPU): rc {m.returncode}, "
                f"conn {f.conn_ms:.0f} ms, {f.transactions} tx, cpu {f.cpu_s:.2f} s "
                f"{f.error}",
                flush=True,
            )
    return out


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    name: str, clients: int, seconds: int, runs: dict[str, list[Figures]]
) -> None:
    base = {f.tool: f for f in runs["base"]}
    rows: list[tuple[str, float, float, str]] = []

    def add(label: str, key: str, fmt: str) -> None:
        vals = {}
        for tool in ("pgsurge", "pgbench"):
            figs = [f for f in runs[tool] if f.ok]
            cpu_figs = [f for f in runs[f"cpu-{tool}"] if f.ok]
            b = base[tool]
            per = {
                "rss": [f.peak_rss_kib / clients for f in figs],
                "pss": [f.peak_pss_kib / clients for f in figs],
                "rss_marginal": [
                    (f.peak_rss_kib - b.peak_rss_kib) / (clients - 2) for f in figs
                ],
                "pss_marginal": [
                    (f.peak_pss_kib - b.peak_pss_kib) / (clients - 2) for f in figs
                ],
                "conn": [f.conn_ms for f in cpu_figs],
                "cpu": [
                    1e6 * f.cpu_s / f.transactions for f in cpu_figs if f.transactions
                ],
                "tps": [f.transactions / seconds for f in cpu_figs],
            }[key]
            vals[tool] = _median(per)
        rows.append((label, vals["pgsurge"], vals["pgbench"], fmt))

    add("peak RSS per client (KiB)", "rss", ".1f")
    add("peak PSS per client (KiB)", "pss", ".1f")
    add("marginal RSS per client (KiB)", "rss_marginal", ".1f")
    add("marginal PSS per client (KiB)", "pss_marginal", ".1f")
    add("initial connection time (ms)", "conn", ".0f")
    add("client CPU per transaction (µs)", "cpu", ".2f")
    add("transactions per second", "tps", ".0f")
    print(f"\n{name}: -c {clients} -j 2")
    print(f"| {'figure':<34} | pgsurge | pgbench | ratio |")
    print(f"|{'-' * 36}|---------|---------|-------|")
    for label, a, b, fmt in rows:
        ratio = a / b if b else float("nan")
        print(f"| {label:<34} | {a:{fmt}} | {b:{fmt}} | {ratio:.2f} |")
    # the A/A control: pgbench against itself, run by run in each pair
    for what, per in (
        ("client CPU per transaction", lambda f: f.cpu_s / f.transactions),
        ("transactions", lambda f: float(f.transactions)),
    ):
        for tool in ("pgsurge", "pgbench-aa"):
            pairs = [
                per(x) / per(y)
                for x, y in zip(runs[f"cpu-{tool}"], runs["cpu-pgbench"], strict=True)
                if x.ok and y.ok and x.transactions and y.transactions
            ]
            print(
                f"  {what}, {tool} / pgbench by pair: "
                + ", ".join(f"{r:.3f}" for r in pairs)
                + f" (median {_median(pairs):.3f})"
            )
    for tool in ("pgsurge", "pgbench"):
        two = base[tool]
        print(
            f"  -c 2 base of {tool}: RSS {two.peak_rss_kib / 1024:.1f} MiB, "
            f"PSS {two.peak_pss_kib / 1024:.1f} MiB"
        )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="a maintenance database of an existing server")
    ap.add_argument("--case", choices=("direct", "pooled", "both"), default="both")
    ap.add_argument("--direct-clients", type=int, default=1000)
    ap.add_argument("--pooled-clients", type=int, default=10000)
    ap.add_argument("--pairs", type=int, default=2, help="ABBA pairs per case")
    ap.add_argument("--time", type=int, default=10, help="-T of the direct runs")
    ap.add_argument(
        "--pooled-time",
        type=int,
        default=15,
        help="-T of the pooled runs (it counts the connection ramp too)",
    )
    opts = ap.parse_args(argv)
    _raise_nofile(opts.pooled_clients + 200)
    # start-up as installed: with .pyc files (see byte_compile)
    package = pgsurge_package_dir()
    if package is not None:
        byte_compile(package)
    with (
        SuiteServer(opts.dsn) as server,
        tempfile.TemporaryDirectory(prefix="pgsurge-clients-") as tmp,
    ):
        script = Path(tmp) / "select1.sql"
        script.write_text("SELECT 1;\n")
        dsn = server.dsn("postgres")
        settle = Settle(dsn)
        if opts.case in ("direct", "both"):
            n = opts.direct_clients
            runs = run_case("direct", dsn, n, opts.time, opts.pairs, script, settle)
            report("direct", n, opts.time, runs)
        if opts.case in ("pooled", "both"):
            n = opts.pooled_clients
            bouncer = Bouncer(dsn, n)
            try:
                runs = run_case(
                    "pooled",
                    bouncer.dsn("postgres"),
                    n,
                    opts.pooled_time,
                    opts.pairs,
                    script,
                    settle,
                )
            finally:
                bouncer.stop()
            report(
                "pooled (PgBouncer 1.18, transaction pooling)",
                n,
                opts.pooled_time,
                runs,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
