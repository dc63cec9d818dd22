"""ycsb-b: YCSB workload B, read mostly: 95% read, 5% update.

The operations and distributions are in ``_ycsb``."""

from pgsurge.workloads import transaction
from pgsurge.workloads.bundled._ycsb import *  # noqa: F403
from pgsurge.workloads.bundled._ycsb import read, update

READ = transaction(read, weight=95, name="read")
UPDATE = transaction(update, weight=5, name="update")
