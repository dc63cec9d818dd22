"""Differential tests of benchmark runs: pgsurge against the real pgbench 18.6.

Both programs run with the same arguments against the same fresh database
(initialized by the real ``pgbench -i -s 1``). Their reports must have the
same lines in the same order once numbers are masked, the same exit
status, and the same stderr messages (program name normalized, numbers
masked, compared as multisets since clients interleave). Where runs are
deterministic (one client, ``--random-seed``), counts are compared
exactly. The report's accounting identity is checked on every ``-t`` run:
processed + failed (+ skipped) = clients x transactions.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.fix_run import Loop, Outcome, run_pgbench, run_pgsurge, tool_env

pytestmark = pytest.mark.server


@pytest.fixture
def both(bench_db: str, pgbench_bin: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    def run(
        *args: str, dsn: str | None = None, loop: Loop = "auto", **env: str
    ) -> tuple[Outcome, Outcome]:
        target = dsn or bench_db
        ref = run_pgbench(pgbench_bin, args, target, cwd=tmp_path, env=env)
        ours = run_pgsurge(args, target, cwd=tmp_path, env=env, loop=loop)
        return ref, ours

    return run


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def assert_same(ref: Outcome, ours: Outcome, *, messages: bool = True) -> None:
    assert ours.status == ref.status, (ref.stderr, ours.stderr)
    assert ours.report == ref.report, f"pgbench:\n{ref.stdout}\npgsurge:\n{ours.stdout}"
    if messages:
        assert ours.messages == ref.messages, (ref.stderr, ours.stderr)


def assert_identity(out: Outcome) -> None:
    """-t runs: processed + failed + skipped = clients x transactions."""
    processed, total = (
        int(x)
        for x in out.number("number of transactions actually processed:").split("/")
    )
    failed = int(out.number("number of failed transactions:").split()[0])
    skipped = 0
    if "number of transactions skipped:" in out.stdout:
        skipped = int(out.number("number of transactions skipped:").split()[0])
    assert processed + failed + skipped == total, out.stdout


# -- builtins and query modes -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("-t", "20", "-c", "2"),
        ("-S", "-M", "extended", "-t", "20", "-c", "3", "-j", "2"),
        ("-N", "-M", "prepared", "-t", "20", "-c", "2", "-j", "2"),
        ("-b", "tpcb-like", "-M", "prepared", "-t", "10", "-c", "2", "-r"),
        ("-S", "-C", "-t", "5", "-c", "2"),
        ("-S", "-n", "-v", "-t", "5", "-s", "7"),
    ],
    ids=[
        "tpcb-simple",
        "select-extended",
        "simple-update-prepared",
        "tpcb-r",
        "connect",
        "vacuum-all-scale",
    ],
)
def test_builtin_runs(both, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    ref, ours = both(*args)
    assert ref.status == 0
    assert_same(ref, ours)
    assert_identity(ours)
    assert ours.number("scaling factor:") == "1"


def test_banner_and_vacuum_messages(both) -> None:  # type: ignore[no-untyped-def]
    ref, ours = both("-S", "-t", "2")
    assert re.fullmatch(r"pgsurge \(\S+, server 18\.\d+\)", ours.stdout.splitlines()[0])
    assert "starting vacuum...end.\n" in ours.stderr
    assert ours.messages == ref.messages


def test_weighted_scripts_same_choices(both) -> None:  # type: ignore[no-untyped-def]
    # one client: pgbench's script choice is a pure function of the seed
    ref, ours = both(
        "-b",
        "select-only@3",
        "-b",
        "simple-update@1",
        "-t",
        "40",
        "-c",
        "1",
        "--random-seed",
        "12345",
        "-n",
    )
    assert_same(ref, ours)
    for out in (ref, ours):
        assert "SQL script 2: <builtin: simple update>" in out.stdout
    ref_counts = re.findall(r" - (\d+) transactions", ref.stdout)
    ours_counts = re.findall(r" - (\d+) transactions", ours.stdout)
    assert ours_counts == ref_counts


# -- custom scripts: meta commands, \gset/\aset, conditionals ----------------

META_SCRIPT = """\
\\set n random(1, 100)
\\set half :n / 2
SELECT :n AS got, :n * 2 AS twice \\gset g_
\\if :g_got <> :n
SELECT 1/0;
\\elif :g_twice = 2 * :n
SELECT 'ok' AS branch \\gset
\\else
SELECT 1/0;
\\endif
SELECT 1 AS one \\; SELECT 2 AS two \\aset
\\if :one + :two = 3
\\sleep 1 ms
\\else
SELECT 1/0;
\\endif
\\setshell shellval echo :n
\\shell true
\\set check :shellval - :n
SELECT :check = 0 AS fine \\gset
\\if :fine
\\else
SELECT 1/0;
\\endif
"""


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_meta_commands(both, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "meta.sql", META_SCRIPT)
    ref, ours = both("-n", "-f", path, "-M", mode, "-t", "10", "-c", "2", "-r")
    # a \; compound cannot be a prepared statement: outside simple mode
    # pgbench aborts every client at the \aset, and so must pgsurge
    assert ref.status == (0 if mode == "simple" else 2), ref.stderr
    assert_same(ref, ours)
    if mode == "simple":
        assert_identity(ours)


def test_deep_expressions(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Long operator chains and deep nesting, which pgbench evaluates (the
    default Python recursion limit stopped pgsurge at a few hundred terms)."""
    text = (
        "\\set y random(1, 3)\n"
        f"\\set x {' + '.join([':y'] * 2000)}\n"
        f"\\set z {'-' * 2999}(:y * 2)\n"
        f"\\if :x <> 2000 * :y or {'(' * 3000}:z{')' * 3000} <> -2 * :y\n"
        "SELECT 1/0;\n"
        "\\endif\n"
    )
    path = script(tmp_path, "deep.sql", text)
    for mode in ("simple", "prepared"):
        ref, ours = both("-n", "-f", path, "-M", mode, "-t", "5", "-c", "2")
        assert ref.status == 0, ref.stderr
        assert_same(ref, ours)
        assert_identity(ours)


