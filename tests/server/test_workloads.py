"""Python workloads against a real server: py-tpcb leaves the tables the
builtin tpcb-like leaves, retries replay the same random values, user
errors are reported with the user's traceback, -r/--json show the
transactions and statements, the YCSB workloads load and run."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import InitConfig, RunConfig
from pgsurge.errors import ExitStatus
from pgsurge.init import run_init
from pgsurge.runner import run
from pgsurge.stats.results import RunResult
from tests.fix_data import readme_example

pytestmark = pytest.mark.server


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def run_inprocess(args: list[str], dsn: str) -> tuple[ExitStatus, RunResult, str, str]:
    cfg = parse_command_line([*args, dsn], environ={}, stderr=io.StringIO())
    assert isinstance(cfg, RunConfig)
    results: list[RunResult] = []
    out, err = io.StringIO(), io.StringIO()
    status = run(cfg, stdout=out, stderr=err, on_result=results.append)
    return status, results[0] if results else None, out.getvalue(), err.getvalue()  # type: ignore[return-value]


def run_cli(args: list[str], dsn: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args, dsn],
        capture_output=True,
        text=True,
        env=base_env() | (env or {}),
        timeout=300,
    )


def init(dsn: str, *args: str) -> None:
    cfg = parse_command_line(["-i", "-q", *args, dsn], environ={})
    assert isinstance(cfg, InitConfig)
    run_init(cfg, stream=io.StringIO())


@pytest.fixture
def other_db(server_dsn: str) -> str:
    """A second fresh database (fresh_db gives one per test)."""
    name = "pgsurge_wl_other"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    yield psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def snapshot(dsn: str) -> list[object]:
    with psycopg.connect(dsn) as conn:
        return [
            conn.execute(q).fetchall()
            for q in (
                "SELECT aid, bid, abalance, filler FROM pgbench_accounts ORDER BY aid",
                "SELECT tid, bid, tbalance FROM pgbench_tellers ORDER BY tid",
                "SELECT bid, bbalance FROM pgbench_branches ORDER BY bid",
                "SELECT count(*), sum(delta) FROM pgbench_history",
                "SELECT tid, bid, aid, delta FROM pgbench_history"
                " ORDER BY tid, bid, aid, delta",
            )
        ]


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_py_tpcb_leaves_the_tables_of_tpcb_like(
    fresh_db: str, other_db: str, mode: str
) -> None:
    runs = {}
    for db, builtin in ((fresh_db, "tpcb-like"), (other_db, "py-tpcb")):
        init(db)
        args = ["-n", "-b", builtin, "-M", mode, "-c", "4", "-j", "2", "-t", "50"]
        status, res, _, err = run_inprocess([*args, "--random-seed=7"], db)
        assert status == ExitStatus.SUCCESS, err
        assert res.total.cnt == 200 and res.total.failures == 0
        runs[builtin] = snapshot(db)
    assert runs["py-tpcb"] == runs["tpcb-like"]
    assert runs["py-tpcb"][3][0][0] == 200  # history rows


RETRY = """
from pgsurge.workloads import sql, transaction

LOG = {log!r}
begin = sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
read = sql("SELECT n FROM hot WHERE id = 1")
bump = sql("UPDATE hot SET n = n + $1 WHERE id = 1", fetch=False)
commit = sql("COMMIT")

def note(ctx, what, v):
    with open(LOG, "a") as f:
        f.write(f"{{ctx.client_id}} {{what}} {{v}}\\n")

@transaction
def t(ctx):
    v = ctx.random(1, 1_000_000)
    note(ctx, "try", v)
    yield begin()
    yield read()
    yield ctx.sleep(0.002)
    yield bump(v)
    yield commit()
    note(ctx, "done", v)
