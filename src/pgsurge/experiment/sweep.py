"""``pgsurge sweep``: the runs of a grid of configurations, resumable.

A ``SweepPlan`` is ``ab``'s plan (one or two arms, the common arguments,
runs, warm-up, ``--checkpoint``, the output directory) plus the ``--vary``
specs whose product is the grid (``grid.py``). ``Sweep`` runs it with
``ab``'s machinery (``Experiment``: one ``python -m pgsurge`` process per
run, its JSON and log under the output directory, 0700/0600, everything
written passed through ``pgsurge.redact``, Ctrl-C stops after the current
run and a second one discards it):

1. the counted runs in ``grid.rounds`` order: round after round, each
   round running every (cell, arm) once, rotated, so that the machine's
   drift falls on every cell and arm alike;
2. before a (cell, arm)'s first counted run in this process, its warm-up
   run(s) (``--warmup N``, default 1), discarded: the first run after a
   change of clients or settings pays for connections and caches;
3. with a varied scale, ``pgsurge -i -s N`` on each arm's server before the
   first run of that scale (once per scale and server in this process);
4. ``manifest.json`` rewritten after each run: the plan (masked), and each
   run's cell, round, arm, file and status.

``--resume DIR`` reads the manifest, keeps the runs whose status is ok and
whose file is still there, and runs the rest (with the warm-ups and the
re-initialization they need). Run files are named after their place in the
grid (``c02-A-r3.json``), so a resumed sweep writes the same names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pgsurge import __version__
from pgsurge.errors import PgsurgeError
from pgsurge.experiment.ab import (
    FILE_MODE,
    Arm,
    Experiment,
    Interrupted,
    Plan,
    RunRecord,
    die_with_us,
    write_private,
)
from pgsurge.experiment.grid import Cell, Vary, cells, rounds
from pgsurge.experiment.results import RunSummary, load_result, workload_differences
from pgsurge.redact import MASK, redact_echo, redact_env, redact_text, redact_words

__all__ = ["Sweep", "SweepPlan", "SweepRecord", "load_manifest"]

MANIFEST = "manifest.json"
KIND = "pgsurge-sweep"


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """A sweep, validated (``sweep_command.py`` builds it)."""

    specs: tuple[Vary, ...]
    arms: tuple[Arm, ...]
    common: tuple[str, ...]
    runs: int
    warmup: int
    checkpoint: bool
    out_dir: Path

    @property
    def grid(self) -> list[Cell]:
        return cells(self.specs)

    def ab_plan(self) -> Plan:
        return Plan(
            arms=self.arms,
            common=self.common,
            runs=self.runs,
            warmup=self.warmup,
            order="abba",
            checkpoint=self.checkpoint,
            out_dir=self.out_dir,
        )


@dataclass(slots=True)
class SweepRecord(RunRecord):
    """A run of the sweep: ``RunRecord`` with its grid point and round."""

    cell: int = 0
    round: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, "round": self.round, **RunRecord.to_dict(self)}


def cell_arm(arm: Arm, cell: Cell) -> Arm:
    """The arm as it runs in ``cell``: its arguments then the cell's, its
    environment with the cell's on top."""
    return Arm(
        arm.name,
        arm.text,
        (*arm.args, *cell.args),
        cell.run_env(arm.env),
        arm.conn,
        arm.force_embedded,
    )


