"""Issue 22's table: timed and counted client cost of every script shape.

For each of issue 22's cases (skewed draws, a double, a pipeline, a
200-command script, tpcb-like under ``-M extended`` and ``-M simple``;
pgsurge with ``--json FILE --percentiles -l``, pgbench plain) this measures
what timing on a shared 2-core machine cannot settle, per transaction and
with start-up cancelled (two ``-t`` runs differenced):

* user-space instructions of every process of the tool (``valgrind
  --tool=cachegrind``, as ``bench/instr_bench.py``), pgsurge with ``-l``
  but without ``--json``: the JSON's work is per interval (its time series,
  about 0.4 ms a worker a second natively) and at the end, not per
  transaction, and a run under valgrind lasts 20-50 times longer than a
  native one, so it would land in the difference inflated that much (the
  interpreter's share is printed apart: on the C loop it is ~0);
* system calls (``perf stat -e raw_syscalls:sys_enter``, as
  ``bench/syscall_bench.py``) and the task-clock of the process tree
  (timing: indicative only); start-up, the median task-clock of three
  ``-t 1`` runs.

``--suite FILE.json`` (a ``bench/suite.py`` result holding the same cases
and ``aa-control``) adds the timed columns: the median CPU ratio per
transaction with start-up included and cancelled, the tps ratio and the A/A
band. The counted figures are saved to ``--out`` (JSON) and can be read back
with ``--counted FILE`` instead of measuring again::

    python bench/cpu_table.py --out /tmp/counted.json            # own server
    python bench/cpu_table.py --counted /tmp/counted.json --suite results/suite-X.json
    python bench/cpu_table.py --cases tpcb-like-simple --no-instructions --dsn "$DSN"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _suite_cases import JSON_LOG, JSON_OUT, PAIRED_CASES
from _suite_proc import SuiteServer, pg_bindir
from instr_bench import in_cpython, per_function
from instr_bench import measure as cachegrind_run
from syscall_bench import measure as perf_run

#: pgsurge's extra outputs on every case (the acceptance: JSON and -l)
EXTRA = JSON_LOG


@dataclass(frozen=True, slots=True)
class Case:
    """A suite case and the ``-t`` (per client) of its two counted runs."""

    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    low: int
    high: int


def _suite_case(name: str, low: int, high: int) -> Case:
    (c,) = (c for c in PAIRED_CASES if c.name == name)
    return Case(name, c.args, c.env, low, high)


CASES = (
    *(
        _suite_case(f"script-{n}", 300, 900)
        for n in ("zipfian", "gaussian", "exponential", "double")
    ),
    _suite_case("script-pipeline", 60, 180),
    _suite_case("script-long200", 6, 18),
    _suite_case("tpcb-like-extended", 60, 180),
    _suite_case("tpcb-like-simple", 60, 180),
)
#: perf runs natively: longer runs, steadier wait counts
PERF_SCALE = 5


def pgsurge_cmd() -> list[str]:
    # valgrind needs the interpreter itself, not the console script
    return [sys.executable, "-m", "pgsurge"]


def counted(case: Case, tool: str, dsn: str, instructions: bool) -> dict[str, float]:
    """Per-transaction instructions, syscalls and task-clock µs of one tool,
    and its start-up: the median task-clock of three ``-t 1`` runs."""
    env = dict(os.environ)
    env.update(case.env)
    if tool == "pgbench":
        argv = [str(pg_bindir() / "pgbench"), *case.args]
    else:
        env["PGSURGE_FASTLOOP"] = "require"  # a run the C loop refuses fails
        argv = [*pgsurge_cmd(), *case.args, *EXTRA]
    # (see the module docstring: -l is per transaction, --json per second)
    cg_argv = [a for a in argv if a not in JSON_OUT]
    out: dict[str, float] = {}
    lo, hi = case.low * PERF_SCALE, case.high * PERF_SCALE
    t0, c0 = perf_run(argv, env, dsn, lo)
    t1, c1 = perf_run(argv, env, dsn, hi)
    out["syscalls"] = (c1["all"] - c0["all"]) / (t1 - t0)
    out["task_us"] = (c1["task_ms"] - c0["task_ms"]) * 1000 / (t1 - t0)
    out["startup_ms"] = statistics.median(
        perf_run(argv, env, dsn, 1)[1]["task_ms"] for _ in range(3)
    )
    if instructions:
        with tempfile.TemporaryDirectory(prefix="pgsurge-cg-") as tmp:
            n0, i0, f0 = cachegrind_run(cg_argv, env, dsn, case.low, Path(tmp, "lo"))
            n1, i1, f1 = cachegrind_run(cg_argv, env, dsn, case.high, Path(tmp, "hi"))
            # the interpreter's share (Python per transaction: none expected)
            py = sum(n for n, fn in per_function(f0, f1, Path(tmp)) if in_cpython(fn))
        out["instructions"] = (i1 - i0) / (n1 - n0)
        out["instructions_py"] = py / (n1 - n0)
    return out


def timed(suite: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The suite's summary of case ``name`` (None when it did not run)."""
    res = suite.get("results", {}).get(name)
    return None if res is None else dict(res.get("summary", {}))


