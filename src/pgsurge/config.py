"""Plain, frozen configuration values: what the command line asked for.

``cli.options`` turns argv into one of these once, ``validate_*`` functions (in
``cli.options``) hold pgbench's cross-option rules, and everything downstream
receives these values and never looks at argv. They are picklable, because
a run's configuration crosses into worker processes (``-j``) and, later,
onto other hosts.
"""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any

from pgsurge.records import record


class QueryMode(enum.Enum):
    """``-M``: how SQL commands are sent."""

    SIMPLE = "simple"
    EXTENDED = "extended"
    PREPARED = "prepared"


class IdleMode(enum.Enum):
    """``--idle-sessions N:MODE``: what each companion session holds."""

    IDLE = "idle"
    XACT = "xact"
    SNAPSHOT = "snapshot"


class PartitionMethod(enum.Enum):
    NONE = "none"
    RANGE = "range"
    HASH = "hash"


@record(frozen=True, slots=True)
class ConnParams:
    """Where to connect, as the user gave it. libpq does the rest.

    ``dbname`` may itself be a conninfo string or a URI; libpq expands it.
    ``None`` means "not given": libpq then falls back to PG* variables,
    ``.pgpass``, the service file and its compiled-in defaults.
    """

    host: str | None = None
    port: str | None = None
    user: str | None = None
    dbname: str | None = None
    #: True when pgsurge started or reused its embedded server for this run
    embedded: bool = False

    def conninfo_items(self) -> dict[str, str]:
        """The keywords to hand to libpq (never contains a password)."""
        items: dict[str, str] = {}
        if self.host is not None:
            items["host"] = self.host
        if self.port is not None:
            items["port"] = self.port
        if self.user is not None:
            items["user"] = self.user
        if self.dbname is not None:
            items["dbname"] = self.dbname
        items["fallback_application_name"] = "pgsurge"
        return items


@record(frozen=True, slots=True)
class ScriptSource:
    """One ``-f``/``-b``/``-S``/``-N`` script with its weight, before parsing.

    ``name`` is the file name as given, or the builtin's full name
    (``tpcb-like``); ``text`` is its content, read once in the parent so
    workers never touch the file system.
    """

    name: str
    text: str
    weight: int = 1
    builtin: bool = False
    #: pgbench's description, e.g. "<builtin: TPC-B (sort of)>", or the file name
    description: str = ""
    #: the script parsed once by the option parser (a
    #: ``pgsurge.script.ast.ParsedScript``; typed loosely because this base
    #: module imports no layer above it), or None when built by hand
    parsed: Any = field(default=None, compare=False, repr=False)
    #: a Python transaction of a workload (``pgsurge.workloads``), whose
    #: ``parsed`` is the loaded transaction rather than a parsed script
    python: bool = False


@record(frozen=True, slots=True)
class InitConfig:
    """``-i``: initialization mode."""

    conn: ConnParams
    steps: str = "dtgvp"
    scale: int = 1
    fillfactor: int = 100
    quiet: bool = False
    foreign_keys: bool = False
    partitions: int = 0
    partition_method: PartitionMethod = PartitionMethod.NONE
    unlogged_tables: bool = False
    tablespace: str | None = None
    index_tablespace: str | None = None
    #: pgsurge extension: parallel client-side generation of pgbench_accounts
    init_jobs: int = 1
    debug: bool = False
    #: pgsurge extension (--embedded): use the embedded server even if a
    #: host/port is configured; ``conn.embedded`` tells what was chosen
    force_embedded: bool = False
    #: pgsurge extension (-i -b NAME, -i -f FILE.py): the Python workload
    #: (``pgsurge.workloads.loader.Workload``) whose data to create
    workload: Any = None


