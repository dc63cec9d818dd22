"""``pgsurge sweep``: argv → plan → runs → table, JSON, HTML → exit status.

Parsed like ``pgsurge ab`` (``command.py``: its arms, the ``--``
separator, one ``pgsurge: error: …`` line and status 1 for bad input, 2
when a run aborted, 130 after Ctrl-C, with what finished reported):

    pgsurge sweep --vary "-c 1,2,4,8" [--vary …] [--runs N] [--warmup N]
        [--a ARGS] [--b ARGS] [--a-env N=V] [--b-env N=V] [--checkpoint]
        [--out DIR | --resume DIR] [--json FILE] [--html FILE]
        [--threshold PCT] [--confidence LEVEL] [--knee-gain PCT]
        -- COMMON PGSURGE ARGS

Every (cell, arm)'s arguments are read as its runs will read them before
the first run, so a bad value in the last cell is no surprise after an
hour. ``--resume DIR`` alone rebuilds the plan from the directory's
manifest (refused when the manifest had to mask a password: then give the
same arguments again with ``--resume``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from pgsurge.errors import PROG, PgsurgeError, UsageError
from pgsurge.experiment.ab import Arm, Interrupted, write_private
from pgsurge.experiment.command import (
    EXIT_INTERRUPTED,
    RunArgsCheck,
    _checked_out_dir,
    _confidence,
    _emit,
    _env,
    _funnel,
    _out_dir,
    _Parser,
    _percent,
    _split_ab_argv,
    _words,
    check_output_paths,
    check_own_arguments,
)
from pgsurge.experiment.grid import Vary, parse_vary
from pgsurge.experiment.knee import DEFAULT_GAIN
from pgsurge.experiment.sweep import (
    Sweep,
    SweepPlan,
    cell_arm,
    load_manifest,
    resumed_records,
)
from pgsurge.experiment.sweep_report import (
    cell_results,
    find_knees,
    sweep_json,
    sweep_text,
)
from pgsurge.redact import MASK, redact_env, redact_words

__all__ = ["sweep_main"]

_VALUE_OPTIONS = ("--a", "--b", "--a-env", "--b-env", "--vary")


def _parser() -> _Parser:
    p = _Parser(
        prog=f"{PROG} sweep",
        usage=f'{PROG} sweep --vary "OPTION v1,v2,…" [--vary …] [OPTION]... '
        "-- [COMMON PGSURGE ARGS]...",
        description="Run a grid of configurations: N runs per grid point (and "
        "arm), interleaved round by round, each `pgsurge COMMON-ARGS ARM-ARGS "
        "CELL-ARGS --json FILE` in its own process; then one row per grid "
        "point with tps and its interval, p99, client CPU, and with two arms "
        "the ratio and verdict; the knee when -c is varied.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar='"OPTION v1,v2"',
        help='a varied option: "-c 1,2,4", "-M simple,prepared", "-s 1,10" '
        '(re-initializes per scale), "SET work_mem 4MB,64MB" (a server setting '
        'via PGOPTIONS), "NAME v1,v2" (an environment variable); repeatable',
    )
    p.add_argument(
        "--runs",
        type=int,
        # None: not given (a --resume takes the manifest's; a new sweep 3)
        default=None,
        metavar="N",
        help="runs per cell and arm (default: 3)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help="discarded warm-up runs before each cell and arm's first run (default: 1)",
    )
    p.add_argument(
        "--a", default=None, metavar="ARGS", help="arm A's own pgsurge arguments"
    )
    p.add_argument(
        "--b", default=None, metavar="ARGS", help="arm B's own pgsurge arguments"
    )
    p.add_argument(
        "--a-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for arm A's runs (repeatable)",
    )
    p.add_argument(
        "--b-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for arm B's runs (repeatable; makes an arm B)",
    )
    p.add_argument(
        "--checkpoint",
        action="store_true",
        help="CHECKPOINT the arm's server before each counted run",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="directory for the runs and the manifest "
        "(default: a new pgsurge-sweep-TIMESTAMP)",
    )
    p.add_argument(
        "--resume", metavar="DIR", help="run what the sweep in DIR is missing"
    )
    p.add_argument(
        "--json", metavar="FILE", help='write the sweep as JSON to FILE ("-": stdout)'
    )
    p.add_argument("--html", metavar="FILE", help="write the sweep's charts to FILE")
    p.add_argument(
        "--threshold",
        metavar="PCT",
        type=_percent,
        default=0.02,
        help="practical threshold of the verdicts (default: 2)",
    )
    p.add_argument(
        "--confidence",
        metavar="LEVEL",
        type=_confidence,
        default=0.95,
        help="confidence level of the intervals (default: 95)",
    )
    p.add_argument(
        "--knee-gain",
        metavar="PCT",
        type=_percent,
        default=DEFAULT_GAIN,
        help="the knee: the fewest clients within PCT %% of the peak tps (default: 10)",
    )
    return p


def _arms(ns: argparse.Namespace) -> list[Arm]:
    arms = [Arm("A", ns.a or "", _words(ns.a or "", "--a"), _env(ns.a_env, "--a-env"))]
    if ns.b is not None or ns.b_env:
        arms.append(
            Arm("B", ns.b or "", _words(ns.b or "", "--b"), _env(ns.b_env, "--b-env"))
        )
    return arms


def _validate(plan: SweepPlan, check: RunArgsCheck) -> SweepPlan:
    """Every (cell, arm) read as its runs will read it; the arms get where
    they connect (for --checkpoint and a varied scale)."""
    arms = []
    for arm in plan.arms:
        conn, embedded = None, False
        for cell in plan.grid:
            run = cell_arm(arm, cell)
            try:
                conn, embedded = check(
                    [*plan.common, *run.args], os.environ | dict(run.env)
                )
            except PgsurgeError as e:
                raise UsageError(
                    f"arm {arm.name} at {cell.key(plan.specs)}: {e.message}",
                    detail=e.detail,
                    hint=e.hint,
                ) from None
        arms.append(replace(arm, conn=conn, force_embedded=embedded))
    return replace(plan, arms=tuple(arms))


def _from_manifest(doc: dict[str, Any]) -> tuple[list[Vary], list[Arm], list[str]]:
    try:
        specs = [
            Vary(str(v["kind"]), str(v["name"]), tuple(str(x) for x in v["values"]))
            for v in doc["vary"]
        ]
        arms = [
            Arm(
                str(a["name"]),
                shlex.join(a["argv"]),
                tuple(str(x) for x in a["argv"]),
                {str(k): str(v) for k, v in a["env"].items()},
            )
            for a in doc["arms"]
        ]
        common = [str(x) for x in doc["common"]]
    except (KeyError, TypeError) as exc:
        raise PgsurgeError(f"--resume: the manifest lacks {exc}") from None
    words = [*common, *(w for a in arms for w in a.args)]
    words += [v for a in arms for v in a.env.values()]
    words += [x for s in specs for x in s.values]
    if any(MASK in w for w in words):
        raise UsageError(
            "--resume: the manifest masked a password: give the sweep's arguments "
            "again with --resume DIR"
        )
    return specs, arms, common


def _same_as_manifest(
    specs: Sequence[Vary],
    arms: Sequence[Arm],
    common: Sequence[str],
    manifest: dict[str, Any],
) -> None:
    """Arguments given with ``--resume`` must be the sweep's own: the runs
    kept are merged with the new ones cell by cell, so another grid, other
    common arguments or another arm (a B of ``synchronous_commit=off``
    resumed as one of ``work_mem=1MB``) would put runs of two experiments
    in one cell, under the new arm's name, and the verdict would compare
    what never ran together."""
    differs = []
    if [s.to_dict() for s in specs] != manifest.get("vary"):
        differs.append("--vary")
    if redact_words(common) != manifest.get("common"):
        differs.append("the common arguments")
    theirs = manifest.get("arms")
    mine = [
        {"name": a.name, "argv": redact_words(a.args), "env": redact_env(a.env)}
        for a in arms
    ]
    if not isinstance(theirs, list) or mine != [
        {k: a.get(k) for k in ("name", "argv", "env")} if isinstance(a, dict) else a
        for a in theirs
    ]:
        differs.append("the arms")
    if differs:
        raise UsageError(
            f"--resume: {' and '.join(differs)} differ from the sweep's manifest "
            "(give the same arguments, or none: --resume DIR alone)"
        )


#: an option's spelling -> the option it means (its short letter or long
#: name), as the run's command line reads it; the spelling itself when
#: the command line does not know it (the run's check then says so)
OptionKey = Callable[[str], str]


def _same_options(specs: Sequence[Vary], option_key: OptionKey) -> None:
    """Two ``--vary`` specs of one option under two spellings (``-c`` and
    ``--client``, or an abbreviation) would each set it, the last one
    winning in every run: refused, naming both."""
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.kind not in ("option", "scale"):
            continue
        key = option_key(spec.name)
        if key in seen and seen[key] != spec.name:
            raise UsageError(
                f'--vary: "{seen[key]}" and "{spec.name}" are the same option'
            )
        seen[key] = spec.name


#: the options a run's arguments give (``-nc4``: ``n`` and ``c``), as the
#: run's command line reads them
OptionKeys = Callable[[Sequence[str]], set[str]]


def _not_given_elsewhere(
    specs: Sequence[Vary],
    arms: Sequence[Arm],
    common: Sequence[str],
    option_key: OptionKey,
    option_keys: OptionKeys,
) -> None:
    """A varied option (or environment variable) that the common arguments
    or an arm give too: the cell's value comes last and wins in every run,
    so ``--a "-c 8"`` ran -c 1, 2, 4 under the name "A: -c 8" and the
    common ``-c 4`` was dropped without a word. Refused, naming both."""
    varied = {
        option_key(s.name): s.name for s in specs if s.kind in ("option", "scale")
    }
    places: list[tuple[str, Sequence[str]]] = [("the common arguments give", common)]
    places += [(f"--{a.name.lower()} gives", a.args) for a in arms]
    for where, words in places:
        clash = sorted(option_keys(words) & varied.keys())
        if clash:
            name = varied[clash[0]]
            raise UsageError(
                f'--vary "{name} …": {where} {name} too '
                "(each cell's value would win): drop it there"
            )
    for spec in specs:
        if spec.kind != "setting":
            continue
        # PGOPTIONS "-c work_mem=1MB" (or "--work-mem=1MB"): the cell's
        # setting goes after it and wins, under the arm's name
        said = re.compile(
            r"(?:-c\s*|--)" + re.escape(spec.name).replace("_", "[-_]") + r"\s*=",
            re.IGNORECASE,
        )
        for arm in arms:
            if said.search(arm.env.get("PGOPTIONS", "")):
                raise UsageError(
                    f'--vary "SET {spec.name} …": --{arm.name.lower()}-env '
                    f"PGOPTIONS sets {spec.name} too (each cell's value would "
                    "win): drop it there"
                )
    names = {s.name for s in specs if s.kind == "env"}
    for arm in arms:
        both = sorted(names & arm.env.keys())
        if both:
            raise UsageError(
                f'--vary "{both[0]} …": --{arm.name.lower()}-env sets {both[0]} too '
                "(each cell's value would win): drop it there"
            )


#: runs per cell and arm, and warm-up runs, when not given
_RUNS = 3
_WARMUP = 1


def _same_protocol(
    ns: argparse.Namespace, runs: int, warmup: int, checkpoint: bool
) -> None:
    """``--runs``, ``--warmup`` or ``--checkpoint`` given with ``--resume``
    must be the sweep's own: the manifest's were used and the ones given
    silently ignored (or, for ``--checkpoint``, cells mixed runs measured
    after a CHECKPOINT with runs that were not)."""
    differs = []
    if ns.runs is not None and ns.runs != runs:
        differs.append(f"--runs {ns.runs} (the sweep has {runs})")
    if ns.warmup is not None and ns.warmup != warmup:
        differs.append(f"--warmup {ns.warmup} (the sweep has {warmup})")
    if ns.checkpoint and not checkpoint:
        differs.append("--checkpoint (the sweep has none)")
    if differs:
        raise UsageError(
            f"--resume: {' and '.join(differs)} differ from the sweep's manifest "
            "(give the same, or none)"
        )


def _plan(
    ns: argparse.Namespace,
    common: list[str],
    check: RunArgsCheck | None,
    option_key: OptionKey | None = None,
    option_keys: OptionKeys | None = None,
) -> tuple[SweepPlan, dict[str, Any] | None]:
    if ns.runs is not None and ns.runs < 1:
        raise UsageError("--runs must be at least 1")
    if ns.warmup is not None and ns.warmup < 0:
        raise UsageError("--warmup must be 0 or more")
    manifest = None
    if ns.resume is not None:
        if ns.out is not None:
            raise UsageError("--resume DIR writes to DIR: drop --out")
        out = _checked_out_dir(Path(ns.resume), ns.resume, resume=True)
        manifest = load_manifest(out)
        given_arms = ns.a is not None or ns.b is not None or ns.a_env or ns.b_env
        if ns.vary or common or given_arms:
            specs = [parse_vary(v) for v in ns.vary]
            arms = _arms(ns)
            _same_as_manifest(specs, arms, common, manifest)
        else:
            specs, arms, common = _from_manifest(manifest)
        runs = int(manifest.get("runs_per_cell") or ns.runs or _RUNS)
        warmup = int(manifest.get("warmup") or 0)
        checkpoint = bool(manifest.get("checkpoint"))
        _same_protocol(ns, runs, warmup, checkpoint)
    else:
        if not ns.vary:
            raise UsageError('no --vary given (e.g. --vary "-c 1,2,4")')
        specs = [parse_vary(v) for v in ns.vary]
        arms = _arms(ns)
        runs = _RUNS if ns.runs is None else ns.runs
        warmup = _WARMUP if ns.warmup is None else ns.warmup
        checkpoint = ns.checkpoint
        out = Path()
    check_own_arguments("sweep", arms, common)
    if option_key is not None:
        _same_options(specs, option_key)
        if option_keys is not None:
            _not_given_elsewhere(specs, arms, common, option_key, option_keys)
    plan = SweepPlan(
        specs=tuple(specs),
        arms=tuple(arms),
        common=tuple(common),
        runs=runs,
        warmup=warmup,
        checkpoint=checkpoint,
        out_dir=out,
    )
    plan.grid  # noqa: B018  (the grid's own checks, before anything is created)
    if check is not None:
        plan = _validate(plan, check)
    elif any(s.kind == "scale" for s in specs) or checkpoint:
        raise UsageError("--vary -s and --checkpoint need the arms' servers")
    if manifest is None:
        plan = replace(plan, out_dir=_out_dir(ns.out, "pgsurge-sweep"))
    return plan, manifest


def sweep_main(
    argv: list[str],
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    check_args: RunArgsCheck | None = None,
    option_key: OptionKey | None = None,
    option_keys: OptionKeys | None = None,
) -> int:
    """``pgsurge sweep …``; ``argv[0]`` is ``"sweep"``. ``option_key``
    names the option a spelling means (``-c``, ``--client``, ``--cli``:
    the same), from the command line's own table."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _sweep, argv, out, err, check_args, option_key, option_keys)


