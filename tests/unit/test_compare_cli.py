"""``pgsurge compare`` and ``pgsurge ab``'s argument checks, in-process, on
result files made from a real ``--json`` document
(``tests/data/results/select-only.json``) with the figures edited."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pgsurge.experiment.ab import schedule
from tests.fix_cli import run_cli
from tests.fix_data import result_doc, write_result


def _side(
    tmp_path: Path, prefix: str, values: list[float], first: int = 0, **kw: Any
) -> list[str]:
    # ``first``: the sides' runs start at different times, as real runs do
    # (equal values, contents and start times would be the same run twice)
    return [
        write_result(tmp_path / f"{prefix}{i + 1}.json", v, seq=first + i, **kw)
        for i, v in enumerate(values)
    ]


DEV = [0.99, 1.01, 1.0, 0.995, 1.005]


def _compare(tmp_path: Path, base: list[float], new: list[float], *opts: str) -> Any:
    news = _side(tmp_path, "n", new, first=len(base))
    args = ["compare", *_side(tmp_path, "b", base), "--vs", *news]
    return run_cli([*args, *opts])


def _row(stdout: str, label: str) -> str:
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith(f"{label}  ")]
    return line


# -- verdicts and exit statuses ---------------------------------------------------


def test_faster_with_the_issue_line_format(tmp_path: Path) -> None:
    r = _compare(tmp_path, [40_000 * d for d in DEV], [44_000 * d for d in DEV[::-1]])
    assert (r.status, r.stderr) == (0, "")
    row = re.sub(r" {2,}", "  ", _row(r.stdout, "tps"))
    assert re.fullmatch(
        r"tps  5 vs 5 runs  40 000 → 44 000  \+10\.0 %  "
        r"95 % CI \[\+\d+\.\d %, \+\d+\.\d %\]  faster",
        row,
    ), row
    # latencies went down: faster too; CPU per transaction: less CPU
    assert _row(r.stdout, "p99").endswith("faster")
    assert _row(r.stdout, "CPU/tx").endswith("less CPU")
    assert _row(r.stdout, "failures").endswith("none on either side")
    assert "5+5 runs detect a change of ≥" in r.stdout
    assert "exact permutation p = 0.0079 (252 splits)" in r.stdout
    assert "noise (run-to-run CV, base / new): tps 0.8 % / 0.8 %" in r.stdout


@pytest.mark.parametrize(
    ("ratio", "fail_on", "status"),
    [
        (1.10, None, 0),
        (1.10, "slower", 0),
        (1.10, "change", 3),
        (0.90, "slower", 3),
        (0.90, "change", 3),
        (1.00, "change", 0),
    ],
)
def test_fail_on(
    tmp_path: Path, ratio: float, fail_on: str | None, status: int
) -> None:
    opts = ["--fail-on", fail_on] if fail_on else []
    r = _compare(
        tmp_path, [40_000 * d for d in DEV], [40_000 * ratio * d for d in DEV], *opts
    )
    assert r.status == status, r.stdout + r.stderr


def test_fail_on_a_latency_metric(tmp_path: Path) -> None:
    # tps unchanged; --metric p99 judges p99, which the edit makes 20 % worse
    base = _side(tmp_path, "b", [40_000 * d for d in DEV])
    new = []
    for i, d in enumerate(DEV):
        doc = json.loads(Path(base[i]).read_text())
        p = doc["totals"]["latency_ms"]["percentiles"]
        p["99"] *= 1.2 * d
        doc["start"] = doc["start"].replace("T10:", "T11:")  # another run
        path = tmp_path / f"n{i}.json"
        path.write_text(json.dumps(doc))
        new.append(str(path))
    r = run_cli(
        ["compare", *base, "--vs", *new, "--metric", "p99", "--fail-on", "slower"]
    )
    assert r.status == 3
    assert _row(r.stdout, "p99").endswith("slower")


def test_inconclusive_significant_and_no_difference(tmp_path: Path) -> None:
    tight = [0.998, 1.002, 1.0, 0.999, 1.001]
    r = _compare(
        tmp_path, [40_000 * d for d in tight], [40_800 * d for d in tight[::-1]]
    )
    assert _row(r.stdout, "tps").endswith("inconclusive (significant; threshold ±2 %)")
    r = _compare(
        tmp_path,
        [40_000 * d for d in tight],
        [41_000 * d for d in tight],
        "--threshold",
        "5",
    )
    assert _row(r.stdout, "tps").endswith("no difference (within ±5 %)")
    wide = [0.97, 1.03, 1.0, 0.98, 1.02]
    r = _compare(tmp_path, [40_000 * d for d in wide], [40_400 * d for d in wide])
    assert _row(r.stdout, "tps").endswith("inconclusive (threshold ±2 %)")


def test_confidence_option(tmp_path: Path) -> None:
    r = _compare(
        tmp_path,
        [40_000 * d for d in DEV],
        [44_000 * d for d in DEV],
        "--confidence",
        "90",
    )
    assert "90 % CI [" in _row(r.stdout, "tps")
    r = _compare(
        tmp_path,
        [40_000 * d for d in DEV],
        [44_000 * d for d in DEV],
        "--confidence",
        "0.99",
    )
    assert "99 % CI [" in _row(r.stdout, "tps")


def test_json_to_stdout_and_file(tmp_path: Path) -> None:
    r = _compare(
        tmp_path, [40_000 * d for d in DEV], [36_000 * d for d in DEV], "--json", "-"
    )
    assert r.status == 0
    doc = json.loads(r.stdout)
    assert "tps  " in r.stderr  # the table went to stderr
    assert doc["kind"] == "pgsurge-compare" and doc["verdict"] == "slower"
    tps = doc["metrics"][0]
    assert tps["metric"] == "tps" and tps["ratio"] == pytest.approx(0.9)
    assert tps["ci"][0] < 0.9 < tps["ci"][1]
    assert tps["method"] == "welch" and tps["base"]["runs"] == 5
    assert [m["metric"] for m in doc["metrics"]] == [
        "tps",
        "latency",
        "p50",
        "p90",
        "p99",
        "cpu",
    ]
    out = tmp_path / "cmp.json"
    r = _compare(
        tmp_path,
        [40_000 * d for d in DEV],
        [36_000 * d for d in DEV],
        "--json",
        str(out),
        "--fail-on",
        "slower",
    )
    assert r.status == 3 and "tps  " in r.stdout
    assert json.loads(out.read_text())["exit_status"] == 3


def test_json_to_a_full_device_is_one_line(tmp_path: Path) -> None:
    base = _side(tmp_path, "b", DEV)
    new = _side(tmp_path, "n", DEV, first=5)
    r = run_cli(["compare", *base, "--vs", *new, "--json", "/dev/full"])
    assert r.status == 1 and "tps  " in r.stdout
    assert r.stderr == (
        'pgsurge: error: could not write JSON comparison to "/dev/full": '
        "No space left on device\n"
    )


def test_drift_and_outliers_are_reported(tmp_path: Path) -> None:
    base = [40_000, 40_300, 39_800, 40_100, 52_000]  # b5 is an outlier
    new = [40_000, 40_400, 40_800, 41_200, 41_600]  # rises run after run
    r = _compare(tmp_path, base, new)
    assert "drift: new tps rises with run order (Spearman ρ = +1.00)" in r.stdout
    assert re.search(
        r"outlier runs \(reported, not dropped\): "
        r"base b5\.json tps 52 000 \(modified z = \+\d+\.\d\)",
        r.stdout,
    )
    doc = json.loads(_compare(tmp_path, base, new, "--json", "-").stdout)
    tps = doc["metrics"][0]
    assert tps["base"]["outliers"][0]["file"] == "b5.json"
    assert tps["new"]["drift_rho"] == pytest.approx(1.0)
    # reported, never dropped: the base side still has 5 runs
    assert _row(r.stdout, "tps").startswith("tps          5 vs 5 runs")


def test_single_run_per_side_shows_within_run_interval_but_no_verdict(
    tmp_path: Path,
) -> None:
    # issue 21 item 10: batch means within one run per side understate the
    # variance between runs; the interval is shown as within-run, and it
    # decides nothing: no verdict, no --fail-on failure, in text and JSON
    flat = [40_000.0 + (200 if k % 2 else -200) for k in range(62)]
    base = write_result(tmp_path / "one.json", 40_000, intervals=flat)
    new = write_result(
        tmp_path / "two.json", 36_000, seq=1, intervals=[v * 0.9 for v in flat]
    )
    doc_path = tmp_path / "c.json"
    args = ["compare", base, "--vs", new, "--json", str(doc_path)]
    r = run_cli([*args, "--fail-on", "change"])
    assert r.status == 0, r.stderr
    assert (
        "single run per side: run-to-run variance not measured (within-run CIs "
        "from 6+6 batch means of 10 s, which understate it: no verdict)"
    ) in r.stdout
    row = re.sub(r" {2,}", "  ", _row(r.stdout, "tps"))
    assert "1 vs 1 run  40 000 → 36 000  -10.0 %  within-run 95 % CI [" in row
    assert row.endswith("no verdict (single run per side: within-run interval only)")
    assert "slower" not in r.stdout and "faster" not in r.stdout
    doc = json.loads(doc_path.read_text())
    tps = doc["metrics"][0]
    assert (tps["ci"], tps["direction"], tps["method"]) == (None, None, "batch-means")
    assert tps["within_run_ci"][0] <= 0.9 <= tps["within_run_ci"][1]
    assert doc["verdict"].startswith("no verdict") and doc["exit_status"] == 0
    assert run_cli([*args, "--fail-on", "slower"]).status == 0
    # no per-interval series for CPU: no verdict, said so
    assert _row(r.stdout, "CPU/tx").endswith(
        "no verdict (single run per side, no per-interval series)"
    )
    short = write_result(tmp_path / "short.json", 40_000)  # a 2 s run
    short2 = write_result(tmp_path / "short2.json", 40_000, seq=1)
    r = run_cli(["compare", short, "--vs", short2])
    assert "too short for batch means" in _row(r.stdout, "tps")


# -- workloads --------------------------------------------------------------------


@pytest.mark.parametrize("tps", [float("nan"), float("inf"), -5.0])
def test_impossible_tps_is_a_bad_result(tmp_path: Path, tps: float) -> None:
    # NaN and Infinity (which Python's json reads) were dropped as "not in
    # every result"; a negative tps reached the table as a -100 % change
    base = write_result(tmp_path / "b.json", 1000.0)
    bad = write_result(tmp_path / "n.json", 1000.0, seq=1, edit={"totals.tps": tps})
    r = run_cli(["compare", base, "--vs", bad])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        f'pgsurge: error: "{bad}" is not a valid pgsurge result: bad value of '
        "totals.tps\n"
    )


@pytest.mark.parametrize(
    ("edit", "phrase"),
    [
        ({"run.scale": 10}, "scale 1 vs 10"),
        ({"config.clients": 8}, "-c 2 vs 8"),
        ({"config.jobs": 2}, "-j 1 vs 2"),
        ({"config.query_mode": "prepared"}, "-M simple vs prepared"),
        ({"config.rate": 500.0}, "-R none vs 500"),
        ({"config.duration_s": 60}, "-T 2 vs 60"),
        ({"server.version": "19devel"}, "server version 18.6 vs 19devel"),
        (
            {
                "scripts": [
                    {"desc": "my.sql", "weight": 1, "commands": [{"line": "SELECT 1;"}]}
                ]
            },
            "script texts: <builtin: select only>@1 vs my.sql@1",
        ),
    ],
)
def test_different_workloads_are_refused(
    tmp_path: Path, edit: dict[str, Any], phrase: str
) -> None:
    base = write_result(tmp_path / "a.json", 40_000)
    new = write_result(tmp_path / "b.json", 40_000, edit=edit)
    r = run_cli(["compare", base, "--vs", new])
    assert r.status == 1 and r.stdout == ""
    assert r.stderr == (
        f"pgsurge: error: different workloads: {phrase} (--force compares anyway)\n"
    )
    r = run_cli(["compare", base, "--vs", new, "--force"])
    assert r.status == 0
    assert f"differs (--force): {phrase}" in r.stdout


def test_script_text_differences_are_seen(tmp_path: Path) -> None:
    doc = result_doc()
    doc["scripts"][0]["commands"][1]["line"] = "SELECT 1;"
    base = write_result(tmp_path / "a.json", 40_000)
    new = write_result(tmp_path / "b.json", 40_000, edit={"scripts": doc["scripts"]})
    r = run_cli(["compare", base, "--vs", new])
    assert "script texts differ (<builtin: select only>@1)" in r.stderr


def test_runs_within_a_side_must_match(tmp_path: Path) -> None:
    a1 = write_result(tmp_path / "a1.json", 40_000)
    a2 = write_result(tmp_path / "a2.json", 40_000, edit={"run.scale": 5})
    b = write_result(tmp_path / "b.json", 40_000, seq=1)
    r = run_cli(["compare", a1, a2, "--vs", b])
    assert r.stderr == (
        "pgsurge: error: different workloads: a1.json and a2.json: scale 1 vs 5 "
        "(--force compares anyway)\n"
    )


# -- bad input: one line, exit 1, never a traceback -------------------------------


def _bad_files(tmp_path: Path) -> dict[str, str]:
    good = write_result(tmp_path / "good.json", 40_000)
    (tmp_path / "text.json").write_text("tps = 40000\n")
    (tmp_path / "other.json").write_text('{"name": "something else"}')
    newer = result_doc() | {"schema": 2}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    partial = result_doc()
    del partial["totals"]["tps"]
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    return {"good": good}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["missing.json", "--vs", "GOOD"],
            'could not read "missing.json": No such file or directory',
        ),
        (
            ["text.json", "--vs", "GOOD"],
            '"text.json" is not a pgsurge result (not JSON)',
        ),
        (
            ["GOOD", "--vs", "binary.json"],
            '"binary.json" is not a pgsurge result (not text)',
        ),
        (["GOOD", "--vs", "other.json"], '"other.json" is not a pgsurge result'),
        (
            ["newer.json", "--vs", "GOOD"],
            '"newer.json" has result schema 2, newer than this pgsurge reads (1): '
            "upgrade pgsurge",
        ),
        (
            ["partial.json", "--vs", "GOOD"],
            '"partial.json" is not a valid pgsurge result: missing totals.tps',
        ),
        (["GOOD", "--vs"], "no NEW results after --vs"),
        (["GOOD"], "no --vs given (pgsurge compare BASE.json --vs NEW.json)"),
        (
            ["--vs", "GOOD"],
            "no BASE results given (pgsurge compare BASE.json --vs NEW.json)",
        ),
        (
            ["GOOD", "--vs", "GOOD", "--threshold", "x"],
            'pgsurge compare: argument --threshold: invalid percentage: "x" '
            '(try "pgsurge compare --help")',
        ),
        (
            ["GOOD", "--vs", "GOOD", "--confidence", "30"],
            "pgsurge compare: argument --confidence: confidence out of range "
            '(50 to 99.9…): "30" (try "pgsurge compare --help")',
        ),
        (
            ["GOOD", "--vs", "GOOD", "--bogus"],
            'pgsurge compare: unrecognized arguments: --bogus (try "pgsurge compare '
            '--help")',
        ),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    good = _bad_files(tmp_path)["good"]
    r = run_cli(["compare", *(good if a == "GOOD" else a for a in args)])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == f"pgsurge: error: {message}\n"


def test_compare_help(tmp_path: Path) -> None:
    r = run_cli(["compare", "--help"])
    assert r.status == 0 and "--vs" in r.stdout and "--fail-on" in r.stdout


# -- ab: arguments ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runs", "0", "--", "-S"], "--runs must be at least 1"),
        (["--warmup", "-1", "--", "-S"], "--warmup must be 0 or more"),
        (
            ["--a", "-h 'unclosed", "--", "-S"],
            "--a: No closing quotation: -h 'unclosed",
        ),
        (
            ["--b-env", "PGOPTIONS", "--", "-S"],
            '--b-env: expected NAME=VALUE, got "PGOPTIONS"',
        ),
        (
            ["--", "-S", "--json", "x.json"],
            "ab writes each run's --json itself: drop it from the common arguments",
        ),
        (
            ["--b", "--json=x", "--", "-S"],
            "ab writes each run's --json itself: drop it from --b",
        ),
        (
            ["--runs", "x"],
            "pgsurge ab: argument --runs: invalid int value: 'x' "
            '(try "pgsurge ab --help")',
        ),
        (["--order", "aabb"], "pgsurge ab: argument --order: invalid choice: "),
        (
            ["--", "-S", "--label", "arm=mine"],
            'ab labels each run with "arm" itself: drop --label arm=… from the '
            "common arguments",
        ),
        (
            ["--b", "--label=ab=x", "--", "-S"],
            'ab labels each run with "ab" itself: drop --label ab=… from --b',
        ),
        (
            ["--a", "-c 1", "--a", "-c 2", "--", "-S"],
            'pgsurge ab: argument --a: given twice (try "pgsurge ab --help")',
        ),
        (
            ["--out", "x", "--out", "y", "--", "-S"],
            'pgsurge ab: argument --out: given twice (try "pgsurge ab --help")',
        ),
        # each arm's arguments are read before the first run (issue 21 item 11)
        (
            ["--b", "-M bogus", "--", "-S"],
            "arm B's arguments (--b and the common ones): invalid query mode (-M): "
            '"bogus"',
        ),
        (
            ["--a", "-S", "--b", "-c 0", "--", "-T", "1"],
            "arm B's arguments (--b and the common ones): -c/--client must be in "
            "range 1..2147483647",
        ),
        (["--", "-S", "-t", "1", "-T", "1"], "the common arguments (arm A): "),
        (["--b", "-i", "--", "-S"], "arm B's arguments (--b and the common ones): "),
        (["--a", "-b list", "--", "-T", "1"], "arm A's arguments (--a and the "),
    ],
)
def test_ab_bad_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    r = run_cli(["ab", *args])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr.startswith(f"pgsurge: error: {message}")
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n")
    assert list(tmp_path.iterdir()) == []  # no output directory was made


def test_ab_bad_arm_arguments_do_not_print_a_password(tmp_path: Path) -> None:
    # a conninfo left unquoted in --b is split into words; the message
    # quoting one of them printed the password
    r = run_cli(["ab", "--b", "dbname=x password=ABSECRET", "--", "-S"])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr.startswith(
        "pgsurge: error: arm B's arguments (--b and the common ones): too many "
        'command-line arguments (first is "password=********")\n'
    )
    assert "ABSECRET" not in r.stderr


def test_ab_out_must_be_new_or_empty(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    r = run_cli(["ab", "--out", str(tmp_path), "--", "-S"])
    assert r.status == 1
    assert (
        r.stderr
        == f'pgsurge: error: --out: "{tmp_path}" exists and is not an empty directory\n'
    )


def _refused_out(out: Path, why: str) -> None:
    r = run_cli(["ab", "--out", str(out), "--", "-S"])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == f"pgsurge: error: --out: refusing to use {out}: {why}\n"


@pytest.mark.parametrize("cmd", ["ab", "sweep"])
def test_out_refuses_a_symlink(tmp_path: Path, cmd: str) -> None:
    # a link planted at --out (to an empty directory, or to one the link's
    # maker cannot write) would have results written and chmod-ed there
    target = tmp_path / "victim"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    link = tmp_path / "out"
    link.symlink_to(target)
    args = ["--vary", "-c 1,2"] if cmd == "sweep" else []
    r = run_cli([cmd, *args, "--out", str(link), "--", "-S"])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        f"pgsurge: error: --out: refusing to use {link}: it is a symbolic link\n"
    )
    assert oct(target.stat().st_mode & 0o777) == "0o755"  # not chmod-ed
    assert list(target.iterdir()) == []


def test_out_refuses_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing")
    _refused_out(link, "it is a symbolic link")
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody")
def test_out_refuses_another_users_directory(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
    _refused_out(theirs, 'it is owned by "nobody"')
    # and one below a directory another user could swap
    below = theirs / "x"
    _refused_out(
        below,
        f'the directory {theirs} above it is owned by "nobody" (another user '
        "could replace it)",
    )
    assert list(theirs.iterdir()) == []


def test_out_an_empty_directory_of_ours_is_closed(tmp_path: Path) -> None:
    # taken as before, but made 0700 whatever the umask made it
    from pgsurge.experiment.command import _out_dir

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o775)
    mine.chmod(0o775)
    assert _out_dir(str(mine)) == mine
    assert mine.stat().st_mode & 0o777 == 0o700
    made = _out_dir(str(tmp_path / "new" / "deeper"))
    assert made.stat().st_mode & 0o777 == 0o700


def test_schedule() -> None:
    assert schedule(2, 4, "abba") == [0, 1, 1, 0, 0, 1, 1, 0]
    assert schedule(2, 3, "abab") == [0, 1, 0, 1, 0, 1]
    assert schedule(1, 3, "abba") == [0, 0, 0]


def test_experiment_imports_no_run_machinery() -> None:
    # the layering rule: experiment reads results, it never runs the engine
    code = (
        "import sys, pgsurge.experiment.command\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('pgsurge')))"
    )
    mods = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    # the values and statistics below it are fine; no engine, no runner, no
    # report renderer, no connection
    forbidden = ("engine", "runner", "report", "pgconn", "cli", "init", "server")
    bad = [m for m in mods if m.split(".")[1:2] and m.split(".")[1] in forbidden]
    assert bad == []


# -- the same run twice; sides without a measured spread (issue 21 item 9) ----------


@pytest.mark.parametrize("how", ["same path", "./ path", "symlink", "copy"])
def test_the_same_run_twice_is_refused(tmp_path: Path, how: str) -> None:
    a = write_result(tmp_path / "a.json", 40_000)
    b = write_result(tmp_path / "b.json", 44_000, seq=1)
    twin = {
        "same path": b,
        "./ path": str(tmp_path / "." / "b.json"),
        "symlink": str(tmp_path / "link.json"),
        "copy": str(tmp_path / "copy.json"),
    }[how]
    if how == "symlink":
        (tmp_path / "link.json").symlink_to(b)
    if how == "copy":
        (tmp_path / "copy.json").write_bytes(Path(b).read_bytes())
    r = run_cli(["compare", a, "--vs", b, twin])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr.startswith("pgsurge: error: ") and r.stderr.count("\n") == 1
    assert "are the same run" in r.stderr and "give each run once" in r.stderr
    # within the base side too, and across the sides
    assert run_cli(["compare", b, twin, "--vs", a]).status == 1
    assert run_cli(["compare", b, "--vs", twin]).status == 1


def test_an_edited_copy_of_a_run_is_the_same_run(tmp_path: Path) -> None:
    a = write_result(tmp_path / "a.json", 40_000)
    b = write_result(tmp_path / "b.json", 44_000, seq=1)
    doc = json.loads(Path(b).read_text())
    doc["experiment"] = {"arm": "B", "args": [], "env": {}, "common": []}
    (tmp_path / "b2.json").write_text(json.dumps(doc, indent=4))
    r = run_cli(["compare", a, "--vs", b, str(tmp_path / "b2.json")])
    assert r.status == 1
    assert "(the same start time 2026-01-01T10:01:00.000000Z and figures)" in r.stderr


@pytest.mark.parametrize("n_base", [1, 3])
def test_no_verdict_from_a_side_without_spread(tmp_path: Path, n_base: int) -> None:
    # three distinct runs (other start times) with exactly the same figures:
    # their spread is 0, which is no measurement of it
    base = _side(tmp_path, "b", [40_000 * d for d in DEV[:n_base]])
    new = _side(tmp_path, "n", [44_000.0] * 3, first=10)
    r = run_cli(["compare", *base, "--vs", *new, "--fail-on", "change"])
    assert r.status == 0, r.stderr
    assert _row(r.stdout, "tps").endswith(
        "no verdict (no spread in the 3 new runs: identical values)"
    )
    assert "faster" not in _row(r.stdout, "tps")


def test_html_single_run_per_side_no_verdict_with_within_run_interval(
    tmp_path: Path,
) -> None:
    from pgsurge.report.html import RunDoc, render_html

    a = json.loads(Path(write_result(tmp_path / "a.json", 40_000)).read_text())
    b = json.loads(Path(write_result(tmp_path / "b.json", 36_000, seq=1)).read_text())
    runs = [RunDoc("a.json", a, "A"), RunDoc("b.json", b, "B")]
    page = render_html(runs, within_run=(0.85, 0.95))
    assert "tps: <strong>no verdict</strong>" in page
    assert "within-run interval (batch means, one run per side): -15.0% … -5.0%" in page
    assert "slower" not in page.split('id="verdict"')[1].split("</section>")[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sweep", "--vary", "-c 1,2", "--", "-S", "--label", "arm=x"],
            'sweep labels each run with "arm" itself: drop --label arm=… from the '
            "common arguments",
        ),
        (
            ["capacity", "--latency", "p99=10ms", "--", "-S", "--label=capacity=x"],
            'capacity labels each run with "capacity" itself: drop --label capacity=…',
        ),
    ],
)
def test_own_labels_are_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    # a duplicated --label key is refused by every run: each one failed
    monkeypatch.chdir(tmp_path)
    r = run_cli(args)
    assert (r.status, r.stdout, r.stderr) == (1, "", f"pgsurge: error: {message}\n")
    assert list(tmp_path.iterdir()) == []
