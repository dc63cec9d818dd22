"""-C on the C loop (issue 22): C against the Python engine and pgbench 18.6.

Under -C the C loop opens every transaction's connection itself, with
``PQconnectStart``/``PQconnectPoll`` (one at a time per worker, as
pgbench; side by side on the loop with ``PGSURGE_CONNECT=concurrent``), prepares the
statements anew on it under ``-M prepared``, and closes it at the
transaction's end; the connection time goes to pgbench's report lines
(``average connection time``, ``tps = … (including reconnection times)``).
Every C run is under ``PGSURGE_FASTLOOP=require`` (``loop="c"``) and is
compared with the Python loop's and with pgbench's: -t counts, the report
with numbers masked, the rows written, messages.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsurge import pgconn
from pgsurge.engine import fastloop
from tests.fix_db import run_worker, take_rows
from tests.fix_run import (
    Outcome,
    UnixRelay,
    run_pgbench,
    run_pgsurge,
)

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


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipeline"])
def test_connect_each_runs_in_c(
    c_loops: list[Any],
    draws_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pipeline: bool,
) -> None:
    # in-process: under -C C opens, prepares on and closes every
    # transaction's connection itself (a pipeline's statements too): one
    # hand-back per client (its end), whatever -t; the connection time
    # goes to the worker's total
    start, end = ("\\startpipeline\n", "\\endpipeline\n") if pipeline else ("", "")
    (tmp_path / "w.sql").write_text(
        "\\set a random(1, 1000)\n"
        + start
        + "INSERT INTO t (cid, s, a, b) VALUES (:client_id, pg_backend_pid(), :a, 0);\n"
        + "SELECT 1;\n"
        + end
    )
    loops = c_loops
    # C opens the connections from the conninfo itself: Python's opener
    # (pgconn.start_raw, what C called once per connection before) is
    # never called (issue 25)
    py_opened = _count_calls(monkeypatch, pgconn, "start_raw")
    args = ["-n", "-f", str(tmp_path / "w.sql"), "-C", "-M", "prepared", "-c", "3"]
    w, result = run_worker([*args, "-t", "100"], draws_db)
    assert result.total.cnt == 300
    rows = take_rows(draws_db)
    assert len({s for _c, s, _a, _b in rows}) == 300
    assert w.conn_total_us > 0
    assert loops
    assert loops[0].raw_connect
    assert loops[0]._fast.raw_connects == 300
    assert py_opened == []
    assert loops[0]._fast.handbacks <= 3
    assert loops[0]._fast.py_calls <= 3 * 2


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Wrap ``owner.name`` so that every call appends to the returned list."""
    calls: list[int] = []
    real = getattr(owner, name)

    def counted(*a: Any) -> Any:
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.mark.parametrize("loop", ["c-raw", "c-python-opens"])
def test_connect_each_py_calls_constant(
    c_loops: list[Any],
    draws_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    loop: str,
) -> None:
    # the calls into Python do not grow with the transactions (connections)
    # of a -C run: the same count at -t 10 and -t 60; with
    # PGSURGE_PY_CONNECT=1 Python opens each connection (the reference
    # for C's own opening), which the counter shows
    if loop == "c-python-opens":
        monkeypatch.setenv("PGSURGE_PY_CONNECT", "1")
    py_opened = _count_calls(monkeypatch, pgconn, "start_raw")
    (tmp_path / "s.sql").write_text("SELECT 1;\n")
    args = ["-n", "-f", str(tmp_path / "s.sql"), "-C", "-c", "2", "-j", "1"]
    calls = []
    for t in (10, 60):
        c_loops.clear()
        py_opened.clear()
        _w, result = run_worker([*args, "-t", str(t)], draws_db)
        assert result.total.cnt == 2 * t
        fast = c_loops[0]._fast
        calls.append(fast.py_calls)
        if loop == "c-raw":
            assert fast.raw_connects == 2 * t
            assert py_opened == []
        else:
            assert fast.raw_connects == 0
            assert len(py_opened) == 2 * t
    assert calls[0] == calls[1], calls


