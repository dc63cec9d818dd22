"""``-i`` behaviour beyond the happy path: errors, progress, helpers.

Error cases run the real pgbench and pgsurge on the same starting state and
compare their whole stderr (``pgbench`` → ``pgsurge``). Progress lines are
checked against pgbench's rules with a fake clock, and on a terminal
against pgbench run on a pty.
"""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import threading
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.config import ConnParams, InitConfig, PartitionMethod
from pgsurge.errors import ConnectError, InitError, PgsurgeError
from pgsurge.init import ensure_initialized, run_init
from pgsurge.init.generate import (
    account_rows,
    block_bounds,
    branch_rows,
    job_ranges,
    teller_rows,
)
from pgsurge.init.progress import Progress
from pgsurge.init.schema import create_table_statements, quote_ident
from pgsurge.init.session import CopyEndError, Output
from tests.fix_run import mask_timing

pytestmark = pytest.mark.server


def pgbench(pgbench_bin: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(pgbench_bin), *args], capture_output=True, text=True, timeout=120
    )


def pgsurge(cfg: InitConfig) -> tuple[int, str]:
    """Run init in-process; (exit status, stderr) as the CLI would give."""
    buf = io.StringIO()
    try:
        run_init(cfg, stream=buf)
    except PgsurgeError as exc:
        return int(exc.exit_status), buf.getvalue() + exc.format()
    return 0, buf.getvalue()


def drop_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "drop table if exists pgbench_accounts, pgbench_branches,"
            " pgbench_history, pgbench_tellers"
        )


def same_failure(
    pgbench_bin: Path,
    dsn: str,
    args: list[str],
    cfg: InitConfig,
    setup: list[str] | None = None,
) -> str:
    """Run both from the same state; assert exit 1 and the same stderr."""
    drop_tables(dsn)
    if setup:
        assert pgbench(pgbench_bin, ["-i", *setup, dsn]).returncode == 0
    theirs = pgbench(pgbench_bin, ["-i", *args, dsn])
    drop_tables(dsn)
    if setup:
        assert pgbench(pgbench_bin, ["-i", *setup, dsn]).returncode == 0
    status, ours = pgsurge(cfg)
    assert theirs.returncode == 1
    assert status == 1
    expected = mask_timing(theirs.stderr).replace("pgbench:", "pgsurge:")
    assert mask_timing(ours) == expected
    return ours


def conf(dsn: str, **options: Any) -> InitConfig:
    return InitConfig(conn=ConnParams(dbname=dsn), **options)


# ------------------------------------------------------ errors vs pgbench


@pytest.mark.parametrize(
    ("args", "options", "setup"),
    [
        (["--tablespace", "nosuch"], {"tablespace": "nosuch"}, None),
        (["--tablespace", 'no"such'], {"tablespace": 'no"such'}, None),
        (["--index-tablespace", "nosuch"], {"index_tablespace": "nosuch"}, None),
        (["-I", "g"], {"steps": "g"}, None),
        (["-I", "G"], {"steps": "G"}, None),
        (["-I", "v"], {"steps": "v"}, None),
        (["-I", "dtf"], {"steps": "dtf"}, None),
        (["-I", "p"], {"steps": "p"}, ["-I", "dtp"]),
    ],
    ids=[
        "tablespace",
        "tablespace-quoted",
        "index-tablespace",
        "g-without-tables",
        "G-without-tables",
        "v-without-tables",
        "f-without-keys",
        "p-twice",
    ],
)
def test_step_failures_like_pgbench(
    pgbench_bin: Path,
    fresh_db: str,
    args: list[str],
    options: dict[str, Any],
    setup: list[str] | None,
) -> None:
    cfg = conf(fresh_db, **options)
    out = same_failure(pgbench_bin, fresh_db, args, cfg, setup)
    assert "pgsurge: error: query failed: ERROR:  " in out
    assert "pgsurge: detail: Query was: " in out


