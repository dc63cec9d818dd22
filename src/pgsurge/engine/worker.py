"""A worker process: pgbench's thread, as a process (the GIL rules out threads).

The parent (``pgsurge.runner``) starts one worker per ``-j`` with a picklable
:class:`WorkerSpec`: the run configuration, the parsed scripts, the worker's
range of client ids and the PRNG states pgbench would give its clients and
thread. The worker then:

1. compiles the scripts once (expression closures, encoded statements,
   prepared statement names, parameter name tuples, ``\\if`` targets) and
   builds its clients, and tells the parent it is ready (READY);
2. on the parent's STEADY, opens all its clients' connections (not under
   ``-C``), in parallel without blocking (the C loop's ``open_all``, or
   ``engine/ramp.py``), and reports them connected — a failure is fatal
   for the run, as pgbench's ``could not create connection for client N``;
3. on GO, records its benchmark start and runs its event loop, sending a
   cumulative stats snapshot at each progress interval;
4. sends its :class:`~pgsurge.stats.results.WorkerResult` and exits.

SIGINT and SIGTERM stop it gracefully (``pgsurge.engine.interrupt``): no
new transaction starts, the result of what ran is still sent.

The messages on the pipe are the records of ``protocol``; :func:`_run`
has one function per phase between them.
"""

from __future__ import annotations

import errno
import gc
import os
import resource
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pgsurge import pgconn
from pgsurge.config import QueryMode, RunConfig
from pgsurge.engine import fastgen, fastloop, fastpq, ramp
from pgsurge.engine import state as C
from pgsurge.engine.abi import run_flags
from pgsurge.engine.client import import_engine, make_engine, make_engine_lazily
from pgsurge.engine.forked import PipeEnd
from pgsurge.engine.interrupt import (
    UserCodeWatch,
    WorkerStop,
    cancel_in_flight,
    take_stop,
)
from pgsurge.engine.loop import EventLoop, LoopOutcome
from pgsurge.engine.program import (
    ScriptLike,
    compile_scripts,
    connect_hook,
    reported_ops,
)
from pgsurge.engine.protocol import (
    Connected,
    Crash,
    Detail,
    Done,
    ExitOnAbort,
    Fatal,
    Go,
    Progress,
    Ready,
    Steady,
)
from pgsurge.engine.state import Client, Op, Settings, WorkerState, own_variables
from pgsurge.engine.throttle import worker_delay_us
from pgsurge.errors import PROG, PgsurgeError
from pgsurge.prng import PgPrng, ThreadStreams
from pgsurge.records import record
from pgsurge.script.ast import (
    ParsedScript,
    Value,
)
from pgsurge.stats.counters import StatsData
from pgsurge.stats.cpu import IMPL_C_LOOP, IMPL_FASTPQ, IMPL_PURE
from pgsurge.stats.results import WorkerResult

if TYPE_CHECKING:
    from pgsurge.engine.threaded import ThreadWorker
    from pgsurge.stats.series import WorkerRecorder
    from pgsurge.stats.txlog import TxLogWriter

__all__ = [
    "WorkerSpec",
    "build_settings",
    "import_for_workers",
    "worker_body",
    "worker_main",
]

#: a thread's own CPU (Linux); elsewhere the process's
_THREAD_USAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)

_MODE = {
    QueryMode.SIMPLE: C.MODE_SIMPLE,
    QueryMode.EXTENDED: C.MODE_EXTENDED,
    QueryMode.PREPARED: C.MODE_PREPARED,
}


