"""The text of ``--help``: pgbench 18.6's, with pgsurge's name and options.

Kept apart from the dispatch so that the table of options a user reads is
one screen of data, not buried in code (``main`` prints it as it is).
"""

from __future__ import annotations

from pgsurge.errors import PROG

__all__ = ["HELP"]

HELP = f"""\
{PROG} is a benchmarking tool for PostgreSQL.

Usage:
  {PROG} [OPTION]... [DBNAME]

Initialization options:
  -i, --initialize         invokes initialization mode
  -I, --init-steps=[dtgGvpf]+ (default "dtgvp")
                           run selected initialization steps, in the specified order
                           d: drop any existing pgbench tables
                           t: create the tables used by the standard pgbench scenario
                           g: generate data, client-side
                           G: generate data, server-side
                           v: invoke VACUUM on the standard tables
                           p: create primary key indexes on the standard tables
                           f: create foreign keys between the standard tables
  -F, --fillfactor=NUM     set fill factor
  -n, --no-vacuum          do not run VACUUM during initialization
  -q, --quiet              quiet logging (one message each 5 seconds)
  -s, --scale=NUM          scaling factor
  --foreign-keys           create foreign key constraints between tables
  --index-tablespace=TABLESPACE
                           create indexes in the specified tablespace
  --init-jobs=NUM          generate pgbench_accounts with NUM parallel connections (default: 1)
  --partition-method=(range|hash)
                           partition pgbench_accounts with this method (default: range)
  --partitions=NUM         partition pgbench_accounts into NUM parts (default: 0)
  --tablespace=TABLESPACE  create tables in the specified tablespace
  --unlogged-tables        create tables as unlogged tables

Options to select what to run:
  -b, --builtin=NAME[@W]   add builtin script NAME weighted at W (default: 1)
                           (use "-b list" to list available scripts)
  -f, --file=FILENAME[@W]  add script FILENAME weighted at W (default: 1)
  -N, --skip-some-updates  skip updates of pgbench_tellers and pgbench_branches
                           (same as "-b simple-update")
  -S, --select-only        perform SELECT-only transactions
                           (same as "-b select-only")

Benchmarking options:
  -c, --client=NUM         number of concurrent database clients (default: 1)
  -C, --connect            establish new connection for each transaction
  -D, --define=VARNAME=VALUE
                           define variable for use by custom script
  -j, --jobs=NUM           number of threads (default: 1)
  -l, --log                write transaction times to log file
  -L, --latency-limit=NUM  count transactions lasting more than NUM ms as late
  -M, --protocol=simple|extended|prepared
                           protocol for submitting queries (default: simple)
  -n, --no-vacuum          do not run VACUUM before tests
  -P, --progress=NUM       show thread progress report every NUM seconds
  -r, --report-per-command report latencies, failures, and retries per command
  -R, --rate=NUM           target rate in transactions per second
  -s, --scale=NUM          report this scale factor in output
  -t, --transactions=NUM   number of transactions each client runs (default: 10)
  -T, --time=NUM           duration of benchmark test in seconds
  -v, --vacuum-all         vacuum all four standard tables before tests
  --aggregate-interval=NUM aggregate data over NUM seconds
  --client-cpu             report client CPU time and per-thread utilization
  --continue-on-error      continue running after an SQL error
  --dask=ADDRESS|local:N   run on the workers of a Dask cluster (one host each)
  --dask-collect-logs=DIR  copy the hosts' -l files into DIR after the run
  --exit-on-abort          exit when any client is aborted
  --extended-report        same as --percentiles --client-cpu
  --failures-detailed      report the failures grouped by basic types
  --host-stats             record this host's CPU, memory and disk I/O in the
                           JSON result (per -P interval; on with --store)
  --html=FILE              write a self-contained HTML report to FILE
  --idle-sessions=N[:MODE] hold N extra sessions open for the run, MODE idle,
                           xact (holding an xid) or snapshot (holding xmin)
  --json=FILE              write the result as JSON to FILE
                           ("-": stdout, the text report then goes to stderr)
  --label=KEY=VALUE        label the result (repeatable), e.g. commit=abc123
  --log-prefix=PREFIX      prefix for transaction time log file
                           (default: "pgbench_log")
  --max-tries=NUM          max number of tries to run transaction (default: 1)
  --monitor=DSN            connect --waits, --server-stats and --idle-sessions
                           to DSN (the server itself, behind a pooler)
  --no-live                no live panel on the terminal during the run
  --percentiles[=LIST]     report latency percentiles (default: 50,90,99,99.9)
  --pooler-admin=DSN       read PgBouncer's SHOW POOLS/STATS at DSN per interval
  --progress-timestamp     use Unix epoch timestamps for progress
  --random-seed=SEED       set random seed ("time", "rand", integer)
  --reconnect[=NUM]        reconnect a client whose connection is lost, NUM
                           attempts per loss (default: 10)
  --sampling-rate=NUM      fraction of transactions to log (e.g., 0.01 for 1%)
  --server-stats           report server counters (WAL, I/O, tables) of the run
  --show-script=NAME       show builtin script code, then exit
  --store[=PATH|URI]       save the result in a results store (default store:
                           $PGSURGE_STORE, else one in pgsurge's data directory)
  --verbose-errors         print messages of all errors
  --waits[=MS]             sample the run's wait events every MS ms (default: 100)
  --warmup=NUM             run NUM seconds before the measured -T seconds,
                           not counted

Common options:
  --debug                  print debugging output
  --embedded               use {PROG}'s embedded PostgreSQL server
  -d, --dbname=DBNAME      database name to connect to
  -h, --host=HOSTNAME      database server host or socket directory
  -p, --port=PORT          database server port number
  -U, --username=USERNAME  connect as specified database user
  -V, --version            output version information, then exit
  -?, --help               show this help, then exit

Commands:
  {PROG} ab --runs N --a ARGS --b ARGS -- [OPTION]...
                           interleaved A/B runs, then compare (--help for more)
  {PROG} capacity --latency p99=10ms -- [OPTION]...
                           highest -R meeting a latency target (--help for more)
  {PROG} compare BASE.json... --vs NEW.json...
                           noise-aware verdict on results (--help for more)
  {PROG} history [--store PATH|URI] [--label K=V]... [--metric M]
                           stored runs and their change points (--help for more)
  {PROG} report RESULT.json... [--vs B.json...] -o FILE
                           HTML report of --json results (--help for more)
  {PROG} server start|stop|status|uri
                           manage the embedded server
  {PROG} store import FILE.json... [--store PATH|URI]
                           add --json results to the results store
  {PROG} sweep --vary "-c 1,2,4" [--vary ...] -- [OPTION]...
                           a grid of runs: table, verdicts, knee (--help for more)

Report bugs to {PROG}'s maintainers (pgbench's own to <pgsql-bugs@lists.postgresql.org>).
PostgreSQL home page: <https://www.postgresql.org/>
"""  # noqa: E501
