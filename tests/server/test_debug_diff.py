"""--debug in benchmark runs: pgsurge's debug lines against pgbench 18.6's.

Both programs run one client with the same --random-seed, so they draw the
same values and send the same statements: their debug lines (the setup
line, scripts, meta commands, sends, prepares, pipeline syncs, \\setshell
values) must be identical, in order. Only the number of ``receiving`` lines
depends on timing (one per look at the socket), so those are compared by
presence, and removed before the comparison.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fix_run import Outcome, run_pgbench, run_pgsurge

pytestmark = pytest.mark.server

SCRIPT = """\
\\setshell v echo 5
\\setshell w echo
\\shell true   x
\\set y :v + 1
\\if :y > 100
SELECT 1;
\\elif :y > 2
SELECT :y, :v;
\\else
SELECT 3;
\\endif
\\if 1
\\set z 3
\\endif
SELECT 1 AS a
\\gset
SELECT 2 AS b \\gset p_
\\sleep :y us
\\sleep 10us
\\sleep 0
"""
# not under -M simple, where pgbench refuses pipelines
PIPELINE = """\
\\startpipeline
SELECT 1;
\\syncpipeline
SELECT 2;
\\endpipeline
"""


def debug_lines(proc: Outcome) -> tuple[list[str], int]:
    """(debug lines without 'receiving', number of 'receiving' lines)."""
    assert proc.status == 0, proc.stderr
    lines = [
        line.replace("pgbench: ", "pgsurge: ", 1)
        for line in proc.stderr.splitlines()
        if not line.startswith("starting vacuum")
    ]
    receiving = [line for line in lines if line.endswith(" receiving")]
    return [line for line in lines if not line.endswith(" receiving")], len(receiving)


CASES = {
    "script-simple": ["-M", "simple", "-f", "SCRIPT", "-t", "2"],
    "script-extended": ["-M", "extended", "-f", "SCRIPT", "-t", "2"],
    "script-prepared": ["-M", "prepared", "-f", "SCRIPT", "-t", "2"],
    "tpcb-like": ["-b", "tpcb-like", "-t", "2"],
    "two-scripts-connect": [
        "-b",
        "select-only@2",
        "-b",
        "simple-update@1",
        "-M",
        "prepared",
        "-C",
        "-t",
        "4",
    ],
    "rate": ["-S", "-R", "50", "-t", "3"],
    "duration-line": ["-S", "-T", "1", "-R", "2"],
}


@pytest.mark.parametrize("case", CASES)
def test_debug_lines_match(
    case: str, bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    pipeline = "" if case == "script-simple" else PIPELINE
    (tmp_path / "s.sql").write_text(SCRIPT + pipeline)
    args = [str(tmp_path / "s.sql") if a == "SCRIPT" else a for a in CASES[case]]
    args += ["-c", "1", "--random-seed=7"]
    args = ["--debug", "-n", *args]
    ref, ref_recv = debug_lines(
        run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path, timeout=60)
    )
    ours, our_recv = debug_lines(run_pgsurge(args, bench_db, cwd=tmp_path, timeout=60))
    assert ours[0] == "pgsurge: setting random seed to 7"
    assert ours[1].startswith("pgsurge: pghost: /"), ours[:3]
    if "-T" in args:
        # how many transactions fit in the second depends on the timing of
        # the schedule: the lines up to the second transaction must agree
        starts = [i for i, line in enumerate(ref) if "executing script" in line]
        n = starts[1] if len(starts) > 1 else len(ref)
        assert ours[:n] == ref[:n]
    else:
        assert ours == ref
    assert ref_recv > 0 and our_recv > 0


def test_no_debug_lines_without_the_option(bench_db: str, tmp_path: Path) -> None:
    proc = run_pgsurge(["-n", "-S", "-t", "3"], bench_db, timeout=60)
    assert proc.status == 0
    assert proc.stderr == ""
