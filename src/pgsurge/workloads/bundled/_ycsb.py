"""YCSB core workloads A-F on one key-value table (the ``ycsb-*`` modules
pick the mix).

``usertable``: ``ycsb_key bigint`` and ten 100-byte text fields, 100 000
records per scale unit (``-s``), loaded by ``pgsurge -i -b ycsb-X``
(COPY, parallel over ``--init-jobs``). Operations, one transaction each:

* read: one record, all fields;
* update: one random field of one record;
* insert: a new record, its key from a sequence (``RETURNING``: the client
  then knows the latest key);
* scan: up to 100 records (uniform length) from a key, in key order;
* read-modify-write: read a record, then update one field of it.

Request distributions as in YCSB: zipfian (scrambled, so that the hot keys
are spread over the table: ``permute`` of the zipfian rank), latest
(zipfian over recency from the newest key the client knows: the initial
ones and its own inserts), uniform scan lengths. pgbench's zipfian needs a
parameter of at least 1.001; YCSB's 0.99 is approximated by 1.01.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pgsurge.workloads import Context, load, sql

__all__ = [
    "FIELDS",
    "RECORDS_PER_SCALE",
    "SCALE_QUERY",
    "ZIPF",
    "choose_key",
    "insert",
    "insert_record",
    "latest_key",
    "load_usertable",
    "read",
    "read_latest",
    "read_modify_write",
    "read_record",
    "scan",
    "scan_records",
    "update",
    "update_field",
]

RECORDS_PER_SCALE = 100_000
FIELDS = 10
FIELD_LENGTH = 100
MAX_SCAN = 100
ZIPF = 1.01

SCALE_QUERY = "SELECT scale FROM ycsb_meta"

read_record = sql("SELECT * FROM usertable WHERE ycsb_key = $1")
update_field = [
    sql(f"UPDATE usertable SET field{i} = $1 WHERE ycsb_key = $2", fetch=False)
    for i in range(FIELDS)
]
insert_record = sql(
    "INSERT INTO usertable VALUES (nextval('usertable_key_seq'), "
    + ", ".join(f"${i}" for i in range(1, FIELDS + 1))
    + ") RETURNING ycsb_key"
)
scan_records = sql(
    "SELECT * FROM usertable WHERE ycsb_key >= $1 ORDER BY ycsb_key LIMIT $2"
)

_POOL = [
    "".join(chr(97 + (i * 7 + j * 13 + (i * j) % 5) % 26) for j in range(FIELD_LENGTH))
    for i in range(997)
]


def _records(ctx: Context) -> int:
    return RECORDS_PER_SCALE * ctx.scale


def choose_key(ctx: Context, n: int) -> int:
    """A scrambled zipfian key in [1, n]: rank 1 is the hottest."""
    rank = ctx.random_zipfian(1, n, ZIPF)
    return ctx.permute(rank - 1, n, 7919) + 1


def latest_key(ctx: Context) -> int:
    """Zipfian over recency: the newest key the client knows is hottest."""
    newest: int = getattr(ctx, "ycsb_latest", 0) or _records(ctx)
    return newest - ctx.random_zipfian(1, newest, ZIPF) + 1


def _value(ctx: Context) -> str:
    return _POOL[ctx.random(0, len(_POOL) - 1)]


Tx = Generator[Any, Any, None]


def read(ctx: Context) -> Tx:
    yield read_record(choose_key(ctx, _records(ctx)))


def read_latest(ctx: Context) -> Tx:
    yield read_record(latest_key(ctx))


def update(ctx: Context) -> Tx:
    key = choose_key(ctx, _records(ctx))
    yield update_field[ctx.random(0, FIELDS - 1)](_value(ctx), key)


def insert(ctx: Context) -> Tx:
    values = [_value(ctx) for _ in range(FIELDS)]
    key = (yield insert_record(*values)).scalar()
    ctx.ycsb_latest = max(key, getattr(ctx, "ycsb_latest", 0))  # type: ignore[attr-defined]


def scan(ctx: Context) -> Tx:
    start = choose_key(ctx, _records(ctx))
    yield scan_records(start, ctx.random(1, MAX_SCAN))


def read_modify_write(ctx: Context) -> Tx:
    key = choose_key(ctx, _records(ctx))
    yield read_record(key)
    yield update_field[ctx.random(0, FIELDS - 1)](_value(ctx), key)


def _rows(first: int, last: int) -> Generator[tuple[object, ...], None, None]:
    pool = _POOL
    size = len(pool)
    for key in range(first, last + 1):
        yield (key, *(pool[(key * 31 + i * 17) % size] for i in range(FIELDS)))


def _load_part(db: Any, part: tuple[int, int]) -> None:
    db.copy(
        "usertable", ["ycsb_key", *(f"field{i}" for i in range(FIELDS))], _rows(*part)
    )


@load
def load_usertable(db: Any) -> None:
    n = RECORDS_PER_SCALE * db.scale
    db.log("dropping old tables...")
    db.execute("DROP TABLE IF EXISTS usertable, ycsb_meta")
    db.log("creating tables...")
    fields = ", ".join(f"field{i} text" for i in range(FIELDS))
    db.execute(f"CREATE TABLE usertable (ycsb_key bigint NOT NULL, {fields})")
    db.execute("CREATE TABLE ycsb_meta (scale int NOT NULL)")
    db.execute("INSERT INTO ycsb_meta VALUES (%s)", [db.scale])
    db.log(f"generating data ({n} records)...")
    step = 50_000
    db.parallel(_load_part, [(i, min(i + step - 1, n)) for i in range(1, n + 1, step)])
    db.log("vacuuming...")
    db.execute("VACUUM ANALYZE usertable")
    db.log("creating primary keys...")
    db.execute("ALTER TABLE usertable ADD PRIMARY KEY (ycsb_key)")
    db.execute("CREATE SEQUENCE usertable_key_seq")
    db.execute("SELECT setval('usertable_key_seq', %s)", [n])
