"""The cases of PostgreSQL's pgbench TAP suites, as data, for pgsurge.

PostgreSQL tests pgbench with two TAP files: one against a server
(``t/001_pgbench_with_server.pl``) and one without
(``t/002_pgbench_no_server.pl``). Each case there is a command line, the
script files it is given, the exit status it must end with and regular
expressions its stdout and stderr must match, sometimes with a check of
the ``-l`` files or of the server log. The tables below state those
expectations again (the scripts that set up races are written anew), so
that ``tests/fix_tap.py`` can run every case against pgsurge and against
the reference pgbench 18.6 (``tests/server/test_pg_tap_cases.py``,
``tools/tap_driver.py``).

Conventions of a :class:`TapCase`:

* ``args`` is split on blanks, as the TAP helpers do; ``{dir}`` in
  ``extra`` is the directory the case's files are written to.
* ``files``: ``(name, text)``; ``NAME@W`` gives ``-f DIR/NAME@W`` on the
  command line (the file itself is ``DIR/NAME``). With-server cases pass
  them after ``args`` and before ``extra``.
* ``stdout``/``stderr``: Python regular expressions searched in the whole
  output, with Perl's meaning (``^$`` alone: the output is empty).
* ``setup``: SQL run before each program's run (so that both programs
  start from the same state); ``checks``: ``(SQL, expected rows as
  "a|b" lines)`` after each run.
* ``since=19``: a case of PostgreSQL 19's suite that pgbench 18.6 does not
  pass; pgsurge must pass it when ``pgsurge_too`` (it implements some of
  PostgreSQL 19's options), else it must do what pgbench 18.6 does.
* ``difference``: the case checks something docs/differences.md lists
  ("Differences from pgbench 18.6"); pgsurge's result is reported, not
  required.
* ``compare``: how the two programs' stderr are compared beyond the
  regexes (their reports are always compared, numbers masked):
  ``"stderr"`` (identical once pgbench's name for itself is ours),
  ``"messages"`` (the lines as a multiset, numbers masked; the default),
  ``"lineset"`` (the distinct lines: --debug prints "receiving" once per
  wake-up, as many times as the timing makes it), ``""`` (not compared:
  which client draws what, or fails first, depends on timing).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the -D values every script-error case gets
ERROR_CASE_DEFINES = (
    "-Dfoo=bla -Dnull=null -Dtrue=true -Done=1 -Dzero=0.0 -Dbadtrue=trueXXX"
    " -Dmaxint=9223372036854775807 -Dminint=-9223372036854775808"
)


@dataclass(frozen=True)
class LogCheck:
    """The -l files of a run: ``files`` of them named ``PREFIX.PID`` or
    ``PREFIX.PID.N``, each with ``min_lines``..``max_lines`` lines, every
    line matching ``line``."""

    prefix: str
    files: int
    min_lines: int
    max_lines: int
    line: str


@dataclass(frozen=True)
class ServerLog:
    """A pattern that the server log written during the run must (or must
    not) contain."""

    pattern: str
    present: bool = True


@dataclass(frozen=True)
class TapCase:
    name: str
    args: str
    status: int
    stdout: tuple[str, ...] = ()
    stderr: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    extra: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    checks: tuple[tuple[str, str], ...] = ()
    logs: LogCheck | None = None
    server_log: tuple[ServerLog, ...] = ()
    #: server settings (ALTER SYSTEM, then a reload) before the run
    settings: tuple[tuple[str, str], ...] = ()
    since: int = 18
    pgsurge_too: bool = True
    difference: str = ""
    #: the case is marked "to do" upstream (a known server race)
    todo: bool = False
    #: how many times the program is run (the checks follow the last run)
    runs: int = 1
    compare: str = "messages"
    #: with-server cases get the server's PG* variables; 002's do not
    server: bool = True
    #: 002's script cases pass "-f DIR/NAME" with the weight removed
    strip_weight: bool = False


def _files(**named: str) -> tuple[tuple[str, str], ...]:
    return tuple(named.items())


# -- checks of the data left by -i ----------------------------------------------

#: after -i: the filler of accounts is never NULL, of branches and tellers
#: always, and history is empty (scale 1)
DATA_STATE = (
    ("SELECT count(*) FROM pgbench_accounts WHERE filler IS NULL", "0"),
    ("SELECT count(*) FROM pgbench_branches WHERE filler IS NULL", "1"),
    ("SELECT count(*) FROM pgbench_tellers WHERE filler IS NULL", "10"),
    ("SELECT count(*) FROM pgbench_history", "0"),
)

_ENUM_LABELS = ",".join(f"'l{i}'" for i in range(1, 1001))

# -- the with-server cases, before the expression and error tables -------------

_SETUP_CASES = [
    TapCase(
        "concurrent OID generation",
        "--no-vacuum --client=5 --protocol=prepared --transactions=25",
        0,
        (r"processed: 125/125",),
        (r"^$",),
        _files(
            **{
                "001_pgbench_concurrent_insert": (
                    f"CREATE TYPE pg_temp.e AS ENUM ({_ENUM_LABELS}); "
                    "DROP TYPE pg_temp.e;"
                )
            }
        ),
    ),
    TapCase(
        "concurrent GRANT/VACUUM",
        "--no-vacuum --client=5 --protocol=prepared --transactions=50",
        0,
        (r"processed: 250/250",),
        (r"^$",),
        _files(
            **{
                # nine parts catalog churn under one advisory lock, one part
                # VACUUM of the same table
                "001_pgbench_grant@9": (
                    "DO $$ BEGIN PERFORM pg_advisory_xact_lock(42);\n"
                    "  FOR n IN 1 .. 10 LOOP\n"
                    "    GRANT SELECT ON ddl_target TO PUBLIC;\n"
                    "    REVOKE SELECT ON ddl_target FROM PUBLIC;\n"
                    "  END LOOP; END $$;\n"
                ),
                "001_pgbench_vacuum_ddl_target@1": "VACUUM ddl_target;",
            }
        ),
        setup=("CREATE TABLE IF NOT EXISTS ddl_target ()",),
        todo=True,
    ),
    TapCase(
        "no such database",
        "no-such-database",
        1,
        (r"^$",),
        (
            r"connection to server .* failed",
            r'FATAL:  database "no-such-database" does not exist',
        ),
        compare="messages",
    ),
    TapCase(
        "run without init",
        "-S -t 1",
        1,
        (),
        (r"Perhaps you need to do initialization",),
        compare="messages",
    ),
    TapCase(
        "pgbench scale 1 initialization",
        "-i",
        0,
        (r"^$",),
        (
            r"creating tables",
            r"vacuuming",
            r"creating primary keys",
            r"done in \d+\.\d\d s ",
        ),
        checks=DATA_STATE,
        # from no tables at all (else -i's DROP says nothing)
        setup=(
            "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches,"
            " pgbench_history, pgbench_tellers",
        ),
    ),
    TapCase(
        "initialization with all options",
        "--initialize --init-steps=dtpvg --scale=1 --unlogged-tables"
        " --fillfactor=98 --foreign-keys --quiet"
        " --tablespace=regress_pgbench_tap_1_ts"
        " --index-tablespace=regress_pgbench_tap_1_ts"
        " --partitions=2 --partition-method=hash",
        0,
        (r"(?i)^$",),
        (
            r"dropping old tables",
            r"creating tables",
            r"creating 2 partitions",
            r"vacuuming",
            r"creating primary keys",
            r"creating foreign keys",
            r"done in \d+\.\d\d s ",
        ),
    ),
    TapCase(
        "--init-steps with the step-selection options",
        "--initialize --init-steps=dtpvGvv --no-vacuum --foreign-keys"
        " --unlogged-tables --partitions=3",
        0,
        (r"^$",),
        (
            r"dropping old tables",
            r"creating tables",
            r"creating 3 partitions",
            r"creating primary keys",
            r"generating data \(server-side\)",
            r"creating foreign keys",
            r"done in \d+\.\d\d s ",
        ),
        checks=DATA_STATE,
    ),
    TapCase(
        "parallel initialization with range partitions",
        "-i -j 2 -s 1 --partitions=4 --partition-method=range",
        0,
        (r"^$",),
        (
            r"creating tables",
            r"creating 4 partitions",
            r"loading pgbench_accounts with 2 threads",
            r"partition \d loaded by thread \d \(in \d+\.\d\d s\)",
            r"vacuuming",
            r"creating primary keys",
            r"done in \d+\.\d\d s ",
        ),
        checks=DATA_STATE,
        since=19,
        pgsurge_too=False,
    ),
    TapCase(
        "tpcb-like",
        "--transactions=5 -Dfoo=bla --client=2 --protocol=simple --builtin=t"
        " --connect -n -v -n",
        0,
        (
            r"builtin: TPC-B",
            r"clients: 2\b",
            r"processed: 10/10",
            r"mode: simple",
            r"maximum number of tries: 1",
        ),
        (r"^$",),
    ),
    TapCase(
        "simple update",
        "--transactions=20 --client=5 -M extended --builtin=si -C --no-vacuum -s 1",
        0,
        (
            r"builtin: simple update",
            r"clients: 5\b",
            r"threads: 1\b",
            r"processed: 100/100",
            r"mode: extended",
        ),
        (r"scale option ignored",),
        compare="messages",
    ),
    TapCase(
        "select only with --debug",
        "-t 100 -c 7 -M prepared -b se --debug",
        0,
        (
            r"builtin: select only",
            r"clients: 7\b",
            r"threads: 1\b",
            r"processed: 700/700",
            r"mode: prepared",
        ),
        (
            r"vacuum",
            r"client 0",
            r"client 1",
            r"sending",
            r"receiving",
            r"executing",
        ),
        compare="lineset",
    ),
    TapCase(
        "unknown option with -j 2 (threads are supported)",
        "--jobs 2 --bad-option",
        1,
        (r"^$",),
        (r"--help",),
        server=False,
        compare="stderr",
    ),
    TapCase(
        "custom scripts with weights",
        "-t 100 -c 1 -j 2 -M prepared -n",
        0,
        (
            r"type: multiple scripts",
            r"mode: prepared",
            r"script 1: .*/001_pgbench_custom_script_1",
            r"weight: 2",
            r"script 2: .*/001_pgbench_custom_script_2",
            r"weight: 1",
            r"processed: 100/100",
        ),
        (r"^$",),
        _files(
            **{
                "001_pgbench_custom_script_1@1": (
                    "-- one account\n"
                    "\\set aid random(1, :scale * 100000)\n"
                    "SELECT abalance::INTEGER AS balance\n"
                    "  FROM pgbench_accounts\n"
                    "  WHERE aid=:aid;\n"
                ),
                "001_pgbench_custom_script_2@2": (
                    "-- the automatic variables\n"
                    "BEGIN;\n"
                    "\\set foo 1\n"
                    "-- typed for -M prepared\n"
                    "SELECT :foo::INT + :scale::INT * :client_id::INT AS bla;\n"
                    "COMMIT;\n"
                ),
            }
        ),
    ),
]

_SELECT_IN_TX = (
    "-- one account, in a transaction\n"
    "\\set aid random(1, :scale * 100000)\n"
    "BEGIN;\n"
    "SELECT abalance::INTEGER AS balance\n"
    "  FROM pgbench_accounts\n"
    "  WHERE aid=:aid;\n"
    "COMMIT;\n"
)

_SETUP_CASES += [
    TapCase(
        "custom script, simple protocol",
        "-n -t 10 -c 1 -M simple",
        0,
        (
            r"type: .*/001_pgbench_custom_script_3",
            r"processed: 10/10",
            r"mode: simple",
        ),
        (r"^$",),
        _files(**{"001_pgbench_custom_script_3": _SELECT_IN_TX}),
    ),
    TapCase(
        "custom script, extended protocol",
        "-n -t 10 -c 2 -M extended",
        0,
        (
            r"type: .*/001_pgbench_custom_script_4",
            r"processed: 20/20",
            r"mode: extended",
        ),
        (r"^$",),
        _files(**{"001_pgbench_custom_script_4": _SELECT_IN_TX}),
    ),
]

# -- the server's logging of bind parameters -----------------------------------

#: a value longer than the truncation limits below, with quotes to double
LONG_VALUE = (
    "'Tis but a scratch,' said the knight; 'a flesh wound,' he added, "
    "and kept on fighting."
)


def _quoted(text: str) -> str:
    """``text`` as the server quotes a parameter in its messages."""
    return "'" + text.replace("'", "''") + "'"


def _re(text: str) -> str:
    import re

    return re.escape(text)


def _truncated(text: str, limit: int) -> str:
    """The server's "first ``limit`` bytes, then ..." form, quoted."""
    return "'" + text[:limit].replace("'", "''") + "...'"


