"""The C event loop under --rate, --latency-limit and \\sleep, against Python's.

Like tests/server/test_fastloop.py, each test runs the same arguments with
the C loop and with ``PGSURGE_NO_FASTLOOP=1`` and compares what does not
depend on timing:

* the rows the scripts insert: with one client per worker they are equal
  exactly; under -L a client's rows are a prefix of its deterministic
  sequence (a skipped slot draws nothing from the client's stream);
* the worker's throttle stream and schedule after a -t run: every slot is
  either run or skipped, and counts in the client's -t either way, so the
  worker draws exactly -c x -t delays, and its final ``throttle_trigger``
  (less its start) and stream state are the same whatever the timing.
  Those are read in-process, by running ``pgsurge.engine.worker._run`` with a pipe
  and capturing its ``WorkerState``;
* the report with timing figures (and, under -L, the skip counts) masked,
  and the accounting identities (processed + skipped = all transactions).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pgsurge.engine import fastloop
from tests.fix_db import run_both_loops, take_rows
from tests.fix_db import run_worker as _run_worker
from tests.fix_run import load_free, run_pgsurge

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]

#: lines whose figures depend on timing (under -R and -L too)
_TIMING = re.compile(
    r"^( - )?(latency|initial connection time|tps|progress:|rate limit schedule lag"
    r"|number of transactions (skipped|above|actually processed))"
)
_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _report(stdout: str, per_script: bool = False) -> list[str]:
    """The report with the timing figures masked; ``per_script``: without
    the per-script lines (which slots are skipped depends on timing, and a
    script whose transactions were all skipped has no latency lines)."""
    return [
        _NUM.sub("N", line) if _TIMING.match(line) else line
        for line in stdout.splitlines()
        if not (per_script and line.startswith(" - "))
    ]


def _figure(pattern: str, stdout: str) -> int:
    m = re.search(pattern, stdout)
    assert m is not None, stdout
    return int(m.group(1))


def _scripts(tmp_path: Path, sleep: bool = False) -> list[str]:
    """Two weighted scripts drawing a then b alike (see test_fastloop)."""
    pause = "\\sleep 50 us\n\\sleep :b us\n" if sleep else ""
    texts = {
        "one.sql": (
            "\\set a random(1, 1000000)\n\\set b random(1, 10)\n"
            + pause
            + "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, :b);\n"
        ),
        "two.sql": (
            "\\set a random(1, 1000 * :scale)\n\\set b random(1, 10)\n"
            "BEGIN;\nINSERT INTO t (cid, s, a, b) VALUES (:client_id, 2, :a, :b);\n"
            + pause
            + "END;\n"
        ),
    }
    out = []
    for name, weight in (("one.sql", 3), ("two.sql", 2)):
        (tmp_path / name).write_text(texts[name])
        out += ["-f", f"{name}@{weight}"]
    return out


def _per_client(rows: list[tuple[int, int, int, int]]) -> dict[int, list[Any]]:
    per: dict[int, list[Any]] = {}
    for cid, _s, a, b in rows:
        per.setdefault(cid, []).append((a, b))
    return per


@pytest.mark.parametrize("mode", ["simple", "prepared"])
@pytest.mark.parametrize("sleep", [False, True])
def test_rate_one_client_per_worker_same_rows(
    draws_db: str, tmp_path: Path, mode: str, sleep: bool
) -> None:
    args = [*_scripts(tmp_path, sleep), "-M", mode, "-c", "2", "-j", "2", "-t", "120"]
    args += ["-R", "3000", "--random-seed", "5", "-n", "-s", "1000"]
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert len(fast_rows) == 240
    assert fast_rows == slow_rows
    assert _report(fast.stdout) == _report(slow.stdout)
    assert "rate limit schedule lag" in fast.stdout
    assert load_free(fast.stderr) == load_free(slow.stderr)


def test_sleep_without_rate_same_rows(draws_db: str, tmp_path: Path) -> None:
    args = [*_scripts(tmp_path, True), "-M", "extended", "-c", "4", "-j", "2"]
    args += ["-t", "60", "--random-seed", "9", "-n", "-s", "1000"]
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert _per_client(fast_rows) == _per_client(slow_rows)
    assert _report(fast.stdout) == _report(slow.stdout)


def test_latency_limit_skips(draws_db: str, tmp_path: Path) -> None:
    # a schedule far faster than the server answers: the clients fall behind
    # and skip; what is skipped depends on timing, the accounting does not
    args = [*_scripts(tmp_path), "-M", "prepared", "-c", "4", "-j", "2", "-t", "150"]
    args += ["-R", "100000", "-L", "0.3", "--random-seed", "7", "-n", "-s", "1000"]
    for fast in (True, False):
        out = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c" if fast else "python")
        rows = take_rows(draws_db)
        assert out.status == 0, out.stderr
        processed = _figure(r"actually processed: (\d+)/600", out.stdout)
        skipped = _figure(r"transactions skipped: (\d+) ", out.stdout)
        assert processed + skipped == 600
        assert skipped > 0
        assert len(rows) == processed
        assert "rate limit schedule lag" in out.stdout
        # each client's rows are a prefix of its own sequence of draws
        if fast:
            fast_rows, fast_report = rows, _report(out.stdout, True)
        else:
            f, s = _per_client(fast_rows), _per_client(rows)
            # (on a loaded machine a client may skip every one of its slots)
            for cid in f.keys() & s.keys():
                n = min(len(f[cid]), len(s[cid]))
                assert f[cid][:n] == s[cid][:n]
            assert fast_report == _report(out.stdout, True)


def test_rate_with_duration(draws_db: str, tmp_path: Path) -> None:
    args = [*_scripts(tmp_path), "-M", "prepared", "-c", "4", "-j", "2", "-T", "2"]
    args += ["-R", "400", "-P", "1", "--random-seed", "3", "-n", "-s", "1000"]
    for fast in (True, False):
        out = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c" if fast else "python")
        take_rows(draws_db)
        assert out.status == 0, out.stderr
        processed = _figure(r"actually processed: (\d+)", out.stdout)
        # 800 slots are scheduled on average; the last slots past the end
        # finish their clients
        assert 500 < processed < 1100, out.stdout
        assert "duration: 2 s" in out.stdout
        # (the 2.0 tick may not come: the clients finish at their first
        # slot past the end, which is before it; the label is the time of
        # the figures, a little late on a loaded box: "1.1 s")
        ticks = re.findall(r"^progress: (\d+)\.\d s.*lag", out.stderr, re.M)
        assert ticks[:1] == ["1"], out.stderr


# -- in-process: the worker's throttle stream and schedule -------------------


@pytest.mark.parametrize("limit", [None, "0.3"])
def test_throttle_stream_same_draws(
    draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str | None
) -> None:
    args = [*_scripts(tmp_path), "-M", "prepared", "-c", "3", "-t", "100"]
    args += ["-R", "20000" if limit is None else "100000", "--random-seed", "21", "-n"]
    if limit is not None:
        args += ["-L", limit]
    args = [
        a
        if not a.endswith(".sql@3") and not a.endswith(".sql@2")
        else str(tmp_path / a)
        for a in args
    ]
    out = {}
    for fast in (True, False):
        if fast:
            monkeypatch.delenv("PGSURGE_NO_FASTLOOP", raising=False)
            monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
        else:
            monkeypatch.setenv("PGSURGE_NO_FASTLOOP", "1")
            monkeypatch.delenv("PGSURGE_FASTLOOP", raising=False)
        w, result = _run_worker(args, draws_db)
        rows = take_rows(draws_db)
        total = w.stats
        assert total.cnt + total.skipped == 300
        assert total.lag.count == total.latency.count == total.cnt == len(rows)
        # each client's processed transactions (its skipped slots are not:
        # the per-server figures sum to the report's processed count)
        assert sum(result.client_tx_counts) == total.cnt, result.client_tx_counts
        if limit is None:
            assert total.skipped == 0
            assert result.client_tx_counts == [100] * 3
        else:
            # a client's 100 slots span some 3 ms: a stall of the box that
            # long skips all of them, and the client processes none
            assert total.skipped > 0
            assert all(0 <= n <= 100 for n in result.client_tx_counts)
        out[fast] = (
            w.throttle_trigger - result.bench_start_us,
            w.throttle_rng.getstate(),
            w.choose_rng.getstate(),
            _per_client(rows),
        )
    assert out[True][:2] == out[False][:2]
    if limit is None:
        # under -L a skipped slot is followed by the next slot, not by a
        # new choice of script: the choices made depend on what was skipped
        assert out[True][2:] == out[False][2:]


def test_sleep_of_odd_values_same_outcome(draws_db: str, tmp_path: Path) -> None:
    # a negative sleep does not wait; a value whose C int is 0 but whose text
    # is not a number of pgbench's atoi is pgbench's error (Python's message)
    (tmp_path / "ok.sql").write_text("\\set d -5\n\\sleep :d ms\nSELECT 1;\n")
    (tmp_path / "bad.sql").write_text("\\set d -4294967296\n\\sleep :d us\nSELECT 1;\n")
    for name, rc in (("ok.sql", 0), ("bad.sql", 2)):
        args = ["-f", name, "-M", "prepared", "-c", "2", "-j", "1", "-t", "5", "-n"]
        fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
        slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
        assert fast.status == slow.status == rc, (fast.stderr, slow.stderr)
        assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
        assert _report(fast.stdout) == _report(slow.stdout)


@pytest.mark.parametrize("rate", [None, "5000"])
def test_per_command_counts_same(
    draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: str | None
) -> None:
    # -r in C: every command's latency count (and failures, retries) as
    # Python's; a worker's script choices come from its own stream, so the
    # counts per script do not depend on which client ran what
    args = [*_scripts(tmp_path, sleep=True), "-M", "prepared", "-c", "3", "-t", "50"]
    args += ["-r", "--random-seed", "9", "-n"]
    if rate is not None:
        args += ["-R", rate]
    args = [str(tmp_path / a) if a.endswith((".sql@3", ".sql@2")) else a for a in args]
    out = {}
    used: list[bool] = []
    use_c = fastloop.FastEventLoop.use_c

    def spy(self: fastloop.FastEventLoop, *a: Any) -> None:
        used.append(True)
        use_c(self, *a)

    monkeypatch.setattr(fastloop.FastEventLoop, "use_c", spy)
    for fast in (True, False):
        if fast:
            monkeypatch.delenv("PGSURGE_NO_FASTLOOP", raising=False)
            monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
        else:
            monkeypatch.setenv("PGSURGE_NO_FASTLOOP", "1")
            monkeypatch.delenv("PGSURGE_FASTLOOP", raising=False)
        _w, result = _run_worker(args, draws_db)
        assert used == [True], "the C loop ran the -r run"
        take_rows(draws_db)
        out[fast] = [
            [(c.latency.count, c.failures, c.retries) for c in script]
            for script in result.per_command
        ]
        # every command of a script ran once per transaction of the script
        for script, stats in zip(result.per_command, result.per_script, strict=True):
            assert {c.latency.count for c in script} == {stats.cnt}
    assert out[True] == out[False]
    assert sum(s[0][0] for s in out[True]) == 150


def test_logic_script_runs_in_c(
    c_loops: list[Any], draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the logic script of bench/ (\set of expressions, \if/\else, \gset):
    # after the first transactions (first prepares) C runs them all
    (tmp_path / "logic.sql").write_text(
        "\\set aid random(1, 1000)\n"
        "\\set a2 (:aid * 7 + 13) % 1000 + 1\n"
        "\\if :a2 > 500\n\\set d 1\n\\else\n\\set d -1\n\\endif\n"
        "SELECT CAST(:a2 AS int) + 100 AS bal \\gset\n"
        "\\set x :bal + :d\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, :d, :a2, :x);\n"
    )
    loops = c_loops
    args = [str(tmp_path / "logic.sql"), "-M", "prepared", "-c", "2", "-t", "300"]
    _w, _result = _run_worker(["-f", *args, "-n"], draws_db)
    rows = take_rows(draws_db)
    assert len(rows) == 600
    assert all(x == a + 100 + d for _cid, d, a, x in rows)
    assert {d for _cid, d, _a, _x in rows} == {1, -1}
    # a hand-back per client for its first prepares and one at its end
    assert loops and loops[0]._fast.handbacks <= 2 * 4
    # and Python ran only the first transaction of each client (its
    # prepares, a few waits each) and its end, not one wait per command
    assert loops[0]._fast.py_calls <= 2 * 12


@pytest.mark.parametrize("sleep", [False, True])
def test_prepared_transactions_come_back_to_c(
    c_loops: list[Any],
    draws_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sleep: bool,
) -> None:
    # Python's advance() prepares each statement at its first use and then
    # goes from one transaction straight into the next, never stopping in
    # CHOOSE_SCRIPT: C takes the client back at a wait (a result, a \sleep)
    # of its next transaction, so that Python's share does not grow with -t
    pause = "\\sleep 10 us\n" if sleep else ""
    (tmp_path / "tx.sql").write_text(
        "\\set a random(1, 1000)\n"
        "BEGIN;\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, 0);\n"
        + pause
        + "UPDATE t SET b = b + 1 WHERE cid = :client_id AND a = :a;\n"
        "END;\n"
    )
    loops = c_loops
    args = ["-f", str(tmp_path / "tx.sql"), "-M", "prepared", "-c", "3", "-t", "400"]
    _w, result = _run_worker([*args, "-n"], draws_db)
    assert result.total.cnt == 1200
    rows = take_rows(draws_db)
    assert len(rows) == 1200
    assert loops
    # the first transaction of each client: a wait for each prepare and
    # each result (4 statements) and the \\sleep, then its end (before C
    # took clients back within a transaction: some 4 per transaction)
    assert loops[0]._fast.py_calls <= 3 * (2 * 4 + 2 + sleep)


@pytest.mark.parametrize("preset", [False, True])
def test_signal_wakeup_descriptor(
    draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preset: bool
) -> None:
    # the C loop runs Python's signal handlers when signal.set_wakeup_fd's
    # pipe is readable: set for the run, put back after it; a descriptor
    # someone else set is left alone (C then looks after every wait)
    calls: list[int] = []
    real = signal.set_wakeup_fd

    def spy(fd: int, **kw: Any) -> int:
        calls.append(fd)
        return real(fd, **kw)

    monkeypatch.setattr(signal, "set_wakeup_fd", spy)
    monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
    theirs = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC) if preset else None
    try:
        if theirs is not None:
            real(theirs[1])
        (tmp_path / "sel.sql").write_text("SELECT 1;\n")
        _w, result = _run_worker(
            ["-f", str(tmp_path / "sel.sql"), "-c", "2", "-t", "50", "-n"], draws_db
        )
        assert result.total.cnt == 100
        assert real(-1) == (-1 if theirs is None else theirs[1])
    finally:
        real(-1)
        if theirs is not None:
            os.close(theirs[0])
            os.close(theirs[1])
    if theirs is None:
        assert len(calls) == 2 and calls[0] >= 0 and calls[1] == -1, calls
    else:
        # tried, found theirs, put it back
        assert len(calls) == 2 and calls[1] == theirs[1], calls


def test_duration_ends_without_ticks(draws_db: str, tmp_path: Path) -> None:
    # no -P and no interval output: run() returns only when the clients are
    # done, so the end of -T reaches C through the signal wakeup descriptor
    (tmp_path / "sel.sql").write_text("SELECT 1;\n")
    args = ["-f", "sel.sql", "-M", "prepared", "-c", "4", "-j", "2", "-T", "2", "-n"]
    start = time.monotonic()
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    elapsed = time.monotonic() - start
    assert fast.status == 0, fast.stderr
    assert "duration: 2 s" in fast.stdout
    assert elapsed < 2 + 10, elapsed


def test_other_threads_run_during_waits(
    draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the C loop gives the GIL up around its blocking waits when the
    # interpreter has another thread: this one ticks through the run
    monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
    (tmp_path / "sel.sql").write_text("SELECT pg_sleep(0.002);\n")
    stop = threading.Event()
    ticks: list[float] = []

    def tick() -> None:
        while not stop.wait(0.002):
            ticks.append(time.monotonic())

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        start = time.monotonic()
        _w, result = _run_worker(
            ["-f", str(tmp_path / "sel.sql"), "-c", "1", "-t", "300", "-n"], draws_db
        )
        end = time.monotonic()
    finally:
        stop.set()
        ticker.join()
    assert result.total.cnt == 300
    during = [t for t in ticks if start + 0.2 < t < end - 0.2]
    assert len(during) > 20, len(during)
