"""pgbench's output as third-party tools read it, pgsurge against pgbench 18.6.

Each parser here re-expresses, in this project's words, what a real tool
does with pgbench's text (no code copied):

* binidxaba/postgres-conn-poolers-comparison, scripts/parse_pgbench_output.py:
  one regular expression per summary line (clients, threads, tries,
  processed, failed, latency average and stddev, connection time, tps)
  matched at the start of each line, and one for the ``-P`` lines
  (``progress: T s, X tps, lat L ms stddev S, N failed``);
* gregs1104/pgbench-tools, benchwarmer: tps is the third space-separated
  field of the ``(without initial connection time)`` line, the processed
  count what lies between the first ``:`` and the ``/``; the ``-l`` log
  must have a sixth field (the timestamp's microseconds) or no latency is
  imported;
* gregs1104/pgbench-tools, log-to-csv and log-to-csv_rates: every ``-l``
  line splits on single spaces into exactly six fields (seven under
  ``-R``), ``client trans latency file sec usec [lag]``;
* gregs1104/pgbench-tools, util/pgbench-init-parse: the ``done in`` line
  of ``-i``, cut at ``s,`` after normalising ``s (`` and ``s)``, keyed by
  each piece's first word without punctuation.

The same parser must take the same fields, of the same types, from both
programs (the values differ). The tests count lines and fields, never time.
"""

from __future__ import annotations

import re
import string
import subprocess
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest

from tests.fix_run import PGSURGE, Loop, Outcome, run_pgbench, run_pgsurge, tool_env

pytestmark = pytest.mark.server

# -- the parsers ---------------------------------------------------------------

#: binidxaba's summary expressions: label -> pattern matched at a line's start
_SUMMARY = {
    "clients": r"number of clients: (\d+)",
    "threads": r"number of threads: (\d+)",
    "tries": r"maximum number of tries: (\d+)",
    "processed": r"number of transactions actually processed: (\d+)",
    "failed": r"number of failed transactions: (\d+) \(.*%\)",
    "latency": r"latency average = (\d+\.\d+) ms",
    "stddev": r"latency stddev = (\d+\.\d+) ms",
    "connect": r"initial connection time = (\d+\.\d+) ms",
    "tps": r"tps = (\d+\.\d+) \(without initial connection time\)",
}
#: binidxaba's -P line
_PROGRESS = re.compile(
    r"progress: (\d+\.\d+) s, (\d+\.\d+) tps, lat (\d+\.\d+) ms "
    r"stddev (\d+\.\d+|NaN), (\d+) failed"
)


def summary_fields(stdout: str) -> dict[str, float]:
    """What the summary parser takes from a report: label -> number."""
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        for label, pattern in _SUMMARY.items():
            m = re.match(pattern, line.strip())
            if m:
                found[label] = float(m.group(1))
    return found


def benchwarmer_tps(stdout: str) -> float:
    """pgbench-tools' tps: the third field, cut on single spaces, of the
    ``(without initial connection time)`` line."""
    lines = [ln for ln in stdout.splitlines() if "(without initial connection" in ln]
    assert len(lines) == 1, stdout
    return float(lines[0].split(" ")[2])


def benchwarmer_trans(stdout: str) -> int:
    """pgbench-tools' processed count: between the first ':' and the '/'
    of its line (the whole rest under -T)."""
    key = "number of transactions actually processed:"
    lines = [ln for ln in stdout.splitlines() if key in ln]
    assert len(lines) == 1, stdout
    return int(lines[0].split(":")[1].split("/")[0])


def log_rows(directory: Path, prefix: str, width: int) -> list[list[str]]:
    """log-to-csv's reading of every ``-l`` file: each line split on single
    spaces into exactly ``width`` fields (it then reads the latency as a
    number: only a failed transaction's row has a word there)."""
    rows: list[list[str]] = []
    for path in sorted(directory.glob(f"{prefix}.*")):
        for line in path.read_text().splitlines():
            fields = line.strip().split(" ")
            assert len(fields) == width, (path.name, line)
            rows.append(fields)
    return rows


def init_timing(stderr: str) -> dict[str, float]:
    """pgbench-init-parse's keys and seconds from the ``done in`` line."""
    out: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("done"):
            continue
        norm = line.replace(" s (", " s, ").replace(" s)", " s, ")
        for piece in norm.split(" s,"):
            words = piece.translate(str.maketrans("", "", string.punctuation)).split()
            number = re.findall(r"\d+.\d+$", piece)
            if words and number:
                out[words[0]] = float(number[0])
    return out