PIPELINE_SCRIPT = """\
\\set aid random(1, 100000)
\\startpipeline
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT 1;
\\syncpipeline
SELECT 2;
\\endpipeline
"""


@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_pipeline(both, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "pipe.sql", PIPELINE_SCRIPT)
    ref, ours = both("-n", "-f", path, "-M", mode, "-t", "20", "-c", "2", "-r")
    assert ref.status == 0, ref.stderr
    assert_same(ref, ours)
    assert_identity(ours)


def test_pipeline_simple_mode_aborts(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "pipe.sql", PIPELINE_SCRIPT)
    ref, ours = both("-n", "-f", path, "-t", "2", "-c", "1")
    assert ref.status == 2
    assert_same(ref, ours)


# -- rate, latency limit, progress -----------------------------------------------


def test_rate_and_latency_limit(both) -> None:  # type: ignore[no-untyped-def]
    ref, ours = both(
        "-S", "-n", "-R", "300", "-L", "20", "-t", "30", "-c", "2", "-j", "2"
    )
    assert_same(ref, ours)
    assert_identity(ours)
    assert "rate limit schedule lag: avg" in ours.stdout


def test_rate_skipping(both) -> None:  # type: ignore[no-untyped-def]
    # a schedule far beyond what a sleeping script can follow: slots are late
    # by more than -L and get skipped
    ref, ours = both(
        "-n",
        "-b",
        "select-only",
        "-R",
        "5000",
        "-L",
        "1",
        "-t",
        "200",
        "-c",
        "1",
    )
    assert_same(ref, ours)
    assert_identity(ours)


@pytest.mark.slow
def test_progress(both) -> None:  # type: ignore[no-untyped-def]
    ref, ours = both("-S", "-n", "-P", "1", "-T", "2", "-c", "2", "-j", "2")
    assert_same(ref, ours, messages=False)
    assert ours.progress, ours.stderr
    assert ours.progress <= ref.progress | {
        "progress: N s, N tps, lat N ms stddev N, N failed"
    }


