"""``pgsurge capacity``: the highest ``-R`` rate that meets a latency target.

An open-model search, one ``pgsurge COMMON-ARGS -R RATE --json FILE``
process per probe (``ab``'s machinery: ``Experiment``, its output
directory, masking, 0700/0600, Ctrl-C). A rate **passes** when its run's
latency percentile (``--latency p99=10ms``; ``avg`` too) is within the
target and the run kept up with its schedule (the result's ``rate_check``,
``report/rate.py``: no growing lag, at most 5 % skipped).

1. Without ``--max-rate``, one closed-loop run (no ``-R``) measures the
   throughput T the server gives these clients; no rate above it can be
   sustained, and the search's ceiling is 1.25 T.
2. Step up: from ``--min-rate`` (default ceiling / 8), doubling, until a
   rate fails (or the ceiling passes).
   A failing run is run once more: a rate fails when both runs fail (a
   stall of a loaded machine is not taken for the server's limit).
3. Bisect between the highest passing and the lowest failing rate until
   they are within ``--precision`` (default 5 %); the highest passing rate
   is that repetition's capacity.
4. ``--repeat N`` (default 3) repetitions; the later ones start from a
   bracket around the median so far (checked, widened by steps when it
   does not hold). The answer is the median capacity with the interval of
   the typical repetition (``knee.arm_interval``: t on log values) and the
   latency measured at that rate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from pgsurge.errors import PROG, PgsurgeError, UsageError
from pgsurge.experiment.ab import (
    Arm,
    Experiment,
    Interrupted,
    Plan,
    RunRecord,
    write_private,
)
from pgsurge.experiment.command import (
    EXIT_INTERRUPTED,
    RunArgsCheck,
    _confidence,
    _emit,
    _funnel,
    _out_dir,
    _own_label_keys,
    _Parser,
    _percent,
    _split_ab_argv,
    check_output_paths,
)
from pgsurge.experiment.knee import arm_interval
from pgsurge.experiment.render import fmt_value
from pgsurge.redact import redact_words

__all__ = ["Target", "capacity_main", "parse_target"]

_TARGET = re.compile(r"(p\d+(?:\.\d+)?|avg)=(\d+(?:\.\d+)?)(us|ms|s)\Z")
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}
_RATE_OPTIONS = ("-R", "--rate")


@dataclass(frozen=True, slots=True)
class Target:
    """A latency target: a percentile (or the average) and its bound."""

    #: "99", "95", … (the JSON's percentile labels) or "avg"
    stat: str
    ms: float

    @property
    def label(self) -> str:
        return "avg" if self.stat == "avg" else f"p{self.stat}"


def parse_target(text: str) -> Target:
    m = _TARGET.match(text.strip())
    if not m:
        raise UsageError(
            '--latency: expected e.g. "p99=10ms" (p50, p75, p90, p95, p99, '
            f'p99.9, p99.99 or avg; us, ms or s), got "{text}"'
        )
    stat = m.group(1).removeprefix("p")
    if stat != "avg" and float(stat) >= 100:
        raise UsageError(f'--latency: percentile out of range in "{text}"')
    if stat != "avg":
        # the probes read the percentile from each run's JSON, which has
        # these only: another one (p99.999, p50.5, p99.0 spelt so) was
        # never found, every probe "missed the target" and the search
        # answered "no rate met … lower --min-rate"
        from pgsurge.report.json import JSON_PERCENTILES

        known = {f"{p:g}": p for p in JSON_PERCENTILES if p < 100}
        key = f"{float(stat):g}"
        if key not in known:
            raise UsageError(
                f'--latency: a run reports no percentile {stat} in "{text}" '
                f"(p{', p'.join(known)} or avg)"
            )
        stat = key
    bound = float(m.group(2)) * _UNIT_MS[m.group(3)]
    if bound <= 0:
        raise UsageError(f'--latency: the bound must be above zero in "{text}"')
    return Target(stat, bound)


@dataclass(slots=True)
class Probe:
    rate: float
    file: str
    tps: float | None
    latency_ms: float | None
    sustained: bool
    reason: str | None
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "file": self.file,
            "tps": self.tps,
            "latency_ms": self.latency_ms,
            "sustained": self.sustained,
            "not_sustained_reason": self.reason,
            "passed": self.passed,
        }


@dataclass(slots=True)
class Repetition:
    probes: list[Probe] = field(default_factory=list)
    capacity: float | None = None
    #: "ok", "below-min" (the lowest rate failed), "above-max" (none failed)
    bound: str = "ok"


class Search(Experiment):
    """Runs the probes of a capacity search (see the module docstring)."""

    command = "capacity"

    def __init__(
        self,
        plan: Plan,
        target: Target,
        *,
        min_rate: float | None,
        max_rate: float | None,
        repeat: int,
        precision: float,
        argv: list[str],
        stdout: TextIO,
        stderr: TextIO,
    ) -> None:
        super().__init__(plan, argv=argv, stdout=stdout, stderr=stderr)
        self.target = target
        self.min_rate, self.max_rate = min_rate, max_rate
        self.repeat, self.precision = repeat, precision
        self.reps: list[Repetition] = []
        self.closed_tps: float | None = None
        self._seq = 0

    def manifest(self) -> dict[str, Any]:
        doc = super().manifest()
        doc["kind"] = "pgsurge-capacity"
        return doc

    def _run(self, rate: float | None) -> tuple[float | None, dict[str, Any]]:
        self._seq += 1
        tag = f"probe-{self._seq:03d}" + (f"-R{rate:g}" if rate else "-closed")
        args = ("-R", f"{rate:g}") if rate else ()
        arm = Arm("A", "", args, {})
        rec = RunRecord(self._seq, "A", False, f"{tag}.json", f"{tag}.log")
        label = f"rate {fmt_value(rate)} tps" if rate else "closed loop (no -R)"
        self._step(arm, rec, label)
        doc = json.loads((self.plan.out_dir / rec.file).read_text(encoding="utf-8"))
        return (rec.summary.tps if rec.summary else None), doc

    def probe(self, rate: float, rep: Repetition) -> bool:
        """Whether ``rate`` passes: a failing run is run again, and the rate
        fails only when both do (a stall of a loaded machine fails one run;
        it must not end a step-up far below the capacity)."""
        if self._probe_once(rate, rep):
            return True
        self.out.write("    again, to confirm:\n")
        return self._probe_once(rate, rep)

    def _probe_once(self, rate: float, rep: Repetition) -> bool:
        tps, doc = self._run(rate)
        lat = (doc.get("totals") or {}).get("latency_ms") or {}
        value = (
            lat.get("avg")
            if self.target.stat == "avg"
            else (lat.get("percentiles") or {}).get(self.target.stat)
        )
        check = doc.get("rate_check") or {}
        sustained = bool(check.get("sustained", True))
        ok = isinstance(value, (int, float)) and value <= self.target.ms and sustained
        rep.probes.append(
            Probe(
                rate,
                self.records[-1].file,
                tps,
                value,
                sustained,
                check.get("reason"),
                ok,
            )
        )
        verdict = (
            "meets the target"
            if ok
            else ("rate not sustained" if not sustained else "misses the target")
        )
        self.out.write(f"    {self.target.label} {fmt_value(value)} ms: {verdict}\n")
        self.out.flush()
        return ok

    def _search(
        self, rep: Repetition, start: float, ceiling: float, factor: float
    ) -> None:
        """Step up from ``start`` (times ``factor``) to a failing rate, then
        bisect down to ``precision``."""
        passed: float | None = None
        failed: float | None = None
        rate = start
        while True:
            if self.probe(rate, rep):
                passed = rate
                if rate >= ceiling:
                    break
                # rates go in steps of 0.1 tps: a step that rounds back to
                # the same rate (0.1 × 1.3) would probe it for ever
                rate = min(max(round(rate * factor, 1), round(rate + 0.1, 1)), ceiling)
            else:
                failed = rate
                break
        if passed is None:
            rep.bound = "below-min"
            return
        if failed is None:
            rep.capacity, rep.bound = passed, "above-max"
            return
        while failed - passed > self.precision * passed:
            mid = round((passed + failed) / 2, 1)
            if not passed < mid < failed:
                # no rate of 0.1 tps steps between them: below 2 tps the 5 %
                # bracket is narrower than a step, and the same rate was
                # probed again for ever
                break
            if self.probe(mid, rep):
                passed = mid
            else:
                failed = mid
        rep.capacity = passed

    def run(self) -> None:
        with self.running():
            ceiling = self.max_rate
            if ceiling is None:
                self.closed_tps, _ = self._run(None)
                if not self.closed_tps:
                    raise PgsurgeError("the closed-loop run processed nothing")
                ceiling = round(1.25 * self.closed_tps, 1)
            start = (
                self.min_rate
                if self.min_rate is not None
                # never -R 0 (an unthrottled run)
                else max(round(ceiling / 8, 1), min(0.1, ceiling))
            )
            for k in range(self.repeat):
                rep = Repetition()
                self.reps.append(rep)
                self.out.write(f"repetition {k + 1}/{self.repeat}\n")
                done = [r.capacity for r in self.reps if r.capacity]
                if done:
                    # around the median so far: a short step up, then bisect
                    mid = float(np.median(done))
                    lo = max(start, round(mid * (1 - 3 * self.precision), 1))
                    self._search(rep, lo, ceiling, 1 + 6 * self.precision)
                    if rep.bound == "below-min" and lo > start:
                        rep.probes.clear()
                        rep.bound = "ok"
                        self._search(rep, start, ceiling, 2.0)
                else:
                    self._search(rep, start, ceiling, 2.0)

    def result(self, confidence: float) -> dict[str, Any]:
        caps = [r.capacity for r in self.reps if r.capacity]
        median = float(np.median(caps)) if caps else None
        # a repetition in which even the lowest rate failed found a capacity
        # below every rate tried: it counts in the median as such, and no
        # interval can be had (hostile finding: it was dropped, and two
        # repetitions of three answered "sustainable rate 119 tps (95 %
        # interval …)" beside one that met the target at no rate at all)
        below = sum(
            1 for r in self.reps if r.capacity is None and r.bound == "below-min"
        )
        if below and caps:
            ordered = [-math.inf] * below + sorted(caps)
            # the lower median: the middle pair's mean would sit between
            # a capacity and a value never measured
            low_median = ordered[(len(ordered) - 1) // 2]
            median = None if low_median == -math.inf else float(low_median)
        at = [
            float(p.latency_ms)
            for r in self.reps
            for p in r.probes
            if p.passed
            and p.latency_ms is not None
            and r.capacity is not None
            and p.rate == r.capacity
        ]
        # a rate passes when one of its two tries does: the runs at the
        # capacities that missed are said too (the answer quoted the p99 of
        # the passing one alone, 46.2 ms, beside a miss of 81.9 ms there)
        missed = [
            float(p.latency_ms) if p.latency_ms is not None else None
            for r in self.reps
            for p in r.probes
            if not p.passed and r.capacity is not None and p.rate == r.capacity
        ]
        # a repetition that met the target at the ceiling found no limit:
        # its "capacity" is only a lower bound, and when the median is one,
        # so is the answer (an interval of ceilings, 100.0–100.0, claimed
        # a precision the probes never had)
        ceiling = max(
            (r.capacity for r in self.reps if r.bound == "above-max" and r.capacity),
            default=None,
        )
        at_least = ceiling is not None and median is not None and median >= ceiling
        ci = (
            arm_interval(caps, confidence)
            if len(caps) >= 2 and not at_least and not below
            else None
        )
        return {
            "schema": 1,
            "kind": "pgsurge-capacity-result",
            "target": {"stat": self.target.label, "ms": self.target.ms},
            "confidence": confidence,
            "closed_loop_tps": self.closed_tps,
            "capacity": median,
            "capacity_is_lower_bound": at_least,
            "repetitions_below_min": below,
            "interval": list(ci) if ci else None,
            "latency_at_capacity_ms": float(np.median(at)) if at else None,
            "runs_at_capacity": len(at) + len(missed),
            "missed_at_capacity_ms": missed,
            "repetitions": [
                {
                    "capacity": r.capacity,
                    "bound": r.bound,
                    "probes": [p.to_dict() for p in r.probes],
                }
                for r in self.reps
            ],
            "state": self.state,
            "common": redact_words(self.plan.common),
        }


def render(doc: dict[str, Any]) -> str:
    t = doc["target"]
    cap = doc["capacity"]
    if cap is None and doc["state"] != "finished":
        return f"no repetition finished ({doc['state']}): no answer\n"
    below = doc.get("repetitions_below_min") or 0
    reps = len(doc["repetitions"])
    if cap is None:
        where = f" in {below} of {reps} repetitions" if 0 < below < reps else ""
        return (
            f"no rate met {t['stat']} ≤ {t['ms']:g} ms (even the lowest tried)"
            f"{where}: lower --min-rate\n"
        )
    ci = doc["interval"]
    pct = f"{doc['confidence'] * 100:g} %"
    interval = f" ({pct} interval {fmt_value(ci[0])}–{fmt_value(ci[1])})" if ci else ""
    head = f"sustainable rate {fmt_value(cap)} tps{interval}"
    if doc.get("capacity_is_lower_bound"):
        head = (
            f"sustainable rate at least {fmt_value(cap)} tps (the ceiling: the "
            "target was met at the highest rate tried; raise --max-rate)"
        )
    lines = [
        f"{head}; {t['stat']} at that rate "
        f"{fmt_value(doc['latency_at_capacity_ms'])} ms (target {t['ms']:g} ms)"
        + _misses(doc)
        + (
            f"; {below} of {reps} repetitions met it at no rate tried (the "
            "median counts them below the lowest; no interval)"
            if below
            else ""
        ),
        "repetitions: "
        + ", ".join(
            fmt_value(r["capacity"])
            + (" (the ceiling)" if r["bound"] == "above-max" else "")
            for r in doc["repetitions"]
        ),
    ]
    if doc["state"] != "finished":
        lines.append(f"({doc['state']}: from the repetitions that finished)")
    if doc["closed_loop_tps"]:
        lines.append(f"closed loop (no -R): {fmt_value(doc['closed_loop_tps'])} tps")
    return "\n".join(lines) + "\n"


def _misses(doc: dict[str, Any]) -> str:
    """The runs at the capacities that missed the target (a rate passes
    when one of its two tries does)."""
    missed = doc.get("missed_at_capacity_ms") or []
    if not missed:
        return ""
    worst = max((m for m in missed if m is not None), default=None)
    return f"; {len(missed)} of {doc['runs_at_capacity']} runs there missed it" + (
        f" (up to {fmt_value(worst)} ms)" if worst is not None else ""
    )


def as_sweep(doc: dict[str, Any]) -> dict[str, Any]:
    """The probes as a sweep over ``-R`` (one cell per offered rate, its
    achieved tps and latency per probe), for the sweep page's charts:
    latency and throughput against the offered rate."""
    by_rate: dict[float, list[dict[str, Any]]] = {}
    for rep in doc["repetitions"]:
        for p in rep["probes"]:
            by_rate.setdefault(p["rate"], []).append(p)
    rates = sorted(by_rate)
    cells = []
    for i, rate in enumerate(rates):
        tps = [p["tps"] for p in by_rate[rate] if p["tps"] is not None]
        lat = [p["latency_ms"] for p in by_rate[rate] if p["latency_ms"] is not None]
        cells.append(
            {
                "cell": i,
                "values": {"-R": f"{rate:g}"},
                "arms": {
                    "A": {
                        "tps": {
                            "values": tps,
                            "median": float(np.median(tps)) if tps else None,
                            "ci": None,
                        },
                        "p99_ms": {
                            "values": lat,
                            "median": float(np.median(lat)) if lat else None,
                        },
                    }
                },
                "comparison": None,
            }
        )
    return {
        "kind": "pgsurge-capacity-probes",
        "confidence": doc["confidence"],
        "vary": [{"kind": "option", "name": "-R", "values": [f"{r:g}" for r in rates]}],
        "cells": cells,
        "knees": [],
        "common": doc.get("common", []),
    }


def _parser() -> _Parser:
    p = _Parser(
        prog=f"{PROG} capacity",
        usage=f"{PROG} capacity --latency p99=10ms [OPTION]... -- COMMON PGSURGE ARGS",
        description="Find the highest -R rate whose runs meet a latency target and "
        "keep up with their schedule: step up, then bisect; repeated.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--latency",
        required=True,
        metavar="pNN=TIME",
        help="the target, e.g. p99=10ms, p95=2.5ms, avg=1ms",
    )
    p.add_argument(
        "--min-rate",
        type=float,
        metavar="TPS",
        help="the first rate tried (default: an eighth of the ceiling)",
    )
    p.add_argument(
        "--max-rate",
        type=float,
        metavar="TPS",
        help="the ceiling (default: 1.25 times a closed-loop run's tps)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="repetitions of the search (default: 3)",
    )
    p.add_argument(
        "--precision",
        type=_percent,
        default=0.05,
        metavar="PCT",
        help="bisect until the bracket is within PCT %% (default: 5)",
    )
    p.add_argument(
        "--confidence",
        type=_confidence,
        default=0.95,
        metavar="LEVEL",
        help="confidence level of the interval (default: 95)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="directory for the probes' results "
        "(default: a new pgsurge-capacity-TIMESTAMP)",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="write the curves of latency and tps against the offered rate to FILE",
    )
    p.add_argument(
        "--json", metavar="FILE", help='write the result as JSON to FILE ("-": stdout)'
    )
    return p


def _refuse_repeats(parser: _Parser, own: list[str]) -> None:
    """One search, one target: an option of capacity's own given twice is
    refused (argparse would silently keep the last one)."""
    seen: set[str] = set()
    for arg in own:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name in parser._option_string_actions and name not in ("-h", "--help"):
            if name in seen:
                raise UsageError(f"{name} given twice")
            seen.add(name)


def capacity_main(
    argv: list[str],
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    check_args: RunArgsCheck | None = None,
    option_keys: Callable[[Sequence[str]], set[str]] | None = None,
) -> int:
    """``pgsurge capacity …``; ``argv[0]`` is ``"capacity"``.
    ``option_keys`` names the options a run's arguments give (``T`` for
    ``-T``), from the command line's own table."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _capacity, argv, out, err, check_args, option_keys)


