"""The rules between options: what the option loop read, checked as a whole.

``options`` reads argv one option at a time into an :class:`OptionState`;
once every option is read, :func:`init_config` or :func:`run_config` apply
the cross-option rules, in pgbench 18.6's order so that the first error
reported is pgbench's (pgsurge's own rules come after), and build the frozen
config.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pgsurge.cli.values import check_output_path
from pgsurge.config import (
    ConnParams,
    IdleMode,
    InitConfig,
    PartitionMethod,
    QueryMode,
    RunConfig,
    ScriptSource,
)
from pgsurge.errors import UsageError

if TYPE_CHECKING:
    from pgsurge.script.ast import ParsedScript

__all__ = ["OptionState", "init_config", "run_config"]

DEFAULT_INIT_STEPS = "dtgvp"
DEFAULT_TRANSACTIONS = 10


class OptionState:
    """What the options said so far, while they are being read.

    A plain class with its defaults as class attributes, the lists made in
    ``__init__``: built once per command line, never compared nor printed,
    so a dataclass would buy nothing for the 1.5 ms its generated methods
    cost every start-up.
    """

    init_mode: bool = False
    benchmarking_option_set: bool = False
    initialization_option_set: bool = False
    host: str | None = None
    port: str | None = None
    user: str | None = None
    dbname: str | None = None
    scripts: list[ScriptSource]
    parsed: list[ParsedScript]
    #: Python workloads given by -b NAME or -f FILE.py (pgsurge.workloads)
    workloads: list[Any]
    clients: int = 1
    jobs: int = 1
    transactions: int = 0
    duration: int = 0
    #: --warmup seconds (0: none)
    warmup: int = 0
    scale: int = 1
    scale_given: bool = False
    fillfactor: int = 100
    init_steps: str | None = None
    foreign_keys: bool = False
    no_vacuum: bool = False
    vacuum_all: bool = False
    quiet: bool = False
    connect_each_tx: bool = False
    defines: list[tuple[str, str]]
    query_mode: QueryMode = QueryMode.SIMPLE
    rate: float | None = None
    latency_limit_ms: float | None = None
    latency_limit_us: int = 0
    progress: int = 0
    progress_timestamp: bool = False
    report_per_command: bool = False
    log: bool = False
    log_prefix: str | None = None
    sampling_rate: float = 0.0
    aggregate_interval: int = 0
    max_tries: int = 1
    failures_detailed: bool = False
    verbose_errors: bool = False
    exit_on_abort: bool = False
    continue_on_error: bool = False
    random_seed: int = 0
    random_seed_explicit: bool = False
    partitions: int = 0
    partition_method: PartitionMethod = PartitionMethod.NONE
    unlogged_tables: bool = False
    tablespace: str | None = None
    index_tablespace: str | None = None
    init_jobs: int = 1
    debug: bool = False
    force_embedded: bool = False
    percentiles: tuple[float, ...] | None = None
    client_cpu: bool = False
    json_path: str | None = None
    html_path: str | None = None
    reconnect: int = 0
    waits_ms: int | None = None
    server_stats: bool = False
    idle_sessions: int = 0
    idle_mode: IdleMode = IdleMode.IDLE
    monitor_dsn: str | None = None
    pooler_admin_dsn: str | None = None
    dask: str | None = None
    dask_collect_logs: str | None = None
    no_live: bool = False
    store: str | None = None
    labels: list[tuple[str, str]]
    host_stats: bool = False

    def __init__(self) -> None:
        self.scripts = []
        self.parsed = []
        self.workloads = []
        self.defines = []
        self.labels = []


def init_config(st: OptionState, conn: ConnParams) -> InitConfig:
    """The -i config, with pgbench's rules between init options."""
    if len(st.workloads) > 1:
        raise UsageError("only one workload can be initialized at a time")
    if st.benchmarking_option_set:
        raise UsageError(
            "some of the specified options cannot be used in initialization (-i) mode"
        )
    if st.partitions == 0 and st.partition_method is not PartitionMethod.NONE:
        raise UsageError("--partition-method requires greater than zero --partitions")
    method = st.partition_method
    if st.partitions > 0 and method is PartitionMethod.NONE:
        method = PartitionMethod.RANGE
    steps = st.init_steps if st.init_steps is not None else DEFAULT_INIT_STEPS
    if st.no_vacuum:
        steps = steps.replace("v", " ")
    if st.foreign_keys and "f" not in steps:
        steps += "f"
    return InitConfig(
        conn=conn,
        steps=steps,
        scale=st.scale,
        fillfactor=st.fillfactor,
        quiet=st.quiet,
        foreign_keys=st.foreign_keys,
        partitions=st.partitions,
        partition_method=method,
        unlogged_tables=st.unlogged_tables,
        tablespace=st.tablespace,
        index_tablespace=st.index_tablespace,
        init_jobs=st.init_jobs,
        debug=st.debug,
        force_embedded=st.force_embedded,
        workload=st.workloads[0] if st.workloads else None,
    )


