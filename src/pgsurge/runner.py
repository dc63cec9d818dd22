"""The parent of a benchmark run: pgbench's ``main`` from connecting to the report.

``run(cfg)`` does what pgbench does once its options are parsed:

1. parse the scripts (errors end the program before any connection);
2. connect once: print the version banner, read ``:scale`` and the
   partitioning of ``pgbench_accounts`` when a builtin script is used
   (warning when ``-s`` is overridden), run the pre-run ``vacuum``/
   ``truncate`` unless ``-n`` (``starting vacuum...end.``; failures there
   are only warnings), and disconnect;
3. derive every PRNG state from ``--random-seed`` in pgbench's order and
   start one worker process per ``-j`` with its share of the clients
   (pgbench's split: thread ``i`` gets ``(n - dealt + j - i - 1)/(j - i)``);
4. drive the start-up barriers (READY, STEADY: connect, GO), so that
   every client starts together and the initial connection time is
   measured apart from the benchmark;
5. during the run, merge the workers' progress snapshots and print
   pgbench's progress line for all clients (``-P``) on stderr;
6. merge the workers' results and print the report on stdout; exit status
   2 when a client aborted (with pgbench's notice), 1 for fatal start-up
   errors;
7. pgsurge's extras after the report: ``--percentiles``/``--client-cpu``
   lines on stdout, the ``--json`` document, and — whatever the options —
   the one-line client-limited warning on stderr (runs of 1 s or more).
   With ``--json -`` the document alone goes to stdout and everything
   pgbench prints there (the banner, the report and its extra lines) goes
   to stderr instead.

Only this module (and ``cli``) writes to the console for a run;
workers write their clients' error messages to stderr themselves, as
pgbench's threads do.

A signal that kills pgbench kills all its threads. Here the first SIGINT
or SIGTERM of a running benchmark stops it gracefully and the report of
what ran is printed before the program dies of the signal
(``pgsurge.engine.interrupt``); before GO, or a second time, the workers
are killed and the parent dies of it at once. SIGHUP (a closed terminal)
kills the workers first, and the parent then dies of it, as pgbench would;
they would otherwise run on, orphaned. On Linux the kernel also kills the
workers when the parent dies of a signal no handler sees (SIGKILL).

A worker that dies (the OOM killer's SIGKILL) is named with how it ended;
the others stop gracefully, and the report of what the parent received is
printed, with status 2.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import psycopg

from pgsurge import __version__, pgconn
from pgsurge.config import RunConfig
from pgsurge.engine.interrupt import ParentStop, describe_exit
from pgsurge.engine.pool import RunFailed as _Failed
from pgsurge.engine.pool import WorkerPool as _Workers
from pgsurge.engine.pool import split_clients
from pgsurge.engine.program import ScriptLike
from pgsurge.engine.protocol import (
    Connected,
    Crash,
    Done,
    Fatal,
    Go,
    ParentMessage,
    Progress,
    Ready,
    Steady,
    Stop,
    WorkerMessage,
)
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import (
    PROG,
    ConnectError,
    ExitStatus,
    PgsurgeError,
    RunInterrupted,
)
from pgsurge.prng import derive_streams
from pgsurge.report import live
from pgsurge.report.extras import client_limited_warning, render_extras
from pgsurge.report.text import (
    render_abort_notice,
    render_banner,
    render_interrupt_notice,
    render_text,
)
from pgsurge.script.ast import ParsedScript, Value
from pgsurge.stats.counters import StatsData
from pgsurge.stats.results import RunFacts, RunResult, WorkerResult

if TYPE_CHECKING:
    from pgsurge.insight import Monitor

__all__ = ["Driver", "TableInfo", "run", "split_clients"]

_UNDEFINED_TABLE = "42P01"

#: no client-limited warning for a shorter run: over a few milliseconds
#: (-t 10, a client aborting at once) the busy share measures start-up
#: and shutdown, not whether the client kept up with the server
WARN_MIN_DURATION_US = 1_000_000

#: runs a started run's workers and returns their merged result (see ``run``)
Driver = Callable[[Sequence[WorkerSpec], RunFacts, TextIO], RunResult]


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What pgbench reads from the database before a builtin script runs."""

    scale: int
    partition_method: str = "none"
    partitions: int = 0


