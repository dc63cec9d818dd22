"""Run PostgreSQL's pgbench TAP cases against pgbench 18.6 and pgsurge.

    .venv/bin/python tools/tap_driver.py [-k SUBSTRING] [-v]

Starts a cluster of its own (tests/fix_tap.py's TapNode), runs every case
of tests/fix_tap_cases.py with the reference pgbench and then with
pgsurge (each from the same database state), and prints one line per
case: each program's verdict and whether their outputs agree where the
case says they are deterministic. With -v, the misses and outputs of
every failing run follow. Exit status 0 when pgsurge passes every case
pgbench passes (cases marked as documented differences aside).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fix_tap import (
    CaseRun,
    TapNode,
    compare_runs,
    describe,
    expected_to_pass,
    make_base,
    pgbench_program,
    pgsurge_program,
    run_case,
)
from tests.fix_tap_cases import NO_SERVER, WITH_SERVER


def verdict(run: CaseRun) -> str:
    if run.passed:
        return "ok"
    return "FAIL" if expected_to_pass(run) else "fail-19"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name has this")
    parser.add_argument("-v", action="store_true", help="details of failures")
    parser.add_argument(
        "-a",
        default="",
        help="arguments added to every with-server case's (e.g. '-M extended'):"
        " a variant of the suite, where the two programs must still agree",
    )
    opts = parser.parse_args()
    base = make_base()
    node = TapNode(base)
    node.start()
    workdir = base / "work"
    workdir.mkdir()
    bad = 0
    details = []
    try:
        print(f"{'case':<64} {'pgbench':>7} {'pgsurge':>7}  same")
        cases = [*NO_SERVER, *WITH_SERVER]
        if opts.a:
            cases = [
                replace(c, args=f"{c.args} {opts.a}") if c.server else c for c in cases
            ]
        for case in cases:
            if opts.k not in case.name:
                continue
            ref = run_case(pgbench_program(), case, node, workdir)
            ours = run_case(pgsurge_program(), case, node, workdir)
            diff = compare_runs(ours, ref)
            same = "NO" if diff else "yes"
            note = f"  ({case.difference})" if case.difference else ""
            note += "  (todo upstream)" if case.todo else ""
            verdicts = f"{verdict(ref):>7} {verdict(ours):>7}"
            print(f"{case.name[:64]:<64} {verdicts}  {same}{note}")
            # a variant (-a) changes what the case expects: only agreement counts
            missed = not ours.passed and expected_to_pass(ours) and not opts.a
            failing = missed or diff
            if failing and not case.difference:
                bad += 1
            details += [
                f"== {run.program}: {case.name}\n{describe(run)}"
                for run in (ref, ours)
                if not run.passed and expected_to_pass(run)
            ]
            details += [f"== compare: {case.name}\n{d}" for d in diff]
    finally:
        node.stop()
        shutil.rmtree(base, ignore_errors=True)
    if opts.v:
        print("\n".join(details))
    print(f"pgsurge discrepancies: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
