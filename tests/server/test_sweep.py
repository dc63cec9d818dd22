"""``pgsurge sweep`` on real runs: the grid, the table, the JSON, resume,
the knee and the HTML page.

Runs are short (``-T 1``, ``--warmup 0`` where the warm-up is not what is
tested) against a copy of the session's scale-1 database; the assertions
are the robust ones on a loaded 2-core machine: counts, equalities with
``pgsurge compare``, and knees within loose bounds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fix_browser import offline_page
from tests.fix_db import create_database, db_dsn, drop_database

pytestmark = [pytest.mark.server, pytest.mark.slow]

SYNC_OFF = "PGOPTIONS=-c synchronous_commit=off"
#: every transaction updates the same row and holds its lock 10 ms: the
#: row lock serializes them, whatever -c (the bare UPDATE holds it only for
#: the server's ~0.1 ms of execution, and scales with clients: 3 200 tps at
#: 1 client, 11 800 at 8 here with synchronous_commit off; with it on, the
#: fsyncs of a disk shared with other tests are all noise)
LOCK_SCRIPT = """\
BEGIN;
UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1;
SELECT pg_sleep(0.01);
END;
"""


def _env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    environ["LC_ALL"] = "C"
    if "PGSURGE_DATA_DIR" in os.environ:
        environ["PGSURGE_DATA_DIR"] = os.environ["PGSURGE_DATA_DIR"]
    return environ


def pgsurge(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=600,
    )


@pytest.fixture(scope="module")
def db(server_dsn: str, bench_template: str) -> Iterator[str]:
    name = create_database(server_dsn, "t_sweep", template=bench_template)
    yield db_dsn(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.fixture(scope="module")
def ab_sweep(db: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The issue's acceptance sweep: -c 1,2,4, 2 runs, two arms
    (synchronous_commit on and off): 12 runs."""
    work = tmp_path_factory.mktemp("sweep-ab")
    out = work / "out"
    r = pgsurge(
        [
            "sweep",
            "--vary",
            "-c 1,2,4",
            "--runs",
            "2",
            "--b-env",
            SYNC_OFF,
            "--out",
            str(out),
            "--json",
            str(work / "sweep.json"),
            "--html",
            str(work / "sweep.html"),
            "--",
            "-j",
            "1",
            "-T",
            "1",
            db,
        ],
        work,
    )
    assert r.returncode == 0, r.stderr
    return {
        "work": work,
        "out": out,
        "stdout": r.stdout,
        "doc": json.loads((work / "sweep.json").read_text()),
        "manifest": json.loads((out / "manifest.json").read_text()),
    }


def test_ab_sweep_runs_the_grid(ab_sweep: dict[str, Any]) -> None:
    manifest = ab_sweep["manifest"]
    counted = [r for r in manifest["runs"] if not r["warmup"]]
    warmups = [r for r in manifest["runs"] if r["warmup"]]
    assert len(counted) == 12 and all(r["status"] == "ok" for r in counted)
    # one warm-up per cell and arm, each just before that pair's first run
    assert len(warmups) == 6
    for cell in range(3):
        for arm in "AB":
            ours = [r for r in manifest["runs"] if (r["cell"], r["arm"]) == (cell, arm)]
            assert ours[0]["warmup"] and not any(r["warmup"] for r in ours[1:])
    # interleaved: both rounds visit every cell, and B leads every other round
    rounds = [(r["round"], r["cell"], r["arm"]) for r in counted]
    assert [x for x in rounds if x[0] == 0][:2] == [(0, 0, "A"), (0, 0, "B")]
    assert [x for x in rounds if x[0] == 1][:2] == [(1, 1, "B"), (1, 1, "A")]
    # every run's JSON says which cell and arm it measured
    for r in counted:
        doc = json.loads((ab_sweep["out"] / r["file"]).read_text())
        assert doc["experiment"]["cell"]["index"] == r["cell"]
        assert doc["config"]["clients"] == [1, 2, 4][r["cell"]]
    assert (ab_sweep["out"].stat().st_mode & 0o777) == 0o700