_JSON_SCRIPT = (
    "select '{ invalid ' as value \\gset\n"
    f"select $${LONG_VALUE}$$ as long \\gset\n"
    "select column1::jsonb from (values (:value), (:long)) as q;\n"
)
_DIV_SCRIPT = (
    "select '1' as one \\gset\nSELECT 1 / (random() / 2)::int, :one::int, :two::int;\n"
)
_NO_LOGGING = (
    ("log_min_duration_statement", "0"),
    ("log_parameter_max_length", "0"),
    ("log_parameter_max_length_on_error", "0"),
)
_ON_ERROR_64 = (
    ("log_min_duration_statement", "0"),
    ("log_parameter_max_length", "-1"),
    ("log_parameter_max_length_on_error", "64"),
)
_STATEMENTS_7 = (
    ("log_min_duration_statement", "-1"),
    ("log_parameter_max_length", "7"),
    ("log_parameter_max_length_on_error", "-1"),
)
_STATEMENTS_7_LOGGED = (
    ("log_min_duration_statement", "0"),
    ("log_parameter_max_length", "7"),
    ("log_parameter_max_length_on_error", "-1"),
)
#: the settings the server runs with otherwise
DEFAULT_LOGGING = (
    ("log_min_duration_statement", "-1"),
    ("log_parameter_max_length", "-1"),
    ("log_parameter_max_length_on_error", "0"),
)
_PARAMS = r"(?i:DETAIL:  parameters: )"

_PARAM_CASES = [
    TapCase(
        "parameters logged neither on error nor with statements",
        "-n -t1 -c1 -M prepared",
        2,
        (),
        (r"ERROR:  invalid input syntax for type json",),
        _files(**{"001_param_1": _JSON_SCRIPT}),
        settings=_NO_LOGGING,
        server_log=(ServerLog(_PARAMS + r"\$1 = '\{ invalid ',", present=False),),
        compare="messages",
    ),
    TapCase(
        "parameters on error, truncated: NULL for an undefined variable",
        "-n -t1 -c1 -M prepared",
        2,
        (),
        (
            r"ERROR:  division by zero",
            r"CONTEXT:  unnamed portal with parameters: \$1 = '1', \$2 = NULL",
        ),
        _files(**{"001_param_2": _DIV_SCRIPT}),
        settings=_ON_ERROR_64,
        compare="messages",
    ),
    TapCase(
        "parameters on error truncated, with statements in full",
        "-n -t1 -c1 -M prepared",
        2,
        (),
        (
            r"ERROR:  invalid input syntax for type json",
            r"(?m)CONTEXT:  JSON data, line 1: \{ invalid\.\.\.[\r\n]+"
            r"unnamed portal with parameters: \$1 = '\{ invalid ', \$2 = "
            + _re(_truncated(LONG_VALUE, 64)),
        ),
        _files(**{"001_param_3": _JSON_SCRIPT}),
        settings=_ON_ERROR_64,
        server_log=(
            ServerLog(
                _PARAMS + r"\$1 = '\{ invalid ', \$2 = " + _re(_quoted(LONG_VALUE))
            ),
        ),
        compare="messages",
    ),
    TapCase(
        "parameters on error in full (division)",
        "-n -t1 -c1 -M prepared",
        2,
        (),
        (
            r"ERROR:  division by zero",
            r"CONTEXT:  unnamed portal with parameters: \$1 = '1', \$2 = NULL",
        ),
        _files(**{"001_param_4": _DIV_SCRIPT}),
        settings=_STATEMENTS_7,
        compare="messages",
    ),
    TapCase(
        "parameters on error in full, with statements truncated",
        "-n -t1 -c1 -M prepared",
        2,
        (),
        (
            r"ERROR:  invalid input syntax for type json",
            r"(?m)CONTEXT:  JSON data, line 1: \{ invalid\.\.\.[\r\n]+"
            r"unnamed portal with parameters: \$1 = '\{ invalid ', \$2 = "
            + _re(_quoted(LONG_VALUE)),
        ),
        _files(**{"001_param_5": _JSON_SCRIPT}),
        settings=_STATEMENTS_7_LOGGED,
        server_log=(
            ServerLog(
                _PARAMS
                + r"\$1 = '\{ inval\.\.\.', \$2 = "
                + _re(_truncated(LONG_VALUE, 7))
            ),
        ),
        compare="messages",
    ),
    TapCase(
        "a bad parameter reported at bind",
        "-n -t1 -c1 -M prepared",
        2,
        (),
        (
            r'ERROR:  invalid input syntax for type smallint: "1a"',
            r"CONTEXT:  unnamed portal parameter \$2 = '1a'",
        ),
        _files(
            **{
                "001_param_6": (
                    "select 42 as value1, '1a' as value2 \\gset\n"
                    "select :value1::smallint, :value2::smallint;\n"
                )
            }
        ),
        settings=_STATEMENTS_7_LOGGED,
        compare="messages",
    ),
]

