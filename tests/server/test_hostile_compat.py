"""pgsurge against pgbench 18.6, where a pgbench user diffing the two found
them apart: each test runs the same command with both programs against the
test server and fails on the divergence it names.

Hostile-tester regressions (the compat pass): output, logs and statuses
that differed from pgbench's with every pgsurge option off.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.fix_run import Outcome, run_pgbench, run_pgsurge

pytestmark = pytest.mark.server


def _debug_lines(proc: Outcome) -> list[str]:
    assert proc.status == 0, proc.stderr
    return [
        line.split(": ", 1)[1]
        for line in proc.stderr.splitlines()
        if line.startswith(("pgbench: ", "pgsurge: "))
    ]


def test_debug_prepared_shows_no_receiving_between_preparing_and_sending(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """``--debug -M prepared``: pgbench prepares with a blocking PQprepare,
    so ``preparing P_n`` is followed at once by ``sending P_n``; pgsurge's
    prepare, sent without blocking, printed ``receiving`` lines between
    (found diffing --debug output)."""
    (tmp_path / "s.sql").write_text("SELECT 1;\nSELECT 2 AS a \\gset\nSELECT :a;\n")
    args = ["--debug", "-n", "-M", "prepared", "-f", "s.sql", "-t", "2"]
    for proc in (
        run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path, timeout=60),
        run_pgsurge(args, bench_db, cwd=tmp_path, loop="python", timeout=60),
    ):
        lines = _debug_lines(proc)
        prepares = [i for i, line in enumerate(lines) if " preparing P_" in line]
        assert len(prepares) == 3, lines
        for i in prepares:
            name = lines[i].rsplit(" ", 1)[1]
            assert lines[i + 1] == f"client 0 sending {name}", lines[i : i + 3]


#: libpq's environment variable for each conninfo keyword a test DSN may hold
_ENV_OF = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "dbname": "PGDATABASE",
    "sslmode": "PGSSLMODE",
}


def _libpq_env(dsn: str) -> dict[str, str]:
    """``dsn`` as libpq's PG* environment variables."""
    return {_ENV_OF[k]: str(v) for k, v in conninfo_to_dict(dsn).items() if v}


def test_empty_connection_options_leave_the_environment_in_charge(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """``-h "" -p "" -U ""`` (a script's ``-h "$HOST"`` with HOST unset):
    pgbench hands them to PQconnectdbParams, which skips empty values, so
    PGHOST, PGPORT and PGUSER apply; pgsurge's conninfo string set them
    empty: the compiled-in socket directory and the OS user, and the run
    failed to connect (found with PGHOST set and ``-h ""``)."""
    env = _libpq_env(bench_db)
    args = ["-n", "-S", "-t", "1", "-h", "", "-p", "", "-U", ""]
    for proc in (
        run_pgbench(pgbench_bin, args, cwd=tmp_path, env=env, timeout=60),
        run_pgsurge(args, cwd=tmp_path, env=env, timeout=60),
    ):
        assert proc.status == 0, proc.stderr
        assert proc.number("number of transactions actually processed:") == "1/1"


def test_empty_port_option_takes_pgport(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """``-p ""`` with PGPORT naming a port nothing listens on: pgbench
    fails to connect there, as libpq takes PGPORT; pgsurge connected to
    the default port instead."""
    env = {**_libpq_env(bench_db), "PGPORT": "1"}
    args = ["-n", "-S", "-t", "1", "-p", ""]
    ref = run_pgbench(pgbench_bin, args, cwd=tmp_path, env=env, timeout=60)
    ours = run_pgsurge(args, cwd=tmp_path, env=env, timeout=60)
    assert ref.status == 1, ref.stderr
    assert (ours.status, ours.messages) == (ref.status, ref.messages)