def _sweep(
    argv: list[str],
    out: TextIO,
    err: TextIO,
    check: RunArgsCheck | None,
    option_key: OptionKey | None = None,
    option_keys: OptionKeys | None = None,
) -> int:
    own, common = _split_ab_argv(argv[1:], _VALUE_OPTIONS)
    ns = _parser().parse_args(own)
    check_output_paths(json=ns.json, html=ns.html)
    plan, manifest = _plan(ns, common, check, option_key, option_keys)
    lock = _hold(plan.out_dir)
    try:
        return _sweep_held(plan, manifest, ns, argv, out, err)
    finally:
        os.close(lock)


def _hold(out_dir: Path) -> int:
    """An exclusive lock on the sweep's directory for as long as the sweep
    runs (on the directory itself: no file left behind; its runs do not
    inherit it). A ``--resume DIR`` of a sweep still running (from another
    terminal) ran the same missing runs at the same time: each loaded the
    server under the other's runs, both wrote the same files and the
    manifest, and the table mixed them; it is refused."""
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise PgsurgeError(
            f"{out_dir} is in use by another pgsurge sweep that is still running"
        ) from None
    return fd


def _sweep_held(
    plan: SweepPlan,
    manifest: dict[str, Any] | None,
    ns: argparse.Namespace,
    argv: list[str],
    out: TextIO,
    err: TextIO,
) -> int:
    resumed = resumed_records(plan.out_dir, manifest) if manifest else []
    progress = err if ns.json == "-" else out
    sweep = Sweep(
        plan, argv=[PROG, *argv], stdout=progress, stderr=err, resumed=resumed
    )
    n_cells = len(sweep.grid)
    total = n_cells * len(plan.arms) * plan.runs
    arms = " vs ".join(f"{a.name}: {a.describe()}" for a in plan.arms)
    progress.write(
        f"pgsurge sweep: {n_cells} grid point{'s' if n_cells != 1 else ''} × "
        f"{len(plan.arms)} arm{'s' if len(plan.arms) > 1 else ''} × {plan.runs} "
        f"run{'s' if plan.runs > 1 else ''} = {total} runs"
        + (f" ({len(resumed)} already done)" if manifest else "")
        + f", {plan.warmup} warm-up per cell and arm; {arms}; common: "
        f"{shlex.join(redact_words(plan.common)) or '(none)'}; results in "
        f"{plan.out_dir}{os.sep}\n"
    )
    progress.flush()
    interrupted = False
    failure: PgsurgeError | None = None
    try:
        sweep.run()
    except Interrupted:
        interrupted = True
    except PgsurgeError as e:
        # a run failed (the server went away): the table of what finished
        # is still printed and written, as after Ctrl-C (--resume reruns
        # the rest)
        failure = e
        err.write(e.format())
        err.flush()
    if failure is not None:
        if any(sweep.cell_runs(c.index, a.name) for c in sweep.grid for a in plan.arms):
            with suppress(PgsurgeError):  # the same cause (a full disk): said
                report(sweep, ns, out, err)
        return int(failure.exit_status)
    status = report(sweep, ns, out, err)
    return EXIT_INTERRUPTED if interrupted else status


