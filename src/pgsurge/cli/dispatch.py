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
a stdout pipe whose reader went away exits 141, quietly, like a C program
killed by SIGPIPE. Any other stdout that cannot be written (``> /dev/full``,
a full disk, a closed stdout: ``>&-``) is one error line and status 1.

Deliberate differences from pgbench 18.6:

* ``-V`` prints ``pgbench (PostgreSQL) 18.6 (pgsurge 0.1.0)``: pgbench's
  words and the release whose behaviour we follow (what scripts that sniff
  ``pgbench -V`` read), then our own version;
* ``--help`` names pgsurge, lists our options (``--init-jobs``,
  ``--continue-on-error`` from PG19, ``--embedded``, the report extras
  ``--percentiles``, ``--client-cpu``, ``--extended-report``, ``--json``)
  and sends bug reports to pgsurge's maintainers, not to pgsql-bugs;
* ``--json -`` puts the JSON document on stdout in place of the text
  report, which then goes to stderr (stdout stays one valid document);
* ``pgsurge server ...`` is the embedded-server subcommand and
  ``pgsurge report ...`` writes the HTML report of ``--json`` results
  (pgbench would take either word as a database name);
* our options are new words that never make a pgbench abbreviation
  ambiguous (see ``getopt.py``);
* ``PG_COLOR`` is ignored (messages are never colored);
* an unwritable stdout is an error (status 1): pgbench ignores failed
  writes to a full stdout (exits 0, the report lost), and with a closed
  stdout its first connection takes descriptor 1, so its banner goes to the
  server (which drops the connection: status 1 by accident). pgsurge keeps
  descriptors 0 to 2 taken (``/dev/null``) so that no socket or pipe can
  land there, and says once that stdout could not be written.
