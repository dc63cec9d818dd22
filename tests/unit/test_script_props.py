"""Property tests of the script reader (hypothesis).

* Any text either parses or raises ``ScriptError`` (never another
  exception), and SQL variable plans rebuild the SQL text.
* Every expression tree the parser can build prints (``format_expr``) to a
  text that parses back to the same tree.
"""

from __future__ import annotations

import math
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from pgsurge.errors import ScriptError
from pgsurge.script.ast import Call, Const, Expr, SqlCommand, Var
from pgsurge.script.compile import parse_script
from pgsurge.script.functions import ARITY
from pgsurge.script.parser import format_expr, parse_expr
from pgsurge.script.sqlvars import split_variables, to_params

# pieces that exercise every lexer state
_PIECES = [
    "\\set x ", "\\if ", "\\elif ", "\\else", "\\endif", "\\sleep ", "\\gset",
    "\\aset p", "\\shell ", "\\setshell v ", "\\startpipeline", "\\foo", "\\",
    "\\;", "\\:", "\n", "\r\n", " ", "\t", ";", "'", "''", '"', "$$", "$a$",
    "$1", "E'", "U&'", "b'", "/*", "*/", "--", "(", ")", ",", ":", "::", ":x",
    ":'x'", "select ", "1", "1.5", "9223372036854775808", "99999999999999999999",
    "1e999", "+", "-", "*", "/", "%", "<", ">", "=", "!", "~", "#", "&", "|",
    "and ", "not ", "is ", "null", "true", "case ", "when ", "then ", "else ",
    "end ", "abs(", "hash(", "least(", "foo(", "ms", "us", "\u00e9", "\\\n",
    "begin ", "create function ", "\v", "\0",
]  # fmt: skip

script_texts = st.one_of(
    st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    st.text(max_size=200),
)


@settings(max_examples=400)
@given(script_texts)
def test_parse_script_raises_only_script_errors(text: str) -> None:
    try:
        script = parse_script("p.sql", text)
    except ScriptError as e:
        out = e.format()
        assert out.startswith("pgsurge: error: ")
        assert out.endswith("\n")
        return
    assert script.commands
    for cmd in script.commands:
        assert cmd.lineno >= 1
        if isinstance(cmd, SqlCommand):
            parts = cmd.simple_parts
            rebuilt = "".join(p if i % 2 == 0 else ":" + p for i, p in enumerate(parts))
            assert rebuilt == cmd.text
            assert to_params(parts) == (cmd.param_text, cmd.param_vars)
            assert cmd.nqueries >= 1


@given(st.text(max_size=100))
def test_split_variables_rebuilds_text(sql: str) -> None:
    parts = split_variables(sql)
    assert len(parts) % 2 == 1
    assert "".join(p if i % 2 == 0 else ":" + p for i, p in enumerate(parts)) == sql
    for name in parts[1::2]:
        # no leading ASCII digit; any other character beyond ASCII may start
        # a name in pgbench (":¹" is the variable "¹", which str.isdigit
        # calls a digit: hypothesis found it)
        assert name and not "0" <= name[0] <= "9"


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_parse_expr_raises_only_script_errors(text: str) -> None:
    try:
        parse_expr(text)
    except ScriptError:
        pass


# --------------------------------------------------------------------------
# trees in the parser's image

_name_chars = st.characters(
    codec="utf-8", categories=("Lu", "Ll", "Nd"), exclude_characters="\x00"
) | st.sampled_from("_abcXYZ019")

# expression variables: ":" then ASCII letters/digits/"_" or any non-ASCII
var_names = st.text(_name_chars, min_size=1, max_size=8).filter(
    lambda s: all(c == "_" or c.isalnum() or not c.isascii() for c in s)
)

doubles = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False).filter(
    lambda d: d == 0.0 or d >= sys.float_info.min
)

leaves = st.one_of(
    st.just(Const(None)),
    st.booleans().map(Const),
    st.integers(0, 2**63 - 1).map(Const),
    st.just(Const(-(2**63))),
    doubles.map(Const),
    var_names.map(Var),
)

_BINARY = ["+", "-", "*", "/", "mod", "=", "<>", "<", "<=", "&", "|", "#", "<<", ">>"]
_SEEDED = {"hash", "hash_murmur2", "hash_fnv1a", "permute"}


def _calls(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.tuples(
        st.sampled_from([*_BINARY, "and", "or"]), children, children
    ).map(lambda t: Call(t[0], (t[1], t[2])))
    neg = children.map(lambda e: Call("-", (Const(0), e)))
    inv = children.map(lambda e: Call("#", (Const(-1), e)))
    not_ = children.map(lambda e: Call("not", (e,)))
    is_ = st.tuples(children, st.sampled_from([None, True, False])).map(
        lambda t: Call("is", (t[0], Const(t[1])))
    )
    case = st.lists(children, min_size=3, max_size=7).filter(lambda a: len(a) % 2 == 1)
    case_call = case.map(lambda a: Call("case", tuple(a)))

    @st.composite
    def function(draw: st.DrawFn) -> Expr:
        name = draw(st.sampled_from(sorted(ARITY)))
        low, high = ARITY[name]
        count = draw(st.integers(low, high if high is not None else low + 3))
        if name in _SEEDED:
            count = high if high is not None else count
        args = draw(st.lists(children, min_size=count, max_size=count))
        return Call(name, tuple(args))

    return st.one_of(binary, neg, inv, not_, is_, case_call, function())


trees = st.recursive(leaves, _calls, max_leaves=25)


@settings(max_examples=400)
@given(trees)
def test_format_parse_round_trip(tree: Expr) -> None:
    text = format_expr(tree)
    assert parse_expr(text) == tree


@given(trees)
def test_format_is_stable(tree: Expr) -> None:
    text = format_expr(tree)
    assert format_expr(parse_expr(text)) == text


def test_double_literals_keep_their_value() -> None:
    for value in (0.1, 1e-300, 1.7976931348623157e308, 2.2250738585072014e-308):
        parsed = parse_expr(format_expr(Const(value)))
        assert isinstance(parsed, Const)
        assert isinstance(parsed.value, float) and math.isclose(parsed.value, value)
