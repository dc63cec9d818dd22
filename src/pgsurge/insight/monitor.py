"""The monitor of a run: one extra connection, in a thread of the parent.

The runner drives it through a run's phases (``pgsurge.runner``):

1. :meth:`Monitor.start`, after the workers are forked (the parent forks
   with no thread and no connection open): the idle sessions
   (``--idle-sessions``), the monitor connection, what the server offers
   (views, privileges, ``pg_wait_sampling``), the settings, and the start
   snapshot of ``--server-stats``. Anything missing is one warning line;
   the rest goes on;
2. :meth:`Monitor.go` with the run's backend pids (the workers' libpq
   ``PQbackendPID``), just before GO: the sampling thread starts. It sleeps
   on an ``Event`` between samples and waits on its socket during a
   query (libpq releases the GIL), so the parent's loop is not held up;
   the workers never see it;
3. :meth:`Monitor.progress_suffix` at each ``-P`` line;
4. :meth:`Monitor.finish` once every worker is done: the thread stops,
   the end snapshot is read after the run's backends have exited, and the
   JSON-ready sections come back (``waits``, ``server_stats``,
   ``idle_sessions``, per-interval ``intervals``);
5. :meth:`Monitor.close`, always (``finally``: end, abort, Ctrl-C).

Only the runner prints: warnings go to the ``warn`` callback given to
:meth:`start` (start-up), or are kept in :attr:`warnings` (the thread's).

Behind a connection pooler (the runner found one at set-up and passes its
mode and the workers' ``application_name``) the pids libpq reports are
the pooler's, not backends: the sampler follows the server sessions by
name, runs unprepared statements when it goes through a transaction
pooler itself, ``--server-stats`` waits for the pooled sessions' counters
to reach the server (they outlive the clients, see ``pooled``),
and the idle sessions of a transaction pooler get a warning. ``--monitor
DSN`` (``cfg.monitor_dsn``) connects the monitor and the idle sessions
there instead of to the run's target: straight to the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgsurge import pgconn
from pgsurge.config import RunConfig
from pgsurge.errors import PROG, ConnectError
from pgsurge.insight import counters, pooled
from pgsurge.insight.companions import Companions, open_companions
from pgsurge.insight.counters import SOURCES, Snapshot, StatSource
from pgsurge.insight.hostwatch import HostWatch, server_is_local
from pgsurge.insight.own import RecordingConn
from pgsurge.insight.pooladmin import PoolAdmin, PoolAdminError
from pgsurge.insight.sampling import (
    TAG,
    ActivitySampler,
    ProfileSampler,
    SamplerError,
    pg_array,
)
from pgsurge.insight.waits import WaitProfile, label_text
from pgsurge.redact import MASK, is_secret_name, redact_text

__all__ = ["IDENTITY_SQL", "Monitor"]

Warn = Callable[[str], None]

#: how long the end snapshot waits for the run's backends to exit
EXIT_WAIT_S = 5.0
#: how long a --monitor DSN's connection may take when it sets no
#: ``connect_timeout`` (pgconn.bounded)
CONNECT_WAIT_S = 15
_PRIVILEGED_SQL = (
    "SELECT rolsuper OR pg_catalog.pg_has_role(current_user, 'pg_read_all_stats',"
    " 'MEMBER') FROM pg_catalog.pg_roles WHERE rolname = current_user"
)
_SETTINGS_SQL = (
    f"{TAG} SELECT name, setting, coalesce(unit, ''), source"
    " FROM pg_catalog.pg_settings WHERE source <> 'default' ORDER BY name"
)
# a checkpoint in progress: the checkpointer is off its idle main loop
# (mostly in Timeout:CheckpointWriteDelay during a spread checkpoint)
_CHECKPOINTING_SQL = (
    f"{TAG} SELECT count(*) FROM pg_catalog.pg_stat_activity"
    " WHERE backend_type = 'checkpointer'"
    " AND coalesce(wait_event_type, '') <> 'Activity'"
)
#: the database and the server (its start time): --monitor's must be the run's
#: (in UTC and in a fixed form: the two sessions' settings may differ)
IDENTITY_SQL = (
    "SELECT pg_catalog.current_database(), pg_catalog.to_char("
    "pg_catalog.pg_postmaster_start_time() AT TIME ZONE 'UTC',"
    " 'YYYY-MM-DD HH24:MI:SS.US UTC')"
)
_ALIVE_SQL = f"""{TAG} SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE pid = ANY($1::int[])
   OR ($2::text IS NOT NULL
       AND (application_name = $2
            OR pg_catalog.starts_with(application_name, $2 || ' - '))
       AND backend_type = 'client backend'
       AND datname = pg_catalog.current_database()
       AND pid <> pg_catalog.pg_backend_pid() AND pid <> ALL($3::int[]))"""


def _typed_for(
    password: str | None, run: dict[str, str], other: dict[str, str]
) -> str | None:
    """The password typed at the prompt for the run's server, for the
    connection of ``other`` (--monitor, --pooler-admin): only when it goes
    to the same hosts and ports as the same user. Another server (a typo
    in a host name, someone else's) is not sent it; it gets its password
    from its conninfo, PGPASSWORD or the password file, as any libpq
    connection does."""
    if password is None or pgconn.endpoint(run) == pgconn.endpoint(other):
        return password
    return None


def _shown_setting(name: str, value: str) -> str:
    """A setting's value as the result shows it: a standby's
    ``primary_conninfo`` holds the replication password, which went into
    the --json file in clear; a setting named for a secret
    (``ssl_passphrase_command``) is masked whole."""
    return MASK if is_secret_name(name) else redact_text(value)


def _clock() -> int:
    return time.monotonic_ns() // 1000


def _warning(what: str, text: str) -> str:
    return f"{PROG}: warning: {what}: {text}\n"


def _one(conn: pgconn.PgConn, sql: str) -> str | None:
    status, res = conn.exec_status(sql)
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return None
    return pgconn.value_text(res, 0, 0)


def _check_target(conn: pgconn.PgConn, targets: Sequence[tuple[str, str]]) -> None:
    """--monitor must reach the run's database on the run's server, or one
    of them (``targets``: its name and the server's start time, read by
    the set-up, on each host of a multi-host target that answered;
    ``conn``: one of the monitor's sessions): elsewhere its samples and
    counters would be another's, with nothing to tell."""
    status, res = conn.exec_status(IDENTITY_SQL)
    if status != pgconn.TUPLES_OK or res.ntuples == 0:
        return
    mine = (pgconn.value_text(res, 0, 0), pgconn.value_text(res, 0, 1))
    if mine in targets:
        server_pid = _one(conn, "SELECT pg_catalog.pg_backend_pid()")
        if server_pid is None or server_pid == str(conn.backend_pid):
            return
        # a pooler's cancel key: the monitor waits for a server connection
        # with the clients (and takes one of theirs), and through a
        # transaction pooler the sampler's prepared statement is gone at
        # its first use (0 samples, under a heading about -C)
        raise ConnectError(
            "--monitor: it reaches the server through a connection pooler "
            f"(libpq's backend pid {conn.backend_pid}, the server's "
            f"{server_pid}): give --monitor the server itself (its host and "
            "port, the run's database), or leave it out"
        )
    if len(targets) == 1:
        theirs = f'the run\'s database "{targets[0][0]}" of the server started at '
        theirs += targets[0][1]
    else:
        # host=a,b: the run's servers (the same database name on each)
        started = ", ".join(sorted({t[1] for t in targets}))
        theirs = (
            f'the run\'s database "{targets[0][0]}" of its servers (started '
            f"at {started})"
        )
    raise ConnectError(
        f'--monitor: it reaches database "{mine[0]}" of the server started '
        f"at {mine[1]}, {theirs}: its wait samples, counters and idle "
        "sessions would not be the run's (give --monitor the run's server "
        "and database)"
    )


@dataclass
class Monitor:
    """See the module doc. Built by :meth:`start`."""

    cfg: RunConfig
    conn: RecordingConn | None = None
    companions: Companions | None = None
    #: warnings from the thread, for the runner to print at the end
    warnings: list[str] = field(default_factory=list)
    server_version_num: int = 0
    privileged: bool = False
    #: the workers' application_name (for -C, where pids are unknown)
    app_name: str = ""
    sources: list[StatSource] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)
    settings: list[dict[str, str]] = field(default_factory=list)
    version: str = ""
    #: a checkpoint was seen in progress at a snapshot (needs privileges)
    checkpointing: bool = False
    start_snap: Snapshot | None = None
    last_snap: Snapshot | None = None
    interval_stats: dict[int, dict[str, float]] = field(default_factory=dict)
    profile: WaitProfile | None = None
    sampler: ActivitySampler | ProfileSampler | None = None
    sample_every_us: int = 0
    attribution: str = "pids"
    pids: tuple[int, ...] = ()
    #: behind a pooler: its mode ("transaction", "session"); None: direct
    pooler_mode: str | None = None
    #: the monitor and idle sessions connect through the pooler too
    #: (no --monitor)
    via_pooler: bool = False
    #: behind a pooler: how long --server-stats waited for the counters
    flush_wait_s: float = 0.0
    #: ... and before the start snapshot, for an earlier client's
    start_wait_s: float = 0.0
    #: the server's clock when the set-up found the pooler (epoch seconds)
    pooler_found_at: float = 0.0
    #: --pooler-admin: the console, and its figures by interval start
    pool_admin: PoolAdmin | None = None
    admin_points: dict[int, dict[str, float]] = field(default_factory=dict)
    start_us: int = 0
    #: --warmup: the measured window's start (0: none), where the run's
    #: server counters and wait samples start again
    window_us: int = 0
    #: --host-stats: the client host's counters (``hostwatch``)
    host: HostWatch | None = None
    #: the server the monitor connection reached (``PQhost:PQport``)
    server: str = ""
    #: the monitor connection itself goes through a pooler (its backend
    #: pid is not its session's): a host=a,b target may send it to the
    #: pooler when the set-up's connection went straight to the server
    monitor_pooled: bool = False
    #: the run's target names several hosts (host=a,b): its clients'
    #: sessions may be on other servers, or behind a pooler on one of them
    several_hosts: bool = False
    _thread: threading.Thread | None = None
    #: --pooler-admin reads on their own thread (see :meth:`_run_admin`)
    _admin_thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- 1. start ---------------------------------------------------------

    @classmethod
    def start(
        cls,
        cfg: RunConfig,
        password: str | None,
        scripts: Sequence[str],
        warn: Warn,
        *,
        pooler_mode: str | None = None,
        app_name: str | None = None,
        database: str | None = None,
        target: tuple[str, str] | None = None,
        host_targets: Sequence[tuple[str, str]] = (),
        pooler_found_at: float = 0.0,
    ) -> Monitor:
        """Open the sessions and the monitor connection (see the module
        doc); raises :class:`ConnectError` when one cannot connect.
        ``pooler_mode``/``app_name``: the pooler found at set-up;
        ``target``: the run's database and server (``IDENTITY_SQL``) when
        --monitor is given, which must reach them; ``host_targets``: those
        of each host of a multi-host target, one of which it must reach."""
        mon = cls(cfg, pooler_mode=pooler_mode, pooler_found_at=pooler_found_at)
        mon.app_name = app_name or ""
        items = cfg.conn.conninfo_items()
        if cfg.monitor_dsn is not None:
            items = {"dbname": cfg.monitor_dsn, "fallback_application_name": PROG}
            password = _typed_for(password, cfg.conn.conninfo_items(), items)
            # a server that accepts and never answers (a wrong port) held
            # the run before its start, forever
            items = pgconn.bounded(items, CONNECT_WAIT_S)
        mon.via_pooler = pooler_mode is not None and cfg.monitor_dsn is None
        # (the set-up gives no target identity to a host=a,b run's --monitor)
        mon.several_hosts = cfg.monitor_dsn is not None and target is None
        targets = (target,) if target is not None else tuple(host_targets)
        try:
            mon._open(items, password, scripts, warn, database, targets)
        except ConnectError as exc:
            mon.close()
            if cfg.monitor_dsn is not None and not str(exc).startswith("--"):
                # which connection failed: the run's target was reached
                raise ConnectError(f"--monitor: {exc}") from None
            raise
        except pgconn.LibpqError as exc:
            # a connection that broke while setting up (a statement pooler
            # closes one that opens a transaction): one error, not a trace
            mon.close()
            which = "--monitor" if cfg.monitor_dsn is not None else "--server-stats"
            hint = (
                " (a statement pooler allows no transaction block: --monitor "
                "DSN goes straight to the server)"
                if "statement pooling" in str(exc)
                else ""
            )
            raise ConnectError(f"{which}: {exc}{hint}") from None
        except BaseException:
            mon.close()
            raise
        return mon

    def _open(
        self,
        items: dict[str, str],
        password: str | None,
        scripts: Sequence[str],
        warn: Warn,
        database: str | None,
        targets: tuple[tuple[str, str], ...],
    ) -> None:
        """The sessions of :meth:`start`, in its order."""
        mon, cfg, pooler_mode = self, self.cfg, self.pooler_mode
        if cfg.pooler_admin_dsn is not None:
            if database is None:
                warn(
                    _warning(
                        "--pooler-admin",
                        "no connection pooler was found between "
                        f"{PROG} and the server: its console is not read",
                    )
                )
            else:
                admin = {"dbname": cfg.pooler_admin_dsn}
                mon.pool_admin = PoolAdmin.connect(
                    cfg.pooler_admin_dsn,
                    database,
                    _typed_for(password, cfg.conn.conninfo_items(), admin),
                )
        if cfg.idle_sessions:
            mon.companions = open_companions(
                items, password, cfg.idle_sessions, cfg.idle_mode
            )
            if mon.via_pooler and pooler_mode == "transaction":
                warn(pooled.idle_sessions_warning(cfg.idle_mode.value))
            if targets and mon.companions.conns:
                # on another server they would load it, not the run's
                _check_target(mon.companions.conns[0], targets)
        if cfg.waits_ms is not None or cfg.server_stats:
            mon._connect(items, password, warn)
            if targets and mon.conn is not None:
                _check_target(mon.conn, targets)
            if cfg.server_stats:
                if pooler_mode is not None:
                    warn(pooled.SERVER_STATS_WARNING)
                mon._setup_counters(scripts, warn)
        if cfg.host_stats:
            mon.host = HostWatch(disks=server_is_local(cfg.conn))

    def _connect(self, items: dict[str, str], password: str | None, warn: Warn) -> None:
        # it records what it sends: its statements are left out of the top
        # statements by their text (insight/own.py)
        conn = RecordingConn.adopt(pgconn.connect_or_raise(items, password))
        self.conn = conn
        self.server = conn.target
        self.server_version_num = conn.server_version
        session_pid = _one(conn, "SELECT pg_catalog.pg_backend_pid()")
        self.monitor_pooled = session_pid not in (None, str(conn.backend_pid))
        # the workers' name (they connect with the same items; behind a
        # pooler the set-up read it), then ours
        if not self.app_name:
            self.app_name = _one(conn, "SHOW application_name") or ""
        conn.exec_status(f"SET application_name = '{pooled.MONITOR_APP}'")
        self.privileged = _one(conn, _PRIVILEGED_SQL) == "t"
        if not self.privileged:
            warn(
                _warning(
                    "--waits/--server-stats",
                    "the user has no pg_read_all_stats: background processes "
                    "and other users' sessions are not visible (the run's own are)",
                )
            )

    def _setup_counters(self, scripts: Sequence[str], warn: Warn) -> None:
        conn = self.conn
        assert conn is not None
        self.version = _one(conn, "SELECT pg_catalog.version()") or ""
        status, res = conn.exec_status(_SETTINGS_SQL)
        if status == pgconn.TUPLES_OK:
            self.settings = [
                {
                    "name": pgconn.value_text(res, r, 0),
                    "setting": _shown_setting(
                        pgconn.value_text(res, r, 0), pgconn.value_text(res, r, 1)
                    ),
                    "unit": pgconn.value_text(res, r, 2),
                    "source": pgconn.value_text(res, r, 3),
                }
                for r in range(res.ntuples)
            ]
        self.tables = counters.touched_tables(scripts)
        version = conn.parameter_status("server_version") or str(
            self.server_version_num
        )
        missing = []
        for src in SOURCES:
            if self.server_version_num < src.min_version:
                reason = f"not in PostgreSQL {version}"
            elif (
                _one(conn, f"SELECT pg_catalog.to_regclass('{src.view}') IS NOT NULL")
                != "t"
            ):
                reason = "not found"
            else:
                self.sources.append(src)
                continue
            self.unavailable[src.name] = f"{src.view}: {reason}"
            # before 17 the checkpoints are pg_stat_bgwriter's: nothing lost
            if not src.optional and src.name != "checkpointer":
                missing.append(src.view.removeprefix("pg_catalog."))
        if missing:
            warn(
                _warning(
                    "--server-stats",
                    f"{', '.join(missing)} not available on this server "
                    f"(PostgreSQL {version}): left out",
                )
            )
        if self.pooler_mode is not None and self.pooler_found_at:
            # counters an earlier client's pooled sessions still hold would
            # reach the server during the run and count as the run's
            self.start_wait_s = pooled.wait_before_start(
                conn, self.pooler_found_at, warn
            )
        self.start_snap = self._snapshot(warn)
        self.last_snap = self.start_snap

    def _snapshot(self, warn: Warn) -> Snapshot:
        """A snapshot of the sources that work, dropping (with a warning)
        any that fails (a missing privilege, a view gone)."""
        conn = self.conn
        assert conn is not None
        while True:
            snap, failed, message = counters.take_snapshot(
                conn,
                self.sources,
                self.tables,
                _clock(),
                consistent=self.server_version_num >= 150000,
            )
            if failed is None:
                if self.privileged and _one(conn, _CHECKPOINTING_SQL) not in (
                    "0",
                    None,
                ):
                    self.checkpointing = True
                return snap
            self.sources.remove(failed)
            self.unavailable[failed.name] = message
            warn(_warning("--server-stats", f"{failed.view}: {message}: left out"))

    def header(self) -> str:
        """The line naming the idle sessions (empty without them)."""
        return self.companions.header_line() if self.companions else ""

    # -- 2. the thread ------------------------------------------------------

    def go(
        self, pids: Sequence[int], start_us: int, warn: Warn, window_us: int = 0
    ) -> None:
        """Start sampling (``pids``: the run's backends, empty under -C;
        ``window_us``: --warmup's window start)."""
        cfg = self.cfg
        self.pids = tuple(pids)
        self.start_us = start_us
        self.window_us = window_us
        if self.host is not None:
            self.host.go()
        interval_us = 1_000_000 * (cfg.progress_s or 1)
        if cfg.waits_ms is not None and self.conn is not None:
            self.profile = WaitProfile(anchor_us=start_us, interval_us=interval_us)
            self.sampler = self._make_sampler(interval_us, warn)
        if self.pool_admin is not None:
            self._admin_thread = threading.Thread(
                target=self._run_admin, name="pgsurge-pooler-admin", daemon=True
            )
            self._admin_thread.start()
        if (
            self.sampler is None
            and not (self._per_interval and cfg.progress_s)
            and not (window_us and cfg.server_stats)
        ):
            return
        self._thread = threading.Thread(
            target=self._run, name="pgsurge-monitor", daemon=True
        )
        self._thread.start()

    def _make_sampler(
        self, interval_us: int, warn: Warn
    ) -> ActivitySampler | ProfileSampler | None:
        conn = self.conn
        assert conn is not None and self.cfg.waits_ms is not None
        exclude = tuple(self.companions.pids) if self.companions else ()
        by_app = not self.pids or self.pooler_mode is not None
        absent = 0
        if not by_app and (self.several_hosts or conn.several_hosts()):
            # the set-up's connection reached one host of host=a,b: clients
            # on another (or behind a pooler there) have pids that are no
            # session here, never sampled ("wait events of 6 backends" when
            # 2 were seen)
            absent = self._absent_pids()
            by_app = absent > 0
        if by_app:
            self.attribution = "application_name"
            if self.pooler_mode is not None:
                why = "a connection pooler hides the backends' pids"
            elif absent:
                why = (
                    f"{absent} of the {len(self.pids)} clients' backend pids "
                    "are no session of this server (clients on another host "
                    "of the target, or behind a pooler)"
                )
            else:
                why = "-C gives no backend pids to follow"
            if self.via_pooler:
                why += (
                    " (and the sampler waits for a server connection as the "
                    "clients do: --monitor DSN goes straight to the server)"
                )
            warn(
                _warning(
                    "--waits",
                    f"{why}: sampling the server sessions named "
                    f'"{self.app_name}" in this database',
                )
            )
        if not by_app and not self.monitor_pooled and self._has_wait_sampling():
            profiler = ProfileSampler(
                conn, self.pids, self.privileged, self._profile_period_ms()
            )
            try:
                profiler.prepare()
            except SamplerError as exc:
                warn(
                    _warning(
                        "--waits", f"pg_wait_sampling: {exc}: using pg_stat_activity"
                    )
                )
            else:
                self.sample_every_us = interval_us
                return profiler
        sampler = ActivitySampler(
            conn,
            () if by_app else self.pids,
            self.app_name if by_app else None,
            exclude,
            self.privileged,
            # a transaction pooler runs each statement on any server session:
            # one that never saw a prepared statement's PREPARE
            # (the set-up's connection may have reached another host of a
            # host=a,b target than the monitor's, or misjudged the mode)
            prepared=not self.monitor_pooled,
        )
        try:
            sampler.prepare()
        except SamplerError as exc:
            warn(_warning("--waits", f"{exc}: no wait events"))
            return None
        self.sample_every_us = self.cfg.waits_ms * 1000
        return sampler

    def _absent_pids(self) -> int:
        """How many of the clients' backend pids are no session of the
        monitor's server (0 when it cannot tell)."""
        conn = self.conn
        assert conn is not None
        status, res = conn.exec_params(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity"
            " WHERE pid = ANY($1::int[])",
            [pg_array(self.pids)],
        )
        if status != pgconn.TUPLES_OK or res.ntuples == 0:
            return 0
        return len(set(self.pids)) - int(pgconn.value_text(res, 0, 0))

    def _has_wait_sampling(self) -> bool:
        conn = self.conn
        assert conn is not None
        found = _one(
            conn,
            "SELECT pg_catalog.to_regclass('pg_wait_sampling_profile') IS NOT NULL",
        )
        pid_on = _one(
            conn, "SELECT current_setting('pg_wait_sampling.profile_pid', true)"
        )
        return found == "t" and pid_on in ("on", "true", "1")

    def _profile_period_ms(self) -> float:
        conn = self.conn
        assert conn is not None
        value = _one(
            conn, "SELECT current_setting('pg_wait_sampling.profile_period', true)"
        )
        try:
            return float(value or 10)
        except ValueError:
            return 10.0

    def _run(self) -> None:
        """The thread: samples every period, a counters snapshot at each
        ``-P`` boundary, until :meth:`finish`."""
        cfg = self.cfg
        step_us = 1_000_000 * cfg.progress_s if self._per_interval else 0
        next_boundary = self.start_us + step_us if step_us else None
        next_sample = _clock() if self.sampler is not None else None
        next_window = self.window_us or None
        while True:
            dues = [t for t in (next_sample, next_boundary, next_window) if t]
            if not dues:
                return
            delay = max(0, min(dues) - _clock()) / 1e6
            if self._stop.wait(delay):
                return
            now = _clock()
            try:
                if next_sample is not None and now >= next_sample:
                    self._sample()
                    while next_sample <= now:
                        next_sample += self.sample_every_us
                    if self.sampler is None:
                        next_sample = None
                if next_boundary is not None and now >= next_boundary:
                    self._boundary(next_boundary - step_us)
                    while next_boundary <= now:
                        next_boundary += step_us
                if next_window is not None and now >= next_window:
                    self._open_window()
                    next_window = None
            except Exception as exc:  # keep the run going without the monitor
                self.warnings.append(
                    _warning("monitor", f"stopped: {exc}{self._held_hint(exc)}")
                )
                return

    def _held_hint(self, exc: BaseException) -> str:
        """Why the server "did not answer" when it is behind the pooler."""
        if not (self.via_pooler and "did not answer" in str(exc)):
            return ""
        return (
            " (behind the pooler: a PAUSE or a full pool holds the monitor's "
            "queries; --monitor DSN goes straight to the server)"
        )

    def _run_admin(self) -> None:
        """The console's thread: a read per interval (and the window's
        restart), until :meth:`finish`.

        Not on the monitor's thread: the sampler's and the counters'
        queries go through the pooler (without --monitor) and wait with
        the clients when it holds them (PAUSE, a full pool), which is when
        the console's waiting clients matter; behind them its reads came
        only after the stall, and said no client ever waited."""
        admin = self.pool_admin
        assert admin is not None
        step = self._admin_step_us()
        next_read = self.start_us + step
        next_window = self.window_us or None
        while not admin.stopped:
            due = min(t for t in (next_read, next_window) if t)
            if self._stop.wait(max(0, due - _clock()) / 1e6):
                return
            now = _clock()
            try:
                if next_window is not None and now >= next_window:
                    self._admin_window()
                    next_window = None
                if now >= next_read and not admin.stopped:
                    if not self._admin_read(next_read - step):
                        return
                    while next_read <= now:
                        next_read += step
            except Exception as exc:  # keep the run going without the console
                self.warnings.append(_warning("--pooler-admin", f"stopped: {exc}"))
                return

    def _open_window(self) -> None:
        """--warmup: the measured window opens; the run's server counters
        count from a snapshot here (the -P boundaries' go on), its wait
        samples start again."""
        if self.cfg.server_stats and self.conn is not None:
            self.start_snap = self._snapshot(self.warnings.append)
            # no session can be made to report its counters now
            self.warnings.append(
                _warning(
                    "--server-stats",
                    "a busy session reports its counters to the server at "
                    "most once a second: the totals from the window's start "
                    "include up to about a second of each session's warm-up "
                    "work (a longer run makes it a smaller share)",
                )
            )
        if self.profile is not None:
            with self._lock:
                self.profile.restart(self.window_us)

    def _admin_window(self) -> None:
        """--warmup's window opens: the console's run figures count from
        here too (as the run's own); on the console's thread."""
        admin = self.pool_admin
        if admin is not None and not admin.stopped:
            try:
                admin.restart()
            except PoolAdminError as exc:
                self.warnings.append(_warning("--pooler-admin", f"stopped: {exc}"))
                admin.stop(str(exc).splitlines()[0] if str(exc) else "failed")

    def _sample(self) -> None:
        assert self.sampler is not None and self.profile is not None
        try:
            # the lock only around the profile's update: the -P lines take
            # it, and the query may wait long behind a pooler (PAUSE)
            self.sampler.sample(self.profile, self._lock)
        except SamplerError as exc:
            self.warnings.append(_warning("--waits", f"sampling stopped: {exc}"))
            self.sampler = None

    @property
    def _per_interval(self) -> bool:
        """Whether something is read at each -P boundary."""
        return self.cfg.server_stats or self.host is not None

    def _admin_step_us(self) -> int:
        """The JSON series' interval (-P, else 1 s)."""
        return 1_000_000 * (self.cfg.progress_s or 1)

    def _admin_read(self, interval_start_us: int) -> bool:
        """One read of the pooler's console; False when it failed (one
        warning, no more reads)."""
        admin = self.pool_admin
        assert admin is not None
        try:
            self.admin_points[interval_start_us] = admin.read()
        except PoolAdminError as exc:
            self.warnings.append(_warning("--pooler-admin", f"stopped: {exc}"))
            # what the console said until now stays in the report
            admin.stop(str(exc).splitlines()[0] if str(exc) else "failed")
            return False
        return True

    def _boundary(self, interval_start_us: int) -> None:
        if self.host is not None:
            self.host.boundary(interval_start_us)
        if not (self.cfg.server_stats and self.conn is not None):
            return
        prev = self.last_snap
        snap = self._snapshot(self.warnings.append)
        if prev is not None:
            self.interval_stats[interval_start_us] = counters.interval_figures(
                prev, snap, self.sources
            )
        self.last_snap = snap

    # -- 3. -P --------------------------------------------------------------

    def progress_suffix(self) -> str:
        """``, waits: CPU 41% Lock:relation 23% ...``: the top three since
        the previous line (empty without --waits)."""
        if self.profile is None:
            return ""
        with self._lock:
            shares = self.profile.take_recent()
        if not shares:
            return ""
        top = " ".join(f"{label_text(lb)} {100 * s:.0f}%" for lb, s in shares[:3])
        return f", waits: {top}"

    # -- 4. the end ---------------------------------------------------------

    def finish(
        self,
        transactions: int,
        servers: Sequence[str] = (),
        interrupted: bool = False,
    ) -> dict[str, Any]:
        """Stop sampling, read the end snapshot; the JSON-ready sections.
        ``servers``: those the clients reached, when several (host=a,b).
        ``interrupted``: the run was (Ctrl-C, SIGTERM): behind a pooler the
        end snapshot is taken at once, without the wait for the counters of
        the pooled sessions (up to 13 s, while the signals that would end
        the program are held), and a warning says so."""
        if len(servers) > 1 and self.conn is not None:
            # the monitor is one connection: it sees one of them
            self.warnings.append(
                _warning(
                    "--waits/--server-stats",
                    f"the clients reached {len(servers)} servers, the monitor "
                    f"watches one ({self.server}): its wait events and counters "
                    "are that server's only (the per-transaction figures "
                    "divide them by every server's transactions)",
                )
            )
        elif (
            self.cfg.connect_each_tx
            and self.conn is not None
            and (self.several_hosts or self.conn.several_hosts())
        ):
            # -C's connections are not followed to their servers (no
            # ``servers``): they may have reached any host of host=a,b,
            # which went unsaid
            self.warnings.append(
                _warning(
                    "--waits/--server-stats",
                    "the run's connection string names several hosts, whose "
                    "servers -C's connections are not followed to; the "
                    f"monitor watches one ({self.server}): its wait events "
                    "and counters are that server's only (the per-transaction "
                    "figures divide them by every server's transactions)",
                )
            )
        self._stop_thread()
        out: dict[str, Any] = {}
        intervals: dict[int, dict[str, Any]] = {}
        if self.profile is not None:
            waits = self.profile.summary()
            waits = {
                "source": self.sampler.source if self.sampler else "pg_stat_activity",
                "period_ms": self.sample_every_us / 1000.0,
                "attribution": self.attribution,
                "backends": 0 if self.attribution != "pids" else len(self.pids),
                "background_sampled": self.privileged,
                **waits,
            }
            if isinstance(self.sampler, ActivitySampler) and self.sampler.app_name:
                waits["server_backends_seen"] = len(self.sampler.seen)
                if not self.sampler.seen and transactions:
                    # the run's sessions were never found: say so, no
                    # empty profile passed off as a quiet server
                    self.warnings.append(
                        _warning(
                            "--waits",
                            "no server session named "
                            f'"{self.sampler.app_name}" was seen in the '
                            "database during the run: no wait events of its "
                            "sessions (does a pooler rename them?)",
                        )
                    )
            out["waits"] = waits
            for start, shares in self.profile.interval_points():
                intervals.setdefault(start, {"start_us": start})["waits"] = shares
        if self.cfg.server_stats and self.start_snap is not None and self.conn:
            try:
                self._finish_server_stats(transactions, interrupted, out, intervals)
            except pgconn.LibpqError as exc:
                # the rest (wait samples, the console's figures) is measured
                # already: only the counters, which need the end snapshot,
                # are lost
                reason = pgconn.strip_newline(str(exc)).splitlines()[0]
                reason += self._held_hint(exc)
                self.warnings.append(
                    _warning(
                        "--server-stats",
                        "left out: the monitor's connection failed at the end "
                        f"of the run: {reason}",
                    )
                )
        if self.pool_admin is not None and not self.pool_admin.stopped:
            # the tail: from the last read to the end
            step = self._admin_step_us()
            last = max(self.admin_points, default=None)
            self._admin_read(self.start_us if last is None else last + step)
        if self.pool_admin is not None:
            out["pooler_admin"] = self.pool_admin.summary()
            passed = out["pooler_admin"]["xacts"]
            if passed < 0.99 * transactions and not self.pool_admin.stopped:
                # every transaction of the run went through the run's pooler
                # (a --warmup window's start is read a moment late: 1 %)
                self.warnings.append(
                    _warning(
                        "--pooler-admin",
                        f"the console counted {passed} transactions passed on "
                        f'for database "{self.pool_admin.database}", the run '
                        f"made {transactions}: it is not the console of the "
                        "pooler the run went through, or not all of it",
                    )
                )
            for start, point in self.admin_points.items():
                intervals.setdefault(start, {"start_us": start})["pooler"] = point
        if self.companions is not None:
            out["idle_sessions"] = self.companions.to_dict()
        if self.host is not None:
            self._host_sections(out, intervals)
        if intervals:
            out["intervals"] = [intervals[k] for k in sorted(intervals)]
        return out

    def _host_sections(
        self, out: dict[str, Any], intervals: dict[int, dict[str, Any]]
    ) -> None:
        """--host-stats: the run's figures and each interval's."""
        host = self.host
        assert host is not None
        step_us = 1_000_000 * self.cfg.progress_s
        tail = None
        if step_us and self.start_us:
            last = max(host.intervals, default=None)
            tail = self.start_us if last is None else last + step_us
        section = host.finish(tail)
        if section is not None:
            out["host_stats"] = section
        for start, figures in host.intervals.items():
            intervals.setdefault(start, {"start_us": start})["host"] = figures

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._admin_thread is not None:
            self._admin_thread.join()
            self._admin_thread = None

    def _wait_for_exit(self) -> None:
        """Until the run's backends are gone (they flush their counters as
        they exit), at most :data:`EXIT_WAIT_S`."""
        conn = self.conn
        assert conn is not None
        exclude = self.companions.pids if self.companions else []
        params = [
            pg_array(self.pids),
            None if self.pids else self.app_name,
            pg_array(exclude),
        ]
        deadline = time.monotonic() + EXIT_WAIT_S
        try:
            # a Ctrl-C or SIGTERM cuts it short (not the report)
            with pooled.signals_interrupt():
                while time.monotonic() < deadline:
                    status, res = conn.exec_params(_ALIVE_SQL, params)
                    if (
                        status != pgconn.TUPLES_OK
                        or pgconn.value_text(res, 0, 0) == "0"
                    ):
                        return
                    time.sleep(0.01)
        except KeyboardInterrupt:  # the run is over: the report still comes
            pass
        self.warnings.append(
            _warning(
                "--server-stats",
                "the run's sessions had not all exited: the end counters may "
                "miss up to a second of their work",
            )
        )

    def _server_stats(self, end: Snapshot, transactions: int) -> dict[str, Any]:
        start = self.start_snap
        assert start is not None
        assert self.conn is not None
        deltas = counters.run_deltas(start, end, self.sources, self.conn.is_own)
        before, after = counters.checkpoints(start.rows), counters.checkpoints(end.rows)
        cps = None if before is None or after is None else after - before
        return {
            "server_version": self.version,
            "server_version_num": self.server_version_num,
            "elapsed_s": (end.taken_us - start.taken_us) / 1e6,
            "transactions": transactions,
            "per_transaction": counters.per_transaction(
                {k: [v] if isinstance(v, dict) else v for k, v in deltas.items()},
                transactions,
            ),
            "checkpoints": cps,
            "checkpoint_during_run": bool(cps) or self.checkpointing,
            "checkpoint_in_progress_seen": self.checkpointing,
            "stats_reset_during_run": counters.resets(start, end),
            "deltas": deltas,
            "unavailable": dict(self.unavailable),
            "tables": self.tables_seen(end),
            "settings": self.settings,
            **(
                {"statements_hidden": counters.hidden_statements(end)}
                if "statements" in end.rows
                else {}
            ),
            **(
                {
                    "pooler_flush_wait_s": round(self.flush_wait_s, 3),
                    "pooler_start_wait_s": round(self.start_wait_s, 3),
                }
                if self.pooler_mode is not None
                else {}
            ),
            # --warmup: the start snapshot is the window's (not counted before)
            **({"from_window": True} if self.window_us else {}),
            "note": (
                (
                    "deltas from the window's start (--warmup; with up to "
                    "about a second of each session's warm-up work, which "
                    "the sessions had not reported yet)"
                    if self.window_us
                    else "deltas from before the clients connected"
                )
                + " to after their "
                "backends exited (counters are flushed at exit); they include "
                "the monitor's own queries; -P interval figures may each be "
                "off by up to 1 s of work (flushes at most once a second)"
            ),
        }

    def tables_seen(self, end: Snapshot) -> list[str]:
        return sorted(
            f"{r.get('schemaname')}.{r.get('relname')}"
            for r in end.rows.get("tables", [])
        )

    def _finish_server_stats(
        self,
        transactions: int,
        interrupted: bool,
        out: dict[str, Any],
        intervals: dict[int, dict[str, Any]],
    ) -> None:
        """--server-stats' end: the wait for the counters, the end snapshot,
        the run's and the intervals' figures into ``out``/``intervals``.
        Raises :data:`pgconn.LibpqError` when the connection fails."""
        assert self.conn is not None
        flush_warning = ""
        if interrupted and self.pooler_mode is not None:
            # (straight to the server the run's backends exit at once,
            # and the wait for them is kept)
            flush_warning = _warning(
                "--server-stats",
                "the run was interrupted: its end counters were read at "
                "once, without waiting for the pooler's server sessions "
                "to report their last work (the totals may miss some of it)",
            )
            self.warnings.append(flush_warning)
        elif self.pooler_mode is not None:
            self.flush_wait_s, flush_warning = pooled.wait_for_flush(self.conn)
            if flush_warning:
                self.warnings.append(flush_warning)
        else:
            self._wait_for_exit()
        end = self._snapshot(self.warnings.append)
        if self.last_snap is not None and self.cfg.progress_s:
            last_start = max(self.interval_stats, default=None)
            tail = (
                self.start_us
                if last_start is None
                else last_start + 1_000_000 * self.cfg.progress_s
            )
            self.interval_stats[tail] = counters.interval_figures(
                self.last_snap, end, self.sources
            )
        out["server_stats"] = self._server_stats(end, transactions)
        # (not when the counters were reset, or the wait said why)
        reset = "database" in out["server_stats"]["stats_reset_during_run"]
        if self.pooler_mode is not None and not reset and not flush_warning:
            warning = pooled.commits_warning(out["server_stats"], transactions)
            if warning:
                self.warnings.append(warning)
        for start, figures in self.interval_stats.items():
            intervals.setdefault(start, {"start_us": start})["server_stats"] = figures

    # -- 5. always ------------------------------------------------------------

    def close(self) -> None:
        """Stop the thread, close the monitor and the idle sessions
        (idempotent, safe at any point)."""
        self._stop_thread()
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.finish()
        if self.companions is not None:
            self.companions.close()
        if self.pool_admin is not None:
            admin, self.pool_admin = self.pool_admin, None
            admin.close()
