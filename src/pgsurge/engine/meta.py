"""A client's meta commands: expressions, ``\\sleep``, shell commands, pipelines.

``make_meta`` builds, once per worker, what the state machine in
:mod:`pgsurge.engine.client` calls for a backslash command. ``\\set``, ``\\if``
and its branches, and ``\\sleep`` are dispatched inline there (the first is
on the hot path of the builtin scripts); this module evaluates their
expressions and sleep times. ``run_meta`` runs the rest — ``\\shell``,
``\\setshell``, ``\\startpipeline``, ``\\syncpipeline``, ``\\endpipeline`` —
and returns the client's next state: ``END_COMMAND``, ``ABORTED`` (the
message given), or ``WAIT_RESULT`` after ``\\endpipeline`` (the pipeline's
results are read from there). Error messages follow pgbench's wording.
"""

# ruff: noqa: SIM109

from __future__ import annotations

import time
from collections.abc import Callable

from pgsurge import pgconn
from pgsurge.cnum import C_SPACE, atoi, strtol, wrap_int32
from pgsurge.engine.sql import SqlSteps
from pgsurge.engine.state import (
    ABORTED,
    E_META,
    END_COMMAND,
    K_PEND,
    K_PSTART,
    K_PSYNC,
    K_SHELL,
    MISSING,
    MODE_PREPARED,
    MODE_SIMPLE,
    WAIT_RESULT,
    Client,
    Op,
    Settings,
    Support,
    WorkerState,
)
from pgsurge.errors import EvalError
from pgsurge.script.ast import Value
from pgsurge.script.values import to_text

__all__ = ["MetaSteps", "make_meta", "variable_text"]

#: pgbench's SHELL_COMMAND_SIZE: the joined command must stay below it
SHELL_COMMAND_SIZE = 256

NO_SIMPLE_PIPELINE = "cannot use pipeline mode with the simple query protocol"

_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns


#: the shell of C's system() and popen()
SHELL = "/bin/sh"


def _sh(command: str) -> list[str]:
    """The argv of ``system(command)``: ``sh -c command``, argv[0] being
    "sh", which the shell puts before its own messages ("sh: 1: …")."""
    return ["sh", "-c", command]


def variable_text(variables: dict[str, Value], name: str) -> str | None:
    v = variables.get(name, MISSING)
    return None if v is MISSING else to_text(v)


class MetaSteps:
    """The meta-command steps of one worker's clients.

    A plain class, not a dataclass: every run imports it, and generated
    methods would cost start-up time and buy nothing for a bundle of
    closures (never compared, copied or printed).
    """

    __slots__ = ("evaluate", "run_meta", "sleep_usec")

    #: evaluate an \\if/\\elif expression: (ok, value); on failure the
    #: messages are given
    evaluate: Callable[[Client, Op], tuple[bool, Value]]
    #: a \\sleep's duration in µs, or None (message given)
    sleep_usec: Callable[[Client, Op], int | None]
    #: run a shell or pipeline command; returns the next state
    run_meta: Callable[[Client, Op], int]

    def __init__(
        self,
        evaluate: Callable[[Client, Op], tuple[bool, Value]],
        sleep_usec: Callable[[Client, Op], int | None],
        run_meta: Callable[[Client, Op], int],
    ) -> None:
        self.evaluate = evaluate
        self.sleep_usec = sleep_usec
        self.run_meta = run_meta


