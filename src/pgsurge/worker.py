"""A worker process: pgbench's thread, as a process (the GIL rules out threads).

The parent (``runner.py``) starts one worker per ``-j`` with a picklable
:class:`WorkerSpec`: the run configuration, the parsed scripts, the worker's
range of client ids and the PRNG states pgbench would give its clients and
thread. The worker then:

1. compiles the scripts once (expression closures, encoded statements,
   prepared statement names, parameter name tuples, ``\\if`` targets) and
   builds its clients, and tells the parent it is ready (READY);
2. on the parent's STEADY, opens all its clients' connections (not under
   ``-C``) and reports them connected — a failure is fatal for the run, as
   pgbench's ``could not create connection for client N``;
3. on GO, records its benchmark start and runs its event loop, sending a
   cumulative stats snapshot at each progress interval;
4. sends its :class:`~pgsurge.stats.results.WorkerResult` and exits.

Messages on the pipe (worker → parent): ``("ready",)``,
``("connected",)``, ``("fatal",)``, ``("progress", tick, now_us, stats)``,
``("exit_on_abort",)``, ``("crash", text)``, ``("done", result)``; parent
→ worker: ``("steady", start_us, end_us)``, ``("go",)``.
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from pgsurge import client_state as C
from pgsurge import fastloop, fastpq, pgconn
from pgsurge.client import make_engine
from pgsurge.client_state import Client, Op, Settings, WorkerState
from pgsurge.config import QueryMode, RunConfig
from pgsurge.errors import PROG, PgsurgeError
from pgsurge.loop import EventLoop, LoopOutcome
from pgsurge.prng import PgPrng, ThreadStreams
from pgsurge.script.ast import (
    Call,
    Command,
    ElseCommand,
    EndifCommand,
    Expr,
    GsetKind,
    IfCommand,
    ParsedScript,
    PipelineCommand,
    PipelineOp,
    SetCommand,
    ShellCommand,
    SleepCommand,
    SqlCommand,
    Value,
)
from pgsurge.script.evaluate import EvalContext, compile_expr
from pgsurge.stats.results import StatsData, WorkerResult
from pgsurge.stats.series import WorkerRecorder
from pgsurge.stats.txlog import TxLogOptions, TxLogWriter, log_path
from pgsurge.throttle import worker_delay_us

__all__ = ["WorkerSpec", "build_settings", "compile_scripts", "worker_main"]

_MODE = {
    QueryMode.SIMPLE: C.MODE_SIMPLE,
    QueryMode.EXTENDED: C.MODE_EXTENDED,
    QueryMode.PREPARED: C.MODE_PREPARED,
}
_GSET = {
    GsetKind.NONE: C.GSET_NONE,
    GsetKind.GSET: C.GSET_ONE,
    GsetKind.ASET: C.GSET_ALL,
}


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker needs; crosses the process boundary by pickle."""

    worker_id: int
    config: RunConfig
    scripts: tuple[ParsedScript, ...]
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


def compile_scripts(
    scripts: tuple[ParsedScript, ...], mode: QueryMode, *, debug: bool = False
) -> tuple[tuple[Op, ...], ...]:
    """Turn parsed scripts into the engine's ``Op`` tuples (once per worker).

    Prepared statement names are ``P_<n>`` numbered over the SQL commands
    of all scripts in order, as pgbench 18 names them. Under ``debug``
    (--debug) every ``\\set`` takes the branch that prints its trace.
    """
    prepnum = 0
    compiled: list[tuple[Op, ...]] = []
    for script in scripts:
        commands = script.commands
        ops: list[Op] = []
        for index, cmd in enumerate(commands):
            op, prepnum = _compile_command(cmd, index, commands, mode, prepnum)
            if debug and op.kind == C.K_SET:
                op.uses_debug = True
            ops.append(op)
        # \startpipeline under -M prepared prepares what follows it first
        for i, op in enumerate(ops):
            if op.kind == C.K_PSTART:
                inner: list[Op] = []
                for nxt in ops[i + 1 :]:
                    if nxt.kind == C.K_PEND:
                        break
                    if nxt.kind == C.K_SQL:
                        inner.append(nxt)
                op.pipeline_ops = tuple(inner)
        # a sentinel: START_COMMAND finds the end without a length test
        ops.append(Op(C.K_END, len(ops), ""))
        compiled.append(tuple(ops))
    return tuple(compiled)


