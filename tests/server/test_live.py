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

import pexpect
import pyte
import pytest

from tests.fix_run import mask_numbers

pytestmark = [pytest.mark.server, pytest.mark.slow]

PGSURGE = [sys.executable, "-m", "pgsurge"]
COLUMNS, ROWS = 100, 40


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
    # figures differ from run to run
    return [mask_numbers(line) for line in kept]


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
        # (the label is the time of the figures: "1.1 s" on a loaded box)
        assert re.search(r"progress: 1\.\d s, [0-9.]+ tps", raw), raw


def test_panel_shows_latency_when_transactions_are_timed(bench_db: str) -> None:
    raw, status = _in_pty(["-S", "-c", "1", "-T", "3", "-n", "--percentiles", bench_db])
    assert status == 0
    assert re.search(r"latency avg [0-9.]+ ms \(last\)", raw), raw
    assert "latency percentiles:" in _screen(raw)[-1]


#: clients 1 and 3 fail after the panel is up (the panel starts at GO) and
#: abort; clients 0 and 2 run on: the run ends with status 2 and a report
_ABORTING = """\\if :client_id % 2 = 1
SELECT pg_sleep(1.5);
SELECT 1/0;
\\endif
SELECT 1;
"""


def _busy_part(line: str) -> bool:
    """Whether a piped stderr line is the client-bound warning.

    The warning depends on how busy the machine is, so one of the test's
    two runs may print it and the other not.
    """
    return "warning:" in line and "busy" in line


def _without_busy_warning(screen: list[str]) -> list[str]:
    """The screen's lines without the client-bound warning, however the
    terminal wrapped it (it runs up to the abort line or the end)."""
    first = next((i for i, line in enumerate(screen) if _busy_part(line)), None)
    if first is None:
        return screen
    end = next(
        (i for i in range(first, len(screen)) if "Run was aborted" in screen[i]),
        len(screen),
    )
    return screen[:first] + screen[end:]


def _report_start(lines: list[str]) -> int:
    return next(
        i for i, line in enumerate(lines) if line.startswith("transaction type:")
    )


def test_error_lines_survive_the_panel_and_no_piece_of_it_stays(
    bench_db: str, tmp_path
) -> None:
    script = tmp_path / "abort.sql"
    script.write_text(_ABORTING)
    args = ["-f", str(script), "-c", "4", "-j", "2", "-T", "4", "-n", bench_db]
    raw, status = _in_pty(args)
    assert status == 2
    assert "pgsurge live" in raw  # the panel was up when the clients failed
    piped = subprocess.run(
        [*PGSURGE, *args], capture_output=True, text=True, env=_env(), check=False
    )
    assert piped.returncode == 2
    errors = sorted(
        line for line in piped.stderr.splitlines() if " aborted in command " in line
    )
    assert len(errors) == 2, piped.stderr  # one line per aborted client
    screen = _screen(raw)
    start = _report_start(screen)
    above = screen[:start]
    # every error line is on the final screen, above the report, whole
    assert sorted(line for line in above if " aborted in command " in line) == (
        errors
    ), screen
    # and nothing of the panel: the lines above the report are the piped
    # ones (stdout's header, stderr but its last line, after the report)
    err, out = piped.stderr.splitlines(), piped.stdout.splitlines()
    tail = [line for line in err if "Run was aborted" in line]
    # the client-bound warning depends on how busy the machine is, so one
    # of the two runs may print it and the other not
    head = [line for line in err if line not in tail and not _busy_part(line)]
    above = [line for line in above if not _busy_part(line)]
    head += out[: _report_start(out)]
    assert sorted(_mask(above)) == sorted(_mask(head)), screen
    assert not any(c in line for line in screen for c in "╭╰│"), screen
    below = _without_busy_warning(screen[start:])
    assert _mask(below) == _mask(out[_report_start(out) :] + tail)


def test_untimed_run_shows_no_latency(bench_db: str) -> None:
    raw, status = _in_pty(["-S", "-c", "1", "-T", "3", "-n", bench_db])
    assert status == 0
    assert "pgsurge live" in raw and "tps" in raw
    assert "latency avg" not in raw, raw


def test_panel_says_warm_up_then_counts_the_window(bench_db: str) -> None:
    # --warmup 2 -T 2: the head says "warm-up" in the first seconds, then
    # no more; the remaining time counts the warm-up too; no rate is
    # negative when the workers reset their figures at the window
    args = ["-S", "-c", "2", "-j", "2", "--warmup", "2", "-T", "2", "-n", bench_db]
    raw, status = _in_pty(args)
    assert status == 0
    assert "warm-up" in raw
    heads = re.findall(r"pgsurge live[^\r\n]*", raw)
    warm = [h for h in heads if "warm-up" in h]
    assert warm and len(warm) < len(heads)
    assert heads.index(warm[-1]) < len(heads) - 1  # the window's heads follow
    assert re.search(r"remaining +[34]\.\d s", raw)  # 4 s to go at the start
    assert not re.search(r"tps +-\d", raw)
    screen = _screen(raw)
    assert "after a warm-up of 2 s (not counted)" in screen