"""

from __future__ import annotations

import codecs
import errno
import gc
import io
import os
import sys

from pgsurge import PGBENCH_COMPAT_VERSION, __version__
from pgsurge.errors import (
    PROG,
    ExitStatus,
    PgsurgeError,
    RunInterrupted,
    UsageError,
)

# typing.TYPE_CHECKING without importing typing (1-2 ms of --help); type
# checkers take any constant of this name as true
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import TextIO

    from pgsurge.config import ConnParams, InitConfig, RunConfig
    from pgsurge.stats.results import RunResult

__all__ = ["main"]

#: the error handler of stderr's encoder (see ``_own_standard_streams``)
_RAW_OR_ESCAPED = "pgsurge.raw-or-escaped"


def _raw_or_escaped(exc: UnicodeError) -> tuple[str | bytes, int]:
    """Surrogate escapes (bytes that were not UTF-8 when read) back to their
    bytes; any other unencodable character as ``\\uXXXX`` (stderr's usual
    handler), never an error."""
    if isinstance(exc, UnicodeEncodeError):
        chunk = exc.object[exc.start : exc.end]
        if all(0xDC80 <= ord(c) <= 0xDCFF for c in chunk):
            return bytes(ord(c) - 0xDC00 for c in chunk), exc.end
    return codecs.backslashreplace_errors(exc)


codecs.register_error(_RAW_OR_ESCAPED, _raw_or_escaped)


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
    # imported here, not at the top: ``--help`` and ``-V`` do without them
    from dataclasses import replace

    from pgsurge.config import InitConfig, RunConfig
    from pgsurge.server.target import resolve_target

    drive = None
    if isinstance(cfg, RunConfig) and cfg.dask is not None:
        # the workers run on the hosts of a Dask cluster (fails at once
        # when Dask is not installed)
        from pgsurge.distributed import dask_driver

        drive = dask_driver(cfg.dask)
    conn = resolve_target(cfg.conn, force_embedded=cfg.force_embedded)
    if not conn.embedded and conn.dbname is None:
        conn = replace(conn, dbname=_default_dbname(os.environ))
    # pgsurge.init only for -i and the embedded server: a run against a
    # given server does without its modules (start-up is part of every
    # run's client CPU per transaction)
    if isinstance(cfg, InitConfig):
        from pgsurge.init import run_init

        _startup_done()
        run_init(replace(cfg, conn=conn))
        return int(ExitStatus.SUCCESS)
    from pgsurge.runner import run
    from pgsurge.runner.setup import uses_pgbench_tables

    _startup_done()
    if conn.embedded and uses_pgbench_tables(cfg):
        # not for a workload with tables of its own (tpcc-like, YCSB)
        from pgsurge.init import ensure_initialized

        ensure_initialized(conn)
    cfg = replace(cfg, conn=conn)
    if cfg.store is None:
        return int(run(cfg, drive=drive))
    results: list[RunResult] = []
    try:
        status = run(cfg, drive=drive, on_result=results.append)
    except RunInterrupted as e:
        # not stored (a cut run would read as a slower build in history),
        # and said so: a silent miss leaves a hole the user finds later
        import signal

        name = signal.Signals(e.signum).name
        sys.stderr.write(
            f"{PROG}: the run was not stored: it was interrupted by {name}\n"
        )
        sys.stderr.flush()
        raise
    except (PgsurgeError, OSError):
        # the run completed but an output failed (a --json file on a full
        # disk, a stdout gone): the store still keeps the measurement
        if results and not results[0].aborted and results[0].interrupted_by is None:
            try:
                _store_result(cfg, results, ExitStatus.SUCCESS)
            except PgsurgeError as store_error:
                sys.stderr.write(store_error.format())
        raise
    return _store_result(cfg, results, status)


def _store_result(cfg: RunConfig, results: list[RunResult], status: int) -> int:
    """--store: the run's document into the store, once the report and the
    --json/--html files are out (a store that fails loses none of them:
    one error line, status 1). An aborted run is not stored: its figures
    would pass for a slower build in ``pgsurge history``."""
    if not results or status != ExitStatus.SUCCESS:
        sys.stderr.write(f"{PROG}: the run was not stored: it did not complete\n")
        sys.stderr.flush()
        return int(status)
    import json

    from pgsurge.report.json import build_document
    from pgsurge.store.command import save_after_run

    doc = json.loads(json.dumps(build_document(results[0], cfg), allow_nan=False))
    save_after_run(doc, cfg.store, sys.stderr)
    return int(status)


def _main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        first = argv[1]
        if first in ("--help", "-?"):
            from pgsurge.cli.help import HELP

            sys.stdout.write(HELP)
            return 0
        if first in ("--version", "-V"):
            # pgbench's first words, which PostgreSQL's own tests and
            # version-sniffing scripts read; then what actually runs
            ours = f"{PROG} {__version__}"
            sys.stdout.write(
                f"pgbench (PostgreSQL) {PGBENCH_COMPAT_VERSION} ({ours})\n"
            )
            return 0
        if first == "server":
            from pgsurge.server.cli import server_main

            _startup_done()
            return int(server_main(list(argv[1:])))
        if first == "report" and "--history" in argv[2:]:
            # the trend page of a results store (pgsurge.store sits above
            # the report package, which draws single results)
            from pgsurge.store.command import trend_main

            _startup_done()
            return int(trend_main(list(argv[2:])))
        if first == "report":
            from pgsurge.report.command import report_main

            _startup_done()
            return int(report_main(list(argv[2:])))
        if first == "compare":
            from pgsurge.experiment.command import compare_main

            _startup_done()
            return int(compare_main(list(argv[1:])))
        if first in ("history", "store"):
            from pgsurge.store.command import history_main, store_main

            _startup_done()
            main = history_main if first == "history" else store_main
            return int(main(list(argv[1:])))
        if first == "ab":
            from pgsurge.experiment.command import ab_main

            _startup_done()
            return int(ab_main(list(argv[1:]), check_args=_check_run_args))
        if first == "sweep":
            from pgsurge.experiment.sweep_command import sweep_main

            _startup_done()
            return int(
                sweep_main(
                    list(argv[1:]),
                    check_args=_check_run_args,
                    option_key=_option_key,
                    option_keys=_option_keys,
                )
            )
        if first == "capacity":
            from pgsurge.experiment.capacity import capacity_main

            _startup_done()
            return int(
                capacity_main(
                    list(argv[1:]),
                    check_args=_check_run_args,
                    option_keys=_option_keys,
                )
            )
    from pgsurge.cli.options import EarlyExit, parse_command_line

    try:
        cfg = parse_command_line(argv[1:])
    except EarlyExit as e:
        return e.status
    return _dispatch(cfg)


def _option_key(word: str) -> str:
    """For ``pgsurge sweep``: the option a spelling means, as the run's
    command line reads it (``-c``, ``--client`` and ``--cli`` are all
    ``c``); the word itself when it is no option of ours."""
    from pgsurge.cli.getopt import Getopt
    from pgsurge.cli.options import LONG_OPTIONS, SHORT_OPTIONS

    try:
        for key, _value in Getopt([word, "1"], SHORT_OPTIONS, LONG_OPTIONS):
            return key
    except UsageError:
        pass
    return word


def _option_keys(args: Sequence[str]) -> set[str]:
    """For ``pgsurge capacity`` and ``sweep``: the options a run's arguments give, as
    the run's command line reads them (``-T``, ``--time=5``, ``-ST5``:
    ``T``); none when they do not parse (the run check says why)."""
    from pgsurge.cli.getopt import Getopt
    from pgsurge.cli.options import LONG_OPTIONS, SHORT_OPTIONS

    try:
        return {key for key, _value in Getopt(list(args), SHORT_OPTIONS, LONG_OPTIONS)}
    except UsageError:
        return set()


def _check_run_args(
    args: Sequence[str], environ: Mapping[str, str]
) -> tuple[ConnParams, bool]:
    """For ``pgsurge ab``: an arm's arguments read as its run will read them
    (nothing printed; a ``PgsurgeError`` names the bad option), and where
    the run connects (in memory: the conninfo may hold a password)."""
    import io

    from pgsurge.cli.options import EarlyExit, parse_command_line
    from pgsurge.config import RunConfig

    try:
        cfg = parse_command_line(
            args, environ=environ, stderr=io.StringIO(), read_stdin=lambda: b""
        )
    except EarlyExit:
        raise UsageError("they end pgsurge before any run (e.g. -b list)") from None
    if not isinstance(cfg, RunConfig):
        raise UsageError("they ask for an initialization (-i), not a run")
    return cfg.conn, cfg.force_embedded


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
        _own_standard_streams()
    _allow_deep_expressions()
    try:
        status = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # stdout went away (``pgsurge --help | head -1``): a C program would
        # die of SIGPIPE quietly; so do we, and keep Python from complaining
        # again when it flushes stdout at exit
        _silence_stdout()
        return 128 + 13
    except OSError as e:
        # not EPIPE (above): stdout itself failed (ENOSPC, EBADF, EIO),
        # told once; anything else is a bug and keeps its traceback
        if not _stdout_failed():
            raise
        _silence_stdout()
        reason = os.strerror(e.errno) if e.errno else str(e)
        sys.stderr.write(
            f"{PROG}: error: could not write to standard output: {reason}\n"
        )
        sys.stderr.flush()
        return int(ExitStatus.ERROR)
    except PgsurgeError as e:
        _flush_quietly(sys.stdout)
        sys.stderr.write(e.format())
        sys.stderr.flush()
        return int(e.exit_status)
    except RunInterrupted as e:
        # the report of what ran is out (pgsurge.engine.interrupt): die of
        # the signal, as pgbench dies of it (in-process: 128 + signal)
        if own_process:
            _die_of_signal(e.signum)
        return 128 + e.signum
    except KeyboardInterrupt:
        # pgbench just dies of SIGINT. So does the program: a shell running
        # it in a loop stops the loop only when its child died of the
        # signal (an exit status of 130 reads as "handled it, go on").
        if own_process:
            _die_of_sigint()
        return 130
    return status


def _die_of_sigint() -> None:
    import signal

    _die_of_signal(signal.SIGINT)


def _die_of_signal(signum: int) -> None:
    import signal

    _flush_quietly(sys.stdout)
    _flush_quietly(sys.stderr)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _flush_quietly(stream: TextIO) -> None:
    try:
        stream.flush()
    except OSError:  # EPIPE, ENOSPC: told already, or nobody to tell
        _silence_stdout()


def _silence_stdout() -> None:
    """Send what stdout still buffers to /dev/null: Python flushes it again
    at exit, and a second failure would print "Exception ignored ..."."""
    if isinstance(sys.stdout, _ClosedStdout):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives until exit)
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _stdout_failed() -> bool:
    """Whether a write to stdout failed (a failed flush drops what was
    buffered, so flushing again cannot tell: the stream remembers)."""
    return getattr(sys.stdout, "failed", None) is not None


class _WatchedStdout(io.TextIOWrapper):
    """The program's stdout, which remembers that a write to it failed."""

    failed: OSError | None = None

    def write(self, s: str) -> int:
        try:
            return super().write(s)
        except OSError as e:
            self.failed = e
            raise

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as e:
            self.failed = e
            raise