"""


def test_serialization_failures_retried_with_the_same_values(
    fresh_db: str, tmp_path: Path
) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE hot (id int PRIMARY KEY, n bigint)")
        conn.execute("INSERT INTO hot VALUES (1, 0)")
    log = tmp_path / "log.txt"
    path = tmp_path / "retry.py"
    path.write_text(RETRY.format(log=str(log)))
    args = ["-n", "-f", str(path), "-c", "4", "-j", "2", "-t", "15"]
    status, res, _, err = run_inprocess([*args, "--max-tries=1000"], fresh_db)
    assert status == ExitStatus.SUCCESS, err
    assert res.total.retried > 0 and res.total.retries > 0
    assert res.total.failures == 0 and res.total.cnt == 60
    attempts: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        client, what, v = line.split()
        attempts[client].append((what, int(v)))
    retried = 0
    done_sum = 0
    for seq in attempts.values():
        tries: list[int] = []
        for what, v in seq:
            if what == "try":
                tries.append(v)
                continue
            # every try of one transaction drew the same value
            assert tries and set(tries) == {v}, seq
            retried += len(tries) > 1
            done_sum += v
            tries = []
    assert retried == res.total.retried
    with psycopg.connect(fresh_db) as conn:
        row = conn.execute("SELECT n FROM hot").fetchone()
    assert row is not None and row[0] == done_sum

    # without retries, pgbench's accounting: failures, not aborts
    log.unlink()
    status, res, out, err = run_inprocess([*args, "--max-tries=1"], fresh_db)
    assert status == ExitStatus.SUCCESS, err
    assert res.total.failures > 0
    assert res.total.cnt + res.total.failures == 60
    assert "number of serialization failures" in out or "failed" in out


BAD = {
    "exception": (
        "from pgsurge.workloads import sql, transaction\n"
        "one = sql('SELECT 1')\n"
        "def helper(x):\n"
        "    return {}[x]\n"
        "@transaction\n"
        "def t(ctx):\n"
        "    yield one()\n"
        "    helper(3)\n",
        r"aborted in script 0 \(.*bad.py: t\):\nTraceback \(most recent call last\):\n"
        r'  File ".*bad.py", line 8, in t\n    helper\(3\)\n'
        r'  File ".*bad.py", line 4, in helper\n    return \{\}\[x\]\n'
        r"(.*\n)?KeyError: 3\n",
    ),
    "not-a-statement": (
        "from pgsurge.workloads import transaction\n"
        "@transaction\n"
        "def t(ctx):\n"
        "    yield 'SELECT 1'\n",
        r'File ".*bad.py", line 4: yielded \'SELECT 1\' \(str\), not a statement',
    ),
    "parameter-count": (
        "from pgsurge.workloads import sql, transaction\n"
        "two = sql('SELECT $1::int + $2::int')\n"
        "@transaction\n"
        "def t(ctx):\n"
        "    yield two(1)\n",
        # pgsurge's own check: the message, the line and a caret under the
        # call, as a script's error is shown; no traceback
        r"aborted in script 0 \(.*bad.py: t\):\n"
        r".*bad.py:5: statement 'two' takes 2 parameters, got 1\n"
        r"    yield two\(1\)\n          \^\^\^\^\^\^\n",
    ),
    "no-row": (
        "from pgsurge.workloads import sql, transaction\n"
        "none = sql('SELECT 1 WHERE false')\n"
        "@transaction\n"
        "def t(ctx):\n"
        "    v = (yield none()).one()\n",
        # the result's check names the workload's line all the same
        r"aborted in script 0 \(.*bad.py: t\):\n"
        r".*bad.py:5: expected one row, got 0\n"
        r"    v = \(yield none\(\)\).one\(\)\n        \^+\n",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_errors_in_a_transaction(fresh_db: str, tmp_path: Path, case: str) -> None:
    text, pattern = BAD[case]
    path = tmp_path / "bad.py"
    path.write_text(text)
    proc = run_cli(["-n", "-f", str(path), "-t", "3"], fresh_db)
    assert proc.returncode == 2, proc.stderr
    assert re.search(pattern, proc.stderr), proc.stderr
    assert "pgsurge/engine" not in proc.stderr  # the user's frames only
    if case in ("parameter-count", "no-row"):
        assert "Traceback" not in proc.stderr
    assert "Run was aborted" in proc.stderr


def test_import_error_is_status_1(fresh_db: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("import no_such_module_here\n")
    proc = run_cli(["-n", "-f", str(path), "-t", "3"], fresh_db)
    assert proc.returncode == 1
    assert "ModuleNotFoundError: No module named 'no_such_module_here'" in proc.stderr
    assert "Traceback" in proc.stderr and "pgsurge/" not in proc.stderr


REPORT = """
from pgsurge.workloads import sql, transaction

