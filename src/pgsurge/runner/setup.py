"""A run's set-up, before any worker starts: scripts, setup connection, seeds.

What pgbench's ``main`` does between parsing its options and starting its
threads (steps 1 to 3 of :mod:`pgsurge.runner`):

* the scripts as the option parser parsed them (:func:`parse_scripts`);
* one setup connection (``doConnect``: a password prompt when the server
  asks for one and stdin is a terminal) that prints the version banner,
  reads ``:scale`` and the partitioning of ``pgbench_accounts`` for a
  builtin script (``GetTableInfo``) or a Python workload's scale, runs the
  pre-run ``vacuum``/``truncate`` unless ``-n`` (failures there are only
  warnings), and is closed again. It also tells whether a connection
  pooler sits between pgsurge and the server (:func:`detect_pooler`);
* every PRNG state derived from ``--random-seed`` in pgbench's order, and
  the clients' starting variables (:class:`Setup`);
* one :class:`~pgsurge.engine.worker.WorkerSpec` per ``-j`` with its share
  of the clients (:func:`worker_specs`).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import field, replace
from typing import Any, TextIO

from pgsurge import __version__, pgconn
from pgsurge.config import ConnParams, RunConfig
from pgsurge.engine.pool import split_clients
from pgsurge.engine.program import ScriptLike
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import PROG, ConnectError, PgsurgeError
from pgsurge.prng import SeedPlan, derive_streams
from pgsurge.records import record
from pgsurge.report.text import render_banner
from pgsurge.script.ast import ParsedScript, Value
from pgsurge.stats.results import RunFacts

__all__ = [
    "PoolerInfo",
    "Setup",
    "TableInfo",
    "clock_us",
    "epoch_shift_us",
    "parse_scripts",
    "pure_python_notice",
    "read_counter",
    "read_counter_after",
    "set_up",
    "uses_pgbench_tables",
    "worker_specs",
    "workload_figures_of",
]

_UNDEFINED_TABLE = "42P01"


@record(frozen=True, slots=True)
class TableInfo:
    """What pgbench reads from the database before a builtin script runs."""

    scale: int
    partition_method: str = "none"
    partitions: int = 0


@record(frozen=True, slots=True)
class PoolerInfo:
    """A connection pooler between pgsurge and the server (PgBouncer,
    pgcat, Odyssey, Supavisor...), seen at set-up (:func:`detect_pooler`).

    ``mode`` is ``"transaction"`` when a second client connection got the
    server session the first had just released (transaction or statement
    pooling), else ``"session"`` (session pooling, or a pool busy enough
    to hand out another server session: the evidence is one-sided).
    """

    #: the pid libpq reports (the pooler's cancel key, not a backend)
    libpq_pid: int
    #: ``pg_backend_pid()``: the server session that ran the query
    server_pid: int
    mode: str
    #: the workers' application_name (the run's sessions are found by it)
    application_name: str
    #: the database as the pooler names it (its console's pools)
    database: str = ""
    #: the server's clock when the set-up found it (seconds since the
    #: epoch): sessions idle since before then are not the set-up's
    found_at: float = 0.0

    def notice(self) -> str:
        """The one stderr line that says so."""
        return (
            f"{PROG}: notice: a connection pooler is between {PROG} and the "
            f"server (libpq's backend pid {self.libpq_pid}, the server's "
            f"{self.server_pid}; it looks like {self.mode} pooling): the run's "
            "server sessions are found by application_name "
            f'"{self.application_name}"\n'
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "detected": True,
            "libpq_backend_pid": self.libpq_pid,
            "server_backend_pid": self.server_pid,
            "mode": self.mode,
            "application_name": self.application_name,
            "database": self.database,
        }


@record(frozen=True, slots=True)
class Setup:
    """What the setup connection found, and what every worker starts from."""

    #: the password typed at the prompt (the workers connect with it)
    password: str | None
    server_version_num: int
    server_version: str
    table: TableInfo
    #: every client's and every worker's PRNG state
    seeds: SeedPlan
    #: every client's starting variables (-D, :scale, the seeds)
    variables: tuple[tuple[str, Value], ...]
    #: whether each client gets :client_id (not when -D defines it)
    set_client_id: bool
    #: a connection pooler between pgsurge and the server, None: direct
    pooler: PoolerInfo | None = None
    #: --monitor: the run's database and its server's start time, which
    #: the monitor's must be (``insight.monitor.IDENTITY_SQL``)
    target: tuple[str, str] | None = None
    #: --monitor of a run on several hosts (host=a,b): the same of each
    #: host's server that answered, one of which the monitor's must be
    host_targets: tuple[tuple[str, str], ...] = ()
    #: the server's settings that differ from the defaults (name → value as
    #: SHOW gives it) and the database's size: the run's environment
    server_settings: dict[str, str] = field(default_factory=dict)
    data_bytes: int | None = None
    #: the workload's ``COUNTER_QUERY`` before the run (None: none)
    counter_before: int | None = None
    #: --dask: the setup connection's parameters and password as libpq
    #: resolved them here (``pgconn.resolved_params``): the hosts connect
    #: with them, whatever their own environment holds
    resolved: tuple[dict[str, str], str | None] | None = None


def clock_us() -> int:
    """The monotonic clock in µs, the time base of the run's barriers."""
    return time.monotonic_ns() // 1000


