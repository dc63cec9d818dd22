"""The C event loop (pgsurge._fastloop) against the Python engine, on a real server.

Each test runs pgsurge twice with the same arguments, once with the C loop
(the default where a run is eligible) and once with ``PGSURGE_NO_FASTLOOP=1``,
and requires the same outcome: the rows the scripts insert (their drawn
values, per client, in order), the report apart from timing figures, the
error messages and exit status. A run with one client per worker and
``--random-seed`` is deterministic, so its rows must be equal exactly; with
several clients per worker, which client runs which script depends on
timing, so the per-client value sequences of a script that draws the same
way in every script, and the per-script counts, are compared instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from pgsurge.engine import fastloop
from tests.fix_run import mask_timing, run_both_loops, run_pgsurge, take_rows

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]


def _scripts(tmp_path: Path) -> list[str]:
    """Three weighted scripts; each draws a then b from the same ranges (with
    ``-s 1000``), so that a client's draws do not depend on its scripts."""
    texts = {
        "one.sql": (
            "\\set a random(1, 1000000)\n\\set b random(1, 10)\n"
            "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, :b);\n"
        ),
        "two.sql": (
            "\\set a random(1, 1000 * :scale)\n\\set c -7\n\\set b random(1, 10)\n"
            "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 2, :a, :b);\n"
            "SELECT CAST(:a AS bigint) + :c;\n"
        ),
        "three.sql": (
            "\\set a random(1, 1000000)\n\\set b random(1, 10)\n"
            "BEGIN;\nINSERT INTO t (cid, s, a, b) VALUES (:client_id, 3, :a, :b);\n"
            "SELECT 2;\nEND;\n"
        ),
    }
    out = []
    for name, weight in (("one.sql", 5), ("two.sql", 3), ("three.sql", 2)):
        (tmp_path / name).write_text(texts[name])
        out += ["-f", f"{name}@{weight}"]
    return out


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_one_client_per_worker_same_rows(
    draws_db: str, tmp_path: Path, mode: str
) -> None:
    args = [*_scripts(tmp_path), "-M", mode, "-c", "2", "-j", "2", "-t", "150"]
    args += ["--random-seed", "5", "-n", "-s", "1000"]
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert len(fast_rows) == 300
    assert fast_rows == slow_rows
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)
    assert fast.stderr == slow.stderr


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_many_clients_same_draws(draws_db: str, tmp_path: Path, mode: str) -> None:
    args = [*_scripts(tmp_path), "-M", mode, "-c", "6", "-j", "2", "-t", "100"]
    args += ["--random-seed", "11", "-n", "-s", "1000"]
    # the per-script counts (in the report) are deterministic: every worker
    # draws its choices from its own stream, as many times either way
    fast, fast_rows, slow, slow_rows = run_both_loops(args, draws_db, tmp_path)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)
    assert len(fast_rows) == len(slow_rows) == 600

    def draws(
        rows: list[tuple[int, int, int, int]],
    ) -> dict[int, list[tuple[int, int]]]:
        per: dict[int, list[tuple[int, int]]] = {}
        for cid, _s, a, b in rows:
            per.setdefault(cid, []).append((a, b))
        return per

    assert draws(fast_rows) == draws(slow_rows)


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_error_mid_run_same_messages(draws_db: str, tmp_path: Path, mode: str) -> None:
    # each client fails when its own stream first draws 5: deterministic
    (tmp_path / "err.sql").write_text(
        "\\set a random(1, 12)\nINSERT INTO u VALUES (:a);\nSELECT 1 / (:a - 5);\n"
    )
    args = ["-f", "err.sql", "-M", mode, "-c", "4", "-j", "2", "-t", "40"]
    args += ["--random-seed", "3", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 2
    assert "division by zero" in fast.stderr
    assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)


