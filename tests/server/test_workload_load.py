"""A workload's own @load: its failures name the exception and the line
(a parallel part too), its db.execute takes $n parameters as sql() does,
and on the embedded server a workload with tables of its own does not get
pgbench's tables first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgsurge.server import EmbeddedServer
from pgsurge.server.embedded import ENV_DATA_DIR

pytestmark = pytest.mark.server


def run_cli(
    args: list[str], dsn: str | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, *([dsn] if dsn else [])],
        capture_output=True,
        text=True,
        env=base | (env or {}),
        timeout=600,
    )


LOADER = """
from pgsurge.workloads import load, sql, transaction

one = sql("SELECT v FROM kv WHERE k = $1")

@transaction
def t(ctx):
    yield one(ctx.random(1, 4))

def part(db, i):
    if i == 3:
        raise ValueError(f"bad value in part {i}")
    db.execute("INSERT INTO kv SELECT $1, $2 || $1::text", [i, "v%"])

@load
def fill(db):
    db.execute("DROP TABLE IF EXISTS kv")
    db.execute("CREATE TABLE kv (k int PRIMARY KEY, v text)")
    db.parallel(part, PARTS)
"""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_failing_load_part_shows_the_exception_and_its_line(
    fresh_db: str, tmp_path: Path, jobs: str
) -> None:
    path = tmp_path / "w.py"
    path.write_text(LOADER.replace("PARTS", "[1, 2, 3, 4]"))
    proc = run_cli(["-i", "-f", str(path), "--init-jobs", jobs], fresh_db)
    assert proc.returncode == 1, proc.stderr
    assert "ValueError: bad value in part 3" in proc.stderr, proc.stderr
    assert f'File "{path}", line 12, in part' in proc.stderr, proc.stderr
    assert "pgsurge/" not in proc.stderr  # the workload's frames only


def test_load_execute_takes_dollar_parameters(fresh_db: str, tmp_path: Path) -> None:
    path = tmp_path / "w.py"
    path.write_text(LOADER.replace("PARTS", "[1, 2, 4]"))
    proc = run_cli(["-i", "-f", str(path), "--init-jobs", "2"], fresh_db)
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(fresh_db) as conn:
        rows = conn.execute("SELECT k, v FROM kv ORDER BY k").fetchall()
    assert rows == [(1, "v%1"), (2, "v%2"), (4, "v%4")]
    # a count that does not match its $n: one clear error
    path.write_text(LOADER.replace("PARTS", "[1]").replace("[i, ", "[i, i, "))
    proc = run_cli(["-i", "-f", str(path)], fresh_db)
    assert proc.returncode == 1
    assert "the statement takes 2 parameters ($1..$n, as in sql()), got 3" in (
        proc.stderr
    )


@pytest.fixture
def location() -> Iterator[Path]:
    """A fresh embedded server location, stopped afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-wl-emb-"))
    if os.geteuid() == 0:
        os.chmod(tmp, 0o711)  # let the server's system user pass
    loc = tmp / "srv"
    yield loc
    if (loc / "data").exists():
        EmbeddedServer(loc).stop()
    shutil.rmtree(tmp, ignore_errors=True)


def test_embedded_run_of_a_workload_with_its_own_tables(
    location: Path, tmp_path: Path
) -> None:
    env = {ENV_DATA_DIR: str(location)}
    path = tmp_path / "w.py"
    path.write_text(LOADER.replace("PARTS", "[1, 2, 4]"))
    proc = run_cli(["--embedded", "-i", "-f", str(path)], None, env)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli(["--embedded", "-f", str(path), "-t", "5"], None, env)
    assert proc.returncode == 0, proc.stderr
    assert "initializing them at scale 1" not in proc.stderr
    assert "vacuum" not in proc.stderr
    uri = run_cli(["server", "uri"], None, env).stdout.strip()
    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT to_regclass('pgbench_accounts')").fetchone()
    assert row == (None,)
