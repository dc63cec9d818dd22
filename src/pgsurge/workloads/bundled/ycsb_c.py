"""ycsb-c: YCSB workload C, read only: 100% read.

The operations and distributions are in ``_ycsb``."""

from pgsurge.workloads import transaction
from pgsurge.workloads.bundled._ycsb import *  # noqa: F403
from pgsurge.workloads.bundled._ycsb import read

READ = transaction(read, weight=100, name="read")
