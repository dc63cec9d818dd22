"""Hostile tests of pgsurge's verdicts on data that cannot support them:
``compare``'s partial runs, ``history``'s change points on noise that is
not a change, ``report``'s verdict card. Every input is constructed (edited
copies of a real ``--json`` document, series of made-up values): no test
depends on a benchmark's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fix_cli import run_cli
from tests.fix_data import write_result

BASE = [1000.0, 1010.0, 990.0, 1005.0, 995.0]


def _files(tmp_path: Path, prefix: str, values: list[float], first: int) -> list[str]:
    return [
        write_result(tmp_path / f"{prefix}{i}.json", v, seq=first + i)
        for i, v in enumerate(values)
    ]


def _edited(tmp_path: Path, name: str, tps: float, seq: int, **edit: Any) -> str:
    return write_result(tmp_path / name, tps, seq=seq, edit=edit)


# -- compare: partial runs --------------------------------------------------


def test_compare_refuses_an_interrupted_run(tmp_path: Path) -> None:
    # hostile finding: a -T 3 run cut by Ctrl-C after 0.94 s (its JSON has
    # "interrupted") was compared as a whole run of the same workload
    base = _files(tmp_path, "a", BASE, 0)
    new = _files(tmp_path, "b", BASE[:4], 10)
    new.append(
        _edited(
            tmp_path,
            "cut.json",
            400.0,
            20,
            interrupted={"signal": "SIGINT", "after_s": 0.94},
        )
    )
    r = run_cli(["compare", *base, "--vs", *new])
    assert r.status == 1
    assert r.stdout == ""
    assert r.stderr == (
        "pgsurge: error: partial runs: cut.json: the run was interrupted by "
        "SIGINT after 0.94 s: its figures are not a whole run's (--force "
        "compares anyway)\n"
    )
    forced = run_cli(["compare", *base, "--vs", *new, "--force"])
    assert forced.status == 0, forced.stderr
    assert (
        "note: cut.json: the run was interrupted by SIGINT after 0.94 s; its "
        "figures are partial (--force)" in forced.stdout
    )


def test_compare_refuses_an_aborted_run(tmp_path: Path) -> None:
    # an aborted run (clients that failed) measured fewer clients: it got a
    # note and still counted in the verdict
    base = _files(tmp_path, "a", BASE, 0)
    new = _files(tmp_path, "b", BASE[:4], 10)
    new.append(_edited(tmp_path, "ab.json", 500.0, 20, aborted=True))
    r = run_cli(["compare", *base, "--vs", *new])
    assert r.status == 1
    assert "partial runs: ab.json: the run was aborted (some clients failed)" in (
        r.stderr
    )
    assert r.stderr.count("\n") == 1
