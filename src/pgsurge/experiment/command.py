"""``pgsurge compare`` and ``pgsurge ab``: argv → plan → output → exit status.

``cli.main`` hands over ``argv`` starting at the subcommand's name, as for
``pgsurge server``. Each parses its own options with argparse (they are
pgsurge's, not pgbench's), and every problem ends here as one line on
stderr, ``pgsurge: error: …``, and an exit status:

* 0: done (whatever the verdict, unless ``--fail-on`` says otherwise);
* 1: bad arguments or input (unreadable file, not a pgsurge result, a
  newer schema, an empty side, different workloads without ``--force``),
  or a run of ``ab`` that failed;
* 2: a run of ``ab`` aborted (pgsurge's own status for that);
* 3: ``--fail-on slower`` and the primary metric got worse, or
  ``--fail-on change`` and it changed beyond the threshold;
* 130: ``ab`` interrupted by Ctrl-C (after comparing what finished).
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import json
import os
import re
import shlex
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pgsurge.config import ConnParams
from pgsurge.errors import PROG, PgsurgeError, UsageError
from pgsurge.experiment.ab import (
    DIR_MODE,
    Arm,
    Experiment,
    Interrupted,
    Plan,
    write_private,
)
from pgsurge.experiment.compare import METRIC_KEYS, compare
from pgsurge.experiment.fingerprint import fingerprint_differences
from pgsurge.experiment.render import (
    render_json,
    render_repeat,
    render_text,
    repeat_json,
)
from pgsurge.experiment.results import RunSummary, check_distinct, load_results
from pgsurge.redact import printable, redact_words

__all__ = ["RunArgsCheck", "ab_main", "compare_main"]

#: checks a run's pgsurge arguments (with the environment the run gets) as
#: the program would read them, and returns where the run connects and
#: whether --embedded was given; raises a ``PgsurgeError`` naming the bad
#: option. ``cli`` supplies it: the option parser sits above this layer.
RunArgsCheck = Callable[[Sequence[str], Mapping[str, str]], tuple[ConnParams, bool]]

EXIT_INTERRUPTED = 130

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _Exit(Exception):
    """argparse wanted to exit (``--help``): the status to return."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse, with errors raised as one-line ``UsageError``s and no
    ``sys.exit`` (callers may run in-process)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f'{self.prog}: {message} (try "{self.prog} --help")')

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit(status)


def check_own_arguments(
    command: str, arms: Sequence[Arm], common: Sequence[str]
) -> None:
    """``command`` (ab, sweep) writes each run's ``--json`` and labels it
    ``arm=``/``COMMAND=`` itself: the same in the common arguments or an
    arm's is one error naming where (every run of it failed on "the key is
    given twice")."""
    for where, args in [("the common arguments", list(common))] + [
        (f"--{arm.name.lower()}", list(arm.args)) for arm in arms
    ]:
        if any(a == "--json" or a.startswith("--json=") for a in args):
            raise UsageError(
                f"{command} writes each run's --json itself: drop it from {where}"
            )
        taken = _own_label_keys(args, ("arm", command))
        if taken:
            raise UsageError(
                f'{command} labels each run with "{taken}" itself: drop --label '
                f"{taken}=… from {where}"
            )


def _percent(text: str) -> float:
    """A percentage given as ``2``, ``2.5`` or ``2%``, as a fraction."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f'invalid percentage: "{text}"') from None
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f'percentage out of range: "{text}"')
    return value / 100.0


def _confidence(text: str) -> float:
    """A confidence level as ``95``, ``95%`` or ``0.95``."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f'invalid confidence: "{text}"') from None
    if value >= 1:
        value /= 100.0
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(
            f'confidence out of range (50 to 99.9…): "{text}"'
        )
    return value


def _add_verdict_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threshold",
        metavar="PCT",
        type=_percent,
        default=0.02,
        help="practical threshold: changes within ±PCT %% are no difference "
        "(default: 2)",
    )
    p.add_argument(
        "--confidence",
        metavar="LEVEL",
        type=_confidence,
        default=0.95,
        help="confidence level of the intervals, in %% (default: 95)",
    )
    p.add_argument(
        "--metric",
        choices=METRIC_KEYS,
        default="tps",
        help="the metric whose verdict decides --fail-on (default: tps)",
    )
    p.add_argument(
        "--fail-on",
        choices=("slower", "change"),
        help="exit with status 3 when the metric got worse (slower) or changed "
        "beyond the threshold either way (change)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help='write the comparison as JSON to FILE ("-": stdout, the text then '
        "goes to stderr)",
    )


