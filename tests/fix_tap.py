"""Running the cases of PostgreSQL's pgbench TAP suites (``fix_tap_cases``).

:class:`TapNode` is a PostgreSQL cluster of the case's own (initdb in a
temporary directory, through :class:`pgsurge.server.EmbeddedServer`), as
the TAP suite makes one: the cases change its settings, make a tablespace
and read its log. Programs reach it through ``PGHOST``/``PGPORT``/
``PGUSER``/``PGDATABASE``, as pgbench does under the TAP helpers.

:func:`run_case` writes the case's script files, runs the program, and
returns a :class:`CaseRun`: the outcome and the list of the expectations
it missed (empty: the case passed). :func:`compare_runs` compares the
outputs of pgsurge and pgbench where the case says they are
deterministic. ``tools/tap_driver.py`` runs every case against both
programs; ``tests/server/test_pg_tap_cases.py`` does it under pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from pgsurge.server.binaries import wheel_pginstall
from pgsurge.server.embedded import EmbeddedServer
from pgsurge.server.runas import chown_to, server_user
from tests.fix_cli import run_cli
from tests.fix_tap_cases import DEFAULT_LOGGING, TapCase

#: the tablespace the "all options" -i case names
TABLESPACE = "regress_pgbench_tap_1_ts"
#: a port for the case's own cluster (its socket is in a private directory)
PORT = 54329


@dataclass(frozen=True)
class Program:
    """How to start one of the two programs."""

    name: str
    argv: tuple[str, ...]
    #: the file to execute when argv[0] is only the name to show
    executable: Path | None = None
    #: run in this process (fix_cli.run_cli): for cases without a server,
    #: where only the command line's handling is at stake, at a fraction
    #: of a new interpreter's start-up
    inprocess: bool = False


def pgsurge_program(*, inprocess: bool = False) -> Program:
    return Program("pgsurge", (sys.executable, "-m", "pgsurge"), inprocess=inprocess)


def pgbench_program() -> Program:
    # argv[0] "pgbench", as a user's shell gives it
    return Program("pgbench", ("pgbench",), wheel_pginstall().bin("pgbench"))


class TapNode:
    """The cases' cluster; ``base`` must be reachable by the server user."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.server = EmbeddedServer(base / "srv", port=PORT)
        self.env: dict[str, str] = {}

    def start(self) -> None:
        params = self.server.ensure_running()
        self.env = {
            "PGHOST": str(params.host),
            "PGPORT": str(params.port),
            "PGUSER": self.server.superuser,
            "PGDATABASE": "postgres",
        }
        ts = self.base / "ts"
        ts.mkdir(exist_ok=True)
        chown_to(ts, server_user())
        self.sql(f"DROP TABLESPACE IF EXISTS {TABLESPACE}")
        self.sql(f"CREATE TABLESPACE {TABLESPACE} LOCATION '{ts}'")
        # as on a benchmark server, and no autoanalyze racing the cases
        self.sql("ALTER SYSTEM SET autovacuum = off")
        self.sql("SELECT pg_reload_conf()")

    def stop(self) -> None:
        self.server.stop()

    def conninfo(self) -> str:
        return psycopg.conninfo.make_conninfo(
            host=self.env["PGHOST"],
            port=self.env["PGPORT"],
            user=self.env["PGUSER"],
            dbname="postgres",
        )

    def sql(self, text: str) -> str:
        """Run ``text``; the rows as ``a|b`` lines (psql's unaligned form)."""
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            cur = conn.execute(text)
            if cur.description is None:
                return ""
            return "\n".join(
                "|".join("" if v is None else str(v) for v in row)
                for row in cur.fetchall()
            )

    def configure(self, settings: Sequence[tuple[str, str]]) -> None:
        for name, value in settings:
            self.sql(f"ALTER SYSTEM SET {name} = {value}")
        self.sql("SELECT pg_reload_conf()")
        # the backends the next run starts read the new values; give the
        # postmaster a moment to process the SIGHUP first
        time.sleep(0.05)

    def log_size(self) -> int:
        try:
            return self.server.log_file.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset: int) -> str:
        with open(self.server.log_file, "rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", "replace")


def make_base() -> Path:
    """A temporary directory the server user can pass through (as root the
    server runs as another user)."""
    base = Path(tempfile.mkdtemp(prefix="pgsurge-tap-"))
    if os.geteuid() == 0:
        os.chmod(base, 0o711)
    return base


# -- one case ------------------------------------------------------------------


@dataclass
class CaseRun:
    """A program's run of a case and the expectations it missed."""

    program: str
    case: TapCase
    status: int = -1
    stdout: str = ""
    stderr: str = ""
    missed: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.missed


