"""pgsurge: a pgbench-compatible PostgreSQL benchmark tool.

Nothing heavy is imported here: ``pgsurge --help`` must start fast, and the
embedded server's package is imported only when it is really used.
"""

__version__ = "0.1.0"

# The pgbench release whose behaviour (options, script language, report) we follow.
PGBENCH_COMPAT_VERSION = "18.6"

if "dataclasses" not in __import__("sys").modules:
    # dataclasses imports inspect (with ast, dis and tokenize: some 1 MiB in
    # each process of a run) only to write the docstring of a class that
    # has none, which records.record writes itself: a stand-in while
    # dataclasses imports, completed by the first class that needs it
    # (pgsurge.deferred.standing_in). Every command imports dataclasses.
    # Likewise copy (with weakref, some 100 KiB), which dataclasses uses
    # only in asdict() and astuple(), which a run never calls.
    from pgsurge.deferred import standing_in as _standing_in

    with _standing_in("inspect"), _standing_in("copy"):
        import dataclasses as _dataclasses  # noqa: F401