def _compare_parser() -> _Parser:
    p = _Parser(
        prog=f"{PROG} compare",
        usage=f"{PROG} compare BASE.json [BASE.json ...] --vs NEW.json [NEW.json ...] "
        "[OPTION]...",
        description="Compare pgsurge --json results: NEW against BASE, one value "
        "per run and metric (several files per side are repeated runs).",
        allow_abbrev=False,
    )
    p.add_argument("base", nargs="*", metavar="BASE.json", help="the base runs")
    p.add_argument(
        "--vs", nargs="*", metavar="NEW.json", default=None, help="the new runs"
    )
    _add_verdict_options(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="compare even when the workloads differ",
    )
    return p


def _emit(
    text: str,
    doc: dict[str, Any] | None,
    json_to: str | None,
    out: TextIO,
    err: TextIO,
) -> None:
    """The text on stdout, or on stderr when the JSON goes to stdout."""
    if json_to == "-":
        err.write(text)
        err.flush()
        out.write(json.dumps(doc, indent=2) + "\n")
        out.flush()
        return
    out.write(text)
    out.flush()
    if json_to is not None and doc is not None:
        # as every --json: whole or not at all, never through another
        # user's symlink (report.output)
        from pgsurge.report.output import write_output

        write_output(json.dumps(doc, indent=2) + "\n", json_to, "JSON comparison")


def check_output_paths(**paths: str | None) -> None:
    """``--json FILE``/``--html FILE`` of an experiment whose runs take an
    hour: a directory that is not there is said before the first run, not
    after the last (the table was printed, then "could not write")."""
    for option, path in paths.items():
        if path is None or path == "-":
            continue
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            raise UsageError(
                f'--{option}: directory "{parent}" does not exist (for "{path}")'
            )


def _funnel(err: TextIO, func: Any, *args: Any) -> int:
    """Run a subcommand body; a ``PgsurgeError`` becomes its message and
    exit status, ``--help`` its status."""
    try:
        return int(func(*args))
    except _Exit as e:
        return e.status
    except PgsurgeError as e:
        err.write(e.format())
        err.flush()
        return int(e.exit_status)


