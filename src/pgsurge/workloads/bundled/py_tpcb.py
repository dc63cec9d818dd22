"""py-tpcb: pgbench's builtin tpcb-like, written as a Python workload.

The same statements on pgbench's tables, the same random draws in the
same order on the client's stream: with the same ``--random-seed``,
``-t`` and clients it leaves the tables exactly as ``-b tpcb-like`` does.
``pgsurge -i -b py-tpcb`` creates pgbench's tables (pgbench's ``-i``).
"""

from collections.abc import Generator

from pgsurge.workloads import Context, sql, transaction

SCALE_QUERY = "SELECT count(*) FROM pgbench_branches"

begin = sql("BEGIN")
BEGIN = begin()  # a statement call is a value: made once, yielded every time
update_account = sql(
    "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
    fetch=False,
)
get_balance = sql("SELECT abalance FROM pgbench_accounts WHERE aid = $1", fetch=False)
update_teller = sql(
    "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
    fetch=False,
)
update_branch = sql(
    "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
    fetch=False,
)
insert_history = sql(
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)"
    " VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
    fetch=False,
)
end = sql("END")
END = end()


@transaction
def tpcb_like(ctx: Context) -> Generator[object, object, None]:
    scale = ctx.scale
    aid = ctx.random(1, 100000 * scale)
    bid = ctx.random(1, 1 * scale)
    tid = ctx.random(1, 10 * scale)
    delta = ctx.random(-5000, 5000)
    yield BEGIN
    yield update_account(delta, aid)
    yield get_balance(aid)
    yield update_teller(delta, tid)
    yield update_branch(delta, bid)
    yield insert_history(tid, bid, aid, delta)
    yield END