def _compile_command(
    cmd: Command,
    index: int,
    commands: tuple[Command, ...],
    mode: QueryMode,
    prepnum: int,
) -> tuple[Op, int]:
    line = cmd.first_line
    if isinstance(cmd, SqlCommand):
        op = Op(C.K_SQL, index, line, gset=_GSET[cmd.gset], prefix=cmd.gset_prefix)
        if mode is QueryMode.SIMPLE:
            op.sql = cmd.text.encode()
            if len(cmd.simple_parts) > 1:
                op.parts = cmd.simple_parts
        else:
            op.sql = cmd.param_text.encode()
            op.names = cmd.param_vars
            if len(cmd.param_vars) == 1:
                op.param1 = cmd.param_vars[0]
            if mode is QueryMode.PREPARED:
                op.prepname = b"P_%d" % prepnum
                prepnum += 1
        return op, prepnum
    if isinstance(cmd, SetCommand):
        op = Op(C.K_SET, index, line, var=cmd.var, name="set", trace=f"\\set {cmd.var}")
        op.expr = compile_expr(cmd.expr)
        op.var_ok = C.valid_variable_name(cmd.var)
        op.uses_debug = _uses_debug(cmd.expr)
        return op, prepnum
    if isinstance(cmd, IfCommand):
        kind = C.K_ELIF if cmd.is_elif else C.K_IF
        name = "elif" if cmd.is_elif else "if"
        op = Op(kind, index, line, name=name, trace="\\" + name)
        op.expr = compile_expr(cmd.expr)
        op.uses_debug = _uses_debug(cmd.expr)
        target = cmd.false_jump
        landing = commands[target] if target < len(commands) else None
        if isinstance(landing, EndifCommand):
            # pgbench skips over the \endif of a false branch without running it
            op.false_next = target + 1
        else:
            op.false_next = target
            op.false_to_elif = isinstance(landing, IfCommand) and landing.is_elif
        op.end_next = cmd.end_jump + 1
        return op, prepnum
    if isinstance(cmd, ElseCommand):
        op = Op(C.K_ELSE, index, line, end_next=cmd.end_jump + 1, trace="\\else")
        return op, prepnum
    if isinstance(cmd, EndifCommand):
        return Op(C.K_ENDIF, index, line, trace="\\endif"), prepnum
    if isinstance(cmd, SleepCommand):
        op = Op(C.K_SLEEP, index, line, amount=cmd.amount, unit_us=cmd.unit_us)
        op.trace = _sleep_trace(line)
        return op, prepnum
    if isinstance(cmd, ShellCommand):
        op = Op(C.K_SHELL, index, line, var=cmd.var or "", argv=cmd.argv)
        op.name = "setshell" if cmd.var is not None else "shell"
        var = () if cmd.var is None else (cmd.var,)
        op.trace = "\\" + " ".join((op.name, *var, *cmd.argv))
        return op, prepnum
    if isinstance(cmd, PipelineCommand):
        kind = {
            PipelineOp.START: C.K_PSTART,
            PipelineOp.SYNC: C.K_PSYNC,
            PipelineOp.END: C.K_PEND,
        }[cmd.op]
        return Op(kind, index, line, trace="\\" + cmd.op.value), prepnum
    raise TypeError(f"unknown command {cmd!r}")


def _sleep_trace(first_line: str) -> str:
    """``\\sleep`` as --debug shows it: pgbench's words, where ``10ms``
    (digits glued to a unit) also gives the unit as a third word."""
    words = first_line.split()
    if len(words) == 2 and not words[1].startswith(":"):
        word = words[1]
        start = 1 if word[:1] in ("+", "-") else 0
        end = start
        while end < len(word) and word[end] in "0123456789":
            end += 1
        if start < end < len(word):
            words.append(word[end:])
    return " ".join(words)


def _uses_debug(expr: Expr) -> bool:
    """Whether ``expr`` calls debug() anywhere.

    A walk with an explicit stack: pgbench accepts operator chains of tens
    of thousands of terms (a tree that deep), which a recursive walk
    through a generator turned into a RecursionError.
    """
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Call):
            if node.name == "debug":
                return True
            stack.extend(node.args)
    return False


def wants_histograms(cfg: RunConfig) -> bool:
    """Whether an output needs latency histograms (--percentiles, --json,
    --html)."""
    return cfg.percentiles is not None or bool(cfg.json_path or cfg.html_path)


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
        n = os.write(2, data)
        data = data[n:]


def _clock() -> int:
    return time.monotonic_ns() // 1000


