"""pytest configuration: fixtures live in plugin modules (psycopg's layout).

``fix_server``: the PostgreSQL server and the reference pgbench;
``fix_run``: running pgsurge and pgbench, masks; ``fix_db``: benchmark
databases; ``fix_data``: made-up configs, results and result files;
``fix_cli``: pgsurge's command line in-process; ``fix_tap``: the cluster
of PostgreSQL's pgbench TAP cases; ``fix_pooler``: a real PgBouncer
before the test server; ``fix_dask``: real Dask clusters;
``fix_netns``: a Dask host in a network namespace behind a relay that
delays, stalls or cuts its link; ``fix_pgss``: a cluster with
pg_stat_statements; ``fix_pg15``: Debian's PostgreSQL 15 (version tests).
tests/README.md tells how to run the suite.
"""

pytest_plugins = (
    "tests.fix_server",
    "tests.fix_run",
    "tests.fix_db",
    "tests.fix_data",
    "tests.fix_cli",
    "tests.fix_tap",
    "tests.fix_pooler",
    "tests.fix_dask",
    "tests.fix_netns",
    "tests.fix_pgss",
    "tests.fix_pg15",
)

try:
    from hypothesis import settings
except ImportError:  # an interpreter without hypothesis runs no property test
    pass
else:
    # No per-example deadline (hypothesis's default is 200 ms): it is a wall
    # clock bound, which a loaded 2-core box misses now and then (seen:
    # test_histogram's merge property, DeadlineExceeded under load); what
    # the properties check is their outcome, not their speed.
    settings.register_profile("pgsurge", deadline=None)
    settings.load_profile("pgsurge")
