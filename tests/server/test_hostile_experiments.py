"""Hostile-tester regressions on the experiment commands (sweep, capacity,
ab) and their artefacts, on a real server.

* A password varied by ``sweep --vary`` (``"PGPASSWORD a,b"``, or a
  ``-d`` connection string holding ``password=``) was printed in the
  progress lines and the table and written in clear to the manifest, the
  sweep's JSON and HTML and every run's JSON (``experiment.cell``), though
  the same password given by ``--a-env`` was masked everywhere.
* SIGHUP (the ssh session or terminal gone) killed ``sweep``/``ab``/
  ``capacity`` alone: its current run, in a process group of its own, went
  on loading the server for its whole ``-T`` and wrote its result after the
  experiment had died, the manifest left saying "running". It now stops
  the run at once as SIGTERM does; under nohup it is still ignored.
* ``sweep --resume DIR`` removed the file of every run its manifest did
  not list as finished, at the path the manifest gave: an edited manifest
  (``"file": "/etc/…"``) had root remove any file, and ``--resume`` took
  any directory, another user's included. The directory is now held to
  ``--out``'s rules and a run file must be a plain name.
* A full disk under ``--out`` gave a three-part Python traceback (the
  manifest's write failed, then again in the clean-up); it is now one
  error line and exit status 1.
* ``sweep --resume DIR`` of a sweep still running (from a second terminal)
  ran the same missing runs beside it: each measured the server under the
  other's load, both wrote the same run files and manifest, and the table
  mixed them. The running sweep holds a lock on DIR; a resume is refused.
* A run that failed in the middle of a ``sweep`` or a ``capacity`` search
  (the server went away) ended it with the error alone: no table, no
  answer of the repetitions that had finished, ``--json`` unwritten. What
  finished is now reported as after Ctrl-C, with the run's exit status.
* A sweep over ``-R`` showed the p99 of runs whose rate was not sustained
  (their latencies measure the backlog) as any other: the run's warning
  went to its log. Such cells are now marked ``!``, with a foot line and
  ``rate_not_sustained_runs`` in the JSON.
* ``--resume`` after the script was edited pooled the old runs and the new
  ones in a cell: a ``SELECT 1`` cell took a ``pg_sleep`` run into its
  median (19 959 tps, "95 % interval 1.55e-09–1.1e16"). A run whose
  workload differs from its cell's other runs is set aside and the sweep
  stops, naming what differs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
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


def _processes_naming(word: str) -> list[int]:
    """The live processes whose command line holds ``word``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if word.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("ignored", [False, True], ids=["hup", "nohup"])
def test_sighup_stops_a_sweep_and_its_run(
    fresh_db: str, tmp_path: Path, ignored: bool
) -> None:
    (tmp_path / "one.sql").write_text("select 1;\n")
    out = tmp_path / "out"
    # a run long enough that only a stop can end it within the test
    duration = "3" if ignored else "600"
    args = ["sweep", "--vary", "-c 1,2", "--runs", "1", "--warmup", "0"]
    common = ["--", "-n", "-f", "one.sql", "-T", duration, fresh_db]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsurge", *args, "--out", str(out), *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=tool_env(),
        # nohup: SIGHUP ignored from the start
        preexec_fn=(lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        if ignored
        else None,
    )
    deadline = time.monotonic() + TIMEOUT
    while not _processes_naming(str(out / "c1-A-r1.json")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(1)  # the run is under way
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=TIMEOUT)
    # a run the sweep stopped goes (a fixed 1 s did not always cover its
    # exit on a loaded box); one left behind runs on (-T 600)
    deadline = time.monotonic() + 60
    while (left := _processes_naming(str(out / "c1-A-r1.json"))) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    for pid in left:  # no run left behind (killed here not to load the box)
        os.kill(pid, signal.SIGKILL)
    assert left == []
    manifest = json.loads((out / "manifest.json").read_text())
    if ignored:
        assert proc.returncode == 0, stderr
        assert manifest["state"] == "finished"
        assert [r["status"] for r in manifest["runs"]] == ["ok", "ok"]
        return
    assert proc.returncode == 130, stderr
    assert manifest["state"] == "interrupted"
    assert [r["status"] for r in manifest["runs"]] == ["discarded"]
    assert not (out / "c1-A-r1.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.parametrize("command", ["ab", "sweep"])
def test_a_full_disk_under_out_is_one_error_line(
    fresh_db: str, tmp_path: Path, command: str
) -> None:
    (tmp_path / "one.sql").write_text("select 1;\n")
    full = tmp_path / "full"
    full.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(full)],
        check=True,
    )
    try:
        # fill it but for a few blocks: the directory is made, a file is not
        with open(full / "fill", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
            f.truncate(f.tell() - 8192)
        own = ["--runs", "1", "--warmup", "0", "--out", str(full / "out")]
        if command == "sweep":
            own = ["--vary", "-c 1,2", *own]
        r = _pgsurge(
            [command, *own, "--", "-n", "-f", "one.sql", "-t", "5", fresh_db],
            tmp_path,
        )
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f'pgsurge: error: could not write "{full}/out/')
    assert lines[0].endswith(": No space left on device")


