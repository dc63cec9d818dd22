"""Loading ``--json`` result documents into the values a comparison needs.

``load_result(path)`` reads one file and returns a ``RunSummary``: the
per-run figures (tps, latency average and percentiles from the run's own
histogram, failures, client CPU per transaction), the per-interval series
for the single-run fallback, and the ``Workload`` two compared runs must
share. Every problem with a file is a one-line ``PgsurgeError`` naming it:
unreadable, not JSON, not a pgsurge result, a newer schema than this
pgsurge reads, a field missing. ``check_distinct`` refuses a run given
twice (the same file under two names, or a copy of it): compared with
itself it would show no spread and a confident verdict on nothing.

The document layout is ``pgsurge/report/result.schema.json`` (schema 1).
This module reads it without importing the report package: results are
files, possibly written by another pgsurge version, and the experiment
layer sits beside the run machinery, not on top of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pgsurge.errors import PgsurgeError
from pgsurge.experiment.fingerprint import fingerprint

__all__ = [
    "READ_SCHEMA",
    "WORKLOAD_FIELDS",
    "Interval",
    "RunSummary",
    "Workload",
    "check_distinct",
    "load_result",
    "workload_differences",
]

#: the newest result schema this module reads (report/json.py SCHEMA_VERSION)
READ_SCHEMA = 1


class ResultError(PgsurgeError):
    """A result file that cannot be used (exit status 1)."""


@dataclass(frozen=True, slots=True)
class Script:
    """A script as the result records it: its description, weight and the
    text of each command (what makes two runs run the same thing)."""

    desc: str
    weight: int
    commands: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    """What must be equal for two runs to be comparable."""

    scripts: tuple[Script, ...]
    scale: int
    partitions: int
    clients: int
    jobs: int
    query_mode: str
    rate: float | None
    duration_s: int | None
    transactions: int | None
    connect_each_tx: bool
    max_tries: int
    latency_limit_ms: float | None
    defines: tuple[tuple[str, str], ...]
    server_version: str


#: Workload attribute → how a message names it (data, not code)
WORKLOAD_FIELDS: Mapping[str, str] = {
    "scripts": "script texts",
    "scale": "scale",
    "partitions": "partitions",
    "clients": "-c",
    "jobs": "-j",
    "query_mode": "-M",
    "rate": "-R",
    "duration_s": "-T",
    "transactions": "-t",
    "connect_each_tx": "-C",
    "max_tries": "--max-tries",
    "latency_limit_ms": "-L",
    "defines": "-D",
    "server_version": "server version",
}
assert set(WORKLOAD_FIELDS) == {f.name for f in fields(Workload)}


@dataclass(frozen=True, slots=True)
class Interval:
    """One point of the per-interval series (latencies in ms)."""

    duration_s: float
    processed: int
    latency_count: int
    latency_avg_ms: float | None
    percentiles: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One finished run, as a comparison sees it."""

    path: str
    start: str | None
    tps: float | None
    latency_avg_ms: float | None
    #: "50", "90", "99" → ms, from the run's own histogram
    percentiles: Mapping[str, float]
    transactions: int
    failed: int
    cpu_us_per_tx: float | None
    aborted: bool
    workload: Workload
    intervals: tuple[Interval, ...]
    #: a run cut short by a signal: e.g. "interrupted by SIGINT after 1.3 s"
    #: (its figures cover that part alone); None for a whole run
    interrupted: str | None = None
    #: ``--waits``: each wait event's share of the run's samples
    #: (``Type:Event``, ``CPU``); empty without the option
    waits: Mapping[str, float] = field(default_factory=dict)
    #: ``pgsurge ab``'s record of the run's arm (its ``experiment``
    #: section: arm, args, env, common; masked), None for other runs
    arm: Mapping[str, Any] | None = None
    #: the run's client CPU says the client may have been the bottleneck
    client_limited: bool = False
    #: the run's per-interval tps trended (``steady_state.steady`` false)
    unsteady: bool = False
    #: a ``-R`` run that did not keep up with its schedule
    #: (``rate_check.sustained`` false): its latencies measure the backlog
    rate_unsustained: bool = False
    #: the run's --warmup seconds: its series starts with the measured
    #: window (no start-up in its first interval)
    warmup_s: int = 0
    #: what tells a run given twice: the file (device, inode) and the
    #: SHA-256 of its bytes (None when not read from a file)
    file_id: tuple[int, int] | None = None
    digest: str | None = None
    #: the counted fields of the run's environment (``fingerprint``), None
    #: for a document without one
    fingerprint: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def _fmt(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _describe(name: str, a: Any, b: Any) -> str:
    label = WORKLOAD_FIELDS[name]
    if name == "scripts":
        da = ", ".join(f"{s.desc}@{s.weight}" for s in a)
        db = ", ".join(f"{s.desc}@{s.weight}" for s in b)
        if da == db:
            return f"{label} differ ({da})"
        return f"{label}: {da} vs {db}"
    if name == "defines":
        return f"{label}: {dict(a) or 'none'} vs {dict(b) or 'none'}"
    return f"{label} {_fmt(a)} vs {_fmt(b)}"


def workload_differences(a: Workload, b: Workload) -> list[str]:
    """What differs between two workloads, one phrase per field, e.g.
    ``"scale 1 vs 10"``; empty when they are the same."""
    return [
        _describe(name, getattr(a, name), getattr(b, name))
        for name in WORKLOAD_FIELDS
        if getattr(a, name) != getattr(b, name)
    ]


class _Doc:
    """Typed access to a parsed document; a missing or mistyped field is a
    ``ResultError`` naming the file and the field."""

    def __init__(self, path: str, data: Mapping[str, Any]) -> None:
        self.path = path
        self.data = data

    def get(self, dotted: str, types: type | tuple[type, ...]) -> Any:
        node: Any = self.data
        for key in dotted.split("."):
            if not isinstance(node, Mapping) or key not in node:
                raise ResultError(
                    f'"{self.path}" is not a valid pgsurge result: missing {dotted}'
                )
            node = node[key]
        ok = isinstance(node, types) and not (
            isinstance(node, bool) and bool not in _as_tuple(types)
        )
        # Python's json reads NaN and Infinity, which pgsurge never writes:
        # a hand-edited or foreign file, whose figure would be dropped as
        # "not in every result" or reach a verdict
        if isinstance(node, float) and not math.isfinite(node):
            ok = False
        if not ok:
            raise ResultError(
                f'"{self.path}" is not a valid pgsurge result: bad value of {dotted}'
            )
        return node


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))
_OPT_DICT = (dict, type(None))


