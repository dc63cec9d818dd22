"""ycsb-f: YCSB workload F, read-modify-write: 50% read, 50% read-modify-write.

The operations and distributions are in ``_ycsb``."""

from pgsurge.workloads import transaction
from pgsurge.workloads.bundled._ycsb import *  # noqa: F403
from pgsurge.workloads.bundled._ycsb import read, read_modify_write

READ = transaction(read, weight=50, name="read")
READ_MODIFY_WRITE = transaction(read_modify_write, weight=50, name="read_modify_write")
