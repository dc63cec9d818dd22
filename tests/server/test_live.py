"""The live panel, in a real pseudo-terminal (pexpect), against a real server.

What the terminal shows is rebuilt with a terminal emulator (pyte), so that
"the panel is gone at the end" means what a user sees: the screen holds
exactly the lines the same run prints when its output is not a terminal.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pyte
import pytest

pytestmark = pytest.mark.server

PGSURGE = [sys.executable, "-m", "pgsurge"]
COLUMNS, ROWS = 100, 40
#: figures that differ from run to run
_TIMING = re.compile(r"\d+(\.\d+)?")


@pytest.fixture
def bench_db(fresh_db: str, pgbench_bin: Path) -> str:
    subprocess.run(
        [str(pgbench_bin), "-i", "-s", "1", "-q", fresh_db],
        check=True,
        capture_output=True,
    )
    return fresh_db


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(TERM="xterm", COLUMNS=str(COLUMNS), LINES=str(ROWS))
    return env


def _in_pty(args: list[str]) -> tuple[str, int]:
    """Run pgsurge with stdout and stderr on one pseudo-terminal: the raw
    bytes it wrote, and its exit status."""
    child = pexpect.spawn(
        PGSURGE[0],
        [*PGSURGE[1:], *args],
        env=_env(),
        encoding="utf-8",
        timeout=60,
        dimensions=(ROWS, COLUMNS),
    )
    chunks = []
    while True:
        try:
            chunks.append(child.read_nonblocking(65536, timeout=60))
        except pexpect.EOF:
            break
    child.close()
    assert child.exitstatus is not None
    return "".join(chunks), child.exitstatus


def _screen(raw: str) -> list[str]:
    """The terminal's lines after ``raw`` was written to it (trailing
    blanks and empty lines dropped)."""
    screen = pyte.Screen(COLUMNS, ROWS)
    stream = pyte.Stream(screen)
    stream.feed(raw)
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _mask(lines: list[str]) -> list[str]:
    # the client-limited warning depends on the machine's load, not the view
    kept = [line for line in lines if not line.startswith("pgsurge: warning: worker")]
    return [_TIMING.sub("N", line) for line in kept]


def test_panel_shows_while_running_and_leaves_pgbench_output(bench_db: str) -> None:
    args = ["-S", "-c", "2", "-j", "2", "-T", "3", "-n", bench_db]
    raw, status = _in_pty(args)
    assert status == 0
    # the panel was drawn, more than once, with the run's figures
    assert raw.count("pgsurge live") >= 3, raw
    assert "tps" in raw and "client CPU w0" in raw and "w1" in raw
    # and what stays on the screen is what a pipe gets
    piped = subprocess.run(
        [*PGSURGE, *args], capture_output=True, text=True, env=_env(), check=True
    )
    expected = (piped.stderr + piped.stdout).splitlines()
    screen = _screen(raw)
    assert not any("pgsurge live" in line or "╭" in line for line in screen), screen
    assert _mask(screen) == _mask(expected)


def test_panel_counts_transactions_of_a_t_run(bench_db: str) -> None:
    raw, status = _in_pty(["-S", "-c", "1", "-t", "20000", "-n", bench_db])
    assert status == 0
    if "pgsurge live" in raw:  # a fast machine may finish within a second
        assert "transactions" in raw and "/20000" in raw


def test_no_panel_when_stderr_is_a_pipe(bench_db: str) -> None:
    out = subprocess.run(
        [*PGSURGE, "-S", "-c", "1", "-T", "2", "-n", bench_db],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    assert "pgsurge live" not in out.stderr + out.stdout
    assert "\x1b[" not in out.stderr + out.stdout


@pytest.mark.parametrize("extra", [["--no-live"], ["-P", "1"]])
def test_no_panel_with_no_live_or_progress(bench_db: str, extra: list[str]) -> None:
    raw, status = _in_pty(["-S", "-c", "1", "-T", "2", "-n", *extra, bench_db])
    assert status == 0
    assert "pgsurge live" not in raw
    if extra == ["-P", "1"]:
        assert re.search(r"progress: 1\.0 s, [0-9.]+ tps", raw), raw


def test_panel_shows_latency_when_transactions_are_timed(bench_db: str) -> None:
    raw, status = _in_pty(["-S", "-c", "1", "-T", "3", "-n", "--percentiles", bench_db])
    assert status == 0
    assert re.search(r"latency avg [0-9.]+ ms \(last\)", raw), raw
    assert "latency percentiles:" in _screen(raw)[-1]
