"""ycsb-a: YCSB workload A, update heavy: 50% read, 50% update.

The operations and distributions are in ``_ycsb``."""

from pgsurge.workloads import transaction
from pgsurge.workloads.bundled._ycsb import *  # noqa: F403
from pgsurge.workloads.bundled._ycsb import read, update

READ = transaction(read, weight=50, name="read")
UPDATE = transaction(update, weight=50, name="update")
