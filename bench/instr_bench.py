"""Client instructions per transaction of pgsurge and pgbench (issue 10).

CPU time per transaction swings by ±30 % on a small shared machine (the
select-only runs of this VM are bimodal); the number of instructions a
client executes per transaction does not. For each variant this runs the
tool under ``valgrind --tool=cachegrind --cache-sim=no`` twice, with ``-t
LOW`` and ``-t HIGH`` per client, sums the instructions (Ir, user space)
of every process of the tool (pgsurge forks its workers, and valgrind
follows a fork; pgbench's threads are one process) and divides the
difference by the difference of the transactions processed: start-up,
connection set-up and the counts a forked worker inherits from its parent
cancel out, what is left is what a transaction costs the client::

    python bench/instr_bench.py                     # the default variants, own server
    python bench/instr_bench.py --variants pgbench,pgsurge-json --dsn "host=/tmp"
    python bench/instr_bench.py --annotate 25 --keep /tmp/cg   # + hot functions

Kernel work (system calls, context switches) is not in these counts; see
``bench/syscall_bench.py``. Under valgrind a tool runs some 20-50 times
slower than natively, so its server is rarely the bottleneck: the client
finds results ready more often than in a real run, and makes fewer waits
per transaction. Both tools are measured the same way; compare them with
each other, not with a native run's wait counts.

Each variant's per-process files are merged (``cg_merge``) and the LOW
run subtracted from the HIGH run (``cg_diff``, ``cg_annotate``): the
``in CPython`` column is the share of the interpreter's own functions
(those whose source file lies in the CPython tree's ``Objects/``,
``Python/``, ``Modules/``, ``Parser/`` or ``Include/``), ``the rest`` the
C loop, libpq, libc and zlib. On the C loop Python runs no code per
transaction (``FastLoop.py_calls`` stays at its start-up count), only at
start-up, at each interval end (the ``--json`` series: about 0.4 ms a
worker) and at the end (merging, percentiles, the JSON); since a run under
valgrind takes seconds, those per-second costs land in the difference of
the two runs, inflated some 20-50 times against a native run. ``the rest``
is the per-transaction figure to compare. ``--annotate N`` prints the N
functions with the most instructions per transaction; ``--keep DIR``
keeps the files there.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_cases import ASYNC_COMMIT, JSON_OUT, SELECT_ONLY, TPCB_LIKE
from _suite_proc import SuiteServer, pg_bindir

#: the scripts' common arguments (the suite's script-* cases)
SCRIPT = ("-M", "prepared", "-c", "8", "-j", "2")
PIPELINE = ("-f", "{bench}/pipeline.sql", *SCRIPT)
CONNECT = ("-C", "-b", "select-only", "-c", "8", "-j", "2")


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    tool: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    #: -t of the two runs (per client)
    low: int = 2000
    high: int = 6000


VARIANTS = (
    Variant("pgbench", "pgbench", SELECT_ONLY),
    Variant("pgbench-log", "pgbench", (*SELECT_ONLY, "-l")),
    Variant("pgsurge", "pgsurge", SELECT_ONLY),
    Variant("pgsurge-json", "pgsurge", (*SELECT_ONLY, *JSON_OUT)),
    Variant("pgsurge-log", "pgsurge", (*SELECT_ONLY, "-l")),
    Variant("pgbench-tp", "pgbench", TPCB_LIKE, (ASYNC_COMMIT,), 300, 900),
    Variant("pgsurge-tp", "pgsurge", TPCB_LIKE, (ASYNC_COMMIT,), 300, 900),
    # issue 23: the Python workload py-tpcb, its generators stepped by C
    Variant(
        "pgsurge-pytp",
        "pgsurge",
        ("-b", "py-tpcb", *TPCB_LIKE[2:]),
        (ASYNC_COMMIT,),
        300,
        900,
    ),
    Variant(
        "pgsurge-tp-json", "pgsurge", (*TPCB_LIKE, *JSON_OUT), (ASYNC_COMMIT,), 300, 900
    ),
    # issue 22's scripts: skewed draws and doubles (on the C loop since then)
    *(
        Variant(f"{tool}-{name}", tool, ("-f", f"{{bench}}/{name}.sql", *SCRIPT))
        for name in ("zipfian", "double")
        for tool in ("pgbench", "pgsurge")
    ),
    # issue 22: a pipeline of 10 SELECTs, a connection per transaction
    Variant("pgbench-pipe", "pgbench", PIPELINE, (), 100, 300),
    Variant("pgsurge-pipe", "pgsurge", PIPELINE, (), 100, 300),
    Variant("pgbench-conn", "pgbench", CONNECT, (), 20, 60),
    Variant("pgsurge-conn", "pgsurge", CONNECT, (), 20, 60),
)
DEFAULT = "pgbench,pgbench-log,pgsurge,pgsurge-json,pgsurge-log"


def measure(
    argv: Sequence[str], env: dict[str, str], dsn: str, t: int, out: Path
) -> tuple[int, int, list[Path]]:
    """One run under cachegrind: (transactions, instructions, its files)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pgsurge-instr-") as tmp:
        where = {"tmp": tmp, "bench": str(Path(__file__).resolve().parent)}
        args = [a.format(**where) if "{" in a else a for a in argv]
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "-q"]
        cmd += [f"--cachegrind-out-file={out}/cg.%p", *args, "-t", str(t), dsn]
        p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
    m = re.search(r"actually processed: (\d+)", p.stdout)
    if p.returncode or m is None:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    files = sorted(out.glob("cg.*"))
    total = 0
    for f in files:
        for line in f.read_text().splitlines():
            if line.startswith("summary:"):
                total += int(line.split()[1])
    return int(m.group(1)), total, files