def _capacity(
    argv: list[str],
    out: TextIO,
    err: TextIO,
    check: RunArgsCheck | None,
    option_keys: Callable[[Sequence[str]], set[str]] | None = None,
) -> int:
    own, common = _split_ab_argv(argv[1:], ())
    parser = _parser()
    _refuse_repeats(parser, own)
    ns = parser.parse_args(own)
    target = parse_target(ns.latency)
    if any(a in _RATE_OPTIONS or a.startswith(("--rate=", "-R")) for a in common):
        raise UsageError("capacity chooses -R itself: drop it from the arguments")
    if any(a == "--json" or a.startswith("--json=") for a in common):
        raise UsageError("capacity writes each run's --json itself: drop it")
    taken = _own_label_keys(common, ("arm", "capacity"))
    if taken:
        raise UsageError(
            f'capacity labels each run with "{taken}" itself: drop --label {taken}=…'
        )
    if ns.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    check_output_paths(json=ns.json, html=ns.html)
    for name in ("min_rate", "max_rate"):
        v = getattr(ns, name)
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number")
    if ns.min_rate and ns.max_rate and ns.min_rate > ns.max_rate:
        raise UsageError("--min-rate is above --max-rate")
    if check is not None:
        try:
            check([*common, "-R", "1"], dict(os.environ))
        except PgsurgeError as e:
            raise UsageError(
                f"the arguments: {e.message}", detail=e.detail, hint=e.hint
            ) from None
    if option_keys is not None and "T" not in option_keys(common):
        # a probe of -t transactions (pgbench's default: 10 per client) lasts
        # as long as the rate makes it: at 2 000 tps a few milliseconds, a
        # p99 of ten transactions, no interval for the schedule check, and
        # the rate passed whatever the clients achieved
        raise UsageError(
            "capacity needs a duration: give -T SEC among the common arguments"
        )
    plan = Plan(
        arms=(Arm("A", "", (), {}),),
        common=tuple(common),
        runs=1,
        warmup=0,
        order="abab",
        checkpoint=False,
        out_dir=_out_dir(ns.out, "pgsurge-capacity"),
    )
    progress = err if ns.json == "-" else out
    progress.write(
        f"pgsurge capacity: the highest -R with {target.label} ≤ {target.ms:g} ms and "
        f"the schedule kept, {ns.repeat} repetition{'s' if ns.repeat > 1 else ''}; "
        f"common: {shlex.join(redact_words(common)) or '(none)'}; results in "
        f"{plan.out_dir}{os.sep}\n"
    )
    search = Search(
        plan,
        target,
        min_rate=ns.min_rate,
        max_rate=ns.max_rate,
        repeat=ns.repeat,
        precision=ns.precision,
        argv=[PROG, *argv],
        stdout=progress,
        stderr=err,
    )
    interrupted = False
    failure: PgsurgeError | None = None
    try:
        search.run()
    except Interrupted:
        interrupted = True
    except PgsurgeError as e:
        # a probe failed (the server went away): what the repetitions
        # before it found is still reported, as after Ctrl-C (it was lost,
        # --json and capacity.json unwritten)
        failure = e
        err.write(e.format())
        err.flush()
    if failure is not None:
        if search.reps:
            with suppress(PgsurgeError):  # the same cause (a full disk): said
                _capacity_report(search, ns, target, plan, progress, out, err)
        return int(failure.exit_status)
    _capacity_report(search, ns, target, plan, progress, out, err)
    return EXIT_INTERRUPTED if interrupted else 0


def _capacity_report(
    search: Search,
    ns: argparse.Namespace,
    target: Target,
    plan: Plan,
    progress: TextIO,
    out: TextIO,
    err: TextIO,
) -> None:
    """The answer of what finished: printed, ``--json``, capacity.json,
    ``--html``."""
    doc = search.result(ns.confidence)
    text = render(doc)
    progress.write("\n")
    write_private(
        Path(plan.out_dir) / "capacity.json", json.dumps(doc, indent=2) + "\n"
    )
    _emit(text, doc, ns.json, out, err)
    if ns.html and doc["repetitions"]:
        from pgsurge.report.command import write_html
        from pgsurge.report.sweep_html import render_sweep_html

        page = render_sweep_html(
            as_sweep(doc),
            title=f"pgsurge capacity: {target.label} ≤ {target.ms:g} ms",
            latency=target.label,
            target_ms=target.ms,
        )
        write_html(page, ns.html)