# -- expressions: every operator and function, with their debug() values --------

_EXPRESSIONS = r"""-- int functions
\set i1 debug(random(10, 19))
\set i2 debug(random_exponential(100, 199, 10.0))
\set i3 debug(random_gaussian(1000, 1999, 10.0))
\set i4 debug(abs(-4))
\set i5 debug(greatest(5, 4, 3, 2))
\set i6 debug(11 + least(-5, -4, -3, -2))
\set i7 debug(int(7.3))
-- int arithmetic, bit operators
\set i8 debug(17 / (4|1) + ( 4 + (7 >> 2)))
\set i9 debug(- (3 * 4 - (-(~ 1) + -(~ 0))) / -1 + 3 % -1)
\set ia debug(10 + (0 + 0 * 0 - 0 / 1))
\set ib debug(:ia + :scale)
\set ic debug(64 % (((2 + 1 * 2 + (1 # 2) | 4 * (2 & 11)) - (1 << 2)) + 2))
-- doubles
\set d1 debug(sqrt(+1.5 * 2.0) * abs(-0.8E1))
\set d2 debug(double(1 + 1) * (-75.0 / :foo))
\set pi debug(pi() * 4.9)
\set d4 debug(greatest(4, 2, -1.17) * 4.0 * Ln(Exp(1.0)))
\set d5 debug(least(-5.18, .0E0, 1.0/0) * -3.3)
-- overwritten
\set i1 0
\set d1 false
\set id debug(random_zipfian(1, 9, 1.3))
-- pow, power
\set poweri debug(pow(-3,3))
\set powerd debug(pow(2.0,10))
\set poweriz debug(pow(0,0))
\set powerdz debug(pow(0.0,0.0))
\set powernegi debug(pow(-2,-3))
\set powernegd debug(pow(-2.0,-3.0))
\set powernegd2 debug(power(-5.0,-5.0))
\set powerov debug(pow(9223372036854775807, 2))
\set powerov2 debug(pow(10,30))
-- comparisons, logic, case
\set c0 debug(1.0 = 0.0 and 1.0 != 0.0)
\set c1 debug(0 = 1 Or 1.0 = 1)
\set c4 debug(case when 0 < 1 then 32 else 0 end)
\set c5 debug(case when true then 33 else 0 end)
\set c6 debug(case when false THEN -1 when 1 = 1 then 13 + 19 + 2.0 end )
\set c7 debug(case when (1 > 0) and (1 >= 0) and (0 < 1) and (0 <= 1) \
    and (0 != 1) and (0 = 0) and (0 <> 1) then 35 else 0 end)
\set c8 debug(CASE \
    WHEN (1.0 > 0.0) AND (1.0 >= 0.0) AND (0.0 < 1.0) AND (0.0 <= 1.0) AND \
         (0.0 != 1.0) AND (0.0 = 0.0) AND (0.0 <> 1.0) AND (0.0 = 0.0) \
      THEN 36 \
      ELSE 0 \
  END)
\set c9 debug(CASE WHEN NOT FALSE THEN 3 * 12.3333334 END)
\set ca debug(case when false then 0 when 1-1 <> 0 then 1 else 38 end)
\set cb debug(10 + mod(13 * 7 + 12, 13) - mod(-19 * 11 - 17, 19))
\set cc debug(NOT (0 > 1) AND (1 <= 1) AND NOT (0 >= 1) AND (0 < 1) AND \
    NOT (false and true) AND (false OR TRUE) AND (NOT :f) AND (NOT FALSE) AND \
    NOT (NOT TRUE))
-- NULL
\set n0 debug(NULL + NULL * exp(NULL))
\set n1 debug(:n0)
\set n2 debug(NOT (:n0 IS NOT NULL OR :d1 IS NULL))
\set n3 debug(:n0 IS NULL AND :d1 IS NOT NULL AND :d1 NOTNULL)
\set n4 debug(:n0 ISNULL AND NOT :n0 IS TRUE AND :n0 IS NOT FALSE)
\set n5 debug(CASE WHEN :n IS NULL THEN 46 ELSE NULL END)
\set n6 debug(:n IS NULL AND NOT :f AND :t)
\set cs debug(CASE WHEN 1 THEN TRUE END AND CASE WHEN 1.0 THEN TRUE END \
    AND CASE WHEN :n THEN NULL ELSE TRUE END)
-- hashes
\set h0 debug(hash(10, 5432))
\set h1 debug(:h0 = hash_murmur2(10, 5432))
\set h3 debug(hash_fnv1a(10, 5432))
\set h4 debug(hash(10))
\set h5 debug(hash(10) = hash(10, :default_seed))
-- only the branch taken is evaluated
\set zy 0
\set yz debug(case when :zy = 0 then -1 else (1 / :zy) end)
\set yz debug(case when :zy = 0 or (1 / :zy) < 0 then -1 else (1 / :zy) end)
\set yz debug(case when :zy > 0 and (1 / :zy) < 0 then (1 / :zy) else 1 end)
-- a value of each type substituted into SQL
\set v0 NULL
\set v1 TRUE
\set v2 5432
\set v3 -54.21E-2
SELECT :v0, :v1, :v2, :v3;
-- \if chains
\set nope 0
\if 1 > 0
\set id debug(65)
\elif 0
\set nope 1
\else
\set nope 1
\endif
\if 1 < 0
\set nope 1
\elif 1 > 0
\set ie debug(74)
\else
\set nope 1
\endif
\if 1 < 0
\set nope 1
\elif 1 < 0
\set nope 1
\else
\set if debug(83)
\endif
\if 1 = 1
\set ig debug(86)
\elif 0
\set nope 1
\endif
\if 1 = 0
\set nope 1
\elif 1 <> 0
\set ih debug(93)
\endif
\set nope debug(:nope)
-- automatic variables
\set sc debug(:scale)
\set ci debug(:client_id)
\set rs debug(:random_seed)
-- the smallest int, and the largest
\set min debug(-9223372036854775808)
\set max debug(-(:min + 1))
-- permute(): a permutation of [0, size)
\set t debug(permute(0, 2) + permute(1, 2) = 1)
\set t debug(permute(0, 3) + permute(1, 3) + permute(2, 3) = 3)
\set t debug(permute(0, 4) + permute(1, 4) + permute(2, 4) + permute(3, 4) = 6)
\set t debug(permute(0, 5) + permute(1, 5) + permute(2, 5) + permute(3, 5) \
    + permute(4, 5) = 10)
\set t debug(permute(0, 16) + permute(1, 16) + permute(2, 16) + permute(3, 16) + \
             permute(4, 16) + permute(5, 16) + permute(6, 16) + permute(7, 16) + \
             permute(8, 16) + permute(9, 16) + permute(10, 16) + permute(11, 16) + \
             permute(12, 16) + permute(13, 16) + permute(14, 16) + \
             permute(15, 16) = 120)
\set size random(2, 1000)
\set v random(0, :size - 1)
\set p permute(:v, :size)
\set t debug(0 <= :p and :p < :size and :p = permute(:v + :size, :size) \
    and :p <> permute(:v + 1, :size))
\set t debug(permute(:v, 1) = 0)
\set t debug(permute(0, 2, 5431) = 0 and permute(1, 2, 5431) = 1 and \
             permute(0, 2, 5433) = 1 and permute(1, 2, 5433) = 0)
-- the same values on every architecture
\set size debug(:max - 10)
\set t debug(permute(:size-1, :size, 5432) = 520382784483822430 and \
             permute(:size-2, :size, 5432) = 1143715004660802862 and \
             permute(:size-3, :size, 5432) = 447293596416496998 and \
             permute(:size-4, :size, 5432) = 916527772266572956 and \
             permute(:size-5, :size, 5432) = 2763809008686028849 and \
             permute(:size-6, :size, 5432) = 8648551549198294572 and \
             permute(:size-7, :size, 5432) = 4542876852200565125)
"""

