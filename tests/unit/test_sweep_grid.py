"""The sweep's grid, run order and knee rule: pure functions, no server."""

from __future__ import annotations

import pytest

from pgsurge.errors import UsageError
from pgsurge.experiment.grid import cells, parse_vary, rounds
from pgsurge.experiment.knee import KneePoint, arm_interval, find_knee
from tests.fix_cli import run_cli


def test_vary_forms() -> None:
    c = parse_vary("-c 1,2,4")
    assert (c.kind, c.name, c.values) == ("option", "-c", ("1", "2", "4"))
    assert parse_vary("--rate 100, 200").values == ("100", "200")
    assert parse_vary("-s 1,10").kind == "scale"
    s = parse_vary("SET work_mem 4MB,64MB")
    assert (s.kind, s.name, s.label) == ("setting", "work_mem", "SET work_mem")
    e = parse_vary("PGOPTIONS -c jit=on,-c jit=off")
    assert e.kind == "env" and e.values == ("-c jit=on", "-c jit=off")


@pytest.mark.parametrize(
    "spec", ["-c", "-c 1,,2", "-c 1,1", "foo 1", "--json a,b", "-s 0,1", "SET 1"]
)
def test_bad_vary(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_vary(spec)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("-c 1,2", "--client 3"),
        ("--client 1,2", "--cli 3"),  # getopt's unique prefix
        ("-s 1,2", "--scale 3"),
        ("-M simple", "--protocol prepared"),
    ],
)
def test_one_option_under_two_spellings_is_refused(first: str, second: str) -> None:
    # each spec would set the option, the last one winning in every run:
    # one clear line naming both, before any run (hostile finding)
    r = run_cli(["sweep", "--vary", first, "--vary", second, "--", "-T", "1"])
    a, b = first.split()[0], second.split()[0]
    assert (r.status, r.stdout, r.stderr) == (
        1,
        "",
        f'pgsurge: error: --vary: "{a}" and "{b}" are the same option\n',
    )


def test_cells_are_the_product_first_spec_slowest() -> None:
    specs = [parse_vary("-c 1,2"), parse_vary("SET work_mem 4MB,64MB")]
    grid = cells(specs)
    assert [c.values for c in grid] == [
        ("1", "4MB"),
        ("1", "64MB"),
        ("2", "4MB"),
        ("2", "64MB"),
    ]
    assert grid[1].args == ("-c", "1")
    assert grid[1].env == {"PGOPTIONS": "-c work_mem=64MB"}
    # a cell's setting goes after the arm's own PGOPTIONS
    env = grid[1].run_env({"PGOPTIONS": "-c jit=off"})
    assert env == {"PGOPTIONS": "-c jit=off -c work_mem=64MB"}
    assert cells([parse_vary("--rate 5,6")])[0].args == ("--rate=5",)


def test_scale_is_the_outer_loop() -> None:
    with pytest.raises(UsageError, match="-s spec first"):
        cells([parse_vary("-c 1,2"), parse_vary("-s 1,2")])
    grid = cells([parse_vary("-s 1,2"), parse_vary("-c 1,2")])
    assert [c.scale for c in grid] == [1, 1, 2, 2] and grid[0].args == ("-c", "1")
    order = rounds(grid, 1, 2)
    # all runs of scale 1 before any of scale 2
    assert [grid[c].scale for _, c, _ in order] == [1, 1, 1, 1, 2, 2, 2, 2]


def test_rounds_rotate_cells_and_swap_arms() -> None:
    grid = cells([parse_vary("-c 1,2,4")])
    order = rounds(grid, 2, 2)
    assert len(order) == 12
    assert order[:6] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 1, 0),
        (0, 1, 1),
        (0, 2, 0),
        (0, 2, 1),
    ]
    assert order[6:] == [
        (1, 1, 1),
        (1, 1, 0),
        (1, 2, 1),
        (1, 2, 0),
        (1, 0, 1),
        (1, 0, 0),
    ]


def test_arm_interval_contains_the_geometric_mean() -> None:
    assert arm_interval([100.0], 0.95) is None
    lo, hi = arm_interval([90.0, 100.0, 110.0], 0.95) or (0, 0)
    assert lo < 99.7 < hi and lo > 70 and hi < 140


def _pt(c: int, tps: list[float], p99: float = 1.0) -> KneePoint:
    return KneePoint(float(c), tuple(tps), tuple(p99 * c for _ in tps), False)


def test_knee_of_a_flat_curve_is_the_first_point() -> None:
    knee = find_knee([_pt(c, [100.0, 101.0, 99.0]) for c in (1, 2, 4, 8)])
    assert knee is not None and knee.clients == 1 and knee.low == 1
    assert knee.describe().startswith("knee at 1 client (range ")


def test_knee_where_growth_stops_and_its_range() -> None:
    pts = [
        _pt(1, [100.0, 104.0, 96.0]),
        _pt(2, [195.0, 205.0, 200.0]),
        _pt(4, [380.0, 390.0, 400.0]),
        _pt(8, [395.0, 400.0, 405.0]),
        _pt(16, [400.0, 390.0, 410.0]),
    ]
    knee = find_knee(pts)
    assert knee is not None
    assert knee.clients == 4 and knee.peak_clients in (8, 16)
    assert knee.low == 4 and knee.high in (4, 8)
    # p99 proportional to clients: it outgrows tps once tps stops growing
    assert knee.latency_knee == 8
    assert "knee at 4 clients" in knee.describe()


def test_knee_range_widens_with_noise() -> None:
    pts = [
        _pt(1, [100.0, 300.0]),
        _pt(2, [200.0, 320.0]),
        _pt(4, [330.0, 340.0]),
    ]
    knee = find_knee(pts)
    assert knee is not None and knee.low == 1 and knee.high == 4
    # the "knee" is the last point: none was shown (hostile finding)
    assert knee.open_ended


def test_a_curve_still_rising_at_the_end_has_no_knee() -> None:
    """(hostile finding) tps doubling with every client count up to the
    last one swept: the knee was put at that last count, "more clients add
    less than 10 % to the peak", of client counts never run."""
    pts = [_pt(c, [100.0 * c, 102.0 * c, 98.0 * c]) for c in (1, 2, 4)]
    knee = find_knee(pts)
    assert knee is not None and knee.open_ended
    text = knee.describe()
    assert text.startswith("no knee up to 4 clients: the last point is more than")
    assert "knee at" not in text and "add less than" not in text
    assert knee.to_dict()["clients"] is None and knee.to_dict()["open_ended"]
    # a knee before the last point is one
    flat = find_knee([*pts, _pt(8, [400.0, 401.0, 399.0])])
    assert flat is not None and not flat.open_ended and flat.clients == 4


def test_a_peak_at_the_first_point_of_noisy_runs_settles_nothing() -> None:
    """(hostile finding) Runs of 2.7–372 844 tps intervals, the peak's
    median at 1 client: the range said "1 client", as if the later points
    had been shown not to be higher."""
    pts = [
        _pt(1, [300.0, 4000.0]),
        _pt(2, [200.0, 2500.0]),
        _pt(4, [250.0, 400.0]),
    ]
    knee = find_knee(pts)
    assert knee is not None and knee.clients == 1 and not knee.open_ended
    assert (knee.low, knee.high) == (1, 4)
    assert knee.describe().startswith("knee at 1 client (range 1–4 clients)")
