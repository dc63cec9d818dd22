"""Differential tests of ``-i``: pgsurge's run_init against pgbench 18.6.

Each case initializes one fresh database with the real pgbench and another
with pgsurge, then compares what a user could observe: the catalog (tables,
columns, types, defaults, reloptions, persistence, tablespaces, partition
strategy and bounds, constraints, indexes), the data (row counts and an md5
of every row in key order, per table and per partition), the visibility
state left by the load (every page all-visible and all-frozen after the
vacuum) and the stderr text with times masked.
"""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsurge.config import ConnParams, InitConfig, PartitionMethod
from pgsurge.init import run_init
from tests.fix_run import mask_timing

pytestmark = pytest.mark.server

# ---------------------------------------------------------------- helpers


def pgbench_init(pgbench: Path, dsn: str, args: list[str]) -> str:
    """Run ``pgbench -i ARGS DSN``; return its stderr (it must succeed)."""
    proc = subprocess.run(
        [str(pgbench), "-i", *args, dsn],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    return proc.stderr


def pgsurge_init(dsn: str, **options: Any) -> str:
    """Run run_init in-process; return what it printed."""
    cfg = InitConfig(conn=ConnParams(dbname=dsn), **options)
    buf = io.StringIO()
    run_init(cfg, stream=buf)
    return buf.getvalue()


def masked(text: str) -> list[str]:
    """stderr lines with every duration replaced (and padding dropped)."""
    return [line.rstrip() for line in mask_timing(text).splitlines()]


_CATALOG_QUERIES = {
    "relations": """
        select c.relname, c.relkind, c.relpersistence, c.reloptions,
               c.relispartition, coalesce(ts.spcname, ''),
               pg_get_expr(c.relpartbound, c.oid),
               case when c.relkind = 'p' then pg_get_partkeydef(c.oid) end,
               pt.partstrat, pt.partnatts
        from pg_class c
        left join pg_tablespace ts on ts.oid = c.reltablespace
        left join pg_partitioned_table pt on pt.partrelid = c.oid
        where c.relnamespace = 'public'::regnamespace
          and c.relname like 'pgbench%'
        order by c.relname""",
    "columns": """
        select c.relname, a.attnum, a.attname,
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attstorage, a.attcompression
        from pg_attribute a
        join pg_class c on c.oid = a.attrelid
        left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where c.relnamespace = 'public'::regnamespace
          and c.relname like 'pgbench%' and a.attnum > 0 and not a.attisdropped
        order by c.relname, a.attnum""",
    "columns_info_schema": """
        select table_name, ordinal_position, column_name, data_type,
               character_maximum_length, is_nullable, column_default
        from information_schema.columns
        where table_schema = 'public' and table_name like 'pgbench%'
        order by table_name, ordinal_position""",
    "constraints": """
        select conrelid::regclass::text, conname, contype,
               pg_get_constraintdef(oid), conislocal, coninhcount
        from pg_constraint
        where connamespace = 'public'::regnamespace
        order by 1, 2""",
    "indexes": """
        select indexrelid::regclass::text, pg_get_indexdef(indexrelid),
               indisprimary, indisunique
        from pg_index
        where indrelid::regclass::text like 'pgbench%'
        order by 1""",
    "inherits": """
        select inhrelid::regclass::text, inhparent::regclass::text
        from pg_inherits
        where inhparent::regclass::text like 'pgbench%'
        order by 1""",
}

# Every row's text in key order: the whole-row text keeps char(n) padding
# and tells NULL from '' apart.
_DATA_QUERIES = {
    "pgbench_branches": "bid",
    "pgbench_tellers": "tid",
    "pgbench_accounts": "aid",
    "pgbench_history": "tid, bid, aid, mtime",
}


@dataclass
class Snapshot:
    catalog: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    data: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: relname → (relpages, pages with rows not all-visible, … not all-frozen)
    visibility: dict[str, tuple[int, int, int]] = field(default_factory=dict)


def snapshot(dsn: str) -> Snapshot:
    snap = Snapshot()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, sql in _CATALOG_QUERIES.items():
            snap.catalog[name] = conn.execute(sql).fetchall()
        tables = [
            row[0]
            for row in conn.execute(
                "select relname from pg_class"
                " where relnamespace = 'public'::regnamespace"
                " and relname like 'pgbench%' and relkind in ('r', 'p')"
            ).fetchall()
        ]
        for table in tables:
            key = _DATA_QUERIES.get(table, "aid")
            row = conn.execute(
                f"select count(*), md5(string_agg(t::text, E'\\n' order by {key}))"
                f" from {table} t"
            ).fetchone()
            assert row is not None
            snap.data[table] = tuple(row)
        conn.execute("create extension if not exists pg_visibility")
        for (relname,) in conn.execute(
            "select relname from pg_class"
            " where relnamespace = 'public'::regnamespace"
            " and relname like 'pgbench%' and relkind = 'r'"
        ).fetchall():
            # pages up to the last one holding a row: not-yet-initialized
            # pages a concurrent load may leave at the end do not count
            row = conn.execute(
                f"""select relpages,
                       (select count(*) from pg_visibility_map('{relname}') m
                        where m.blkno < u.used and not m.all_visible),
                       (select count(*) from pg_visibility_map('{relname}') m
                        where m.blkno < u.used and not m.all_frozen)
                    from pg_class,
                         (select coalesce(max((ctid::text::point)[0])::int + 1, 0)
                          from {relname}) as u(used)
                    where oid = '{relname}'::regclass"""
            ).fetchone()
            assert row is not None
            snap.visibility[relname] = (row[0], row[1], row[2])
    return snap


def assert_same_database(theirs: Snapshot, ours: Snapshot, *, same_pages: bool) -> None:
    for name in _CATALOG_QUERIES:
        assert ours.catalog[name] == theirs.catalog[name], name
    assert ours.data == theirs.data
    assert ours.data["pgbench_accounts"][0] > 0
    assert ours.visibility.keys() == theirs.visibility.keys()
    for rel, (pages, not_visible, not_frozen) in theirs.visibility.items():
        our_pages, our_not_visible, our_not_frozen = ours.visibility[rel]
        # every page holding rows is all-visible in both, and all-frozen in
        # ours where it is in pgbench's (COPY FREEZE); partitions, loaded
        # without FREEZE, may get frozen by the vacuum or not, depending on
        # whether a checkpoint came in between (opportunistic freezing)
        assert (our_not_visible == 0) == (not_visible == 0), rel
        if not_frozen == 0:
            assert our_not_frozen == 0, rel
        if same_pages:
            assert our_pages == pages, rel


@dataclass(frozen=True)
class Case:
    name: str
    pgbench_args: list[str]
    options: dict[str, Any]
    compare_stderr: bool = True


CASES = [
    Case(
        "hash-partitions-fk",
        [
            "-s",
            "5",
            "--partitions",
            "4",
            "--partition-method",
            "hash",
            "--foreign-keys",
        ],
        {
            "scale": 5,
            "partitions": 4,
            "partition_method": PartitionMethod.HASH,
            "foreign_keys": True,
            "steps": "dtgvpf",
        },
    ),
    Case(
        "range-partitions",
        ["-s", "3", "--partitions", "4"],
        {"scale": 3, "partitions": 4, "partition_method": PartitionMethod.RANGE},
    ),
    Case(
        "fillfactor-unlogged",
        ["-s", "2", "-F", "90", "--unlogged-tables"],
        {"scale": 2, "fillfactor": 90, "unlogged_tables": True},
    ),
    Case(
        "unlogged-range-partitions",
        ["-s", "1", "-F", "80", "--unlogged-tables", "--partitions", "3"],
        {
            "scale": 1,
            "fillfactor": 80,
            "unlogged_tables": True,
            "partitions": 3,
            "partition_method": PartitionMethod.RANGE,
        },
    ),
    Case(
        "server-side",
        ["-s", "2", "-I", "dtGvp"],
        {"scale": 2, "steps": "dtGvp"},
    ),
    Case("quiet", ["-s", "2", "-q"], {"scale": 2, "quiet": True}),
    Case(
        "no-vacuum-fk",
        ["-s", "1", "-n", "--foreign-keys"],
        {"scale": 1, "steps": "dtg pf", "foreign_keys": True},
    ),
]

# --init-jobs: same database, same visible state; the stderr differs only in
# timings, so it is compared too.
PARALLEL_CASES = [
    Case(
        "init-jobs-2",
        ["-s", "5"],
        {"scale": 5, "init_jobs": 2},
    ),
    Case(
        "init-jobs-3-hash-partitions",
        ["-s", "3", "--partitions", "2", "--partition-method", "hash"],
        {
            "scale": 3,
            "init_jobs": 3,
            "partitions": 2,
            "partition_method": PartitionMethod.HASH,
        },
    ),
    Case(
        "init-jobs-2-no-vacuum",
        ["-s", "2", "-I", "dtgp"],
        {"scale": 2, "init_jobs": 2, "steps": "dtgp"},
    ),
]


@pytest.fixture
def db_factory(server_dsn: str) -> Iterator[Callable[[], str]]:
    """Make fresh databases on demand (dropped at the end of the test)."""
    names: list[str] = []

    def make() -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        names.append(name)
        return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)

    yield make
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)
                )
            )


