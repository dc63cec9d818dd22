"""Every value type and function on the C loop: C vs Python vs pgbench 18.

Scripts draw with ``random_zipfian``, ``random_gaussian`` and
``random_exponential``, compute doubles, NULLs and booleans (``case``,
``is``, casts, the math functions), sleep for a variable, and write what
they got into a table, as text, exactly as each tool substitutes it into
SQL. Each script runs three times with one client per worker and the same
``--random-seed``: in this process on the C loop (``PGSURGE_FASTLOOP=
require``, and a spy on the loop counts its hand-backs to Python: the
commands ran in C, not in Python after a hand-back), as a subprocess on
the Python loop, and with the reference pgbench. The three tables must be
equal row for row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.engine import fastloop
from tests.fix_db import run_worker
from tests.fix_run import run_pgbench, run_pgsurge

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]

_TABLE = "CREATE TABLE v (id bigserial PRIMARY KEY, cid int, k int, x text)"


def _put(k: int, expr: str) -> str:
    """An INSERT of one value's text (a cast: the tool's text, unchanged)."""
    values = f"(:client_id, {k}, CAST({expr} AS text))"
    return f"INSERT INTO v (cid, k, x) VALUES {values};\n"


SCRIPTS = {
    "zipfian": "\\set aid random_zipfian(1, 100000, 1.07)\n"
    "\\set z random_zipfian(1, 1000, 2.5)\n" + _put(1, ":aid") + _put(2, ":z"),
    "gaussian": "\\set aid random_gaussian(1, 100000, 2.5)\n" + _put(1, ":aid"),
    "exponential": "\\set aid random_exponential(1, 100000, 4.0)\n" + _put(1, ":aid"),
    "double": "\\set r random(1, 100000) * 0.5\n\\set aid int(:r) + 1\n"
    "\\set q :r / 3\n\\set m mod(:aid, 7) + abs(-:r)\n"
    + _put(1, ":r")
    + _put(2, ":aid")
    + _put(3, ":q")
    + _put(4, ":m"),
    "logic": "\\set a random(0, 3)\n"
    "\\set n case when :a = 0 then null when :a = 1 then 2.5 else :a end\n"
    "\\set isn :n is null\n"
    "\\set b :a > 1 and not (:a = 3)\n"
    "\\set f sqrt(:a) + ln(:a + 1) + exp(-:a) + pow(2, :a) + pi()\n"
    "\\set g greatest(:a, 1.5, -1) + least(:a, 2) + double(:a) / 7\n"
    "\\set big 9007199254740993.0 * (:a + 1)\n"
    "\\set inf 1.0 / (:a - :a)\n"
    "\\if :n is not null and :n > 2\n\\set br 1\n\\elif :b\n\\set br 2\n"
    "\\else\n\\set br 3\n\\endif\n"
    "\\sleep :f us\n"
    + _put(1, ":n")
    + _put(2, ":isn")
    + _put(3, ":b")
    + _put(4, ":f")
    + _put(5, ":g")
    + _put(6, ":big")
    + _put(7, ":inf")
    + _put(8, ":br"),
    # text from \\gset and -D (ratio=0.25), typed when read
    "text": "SELECT 2.5 AS g, 'abc' AS h, 7 AS i, NULL AS j \\gset\n"
    "\\set w :g * 2 + :i + :ratio * 4\n"
    "\\set r random(1, 1000) * :ratio\n"
    "\\sleep :g us\n"
    + _put(1, ":r")
    + _put(2, ":w")
    + _put(3, ":h")
    + _put(4, ":j")
    + _put(5, ":ratio"),
}
#: -D of a script (and the worker's initial variables)
DEFINES = {"text": (("ratio", "0.25"),)}


def _rows(dsn: str) -> list[tuple[int, int, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT cid, k, x FROM v ORDER BY cid, id").fetchall()
        conn.execute("TRUNCATE v")
    return rows


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("mode", ["prepared", "extended"])
def test_values_same_in_c_python_and_pgbench(
    c_loops: list[Any],
    name: str,
    mode: str,
    fresh_db: str,
    tmp_path: Path,
    pgbench_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(_TABLE)
    script = tmp_path / f"{name}.sql"
    script.write_text(SCRIPTS[name])
    args = ["-f", str(script), "-M", mode, "-c", "2", "-t", "150"]
    args += ["--random-seed", "5", "-n"]
    for var, value in DEFINES.get(name, ()):
        args += ["-D", f"{var}={value}"]

    loops = c_loops
    _w, result = run_worker(args, fresh_db, variables=DEFINES.get(name, ()))
    monkeypatch.delenv("PGSURGE_FASTLOOP")
    assert result.total.cnt == 300
    c_rows = _rows(fresh_db)
    # C ran the commands: a hand-back per client for its first prepares
    # (-M prepared) and one at its end, not one per transaction
    assert loops and loops[0]._fast.handbacks <= 2 * 3, loops[0]._fast.handbacks

    # -j 1, as the in-process worker: the same client streams
    py = run_pgsurge([*args, "-j", "1"], fresh_db, cwd=tmp_path, loop="python")
    assert py.status == 0, py.stderr
    py_rows = _rows(fresh_db)
    ref = run_pgbench(pgbench_bin, [*args, "-j", "1"], fresh_db, cwd=tmp_path)
    assert ref.status == 0, ref.stderr
    pg_rows = _rows(fresh_db)
    assert len(c_rows) == 300 * SCRIPTS[name].count("INSERT")
    assert c_rows == py_rows
    assert c_rows == pg_rows
    # the draws are spread (not one value repeated; logic's: a of 0..3)
    assert len({x for _c, k, x in c_rows if k == 1}) >= (4 if name == "logic" else 10)


def test_script_of_200_commands_runs_in_c(
    c_loops: list[Any],
    fresh_db: str,
    tmp_path: Path,
    pgbench_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 200 variables and 200 SQL commands (no 64 limit), as bench/long200.sql
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(_TABLE)
    text = "".join(
        f"\\set a{i} random(1, 1000) * {i % 3 + 1}.5\n" + _put(i, f":a{i}")
        for i in range(200)
    )
    script = tmp_path / "long.sql"
    script.write_text(text)
    args = ["-f", str(script), "-M", "prepared", "-c", "1", "-t", "5"]
    args += ["--random-seed", "9", "-n"]
    loops = c_loops
    run_worker(args, fresh_db, variables=())
    c_rows = _rows(fresh_db)
    assert len(c_rows) == 1000
    # the first transaction prepares its 200 statements in Python (a
    # hand-back each); C runs the other four
    assert loops[0]._fast.handbacks <= 200 + 2
    ref = run_pgbench(pgbench_bin, args, fresh_db, cwd=tmp_path)
    assert ref.status == 0, ref.stderr
    assert c_rows == _rows(fresh_db)


@pytest.mark.parametrize(
    "text",
    [
        # a parameter out of range now and then: Python gives the message
        "\\set a random(1, 4)\n\\set z random_gaussian(1, 10, :a)\n"
        "INSERT INTO v (cid, k, x) VALUES (:client_id, 1, :z);\n",
        "\\set a random(0, 3) * 0.5\n\\set z random_exponential(1, 10, :a)\n"
        "INSERT INTO v (cid, k, x) VALUES (:client_id, 1, :z);\n",
        # a double too big for int(), a boolean where a number is expected
        "\\set a random(0, 3)\n\\set z int(1e300 * :a) + 1\n"
        "INSERT INTO v (cid, k, x) VALUES (:client_id, 1, :z);\n",
        "\\set a random(0, 3)\n\\set z (:a = 0) + 1\n"
        "INSERT INTO v (cid, k, x) VALUES (:client_id, 1, :z);\n",
        # text a \gset stored, not a number
        "\\set a random(0, 3)\n"
        "SELECT CASE WHEN :a = 0 THEN 'x' ELSE '1.5' END AS t \\gset\n"
        "\\set z :t * 2\nINSERT INTO v (cid, k, x) VALUES (:client_id, 1, :z);\n",
    ],
)
def test_errors_same_messages_as_python(
    fresh_db: str, tmp_path: Path, pgbench_bin: Path, text: str
) -> None:
    # C hands the failing command to Python, which prints pgbench's message
    # and aborts the client: the same messages, rows and status as on the
    # Python loop, the same rows and status as pgbench's (test_eval_diff.py
    # compares the messages with pgbench's)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(_TABLE)
    (tmp_path / "e.sql").write_text(text)
    args = ["-f", "e.sql", "-M", "prepared", "-c", "2", "-j", "2", "-t", "30"]
    args += ["--random-seed", "3", "-n"]
    fast = run_pgsurge(args, fresh_db, cwd=tmp_path, loop="c")
    fast_rows = _rows(fresh_db)
    slow = run_pgsurge(args, fresh_db, cwd=tmp_path, loop="python")
    slow_rows = _rows(fresh_db)
    ref = run_pgbench(pgbench_bin, args, fresh_db, cwd=tmp_path)
    ref_rows = _rows(fresh_db)
    assert fast.status == slow.status == ref.status == 2, (fast.stderr, ref.stderr)
    assert fast_rows == slow_rows == ref_rows
    assert sorted(fast.stderr.splitlines()) == sorted(slow.stderr.splitlines())
