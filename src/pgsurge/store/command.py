"""``pgsurge history`` and ``pgsurge store import``: argv → store → output → status.

``cli.main`` hands over ``argv`` from the subcommand's name on. Options
are pgsurge's own (argparse); every problem is one line on stderr,
``pgsurge: error: …``, and an exit status:

* 0: done;
* 1: bad arguments, an unreadable store or a bad URI, a file that is not a
  pgsurge result (``store import`` stores the others and names it);
* 3: ``history --fail-on regression`` and the latest change point makes
  the metric worse by more than ``--threshold`` (the runs that show it
  are named).

Also ``save_after_run``, the ``--store`` of a run: called by ``cli`` once
the run's report (and ``--json``/``--html``) are out, so a store that
fails loses nothing the run measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, NoReturn, TextIO

from pgsurge.errors import PROG, PgsurgeError, UsageError
from pgsurge.experiment.command import _percent
from pgsurge.experiment.compare import METRIC_KEYS
from pgsurge.redact import printable
from pgsurge.store.backend import open_store
from pgsurge.store.history import (
    History,
    build_history,
    choose_workload,
    describe_change,
    history_json,
    render_history,
)
from pgsurge.store.location import resolve
from pgsurge.store.records import save_document

__all__ = [
    "EXIT_REGRESSION",
    "history_main",
    "parse_label",
    "save_after_run",
    "store_main",
    "trend_main",
]

#: ``history --fail-on regression`` found one (as ``compare --fail-on``)
EXIT_REGRESSION = 3


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse with one-line ``UsageError``s and no ``sys.exit``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f'{self.prog}: {message} (try "{self.prog} --help")')

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit(status)


def parse_label(text: str, option: str = "--label") -> tuple[str, str]:
    """``K=V`` → (K, V): K non-empty, without "="."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise UsageError(
            f'invalid value "{text}" for option {option}',
            detail="Expecting KEY=VALUE.",
        )
    return key.strip(), value


def _label(text: str) -> tuple[str, str]:
    try:
        return parse_label(text)
    except UsageError:
        raise argparse.ArgumentTypeError(
            f'invalid label "{text}" (expecting KEY=VALUE)'
        ) from None


def _funnel(err: TextIO, func: Any, *args: Any) -> int:
    try:
        return int(func(*args))
    except _Exit as e:
        return e.status
    except PgsurgeError as e:
        err.write(e.format())
        err.flush()
        return int(e.exit_status)


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="PATH|URI",
        default=None,
        help="the results store: a SQLite file or a postgresql:// URI "
        "(default: $PGSURGE_STORE, else the default store in pgsurge's data "
        "directory)",
    )


# -- history --------------------------------------------------------------------


def _history_parser(*, page: bool = False) -> _Parser:
    p = _Parser(
        prog=f"{PROG} report --history" if page else f"{PROG} history",
        description="The stored runs of one workload, newest last, with the "
        "change points of a metric"
        + (", as an HTML page (each run linked to its report)." if page else "."),
        allow_abbrev=False,
    )
    if page:
        p.add_argument(
            "-o",
            "--output",
            required=True,
            metavar="FILE",
            help='the HTML page ("-": stdout); the runs\' reports go to '
            "FILE's name + -runs/",
        )
    _store_option(p)
    p.add_argument(
        "--label",
        metavar="K=V",
        action="append",
        type=_label,
        default=[],
        help="only runs with this label (repeatable: all must match)",
    )
    p.add_argument(
        "--metric",
        choices=METRIC_KEYS,
        default="tps",
        help="the metric shown and searched for changes (default: tps)",
    )
    p.add_argument(
        "--workload",
        metavar="KEY",
        help="the workload (a key or its prefix, as printed); default: the "
        "newest matching run's",
    )
    if page:
        return p
    p.add_argument(
        "--fail-on",
        choices=("regression",),
        help="exit with status 3 when the latest change point makes the "
        "metric worse by more than --threshold",
    )
    p.add_argument(
        "--threshold",
        metavar="PCT",
        type=_percent,
        default=0.02,
        help="the smallest regression --fail-on fails on, in %% (default: 2)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help='write the history as JSON to FILE ("-": stdout, the table then '
        "goes to stderr)",
    )
    return p