# -- running both --------------------------------------------------------------


def _both(
    pgbench_bin: Path, args: Sequence[str], dsn: str, tmp_path: Path
) -> tuple[Outcome, Outcome]:
    """The same arguments through pgbench and pgsurge, each in its own
    directory under ``tmp_path`` (``a``, ``b``: their ``-l`` files)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ref = run_pgbench(pgbench_bin, args, dsn, cwd=tmp_path / "a")
    ours = run_pgsurge(args, dsn, cwd=tmp_path / "b")
    return ref, ours


def test_summary_and_progress_parsers_read_the_same_fields(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """The summary parser takes the same labels from both reports and the
    progress parser reads every -P line of both (a run that lasts over a
    second: at least one line each)."""
    script = tmp_path / "slow.sql"
    script.write_text("SELECT pg_sleep(0.3);\n")
    args = ["-n", "-t", "5", "-c", "2", "-j", "2", "-P", "1", "-f", str(script)]
    ref, ours = _both(pgbench_bin, args, bench_db, tmp_path)
    assert (ref.status, ours.status) == (0, 0), ours.stderr
    theirs = summary_fields(ref.stdout)
    assert set(theirs) == set(_SUMMARY)
    assert set(summary_fields(ours.stdout)) == set(theirs)
    assert summary_fields(ours.stdout)["processed"] == theirs["processed"] == 10
    for proc in (ref, ours):
        progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("progress")]
        assert progress, proc.stderr
        assert all(_PROGRESS.fullmatch(ln) for ln in progress), progress


def test_pgbench_tools_reads_the_same_log_and_figures(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """benchwarmer's tps and count, and log-to-csv's six fields per -l
    line (seven under -R: log-to-csv_rates), one line per transaction."""
    args = ["-n", "-S", "-t", "15", "-c", "2", "-l", "--log-prefix", "plog"]
    ref, ours = _both(pgbench_bin, args, bench_db, tmp_path)
    assert (ref.status, ours.status) == (0, 0), ours.stderr
    assert benchwarmer_trans(ref.stdout) == benchwarmer_trans(ours.stdout) == 30
    assert benchwarmer_tps(ref.stdout) > 0 and benchwarmer_tps(ours.stdout) > 0
    for side in ("a", "b"):
        rows = [[int(f) for f in r] for r in log_rows(tmp_path / side, "plog", 6)]
        assert len(rows) == 30
        assert {r[0] for r in rows} == {0, 1}  # client ids
        assert {r[3] for r in rows} == {0}  # script number
    rated = tmp_path / "rated"
    rated.mkdir()
    args = [*args[:-2], "--log-prefix", "rlog", "-R", "2000"]
    ref, ours = _both(pgbench_bin, args, bench_db, rated)
    assert (ref.status, ours.status) == (0, 0), ours.stderr
    for side in ("a", "b"):
        rows = [[int(f) for f in r] for r in log_rows(rated / side, "rlog", 7)]
        assert len(rows) == 30


def test_log_rows_are_the_processed_and_the_failed_transactions(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """pgbench-tools counts the -l rows as transactions: under -T, with
    serialization failures and retries, one row per processed or failed
    transaction (none for the ones the end cut), in both programs."""
    script = tmp_path / "conflict.sql"
    script.write_text(
        "\\set aid random(1, 3)\n"
        "BEGIN ISOLATION LEVEL REPEATABLE READ;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
        "END;\n"
    )
    args = ["-n", "-T", "1", "-c", "3", "-j", "2", "--max-tries", "2"]
    args += ["-f", str(script), "-l", "--log-prefix", "tlog"]
    ref, ours = _both(pgbench_bin, args, bench_db, tmp_path)
    assert (ref.status, ours.status) == (0, 0), ours.stderr
    for side, proc in (("a", ref), ("b", ours)):
        fields = summary_fields(proc.stdout)
        rows = log_rows(tmp_path / side, "tlog", 7)  # + retries: --max-tries
        assert len(rows) == fields["processed"] + fields["failed"], side
        words = {r[2] for r in rows if not r[2].isdigit()}
        assert words <= {"serialization", "failed"}, words


@pytest.mark.parametrize("steps", ["dtgvp", "dtGvp"])
def test_init_timing_parser_reads_the_same_steps(
    fresh_db: str, pgbench_bin: Path, tmp_path: Path, steps: str
) -> None:
    """pgbench-init-parse takes the same step names from both ``done in``
    lines (client-side or server-side generate)."""
    args = ["-i", "-q", "-I", steps]
    ref, ours = _both(pgbench_bin, args, fresh_db, tmp_path)
    assert (ref.status, ours.status) == (0, 0), ours.stderr
    theirs = init_timing(ref.stderr)
    assert "done" in theirs and len(theirs) == 6, ref.stderr
    assert set(init_timing(ours.stderr)) == set(theirs)


# -- a stderr that cannot be written ------------------------------------------------


def _to_full_stderr(argv: Sequence[str], env: dict[str, str]) -> tuple[int, str]:
    """``argv`` with its stderr on /dev/full: status and stdout."""
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=full,
            env=env,
            timeout=120,
            check=False,
        )
    return proc.returncode, proc.stdout.decode()


@pytest.mark.parametrize("loop", ["auto", "python"])
def test_an_unwritable_stderr_costs_messages_not_the_run(
    bench_db: str, pgbench_bin: Path, tmp_path: Path, loop: Loop
) -> None:
    """``2>/dev/full`` (a log on a full disk): pgbench loses its stderr
    lines, C's fprintf ignoring the error, and still reports on stdout with
    its status; pgsurge died at the first stderr line (``setting random
    seed``, a client's abort, ``-i``'s steps) with status 1 and no report."""
    script = tmp_path / "fail.sql"
    script.write_text("SELECT 1/0;\n")
    cases = [
        (["-n", "-S", "-t", "3", "--random-seed", "5"], 0),
        (["-n", "-t", "2", "-c", "2", "-f", str(script)], 2),
    ]
    for args, status in cases:
        theirs = _to_full_stderr([str(pgbench_bin), *args, bench_db], tool_env())
        ours = _to_full_stderr([*PGSURGE, *args, bench_db], tool_env(loop=loop))
        assert theirs[0] == status, theirs
        assert ours[0] == status, ours
        assert set(summary_fields(ours[1])) == set(summary_fields(theirs[1]))
        if status == 0:
            assert benchwarmer_trans(ours[1]) == benchwarmer_trans(theirs[1]) == 3
        else:  # every client aborted at its first transaction
            assert benchwarmer_trans(ours[1]) == benchwarmer_trans(theirs[1]) == 0


def test_an_unwritable_stderr_leaves_init_alone(fresh_db: str) -> None:
    """``pgsurge -i 2>/dev/full``: all of -i's lines go to stderr; the
    tables are still made and the status is pgbench's 0."""
    status, _ = _to_full_stderr([*PGSURGE, "-i", "-q", fresh_db], tool_env())
    assert status == 0
    with psycopg.connect(fresh_db) as conn:
        row = conn.execute("SELECT count(*) FROM pgbench_branches").fetchone()
    assert row == (1,)