def test_ab_sweep_table_has_a_verdict_per_cell(ab_sweep: dict[str, Any]) -> None:
    lines = ab_sweep["stdout"].splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("-c "))
    assert "B/A tps" in lines[head] and "verdict" in lines[head]
    rows = lines[head + 1 : head + 4]
    assert [row.split()[0] for row in rows] == ["1", "2", "4"]
    verdicts = ("faster", "slower", "no difference", "inconclusive", "no verdict")
    for row in rows:
        assert any(v in row for v in verdicts), row
    for cell in ab_sweep["doc"]["cells"]:
        assert cell["comparison"]["verdict"]
        assert cell["arms"]["A"]["runs"] == cell["arms"]["B"]["runs"] == 2


def test_cells_equal_compare_of_their_runs(ab_sweep: dict[str, Any]) -> None:
    for cell in ab_sweep["doc"]["cells"]:
        a, b = cell["arms"]["A"]["files"], cell["arms"]["B"]["files"]
        r = pgsurge(["compare", *a, "--vs", *b, "--json", "-"], ab_sweep["work"])
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == cell["comparison"]


def test_resume_after_ctrl_c_runs_only_what_is_missing(db: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["sweep", "--vary", "-c 1,2", "--runs", "2", "--warmup", "0"]
    common = ["--", "-S", "-j", "1", "-T", "1", db]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsurge", *args, "--out", str(out), *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    deadline = time.monotonic() + 300
    manifest = out / "manifest.json"
    while time.monotonic() < deadline:
        if manifest.exists() and '"status": "ok"' in manifest.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    before = json.loads(manifest.read_text())
    assert before["state"] == "interrupted"
    done = [r for r in before["runs"] if r["status"] == "ok"]
    assert 1 <= len(done) < 4
    stamps = {r["file"]: r["started"] for r in done}
    mtimes = {f: (out / f).stat().st_mtime_ns for f in stamps}

    r = pgsurge(["sweep", "--resume", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    after = json.loads(manifest.read_text())
    assert after["state"] == "finished"
    ok = [x for x in after["runs"] if x["status"] == "ok"]
    assert len(ok) == 4
    assert sorted((x["cell"], x["round"]) for x in ok) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    # the finished runs were kept, untouched; only the rest ran
    for f, started in stamps.items():
        assert next(x for x in ok if x["file"] == f)["started"] == started
        assert (out / f).stat().st_mtime_ns == mtimes[f]
    ran = [ln for ln in r.stdout.splitlines() if ln.startswith("run ")]
    assert len(ran) == 4 - len(done)
    assert f"({len(done)} already done)" in r.stdout


def _knee(doc: dict[str, Any]) -> float:
    (knee,) = doc["knees"]
    clients: float = knee["clients"]
    assert knee["range"][0] <= clients <= knee["range"][1]
    return clients


def test_knee_of_a_heavyweight_lock_is_at_one_or_two_clients(
    db: str, tmp_path: Path
) -> None:
    # every transaction updates the same row: one at a time, whatever -c
    script = tmp_path / "lock.sql"
    script.write_text(LOCK_SCRIPT)
    r = pgsurge(
        [
            "sweep",
            "--vary",
            "-c 1,2,4,8",
            "--runs",
            "3",
            "--a-env",
            SYNC_OFF,
            "--json",
            "-",
            "--out",
            str(tmp_path / "out"),
            "--",
            "-f",
            str(script),
            "-j",
            "1",
            "-T",
            "1",
            db,
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert _knee(doc) <= 2, r.stderr
    assert "knee at" in r.stderr


TWO_UNITS_SCRIPT = """\
\\set unit :client_id % 2
BEGIN;
SELECT pg_advisory_xact_lock(:unit);
SELECT pg_sleep(0.01);
END;
"""


def test_knee_of_a_two_unit_resource_is_at_two_clients(db: str, tmp_path: Path) -> None:
    # a server resource with two units, each held 10 ms per transaction
    # (clients of one parity share an advisory lock): two clients use both
    # units, more only queue, so the knee is at 2. Select-only's knee sits
    # near the cores the same way on an idle machine (the README's sweep),
    # but a busy one moves it (one client once outran eight under other
    # load): the resource here is the server's own, and sleeping, so the
    # knee holds whatever else runs
    script = tmp_path / "units.sql"
    script.write_text(TWO_UNITS_SCRIPT)
    r = pgsurge(
        [
            "sweep",
            "--vary",
            "-c 1,2,4,8",
            "--runs",
            "2",
            "--json",
            "-",
            "--out",
            str(tmp_path / "out"),
            "--",
            "-f",
            str(script),
            "-j",
            "2",
            "-T",
            "1",
            db,
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert _knee(json.loads(r.stdout)) == 2, r.stderr


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("-c", '--vary: expected "OPTION v1,v2,…"'),
        ("--json x,y", "a sweep cannot vary --json"),
        ("-c 1,,2", "an empty value"),
        ("-c 1,1", "a value given twice"),
        ("foo 1,2", '"foo" is neither an option'),
        ("-c 1,abc", "arm A at -c abc: "),
    ],
)
def test_bad_vary_is_one_line_and_status_1(
    db: str, tmp_path: Path, spec: str, message: str
) -> None:
    r = pgsurge(["sweep", "--vary", spec, "--", "-T", "1", db], tmp_path)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("pgsurge-sweep-*"))


def test_sweep_html_draws_its_charts_offline(ab_sweep: dict[str, Any]) -> None:
    """The --html page in headless Chromium (Debian's, as the run report's
    browser test): two charts drawn, not blank, no console error, no
    request beyond the page."""
    page_path = ab_sweep["work"] / "sweep.html"
    text = page_path.read_text()
    assert str(ab_sweep["work"]) not in text
    with offline_page(page_path) as seen:
        page = seen.page
        assert page.evaluate("window.pgsurgeCharts") == 2
        assert page.locator(".uplot").count() == 2
        drawn: list[int] = page.evaluate(
            """() => [...document.querySelectorAll('.uplot canvas')].map(c => {
                const g = c.getContext('2d');
                const d = g.getImageData(0, 0, c.width, c.height).data;
                let n = 0;
                for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
                return n;
            })"""
        )
        assert len(drawn) == 2 and all(n > 1000 for n in drawn)
        # the grid table is static HTML: one row per cell
        assert page.locator("table tbody tr").count() == 3
        page.screenshot(path=str(ab_sweep["work"] / "sweep.png"), full_page=True)
        target = os.environ.get("PGSURGE_SWEEP_SCREENSHOT")
        if target:
            page.screenshot(path=target, full_page=True)


def test_scale_sweep_initializes_once_per_scale(
    server_dsn: str, tmp_path: Path
) -> None:
    # an empty database: the sweep itself creates the tables, per scale;
    # with a setting varied inside each scale
    name = create_database(server_dsn, "t_sweep_scale")
    try:
        out = tmp_path / "out"
        r = pgsurge(
            [
                "sweep",
                "--vary",
                "-s 1,2",
                "--vary",
                "SET work_mem 1MB,8MB",
                "--runs",
                "1",
                "--warmup",
                "0",
                "--out",
                str(out),
                "--json",
                str(tmp_path / "s.json"),
                "--",
                "-S",
                "-T",
                "1",
                "--waits",
                db_dsn(server_dsn, name),
            ],
            tmp_path,
        )
        assert r.returncode == 0, r.stderr
    finally:
        drop_database(server_dsn, name)
    assert r.stdout.count("initializing scale") == 2
    # --waits: the table has each cell's top wait event
    (head,) = [ln for ln in r.stdout.splitlines() if ln.startswith("-s ")]
    assert head.split()[-2:] == ["top", "wait"]
    assert sorted(p.name for p in out.glob("init-*.log")) == [
        "init-s1-A.log",
        "init-s2-A.log",
    ]
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    seen = []
    for run in runs:
        doc = json.loads((out / run["file"]).read_text())
        env = doc["experiment"]["env"]
        seen.append((doc["run"]["scale"], env["PGOPTIONS"]))
    assert seen == [
        (1, "-c work_mem=1MB"),
        (1, "-c work_mem=8MB"),
        (2, "-c work_mem=1MB"),
        (2, "-c work_mem=8MB"),
    ]
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [c["values"] for c in doc["cells"]][1] == {"-s": "1", "SET work_mem": "8MB"}
    assert all(c["arms"]["A"]["top_wait"] for c in doc["cells"])
