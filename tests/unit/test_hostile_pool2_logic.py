"""Hostile findings of the third pass over issue 25, in pure logic.

* ``PGSURGE_CONNECT=concurent`` (misspelt) was silently ignored: -C's
  connections then opened one at a time, not side by side as asked, and
  the run measured a connection pattern nobody asked for. It is an error
  before anything connects now, as a misspelt ``PGSURGE_WORKERS`` is.
* A client that ``--reconnect``\\ ed to another server of ``host=a,b``
  (a failover) was counted, with every transaction it made after it, on
  the server it first connected to: all of a failover's transactions
  credited to the server that failed, or (every client starting on the
  first host) no per-server figures at all. Each server now counts the
  transactions that ran on it.
"""

from __future__ import annotations

import pytest

from pgsurge.engine import fastloop
from pgsurge.errors import PgsurgeError
from pgsurge.report.extras import target_figures, targets_line
from pgsurge.stats.results import RunFacts, RunResult, ScriptInfo, WorkerResult
from tests.fix_cli import base_env, run_cli

# -- PGSURGE_CONNECT ------------------------------------------------------------


@pytest.mark.parametrize("value", ["concurent", "Concurrent", "1", "yes", " "])
def test_a_misspelt_connect_choice_is_an_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(fastloop.CONNECT_ENV, value)
    with pytest.raises(PgsurgeError, match='must be "concurrent" or empty'):
        fastloop.concurrent_connect()


@pytest.mark.parametrize(("value", "side_by_side"), [("", False), ("concurrent", True)])
def test_the_connect_choices(
    monkeypatch: pytest.MonkeyPatch, value: str, side_by_side: bool
) -> None:
    monkeypatch.setenv(fastloop.CONNECT_ENV, value)
    assert fastloop.concurrent_connect() is side_by_side
    monkeypatch.delenv(fastloop.CONNECT_ENV)
    assert fastloop.concurrent_connect() is False


def test_a_misspelt_connect_choice_stops_the_run_before_it_connects() -> None:
    # PGHOST points nowhere (base_env): a run that went on would fail to
    # connect, with libpq's lines; the error is the only line, status 1
    env = {**base_env(), "PGSURGE_CONNECT": "concurent"}
    got = run_cli(["-n", "-S", "-C", "-c", "2", "-T", "1"], env=env)
    assert got.status == 1, got.stderr
    assert got.stderr == (
        'pgsurge: error: PGSURGE_CONNECT must be "concurrent" or empty, '
        'not "concurent"\n'
    )
    assert got.stdout == ""


# -- per-server figures after --reconnect --------------------------------------


def _facts(**kw: object) -> RunFacts:
    return RunFacts(
        pgsurge_version="0",
        server_version_num=180006,
        server_version="18.6",
        scripts=(ScriptInfo("s", 1, ("q",)),),
        **kw,  # type: ignore[arg-type]
    )


def _worker(
    wid: int, targets: list[str], counts: list[int], moved: list[tuple[str, int]]
) -> WorkerResult:
    w = WorkerResult.empty(wid, len(targets), [1])
    w.client_targets = targets
    w.client_tx_counts = counts
    w.moved_tx = moved
    for _ in range(sum(counts) + sum(n for _t, n in moved)):
        w.total.record(1000)
    w.bench_start_us, w.end_us = 0, 2_000_000
    return w


def test_transactions_are_counted_where_they_ran() -> None:
    # two clients start on a, fail over to b: 30 + 40 transactions on a
    # before, 50 + 60 on b after; a third stays on a (25)
    w0 = _worker(0, ["b:5432", "b:5432"], [50, 60], [("a:5432", 30), ("a:5432", 40)])
    w1 = _worker(1, ["a:5432"], [25], [])
    result = RunResult.from_workers([w0, w1], _facts(duration_s=2, clients=3))
    assert result.targets == {"a:5432": [1, 95], "b:5432": [2, 110]}
    assert result.target_moves == 2
    figures = target_figures(result)
    assert sum(f["transactions"] for f in figures) == result.total.cnt == 205
    # the clients' time was split between the servers: no latency figure
    assert all(f["latency_ms"] is None for f in figures), figures
    line = targets_line(result, "pgsurge")
    assert "a:5432 1 clients, 95 transactions (47.5 tps)" in line, line
    assert "b:5432 2 clients, 110 transactions (55.0 tps)" in line, line
    assert "2 reconnections went to another server" in line, line
    # the workers' results cross a pipe (or Dask) as dicts
    again = RunResult.from_workers(
        [WorkerResult.from_dict(w.to_dict()) for w in (w0, w1)],
        _facts(duration_s=2, clients=3),
    )
    assert again.targets == result.targets
    assert again.target_moves == 2
    back = RunResult.from_dict(result.to_dict())
    assert (back.targets, back.target_moves) == (result.targets, 2)


def test_every_client_failed_over_still_has_both_servers() -> None:
    # all clients started on the first host: before, one server "reached"
    # and no per-server figures, though the run ran on two
    w0 = _worker(0, ["b:5432", "b:5432"], [7, 9], [("a:5432", 3), ("a:5432", 4)])
    result = RunResult.from_workers([w0], _facts(duration_s=2, clients=2))
    assert result.targets == {"a:5432": [0, 7], "b:5432": [2, 16]}


def test_a_run_without_moves_keeps_its_latency_figure() -> None:
    w0 = _worker(0, ["a:5432", "b:5432"], [100, 50], [])
    result = RunResult.from_workers([w0], _facts(duration_s=2, clients=2))
    assert result.target_moves == 0
    by = {f["target"]: f["latency_ms"] for f in target_figures(result)}
    assert by == {"a:5432": pytest.approx(20.0), "b:5432": pytest.approx(40.0)}
    assert "reconnection" not in targets_line(result, "pgsurge")


def test_a_worker_whose_servers_are_unknown_leaves_no_figures() -> None:
    """A worker that died (or a lost host of a --dask run) brings its last
    progress snapshot, transactions without their servers: the other
    workers' per-server figures summed to less than the run's processed
    transactions, which the JSON says they sum to."""
    alive = _worker(0, ["a:5432", "b:5432"], [100, 50], [])
    dead = WorkerResult.empty(1, 2, [1])  # as runner.drive's _dead_result
    for _ in range(70):
        dead.total.record(1000)
    dead.bench_start_us, dead.end_us = 0, 1_000_000
    result = RunResult.from_workers([alive, dead], _facts(duration_s=2, clients=4))
    assert result.total.cnt == 220
    assert result.targets == {}
    assert target_figures(result) == []
    # one that died before it counted anything changes nothing
    empty = WorkerResult.empty(1, 2, [1])
    result = RunResult.from_workers([alive, empty], _facts(duration_s=2, clients=4))
    assert result.targets == {"a:5432": [1, 100], "b:5432": [1, 50]}