def _make_clients(spec: WorkerSpec) -> list[Client]:
    base = dict(spec.variables)
    clients = []
    for i in range(spec.nclients):
        cid = spec.first_client + i
        variables: dict[str, Value] = dict(base)
        if spec.set_client_id:
            variables["client_id"] = cid
        rng = spec.client_rngs[i]
        ctx = EvalContext(variables, rng, debug=_stderr)
        clients.append(Client(cid, variables, rng, ctx))
    return clients


def _set_alarm(wstate: WorkerState, delay_us: int) -> None:
    """pgbench's ``setalarm``: flag the end of -T from a SIGALRM handler, so
    that the clients test a flag instead of reading the clock."""

    def on_alarm(signum: int, frame: object) -> None:
        wstate.timer_exceeded = True

    if delay_us <= 0:
        wstate.timer_exceeded = True
        return
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, delay_us / 1e6)


def _open_log(
    spec: WorkerSpec, start_us: int | None, pipe: Connection
) -> TxLogWriter | None:
    """The worker's -l file (pgbench opens it before the start barriers).

    None when it cannot be opened: the parent is sent the error, which it
    prints as pgbench's ``pg_fatal`` does (once, however many workers
    fail: pgbench's first failing thread ends the process) and ends the
    run with status 1.
    """
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
        pipe.send(("fatal", e.format()))
        return None


def worker_main(spec: WorkerSpec, pipe: Connection, abort_owner: Any = None) -> None:
    """Process entry point (see the module docstring for the protocol).

    ``abort_owner`` (under --exit-on-abort): a shared ``multiprocessing``
    int, -1 until a worker claims the abort report (see ``_claim_abort``).
    """
    try:
        _run(spec, pipe, abort_owner)
    except KeyboardInterrupt:
        os._exit(1)
    except RecursionError:
        # an expression deeper than the recursion limit allows (cli raises
        # it to what pgbench handles; pgbench itself dies of SIGSEGV a
        # little further): an error message, not a traceback
        try:
            pipe.send(
                (
                    "fatal",
                    f"{PROG}: error: an expression of a script is nested too "
                    "deeply to be evaluated\n",
                )
            )
        except Exception:
            pass
        os._exit(3)
    except BaseException:
        text = traceback.format_exc()
        try:
            pipe.send(("crash", text))
        except Exception:
            _stderr(text)
        os._exit(3)


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


