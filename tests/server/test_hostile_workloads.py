"""Hostile cases of Python workloads, on the C loop and on Python's engine.

Each test is a finding of the hostile pass over the generators the C loop
steps (``_fastloop_gen.c``, ``engine/fastgen.py``) and Python's reference
(``engine/pyworkload.py``): a value a generator yields that the engine
could not bind must abort the client with the server's or the workload's
words, never kill the worker with a traceback.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.fix_run import Outcome, run_pgsurge

pytestmark = pytest.mark.server


def _run(db: str, workload: Path, text: str, loop: str, mode: str) -> Outcome:
    """The workload ``text``, written to ``workload``, run with two
    transactions of one client on ``loop`` in query mode ``mode``."""
    workload.write_text(text)
    args = ["-n", "-f", workload.name, "-M", mode, "-c", "1", "-t", "2"]
    return run_pgsurge(args, db, cwd=workload.parent, loop=loop)  # type: ignore[arg-type]


NOT_UTF8 = """
from pgsurge.workloads import sql, transaction

p = sql("SELECT $1::text")

@transaction
def t(ctx):
    yield p(b"fine")
    yield p(b"\\xff\\xfe")
"""


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
@pytest.mark.parametrize("loop", ["c", "python"])
def test_bytes_not_utf8_are_the_servers_error(
    fresh_db: str, tmp_path: Path, loop: str, mode: str
) -> None:
    # bytes that are not UTF-8 as a parameter: under -M simple (the
    # default) Python's literal decoded them strictly and the worker died
    # of a UnicodeDecodeError (on the C loop too, which hands them to
    # Python); now every mode sends them as they are and the server's
    # error aborts the client, naming the yield
    got = _run(fresh_db, tmp_path / "notutf8.py", NOT_UTF8, loop, mode)
    assert got.status == 2, got.stderr
    assert "Traceback" not in got.stderr
    assert "worker 0 failed" not in got.stderr
    assert got.stderr.startswith(
        "pgsurge: error: client 0 aborted in script 0 (notutf8.py: t) at "
        "notutf8.py:9 (statement p): ERROR:  invalid byte sequence for "
        'encoding "UTF8": 0xff\n'
    ), got.stderr
    assert got.stderr.endswith(
        "pgsurge: error: Run was aborted; the above results are incomplete.\n"
    )
    assert got.number("number of transactions actually processed:") == "0/2"


STR_RAISES = """
from pgsurge.workloads import sql, transaction

p = sql("SELECT $1::text")

class Unprintable:
    def __str__(self):
        raise ValueError("no text for you")

@transaction
def t(ctx):
    yield p("fine")
    yield p(Unprintable())
"""


@pytest.mark.parametrize("mode", ["simple", "extended"])
@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_parameter_whose_str_raises_aborts_the_client(
    fresh_db: str, tmp_path: Path, loop: str, mode: str
) -> None:
    # a parameter of the workload's own class whose __str__ raises: the
    # worker died with a traceback ("worker 0 failed"; C hands such a value
    # to Python); now the client aborts with the workload's traceback, as
    # when the generator itself raises
    got = _run(fresh_db, tmp_path / "unprintable.py", STR_RAISES, loop, mode)
    assert got.status == 2, got.stderr
    assert got.stderr == (
        "pgsurge: error: client 0 aborted in script 0 (unprintable.py: t):\n"
        "Traceback (most recent call last):\n"
        '  File "unprintable.py", line 8, in __str__\n'
        '    raise ValueError("no text for you")\n'
        "ValueError: no text for you\n"
        "pgsurge: error: Run was aborted; the above results are incomplete.\n"
    )
    assert got.number("number of transactions actually processed:") == "0/2"


NUL_PARAM = """
from pgsurge.workloads import sql, transaction

p = sql("SELECT length($1::text)")

@transaction
def t(ctx):
    yield p("fine")
    yield p(KIND)
"""


@pytest.mark.parametrize("kind", [r'"a\x00b"', r'b"a\x00b"'], ids=["str", "bytes"])
@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_nul_in_a_text_parameter_aborts_the_client(
    fresh_db: str, tmp_path: Path, loop: str, mode: str, kind: str
) -> None:
    # libpq sends values as C strings: "a\\x00b" reached the server as "a"
    # (extended, prepared) or cut the query (simple) without a word
    text = NUL_PARAM.replace("KIND", kind)
    got = _run(fresh_db, tmp_path / "nul.py", text, loop, mode)
    assert got.status == 2, got.stderr
    assert got.stderr == (
        "pgsurge: error: client 0 aborted in script 0 (nul.py: t):\n"
        "ValueError: a text parameter contains a NUL character (0x00), "
        "which PostgreSQL's text values cannot hold\n"
        "pgsurge: error: Run was aborted; the above results are incomplete.\n"
    )
    assert got.number("number of transactions actually processed:") == "0/2"


SETUP_EACH = """
from pgsurge.workloads import setup, sql, transaction

seen = sql("INSERT INTO setup_seen SELECT current_setting('application_name')")

@setup
def session(conn):
    conn.execute("SET application_name = 'set_up'")

@transaction
def t(ctx):
    yield seen()
