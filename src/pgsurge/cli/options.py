"""argv → a validated ``InitConfig`` or ``RunConfig``, as pgbench 18.6 reads it.

The options are acted on one by one, in command-line order, exactly as
pgbench's ``main()`` does: values are checked as they come, scripts are
read and parsed at once (a script syntax error is reported before an error
in a later option), ``-b list`` and ``--show-script`` print and stop. Then
come, in pgbench's order: the default script, the total weight, ``-j``
clamped to ``-c``, the database name operand and "too many command-line
arguments", the init-vs-benchmarking mode rule, and the run-mode rules.
The first problem met is the one reported, with pgbench's words.

pgsurge's own options are extensions in the long option table (see
``getopt.py``: they never make a pgbench abbreviation ambiguous). The
report extras are run-mode options, rejected with ``-i`` like pgbench's:

* ``--percentiles[=LIST]`` (an optional value, as getopt_long's
  ``optional_argument``: only ``--percentiles=LIST`` gives one, the next
  word is never taken; alone it means 50,90,99,99.9);
* ``--client-cpu``; ``--extended-report`` is short for both, acting as if
  ``--percentiles --client-cpu`` stood in its place (a later option still
  overrides it, like any repeated option);
* ``--json=FILE``: ``-`` writes the document to stdout *instead of* the
  text report, which then goes to stderr so that stdout stays valid JSON.
  A FILE that clearly cannot be written is refused before connecting;
* ``--html=FILE``: the self-contained HTML report of the run (the same
  document rendered by ``report/html.py``), checked likewise; never ``-``;
* server insight (``pgsurge.insight``): ``--waits[=MS]`` (optional value
  like ``--percentiles``; 100 ms alone), ``--server-stats``,
  ``--idle-sessions=N[:idle|xact|snapshot]``, ``--monitor=DSN`` (where
  those connect: straight to the server behind a pooler),
  ``--pooler-admin=DSN`` (PgBouncer's console, per interval).

``dispatch`` prints errors and dispatches; word splitting is ``getopt``'s;
number parsing with C semantics is ``values``' and ``pgsurge.cnum``'s.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TextIO

from pgsurge.cli.getopt import Getopt, LongOption
from pgsurge.cli.rules import OptionState, init_config, run_config
from pgsurge.cli.values import (
    parse_dask_address,
    parse_idle_sessions,
    parse_int_option,
    parse_label,
    parse_monitor_dsn,
    parse_percentiles,
    parse_random_seed,
    parse_waits,
    parse_weight,
)
from pgsurge.cnum import INT32_MAX, atof, atoi, double_to_int64, wrap_int32
from pgsurge.config import (
    ConnParams,
    InitConfig,
    PartitionMethod,
    QueryMode,
    RunConfig,
    ScriptSource,
)
from pgsurge.errors import PROG, UsageError
from pgsurge.script import builtins
from pgsurge.script.sqlvars import valid_variable_name

SHORT_OPTIONS = "b:c:Cd:D:f:F:h:iI:j:lL:M:nNp:P:qrR:s:St:T:U:v"

#: pgbench 18.6's long option table, in its order (glibc lists ambiguous
#: candidates in table order), then pgsurge's own options.
LONG_OPTIONS: tuple[LongOption, ...] = (
    LongOption("builtin", True, "b"),
    LongOption("client", True, "c"),
    LongOption("connect", False, "C"),
    LongOption("dbname", True, "d"),
    LongOption("define", True, "D"),
    LongOption("file", True, "f"),
    LongOption("fillfactor", True, "F"),
    LongOption("host", True, "h"),
    LongOption("initialize", False, "i"),
    LongOption("init-steps", True, "I"),
    LongOption("jobs", True, "j"),
    LongOption("log", False, "l"),
    LongOption("latency-limit", True, "L"),
    LongOption("no-vacuum", False, "n"),
    LongOption("port", True, "p"),
    LongOption("progress", True, "P"),
    LongOption("protocol", True, "M"),
    LongOption("quiet", False, "q"),
    LongOption("report-per-command", False, "r"),
    LongOption("rate", True, "R"),
    LongOption("scale", True, "s"),
    LongOption("select-only", False, "S"),
    LongOption("skip-some-updates", False, "N"),
    LongOption("time", True, "T"),
    LongOption("transactions", True, "t"),
    LongOption("username", True, "U"),
    LongOption("vacuum-all", False, "v"),
    LongOption("unlogged-tables", False, "unlogged-tables"),
    LongOption("tablespace", True, "tablespace"),
    LongOption("index-tablespace", True, "index-tablespace"),
    LongOption("sampling-rate", True, "sampling-rate"),
    LongOption("aggregate-interval", True, "aggregate-interval"),
    LongOption("progress-timestamp", False, "progress-timestamp"),
    LongOption("log-prefix", True, "log-prefix"),
    LongOption("foreign-keys", False, "foreign-keys"),
    LongOption("random-seed", True, "random-seed"),
    LongOption("show-script", True, "show-script"),
    LongOption("partitions", True, "partitions"),
    LongOption("partition-method", True, "partition-method"),
    LongOption("failures-detailed", False, "failures-detailed"),
    LongOption("max-tries", True, "max-tries"),
    LongOption("verbose-errors", False, "verbose-errors"),
    LongOption("exit-on-abort", False, "exit-on-abort"),
    LongOption("debug", False, "debug"),
    # pgsurge extensions
    LongOption("init-jobs", True, "init-jobs", extension=True),
    LongOption("continue-on-error", False, "continue-on-error", extension=True),
    LongOption("embedded", False, "embedded", extension=True),
    # has_arg is ignored for the optional-value options: see _Getopt
    LongOption("percentiles", False, "percentiles", extension=True),
    LongOption("reconnect", False, "reconnect", extension=True),
    LongOption("client-cpu", False, "client-cpu", extension=True),
    LongOption("extended-report", False, "extended-report", extension=True),
    LongOption("json", True, "json", extension=True),
    LongOption("html", True, "html", extension=True),
    LongOption("waits", False, "waits", extension=True),
    LongOption("server-stats", False, "server-stats", extension=True),
    LongOption("idle-sessions", True, "idle-sessions", extension=True),
    LongOption("monitor", True, "monitor", extension=True),
    LongOption("pooler-admin", True, "pooler-admin", extension=True),
    LongOption("dask", True, "dask", extension=True),
    LongOption("dask-collect-logs", True, "dask-collect-logs", extension=True),
    LongOption("no-live", False, "no-live", extension=True),
    LongOption("store", False, "store", extension=True),
    LongOption("label", True, "label", extension=True),
    LongOption("host-stats", False, "host-stats", extension=True),
    LongOption("warmup", True, "warmup", extension=True),
)

#: long options with an optional value (getopt_long's optional_argument)
OPTIONAL_VALUE_OPTIONS = frozenset({"percentiles", "reconnect", "store", "waits"})

ALL_INIT_STEPS = "dtgGvpf"
#: --reconnect without a value: attempts per lost connection
DEFAULT_RECONNECT_ATTEMPTS = 10
MAX_SCRIPTS = 128
#: descriptors of pgsurge's own beyond pgbench's clients + 3 (see
#: check_open_files)
_OWN_FILES = 64
_HINT = f'Try "{PROG} --help" for more information.'


class EarlyExit(Exception):
    """``-b list`` and ``--show-script``: done, exit with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class MultiLineError(UsageError):
    """An error pgbench reports as several log lines, e.g. the random seed's."""

    def __init__(self, lines: Sequence[tuple[str, str]]) -> None:
        super().__init__(lines[0][1])
        self.lines = tuple(lines)

    def format(self) -> str:
        return "".join(f"{PROG}: {level}: {text}\n" for level, text in self.lines)