def _clock() -> int:
    return time.monotonic_ns() // 1000


def _parse_scripts(cfg: RunConfig) -> tuple[ScriptLike, ...]:
    """The scripts as the option parser parsed them (parsed here only when
    the config was built by hand); a Python transaction as it was loaded."""
    from pgsurge.script.compile import parse_script

    return tuple(
        s.parsed
        if isinstance(s.parsed, ParsedScript) or s.python
        else parse_script(s.description or s.name, s.text)
        for s in cfg.scripts
    )


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
    except psycopg.Error as exc:
        return None, str(exc), False


def _connect_setup(cfg: RunConfig, err: TextIO) -> tuple[pgconn.PgConn, str | None]:
    """pgbench ``doConnect`` for the setup connection (prompts once for a
    password if the server asks for one and stdin is a terminal)."""
    items = cfg.conn.conninfo_items()
    conn, message, needs = _connect(items, None)
    password = None
    if conn is None and needs and sys.stdin.isatty():
        import getpass  # lazily, as the prompt is rare (it pulls in termios)

        password = getpass.getpass("Password: ")
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


#: signals whose default action kills pgbench, threads and all, and that
#: do not interrupt a run gracefully (SIGINT and SIGTERM do: ParentStop)
_KILLING_SIGNALS = (signal.SIGHUP,)


@contextmanager
def _stop_workers_on_signal(workers: _Workers) -> Iterator[None]:
    """While the workers run, a killing signal terminates them, then this
    process dies of it (see the module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # (run() called from a thread: only the main one has handlers)
        return

    def die(signum: int, frame: object) -> None:
        workers.stop()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    previous = {sig: signal.signal(sig, die) for sig in _KILLING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Died:
    """What :func:`_recv` returns for a worker whose pipe closed."""


def _recv(workers: _Workers, index: int) -> WorkerMessage | _Died:
    try:
        msg: WorkerMessage = workers.pipes[index].recv()
    except (EOFError, OSError):
        return _Died()
    if isinstance(msg, Crash):
        sys.stderr.write(msg.traceback)
        sys.stderr.write(f"{PROG}: error: worker {index} failed\n")
        raise _Failed(ExitStatus.RUN_ABORTED)
    return msg


def _fatal(msg: Fatal, err: TextIO) -> NoReturn:
    """A worker's :class:`Fatal`: pgbench's ``pg_fatal`` in a thread, which
    ends the process with status 1. The text, when the worker left it to
    the parent, is printed here: only the first failing worker's."""
    if msg.text is not None:
        err.write(msg.text)
        err.flush()
    raise _Failed(ExitStatus.ERROR)


def _barrier(
    workers: _Workers, expected: type[Ready | Connected], err: TextIO
) -> list[WorkerMessage]:
    """Wait for every worker's ``expected`` message (a fatal one ends the
    run); the messages, by worker."""
    got: dict[int, WorkerMessage] = {}
    waiting = set(range(len(workers.pipes)))
    while waiting:
        ready = wait([workers.pipes[i] for i in waiting])
        for pipe in ready:
            index = workers.pipes.index(pipe)  # type: ignore[arg-type]
            msg = _recv(workers, index)
            if isinstance(msg, _Died):
                _report_death(workers, index, err)
                raise _Failed(ExitStatus.RUN_ABORTED)
            if isinstance(msg, Fatal):
                _fatal(msg, err)
            if not isinstance(msg, expected):
                raise _Failed(ExitStatus.RUN_ABORTED)
            got[index] = msg
            waiting.discard(index)
    return [got[i] for i in sorted(got)]


