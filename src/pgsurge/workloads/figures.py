"""The figures a workload's users quote, from a finished run.

A bundled workload names its kind in ``FIGURES``; after the run the
runner calls :func:`workload_figures` with the merged ``RunResult`` and
prints :func:`render_figures` after pgbench's report (the ``--json``
document holds the same values under ``"workload"``). Pure functions of
the result: nothing here talks to the server (the runner reads the
workload's ``COUNTER_QUERY`` before and after the run and passes the
difference).

* ``tpcc``: NOPM, New-Orders committed per minute (HammerDB's figure:
  the growth of ``sum(d_next_o_id)``, which a rolled-back New-Order does
  not move); tpmC, New-Order transactions completed per minute with the
  1 % that roll back included (TPC-C counts a rolled-back New-Order as a
  completed business transaction); TPM, every completed transaction per
  minute; and the New-Order rollbacks (New-Orders completed minus those
  committed).
* ``ycsb``: each operation (one transaction each: read, update, insert,
  scan, read_modify_write) by name, with its count, ops/s and latency
  percentiles p50/p95/p99 and max, as go-ycsb prints them; the counts sum
  to the run's transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgsurge.stats.histogram import Histogram
from pgsurge.stats.results import RunResult

__all__ = ["YCSB_PERCENTILES", "render_figures", "workload_figures"]

#: the percentiles of each YCSB operation (and its max)
YCSB_PERCENTILES = (50.0, 95.0, 99.0)


def workload_figures(
    kind: str,
    result: RunResult,
    names: Sequence[str],
    counter_delta: int | None = None,
) -> dict[str, Any]:
    """The JSON-ready figures of ``kind`` ("tpcc", "ycsb") for ``result``,
    whose scripts are the transactions ``names`` in order."""
    seconds = result.total_duration_us / 1e6
    if kind == "tpcc":
        return _tpcc(result, names, counter_delta, seconds)
    if kind == "ycsb":
        return _ycsb(result, names, seconds)
    raise ValueError(f"unknown figures {kind!r}")


def _per_minute(n: int, seconds: float) -> float | None:
    return 60.0 * n / seconds if seconds > 0 else None


def _script_count(result: RunResult, i: int) -> int:
    """Transaction ``i``'s successes (a run of one: the total; per-script
    counters are kept only when there are several)."""
    if len(result.facts.scripts) == 1:
        return result.total.cnt
    return result.per_script[i].cnt if i < len(result.per_script) else 0


def _tpcc(
    result: RunResult, names: Sequence[str], committed: int | None, seconds: float
) -> dict[str, Any]:
    new_orders = (
        _script_count(result, list(names).index("new_order"))
        if "new_order" in names
        else 0
    )
    doc: dict[str, Any] = {
        "kind": "tpcc",
        "seconds": seconds,
        "new_orders": new_orders,
        "new_orders_committed": committed,
        "new_order_rollbacks": None if committed is None else new_orders - committed,
        "transactions": result.total.cnt,
        "nopm": None if committed is None else _per_minute(committed, seconds),
        "tpmc": _per_minute(new_orders, seconds),
        "tpm": _per_minute(result.total.cnt, seconds),
    }
    return doc


def _hist(result: RunResult, i: int, nscripts: int) -> Histogram | None:
    hists = result.histograms
    if hists is None:
        return None
    if nscripts == 1:
        return hists.latency
    return hists.per_script[i] if i < len(hists.per_script) else None


def _ycsb(result: RunResult, names: Sequence[str], seconds: float) -> dict[str, Any]:
    ops = []
    for i, name in enumerate(names):
        n = _script_count(result, i)
        hist = _hist(result, i, len(names))
        latency: dict[str, float | None] = {f"p{p:g}": None for p in YCSB_PERCENTILES}
        latency["max"] = None
        if hist is not None and hist.count:
            values = hist.percentiles(list(YCSB_PERCENTILES))
            for p, v in zip(YCSB_PERCENTILES, values, strict=True):
                latency[f"p{p:g}"] = v / 1000.0
            latency["max"] = hist.max / 1000.0
        ops.append(
            {
                "name": name,
                "count": n,
                "ops_per_s": n / seconds if seconds > 0 else None,
                "latency_ms": latency,
            }
        )
    return {
        "kind": "ycsb",
        "seconds": seconds,
        "operations": ops,
        "total": sum(o["count"] for o in ops),
    }


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "n/a" if v is None else format(v, fmt)


def render_figures(doc: dict[str, Any]) -> str:
    """The text lines of :func:`workload_figures`'s document."""
    if doc["kind"] == "tpcc":
        lines = [
            f"NOPM (New-Orders committed per minute): {_num(doc['nopm'])}",
            "tpmC (New-Order transactions per minute, rollbacks included): "
            f"{_num(doc['tpmc'])}",
            f"TPM (transactions per minute): {_num(doc['tpm'])}",
        ]
        rollbacks = doc["new_order_rollbacks"]
        if rollbacks is not None:
            share = 100.0 * rollbacks / doc["new_orders"] if doc["new_orders"] else 0.0
            lines.append(
                f"New-Order rollbacks: {rollbacks} ({share:.1f}% of New-Orders)"
            )
        return "".join(line + "\n" for line in lines)
    lines = ["YCSB operations:"]
    for op in doc["operations"]:
        lat = op["latency_ms"]
        figures = ", ".join(f"{k} = {_num(v, '.3f')} ms" for k, v in lat.items())
        lines.append(
            f"  {op['name']}: {op['count']} ops, {_num(op['ops_per_s'])} ops/s, "
            f"{figures}"
        )
    return "".join(line + "\n" for line in lines)