def history_main(
    argv: list[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """``pgsurge history …``; ``argv[0]`` is ``"history"``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _history, argv[1:], out, err)


def _select(ns: argparse.Namespace) -> History:
    store = open_store(resolve(ns.store), read_only=True)
    labels = dict(ns.label)
    try:
        key, others = choose_workload(store.workloads(labels), ns.workload)
        runs = [] if key is None else store.runs(labels, key)
    finally:
        store.close()
    if key is None or not runs:
        raise PgsurgeError(
            f"no stored runs match in {store.location.shown}"
            + (" (check --label and --workload)" if ns.label or ns.workload else "")
        )
    return build_history(runs, metric=ns.metric, workload=key, others=others)


def trend_main(
    argv: list[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """``pgsurge report --history …``; ``argv`` starts after ``report``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _trend, [a for a in argv if a != "--history"], out, err)


def _trend(args: list[str], out: TextIO, err: TextIO) -> int:
    from pgsurge.store.trend import write_trend

    ns = _history_parser(page=True).parse_args(args)
    h = _select(ns)
    write_trend(h, ns.output, h.warnings, out)
    return 0


def _history(args: list[str], out: TextIO, err: TextIO) -> int:
    ns = _history_parser().parse_args(args)
    h = _select(ns)
    # (the store's labels are whatever its writers put there)
    text = printable(render_history(h))
    if ns.json is not None:
        doc = json.dumps(history_json(h, ns.threshold), indent=2) + "\n"
        if ns.json == "-":
            out.write(doc)
            out = err  # the table goes to stderr, stdout stays one document
        else:
            # as every --json: whole or not at all, never through another
            # user's symlink (it was a plain open: root's history --json in
            # /tmp wrote wherever a planted link pointed)
            from pgsurge.report.output import write_output

            write_output(doc, ns.json, "history JSON")
    out.write(text)
    out.flush()
    shown = h.warnings[:5]
    for line in shown:
        err.write(f"{PROG}: warning: {line}\n")
    if len(h.warnings) > len(shown):
        err.write(
            f"{PROG}: warning: {len(h.warnings) - len(shown)} more environment "
            "changes\n"
        )
    err.flush()
    if ns.fail_on == "regression":
        bad = h.regression(ns.threshold)
        if bad is not None:
            err.write(
                f"{PROG}: regression beyond {ns.threshold * 100:g} %: "
                f"{describe_change(h, bad)}\n"
            )
            err.flush()
            return EXIT_REGRESSION
        last = h.changes[-1] if h.changes else None
        if last is not None and h.worse(last) and abs(last.change) > ns.threshold:
            err.write(
                f"{PROG}: note: the latest change is worse by "
                f"{abs(last.change) * 100:.1f} %, but its interval reaches within "
                f"{ns.threshold * 100:g} %: not surely a regression beyond it\n"
            )
            err.flush()
    return 0


# -- store import ---------------------------------------------------------------


def _store_parser() -> _Parser:
    p = _Parser(
        prog=f"{PROG} store",
        usage=f"{PROG} store import FILE.json... [--store PATH|URI] [--label K=V]...",
        description="Add --json result files to the results store.",
        allow_abbrev=False,
    )
    p.add_argument("action", choices=("import",))
    p.add_argument("files", nargs="*", metavar="FILE.json")
    _store_option(p)
    p.add_argument(
        "--label",
        metavar="K=V",
        action="append",
        type=_label,
        default=[],
        help="a label for every imported run (repeatable)",
    )
    return p


def store_main(
    argv: list[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """``pgsurge store import …``; ``argv[0]`` is ``"store"``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _store, argv[1:], out, err)


def _read(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise PgsurgeError(f'could not read "{path}": {exc.strerror}') from None
    except (ValueError, UnicodeDecodeError):
        raise PgsurgeError(f'"{path}" is not a pgsurge result (not JSON)') from None


def _store(args: list[str], out: TextIO, err: TextIO) -> int:
    ns = _store_parser().parse_args(args)
    if not ns.files:
        raise UsageError("store import: no files given")
    store = open_store(resolve(ns.store))
    status = 0
    added = same = 0
    try:
        for path in ns.files:
            try:
                doc = _read(path)
                if isinstance(doc, dict) and doc.get("interrupted") is not None:
                    # as run --store: a run cut short is not a run of its
                    # workload (hostile finding: it entered the history)
                    raise PgsurgeError(
                        f"{path}: not stored: the run was interrupted (its "
                        "figures cover part of the run)"
                    )
                run_id, new = save_document(
                    store, doc, name=path, source=path, labels=dict(ns.label)
                )
            except PgsurgeError as e:
                # the others are still imported; this one is named
                err.write(e.format())
                status = 1
                continue
            if new:
                added += 1
                out.write(f"{path}: stored as run {run_id}\n")
            else:
                same += 1
                out.write(f"{path}: already stored as run {run_id}\n")
    finally:
        store.close()
    out.write(f"{added} added, {same} already stored, in {store.location.shown}\n")
    out.flush()
    err.flush()
    return status


# -- a run's --store ------------------------------------------------------------


def save_after_run(doc: Mapping[str, Any], spec: str | None, err: TextIO) -> None:
    """Store a finished run's document (raises ``StoreError`` on failure);
    one line on stderr says where. The labels are the document's (its
    ``--label`` values, masked like the rest of it where they look secret)."""
    store = open_store(resolve(spec))
    try:
        run_id, _ = save_document(store, doc, name="the run's result", source="run")
    finally:
        store.close()
    err.write(f"{PROG}: stored as run {run_id} in {store.location.shown}\n")
    err.flush()