def run(
    cfg: RunConfig,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    on_result: Callable[[RunResult], None] | None = None,
    drive: Driver | None = None,
) -> ExitStatus:
    """Run the benchmark ``cfg`` and print pgbench's output; see the module doc.

    ``on_result`` receives the merged :class:`RunResult` before the report
    is printed (tests and the benchmark suite read the figures from it).
    ``drive`` runs the workers elsewhere (``--dask``: on several hosts) in
    place of this machine's processes; it gets their specs (all seeds
    derived here, by global client number) and returns the merged result,
    or raises :class:`~pgsurge.engine.pool.RunFailed`.
    """
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    # what pgbench prints on stdout; stderr when the JSON document takes it
    text_out = err if cfg.json_path == "-" else out
    parsed = _parse_scripts(cfg)
    pure_notice = pure_python_notice()
    if pure_notice:
        err.write(pure_notice)
        err.flush()
    nthreads = min(cfg.jobs, cfg.clients)

    conn, password = _connect_setup(cfg, err)
    try:
        server_num = conn.server_version
        server_version = conn.parameter_status("server_version") or str(server_num)
        text_out.write(render_banner(__version__, server_version))
        text_out.flush()
        if cfg.debug:
            err.write(_debug_target(conn, cfg))
            err.flush()
        info = TableInfo(cfg.scale or 1)
        if any(s.builtin for s in cfg.scripts):
            info = _table_info(conn, cfg, err)
        elif any(s.python for s in cfg.scripts):
            info = TableInfo(_workload_scale(conn, cfg) or 1)
        defined = {name for name, _ in cfg.defines}
        plan = derive_streams(
            cfg.random_seed,
            cfg.clients,
            nthreads,
            draw_default_seed="default_seed" not in defined,
        )
        variables, set_client_id = _initial_variables(
            cfg, info.scale, plan.default_seed
        )
        if not cfg.no_vacuum:
            _vacuum(conn, cfg, err)
    finally:
        conn.finish()

    facts = RunFacts.from_config(
        cfg,
        pgsurge_version=__version__,
        server_version_num=server_num,
        server_version=server_version,
        script_commands=[[c.first_line for c in p.commands] for p in parsed],
        scale=info.scale,
        partition_method=info.partition_method,
        partitions=info.partitions,
    )
    show_live = live.live_wanted(
        err, progress_s=cfg.progress_s, disabled=cfg.no_live or drive is not None
    )
    epoch_shift_us = time.time_ns() // 1000 - _clock()
    specs = [
        WorkerSpec(
            worker_id=i,
            config=cfg,
            scripts=parsed,
            first_client=first,
            nclients=count,
            nthreads=nthreads,
            client_rngs=plan.clients[first : first + count],
            streams=plan.threads[i],
            variables=variables,
            set_client_id=set_client_id,
            detailed=facts.measure_latency,
            password=password,
            parent_pid=os.getpid(),
            epoch_shift_us=epoch_shift_us,
            snapshot_s=live.SNAPSHOT_S if show_live else 0,
        )
        for i, (first, count) in enumerate(split_clients(cfg.clients, nthreads))
    ]
    monitor = None
    try:
        if cfg.insight:  # --waits, --server-stats, --idle-sessions
            monitor = _start_monitor(cfg, password, text_out, err)
        local = partial(_drive_local, show_live=show_live, monitor=monitor)
        result = (drive or local)(specs, facts, err)
        if monitor is not None:
            result.insight = monitor.finish(result.total.cnt)
    except _Failed as e:
        out.flush()
        err.flush()
        return e.status
    finally:
        if monitor is not None:  # end, abort, Ctrl-C: the sessions close
            monitor.close()
            err.write("".join(monitor.warnings))
    result.epoch_shift_us = epoch_shift_us

    if on_result is not None:
        on_result(result)
    text_out.write(render_text(result, banner=False))
    text_out.write(
        render_extras(result, percentiles=cfg.percentiles, client_cpu=cfg.client_cpu)
    )
    if result.insight:
        from pgsurge.report.insight import insight_warnings, render_insight

        text_out.write(render_insight(result.insight))
        err.write(insight_warnings(result.insight, PROG))
    text_out.flush()
    warning = ""
    if result.total_duration_us >= WARN_MIN_DURATION_US:
        warning = client_limited_warning(result, PROG, cpus=_cpus())
    if warning:
        err.write(warning)
        err.flush()
    if cfg.json_path:
        from pgsurge.report.json import write_json

        write_json(result, cfg, cfg.json_path, stdout=out)
    if cfg.html_path:
        _write_html(result, cfg, cfg.html_path)
    notice = render_abort_notice(result, PROG)
    if notice:
        err.write(notice)
        err.flush()
    if result.interrupted_by is not None:
        err.write(render_interrupt_notice(result, PROG))
        err.flush()
        raise RunInterrupted(getattr(signal, result.interrupted_by))
    return ExitStatus.RUN_ABORTED if notice else ExitStatus.SUCCESS


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