def _usage_error(message: str) -> UsageError:
    """An error followed by pgbench's "Try --help" hint."""
    return UsageError(message, hint=_HINT)


class _Getopt(Getopt):
    """``Getopt`` plus glibc's optional-argument long options.

    ``getopt.py`` knows only "no value" and "required value"; for the names
    in :data:`OPTIONAL_VALUE_OPTIONS` a value is ``--name=VALUE`` (even
    empty) and the option alone yields None, never taking the next word.
    Abbreviations and their errors stay ``Getopt``'s.
    """

    def _long_option(
        self, body: str, args: list[str], i: int
    ) -> tuple[str, str | None, int]:
        name, eq, attached = body.partition("=")
        option = self._find_long(name, body)
        if option.name in OPTIONAL_VALUE_OPTIONS:
            return option.key, attached if eq else None, i
        return super()._long_option(body, args, i)


class _CommandLine:
    """Reads the options one by one, acting on each like pgbench does."""

    def __init__(
        self,
        environ: Mapping[str, str],
        stderr: TextIO,
        read_stdin: Callable[[], bytes],
    ) -> None:
        self.environ = environ
        self.stderr = stderr
        self.read_stdin = read_stdin
        self.st = OptionState()

    # -- helpers ----------------------------------------------------------

    def set_seed(self, value: str | None, origin: str) -> None:
        seed = parse_random_seed(value)
        if seed is None:
            assert value is not None
            raise MultiLineError(
                [
                    ("error", f'unrecognized random seed option "{value}"'),
                    ("detail", 'Expecting an unsigned integer, "time" or "rand".'),
                    ("error", f"error while setting random seed from {origin}"),
                ]
            )
        if value is not None:
            self.stderr.write(f"{PROG}: setting random seed to {seed}\n")
            self.st.random_seed_explicit = True
        self.st.random_seed = seed

    def add_script(self, source: ScriptSource) -> None:
        """Parse and record a script, with pgbench's checks in its order:
        syntax and "empty command list" (while parsing), the script count,
        then the ``\\if`` structure."""
        from pgsurge.script.compile import check_conditionals, compile_script

        parsed = compile_script(source.description, source.text, check_structure=False)
        if len(self.st.scripts) >= MAX_SCRIPTS:
            raise UsageError(f"at most {MAX_SCRIPTS} SQL scripts are allowed")
        check_conditionals(parsed.source, parsed.commands)
        self.st.scripts.append(replace(source, parsed=parsed))
        self.st.parsed.append(parsed)

    def add_builtin(self, name: str, weight: int) -> None:
        """pgbench's builtins first, by pgbench's prefix rule (so every
        name pgbench accepts keeps its meaning), then the bundled Python
        workloads."""
        try:
            b = builtins.find_builtin(name)
        except builtins.BuiltinLookupError:
            if any(b.name.startswith(name) for b in builtins.BUILTIN_SCRIPTS):
                raise  # ambiguous among pgbench's: pgbench's error
            from pgsurge.workloads import bundled

            found = bundled.find_bundled(name)
            if isinstance(found, bundled.BundledWorkload):
                self.add_workload(_load_workload(found.path, found.name), weight)
                return
            if found:
                raise UsageError(
                    f"ambiguous builtin name: {len(found)} builtin scripts found"
                    f' for prefix "{name}"',
                    detail="Workloads: " + ", ".join(b.name for b in found),
                ) from None
            raise
        source = ScriptSource(
            b.name, b.text, weight, builtin=True, description=b.description
        )
        self.add_script(source)
        self.st.benchmarking_option_set = True

    def add_file(self, name: str, weight: int) -> None:
        if name.endswith(".py"):
            self.add_workload(_load_workload(name, None), weight)
            return
        text = _read_script_file(name, self.read_stdin)
        self.add_script(ScriptSource(name, text, weight, description=name))
        self.st.benchmarking_option_set = True

    def add_workload(self, workload: Any, weight: int) -> None:
        """A Python workload: one script per transaction, weighted by its
        weight times ``weight``."""
        for tx in workload.transactions:
            if len(self.st.scripts) >= MAX_SCRIPTS:
                raise UsageError(f"at most {MAX_SCRIPTS} SQL scripts are allowed")
            self.st.scripts.append(
                ScriptSource(
                    tx.source,
                    "",
                    weight * tx.weight,
                    description=tx.source,
                    parsed=tx,
                    python=True,
                )
            )
        self.st.workloads.append(workload)

    def check_open_files(self) -> None:
        """pgbench needs clients + 3 file descriptors and raises the limit."""
        try:
            import resource
        except ImportError:  # pragma: no cover - not on POSIX
            return
        needed = wrap_int32(self.st.clients + 3)
        wanted = needed % (1 << 64)  # C converts the int to an unsigned rlim_t
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        hint = (
            "Reduce number of clients, or use limit/ulimit to increase the system"
            " limit."
        )
        if hard != resource.RLIM_INFINITY and hard < wanted:
            raise UsageError(
                f"need at least {needed} open files, but system limit is {hard}",
                hint=hint,
            )
        if soft != resource.RLIM_INFINITY and soft < wanted:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            except (OSError, ValueError, OverflowError) as e:
                reason = getattr(e, "strerror", None) or "Invalid argument"
                raise UsageError(
                    f"need at least {needed} open files, but couldn't raise the "
                    f"limit: {reason}",
                    hint=hint,
                ) from None
        # pgbench's clients + 3 is one process's count; pgsurge's workers
        # also hold pipes to the parent, an epoll instance, a wake-up pipe
        # and -l files, and the parent the monitor's connections: room for
        # those too where the hard limit allows (best effort, no message)
        roomy = self.st.clients + _OWN_FILES
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY:
            roomy = min(roomy, hard)
        if soft != resource.RLIM_INFINITY and soft < roomy:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (roomy, hard))

    # -- the option loop --------------------------------------------------

    def handle(self, key: str, value: str | None) -> None:
        st = self.st
        if key in OPTIONAL_VALUE_OPTIONS:
            self.handle_optional(key, value)
            return
        arg = value if value is not None else ""
        match key:
            case "b":
                if arg == "list":
                    from pgsurge.workloads.bundled import list_lines

                    # pgbench's list, then the bundled Python workloads
                    self.stderr.write(builtins.list_text()[:-1] + list_lines() + "\n")
                    raise EarlyExit(0)
                name, weight = parse_weight(arg)
                self.add_builtin(name, weight)
            case "c":
                st.benchmarking_option_set = True
                st.clients = parse_int_option(arg, "-c/--client", 1, INT32_MAX)
                self.check_open_files()
            case "C":
                st.benchmarking_option_set = True
                st.connect_each_tx = True
            case "d":
                st.dbname = arg
            case "D":
                st.benchmarking_option_set = True
                name, eq, val = arg.partition("=")
                if not eq or not name or not val:
                    raise UsageError(f'invalid variable definition: "{arg}"')
                if not valid_variable_name(name):
                    raise UsageError(f'option: invalid variable name: "{name}"')
                st.defines.append((name, val))
            case "f":
                name, weight = parse_weight(arg)
                self.add_file(name, weight)
            case "F":
                st.initialization_option_set = True
                st.fillfactor = parse_int_option(arg, "-F/--fillfactor", 10, 100)
            case "h":
                st.host = arg
            case "i":
                st.init_mode = True
            case "I":
                _check_init_steps(arg)
                st.init_steps = arg
                st.initialization_option_set = True
            case "j":
                st.benchmarking_option_set = True
                st.jobs = parse_int_option(arg, "-j/--jobs", 1, INT32_MAX)
            case "l":
                st.benchmarking_option_set = True
                st.log = True
            case "L":
                limit_ms = atof(arg)
                if limit_ms <= 0.0:  # NaN passes, as in C
                    raise UsageError(f'invalid latency limit: "{arg}"')
                st.benchmarking_option_set = True
                st.latency_limit_us = double_to_int64(limit_ms * 1000)
                # the limit pgbench uses is that int64 (INT64_MIN for inf,
                # NaN or a huge value: then every transaction is "late")
                st.latency_limit_ms = st.latency_limit_us / 1000.0
            case "M":
                st.benchmarking_option_set = True
                try:
                    st.query_mode = QueryMode(arg)
                except ValueError:
                    raise UsageError(f'invalid query mode (-M): "{arg}"') from None
            case "n":
                st.no_vacuum = True
            case "N":
                self.add_builtin("simple-update", 1)
                st.benchmarking_option_set = True
            case "p":
                st.port = arg
            case "P":
                st.benchmarking_option_set = True
                st.progress = parse_int_option(arg, "-P/--progress", 1, INT32_MAX)
            case "q":
                st.initialization_option_set = True
                st.quiet = True
            case "r":
                st.benchmarking_option_set = True
                st.report_per_command = True
            case "R":
                rate = atof(arg)
                st.benchmarking_option_set = True
                if rate <= 0.0:
                    raise UsageError(f'invalid rate limit: "{arg}"')
                # pgbench throttles when 1e6 / rate µs is not 0: "-R inf"
                # is accepted and means no rate limit
                st.rate = rate if 1e6 / rate != 0.0 else None
            case "s":
                st.scale_given = True
                st.scale = parse_int_option(arg, "-s/--scale", 1, INT32_MAX)
            case "S":
                self.add_builtin("select-only", 1)
                st.benchmarking_option_set = True
            case "t":
                st.benchmarking_option_set = True
                st.transactions = parse_int_option(
                    arg, "-t/--transactions", 1, INT32_MAX
                )
            case "T":
                st.benchmarking_option_set = True
                st.duration = parse_int_option(arg, "-T/--time", 1, INT32_MAX)
            case "U":
                st.user = arg
            case "v":
                st.benchmarking_option_set = True
                st.vacuum_all = True
            case _:
                self.handle_long(key, arg)

    def handle_optional(self, key: str, value: str | None) -> None:
        """Options whose value may be absent (None), unlike an empty one."""
        st = self.st
        match key:
            case "percentiles":
                st.benchmarking_option_set = True
                st.percentiles = parse_percentiles(value)
            case "reconnect":
                st.benchmarking_option_set = True
                st.reconnect = (
                    DEFAULT_RECONNECT_ATTEMPTS
                    if value is None
                    else parse_int_option(value, "--reconnect", 1, 1000)
                )
            case "waits":
                st.benchmarking_option_set = True
                st.waits_ms = parse_waits(value)
            case "store":
                st.benchmarking_option_set = True
                if value == "":
                    raise UsageError(
                        'invalid value "" for option --store',
                        detail="Expecting a file name or a postgresql:// URI.",
                    )
                st.store = value or ""
            case _:  # pragma: no cover - the table and this switch disagree
                raise AssertionError(f"unhandled option {key}")

    def handle_long(self, key: str, arg: str) -> None:
        st = self.st
        match key:
            case "unlogged-tables":
                st.initialization_option_set = True
                st.unlogged_tables = True
            case "tablespace":
                st.initialization_option_set = True
                st.tablespace = arg
            case "index-tablespace":
                st.initialization_option_set = True
                st.index_tablespace = arg
            case "sampling-rate":
                st.benchmarking_option_set = True
                st.sampling_rate = atof(arg)
                if st.sampling_rate <= 0.0 or st.sampling_rate > 1.0:
                    raise UsageError(f'invalid sampling rate: "{arg}"')
            case "aggregate-interval":
                st.benchmarking_option_set = True
                st.aggregate_interval = parse_int_option(
                    arg, "--aggregate-interval", 1, INT32_MAX
                )
            case "progress-timestamp":
                st.progress_timestamp = True
                st.benchmarking_option_set = True
            case "log-prefix":
                st.benchmarking_option_set = True
                st.log_prefix = arg
            case "foreign-keys":
                st.initialization_option_set = True
                st.foreign_keys = True
            case "random-seed":
                st.benchmarking_option_set = True
                self.set_seed(arg, "--random-seed option")
            case "show-script":
                self.stderr.write(_show_script(arg))
                raise EarlyExit(0)
            case "partitions":
                st.initialization_option_set = True
                st.partitions = parse_int_option(arg, "--partitions", 0, INT32_MAX)
            case "partition-method":
                st.initialization_option_set = True
                method = arg.lower() if arg.isascii() else arg
                if method not in ("range", "hash"):
                    raise UsageError(
                        'invalid partition method, expecting "range" or "hash",'
                        f' got: "{arg}"'
                    )
                st.partition_method = PartitionMethod(method)
            case "failures-detailed":
                st.benchmarking_option_set = True
                st.failures_detailed = True
            case "max-tries":
                tries = atoi(arg)
                if tries < 0:
                    raise UsageError(f'invalid number of maximum tries: "{arg}"')
                st.benchmarking_option_set = True
                st.max_tries = tries
            case "verbose-errors":
                st.benchmarking_option_set = True
                st.verbose_errors = True
            case "exit-on-abort":
                st.benchmarking_option_set = True
                st.exit_on_abort = True
            case "debug":
                st.debug = True
            case "init-jobs":
                st.initialization_option_set = True
                st.init_jobs = parse_int_option(arg, "--init-jobs", 1, INT32_MAX)
            case "continue-on-error":
                st.benchmarking_option_set = True
                st.continue_on_error = True
            case "embedded":
                st.force_embedded = True
            case "client-cpu":
                st.benchmarking_option_set = True
                st.client_cpu = True
            case "extended-report":
                self.handle_optional("percentiles", None)
                self.handle_long("client-cpu", "")
            case "json":
                st.benchmarking_option_set = True
                st.json_path = arg
            case "html":
                st.benchmarking_option_set = True
                st.html_path = arg
            case "server-stats":
                st.benchmarking_option_set = True
                st.server_stats = True
            case "idle-sessions":
                st.benchmarking_option_set = True
                st.idle_sessions, st.idle_mode = parse_idle_sessions(arg)
            case "monitor":
                st.benchmarking_option_set = True
                st.monitor_dsn = parse_monitor_dsn(arg)
            case "pooler-admin":
                st.benchmarking_option_set = True
                st.pooler_admin_dsn = parse_monitor_dsn(arg, "--pooler-admin")
            case "dask":
                st.benchmarking_option_set = True
                st.dask = parse_dask_address(arg)
            case "dask-collect-logs":
                st.benchmarking_option_set = True
                st.dask_collect_logs = arg
            case "no-live":
                st.benchmarking_option_set = True
                st.no_live = True
            case "label":
                st.benchmarking_option_set = True
                label = parse_label(arg)
                if any(k == label[0] for k, _ in st.labels):
                    # one value per key in the store: which would win?
                    raise UsageError(
                        f'invalid value "{arg}" for option --label',
                        detail=f'The key "{label[0]}" is given twice.',
                    )
                st.labels.append(label)
            case "host-stats":
                st.benchmarking_option_set = True
                st.host_stats = True
            case "warmup":
                st.benchmarking_option_set = True
                st.warmup = parse_int_option(arg, "--warmup", 0, INT32_MAX)
            case _:  # pragma: no cover - the table and this switch disagree
                raise AssertionError(f"unhandled option {key}")

    # -- after the loop ---------------------------------------------------

    def finish(self, operands: list[str]) -> InitConfig | RunConfig:
        st = self.st
        if not st.scripts and not st.init_mode:
            self.add_builtin("tpcb-like", 1)
            st.benchmarking_option_set = True
        if st.query_mode is not QueryMode.SIMPLE:
            from pgsurge.script.compile import check_query_mode

            for parsed in st.parsed:
                check_query_mode(parsed, st.query_mode)
        if sum(s.weight for s in st.scripts) == 0 and not st.init_mode:
            raise UsageError("total script weight must not be zero")
        st.jobs = min(st.jobs, st.clients)
        if st.store == "" and st.dbname is None and operands:
            _check_store_operand(operands[0])
        if st.dbname is None and operands:
            st.dbname = operands.pop(0)
        if operands:
            raise _usage_error(
                f'too many command-line arguments (first is "{operands[0]}")'
            )
        conn = ConnParams(host=st.host, port=st.port, user=st.user, dbname=st.dbname)
        if st.init_mode:
            return init_config(st, conn)
        if st.initialization_option_set:
            raise UsageError(
                "some of the specified options cannot be used in benchmarking mode"
            )
        if st.store is None and self.environ.get("PGSURGE_STORE"):
            # the environment's store: every run is stored (CI, a nightly job)
            st.store = self.environ["PGSURGE_STORE"]
        return run_config(st, conn)


