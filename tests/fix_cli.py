"""Run pgsurge's command line in-process, and the reference pgbench beside it.

``run_cli(args)`` calls ``pgsurge.cli.main`` with captured stdout/stderr,
a controlled environment and stdin (httpie's ``http()`` shape), so CLI
tests are fast and see exactly what a user would. ``run_pgbench`` runs the
real pgbench 18.6 with the same arguments and environment, named
``pgbench`` in its argv[0] (glibc's getopt messages print argv[0] as is),
and ``normalise`` turns its program name into ``pgsurge``: the two outputs
must then be identical.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from pgsurge.cli import main
from tests import fix_run


@dataclass(frozen=True, slots=True)
class CliResult:
    status: int
    stdout: str
    stderr: str


def base_env() -> dict[str, str]:
    """A small, deterministic environment for both programs.

    No PG* connection variables leak in from the developer's shell; PGHOST
    points nowhere, so a command line that unexpectedly passes validation
    fails at connection instead of reaching a real server.
    """
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LC_ALL": "C",
        "PGHOST": "/nonexistent/pgsurge-test",
    }


@contextlib.contextmanager
def _stdin_bytes(data: bytes) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    try:
        yield
    finally:
        sys.stdin = saved


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> CliResult:
    """``pgsurge ARGS`` in this process, with ``env`` as the whole environment."""
    out, err = io.StringIO(), io.StringIO()
    environ = base_env() if env is None else dict(env)
    with (
        mock.patch.dict(os.environ, environ, clear=True),
        _stdin_bytes(stdin),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        status = main(["pgsurge", *args])
    return CliResult(status, out.getvalue(), err.getvalue())


def run_pgbench(
    pgbench: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> CliResult:
    """The reference pgbench with the same arguments, output normalised."""
    out = fix_run.run_pgbench(
        pgbench,
        args,
        environ=base_env() if env is None else env,
        stdin=stdin,
        timeout=60,
    )
    return CliResult(out.status, normalise(out.stdout), normalise(out.stderr))


# where pgbench names itself: the message prefix and its "Try/Perhaps" hints;
# not in table names (pgbench_accounts) nor prose ("standard pgbench scenario")
_PROGNAME = re.compile(r'^pgbench(?=: )|(?<=")pgbench(?= --help"| -i")', re.MULTILINE)


def normalise(text: str) -> str:
    """pgbench's name for itself → ours."""
    return _PROGNAME.sub("pgsurge", text)


@pytest.fixture
def cli() -> type[CliRunner]:
    return CliRunner


class CliRunner:
    """Namespace handed out by the ``cli`` fixture: ``cli.run(args)``."""

    run = staticmethod(run_cli)
    pgbench = staticmethod(run_pgbench)
