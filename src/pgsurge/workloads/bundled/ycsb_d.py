"""ycsb-d: YCSB workload D, read latest: 95% read of recent records, 5% insert.

The operations and distributions are in ``_ycsb``."""

from pgsurge.workloads import transaction
from pgsurge.workloads.bundled._ycsb import *  # noqa: F403
from pgsurge.workloads.bundled._ycsb import insert, read_latest

READ = transaction(read_latest, weight=95, name="read")
INSERT = transaction(insert, weight=5, name="insert")
