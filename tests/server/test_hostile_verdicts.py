"""Hostile tests of ``pgsurge ab``'s verdicts on real runs whose data cannot
support one. The runs are made so that what is asserted does not depend on
the machine's speed or load: a schedule no client can keep (each
transaction sleeps longer than the rate's interval) falls behind on any
machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fix_run import run_pgsurge

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_ab_gives_no_latency_verdict_to_runs_behind_their_schedule(
    fresh_db: str, tmp_path: Path
) -> None:
    # hostile finding: arm B sleeps 30 ms a transaction under -R 50 with one
    # client (it can finish 33 a second): its latencies count from the
    # scheduled starts and measured the growing backlog ("p50 +5493 %")
    script = tmp_path / "sleep.sql"
    script.write_text("SELECT pg_sleep(:d);\n")
    r = run_pgsurge(
        [
            "ab",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--out",
            str(tmp_path / "x"),
            "--a",
            "-D d=0.002",
            "--b",
            "-D d=0.03",
            "--json",
            str(tmp_path / "c.json"),
            "--",
            "-n",
            "-f",
            str(script),
            "-c",
            "1",
            "-R",
            "50",
            "-T",
            "1",
        ],
        fresh_db,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.status == 0, r.stderr
    doc = json.loads((tmp_path / "c.json").read_text())
    by_key = {m["metric"]: m for m in doc["metrics"]}
    for key in ("latency", "p50", "p90", "p99"):
        m = by_key[key]
        assert m["direction"] is None and m["ci"] is None, m
        assert "fell behind -R: their latencies measure the backlog" in m["verdict"]
    assert "fell behind -R" in r.stdout