def epoch_shift_us() -> int:
    """Unix time minus :func:`clock_us`, in µs (to print Unix timestamps)."""
    return time.time_ns() // 1000 - clock_us()


def parse_scripts(cfg: RunConfig) -> tuple[ScriptLike, ...]:
    """The scripts as the option parser parsed them (parsed here only when
    the config was built by hand); a Python transaction as it was loaded."""
    from pgsurge.script.compile import parse_script

    return tuple(
        s.parsed
        if isinstance(s.parsed, ParsedScript) or s.python
        else parse_script(s.description or s.name, s.text)
        for s in cfg.scripts
    )


def pure_python_notice() -> str:
    """One stderr line when a C extension could not be loaded although it
    was not turned off (``PGSURGE_PURE``): the run then measures with about
    twice the client CPU per transaction, which the user should know.
    Empty when every extension loaded or when the pure paths were asked for.
    """
    from pgsurge import _native

    missing = _native.unavailable()
    if not missing or _native.pure_requested():
        return ""
    what = "; ".join(f"pgsurge.{name} {why}" for name, why in sorted(missing.items()))
    return (
        f"{PROG}: notice: this run uses pure-Python paths, at about twice the "
        f"client CPU per transaction ({what}); to build the C extensions, "
        "install a C compiler and the Python headers (e.g. gcc and python3-dev) "
        "and reinstall pgsurge (PGSURGE_PURE=1 silences this notice)\n"
    )


def set_up(cfg: RunConfig, text_out: TextIO, err: TextIO) -> Setup:
    """The setup connection's work (module docstring); the banner goes to
    ``text_out``, warnings and the vacuum messages to ``err``."""
    conn, password = _connect_setup(cfg, err)
    try:
        server_num = conn.server_version
        server_version = conn.parameter_status("server_version") or str(server_num)
        text_out.write(render_banner(__version__, server_version))
        text_out.flush()
        if cfg.debug:
            err.write(_debug_target(conn, cfg))
            err.flush()
        pooler = detect_pooler(conn, cfg.conn.conninfo_items(), password)
        if pooler is not None:
            err.write(pooler.notice())
            err.flush()
        # (with several hosts the run spans servers the monitor may be one of)
        target: tuple[str, str] | None = None
        host_targets: tuple[tuple[str, str], ...] = ()
        if cfg.monitor_dsn is not None and not conn.several_hosts():
            target = _target_identity(conn)
        elif cfg.monitor_dsn is not None:
            host_targets = _host_identities(conn, password)
        settings, data_bytes = _server_facts(conn)
        info = TableInfo(cfg.scale or 1)
        if any(s.builtin for s in cfg.scripts):
            info = _table_info(conn, cfg, err)
        elif any(s.python for s in cfg.scripts):
            info = TableInfo(_workload_scale(conn, cfg) or 1)
        defined = {name for name, _ in cfg.defines}
        seeds = derive_streams(
            cfg.random_seed,
            cfg.clients,
            min(cfg.jobs, cfg.clients),
            draw_default_seed="default_seed" not in defined,
        )
        variables, set_client_id = _initial_variables(
            cfg, info.scale, seeds.default_seed
        )
        counter = workload_figures_of(cfg)
        counter_before = None
        if counter is not None and counter[2]:
            counter_before = read_counter(conn, counter[2])
        if not cfg.no_vacuum and uses_pgbench_tables(cfg):
            _vacuum(conn, cfg, err)
        resolved = pgconn.resolved_params(conn) if cfg.dask else None
    finally:
        conn.finish()
    return Setup(
        password=password,
        server_version_num=server_num,
        server_version=server_version,
        table=info,
        seeds=seeds,
        variables=variables,
        set_client_id=set_client_id,
        counter_before=counter_before,
        pooler=pooler,
        target=target,
        host_targets=host_targets,
        server_settings=settings,
        data_bytes=data_bytes,
        resolved=resolved,
    )