def expected_to_pass(run: CaseRun) -> bool:
    """Whether ``run`` must meet the case's expectations: a case of
    PostgreSQL 19's suite need not pass with pgbench 18.6, nor with
    pgsurge where pgsurge follows 18.6 (then it must do as pgbench
    does)."""
    if run.case.since <= 18:
        return True
    return run.program == "pgsurge" and run.case.pgsurge_too


def _write_files(case: TapCase, workdir: Path) -> list[str]:
    args = []
    for name, text in case.files:
        path = workdir / name
        plain = Path(re.sub(r"@\d+$", "", str(path)))
        plain.write_text(text, encoding="utf-8")
        args += ["-f", str(plain if case.strip_weight else path)]
    return args


def _env(case: TapCase, node: TapNode | None, workdir: Path) -> dict[str, str]:
    # no libpq variable of ours; pgsurge's own (PGSURGE_PURE, the loop
    # choice) stay
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PG") or k.startswith("PGSURGE_")
    }
    # a pgsurge that found no target would start an embedded server: keep
    # that one out of the user's data directory
    env["PGSURGE_DATA_DIR"] = str(workdir / "embedded")
    env["LC_ALL"] = "C"
    if case.server and node is not None:
        env.update(node.env)
    env.update(dict(case.env))
    return env


def run_case(
    program: Program,
    case: TapCase,
    node: TapNode | None,
    workdir: Path,
    *,
    timeout: float = 120,
) -> CaseRun:
    """Run ``case`` with ``program`` and check every expectation."""
    result = CaseRun(program.name, case)
    if case.server:
        assert node is not None, "a with-server case needs the node"
        for statement in case.setup:
            node.sql(statement)
        if case.settings:
            node.configure(case.settings)
    for log in workdir.glob(f"{case.logs.prefix}.*") if case.logs else ():
        log.unlink()
    argv = [*program.argv, *case.args.split(), *_write_files(case, workdir)]
    argv += [arg.format(dir=workdir) for arg in case.extra]
    offset = node.log_size() if node is not None and case.server_log else 0
    if program.inprocess and not case.server:
        cli = run_cli(argv[len(program.argv) :], env=_env(case, node, workdir))
        result.status, result.stdout, result.stderr = cli.status, cli.stdout, cli.stderr
        result.missed = _check(case, result, node, workdir, offset)
        return result
    for _ in range(case.runs):
        proc = subprocess.run(
            argv,
            executable=program.executable,
            capture_output=True,
            cwd=workdir,
            env=_env(case, node, workdir),
            timeout=timeout,
            check=False,
        )
        result.status = proc.returncode
        result.stdout = proc.stdout.decode("utf-8", "surrogateescape")
        result.stderr = proc.stderr.decode("utf-8", "surrogateescape")
    result.missed = _check(case, result, node, workdir, offset)
    if case.settings:
        assert node is not None
        node.configure(DEFAULT_LOGGING)
    return result


def _check(
    case: TapCase, run: CaseRun, node: TapNode | None, workdir: Path, offset: int
) -> list[str]:
    missed = []
    if run.status != case.status:
        missed.append(f"exit status {run.status}, expected {case.status}")
    for where, text, patterns in (
        ("stdout", run.stdout, case.stdout),
        ("stderr", run.stderr, case.stderr),
    ):
        missed += [f"{where} !~ /{p}/" for p in patterns if not re.search(p, text)]
    if case.logs is not None:
        missed += _check_logs(case, workdir)
    if node is not None:
        for query, expected in case.checks:
            try:
                got = node.sql(query)
            except psycopg.Error as exc:
                got = f"error: {str(exc).strip()}"
            if got != expected:
                missed.append(f"{query!r} gave {got!r}, expected {expected!r}")
        if case.server_log:
            missed += _check_server_log(case, node, offset)
    return missed


def _check_logs(case: TapCase, workdir: Path) -> list[str]:
    spec = case.logs
    assert spec is not None
    files = sorted(workdir.glob(f"{spec.prefix}.*"))
    missed = []
    if len(files) != spec.files:
        missed.append(f"{len(files)} log files, expected {spec.files}")
    named = [f for f in files if re.fullmatch(rf"{spec.prefix}\.\d+(\.\d+)?", f.name)]
    if len(named) != spec.files:
        missed.append(f"log file names {[f.name for f in files]}")
    for path in files:
        lines = path.read_text().split("\n")
        while lines and lines[-1] == "":  # Perl's split drops trailing fields
            lines.pop()
        if not spec.min_lines <= len(lines) <= spec.max_lines:
            missed.append(
                f"{path.name}: {len(lines)} lines, expected "
                f"{spec.min_lines}..{spec.max_lines}"
            )
        bad = [line for line in lines if not re.search(spec.line, line)]
        if bad:
            missed.append(f"{path.name}: lines not matching /{spec.line}/: {bad[:3]}")
    return missed


