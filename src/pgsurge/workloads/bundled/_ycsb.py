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

Request distributions as in YCSB: zipfian with YCSB's constant 0.99
(``zipfian``: YCSB's ZipfianGenerator, Gray et al.'s method, on the
client's PRNG stream; pgbench's ``random_zipfian`` takes no parameter
below 1.001), scrambled so that the hot keys are spread over the table
(``permute`` of the zipfian rank); latest: zipfian over recency from the
newest key inserted by any client, read from the key sequence inside the
read itself (YCSB's shared insert counter; a key drawn but not yet
committed reads no row, as in YCSB); uniform scan lengths.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from pgsurge.workloads import Context, load, sql

__all__ = [
    "FIELDS",
    "FIGURES",
    "RECORDS_PER_SCALE",
    "SCALE_QUERY",
    "ZIPF",
    "choose_key",
    "insert",
    "insert_record",
    "latest_offset",
    "load_usertable",
    "read",
    "read_latest",
    "read_latest_record",
    "read_modify_write",
    "read_record",
    "scan",
    "scan_records",
    "update",
    "update_field",
    "zipfian",
]

RECORDS_PER_SCALE = 100_000
FIELDS = 10
FIELD_LENGTH = 100
MAX_SCAN = 100
#: YCSB's ZipfianGenerator.ZIPFIAN_CONSTANT
ZIPF = 0.99

SCALE_QUERY = "SELECT scale FROM ycsb_meta"
#: each operation's ops/s and latency percentiles after a run
FIGURES = "ycsb"

read_record = sql("SELECT * FROM usertable WHERE ycsb_key = $1")
#: the newest key any client inserted, less $1
read_latest_record = sql(
    "SELECT * FROM usertable"
    " WHERE ycsb_key = (SELECT last_value FROM usertable_key_seq) - $1"
)
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


#: n -> (zeta(n), eta, 1 / (1 - theta)) of ``zipfian``
_ZETA: dict[int, tuple[float, float, float]] = {}

#: terms of zeta summed exactly; the rest by the Euler-Maclaurin formula
_EXACT_TERMS = 100_000


def _zeta(n: int, theta: float) -> float:
    """sum(1 / i**theta for i in 1..n): exact up to ``_EXACT_TERMS``, then
    the integral with its first correction (relative error < 1e-9)."""
    m = min(n, _EXACT_TERMS)
    pow_ = math.pow
    total = math.fsum(pow_(i, -theta) for i in range(1, m + 1))
    if n > m:
        a = 1.0 - theta
        total += (pow_(n, a) - pow_(m, a)) / a
        total += (pow_(n, -theta) - pow_(m, -theta)) / 2.0
    return total


def zipfian(ctx: Context, n: int) -> int:
    """A zipfian rank in [1, n] with YCSB's constant (:data:`ZIPF`): rank
    1 is the hottest. YCSB's ZipfianGenerator (Gray et al., "Quickly
    generating billion-record synthetic databases"), one uniform draw of
    the client's stream each, so that a retry draws the same."""
    params = _ZETA.get(n)
    if params is None:
        zetan = _zeta(n, ZIPF)
        zeta2 = 1.0 + 0.5**ZIPF
        eta = (1.0 - (2.0 / n) ** (1.0 - ZIPF)) / (1.0 - zeta2 / zetan)
        params = _ZETA[n] = (zetan, eta, 1.0 / (1.0 - ZIPF))
    zetan, eta, alpha = params
    u = ctx.random_double()
    uz = u * zetan
    if uz < 1.0:
        return 1
    if uz < 1.0 + 0.5**ZIPF:
        return 2
    return min(n, 1 + int(n * (eta * u - eta + 1.0) ** alpha))


def choose_key(ctx: Context, n: int) -> int:
    """A scrambled zipfian key in [1, n]: rank 1 is the hottest."""
    return ctx.permute(zipfian(ctx, n) - 1, n, 7919) + 1


def latest_offset(ctx: Context) -> int:
    """Zipfian over recency: how far below the newest key (0: the newest)."""
    return zipfian(ctx, _records(ctx)) - 1


def _value(ctx: Context) -> str:
    return _POOL[ctx.random(0, len(_POOL) - 1)]


Tx = Generator[Any, Any, None]


def read(ctx: Context) -> Tx:
    yield read_record(choose_key(ctx, _records(ctx)))


def read_latest(ctx: Context) -> Generator[Any, Any, int | None]:
    """Read a recent record; the key read (None: no row, an insert not
    yet committed)."""
    row = (yield read_latest_record(latest_offset(ctx))).first()
    return None if row is None else int(row[0])


def update(ctx: Context) -> Tx:
    key = choose_key(ctx, _records(ctx))
    yield update_field[ctx.random(0, FIELDS - 1)](_value(ctx), key)


def insert(ctx: Context) -> Tx:
    values = [_value(ctx) for _ in range(FIELDS)]
    yield insert_record(*values)


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
    db.execute("INSERT INTO ycsb_meta VALUES ($1)", [db.scale])
    db.log(f"generating data ({n} records)...")
    step = 50_000
    db.parallel(_load_part, [(i, min(i + step - 1, n)) for i in range(1, n + 1, step)])
    db.log("vacuuming...")
    db.execute("VACUUM ANALYZE usertable")
    db.log("creating primary keys...")
    db.execute("ALTER TABLE usertable ADD PRIMARY KEY (ycsb_key)")
    db.execute("CREATE SEQUENCE usertable_key_seq")
    db.execute("SELECT setval('usertable_key_seq', $1)", [n])
