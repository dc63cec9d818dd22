"""The command line's single funnel: argv → config → engine → exit status.

``main`` handles what pgbench handles before reading options (``--help``,
``-?``, ``--version``, ``-V``, only as the first argument) plus pgsurge's
``server`` and ``report`` subcommands there; ``options.parse_command_line``
turns the rest into a validated config with pgbench 18.6's rules and messages; then the
right engine runs, imported lazily so that ``pgsurge --help`` stays fast
(no psycopg at import time). Every :class:`PgsurgeError` ends here: its
text goes to stderr and its exit status is returned (1 for anything found
before the run, 2 for an aborted run). Ctrl-C makes the program die of
SIGINT, as pgbench does (an in-process caller of ``main(argv)`` gets 130);
a closed stdout exits 141, quietly, like a C program killed by SIGPIPE.

Deliberate differences from pgbench 18.6:

* ``-V`` prints ``pgsurge 0.1.0 (pgbench 18.6 compatible)``: our version,
  and the pgbench release whose behaviour we follow;
* ``--help`` names pgsurge, lists our options (``--init-jobs``,
  ``--continue-on-error`` from PG19, ``--embedded``, the report extras
  ``--percentiles``, ``--client-cpu``, ``--extended-report``, ``--json``)
  and has no "Report bugs to pgsql-bugs" lines (they would not be
  PostgreSQL's bugs);
* ``--json -`` puts the JSON document on stdout in place of the text
  report, which then goes to stderr (stdout stays one valid document);
* ``pgsurge server ...`` is the embedded-server subcommand and
  ``pgsurge report ...`` writes the HTML report of ``--json`` results
  (pgbench would take either word as a database name);
* our options are new words that never make a pgbench abbreviation
  ambiguous (see ``getopt.py``);
* ``PG_COLOR`` is ignored (messages are never colored).
"""

from __future__ import annotations

import gc
import os
import sys

from pgsurge import PGBENCH_COMPAT_VERSION, __version__
from pgsurge.errors import PROG, ExitStatus, PgsurgeError, UsageError

# typing.TYPE_CHECKING without importing typing (1-2 ms of --help); type
# checkers take any constant of this name as true
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, TextIO

    from pgsurge.config import InitConfig, RunConfig
    from pgsurge.options import EarlyExit, parse_command_line

__all__ = ["HELP", "EarlyExit", "main", "parse_command_line"]