class _ClosedStdout(io.TextIOBase):
    """``sys.stdout`` when the program started with descriptor 1 closed
    (Python leaves it None): every write fails as a write to a closed
    descriptor does, so the first output says so instead of an
    AttributeError. Commands that print nothing on stdout (``-i``) run."""

    failed: OSError | None = None

    def write(self, s: str) -> int:
        self.failed = OSError(errno.EBADF, os.strerror(errno.EBADF))
        raise self.failed

    def flush(self) -> None:
        pass  # nothing was written


class _ForgivingStderr(io.TextIOWrapper):
    """The program's stderr, whose write failures other than a closed pipe
    are dropped, as C's ``fprintf(stderr, …)`` drops them: a stderr that
    cannot be written (``2>/dev/full``, a log on a full disk) costs
    pgbench its messages, never the run, the report on stdout or the
    status. A closed pipe still raises (pgbench dies of SIGPIPE there,
    and so does :func:`main`)."""

    def write(self, s: str) -> int:
        try:
            return super().write(s)
        except BrokenPipeError:
            raise
        except OSError:
            return len(s)

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            raise
        except OSError:
            pass


class _ClosedStdin(io.RawIOBase):
    """``sys.stdin``'s source when the program started with descriptor 0
    closed (``<&-``): every read fails with EBADF, so ``-f -`` says
    ``could not read file "-": Bad file descriptor`` as pgbench does,
    not that the script is empty."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: object) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


def _own_standard_streams() -> None:
    """Descriptors 0 to 2, when closed at start, taken by /dev/null.

    Otherwise the next file, pipe or socket opened gets the number (the
    setup connection's socket would become "stdout", and a write to
    stdout would go to the server, as happens to pgbench). Then stdin
    reads nothing, stderr's messages are lost, and stdout fails as closed
    (:class:`_ClosedStdout`). Also: stderr writes bytes that are not
    UTF-8 (a script's Latin-1 byte) as they came, as pgbench echoes them,
    where Python would print ``\\udce9``.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # (the lowest free number: fd, unless taken)
                os.dup2(null, fd)
                os.close(null)
    if sys.stdin is None:
        # descriptor 0 is /dev/null now (above), but reading stdin (``-f -``)
        # must fail as pgbench's read of a closed descriptor does
        sys.stdin = io.TextIOWrapper(io.BufferedReader(_ClosedStdin()))
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    elif isinstance(sys.stdout, io.TextIOWrapper):
        out = sys.stdout
        out.flush()  # (empty: nothing was printed yet)
        sys.stdout = _WatchedStdout(
            out.buffer,
            encoding=out.encoding,
            errors=out.errors,
            line_buffering=out.line_buffering,
            write_through=out.write_through,
        )
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (lives until exit)
    elif isinstance(sys.stderr, io.TextIOWrapper):
        err = sys.stderr
        err.flush()
        sys.stderr = _ForgivingStderr(
            err.buffer,
            encoding=err.encoding,
            errors=_RAW_OR_ESCAPED,
            line_buffering=err.line_buffering,
            write_through=err.write_through,
        )