def _run_case(
    case: Case,
    pgbench_bin: Path,
    make_db: Callable[[], str],
    *,
    same_pages: bool,
) -> None:
    theirs_dsn, ours_dsn = make_db(), make_db()
    their_err = pgbench_init(pgbench_bin, theirs_dsn, case.pgbench_args)
    our_err = pgsurge_init(ours_dsn, **case.options)
    assert_same_database(
        snapshot(theirs_dsn), snapshot(ours_dsn), same_pages=same_pages
    )
    if case.compare_stderr:
        assert masked(our_err) == masked(their_err)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_same_as_pgbench(
    case: Case, pgbench_bin: Path, db_factory: Callable[[], str]
) -> None:
    _run_case(case, pgbench_bin, db_factory, same_pages=True)


@pytest.mark.parametrize("case", PARALLEL_CASES, ids=lambda c: c.name)
def test_init_jobs_same_as_pgbench(
    case: Case, pgbench_bin: Path, db_factory: Callable[[], str]
) -> None:
    # Parallel copies may leave one partly filled page per job: the page
    # counts can differ by a few, everything else may not.
    _run_case(case, pgbench_bin, db_factory, same_pages=False)


def test_reinit_over_existing_tables(
    pgbench_bin: Path, db_factory: Callable[[], str]
) -> None:
    """A second init drops silently (no NOTICE) in both."""
    theirs_dsn, ours_dsn = db_factory(), db_factory()
    pgbench_init(pgbench_bin, theirs_dsn, ["-s", "1", "-I", "dt"])
    pgsurge_init(ours_dsn, scale=1, steps="dt")
    their_err = pgbench_init(pgbench_bin, theirs_dsn, ["-s", "1"])
    our_err = pgsurge_init(ours_dsn, scale=1)
    assert masked(our_err) == masked(their_err)
    assert "NOTICE" not in our_err
    assert_same_database(snapshot(theirs_dsn), snapshot(ours_dsn), same_pages=True)