@record(frozen=True, slots=True)
class RunConfig:
    """Benchmark mode: everything a run needs, validated.

    Durations are kept as the user gave them (seconds, ms); engines convert
    to integer microseconds once.
    """

    conn: ConnParams
    scripts: tuple[ScriptSource, ...]
    clients: int = 1
    jobs: int = 1
    #: -t (None when -T is used); pgbench's default is 10
    transactions: int | None = 10
    #: -T seconds, or None
    duration: int | None = None
    #: --warmup seconds run before the measured -T window (0: none)
    warmup: int = 0
    query_mode: QueryMode = QueryMode.SIMPLE
    connect_each_tx: bool = False  # -C
    no_vacuum: bool = False  # -n
    vacuum_all: bool = False  # -v
    #: -s given in run mode (only changes the reported scale), else None
    scale: int | None = None
    #: -D NAME=VALUE, in order; later ones win
    defines: tuple[tuple[str, str], ...] = ()
    rate: float | None = None  # -R tps
    latency_limit_ms: float | None = None  # -L
    progress_s: int = 0  # -P
    progress_timestamp: bool = False
    report_per_command: bool = False  # -r
    log: bool = False  # -l
    log_prefix: str | None = None
    sampling_rate: float | None = None
    aggregate_interval: int | None = None
    max_tries: int = 1
    failures_detailed: bool = False
    verbose_errors: bool = False
    exit_on_abort: bool = False
    continue_on_error: bool = False  # PG19
    #: --random-seed / PGBENCH_RANDOM_SEED resolved to a uint64 in the parent
    random_seed: int = 0
    #: True when the seed was set explicitly (--random-seed or
    #: PGBENCH_RANDOM_SEED); the CLI has then already printed pgbench's
    #: "setting random seed to N" line, nobody prints it again
    random_seed_explicit: bool = False
    debug: bool = False
    #: pgsurge extension (--embedded), as in InitConfig
    force_embedded: bool = False
    # pgsurge extensions: None/False keeps pgbench's output
    #: --percentiles: ascending, distinct, each in (0, 100]; None = not asked
    percentiles: tuple[float, ...] | None = None
    #: --reconnect[=N]: attempts per lost connection (0: off, pgbench's abort)
    reconnect: int = 0
    #: --client-cpu: client CPU lines in the text report
    client_cpu: bool = False
    #: --json FILE; "-" means the JSON document goes to stdout and the text
    #: report (everything pgbench prints on stdout) goes to stderr instead
    json_path: str | None = None
    #: --html FILE: the HTML report of the run (a file, never stdout)
    html_path: str | None = None
    #: --waits[=MS]: the wait-event sampling period in ms; None = not asked
    waits_ms: int | None = None
    #: --server-stats: server counters before, during and after the run
    server_stats: bool = False
    #: --idle-sessions N[:MODE]: companion sessions held open for the run
    idle_sessions: int = 0
    idle_mode: IdleMode = IdleMode.IDLE
    #: --monitor DSN: where the insight monitor and the idle sessions connect
    #: (straight to the server when the run goes through a pooler); None:
    #: the run's own target
    monitor_dsn: str | None = None
    #: --pooler-admin DSN: PgBouncer's console, read once per interval
    pooler_admin_dsn: str | None = None
    #: --dask: a Dask scheduler address (the run's workers are dealt over
    #: its workers, see pgsurge.distributed) or ``local:N`` (a local cluster
    #: of N workers); None: this machine's processes
    dask: str | None = None
    #: --dask-collect-logs DIR: bring the hosts' -l files into DIR at the end
    dask_collect_logs: str | None = None
    #: --no-live: no live panel on a terminal (see report/live.py)
    no_live: bool = False
    #: --store[=PATH|URI] or PGSURGE_STORE: save the result in a results
    #: store after the report (pgsurge.store); "" = the default store,
    #: None = not stored
    store: str | None = None
    #: --label K=V (repeatable): recorded in the result (and the store)
    labels: tuple[tuple[str, str], ...] = ()
    #: --host-stats (on with --store): the client host's CPU, memory and
    #: disks per -P interval and over the run, into the JSON document
    host_stats: bool = False

    @property
    def insight(self) -> bool:
        """Whether the run needs the monitor connection (pgsurge.insight)."""
        return (
            self.waits_ms is not None
            or self.server_stats
            or self.idle_sessions > 0
            or self.host_stats
            or self.pooler_admin_dsn is not None
        )

    @property
    def total_weight(self) -> int:
        return sum(s.weight for s in self.scripts)
