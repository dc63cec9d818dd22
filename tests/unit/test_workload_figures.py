"""``workloads.figures`` on made-up results: tpcc-like's NOPM/tpmC/TPM
arithmetic, YCSB's per-operation counts and percentiles, and their text."""

from __future__ import annotations

import math

import pytest

from pgsurge.workloads.figures import render_figures, workload_figures
from tests.fix_data import make_result


def test_tpcc_figures() -> None:
    result = make_result(nscripts=2)
    seconds = result.total_duration_us / 1e6
    names = ("new_order", "payment")
    new_orders = result.per_script[0].cnt
    doc = workload_figures("tpcc", result, names, counter_delta=new_orders - 3)
    assert doc["new_orders"] == new_orders > 3
    assert doc["new_order_rollbacks"] == 3
    assert math.isclose(doc["nopm"], (new_orders - 3) * 60 / seconds)
    assert math.isclose(doc["tpmc"], new_orders * 60 / seconds)
    assert math.isclose(doc["tpm"], result.total.cnt * 60 / seconds)
    text = render_figures(doc)
    assert text.splitlines()[0] == (
        f"NOPM (New-Orders committed per minute): {doc['nopm']:.1f}"
    )
    assert f"New-Order rollbacks: 3 ({300 / new_orders:.1f}% of New-Orders)" in text
    # without the server's count: NOPM and the rollbacks are not known
    doc = workload_figures("tpcc", result, names, counter_delta=None)
    assert doc["nopm"] is None and doc["new_order_rollbacks"] is None
    assert "NOPM (New-Orders committed per minute): n/a" in render_figures(doc)
    assert "rollbacks" not in render_figures(doc).splitlines()[-1]


@pytest.mark.parametrize("nscripts", [1, 2])
def test_ycsb_figures(nscripts: int) -> None:
    result = make_result(nscripts=nscripts)
    names = ("read", "update")[:nscripts]
    doc = workload_figures("ycsb", result, names)
    ops = doc["operations"]
    assert [o["name"] for o in ops] == list(names)
    assert sum(o["count"] for o in ops) == doc["total"] == result.total.cnt
    for op in ops:
        lat = op["latency_ms"]
        assert list(lat) == ["p50", "p95", "p99", "max"]
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    lines = render_figures(doc).splitlines()
    assert lines[0] == "YCSB operations:" and len(lines) == 1 + nscripts
    assert lines[1].startswith(f"  read: {ops[0]['count']} ops, ")


def test_ycsb_figures_without_histograms() -> None:
    result = make_result(record=False)
    doc = workload_figures("ycsb", result, ("read", "update"))
    assert all(v is None for o in doc["operations"] for v in o["latency_ms"].values())
    assert "p50 = n/a ms" in render_figures(doc)
