"""Big scripts: pgsurge's parse time beside pgbench's (issue 11, item 8).

Run: ``.venv/bin/python bench/parse_bench.py [--dsn CONNINFO] [--rounds N]``.

Generates the issue's inputs in a temporary directory — 4 MB on one line
(an ``IN`` list, a string literal, a line of ``:variable`` references) and
20,000 lines (SQL with a variable, or ``\\set`` lines and SQL) — and times,
best of ``--rounds``:

* ``parse``: pgsurge's ``parse_script`` in this process (the scripts'
  splitting, lexing and compiling alone);
* ``pgbench`` / ``pgsurge`` ``no-server``: the whole program up to its
  connection failure (``-h /nonexistent``): start-up, reading and parsing
  the script, which both do before connecting; pgsurge's interpreter
  start-up (about 0.2 s) is in it;
* with ``--dsn``, ``run -t 1``: one transaction per client on that server
  (``-n -t 1 -M simple``), what a user times: the server parses the 4 MB
  statement too.

The ratio column is pgsurge / pgbench for the same measure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


INPUTS: dict[str, Callable[[], str]] = {
    "4MB line: IN list": _numbers_list,
    "4MB line: literal": lambda: "SELECT '" + "x" * (MB4 - 12) + "';\n",
    "4MB line: 400k :vars": lambda: (
        "SELECT " + ", ".join([":scale"] * (MB4 // 8)) + ";\n"
    ),
    "20000 lines: SQL": lambda: "".join(
        f"SELECT {i}, 'a:b' AS c WHERE :scale > 0;\n" for i in range(20000)
    ),
    "20000 lines: \\set+SQL": lambda: "".join(
        f"\\set v{i % 50} random(1, 100000 * :scale) + {i}\n"
        if i % 2
        else f"SELECT abalance FROM pgbench_accounts WHERE aid = :v{(i - 1) % 50};\n"
        for i in range(20000)
    ),
}


def _best(rounds: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _process(cmd: list[str]) -> Callable[[], object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}

    def run() -> object:
        return subprocess.run(cmd, capture_output=True, env=env, timeout=600)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to run -t 1 on as well")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    pgbench = str(wheel_pginstall().bin("pgbench"))
    pgsurge = [sys.executable, "-m", "pgsurge"]
    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in INPUTS.items():
            text = make()
            path = Path(tmp) / "s.sql"
            path.write_text(text)
            parse = _best(args.rounds, lambda t=text: parse_script("s.sql", t))
            print(f"{name:24} parse (in-process)       {parse:8.3f} s", flush=True)
            base = ["-n", "-t", "1", "-f", str(path)]
            measures = [("no-server", [*base, "-h", "/nonexistent"])]
            if args.dsn:
                measures.append(("run -t 1", [*base, "-M", "simple", args.dsn]))
            for label, tail in measures:
                ref = _best(args.rounds, _process([pgbench, *tail]))
                ours = _best(args.rounds, _process([*pgsurge, *tail]))
                rows.append((name, label, ref, ours))
                print(
                    f"{name:24} {label:10} pgbench {ref:7.3f} s  pgsurge "
                    f"{ours:7.3f} s  ratio {ours / ref:6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
