"""A PostgreSQL cluster with ``pg_stat_statements`` loaded (issue 25).

The session's test server has no ``shared_preload_libraries`` (it would
need a restart, and the other tests share it), so the tests of
``--server-stats``' top statements get a cluster of their own for their
module: :class:`pgsurge.server.EmbeddedServer` in a temporary directory
(the wheel ships the extension), started, told to preload the library,
restarted. ``pgss_db`` is a database with the pgbench tables (``pgbench
-i -s 1``) and the extension, and ``plain_role`` a login role there
without ``pg_read_all_stats`` that may read and write those tables.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgsurge.server.embedded import EmbeddedServer
from tests.fix_run import tool_env
from tests.fix_tap import make_base

#: the cluster's socket name (its directory is private: no clash)
PORT = 54331


@pytest.fixture(scope="module")
def pgss_server() -> Iterator[str]:
    """A superuser conninfo of a cluster that preloads pg_stat_statements."""
    base = make_base()
    server = EmbeddedServer(base / "srv", port=PORT)
    try:
        params = server.ensure_running()
        dsn = psycopg.conninfo.make_conninfo(
            host=str(params.host),
            port=str(params.port),
            user=server.superuser,
            dbname="postgres",
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
            )
            conn.execute("ALTER SYSTEM SET autovacuum = off")
        server.stop()
        server.ensure_running()
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SHOW shared_preload_libraries").fetchone()
        assert row is not None and "pg_stat_statements" in row[0]
    except Exception as exc:  # a server that cannot be had: say why
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start the pg_stat_statements server: {exc}")
    try:
        yield dsn
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pgss_db(pgss_server: str, pgbench_bin: Path) -> Iterator[str]:
    """A database of that cluster with the pgbench tables (scale 1) and
    the extension; yields its conninfo."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pgss_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(pgss_server, dbname=name)
    subprocess.run(
        [str(pgbench_bin), "-i", "-s", "1", "-q", dsn],
        check=True,
        capture_output=True,
        env=tool_env(None),
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    yield dsn
    with psycopg.connect(pgss_server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)
            )
        )


@pytest.fixture
def plain_role(pgss_db: str) -> Iterator[str]:
    """A login role without pg_read_all_stats that may use the pgbench
    tables of ``pgss_db``; yields its conninfo there."""
    name = f"u_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(name)
    with psycopg.connect(pgss_db, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        conn.execute(
            sql.SQL(
                "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE"
                " ON ALL TABLES IN SCHEMA public TO {}"
            ).format(ident)
        )
    yield psycopg.conninfo.make_conninfo(pgss_db, user=name)
    with psycopg.connect(pgss_db, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(ident))