def __getattr__(name: str) -> Any:
    # the option parser (and the dataclasses behind it) loads on first use:
    # ``--help`` and ``-V`` do without it
    if name in ("EarlyExit", "parse_command_line"):
        from pgsurge import options

        return getattr(options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
  --exit-on-abort          exit when any client is aborted
  --extended-report        same as --percentiles --client-cpu
  --failures-detailed      report the failures grouped by basic types
  --html=FILE              write a self-contained HTML report to FILE
  --json=FILE              write the result as JSON to FILE
                           ("-": stdout, the text report then goes to stderr)
  --log-prefix=PREFIX      prefix for transaction time log file
                           (default: "pgbench_log")
  --max-tries=NUM          max number of tries to run transaction (default: 1)
  --percentiles[=LIST]     report latency percentiles (default: 50,90,99,99.9)
  --progress-timestamp     use Unix epoch timestamps for progress
  --random-seed=SEED       set random seed ("time", "rand", integer)
  --sampling-rate=NUM      fraction of transactions to log (e.g., 0.01 for 1%)
  --show-script=NAME       show builtin script code, then exit
  --verbose-errors         print messages of all errors

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
  {PROG} report RESULT.json... [--vs B.json...] -o FILE
                           HTML report of --json results (--help for more)
  {PROG} server start|stop|status|uri
                           manage the embedded server
"""  # noqa: E501


def _load(module: str, attr: str) -> Callable[..., Any]:
    """``module.attr``, or a clear error while another part is not written yet."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        if e.name == module or module.startswith(f"{e.name}."):
            raise PgsurgeError(f"{module}.{attr} is not implemented yet") from None
        raise
    func = getattr(mod, attr, None)
    if func is None:
        raise PgsurgeError(f"{module}.{attr} is not implemented yet")
    return func  # type: ignore[no-any-return]


def _default_dbname(environ: Mapping[str, str]) -> str:
    """pgbench's fallback: PGDATABASE, then PGUSER, then the OS user name."""
    for var in ("PGDATABASE", "PGUSER"):
        value = environ.get(var)
        if value:
            return value
    import pwd

    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise UsageError(
            f"could not look up effective user ID {uid}: user does not exist"
        ) from None


#: True while :func:`main`, run as the program, keeps the cyclic garbage
#: collector off for the start-up (see :func:`_startup_done`)
_collector_paused = False


def _pause_collector() -> None:
    """Keep the cyclic garbage collector off while pgsurge starts.

    Start-up only builds what lives until exit (modules, classes, the
    config, the scripts): collecting during it finds nothing, and the
    passes over all those objects — during the imports and again when
    the interpreter exits — cost some 20 ms of CPU per run.
    """
    global _collector_paused
    gc.disable()
    _collector_paused = True


#: Python frames a script expression may need. pgbench nests expressions
#: up to its parser's 10000 states (some 10000 levels), and parsing,
#: compiling and evaluating a tree take up to 2 frames per level. Not
#: more: some walks over a tree recurse through C (a generator, a call
#: with ``*args``), and at about 19000 such levels they overflow an 8 MB C
#: stack, where the limit must stop them first with a RecursionError.
_EXPRESSION_FRAMES = 30_000


def _allow_deep_expressions() -> None:
    """Raise Python's recursion limit so that the expressions pgbench
    accepts can be parsed, compiled and evaluated (the default of 1000
    fails on a ``\\set`` of a few hundred terms ``1 + 1 + ...``). Python
    3.11 runs calls between Python functions without growing the C stack,
    so the limit costs memory only when a script is that deep. Workers are
    forked and inherit it."""
    if sys.getrecursionlimit() < _EXPRESSION_FRAMES:
        sys.setrecursionlimit(_EXPRESSION_FRAMES)


def _startup_done() -> None:
    """End of start-up: move everything built so far to the collector's
    permanent generation (it is never scanned again, so forked workers do
    not touch — and copy — its pages either) and collect normally from
    here on, as the engine creates short-lived objects."""
    global _collector_paused
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.enable()


def _dispatch(cfg: InitConfig | RunConfig) -> int:
    from dataclasses import replace

    from pgsurge.config import InitConfig

    resolve_target = _load("pgsurge.server.target", "resolve_target")
    conn = resolve_target(cfg.conn, force_embedded=cfg.force_embedded)
    if not conn.embedded and conn.dbname is None:
        conn = replace(conn, dbname=_default_dbname(os.environ))
    if isinstance(cfg, InitConfig):
        run_init = _load("pgsurge.init", "run_init")
        _startup_done()
        run_init(replace(cfg, conn=conn))
        return int(ExitStatus.SUCCESS)
    run = _load("pgsurge.runner", "run")
    _startup_done()
    if conn.embedded:
        try:
            ensure_initialized = _load("pgsurge.init", "ensure_initialized")
        except PgsurgeError:
            # TODO(init helper): without it, a fresh embedded server fails
            # later with pgbench's "Perhaps you need to do initialization".
            pass
        else:
            ensure_initialized(conn)
    status = run(replace(cfg, conn=conn))
    return int(status)


def _main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        first = argv[1]
        if first in ("--help", "-?"):
            sys.stdout.write(HELP)
            return 0
        if first in ("--version", "-V"):
            sys.stdout.write(
                f"{PROG} {__version__} (pgbench {PGBENCH_COMPAT_VERSION} compatible)\n"
            )
            return 0
        if first == "server":
            server_main = _load("pgsurge.server.cli", "server_main")
            _startup_done()
            return int(server_main(list(argv[1:])))
        if first == "report":
            report_main = _load("pgsurge.report.command", "report_main")
            _startup_done()
            return int(report_main(list(argv[2:])))
    from pgsurge.options import EarlyExit, parse_command_line

    try:
        cfg = parse_command_line(argv[1:])
    except EarlyExit as e:
        return e.status
    return _dispatch(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """The program: ``argv`` includes the program name, as in C.

    Without ``argv`` this is the program itself (the console script,
    ``python -m pgsurge``), which owns the process: it also manages the
    garbage collector for a cheaper start (see :func:`_pause_collector`).
    """
    own_process = argv is None
    if argv is None:
        argv = sys.argv
        _pause_collector()
    _allow_deep_expressions()
    try:
        status = _main(argv)
        sys.stdout.flush()
    except PgsurgeError as e:
        _flush_quietly(sys.stdout)
        sys.stderr.write(e.format())
        sys.stderr.flush()
        return int(e.exit_status)
    except KeyboardInterrupt:
        # pgbench just dies of SIGINT. So does the program: a shell running
        # it in a loop stops the loop only when its child died of the
        # signal (an exit status of 130 reads as "handled it, go on").
        if own_process:
            _die_of_sigint()
        return 130
    except BrokenPipeError:
        # stdout went away (``pgsurge --help | head -1``): a C program would
        # die of SIGPIPE quietly; so do we, and keep Python from complaining
        # again when it flushes stdout at exit
        _silence_stdout()
        return 128 + 13
    return status


def _die_of_sigint() -> None:
    import signal

    _flush_quietly(sys.stdout)
    _flush_quietly(sys.stderr)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _flush_quietly(stream: TextIO) -> None:
    try:
        stream.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
