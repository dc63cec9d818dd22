"""ycsb-e: YCSB workload E, short ranges: 95% scan, 5% insert.

The operations and distributions are in ``_ycsb``."""

from pgsurge.workloads import transaction
from pgsurge.workloads.bundled._ycsb import *  # noqa: F403
from pgsurge.workloads.bundled._ycsb import insert, scan

SCAN = transaction(scan, weight=95, name="scan")
INSERT = transaction(insert, weight=5, name="insert")