@pytest.fixture
def tablespace(
    server_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A tablespace with a name that needs quoting, in a fresh directory.

    The directory must belong to the server's OS user: possible only when the
    server runs on this host and we may give it the directory.
    """
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        datadir = conn.execute("show data_directory").fetchone()
    assert datadir is not None
    try:
        owner = Path(datadir[0]).stat()
    except OSError:
        pytest.skip("the server's data directory is not on this host")
    if os.geteuid() not in (0, owner.st_uid):
        pytest.skip("cannot give a directory to the server's OS user")
    location = tmp_path_factory.mktemp("ts") / "space"
    location.mkdir()
    os.chown(location, owner.st_uid, owner.st_gid)
    for parent in location.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o711)
    name = f'ts "{uuid.uuid4().hex[:8]}"'
    ident = sql.Identifier(name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(
                ident, sql.Literal(str(location))
            )
        )
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLESPACE IF EXISTS {}").format(ident))


def test_tablespaces_same_as_pgbench(
    pgbench_bin: Path, db_factory: Callable[[], str], tablespace: str
) -> None:
    dsns = [db_factory(), db_factory()]
    case = Case(
        "tablespaces",
        [
            "-s",
            "1",
            "--partitions",
            "2",
            "--foreign-keys",
            "--tablespace",
            tablespace,
            "--index-tablespace",
            tablespace,
        ],
        {
            "scale": 1,
            "partitions": 2,
            "partition_method": PartitionMethod.RANGE,
            "foreign_keys": True,
            "steps": "dtgvpf",
            "tablespace": tablespace,
            "index_tablespace": tablespace,
        },
    )
    try:
        _run_case(case, pgbench_bin, iter(dsns).__next__, same_pages=True)
        with psycopg.connect(dsns[1]) as conn:
            rows = conn.execute(
                "select c.relname, t.spcname from pg_class c"
                " left join pg_tablespace t on t.oid = c.reltablespace"
                " where c.relname like 'pgbench%' order by 1"
            ).fetchall()
        in_space = {rel for rel, space in rows if space == tablespace}
        # tables, the partitioned parent, and the primary-key indexes
        assert {"pgbench_history", "pgbench_accounts", "pgbench_branches_pkey"} <= (
            in_space
        )
    finally:
        for dsn in dsns:
            drop_pgbench_tables(dsn)


def drop_pgbench_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "drop table if exists pgbench_accounts, pgbench_branches,"
            " pgbench_history, pgbench_tellers"
        )