def _percentiles(summary: Mapping[str, Any] | None) -> dict[str, float]:
    if not summary:
        return {}
    pct = summary.get("percentiles")
    if not isinstance(pct, Mapping):
        return {}
    return {
        k: float(v)
        for k, v in pct.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _workload(doc: _Doc) -> Workload:
    scripts = []
    for i, s in enumerate(doc.get("scripts", list)):
        sd = _Doc(doc.path, s if isinstance(s, Mapping) else {})
        lines = tuple(
            str(c.get("line", "")) if isinstance(c, Mapping) else ""
            for c in sd.get("commands", list)
        )
        try:
            scripts.append(Script(sd.get("desc", str), sd.get("weight", int), lines))
        except ResultError:
            raise ResultError(
                f'"{doc.path}" is not a valid pgsurge result: bad scripts[{i}]'
            ) from None
    defines = doc.get("config.defines", dict)
    return Workload(
        scripts=tuple(scripts),
        scale=doc.get("run.scale", int),
        partitions=doc.get("run.partitions", int),
        clients=doc.get("config.clients", int),
        jobs=doc.get("config.jobs", int),
        query_mode=doc.get("config.query_mode", str),
        rate=doc.get("config.rate", _OPT_NUM),
        duration_s=doc.get("config.duration_s", _OPT_INT),
        transactions=doc.get("config.transactions", _OPT_INT),
        connect_each_tx=doc.get("config.connect_each_tx", bool),
        max_tries=doc.get("config.max_tries", int),
        latency_limit_ms=doc.get("config.latency_limit_ms", _OPT_NUM),
        defines=tuple(sorted((str(k), str(v)) for k, v in defines.items())),
        server_version=doc.get("server.version", str),
    )


def _intervals(doc: _Doc) -> tuple[Interval, ...]:
    out = []
    for point in doc.get("intervals", list):
        if not isinstance(point, Mapping):
            continue
        lat = point.get("latency_ms")
        lat = lat if isinstance(lat, Mapping) else {}
        avg = lat.get("avg")
        out.append(
            Interval(
                duration_s=float(point.get("duration_s") or 0.0),
                processed=int(point.get("processed") or 0),
                latency_count=int(lat.get("count") or 0),
                latency_avg_ms=float(avg) if isinstance(avg, (int, float)) else None,
                percentiles=_percentiles(lat),
            )
        )
    return tuple(out)


def parse_result(path: str, data: object) -> RunSummary:
    """A ``RunSummary`` of an already parsed document (``path`` names it in
    messages)."""
    if not isinstance(data, Mapping):
        raise ResultError(f'"{path}" is not a pgsurge result')
    tool = data.get("tool")
    schema = data.get("schema")
    if (
        not isinstance(tool, Mapping)
        or tool.get("name") != "pgsurge"
        or not isinstance(schema, int)
        or isinstance(schema, bool)
        or schema < 1
    ):
        raise ResultError(f'"{path}" is not a pgsurge result')
    if schema > READ_SCHEMA:
        raise ResultError(
            f'"{path}" has result schema {schema}, newer than this pgsurge reads '
            f"({READ_SCHEMA}): upgrade pgsurge"
        )
    doc = _Doc(path, data)
    latency = doc.get("totals.latency_ms", _OPT_DICT)
    cpu = data.get("client_cpu")
    cpu_tx = cpu.get("us_per_transaction") if isinstance(cpu, Mapping) else None
    start = data.get("start")
    tps = doc.get("totals.tps", _OPT_NUM)
    if tps is not None and tps < 0:
        raise ResultError(
            f'"{path}" is not a valid pgsurge result: bad value of totals.tps'
        )
    avg = latency.get("avg") if latency else None
    return RunSummary(
        path=path,
        start=start if isinstance(start, str) else None,
        tps=float(tps) if tps is not None else None,
        latency_avg_ms=float(avg) if isinstance(avg, (int, float)) else None,
        percentiles=_percentiles(latency),
        transactions=doc.get("totals.transactions", int),
        failed=doc.get("totals.failed", int),
        cpu_us_per_tx=float(cpu_tx) if isinstance(cpu_tx, (int, float)) else None,
        aborted=bool(data.get("aborted", False)),
        interrupted=_interrupted(data.get("interrupted")),
        workload=_workload(doc),
        intervals=_intervals(doc),
        waits=_waits(data.get("waits")),
        arm=_arm(data.get("experiment")),
        unsteady=isinstance(data.get("steady_state"), Mapping)
        and data["steady_state"].get("steady") is False,
        rate_unsustained=isinstance(data.get("rate_check"), Mapping)
        and data["rate_check"].get("sustained") is False,
        warmup_s=int(data["warmup_s"])
        if isinstance(data.get("warmup_s"), int) and data["warmup_s"] > 0
        else 0,
        client_limited=bool(cpu.get("client_limited"))
        if isinstance(cpu, Mapping)
        else False,
        fingerprint=fingerprint(data),
    )


def _interrupted(section: object) -> str | None:
    """How a run was cut short (its ``interrupted`` section), or None."""
    if section is None:
        return None
    what = "interrupted"
    if isinstance(section, Mapping):
        sig, after = section.get("signal"), section.get("after_s")
        if isinstance(sig, str):
            what += f" by {sig}"
        if isinstance(after, (int, float)) and not isinstance(after, bool):
            what += f" after {after:.3g} s"
    return what


def _arm(section: object) -> Mapping[str, Any] | None:
    """The ``experiment`` section when it has the expected shape."""
    if not isinstance(section, Mapping):
        return None
    args, env = section.get("args"), section.get("env")
    if not isinstance(args, list) or not isinstance(env, Mapping):
        return None
    return {
        "arm": str(section.get("arm") or ""),
        "args": [str(a) for a in args],
        "env": {str(k): str(v) for k, v in env.items()},
    }


def _waits(waits: object) -> dict[str, float]:
    """``waits.events`` of a document as label → share (lenient: an older
    or foreign section is no error, only no wait events)."""
    events = waits.get("events") if isinstance(waits, Mapping) else None
    out: dict[str, float] = {}
    for e in events if isinstance(events, list) else []:
        share = e.get("share") if isinstance(e, Mapping) else None
        if isinstance(share, (int, float)) and not isinstance(share, bool):
            label = f"{e.get('type', '')}:{e.get('event', '')}".strip(":")
            out[label] = float(share)
    return out


def load_result(path: str) -> RunSummary:
    """Read and check one result file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
            st = os.fstat(f.fileno())
        text = raw.decode("utf-8")
    except OSError as exc:
        raise ResultError(
            f'could not read "{path}": {exc.strerror or exc.__class__.__name__}'
        ) from None
    except UnicodeDecodeError:
        raise ResultError(f'"{path}" is not a pgsurge result (not text)') from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ResultError(f'"{path}" is not a pgsurge result (not JSON)') from None
    summary = parse_result(path, data)
    return dataclasses.replace(
        summary,
        file_id=(st.st_dev, st.st_ino),
        digest=hashlib.sha256(raw).hexdigest(),
    )


def _same_run(a: RunSummary, b: RunSummary) -> str | None:
    """Why ``a`` and ``b`` are the same run, or None."""
    if a.file_id is not None and a.file_id == b.file_id:
        return "the same file"
    if a.digest is not None and a.digest == b.digest:
        return "identical contents"
    same = (a.start, a.transactions, a.tps, a.workload)
    if a.start is not None and same == (b.start, b.transactions, b.tps, b.workload):
        # a copy edited afterwards (ab's experiment section, a reformat):
        # two runs do not start in the same microsecond with the same counts
        return f"the same start time {a.start} and figures"
    return None


def check_distinct(runs: Sequence[RunSummary]) -> None:
    """Refuse a run that appears twice among ``runs`` (on either side)."""
    for i, a in enumerate(runs):
        for b in runs[:i]:
            why = _same_run(b, a)
            if why is not None:
                raise ResultError(
                    f'"{b.path}" and "{a.path}" are the same run ({why}): '
                    "give each run once"
                )


def load_results(paths: Sequence[str]) -> list[RunSummary]:
    """``load_result`` of each path, in order."""
    return [load_result(p) for p in paths]
