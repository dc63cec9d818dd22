"""Hostile-tester regressions on ``capacity``'s search, without a server.

Rates go in steps of 0.1 tps, and the search never ended for a slow
workload: below 2 tps the bisection's 5 % bracket is narrower than a step,
so the midpoint of a one-step bracket rounded back to one of its ends and
that rate was probed again for ever (each probe a whole ``-T`` run); a
step up from 0.1 by 1.3 rounded back to 0.1 likewise. The probes' outcome
is given here by a rule (a rate passes up to a limit): the search is pure
arithmetic over them, and what a probe runs is tested on a server in
``tests/server/test_capacity.py``.

A search over runs without ``-T`` (pgbench's default of 10 transactions
per client, or ``-t N``) answered "sustainable rate 1 997 tps" from
probes of a few milliseconds that achieved 1 129 tps: such a probe lasts
as long as the rate makes it, its p99 is of ten transactions and no
interval is left for the schedule check. It is refused before any run.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pgsurge.errors import UsageError
from pgsurge.experiment.ab import Arm, Plan
from pgsurge.experiment.capacity import (
    Probe,
    Repetition,
    Search,
    parse_target,
    render,
)
from tests.fix_cli import run_cli

#: far more probes than any search of these brackets needs
ENOUGH = 60


class RuledSearch(Search):
    """A search whose probes pass up to ``limit`` tps."""

    def __init__(self, limit: float, precision: float = 0.05) -> None:
        # only what _search reads: the probes and the precision
        self.limit = limit
        self.precision = precision
        self.rates: list[float] = []

    def probe(self, rate: float, rep: Repetition) -> bool:
        self.rates.append(rate)
        if len(self.rates) > ENOUGH:
            raise AssertionError(f"the search does not end: {self.rates[:20]}…")
        return rate <= self.limit


@pytest.mark.parametrize(
    ("limit", "start", "ceiling", "factor", "capacity"),
    [
        (1.55, 0.6, 2.4, 2.0, 1.5),  # bisection below 2 tps
        (0.45, 0.1, 3.0, 1.3, 0.4),  # a step up that rounded back
        (0.05, 0.1, 3.0, 2.0, None),  # the lowest rate fails
        (120.0, 10.0, 400.0, 2.0, 115.0),  # a fast one, as before
    ],
)
def test_the_search_ends_with_each_rate_probed_once(
    limit: float, start: float, ceiling: float, factor: float, capacity: float | None
) -> None:
    search = RuledSearch(limit)
    rep = Repetition()
    search._search(rep, start, ceiling, factor)
    assert len(search.rates) == len(set(search.rates)), search.rates
    if capacity is None:
        assert rep.bound == "below-min"
    else:
        assert rep.capacity is not None
        assert capacity <= rep.capacity <= limit


@pytest.mark.parametrize(
    "common",
    [["-S"], ["-S", "-t", "500"], ["-nSt500"], ["-S", "--transactions=500"]],
    ids=["default", "-t", "bundled", "--transactions"],
)
def test_a_search_without_a_duration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, common: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    r = run_cli(["capacity", "--latency", "p99=10ms", "--", *common])
    assert (r.status, r.stdout) == (1, ""), r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr == (
        "pgsurge: error: capacity needs a duration: give -T SEC among the "
        "common arguments\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing ran, no directory made


@pytest.mark.parametrize("state", ["interrupted", "failed"])
def test_no_repetition_finished_is_no_answer(state: str) -> None:
    """Ctrl-C (or a failed probe) in the first repetition said "no rate met
    p99 ≤ 10 ms (even the lowest tried): lower --min-rate", of rates that
    had met it."""
    doc = {
        "target": {"stat": "p99", "ms": 10.0},
        "capacity": None,
        "state": state,
        "repetitions": [{"capacity": None, "bound": "ok", "probes": []}],
    }
    assert render(doc) == f"no repetition finished ({state}): no answer\n"
    assert "lower --min-rate" in render(doc | {"state": "finished"})


@pytest.mark.parametrize("text", ["p99.999=1ms", "p50.5=1ms", "p0=1ms"])
def test_a_percentile_no_run_reports_is_refused(text: str) -> None:
    """Every probe read the target's percentile from its run's JSON, which
    has p50, p75, p90, p95, p99, p99.9 and p99.99 only: "p99.999" was
    never found, every probe "missed the target", and the search answered
    "no rate met p99.999 ≤ 1 ms (even the lowest tried): lower --min-rate"."""
    with pytest.raises(UsageError, match="a run reports no percentile"):
        parse_target(text)


def test_a_percentile_spelt_otherwise_is_the_runs_own() -> None:
    assert parse_target("p99.0=10ms").stat == "99"  # "99.0" was never found
    assert parse_target("p050=2ms").stat == "50"
    assert parse_target("p99.9=1ms").stat == "99.9"


def test_the_runs_that_missed_at_the_capacity_are_said(tmp_path: Path) -> None:
    """A rate passes when one of its two tries does; the answer quoted the
    p99 of the passing try alone ("p99 at that rate 46.2 ms (target 50
    ms)") though the other try at that rate gave 81.9 ms."""
    search = Search(
        Plan((Arm("A", "", (), {}),), (), 1, 0, "abab", False, tmp_path),
        parse_target("p99=50ms"),
        min_rate=None,
        max_rate=300.0,
        repeat=1,
        precision=0.05,
        argv=["pgsurge", "capacity"],
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    search.state = "finished"
    rep = Repetition(capacity=244.0)
    rep.probes += [
        Probe(255.6, "p1.json", 249.5, 67.1, True, None, False),
        Probe(255.6, "p2.json", 244.9, 154.2, True, None, False),
        Probe(244.0, "p3.json", 244.6, 81.9, True, None, False),
        Probe(244.0, "p4.json", 229.4, 46.2, True, None, True),
    ]
    search.reps.append(rep)
    doc = search.result(0.95)
    assert doc["latency_at_capacity_ms"] == 46.2
    assert doc["runs_at_capacity"] == 2 and doc["missed_at_capacity_ms"] == [81.9]
    assert render(doc).splitlines()[0] == (
        "sustainable rate 244.0 tps; p99 at that rate 46.2 ms (target 50 ms); "
        "1 of 2 runs there missed it (up to 81.9 ms)"
    )