@record(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker needs; crosses the process boundary by pickle."""

    worker_id: int
    config: RunConfig
    #: parsed scripts, or Python transactions (``pgsurge.workloads``)
    scripts: tuple[ScriptLike, ...]
    #: the client ids of this worker are first_client .. first_client+n-1
    first_client: int
    nclients: int
    #: total worker count (pgbench's nthreads, after capping at -c)
    nthreads: int
    #: one ``random*()`` state per client of this worker
    client_rngs: tuple[PgPrng, ...]
    streams: ThreadStreams
    #: initial variables of every client (-D values, scale, seeds)
    variables: tuple[tuple[str, Value], ...]
    #: define :client_id (not when -D client_id=... was given)
    set_client_id: bool
    #: whether each transaction is timed (pgbench's ``detailed``)
    detailed: bool
    password: str | None = None
    #: the parent's pid, in -l file names (pgbench's process id)
    parent_pid: int = 0
    #: Unix time minus monotonic time (µs), for -l timestamps
    epoch_shift_us: int = 0
    #: send a stats snapshot every this many seconds even without -P (the
    #: parent's live panel); 0: only for -P
    snapshot_s: int = 0
    #: each Progress carries the series intervals closed since the last one
    #: (a multi-host run's host streams them to the coordinator)
    stream_intervals: bool = False


def wants_histograms(cfg: RunConfig) -> bool:
    """Whether an output needs latency histograms (--percentiles, --json,
    --html, a YCSB workload's per-operation figures)."""
    return (
        cfg.percentiles is not None
        or bool(cfg.json_path or cfg.html_path)
        or any(s.python and getattr(s.parsed, "figures", None) for s in cfg.scripts)
    )


def import_for_workers(cfg: RunConfig) -> None:
    """Import what workers import only when they need it (the Python
    engine's steps and expression evaluator; the recorder of the runs with
    histograms) before they are forked: the processes share the modules'
    pages, and none spends the import."""
    import_engine()
    from pgsurge.script import evaluate  # noqa: F401

    if wants_histograms(cfg):
        from pgsurge.stats import series  # noqa: F401


def build_settings(spec: WorkerSpec, end_us: int) -> Settings:
    cfg = spec.config
    duration = cfg.duration or 0
    nxacts = 0 if duration else (cfg.transactions or 10)
    limit = cfg.latency_limit_ms
    return Settings(
        nclients=cfg.clients,
        query_mode=_MODE[cfg.query_mode],
        nxacts=nxacts,
        end_us=end_us if duration else 0,
        throttle_delay=worker_delay_us(cfg.rate, spec.nthreads) if cfg.rate else 0.0,
        latency_limit_us=int(limit * 1000) if limit else 0,
        # histograms need every transaction's latency
        detailed=spec.detailed or wants_histograms(cfg),
        per_command=cfg.report_per_command,
        max_tries=cfg.max_tries,
        verbose_errors=cfg.verbose_errors,
        continue_on_error=cfg.continue_on_error,
        connect_each_tx=cfg.connect_each_tx,
        weights=tuple(s.weight for s in cfg.scripts),
        conninfo=cfg.conn.conninfo_items(),
        password=spec.password,
        log=cfg.log,
        debug=cfg.debug,
        script_descs=tuple(s.description or s.name for s in cfg.scripts),
        on_connect=connect_hook(spec.scripts),
        reconnect=cfg.reconnect,
    )


def _stderr(text: str) -> None:
    """One write per message, so lines from several workers do not mix.

    Bytes that are not UTF-8 (a variable from -D or \\setshell output,
    kept as surrogate escapes) are written as they came, as pgbench echoes
    them."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate of another origin
        data = text.encode("utf-8", "replace")
    while data:
        try:
            n = os.write(2, data)
        except BrokenPipeError:
            raise
        except OSError:  # ENOSPC, EIO: lost, as C's fprintf loses it
            return
        data = data[n:]


def _clock() -> int:
    return time.monotonic_ns() // 1000


def _make_clients(spec: WorkerSpec, w: WorkerState) -> list[Client]:
    """The worker's clients, each holding the worker's initial variables
    (``w.shared_variables``) until it needs a dict of its own
    (:func:`pgsurge.engine.state.own_variables`; :func:`_connect` gives
    every client one at once when the Python engine runs them). Its
    expression context is made at its first expression."""
    shared: dict[str, Value] = dict(spec.variables)
    w.shared_variables = shared
    w.set_client_id = spec.set_client_id
    first, rngs = spec.first_client, spec.client_rngs
    return [Client(first + i, shared, rngs[i]) for i in range(spec.nclients)]


def _workload_files(scripts: tuple[tuple[Op, ...], ...]) -> frozenset[str]:
    """The files of the run's Python workloads (none for SQL scripts)."""
    files: set[str] = set()
    for ops in scripts:
        prog = ops[0].py if ops else None
        if prog is not None:
            files |= prog.spec.user_files
    return frozenset(files)


def _set_alarm(
    wstate: WorkerState,
    delay_us: int,
    watch: UserCodeWatch,
    host: ThreadWorker | None = None,
) -> None:
    """pgbench's ``setalarm``: flag the end of -T from a SIGALRM handler
    (on a thread, ``host``'s timer), so that the clients test a flag
    instead of reading the clock; the end arms the watch over a Python
    workload's code."""

    def fire() -> None:
        wstate.timer_exceeded = True
        watch.arm()

    def on_alarm(signum: int, frame: object) -> None:
        fire()

    if delay_us <= 0:
        fire()
        return
    if host is not None:
        host.set_alarm(delay_us / 1e6, fire)
        return
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, delay_us / 1e6)


def _open_log(
    spec: WorkerSpec, start_us: int | None, pipe: PipeEnd
) -> TxLogWriter | None:
    """The worker's -l file (pgbench opens it before the start barriers).

    None when it cannot be opened: the parent is sent the error, which it
    prints as pgbench's ``pg_fatal`` does (once, however many workers
    fail: pgbench's first failing thread ends the process) and ends the
    run with status 1.
    """
    # imported here, as only -l runs need it (the start-up of every run
    # counts in its client CPU per transaction)
    from pgsurge.stats.txlog import TxLogOptions, TxLogWriter, log_path

    cfg = spec.config
    try:
        return TxLogWriter(
            log_path(cfg.log_prefix, spec.parent_pid, spec.worker_id),
            TxLogOptions.from_config(cfg),
            epoch_shift_us=spec.epoch_shift_us,
            agg_start_us=start_us,
            sample_rng=spec.streams.sample,
        )
    except PgsurgeError as e:
        pipe.send(Fatal(e.format()))
        return None


def worker_main(spec: WorkerSpec, pipe: PipeEnd, abort_owner: Any = None) -> None:
    """Process entry point (see the module docstring for the protocol).

    ``abort_owner`` (under --exit-on-abort): a shared ``multiprocessing``
    int, -1 until a worker claims the abort report (see ``_claim_abort``).
    """
    code = worker_body(spec, pipe, abort_owner)
    if code:
        os._exit(code)


def worker_body(
    spec: WorkerSpec,
    pipe: PipeEnd,
    abort_owner: Any = None,
    host: ThreadWorker | None = None,
) -> int | None:
    """The worker, in a process or (``host``) on a thread of the parent's
    (``engine.threaded``); returns its exit status (None: 0)."""
    try:
        _run(spec, pipe, abort_owner, host)
    except KeyboardInterrupt:
        return 1
    except RecursionError:
        # an expression deeper than the recursion limit allows (cli raises
        # it to what pgbench handles; pgbench itself dies of SIGSEGV a
        # little further): an error message, not a traceback
        try:
            pipe.send(
                Fatal(
                    f"{PROG}: error: an expression of a script is nested too "
                    "deeply to be evaluated\n"
                )
            )
        except Exception:
            pass
        return 3
    except OSError as exc:
        # the open-file limit reached after the clients connected (the
        # loop's wake-up pipe, a -l file): pgbench's pg_fatal, not a crash
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            return _crash(pipe, host)
        try:
            pipe.send(
                Fatal(
                    f"{PROG}: error: worker {spec.worker_id} could not open a "
                    f"file: {os.strerror(exc.errno or 0)}\n{PROG}: hint: Raise "
                    'the open-file limit ("ulimit -n").\n'
                )
            )
        except Exception:
            pass
        return 3
    except BaseException:
        return _crash(pipe, host)
    return None


def _crash(pipe: PipeEnd, host: ThreadWorker | None = None) -> int:
    """The exception being handled, as a traceback for the parent; the
    exit status. A process whose parent is gone prints it; a thread does
    not: its pipe is closed only by a parent that has given up on it (a
    run that failed, ``WorkerPool.stop``), and wants nothing more from it
    (the process may be printing its last lines, or live on after an
    in-process run)."""
    import traceback  # only for a crash: a run does not load it

    text = traceback.format_exc()
    try:
        pipe.send(Crash(text))
    except Exception:
        if host is None:
            _stderr(text)
    return 3


#: how long a worker that aborted without reporting waits for the reporting
#: worker to end the run before it ends it itself
_QUIET_ABORT_WAIT_S = 5.0


def _claim_abort(abort_owner: Any, worker_id: int) -> bool:
    """--exit-on-abort: whether this worker reports the run's abort.

    pgbench's first thread to abort a client prints its error and "Run was
    aborted due to an error in thread N", then exits the process, so no
    other thread gets to print; workers are processes that the parent
    stops only when told, so the first to claim the shared owner reports
    and the others, aborting at about the same time, keep quiet.
    """
    with abort_owner.get_lock():
        if abort_owner.value < 0:
            abort_owner.value = worker_id
        return bool(abort_owner.value == worker_id)


def _abort_gated_log(abort_owner: Any, worker_id: int) -> Callable[[str], None]:
    """The engine's message sink under --exit-on-abort: error lines only
    from the worker that claims the abort (every client error ends in an
    abort there)."""
    prefix = f"{PROG}: error: "

    def log(text: str) -> None:
        if not text.startswith(prefix) or _claim_abort(abort_owner, worker_id):
            _stderr(text)

    return log


class _Run:
    """What a worker builds while it goes through the barriers (see
    :func:`_run`): its compiled scripts, clients, shared state and loop.

    A plain class, not a dataclass: every run imports it, and generated
    methods would cost start-up time and buy nothing for this
    working state (never compared, copied or printed).
    """

    __slots__ = (
        "abort_owner",
        "bench_start",
        "clients",
        "conn_start",
        "end_us",
        "host",
        "loop",
        "moves",
        "pipe",
        "recorder",
        "scripts",
        "spec",
        "targets",
        "txlog",
        "usage0",
        "warmup_only",
        "watch",
        "window_cnts",
        "window_open",
        "window_us",
        "wstate",
    )

    spec: WorkerSpec
    pipe: PipeEnd
    abort_owner: Any
    scripts: tuple[tuple[Op, ...], ...]
    clients: list[Client]
    wstate: WorkerState
    txlog: TxLogWriter | None
    recorder: WorkerRecorder | None
    loop: EventLoop | None
    #: the run's end from STEADY (0 under -t)
    end_us: int
    #: --warmup: the measured window's start from STEADY (0: none), and
    #: whether it opened
    window_us: int
    window_open: bool
    #: --warmup: the run ended before its window opened (nothing measured)
    warmup_only: bool
    #: --warmup: each client's transaction count at the window's start
    window_cnts: list[int]
    #: the CPU usage where the measured part starts (GO, or the window)
    usage0: resource.struct_rusage | None
    conn_start: int
    bench_start: int
    #: each client's server (``host:port``), not under -C: where it
    #: connected, or where --reconnect last took it
    targets: list[str]
    #: --reconnect: per client (its index), the servers it left for
    #: another, each with its processed count then (``_processed``)
    moves: dict[int, list[tuple[str, int]]]
    #: interrupts a Python workload's code that outlives the run
    watch: UserCodeWatch
    #: the thread this worker runs on (None: its own process)
    host: ThreadWorker | None

    def __init__(
        self,
        spec: WorkerSpec,
        pipe: PipeEnd,
        abort_owner: Any,
        scripts: tuple[tuple[Op, ...], ...],
        clients: list[Client],
        wstate: WorkerState,
        txlog: TxLogWriter | None = None,
        recorder: WorkerRecorder | None = None,
        loop: EventLoop | None = None,
        end_us: int = 0,
        conn_start: int = 0,
        bench_start: int = 0,
    ) -> None:
        self.spec = spec
        self.pipe = pipe
        self.abort_owner = abort_owner
        self.scripts = scripts
        self.clients = clients
        self.targets = []
        self.moves = {}
        self.wstate = wstate
        self.txlog = txlog
        self.recorder = recorder
        self.loop = loop
        self.end_us = end_us
        self.conn_start = conn_start
        self.bench_start = bench_start
        self.window_us = 0
        self.window_open = False
        self.warmup_only = False
        self.window_cnts = []
        self.usage0 = None
        self.watch = UserCodeWatch(_workload_files(scripts))
        self.host = None

    def usage(self) -> resource.struct_rusage:
        """The CPU this worker has used: its process's, or on a thread its
        thread's (``RUSAGE_THREAD``, Linux)."""
        if self.host is not None:
            return resource.getrusage(_THREAD_USAGE)
        return resource.getrusage(resource.RUSAGE_SELF)


def _run(
    spec: WorkerSpec,
    pipe: PipeEnd,
    abort_owner: Any = None,
    host: ThreadWorker | None = None,
) -> None:
    """The worker from start to result, one phase per barrier: READY (set
    up), STEADY (connect), GO (run), then the result. Any phase may end it
    (a fatal error, an abort under --exit-on-abort): it returns None then,
    having told the parent."""
    run = _setup(spec, pipe, abort_owner, host)
    if run is None:
        return
    try:
        _phases(run)
    except BaseException:
        # what the log holds so far reaches the file (the traceback goes
        # to the parent from worker_main)
        if run.txlog is not None:
            run.txlog.close(None)
        raise
    finally:
        if host is not None:
            _release(run)


def _release(run: _Run) -> None:
    """On a thread, whatever way the worker ends: its connections and its
    loop's descriptors closed (a process's end closes them; a thread's
    would stay open in the process, and the server's backends with them,
    after a failed run: an abort, a worker given up)."""
    for st in run.clients:
        if st.conn is not None:
            st.conn.finish()
            st.conn = None
            st.raw = None
    if run.loop is not None:
        run.loop.close()


def _phases(run: _Run) -> None:
    pipe = run.pipe
    pipe.send(Ready())
    steady = pipe.recv()
    assert isinstance(steady, Steady), steady
    run.window_us = steady.window_us
    if not _connect(run, steady.start_us, steady.end_us):
        return
    pipe.send(Connected(tuple(st.conn.backend_pid for st in run.clients if st.conn)))
    go = pipe.recv()
    assert isinstance(go, Go), go
    if not _start(run):
        return
    outcome = _bench(run)
    if outcome != LoopOutcome.DONE:
        _aborted(run, outcome)
        return
    pipe.send(Done(_result(run)))


def _setup(
    spec: WorkerSpec, pipe: PipeEnd, abort_owner: Any, host: ThreadWorker | None
) -> _Run | None:
    """Before READY: compile the scripts, make the clients, open the -l
    file (pgbench opens it before its barriers too)."""
    cfg = spec.config
    scripts = compile_scripts(spec.scripts, cfg.query_mode, debug=cfg.debug)
    nscripts = len(scripts)
    wstate = WorkerState(
        stats=StatsData(),
        per_script=[StatsData() for _ in range(nscripts)] if nscripts > 1 else None,
        choose_rng=spec.streams.choose,
        throttle_rng=spec.streams.throttle,
    )
    clients = _make_clients(spec, wstate)
    for st in clients:
        st.ops = scripts[0]  # CHOOSE_SCRIPT only switches with several scripts
    run = _Run(spec, pipe, abort_owner, scripts, clients, wstate)
    run.host = host
    # from now on a first Ctrl-C stops the run gracefully (the parent
    # decides what to do before GO); on a thread, the parent's handler
    # calls the same stop (only a process's main thread has handlers)
    stop = WorkerStop(wstate, run.watch)
    if host is None:
        stop.install()
    else:
        host.on_stop(stop.request)
    if cfg.log and not cfg.aggregate_interval:
        run.txlog = _open_log(spec, None, pipe)
        if run.txlog is None:
            return None
    return run


def _connect(run: _Run, start_us: int, end_us: int) -> bool:
    """After STEADY: the recorder, the loop (C or Python) and the engine;
    then every client's connection (not under -C). False when a client
    could not connect (the parent was told: pgbench's fatal error)."""
    spec, cfg, wstate, scripts = run.spec, run.spec.config, run.wstate, run.scripts
    settings = build_settings(spec, end_us)
    run.end_us = end_us
    rec = None
    if wants_histograms(cfg):
        # imported here: the runs that record no histograms do without the
        # series and histogram modules (issue 25: memory)
        from pgsurge.stats.series import WorkerRecorder

        # every worker anchors its intervals at the same start_us, so that
        # the parent merges them by start time
        rec = WorkerRecorder(
            wstate.stats,
            [len(reported_ops(s)) for s in scripts],
            anchor_us=start_us,
            interval_us=1_000_000 * (cfg.progress_s or 1),
        )
        wstate.recorder = rec
        if cfg.report_per_command:
            for ops, recorders in zip(scripts, rec.command, strict=True):
                for op, record in zip(reported_ops(ops), recorders, strict=True):
                    op.rec = record
    run.recorder = rec
    run.conn_start = _clock()

    # the C loop for the runs it covers (pgsurge.engine.fastloop), else Python's
    parsed = tuple(p for p in spec.scripts if isinstance(p, ParsedScript))
    decided = (
        # --reconnect: the Python engine (engine/reconnect.py)
        "--reconnect runs on the Python engine"
        if cfg.reconnect
        # Python transactions: their generators stepped by C (fastgen.py)
        else fastgen.decide(cfg, scripts)
        if len(parsed) != len(spec.scripts)
        else fastloop.decide(cfg, parsed, scripts, spec.variables, spec.set_client_id)
    )
    if isinstance(decided, str) and fastloop.required():
        pipe = run.pipe
        pipe.send(
            Fatal(
                f"{PROG}: error: PGSURGE_FASTLOOP=require: the C loop is not "
                f"taken: {decided}\n"
            )
        )
        return False
    plan = None if isinstance(decided, str) else decided
    loop_type = EventLoop if plan is None else fastloop.FastEventLoop
    total, pipe = wstate.stats, run.pipe
    loop = loop_type(
        run.clients,
        exit_on_abort=cfg.exit_on_abort,
        progress_us=(cfg.progress_s or spec.snapshot_s) * 1000000,
        progress_start_us=start_us,
        on_progress=_progress_sender(
            pipe,
            total,
            rec if spec.stream_intervals else None,
            _detail_of(run) if spec.stream_intervals else None,
        ),
        control_fd=pipe.fileno(),
        recorder=rec,
    )
    run.loop = loop
    wstate.control_fd = pipe.fileno()
    if run.host is not None and isinstance(loop, fastloop.FastEventLoop):
        # a stop or -T's end wakes the C loop through this pipe, as a
        # signal wakes a worker process's (see engine.threaded)
        loop.wake_fd = run.host.wake_r
    if run.window_us:
        loop.set_window(run.window_us, lambda now: _window_starts(run))
    log: Callable[[str], None] = _stderr
    if run.abort_owner is not None:
        log = _abort_gated_log(run.abort_owner, spec.worker_id)
    if plan is not None and not cfg.reconnect:
        # the C loop calls the Python engine only to hand a client back
        engine = make_engine_lazily(settings, wstate, scripts, loop, log)
    else:
        engine = make_engine(settings, wstate, scripts, loop, log)
    if plan is None or fastgen.is_python(scripts):
        # the Python engine's steps (and a Python transaction's context)
        # take st.variables for the client's own
        for st in run.clients:
            own_variables(st, wstate)
    if cfg.reconnect:
        from pgsurge.engine.reconnect import with_reconnect  # only --reconnect

        engine = with_reconnect(
            engine, settings, wstate, loop, log, cfg.reconnect, _on_reconnect(run)
        )
    loop.advance = engine.advance
    if plan is not None:
        assert isinstance(loop, fastloop.FastEventLoop)
        flags = run_flags(settings, cfg.exit_on_abort)
        connect = settings if cfg.connect_each_tx else None
        loop.use_c(plan, engine, wstate, scripts, flags, connect)
        if fastgen.is_python(scripts):
            simple = cfg.query_mode is QueryMode.SIMPLE
            loop.set_python(fastgen.spec(scripts, simple))

    if cfg.connect_each_tx:
        return True
    return _open_all(run, settings, loop)


def _open_all(run: _Run, settings: Settings, loop: EventLoop) -> bool:
    """Every client's connection, opened in parallel (by C on the C loop,
    else engine/ramp.py); on a failure, pgbench's messages for the lowest
    client that failed."""
    spec, pipe, clients = run.spec, run.pipe, run.clients
    hook_failed: list[str] = []
    # one string per server, not one per client
    targets: dict[str, str] = {}

    def on_open(index: int, conn: pgconn.PgConn) -> None:
        st = clients[index]
        if hook_failed:
            conn.finish()
            return
        if settings.on_connect is not None:
            failed = settings.on_connect(conn)
            if failed:
                conn.finish()
                hook_failed.append(failed)
                return
        conn.set_nonblocking()
        target = conn.target
        run.targets.append(targets.setdefault(target, target))
        st.conn = conn
        st.raw = conn._pgconn
        st.ptr = fastpq.usable_with(conn)
        loop.attach(st)

    opened = None
    if isinstance(loop, fastloop.FastEventLoop):
        opened = loop.open_all(settings.conninfo, spec.password, len(clients))
    if opened is None:
        index, message = ramp.open_connections(
            settings.conninfo, spec.password, len(clients), on_open
        )
    else:
        conns, index, message = opened
        for i, conn in enumerate(conns):
            on_open(i, conn)
    if hook_failed:
        _finish_connections(run)
        pipe.send(Fatal(f"{PROG}: error: {hook_failed[0]}\n"))
        return False
    if index >= 0:
        _stderr(f"{PROG}: error: {pgconn.strip_newline(message)}\n")
        _stderr(
            f"{PROG}: error: could not create connection for client "
            f"{clients[index].id}\n"
        )
        _finish_connections(run)
        pipe.send(Fatal())
        return False
    return True


def _progress_sender(
    pipe: PipeEnd,
    total: StatsData,
    rec: WorkerRecorder | None,
    detail: Callable[[], Detail] | None = None,
) -> Callable[[int, int], None]:
    """The loop's ``on_progress``: the cumulative stats, and with ``rec``
    the intervals it closed since the previous tick (the loop closes the
    recorder's intervals before it ticks, and both count from the same
    start with the same length, so tick k carries interval k); with
    ``detail``, the per-script and per-command figures at the tick."""
    if rec is None and detail is None:
        return lambda tick, now: pipe.send(Progress(tick, now, total.copy()))
    sent = 0

    def send(tick: int, now: int) -> None:
        nonlocal sent
        closed = rec.intervals if rec is not None else []
        pipe.send(
            Progress(
                tick,
                now,
                total.copy(),
                tuple(closed[sent:]),
                None if detail is None else detail(),
            )
        )
        sent = len(closed)

    return send


def _detail_of(run: _Run) -> Callable[[], Detail]:
    """A copy of the worker's per-script and (-r) per-command figures as
    they stand (the C loop writes them back before each tick)."""
    wstate, scripts = run.wstate, run.scripts
    per_command = run.spec.config.report_per_command

    def detail() -> Detail:
        per_script = [s.copy() for s in wstate.per_script or ()]
        commands = (
            [[op.stats.copy() for op in reported_ops(ops)] for ops in scripts]
            if per_command
            else []
        )
        return per_script, commands

    return detail


def _finish_connections(run: _Run) -> None:
    for st in run.clients:
        if st.conn is not None:
            st.conn.finish()


def _start(run: _Run) -> bool:
    """On GO: the benchmark's start, the aggregate log (its intervals count
    from here), the -T alarm. False when the log cannot be opened."""
    spec, cfg, wstate = run.spec, run.spec.config, run.wstate
    run.bench_start = bench_start = _clock()
    wstate.throttle_trigger = bench_start
    if cfg.log and cfg.aggregate_interval:
        run.txlog = _open_log(spec, bench_start, run.pipe)
        if run.txlog is None:
            _finish_connections(run)
            return False
    if run.txlog is not None:
        wstate.txlog = run.txlog.log
        if isinstance(run.loop, fastloop.FastEventLoop):
            run.loop.set_txlog(run.txlog)
    if run.end_us and cfg.duration:
        _set_alarm(wstate, run.end_us - bench_start, run.watch, run.host)
    return True


def _window_starts(run: _Run) -> None:
    """--warmup: the window's start has come. A run stopped in the warm-up
    (a Ctrl-C, SIGTERM: the flag is set, and -T's end is later) opens no
    window: what finishes in the grace belongs to the warm-up, forgotten
    at the end (:func:`_bench`), so the report does not count after the
    interruption what it says it covers until then. (A loop round late
    past -T's end too, a blocking call, sees the alarm's flag: it opens.)"""
    stopped = run.wstate.timer_exceeded and _clock() < run.end_us
    if not stopped:
        _open_window(run)


def _open_window(run: _Run) -> None:
    """--warmup: the measured window opens (the loop calls this once, at
    its first round at or after the window's start; the C loop wrote its
    copies back before and reloads them after). Everything counted so far
    is the warm-up's and is forgotten, in place: the totals, per script
    and per command, -L's late count, -C's connection time, histograms
    and series, the -l file, the CPU used."""
    wstate = run.wstate
    wstate.stats.clear()
    for stats in wstate.per_script or ():
        stats.clear()
    wstate.latency_late = 0
    wstate.conn_total_us = 0
    for ops in run.scripts:
        for op in reported_ops(ops):
            op.stats.clear()
    if run.recorder is not None:
        run.recorder.restart(run.window_us)
    if run.txlog is not None:
        run.txlog.restart(run.window_us)
    # the clients' own counts go on (C wrote its clients' back at the
    # tick): the per-server figures subtract these
    run.window_cnts = [_processed(st) for st in run.clients]
    run.usage0 = run.usage()
    run.window_open = True


def _bench(run: _Run) -> int:
    """The measured part: the event loop until every client is done."""
    spec, loop = run.spec, run.loop
    assert loop is not None
    run.usage0 = run.usage()
    # Everything built so far lives until the end: keep the cyclic collector
    # off it, and let it run rarely (the hot path creates no cycles; results,
    # parameter lists and event lists are freed by reference counting).
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)

    profile_dir = os.environ.get("PGSURGE_PROFILE")
    if profile_dir:  # development aid: cProfile the loop of each worker
        import cProfile

        prof = cProfile.Profile(time.process_time)
        outcome = prof.runcall(loop.run)
        prof.dump_stats(os.path.join(profile_dir, f"worker{spec.worker_id}.prof"))
    else:
        outcome = loop.run()
    run.watch.disarm()
    if outcome == LoopOutcome.STOPPED and take_stop(run.pipe):
        # interrupted, and the grace is over: what still runs is cancelled
        cancel_in_flight(run.clients)
        outcome = LoopOutcome.DONE

    if run.window_us and not run.window_open:
        # ended in the warm-up (every client aborted, a Ctrl-C): nothing
        # was measured, and the -l file keeps none of it either
        _open_window(run)
        run.warmup_only = True
    if run.txlog is not None:
        # as pgbench: complete intervals at the end; none on --exit-on-abort
        run.txlog.close(_measured_end(run) if outcome == LoopOutcome.DONE else None)
    return outcome