def _one(conn: pgconn.PgConn, sql: str) -> str | None:
    status, res = conn.exec_status(sql)
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return None
    return pgconn.value_text(res, 0, 0)


def _target_identity(conn: pgconn.PgConn) -> tuple[str, str] | None:
    """The run's database and server, as --monitor's is checked."""
    from pgsurge.insight.monitor import IDENTITY_SQL  # only with --monitor

    status, res = conn.exec_status(IDENTITY_SQL)
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return None
    return pgconn.value_text(res, 0, 0), pgconn.value_text(res, 0, 1)


#: how long a host of a multi-host target may take to answer the identity
#: probe when its conninfo sets no ``connect_timeout`` (a host gone silent
#: would hold the run's start forever)
PROBE_TIMEOUT_S = "10"


def _host_identities(
    conn: pgconn.PgConn, password: str | None
) -> tuple[tuple[str, str], ...]:
    """The run's database and server on each host of a multi-host target
    that answers (a host that is down is none of the run's servers): a
    --monitor must reach one of them. A connection to each, closed at
    once."""
    found: list[tuple[str, str]] = []
    for items in conn.each_host():
        items.setdefault("connect_timeout", PROBE_TIMEOUT_S)
        other, _message, _needs = _connect(items, password)
        if other is None:
            continue
        try:
            identity = _target_identity(other)
        finally:
            other.finish()
        if identity is not None and identity not in found:
            found.append(identity)
    return tuple(found)


#: what PgBouncer's ``application_name_add_host`` appends to the name
_ADDED_HOST = re.compile(r" - \S+:\d+$")
#: connections tried for the pooling mode's probe, to reach the same host
_MODE_TRIES = 8


def detect_pooler(
    conn: pgconn.PgConn, items: dict[str, str], password: str | None
) -> PoolerInfo | None:
    """A pooler between libpq and the server, or None (a direct session).

    libpq's backend pid is the key the server sent at connect; a pooler
    sends its own (PgBouncer: a random cancel key), and the session that
    runs a query says its real pid. Only then is a second connection
    opened, to tell the pooling mode (see :class:`PoolerInfo`): the first
    client's query ended its transaction, so a transaction pooler hands
    that very server session to the second client; a session pooler
    cannot. Costs one query on a direct connection.
    """
    status, res = conn.exec_status(
        "SELECT pg_catalog.pg_backend_pid(),"
        " extract(epoch FROM pg_catalog.clock_timestamp())::float8"
    )
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return None
    value = pgconn.value_text(res, 0, 0)
    if not value.isdigit() or int(value) == conn.backend_pid:
        return None
    server_pid = int(value)
    found_at = float(pgconn.value_text(res, 0, 1) or 0)
    # PgBouncer's application_name_add_host appends " - host:port" (each
    # client its own): the sessions are found by the name before it
    app = _ADDED_HOST.sub("", _one(conn, "SHOW application_name") or "")
    # the server session that ran the last query, just released (or not)
    last = _one(conn, "SELECT pg_catalog.pg_backend_pid()")
    mode = "session"
    # a host=a,b target may send the second connection elsewhere (the
    # server itself, another pooler): only one to the same host and port
    # tells this pooler's mode (a few tries, then "session")
    for _try in range(_MODE_TRIES):
        other, _message, _needs = _connect(items, password)
        if other is None:
            break
        try:
            if other.target != conn.target:
                continue
            if _one(other, "SELECT pg_catalog.pg_backend_pid()") == last:
                mode = "transaction"
            break
        finally:
            other.finish()
    return PoolerInfo(conn.backend_pid, server_pid, mode, app, conn.dbname, found_at)