begin = sql("BEGIN")
get = sql("SELECT $1::int * 2 AS v")
put = sql("SELECT $1::text", fetch=False)
commit = sql("COMMIT")

@transaction(weight=3)
def double(ctx):
    yield begin()
    v = (yield get(ctx.random(1, 10))).scalar()
    assert v % 2 == 0
    yield put(str(v))
    yield commit()

@transaction
def nap(ctx):
    yield ctx.sleep(0.001)
    yield put(None)
"""


@pytest.mark.parametrize("mode", ["simple", "prepared"])
def test_report_rows_and_json(fresh_db: str, tmp_path: Path, mode: str) -> None:
    path = tmp_path / "report.py"
    path.write_text(REPORT)
    out_json = tmp_path / "r.json"
    args = ["-n", "-f", str(path), "-M", mode, "-r", "-c", "2", "-t", "40"]
    status, res, out, err = run_inprocess([*args, f"--json={out_json}"], fresh_db)
    assert status == ExitStatus.SUCCESS, err
    assert res.total.cnt == 80 and res.total.failures == 0
    assert f"SQL script 1: {path}: double" in out
    assert f"SQL script 2: {path}: nap" in out
    assert " - weight: 3 (targets 75.0% of total)" in out
    rows = re.findall(r"^\s+[\d.]+\s+\d+ (.*)$", out, re.MULTILINE)
    assert rows == [
        "BEGIN",
        "SELECT $1::int * 2 AS v",
        "SELECT $1::text",
        "COMMIT",
        "SELECT $1::text",
        "ctx.sleep()",
    ]
    doc = json.loads(out_json.read_text())
    scripts = doc["scripts"]
    assert [[c["line"] for c in s["commands"]] for s in scripts] == [
        rows[:4],
        rows[4:],
    ]
    assert [s["weight"] for s in scripts] == [3, 1]
    # per-statement latencies, with percentiles (histograms) in the JSON
    get_row = scripts[0]["commands"][1]
    assert get_row["latency_ms"] is not None and get_row["failures"] == 0
    assert res.per_script[0].cnt + res.per_script[1].cnt == 80


def test_ycsb_loads_and_runs(fresh_db: str) -> None:
    init(fresh_db, "-b", "ycsb-a", "--init-jobs", "2")
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM usertable").fetchone() == (100_000,)
    for name in ("ycsb-a", "ycsb-d", "ycsb-e", "ycsb-f"):
        status, res, _, err = run_inprocess(
            ["-n", "-b", name, "-c", "3", "-j", "2", "-t", "300", "-M", "prepared"],
            fresh_db,
        )
        assert status == ExitStatus.SUCCESS, err
        assert res.total.cnt == 900 and res.total.failures == 0, name
    with psycopg.connect(fresh_db) as conn:
        n = conn.execute("SELECT count(*) FROM usertable").fetchone()
    assert n is not None and n[0] > 100_000  # ycsb-d and -e inserted


def test_tpcc_consistency_after_a_multi_client_run(fresh_db: str) -> None:
    from pgsurge.workloads.bundled import tpcc

    init(fresh_db, "-b", "tpcc-like", "--init-jobs", "2")
    assert [bad for _, bad in tpcc.check_consistency(fresh_db)] == [0, 0, 0, 0]
    # one client per worker: each client's transaction types, hence its
    # random draws, follow from the seed alone (a worker's clients share
    # its choice stream in the order they happen to come)
    args = ["-n", "-b", "tpcc-like", "-c", "4", "-j", "4", "-t", "150", "-r"]
    status, res, _, err = run_inprocess(
        [*args, "--max-tries=20", "--random-seed=3", "-M", "prepared"], fresh_db
    )
    assert status == ExitStatus.SUCCESS, err
    assert res.total.failures == 0 and res.total.cnt == 600
    names = [s.desc.split(": ")[1] for s in res.facts.scripts]
    assert names == ["new_order", "payment", "order_status", "delivery", "stock_level"]
    assert all(s.cnt > 0 for s in res.per_script)
    # TPC-C's conditions 1-4 hold after concurrent New-Orders, Payments and
    # Deliveries
    assert tpcc.check_consistency(fresh_db) == [(name, 0) for name, _ in tpcc.CHECKS]
    # New-Orders that named the unused item rolled back: completed
    # transactions (no failure), but no order
    with psycopg.connect(fresh_db) as conn:
        row = conn.execute("SELECT sum(d_next_o_id - 3001) FROM district").fetchone()
    assert row is not None
    committed = row[0]
    rollbacks = res.per_script[0].cnt - committed
    assert 0 < rollbacks <= res.per_script[0].cnt * 0.05, (rollbacks, committed)
    # -r counts them on new_order's ROLLBACK row (--json: its latency count)
    rows = res.facts.scripts[0].commands
    assert rows.count("ROLLBACK") == 1
    assert res.per_command[0][rows.index("ROLLBACK")].latency.count == rollbacks


def test_readme_example_runs(fresh_db: str, tmp_path: Path) -> None:
    init(fresh_db)
    path = tmp_path / "transfer.py"
    path.write_text(readme_example())
    args = ["-n", "-f", str(path), "-c", "3", "-t", "30", "-r", "--max-tries=50"]
    status, res, out, err = run_inprocess(args, fresh_db)
    assert status == ExitStatus.SUCCESS, err
    assert res.total.cnt == 90 and res.total.failures == 0
    assert "ctx.sleep()" in out
    with psycopg.connect(fresh_db) as conn:
        total = conn.execute("SELECT sum(abalance) FROM pgbench_accounts").fetchone()
    assert total == (0,)  # transfers move money, never make it


BATCH = """
from pgsurge.workloads import sql, transaction

