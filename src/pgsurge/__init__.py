"""pgsurge: a pgbench-compatible PostgreSQL benchmark tool.

Nothing heavy is imported here: ``pgsurge --help`` must start fast, and the
embedded server's package is imported only when it is really used.
"""

__version__ = "0.1.0"

# The pgbench release whose behaviour (options, script language, report) we follow.
PGBENCH_COMPAT_VERSION = "18.6"
