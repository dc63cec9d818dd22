"""Hostile command lines (issue 11, item 10): never a traceback.

Hypothesis builds whole command lines — options of the table (short,
long, ``--opt=value``), hostile values (empty, signs, huge, NaN, bytes that
are not UTF-8), script files and ``-D`` definitions — and runs them
in-process (``run_cli``) with ``PGHOST`` pointing nowhere, so that a line
that passes every check ends at the connection. What must hold: no
exception escapes, no traceback is printed, and the exit status is one of
the documented ones (0 success, 1 errors, 2 aborted runs).
``--embedded`` and the subcommands are left out: they start servers.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgsurge.cli.dispatch import _EXPRESSION_FRAMES
from pgsurge.cli.options import LONG_OPTIONS, SHORT_OPTIONS

from ..fix_cli import run_cli

# the program raises the recursion limit on its first run; raise it before
# hypothesis records it, so that it does not see it change under a test
sys.setrecursionlimit(max(sys.getrecursionlimit(), _EXPRESSION_FRAMES))

_SKIP = {"embedded"}  # starts the embedded server

_SHORT = [
    (f"-{ch}", SHORT_OPTIONS[i + 1 : i + 2] == ":")
    for i, ch in enumerate(SHORT_OPTIONS)
    if ch != ":"
]
_LONG = [(f"--{o.name}", o.has_arg) for o in LONG_OPTIONS if o.name not in _SKIP]

_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "0",
            "1",
            "-1",
            "2",
            "10",
            "+3",
            "0x10",
            "1e3",
            "nan",
            "inf",
            "2147483648",
            "-2147483649",
            "9223372036854775808",
            "99999999999999999999999",
            "0.5",
            "1,2,3",
            "50,99.9",
            "simple",
            "extended",
            "prepared",
            "range",
            "hash",
            "tpcb-like",
            "select-only@3",
            "simple-update@-1",
            "list",
            "dtgvp",
            "dtGvpf",
            "time",
            "rand",
            "x=1",
            "=",
            "a b",
            "-",
            "\udce9t\udce9",
            "/nonexistent/file.sql",
        ]
    ),
    st.text(alphabet=string.printable, max_size=12),
)

_SCRIPT_LINES = st.sampled_from(
    [
        "SELECT 1;",
        "SELECT :aid;",
        "select 'a;b' -- c",
        "/* unterminated",
        "\\set aid random(1, 100000 * :scale)",
        "\\set x 1 + ",
        "\\set y (((((1)))))",
        "\\set z random_zipfian(1, 10, 1.5)",
        "\\set w 9223372036854775807 + 1",
        "\\sleep 1 ms",
        "\\sleep :x us",
        "\\if :x > 1",
        "\\elif false",
        "\\else",
        "\\endif",
        "\\gset p_",
        "\\aset",
        "\\startpipeline",
        "\\endpipeline",
        "\\syncpipeline",
        "\\shell true",
        "\\setshell v echo 1",
        "\\unknown",
        "\\set",
        "BEGIN; SELECT 1 \\; SELECT 2;",
        "$$ unterminated",
        "SELECT '\udce9';",
        "",
    ]
)


@st.composite
def command_lines(draw: st.DrawFn, tmp: Path) -> list[str]:
    args: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        name, has_arg = draw(st.sampled_from(_SHORT + _LONG))
        if has_arg:
            value = draw(_VALUES)
            if name.startswith("--") and draw(st.booleans()):
                args.append(f"{name}={value}")
            else:
                args += [name, value]
        elif name in ("--percentiles", "--reconnect") and draw(st.booleans()):
            args.append(f"{name}={draw(_VALUES)}")
        else:
            args.append(name)
    if draw(st.booleans()):
        lines = draw(st.lists(_SCRIPT_LINES, max_size=8))
        path = tmp / f"s{draw(st.integers(0, 3))}.sql"
        path.write_text("\n".join(lines) + "\n", errors="surrogateescape")
        weight = draw(st.sampled_from(["", "@1", "@0", "@-2", "@x"]))
        args += ["-f", f"{path}{weight}"]
    if draw(st.booleans()):
        args += ["-D", f"{draw(_VALUES)}={draw(_VALUES)}"]
    if draw(st.booleans()):
        args.append(draw(_VALUES))  # a database name, or a stray argument
    return args


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_traceback_and_documented_status(tmp: Path, data: st.DataObject) -> None:
    args = data.draw(command_lines(tmp))
    if "-?" in args or "--help" in args or "-V" in args:
        args = [a for a in args if a not in ("-?", "--help", "-V")]
    result = run_cli(args)
    assert result.status in (0, 1, 2), (args, result.stderr)
    assert "Traceback" not in result.stderr, (args, result.stderr)
    assert "Traceback" not in result.stdout, (args, result.stdout)