class _GateRelay(UnixRelay):
    """A Unix socket forwarding to the test server that holds one connection
    of a run back: the first one opened after ``t`` has a row, until
    ``rows`` more rows are in (or ``timeout`` seconds passed). Whether the
    rows came while it waited tells whether the run's other clients went
    on while one of them was connecting."""

    def __init__(self, dsn: str, directory: Path, rows: int, timeout: float) -> None:
        self.admin = dsn
        self.rows, self.timeout = rows, timeout
        self.held: list[bool] = []  # per held connection: released by the rows
        super().__init__(dsn, directory)

    def _count(self) -> int:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM t").fetchone()
        assert row is not None
        return int(row[0])

    def serve(self, client: socket.socket) -> None:
        with self.lock:
            hold = not self.held and self._count() > 0
            if hold:
                self.held.append(False)
        if hold:
            start, deadline = self._count(), time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if self._count() >= start + self.rows:
                    self.held[0] = True
                    break
                time.sleep(0.01)
        super().serve(client)


@pytest.mark.slow
def test_connections_open_one_at_a_time_as_pgbench_opens_them(
    draws_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """One worker, two clients, a connection per transaction; one of the
    connections is held back until the other client inserted 5 more rows.
    pgbench's thread waits in PQconnectdb meanwhile (the relay gives up
    after its timeout, generous for 5 local transactions), and so do the C
    loop and the Python engine by default: a worker opens one connection at
    a time, so the server sees the connection load pgbench gives it (side
    by side, the C loop's average connection time was 4x pgbench's, and
    each transaction cost a second wake-up). PGSURGE_CONNECT=concurrent
    opens them side by side: the other client goes on."""
    (tmp_path / "i.sql").write_text(
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 0, 0, 0);\n"
    )
    args = ["-n", "-f", str(tmp_path / "i.sql"), "-C", "-c", "2", "-j", "1"]
    args += ["-t", "30"]
    released = {}
    for tool in ("c", "python", "concurrent", "pgbench"):
        relay = _GateRelay(draws_db, tmp_path, rows=5, timeout=8.0)
        try:
            if tool == "pgbench":
                got = run_pgbench(pgbench_bin, args, relay.dsn, cwd=tmp_path)
            elif tool == "concurrent":
                env = {"PGSURGE_CONNECT": "concurrent"}
                got = run_pgsurge(args, relay.dsn, cwd=tmp_path, loop="c", env=env)
            else:
                got = run_pgsurge(args, relay.dsn, cwd=tmp_path, loop=tool)  # type: ignore[arg-type]
        finally:
            relay.close()
        assert got.status == 0, got.stderr
        assert len(take_rows(draws_db)) == 60
        assert len(relay.held) == 1
        released[tool] = relay.held[0]
    assert released == {
        "c": False,
        "python": False,
        "concurrent": True,
        "pgbench": False,
    }