def _measured_end(run: _Run) -> int:
    """Now, or for a run that ended in its warm-up the window's start: a
    stop's grace may end past it, and that time was not measured (no
    duration, no empty intervals)."""
    now = _clock()
    return min(now, run.window_us) if run.warmup_only else now


def _aborted(run: _Run, outcome: int) -> None:
    """The loop ended early: under --exit-on-abort, report it once."""
    spec = run.spec
    if outcome == LoopOutcome.EXIT_ON_ABORT:
        if run.abort_owner is None or _claim_abort(run.abort_owner, spec.worker_id):
            _stderr(
                f"{PROG}: error: Run was aborted due to an error in thread "
                f"{spec.worker_id}\n"
            )
        else:
            # The reporting worker may still be printing: telling the
            # parent now would have it stopped mid-report. It tells the
            # parent itself, which then stops us; wait for that a while.
            run.pipe.poll(_QUIET_ABORT_WAIT_S)
        run.pipe.send(ExitOnAbort())
    _finish_connections(run)


def _implementation(loop: EventLoop) -> str:
    """What ran the transactions (for --client-cpu and the JSON result)."""
    if isinstance(loop, fastloop.FastEventLoop) and loop.uses_c:
        return IMPL_C_LOOP
    return IMPL_FASTPQ if fastpq.available else IMPL_PURE