# -- errors, retries, aborts -------------------------------------------------------

SERIALIZATION_SCRIPT = """\
\\set id random(1, 2)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM ser WHERE id = :id;
SELECT pg_sleep(0.001);
UPDATE ser SET v = v + 1 WHERE id = :id;
END;
"""


@pytest.fixture
def ser_table(bench_db: str) -> str:
    with psycopg.connect(bench_db, autocommit=True) as conn:
        conn.execute("create table ser(id int primary key, v int)")
        conn.execute("insert into ser values (1, 0), (2, 0)")
    return bench_db


def test_serialization_retries(both, tmp_path: Path, ser_table: str) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "ser.sql", SERIALIZATION_SCRIPT)
    args = (
        "-n",
        "-f",
        path,
        "-c",
        "4",
        "-t",
        "15",
        "--max-tries=3",
        "--failures-detailed",
        "-r",
    )
    ref, ours = both(*args)
    assert ref.status == 0, ref.stderr
    assert_same(ref, ours)
    assert_identity(ours)
    retried = int(ours.number("number of transactions retried:").split()[0])
    assert retried > 0, ours.stdout  # the script does provoke 40001


def test_serialization_verbose_errors(both, tmp_path: Path, ser_table: str) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "ser.sql", SERIALIZATION_SCRIPT)
    ref, ours = both("-n", "-f", path, "-c", "4", "-t", "10", "--verbose-errors")
    assert ref.status == 0
    assert ours.status == 0
    assert ours.report == ref.report
    shapes = {
        "pgsurge: client N got an error in command N (SQL) of script N; "
        "ERROR: could not serialize access due to concurrent update",
        "pgsurge: client N ends the failed transaction (try N/N)",
    }
    assert set(ours.messages) <= shapes
    assert set(ours.messages) == set(ref.messages)