#: command number -> what debug() prints for it (seed 5432)
_EXPRESSION_VALUES = {
    1: "int 17",
    2: "int 104",
    3: "int 1498",
    4: "int 4",
    5: "int 5",
    6: "int 6",
    7: "int 7",
    8: "int 8",
    9: "int 9",
    10: "int 10",
    11: "int 11",
    12: "int 12",
    15: "double 15",
    16: "double 16",
    17: "double 17",
    20: "int 3",
    21: "double -27",
    22: "double 1024",
    23: "double 1",
    24: "double 1",
    25: "double -0.125",
    26: "double -0.125",
    27: "double -0.00032",
    28: r"double 8.50705917302346e\+0?37",
    29: r"double 1e\+0?30",
    30: "boolean false",
    31: "boolean true",
    32: "int 32",
    33: "int 33",
    34: "double 34",
    35: "int 35",
    36: "int 36",
    37: "double 37",
    38: "int 38",
    39: "int 39",
    40: "boolean true",
    41: "null",
    42: "null",
    43: "boolean true",
    44: "boolean true",
    45: "boolean true",
    46: "int 46",
    47: "boolean true",
    48: "boolean true",
    49: "int -5817877081768721676",
    50: "boolean true",
    51: "int -7793829335365542153",
    52: r"int -?\d+",
    53: "boolean true",
    65: "int 65",
    74: "int 74",
    83: "int 83",
    86: "int 86",
    93: "int 93",
    95: "int 0",
    96: "int 1",
    97: "int 0",
    98: "int 5432",
    99: "int -9223372036854775808",
    100: "int 9223372036854775807",
    101: "boolean true",
    102: "boolean true",
    103: "boolean true",
    104: "boolean true",
    105: "boolean true",
    109: "boolean true",
    110: "boolean true",
    111: "boolean true",
    113: "boolean true",
}

_EXPRESSION_CASE = TapCase(
    "expressions",
    "--random-seed=5432 -t 1 -Dfoo=-10.1 -Dbla=false -Di=+3 -Dn=null -Dt=t"
    " -Df=of -Dd=1.0",
    0,
    (r"type: .*/001_pgbench_expressions", r"processed: 1/1"),
    (
        r"setting random seed to 5432\b",
        *(rf"command={n}.: {v}\b" for n, v in _EXPRESSION_VALUES.items()),
    ),
    _files(**{"001_pgbench_expressions": _EXPRESSIONS}),
    compare="stderr",
)

_NESTED_IFS = r"""
\if false
  SELECT 1 / 0;
  \if true
    SELECT 1 / 0;
  \elif true
    SELECT 1 / 0;
  \else
    SELECT 1 / 0;
  \endif
  SELECT 1 / 0;
\elif false
  \if true
    SELECT 1 / 0;
  \elif true
    SELECT 1 / 0;
  \else
    SELECT 1 / 0;
  \endif
\else
  \if false
    SELECT 1 / 0;
  \elif false
    SELECT 1 / 0;
  \else
    SELECT 'correct';
  \endif
\endif
\if true
  SELECT 'correct';
\else
  \if true
    SELECT 1 / 0;
  \elif true
    SELECT 1 / 0;
  \else
    SELECT 1 / 0;
  \endif
\endif
"""

_RANDOM_SCRIPT = r"""-- one draw of each distribution, stored
\set ur random(1000, 1999)
\set er random_exponential(2000, 2999, 2.0)
\set gr random_gaussian(3000, 3999, 3.0)
\set zr random_zipfian(4000, 4999, 1.5)
INSERT INTO seeded_random(seed, rand, val) VALUES
  (:random_seed, 'uniform', :ur),
  (:random_seed, 'exponential', :er),
  (:random_seed, 'gaussian', :gr),
  (:random_seed, 'zipfian', :zr);
"""

#: the seed of the two seeded runs (any value: both must draw the same)
RANDOM_SEED = 271828183

_MISC_CASES = [
    TapCase(
        "nested \\if",
        "--no-vacuum --client=1 --exit-on-abort --transactions=1",
        0,
        (r"actually processed",),
        (r"^$",),
        _files(pgbench_nested_if=_NESTED_IFS),
    ),
    TapCase(
        "random seeded: two runs draw the same values",
        f"--random-seed={RANDOM_SEED} -t 1",
        0,
        (r"processed: 1/1",),
        (rf"setting random seed to {RANDOM_SEED}\b",),
        _files(**{"001_pgbench_random_seed": _RANDOM_SCRIPT}),
        setup=(
            "DROP TABLE IF EXISTS seeded_random",
            "CREATE UNLOGGED TABLE seeded_random(seed INT8 NOT NULL, "
            "rand TEXT NOT NULL, val INTEGER NOT NULL)",
        ),
        # each distribution drew one value, the same twice, in its range
        checks=(
            (
                "SELECT count(*) FROM (SELECT seed, rand, val, count(*) AS n"
                " FROM seeded_random GROUP BY seed, rand, val) AS g"
                f" WHERE n = 2 AND seed = {RANDOM_SEED} AND ("
                "(rand = 'uniform' AND val BETWEEN 1000 AND 1999) OR"
                " (rand = 'exponential' AND val BETWEEN 2000 AND 2999) OR"
                " (rand = 'gaussian' AND val BETWEEN 3000 AND 3999) OR"
                " (rand = 'zipfian' AND val BETWEEN 4000 AND 4999))",
                "4",
            ),
            ("SELECT count(*) FROM seeded_random", "8"),
        ),
        runs=2,
    ),
    TapCase(
        "backslash commands",
        "-t 1",
        0,
        (
            r"type: .*/001_pgbench_backslash_commands",
            r"processed: 1/1",
            r"shell-echo-output",
        ),
        (r"command=8.: int 1\b",),
        _files(
            **{
                "001_pgbench_backslash_commands": (
                    "\\set zero 0\n"
                    "\\set one 1.0\n"
                    "\\sleep :one ms\n"
                    "\\sleep 100 us\n"
                    "\\sleep 0 s\n"
                    "\\sleep :zero\n"
                    "-- a continued \\setshell\n"
                    "\\setshell another_one\\\n"
                    "  echo \\\n"
                    "    :one\n"
                    "\\set n debug(:another_one)\n"
                    "\\shell echo shell-echo-output\n"
                )
            }
        ),
        compare="stderr",
    ),
    TapCase(
        "\\gset",
        "-t 1",
        0,
        (r"type: .*/001_pgbench_gset", r"processed: 1/1"),
        (
            r"command=3.: int 0\b",
            r"command=5.: int 1\b",
            r"command=6.: int 2\b",
            r"command=8.: int 3\b",
            r"command=10.: int 4\b",
            r"command=12.: int 5\b",
        ),
        _files(
            **{
                "001_pgbench_gset": (
                    "-- no column at all\n"
                    "SELECT \\gset\n"
                    "SELECT 0 AS i0 \\gset\n"
                    "\\set i debug(:i0)\n"
                    "SELECT 1 AS i1, 2 AS i2 \\gset\n"
                    "\\set i debug(:i1)\n"
                    "\\set i debug(:i2)\n"
                    "SELECT 3 AS i3 \\gset x_\n"
                    "\\set i debug(:x_i3)\n"
                    "-- the last column of a name wins\n"
                    "SELECT 0 AS i4, 4 AS i4 \\gset\n"
                    "\\set i debug(:i4)\n"
                    "-- the last statement of a compound one\n"
                    "\\; \\; SELECT 0 AS i5 \\; SELECT 5 AS i5 \\; \\; \\gset\n"
                    "\\set i debug(:i5)\n"
                )
            }
        ),
        compare="stderr",
    ),
    TapCase(
        "\\gset of two rows",
        "-t 1",
        2,
        (r"type: .*/001_pgbench_gset_two_rows", r"processed: 0/1"),
        (r"expected one row, got 2\b",),
        _files(
            **{
                "001_pgbench_gset_two_rows": (
                    "\nSELECT 5432 AS fail UNION SELECT 5433 ORDER BY 1 \\gset\n"
                )
            }
        ),
        compare="messages",
    ),
    TapCase(
        "\\gset of a NULL",
        "-t 1",
        0,
        (r"type: .*/001_pgbench_gset_null", r"processed: 1/1"),
        (r"command=2.: null\b", r"command=3.: boolean true\b"),
        _files(
            **{
                "001_pgbench_gset_null": (
                    "SELECT NULL AS nv \\gset\n"
                    "\\set i debug(:nv)\n"
                    "\\set i debug(:nv IS NULL)\n"
                )
            }
        ),
        since=19,
        pgsurge_too=False,
        compare="stderr",
    ),
    TapCase(
        "\\aset",
        "-t 1",
        0,
        (r"type: .*/001_pgbench_aset", r"processed: 1/1"),
        (r"command=3.: int 8\b", r"command=4.: int 7\b"),
        _files(
            **{
                "001_pgbench_aset": (
                    "\n\\; SELECT 6 AS i6 \\; SELECT 7 AS i7 \\; \\aset\n"
                    "-- of several rows, the last one stays\n"
                    "SELECT 8 AS i6 UNION SELECT 9 ORDER BY 1 DESC \\aset\n"
                    "\\set i debug(:i6)\n"
                    "\\set i debug(:i7)\n"
                )
            }
        ),
        compare="stderr",
    ),
    TapCase(
        "\\aset of no row",
        "-t 1",
        2,
        (r"type: .*/001_pgbench_aset_empty", r"processed: 0/1"),
        (r"undefined variable \"i8\"", r"evaluation of meta-command failed\b"),
        _files(
            **{
                "001_pgbench_aset_empty": (
                    "\n\\; SELECT 5432 AS i8 WHERE FALSE \\; \\aset\n"
                    "\\set i debug(:i8)\n"
                )
            }
        ),
        compare="messages",
    ),
]

