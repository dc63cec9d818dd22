"""Python-defined workloads: transactions as generators on pgsurge's engine.

The user API (:mod:`pgsurge.workloads.api`)::

    from pgsurge.workloads import sql, transaction

    get_balance = sql("SELECT abalance FROM pgbench_accounts WHERE aid = $1")

    @transaction(weight=2)
    def lookup(ctx):
        balance = (yield get_balance(ctx.random(1, 100000 * ctx.scale))).scalar()

A statement's error is raised at its ``yield`` as :class:`SqlError`;
caught, the transaction goes on.

``pgsurge -f my_workload.py`` runs it; ``-b py-tpcb``, ``-b tpcc-like``,
``-b ycsb-a`` … ``-b ycsb-f`` run the bundled ones (``bundled``), whose
data ``pgsurge -i -b NAME`` creates. ``loader`` loads a file into the plain
values the engine runs (``engine.pyworkload``); ``loading`` runs a
workload's ``@load`` hook for ``-i``; ``figures`` computes the figures a
bundled workload prints after a run (NOPM/tpmC, YCSB's per operation).
"""

from pgsurge.workloads.api import (
    Context,
    Result,
    SqlError,
    WorkloadUsageError,
    load,
    setup,
    sql,
    transaction,
)

__all__ = [
    "Context",
    "Result",
    "SqlError",
    "WorkloadUsageError",
    "load",
    "setup",
    "sql",
    "transaction",
]