def test_a_closed_stdin_fails_to_read_as_pgbench_says(
    bench_db: str, pgbench_bin: Path
) -> None:
    """``-f - <&-`` (a job runner that closes stdin): pgbench's read of
    the closed descriptor fails with ``could not read file "-": Bad file
    descriptor``; pgsurge, which puts /dev/null there so that no socket
    takes descriptor 0, read an empty script and said ``empty command
    list``. A run that reads no stdin is untouched."""

    def closed_stdin(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", 'exec "$@" <&-', "sh", *argv, bench_db],
            capture_output=True,
            text=True,
            env=tool_env(),
            timeout=120,
            check=False,
        )

    theirs = closed_stdin([str(pgbench_bin), "-n", "-t", "1", "-f", "-"])
    ours = closed_stdin([*PGSURGE, "-n", "-t", "1", "-f", "-"])
    assert theirs.returncode == ours.returncode == 1
    said = 'error: could not read file "-": Bad file descriptor\n'
    assert theirs.stderr == f"pgbench: {said}"
    assert ours.stderr == theirs.stderr.replace("pgbench: ", "pgsurge: ")
    ours = closed_stdin([*PGSURGE, "-n", "-S", "-t", "2"])
    assert ours.returncode == 0, ours.stderr
    assert benchwarmer_trans(ours.stdout) == 2