def _check_store_operand(dbname: str) -> None:
    """``--store PATH`` (a space, not ``=``): the optional value is not
    taken, so PATH became the database name, and the run would fail much
    later with "database ... does not exist". A database name that looks
    like a file (a ``/``, or a store's suffix), not a URI or conninfo, is
    refused here with the spelling that works."""
    if "=" in dbname or dbname.startswith(("postgresql:", "postgres:")):
        return
    if "/" in dbname or dbname.endswith((".sqlite", ".sqlite3", ".db")):
        raise UsageError(
            f'the database name "{dbname}" looks like a results store file',
            hint=f'Write --store={dbname} (--store takes its value after "=").',
        )


def _show_script(name: str) -> str:
    """--show-script: a pgbench builtin (by pgbench's rule), else the
    source of a bundled Python workload."""
    try:
        return builtins.show_text(builtins.find_builtin(name))
    except builtins.BuiltinLookupError:
        if any(b.name.startswith(name) for b in builtins.BUILTIN_SCRIPTS):
            raise
        from pgsurge.workloads import bundled

        found = bundled.find_bundled(name)
        if not isinstance(found, bundled.BundledWorkload):
            raise
        with open(found.path, encoding="utf-8") as f:
            return f"-- {found.name}: {found.description}\n{f.read()}\n"