def compare_main(
    argv: list[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """``pgsurge compare …``; ``argv[0]`` is ``"compare"``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _compare, argv[1:], out, err)


def _compare(args: list[str], out: TextIO, err: TextIO) -> int:
    ns = _compare_parser().parse_args(args)
    if not ns.base:
        raise UsageError(
            "no BASE results given (pgsurge compare BASE.json --vs NEW.json)"
        )
    if ns.vs is None:
        raise UsageError("no --vs given (pgsurge compare BASE.json --vs NEW.json)")
    if not ns.vs:
        raise UsageError("no NEW results after --vs")
    base = load_results(ns.base)
    new = load_results(ns.vs)
    # a run given twice would compare it with itself: a zero spread and a
    # confident verdict on nothing
    check_distinct([*base, *new])
    c = compare(
        base,
        new,
        confidence=ns.confidence,
        threshold=ns.threshold,
        primary=ns.metric,
        force=ns.force,
    )
    # (a result file's labels and environment are whatever its writer put)
    _emit(printable(render_text(c)), render_json(c, ns.fail_on), ns.json, out, err)
    _environment_warnings([*base, *new], err)
    return c.exit_status(ns.fail_on)


def _environment_warnings(runs: Sequence[RunSummary], err: TextIO) -> None:
    """One warning per run whose environment (``experiment.fingerprint``)
    differs from the first run's: the figures may differ for that reason."""
    first = runs[0]
    for run in runs[1:]:
        diff = fingerprint_differences(first.fingerprint, run.fingerprint)
        if diff:
            err.write(
                f"{PROG}: warning: {run.name} ran in another environment than "
                f"{first.name}: {printable('; '.join(diff))}\n"
            )
    err.flush()


# -- ab -------------------------------------------------------------------------

#: ab options whose value is a set of pgsurge arguments, often starting with
#: "-": "--a -S" is read as "--a=-S" (argparse would take "-S" for an option)
_ARM_OPTIONS = ("--a", "--b", "--a-env", "--b-env")


class _Once(argparse.Action):
    """A value option that may be given once: "--a X --a Y" ran Y alone,
    and the header never said X was dropped."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest) is not None:
            raise argparse.ArgumentError(self, "given twice")
        setattr(namespace, self.dest, values)


def _ab_parser() -> _Parser:
    p = _Parser(
        prog=f"{PROG} ab",
        usage=f'{PROG} ab [--runs N] [--a "ARGS"] [--b "ARGS"] [OPTION]... '
        "-- [COMMON PGSURGE ARGS]...",
        description="Run an A/B experiment: a warm-up run per arm, then N runs per "
        "arm interleaved ABBA…, each `pgsurge COMMON-ARGS ARM-ARGS --json FILE` in "
        "its own process, then the comparison of arm B against arm A. With one "
        "arm (no --b), a repeat summary. Ctrl-C stops after the current run "
        "(twice: at once, discarding it) and compares what finished.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--runs", type=int, default=5, metavar="N", help="runs per arm (default: 5)"
    )
    p.add_argument(
        "--a",
        default=None,
        action=_Once,
        metavar="ARGS",
        help="arm A's own pgsurge arguments (shell words)",
    )
    p.add_argument(
        "--b",
        default=None,
        action=_Once,
        metavar="ARGS",
        help="arm B's own pgsurge arguments (shell words)",
    )
    p.add_argument(
        "--a-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for arm A's runs, e.g. "
        "PGOPTIONS='-c work_mem=64MB' (repeatable)",
    )
    p.add_argument(
        "--b-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for arm B's runs (repeatable; makes an arm B)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        metavar="N",
        help="discarded warm-up runs per arm (default: 1)",
    )
    p.add_argument(
        "--order",
        choices=("abba", "abab"),
        default="abba",
        help="order of the runs (default: abba)",
    )
    p.add_argument(
        "--checkpoint",
        action="store_true",
        help="CHECKPOINT the arm's server before each counted run",
    )
    p.add_argument(
        "--out",
        action=_Once,
        metavar="DIR",
        help="directory for the results and the manifest "
        "(default: a new pgsurge-ab-TIMESTAMP)",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write the HTML report of the experiment's runs to FILE",
    )
    _add_verdict_options(p)
    return p


def _split_ab_argv(
    args: Sequence[str], options: Sequence[str] = _ARM_OPTIONS
) -> tuple[list[str], list[str]]:
    """(ab's own arguments, the common pgsurge arguments after ``--``);
    ``options`` take the next word as their value whatever it looks like."""
    own: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            return own, list(args[i + 1 :])
        if tok in options and i + 1 < len(args):
            own.append(f"{tok}={args[i + 1]}")
            i += 2
            continue
        own.append(tok)
        i += 1
    return own, []


def _env(items: list[str], option: str) -> dict[str, str]:
    env = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not _ENV_NAME.match(name):
            raise UsageError(f'{option}: expected NAME=VALUE, got "{item}"')
        env[name] = value
    return env


def _words(text: str, option: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}: {text}") from None


def _out_dir(given: str | None, prefix: str = "pgsurge-ab") -> Path:
    if given is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(f"{prefix}-{stamp}")
        n = 1
        while path.exists():
            n += 1
            path = Path(f"{prefix}-{stamp}-{n}")
    else:
        path = Path(given)
    return _checked_out_dir(path, given)


def _checked_out_dir(path: Path, given: str | None, *, resume: bool = False) -> Path:
    """Make or take the output directory as the data location is taken
    (``server.safedir``): ab and sweep may run as root, and a symlink or
    another user's directory planted at ``--out`` would have the results
    and logs written (and the directory chmod-ed) wherever it points. A
    directory above that another user could swap, a symlink at the end, a
    directory of someone else's: refused. The path used afterwards is the
    one with the trusted links resolved, and the directory is ours and
    0700, so nobody else can plant a file in it.

    ``resume``: ``sweep --resume DIR``, an existing directory held to the
    same rules but not made nor required empty (its manifest names files
    that a resume removes: another user's directory would let them name
    any of ours)."""
    from pgsurge.errors import ServerError
    from pgsurge.server.safedir import check_ancestors, make_dirs, user_name

    shown = given if given is not None else str(path)
    option = "--resume" if resume else "--out"
    real = path
    try:
        real = check_ancestors(path)
        if not resume:
            make_dirs(real, DIR_MODE)
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except ServerError as exc:
        raise PgsurgeError(f"{option}: {exc.message}") from None
    except OSError as exc:
        if os.path.islink(real):
            raise PgsurgeError(
                f"{option}: refusing to use {shown}: it is a symbolic link"
            ) from None
        if resume:
            raise PgsurgeError(
                f'{option}: could not open "{shown}": {exc.strerror or exc}'
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise UsageError(
                f'--out: "{shown}" exists and is not an empty directory'
            ) from None
        raise PgsurgeError(
            f'could not create "{shown}": {exc.strerror or exc}'
        ) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise PgsurgeError(
                f"{option}: refusing to use {shown}: it is owned by "
                f'"{user_name(st.st_uid)}"'
            )
        if resume:
            if stat.S_IMODE(st.st_mode) & 0o022:
                raise PgsurgeError(
                    f"{option}: refusing to use {shown}: it is writable by group "
                    f"or others (mode {stat.S_IMODE(st.st_mode):04o})"
                )
            return path if real == path.absolute() else real
        # whatever the umask (or an empty --out made by the user): the
        # results and logs may name users, hosts and databases; closed
        # first, so the emptiness seen next stays true
        os.fchmod(fd, DIR_MODE)
        if os.listdir(fd):
            raise UsageError(f'--out: "{shown}" exists and is not an empty directory')
    finally:
        os.close(fd)
    # as given when no link was resolved on the way (it is what is shown)
    return path if real == path.absolute() else real


def _mask_words(text: str, words: Sequence[str]) -> str:
    """``text`` with each of ``words`` that holds a password masked where
    it is quoted whole (a message's ``(first is "…")``; ``redact_text``
    would take the closing quote for part of the password)."""
    for word, shown in zip(words, redact_words(words), strict=True):
        if word != shown and word:
            text = text.replace(word, shown)
    return text


def _validate(arms: list[Arm], common: list[str], check: RunArgsCheck) -> list[Arm]:
    """Each arm's arguments read as its runs will read them, before the
    first run: a bad option of arm B is no surprise after arm A ran."""
    checked = []
    for arm in arms:
        try:
            # in the order the runs use (``Experiment._run_one``)
            conn, embedded = check([*common, *arm.args], os.environ | dict(arm.env))
        except PgsurgeError as e:
            where = (
                f"arm {arm.name}'s arguments (--{arm.name.lower()} and the common ones)"
                if arm.args
                else f"the common arguments (arm {arm.name})"
            )
            # the arm's words may be a conninfo split at its spaces: a
            # message quoting one ("too many ... (first is "password=…")")
            # must not print the password (pgsurge itself prints it, as
            # pgbench does, but ab's arguments go into logs and tickets)
            words = [*arm.args, *common, *arm.env.values()]
            raise UsageError(
                f"{where}: {_mask_words(e.message, words)}",
                detail=e.detail and _mask_words(e.detail, words),
                hint=e.hint and _mask_words(e.hint, words),
            ) from None
        checked.append(replace(arm, conn=conn, force_embedded=embedded))
    return checked


def _own_label_keys(args: Sequence[str], keys: Sequence[str]) -> str | None:
    """The first of ``keys`` that ``args`` give with --label (``--label K=V``
    or ``--label=K=V``), or None."""
    for i, a in enumerate(args):
        if a == "--label" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--label="):
            value = a.removeprefix("--label=")
        else:
            continue
        key = value.partition("=")[0].strip()
        if key in keys:
            return key
    return None


def _plan(
    ns: argparse.Namespace, common: list[str], check: RunArgsCheck | None
) -> Plan:
    if ns.runs < 1:
        raise UsageError("--runs must be at least 1")
    if ns.warmup < 0:
        raise UsageError("--warmup must be 0 or more")
    arms = [Arm("A", ns.a or "", _words(ns.a or "", "--a"), _env(ns.a_env, "--a-env"))]
    if ns.b is not None or ns.b_env:
        arms.append(
            Arm("B", ns.b or "", _words(ns.b or "", "--b"), _env(ns.b_env, "--b-env"))
        )
    check_own_arguments("ab", arms, common)
    if check is not None:
        arms = _validate(arms, common, check)
    return Plan(
        arms=tuple(arms),
        common=tuple(common),
        runs=ns.runs,
        warmup=ns.warmup,
        order=ns.order,
        checkpoint=ns.checkpoint,
        out_dir=_out_dir(ns.out),
    )


def ab_main(
    argv: list[str],
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    check_args: RunArgsCheck | None = None,
) -> int:
    """``pgsurge ab …``; ``argv[0]`` is ``"ab"``. ``check_args`` validates
    each arm's arguments before the first run and tells ``--checkpoint``
    where the arm's runs connect (without it, neither happens)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    return _funnel(err, _ab, argv, out, err, check_args)


def _ab(argv: list[str], out: TextIO, err: TextIO, check: RunArgsCheck | None) -> int:
    own, common = _split_ab_argv(argv[1:])
    ns = _ab_parser().parse_args(own)
    plan = _plan(ns, common, check)
    # with --json -, stdout is the JSON document alone
    progress = err if ns.json == "-" else out
    exp = Experiment(plan, argv=[PROG, *argv], stdout=progress, stderr=err)
    arms = " vs ".join(f"{a.name}: {a.describe()}" for a in plan.arms)
    common_text = shlex.join(redact_words(plan.common)) or "(none)"
    progress.write(
        f"pgsurge ab: {plan.runs} run{'s' if plan.runs > 1 else ''} per arm "
        f"({plan.order if len(plan.arms) > 1 else 'repeat'}, {plan.warmup} warm-up), "
        f"{arms}; common: {common_text}; results in "
        f"{plan.out_dir}{os.sep}\n"
    )
    progress.flush()
    interrupted = False
    try:
        exp.run()
    except Interrupted:
        interrupted = True
    except PgsurgeError as e:
        # a run failed (the server went away): its error, then the summary
        # of the runs that finished, as after Ctrl-C (they ended with the
        # error alone; hostile finding), and the failed run's exit status
        err.write(e.format())
        err.flush()
        if any(exp.finished(a.name) for a in plan.arms):
            with suppress(PgsurgeError):  # the same cause (a full disk): said
                _ab_report(exp, ns, out, err)
        return int(e.exit_status)
    status = _ab_report(exp, ns, out, err)
    return EXIT_INTERRUPTED if interrupted else status


def _ab_report(
    exp: Experiment, ns: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    plan = exp.plan
    a_runs = exp.finished("A")
    #: the tps within-run interval of one run per side, for the HTML card
    within: tuple[float, float] | None = None
    if len(plan.arms) == 1:
        if not a_runs:
            err.write("pgsurge ab: no run finished: nothing to summarize\n")
            return 0
        text = render_repeat(a_runs, ns.confidence, ns.threshold)
        doc = repeat_json(a_runs, ns.confidence, ns.threshold)
        status = 0
    else:
        b_runs = exp.finished("B")
        if not a_runs or not b_runs:
            err.write("pgsurge ab: no finished runs on both arms: nothing to compare\n")
            return 0
        c = compare(
            a_runs,
            b_runs,
            confidence=ns.confidence,
            threshold=ns.threshold,
            primary=ns.metric,
            across_expected=True,
        )
        text = render_text(c)
        doc = render_json(c, ns.fail_on)
        status = c.exit_status(ns.fail_on)
        tps = next(m for m in c.metrics if m.metric.key == "tps").estimate
        if c.single_run and tps is not None:
            within = (tps.low, tps.high)
    (err if ns.json == "-" else out).write("\n")
    _emit(text, doc, ns.json, out, err)
    write_private(plan.out_dir / "comparison.txt", text)
    if ns.html:
        _write_html(ns.html, exp, a_runs, exp.finished("B"), ns.threshold, within)
    write_private(plan.out_dir / "comparison.json", json.dumps(doc, indent=2) + "\n")
    return status


def _write_html(
    path: str,
    exp: Experiment,
    a_runs: list[RunSummary],
    b_runs: list[RunSummary],
    threshold: float,
    within_run: tuple[float, float] | None,
) -> None:
    """``--html``: the report page of the finished runs, arm A against B
    (the renderer's own verdict card uses the same statistics), titled
    with what the arms were."""
    from pgsurge.report.command import load_result, write_html
    from pgsurge.report.html import RunDoc, render_html

    runs = [RunDoc(r.name, load_result(r.path), "A") for r in a_runs]
    runs += [RunDoc(r.name, load_result(r.path), "B") for r in b_runs]
    arms = " vs ".join(f"{a.name}: {a.describe()}" for a in exp.plan.arms)
    title = f"pgsurge ab: {arms}"
    page = render_html(runs, title=title, threshold=threshold, within_run=within_run)
    write_html(page, path)