def _f(value: Any, digits: int) -> str:
    if value is None or value != value:  # missing or NaN
        return "–"
    return f"{value:,.{digits}f}"


def _py(tool: dict[str, float]) -> str:
    """The interpreter's part of an instruction count, when there is one."""
    py = tool.get("instructions_py")
    return f" ({_f(py, 0)} in CPython)" if py else ""


def table(rows: dict[str, dict[str, dict[str, float]]], suite: dict[str, Any]) -> str:
    aa = timed(suite, "aa-control") if suite else None
    band = "–"
    if aa is not None:
        band = f"{_f(aa['cpu']['low'], 3)}–{_f(aa['cpu']['high'], 3)}"
        net = aa.get("cpu_net", {})
        if net.get("n"):
            band += f" (net {_f(net['low'], 3)}–{_f(net['high'], 3)})"
        band += f"; tps {_f(aa['tps']['low'], 3)}–{_f(aa['tps']['high'], 3)}"
    head = (
        "| case | CPU ratio | CPU ratio, start-up cancelled | tps ratio "
        "| A/A band: CPU (start-up cancelled); tps | instructions/tx pgsurge | pgbench "
        "| syscalls/tx pgsurge | pgbench | start-up CPU ms pgsurge | pgbench |"
    )
    lines = [head, "|" + "---|" * 11]
    for name, tools in rows.items():
        s = timed(suite, name) if suite else None
        cpu = s["cpu"]["median"] if s else None
        net = s.get("cpu_net", {}).get("median") if s else None
        tps = s["tps"]["median"] if s else None
        ps, pb = tools.get("pgsurge", {}), tools.get("pgbench", {})
        lines.append(
            f"| {name} | {_f(cpu, 3)} | {_f(net, 3)} | {_f(tps, 3)} | {band} "
            f"| {_f(ps.get('instructions'), 0)}{_py(ps)} "
            f"| {_f(pb.get('instructions'), 0)}{_py(pb)} "
            f"| {_f(ps.get('syscalls'), 2)} | {_f(pb.get('syscalls'), 2)} "
            f"| {_f(ps.get('startup_ms'), 0)} | {_f(pb.get('startup_ms'), 0)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases", help="comma-separated: " + ",".join(c.name for c in CASES)
    )
    ap.add_argument("--dsn", help="a database pgbench -i initialized (scale >= 10)")
    ap.add_argument("--no-instructions", action="store_true", help="skip valgrind")
    ap.add_argument("--out", type=Path, help="save the counted figures here (JSON)")
    ap.add_argument("--counted", type=Path, help="read counted figures, measure none")
    ap.add_argument("--suite", type=Path, help="a bench/suite.py result JSON")
    o = ap.parse_args(argv)
    cases = CASES
    if o.cases:
        wanted = o.cases.split(",")
        cases = tuple(c for c in CASES if c.name in wanted)
        if len(cases) != len(wanted):
            ap.error(f"unknown case in {o.cases}")
    suite = json.loads(o.suite.read_text()) if o.suite else {}
    if o.counted:
        rows = json.loads(o.counted.read_text())
    else:
        rows = {}
        server = None
        dsn = o.dsn
        if dsn is None:
            server = SuiteServer(None)
            dsn = server.recreate_db("pgsurge_cputable")
            pgbench = str(pg_bindir() / "pgbench")
            subprocess.run([pgbench, "-i", "-q", "-s", "10", dsn], check=True)
        try:
            for case in cases:
                rows[case.name] = {}
                for tool in ("pgbench", "pgsurge"):
                    r = counted(case, tool, dsn, not o.no_instructions)
                    rows[case.name][tool] = r
                    print(f"{case.name} {tool}: {json.dumps(r)}", flush=True)
                if o.out:
                    o.out.write_text(json.dumps(rows, indent=1))
        finally:
            if server is not None:
                server.close()
    print(table(rows, suite))
    if o.counted is None:
        print("\ncommand:", shlex.join(["python", "bench/cpu_table.py", *sys.argv[1:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