class Sweep(Experiment):
    """Runs a ``SweepPlan``; ``records`` are its runs (resumed ones first)."""

    command = "sweep"

    def __init__(
        self,
        plan: SweepPlan,
        *,
        argv: Sequence[str] = (),
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        resumed: Sequence[SweepRecord] = (),
    ) -> None:
        super().__init__(plan.ab_plan(), argv=argv, stdout=stdout, stderr=stderr)
        self.sweep = plan
        self.grid = plan.grid
        self.records.extend(resumed)
        #: how many runs this process ran (resume tests count them)
        self.ran = 0

    # -- the manifest ---------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        p = self.sweep
        specs = list(p.specs)
        return {
            "schema": 1,
            "kind": KIND,
            "pgsurge": __version__,
            "command": self._command(),
            "vary": [s.to_dict() for s in specs],
            "cells": [
                {
                    "cell": c.index,
                    "values": list(c.values),
                    "args": redact_words(c.args),
                    "env": redact_env(c.env),
                    "key": c.key(specs),
                }
                for c in self.grid
            ],
            "arms": [
                {
                    "name": a.name,
                    "argv": redact_words(a.args),
                    "env": redact_env(a.env),
                    "describe": a.describe(),
                }
                for a in p.arms
            ],
            "common": redact_words(p.common),
            "runs_per_cell": p.runs,
            "warmup": p.warmup,
            "checkpoint": p.checkpoint,
            "state": self.state,
            "runs": [r.to_dict() for r in self.records],
        }

    def _command(self) -> list[str]:
        """The command line, masked, a secret ``--vary`` value too (the
        word ``PGPASSWORD a,b`` has no ``NAME=`` for ``redact_words``)."""
        hidden = sorted(
            (
                (raw, shown)
                for s in self.sweep.specs
                for raw, shown in zip(s.values, s.shown, strict=True)
                if raw != shown
            ),
            key=lambda pair: -len(pair[0]),
        )
        words = []
        for word in self.argv:
            for raw, shown in hidden:
                word = word.replace(raw, MASK if " #" in shown else shown)
            words.append(word)
        return redact_words(words)

    def _tag_result(self, path: Path, arm: Arm) -> None:
        super()._tag_result(path, arm)
        rec = self.records[-1]
        if not isinstance(rec, SweepRecord):
            return
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(doc, dict) and isinstance(doc.get("experiment"), dict):
            cell = self.grid[rec.cell]
            doc["experiment"]["cell"] = {
                "index": cell.index,
                "values": dict(
                    zip([s.label for s in self.sweep.specs], cell.values, strict=True)
                ),
            }
            doc["experiment"]["round"] = rec.round
            tmp = path.with_suffix(".json.tmp")
            tmp.unlink(missing_ok=True)
            write_private(tmp, json.dumps(doc, indent=2, allow_nan=False) + "\n")
            os.replace(tmp, path)

    # -- scale ----------------------------------------------------------------

    def _init_scale(self, scale: int, done: set[tuple[tuple[str, str], ...]]) -> None:
        """``pgsurge -i -s SCALE`` on each arm's server (once per server)."""
        for arm in self.sweep.arms:
            env = self._env(arm)
            target = self._target(arm, env)
            if target is None:
                raise PgsurgeError("--vary -s: the arms' servers are not known")
            items = target.conninfo_items()
            key = tuple(sorted(items.items()))
            if key in done:
                continue
            dbname = items.get("dbname") or ""
            libpq = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER"}
            init_env = env | {libpq[k]: v for k, v in items.items() if k in libpq}
            where: list[str] = []
            if "=" in dbname or "://" in dbname:
                # a connection string: as the argument (libpq expands only
                # that), unless it holds a password (argv is public)
                if redact_text(dbname) != dbname:
                    raise PgsurgeError(
                        "--vary -s: the connection string holds a password; give "
                        "it by PGPASSWORD or a password file"
                    )
                where = [dbname]
            elif dbname:
                init_env["PGDATABASE"] = dbname
            log = self.sweep.out_dir / f"init-s{scale}-{arm.name}.log"
            self.out.write(f"initializing scale {scale} for arm {arm.name}\n")
            self.out.flush()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            with open(fd, "wb") as f:
                rc = subprocess.call(
                    [
                        self.python,
                        "-m",
                        "pgsurge",
                        "-i",
                        "-q",
                        "-s",
                        str(scale),
                        *where,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=init_env,
                    preexec_fn=die_with_us(),  # (ab runs no thread: fork-safe)
                )
            if rc != 0:
                raise PgsurgeError(
                    f"initializing scale {scale} failed with exit status {rc}: "
                    f"{redact_echo(self._last_error(log), where)}"
                )
            done.add(key)

    # -- running --------------------------------------------------------------

    def _name(self, cell: Cell, arm: Arm, tag: str) -> str:
        width = len(str(len(self.grid)))
        return f"c{cell.index + 1:0{width}d}-{arm.name}-{tag}"

    def _counted(self) -> set[tuple[int, int, str]]:
        return {
            (r.round, r.cell, r.arm)
            for r in self.records
            if isinstance(r, SweepRecord) and not r.warmup and r.status == "ok"
        }

    def run(self) -> None:
        """Execute the missing runs of the plan (see ``Experiment.run``)."""
        p = self.sweep
        order = rounds(self.grid, len(p.arms), p.runs)
        done = self._counted()
        todo = [x for x in order if (x[0], x[1], p.arms[x[2]].name) not in done]
        seq = max((r.seq for r in self.records), default=0)
        warmed: set[tuple[int, str]] = set()
        scale: int | None = None
        inited: set[tuple[tuple[str, str], ...]] = set()
        total = len(order)
        k = len(order) - len(todo)
        with self.running():
            for rnd, ci, ai in todo:
                cell, base = self.grid[ci], p.arms[ai]
                arm = cell_arm(base, cell)
                if cell.scale is not None and cell.scale != scale:
                    self._flush_pending()
                    if self._stop:
                        raise Interrupted
                    inited.clear()
                    self._init_scale(cell.scale, inited)
                    scale = cell.scale
                key = cell.key(p.specs)
                if (ci, arm.name) not in warmed:
                    for w in range(p.warmup):
                        seq += 1
                        name = self._name(cell, arm, f"warmup{w + 1}")
                        rec = SweepRecord(
                            seq,
                            arm.name,
                            True,
                            f"{name}.json",
                            f"{name}.log",
                            cell=ci,
                            round=-1,
                        )
                        self._step(arm, rec, f"warm-up  {key}  {arm.name}")
                        self._same_workload(rec, key)
                    warmed.add((ci, arm.name))
                seq += 1
                k += 1
                name = self._name(cell, arm, f"r{rnd + 1}")
                rec = SweepRecord(
                    seq,
                    arm.name,
                    False,
                    f"{name}.json",
                    f"{name}.log",
                    cell=ci,
                    round=rnd,
                )
                self._step(arm, rec, f"run {k}/{total}  {key}  {arm.name}")
                self.ran += 1
                self._same_workload(rec, key)

    def _same_workload(self, rec: SweepRecord, key: str) -> None:
        """A run whose workload differs from the cell's other runs (a script
        edited since a ``--resume``d sweep began, another server): its
        figures would be pooled with runs of something else (a resumed
        ``SELECT 1`` cell took a ``pg_sleep`` run into its median and
        interval). The run is set aside and the sweep stops."""
        if rec.summary is None:
            return
        others = [
            r.summary
            for r in self.records
            if isinstance(r, SweepRecord)
            and r is not rec
            and r.cell == rec.cell
            and r.arm == rec.arm
            and r.summary is not None
        ]
        if not others:
            return
        diff = workload_differences(others[0].workload, rec.summary.workload)
        if not diff:
            return
        rec.summary = None
        rec.status = "different workload"
        self.write_manifest()
        raise PgsurgeError(
            f"{rec.file} ({key}, arm {rec.arm}): its workload differs from the "
            f"cell's earlier runs ({'; '.join(diff)}); the scripts or the server "
            "changed since: start a new sweep"
        )

    def cell_runs(self, cell: int, arm: str) -> list[RunSummary]:
        """The finished counted runs of ``cell`` and ``arm``, in run order."""
        return [
            r.summary
            for r in self.records
            if isinstance(r, SweepRecord)
            and r.cell == cell
            and r.arm == arm
            and not r.warmup
            and r.summary is not None
        ]


def load_manifest(out_dir: Path) -> dict[str, Any]:
    """A sweep's manifest; a ``PgsurgeError`` when it is none."""
    path = out_dir / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PgsurgeError(
            f'--resume: could not read "{path}": {exc.strerror or exc}'
        ) from None
    except ValueError:
        raise PgsurgeError(f'--resume: "{path}" is not JSON') from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise PgsurgeError(f'--resume: "{path}" is not a pgsurge sweep manifest')
    return doc


def resumed_records(out_dir: Path, doc: Mapping[str, Any]) -> list[SweepRecord]:
    """The counted runs of a manifest that finished and whose result is
    still readable; the files of the others are removed (they re-run)."""
    kept: list[SweepRecord] = []
    for run in doc.get("runs") or []:
        if not isinstance(run, dict):
            continue
        name = str(run.get("file"))
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            # a name of the sweep's own making, never a path: an edited
            # manifest would otherwise have a resume remove any file
            raise PgsurgeError(f'--resume: the manifest names a run file "{name}"')
        path = out_dir / name
        ok = run.get("status") == "ok" and not run.get("warmup") and path.is_file()
        summary = None
        if ok:
            try:
                summary = load_result(str(path))
            except PgsurgeError:
                ok = False
        if not ok:
            if not run.get("warmup"):
                path.unlink(missing_ok=True)
            continue
        kept.append(
            SweepRecord(
                seq=int(run["seq"]),
                arm=str(run["arm"]),
                warmup=False,
                file=str(run["file"]),
                log=str(run["log"]),
                status="ok",
                exit_status=run.get("exit_status"),
                started=run.get("started"),
                ended=run.get("ended"),
                summary=summary,
                cell=int(run["cell"]),
                round=int(run["round"]),
            )
        )
    return kept
