"""What a multi-host run keeps of a lost host (``distributed.salvage``,
issue 24): its last streamed snapshot with its per-script and
per-command figures, and every interval of the series, those after its
loss counted from the surviving hosts and marked so in the JSON.
"""

from __future__ import annotations

import jsonschema

from pgsurge.distributed.host import HostOutcome
from pgsurge.distributed.plan import HostInfo
from pgsurge.distributed.salvage import HostState, merge_hosts
from pgsurge.report.json import build_document, load_schema
from tests.fix_data import SECOND, config, make_workers


def _hosts() -> tuple[list[HostState], int]:
    """Host 0 stopped with its complete result; host 1 lost after
    streaming its first two intervals (and its snapshot of then)."""
    _, (done, streamed) = make_workers()
    survivor = HostState(
        HostInfo(0, "tcp://192.0.2.1:4000", "load0", 1, 2),
        future=None,
        last_seen=0.0,
        outcome=HostOutcome("stopped", [done]),
    )
    survivor.series = {iv.start_us: iv for iv in done.intervals}
    lost = HostState(
        HostInfo(1, "tcp://192.0.2.2:4000", "load1", 1, 2, lost=True),
        future=None,
        last_seen=0.0,
        stats=streamed.total,
        per_script=streamed.per_script,
        per_command=streamed.per_command,
        now_us=streamed.end_us,
        steady_us=9 * SECOND,
    )
    lost.series = {iv.start_us: iv for iv in streamed.intervals[:2]}
    return [survivor, lost], len(done.intervals)


def test_a_lost_host_keeps_its_per_script_and_per_command_figures() -> None:
    facts, (done, streamed) = make_workers()
    hosts, _ = _hosts()
    result = merge_hosts(hosts, facts, 10 * SECOND)
    assert result.total.cnt == done.total.cnt + streamed.total.cnt
    assert [s.cnt for s in result.per_script] == [
        a.cnt + b.cnt for a, b in zip(done.per_script, streamed.per_script, strict=True)
    ]
    assert sum(s.cnt for s in result.per_script) == result.total.cnt
    for merged, a, b in zip(
        result.per_command, done.per_command, streamed.per_command, strict=True
    ):
        assert [c.latency.count for c in merged] == [
            x.latency.count + y.latency.count for x, y in zip(a, b, strict=True)
        ]
        assert [c.failures for c in merged] == [
            x.failures + y.failures for x, y in zip(a, b, strict=True)
        ]
    assert result.aborted_clients == done.aborted_clients + 2


def test_the_series_after_a_loss_counts_the_surviving_hosts() -> None:
    facts, (done, streamed) = make_workers()
    hosts, nintervals = _hosts()
    result = merge_hosts(hosts, facts, 10 * SECOND)
    assert nintervals == 4
    # every interval is kept: both hosts' until the loss, then the
    # survivor's alone, said so
    assert [iv.hosts for iv in result.intervals] == [None, None, (1, 2), (1, 2)]
    assert [iv.stats.cnt for iv in result.intervals] == [
        done.intervals[0].stats.cnt + streamed.intervals[0].stats.cnt,
        done.intervals[1].stats.cnt + streamed.intervals[1].stats.cnt,
        done.intervals[2].stats.cnt,
        done.intervals[3].stats.cnt,
    ]
    doc = build_document(result, config())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    assert [p.get("hosts") for p in doc["intervals"]] == [
        None,
        None,
        {"counted": 1, "of": 2},
        {"counted": 1, "of": 2},
    ]


def test_without_a_loss_the_series_is_unmarked() -> None:
    facts, (_, streamed) = make_workers()
    hosts, _ = _hosts()
    hosts[1].info.lost = False
    hosts[1].outcome = HostOutcome("done", [streamed])
    hosts[1].series = {iv.start_us: iv for iv in streamed.intervals}
    result = merge_hosts(hosts, facts, 10 * SECOND)
    assert [iv.hosts for iv in result.intervals] == [None] * 4
    assert sum(iv.stats.cnt for iv in result.intervals) == result.total.cnt