def test_spaces_in_steps_are_skipped(pgbench_bin: Path, fresh_db: str) -> None:
    setup = ["-i", "-I", "dt", "--partitions", "2", fresh_db]
    assert pgbench(pgbench_bin, setup).returncode == 0
    theirs = pgbench(pgbench_bin, ["-i", "-I", " d t ", fresh_db])
    drop_tables(fresh_db)
    assert pgbench(pgbench_bin, setup).returncode == 0
    status, ours = pgsurge(conf(fresh_db, steps=" d t "))
    assert (status, mask_timing(ours)) == (
        theirs.returncode,
        mask_timing(theirs.stderr),
    )
    assert theirs.returncode == 0


def test_copy_failure_like_pgbench(pgbench_bin: Path, fresh_db: str) -> None:
    """A COPY that fails at its end: server text, then 'PQendcopy failed'."""
    check = "alter table pgbench_accounts add constraint c check (aid <> 150000)"
    outputs = []
    for runner in ("pgbench", "pgsurge"):
        drop_tables(fresh_db)
        assert pgbench(pgbench_bin, ["-i", "-I", "dt", fresh_db]).returncode == 0
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute(check)
        if runner == "pgbench":
            proc = pgbench(pgbench_bin, ["-i", "-I", "g", "-s", "2", fresh_db])
            outputs.append((proc.returncode, mask_timing(proc.stderr)))
        else:
            status, text = pgsurge(conf(fresh_db, steps="g", scale=2))
            outputs.append((status, mask_timing(text).replace("pgsurge:", "pgbench:")))
    assert outputs[0][0] == 1
    assert outputs[1] == outputs[0]
    assert 'violates check constraint "c"' in outputs[1][1]
    assert outputs[1][1].endswith("pgbench: error: PQendcopy failed\n")


def test_parallel_copy_failure_stops_all_jobs(fresh_db: str) -> None:
    assert pgsurge(conf(fresh_db, steps="dt", scale=4))[0] == 0
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("alter table pgbench_accounts add constraint c check (aid <> 10)")
    before = threading.active_count()
    with pytest.raises(CopyEndError) as info:
        run_init(conf(fresh_db, steps="g", scale=4, init_jobs=2), stream=io.StringIO())
    text = info.value.format()
    assert text.startswith("ERROR:  new row for relation")
    assert text.endswith("pgsurge: error: PQendcopy failed\n")
    assert threading.active_count() == before


