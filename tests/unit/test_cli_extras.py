"""The report-extras options: --percentiles, --client-cpu, --extended-report, --json.

They are pgsurge's own options, so most checks here assert our rules
(values, defaults, errors, the run-mode rule) on ``parse_command_line`` and
``cli.main``. One check is differential: every abbreviation that pgbench
18.6 understands keeps pgbench's meaning and messages, run against the real
binary, so the new names never make a pgbench command line ambiguous.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgsurge.cli.getopt import Getopt
from pgsurge.cli.help import HELP
from pgsurge.cli.options import LONG_OPTIONS, parse_command_line
from pgsurge.cli.values import (
    DEFAULT_PERCENTILES,
    MAX_PERCENTILES,
    parse_percentiles,
)
from pgsurge.config import RunConfig
from pgsurge.errors import UsageError
from pgsurge.report.extras import DEFAULT_PERCENTILES as REPORT_DEFAULTS
from pgsurge.report.extras import percentile_label
from tests.fix_cli import run_cli, run_pgbench

NEW_OPTIONS = ("percentiles", "client-cpu", "extended-report", "json", "html")


def run(*args: str) -> RunConfig:
    err = io.StringIO()
    cfg = parse_command_line(list(args), environ={}, stderr=err)
    assert err.getvalue() == ""
    assert isinstance(cfg, RunConfig)
    return cfg


def error_of(*args: str) -> str:
    """The complete stderr of a rejected command line (status 1, no stdout)."""
    result = run_cli(args)
    assert (result.status, result.stdout) == (1, "")
    return result.stderr


# -- defaults and spellings ---------------------------------------------------


def test_defaults_keep_pgbench_output() -> None:
    cfg = run()
    assert (cfg.percentiles, cfg.client_cpu, cfg.json_path) == (None, False, None)


def test_default_list_is_the_reports() -> None:
    assert DEFAULT_PERCENTILES == REPORT_DEFAULTS == (50.0, 90.0, 99.0, 99.9)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--percentiles"], DEFAULT_PERCENTILES),
        (["--pe"], DEFAULT_PERCENTILES),
        (["--percentiles=99"], (99.0,)),
        (["--perc=50,99.9"], (50.0, 99.9)),
        (["--percentiles=99.9,50,99.9,50.0"], (50.0, 99.9)),
        (["--percentiles=100,0.0001"], (0.0001, 100.0)),
        (["--percentiles=99.90000"], (99.9,)),
        (["--percentiles= 50 , 99 "], (50.0, 99.0)),
        (["--percentiles=.5,5.,07"], (0.5, 5.0, 7.0)),
        (["--percentiles=99.9999"], (99.9999,)),
        # a later option wins, as for every pgbench option
        (["--percentiles=1", "--percentiles"], DEFAULT_PERCENTILES),
        (["--percentiles", "--percentiles=1"], (1.0,)),
    ],
)
def test_percentiles_values(args: list[str], expected: tuple[float, ...]) -> None:
    assert run(*args).percentiles == expected


def test_percentiles_value_is_never_the_next_word() -> None:
    # getopt_long's optional_argument: the next word stays an operand
    cfg = run("--percentiles", "99", "-c", "2")
    assert (cfg.percentiles, cfg.conn.dbname, cfg.clients) == (
        DEFAULT_PERCENTILES,
        "99",
        2,
    )
    assert run("--percentiles", "--", "-c").conn.dbname == "-c"


def test_at_most_twenty_distinct() -> None:
    values = ",".join(str(i) for i in range(1, MAX_PERCENTILES + 1))
    assert len(run(f"--percentiles={values},1,2").percentiles or ()) == MAX_PERCENTILES


_ACCEPTED = st.integers(min_value=1, max_value=100 * 10**4).map(
    lambda n: Decimal(n).scaleb(-4)
)


@given(st.lists(_ACCEPTED, min_size=1, max_size=MAX_PERCENTILES))
def test_accepted_values_have_exact_labels(values: list[Decimal]) -> None:
    text = ",".join(str(v) for v in values)
    parsed = parse_percentiles(text)
    assert parsed == tuple(sorted({float(v) for v in values}))
    for p in parsed:
        label = percentile_label(p)
        # what the report prints names the value exactly, without exponent
        assert "e" not in label and Decimal(label) == Decimal(str(p))


def test_client_cpu_and_extended_report() -> None:
    cfg = run("--client-cpu")
    assert (cfg.client_cpu, cfg.percentiles) == (True, None)
    assert run("--client-").client_cpu  # --client is still pgbench's
    cfg = run("--extended-report")
    assert (cfg.client_cpu, cfg.percentiles) == (True, DEFAULT_PERCENTILES)
    # it stands for "--percentiles --client-cpu" where it is written
    assert run("--ext", "--percentiles=99").percentiles == (99.0,)
    assert run("--percentiles=99", "--ext").percentiles == DEFAULT_PERCENTILES


def test_json_spellings(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    assert run(f"--json={target}").json_path == str(target)
    assert run("--json", str(target), "db").json_path == str(target)
    assert run("--js", "-").json_path == "-"
    assert run("--json=-").json_path == "-"
    assert run("--json", "-", "--json", "x.json").json_path == "x.json"
    assert not target.exists()  # written when the run ends, not now
    target.write_text("old")
    assert run(f"--json={target}").json_path == str(target)


def test_config_with_extras_is_picklable() -> None:
    cfg = run("--extended-report", "--json=-")
    assert pickle.loads(pickle.dumps(cfg)) == cfg


# -- errors -------------------------------------------------------------------

_NUMBERS = 'pgsurge: detail: Expecting a comma-separated list of numbers, such as "50,90,99,99.9".\n'  # noqa: E501
_RANGE = "pgsurge: detail: A percentile must be greater than 0 and at most 100.\n"
_PLACES = "pgsurge: detail: A percentile may have at most 4 decimal places.\n"
_INIT = (
    "pgsurge: error: some of the specified options cannot be used in"
    " initialization (-i) mode\n"
)
_HINT = 'pgsurge: hint: Try "pgsurge --help" for more information.\n'


def _bad(item: str) -> str:
    return f'pgsurge: error: invalid percentile "{item}" for option --percentiles\n'


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (["--percentiles="], _bad("") + _NUMBERS),
        (["--percentiles=abc"], _bad("abc") + _NUMBERS),
        (["--percentiles=50,,99"], _bad("") + _NUMBERS),
        (["--percentiles=50,"], _bad("") + _NUMBERS),
        (["--percentiles=50;99"], _bad("50;99") + _NUMBERS),
        (["--percentiles=+50"], _bad("+50") + _NUMBERS),
        (["--percentiles=-1"], _bad("-1") + _NUMBERS),
        (["--percentiles=1e2"], _bad("1e2") + _NUMBERS),
        (["--percentiles=nan"], _bad("nan") + _NUMBERS),
        (["--percentiles=inf"], _bad("inf") + _NUMBERS),
        (["--percentiles=99%"], _bad("99%") + _NUMBERS),
        (["--percentiles=50,0x10"], _bad("0x10") + _NUMBERS),
        (["--percentiles=0"], _bad("0") + _RANGE),
        (["--percentiles=0.00"], _bad("0.00") + _RANGE),
        (["--percentiles=50,100.0001"], _bad("100.0001") + _RANGE),
        (["--percentiles=101"], _bad("101") + _RANGE),
        (["--percentiles=99.99999"], _bad("99.99999") + _PLACES),
        (["--percentiles=0.00001"], _bad("0.00001") + _PLACES),
        (
            ["--percentiles=" + ",".join(str(i) for i in range(1, 22))],
            "pgsurge: error: at most 20 percentiles are allowed with"
            " --percentiles, got 21\n",
        ),
        # the first problem met is reported, in command-line order
        (["--percentiles=x", "-c", "0"], _bad("x") + _NUMBERS),
        (
            ["-c", "0", "--percentiles=x"],
            "pgsurge: error: -c/--client must be in range 1..2147483647\n",
        ),
        # getopt's own complaints
        (
            ["--client-cpu=1"],
            "pgsurge: option '--client-cpu' doesn't allow an argument\n" + _HINT,
        ),
        (
            ["--extended-report=x"],
            "pgsurge: option '--extended-report' doesn't allow an argument\n" + _HINT,
        ),
        (["--json"], "pgsurge: option '--json' requires an argument\n" + _HINT),
        (["--js"], "pgsurge: option '--json' requires an argument\n" + _HINT),
        (
            ["--json="],
            'pgsurge: error: invalid value "" for option --json\n'
            'pgsurge: detail: Expecting a file name, or "-" for standard output.\n',
        ),
        # run-mode options, like pgbench's benchmarking options
        (["-i", "--percentiles"], _INIT),
        (["-i", "--percentiles=99"], _INIT),
        (["--client-cpu", "-i"], _INIT),
        (["-i", "--extended-report"], _INIT),
        (["-i", "--json=-"], _INIT),
        (["-i", "--json=/nonexistent/dir/x.json"], _INIT),
        # pgbench's run-mode rules come before our file check
        (
            ["--json=/nonexistent/dir/x.json", "-t", "1", "-T", "1"],
            "pgsurge: error: specify either a number of transactions (-t) or a"
            " duration (-T), not both\n",
        ),
    ],
)
def test_errors(args: list[str], stderr: str) -> None:
    assert error_of(*args) == stderr


def test_json_file_that_cannot_be_written(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "r.json"
    assert error_of(f"--json={missing}") == (
        f'pgsurge: error: cannot write file "{missing}" for option --json:'
        " No such file or directory\n"
    )
    assert error_of("--json", str(tmp_path)) == (
        f'pgsurge: error: cannot write file "{tmp_path}" for option --json:'
        " Is a directory\n"
    )
    assert not missing.parent.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_json_in_read_only_directory(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        assert error_of(f"--json={tmp_path / 'r.json'}").endswith(
            "for option --json: Permission denied\n"
        )
    finally:
        tmp_path.chmod(0o700)


def test_parse_percentiles_raises_usage_error() -> None:
    with pytest.raises(UsageError, match="--percentiles"):
        parse_percentiles("x")


# -- abbreviations: pgbench's stay pgbench's ----------------------------------

PGBENCH_NAMES = [o.name for o in LONG_OPTIONS if not o.extension]
OUR_NAMES = [o.name for o in LONG_OPTIONS if o.extension]


def _prefixes() -> list[str]:
    return sorted({name[:n] for name in OUR_NAMES for n in range(1, len(name) + 1)})


def test_new_names_are_extensions() -> None:
    assert set(NEW_OPTIONS) <= set(OUR_NAMES)
    assert not set(OUR_NAMES) & set(PGBENCH_NAMES)


@pytest.mark.parametrize("prefix", _prefixes())
def test_abbreviation_against_pgbench(prefix: str, pgbench_bin: Path) -> None:
    """``--PREFIX=x`` for every prefix of our long options.

    Where a pgbench option starts with it, pgsurge must say exactly what
    pgbench says (each such probe fails before connecting: ambiguous, a
    flag given a value, or a bad value). Otherwise pgbench does not know
    the word, and it is ours alone: the one extension it abbreviates.
    """
    args = [f"--{prefix}=x"]
    ref = run_pgbench(pgbench_bin, args)
    ours = run_cli(args)
    if any(name.startswith(prefix) for name in PGBENCH_NAMES):
        assert ref.status != 0
        assert ours == ref
        return
    assert ref.stderr.startswith(f"pgsurge: unrecognized option '--{prefix}=x'\n")
    matches = [name for name in OUR_NAMES if name.startswith(prefix)]
    if prefix not in matches and len(matches) > 1:
        # shared by two of ours (--dask, --dask-collect-logs): getopt's word
        assert ours.status == 1
        assert ours.stderr.startswith(f"pgsurge: option '--{prefix}=x' is ambiguous")
        return
    # a whole name wins over the longer names it starts
    match = prefix if prefix in matches else matches[0]
    # which option the word means to us (without running anything)
    words = Getopt([f"--{prefix}", "v"], "", LONG_OPTIONS)
    assert next(iter(words))[0] == match


@pytest.mark.parametrize(
    "args", [["--p", "3"], ["--c", "3"], ["--j"], ["--e=1"], ["--cl"], ["--in"]]
)
def test_ambiguity_messages_unchanged(args: list[str], pgbench_bin: Path) -> None:
    # values as separate words too, for the prefixes our names share
    ref = run_pgbench(pgbench_bin, args)
    assert ref.status == 1
    assert run_cli(args) == ref


# -- help ---------------------------------------------------------------------


def test_help_lists_extras_with_benchmarking_options() -> None:
    text = HELP
    group = text.split("Benchmarking options:\n")[1].split("\n\n")[0]
    lines = group.splitlines()
    for name in NEW_OPTIONS:
        (line,) = [ln for ln in lines if ln.startswith(f"  --{name}")]
        # pgbench's layout: the description starts in column 27
        assert line[26] == " " and line[27] != " " and len(line) <= 80
    assert '"-": stdout, the text report then goes to stderr' in group
    assert "--percentiles[=LIST]" in group and "50,90,99,99.9" in group
    # in the order of the names (--dask before --dask-collect-logs)
    longs = [
        re.split(r"[=\[]", ln.split()[0])[0] for ln in lines if ln.startswith("  --")
    ]
    assert longs == sorted(longs)