begin = sql("BEGIN")
put = sql("INSERT INTO kv VALUES ($1, $2)", fetch=False)
get = sql("SELECT v FROM kv WHERE k = $1")
count = sql("SELECT count(*) FROM kv WHERE k >= $1 AND k < $2")
commit = sql("COMMIT")

@transaction
def t(ctx):
    base = ctx.random(0, 10**12) * 10
    yield begin()
    results = yield [put(base + i, f"v{i}") for i in range(5)]
    assert results[0] is None or results[0].rowcount == 1, results
    got = yield [get(base + 3), count(base, base + 10), get(base + 99)]
    assert got[0].scalar() == "v3", got[0].rows()
    assert got[1].scalar() == 5
    assert got[2].first() is None
    assert (yield []) == []
    yield commit()
"""


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_batches(fresh_db: str, tmp_path: Path, mode: str) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE kv (k bigint PRIMARY KEY, v text)")
    path = tmp_path / "batch.py"
    path.write_text(BATCH)
    args = ["-n", "-f", str(path), "-M", mode, "-c", "2", "-t", "20", "-r"]
    status, res, _, err = run_inprocess(args, fresh_db)
    assert status == ExitStatus.SUCCESS, err
    assert res.total.cnt == 40 and res.total.failures == 0
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM kv").fetchone() == (200,)