def _load_workload(path: str, name: str | None) -> Any:
    """A Python workload file, loaded (``pgsurge.workloads.loader``)."""
    from pgsurge.workloads.loader import load_file

    return load_file(path, name=name)


def _check_init_steps(steps: str) -> None:
    if not steps:
        raise UsageError("no initialization steps specified")
    for step in steps:
        if step not in ALL_INIT_STEPS + " ":
            raise UsageError(
                f'unrecognized initialization step "{step}"',
                detail=f'Allowed step characters are: "{ALL_INIT_STEPS}".',
            )


def _read_script_file(name: str, read_stdin: Callable[[], bytes]) -> str:
    """The file's text, read as pgbench does (``-`` is stdin).

    pgbench opens with ``fopen`` (so a directory opens, then fails to read)
    and parses up to the first NUL byte. Bytes that are not UTF-8 survive
    as surrogate escapes.
    """
    if name == "-":
        try:
            data = read_stdin()
        except OSError as e:
            raise UsageError(f'could not read file "{name}": {e.strerror}') from None
    else:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError as e:
            raise UsageError(f'could not open file "{name}": {e.strerror}') from None
        try:
            # the whole file in one read where its size is known (a 4 MB
            # script in 64 kB reads cost their copies), on to the end
            # whatever it is (a pipe, a file that grew)
            chunks = []
            size = max(os.fstat(fd).st_size + 1, 1 << 16)
            while chunk := os.read(fd, size):
                chunks.append(chunk)
                size = 1 << 16
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except OSError as e:
            raise UsageError(f'could not read file "{name}": {e.strerror}') from None
        finally:
            os.close(fd)
    nul = data.find(b"\0")
    if nul >= 0:
        data = data[:nul]
    return data.decode("utf-8", "surrogateescape")


def parse_command_line(
    args: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
    read_stdin: Callable[[], bytes] | None = None,
) -> InitConfig | RunConfig:
    """Options (argv without the program name) → validated config.

    Raises :class:`PgsurgeError` for anything pgbench would reject before
    connecting, and :class:`EarlyExit` after ``-b list``/``--show-script``.
    Like pgbench it prints "setting random seed to N" on ``stderr`` when
    the seed is set explicitly.
    """
    env = os.environ if environ is None else environ
    err = sys.stderr if stderr is None else stderr
    cl = _CommandLine(env, err, read_stdin or (lambda: sys.stdin.buffer.read()))
    cl.set_seed(
        env.get("PGBENCH_RANDOM_SEED"), "PGBENCH_RANDOM_SEED environment variable"
    )
    getopt = _Getopt(
        args,
        SHORT_OPTIONS,
        LONG_OPTIONS,
        posixly_correct="POSIXLY_CORRECT" in env,
    )
    for key, value in getopt:
        cl.handle(key, value)
    return cl.finish(getopt.operands)
