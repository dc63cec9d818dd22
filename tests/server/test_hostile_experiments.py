"""Hostile-tester regressions on the experiment commands (sweep, capacity,
ab) and their artefacts, on a real server.

* A password varied by ``sweep --vary`` (``"PGPASSWORD a,b"``, or a
  ``-d`` connection string holding ``password=``) was printed in the
  progress lines and the table and written in clear to the manifest, the
  sweep's JSON and HTML and every run's JSON (``experiment.cell``), though
  the same password given by ``--a-env`` was masked everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_run import tool_env

pytestmark = pytest.mark.server

SECRET = "Hostile9Vary"
TIMEOUT = 300  # a loaded 2-core machine


def _pgsurge(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        cwd=cwd,
        env=tool_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _leaks(proc: subprocess.CompletedProcess[str], where: Path) -> list[str]:
    found = [
        n for n, t in (("stdout", proc.stdout), ("stderr", proc.stderr)) if SECRET in t
    ]
    found += [
        str(p.relative_to(where))
        for p in sorted(where.rglob("*"))
        if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    return found


@pytest.mark.parametrize("form", ["env", "dsn"])
def test_sweep_masks_a_varied_password(
    fresh_db: str, tmp_path: Path, form: str
) -> None:
    (tmp_path / "one.sql").write_text("select 1;\n")
    if form == "env":
        # the second value extends the first: masking must not leave "…B"
        vary = f"PGPASSWORD {SECRET},{SECRET}B"
        common = ["-n", "-f", "one.sql", "-t", "5", fresh_db]
    else:
        vary = f"-d {fresh_db},{fresh_db} password={SECRET}"
        common = ["-n", "-f", "one.sql", "-t", "5"]
    out = tmp_path / "out"
    r = _pgsurge(
        [
            "sweep",
            "--vary",
            vary,
            "--runs",
            "1",
            "--warmup",
            "0",
            "--out",
            str(out),
            "--json",
            "sweep.json",
            "--html",
            "sweep.html",
            "--",
            *common,
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert _leaks(r, tmp_path) == []
    doc = json.loads((tmp_path / "sweep.json").read_text())
    shown = [next(iter(c["values"].values())) for c in doc["cells"]]
    # both cells were run, and stay apart in the table once masked
    assert len(shown) == 2 and len(set(shown)) == 2
    assert all("********" in v for v in shown[int(form == "dsn") :])
    # each run still got its own value (the table masks, the run does not)
    runs = sorted(out.glob("c*-A-r1.json"))
    assert len(runs) == 2
    # a resume cannot rebuild masked values from the manifest
    again = _pgsurge(["sweep", "--resume", str(out)], tmp_path)
    assert again.returncode == 1
    assert "masked a password" in again.stderr
    assert SECRET not in again.stderr
