"""tpcc-like: the five TPC-C transactions on TPC-C's schema, as a workload.

Not an audited TPC-C (no keying or think times, no terminals pinned to a
warehouse, a simplified data generator), but its transactions, mix and
data rules: New-Order 45 %, Payment 43 %, Order-Status, Delivery and
Stock-Level 4 % each; NURand choice of customers and items; 1 % of
New-Orders name an unused item and roll back (a completed transaction,
as TPC-C counts it, not a failure); 1 % of order lines and 15 % of
payments go to a remote warehouse when there are several.

``pgsurge -i -b tpcc-like -s W`` creates W warehouses (COPY, parallel
over ``--init-jobs``); the run reads W from ``warehouse``, and prints
NOPM, tpmC, TPM and the New-Order rollbacks after pgbench's report
(``FIGURES``, ``COUNTER_QUERY``; ``pgsurge.workloads.figures``). The TPC-C
consistency conditions 1-4 are :data:`CHECKS` (SQL returning the rows
that violate each); ``python -m pgsurge.workloads.bundled.tpcc DSN``
runs them.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Generator, Iterator
from typing import Any

from pgsurge.workloads import Context, load, sql, transaction

SCALE_QUERY = "SELECT count(*) FROM warehouse"
#: NOPM, tpmC and TPM after a run (``pgsurge.workloads.figures``)
FIGURES = "tpcc"
#: New-Orders committed: read before and after the run (NOPM, as HammerDB
#: counts it: a rolled-back New-Order moves no d_next_o_id)
COUNTER_QUERY = "SELECT sum(d_next_o_id)::bigint FROM district"

DISTRICTS = 10
CUSTOMERS = 3000  # per district
ITEMS = 100_000
ORDERS = 3000  # per district, initially
FIRST_NEW_ORDER = 2101  # orders from here on are undelivered at load

# NURand's C constants (the load and run values of C_LAST differ by 66,
# as TPC-C 2.1.6.1 asks)
C_ID = 259
C_ITEM = 7911
C_LAST_LOAD = 157
C_LAST_RUN = 223

SYLLABLES = (
    "BAR",
    "OUGHT",
    "ABLE",
    "PRI",
    "PRES",
    "ESE",
    "ANTI",
    "CALLY",
    "ATION",
    "EING",
)


def last_name(n: int) -> str:
    return SYLLABLES[n // 100] + SYLLABLES[n // 10 % 10] + SYLLABLES[n % 10]


def nurand(ctx: Context, a: int, x: int, y: int, c: int) -> int:
    return ((ctx.random(0, a) | ctx.random(x, y)) + c) % (y - x + 1) + x


# -- statements ----------------------------------------------------------------

begin = sql("BEGIN")
commit = sql("COMMIT")
rollback = sql("ROLLBACK")

# New-Order
no_customer = sql(
    "SELECT c_discount, c_last, c_credit, w_tax FROM customer, warehouse"
    " WHERE w_id = $1 AND c_w_id = w_id AND c_d_id = $2 AND c_id = $3"
)
no_district = sql(
    "UPDATE district SET d_next_o_id = d_next_o_id + 1"
    " WHERE d_w_id = $1 AND d_id = $2 RETURNING d_next_o_id - 1, d_tax"
)
no_order = sql(
    "INSERT INTO oorder (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_ol_cnt,"
    " o_all_local) VALUES ($1, $2, $3, $4, now(), $5, $6)",
    fetch=False,
)
no_new_order = sql(
    "INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)",
    fetch=False,
)
no_item_stock = sql(
    "SELECT i_price, i_name, i_data, s_quantity, s_data,"
    " (ARRAY[s_dist_01, s_dist_02, s_dist_03, s_dist_04, s_dist_05, s_dist_06,"
    " s_dist_07, s_dist_08, s_dist_09, s_dist_10])[$3]"
    " FROM item, stock WHERE i_id = $1 AND s_i_id = i_id AND s_w_id = $2"
    " FOR UPDATE OF stock"
)
no_stock = sql(
    "UPDATE stock SET s_quantity = $1, s_ytd = s_ytd + $2,"
    " s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + $3"
    " WHERE s_i_id = $4 AND s_w_id = $5",
    fetch=False,
)
no_line = sql(
    "INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id,"
    " ol_supply_w_id, ol_quantity, ol_amount, ol_dist_info)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    fetch=False,
)

# Payment
pay_warehouse = sql(
    "UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2 RETURNING w_name"
)
pay_district = sql(
    "UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3"
    " RETURNING d_name"
)
customers_by_name = sql(
    "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3"
    " ORDER BY c_first"
)
pay_customer = sql(
    "SELECT c_credit, c_balance, c_data FROM customer"
    " WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3 FOR UPDATE"
)
pay_update_customer = sql(
    "UPDATE customer SET c_balance = c_balance - $1,"
    " c_ytd_payment = c_ytd_payment + $1, c_payment_cnt = c_payment_cnt + 1,"
    " c_data = CASE WHEN c_credit = 'BC' THEN left($5 || c_data, 500)"
    " ELSE c_data END"
    " WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
    fetch=False,
)
pay_history = sql(
    "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date,"
    " h_amount, h_data) VALUES ($1, $2, $3, $4, $5, now(), $6, $7)",
    fetch=False,
)

# Order-Status
os_customer = sql(
    "SELECT c_first, c_middle, c_last, c_balance FROM customer"
    " WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3"
)
os_last_order = sql(
    "SELECT o_id, o_carrier_id, o_entry_d FROM oorder"
    " WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1"
)
os_lines = sql(
    "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d"
    " FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3"
)

# Delivery
dl_oldest = sql(
    "SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2"
    " ORDER BY no_o_id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
dl_delete = sql(
    "DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3"
)
dl_order = sql(
    "UPDATE oorder SET o_carrier_id = $1"
    " WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4 RETURNING o_c_id"
)
dl_lines = sql(
    "UPDATE order_line SET ol_delivery_d = now()"
    " WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 RETURNING ol_amount"
)
dl_customer = sql(
    "UPDATE customer SET c_balance = c_balance + $1,"
    " c_delivery_cnt = c_delivery_cnt + 1"
    " WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
    fetch=False,
)

# Stock-Level
sl_next_order = sql("SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2")
sl_low_stock = sql(
    "SELECT count(DISTINCT s_i_id) FROM order_line, stock"
    " WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id < $3 AND ol_o_id >= $3 - 20"
    " AND s_w_id = $1 AND s_i_id = ol_i_id AND s_quantity < $4"
)

Tx = Generator[Any, Any, None]


def _other_warehouse(ctx: Context, w_id: int, warehouses: int) -> int:
    other = ctx.random(1, warehouses - 1)
    return other + 1 if other >= w_id else other


def _customer(ctx: Context, w_id: int, d_id: int) -> Generator[Any, Any, int]:
    """A customer, 60 % by last name (the middle one of that name, in
    c_first order), else by id; the generator's value is its id."""
    if ctx.random(1, 100) <= 60:
        name = last_name(nurand(ctx, 255, 0, 999, C_LAST_RUN))
        rows = (yield customers_by_name(w_id, d_id, name)).rows()
        if rows:
            c_id: int = rows[(len(rows) - 1) // 2][0]
            return c_id
    return nurand(ctx, 1023, 1, CUSTOMERS, C_ID)


@transaction(weight=45)
def new_order(ctx: Context) -> Tx:
    warehouses = ctx.scale
    w_id = ctx.random(1, warehouses)
    d_id = ctx.random(1, DISTRICTS)
    c_id = nurand(ctx, 1023, 1, CUSTOMERS, C_ID)
    ol_cnt = ctx.random(5, 15)
    rollback_order = ctx.random(1, 100) == 1
    lines = []
    for number in range(1, ol_cnt + 1):
        i_id = nurand(ctx, 8191, 1, ITEMS, C_ITEM)
        if rollback_order and number == ol_cnt:
            i_id = ITEMS + 1  # an unused item: the order rolls back
        supply = w_id
        if warehouses > 1 and ctx.random(1, 100) == 1:
            supply = _other_warehouse(ctx, w_id, warehouses)
        lines.append((i_id, supply, ctx.random(1, 10)))
    # stock rows in one order, so that concurrent New-Orders cannot deadlock
    lines.sort()
    all_local = int(all(supply == w_id for _, supply, _ in lines))
    yield begin()
    discount, _last, _credit, w_tax = (yield no_customer(w_id, d_id, c_id)).one()
    o_id, d_tax = (yield no_district(w_id, d_id)).one()
    yield no_order(o_id, d_id, w_id, c_id, ol_cnt, all_local)
    yield no_new_order(o_id, d_id, w_id)
    total = 0
    for number, (i_id, supply, quantity) in enumerate(lines, 1):
        row = (yield no_item_stock(i_id, supply, d_id)).first()
        if row is None:
            yield rollback()  # TPC-C's 1 %: an expected rollback
            return
        price, _name, _data, s_quantity, _s_data, dist_info = row
        if s_quantity >= quantity + 10:
            s_quantity -= quantity
        else:
            s_quantity += 91 - quantity
        yield no_stock(s_quantity, quantity, int(supply != w_id), i_id, supply)
        amount = quantity * price
        total += amount
        yield no_line(
            o_id, d_id, w_id, number, i_id, supply, quantity, amount, dist_info
        )
    _ = total * (1 - discount) * (1 + w_tax + d_tax)
    yield commit()


@transaction(weight=43)
def payment(ctx: Context) -> Tx:
    warehouses = ctx.scale
    w_id = ctx.random(1, warehouses)
    d_id = ctx.random(1, DISTRICTS)
    c_w_id, c_d_id = w_id, d_id
    if warehouses > 1 and ctx.random(1, 100) <= 15:
        c_w_id = _other_warehouse(ctx, w_id, warehouses)
        c_d_id = ctx.random(1, DISTRICTS)
    amount = ctx.random(100, 500_000) / 100
    yield begin()
    w_name = (yield pay_warehouse(amount, w_id)).scalar()
    d_name = (yield pay_district(amount, w_id, d_id)).scalar()
    c_id = yield from _customer(ctx, c_w_id, c_d_id)
    _credit, _balance, _data = (yield pay_customer(c_w_id, c_d_id, c_id)).one()
    note = f"{c_id} {c_d_id} {c_w_id} {d_id} {w_id} {amount:.2f} |"
    yield pay_update_customer(amount, c_w_id, c_d_id, c_id, note)
    yield pay_history(c_id, c_d_id, c_w_id, d_id, w_id, amount, f"{w_name}    {d_name}")
    yield commit()


@transaction(weight=4)
def order_status(ctx: Context) -> Tx:
    w_id = ctx.random(1, ctx.scale)
    d_id = ctx.random(1, DISTRICTS)
    yield begin()
    c_id = yield from _customer(ctx, w_id, d_id)
    yield os_customer(w_id, d_id, c_id)
    order = (yield os_last_order(w_id, d_id, c_id)).first()
    if order is not None:
        yield os_lines(w_id, d_id, order[0])
    yield commit()


@transaction(weight=4)
def delivery(ctx: Context) -> Tx:
    w_id = ctx.random(1, ctx.scale)
    carrier = ctx.random(1, 10)
    yield begin()
    for d_id in range(1, DISTRICTS + 1):
        row = (yield dl_oldest(w_id, d_id)).first()
        if row is None:
            continue  # nothing to deliver (or another delivery has it)
        o_id = row[0]
        if (yield dl_delete(w_id, d_id, o_id)).rowcount != 1:
            continue
        c_id = (yield dl_order(carrier, w_id, d_id, o_id)).scalar()
        amounts = (yield dl_lines(w_id, d_id, o_id)).rows()
        yield dl_customer(sum(a for (a,) in amounts), w_id, d_id, c_id)
    yield commit()


@transaction(weight=4)
def stock_level(ctx: Context) -> Tx:
    w_id = ctx.random(1, ctx.scale)
    d_id = ctx.random(1, DISTRICTS)
    threshold = ctx.random(10, 20)
    yield begin()
    next_o_id = (yield sl_next_order(w_id, d_id)).scalar()
    yield sl_low_stock(w_id, d_id, next_o_id, threshold)
    yield commit()


# -- the schema and the loader ----------------------------------------------------

TABLES = (
    "warehouse",
    "district",
    "customer",
    "history",
    "new_order",
    "oorder",
    "order_line",
    "item",
    "stock",
)

SCHEMA = (
    "CREATE TABLE warehouse (w_id int NOT NULL, w_ytd numeric(12,2),"
    " w_tax numeric(4,4), w_name varchar(10), w_street_1 varchar(20),"
    " w_street_2 varchar(20), w_city varchar(20), w_state char(2), w_zip char(9))",
    "CREATE TABLE district (d_w_id int NOT NULL, d_id int NOT NULL,"
    " d_ytd numeric(12,2), d_tax numeric(4,4), d_next_o_id int,"
    " d_name varchar(10), d_street_1 varchar(20), d_street_2 varchar(20),"
    " d_city varchar(20), d_state char(2), d_zip char(9))",
    "CREATE TABLE customer (c_w_id int NOT NULL, c_d_id int NOT NULL,"
    " c_id int NOT NULL, c_discount numeric(4,4), c_credit char(2),"
    " c_last varchar(16), c_first varchar(16), c_credit_lim numeric(12,2),"
    " c_balance numeric(12,2), c_ytd_payment numeric(12,2),"
    " c_payment_cnt int, c_delivery_cnt int, c_street_1 varchar(20),"
    " c_street_2 varchar(20), c_city varchar(20), c_state char(2), c_zip char(9),"
    " c_phone char(16), c_since timestamp, c_middle char(2), c_data varchar(500))",
    "CREATE TABLE history (h_c_id int, h_c_d_id int, h_c_w_id int, h_d_id int,"
    " h_w_id int, h_date timestamp, h_amount numeric(6,2), h_data varchar(24))",
    "CREATE TABLE new_order (no_w_id int NOT NULL, no_d_id int NOT NULL,"
    " no_o_id int NOT NULL)",
    "CREATE TABLE oorder (o_w_id int NOT NULL, o_d_id int NOT NULL,"
    " o_id int NOT NULL, o_c_id int, o_carrier_id int, o_ol_cnt int,"
    " o_all_local int, o_entry_d timestamp)",
    "CREATE TABLE order_line (ol_w_id int NOT NULL, ol_d_id int NOT NULL,"
    " ol_o_id int NOT NULL, ol_number int NOT NULL, ol_i_id int,"
    " ol_delivery_d timestamp, ol_amount numeric(6,2), ol_supply_w_id int,"
    " ol_quantity int, ol_dist_info char(24))",
    "CREATE TABLE item (i_id int NOT NULL, i_name varchar(24),"
    " i_price numeric(5,2), i_data varchar(50), i_im_id int)",
    "CREATE TABLE stock (s_w_id int NOT NULL, s_i_id int NOT NULL,"
    " s_quantity int, s_ytd numeric(8,2), s_order_cnt int, s_remote_cnt int,"
    " s_data varchar(50), s_dist_01 char(24), s_dist_02 char(24),"
    " s_dist_03 char(24), s_dist_04 char(24), s_dist_05 char(24),"
    " s_dist_06 char(24), s_dist_07 char(24), s_dist_08 char(24),"
    " s_dist_09 char(24), s_dist_10 char(24))",
)

KEYS = (
    "ALTER TABLE warehouse ADD PRIMARY KEY (w_id)",
    "ALTER TABLE district ADD PRIMARY KEY (d_w_id, d_id)",
    "ALTER TABLE customer ADD PRIMARY KEY (c_w_id, c_d_id, c_id)",
    "CREATE INDEX customer_name ON customer (c_w_id, c_d_id, c_last, c_first)",
    "ALTER TABLE new_order ADD PRIMARY KEY (no_w_id, no_d_id, no_o_id)",
    "ALTER TABLE oorder ADD PRIMARY KEY (o_w_id, o_d_id, o_id)",
    "CREATE INDEX oorder_customer ON oorder (o_w_id, o_d_id, o_c_id, o_id)",
    "ALTER TABLE order_line ADD PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)",
    "ALTER TABLE item ADD PRIMARY KEY (i_id)",
    "ALTER TABLE stock ADD PRIMARY KEY (s_w_id, s_i_id)",
)


def _text(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=n))


