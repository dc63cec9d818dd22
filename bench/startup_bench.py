"""The CPU of a run's start-up, this tree against another revision (issue 10).

A short run (``-n -S -t 1 -c 8 -j 2`` by default) is nearly all start-up:
the interpreter, pgsurge's and psycopg's imports, the setup connection,
forking the workers and their connections. Per tree this measures

* ``task-clock`` of the whole process tree (``perf stat``, which follows
  the forked workers) and of the parent alone (``perf stat -i``): medians
  over ``--rounds`` runs, the trees alternating so that both see the same
  load on a shared machine;
* instructions (``valgrind --tool=cachegrind --cache-sim=no
  --trace-children=yes``, user space, one run per tree: they do not move
  with the load): the parent's, and the sum over every process. A forked
  worker's count starts from its parent's at the fork, so the sum counts
  the parent's work before the fork once per process; the parent's figure
  is the one to compare, the sum is what ``--trace-children`` reports.

``--ref REV`` takes that revision's ``src`` (and ``setup.py``) with ``git
archive``, builds its C extensions when their sources differ from this
tree's (else copies this tree's), byte-compiles both trees (``compileall``:
``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module at every
start) and puts each first on ``PYTHONPATH`` in turn::

    python bench/startup_bench.py                       # this tree alone
    python bench/startup_bench.py --ref main --rounds 15
    python bench/startup_bench.py --ref HEAD~3 --args "-n -S -T 1 -c 8 -j 2"
    python bench/startup_bench.py --dsn "host=/tmp dbname=bench" --no-instructions

Without ``--dsn`` it starts its own embedded server and initializes scale 1.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_proc import SuiteServer, pg_bindir

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ARGS = "-n -S -t 1 -c 8 -j 2"


@dataclass
class Tree:
    """One source tree to measure and what was measured of it."""

    name: str
    src: Path
    clock_all: list[float] = field(default_factory=list)
    clock_parent: list[float] = field(default_factory=list)
    instr_parent: int = 0
    instr_all: int = 0
    nproc: int = 0


def _env(tree: Tree) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PYTHONPATH"] = str(tree.src)
    env["LC_ALL"] = "C"
    return env


def _native_same(ref_root: Path) -> bool:
    """Are the C sources of the revision the same as this tree's?"""
    mine, theirs = ROOT / "src/pgsurge/_native", ref_root / "src/pgsurge/_native"
    cmp = filecmp.dircmp(mine, theirs, ignore=["__pycache__"])
    same = not (cmp.left_only or cmp.right_only or cmp.diff_files)
    return same and filecmp.cmp(ROOT / "setup.py", ref_root / "setup.py", False)


def checkout(ref: str, into: Path) -> Path:
    """The revision's src tree, with built extensions; returns its src."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src", "setup.py", "pyproject.toml"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    if _native_same(into):
        for so in (ROOT / "src/pgsurge").glob("*.so"):
            shutil.copy2(so, into / "src/pgsurge" / so.name)
    else:
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=into,
            check=True,
        )
    return into / "src"


def compile_tree(src: Path) -> None:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(src)], env=env, check=True
    )


def task_clock(argv: Sequence[str], env: dict[str, str], inherit: bool) -> float:
    """Milliseconds of task-clock of one run (its workers too if ``inherit``)."""
    perf = ["perf", "stat", "-x,", "-e", "task-clock"] + ([] if inherit else ["-i"])
    proc = subprocess.run(
        [*perf, *argv], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    for line in proc.stderr.splitlines():
        if "task-clock" in line:
            return float(line.split(",")[0])
    raise SystemExit(f"no task-clock in perf's output:\n{proc.stderr[-2000:]}")


def instructions(argv: Sequence[str], env: dict[str, str], out: Path) -> list[int]:
    """Each process's instruction count, the first process (the parent) first."""
    out.mkdir(parents=True)
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--trace-children=yes",
            f"--cachegrind-out-file={out}/cg.%p",
            *argv,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"run failed under valgrind:\n{proc.stderr[-2000:]}")
    counts: list[tuple[int, int]] = []
    for path in out.glob("cg.*"):
        pid = int(path.name.split(".")[1])
        text = path.read_text()
        m = re.search(r"^summary:\s+(\d+)", text, re.M)
        if m:
            counts.append((pid, int(m.group(1))))
    counts.sort()  # the parent has the lowest pid (it forks the others)
    return [n for _, n in counts]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", help="a git revision to compare this tree with")
    ap.add_argument("--dsn", help="a database pgbench -i initialized")
    ap.add_argument("--args", default=DEFAULT_ARGS, help=f"({DEFAULT_ARGS})")
    ap.add_argument("--rounds", type=int, default=11, help="task-clock runs per tree")
    ap.add_argument("--no-instructions", action="store_true")
    o = ap.parse_args(argv)
    if shutil.which("perf") is None:
        ap.error("perf is not installed")
    if not o.no_instructions and shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (or give --no-instructions)")
    work = Path(tempfile.mkdtemp(prefix="pgsurge-startup-"))
    server = None
    try:
        trees = []
        if o.ref:
            ref_dir = work / "ref"
            ref_dir.mkdir()
            trees.append(Tree(o.ref, checkout(o.ref, ref_dir)))
        trees.append(Tree("this tree", ROOT / "src"))
        for tree in trees:
            compile_tree(tree.src)
        dsn = o.dsn
        if dsn is None:
            server = SuiteServer(None)
            dsn = server.recreate_db("pgsurge_startup")
            pgbench = str(pg_bindir() / "pgbench")
            subprocess.run([pgbench, "-i", "-q", "-s", "1", dsn], check=True)
        # the interpreter, not the console script: valgrind runs an ELF
        run = [sys.executable, "-m", "pgsurge", *shlex.split(o.args), dsn]
        print(f"pgsurge {o.args} <dsn>; {o.rounds} rounds, trees alternating")
        for _ in range(o.rounds):
            for tree in trees:
                tree.clock_all.append(task_clock(run, _env(tree), inherit=True))
                tree.clock_parent.append(task_clock(run, _env(tree), inherit=False))
        if not o.no_instructions:
            for i, tree in enumerate(trees):
                counts = instructions(run, _env(tree), work / f"cg{i}")
                tree.instr_parent, tree.instr_all = counts[0], sum(counts)
                tree.nproc = len(counts)
        print(
            f"{'tree':12} {'task-clock all':>15} {'parent':>10} "
            f"{'instr parent':>13} {'instr sum':>11} {'procs':>5}"
        )
        for tree in trees:
            instr = (
                f"{tree.instr_parent / 1e6:12.1f}M {tree.instr_all / 1e6:10.1f}M "
                f"{tree.nproc:5}"
                if tree.nproc
                else ""
            )
            print(
                f"{tree.name[:12]:12} {statistics.median(tree.clock_all):12.1f} ms "
                f"{statistics.median(tree.clock_parent):7.1f} ms {instr}"
            )
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
