"""Python workloads on the C loop (``_fastloop_gen.c``): C steps the
generators, and leaves the tables Python's engine leaves.

The differential tests run a bundled workload twice from the same loaded
database (a copy made with ``CREATE DATABASE ... TEMPLATE``), once on
Python's engine and once on the C loop under ``PGSURGE_FASTLOOP=require``
with the same ``--random-seed``, one client (its draws, hence its rows,
follow from the seed alone), and compare every table (but its time
columns). The in-process runs read the C loop's counters: C stepped the
generators (``gen_steps``), handing a client back only for its first
prepares.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsurge.cli.options import parse_command_line
from pgsurge.config import InitConfig
from pgsurge.init import run_init
from tests.fix_db import run_worker

pytestmark = pytest.mark.server


def base_env() -> dict[str, str]:
    """This environment without libpq's variables (the target is given)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def init(dsn: str, *args: str) -> None:
    """``pgsurge -i -q ARGS DSN`` in this process (a workload's @load too)."""
    cfg = parse_command_line(["-i", "-q", *args, dsn], environ={})
    assert isinstance(cfg, InitConfig)
    run_init(cfg, stream=io.StringIO())


@pytest.fixture
def copy_db(server_dsn: str, fresh_db: str) -> Iterator[Any]:
    """copy(): a new database with fresh_db's contents, its dsn."""
    names: list[str] = []
    source = psycopg.conninfo.conninfo_to_dict(fresh_db)["dbname"]

    def copy() -> str:
        name = f"{source}_copy{len(names)}"
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
            )
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(str(source))
                )
            )
        names.append(name)
        return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)

    yield copy
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)
                )
            )


def digest(dsn: str) -> dict[str, tuple[int, str]]:
    """Every table's row count and the md5 of its rows in order, time
    columns left out (now() differs between runs)."""
    out = {}
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' ORDER BY 1"
            )
        ]
        for table in tables:
            cols = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND table_name = %s "
                    "AND data_type NOT LIKE 'timestamp%%' AND data_type <> 'date' "
                    "ORDER BY ordinal_position",
                    (table,),
                )
            ]
            row_text = sql.SQL("ROW({})::text").format(
                sql.SQL(", ").join(map(sql.Identifier, cols))
            )
            q = sql.SQL(
                "SELECT count(*), coalesce(md5(string_agg(t, '|' ORDER BY t)), '') "
                "FROM (SELECT {} AS t FROM {}) s"
            ).format(row_text, sql.Identifier(table))
            row = conn.execute(q).fetchone()
            assert row is not None
            out[table] = (int(row[0]), str(row[1]))
    return out


def run(args: list[str], dsn: str, loop: str) -> subprocess.CompletedProcess[str]:
    env = base_env()
    if loop == "c":
        env["PGSURGE_FASTLOOP"] = "require"
    else:
        env["PGSURGE_NO_FASTLOOP"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, "--client-cpu", dsn],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("workload", "count"), [("py-tpcb", 400), ("tpcc-like", 150), ("ycsb-a", 600)]
)
@pytest.mark.parametrize("mode", ["prepared", "extended", "simple"])
def test_c_and_python_leave_the_same_tables(
    fresh_db: str, copy_db: Any, workload: str, count: int, mode: str
) -> None:
    init(fresh_db, "-b", workload)
    dbs = {"python": copy_db(), "c": copy_db()}
    args = ["-n", "-b", workload, "-c", "1", "-j", "1", "-t", str(count)]
    # -r: per-statement latencies and their histograms (--percentiles), as C
    # records them per op
    args += ["-M", mode, "--random-seed=11", "--max-tries=5", "-r", "--percentiles"]
    for loop, db in dbs.items():
        r = run(args, db, loop)
        assert r.returncode == 0, r.stderr
        assert f"actually processed: {count}/{count}" in r.stdout, r.stdout
        engine = "C event loop" if loop == "c" else "Python engine"
        assert f"), {engine}" in r.stdout, r.stdout
    before = digest(fresh_db)
    after = {loop: digest(db) for loop, db in dbs.items()}
    assert after["c"] == after["python"]
    assert after["c"] != before  # the runs changed something


def test_c_steps_the_generators(fresh_db: str, c_loops: list[Any]) -> None:
    """py-tpcb on the C loop: every step of every transaction is C's but
    the first transaction's of each client and its first prepares."""
    init(fresh_db)
    args = ["-n", "-b", "py-tpcb", "-M", "prepared", "-c", "3", "-t", "300"]
    _, result = run_worker(args, fresh_db, variables=(("scale", 1),))
    assert result.total.cnt == 900 and result.total.failures == 0
    (loop,) = c_loops
    fast = loop._fast
    # 7 statements and the end: 8 steps a transaction
    assert fast.gen_steps >= 8 * (900 - 3 * 2)
    assert fast.handbacks <= 3 * 8
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM pgbench_history").fetchone() == (900,)


