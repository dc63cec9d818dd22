"""The fused libpq calls (pgsurge._fastpq) against a real server.

Each test drives one non-blocking connection through the extension and
checks what it reports against what psycopg's own calls report for the
same commands: result counts, statuses, SQLSTATEs and libpq's messages.
Only ``SELECT``s and session-local objects are used (no tables).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import pq

from pgsurge import pgconn
from pgsurge.engine import fastpq

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastpq.available, reason="pgsurge._fastpq not usable"),
]


def _parse(dsn: str) -> list[tuple[str, str]]:
    from psycopg.conninfo import conninfo_to_dict

    return [(k, str(v)) for k, v in conninfo_to_dict(dsn).items() if v is not None]


@pytest.fixture
def conn(server_dsn: str) -> Iterator[pgconn.PgConn]:
    c = pgconn.connect_or_raise(dict(_parse(server_dsn)))
    c.set_nonblocking()
    yield c
    c.finish()


def _wait(c: pgconn.PgConn) -> None:
    select.select([c.socket], [], [], 10.0)


def _drain_all(c: pgconn.PgConn, ptr: int) -> Any:
    """drain() until the command is complete or failed; (count, code)."""
    assert fastpq.drain is not None
    count = 0
    while True:
        r = fastpq.drain(ptr, count)
        if isinstance(r, tuple):
            return r
        count, code = r >> 2, r & 3
        if code != fastpq.DRAIN_BUSY:
            return count, code
        _wait(c)


def _psycopg_results(c: pgconn.PgConn) -> list[Any]:
    """Every result of the command in flight, through psycopg."""
    out = []
    while True:
        c.consume_input()
        while not c.is_busy():
            res = c.get_result()
            if res is None:
                return out
            out.append(res)
        _wait(c)


def test_usable_with_a_live_connection(conn: pgconn.PgConn) -> None:
    ptr = fastpq.usable_with(conn)
    assert ptr == conn._pgconn.pgconn_ptr != 0


def test_prepared_statement_round_trip(conn: pgconn.PgConn) -> None:
    assert fastpq.send_prepared is not None
    assert conn.prepare(b"p1", b"SELECT $1::int + 1") is None
    ptr = fastpq.usable_with(conn)
    assert fastpq.send_prepared(ptr, b"p1", [b"41"]) == 0
    assert _drain_all(conn, ptr) == (1, fastpq.DRAIN_DONE)
    # the same through psycopg gives one TUPLES_OK result
    conn.send_query_prepared(b"p1", [b"41"])
    conn.flush()
    results = _psycopg_results(conn)
    assert [r.status for r in results] == [pgconn.TUPLES_OK]
    assert results[0].get_value(0, 0) == b"42"
    assert conn.transaction_status == pgconn.TRANS_IDLE


def test_parameters_none_and_many(conn: pgconn.PgConn) -> None:
    assert fastpq.send_prepared is not None and fastpq.send_params is not None
    ptr = fastpq.usable_with(conn)
    n = 40  # more than the extension's small array
    sql = "SELECT " + " + ".join(f"${i + 1}::int" for i in range(n))
    assert conn.prepare(b"many", sql.encode()) is None
    assert fastpq.send_prepared(ptr, b"many", [b"1"] * n) == 0
    assert _drain_all(conn, ptr) == (1, fastpq.DRAIN_DONE)
    assert fastpq.send_params(ptr, b"SELECT $1::int IS NULL", (None,)) == 0
    assert _drain_all(conn, ptr) == (1, fastpq.DRAIN_DONE)
    assert conn.prepare(b"none", b"SELECT 1") is None
    assert fastpq.send_prepared(ptr, b"none", None) == 0
    assert _drain_all(conn, ptr) == (1, fastpq.DRAIN_DONE)


def test_simple_query_counts_every_result(conn: pgconn.PgConn) -> None:
    assert fastpq.send_query is not None
    ptr = fastpq.usable_with(conn)
    assert fastpq.send_query(ptr, b"SELECT 1; SET search_path = public; ;") == 0
    assert _drain_all(conn, ptr) == (2, fastpq.DRAIN_DONE)
    assert fastpq.send_query(ptr, b"") == 0
    assert _drain_all(conn, ptr) == (1, fastpq.DRAIN_DONE)  # EMPTY_QUERY


@pytest.mark.parametrize(
    "sql",
    [
        b"SELECT 1/0",
        b"SELECT 1; SELECT 1/0; SELECT 3",
        b"SELEC 1",
    ],
)
def test_failed_result_matches_psycopg(conn: pgconn.PgConn, sql: bytes) -> None:
    assert fastpq.send_query is not None
    ptr = fastpq.usable_with(conn)
    assert fastpq.send_query(ptr, sql) == 0
    got = _drain_all(conn, ptr)
    assert isinstance(got, tuple) and len(got) == 4
    count, status, sqlstate, message = got
    shim = fastpq.ErrorResult(status, sqlstate, message)
    # read what is left, as the engine does after an error
    _psycopg_results(conn)

    conn.send_query(sql)
    conn.flush()
    results = _psycopg_results(conn)
    ok = [r for r in results if r.status in (pgconn.TUPLES_OK, pgconn.COMMAND_OK)]
    bad = next(r for r in results if r not in ok)
    assert count == len(ok[: results.index(bad)])
    assert shim.status == bad.status
    assert pgconn.sqlstate(shim) == pgconn.sqlstate(bad)
    assert pgconn.result_error_message(shim) == pgconn.result_error_message(bad)
    assert shim.error_field(int(pq.DiagnosticField.SEVERITY)) is None


def test_copy_result_stops_the_reading(conn: pgconn.PgConn) -> None:
    # the engine aborts the client on COPY (as pgbench does): drain only has
    # to report the status (the connection is left in COPY mode, then closed)
    assert fastpq.send_query is not None
    ptr = fastpq.usable_with(conn)
    assert fastpq.send_query(ptr, b"SELECT 1; COPY (SELECT 1) TO STDOUT") == 0
    assert _drain_all(conn, ptr) == (1, pgconn.COPY_OUT, None, b"")


def test_sqlstate_field_code_is_libpqs() -> None:
    assert int(pq.DiagnosticField.SQLSTATE) == fastpq._DIAG_SQLSTATE


def test_consume_failure_is_reported(server_dsn: str) -> None:
    c = pgconn.connect_or_raise(dict(_parse(server_dsn)))
    c.set_nonblocking()
    ptr = fastpq.usable_with(c)
    assert fastpq.send_query is not None and fastpq.drain is not None
    assert fastpq.send_query(ptr, b"SELECT pg_terminate_backend(pg_backend_pid())") == 0
    try:
        got: Any = None
        for _ in range(100):
            _wait(c)
            got = fastpq.drain(ptr, 0)
            if isinstance(got, tuple) or got & 3 != fastpq.DRAIN_BUSY:
                break
        # the server closed the connection: an error result (FATAL) or a
        # failed read, as psycopg's consume_input would raise
        assert isinstance(got, tuple) or got & 3 == fastpq.DRAIN_FAILED
    finally:
        c.finish()


def test_argument_errors(conn: pgconn.PgConn) -> None:
    assert fastpq.send_prepared is not None and fastpq.drain is not None
    ptr = fastpq.usable_with(conn)
    with pytest.raises(TypeError):
        fastpq.send_prepared(ptr, "p", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fastpq.send_prepared(ptr, b"p", ["1"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        fastpq.drain(0, 0)
    with pytest.raises(ValueError):
        fastpq.drain(ptr, -1)


def test_pure_mode_disables_it() -> None:
    env = dict(os.environ, PGSURGE_PURE="1")
    out = subprocess.run(
        [sys.executable, "-c", "import pgsurge.engine.fastpq as f; print(f.available)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------
# The whole engine, with and without the extensions

_SCRIPT = """\
\\set a random(1, 1000)
\\set p debug(permute(:a, 1000) + hash(:a) % 7)
SELECT :a AS x, :p AS y \\gset
SELECT 1/(:a % 4 - 1), :x;
\\set g debug(random_gaussian(1, 100, 2.5) + :y)
SELECT :g;
"""


def _run(pure: bool, mode: str, script: str, dsn: str) -> list[str]:
    env = dict(os.environ)
    env.pop("PGSURGE_PURE", None)
    if pure:
        env["PGSURGE_PURE"] = "1"
    args = ["-n", "-t", "20", "-c", "3", "-j", "1", "--random-seed=5", "-M", mode]
    args += ["--continue-on-error", "--failures-detailed", "-f", script, dsn]
    proc = subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    # timings differ from run to run; the client interleaving may too
    lines = (proc.stdout + proc.stderr).splitlines()
    return sorted(ln for ln in lines if not any(w in ln for w in _TIMED))


_TIMED = ("latency", "tps", "time")


@pytest.mark.parametrize("mode", ["prepared", "simple", "extended"])
def test_engine_same_with_and_without_extensions(
    server_dsn: str, tmp_path: Any, mode: str
) -> None:
    # random draws, hashes, permute, \gset, errors (division by zero in a
    # quarter of the transactions, counted under --continue-on-error)
    script = tmp_path / "t.sql"
    script.write_text(_SCRIPT)
    compiled = _run(False, mode, str(script), server_dsn)
    pure = _run(True, mode, str(script), server_dsn)
    assert compiled == pure
    assert any(ln.startswith("debug(script=0,command=2)") for ln in pure)
    failed = [ln for ln in pure if ln.startswith("number of failed transactions")]
    assert failed and not failed[0].startswith("number of failed transactions: 0 ")


# --------------------------------------------------------------------------
# Parameters and query text built from the variables

_VARIABLES: dict[str, Any] = {
    "i": 42,
    "zero": 0,
    "nine": 9,
    "ten": -10,
    "neg": -7,
    "lo": -(2**63),
    "hi": 2**63 - 1,
    "s": "héllo wörld",
    "e": "",
}


def _values(conn: pgconn.PgConn) -> list[Any]:
    results = _psycopg_results(conn)
    assert [r.status for r in results] == [pgconn.TUPLES_OK]
    res = results[0]
    return [res.get_value(0, c) for c in range(res.nfields)]


@pytest.mark.parametrize(
    "names",
    [
        ("i", "neg", "lo", "hi", "s", "e", "missing", "zero", "nine", "ten"),
        ("i",),
        tuple(f"v{i}" for i in range(30)),  # more than the small arrays
    ],
)
def test_vars_senders_match_params_of(conn: pgconn.PgConn, names: Any) -> None:
    from pgsurge.engine.sql import params_of

    variables = dict(_VARIABLES, **{f"v{i}": i * 1000 - 3 for i in range(30)})
    ptr = fastpq.usable_with(conn)
    cols = ", ".join(f"${i + 1}::text" for i in range(len(names)))
    assert conn.prepare(b"pv", f"SELECT {cols}".encode()) is None
    expected = params_of(variables, names)
    assert fastpq.send_prepared_vars(ptr, b"pv", variables, names) == 0
    assert _values(conn) == expected
    sql = f"SELECT {cols}".encode()
    assert fastpq.send_params_vars(ptr, sql, variables, names) == 0
    assert _values(conn) == expected


def test_vars_senders_no_parameters(conn: pgconn.PgConn) -> None:
    ptr = fastpq.usable_with(conn)
    assert conn.prepare(b"p0", b"SELECT 1") is None
    assert fastpq.send_prepared_vars(ptr, b"p0", {}, ()) == 0
    assert _values(conn) == [b"1"]
    assert fastpq.send_params_vars(ptr, b"SELECT 2", {}, ()) == 0
    assert _values(conn) == [b"2"]


@pytest.mark.parametrize("value", [1.5, True, False, None, 2**64])
def test_vars_senders_leave_other_values_to_python(
    conn: pgconn.PgConn, value: Any
) -> None:
    ptr = fastpq.usable_with(conn)
    assert conn.prepare(b"pf", b"SELECT $1::text, $2::text") is None
    variables = {"a": 1, "b": value}
    assert fastpq.send_prepared_vars(ptr, b"pf", variables, ("a", "b")) == -3
    assert fastpq.send_params_vars(ptr, b"SELECT $1", variables, ("b",)) == -3
    parts = ("SELECT ", "a", " + 0, '", "b", "'")
    assert fastpq.send_query_parts(ptr, parts, variables) == -3
    assert fastpq.SEND_FALLBACK == -3
    # nothing was sent
    assert not conn.is_busy() and conn.get_result() is None


@pytest.mark.parametrize(
    "parts",
    [
        ("SELECT ", "i", " + ", "neg", ", '", "s", "', '", "e", "'"),
        ("SELECT '", "missing", '\' AS "ünï"', "lo", ""),
        ("SELECT 'x'",),
        ("SELECT ", "hi", ", '" + "y" * 2000 + "'"),  # more than the small buffer
    ],
)
def test_send_query_parts_matches_substitute(
    conn: pgconn.PgConn, parts: tuple[str, ...]
) -> None:
    from pgsurge.engine.sql import substitute

    ptr = fastpq.usable_with(conn)
    assert fastpq.send_query_parts(ptr, parts, _VARIABLES) == 0
    got = _psycopg_results(conn)
    conn.send_query(substitute(_VARIABLES, parts))
    conn.flush()
    want = _psycopg_results(conn)
    assert [r.status for r in got] == [r.status for r in want]
    if want[0].status == pgconn.TUPLES_OK:
        row = [want[0].get_value(0, c) for c in range(want[0].nfields)]
        assert [got[0].get_value(0, c) for c in range(got[0].nfields)] == row
        assert got[0].fname(0) == want[0].fname(0)
    else:
        assert got[0].error_message == want[0].error_message


def test_exec_status_on_a_lost_connection_is_a_fatal_result(server_dsn: str) -> None:
    # the set-up's pgbench steps (tryExecuteStatement) on a connection the
    # server closed: the status and message pgbench gets from PQexec's
    # NULL, not psycopg's OperationalError (a traceback after a server
    # restart during "starting vacuum...")
    c = pgconn.connect_or_raise(dict(_parse(server_dsn)))
    try:
        c.exec_status("select pg_terminate_backend(pg_backend_pid())")
        for _ in range(2):
            status, res = c.exec_status("vacuum pgbench_tellers")
            assert status == pgconn.FATAL_ERROR
            assert res.ntuples == 0
            assert "no connection to the server" in c.error_message()
    finally:
        c.finish()