def test_connection_failure_like_pgbench(
    pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    # a socket directory where no server listens
    theirs = pgbench(pgbench_bin, ["-i", "-h", str(tmp_path), "-p", "5999"])
    status, ours = pgsurge(InitConfig(conn=ConnParams(host=str(tmp_path), port="5999")))
    assert theirs.returncode == status == 1
    assert ours == theirs.stderr.replace("pgbench:", "pgsurge:")
    assert ours.endswith(
        "pgsurge: error: could not create connection for initialization\n"
    )


@pytest.mark.parametrize(
    "params",
    [
        {"host": "no-such-host.invalid"},
        {"dbname": "host=/tmp nosuchoption=1"},
        {"dbname": "host=/tmp connect_timeout=abc"},
    ],
    ids=["unknown-host", "bad-option", "bad-value"],
)
def test_connection_option_errors_like_pgbench(
    pgbench_bin: Path, params: dict[str, str]
) -> None:
    """libpq's own words, where psycopg alone would word them differently."""
    argv = ["-h", params["host"]] if "host" in params else [params["dbname"]]
    theirs = pgbench(pgbench_bin, ["-i", *argv])
    status, ours = pgsurge(InitConfig(conn=ConnParams(**params)))
    assert theirs.returncode == status == 1
    assert ours == theirs.stderr.replace("pgbench:", "pgsurge:")


def test_unknown_database_like_pgbench(pgbench_bin: Path, server_dsn: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(server_dsn)
    dsn = psycopg.conninfo.make_conninfo(server_dsn, dbname="no_such_db_pgsurge")
    theirs = pgbench(pgbench_bin, ["-i", dsn])
    with pytest.raises(ConnectError) as info:
        run_init(conf(dsn), stream=io.StringIO())
    assert theirs.returncode == 1
    assert info.value.format() == theirs.stderr.replace("pgbench:", "pgsurge:")
    assert params  # the DSN was a parseable conninfo


# ------------------------------------------------------- progress lines


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TtyBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_every_100000_rows() -> None:
    buf, clock = io.StringIO(), FakeClock()
    progress = Progress(Output(buf), "t", 300000, quiet=False, clock=clock)
    for done, now in ((100000, 100.5), (200000, 101.0), (250000, 101.1)):
        clock.now = now
        progress.advance_to(done)
    clock.now = 112.0
    progress.advance_to(300000)
    progress.finish()
    assert buf.getvalue() == (
        "100000 of 300000 tuples (33%) of t done (elapsed 0.50 s, remaining 1.00 s)\n"
        "200000 of 300000 tuples (66%) of t done (elapsed 1.00 s, remaining 0.50 s)\n"
        "300000 of 300000 tuples (100%) of t done (elapsed 12.00 s, remaining 0.00 s)\n"
    )


def test_progress_pads_a_shorter_line() -> None:
    buf, clock = io.StringIO(), FakeClock()
    progress = Progress(Output(buf), "t", 300000, quiet=False, clock=clock)
    clock.now = 105.0
    progress.advance_to(100000)  # remaining 10.00 s
    clock.now = 106.0
    progress.advance_to(200000)  # remaining 3.00 s: one character shorter
    first, second = buf.getvalue().split("\n")[:2]
    assert first.endswith("remaining 10.00 s)")
    assert second.endswith("remaining 3.00 s) ")
    assert len(second) == len(first)


def test_progress_on_a_terminal_overwrites_and_clears() -> None:
    buf, clock = TtyBuffer(), FakeClock()
    progress = Progress(Output(buf), "t", 200000, quiet=False, clock=clock)
    progress.advance_to(100000)
    progress.advance_to(200000)
    progress.finish()
    lines = buf.getvalue().split("\r")
    assert len(lines) == 4 and lines[3] == ""
    assert lines[2] == " " * len(lines[1])
    assert "\n" not in buf.getvalue()


def test_quiet_progress_every_5_seconds() -> None:
    buf, clock = io.StringIO(), FakeClock()
    progress = Progress(Output(buf), "t", 1000000, quiet=True, clock=clock)
    seen = []
    for done, elapsed in (
        (100000, 1.0),
        (200000, 4.99),
        (300000, 5.2),  # first line, next due at 10 s
        (400000, 9.0),
        (500000, 10.0),  # second line, next due at 10 s again (ceil(10/5)=2)
        (600000, 10.1),  # pgbench's quirk: printed once more
        (700000, 14.0),
        (1000000, 14.5),  # the last row: always
    ):
        clock.now = 100.0 + elapsed
        progress.advance_to(done)
        seen.append(buf.getvalue().count("\n"))
    assert seen == [0, 0, 1, 1, 2, 3, 3, 4]


def test_quiet_progress_last_line_needs_a_multiple_of_100() -> None:
    buf = io.StringIO()
    Progress(Output(buf), "t", 10, quiet=True).advance_to(10)
    assert buf.getvalue() == ""
    Progress(Output(buf), "t", 1000, quiet=True).advance_to(1000)
    assert buf.getvalue().startswith("1000 of 1000 tuples (100%) of t done")


def test_terminal_output_like_pgbench(pgbench_bin: Path, fresh_db: str) -> None:
    """On a tty pgbench overwrites progress lines with \\r; so do we."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no \n → \r\n translation
    proc = subprocess.Popen(
        [str(pgbench_bin), "-i", "-s", "2", fresh_db],
        stderr=slave,
        stdout=subprocess.DEVNULL,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    theirs = b"".join(chunks).decode()
    drop_tables(fresh_db)
    buf = TtyBuffer()
    run_init(conf(fresh_db, scale=2), stream=buf)
    ours = buf.getvalue()
    assert "\r" in ours
    assert mask_timing(ours) == mask_timing(theirs)


# ----------------------------------------------------- rows and helpers


def test_rows_are_pgbench_copy_text() -> None:
    assert account_rows(0, 3) == b"1\t1\t0\t\n2\t1\t0\t\n3\t1\t0\t\n"
    assert account_rows(199998, 200000) == b"199999\t2\t0\t\n200000\t2\t0\t\n"
    assert teller_rows(8, 11) == b"9\t1\t0\t\\N\n10\t1\t0\t\\N\n11\t2\t0\t\\N\n"
    assert branch_rows(0, 2) == b"1\t0\t\\N\n2\t0\t\\N\n"
    with pytest.raises(ValueError, match="spans"):
        account_rows(99999, 100001)


@pytest.mark.parametrize("branch", [1, 2, 10, 11, 100, 101, 20000, 21475, 123457])
def test_whole_branch_blocks_match_row_by_row(branch: int) -> None:
    start, end = (branch - 1) * 100000, branch * 100000
    expected = b"".join(
        b"%d\t%d\t0\t\n" % (k + 1, k // 100000 + 1) for k in range(start, end)
    )
    assert account_rows(start, end) == expected
    first_seven = b"".join(expected.splitlines(keepends=True)[:7])
    assert account_rows(start, start + 7) == first_seven


def test_blocks_and_job_ranges_cover_every_row() -> None:
    assert list(block_bounds(0, 250000)) == [
        (0, 100000),
        (100000, 200000),
        (200000, 250000),
    ]
    assert list(block_bounds(5, 5)) == []
    for scale, jobs in ((5, 2), (7, 3), (3, 3), (100, 7)):
        ranges = job_ranges(scale, jobs)
        assert ranges[0][0] == 0 and ranges[-1][1] == 100000 * scale
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert all(lo % 100000 == 0 and hi > lo for lo, hi in ranges)


def test_bigint_aids_from_scale_20000(pgbench_bin: Path, fresh_db: str) -> None:
    """Only the DDL is compared (no data at that scale): bigint aid, bounds."""
    statements = create_table_statements(InitConfig(conn=ConnParams(), scale=20000))
    assert "aid bigint not null" in statements[2]
    catalog = """
        select c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
               pg_get_expr(c.relpartbound, c.oid)
        from pg_class c join pg_attribute a on a.attrelid = c.oid
        where c.relname like 'pgbench%' and a.attnum > 0
        order by 1, 2"""
    args = ["-I", "dt", "-s", "20000", "--partitions", "3"]
    assert pgbench(pgbench_bin, ["-i", *args, fresh_db]).returncode == 0
    with psycopg.connect(fresh_db) as conn:
        theirs = conn.execute(catalog).fetchall()
    cfg = conf(
        fresh_db,
        steps="dt",
        scale=20000,
        partitions=3,
        partition_method=PartitionMethod.RANGE,
    )
    assert pgsurge(cfg)[0] == 0
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute(catalog).fetchall() == theirs
    assert ("pgbench_accounts", "aid", "bigint", None) in theirs


def test_quote_ident() -> None:
    assert quote_ident("ts") == '"ts"'
    assert quote_ident('a"b') == '"a""b"'


def test_dbname_conninfo_overrides_host_and_port(fresh_db: str) -> None:
    """As with pgbench's expand_dbname, a conninfo as dbname wins over -h/-p."""
    params = ConnParams(host="/nowhere", port="1", dbname=fresh_db)
    buf = io.StringIO()
    run_init(InitConfig(conn=params, steps="dt"), stream=buf)
    assert buf.getvalue().startswith("dropping old tables...\n")


# ------------------------------------------------------ ensure_initialized


@pytest.fixture
def counts(fresh_db: str) -> Iterator[Any]:
    def get() -> tuple[int, int, int]:
        with psycopg.connect(fresh_db) as conn:
            row = conn.execute(
                "select (select count(*) from pgbench_branches),"
                " (select count(*) from pgbench_tellers),"
                " (select count(*) from pgbench_accounts)"
            ).fetchone()
        assert row is not None
        return (row[0], row[1], row[2])

    yield get


def test_ensure_initialized(fresh_db: str, counts: Any) -> None:
    params = ConnParams(dbname=fresh_db)
    buf = io.StringIO()
    assert ensure_initialized(params, stream=buf) is True
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("pgsurge: pgbench tables not found in database")
    assert lines[1] == "dropping old tables..."
    assert lines[-1].startswith("done in ")
    assert counts() == (1, 10, 100000)
    buf = io.StringIO()
    assert ensure_initialized(params, stream=buf) is False
    assert buf.getvalue() == ""
    # a table missing, or empty tables: half-initialized by the user, whose
    # tables are not touched: pgbench's hint (issue 11)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("drop table pgbench_history")
    with pytest.raises(InitError, match="are incomplete") as info:
        ensure_initialized(params, stream=io.StringIO())
    assert info.value.hint is not None and "-i" in info.value.hint
    # the automatic initialization's own, interrupted (its marker is set):
    # initialized again
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("create table pgbench_history (x int)")
        conn.execute("truncate pgbench_branches, pgbench_tellers")
        conn.execute(
            psycopg.sql.SQL(
                "alter database {} set pgsurge.auto_init = 'pending'"
            ).format(psycopg.sql.Identifier(conn.info.dbname))
        )
    buf = io.StringIO()
    assert ensure_initialized(params, stream=buf) is True
    assert "incomplete (an interrupted automatic initialization)" in buf.getvalue()
    assert counts() == (1, 10, 100000)
    assert ensure_initialized(params, stream=io.StringIO()) is False


def test_ensure_initialized_connection_failure(tmp_path: Path) -> None:
    with pytest.raises(ConnectError):
        ensure_initialized(ConnParams(host=str(tmp_path), port="5999"))


def test_unknown_step_is_an_init_error(fresh_db: str) -> None:
    with pytest.raises(InitError, match='unrecognized initialization step "x"'):
        run_init(conf(fresh_db, steps="x"), stream=io.StringIO())


# --------------------------------------------------------- through the CLI


@pytest.mark.parametrize(
    "args",
    [["-s", "1", "--foreign-keys"], ["--tablespace", "nosuch"]],
    ids=["ok", "unknown-tablespace"],
)
def test_cli_like_pgbench(pgbench_bin: Path, fresh_db: str, args: list[str]) -> None:
    """``pgsurge -i …`` as a user runs it: same exit status, same stderr."""
    drop_tables(fresh_db)
    theirs = pgbench(pgbench_bin, ["-i", *args, fresh_db])
    drop_tables(fresh_db)
    ours = subprocess.run(
        [sys.executable, "-m", "pgsurge", "-i", *args, fresh_db],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ours.returncode == theirs.returncode
    assert ours.stdout == theirs.stdout == ""
    assert mask_timing(ours.stderr) == mask_timing(theirs.stderr).replace(
        "pgbench:", "pgsurge:"
    )


def test_cli_init_jobs(fresh_db: str) -> None:
    ours = subprocess.run(
        [sys.executable, "-m", "pgsurge", "-i", "-s", "2", "--init-jobs=2", fresh_db],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ours.returncode == 0, ours.stderr
    assert "200000 of 200000 tuples (100%) of pgbench_accounts done" in ours.stderr
    with psycopg.connect(fresh_db) as conn:
        row = conn.execute("select count(*), sum(aid) from pgbench_accounts").fetchone()
    assert row == (200000, 200000 * 200001 // 2)
