"""Hostile-tester regressions on ``sweep``'s grid, without a server.

* ``--vary "-c 1,01,2"`` made two cells of the same runs (one client),
  and the knee was found between them; a value given twice as two
  spellings of one number is now refused like one given twice.
* The values shown of a varied password are masked, and numbered when
  masking made them alike (the runs still get the real ones).
* ``--resume DIR`` with arguments compared only the grid and the common
  arguments: an arm B given otherwise (``synchronous_commit=off`` resumed
  as ``work_mem=1MB``) ran the missing runs under the new B, kept the old
  B's runs in the same cells and wrote the new B into the manifest, and
  the verdict compared runs of two experiments. ``--b-env`` alone with
  ``--resume`` was ignored without a word.
* A varied option that the common arguments or an arm give too: the
  cell's value comes last and wins, so ``--a "-c 8"`` ran -c 1, 2, 4
  under the name "A: -c 8", and a common ``-c 4`` was dropped silently.
  Refused before any run, naming both.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pgsurge.errors import UsageError
from pgsurge.experiment.ab import Arm
from pgsurge.experiment.grid import cells, parse_vary
from pgsurge.experiment.sweep import Sweep, SweepPlan
from pgsurge.experiment.sweep_command import sweep_main
from tests.fix_cli import run_cli


@pytest.mark.parametrize("spec", ["-c 1,01,2", "-R 100,1e2", "--rate 5,5.0"])
def test_one_number_spelt_twice_is_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="a value given twice"):
        parse_vary(spec)


def test_names_stay_apart() -> None:
    assert parse_vary("-M simple,prepared").values == ("simple", "prepared")


def test_varied_passwords_are_shown_masked_and_run_as_given() -> None:
    env = parse_vary("PGPASSWORD s3cret,s3cretB")
    dsn = parse_vary("-d db1,host=h password=pw dbname=db2")
    assert env.shown == ("******** #1", "******** #2")
    assert dsn.shown == ("db1", "host=h password=******** dbname=db2")
    grid = cells([env, dsn])
    assert [c.values for c in grid][:2] == [
        ("******** #1", "db1"),
        ("******** #1", "host=h password=******** dbname=db2"),
    ]
    assert grid[1].env == {"PGPASSWORD": "s3cret"}
    assert grid[1].args == ("-d", "host=h password=pw dbname=db2")
    assert env.to_dict()["values"] == ["******** #1", "******** #2"]


def _sweep_dir(tmp_path: Path) -> Path:
    """The directory of an interrupted A/B sweep: its manifest as the
    sweep writes it (no run recorded: a resume would run them all)."""
    out = tmp_path / "sw"
    out.mkdir(mode=0o700)
    plan = SweepPlan(
        specs=(parse_vary("-c 1,2"),),
        arms=(
            Arm("A", "", (), {}),
            Arm("B", "", (), {"PGOPTIONS": "-c synchronous_commit=off"}),
        ),
        common=("-T", "1"),
        runs=2,
        warmup=0,
        checkpoint=False,
        out_dir=out,
    )
    sweep = Sweep(plan, argv=["pgsurge", "sweep"])
    sweep.state = "interrupted"
    sweep.write_manifest()
    return out


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--b-env", "PGOPTIONS=-c work_mem=1MB"], "the arms"),
        (
            ["--b", "-M prepared", "--b-env", "PGOPTIONS=-c synchronous_commit=off"],
            "the arms",
        ),
        ([], "the arms"),  # B dropped
        (
            ["--b-env", "PGOPTIONS=-c synchronous_commit=off", "--vary", "-c 1,4"],
            "--vary",
        ),
    ],
)
def test_resume_with_other_arms_is_refused(
    tmp_path: Path, args: list[str], what: str
) -> None:
    out = _sweep_dir(tmp_path)
    vary = [] if "--vary" in args else ["--vary", "-c 1,2"]
    err = io.StringIO()
    status = sweep_main(
        ["sweep", "--resume", str(out), *vary, *args, "--", "-T", "1"],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert status == 1, err.getvalue()
    assert err.getvalue().startswith(f"pgsurge: error: --resume: {what} differ")
    assert err.getvalue().count("\n") == 1


def test_resume_with_an_arm_alone_is_refused(tmp_path: Path) -> None:
    out = _sweep_dir(tmp_path)
    err = io.StringIO()
    status = sweep_main(
        ["sweep", "--resume", str(out), "--b-env", "PGOPTIONS=-c work_mem=1MB"],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert status == 1, err.getvalue()
    assert "the common arguments and the arms differ" in err.getvalue()


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--runs", "5"], "--runs 5 (the sweep has 2)"),
        (["--warmup", "1"], "--warmup 1 (the sweep has 0)"),
        (["--checkpoint"], "--checkpoint (the sweep has none)"),
        (
            ["--runs", "3", "--checkpoint"],
            "--runs 3 (the sweep has 2) and --checkpoint",
        ),
    ],
)
def test_resume_with_another_protocol_is_refused(
    tmp_path: Path, args: list[str], what: str
) -> None:
    # the manifest's --runs and --warmup were used and the ones given
    # ignored without a word; a --checkpoint given on resume switched the
    # rest of the runs to checkpointing, mixing both kinds in one cell
    out = _sweep_dir(tmp_path)
    err = io.StringIO()
    status = sweep_main(
        ["sweep", "--resume", str(out), *args], stdout=io.StringIO(), stderr=err
    )
    assert status == 1, err.getvalue()
    assert err.getvalue().startswith(f"pgsurge: error: --resume: {what}")
    assert err.getvalue().count("\n") == 1


def test_resume_with_the_sweeps_own_protocol_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same --runs and --warmup again pass the check (the first run
    # then fails: no server listens there)
    monkeypatch.setenv("PGHOST", str(tmp_path))
    out = _sweep_dir(tmp_path)
    err = io.StringIO()
    sweep_main(
        ["sweep", "--resume", str(out), "--runs", "2", "--warmup", "0"],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert "--resume:" not in err.getvalue(), err.getvalue()
    assert "could not connect" in err.getvalue() or "connection" in err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--vary", "-c 2,4", "--", "-c", "4", "-T", "1"],
            '--vary "-c …": the common arguments give -c too',
        ),
        (
            ["--vary", "-c 2,4", "--", "-nSc4", "-T", "1"],
            '--vary "-c …": the common arguments give -c too',
        ),
        (
            ["--vary", "--client 2,4", "--a", "-c 8", "--", "-T", "1"],
            '--vary "--client …": --a gives --client too',
        ),
        (
            ["--vary", "-M simple,prepared", "--b", "--protocol=prepared"],
            '--vary "-M …": --b gives -M too',
        ),
        (
            ["--vary", "PGAPPNAME a,b", "--a-env", "PGAPPNAME=x", "--", "-T", "1"],
            '--vary "PGAPPNAME …": --a-env sets PGAPPNAME too',
        ),
        (
            ["--vary", "SET work_mem 4MB,64MB", "--b-env", "PGOPTIONS=-c work_mem=1MB"],
            '--vary "SET work_mem …": --b-env PGOPTIONS sets work_mem too',
        ),
        (
            ["--vary", "SET work_mem 4MB,64MB", "--a-env", "PGOPTIONS=--work-mem=1MB"],
            '--vary "SET work_mem …": --a-env PGOPTIONS sets work_mem too',
        ),
    ],
)
def test_a_varied_option_given_elsewhere_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    r = run_cli(["sweep", *args])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        f"pgsurge: error: {message} (each cell's value would win): drop it there\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_value_that_looks_like_the_varied_option_is_no_clash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # "-c" is -f's value here: the run's check reads it so (no such file)
    r = run_cli(["sweep", "--vary", "-c 2,4", "--", "-f", "-c", "-T", "1"])
    assert r.status == 1
    assert r.stderr == (
        'pgsurge: error: arm A at -c 2: could not open file "-c": '
        "No such file or directory\n"
    )


@pytest.mark.parametrize("command", ["sweep", "capacity"])
@pytest.mark.parametrize("option", ["--json", "--html"])
def test_an_output_in_a_missing_directory_is_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, option: str
) -> None:
    """The table was printed after the last run, then "could not write
    JSON comparison to …": an hour of runs for a typo (and the sweep's own
    sweep.json in its directory was not written either)."""
    monkeypatch.chdir(tmp_path)
    own = (
        ["--vary", "-c 1,2"]
        if command == "sweep"
        else ["--latency", "p99=10ms", "--max-rate", "20"]
    )
    r = run_cli([command, *own, option, "nowhere/x", "--", "-S", "-T", "1"])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        f'pgsurge: error: {option}: directory "nowhere" does not exist '
        '(for "nowhere/x")\n'
    )
    assert list(tmp_path.iterdir()) == []
