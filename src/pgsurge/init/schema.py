"""The SQL text of pgbench's initialization steps, as pure functions.

Everything here is data or string building: no connection, no output. The
statements are spelled exactly as pgbench 18 sends them (lower case, its
spacing, its column lists), because users see them in error details
(``Query was: …``) and because the resulting catalog entries must be the
same as pgbench's.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgsurge.config import InitConfig, PartitionMethod

#: Rows per unit of scale, and the scale from which account ids need bigint.
BRANCHES_PER_SCALE = 1
TELLERS_PER_SCALE = 10
ACCOUNTS_PER_SCALE = 100_000
SCALE_BIGINT_THRESHOLD = 20_000

#: The four tables, in the order pgbench lists them in DROP and TRUNCATE.
ALL_TABLES = (
    "pgbench_accounts",
    "pgbench_branches",
    "pgbench_history",
    "pgbench_tellers",
)

# One statement for all four tables, so foreign keys between them never get
# in the way, whatever their order.
DROP_TABLES_SQL = "drop table if exists " + ", ".join(ALL_TABLES)
TRUNCATE_TABLES_SQL = "truncate table " + ", ".join(ALL_TABLES)

#: pgbench asks for the relkind before each COPY to decide on FREEZE; this
#: is the text it shows in an error detail (psycopg sends ``%s`` as ``$1``).
RELKIND_SQL_SHOWN = (
    "SELECT relkind FROM pg_catalog.pg_class WHERE oid=$1::pg_catalog.regclass"
)
RELKIND_SQL = (
    "SELECT relkind FROM pg_catalog.pg_class WHERE oid=%s::pg_catalog.regclass"
)


@dataclass(frozen=True, slots=True)
class TableDef:
    """One table's column list for 32-bit and 64-bit account ids."""

    name: str
    columns: str
    columns_bigint: str
    #: history is the only table created without an explicit fillfactor
    with_fillfactor: bool


# Creation order matters only for the error a user sees first (e.g. a missing
# tablespace is reported on pgbench_history, as pgbench does).
TABLE_DEFS = (
    TableDef(
        "pgbench_history",
        "tid int,bid int,aid    int,delta int,mtime timestamp,filler char(22)",
        "tid int,bid int,aid bigint,delta int,mtime timestamp,filler char(22)",
        with_fillfactor=False,
    ),
    TableDef(
        "pgbench_tellers",
        "tid int not null,bid int,tbalance int,filler char(84)",
        "tid int not null,bid int,tbalance int,filler char(84)",
        with_fillfactor=True,
    ),
    TableDef(
        "pgbench_accounts",
        "aid    int not null,bid int,abalance int,filler char(84)",
        "aid bigint not null,bid int,abalance int,filler char(84)",
        with_fillfactor=True,
    ),
    TableDef(
        "pgbench_branches",
        "bid int not null,bbalance int,filler char(88)",
        "bid int not null,bbalance int,filler char(88)",
        with_fillfactor=True,
    ),
)

_PRIMARY_KEYS = (
    "alter table pgbench_branches add primary key (bid)",
    "alter table pgbench_tellers add primary key (tid)",
    "alter table pgbench_accounts add primary key (aid)",
)

FOREIGN_KEYS_SQL = (
    "alter table pgbench_tellers add constraint pgbench_tellers_bid_fkey"
    " foreign key (bid) references pgbench_branches",
    "alter table pgbench_accounts add constraint pgbench_accounts_bid_fkey"
    " foreign key (bid) references pgbench_branches",
    "alter table pgbench_history add constraint pgbench_history_bid_fkey"
    " foreign key (bid) references pgbench_branches",
    "alter table pgbench_history add constraint pgbench_history_tid_fkey"
    " foreign key (tid) references pgbench_tellers",
    "alter table pgbench_history add constraint pgbench_history_aid_fkey"
    " foreign key (aid) references pgbench_accounts",
)

#: VACUUM order of pgbench's ``v`` step.
VACUUM_ORDER = (
    "pgbench_branches",
    "pgbench_tellers",
    "pgbench_accounts",
    "pgbench_history",
)