_SETTINGS_SQL = (
    "SELECT name, pg_catalog.current_setting(name) FROM pg_catalog.pg_settings"
    " WHERE source <> 'default' ORDER BY name"
)
_SIZE_SQL = "SELECT pg_catalog.pg_database_size(pg_catalog.current_database())"


def _server_facts(conn: pgconn.PgConn) -> tuple[dict[str, str], int | None]:
    """The non-default settings and the database size, for the result's
    environment (nothing when the server will not say: no error)."""
    settings: dict[str, str] = {}
    status, res = conn.exec_status(_SETTINGS_SQL)
    if status == pgconn.TUPLES_OK:
        for r in range(res.ntuples):
            settings[pgconn.value_text(res, r, 0)] = pgconn.value_text(res, r, 1)
    size = None
    status, res = conn.exec_status(_SIZE_SQL)
    if status == pgconn.TUPLES_OK and res.ntuples:
        text = pgconn.value_text(res, 0, 0)
        size = int(text) if text.isdigit() else None
    return settings, size


def uses_pgbench_tables(cfg: RunConfig) -> bool:
    """Whether the run uses pgbench's tables: a script, or a Python
    workload naming a ``pgbench_*`` table. Without them (tpcc-like, the
    YCSB ones) there is no pre-run vacuum (three errors where there are no
    pgbench tables) and no automatic initialization of the embedded
    server's pgbench tables."""
    return any(
        not s.python or getattr(s.parsed, "uses_pgbench_tables", True)
        for s in cfg.scripts
    )


def workload_figures_of(cfg: RunConfig) -> tuple[str, tuple[str, ...], str] | None:
    """A run of one Python workload that declares ``FIGURES``: the kind,
    the transactions' names (the run's scripts, in order) and its
    ``COUNTER_QUERY`` ("" for none); None for any other run."""
    if not cfg.scripts or not all(s.python for s in cfg.scripts):
        return None
    parsed = [s.parsed for s in cfg.scripts]
    kind = getattr(parsed[0], "figures", None)
    if kind is None or len({getattr(p, "workload", None) for p in parsed}) != 1:
        return None
    names = tuple(str(getattr(p, "name", "")) for p in parsed)
    return kind, names, getattr(parsed[0], "counter_query", None) or ""


#: how long the counter's read after the run may wait to connect and then
#: for its answer: a server that hangs must not hold the report
AFTER_RUN_WAIT_S = 15


def read_counter(conn: pgconn.PgConn, query: str) -> int | None:
    """The one value of ``query`` (None when it fails or is NULL: the
    figure that needs it is then left out)."""
    status, res = conn.exec_status(query)
    return _counter(status, res)


def _counter(status: int, res: Any) -> int | None:
    if status != pgconn.TUPLES_OK:
        return None
    text = pgconn.value_text(res, 0, 0) if res.ntuples else None
    return int(text) if text else None


def read_counter_after(cfg: RunConfig, password: str | None, query: str) -> int | None:
    """``read_counter`` on a new connection, after the run (None when it
    cannot connect, or the server does not answer within
    :data:`AFTER_RUN_WAIT_S`: connecting, unless the target sets its own
    ``connect_timeout``, and then the query)."""
    items = cfg.conn.conninfo_items()
    if "connect_timeout" not in items and not os.environ.get("PGCONNECT_TIMEOUT"):
        items = {**items, "connect_timeout": str(AFTER_RUN_WAIT_S)}
    conn, _message, _needs = _connect(items, password)
    if conn is None:
        return None
    try:
        res = pgconn.exec_bounded(
            conn, lambda raw: raw.send_query(query.encode()), AFTER_RUN_WAIT_S
        )
    except pgconn.LibpqError:
        return None
    finally:
        conn.finish()
    return _counter(int(res.status), res)