#: source directories of the CPython tree, as its debug information names them
_CPYTHON_DIRS = ("/Objects/", "/Python/", "/Modules/", "/Parser/", "/Include/")


def per_function(
    low: list[Path], high: list[Path], where: Path
) -> list[tuple[int, str]]:
    """(instructions, file:function) of the HIGH run less the LOW run, all
    processes merged, most first."""

    def merged(files: list[Path], name: str) -> Path:
        dest = where / name
        subprocess.run(
            ["cg_merge", "-o", str(dest), *map(str, files)],
            check=True,
            capture_output=True,
        )
        return dest

    lo, hi = merged(low, "low.merged"), merged(high, "high.merged")
    diff = where / "diff.cg"
    with diff.open("w") as f:
        subprocess.run(["cg_diff", str(lo), str(hi)], check=True, stdout=f)
    text = subprocess.run(
        ["cg_annotate", "--auto=no", "--threshold=0", str(diff)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*(-?[\d,]+)\s+\(\s*-?[\d.]+%\)\s+(\S.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    rows.sort(reverse=True)
    return rows


def in_cpython(function: str) -> bool:
    """Whether a cg_annotate ``file:function`` is the interpreter's code."""
    return any(d in function for d in _CPYTHON_DIRS)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--variants",
        default=DEFAULT,
        help="comma-separated, from: " + ",".join(v.name for v in VARIANTS),
    )
    ap.add_argument("--dsn", help="a database pgbench -i initialized (scale >= 10)")
    ap.add_argument("--pgsurge", metavar="CMD", help="command that starts pgsurge")
    ap.add_argument("--low", type=int, help="-t of the first run (per client)")
    ap.add_argument("--high", type=int, help="-t of the second run (per client)")
    ap.add_argument("--annotate", type=int, default=0, metavar="N")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="keep the files here")
    o = ap.parse_args(argv)
    for tool in ("valgrind", "cg_merge", "cg_diff", "cg_annotate"):
        if shutil.which(tool) is None:
            ap.error(f"{tool} is not installed")
    known = {v.name: v for v in VARIANTS}
    wanted = o.variants.split(",")
    if any(w not in known for w in wanted):
        ap.error(f"unknown variant in {o.variants}")
    pgbench = [str(pg_bindir() / "pgbench")]
    # the interpreter itself, not the console script: valgrind runs an ELF
    pgsurge = shlex.split(o.pgsurge) if o.pgsurge else [sys.executable, "-m", "pgsurge"]
    server = None
    dsn = o.dsn
    if dsn is None:
        server = SuiteServer(None)
        dsn = server.recreate_db("pgsurge_instr")
        subprocess.run([*pgbench, "-i", "-q", "-s", "10", dsn], check=True)
    base = o.keep or Path(tempfile.mkdtemp(prefix="pgsurge-instr-"))
    print(
        f"{'variant':16} {'tx low':>8} {'tx high':>8} {'instr/tx':>10} "
        f"{'in CPython':>10} {'the rest':>10}",
        flush=True,
    )
    try:
        for name in wanted:
            v = known[name]
            env = dict(os.environ)
            env.update(v.env)
            if v.tool == "pgbench":
                run_argv = [*pgbench, *v.args]
            else:
                # a run the C loop does not take fails instead of being measured
                env["PGSURGE_FASTLOOP"] = "require"
                run_argv = [*pgsurge, *v.args]
            low, high = o.low or v.low, o.high or v.high
            t0, i0, f0 = measure(run_argv, env, dsn, low, base / name / "low")
            t1, i1, f1 = measure(run_argv, env, dsn, high, base / name / "high")
            dtx = t1 - t0
            rows = per_function(f0, f1, base / name)
            py = sum(n for n, fn in rows if in_cpython(fn)) / dtx
            total = (i1 - i0) / dtx
            print(
                f"{name:16} {t0:8} {t1:8} {total:10.0f} {py:10.0f} {total - py:10.0f}",
                flush=True,
            )
            for n, fn in rows[: o.annotate]:
                print(f"    {n / dtx:9.1f}  {fn}", flush=True)
    finally:
        if server is not None:
            server.close()
        if o.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