def _data(rng: random.Random, lo: int, hi: int) -> str:
    text = _text(rng, lo, hi)
    if rng.randint(1, 10) == 1:  # 10 % carry "ORIGINAL"
        at = rng.randint(0, len(text) - 8)
        text = text[:at] + "ORIGINAL" + text[at + 8 :]
    return text


def _items() -> Iterator[tuple[object, ...]]:
    rng = random.Random(0)
    for i in range(1, ITEMS + 1):
        price = f"{rng.randint(100, 10000) / 100:.2f}"
        yield (i, _text(rng, 14, 24), price, _data(rng, 26, 50), rng.randint(1, 10000))


def _pool(rng: random.Random, n: int, lo: int, hi: int) -> list[str]:
    return [_text(rng, lo, hi) for _ in range(n)]


def _load_warehouse(db: Any, w: int) -> None:
    rng = random.Random(w)
    words = _pool(rng, 500, 10, 20)
    firsts = _pool(rng, 500, 8, 16)
    dists = _pool(rng, 500, 24, 24)
    cdata = _pool(rng, 200, 300, 500)

    def addr() -> tuple[str, str, str, str, str]:
        return (
            rng.choice(words),
            rng.choice(words),
            rng.choice(words),
            "XY",
            "123411111",
        )

    db.copy(
        "warehouse",
        ["w_id", "w_ytd", "w_tax", "w_name", "w_street_1", "w_street_2", "w_city",
         "w_state", "w_zip"],
        [(w, "300000.00", f"{rng.randint(0, 2000) / 10000:.4f}", _text(rng, 6, 10),
          *addr())],
    )  # fmt: skip
    db.copy(
        "district",
        ["d_w_id", "d_id", "d_ytd", "d_tax", "d_next_o_id", "d_name", "d_street_1",
         "d_street_2", "d_city", "d_state", "d_zip"],
        [(w, d, "30000.00", f"{rng.randint(0, 2000) / 10000:.4f}", ORDERS + 1,
          _text(rng, 6, 10), *addr()) for d in range(1, DISTRICTS + 1)],
    )  # fmt: skip

    def stock() -> Iterator[tuple[object, ...]]:
        for i in range(1, ITEMS + 1):
            yield (w, i, rng.randint(10, 100), 0, 0, 0, _data(rng, 26, 50),
                   *(rng.choice(dists) for _ in range(10)))  # fmt: skip

    db.copy(
        "stock",
        ["s_w_id", "s_i_id", "s_quantity", "s_ytd", "s_order_cnt", "s_remote_cnt",
         "s_data", *(f"s_dist_{d:02d}" for d in range(1, 11))],
        stock(),
    )  # fmt: skip

    def customers() -> Iterator[tuple[object, ...]]:
        for d in range(1, DISTRICTS + 1):
            for c in range(1, CUSTOMERS + 1):
                n = c - 1 if c <= 1000 else _nurand_load(rng)
                credit = "BC" if rng.randint(1, 10) == 1 else "GC"
                yield (w, d, c, f"{rng.randint(0, 5000) / 10000:.4f}", credit,
                       last_name(n), rng.choice(firsts), "50000.00", "-10.00",
                       "10.00", 1, 0, *addr(), "1234567890123456", "2026-01-01",
                       "OE", rng.choice(cdata))  # fmt: skip

    db.copy(
        "customer",
        ["c_w_id", "c_d_id", "c_id", "c_discount", "c_credit", "c_last", "c_first",
         "c_credit_lim", "c_balance", "c_ytd_payment", "c_payment_cnt",
         "c_delivery_cnt", "c_street_1", "c_street_2", "c_city", "c_state",
         "c_zip", "c_phone", "c_since", "c_middle", "c_data"],
        customers(),
    )  # fmt: skip
    db.copy(
        "history",
        ["h_c_id", "h_c_d_id", "h_c_w_id", "h_d_id", "h_w_id", "h_date", "h_amount",
         "h_data"],
        ((c, d, w, d, w, "2026-01-01", "10.00", _text(rng, 12, 24))
         for d in range(1, DISTRICTS + 1) for c in range(1, CUSTOMERS + 1)),
    )  # fmt: skip
    orders: list[tuple[object, ...]] = []
    lines: list[tuple[object, ...]] = []
    for d in range(1, DISTRICTS + 1):
        owners = list(range(1, CUSTOMERS + 1))
        rng.shuffle(owners)
        for o in range(1, ORDERS + 1):
            delivered = o < FIRST_NEW_ORDER
            ol_cnt = rng.randint(5, 15)
            orders.append((w, d, o, owners[o - 1],
                           rng.randint(1, 10) if delivered else None, ol_cnt, 1,
                           "2026-01-01"))  # fmt: skip
            for n in range(1, ol_cnt + 1):
                amount = "0.00" if delivered else f"{rng.randint(1, 999999) / 100:.2f}"
                lines.append((w, d, o, n, rng.randint(1, ITEMS),
                              "2026-01-01" if delivered else None, amount, w, 5,
                              rng.choice(dists)))  # fmt: skip
    db.copy(
        "oorder",
        ["o_w_id", "o_d_id", "o_id", "o_c_id", "o_carrier_id", "o_ol_cnt",
         "o_all_local", "o_entry_d"],
        orders,
    )  # fmt: skip
    db.copy(
        "order_line",
        ["ol_w_id", "ol_d_id", "ol_o_id", "ol_number", "ol_i_id", "ol_delivery_d",
         "ol_amount", "ol_supply_w_id", "ol_quantity", "ol_dist_info"],
        lines,
    )  # fmt: skip
    db.copy(
        "new_order",
        ["no_w_id", "no_d_id", "no_o_id"],
        ((w, d, o) for d in range(1, DISTRICTS + 1)
         for o in range(FIRST_NEW_ORDER, ORDERS + 1)),
    )  # fmt: skip


