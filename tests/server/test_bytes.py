"""Bytes in, bytes out (issue 11): scripts, -D values and the server's
messages travel as the bytes they are, whatever the database encoding.

A Latin-1 script on a LATIN1 database ended in a ``UnicodeEncodeError``
traceback; pgbench sends the file's bytes as they are. Each run here is
compared with the reference pgbench byte for byte (after the banner, the
program name and the timings).
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.fix_run import plain_env

pytestmark = pytest.mark.server

_NUM = re.compile(rb"\d+(\.\d+)?")


@pytest.fixture
def latin1_db(server_dsn: str) -> Iterator[str]:
    name = f"l_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                "TEMPLATE template0"
            ).format(sql.Identifier(name))
        )
    yield psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)
            )
        )


def _run(cmd: list[str], cwd: Path, **env: str) -> tuple[int, bytes, bytes]:
    proc = subprocess.run(
        cmd, capture_output=True, cwd=cwd, env={**plain_env(), **env}, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def _masked(data: bytes) -> list[bytes]:
    data = data.replace(b"pgbench", b"pgsurge")
    return [_NUM.sub(b"N", line) for line in data.splitlines()[1:]]


SCRIPTS = {
    # the reproduction
    "literal": b"SELECT '\xe9t\xe9';\n",
    # \gset of Latin-1 text, substituted back, -D bytes, a per-command report
    "gset": (
        b"SELECT '\xe9t\xe9' AS a, :v AS b \\gset\n"
        b"SELECT :v = '\xe9x' AS ok, '\xe9' AS c \\gset\n"
        b"SELECT 1 WHERE '\xe9' = '\xe9';\n"
    ),
    # a server error quoting the Latin-1 statement back (its LINE 1:)
    "error": b"SELECT '\xe9t\xe9' AS a \\gset\nSELECT :a;\n",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
@pytest.mark.parametrize("fastloop", ["", "1"])
def test_latin1_script_as_pgbench(
    latin1_db: str,
    pgbench_bin: Path,
    tmp_path: Path,
    name: str,
    mode: str,
    fastloop: str,
) -> None:
    path = tmp_path / f"{name}.sql"
    path.write_bytes(SCRIPTS[name])
    args = ["-n", "-r", "-M", mode, "-f", str(path), "-t", "3", latin1_db]
    args[-1:-1] = ["-D", "v='\udce9x'"]  # -D bytes, as a shell passes them
    ref = _run([str(pgbench_bin), *args], tmp_path)
    ours = _run(
        [sys.executable, "-m", "pgsurge", *args], tmp_path, PGSURGE_NO_FASTLOOP=fastloop
    )
    assert b"Traceback" not in ours[2], ours[2].decode("utf-8", "replace")
    assert ours[0] == ref[0], (ref[2], ours[2])
    assert _masked(ours[1]) == _masked(ref[1])
    assert _masked(ours[2]) == _masked(ref[2])


def test_latin1_literal_on_the_fast_loop(latin1_db: str, tmp_path: Path) -> None:
    """The plain script without -r runs on the C loop, with the file's bytes."""
    path = tmp_path / "l.sql"
    path.write_bytes(SCRIPTS["literal"])
    status, out, err = _run(
        [sys.executable, "-m", "pgsurge", "-n", "-f", str(path), "-t", "5", latin1_db],
        tmp_path,
    )
    assert status == 0, err
    assert b"actually processed: 5/5" in out
