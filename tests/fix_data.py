"""Test data built in the test process: configs, results, result files.

Helpers more than one test module uses (tests/README.md: a test module
never imports from another):

* :func:`config` and :func:`make_result`: a ``RunConfig`` and a merged
  ``RunResult`` of two workers (failures, an aborted client, histograms
  and series), made up without a server, for the reports;
* :func:`result_doc` and :func:`write_result`: result files edited from a
  real ``--json`` document (``tests/data/results/select-only.json``), for
  ``pgsurge compare``/``ab`` and the HTML report;
* :func:`readme_example`: the example workload of the guide (docs/python-workloads.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pgsurge.config import ConnParams, RunConfig, ScriptSource
from pgsurge.stats.counters import FailureKind
from pgsurge.stats.results import RunFacts, RunResult, ScriptInfo, WorkerResult
from pgsurge.stats.series import WorkerRecorder

SECOND = 1_000_000
SHIFT = 1_700_000_000_000_000


def config(**kw) -> RunConfig:
    """A run of two scripts (weights 2 and 1), -c 4 -j 2 -T 3 with
    --percentiles 50,99.9; ``kw`` replaces fields."""
    base = dict(
        conn=ConnParams(host="/tmp", port="5432", user="bench", dbname="bench"),
        scripts=(
            ScriptSource("a.sql", "select 1", 2),
            ScriptSource("b.sql", "select 2"),
        ),
        clients=4,
        jobs=2,
        transactions=None,
        duration=3,
        percentiles=(50.0, 99.9),
    )
    base.update(kw)
    return RunConfig(**base)


def make_result(
    *,
    throttled: bool = False,
    nscripts: int = 2,
    interval: int = SECOND,
    record: bool = True,
    empty: bool = False,
) -> RunResult:
    """Two workers of two clients, 300 transactions each over 3 s (one in
    50 a deadlock failure after 3 tries), one client of worker 1 aborted;
    ``throttled``: with schedule lag; ``record``: with histograms and
    ``interval`` µs series; ``empty``: no transaction at all."""
    facts, workers = make_workers(
        throttled=throttled,
        nscripts=nscripts,
        interval=interval,
        record=record,
        empty=empty,
    )
    result = RunResult.from_workers(workers, facts)
    result.epoch_shift_us = SHIFT
    return result


def make_workers(
    *,
    throttled: bool = False,
    nscripts: int = 2,
    interval: int = SECOND,
    record: bool = True,
    empty: bool = False,
) -> tuple[RunFacts, list[WorkerResult]]:
    """The facts and the two worker results ``make_result`` merges."""
    scripts = tuple(
        ScriptInfo(f"s{i}.sql", 1, ("select 1", "\\set x 1")) for i in range(nscripts)
    )
    facts = RunFacts(
        pgsurge_version="0.1.0",
        server_version_num=180006,
        server_version="18.6",
        scripts=scripts,
        clients=4,
        threads=2,
        duration_s=3,
        transactions_per_client=None,
        rate=100.0 if throttled else None,
        report_per_command=True,
        max_tries=3,
    )
    workers = []
    shape = [2] * nscripts
    for wid in range(2):
        w = WorkerResult.empty(wid, 2, shape)
        rec = WorkerRecorder(
            w.total, shape, anchor_us=10 * SECOND, interval_us=interval
        )
        if not empty:
            for k in range(300):
                now = 10 * SECOND + k * 10_000 + wid
                if now >= rec.next_us:
                    rec.advance(now)
                script = k % nscripts
                lat = 500 + 37 * k + wid
                if k % 50 == 7:
                    w.total.record(0, failure=FailureKind.DEADLOCK, tries=3)
                    w.per_script[script].record(
                        0, failure=FailureKind.DEADLOCK, tries=3
                    )
                    w.per_command[script][0].failures += 1
                    continue
                lag = 20 + k if throttled else None
                w.total.record(lat, lag)
                w.per_script[script].record(lat, lag)
                w.per_command[script][0].latency.add(lat - 100)
                rec.latency(lat)
                if lag is not None:
                    rec.lag(lag)
                rec.script[script](lat)
                rec.command[script][0](lat - 100)
        if record:
            w.histograms, w.intervals = rec.finish(13 * SECOND + 5000)
        w.conn_start_us, w.bench_start_us, w.end_us = (
            9 * SECOND,
            10 * SECOND,
            13 * SECOND + 5000,
        )
        w.cpu_user_s, w.cpu_sys_s = 0.8, 0.1 * wid
        w.clients_finished = 2
        workers.append(w)
    workers[1].idle_us = 3_000_000
    workers[1].aborted_clients = 1
    workers[1].clients_finished = 1
    workers[1].abort_messages = ["client 3 aborted in command 0 (SQL) of script 0"]
    return facts, workers


RESULT_TEMPLATE = Path(__file__).parent / "data" / "results" / "select-only.json"


def result_doc() -> dict[str, Any]:
    """A fresh copy of the real ``--json`` document ``RESULT_TEMPLATE``."""
    data: dict[str, Any] = json.loads(RESULT_TEMPLATE.read_text())
    return data


def write_result(
    path: Path,
    tps: float,
    *,
    seq: int = 0,
    edit: dict[str, Any] | None = None,
    intervals: list[float] | None = None,
) -> str:
    """A result whose figures scale with ``tps`` (latencies inversely), its
    start ``seq`` minutes into the day; ``edit`` sets dotted fields."""
    doc = result_doc()
    t = doc["totals"]
    factor = t["tps"] / tps
    t["tps"] = tps
    t["latency_ms"]["avg"] *= factor
    t["latency_ms"]["percentiles"] = {
        k: v * factor for k, v in t["latency_ms"]["percentiles"].items()
    }
    doc["client_cpu"]["us_per_transaction"] *= factor
    doc["start"] = f"2026-01-01T10:{seq:02d}:00.000000Z"
    if intervals is not None:
        point = doc["intervals"][1]
        doc["intervals"] = []
        for k, v in enumerate(intervals):
            p = copy.deepcopy(point)
            p.update(offset_s=float(k), duration_s=1.0, processed=int(v), tps=v)
            p["latency_ms"]["avg"] = 2000.0 / v
            p["latency_ms"]["count"] = int(v)
            doc["intervals"].append(p)
    for dotted, value in (edit or {}).items():
        node = doc
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    path.write_text(json.dumps(doc))
    return str(path)


def readme_example() -> str:
    """The example workload of the guide's "Python workloads" page."""
    guide = Path(__file__).resolve().parents[1] / "docs" / "python-workloads.md"
    text = guide.read_text()
    start = text.index("# transfer.py")
    return text[start : text.index("```", start)]