def report(sweep: Sweep, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The table and the documents of what finished."""
    plan = sweep.sweep
    names = [a.name for a in plan.arms]
    runs = {
        (c.index, a): sweep.cell_runs(c.index, a) for c in sweep.grid for a in names
    }
    if not any(runs.values()):
        err.write("pgsurge sweep: no run finished: nothing to report\n")
        return 0
    results = cell_results(
        sweep.grid, names, runs, confidence=ns.confidence, threshold=ns.threshold
    )
    knees = find_knees(plan.specs, results, confidence=ns.confidence, gain=ns.knee_gain)
    waits = any(r.waits for rs in runs.values() for r in rs)
    text = sweep_text(plan.specs, results, knees, confidence=ns.confidence, waits=waits)
    doc = sweep_json(
        plan.specs,
        results,
        knees,
        confidence=ns.confidence,
        threshold=ns.threshold,
        manifest=sweep.manifest(),
    )
    (err if ns.json == "-" else out).write("\n")
    # the directory's copies first: a --json that cannot be written leaves
    # them (--resume DIR --json FILE reports again, running nothing)
    write_private(plan.out_dir / "sweep.txt", text)
    write_private(plan.out_dir / "sweep.json", json.dumps(doc, indent=2) + "\n")
    _emit(text, doc, ns.json, out, err)
    if ns.html:
        from pgsurge.report.command import write_html
        from pgsurge.report.sweep_html import render_sweep_html

        write_html(render_sweep_html(doc), ns.html)
    return 0