# -- pipelines -----------------------------------------------------------------

_TEN_SELECTS = "select 1;\n" * 10


def _pipeline(
    name: str, args: str, status: int, stderr: tuple[str, ...], script: str
) -> TapCase:
    return TapCase(
        name,
        args,
        status,
        (),
        stderr,
        _files(**{f"001_pgbench_pipeline_{name.split()[0]}": script}),
    )


_PIPELINE_CASES = [
    TapCase(
        "pipeline",
        "-t 1 -n -M extended",
        0,
        (r"type: .*/001_pgbench_pipeline", r"actually processed: 1/1"),
        (),
        _files(
            **{
                "001_pgbench_pipeline": (
                    f"\\startpipeline\n{_TEN_SELECTS}\\endpipeline\n"
                )
            }
        ),
    ),
    TapCase(
        "pipeline with \\syncpipeline",
        "-t 1 -n -M extended",
        0,
        (r"type: .*/001_pgbench_pipeline_sync", r"actually processed: 1/1"),
        (),
        _files(
            **{
                "001_pgbench_pipeline_sync": (
                    "\\startpipeline\nselect 1;\n\\syncpipeline\n\\syncpipeline\n"
                    "select 2;\n\\syncpipeline\nselect 3;\n\\endpipeline\n"
                )
            }
        ),
    ),
    TapCase(
        "pipeline in prepared mode",
        "-t 1 -n -M prepared",
        0,
        (r"type: .*/001_pgbench_pipeline_prep", r"actually processed: 1/1"),
        (),
        _files(
            **{
                "001_pgbench_pipeline_prep": (
                    "\\startpipeline\n\\endpipeline\n"
                    f"\\startpipeline\n{_TEN_SELECTS}\\endpipeline\n"
                )
            }
        ),
    ),
    _pipeline(
        "2 \\startpipeline twice",
        "-t 1 -n -M extended",
        2,
        (r"already in pipeline mode",),
        "\\startpipeline\n\\startpipeline\n",
    ),
    _pipeline(
        "3 \\endpipeline without a pipeline",
        "-t 1 -n -M extended",
        2,
        (r"not in pipeline mode",),
        "\\endpipeline\n",
    ),
    _pipeline(
        "4 \\gset in a pipeline",
        "-t 1 -n -M extended",
        2,
        (r"gset is not allowed in pipeline mode",),
        "\\startpipeline\nselect 1 \\gset f\n\\endpipeline\n",
    ),
    _pipeline(
        "5 open pipeline at the end, one transaction",
        "-t 1 -n -M extended",
        2,
        (r"end of script reached with pipeline open",),
        "\\startpipeline\n",
    ),
    _pipeline(
        "6 open pipeline at the end",
        "-t 2 -n -M extended",
        2,
        (r"end of script reached with pipeline open",),
        "\\startpipeline\n",
    ),
    _pipeline(
        "7 open pipeline after \\syncpipeline",
        "-t 2 -n -M extended",
        2,
        (r"end of script reached with pipeline open",),
        "\\startpipeline\n\\syncpipeline\n",
    ),
    _pipeline(
        "set_local_1 SET LOCAL first in a pipeline",
        "-t 1 -n -M extended",
        0,
        (r"WARNING:  SET LOCAL can only be used in transaction blocks",),
        "\\startpipeline\nSET LOCAL statement_timeout='1h';\n\\endpipeline\n",
    ),
    _pipeline(
        "set_local_2 SET LOCAL second in a pipeline",
        "-t 1 -n -M extended",
        0,
        (r"^$",),
        "\\startpipeline\nSELECT 1;\nSET LOCAL statement_timeout='1h';\n"
        "\\endpipeline\n",
    ),
    _pipeline(
        "set_local_3 SET LOCAL after \\syncpipeline",
        "-t 1 -n -M extended",
        0,
        (r"WARNING:  SET LOCAL can only be used in transaction blocks",),
        "\\startpipeline\nSELECT 1;\n\\syncpipeline\n"
        "SET LOCAL statement_timeout='1h';\n\\endpipeline\n",
    ),
    _pipeline(
        "reindex_1 REINDEX CONCURRENTLY first",
        "-t 1 -n -M extended",
        0,
        (),
        "\\startpipeline\nREINDEX TABLE CONCURRENTLY pgbench_accounts;\n"
        "SELECT 1;\n\\endpipeline\n",
    ),
    _pipeline(
        "reindex_2 REINDEX CONCURRENTLY second",
        "-t 1 -n -M extended",
        2,
        (),
        "\\startpipeline\nSELECT 1;\n"
        "REINDEX TABLE CONCURRENTLY pgbench_accounts;\n\\endpipeline\n",
    ),
    _pipeline(
        "vacuum_1 VACUUM first",
        "-t 1 -n -M extended",
        0,
        (),
        "\\startpipeline\nVACUUM pgbench_accounts;\n\\endpipeline\n",
    ),
    _pipeline(
        "vacuum_2 VACUUM second",
        "-t 1 -n -M extended",
        2,
        (),
        "\\startpipeline\nSELECT 1;\nVACUUM pgbench_accounts;\n\\endpipeline\n",
    ),
    _pipeline(
        "subtrans savepoints in a pipeline",
        "-t 1 -n -M extended",
        2,
        (),
        "\\startpipeline\nSAVEPOINT a;\nSELECT 1;\nROLLBACK TO SAVEPOINT a;\n"
        "SELECT 2;\n\\endpipeline\n",
    ),
    _pipeline(
        "lock_1 LOCK first",
        "-t 1 -n -M extended",
        2,
        (),
        "\\startpipeline\nLOCK pgbench_accounts;\nSELECT 1;\n\\endpipeline\n",
    ),
    _pipeline(
        "lock_2 LOCK second",
        "-t 1 -n -M extended",
        0,
        (),
        "\\startpipeline\nSELECT 1;\nLOCK pgbench_accounts;\n\\endpipeline\n",
    ),
    TapCase(
        "pipeline, serializable, prepared",
        "-c4 -t 10 -n -M prepared",
        0,
        (
            r"type: .*/001_pgbench_pipeline_serializable",
            r"actually processed: (\d+)/\1",
        ),
        (),
        _files(
            **{
                "001_pgbench_pipeline_serializable": (
                    "\\startpipeline\nBEGIN ISOLATION LEVEL SERIALIZABLE;\n"
                    f"{_TEN_SELECTS}END;\n\\endpipeline\n"
                )
            }
        ),
    ),
]

