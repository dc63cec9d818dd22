"""-C on the C loop (issue 22): C against the Python engine and pgbench 18.6.

Under -C the C loop opens every transaction's connection itself, with
``PQconnectStart``/``PQconnectPoll`` on its event loop, prepares the
statements anew on it under ``-M prepared``, and closes it at the
transaction's end; the connection time goes to pgbench's report lines
(``average connection time``, ``tps = … (including reconnection times)``).
Every C run is under ``PGSURGE_FASTLOOP=require`` (``loop="c"``) and is
compared with the Python loop's and with pgbench's: -t counts, the report
with numbers masked, the rows written, messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsurge.engine import fastloop
from tests.fix_db import run_worker, take_rows
from tests.fix_run import Outcome, run_pgbench, run_pgsurge

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]


def _three(
    pgbench_bin: Path, args: list[str], dsn: str, cwd: Path
) -> list[tuple[Outcome, list[tuple[int, int, int, int]], list[str]]]:
    """pgbench, pgsurge's C loop, its Python loop: each outcome with the
    rows it left in ``t`` and its -l lines."""
    out = []
    for tool in ("pgbench", "c", "python"):
        if tool == "pgbench":
            got = run_pgbench(pgbench_bin, args, dsn, cwd=cwd)
        else:
            got = run_pgsurge(args, dsn, cwd=cwd, loop=tool)  # type: ignore[arg-type]
        logs = []
        for path in cwd.glob("pgbench_log.*"):
            logs += path.read_text().splitlines()
            path.unlink()
        out.append((got, take_rows(dsn), logs))
    return out


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_select_only_connect_each(
    bench_db: str, pgbench_bin: Path, tmp_path: Path, mode: str
) -> None:
    args = ["-S", "-C", "-M", mode, "-c", "3", "-j", "2", "-t", "40", "-r"]
    outs = []
    for tool in ("pgbench", "c", "python"):
        if tool == "pgbench":
            got = run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path)
        else:
            got = run_pgsurge(args, bench_db, cwd=tmp_path, loop=tool)  # type: ignore[arg-type]
        assert got.status == 0, got.stderr
        assert got.number("number of transactions actually processed:") == "120/120"
        # pgbench's -C lines: the connection time of every transaction
        assert float(got.number("average connection time =").split()[0]) > 0
        assert got.line("tps = ").endswith("(including reconnection times)")
        assert "initial connection time" not in got.stdout
        outs.append(got)
    assert outs[1].report == outs[0].report, outs[1].stdout
    assert outs[2].report == outs[0].report


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_connect_each_same_rows(
    draws_db: str, pgbench_bin: Path, tmp_path: Path, mode: str
) -> None:
    # one client per worker and a seed: the same rows from the three,
    # every transaction on a new connection (the backend pids all differ)
    (tmp_path / "w.sql").write_text(
        "\\set a random(1, 1000000)\n"
        "\\set b random(1, 10)\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, pg_backend_pid(), :a, :b);\n"
        "SELECT CAST(:a AS bigint) * :b;\n"
    )
    args = ["-n", "-f", "w.sql", "-C", "-M", mode, "-c", "2", "-j", "2", "-t", "30"]
    args += ["--random-seed", "21", "-l"]
    runs = _three(pgbench_bin, args, draws_db, tmp_path)
    ref = runs[0][0]
    assert ref.status == 0, ref.stderr
    for got, rows, logs in runs:
        assert got.status == 0, got.stderr
        assert got.report == ref.report
        assert [(c, a, b) for c, _s, a, b in rows] == [
            (c, a, b) for c, _s, a, b in runs[0][1]
        ]
        assert len({s for _c, s, _a, _b in rows}) == 60
        # -l: a line per transaction, client and number as pgbench's
        assert sorted(x.split()[:2] for x in logs) == sorted(
            x.split()[:2] for x in runs[0][2]
        )
        assert len(logs) == 60


def test_prepare_failure_on_new_connections(
    draws_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # -M prepared under -C: C prepares on each new connection; a prepare
    # that fails goes to Python, which reports it and sends the query, as
    # pgbench does (its error aborts the client)
    (tmp_path / "f.sql").write_text("SELECT 1;\nSELECT * FROM no_such_table;\n")
    args = ["-n", "-f", "f.sql", "-C", "-M", "prepared", "-c", "2", "-t", "3"]
    ref = run_pgbench(pgbench_bin, args, draws_db, cwd=tmp_path)
    assert ref.status == 2, ref.stderr
    assert "no_such_table" in ref.stderr
    for loop in ("c", "python"):
        got = run_pgsurge(args, draws_db, cwd=tmp_path, loop=loop)  # type: ignore[arg-type]
        assert got.status == ref.status, got.stderr
        assert got.messages == ref.messages, (ref.stderr, got.stderr)
        assert got.report == ref.report


def test_connection_refused_mid_run(
    draws_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # the client's first transaction takes its role's right to log in: the
    # next transaction's connection fails (C's PQconnectPoll), and the
    # client aborts with libpq's message and pgbench's line
    role = "r_" + psycopg.conninfo.conninfo_to_dict(draws_db)["dbname"]
    with psycopg.connect(draws_db, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION lock_out() RETURNS void LANGUAGE plpgsql "
                "SECURITY DEFINER AS $$ BEGIN "
                "EXECUTE format('ALTER ROLE %I NOLOGIN', {}); END $$"
            ).format(sql.Literal(role))
        )
        conn.execute(sql.SQL("GRANT ALL ON t TO {}").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT USAGE ON SEQUENCE t_id_seq TO {}").format(
                sql.Identifier(role)
            )
        )
    (tmp_path / "x.sql").write_text(
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 0, 0, 0);\n"
        "SELECT lock_out();\n"
    )
    dsn = psycopg.conninfo.make_conninfo(draws_db, user=role)
    args = ["-n", "-f", "x.sql", "-C", "-c", "1", "-t", "5"]
    try:
        outs = []
        for tool in ("pgbench", "c", "python"):
            if tool == "pgbench":
                got = run_pgbench(pgbench_bin, args, dsn, cwd=tmp_path)
            else:
                got = run_pgsurge(args, dsn, cwd=tmp_path, loop=tool)  # type: ignore[arg-type]
            with psycopg.connect(draws_db, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role))
                )
            assert len(take_rows(draws_db)) == 1
            outs.append(got)
        ref = outs[0]
        assert ref.status == 2, ref.stderr
        assert "aborted while establishing connection" in ref.stderr
        for got in outs[1:]:
            assert got.status == ref.status, got.stderr
            assert got.messages == ref.messages, (ref.stderr, got.stderr)
            assert got.report == ref.report
    finally:
        with psycopg.connect(draws_db, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_connect_each_throttled(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # -C under -R and -L: a connection per slot, late slots skipped; the
    # same report lines as pgbench's, every slot accounted for
    args = ["-S", "-C", "-R", "400", "-L", "100", "-c", "2", "-j", "1", "-t", "30"]
    outs = []
    for tool in ("pgbench", "c", "python"):
        if tool == "pgbench":
            got = run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path)
        else:
            got = run_pgsurge(args, bench_db, cwd=tmp_path, loop=tool)  # type: ignore[arg-type]
        assert got.status == 0, got.stderr
        done = int(got.number("number of transactions actually processed:")[:-3])
        skipped = 0
        if "number of transactions skipped:" in got.stdout:
            skipped = int(got.number("number of transactions skipped:").split()[0])
        assert done + skipped == 60
        assert got.line("tps = ").endswith("(including reconnection times)")
        outs.append(
            [x for x in got.report if not x.startswith("number of transactions skip")]
        )
    assert outs[1] == outs[0]
    assert outs[2] == outs[0]


def test_connect_each_runs_in_c(
    draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in-process: under -C C opens, prepares on and closes every
    # transaction's connection itself: one hand-back per client (its end),
    # whatever -t; the connection time goes to the worker's total
    (tmp_path / "w.sql").write_text(
        "\\set a random(1, 1000)\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, pg_backend_pid(), :a, 0);\n"
    )
    loops: list[Any] = []
    use_c = fastloop.FastEventLoop.use_c

    def spy(self: fastloop.FastEventLoop, *a: Any) -> None:
        loops.append(self)
        use_c(self, *a)

    monkeypatch.setattr(fastloop.FastEventLoop, "use_c", spy)
    monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
    args = ["-n", "-f", str(tmp_path / "w.sql"), "-C", "-M", "prepared", "-c", "3"]
    w, result = run_worker([*args, "-t", "100"], draws_db)
    assert result.total.cnt == 300
    rows = take_rows(draws_db)
    assert len({s for _c, s, _a, _b in rows}) == 300
    assert w.conn_total_us > 0
    assert loops
    assert loops[0]._fast.handbacks <= 3
    assert loops[0]._fast.py_calls <= 3 * 2