def _result(run: _Run) -> WorkerResult:
    """After the loop: the worker's figures, for the parent to merge."""
    spec, cfg, wstate, clients, loop = (
        run.spec,
        run.spec.config,
        run.wstate,
        run.clients,
        run.loop,
    )
    assert loop is not None
    end = _measured_end(run)
    usage1 = run.usage()
    usage0 = run.usage0
    assert usage0 is not None
    loop.close()

    # per-command figures leave out each script's END sentinel
    result = WorkerResult.empty(
        spec.worker_id, spec.nclients, [len(reported_ops(s)) for s in run.scripts]
    )
    result.total = wstate.stats
    result.per_script = wstate.per_script if wstate.per_script is not None else []
    if cfg.report_per_command:
        result.per_command = [
            [op.stats for op in reported_ops(ops)] for ops in run.scripts
        ]
    else:
        result.per_command = []
    result.latency_late = wstate.latency_late
    result.conn_total_us = wstate.conn_total_us
    result.conn_start_us = run.conn_start
    result.bench_start_us = run.bench_start
    result.window_us = run.window_us
    result.end_us = end
    result.aborted_clients = sum(1 for st in clients if st.state != C.FINISHED)
    result.clients_finished = sum(1 for st in clients if st.state == C.FINISHED)
    result.cpu_user_s = usage1.ru_utime - usage0.ru_utime
    result.cpu_sys_s = usage1.ru_stime - usage0.ru_stime
    result.client_tx_counts, result.moved_tx = _target_counts(run)
    result.client_targets = list(run.targets)
    # waiting in blocking calls (-C connections, shell commands) is idle too
    result.idle_us = loop.idle_us + wstate.blocked_us
    result.abort_messages = wstate.abort_messages
    result.lost_prepared = wstate.lost_prepared
    result.implementation = _implementation(loop)
    if run.recorder is not None:
        result.histograms, result.intervals = run.recorder.finish(end)
    return result