# -- script errors: (name, status, stderr, script[, not under -M prepared]) ----

_ERRORS: list[tuple[str, int, tuple[str, ...], str]] = [
    # SQL
    (
        "sql syntax error",
        2,
        (r"ERROR:  syntax error", r"prepared statement .* does not exist"),
        "-- a syntax error\n    SELECT 1 + ;\n",
    ),
    (
        "sql too many args",
        1,
        (r"statement has too many arguments.*\b255\b",),
        "\\set i 0\nSELECT LEAST(" + ", ".join([":i"] * 256) + ")",
    ),
    # \shell
    (
        "shell bad command",
        2,
        (r"\(shell\) .* meta-command failed",),
        "\\shell no-such-command",
    ),
    (
        "shell undefined variable",
        2,
        (r'undefined variable ":nosuchvariable"',),
        "\\shell echo ::foo :nosuchvariable\n",
    ),
    ("shell missing command", 1, (r"missing command ",), "\\shell"),
    (
        "shell too many args",
        1,
        (r'too many arguments in command "shell"',),
        "\\shell echo " + " ".join(["arg"] * 255),
    ),
    # \set
    ("set syntax error", 1, (r'syntax error in command "set"',), "\\set i 1 +"),
    (
        "set no such function",
        1,
        (r"unexpected function name",),
        "\\set i noSuchFunction()",
    ),
    ("set invalid variable name", 2, (r"invalid variable name",), "\\set . 1"),
    ("set division by zero", 2, (r"division by zero",), "\\set i 1/0"),
    (
        "set undefined variable",
        2,
        (r'undefined variable "nosuchvariable"',),
        "\\set i :nosuchvariable",
    ),
    ("set unexpected char", 1, (r"unexpected character .;.",), "\\set i ;"),
    (
        "set too many args",
        2,
        (r"too many function arguments",),
        "\\set i least(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16)",
    ),
    (
        "set empty random range",
        2,
        (r"empty range given to random",),
        "\\set i random(5,3)",
    ),
    (
        "set random range too large",
        2,
        (r"random range is too large",),
        "\\set i random(:minint, :maxint)",
    ),
    (
        "set gaussian param too small",
        2,
        (r"gaussian param.* at least 2",),
        "\\set i random_gaussian(0, 10, 1.0)",
    ),
    (
        "set exponential param greater 0",
        2,
        (r"exponential parameter must be greater ",),
        "\\set i random_exponential(0, 10, 0.0)",
    ),
    (
        "set zipfian param to 1",
        2,
        (r"zipfian parameter must be in range \[1\.001, 1000\]",),
        "\\set i random_zipfian(0, 10, 1)",
    ),
    (
        "set zipfian param too large",
        2,
        (r"zipfian parameter must be in range \[1\.001, 1000\]",),
        "\\set i random_zipfian(0, 10, 1000000)",
    ),
    (
        "set non numeric value",
        2,
        (r'malformed variable "foo" value: "bla"',),
        "\\set i :foo + 1",
    ),
    ("set no expression", 1, (r"syntax error",), "\\set i"),
    ("set missing argument", 1, (r"(?i)missing argument",), "\\set"),
    ("set not a bool", 2, (r"cannot coerce double to boolean",), "\\set b NOT 0.0"),
    ("set not an int", 2, (r"cannot coerce boolean to int",), "\\set i TRUE + 2"),
    ("set not a double", 2, (r"cannot coerce boolean to double",), "\\set d ln(TRUE)"),
    (
        "set case error",
        1,
        (r'syntax error in command "set"',),
        "\\set i CASE TRUE THEN 1 ELSE 0 END",
    ),
    (
        "set random error",
        2,
        (r"cannot coerce boolean to int",),
        "\\set b random(FALSE, TRUE)",
    ),
    (
        "set number of args mismatch",
        1,
        (r"unexpected number of arguments",),
        "\\set d ln(1.0, 2.0))",
    ),
    (
        "set at least one arg",
        1,
        (r"at least one argument expected",),
        "\\set i greatest())",
    ),
    # overflows
    (
        "set double to int overflow",
        2,
        (r"double to int overflow for 100",),
        "\\set i int(1E32)",
    ),
    ("set bigint add overflow", 2, (r"int add out",), "\\set i (1<<62) + (1<<62)"),
    (
        "set bigint sub overflow",
        2,
        (r"int sub out",),
        "\\set i 0 - (1<<62) - (1<<62) - (1<<62)",
    ),
    ("set bigint mul overflow", 2, (r"int mul out",), "\\set i 2 * (1<<62)"),
    (
        "set bigint div out of range",
        2,
        (r"bigint div out of range",),
        "\\set i :minint / -1",
    ),
    # \setshell
    (
        "setshell not an int",
        2,
        (r"command must return an integer",),
        "\\setshell i echo -n one",
    ),
    ("setshell missing arg", 1, (r"missing argument ",), "\\setshell var"),
    (
        "setshell no such command",
        2,
        (r"could not read result ",),
        "\\setshell var no-such-command",
    ),
    # \sleep
    (
        "sleep undefined variable",
        2,
        (r"sleep: undefined variable",),
        "\\sleep :nosuchvariable",
    ),
    ("sleep too many args", 1, (r"too many arguments",), "\\sleep too many args"),
    ("sleep missing arg", 1, (r"missing argument", r"\\sleep"), "\\sleep"),
    ("sleep unknown unit", 1, (r"unrecognized time unit",), "\\sleep 1 week"),
    # the rest
    (
        "misc invalid backslash command",
        1,
        (r'invalid command .* "nosuchcommand"',),
        "\\nosuchcommand",
    ),
    ("misc empty script", 1, (r"empty command list for script",), ""),
    ("bad boolean", 2, (r"malformed variable.*trueXXX",), "\\set b :badtrue or true"),
    (
        "invalid permute size",
        2,
        (r"permute size parameter must be greater than zero",),
        "\\set i permute(0, 0)",
    ),
    # \gset
    ("gset no row", 2, (r"expected one row, got 0\b",), "SELECT WHERE FALSE \\gset"),
    ("gset alone", 1, (r"gset must follow an SQL command",), "\\gset"),
    ("gset no SQL", 1, (r"gset must follow an SQL command",), "\\set i +1\n\\gset"),
    ("gset too many arguments", 1, (r"too many arguments",), "SELECT 1 \\gset a b"),
    (
        "gset after gset",
        1,
        (r"gset must follow an SQL command",),
        "SELECT 1 AS i \\gset\n\\gset",
    ),
    (
        "gset non SELECT",
        2,
        (r"expected one row, got 0",),
        "DROP TABLE IF EXISTS no_such_table \\gset",
    ),
    (
        "gset bad default name",
        2,
        (r"error storing into variable \?column\?",),
        "SELECT 1 \\gset",
    ),
    (
        "gset bad name",
        2,
        (r"error storing into variable bad name!",),
        'SELECT 1 AS "bad name!" \\gset',
    ),
]

_ERROR_CASES = [
    TapCase(
        f"script error: {name}",
        f"-n -t 1 {ERROR_CASE_DEFINES} -M prepared",
        status,
        (r"^$",) if status == 1 else (r"processed: 0/1",),
        stderr,
        _files(**{"001_pgbench_error_" + name.replace(" ", "_"): script}),
        compare="messages",
    )
    for name, status, stderr, script in _ERRORS
]

# -- throttling, logs, aborts, retries -----------------------------------------