def _nurand_load(rng: random.Random) -> int:
    return ((rng.randint(0, 255) | rng.randint(0, 999)) + C_LAST_LOAD) % 1000


def _load_part(db: Any, part: int) -> None:
    if part == 0:
        db.copy("item", ["i_id", "i_name", "i_price", "i_data", "i_im_id"], _items())
    else:
        _load_warehouse(db, part)


@load
def load_tpcc(db: Any) -> None:
    db.log("dropping old tables...")
    db.execute("DROP TABLE IF EXISTS " + ", ".join(TABLES))
    db.log("creating tables...")
    for statement in SCHEMA:
        db.execute(statement)
    db.log(f"generating data ({db.scale} warehouses)...")
    db.parallel(_load_part, list(range(db.scale + 1)))
    db.log("creating primary keys...")
    for statement in KEYS:
        db.execute(statement)
    db.log("vacuuming...")
    db.execute("VACUUM ANALYZE")


#: TPC-C's consistency conditions 1-4 (clause 3.3.2): each query returns
#: the rows that break the condition (none when it holds)
CHECKS: tuple[tuple[str, str], ...] = (
    (
        "1: W_YTD = sum(D_YTD)",
        "SELECT w_id FROM warehouse"
        " WHERE w_ytd <> (SELECT sum(d_ytd) FROM district WHERE d_w_id = w_id)",
    ),
    (
        "2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)",
        "SELECT d_w_id, d_id FROM district"
        " WHERE d_next_o_id - 1 <> (SELECT max(o_id) FROM oorder"
        "  WHERE o_w_id = d_w_id AND o_d_id = d_id)"
        " OR d_next_o_id - 1 <> (SELECT max(no_o_id) FROM new_order"
        "  WHERE no_w_id = d_w_id AND no_d_id = d_id)",
    ),
    (
        "3: max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW_ORDER)",
        "SELECT no_w_id, no_d_id FROM new_order GROUP BY no_w_id, no_d_id"
        " HAVING max(no_o_id) - min(no_o_id) + 1 <> count(*)",
    ),
    (
        "4: sum(O_OL_CNT) = count(ORDER_LINE)",
        "SELECT o_w_id, o_d_id FROM oorder GROUP BY o_w_id, o_d_id"
        " HAVING sum(o_ol_cnt) <> (SELECT count(*) FROM order_line"
        "  WHERE ol_w_id = o_w_id AND ol_d_id = o_d_id)",
    ),
)


def check_consistency(dsn: str) -> list[tuple[str, int]]:
    """Each condition with the number of rows that break it."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [(name, len(conn.execute(q).fetchall())) for name, q in CHECKS]


if __name__ == "__main__":  # python -m pgsurge.workloads.bundled.tpcc DSN
    failed = 0
    for name, bad in check_consistency(sys.argv[1] if len(sys.argv) > 1 else ""):
        print(f"condition {name}: {'ok' if not bad else f'{bad} violations'}")
        failed += bad
    sys.exit(1 if failed else 0)