def test_exit_on_abort(draws_db: str, tmp_path: Path) -> None:
    (tmp_path / "err.sql").write_text("\\set a random(1, 12)\nSELECT 1 / (:a - 5);\n")
    args = ["-f", "err.sql", "-c", "1", "-j", "1", "-t", "40", "--exit-on-abort"]
    args += ["--random-seed", "3", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 2
    assert fast.stderr == slow.stderr
    assert "Run was aborted" in fast.stderr


def test_open_transaction_at_script_end(draws_db: str, tmp_path: Path) -> None:
    (tmp_path / "open.sql").write_text("\\set a 1\nBEGIN;\nSELECT :a;\n")
    args = ["-f", "open.sql", "-M", "prepared", "-c", "2", "-j", "2", "-t", "5", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 2
    assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
    assert "without completing the last transaction" in fast.stderr
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)


@pytest.mark.slow
def test_duration_and_progress(draws_db: str, tmp_path: Path) -> None:
    (tmp_path / "sel.sql").write_text("\\set a random(1, 100)\nSELECT :a;\n")
    args = ["-f", "sel.sql", "-M", "prepared", "-c", "4", "-j", "2", "-T", "3"]
    args += ["-P", "1", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    assert fast.status == 0, fast.stderr
    ticks = re.findall(r"^progress: (\d+\.\d) s, ([\d.]+) tps", fast.stderr, re.M)
    assert [t for t, _ in ticks] == ["1.0", "2.0", "3.0"], fast.stderr
    assert all(float(tps) > 0 for _, tps in ticks)
    assert "duration: 3 s" in fast.stdout
    processed = re.search(r"actually processed: (\d+)", fast.stdout)
    assert processed is not None and int(processed.group(1)) > 0


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_command_reading_a_variable_many_times(
    draws_db: str, tmp_path: Path, mode: str
) -> None:
    # a reference is a parameter each (pgbench allows 255 per command): the
    # C loop took a plan of 64 or more as malformed and the worker crashed
    terms = " + ".join(["CAST(:a AS int)"] * 70)
    (tmp_path / "many.sql").write_text(
        f"\\set a random(1, 9)\nINSERT INTO u VALUES ({terms});\n"
    )
    args = ["-f", "many.sql", "-M", mode, "-c", "1", "-j", "1", "-t", "20"]
    args += ["--random-seed", "4", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    with psycopg.connect(draws_db, autocommit=True) as conn:
        fast_rows = conn.execute("SELECT v FROM u").fetchall()
        conn.execute("TRUNCATE u")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    with psycopg.connect(draws_db, autocommit=True) as conn:
        slow_rows = conn.execute("SELECT v FROM u").fetchall()
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert fast.stderr == slow.stderr
    assert len(fast_rows) == 20
    assert fast_rows == slow_rows
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_report_per_command(draws_db: str, tmp_path: Path, mode: str) -> None:
    # -r runs in C too: the same statement lines, failures and all, in the
    # same report (per-command counts: test_fastloop_rate, in-process)
    args = [*_scripts(tmp_path), "-M", mode, "-c", "3", "-j", "2", "-t", "60", "-r"]
    args += ["--random-seed", "7", "-n", "-s", "1000"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    take_rows(draws_db)
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    take_rows(draws_db)
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    # (mask_timing masks the latency column of the -r table too)
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)
    assert sum("INSERT INTO t" in line for line in fast.stdout.splitlines()) == 3


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_notifications_while_sleeping(draws_db: str, tmp_path: Path, mode: str) -> None:
    # Each NOTIFY reaches the other clients while they sleep, not waiting
    # for a result: the loop takes such a socket out of its epoll set
    # (loop.absorb) and the client's next wait puts it back, in C for a
    # C-owned client. Were it not put back, the client would wait for its
    # result forever.
    (tmp_path / "notify.sql").write_text(
        "LISTEN pgsurge_fl;\n\\sleep 5 ms\nNOTIFY pgsurge_fl;\nSELECT 1;\n"
    )
    args = ["-f", "notify.sql", "-M", mode, "-c", "4", "-j", "1", "-t", "30", "-n"]
    fast = run_pgsurge(args, draws_db, cwd=tmp_path, loop="c")
    slow = run_pgsurge(args, draws_db, cwd=tmp_path, loop="python")
    assert fast.status == slow.status == 0, (fast.stderr, slow.stderr)
    assert fast.stderr == slow.stderr == ""
    assert mask_timing(fast.stdout) == mask_timing(slow.stdout)
    assert "number of transactions actually processed: 120/120" in fast.stdout