#: run under PGOPTIONS repeatable read: the client that takes lock 1 second
#: has its snapshot from before the first one's commit, so its UPDATE fails
#: to serialize; the first one waits (in the DO block) until the second is
#: queued on the lock, and marks the table so that the retry does not wait
_SERIALIZATION_SCRIPT = """\\set delta random(-5000, 5000)
BEGIN;
SELECT pg_advisory_xact_lock(1);
UPDATE xy SET y = y + :delta WHERE x = 1;
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM first_client_table) THEN
    INSERT INTO first_client_table VALUES (1);
    WHILE NOT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory'
                      AND classid = 0 AND objid = 1 AND NOT granted) LOOP
      PERFORM pg_sleep(0.005);
    END LOOP;
  END IF;
END $$;
COMMIT;
"""

#: each client takes its own lock (2 or 3), waits until both are held, then
#: asks for the other's: one of them is chosen as the deadlock victim. Its
#: session locks survive the error, hence the unlock at the top of the
#: retry; the survivor records that it went through, so the retry does not
#: wait for a pair that will never form again
_DEADLOCK_SCRIPT = """SELECT pg_advisory_unlock_all();
\\set mine 2 + :client_id
\\set other 3 - :client_id
SELECT pg_advisory_lock(:mine);
DO $$ BEGIN
  WHILE NOT EXISTS (SELECT FROM first_client_table)
        AND (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
             AND classid = 0 AND objid IN (2, 3) AND granted) < 2 LOOP
    PERFORM pg_sleep(0.005);
  END LOOP;
END $$;
SELECT pg_advisory_lock(:other);
INSERT INTO first_client_table VALUES (:client_id);
SELECT pg_advisory_unlock_all();
"""

_RETRY_TABLES = (
    "DROP TABLE IF EXISTS first_client_table, xy",
    "CREATE UNLOGGED TABLE first_client_table (value integer)",
    "CREATE UNLOGGED TABLE xy (x integer, y integer)",
    "INSERT INTO xy VALUES (1, 2)",
)

_LATE_CASES = [
    TapCase(
        "throttling",
        "-t 100 -S --rate=100000 --latency-limit=1000000 -c 2 -n -r",
        0,
        (r"processed: 200/200", r"builtin: select only"),
        (r"^$",),
    ),
    TapCase(
        "late throttling",
        # a 2 ms script at a rate that makes every slot but the first late
        "-t 10 --rate=100000 --latency-limit=1 -n -r",
        0,
        (
            r"processed: [01]/10",
            r"type: .*/001_pgbench_sleep",
            r"above the 1.0 ms latency limit: [01]/",
        ),
        (r"^$",),
        _files(**{"001_pgbench_sleep": "\\sleep 2ms"}),
    ),
    TapCase(
        "logs with a sampling rate",
        "-n -S -t 50 -c 2 --log --sampling-rate=0.5",
        0,
        (r"select only", r"processed: 100/100"),
        (r"^$",),
        extra=("--log-prefix={dir}/001_pgbench_log_2",),
        logs=LogCheck("001_pgbench_log_2", 1, 8, 92, r"^[01] \d{1,2} \d+ \d \d+ \d+$"),
    ),
    TapCase(
        "log contents",
        "-n -b select-only -t 10 -l",
        0,
        (r"select only", r"processed: 10/10"),
        (r"^$",),
        extra=("--log-prefix={dir}/001_pgbench_log_3",),
        logs=LogCheck("001_pgbench_log_3", 1, 10, 10, r"^0 \d{1,2} \d+ \d \d+ \d+$"),
    ),
    TapCase(
        "transaction block left open",
        "--no-vacuum",
        2,
        (r"processed: 1/10",),
        (
            r"client 0 aborted: end of script reached without completing "
            r"the last transaction",
        ),
        _files(**{"001_pgbench_incomplete_transaction_block": "BEGIN;SELECT 1;"}),
        compare="messages",
    ),
    TapCase(
        "serialization failure retried",
        "-n -c 2 -t 1 --debug --verbose-errors --max-tries 2",
        0,
        (
            r"processed: 2/2\b",
            r"number of transactions retried: 1\b",
            r"total number of retries: 1\b",
        ),
        (
            # the same UPDATE (same delta) before and after the failure
            r"(?s)(client ([01]) sending UPDATE xy SET y = y \+ -?\d+\b).*"
            r"client \2 got an error in command 3 \(SQL\) of script 0; "
            r"ERROR:  could not serialize access due to concurrent update\b.*\1",
        ),
        _files(**{"001_pgbench_serialization": _SERIALIZATION_SCRIPT}),
        env=(("PGOPTIONS", "-c default_transaction_isolation=repeatable\\ read"),),
        setup=_RETRY_TABLES,
        compare="",
    ),
    TapCase(
        "deadlock retried",
        "-n -c 2 -t 1 --max-tries 2 --verbose-errors",
        0,
        (
            r"processed: 2/2\b",
            r"number of transactions retried: 1\b",
            r"total number of retries: 1\b",
        ),
        (
            r"client [01] got an error in command (3|5) \(SQL\) of script 0; "
            r"ERROR:  deadlock detected\b",
        ),
        _files(**{"001_pgbench_deadlock": _DEADLOCK_SCRIPT}),
        env=(("PGOPTIONS", "-c default_transaction_isolation=read\\ committed"),),
        setup=_RETRY_TABLES,
    ),
    TapCase(
        "--exit-on-abort",
        "-t 10 -c 2 -j 2 --exit-on-abort",
        2,
        (),
        (r"division by zero", r"Run was aborted due to an error in thread"),
        _files(
            **{
                "001_exit_on_abort": (
                    "update counter set i = i+1 returning i \\gset\n"
                    "\\if :i = 5\n\\set y 1/0\n\\endif\n"
                )
            }
        ),
        setup=(
            "DROP TABLE IF EXISTS counter",
            "CREATE TABLE counter(i int)",
            "INSERT INTO counter VALUES (0)",
        ),
        compare="",
    ),
    TapCase(
        "COPY in a script",
        "-t 10",
        2,
        (),
        (r"COPY is not supported in pgbench, aborting",),
        _files(**{"001_copy": " COPY pgbench_accounts FROM stdin "}),
        compare="messages",
    ),
    TapCase(
        "--continue-on-error",
        "-n -t 10 --continue-on-error --failures-detailed",
        0,
        (r"processed: 1/10\b", r"other failures: 9\b"),
        (),
        _files(
            **{
                "001_continue_on_error": (
                    "\n\t\tINSERT INTO unique_table VALUES(0);\n\t\t"
                )
            }
        ),
        setup=(
            "DROP TABLE IF EXISTS unique_table",
            "CREATE TABLE unique_table(i int unique)",
        ),
        since=19,
    ),
]

#: every with-server case, in the order the state they leave requires
WITH_SERVER: tuple[TapCase, ...] = (
    *_SETUP_CASES,
    *_PARAM_CASES,
    _EXPRESSION_CASE,
    *_MISC_CASES,
    *_PIPELINE_CASES,
    *_ERROR_CASES,
    *_LATE_CASES,
)

# -- without a server: option errors, help, builtins, script parse errors ------