def test_client_error_aborts_only_that_client(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = script(
        tmp_path,
        "err.sql",
        "SELECT 1;\n\\if :client_id = 1\nSELECT * FROM no_such_table;\n\\endif\n",
    )
    ref, ours = both("-n", "-f", path, "-t", "5", "-c", "3")
    assert ref.status == 2
    assert_same(ref, ours)
    # the other two clients did all their transactions
    assert ours.number("number of transactions actually processed:") == "10/15"
    assert ours.stderr.endswith(
        "pgsurge: error: Run was aborted; the above results are incomplete.\n"
    )


def test_open_transaction_at_end_aborts(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "open.sql", "BEGIN;\nSELECT 1;\n")
    ref, ours = both("-n", "-f", path, "-t", "3", "-c", "2")
    assert ref.status == 2
    assert_same(ref, ours)


def test_meta_command_errors(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = script(
        tmp_path, "bad.sql", "\\set x 1 / (:client_id - :client_id)\nSELECT 1;\n"
    )
    ref, ours = both("-n", "-f", path, "-t", "2", "-c", "2")
    assert ref.status == 2
    assert_same(ref, ours)
    gset = script(
        tmp_path,
        "gset.sql",
        "SELECT 1 AS a, 2 AS b FROM generate_series(1, 2) \\gset\n",
    )
    ref, ours = both("-n", "-f", gset, "-t", "2", "-c", "1")
    assert ref.status == 2
    assert_same(ref, ours)


def test_exit_on_abort(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = script(
        tmp_path,
        "err.sql",
        "\\if :client_id = 0\nSELECT * FROM no_such_table;\n\\endif\n"
        "SELECT pg_sleep(0.05);\n",
    )
    ref, ours = both(
        "-n", "-f", path, "-t", "100", "-c", "3", "-j", "3", "--exit-on-abort"
    )
    assert ref.status == 2
    assert ours.status == 2
    assert ours.stdout.count("\n") == ref.stdout.count("\n") == 1  # banner only
    assert ours.messages == ref.messages


# -- the pre-run steps --------------------------------------------------------------


def drop_tables(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "drop table pgbench_accounts, pgbench_branches, pgbench_history,"
            " pgbench_tellers"
        )
    return dsn


def test_custom_script_without_tables(both, bench_db: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = script(tmp_path, "one.sql", "SELECT 1;\n")
    ref, ours = both("-f", path, "-t", "1", "-v", dsn=drop_tables(bench_db))
    assert ref.status == 0
    assert_same(ref, ours)
    assert "(ignoring this error and continuing anyway)" in ours.stderr


def test_builtin_without_tables(both, bench_db: str) -> None:  # type: ignore[no-untyped-def]
    ref, ours = both("-S", "-t", "1", dsn=drop_tables(bench_db))
    assert ref.status == 1
    assert ours.status == 1
    assert ours.messages == ref.messages
    assert '("pgsurge -i")' in ours.stderr


def test_scale_option_warning(both) -> None:  # type: ignore[no-untyped-def]
    ref, ours = both("-S", "-s", "5", "-t", "1", "-n")
    assert_same(ref, ours)
    assert (
        "pgsurge: warning: scale option ignored, using count from "
        "pgbench_branches table (1)" in ours.stderr
    )


def test_connection_failure(both, bench_db: str) -> None:  # type: ignore[no-untyped-def]
    bad = bench_db + " user=no_such_user_xyz"
    ref, ours = both("-S", "-t", "1", dsn=bad)
    assert ref.status == 1
    assert ours.status == 1
    assert ours.messages == ref.messages


@pytest.mark.parametrize(
    "suffix",
    [" foo=bar", " dbname='unterminated"],
    ids=["unknown-option", "unterminated-quote"],
)
def test_unparsable_conninfo(both, bench_db: str, suffix: str) -> None:  # type: ignore[no-untyped-def]
    """A conninfo in the database name that libpq cannot parse: its message
    and pgbench's "could not create connection for setup", not a traceback."""
    ref, ours = both("-S", "-t", "1", dsn=bench_db + suffix)
    assert ref.status == 1
    assert ours.status == 1
    assert ours.messages == ref.messages, (ref.stderr, ours.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ("-L", "inf"),
        ("-L", "nan"),
        ("-L", "1e300", "-P", "1", "-l"),
        ("-R", "inf"),
        ("-R", "inf", "-L", "5", "-l"),
    ],
    ids=["L-inf", "L-nan", "L-huge", "R-inf", "R-inf-L"],
)
def test_out_of_range_rate_and_limit(both, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """Values pgbench accepts but turns into odd settings: an -L beyond
    int64 µs is INT64_MIN (every transaction is late; it crashed pgsurge),
    -R inf is no rate limit (pgsurge reported a schedule lag)."""
    ref, ours = both("-n", "-S", "-t", "3", *args)
    assert ref.status == 0, ref.stderr
    assert_same(ref, ours)
    assert_identity(ours)
    if args[0] == "-L":
        # "-9223372036854776.0 ms latency limit: 3/3 (100.000%)"
        limit = "number of transactions above the"
        assert ours.number(limit) == ref.number(limit)


def _sessions(dsn: str) -> int:
    """Other sessions connected to the database of ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _wait_sessions(dsn: str, wanted: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _sessions(dsn) == wanted:
            return True
        time.sleep(0.1)
    return False


def _default_signals() -> None:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize(
    "sig",
    [
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGINT,
        pytest.param(
            signal.SIGKILL,
            marks=pytest.mark.skipif(
                not sys.platform.startswith("linux"), reason="prctl is Linux's"
            ),
        ),
    ],
)
def test_killed_by_signal(bench_db: str, pgbench_bin: Path, sig: int) -> None:
    """A signal sent to the program alone (``kill``, ``timeout``) ends the
    whole run: pgbench dies of it with its threads. pgsurge's worker
    processes used to run on, orphaned, to the end of -T; and on SIGINT
    it exited 130 instead of dying of the signal."""
    args = ["-n", "-S", "-T", "60", "-c", "2", "-j", "2", bench_db]
    for cmd in ([str(pgbench_bin), *args], [sys.executable, "-m", "pgsurge", *args]):
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=tool_env(),
            # the programs' own reaction, not the harness's: under nohup (or
            # as a background job of a script) SIGHUP (SIGINT) is ignored,
            # and an ignored signal stays ignored across exec
            preexec_fn=_default_signals,
        )
        try:
            assert _wait_sessions(bench_db, 2, 20), cmd
            proc.send_signal(sig)
            assert proc.wait(20) == -sig, cmd
            assert _wait_sessions(bench_db, 0, 10), cmd
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("loop", ["c", "python"])
def test_server_notices_printed(both, tmp_path: Path, loop: Loop) -> None:  # type: ignore[no-untyped-def]
    """pgbench keeps libpq's default notice processor: a NOTICE or WARNING
    raised during the run goes to stderr as the server sent it. psycopg's
    PGconn drops them unless a handler is set."""
    path = script(
        tmp_path,
        "notice.sql",
        "DO $$ BEGIN RAISE NOTICE 'hello %', 1; RAISE WARNING 'careful'; END $$;\n"
        "SELECT 1;\n",
    )
    ref, ours = both("-n", "-f", path, "-t", "2", "-c", "2", loop=loop)
    assert ref.messages["NOTICE: hello N"] == 4
    assert_same(ref, ours)


# -- the run engine's edge cases (audit against pgbench 18.6) ---------------------


@pytest.mark.parametrize("loop", ["c", "python"])
def test_backend_terminated_mid_query(both, tmp_path: Path, loop: Loop) -> None:  # type: ignore[no-untyped-def]
    """The server sends its FATAL message, then closes: pgbench reports the
    error result libpq built from the message, not a dead backend."""
    path = script(
        tmp_path, "kill.sql", "select pg_terminate_backend(pg_backend_pid());\n"
    )
    runs = [("-M", mode) for mode in ("simple", "extended", "prepared")]
    runs += [("-C",), ("--max-tries", "3")]
    for extra in runs:
        # -C runs on the Python loop: "c" would fail it (require)
        run_loop: Loop = "auto" if loop == "c" and extra == ("-C",) else loop
        ref, ours = both("-n", "-f", path, "-t", "1", *extra, loop=run_loop)
        assert ref.status == 2, ref.stderr
        assert (
            "pgsurge: error: client N script N aborted in command N query N: "
            "FATAL: terminating connection due to administrator command"
        ) in ref.messages
        assert_same(ref, ours)


@pytest.mark.parametrize("loop", ["auto", "python"])
def test_sleep_variable_saturates_like_atoi(both, tmp_path: Path, loop: Loop) -> None:  # type: ignore[no-untyped-def]
    """pgbench reads a \\sleep variable with atoi, i.e. (int) strtol: a number
    beyond the long range saturates, then truncates to -1 (no sleep); its
    low 32 bits here would make a 2 s sleep."""
    path = script(tmp_path, "sleep.sql", "\\sleep :x us\nselect 1;\n")
    huge = str(2**64 + 2_000_000)
    for value in (huge, "99999999999999999999", "-" + huge):
        ref, ours = both(
            "-n",
            "-f",
            path,
            "-t",
            "2",
            "-D",
            f"x={value}",
            loop=loop,
        )
        assert_same(ref, ours)
        if not value.startswith("-"):  # else: "invalid sleep time", as pgbench
            latency = float(ours.number("latency average =").split()[0])
            assert latency < 1000, ours.stdout
    # an int variable of the C loop's: (int) of the value
    path = script(
        tmp_path, "isleep.sql", f"\\set x {2**62}\n\\sleep :x us\nselect 1;\n"
    )
    ref, ours = both("-n", "-f", path, "-t", "2", loop=loop)
    assert_same(ref, ours)


def test_shell_messages_name_sh(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """pgbench runs \\shell and \\setshell through system() and popen(), i.e.
    ``sh -c`` with argv[0] "sh": the shell's own messages start "sh: 1:"."""
    for meta in ("\\shell /nonexistent/cmd", "\\setshell x /nonexistent/cmd"):
        path = script(tmp_path, "sh.sql", f"{meta}\nselect 1;\n")
        ref, ours = both("-n", "-f", path, "-t", "1")
        assert any(line.startswith("sh: N: ") for line in ref.messages), ref.stderr
        assert_same(ref, ours)


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["c", "python"])
def test_latency_limit_inf(both, loop: Loop) -> None:  # type: ignore[no-untyped-def]
    """-L inf makes pgbench's limit INT64_MIN; its skip test ``trigger < now -
    latency_limit`` wraps in int64 and never skips, while every
    transaction counts as above the (negative) limit."""
    for args in (("-t", "20"), ("-T", "1")):
        ref, ours = both("-n", "-S", "-L", "inf", "-R", "200", *args, loop=loop)
        assert_same(ref, ours)
        skipped = "number of transactions skipped:"
        assert ours.number(skipped) == ref.number(skipped) == "0 (0.000%)"


#: pgbench's deepest nesting per shape (tests/unit/test_script_errors.py)
DEEPEST_SHAPES = {
    "paren": ("(" * 9996, ":y", ")" * 9996),
    "minus": ("-" * 9997, ":y", ""),
    "not": ("not " * 9997, "true", ""),
    "abs": ("abs(" * 4998, ":y", ")" * 4998),
    "greatest": ("greatest(1, " * 2499, ":y", ")" * 2499),
    "case": ("case when :y = 1 then " * 2499, ":y", " end" * 2499),
}


def test_long_chains_and_deepest_nesting(both, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Operator chains of thousands of terms and pgbench's deepest nesting
    (worker start-up walks each tree for debug() calls: that walk recursed
    through a generator and failed from about 10000 terms)."""
    chain = " + ".join(["debug(:y)"] + [":y"] * 14000)
    lines = ["\\set y 1", f"\\set x {chain}", f"\\if {chain} > 0", "\\endif"]
    for name, (head, leaf, tail) in DEEPEST_SHAPES.items():
        lines.append(f"\\set {name} {head}{leaf}{tail}")
    path = script(tmp_path, "deep.sql", "\n".join([*lines, "select :x;", ""]))
    ref, ours = both("-n", "-f", path, "-t", "1")
    assert ref.status == 0, ref.stderr[-2000:]
    assert_same(ref, ours)


def test_bytes_that_are_not_utf8(
    bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:
    """Bytes that are not UTF-8 pass through as they came, as in pgbench:
    \\setshell output echoed in its error, a -D variable sent to the server
    in every mode, and the server's error about it. (Compared as bytes:
    the outputs do not decode.)"""

    def run(tool: str, *args: str | bytes) -> tuple[int, bytes]:
        prog = (
            [str(pgbench_bin)]
            if tool == "pgbench"
            else [sys.executable, "-m", "pgsurge"]
        )
        proc = subprocess.run(
            [*prog, *args, bench_db], capture_output=True, env=tool_env(), timeout=60
        )
        err = re.sub(rb"(?m)^pgbench: ", b"pgsurge: ", proc.stderr)
        return proc.returncode, err

    shell = script(tmp_path, "setshell.sql", "\\setshell x printf '\\351'\nselect 1;\n")
    sql = script(tmp_path, "var.sql", "select ':x';\n")
    runs: list[tuple[str | bytes, ...]] = [("-f", shell)]
    runs += [("-f", sql, "-M", m, "-D", b"x=\xe9") for m in ("simple", "extended")]
    for args in runs:
        ref = run("pgbench", "-n", "-t", "1", *args)
        ours = run("pgsurge", "-n", "-t", "1", *args)
        assert ref[0] == 2
        assert ours == ref


@pytest.mark.parametrize("aggregate", [(), ("--aggregate-interval", "1")])
def test_unopenable_log_file(both, aggregate: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """pgbench's pg_fatal: 'could not open logfile', status 1, printed once."""
    for jobs in ("1", "2"):
        ref, ours = both(
            "-n", "-S", "-t", "2", "-c", "2", "-j", jobs, "-l",
            "--log-prefix=/nonexistent/x", *aggregate,
        )  # fmt: skip
        assert ref.status == 1
        assert ours.status == 1, ours.stderr
        assert ours.report == ref.report
        # with -j 2 pgbench's other thread may reach pg_fatal too while the
        # process exits, and their writes interleave ("pgbench: error:
        # pgbench: error: could not ...", or a bare "pgbench:" line, seen
        # under load): the line itself is what both print
        line = (
            'pgsurge: error: could not open logfile "/nonexistent/x.N": '
            "No such file or directory"
        )
        assert any(line[len("pgsurge: error: ") :] in k for k in ref.messages), (
            ref.stderr
        )
        assert ours.messages == Counter({line: 1}), ours.stderr


@pytest.mark.slow
def test_exit_on_abort_reports_once(
    both, bench_db: str, pgbench_bin: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """With -j 2, both workers often abort a client within the same
    milliseconds. pgbench's first aborting thread ends the process, so
    mostly one abort line and one "Run was aborted" line are printed; the
    other thread sometimes gets its abort line out first (seen in CI).
    pgsurge printed each worker's lines in about 1 run of 4; it prints the
    first worker's only, each of pgbench's lines once."""
    path = script(
        tmp_path,
        "abort.sql",
        "\\set x random(1, 100)\n\\if :x = 1\nselect 1/0;\n\\endif\nselect 1;\n",
    )
    args = ("-n", "-f", path, "-c", "4", "-j", "2", "-T", "1", "--exit-on-abort")
    ref, ours = both(*args)
    assert ref.status == ours.status == 2
    # pgbench's two threads' writes may interleave ("pgbench: error:
    # pgbench: error: Run was ...", seen in CI), so its stderr is checked
    # to contain each line, and ours to be exactly these lines, once each
    once = Counter(
        {
            "pgsurge: error: client N script N aborted in command N query N: "
            "ERROR: division by zero": 1,
            "pgsurge: error: Run was aborted due to an error in thread N": 1,
        }
    )
    for line in once:
        assert any(line[len("pgsurge: error: ") :] in k for k in ref.messages), (
            ref.stderr
        )
    assert ours.messages == once, (ref.stderr, ours.stderr)
    for _ in range(10):
        out = run_pgsurge(args, bench_db, cwd=tmp_path)
        assert out.status == 2
        assert out.messages == once, out.stderr


@pytest.mark.parametrize("loop", ["c", "python"])
def test_fatal_while_idle_in_transaction(both, tmp_path: Path, loop: Loop) -> None:  # type: ignore[no-untyped-def]
    """A FATAL sent while the client sleeps idle in a transaction, then the
    close: pgbench does not watch that connection, its next send succeeds,
    and the FATAL is read as that command's result. pgsurge's loops once
    read it during the sleep (loop.absorb), found the connection closed and
    reported "SQL command send failed"; absorb now takes the socket out of
    the wait set unread, and the client's next wait for a result puts it
    back. Under -M prepared the statement's first use is pgbench's
    blocking PQprepare, which returns the FATAL (printed as is), then the
    query's send fails.

    The timeout leaves the client 500 ms to read BEGIN's result before the
    FATAL comes (1 ms was too short on a loaded machine: the FATAL then
    came with BEGIN's result, a notice in both programs but not alike),
    and the sleep outlasts it by far."""
    path = script(
        tmp_path,
        "idle.sql",
        "set idle_in_transaction_session_timeout = 500;\nbegin;\n"
        "\\sleep 2000 ms\nselect 1;\nend;\n",
    )
    for mode in ("simple", "extended", "prepared"):
        ref, ours = both("-n", "-f", path, "-t", "1", "-M", mode, loop=loop)
        assert ref.status == 2
        assert_same(ref, ours)