def quote_ident(name: str) -> str:
    """Quote an identifier the way libpq's PQescapeIdentifier does: always."""
    return '"' + name.replace('"', '""') + '"'


def create_table_statements(cfg: InitConfig) -> list[str]:
    """The ``t`` step: the four CREATE TABLEs, then the partitions if any."""
    partitioned = cfg.partition_method is not PartitionMethod.NONE
    # With partitioning, only the partitions are unlogged (the parent holds
    # no data); pgbench then creates every other table logged as well.
    unlogged = " unlogged" if cfg.unlogged_tables and not partitioned else ""
    statements = []
    for table in TABLE_DEFS:
        big = cfg.scale >= SCALE_BIGINT_THRESHOLD
        sql = f"create{unlogged} table {table.name}("
        sql += (table.columns_bigint if big else table.columns) + ")"
        if partitioned and table.name == "pgbench_accounts":
            sql += f" partition by {cfg.partition_method.value} (aid)"
        elif table.with_fillfactor:
            sql += f" with (fillfactor={cfg.fillfactor})"
        if cfg.tablespace is not None:
            sql += " tablespace " + quote_ident(cfg.tablespace)
        statements.append(sql)
    return statements


def partition_statements(cfg: InitConfig) -> list[str]:
    """The CREATE TABLE … PARTITION OF statements for pgbench_accounts."""
    n = cfg.partitions
    unlogged = " unlogged" if cfg.unlogged_tables else ""
    statements = []
    for p in range(1, n + 1):
        head = (
            f"create{unlogged} table pgbench_accounts_{p}\n"
            "  partition of pgbench_accounts\n"
        )
        if cfg.partition_method is PartitionMethod.RANGE:
            # Open ends at both extremes accept any aid, not only the ones
            # the scale generates.
            size = (ACCOUNTS_PER_SCALE * cfg.scale + n - 1) // n
            low = "minvalue" if p == 1 else str((p - 1) * size + 1)
            high = "maxvalue" if p == n else str(p * size + 1)
            bound = f"  for values from ({low}) to ({high})"
        else:
            bound = f"  for values with (modulus {n}, remainder {p - 1})"
        statements.append(f"{head}{bound} with (fillfactor={cfg.fillfactor})")
    return statements


def server_side_insert_statements(scale: int) -> list[str]:
    """The ``G`` step: fill the three tables with generate_series."""
    return [
        "insert into pgbench_branches(bid,bbalance) select bid, 0 "
        f"from generate_series(1, {BRANCHES_PER_SCALE * scale}) as bid",
        "insert into pgbench_tellers(tid,bid,tbalance) "
        f"select tid, (tid - 1) / {TELLERS_PER_SCALE} + 1, 0 "
        f"from generate_series(1, {TELLERS_PER_SCALE * scale}) as tid",
        "insert into pgbench_accounts(aid,bid,abalance,filler) "
        f"select aid, (aid - 1) / {ACCOUNTS_PER_SCALE} + 1, 0, '' "
        f"from generate_series(1, {ACCOUNTS_PER_SCALE * scale}) as aid",
    ]


def vacuum_statements(*, freeze_accounts: bool = False) -> list[str]:
    """The ``v`` step; ``freeze_accounts`` after a parallel (non-FREEZE) load."""
    statements = []
    for table in VACUUM_ORDER:
        if freeze_accounts and table == "pgbench_accounts":
            statements.append(f"vacuum (freeze, analyze) {table}")
        else:
            statements.append(f"vacuum analyze {table}")
    return statements


def primary_key_statements(index_tablespace: str | None) -> list[str]:
    """The ``p`` step."""
    suffix = ""
    if index_tablespace is not None:
        suffix = " using index tablespace " + quote_ident(index_tablespace)
    return [sql + suffix for sql in _PRIMARY_KEYS]


def copy_statement(table: str, *, freeze: bool) -> str:
    """pgbench's COPY text; FREEZE only for ordinary tables on server ≥ 14."""
    return f"copy {table} from stdin" + (" with (freeze on)" if freeze else "")