@pytest.mark.parametrize("bad", [False, True], ids=["plain", "prepare-fails"])
def test_connect_each_pipelines_prepared(
    draws_db: str, pgbench_bin: Path, tmp_path: Path, bad: bool
) -> None:
    # -C -M prepared with a pipeline: its statements are prepared on each
    # new connection before it starts (by C, one after the other, without
    # blocking); one that fails is reported as pgbench's blocking PQprepare
    # does, and its query then fails in the pipeline
    (tmp_path / "p.sql").write_text(
        "\\set a random(1, 1000000)\n"
        "\\startpipeline\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 1, :a, 0);\n"
        + ("SELECT * FROM no_such_table;\n" if bad else "SELECT CAST(:a AS int);\n")
        + "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 2, :a, 1);\n"
        "\\endpipeline\n"
    )
    args = ["-n", "-f", "p.sql", "-C", "-M", "prepared", "-c", "2", "-j", "2"]
    args += ["-t", "20", "--random-seed", "9"]
    runs = _three(pgbench_bin, args, draws_db, tmp_path)
    ref = runs[0][0]
    assert ref.status == (2 if bad else 0), ref.stderr
    for got, rows, _logs in runs:
        assert got.status == ref.status, got.stderr
        assert got.report == ref.report
        assert got.messages == ref.messages, (ref.stderr, got.stderr)
        assert rows == runs[0][1]
    assert len(runs[0][1]) == (0 if bad else 2 * 2 * 20)


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_connect_each_pipelines_with_values_of_every_type(
    draws_db: str, pgbench_bin: Path, tmp_path: Path, mode: str
) -> None:
    # -C, a pipeline, doubles from skewed draws, a -D text and -r, all on
    # the C loop at once: the same rows as pgbench's and the Python loop's
    (tmp_path / "m.sql").write_text(
        "\\set a random_gaussian(1, 1000000, 2.5)\n"
        "\\set d :a * 1.5 + random_exponential(1, 10, 2.0)\n"
        "\\set b int(:d) % 1000 + :tag\n"
        "\\startpipeline\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, :tag, :a, :b);\n"
        "SELECT :d, :tag;\n"
        "\\syncpipeline\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 2, :b, :a);\n"
        "\\endpipeline\n"
    )
    args = ["-n", "-f", "m.sql", "-C", "-M", mode, "-c", "2", "-j", "2", "-t", "25"]
    args += ["--random-seed", "5", "-D", "tag=7", "-r"]
    runs = _three(pgbench_bin, args, draws_db, tmp_path)
    ref = runs[0][0]
    assert ref.status == 0, ref.stderr
    for got, rows, _logs in runs:
        assert got.status == 0, got.stderr
        assert got.report == ref.report
        assert rows == runs[0][1]
    assert len(runs[0][1]) == 2 * 2 * 25
    # -r: a line per command, \endpipeline's included
    assert "\\endpipeline" in runs[1][0].stdout


def test_connect_each_pipelines_with_doubles_run_in_c(
    c_loops: list[Any], draws_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in-process: -C, a prepared pipeline, doubles and a text variable
    # typed when read: still one hand-back per client (its end)
    (tmp_path / "w.sql").write_text(
        "\\set d random_zipfian(1, 1000, 1.07) * 0.5 + :tag\n"
        "\\set a int(:d * 2)\n"
        "\\startpipeline\n"
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, pg_backend_pid(), :a, 0);\n"
        "SELECT :d;\n"
        "\\endpipeline\n"
    )
    loops = c_loops
    args = ["-n", "-f", str(tmp_path / "w.sql"), "-C", "-M", "prepared", "-c", "3"]
    w, result = run_worker(
        [*args, "-t", "60"], draws_db, (("scale", 1), ("tag", "2.5"))
    )
    assert result.total.cnt == 180
    rows = take_rows(draws_db)
    assert len({s for _c, s, _a, _b in rows}) == 180
    assert all(a >= 6 for _c, _s, a, _b in rows)
    assert w.conn_total_us > 0
    assert loops
    assert loops[0]._fast.handbacks <= 3
    assert loops[0]._fast.py_calls <= 3 * 2


def test_connect_each_notices_as_pgbench(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    # the connections C opens itself have libpq's own notice processor,
    # which pgbench keeps too: each NOTICE and WARNING on stderr as sent
    (tmp_path / "n.sql").write_text(
        "DO $$ BEGIN RAISE NOTICE 'hello %', 1; RAISE WARNING 'careful'; END $$;\n"
    )
    args = ["-n", "-f", "n.sql", "-C", "-c", "2", "-j", "2", "-t", "3"]
    ref = run_pgbench(pgbench_bin, args, bench_db, cwd=tmp_path)
    got = run_pgsurge(args, bench_db, cwd=tmp_path, loop="c")
    assert ref.status == 0, ref.stderr
    assert got.status == 0, got.stderr
    assert ref.messages["NOTICE: hello N"] == 6
    assert got.messages == ref.messages
