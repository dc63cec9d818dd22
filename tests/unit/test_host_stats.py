"""The client host's facts and load, from /proc (stats.host, insight.hostwatch)."""

from __future__ import annotations

import os

import pytest

from pgsurge.config import ConnParams
from pgsurge.insight.hostwatch import HostWatch, server_is_local
from pgsurge.stats.host import HostSnapshot, host_facts, host_figures


def test_host_facts_describe_this_machine():
    facts = host_facts()
    assert facts["kernel"] == os.uname().release
    assert facts["cpus_online"] == os.cpu_count()
    assert 1 <= facts["cpus"] <= facts["cpus_online"]
    assert facts["memory_bytes"] > 100 * 2**20
    assert facts["memory_gib"] == round(facts["memory_bytes"] / 2**30)
    assert facts["cpu_model"]


def snap(t, cpu, ctxt, disks=None, **mem):
    return HostSnapshot(t, tuple(cpu), ctxt, dict(mem), disks or {})


def test_figures_between_two_snapshots():
    # user nice system idle iowait irq softirq steal, in ticks
    a = snap(10.0, [100, 0, 50, 800, 10, 0, 0, 0], 1000, {"vda": (5, 40, 10, 800)})
    b = snap(
        12.0,
        [160, 20, 70, 910, 30, 5, 5, 10],
        5000,
        {"vda": (9, 72, 30, 4800)},
        MemAvailable=3 * 2**30,
        Dirty=2**20,
    )
    f = host_figures(a, b)
    # 250 ticks: user 60+20, system 20+5+5, iowait 20, steal 10, idle 110
    assert f["cpu_pct"] == pytest.approx(
        {"user": 32.0, "system": 12.0, "iowait": 8.0, "steal": 4.0, "idle": 44.0}
    )
    assert f["context_switches_per_s"] == 2000.0
    assert f["memory_available_bytes"] == 3 * 2**30
    assert f["dirty_bytes"] == 2**20
    assert f["disk"] == pytest.approx(
        {
            "reads_per_s": 2.0,
            "writes_per_s": 10.0,
            "read_mb_per_s": 32 * 512 / 1e6 / 2,
            "write_mb_per_s": 4000 * 512 / 1e6 / 2,
        }
    )
    # no disks (a remote server): no disk figures
    assert "disk" not in host_figures(a, snap(12.0, b.cpu, 5000))


def test_real_snapshots_add_up():
    w = HostWatch(disks=True)
    w.go()
    sum(i * i for i in range(200_000))  # some CPU between the snapshots
    w.boundary(0)
    section = w.finish(1)
    assert section is not None and section["disks_counted"] is True
    for figures in (section, w.intervals[0], w.intervals[1]):
        assert sum(figures["cpu_pct"].values()) == pytest.approx(100.0, abs=0.01) or (
            sum(figures["cpu_pct"].values()) == 0  # no tick elapsed
        )
        assert figures["context_switches_per_s"] >= 0
    assert section["memory_available_bytes"] > 0


@pytest.mark.parametrize(
    ("host", "embedded", "local"),
    [
        (None, False, True),
        ("/tmp", False, True),
        ("localhost", False, True),
        ("127.0.0.1,::1", False, True),
        ("db.example.com", False, False),
        ("/tmp,db.example.com", False, False),
        (None, True, True),
    ],
)
def test_which_servers_are_local(host, embedded, local):
    conn = ConnParams(host=host, embedded=embedded)
    assert server_is_local(conn) is local


def test_the_html_report_charts_host_cpu_when_recorded():
    from pgsurge.report.html import RunDoc, render_html
    from tests.fix_data import result_doc

    doc = result_doc()
    assert 'data-chart="host"' not in render_html([RunDoc("r.json", doc)])
    for iv in doc["intervals"]:
        iv["host"] = {
            "cpu_pct": {
                "user": 60.0,
                "system": 30.0,
                "iowait": 1.0,
                "steal": 0.0,
                "idle": 9.0,
            },
            "context_switches_per_s": 1000.0,
        }
    assert 'data-chart="host"' in render_html([RunDoc("r.json", doc)])
