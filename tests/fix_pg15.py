"""A second, older server: Debian's PostgreSQL 15 (version tests).

pgsurge's own tests run against the embedded PostgreSQL 18.6; users run it
against every supported server, and the server-insight queries differ by
version (``pg_stat_io`` is 16's, ``pg_stat_checkpointer`` 17's, 18 drops a
leading comment from ``pg_stat_statements``' query text). ``pg15_dsn`` (a
session fixture) starts Debian's 15 from ``/usr/lib/postgresql/15/bin`` in
a new temporary directory — as the ``postgres`` account when the tests run
as root (``initdb`` refuses root) — listening on a Unix socket in that
directory only, with ``pg_stat_statements`` preloaded; it gives a conninfo
of its ``postgres`` database, where ``pgbench -i -s 1`` (the reference)
has made the tables.

A missing binary fails the test (``.ci/run`` installs ``postgresql-15``):
it never skips.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fix_run import run_pgbench

BINDIR = Path("/usr/lib/postgresql/15/bin")
#: any port: the socket lives in the fixture's own directory
PORT = 5815


def _as_owner(argv: list[str], owner: str | None) -> list[str]:
    return ["runuser", "-u", owner, "--", *argv] if owner else argv


@contextmanager
def cluster(
    prefix: str,
    port: int,
    settings: str,
    prepare: Callable[[Path, str | None], None] | None = None,
) -> Iterator[tuple[Path, str]]:
    """A PostgreSQL 15 cluster of its own in a new temporary directory
    (``prefix``), run by the ``postgres`` account when the tests run as
    root, its socket in that directory, started with ``-p port`` and the
    server ``settings``; ``prepare(data, owner)`` runs between initdb and
    the start. Yields (socket directory, user); stopped and removed after."""
    if not (BINDIR / "postgres").exists():
        pytest.fail(
            f"PostgreSQL 15 is not installed ({BINDIR}; apt-get install "
            "postgresql-15, as .ci/run does)",
            pytrace=False,
        )
    owner = "postgres" if os.geteuid() == 0 else None
    top = Path(tempfile.mkdtemp(prefix=prefix))
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(top, pw.pw_uid, pw.pw_gid)
    data = top / "data"
    user = owner or pwd.getpwuid(os.geteuid()).pw_name
    subprocess.run(
        _as_owner(
            [str(BINDIR / "initdb"), "-D", str(data), "-A", "trust", "-U", user],
            owner,
        ),
        check=True,
        capture_output=True,
    )
    if prepare is not None:
        prepare(data, owner)
    ctl = [str(BINDIR / "pg_ctl"), "-D", str(data), "-l", str(top / "log")]
    started = subprocess.run(
        _as_owner([*ctl, "-o", f"-k {top} -p {port} {settings}", "-w", "start"], owner),
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        log = (top / "log").read_text() if (top / "log").exists() else ""
        shutil.rmtree(top, ignore_errors=True)
        pytest.fail(f"PostgreSQL 15 did not start: {started.stderr}\n{log}")
    try:
        yield top, user
    finally:
        subprocess.run(
            _as_owner([*ctl, "-m", "immediate", "stop"], owner),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def pg15_dsn(pgbench_bin: Path) -> Iterator[str]:
    """A running PostgreSQL 15 with pgbench's tables; its conninfo."""
    settings = (
        "-c listen_addresses='' "
        "-c shared_preload_libraries=pg_stat_statements -c fsync=off"
    )
    with cluster("pgsurge-pg15-", PORT, settings) as (top, user):
        dsn = f"host={top} port={PORT} user={user} dbname=postgres"
        init = run_pgbench(pgbench_bin, ["-i", "-s", "1", "-q"], dsn)
        assert init.status == 0, init.stderr
        yield dsn
