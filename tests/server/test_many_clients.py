"""Many clients (issue 25, item 3): the connection ramp and the open-file limit.

A worker opens its clients' connections in parallel without blocking: on
the C loop, C opens them from the conninfo (``FastLoop.open_all``, counted
by ``raw_connects``), on the Python loop ``engine/ramp.py`` does; the
reports match pgbench's. The open-file limit is raised as pgbench raises it
(the soft limit up to what ``-c`` needs), with pgbench's messages when the
hard limit is too low.
"""

from __future__ import annotations

import re
import resource
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsurge.engine import fastloop
from tests.fix_db import run_worker
from tests.fix_run import (
    PGSURGE,
    HangingRelay,
    Outcome,
    run_pgbench,
    run_pgsurge,
    tool_env,
)

pytestmark = pytest.mark.server

#: the in-process tests of the C loop's own ramp (the pure lane has none)
needs_c = pytest.mark.skipif(
    not fastloop.available, reason="pgsurge._fastloop not usable"
)


def _limited(
    argv: Sequence[str],
    soft: int,
    hard: int,
    *,
    executable: Path | None = None,
    loop: str = "auto",
) -> Outcome:
    """Run ``argv`` with RLIMIT_NOFILE lowered to (soft, hard) first."""

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    preexec: Callable[[], None] = lower
    proc = subprocess.run(
        list(argv),
        executable=executable,
        capture_output=True,
        env=tool_env(loop=loop),  # type: ignore[arg-type]
        timeout=300,
        check=False,
        preexec_fn=preexec,
    )
    return Outcome(
        proc.returncode,
        proc.stdout.decode(errors="surrogateescape"),
        proc.stderr.decode(errors="surrogateescape"),
    )


def test_hard_limit_too_low_is_pgbench_message(pgbench_bin: Path) -> None:
    # -c 100 needs 103 descriptors; a hard limit of 50 cannot give them:
    # pgbench's error and hint, its status, before anything connects
    args = ["-n", "-S", "-c", "100", "-t", "1", "host=/nonexistent"]
    ref = _limited(["pgbench", *args], 50, 50, executable=pgbench_bin)
    got = _limited([*PGSURGE, *args], 50, 50)
    assert ref.status == 1, ref.stderr
    assert ref.stderr == (
        "pgbench: error: need at least 103 open files, but system limit is 50\n"
        "pgbench: hint: Reduce number of clients, or use limit/ulimit to "
        "increase the system limit.\n"
    )
    assert got.status == ref.status
    assert got.stderr == ref.stderr.replace("pgbench:", "pgsurge:")


@pytest.mark.parametrize("loop", ["c", "python"])
def test_soft_limit_raised_for_300_clients(
    bench_db: str, pgbench_bin: Path, loop: str
) -> None:
    # a soft limit of 40 and room under the hard one: both tools raise it
    # and run 300 clients (a worker of pgsurge holds 150 sockets)
    args = ["-n", "-S", "-c", "300", "-j", "2", "-t", "2", bench_db]
    ref = _limited(["pgbench", *args], 40, 4096, executable=pgbench_bin)
    got = _limited([*PGSURGE, *args], 40, 4096, loop=loop)
    assert ref.status == 0, ref.stderr
    assert got.status == 0, got.stderr
    assert got.number("number of transactions actually processed:") == "600/600"
    assert got.report == ref.report
    assert float(got.number("initial connection time =").split()[0]) > 0


@needs_c
def test_300_clients_opened_by_c(c_loops: list[Any], bench_db: str) -> None:
    # in-process: the C loop opens the 300 connections itself, in
    # parallel (FastLoop.open_all), and runs every transaction
    _w, result = run_worker(
        ["-n", "-S", "-M", "prepared", "-c", "300", "-t", "3"], bench_db
    )
    assert result.total.cnt == 900
    assert result.aborted_clients == 0
    assert len(set(result.client_targets)) == 1
    assert len(result.client_targets) == 300
    fast = c_loops[0]
    assert fast.raw_connect
    assert fast._fast.raw_connects == 300


@needs_c
def test_300_clients_python_opens_without_c(
    c_loops: list[Any], bench_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PGSURGE_PY_CONNECT=1: engine/ramp.py opens them (the reference), the
    # C loop still runs the transactions
    monkeypatch.setenv("PGSURGE_PY_CONNECT", "1")
    _w, result = run_worker(["-n", "-S", "-c", "300", "-t", "3"], bench_db)
    assert result.total.cnt == 900
    fast = c_loops[0]
    assert not fast.raw_connect
    assert fast._fast.raw_connects == 0


@pytest.fixture
def limited_role(server_dsn: str, bench_db: str) -> Any:
    """A role allowed 3 connections (and the bench tables)."""
    role = f"t_ramp_{abs(hash(bench_db)) % 100000}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 3").format(
                sql.Identifier(role)
            )
        )
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(role)
            )
        )
    yield psycopg.conninfo.make_conninfo(bench_db, user=role)
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_client_refused_during_the_ramp(
    limited_role: str, pgbench_bin: Path, loop: str
) -> None:
    # 8 clients, 3 connections allowed: pgbench's messages for one client
    # (the lowest refused of the worker: which one the server refuses
    # depends on the order it sees them in), its status, nothing left open
    args = ["-n", "-S", "-c", "8", "-j", "1", "-t", "5"]
    ref = run_pgbench(pgbench_bin, args, limited_role)
    got = run_pgsurge(args, limited_role, loop=loop)  # type: ignore[arg-type]
    assert ref.status == 1, ref.stderr
    assert got.status == ref.status, got.stderr
    pattern = (
        r"^pgsurge: error: connection to server .* failed: FATAL:  too many "
        r"connections for role \"t_ramp_\d+\"\n"
        r"pgsurge: error: could not create connection for client [0-7]\n$"
    )
    assert re.search(pattern, got.stderr, re.M), got.stderr
    assert "Traceback" not in got.stderr
    assert got.stdout.count("\n") == ref.stdout.count("\n"), got.stdout


@pytest.mark.parametrize("loop", ["c", "python"])
def test_connect_timeout_during_the_ramp(
    bench_db: str, pgbench_bin: Path, tmp_path: Path, loop: str
) -> None:
    # connect_timeout=2 and a server that answers only the set-up
    # connection: libpq's blocking connect's words, which pgbench prints
    args = ["-n", "-S", "-c", "3", "-j", "1", "-t", "5"]
    outs = []
    for tool in ("pgbench", "pgsurge"):
        relay = HangingRelay(bench_db, tmp_path, 1)
        try:
            if tool == "pgbench":
                outs.append(run_pgbench(pgbench_bin, args, relay.dsn))
            else:
                outs.append(run_pgsurge(args, relay.dsn, loop=loop))  # type: ignore[arg-type]
        finally:
            relay.close()
    ref, got = outs
    assert ref.status == 1, ref.stderr
    socket_path = tmp_path / ".s.PGSQL.5432"
    assert ref.stderr == (
        f'pgbench: error: connection to server on socket "{socket_path}" '
        "failed: timeout expired\n"
        "pgbench: error: could not create connection for client 0\n"
    )
    assert got.status == ref.status
    assert got.stderr == ref.stderr.replace("pgbench:", "pgsurge:")