SLEEPY = """
from pgsurge.workloads import sql, transaction

ins = sql("INSERT INTO t (v, d, b, f) VALUES ($1, $2, $3::bytea, $4)", fetch=False)
one = sql("SELECT $1::int + 1")

@transaction
def t(ctx):
    n = ctx.random(1, 1000)
    got = (yield one(n)).scalar()
    assert got == n + 1
    yield ctx.sleep(0.0001)
    yield ins(f"it's {n}", None if n % 2 else n / 7, b"x%d" % n, n % 3 == 0)
"""


@pytest.mark.parametrize("mode", ["extended", "simple"])
def test_values_sleep_and_results_in_c(
    fresh_db: str, tmp_path: Path, c_loops: list[Any], mode: str
) -> None:
    """None, floats (repr), bytes and booleans bound by C; ctx.sleep run by
    C; a fetched result read by the generator: the same rows as Python."""
    wl = tmp_path / "sleepy.py"
    wl.write_text(SLEEPY)
    rows = {}
    for loop in ("python", "c"):
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS t")
            conn.execute("CREATE TABLE t (v text, d float8, b bytea, f bool)")
        args = ["-n", "-f", str(wl), "-M", mode, "-c", "2", "-t", "50"]
        args.append("--random-seed=5")
        if loop == "c":
            _, result = run_worker(args, fresh_db)
            assert result.total.cnt == 100
            # 4 steps a transaction; most of them C's
            fast = c_loops[-1]._fast
            assert fast.gen_steps >= 2 * 100, (fast.gen_steps, fast.handbacks)
        else:
            r = run(args, fresh_db, "python")
            assert r.returncode == 0, r.stderr
        with psycopg.connect(fresh_db) as conn:
            rows[loop] = conn.execute("SELECT * FROM t ORDER BY 1, 2, 3, 4").fetchall()
    assert len(rows["c"]) == 100
    assert rows["c"] == rows["python"]


BRANCHY = """
from pgsurge.workloads import sql, transaction

a = sql("INSERT INTO t (v, d, b, f) VALUES ($1, NULL, NULL, true)", fetch=False)
b = sql("INSERT INTO t (v, d, b, f) VALUES ($1, $2, NULL, false)", fetch=False)

@transaction
def t(ctx):
    n = ctx.random(1, 1000)
    for k in range(3):
        if (n + k) % 3:
            yield a(f"a {n} {k}")
        else:
            yield b(f"b {n} {k}", n / 3)
"""


def test_a_step_yielding_another_statement_than_last_time(
    fresh_db: str, tmp_path: Path, c_loops: list[Any]
) -> None:
    """C remembers, per step of a transaction, the statement yielded there
    last time (no lookup when it comes again): a transaction yielding
    either of two statements at the same step, and each statement at
    several steps, sends what it yielded, as Python's engine does."""
    wl = tmp_path / "branchy.py"
    wl.write_text(BRANCHY)
    rows = {}
    for loop in ("python", "c"):
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS t")
            conn.execute("CREATE TABLE t (v text, d float8, b bytea, f bool)")
        args = ["-n", "-f", str(wl), "-M", "prepared", "-c", "2", "-t", "60"]
        args.append("--random-seed=9")
        if loop == "c":
            _, result = run_worker(args, fresh_db)
            assert result.total.cnt == 120
            # 4 steps a transaction, nearly all C's (a client's first
            # prepares are Python's)
            fast = c_loops[-1]._fast
            assert fast.gen_steps >= 4 * (120 - 4), (fast.gen_steps, fast.handbacks)
            assert fast.handbacks <= 2 * 2
        else:
            r = run(args, fresh_db, "python")
            assert r.returncode == 0, r.stderr
        with psycopg.connect(fresh_db) as conn:
            rows[loop] = conn.execute("SELECT * FROM t ORDER BY 1, 2").fetchall()
    assert len(rows["c"]) == 360
    # both statements at every step: the memory missed and was refilled
    for k in range(3):
        kinds = {r[0][0] for r in rows["c"] if r[0].endswith(f" {k}")}
        assert kinds == {"a", "b"}, k
    assert rows["c"] == rows["python"]


ENDLESS = """
from pgsurge.workloads import SqlError, sql, transaction

bad = sql("SELECT 1/0")

@transaction
def t(ctx):
    while True:
        try:
            yield bad()
        except SqlError:
            pass
"""


@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_generator_catching_errors_forever_stops_at_T(
    fresh_db: str, tmp_path: Path, loop: str
) -> None:
    """Hostile finding: a generator that catches every SqlError in an
    endless loop kept its transaction, and the run, going past -T. Now the
    client stops at its next step after the deadline, as pgbench stops
    retrying at -T: the run ends, nothing counted."""
    wl = tmp_path / "endless.py"
    wl.write_text(ENDLESS)
    r = run(
        ["-n", "-f", str(wl), "-c", "2", "-T", "2", "-M", "prepared"], fresh_db, loop
    )
    assert r.returncode == 0, r.stderr
    assert "number of transactions actually processed: 0" in r.stdout, r.stdout