def _finished_sweep(db: str, tmp_path: Path) -> Path:
    (tmp_path / "one.sql").write_text("select 1;\n")
    out = tmp_path / "out"
    args = ["sweep", "--vary", "-c 1,2", "--runs", "1", "--warmup", "0"]
    r = _pgsurge(
        [*args, "--out", str(out), "--", "-n", "-f", "one.sql", "-t", "5", db], tmp_path
    )
    assert r.returncode == 0, r.stderr
    return out


def test_resume_removes_no_file_an_edited_manifest_names(
    fresh_db: str, tmp_path: Path
) -> None:
    out = _finished_sweep(fresh_db, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    path = out / "manifest.json"
    doc = json.loads(path.read_text())
    doc["runs"].append(dict(doc["runs"][0], file=str(victim), status="failed", seq=9))
    doc["state"] = "interrupted"
    path.write_text(json.dumps(doc))
    r = _pgsurge(["sweep", "--resume", str(out)], tmp_path)
    assert victim.read_text() == "keep\n"
    assert r.returncode == 1
    assert r.stderr == (
        f'pgsurge: error: --resume: the manifest names a run file "{victim}"\n'
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_resume_refuses_another_users_directory(fresh_db: str, tmp_path: Path) -> None:
    out = _finished_sweep(fresh_db, tmp_path)
    os.chown(out, 65534, 65534)
    r = _pgsurge(["sweep", "--resume", str(out)], tmp_path)
    assert r.returncode == 1
    assert r.stderr == (
        f'pgsurge: error: --resume: refusing to use {out}: it is owned by "nobody"\n'
    )


def test_resume_of_a_sweep_still_running_is_refused(
    fresh_db: str, tmp_path: Path
) -> None:
    (tmp_path / "one.sql").write_text("select 1;\n")
    out = tmp_path / "out"
    common = ["--", "-n", "-f", "one.sql", "-T", "2", fresh_db]
    first = subprocess.Popen(
        [
            *(sys.executable, "-m", "pgsurge", "sweep", "--vary", "-c 1,2"),
            *("--runs", "2", "--warmup", "0", "--out", str(out), *common),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=tool_env(),
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (out / "manifest.json").exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.1)
        second = _pgsurge(["sweep", "--resume", str(out)], tmp_path)
        _, stderr = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode == 1, second.stderr
    assert second.stderr == (
        f"pgsurge: error: {out} is in use by another pgsurge sweep that is "
        "still running\n"
    )
    assert second.stdout == ""
    # the first one ran its grid alone, every run once
    assert first.returncode == 0, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["ok"] * 4
    assert len({r["file"] for r in manifest["runs"]}) == 4
    # and once it is done, a resume finds nothing to run
    again = _pgsurge(["sweep", "--resume", str(out)], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "(4 already done)" in again.stdout
    assert "run 1/4" not in again.stdout


def _fails_when_told(dsn: str, where: Path) -> Path:
    """A script that fails (division by zero, the client aborts) once the
    test sets ``flag`` to 0: a run broken at a moment the test picks."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE flag (v int)")
        conn.execute("INSERT INTO flag VALUES (1)")
    script = where / "flag.sql"
    script.write_text("SELECT 1 / v FROM flag;\n")
    return script


def _break_when(
    args: list[str], cwd: Path, line: str, dsn: str
) -> tuple[int, str, str]:
    """Run pgsurge, read its stdout until ``line``, set the flag; its exit
    status, stdout and stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "pgsurge", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=tool_env(),
    ) as proc:
        assert proc.stdout is not None
        seen = ""
        for text in proc.stdout:
            seen += text
            if text.startswith(line):
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("UPDATE flag SET v = 0")
                break
        rest, stderr = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, seen + rest, stderr


@pytest.mark.slow
def test_a_sweep_whose_run_fails_reports_what_finished(
    fresh_db: str, tmp_path: Path
) -> None:
    script = _fails_when_told(fresh_db, tmp_path)
    out_json = tmp_path / "sweep.json"
    status, stdout, stderr = _break_when(
        [
            *("sweep", "--vary", "-c 1,2"),
            *("--runs", "2", "--warmup", "0", "--out", str(tmp_path / "out")),
            *("--json", str(out_json), "--", "-n", "-f", str(script), "-T", "1"),
            fresh_db,
        ],
        tmp_path,
        "run 2/4",
        fresh_db,
    )
    assert status == 2, stderr
    # run 3 (run 4 if the flag came late on a loaded machine)
    failed = re.findall(r"pgsurge: error: run (\d) \(arm A\) was aborted", stderr)
    assert len(failed) == 1 and failed[0] in "34", stderr
    assert "Traceback" not in stderr
    # the table of the runs that finished
    doc = json.loads(out_json.read_text())
    runs = [c["arms"]["A"]["runs"] for c in doc["cells"]]
    assert min(runs) == 1 and sum(runs) == int(failed[0]) - 1, doc
    assert "\n1 " in stdout and "\n2 " in stdout, stdout
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["state"] == "failed"


@pytest.mark.slow
def test_an_ab_whose_run_fails_reports_what_finished(
    fresh_db: str, tmp_path: Path
) -> None:
    # as a sweep's: the run's error, then the comparison of the runs that
    # finished (ab ended with the error alone)
    script = _fails_when_told(fresh_db, tmp_path)
    status, _stdout, stderr = _break_when(
        [
            *("ab", "--runs", "3", "--warmup", "0", "--b-env", "PGAPPNAME=b"),
            *("--out", str(tmp_path / "out"), "--json", str(tmp_path / "ab.json")),
            *("--", "-n", "-f", str(script), "-T", "1", fresh_db),
        ],
        tmp_path,
        "run 4/6",
        fresh_db,
    )
    assert status == 2, stderr
    failed = re.findall(r"pgsurge: error: run (\d) \(arm [AB]\) was aborted", stderr)
    assert len(failed) == 1 and failed[0] in "56", stderr
    assert "Traceback" not in stderr
    doc = json.loads((tmp_path / "ab.json").read_text())
    finished = int(failed[0]) - 1
    assert len(doc["base"]) + len(doc["new"]) == finished, doc
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["state"] == "failed"


@pytest.mark.slow
def test_a_capacity_search_whose_probe_fails_reports_what_finished(
    fresh_db: str, tmp_path: Path
) -> None:
    script = _fails_when_told(fresh_db, tmp_path)
    out_json = tmp_path / "cap.json"
    status, stdout, stderr = _break_when(
        [
            *("capacity", "--latency", "p99=2s"),
            *("--min-rate", "10", "--max-rate", "20", "--repeat", "3"),
            *("--json", str(out_json), "--", "-n", "-f", str(script), "-T", "1"),
            fresh_db,
        ],
        tmp_path,
        "repetition 2/3",
        fresh_db,
    )
    assert status == 2, stderr
    assert stderr.count("pgsurge: error: run ") == 1, stderr
    assert "was aborted" in stderr and "Traceback" not in stderr
    doc = json.loads(out_json.read_text())
    assert doc["state"] == "failed"
    assert doc["repetitions"][0]["capacity"] == 20.0
    assert doc["repetitions"][-1]["capacity"] is None
    assert "sustainable rate at least 20.0 tps" in stdout
    assert "(failed: from the repetitions that finished)" in stdout


@pytest.mark.slow
def test_a_rate_sweep_marks_the_rates_not_sustained(
    fresh_db: str, tmp_path: Path
) -> None:
    # one client of 10 ms transactions finishes 100 tps at most
    (tmp_path / "sleep.sql").write_text("SELECT pg_sleep(0.01);\n")
    r = _pgsurge(
        [
            *("sweep", "--vary", "-R 20,400", "--runs", "1", "--warmup", "0"),
            *("--out", str(tmp_path / "out"), "--json", str(tmp_path / "s.json")),
            *("--", "-n", "-f", "sleep.sql", "-c", "1", "-T", "2", fresh_db),
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    marks = [c["arms"]["A"]["rate_not_sustained_runs"] for c in doc["cells"]]
    assert marks == [0, 1], doc
    rows = {
        ln.split()[0]: ln for ln in r.stdout.splitlines() if ln[:3] in ("20 ", "400")
    }
    assert rows["400"].split()[1:4].count("!") == 1, r.stdout
    assert "!" not in rows["20"], r.stdout
    assert "!: some -R runs did not sustain their rate" in r.stdout


@pytest.mark.slow
def test_a_resume_after_the_script_changed_pools_nothing(
    fresh_db: str, tmp_path: Path
) -> None:
    script = tmp_path / "a.sql"
    script.write_text("SELECT 1;\n")
    out = tmp_path / "out"
    args = ["sweep", "--vary", "-c 1,2", "--runs", "2", "--warmup", "0"]
    common = ["--", "-n", "-f", "a.sql", "-T", "1", fresh_db]
    first = _pgsurge([*args, "--out", str(out), *common], tmp_path)
    assert first.returncode == 0, first.stderr
    (out / "c1-A-r2.json").unlink()  # as if interrupted there
    script.write_text("SELECT 2 + 2;\n")
    again = _pgsurge(
        ["sweep", "--resume", str(out), "--json", str(tmp_path / "s.json")], tmp_path
    )
    assert again.returncode == 1, again.stderr
    assert again.stderr == (
        "pgsurge: error: c1-A-r2.json (-c 1, arm A): its workload differs from "
        "the cell's earlier runs (script texts differ (a.sql@1)); the scripts or "
        "the server changed since: start a new sweep\n"
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "failed"
    assert manifest["runs"][-1]["status"] == "different workload"
    # the table is of the runs of one workload: the new one is not in it
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [c["arms"]["A"]["runs"] for c in doc["cells"]] == [1, 2]
