"""--warmup SEC: the clients run SEC seconds before the measured -T window,
and nothing of the warm-up is counted (issue 26).

On both engines: the C loop (``PGSURGE_FASTLOOP=require``, and the
``c_loops`` spy in-process, which proves C ran the transactions) and the
Python loop. The window's start is one deadline for every worker; each
resets its figures at its first round past it.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pgsurge.stats.histogram import Histogram
from tests.fix_db import run_worker, take_rows
from tests.fix_run import run_pgsurge

pytestmark = pytest.mark.server


def _unix_us(iso: str) -> int:
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return round(when.timestamp() * 1_000_000)


@pytest.mark.parametrize("loop", ["c", "python"])
def test_warmup_counts_only_the_window(
    bench_db: str, tmp_path: Path, loop: str
) -> None:
    # the acceptance case: --warmup 2 -T 4 runs some 6 s and counts the
    # last 4; the count is the -l log's line count, every line is in the
    # window, and so is every interval of the series
    out = tmp_path / "r.json"
    args = ["-S", "-c", "2", "-j", "2", "--warmup", "2", "-T", "4", "-l", "-P", "1"]
    began = time.monotonic()
    run = run_pgsurge(
        [*args, "--json", str(out), "--log-prefix", str(tmp_path / "log")],
        bench_db,
        loop=loop,  # type: ignore[arg-type]
    )
    took = time.monotonic() - began
    assert run.status == 0, run.stderr
    assert took >= 5.9  # the warm-up ran before the 4 s measured
    assert "duration: 4 s\nafter a warm-up of 2 s (not counted)\n" in run.stdout
    processed = int(run.number("number of transactions actually processed:"))
    assert processed > 0

    lines = []
    for f in sorted(tmp_path.glob("log.*")):
        lines += f.read_text().splitlines()
    assert len(lines) == processed
    doc = json.loads(out.read_text())
    assert doc["warmup_s"] == 2
    assert doc["config"]["warmup_s"] == 2
    assert doc["totals"]["transactions"] == processed
    assert 3.5 <= doc["duration_s"] <= 5.0
    window = _unix_us(doc["start"])
    stamps = [int(ln.split()[4]) * 1_000_000 + int(ln.split()[5]) for ln in lines]
    assert min(stamps) >= window
    # the series: the window's intervals only, from offset 0, adding up
    ivs = doc["intervals"]
    assert ivs and ivs[0]["offset_s"] == 0.0
    assert all(iv["offset_s"] >= 0 for iv in ivs)
    assert sum(iv["transactions"] for iv in ivs) == processed
    assert Histogram.from_dict(doc["histograms"]["latency"]).count == processed

    # -P: the warm-up's lines say so, the window's do not
    progress = [ln for ln in run.stderr.splitlines() if ln.startswith("progress:")]
    warm = [ln for ln in progress if "(warm-up)" in ln]
    # the lines of the ticks at 1 and 2 s: a line's label is the time its
    # figures were taken, which a loaded box makes a little late ("1.1 s")
    heads = [
        re.fullmatch(r"progress: (\d)\.\d s \(warm-up\)", ln.split(",")[0])
        for ln in warm
    ]
    assert [m and int(m.group(1)) for m in heads] == [1, 2], progress
    measured = [ln for ln in progress if "(warm-up)" not in ln]
    assert len(measured) >= 3
    assert all(" -" not in ln for ln in measured)  # no negative rate


@pytest.mark.parametrize("loop", ["c", "python"])
def test_warmup_resets_every_figure_in_the_worker(
    draws_db: str,
    tmp_path: Path,
    loop: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # in-process: the rows in t count every transaction, warm-up included;
    # the worker's totals, per-command figures, histograms, series and -l
    # file count the window's only, and agree with one another
    loops: list[Any] = []
    if loop == "c":
        loops = request.getfixturevalue("c_loops")
    else:
        monkeypatch.setenv("PGSURGE_NO_FASTLOOP", "1")
    (tmp_path / "w.sql").write_text(
        "\\set a random(1, 100)\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 0, :a, 0);\n"
    )
    prefix = str(tmp_path / "wl")
    args = ["-n", "-f", str(tmp_path / "w.sql"), "-c", "2", "-r"]
    args += ["-l", "--log-prefix", prefix, "--json", str(tmp_path / "r.json")]
    _w, result = run_worker([*args, "--warmup", "1", "-T", "2"], draws_db)
    rows = take_rows(draws_db)
    cnt = result.total.cnt
    assert result.window_us > result.bench_start_us
    assert 0 < cnt < len(rows)  # the warm-up ran, and is not counted
    # per command: the commands run in the window (a transaction under
    # way at the window's start counts, its commands before it do not)
    per_command = sum(c.latency.count for c in result.per_command[0])
    assert 2 * cnt - 2 * 2 <= per_command <= 2 * cnt
    assert result.histograms is not None
    assert result.histograms.latency.count == cnt
    assert sum(h.count for h in result.histograms.per_command[0]) == per_command
    assert result.intervals
    assert all(iv.start_us >= result.window_us for iv in result.intervals)
    assert sum(iv.stats.cnt for iv in result.intervals) == cnt
    logged = sum(len(f.read_text().splitlines()) for f in tmp_path.glob("wl.*"))
    assert logged == cnt
    if loop == "c":
        assert loops and loops[0].uses_c
        # C ran the transactions: a handful of calls into Python (the
        # first transactions' prepares, the ticks), not one per transaction
        assert loops[0]._fast.py_calls < cnt / 10


def test_warmup_ended_in_the_warm_up_counts_nothing(
    bench_db: str, tmp_path: Path
) -> None:
    # every client aborts in the warm-up (an error after 50 transactions):
    # the window never opened, so nothing was measured, nor logged
    (tmp_path / "e.sql").write_text(
        "\\set n :n + 1\nSELECT 1 / (CASE WHEN :n > 50 THEN 0 ELSE 1 END);\n"
    )
    args = ["-c", "1", "-D", "n=0", "--warmup", "30", "-T", "1"]
    args += ["-f", str(tmp_path / "e.sql")]
    prefix = str(tmp_path / "log")
    run = run_pgsurge([*args, "-l", "--log-prefix", prefix], bench_db, timeout=60)
    assert run.status == 2, run.stderr
    assert "number of transactions actually processed: 0\n" in run.stdout
    assert "division by zero" in run.stderr
    (log,) = tmp_path.glob("log.*")
    assert log.read_text() == ""


def test_server_stats_and_waits_start_at_the_window(
    bench_db: str, tmp_path: Path
) -> None:
    # --server-stats' start snapshot and --waits' samples are the window's:
    # their span is the run's measured duration, not the warm-up's 3 s more
    out = tmp_path / "r.json"
    args = ["-S", "-c", "2", "-j", "2", "--warmup", "3", "-T", "2"]
    run = run_pgsurge(
        [*args, "--server-stats", "--waits", "--json", str(out)], bench_db
    )
    assert run.status == 0, run.stderr
    doc = json.loads(out.read_text())
    window = doc["duration_s"]
    stats = doc["server_stats"]
    assert stats["transactions"] == doc["totals"]["transactions"]
    assert 0 < stats["elapsed_s"] < window + 1.5
    waits = doc["waits"]
    assert 0 < waits["ticks"] * waits["period_ms"] / 1000 < window + 1.5