def make_meta(s: Settings, w: WorkerState, sup: Support, sql: SqlSteps) -> MetaSteps:
    query_mode = s.query_mode
    libpq_error = pgconn.LibpqError
    monotonic_ns = _monotonic_ns
    thread_time_ns = _thread_time_ns
    error = sup.error
    trace = sup.debug
    debug = s.debug
    command_failed = sup.command_failed
    store_variable = sup.store_variable
    eval_context = sup.eval_context
    blocked_since = sup.blocked_since
    flush_sent = sql.flush_sent
    prepare = sql.prepare

    def run_shell(st: Client, op: Op) -> bool:
        """pgbench ``runShellCommand``; blocks this worker while it runs."""
        argv = op.argv
        words = []
        length = 0
        for i, arg in enumerate(argv):
            if not arg.startswith(":"):
                text = arg
            elif arg.startswith("::"):
                text = arg[1:]
            else:
                value = variable_text(st.variables, arg[1:])
                if value is None:
                    error(f'{argv[0]}: undefined variable "{arg}"')
                    return False
                text = value
            add = len(text.encode("utf-8", "surrogateescape")) + (1 if i > 0 else 0)
            if length + add >= SHELL_COMMAND_SIZE - 1:
                error(f"{argv[0]}: shell command is too long")
                return False
            length += add
            words.append(text)
        command = " ".join(words)
        # imported here, by the scripts that use it: subprocess (with
        # locale, selectors) is some 7 million instructions of a start-up
        import subprocess

        if op.var == "":
            rc = subprocess.call(_sh(command), executable=SHELL)
            if rc != 0:
                if not w.timer_exceeded:
                    error(f"{argv[0]}: could not launch shell command")
                return False
            return True
        try:
            proc = subprocess.Popen(
                _sh(command), executable=SHELL, stdout=subprocess.PIPE
            )
        except OSError:
            error(f"{argv[0]}: could not launch shell command")
            return False
        assert proc.stdout is not None
        line = proc.stdout.readline(63)
        proc.stdout.close()
        proc.wait()
        if not line:
            if not w.timer_exceeded:
                error(f"{argv[0]}: could not read result of shell command")
            return False
        # the bytes as they came (pgbench echoes them in its error)
        res: str = line.decode("utf-8", "surrogateescape")
        # strtol, then only white space may follow (no digits at all reads 0)
        number, end, _overflow = strtol(res)  # saturates, as C's does
        if res[end:].lstrip(C_SPACE):
            error(f'{argv[0]}: shell command must return an integer (not "{res}")')
            return False
        if not store_variable(st, "setshell", op.var, wrap_int32(number)):
            return False
        if debug:
            # pgbench names its second shell word, "(null)" when there is
            # none, as the parameter; the value keeps its newline
            second = argv[1] if len(argv) > 1 else "(null)"
            trace(f'{argv[0]}: shell parameter name: "{second}", value: "{res}"')
        return True

    def evaluate(st: Client, op: Op) -> tuple[bool, Value]:
        ctx = st.ctx or eval_context(st)
        if op.uses_debug:
            ctx.script = st.script
            ctx.command = st.command
        try:
            return True, op.expr(ctx)  # type: ignore[misc]
        except EvalError as e:
            if e.message:
                error(e.message)
            command_failed(st, op.name, "evaluation of meta-command failed")
            return False, None

    def sleep_usec(st: Client, op: Op) -> int | None:
        amount = op.amount
        if type(amount) is str:
            text = variable_text(st.variables, amount)
            if text is None:
                error(f'sleep: undefined variable "{amount}"')
                return None
            usec = atoi(text)
            if usec == 0 and not "0" <= text[:1] <= "9":
                error(f'sleep: invalid sleep time "{text}" for variable "{amount}"')
                return None
        else:
            usec = int(amount)
        return wrap_int32(usec * op.unit_us)

    def failed(st: Client, cmd: str, message: str) -> int:
        command_failed(st, cmd, message)
        st.estatus = E_META
        return ABORTED

    def run_meta(st: Client, op: Op) -> int:
        kind = op.kind
        if kind == K_SHELL:
            start, cpu = monotonic_ns() // 1000, thread_time_ns()
            ok = run_shell(st, op)
            blocked_since(start, cpu)
            if not ok:
                return failed(
                    st,
                    "setshell" if op.var else "shell",
                    "execution of meta-command failed",
                )
        elif kind == K_PSTART:
            if query_mode == MODE_SIMPLE:
                return failed(st, "startpipeline", NO_SIMPLE_PIPELINE)
            if query_mode == MODE_PREPARED:
                for pop in op.pipeline_ops:
                    if pop.prepname not in st.prepared:
                        prepare(st, pop)
            if st.in_pipeline:
                return failed(st, "startpipeline", "already in pipeline mode")
            try:
                st.raw.enter_pipeline_mode()
            except libpq_error:
                return failed(st, "startpipeline", "failed to enter pipeline mode")
            st.in_pipeline = True
        elif kind == K_PSYNC or kind == K_PEND:
            cmd = "syncpipeline" if kind == K_PSYNC else "endpipeline"
            if not st.in_pipeline:
                return failed(st, cmd, "not in pipeline mode")
            try:
                st.raw.pipeline_sync()
            except libpq_error:
                return failed(st, cmd, "failed to send a pipeline sync")
            st.num_syncs += 1
            if kind == K_PEND:
                if not flush_sent(st):
                    return failed(st, cmd, "failed to send a pipeline sync")
                st.qrynum = 0
                return WAIT_RESULT
        else:
            raise AssertionError(f"not a shell or pipeline command: {kind}")
        return END_COMMAND

    return MetaSteps(evaluate, sleep_usec, run_meta)
