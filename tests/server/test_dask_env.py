"""A multi-host run takes the coordinator's libpq environment along
(issue 24): ``PGPASSWORD`` or a password file set for the coordinator
only, a role that must give its password, two hosts whose environment
has none of it. The run succeeds and the password shows nowhere; a
host's connection error is printed by the coordinator with the host's
name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.fix_dask import Cluster, TlsFiles, base_env, pgsurge_cmd

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pgsurge_cmd(*args),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("where", ["PGPASSWORD", "pgpass"])
def test_the_coordinators_password_reaches_the_hosts(
    where: str,
    bench_db: str,
    password_role: tuple[str, str],
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    role, password = password_role
    target = psycopg.conninfo.make_conninfo(bench_db, user=role)
    env = base_env()
    # no password file of the caller's (the hosts have none either)
    env["HOME"] = str(tmp_path)
    if where == "PGPASSWORD":
        env["PGPASSWORD"] = password
    else:
        params = psycopg.conninfo.conninfo_to_dict(target)
        escaped = password.replace("\\", "\\\\").replace(":", "\\:")
        pgpass = tmp_path / ".pgpass"
        pgpass.write_text(f"*:*:{params['dbname']}:{role}:{escaped}\n")
        pgpass.chmod(0o600)
    # without it, the role cannot connect: the password is needed
    nobody = tmp_path / "empty"
    nobody.mkdir()
    denied = _run(["-n", "-S", "-t", "1", target], base_env() | {"HOME": str(nobody)})
    assert denied.returncode == 1, denied.stderr
    out_json = tmp_path / "run.json"
    done = _run(
        [
            *("--dask", cluster.address, "-n", "-S", "-t", "200", "-c", "4"),
            *("-j", "2", "-P", "1", "--json", str(out_json), target),
        ],
        env,
    )
    assert done.returncode == 0, done.stderr
    assert "number of transactions actually processed: 800/800" in done.stdout
    doc = json.loads(out_json.read_text())
    assert [h["transactions"] for h in doc["hosts"]] == [400, 400]
    for text in (done.stdout, done.stderr, out_json.read_text()):
        assert password not in text
    for log in cluster.logs:
        assert password not in log.read_text(errors="replace"), log


def test_a_hosts_connection_error_is_printed_with_its_name(
    bench_db: str, cluster: Cluster, server_dsn: str
) -> None:
    # a role allowed one connection: the setup connection gets it, the
    # hosts' clients are refused by the server
    role = f"t_dask_one_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 1").format(
                sql.Identifier(role)
            )
        )
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(role)
            )
        )
    try:
        target = psycopg.conninfo.make_conninfo(bench_db, user=role)
        done = _run(
            [
                *("--dask", cluster.address, "-n", "-S", "-t", "10", "-c", "4"),
                *("-j", "2", target),
            ],
            base_env(),
        )
    finally:
        with psycopg.connect(bench_db, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr
    assert re.search(
        r"^pgsurge: host \d \(load\d\): error: connection to server .*"
        r"too many connections for role",
        done.stderr,
        re.M,
    ), done.stderr
    assert "its messages are on its stderr" not in done.stderr


def test_a_tls_cluster_runs_end_to_end(
    bench_db: str, password_role: tuple[str, str], tmp_path: Path
) -> None:
    tls = TlsFiles(tmp_path)
    cluster = Cluster(tmp_path, 2, tls)
    try:
        assert cluster.address.startswith("tls://")
        role, password = password_role
        target = psycopg.conninfo.make_conninfo(bench_db, user=role)
        out_json = tmp_path / "run.json"
        args = [
            *("--dask", cluster.address, "-n", "-S", "-t", "100", "-c", "4"),
            *("-j", "2", "--json", str(out_json), target),
        ]
        env = base_env() | tls.env() | {"PGPASSWORD": password}
        done = _run(args, env)
        # without Dask's TLS settings the coordinator cannot reach it
        refused = _run(args, base_env() | {"PGPASSWORD": password})
    finally:
        cluster.close()
    assert done.returncode == 0, done.stderr
    assert "number of transactions actually processed: 400/400" in done.stdout
    doc = json.loads(out_json.read_text())
    assert [h["address"][:6] for h in doc["hosts"]] == ["tls://", "tls://"]
    assert "travels in clear" not in done.stderr  # (and on loopback anyway)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith(
        "pgsurge: error: a tls:// Dask scheduler needs Dask's TLS settings"
    ), refused.stderr
    assert "Traceback" not in refused.stderr
    for text in (done.stdout, done.stderr, out_json.read_text()):
        assert password not in text