def worker_specs(
    cfg: RunConfig,
    setup: Setup,
    parsed: tuple[ScriptLike, ...],
    facts: RunFacts,
    *,
    epoch_shift_us: int,
    snapshot_s: int,
) -> list[WorkerSpec]:
    """One spec per worker, each with its share of the clients (pgbench's
    split: thread ``i`` gets ``(n - dealt + j - i - 1)/(j - i)``) and their
    PRNG states, by global client number."""
    nthreads = min(cfg.jobs, cfg.clients)
    seeds = setup.seeds
    password = setup.password
    if setup.resolved is not None:  # --dask: explicit parameters travel
        params, password = setup.resolved
        conn = ConnParams(dbname=pgconn.conninfo(params), embedded=cfg.conn.embedded)
        cfg = replace(cfg, conn=conn)
    kind = workload_figures_of(cfg)
    figures = kind[0] if kind is not None else None
    return [
        WorkerSpec(
            worker_id=i,
            config=cfg,
            scripts=parsed,
            first_client=first,
            nclients=count,
            nthreads=nthreads,
            client_rngs=seeds.clients[first : first + count],
            streams=seeds.threads[i],
            variables=setup.variables,
            set_client_id=setup.set_client_id,
            # a YCSB run's per-operation percentiles need each latency
            detailed=facts.measure_latency or figures == "ycsb",
            password=password,
            parent_pid=os.getpid(),
            epoch_shift_us=epoch_shift_us,
            snapshot_s=snapshot_s,
        )
        for i, (first, count) in enumerate(split_clients(cfg.clients, nthreads))
    ]


def _workload_scale(conn: pgconn.PgConn, cfg: RunConfig) -> int | None:
    """The scale of the run's Python workloads: ``-s``, else what the first
    workload's ``SCALE_QUERY`` reads from its tables; None without one."""
    if cfg.scale is not None:
        return cfg.scale
    for s in cfg.scripts:
        query = getattr(s.parsed, "scale_query", None) if s.python else None
        if query:
            status, res = conn.exec_status(query)
            if status != pgconn.TUPLES_OK:
                raise PgsurgeError(
                    f"could not read the scale of {s.parsed.workload}: "
                    + pgconn.strip_newline(conn.error_message()),
                    hint=f'Perhaps you need to initialize it ("{PROG} -i -b '
                    f'NAME" or "{PROG} -i -f FILE.py").',
                )
            return int(pgconn.value_text(res, 0, 0) or 1)
    return None


def _connect(
    items: dict[str, str], password: str | None
) -> tuple[pgconn.PgConn | None, str, bool]:
    """:func:`pgconn.connect`, with a conninfo string or URI in the database
    name that cannot even be parsed (``foo=bar``) reported as libpq's
    message, as pgbench reports it, rather than raised."""
    try:
        return pgconn.connect(items, password)
    except pgconn.PsycopgError as exc:
        return None, str(exc), False


def _connect_setup(cfg: RunConfig, err: TextIO) -> tuple[pgconn.PgConn, str | None]:
    """pgbench ``doConnect`` for the setup connection (prompts once for a
    password if the server asks for one and stdin is a terminal)."""
    items = cfg.conn.conninfo_items()
    conn, message, needs = _connect(items, None)
    password = None
    if conn is None and needs:
        password = pgconn.ask_password(err)
        conn, message, needs = _connect(items, password)
    if conn is None:
        err.write(f"{PROG}: error: {pgconn.strip_newline(message)}\n")
        err.flush()
        raise ConnectError("could not create connection for setup")
    return conn, password


def _debug_target(conn: pgconn.PgConn, cfg: RunConfig) -> str:
    """pgbench's --debug line about the setup connection and the run size."""
    raw = conn._pgconn

    def text(value: bytes | None) -> str:
        return "(null)" if value is None else value.decode("utf-8", "replace")

    what, count = (
        ("duration", cfg.duration) if cfg.duration else ("nxacts", cfg.transactions)
    )
    return (
        f"{PROG}: pghost: {text(raw.host)} pgport: {text(raw.port)} "
        f"nclients: {cfg.clients} {what}: {count} dbName: {text(raw.db)}\n"
    )