"""


@pytest.mark.parametrize("loop", ["auto", "python"])
def test_setup_runs_on_every_connection_of_connect_each(
    fresh_db: str, tmp_path: Path, loop: str
) -> None:
    # -C: the C loop opened each transaction's connection itself and ran
    # the workload's @setup on none of them (only the first transaction's
    # connection, opened by Python, had it): such a run goes to the Python
    # engine, which runs @setup on each
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE setup_seen (app text)")
    wl = tmp_path / "each.py"
    wl.write_text(SETUP_EACH)
    args = ["-n", "-f", wl.name, "-C", "-c", "2", "-j", "2", "-t", "4"]
    got = run_pgsurge(args, fresh_db, cwd=tmp_path, loop=loop)  # type: ignore[arg-type]
    assert got.status == 0, got.stderr
    with psycopg.connect(fresh_db) as conn:
        rows = conn.execute(
            "SELECT app, count(*) FROM setup_seen GROUP BY 1"
        ).fetchall()
    assert rows == [("set_up", 8)]
    refused = run_pgsurge(args, fresh_db, cwd=tmp_path, loop="c")
    assert refused.status != 0
    assert refused.stderr.endswith(
        "the C loop is not taken: -C with a workload's @setup is not "
        "supported by the C loop\n"
    ), refused.stderr


BASE_EXCEPTION = """
import asyncio
import sys

from pgsurge.workloads import sql, transaction

p = sql("SELECT 1")

@transaction
def t(ctx):
    yield p()
    if ctx.client_id == 0:
        raise RAISED
"""


@pytest.mark.parametrize(
    "raised",
    [
        "asyncio.CancelledError()",
        "SystemExit(3)",
        "GeneratorExit()",
        # the workload's own KeyboardInterrupt (a worker's Ctrl-C raises
        # none: it sets a flag): it ended the worker silently, 'worker 0
        # died: exited with status 1', with no traceback and what the
        # worker had measured lost (hostile finding)
        "KeyboardInterrupt()",
    ],
)
@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_base_exception_of_a_transaction_aborts_the_client(
    fresh_db: str, tmp_path: Path, loop: str, raised: str
) -> None:
    # an exception that is not an Exception (asyncio's CancelledError,
    # SystemExit) raised by a transaction ended its worker ("worker 0
    # failed", both loops caught Exception only; hostile finding): it
    # aborts its client, with the workload's traceback, as any other
    got = _run(
        fresh_db,
        tmp_path / "base.py",
        BASE_EXCEPTION.replace("RAISED", raised),
        loop,
        "prepared",
    )
    name = raised.split("(")[0].rsplit(".", 1)[-1]
    assert got.status == 2, got.stderr
    assert got.stderr.startswith(
        "pgsurge: error: client 0 aborted in script 0 (base.py: t):\n"
        "Traceback (most recent call last):\n"
        '  File "base.py", line 13, in t\n'
        f"    raise {raised}\n"
    ), got.stderr
    module = "asyncio.exceptions." if name == "CancelledError" else ""
    assert f"\n{module}{name}" in got.stderr
    assert got.stderr.endswith(
        "pgsurge: error: Run was aborted; the above results are incomplete.\n"
    )
    assert "worker" not in got.stderr
    assert got.number("number of transactions actually processed:") == "0/2"


SETUP_RAISES = """
import asyncio

from pgsurge.workloads import setup, sql, transaction

p = sql("SELECT 1")

@setup
def session(conn):
    raise RAISED

@transaction
def t(ctx):
    yield p()
"""


@pytest.mark.parametrize(
    "raised", ["ValueError('no')", "asyncio.CancelledError()", "KeyboardInterrupt()"]
)
@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_failing_setup_ends_the_run_with_its_traceback(
    fresh_db: str, tmp_path: Path, loop: str, raised: str
) -> None:
    # @setup raising, an Exception or not (CancelledError passed its
    # `except (Exception, SystemExit)` and ended the worker): the run stops
    # at the connections, as a failed connection stops pgbench's (status 1)
    got = _run(
        fresh_db,
        tmp_path / "setupfail.py",
        SETUP_RAISES.replace("RAISED", raised),
        loop,
        "prepared",
    )
    assert got.status == 1, got.stderr
    assert got.stderr.startswith(
        "pgsurge: error: setupfail.py: t: @setup failed:\n"
        "Traceback (most recent call last):\n"
        '  File "setupfail.py", line 10, in session\n'
        f"    raise {raised}\n"
    ), got.stderr
    assert "worker" not in got.stderr


@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_workloads_keyboard_interrupt_keeps_the_other_clients_transactions(
    fresh_db: str, tmp_path: Path, loop: str
) -> None:
    # client 0 raises KeyboardInterrupt, client 1 of the same worker runs
    # its two transactions: they are reported (the worker died and the
    # report said 0/4, hostile finding)
    workload = tmp_path / "kbd.py"
    workload.write_text(BASE_EXCEPTION.replace("RAISED", "KeyboardInterrupt()"))
    args = ["-n", "-f", workload.name, "-c", "2", "-j", "1", "-t", "2"]
    got = run_pgsurge(args, fresh_db, cwd=tmp_path, loop=loop)  # type: ignore[arg-type]
    assert got.status == 2, got.stderr
    assert "pgsurge: error: client 0 aborted in script 0 (kbd.py: t):\n" in got.stderr
    assert "\nKeyboardInterrupt\n" in got.stderr
    assert "worker" not in got.stderr
    assert got.number("number of transactions actually processed:") == "2/4"
