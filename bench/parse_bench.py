"""Big scripts: pgsurge's parse time beside pgbench's (issue 11, item 8).

Run: ``.venv/bin/python bench/parse_bench.py [--dsn CONNINFO] [--rounds N]``.

Generates the issue's inputs in a temporary directory -- 4 MB on one line
(an ``IN`` list, a string literal, a line of ``:variable`` references) and
20,000 lines (SQL with a variable, or ``\\set`` lines and SQL) -- and
measures, best of ``--rounds`` (default 5):

* ``in-process``: pgsurge's ``parse_script`` in this process, CPU time
  (the script's splitting, lexing and compiling alone), and what a worker
  then does before it runs: ``compile_scripts`` (the engine's ops) and
  ``fastloop.decide`` (the C loop's plan, or why not), for ``-M simple``;
* ``no-server``: each program whole, up to its connection failure
  (``-h /nonexistent``): start-up, reading and parsing the script, which
  both do before connecting;
* with ``--dsn``, ``run -t 1``: one transaction on that server
  (``-n -t 1 -M simple``), what a user times: the server parses the 4 MB
  statement too (its time is in the wall time, not in the client's CPU).

For each program: wall time, and CPU time (user + system of the child, from
``os.wait4``: on a shared, loaded machine CPU time is the steadier figure).
Each round runs, for pgbench then pgsurge, a one-statement script
(``SELECT 1;``: the program's start-up, some 0.25 s of interpreter and
imports for pgsurge, next to nothing for pgbench) and the input, the same
way. Two comparisons, both printed:

* ``whole program``: pgsurge / pgbench as measured (the ``start-up`` rows
  are the best one-statement runs of all rounds);
* ``less start-up``: (pgsurge - its start-up) / (pgbench - its start-up),
  each start-up the best of the same rounds as the input: what the script
  itself costs each program, in CPU and in wall time.

Issue 11's target is a ratio of 2 or less.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pgsurge.script.compile import parse_script
from pgsurge.server.binaries import wheel_pginstall

MB4 = 4 * 1024 * 1024


def _numbers_list() -> str:
    items, size, i = [], 0, 0
    while size < MB4:
        t = str(i)
        items.append(t)
        size += len(t) + 1
        i += 1
    return "SELECT 1 WHERE 1 IN (" + ",".join(items) + ");\n"


STARTUP = "start-up (SELECT 1;)"
STARTUP_SCRIPT = "SELECT 1;\n"

INPUTS: dict[str, Callable[[], str]] = {
    "4MB line: IN list": _numbers_list,
    "4MB line: literal": lambda: "SELECT '" + "x" * (MB4 - 12) + "';\n",
    "4MB line: 524288 :vars": lambda: (
        "SELECT " + ", ".join([":scale"] * (MB4 // 8)) + ";\n"
    ),
    "20000 lines: SQL": lambda: "".join(
        f"SELECT {i}, 'a:b' AS c WHERE :scale > 0;\n" for i in range(20000)
    ),
    # a \set on even lines, on odd ones an SQL command reading the variable
    # just set: under "run -t 1" every one of the 10,000 statements runs
    "20000 lines: \\set+SQL": lambda: "".join(
        f"SELECT abalance FROM pgbench_accounts WHERE aid = :v{i // 2 % 50};\n"
        if i % 2
        else f"\\set v{i // 2 % 50} random(1, 100000 * :scale) + {i}\n"
        for i in range(20000)
    ),
}


@dataclass
class Cost:
    """The best wall and CPU times seen (seconds; each its own minimum)."""

    wall: float = float("inf")
    cpu: float = float("inf")

    def add(self, wall: float, cpu: float) -> None:
        self.wall = min(self.wall, wall)
        self.cpu = min(self.cpu, cpu)


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) time of one run of ``cmd``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    # wait4, not wait(): the child's own rusage, whatever else this
    # process has reaped before
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime


def _pipeline_cpu(rounds: int, path: Path, text: str) -> tuple[float, float, float]:
    """Best CPU seconds of parse_script, compile_scripts and fastloop.decide."""
    # imported here: the engine is only this measure's business
    from pgsurge.cli.options import parse_command_line
    from pgsurge.config import RunConfig
    from pgsurge.engine import fastloop
    from pgsurge.engine.program import compile_scripts

    cfg = parse_command_line(["-n", "-t", "1", "-M", "simple", "-f", str(path)])
    assert isinstance(cfg, RunConfig)
    variables = (("scale", 1), ("default_seed", 0))
    best = [float("inf")] * 3
    for _ in range(rounds):
        t0 = time.process_time()
        parsed = (parse_script("s.sql", text),)
        t1 = time.process_time()
        ops = compile_scripts(parsed, cfg.query_mode)
        t2 = time.process_time()
        fastloop.decide(cfg, parsed, ops, variables, True)
        t3 = time.process_time()
        best = [
            min(b, t) for b, t in zip(best, (t1 - t0, t2 - t1, t3 - t2), strict=True)
        ]
    return best[0], best[1], best[2]


def _ratio(ours: float, ref: float) -> str:
    return f"{ours / ref:7.2f}" if ref > 0 else "      -"


@dataclass
class Row:
    """One input under one measure: each program on it, and on the
    one-statement script in the same rounds (its start-up)."""

    ref: Cost
    ours: Cost
    ref0: Cost
    ours0: Cost


def _header(first: str, second: str) -> None:
    print(
        f"{'input':24} {'measure':10} {'pgbench':>8} {'pgsurge':>8} {'ratio':>7}"
        f"   {'pgbench':>8} {'pgsurge':>8} {'ratio':>7}"
    )
    print(f"{'':35}{first:-^25}   {second:-^25}")


def _print_tables(rows: dict[tuple[str, str], Row]) -> None:
    print()
    print("whole program (best of rounds; seconds)")
    _header("wall", "CPU")
    startups: dict[str, tuple[Cost, Cost]] = {}
    for (_, label), row in rows.items():
        ref0, ours0 = startups.setdefault(label, (Cost(), Cost()))
        ref0.add(row.ref0.wall, row.ref0.cpu)
        ours0.add(row.ours0.wall, row.ours0.cpu)
    lines = [((STARTUP, label), ref, ours) for label, (ref, ours) in startups.items()]
    lines += [(key, row.ref, row.ours) for key, row in rows.items()]
    for (name, label), ref, ours in lines:
        print(
            f"{name:24} {label:10} {ref.wall:8.3f} {ours.wall:8.3f} "
            f"{_ratio(ours.wall, ref.wall)}   {ref.cpu:8.3f} {ours.cpu:8.3f} "
            f"{_ratio(ours.cpu, ref.cpu)}"
        )
    print()
    print("less start-up: the start-up of the same rounds subtracted (seconds)")
    _header("CPU", "wall")
    for (name, label), row in rows.items():
        net = (
            (row.ref.cpu - row.ref0.cpu, row.ours.cpu - row.ours0.cpu),
            (row.ref.wall - row.ref0.wall, row.ours.wall - row.ours0.wall),
        )
        cells = "   ".join(f"{r:8.3f} {o:8.3f} {_ratio(o, r)}" for r, o in net)
        print(f"{name:24} {label:10} {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to run -t 1 on as well")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    pgbench = str(wheel_pginstall().bin("pgbench"))
    pgsurge = [sys.executable, "-m", "pgsurge"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    rows: dict[tuple[str, str], Row] = {}
    print(
        f"{'input':24} {'in-process CPU (s):':>20} {'parse_script':>12} "
        f"{'compile_scripts':>15} {'fastloop.decide':>15}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.sql"
        one.write_text(STARTUP_SCRIPT)
        path = Path(tmp) / "s.sql"
        for name, make in INPUTS.items():
            text = make()
            path.write_text(text)
            cpu = _pipeline_cpu(args.rounds, path, text)
            print(
                f"{name:24} {'':20} {cpu[0]:12.3f} {cpu[1]:15.3f} {cpu[2]:15.3f}",
                flush=True,
            )
            tails = {"no-server": ["-h", "/nonexistent"]}
            if args.dsn:
                tails["run -t 1"] = ["-M", "simple", args.dsn]
            for label, tail in tails.items():
                row = Row(Cost(), Cost(), Cost(), Cost())
                for _ in range(args.rounds):
                    # each program's start-up beside its run, in the same
                    # round: the load of a shared machine drifts
                    for prog, cost, cost0 in (
                        ([pgbench], row.ref, row.ref0),
                        (pgsurge, row.ours, row.ours0),
                    ):
                        base = [*prog, "-n", "-t", "1", *tail, "-f"]
                        cost0.add(*_run([*base, str(one)], env))
                        cost.add(*_run([*base, str(path)], env))
                rows[(name, label)] = row
    _print_tables(rows)


if __name__ == "__main__":
    main()