_OPTION_ERRORS: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "bad option",
        "-h home -p 5432 -U calvin ---debug --bad-option",
        (r"--help.*more information",),
    ),
    ("no file", "-f no-such-file", (r'could not open file "no-such-file":',)),
    ("no builtin", "-b no-such-builtin", (r'no builtin script .* "no-such-builtin"',)),
    (
        "invalid weight",
        "--builtin=select-only@one",
        (r"invalid weight specification: \@one",),
    ),
    ("negative weight", "-b select-only@-1", (r"weight spec.* out of range .*: -1",)),
    ("too many scripts", "-S " * 129, (r"at most 128 SQL scripts",)),
    ("bad #clients", "-c three", (r'invalid value "three" for option -c/--client',)),
    ("bad #threads", "-j eleven", (r'invalid value "eleven" for option -j/--jobs',)),
    ("bad scale", "-i -s two", (r'invalid value "two" for option -s/--scale',)),
    (
        "invalid #transactions",
        "-t zil",
        (r'invalid value "zil" for option -t/--transactions',),
    ),
    ("invalid duration", "-T ten", (r'invalid value "ten" for option -T/--time',)),
    (
        "-t XOR -T",
        "-N -l --aggregate-interval=5 --log-prefix=notused -t 1000 -T 1",
        (r"specify either ",),
    ),
    (
        "-T XOR -t",
        "-P 1 --progress-timestamp -l --sampling-rate=0.001 -T 10 -t 1000",
        (r"specify either ",),
    ),
    ("bad variable", "--define foobla", (r"invalid variable definition",)),
    ("invalid fillfactor", "-F 1", (r"-F/--fillfactor must be in range",)),
    ("invalid query mode", "-M no-such-mode", (r"invalid query mode",)),
    ("invalid progress", "--progress=0", (r"-P/--progress must be in range",)),
    ("invalid rate", "--rate=0.0", (r"invalid rate limit",)),
    ("invalid latency", "--latency-limit=0.0", (r"invalid latency limit",)),
    ("invalid sampling rate", "--sampling-rate=0", (r"invalid sampling rate",)),
    (
        "invalid aggregate interval",
        "--aggregate-interval=-3",
        (r"--aggregate-interval must be in range",),
    ),
    ("weight zero", "-b se@0 -b si@0 -b tpcb@0", (r"weight must not be zero",)),
    ("init vs run", "-i -S", (r"cannot be used in initialization",)),
    ("run vs init", "-S -F 90", (r"cannot be used in benchmarking",)),
    ("ambiguous builtin", "-b s", (r"ambiguous",)),
    (
        "--progress-timestamp => --progress",
        "--progress-timestamp",
        (r"allowed only under",),
    ),
    ("-I without init option", "-I dtg", (r"cannot be used in benchmarking mode",)),
    (
        "invalid init step",
        "-i -I dta",
        (r"unrecognized initialization step", r"Allowed step characters are"),
    ),
    (
        "bad random seed",
        "--random-seed=one",
        (
            r'unrecognized random seed option "one"',
            r'Expecting an unsigned integer, "time" or "rand"',
            r"error while setting random seed from --random-seed option",
        ),
    ),
    (
        "bad partition method",
        "-i --partition-method=BAD",
        (r'"range"', r'"hash"', r'"BAD"'),
    ),
    ("bad partition number", "-i --partitions -1", (r"--partitions must be in range",)),
    (
        "partition method without partitioning",
        "-i --partition-method=hash",
        (r"partition-method requires greater than zero --partitions",),
    ),
    (
        "bad maximum number of tries",
        "--max-tries -10",
        (r'invalid number of maximum tries: "-10"',),
    ),
    (
        "an infinite number of tries",
        "--max-tries 0",
        (
            r"an unlimited number of transaction tries can only be used with "
            r"--latency-limit or a duration",
        ),
    ),
    ("sampling => log", "--sampling-rate=0.01", (r"log sampling .* only when",)),
    (
        "sampling XOR aggregate",
        "-l --sampling-rate=0.1 --aggregate-interval=3",
        (r"sampling .* aggregation .* cannot be used at the same time",),
    ),
    ("aggregate => log", "--aggregate-interval=3", (r"aggregation .* only when",)),
    ("log-prefix => log", "--log-prefix=x", (r"prefix .* only when",)),
    (
        "duration & aggregation",
        "-l -T 1 --aggregate-interval=3",
        (r"aggr.* not be higher",),
    ),
    ("duration % aggregation", "-l -T 5 --aggregate-interval=3", (r"multiple",)),
]

_SCRIPT_ERRORS: list[tuple[str, tuple[str, ...], str, str]] = [
    ("missing endif", (r"\\if without matching \\endif",), "if-noendif.sql", "\\if 1"),
    (
        "missing if on elif",
        (r"\\elif without matching \\if",),
        "elif-noif.sql",
        "\\elif 1",
    ),
    (
        "missing if on else",
        (r"\\else without matching \\if",),
        "else-noif.sql",
        "\\else",
    ),
    (
        "missing if on endif",
        (r"\\endif without matching \\if",),
        "endif-noif.sql",
        "\\endif",
    ),
    (
        "elif after else",
        (r"\\elif after \\else",),
        "else-elif.sql",
        "\\if 1\n\\else\n\\elif 0\n\\endif",
    ),
    (
        "else after else",
        (r"\\else after \\else",),
        "else-else.sql",
        "\\if 1\n\\else\n\\else\n\\endif",
    ),
    (
        "if syntax error",
        (r'syntax error in command "if"',),
        "if-bad.sql",
        "\\if\n\\endif\n",
    ),
    (
        "elif syntax error",
        (r'syntax error in command "elif"',),
        "elif-bad.sql",
        "\\if 0\n\\elif +\n\\endif\n",
    ),
    (
        "else syntax error",
        (r'unexpected argument in command "else"',),
        "else-bad.sql",
        "\\if 0\n\\else BAD\n\\endif\n",
    ),
    (
        "endif syntax error",
        (r'unexpected argument in command "endif"',),
        "endif-bad.sql",
        "\\if 0\n\\endif BAD\n",
    ),
    (
        "not enough arguments for least",
        (r"at least one argument expected \(least\)",),
        "bad-least.sql",
        "\\set i least()\n",
    ),
    (
        "not enough arguments for greatest",
        (r"at least one argument expected \(greatest\)",),
        "bad-greatest.sql",
        "\\set i greatest()\n",
    ),
    (
        "not enough arguments for hash",
        (r"unexpected number of arguments \(hash\)",),
        "bad-hash-1.sql",
        "\\set i hash()\n",
    ),
    (
        "too many arguments for hash",
        (r"unexpected number of arguments \(hash\)",),
        "bad-hash-2.sql",
        "\\set i hash(1,2,3)\n",
    ),
    (
        "bigint overflow 1",
        (r"bigint constant overflow",),
        "overflow-1.sql",
        "\\set i 100000000000000000000\n",
    ),
    (
        "double overflow 2",
        (r"double constant overflow",),
        "overflow-2.sql",
        "\\set d 1.0E309\n",
    ),
    (
        "double overflow 3",
        (r"double constant overflow",),
        "overflow-3.sql",
        "\\set d .1E310\n",
    ),
    ("set i", (r"set i 1 ", r"\^ error found here"), "set_i_op", "\\set i 1 +\n"),
    (
        "not enough arguments to permute",
        (r"unexpected number of arguments \(permute\)",),
        "bad-permute-1.sql",
        "\\set i permute(1)\n",
    ),
    (
        "too many arguments to permute",
        (r"unexpected number of arguments \(permute\)",),
        "bad-permute-2.sql",
        "\\set i permute(1, 2, 3, 4)\n",
    ),
]

NO_SERVER: tuple[TapCase, ...] = (
    *(
        TapCase(
            f"option error: {name}",
            args,
            1,
            (r"^$",),
            err,
            server=False,
            compare="stderr",
        )
        for name, args, err in _OPTION_ERRORS
    ),
    # PostgreSQL 18's own checks of --help and -V, then 19's generic ones
    TapCase(
        "help",
        "--help",
        0,
        (
            r"benchmarking tool for PostgreSQL",
            r"Usage",
            r"Initialization options:",
            r"Common options:",
            r"Report bugs to",
        ),
        (r"^$",),
        server=False,
    ),
    TapCase(
        "version",
        "-V",
        0,
        (r"^pgbench .PostgreSQL. ",),
        (r"^$",),
        server=False,
    ),
    TapCase("help (generic)", "--help", 0, (r"\S",), (r"^$",), server=False),
    TapCase("version (generic)", "--version", 0, (r"\S",), (r"^$",), server=False),
    TapCase(
        "invalid option (generic)",
        "--not-a-valid-option",
        1,
        (),
        (r"--help",),
        server=False,
        compare="stderr",
    ),
    TapCase(
        "builtin list",
        "-b list",
        0,
        (r"^$",),
        (
            r"Available builtin scripts:",
            r"tpcb-like",
            r"simple-update",
            r"select-only",
        ),
        server=False,
        difference="-b list adds the bundled Python workloads",
    ),
    TapCase(
        "builtin listing",
        "--show-script se",
        0,
        (r"^$",),
        (r"select-only: ", r"SELECT abalance FROM pgbench_accounts WHERE"),
        server=False,
        compare="stderr",
    ),
    *(
        TapCase(
            f"script error: {name}",
            "",
            1,
            (r"^$",),
            err,
            ((file, text),),
            server=False,
            strip_weight=True,
            compare="stderr",
        )
        for name, err, file, text in _SCRIPT_ERRORS
    ),
)