def _table_info(conn: pgconn.PgConn, cfg: RunConfig, err: TextIO) -> TableInfo:
    """pgbench ``GetTableInfo``: the scale from ``pgbench_branches`` and the
    partitioning of the ``pgbench_accounts`` found first in search_path."""
    hint = (
        f'Perhaps you need to do initialization ("{PROG} -i") in database '
        f'"{conn.dbname}".'
    )
    status, res = conn.exec_status("select count(*) from pgbench_branches")
    if status != pgconn.TUPLES_OK:
        state = pgconn.sqlstate(res)
        raise PgsurgeError(
            "could not count number of branches: "
            + pgconn.strip_newline(conn.error_message()),
            hint=hint if state == _UNDEFINED_TABLE else None,
        )
    scale = int(pgconn.value_text(res, 0, 0))
    if cfg.scale is not None:
        err.write(
            f"{PROG}: warning: scale option ignored, using count from "
            f"pgbench_branches table ({scale})\n"
        )
        err.flush()
    # The table the unqualified name resolves to, its partition strategy
    # (NULL when not partitioned) and how many partitions hang off it.
    status, res = conn.exec_status(
        "select p.partstrat, "
        "(select pg_catalog.count(*) from pg_catalog.pg_inherits i"
        " where i.inhparent = c.oid) "
        "from pg_catalog.pg_class c "
        "left join pg_catalog.pg_partitioned_table p on p.partrelid = c.oid "
        "where c.oid = pg_catalog.to_regclass('pgbench_accounts')"
    )
    if status != pgconn.TUPLES_OK:
        return TableInfo(scale)
    if res.ntuples == 0:
        raise PgsurgeError(
            'no pgbench_accounts table found in "search_path"', hint=hint
        )
    strategy = pgconn.value_text(res, 0, 0)
    partitions = int(pgconn.value_text(res, 0, 1) or 0)
    if strategy == "":
        return TableInfo(scale)
    if strategy == "r":
        return TableInfo(scale, "range", partitions)
    if strategy == "h":
        return TableInfo(scale, "hash", partitions)
    raise PgsurgeError(f'unexpected partition method: "{strategy}"')


def _try_execute(conn: pgconn.PgConn, sql: str, err: TextIO) -> None:
    """pgbench ``tryExecuteStatement``: a failure is only reported."""
    status, _res = conn.exec_status(sql)
    if status != pgconn.COMMAND_OK:
        err.write(
            f"{PROG}: error: {pgconn.strip_newline(conn.error_message())}\n"
            f"{PROG}: detail: (ignoring this error and continuing anyway)\n"
        )
        err.flush()


def _vacuum(conn: pgconn.PgConn, cfg: RunConfig, err: TextIO) -> None:
    err.write("starting vacuum...")
    err.flush()
    _try_execute(conn, "vacuum pgbench_branches", err)
    _try_execute(conn, "vacuum pgbench_tellers", err)
    _try_execute(conn, "truncate pgbench_history", err)
    err.write("end.\n")
    if cfg.vacuum_all:
        err.write("starting vacuum pgbench_accounts...")
        err.flush()
        _try_execute(conn, "vacuum analyze pgbench_accounts", err)
        err.write("end.\n")
    err.flush()


def _initial_variables(
    cfg: RunConfig, scale: int, default_seed: int | None
) -> tuple[tuple[tuple[str, Value], ...], bool]:
    """Every client's starting variables (pgbench ``main``): the -D values
    as strings, then :scale, :default_seed and :random_seed unless -D gave
    them; :client_id is per client (the flag says whether to set it)."""
    variables: dict[str, Value] = dict(cfg.defines)
    if "scale" not in variables:
        variables["scale"] = scale
    set_client_id = "client_id" not in variables
    if default_seed is not None and "default_seed" not in variables:
        variables["default_seed"] = default_seed
    if "random_seed" not in variables:
        seed = cfg.random_seed & 0xFFFFFFFFFFFFFFFF
        variables["random_seed"] = seed - (1 << 64) if seed >= 1 << 63 else seed
    return tuple(variables.items()), set_client_id
