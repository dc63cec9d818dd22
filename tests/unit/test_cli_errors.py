"""Command lines pgbench rejects before connecting: pgsurge must agree exactly.

Each row runs the real pgbench 18.6 and ``pgsurge.cli.main`` with the same
argv, environment and stdin, and compares exit status, stdout and stderr
byte for byte (pgbench's program name normalised to pgsurge). The rows
follow pgbench's t/002_pgbench_no_server.pl and go further: getopt's own
messages, C number parsing quirks, and the order of checks when a command
line has several problems. A row that pgbench would accept (and then try
to connect) is a broken row: the test refuses it.

Command lines whose meaning differs on purpose (our own options) are
tested in test_cli_parse.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fix_cli import base_env, run_cli, run_pgbench


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""


def c(id: str, *args: str, **kw: object) -> Case:
    return Case(id, args, **kw)  # type: ignore[arg-type]


CASES = [
    # -- getopt's own complaints ----------------------------------------
    c("unknown-long", "--foo"),
    c("unknown-long-with-value", "-c", "2", "-j", "3", "--foo=bar"),
    c("unknown-short", "-Z"),
    c("unknown-short-in-cluster", "-nZ"),
    c("colon-is-not-an-option", "-:"),
    c("missing-arg-short", "-c"),
    c("missing-arg-long", "--client"),
    c("missing-arg-abbrev", "--cl"),
    c("missing-arg-cluster", "-nc"),
    c("ambiguous-c", "--c", "3"),
    c("ambiguous-c-value", "--c=3"),
    c("ambiguous-in", "--in"),
    c("ambiguous-p", "--p", "3"),
    c("ambiguous-d", "--d", "x"),
    c("ambiguous-empty-name", "--=x"),
    c("ambiguous-lo", "--lo"),
    c("ambiguous-s", "--s", "3"),
    c("ambiguous-in-with-value", "--in=3"),
    c("log-with-value", "--log=x"),
    c("flag-with-value", "--no-vacuum=1"),
    c("flag-abbrev-with-value", "--no-v=1"),
    c("progress-timestamp-value", "--progress-timestamp=1"),
    c("help-with-value", "--help=x"),
    c("help-not-first", "-i", "--help"),
    c("qmark-not-first", "-n", "-?"),
    c("version-not-first", "-n", "--version"),
    c("V-not-first", "-n", "-V"),
    # -- integer options (option_parse_int) -------------------------------
    c("clients-abc", "-c", "abc"),
    c("clients-three", "-c", "three"),
    c("clients-zero", "-c", "0"),
    c("clients-trailing", "-c", "3x"),
    c("clients-empty", "-c", ""),
    c("clients-blank", "-c", " "),
    c("clients-minus", "-c", "-"),
    c("clients-negative", "-c", "-1"),
    c("clients-huge", "-c", "99999999999"),
    c("clients-hex", "-c", "0x10"),
    c("clients-attached", "-cabc"),
    c("clients-long-eq", "--client=abc"),
    c("clients-abbrev-eq", "--cl=abc"),
    c("clients-abbrev-empty", "--cl="),
    c("clients-over-rlimit", "-c", "2147483647"),
    c("clients-over-rlimit-wrap", "-c", "2147483645"),
    c("jobs-zero", "-j", "0"),
    c("jobs-eleven", "-j", "eleven"),
    c("scale-two", "-i", "-s", "two"),
    c("scale-zero", "-i", "-s", "0"),
    c("scale-negative", "-i", "-s", "-1"),
    c("transactions-zero", "-t", "0"),
    c("transactions-zil", "-t", "zil"),
    c("time-zero", "-T", "0"),
    c("time-ten", "-T", "ten"),
    c("progress-zero", "-P", "0"),
    c("progress-long-zero", "--progress=0"),
    c("fillfactor-low", "-F", "5"),
    c("fillfactor-high", "-i", "-F", "101"),
    c("aggregate-zero", "--aggregate-interval=0"),
    c("aggregate-negative", "--aggregate-interval=-3"),
    c("partitions-negative", "-i", "--partitions", "-1"),
    # -- floating point options (atof) ------------------------------------
    c("latency-zero", "-L", "0"),
    c("latency-abc", "-L", "abc"),
    c("latency-long-zero", "--latency-limit=0.0"),
    c("rate-zero", "-R", "0"),
    c("rate-negative", "-R", "-1"),
    c("rate-long-zero", "--rate=0.0"),
    c("sampling-high", "--sampling-rate=2"),
    c("sampling-zero", "--sampling-rate=0"),
    # -- max tries (atoi) -------------------------------------------------
    c("max-tries-negative", "--max-tries=-1"),
    c("max-tries-minus-ten", "--max-tries", "-10"),
    c("max-tries-wraps-negative", "--max-tries=4294967295"),
    c("max-tries-unlimited", "--max-tries", "0"),
    c("max-tries-abc-is-zero", "--max-tries=abc"),
    c("max-tries-tiny-latency", "--max-tries=0", "-L", "0.0001"),
    # -- -M, -D -----------------------------------------------------------
    c("protocol-bad", "-M", "no-such-mode"),
    c("protocol-case", "-M", "Simple"),
    c("define-no-equal", "-D", "x"),
    c("define-long-no-equal", "--define", "foobla"),
    c("define-empty-name", "-D", "=1"),
    c("define-empty-value", "-D", "x="),
    c("define-digit-first", "-D", "1x=3"),
    c("define-blank-name", "-D", "a b=3"),
    c("define-colon-name", "-D", "x:y=1"),
    # -- init steps, partitions -------------------------------------------
    c("steps-bad", "-I", "dtq"),
    c("steps-empty", "-I", ""),
    c("steps-bad-init", "-i", "-I", "dta"),
    c("steps-in-run-mode", "-I", "dtg"),
    c("steps-blank-in-run-mode", "-I", " d"),
    c("partition-method-bad", "--partition-method=foo"),
    c("partition-method-bad-init", "-i", "--partition-method=BAD"),
    c("partition-method-no-partitions", "-i", "--partition-method=hash"),
    c("partition-method-zero", "-i", "--partitions=0", "--partition-method=range"),
    c("partition-method-run-mode", "--partition-method=HASH"),
    # -- init vs benchmarking options ------------------------------------
    c("init-with-time", "-i", "-T", "5"),
    c("init-with-jobs", "-i", "-j", "2"),
    c("init-with-select-only", "-i", "-S"),
    c("init-with-connect", "-i", "-q", "-n", "-C"),
    c("init-last", "-T", "5", "-t", "5", "-i"),
    c("init-with-seed", "-i", "--random-seed=5"),
    c("run-with-fillfactor", "-S", "-F", "90"),
    c("run-with-unlogged", "--unlogged-tables"),
    c("run-with-tablespace", "--tablespace=x"),
    c("run-with-index-tablespace", "--index-tablespace=x"),
    c("run-with-foreign-keys", "--foreign-keys"),
    c("run-with-quiet", "-q"),
    # -- run-mode rules -----------------------------------------------------
    c("t-and-T", "-t", "5", "-T", "5"),
    c(
        "t-xor-T",
        "-N",
        "-l",
        "--aggregate-interval=5",
        "--log-prefix=x",
        "-t",
        "1000",
        "-T",
        "1",
    ),
    c(
        "T-xor-t",
        "-P",
        "1",
        "--progress-timestamp",
        "-l",
        "--sampling-rate=0.001",
        "-T",
        "10",
        "-t",
        "1000",
    ),
    c("sampling-needs-log", "--sampling-rate=0.5"),
    c("sampling-and-aggregate", "-l", "--sampling-rate=0.5", "--aggregate-interval=2"),
    c("aggregate-needs-log", "--aggregate-interval=2"),
    c("log-prefix-needs-log", "--log-prefix=x"),
    c("log-prefix-abbrev-takes-next", "--log-p", "x"),
    c("aggregate-over-duration", "-l", "--aggregate-interval=10", "-T", "5"),
    c("aggregate-not-divisor", "-l", "--aggregate-interval=2", "-T", "5"),
    c("progress-timestamp-needs-progress", "--progress-timestamp"),
    # -- operands -------------------------------------------------------------
    c("two-operands", "a", "b"),
    c("three-operands", "a", "b", "c"),
    c("operands-around-dashdash", "a", "--", "b"),
    c("dbname-and-operand", "-d", "foo", "a"),
    c("posixly-correct-stops", "x", "-Z", env={"POSIXLY_CORRECT": "1"}),
    c("posixly-correct-option-first", "-Z", "x", env={"POSIXLY_CORRECT": "1"}),
    # -- builtin scripts ----------------------------------------------------
    c("builtin-list-weighted", "-b", "list@2"),
    c("builtin-unknown", "-b", "no-such-builtin"),
    c("builtin-ambiguous", "-b", "s"),
    c("builtin-empty-name", "-b", ""),
    c("show-script-ambiguous", "--show-script=s"),
    c("show-script-unknown", "--show-script=nope"),
    c("show-script-tpcb", "--show-script=tpcb"),
    c("show-script-se", "--show-script", "se"),
    c("show-script-simple", "--show-script=simple-update"),
    c("weight-not-number", "-b", "t@x"),
    c("weight-missing", "-b", "t@"),
    c("weight-negative", "-b", "t@-1"),
    c("weight-huge", "-b", "t@99999999999"),
    c("weight-over-int", "-b", "t@3000000000"),
    c("weight-overflow-long", "-b", "t@99999999999999999999"),
    c("weight-trailing-blank", "-b", "t@3 "),
    c("weight-long-one", "--builtin=select-only@one"),
    c("weight-zero", "-b", "t@0"),
    c("weight-all-zero", "-b", "se@0", "-b", "si@0", "-b", "tpcb@0"),
    c("too-many-scripts", *(["-S"] * 129)),
    # the 129th script: syntax and emptiness are found first, the \if
    # structure only after the count
    c("syntax-before-script-count", *(["-S"] * 128), "-f", "{tmp}/bad.sql"),
    c("empty-before-script-count", *(["-S"] * 128), "-f", "{tmp}/empty.sql"),
    c("script-count-before-structure", *(["-S"] * 128), "-f", "{tmp}/noendif.sql"),
    # -- script files -------------------------------------------------------
    c("file-missing", "-f", "no-such-file"),
    c("file-missing-abs", "-f", "{tmp}/nope.sql"),
    c("file-is-directory", "-f", "{tmp}"),
    c("file-weight-zero", "-f", "{tmp}/good.sql@0"),
    c("file-weight-bad", "-f", "{tmp}/good.sql@x"),
    c("file-at-needs-weight", "-f", "{tmp}/a@b.sql"),
    c("file-at-with-weight", "-f", "{tmp}/a@b.sql@0"),
    c("file-empty", "-f", "{tmp}/empty.sql"),
    c("file-comments-only", "-f", "{tmp}/comments.sql"),
    c("file-stdin-empty", "-f", "-"),
    c("file-stdin-zero-weight", "-f", "-@0", stdin=b"SELECT 1;\n"),
    c("file-syntax-error", "-f", "{tmp}/bad.sql"),
    c("file-syntax-before-option", "-f", "{tmp}/bad.sql", "-c", "abc"),
    c("file-option-before-syntax", "-c", "abc", "-f", "{tmp}/bad.sql"),
    c("file-missing-endif", "-f", "{tmp}/noendif.sql"),
    c("params-extended", "-M", "extended", "-f", "{tmp}/params.sql"),
    c(
        "params-before-weight",
        *("-f", "{tmp}/params.sql", "-M", "prepared", "-b", "t@0"),
    ),
    # -- random seed ----------------------------------------------------------
    c("seed-word", "--random-seed=one"),
    c("seed-hex", "--random-seed=0x5"),
    c("seed-trailing-blank", "--random-seed=5 "),
    c("seed-empty", "--random-seed="),
    c("seed-then-error", "--random-seed=5", "-c", "abc"),
    c("seed-minus-one", "--random-seed=-1", "-c", "abc"),
    c("seed-saturates", "--random-seed=18446744073709551616", "-c", "abc"),
    c("seed-negative-wraps", "--random-seed=-18446744073709551615", "-c", "abc"),
    c("seed-blank-plus", "--random-seed= +7", "-c", "abc"),
    c("seed-env-bad", env={"PGBENCH_RANDOM_SEED": "x"}),
    c("seed-env-empty", env={"PGBENCH_RANDOM_SEED": ""}),
    c("seed-env-before-options", "-Z", env={"PGBENCH_RANDOM_SEED": "x"}),
    c("seed-env-printed", "-Z", env={"PGBENCH_RANDOM_SEED": "7"}),
    c("seed-env-and-option", "--random-seed=9", "-Z", env={"PGBENCH_RANDOM_SEED": "7"}),
    # -- which problem is reported first ------------------------------------
    c("first-of-two-values", "-c", "abc", "-j", "xyz"),
    c("getopt-before-value", "-Z", "-c", "abc"),
    c("value-before-getopt", "-c", "abc", "-Z"),
    c("builtin-before-value", "-b", "foo", "-c", "abc"),
    c("operands-before-t-and-T", "-t", "5", "-T", "5", "a", "b"),
    c("weight-before-operands", "-b", "t@0", "a", "b"),
    c("operands-before-mode", "-i", "-T", "5", "a", "b"),
    c("steps-before-mode", "-i", "-I", "dtq", "-T", "5"),
    c("mode-before-partition-method", "-i", "-T", "5", "--partition-method=hash"),
    c("sampling-before-aggregate", "--sampling-rate=0.5", "--aggregate-interval=2"),
]


@pytest.fixture(scope="module")
def script_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("scripts")
    (d / "good.sql").write_text("SELECT 1;\n")
    (d / "empty.sql").write_text("")
    (d / "comments.sql").write_text("-- nothing here\n\n")
    (d / "bad.sql").write_text("\\set i 1 +\n")
    (d / "noendif.sql").write_text("\\if 1\nSELECT 1;\n")
    (d / "a@b.sql").write_text("SELECT 1;\n")
    params = ", ".join([":a"] * 256)
    (d / "params.sql").write_text(f"-- c\n  SELECT 1 \n, {params};  -- x\n")
    return d


def test_table_is_large_and_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 60


@pytest.mark.parametrize(
    "args", [("-b", "list"), ("-b", "list", "-c", "abc")], ids=["alone", "then-error"]
)
def test_builtin_list_is_pgbench_s_then_the_workloads(
    args: tuple[str, ...], pgbench_bin: Path
) -> None:
    """``-b list``: pgbench's list, then the bundled Python workloads."""
    from pgsurge.workloads.bundled import list_lines

    expected = run_pgbench(pgbench_bin, args, env=base_env())
    got = run_cli(args, env=base_env())
    assert expected.stderr.endswith("\n\n")
    assert got.stderr == expected.stderr[:-1] + list_lines() + "\n"
    assert (got.status, got.stdout) == (expected.status, expected.stdout)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_same_as_pgbench(case: Case, script_dir: Path, pgbench_bin: Path) -> None:
    args = [a.replace("{tmp}", str(script_dir)) for a in case.args]
    env = base_env() | case.env
    expected = run_pgbench(pgbench_bin, args, env=env, stdin=case.stdin)
    assert "connection to server" not in expected.stderr, "row must fail early"
    got = run_cli(args, env=env, stdin=case.stdin)
    assert got == expected


@pytest.mark.parametrize("init", [False, True], ids=["run", "init"])
def test_unparsable_uri_error_masks_its_password(init: bool, pgbench_bin: Path) -> None:
    """libpq quotes a URI it cannot parse whole, password included, and
    pgbench prints it so; pgsurge prints the same lines with the password
    masked (issue 21: no password form in any output)."""
    uri = "postgres://bob:URIPW111@[::1/postgres"
    args = ["-i", uri] if init else ["-c", "1", "-t", "1", uri]
    expected = run_pgbench(pgbench_bin, args, env=base_env())
    got = run_cli(args, env=base_env())
    assert "URIPW111" in expected.stderr
    assert "URIPW111" not in got.stderr + got.stdout
    masked = expected.stderr.replace("URIPW111", "********")
    assert (got.status, got.stdout, got.stderr) == (
        expected.status,
        expected.stdout,
        masked,
    )