def _check_server_log(case: TapCase, node: TapNode, offset: int) -> list[str]:
    # the backend writes its last lines as the program disconnects
    deadline = time.monotonic() + 2
    missed: list[str] = []
    while True:
        text = node.log_since(offset)
        missed = [
            f"server log {'!~' if want.present else '=~'} /{want.pattern}/"
            for want in case.server_log
            if bool(re.search(want.pattern, text)) != want.present
        ]
        if not missed or time.monotonic() > deadline:
            return missed
        time.sleep(0.1)


# -- pgsurge against pgbench ---------------------------------------------------

_PROGNAME = re.compile(r'(?<![\w/])pgbench(?=: )|(?<=")pgbench(?= --help"| -i")')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _ours(text: str) -> str:
    return _PROGNAME.sub("pgsurge", text)


def _messages(text: str) -> Counter[str]:
    """stderr as a multiset of lines, numbers masked (pids, timings)."""
    return Counter(_NUMBER.sub("N", line) for line in _ours(text).splitlines())


def _report(stdout: str) -> list[str] | None:
    """The report after the banner, numbers masked and blank runs
    collapsed (the -r table pads to the widths of its numbers); None when
    stdout holds no report."""
    lines = stdout.splitlines()
    if not lines or not re.match(r"(pgbench|pgsurge) \(\d", lines[0]):
        return None
    return [re.sub(r" {2,}", " ", _NUMBER.sub("N", line)) for line in lines[1:]]


def compare_runs(ours: CaseRun, theirs: CaseRun) -> list[str]:
    """Where pgsurge's output differs from pgbench's: the report (numbers
    masked) whenever both printed one, stderr as ``case.compare`` says."""
    if expected_to_pass(ours) != expected_to_pass(theirs):
        return []  # pgsurge has a PostgreSQL 19 feature pgbench 18.6 lacks
    diffs = []
    if ours.status != theirs.status:
        diffs.append(f"exit status {ours.status}, pgbench's {theirs.status}")
    mine_r, ref_r = _report(ours.stdout), _report(theirs.stdout)
    if mine_r != ref_r:
        diffs.append(
            "reports differ:\n--- pgbench\n"
            + "\n".join(ref_r or ["(none)"])
            + "\n--- pgsurge\n"
            + "\n".join(mine_r or ["(none)"])
        )
    how = ours.case.compare
    if how == "stderr":
        mine, ref = ours.stderr, _ours(theirs.stderr)
        if mine != ref:
            diffs.append(f"stderr differs:\n--- pgbench\n{ref}\n--- pgsurge\n{mine}")
    elif how == "messages":
        mine_m, ref_m = _messages(ours.stderr), _messages(theirs.stderr)
        if mine_m != ref_m:
            diffs.append(
                "stderr lines differ: only pgbench "
                f"{sorted((ref_m - mine_m).elements())[:20]}, only pgsurge "
                f"{sorted((mine_m - ref_m).elements())[:20]}"
            )
    elif how == "lineset":
        mine_s, ref_s = set(_messages(ours.stderr)), set(_messages(theirs.stderr))
        if mine_s != ref_s:
            diffs.append(
                f"stderr lines differ: only pgbench {sorted(ref_s - mine_s)[:20]},"
                f" only pgsurge {sorted(mine_s - ref_s)[:20]}"
            )
    elif how:
        raise ValueError(f"unknown comparison {how!r}")
    return diffs


# -- the pytest fixture --------------------------------------------------------


@pytest.fixture(scope="module")
def tap_node() -> Iterator[TapNode]:
    """The TAP cases' own cluster, for one test module."""
    base = make_base()
    node = TapNode(base)
    try:
        node.start()
    except Exception as exc:  # a server that cannot be had: say why
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start the TAP cases' server: {exc}", pytrace=False)
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(base, ignore_errors=True)


def describe(run: CaseRun) -> str:
    """A run's failures with its output, for an assertion message."""
    return (
        "\n".join(run.missed)
        + f"\n--- status {run.status}\n--- stdout\n{run.stdout[-3000:]}"
        + f"\n--- stderr\n{run.stderr[-3000:]}"
    )


def env_for(node: TapNode | None) -> Mapping[str, str]:
    return {} if node is None else node.env
