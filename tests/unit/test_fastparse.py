"""The C reader of ``\\set``/``\\if``/``\\elif`` lines against the Python parser.

``pgsurge._fastparse`` (``pgsurge.script.fastparse``) must build exactly the
tree :mod:`pgsurge.script.parser` builds -- node for node, the type of every
constant and the column of every call included -- and must give up (None,
the line then goes to the Python parser and its pgbench messages) on every
line the Python parser rejects. Hypothesis drives both over generated
expressions: well-formed ones of the whole grammar (int64 edges, doubles,
precedence, booleans, NULL, CASE, IS, deep nesting) and token soups that
are mostly errors; whole scripts read with the C reader on and off must
give the same commands or the same error text.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsurge.errors import ScriptError
from pgsurge.script import fastparse
from pgsurge.script.ast import Call, Const, Expr, IfCommand, SetCommand, Var
from pgsurge.script.compile import compile_script
from pgsurge.script.functions import ARITY
from pgsurge.script.parser import DEFAULT_SEED

pytestmark = pytest.mark.skipif(
    fastparse.meta_expr is None, reason="pgsurge._fastparse not built"
)


def _shape(expr: Expr) -> list[object]:
    """The tree in pre-order, flat, with every value's type, every call's
    column and argument count (Call equality leaves the column out;
    Const's checks types). A loop and a flat list: a chain of 5000 terms
    is a tree that deep."""
    out: list[object] = []
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, Const):
            out.append(("const", type(node.value).__name__, node.value))
        elif isinstance(node, Var):
            out.append(("var", node.name))
        else:
            assert isinstance(node, Call), node
            assert type(node.args) is tuple
            out.append(("call", node.name, node.column, len(node.args)))
            todo.extend(reversed(node.args))
    return out


def _read(text: str, native: bool) -> object:
    """The commands of a script (trees as shapes) or its error text."""
    try:
        script = compile_script("t.sql", text, check_structure=False, native=native)
    except ScriptError as e:
        return ("error", e.format())
    out: list[object] = []
    for cmd in script.commands:
        if isinstance(cmd, SetCommand | IfCommand):
            # (the tree flat: == on a deep one recurses as deep)
            out.append((dataclasses.replace(cmd, expr=Const(None)), _shape(cmd.expr)))
        else:
            out.append(cmd)
    return out


def _check_line(line: str) -> bool:
    """Compare both readers on one command line (in a small script);
    True when C took the line."""
    text = line + "\nSELECT 1;\n"
    meta_expr = fastparse.meta_expr
    assert meta_expr is not None
    hit = meta_expr(text, 0)
    python = _read(text, native=False)
    assert _read(text, native=True) == python
    if hit is None:
        return False
    kind, var, expr, first_line, start, end = hit
    # C took it: the Python parser must accept it and agree on everything
    assert isinstance(python, list), (line, python)
    cmd, shape = python[0]  # type: ignore[misc]
    assert _shape(expr) == shape
    assert first_line == cmd.first_line
    assert (start, end) == (0, len(line) + 1)
    if isinstance(cmd, SetCommand):
        assert (kind, var) == (0, cmd.var)
    else:
        assert kind == (2 if cmd.is_elif else 1) and var is None
    return True


# ---------------------------------------------------------------------------
# expressions of the whole grammar

_SPACE = st.sampled_from(["", " ", "  ", "\t", " \t ", "\f", "\v"])
_EDGE_INTS = [
    "0", "1", "007", "9223372036854775807", "9223372036854775808",
    "9223372036854775809", "18446744073709551616", "99999999999999999999999",
    "00000000000000000000000000001",
]  # fmt: skip
_DOUBLES = [
    "1.5", ".5", "1.", "0.0", "0.", ".0", "1e5", "1E5", "1e+5", "1e-5", "2.5e3",
    "1e308", "1.8e308", "1e400", "1e-300", "1e-310", "1e-400", "0e400",
    "0.000e-999", "4.9e-324", "2.2250738585072014e-308", "123456789012345678901234.5",
]  # fmt: skip
_WORDS = ["null", "NULL", "Null", "true", "TRUE", "True", "false", "FALSE"]


def _case(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.upper(), word.capitalize()])


_leaves = st.one_of(
    st.integers(0, 2**64).map(str),
    st.sampled_from(_EDGE_INTS),
    st.sampled_from(_DOUBLES),
    st.floats(min_value=0, allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(_WORDS),
    st.from_regex(r":[A-Za-z0-9_]{1,6}", fullmatch=True),
)

_BINARY = [
    "+", "-", "*", "/", "%", "=", "<>", "!=", "<", "<=", ">", ">=", "|", "#",
    "&", "<<", ">>", "and", "AND", "or", "Or",
]  # fmt: skip
_FUNCS = [*sorted(ARITY), "ABS", "Random", "nosuch", "hash_x"]


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    sp = _SPACE
    binary = st.tuples(inner, sp, st.sampled_from(_BINARY), sp, inner).map(
        lambda t: f"{t[0]}{t[1] or ' '}{t[2]}{t[3] or ' '}{t[4]}"
    )
    unary = st.tuples(st.sampled_from(["-", "+", "~", "not ", "NOT "]), sp, inner).map(
        "".join
    )
    parens = st.tuples(sp, inner, sp).map(lambda t: f"({t[0]}{t[1]}{t[2]})")
    call = st.tuples(
        st.sampled_from(_FUNCS),
        sp,
        st.booleans(),
        st.lists(inner, max_size=4),
    ).map(lambda t: f"{t[0]}{t[1]}({',' if t[2] else ''}{', '.join(t[3])})")
    whens = st.lists(st.tuples(inner, inner), min_size=1, max_size=3)
    case = st.tuples(whens, st.none() | inner).map(
        lambda t: (
            "case "
            + " ".join(f"WHEN {c} then {r}" for c, r in t[0])
            + (f" else {t[1]}" if t[1] is not None else "")
            + " END"
        )
    )
    postfix = st.tuples(
        inner,
        st.sampled_from(
            [
                " is null",
                " IS NOT NULL",
                " is true",
                " is not false",
                " isnull",
                " NOTNULL",
                " is 1",
            ]
        ),
    ).map("".join)
    return st.one_of(binary, unary, parens, call, case, postfix)


_expressions = st.recursive(_leaves, _extend, max_leaves=12)


@settings(max_examples=3000, deadline=None)
@given(_expressions, st.sampled_from(["\\set x ", "\\if ", "\\elif ", "\\SET  v_1 "]))
def test_generated_expressions_read_alike(expr: str, head: str) -> None:
    _check_line(head + expr)


# ---------------------------------------------------------------------------
# token soups: mostly errors, which C must leave to Python

_SOUP = [
    "1", "0", "9223372036854775807", "9223372036854775808", "99999999999999999999",
    "1.5", ".5", "1.", "1e5", "1e400", "1e-400", "0.0", "1e", "1..2", ".", ":a",
    ":B_1", ":", "::", "+", "-", "*", "/", "%", "=", "<>", "!=", "!", "<", "<=",
    ">", ">=", "|", "#", "&", "<<", ">>", "~", "(", ")", ",", "and", "OR",
    "Not", "is", "ISNULL", "notnull", "null", "TRUE", "false", "case", "when",
    "then", "else", "end", "abs", "random", "hash", "permute", "least", "pi",
    "foo", "@", "'", "\\", "\\\n", "é", "$", "_x", "x1",
]  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_SOUP), _SPACE), max_size=12).map(
        lambda ts: "".join(a + (b or " ") for a, b in ts)
    ),
    st.sampled_from(["\\set x ", "\\if ", "\\set ", "\\elif"]),
)
def test_token_soups_read_alike(soup: str, head: str) -> None:
    _check_line(head + soup)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=" \t\r\n\\:(),+-*1.e9aAsSeEtTiIfFlL_é", max_size=30))
def test_any_text_after_a_backslash_reads_alike(text: str) -> None:
    """Whole small scripts: the name word, the variable word, continuations
    and newlines anywhere."""
    script = "\\" + text + "\nSELECT 1;\n"
    assert _read(script, native=True) == _read(script, native=False)


_SCRIPT_PARTS = [
    "\\set x 1 + 2\n", "\\set y :x * 3", "\\if :x > 1\n", "\\elif 2\n",
    "\\else\n", "\\endif\n", "\\sleep 1 ms\n", "\\gset p_\n", "\\set z (1\n",
    "\\set bad 1e400\n", "\\set é 1\n", "select 1;", "select :x, 'a:b';",
    "begin;", "create function f() begin atomic", "end;", "(", ")", "'", "\"",
    "$$", "/*", "*/", "-- c\n", "--", "\n", " ", "\t", "\r\n", "\f", "\v", ";",
    "\\;", "\\", "x", "1", "é",
]  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_SCRIPT_PARTS), max_size=30).map("".join))
def test_whole_scripts_read_alike(text: str) -> None:
    """The C reader is asked between statements, where the SQL scanner
    would stop at a backslash after blanks and comments: the same
    commands (lines, texts, trees) or the same error, on or off."""
    assert _read(text, native=True) == _read(text, native=False)


# ---------------------------------------------------------------------------
# what C takes and what it leaves to Python


@pytest.mark.parametrize(
    "line",
    [
        "\\set v random(1, 100000 * :scale) + 7",
        "\\set aid random(1, 100000 * :scale)",
        "\\set x -9223372036854775808",
        "\\set x - 9223372036854775808 * 2",
        "\\set x 9223372036854775807",
        "\\set x 1.5e3 + .5 - 1. + 2e-3",
        "\\set x 0.0e5",
        "\\if :a > 1 and not :b is null or :c isnull",
        "\\elif :a notnull AND :b IS NOT TRUE",
        "\\set x case when :a = 1 then 2 when :a <> 3 then 4 else 5 end",
        "\\set x CASE WHEN true THEN 1 END",
        "\\set x ~:a # 3 << 2 >> 1 & 7 | 1",
        "\\set x hash(:a) + permute(1, 10) + hash(1, 2) + least(,1)",
        "\\set x abs(-5) % 3 / 2 != 1",
        "\\set x 1 is true is false",
        "\\set x random_zipfian(1, 10, 1.5) * pi()",
        "\\SET x 1",
        "\\set  x   1  ",
        "\\set x 1\r",
        "\\set x+1 2",
        "\\set x " + "(" * 60 + "1" + ")" * 60,
        "\\set x " + " + ".join(["1"] * 5000),
    ],
)
def test_common_lines_are_read_in_c(line: str) -> None:
    assert _check_line(line)


@pytest.mark.parametrize(
    "line",
    [
        # errors: Python reports them
        "\\set x 9223372036854775808",
        "\\set x 99999999999999999999",
        "\\set x 1e400",
        "\\set x 1e-400",
        "\\set x 1 < 2 < 3",
        "\\set x",
        "\\set",
        "\\set x foo(1)",
        "\\set x abs(1, 2)",
        "\\set x least()",
        "\\set x :",
        "\\set x 1 + 'a'",
        "\\if 1 is 2",
        # what C does not read at all
        "\\set x 1 + \\\n 2",
        "\\set x 1 \\gset",
        "\\set é 1",
        "\\set x :é",
        "\\sleep 1",
        "\\setshell x echo 1",
        "\\else",
        # deeper than C goes: Python (and its pgbench limits)
        "\\set x " + "(" * 70 + "1" + ")" * 70,
        "\\set x " + "-" * 70 + "1",
        "\\set x " + "not " * 70 + "true",
    ],
)
def test_other_lines_are_left_to_python(line: str) -> None:
    assert not _check_line(line)


def test_a_line_at_the_end_of_the_text() -> None:
    meta_expr = fastparse.meta_expr
    assert meta_expr is not None
    text = "SELECT 1;\n\\set x 1 + 2\r\r"
    start = text.index("\\")
    hit = meta_expr(text, start)
    assert hit is not None
    assert hit[3:] == ("\\set x 1 + 2", start, len(text))
    assert meta_expr(text, 0) is None  # not a backslash
    assert meta_expr(text, len(text)) is None


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("\\set x 1\n", 0),
        ("  \n\t\r\f\\if 1\n\\endif\n", 6),
        ("-- a comment\n\\set x 1\n", 13),
        ("--\r\\set x 1\n", 3),
        ("--é\n--\n \\set x 1\n", 8),
        ("/* c */\\set x 1\n", None),
        ("\v\\set x 1\n", None),
        ("- \\set x 1\n", None),
        ("-- \\set x 1\n", None),
        ("x\\set x 1\n", None),
        ("   ", None),
    ],
)
def test_what_the_sql_scanner_drops_before_a_command_is_skipped(
    text: str, start: int | None
) -> None:
    # between statements the reader is asked at the scanner's position
    meta_expr = fastparse.meta_expr
    assert meta_expr is not None
    hit = meta_expr(text, 0)
    assert (None if hit is None else hit[4]) == start
    assert _read(text, native=True) == _read(text, native=False)


def test_a_non_ascii_script_still_reads_its_ascii_lines_in_c() -> None:
    meta_expr = fastparse.meta_expr
    assert meta_expr is not None
    text = "SELECT 'é';\n\\set x 1 + :y\n"
    hit = meta_expr(text, text.index("\\"))
    assert hit is not None
    cmd = compile_script("t", text, native=False).commands[1]
    assert isinstance(cmd, SetCommand)
    assert _shape(hit[2]) == _shape(cmd.expr)


def test_the_pure_paths_do_not_use_it() -> None:
    env = {**os.environ, "PGSURGE_PURE": "1"}
    code = "from pgsurge.script import fastparse; assert fastparse.meta_expr is None"
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


@pytest.mark.parametrize("text", ["\\set x 1 + 2\n", "\\set x 1 +\n", ""])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(text: str, enabled: bool) -> None:
    # the parse turns the cyclic collector off while it reads, and back on
    # only when it was on, error or not
    import gc

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        try:
            compile_script("t", text)
        except ScriptError:
            pass
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_trees_read_in_c_are_not_tracked_by_the_collector() -> None:
    # acyclic by construction: reference counting frees them, and the
    # collector's passes need not walk them
    import gc

    meta_expr = fastparse.meta_expr
    assert meta_expr is not None
    hit = meta_expr("\\set x hash(:a) + case when :b then 1.5 end\n", 0)
    assert hit is not None
    todo: list[object] = [hit[2]]
    while todo:
        node = todo.pop()
        assert not gc.is_tracked(node), node
        if isinstance(node, Call):
            assert not gc.is_tracked(node.args)
            todo.extend(a for a in node.args if a is not DEFAULT_SEED)


def test_configure_refuses_classes_without_those_slots() -> None:
    import pgsurge._fastparse as native  # type: ignore[import-not-found]

    class Plain:
        value: object = None

    with pytest.raises(TypeError):
        native.configure(Plain, Var, Call, {}, DEFAULT_SEED)
    # configured again as pgsurge does: it reads lines as before
    assert fastparse._load() is not None
    assert _check_line("\\set x 1 + hash(:a)")
