"""Hostile cases of --warmup SEC (issue 26): stops, aborts and options at
the warm-up's edge, on the C loop and the Python loop.

Real runs of ``python -m pgsurge`` against the test server, each checking
that what the report counts is the window's and only the window's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pgsurge.report.json import load_schema
from tests.fix_run import LONG_GRACE, communicate_or_kill, plain_env

pytestmark = pytest.mark.server

_LOOP_ENV = {
    "c": {"PGSURGE_FASTLOOP": "require"},
    "python": {"PGSURGE_NO_FASTLOOP": "1"},
}


def _start(
    args: list[str], cwd: Path, loop: str, prog: list[str] | None = None
) -> subprocess.Popen[str]:
    """pgsurge (or ``prog``) in its own process group (as a terminal's job)."""
    return subprocess.Popen(
        [*(prog or [sys.executable, "-m", "pgsurge"]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**plain_env(), **_LOOP_ENV[loop]},
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """Its output; on a timeout its process group is killed and the test
    fails (a leaked run would disturb later tests)."""
    return communicate_or_kill(proc, timeout)


def _wait_sleeping(dsn: str, proc: subprocess.Popen[str], count: int) -> None:
    """Until ``count`` sessions of the run sit in its pg_sleep (the
    warm-up's first transactions are under way)."""
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline and proc.poll() is None:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE query LIKE 'SELECT pg_sleep(2.2)%' AND state = 'active'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return
            time.sleep(0.05)
    pytest.fail("the run's transactions never showed on the server")


@pytest.mark.parametrize("loop", ["c", "python"])
def test_ctrl_c_in_warmup_counts_nothing_that_ends_after_it(
    bench_db: str, tmp_path: Path, loop: str
) -> None:
    # A Ctrl-C early in a 2 s warm-up, while each client's first
    # transaction (2.2 s) is under way: it ends in the grace (60 s here,
    # LONG_GRACE: with the 2 s one, a Ctrl-C before 0.2 s cancelled it, one
    # after 2 s came past the warm-up, and a loaded box's stall could put
    # a fixed 0.5 s after the sleeps were seen at either), past the
    # window's start. The run was stopped in its warm-up, so it measured
    # nothing (docs/running.md): 0 transactions, no duration, no series,
    # an empty -l file. It used to open the window during the grace and
    # report those transactions (tps over a window that began after the
    # interruption the report says it covers up to).
    (tmp_path / "s.sql").write_text("SELECT pg_sleep(2.2);\n")
    args = ["-f", "s.sql", "-c", "2", "-j", "2", "--warmup", "2", "-T", "10"]
    args += ["-l", "--json", "r.json", "-P", "1", bench_db]
    proc = _start(args, tmp_path, loop, LONG_GRACE)
    _wait_sleeping(bench_db, proc, 2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = _finish(proc)
    assert proc.returncode == -signal.SIGINT, err
    assert "Traceback" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    after = doc["interrupted"]["after_s"]
    assert after < 2, f"the stop came after the warm-up ({after} s): too loaded?"
    assert "number of transactions actually processed: 0\n" in out, out
    assert doc["totals"]["transactions"] == 0
    assert doc["duration_s"] == 0
    assert not doc.get("intervals")
    logs = list(tmp_path.glob("pgbench_log.*"))
    assert logs and all(p.read_text() == "" for p in logs)


@pytest.mark.parametrize("loop", ["c", "python"])
def test_per_server_figures_count_only_the_window(
    bench_db: str, tmp_path: Path, loop: str
) -> None:
    # Two names for the test server (its socket directory and a symlink to
    # it) in a multi-host conninfo, clients spread at random: the report's
    # per-server figures must add up to the window's totals, as they do
    # without --warmup (test_insight_fixes' multi-host test).
    parts = psycopg.conninfo.conninfo_to_dict(bench_db)
    host = str(parts.get("host") or "")
    if not host.startswith("/"):
        pytest.fail(f"the test server is not on a socket directory: {host!r}")
    alias = tmp_path / "alias"
    alias.symlink_to(host)
    dsn = psycopg.conninfo.make_conninfo(
        bench_db, host=f"{host},{alias}", load_balance_hosts="random"
    )
    args = ["-n", "-S", "-c", "16", "-j", "2", "--warmup", "2", "-T", "1"]
    proc = _start([*args, "--json", "r.json", dsn], tmp_path, loop)
    _out, err = _finish(proc)
    assert proc.returncode == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    targets = doc["targets"]  # 16 clients all on one name: odds 2**-15
    assert len(targets) == 2, targets
    processed = doc["totals"]["processed"]
    assert sum(t["transactions"] for t in targets) == processed, err
    assert sum(t["tps"] for t in targets) == pytest.approx(
        processed / doc["duration_s"], rel=1e-6
    )


def test_server_counters_say_they_count_from_the_window(
    bench_db: str, tmp_path: Path
) -> None:
    # --server-stats under --warmup takes its start snapshot at the window
    # (docs/running.md); its text block said "from before the clients
    # connected", which is what it says without a warm-up
    args = ["-n", "-S", "-c", "2", "-j", "2", "--warmup", "1", "-T", "1"]
    proc = _start(
        [*args, "--server-stats", "--json", "r.json", bench_db], tmp_path, "c"
    )
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    text = out + err
    assert "server counters (over " in text, text
    assert "from the window's start (--warmup) to after" in text, text
    assert "from before the clients connected" not in text
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["server_stats"]["from_window"] is True
    assert doc["server_stats"]["note"].startswith("deltas from the window's start")
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, load_schema())
    # without --warmup: as before
    plain = _start([*args[:6], "-T", "1", "--server-stats", bench_db], tmp_path, "c")
    out, err = _finish(plain)
    assert plain.returncode == 0, err
    assert "from before the clients connected to after" in out + err