def run_config(st: OptionState, conn: ConnParams) -> RunConfig:
    """The run config, with pgbench's rules between run options (in its
    order: the first error reported is pgbench's), then pgsurge's."""
    if st.transactions > 0 and st.duration > 0:
        raise UsageError(
            "specify either a number of transactions (-t) or a duration (-T), not both"
        )
    if st.transactions <= 0 and st.duration <= 0:
        st.transactions = DEFAULT_TRANSACTIONS
    if st.sampling_rate > 0.0 and not st.log:
        raise UsageError(
            "log sampling (--sampling-rate) is allowed only when logging"
            " transactions (-l)"
        )
    if st.sampling_rate > 0.0 and st.aggregate_interval > 0:
        raise UsageError(
            "log sampling (--sampling-rate) and aggregation (--aggregate-interval)"
            " cannot be used at the same time"
        )
    if st.aggregate_interval > 0 and not st.log:
        raise UsageError(
            "log aggregation is allowed only when actually logging transactions"
        )
    if not st.log and st.log_prefix is not None:
        raise UsageError(
            "log file prefix (--log-prefix) is allowed only when logging"
            " transactions (-l)"
        )
    agg, duration = st.aggregate_interval, st.duration
    if duration > 0 and agg > duration:
        raise UsageError(
            f"number of seconds for aggregation ({agg}) must not be higher than"
            f" test duration ({duration})"
        )
    if duration > 0 and agg > 0 and duration % agg != 0:
        raise UsageError(
            f"duration ({duration}) must be a multiple of aggregation interval ({agg})"
        )
    if st.progress_timestamp and st.progress == 0:
        raise UsageError("--progress-timestamp is allowed only under --progress")
    if st.max_tries == 0 and not st.latency_limit_us and duration <= 0:
        raise UsageError(
            "an unlimited number of transaction tries can only be used with"
            " --latency-limit or a duration (-T)"
        )
    # ours, after all of pgbench's checks (which keep their precedence)
    if st.warmup > 0:
        _check_warmup(st)
    if st.json_path is not None:
        check_output_path(st.json_path, "--json")
    if st.html_path is not None:
        if st.html_path == "-":
            # stdout holds the text report (or the --json document)
            raise UsageError(
                'invalid value "-" for option --html',
                detail="Expecting a file name.",
            )
        check_output_path(st.html_path, "--html")
    if st.dask_collect_logs is not None:
        _check_collect_logs(st)
    if st.monitor_dsn is not None and not (
        st.waits_ms is not None or st.server_stats or st.idle_sessions
    ):
        # it would be read and never used: a mistyped option (--monitor
        # for --pooler-admin?) should not pass in silence
        raise UsageError(
            "--monitor is allowed only with --waits, --server-stats or --idle-sessions"
        )
    return RunConfig(
        conn=conn,
        scripts=tuple(st.scripts),
        clients=st.clients,
        jobs=st.jobs,
        transactions=st.transactions if duration <= 0 else None,
        duration=duration if duration > 0 else None,
        warmup=st.warmup,
        query_mode=st.query_mode,
        connect_each_tx=st.connect_each_tx,
        no_vacuum=st.no_vacuum,
        vacuum_all=st.vacuum_all,
        scale=st.scale if st.scale_given else None,
        defines=tuple(st.defines),
        rate=st.rate,
        # a limit that truncates to 0 µs is no limit at all for pgbench
        latency_limit_ms=st.latency_limit_ms if st.latency_limit_us else None,
        progress_s=st.progress,
        progress_timestamp=st.progress_timestamp,
        report_per_command=st.report_per_command,
        log=st.log,
        log_prefix=st.log_prefix,
        sampling_rate=st.sampling_rate if st.sampling_rate != 0.0 else None,
        aggregate_interval=agg if agg > 0 else None,
        max_tries=st.max_tries,
        failures_detailed=st.failures_detailed,
        verbose_errors=st.verbose_errors,
        exit_on_abort=st.exit_on_abort,
        continue_on_error=st.continue_on_error,
        random_seed=st.random_seed,
        random_seed_explicit=st.random_seed_explicit,
        debug=st.debug,
        force_embedded=st.force_embedded,
        percentiles=st.percentiles,
        client_cpu=st.client_cpu,
        json_path=st.json_path,
        html_path=st.html_path,
        reconnect=st.reconnect,
        waits_ms=st.waits_ms,
        server_stats=st.server_stats,
        idle_sessions=st.idle_sessions,
        idle_mode=st.idle_mode,
        monitor_dsn=st.monitor_dsn,
        pooler_admin_dsn=st.pooler_admin_dsn,
        dask=st.dask,
        dask_collect_logs=st.dask_collect_logs,
        no_live=st.no_live,
        store=st.store,
        labels=tuple(st.labels),
        # a stored run keeps its host's load: what explains an outlier later
        host_stats=st.host_stats or st.store is not None,
    )


def _check_warmup(st: OptionState) -> None:
    """--warmup runs before a measured window of -T seconds: with -t the
    window would have no defined end (are the warm-up's transactions part
    of the count?), and a multi-host run has no common window start."""
    if st.duration <= 0:
        raise UsageError(
            "--warmup is allowed only with a duration (-T)",
            hint="The warm-up runs before the -T seconds that are measured.",
        )
    if st.dask is not None:
        raise UsageError("--warmup cannot be used with --dask")


def _check_collect_logs(st: OptionState) -> None:
    """--dask-collect-logs: with --dask and -l, into an existing directory
    (checked now rather than after the run)."""
    if st.dask is None:
        raise UsageError("--dask-collect-logs is allowed only with --dask")
    if not st.log:
        raise UsageError(
            "--dask-collect-logs is allowed only when logging transactions (-l)"
        )
    if not os.path.isdir(st.dask_collect_logs or ""):
        raise UsageError(
            f'invalid value "{st.dask_collect_logs}" for option --dask-collect-logs',
            detail="Expecting an existing directory.",
        )
