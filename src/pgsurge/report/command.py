"""``pgsurge report RESULT.json [MORE.json …] [--vs B.json …] -o report.html``.

Reads ``--json`` result documents and writes the self-contained HTML report
of ``report.html`` (``-o -``: stdout). Files before ``--vs`` are side A,
files after it side B; with both sides the page has a verdict card. Bad
input (a missing or unreadable file, a file that is not a pgsurge result,
a result of a newer schema, bad options) ends with one line on stderr and
exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, TextIO

from pgsurge.errors import PROG, PgsurgeError, UsageError
from pgsurge.report.html import RunDoc, render_html
from pgsurge.report.output import write_output
from pgsurge.report.verdict import DEFAULT_THRESHOLD

__all__ = ["load_result", "report_main", "write_html"]

#: the result schema versions this renderer understands
_SCHEMAS = (1,)


class _Parser(argparse.ArgumentParser):
    """argparse that raises our one-line error instead of exiting 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"report: {message}")


def _parser() -> _Parser:
    p = _Parser(
        prog=f"{PROG} report",
        description="Write a self-contained HTML report of --json results.",
        epilog="Files before --vs are side A; with --vs the report compares B "
        "with A (faint per-run lines, bold medians, a verdict on tps).",
    )
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="side A")
    p.add_argument(
        "--vs", nargs="+", default=[], metavar="B.json", help="side B (compare)"
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help='the HTML file to write ("-": stdout)',
    )
    p.add_argument("--title", help="the page title")
    p.add_argument(
        "--threshold",
        type=float,
        default=100 * DEFAULT_THRESHOLD,
        metavar="PCT",
        help="band of no practical difference, in percent (default: %(default)g)",
    )
    return p


def load_result(path: str) -> dict[str, Any]:
    """A result document from ``path``; ``PgsurgeError`` if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise PgsurgeError(
            f'could not read "{path}": {os.strerror(exc.errno or 0)}'
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PgsurgeError(f'"{path}" is not JSON: {exc}') from None
    if not isinstance(doc, dict) or _tool_name(doc) != "pgsurge":
        raise PgsurgeError(f'"{path}" is not a pgsurge result')
    schema = doc.get("schema")
    if not isinstance(schema, int) or schema not in _SCHEMAS:
        if isinstance(schema, int) and schema > max(_SCHEMAS):
            raise PgsurgeError(
                f'"{path}" is a result of schema {schema}, newer than this '
                f"pgsurge reads ({max(_SCHEMAS)}): upgrade pgsurge"
            )
        raise PgsurgeError(f'"{path}" is not a pgsurge result (schema {schema!r})')
    return doc


def _identity(path: str, doc: Mapping[str, Any]) -> tuple[object, ...]:
    """What tells one run from another: the file, its contents, or (for an
    edited copy) its start time with its totals."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return (None, None, None)
    start = doc.get("start")
    totals = doc.get("totals")
    figures = (
        (start, json.dumps(totals, sort_keys=True))
        if isinstance(start, str) and isinstance(totals, dict)
        else None
    )
    return ((st.st_dev, st.st_ino), digest, figures)


def _check_distinct(paths: Sequence[str], docs: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a run given twice in a comparison (as ``pgsurge compare``
    does): the same runs on both sides gave the card a verdict on a run
    against itself (hostile finding)."""
    seen: list[tuple[str, tuple[object, ...]]] = []
    for path, doc in zip(paths, docs, strict=True):
        ident = _identity(path, doc)
        for other, known in seen:
            if any(a is not None and a == b for a, b in zip(ident, known, strict=True)):
                raise PgsurgeError(
                    f'"{other}" and "{path}" are the same run: give each run once'
                )
        seen.append((path, ident))


def _tool_name(doc: dict[str, Any]) -> Any:
    tool = doc.get("tool")
    return tool.get("name") if isinstance(tool, dict) else None


def write_html(text: str, path: str, stdout: TextIO | None = None) -> None:
    """Write the page to ``path`` (``-``: stdout)."""
    write_output(text, path, "HTML report", stdout)


def _render(runs: Sequence[RunDoc], title: str | None, threshold: float) -> str:
    try:
        return render_html(runs, title=title, threshold=threshold)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # a document that passed the light checks but is malformed inside
        raise PgsurgeError(
            f"could not render the report: malformed result ({type(exc).__name__}: "
            f"{exc})"
        ) from None


def report_main(
    argv: list[str],
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``pgsurge report …``; ``argv`` starts after ``report``."""
    err = stderr if stderr is not None else sys.stderr
    try:
        if argv in (["--help"], ["-?"], ["-h"]):
            (stdout or sys.stdout).write(_parser().format_help())
            return 0
        args = _parser().parse_args(argv)
        if not 0 <= args.threshold < 100:
            raise UsageError("report: --threshold must be a percentage in [0, 100)")
        runs = [RunDoc(os.path.basename(p), load_result(p), "A") for p in args.results]
        runs += [RunDoc(os.path.basename(p), load_result(p), "B") for p in args.vs]
        if args.vs:
            _check_distinct([*args.results, *args.vs], [r.doc for r in runs])
        text = _render(runs, args.title, args.threshold / 100)
        write_html(text, args.output, stdout)
    except PgsurgeError as exc:
        err.write(exc.format())
        err.flush()
        return int(exc.exit_status)
    return 0