def _cpus() -> int:
    """The cores this process may run on (for the client-limited hint)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _write_html(result: RunResult, cfg: RunConfig, path: str) -> None:
    """--html: the report page of the run's --json document (by value: the
    renderer reads only the document, as ``pgsurge report`` does)."""
    import json

    from pgsurge.report.command import write_html
    from pgsurge.report.html import RunDoc, render_html
    from pgsurge.report.json import build_document

    doc = json.loads(json.dumps(build_document(result, cfg), allow_nan=False))
    label = os.path.splitext(os.path.basename(path))[0]
    write_html(render_html([RunDoc(label, doc)]), path)


@contextmanager
def _parent_stop(workers: _Workers) -> Iterator[ParentStop | None]:
    """The graceful stop of a running benchmark (main thread only: only it
    has signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    with ParentStop(workers.pids, workers.stop) as stopper:
        yield stopper


def _report_death(workers: _Workers, index: int, err: TextIO) -> None:
    """A worker's pipe closed without a result: say which and how it ended."""
    proc = workers.procs[index]
    proc.join(1.0)
    err.write(
        f"{PROG}: error: worker {index} (pid {proc.pid}) died: "
        f"{describe_exit(proc.exitcode)}\n"
    )
    err.flush()


def _start_monitor(
    cfg: RunConfig, password: str | None, text_out: TextIO, err: TextIO
) -> Monitor:
    """The insight monitor's sessions (an error ends the run, as a client's
    failed connection does); the idle sessions named under the banner."""
    from pgsurge.insight import Monitor  # only for these options

    try:
        monitor = Monitor.start(
            cfg, password, [s.text for s in cfg.scripts], _writer(err)
        )
    except ConnectError as exc:
        err.write(f"{PROG}: error: {exc}\n")
        err.flush()
        raise _Failed(ExitStatus.ERROR) from None
    text_out.write(monitor.header())
    text_out.flush()
    return monitor


def _writer(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write


def _drive_local(
    specs: Sequence[WorkerSpec],
    facts: RunFacts,
    err: TextIO,
    *,
    show_live: bool = False,
    monitor: Monitor | None = None,
) -> RunResult:
    """The default driver: the workers are this machine's processes."""
    workers = _Workers(specs)
    try:
        with _stop_workers_on_signal(workers), _parent_stop(workers) as stopper:
            result = _drive(
                workers,
                specs[0].config,
                facts,
                err,
                stopper=stopper,
                show_live=show_live,
                monitor=monitor,
            )
    except BaseException:
        workers.stop()
        raise
    workers.join()
    return result


def _drive(
    workers: _Workers,
    cfg: RunConfig,
    facts: RunFacts,
    err: TextIO,
    *,
    stopper: ParentStop | None = None,
    show_live: bool = False,
    monitor: Monitor | None = None,
) -> RunResult:
    """The barriers, the progress lines (or the live panel) and the results
    of a started run.

    A worker that dies, or an interrupt (``stopper``), stops the others
    gracefully; the result is then what the parent received: a dead
    worker counts its clients as aborted, with its last progress figures.
    """
    _barrier(workers, Ready, err)
    start_us = _clock()
    end_us = start_us + cfg.duration * 1000000 if cfg.duration else 0
    workers.send_all(Steady(start_us, end_us))
    connected = _barrier(workers, Connected, err)
    if monitor is not None:  # the run's backends, from libpq at connect
        pids = [pid for m in connected if isinstance(m, Connected) for pid in m.pids]
        monitor.go(pids, start_us, _writer(err))
    workers.send_all(Go())
    if stopper is not None:
        stopper.start_run()

    reporter = None
    if cfg.progress_s:
        from pgsurge.stats.progress import ProgressReporter  # only for -P

        shift = time.time_ns() // 1000 - _clock() if cfg.progress_timestamp else None
        reporter = ProgressReporter.for_run(facts, start_us, epoch_shift_us=shift)
    n = len(workers.pipes)
    panel = None
    if show_live:
        panel = live.LivePanel(
            err,
            start_us=start_us,
            duration_s=cfg.duration,
            transactions=cfg.transactions,
            clients=cfg.clients,
            nworkers=n,
        )
        panel.start()
    ticks = [0] * n
    nows = [start_us] * n
    snapshots = [StatsData() for _ in range(n)]
    printed = 0
    results: dict[int, WorkerResult] = {}
    dead: dict[int, int] = {}  # worker -> when its death was seen
    pending = set(range(n))
    wake: list[Any] = [] if stopper is None else [stopper.wake_fd]
    try:
        while pending:
            timeout = None if stopper is None else stopper.timeout()
            ready = wait([*(workers.pipes[i] for i in pending), *wake], timeout)
            if stopper is not None:
                if stopper.wake_fd in ready:
                    stopper.drain()
                step = stopper.due()
                if step == 2:  # the grace is over: cancel what still runs
                    for i in pending:
                        _send_quietly(workers.pipes[i], Stop())
                elif step == 3:  # no answer: they are dead to us
                    for i in sorted(pending):
                        workers.procs[i].kill()
            for pipe in ready:
                if not isinstance(pipe, Connection):
                    continue
                index = workers.pipes.index(pipe)
                match _recv(workers, index):
                    case Progress(tick, now, stats):
                        ticks[index], nows[index], snapshots[index] = tick, now, stats
                    case Done(done):
                        results[index] = done
                        snapshots[index] = done.total
                        ticks[index] = sys.maxsize
                        pending.discard(index)
                    case _Died():
                        _report_death(workers, index, err)
                        dead[index] = _clock()
                        ticks[index] = sys.maxsize
                        pending.discard(index)
                        if stopper is None:
                            raise _Failed(ExitStatus.RUN_ABORTED)
                        stopper.stop(_clock())
                    case Fatal() as fatal:
                        _fatal(fatal, err)
                    case _:  # ExitOnAbort, or a message out of order
                        raise _Failed(ExitStatus.RUN_ABORTED)
            tick = min(ticks)
            if not pending or tick <= printed:
                continue
            printed = tick
            merged = StatsData()
            for snap in snapshots:
                merged.merge(snap)
            now = max(nows[i] for i in pending)
            if reporter is not None:
                line = reporter.report(merged, now)
                if monitor is not None:
                    line += monitor.progress_suffix()
                err.write(line + "\n")
                err.flush()
            elif panel is not None:
                cpu = [live.proc_cpu_seconds(p.pid) for p in workers.procs]
                panel.update(merged, now, cpu)
    finally:
        if panel is not None:
            panel.stop()
    for index, when in dead.items():
        results[index] = _dead_result(
            workers.nclients[index], index, facts, snapshots[index], start_us, when
        )
    merged_result = RunResult.from_workers(
        [results[i] for i in range(n)], facts, start_us=start_us
    )
    if stopper is not None and stopper.signum is not None:
        merged_result.interrupted_by = signal.Signals(stopper.signum).name
        merged_result.interrupted_after_us = max(
            0, stopper.at_us - merged_result.bench_start_us
        )
    return merged_result


def _send_quietly(pipe: Connection, msg: ParentMessage) -> None:
    try:
        pipe.send(msg)
    except OSError:  # it died meanwhile: its pipe says so next
        pass


def _dead_result(
    nclients: int,
    index: int,
    facts: RunFacts,
    last: StatsData,
    start_us: int,
    when: int,
) -> WorkerResult:
    """A dead worker's share of the result: its clients aborted, with the
    figures of its last progress snapshot (none without -P)."""
    result = WorkerResult(index, nclients, total=last)
    result.aborted_clients = nclients
    result.client_tx_counts = [0] * nclients
    result.conn_start_us = result.bench_start_us = start_us
    result.end_us = when
    result.abort_messages = [f"worker {index} died"]
    return result
