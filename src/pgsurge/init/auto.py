"""The embedded server's automatic first initialization, made safe.

A first run on the embedded server initializes the pgbench tables at scale
1 when they are missing (``ensure_initialized``). Two things used to go
wrong (issue 11): runs started together each found the tables missing and
initialized at the same time (dropping each other's tables: they failed
and left empty tables), and a database left half-initialized (an
interrupted initialization) was taken as initialized, every later run
failing with ``empty range given to random``.

So:

* the check and the initialization hold a PostgreSQL advisory lock (on a
  connection of their own, released by the server however the process
  ends): concurrent first runs initialize once, the others wait for it and
  then find the tables;
* the tables are checked for content, not only for existence: branches,
  10 tellers per branch and the last account of the scale;
* while the automatic initialization runs, the database carries a marker
  setting (``ALTER DATABASE ... SET pgsurge.auto_init = 'pending'``,
  removed once it completed): a half-initialized database with that marker
  is the automatic initialization's own, interrupted, and is initialized
  again; without it, it is the user's, and the run stops with pgbench's
  hint rather than touching it.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import psycopg
from psycopg import sql

from pgsurge.config import ConnParams, InitConfig
from pgsurge.errors import PROG, ConnectError, InitError
from pgsurge.init import schema
from pgsurge.init.session import Output, Session

__all__ = ["INIT_LOCK_KEY", "MARKER", "TableState", "ensure_initialized"]

#: pg_advisory_lock key of the automatic initialization ("pgsurge" in ASCII)
INIT_LOCK_KEY = 0x706773757267
#: the database setting present while an automatic initialization runs
MARKER = "pgsurge.auto_init"

_MISSING_SQL = (
    "select count(*) from pg_catalog.unnest(%s::text[]) as t(name)"
    " where pg_catalog.to_regclass(t.name) is null"
)
_MARKER_SQL = (
    "select exists (select 1 from pg_catalog.pg_db_role_setting s"
    " join pg_catalog.pg_database d on d.oid = s.setdatabase"
    " where d.datname = pg_catalog.current_database() and s.setrole = 0"
    " and %s = any (s.setconfig))"
)


class TableState:
    """What :func:`_table_state` finds."""

    #: every table there with its data
    READY = "ready"
    #: none of the tables
    MISSING = "missing"
    #: some tables, or empty or incomplete ones
    PARTIAL = "partial"


def _table_state(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(_MISSING_SQL, (list(schema.ALL_TABLES),)).fetchone()
    missing = int(row[0]) if row else 0
    if missing == len(schema.ALL_TABLES):
        return TableState.MISSING
    if missing:
        return TableState.PARTIAL
    row = conn.execute("select count(*) from pgbench_branches").fetchone()
    branches = int(row[0]) if row else 0
    if branches <= 0:
        return TableState.PARTIAL
    row = conn.execute(
        "select (select count(*) from pgbench_tellers) = %s,"
        " exists (select 1 from pgbench_accounts where aid = %s)",
        (10 * branches, 100000 * branches),
    ).fetchone()
    if row is None or not (row[0] and row[1]):
        return TableState.PARTIAL
    return TableState.READY


def _marked(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute(_MARKER_SQL, (f"{MARKER}=pending",)).fetchone()
    return bool(row and row[0])


def _set_marker(conn: psycopg.Connection[Any], on: bool) -> None:
    """Best effort: a role that may not alter the database gets no marker
    (an interrupted initialization then gets pgbench's hint)."""
    dbname = conn.info.dbname
    stmt = (
        sql.SQL("ALTER DATABASE {} SET pgsurge.auto_init = 'pending'")
        if on
        else sql.SQL("ALTER DATABASE {} RESET pgsurge.auto_init")
    ).format(sql.Identifier(dbname))
    try:
        conn.execute(stmt)
    except psycopg.Error:
        pass


def ensure_initialized(conn: ConnParams, *, stream: TextIO | None = None) -> bool:
    """Create the pgbench tables at scale 1 unless they are there with
    their data; True if it did (see the module doc). Meant for the
    embedded server, where a first run should just work."""
    from pgsurge.init import run_init  # the package imports this module

    out = Output(stream if stream is not None else sys.stderr)
    try:
        session = Session.open(conn, out)
    except ConnectError as exc:
        # no initialization was attempted: libpq's message, and what to do
        # when the role (-U or PGUSER) is not one of the embedded server's
        hint = None
        if conn.user not in (None, "postgres"):
            hint = (
                f'the role "{conn.user}" (from -U or PGUSER) must exist on the '
                "embedded server, whose superuser is postgres: create it with "
                'psql "$(pgsurge server uri)", or use -U postgres'
            )
        raise ConnectError(exc.message, hint=hint) from None
    try:
        db = session.conn
        try:
            db.execute("select pg_catalog.pg_advisory_lock(%s)", (INIT_LOCK_KEY,))
            state = _table_state(db)
            marked = _marked(db) if state != TableState.MISSING else False
            dbname = db.info.dbname
        except psycopg.Error as exc:
            raise InitError(str(exc).strip()) from None
        if state == TableState.READY and not marked:
            return False
        if state == TableState.MISSING:
            why = "not found"
        elif marked:
            why = "incomplete (an interrupted automatic initialization)"
        else:
            raise InitError(
                f'pgbench tables in database "{dbname}" are incomplete',
                hint=(
                    f'Perhaps you need to do initialization ("{PROG} -i") in '
                    f'database "{dbname}".'
                ),
            )
        out.write(
            f'{PROG}: pgbench tables {why} in database "{dbname}", '
            "initializing them at scale 1\n"
        )
        _set_marker(db, True)
        run_init(InitConfig(conn=conn), stream=out.stream)
        _set_marker(db, False)
        return True
    finally:
        session.close()  # and with it the advisory lock