def _run(spec: WorkerSpec, pipe: Connection, abort_owner: Any = None) -> None:
    cfg = spec.config
    scripts = compile_scripts(spec.scripts, cfg.query_mode, debug=cfg.debug)
    clients = _make_clients(spec)
    for st in clients:
        st.ops = scripts[0]  # CHOOSE_SCRIPT only switches with several scripts
    nscripts = len(scripts)
    total = StatsData()
    per_script = [StatsData() for _ in range(nscripts)] if nscripts > 1 else None
    wstate = WorkerState(
        stats=total,
        per_script=per_script,
        choose_rng=spec.streams.choose,
        throttle_rng=spec.streams.throttle,
    )
    txlog = None
    if cfg.log and not cfg.aggregate_interval:
        txlog = _open_log(spec, None, pipe)
        if txlog is None:
            return
    pipe.send(("ready",))

    msg = pipe.recv()
    assert msg[0] == "steady", msg
    start_us, end_us = msg[1], msg[2]
    settings = build_settings(spec, end_us)
    rec = None
    if wants_histograms(cfg):
        # every worker anchors its intervals at the same start_us, so that
        # the parent merges them by start time
        rec = WorkerRecorder(
            total,
            [len(s) - 1 for s in scripts],
            anchor_us=start_us,
            interval_us=1_000_000 * (cfg.progress_s or 1),
        )
        wstate.recorder = rec
        if cfg.report_per_command:
            for ops, recorders in zip(scripts, rec.command, strict=True):
                for op, record in zip(ops[:-1], recorders, strict=True):
                    op.rec = record
    conn_start = _clock()

    # the C loop for the runs it covers (pgsurge.fastloop), else Python's
    plan = fastloop.plan_for(
        cfg, spec.scripts, scripts, spec.variables, spec.set_client_id
    )
    loop_type = EventLoop if plan is None else fastloop.FastEventLoop
    loop = loop_type(
        clients,
        exit_on_abort=cfg.exit_on_abort,
        progress_us=cfg.progress_s * 1000000,
        progress_start_us=start_us,
        on_progress=lambda tick, now: pipe.send(("progress", tick, now, total.copy())),
        control_fd=pipe.fileno(),
        recorder=rec,
    )
    log: Callable[[str], None] = _stderr
    if abort_owner is not None:
        log = _abort_gated_log(abort_owner, spec.worker_id)
    engine = make_engine(settings, wstate, scripts, loop, log)
    loop.advance = engine.advance
    if plan is not None:
        assert isinstance(loop, fastloop.FastEventLoop)
        tx_clock = (
            settings.detailed
            or settings.latency_limit_us > 0
            or settings.verbose_errors
        )
        flags = fastloop.flags_for(
            settings.query_mode,
            settings.nxacts,
            settings.end_us,
            settings.detailed,
            tx_clock,
            settings.max_tries,
            nscripts,
            cfg.exit_on_abort,
            settings.latency_limit_us,
            settings.throttle_delay,
            settings.per_command,
        )
        loop.use_c(plan, engine, wstate, scripts, flags)

    if not cfg.connect_each_tx:
        for st in clients:
            conn, message, _needs = pgconn.connect(settings.conninfo, spec.password)
            if conn is None:
                _stderr(f"{PROG}: error: {pgconn.strip_newline(message)}\n")
                _stderr(
                    f"{PROG}: error: could not create connection for client {st.id}\n"
                )
                for other in clients:
                    if other.conn is not None:
                        other.conn.finish()
                pipe.send(("fatal",))
                return
            conn.set_nonblocking()
            st.conn = conn
            st.raw = conn._pgconn
            st.ptr = fastpq.usable_with(conn)
            loop.attach(st)
    pipe.send(("connected",))

    msg = pipe.recv()
    assert msg[0] == "go", msg
    bench_start = _clock()
    wstate.throttle_trigger = bench_start
    if cfg.log and cfg.aggregate_interval:
        # aggregate intervals count from this worker's start
        txlog = _open_log(spec, bench_start, pipe)
        if txlog is None:
            for st in clients:
                if st.conn is not None:
                    st.conn.finish()
            return
    if txlog is not None:
        wstate.txlog = txlog.log
    if end_us and cfg.duration:
        _set_alarm(wstate, end_us - bench_start)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
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

    if txlog is not None:
        # as pgbench: complete intervals at the end; none on --exit-on-abort
        txlog.close(_clock() if outcome == LoopOutcome.DONE else None)
    if outcome != LoopOutcome.DONE:
        if outcome == LoopOutcome.EXIT_ON_ABORT:
            if abort_owner is None or _claim_abort(abort_owner, spec.worker_id):
                _stderr(
                    f"{PROG}: error: Run was aborted due to an error in thread "
                    f"{spec.worker_id}\n"
                )
            else:
                # The reporting worker may still be printing: telling the
                # parent now would have it stopped mid-report. It tells the
                # parent itself, which then stops us; wait for that a while.
                pipe.poll(_QUIET_ABORT_WAIT_S)
            pipe.send(("exit_on_abort",))
        for st in clients:
            if st.conn is not None:
                st.conn.finish()
        return
    end = _clock()
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    loop.close()

    # per-command figures leave out each script's END sentinel
    result = WorkerResult.empty(
        spec.worker_id, spec.nclients, [len(s) - 1 for s in scripts]
    )
    result.total = total
    result.per_script = per_script if per_script is not None else []
    if cfg.report_per_command:
        result.per_command = [[op.stats for op in ops[:-1]] for ops in scripts]
    else:
        result.per_command = []
    result.latency_late = wstate.latency_late
    result.conn_total_us = wstate.conn_total_us
    result.conn_start_us = conn_start
    result.bench_start_us = bench_start
    result.end_us = end
    result.aborted_clients = sum(1 for st in clients if st.state != C.FINISHED)
    result.clients_finished = sum(1 for st in clients if st.state == C.FINISHED)
    result.cpu_user_s = usage1.ru_utime - usage0.ru_utime
    result.cpu_sys_s = usage1.ru_stime - usage0.ru_stime
    result.client_tx_counts = [st.cnt for st in clients]
    # waiting in blocking calls (-C connections, shell commands) is idle too
    result.idle_us = loop.idle_us + wstate.blocked_us
    result.abort_messages = wstate.abort_messages
    if rec is not None:
        result.histograms, result.intervals = rec.finish(end)
    pipe.send(("done", result))
    sys.stdout.flush()