def _on_reconnect(run: _Run) -> Callable[[Client, pgconn.PgConn], None]:
    """--reconnect's hook for a client connected again: a new connection
    of a multi-host connection string may reach another server (the one
    that failed over), whose transactions are then that server's."""
    index = {st.id: i for i, st in enumerate(run.clients)}

    def reconnected(st: Client, conn: pgconn.PgConn) -> None:
        if not run.targets:  # -C: no per-server figures
            return
        i = index[st.id]
        old, new = run.targets[i], conn.target
        if new != old:
            run.moves.setdefault(i, []).append((old, _processed(st)))
            run.targets[i] = new

    return reconnected


def _target_counts(run: _Run) -> tuple[list[int], list[tuple[str, int]]]:
    """Each client's processed transactions on the server it ended on, and
    (one per move of --reconnect) those a client counted on a server
    before it moved to another: together they split the measured ones
    (from the --warmup window's start) by server."""
    base = run.window_cnts or [0] * len(run.clients)
    counts: list[int] = []
    moved: list[tuple[str, int]] = []
    for i, st in enumerate(run.clients):
        start = base[i]
        for old, at in run.moves.get(i, ()):
            # a move during the warm-up leaves nothing measured behind
            moved.append((old, max(0, at - start)))
            start = max(start, at)
        counts.append(_processed(st) - start)
    return counts, moved


def _processed(st: Client) -> int:
    """The transactions of a client that the report counts as processed
    (its per-server figures sum to the total): not failed, not skipped."""
    return st.cnt - st.failed - st.skipped
