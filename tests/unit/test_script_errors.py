"""Differential test of script errors against the real pgbench 18.6.

Each row is a script. The real binary runs it with ``-h`` pointing at a
directory without a server, so a script it accepts fails only later, at
the connection; a script it rejects prints its parse error. pgsurge's
``parse_script`` must reject exactly the same scripts with exactly the
same text (``pgbench: `` replaced by ``pgsurge: ``), and accept the rest.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgsurge.cli.dispatch import _allow_deep_expressions
from pgsurge.config import QueryMode
from pgsurge.errors import ScriptError
from pgsurge.script.compile import check_query_mode, parse_script
from tests.fix_run import run_pgbench

SCRIPT = "s.sql"

# (id, script text). Rows cover every message pgbench reports while reading
# a script, caret placement, and scripts that must be accepted.
ROWS: list[tuple[str, str]] = [
    # -- unknown / malformed meta commands
    ("unknown-cmd", "\\foo bar\n"),
    ("unknown-cmd-alone", "\\foo"),
    ("unknown-cmd-after-sql", "select 1;\n\\nosuch x y z\n"),
    ("unknown-double-backslash", "\\\\set x 1\n"),
    ("lone-backslash", "\\\nselect 1;\n"),
    ("backslash-space-set", "\\ set x 1\n"),
    ("upper-case-set", "\\SET x 1\n"),
    ("mixed-case-sleep", "\\Sleep 1 MS\n"),
    # -- \set and expressions
    ("set-missing-arg", "\\set\n"),
    ("set-missing-expr", "\\set x\n"),
    ("set-missing-expr-eof", "\\set x"),
    ("set-trailing-op", "\\set x 1 +\n"),
    ("set-trailing-op-eof", "\\set x 1 +"),
    ("set-unknown-function", "\\set x foo(1)\n"),
    ("set-unknown-function-then-bad-char", "\\set x foo(1) $\n"),
    ("set-function-without-parens", "\\set x abs\n"),
    ("set-abs-2-args", "\\set x abs(1,2)\n"),
    ("set-abs-0-args", "\\set x abs()\n"),
    ("set-abs-2-args-then-more", "\\set x abs(1,2) + 3\n"),
    ("set-pi-1-arg", "\\set x pi(1)\n"),
    ("set-least-0-args", "\\set x least()\n"),
    ("set-greatest-0-args", "\\set x GREATEST()\n"),
    ("set-hash-0-args", "\\set i hash()\n"),
    ("set-hash-3-args", "\\set i hash(1,2,3)\n"),
    ("set-permute-1-arg", "\\set i permute(1)\n"),
    ("set-permute-4-args", "\\set i permute(1,2,3,4)\n"),
    ("set-random-1-arg", "\\set i random(1)\n"),
    ("set-random-gaussian-2", "\\set i random_gaussian(1, 10)\n"),
    ("set-random-zipfian-4", "\\set i random_zipfian(1, 10, 1.5, 2)\n"),
    ("set-unclosed-call", "\\set x 1 + abs(1,2"),
    ("set-leading-comma-ok", "\\set x abs(,-3)\n"),
    ("set-only-comma", "\\set x abs(,)\n"),
    ("set-two-commas", "\\set x least(,,1)\n"),
    ("set-maxint-plus-one", "\\set x 9223372036854775808\n"),
    ("set-int64-min-ok", "\\set x -9223372036854775808\n"),
    ("set-int64-min-spaced-ok", "\\set x - 9223372036854775808 * 1\n"),
    ("set-maxint-after-binary-minus", "\\set x 1 - 9223372036854775808\n"),
    ("set-maxint-in-parens", "\\set x -(9223372036854775808)\n"),
    ("set-bigint-overflow", "\\set i 100000000000000000000\n"),
    ("set-bigint-overflow-leading-zero", "\\set i 09223372036854775808\n"),
    ("set-leading-zeros-ok", "\\set x 000000000000000000000000000001\n"),
    ("set-double-overflow", "\\set d 1.0E309\n"),
    ("set-double-overflow-2", "\\set d .1E310\n"),
    ("set-double-underflow", "\\set d 1e-400\n"),
    ("set-double-subnormal", "\\set d 1e-310\n"),
    ("set-double-min-subnormal", "\\set d 4.9406564584124654e-324\n"),
    ("set-double-min-normal-ok", "\\set d 2.2250738585072014e-308\n"),
    ("set-double-max-ok", "\\set d 1.7976931348623158e308\n"),
    ("set-double-above-max", "\\set d 1.7976931348623159e308\n"),
    ("set-double-zero-exponent-ok", "\\set d 0e-999\n"),
    ("set-double-forms-ok", "\\set x 1.e5 + .5e1 + 1. + 1.5E+3 + 2e-3\n"),
    ("set-int-then-ident", "\\set x 1e\n"),
    ("set-unexpected-char", "\\set x 1 $ 2\n"),
    ("set-lone-dot", "\\set x .\n"),
    ("set-lone-colon", "\\set x :\n"),
    ("set-bang", "\\set x ! 1\n"),
    ("set-digit-variable-ok", "\\set x :1abc\n"),
    ("set-utf8-function", "\\set x \u00e9\n"),
    ("set-utf8-after-value", "\\set x 1 \u00e9\n"),
    ("set-utf8-caret-after", "\\set x '\u00e9\u00e9' \n"),
    ("set-binary-tilde", "\\set x 1 ~ 2\n"),
    ("set-chained-comparison", "\\set x 1 < 2 < 3\n"),
    ("set-chained-equal", "\\set x 1 = 2 <> 3\n"),
    ("set-chained-is-null-ok", "\\set x 1 is null is null\n"),
    ("set-isnull-notnull-ok", "\\set x 1 isnull = 2 notnull\n"),
    ("set-is-number", "\\set x 1 is 2\n"),
    ("set-is-not-not", "\\set x 1 is not not null\n"),
    ("set-case-ok", "\\set x CASE WHEN 1 THEN 2 WHEN 3 THEN 4 ELSE 5 END\n"),
    ("set-case-double-end", "\\set x case when 1 then 2 end end\n"),
    ("set-case-no-when", "\\set x case else 1 end\n"),
    ("set-case-no-then", "\\set x case when 1 end\n"),
    ("set-case-unclosed", "\\set x case when 1 then 2\n"),
    ("set-keyword-as-value", "\\set x then\n"),
    ("set-unbalanced-paren", "\\set x (1 + 2\n"),
    ("set-extra-paren", "\\set x (1 + 2))\n"),
    ("set-empty-parens", "\\set x ()\n"),
    ("set-two-values", "\\set x 1 2\n"),
    ("set-not-prefix-ok", "\\set x not 1 = 2 and not true or false\n"),
    ("set-and-missing-rhs", "\\set x true and\n"),
    ("set-continuation-error", "\\set x 1 + \\\n  ( 2\n"),
    ("set-continuation-error-then-sql", "\\set x 1 + \\\n  ( 2\nselect 1;\n"),
    ("set-continuation-crlf", "\\set x 1 \\\r\n + (\n"),
    ("set-backslash-in-expr", "\\set x 1 \\ 2\n"),
    ("set-error-later-line", "select 1\n,\n2; \\set x (\n"),
    ("set-error-after-block-comment", "/* \n\n */ \\set x (\n"),
    ("set-error-after-cr-only", "select 1;\r\r\\set x (\n"),
    ("set-error-after-continued-set", "\\set y 1 \\\n+ 2\n\\set x (\n"),
    ("set-error-after-quoted-colon", "select ':';\n\\set x (\n"),
    ("set-overflow-after-syntax-error", "\\set x 1 + ) 99999999999999999999\n"),
    ("set-tab-caret", "\\set\tx\t1 +\t)\n"),
    # -- \if family
    ("if-missing-expr", "\\if\n"),
    ("elif-missing-expr", "\\elif\n"),
    ("if-two-values", "\\if 1 2\n"),
    ("if-syntax-error-inside", "\\if 1\n\\set x (\n\\endif\n"),
    ("else-after-else", "\\if 1\n\\else\n\\else\n\\endif\n"),
    ("elif-after-else", "\\if 1\n\\else\n\\elif 1\n\\endif\n"),
    ("endif-without-if", "\\endif\n"),
    ("if-without-endif", "\\if 1\n"),
    ("elif-without-if", "\\elif 1\n"),
    ("else-without-if", "\\else\n"),
    ("nested-if-unclosed", "select 1;\n\\if 1\n\\if 0\n\\endif\n"),
    ("else-after-closed-if", "\\if 1\n\\else\n\\endif\n\\if 2\n\\endif\n\\else\n"),
    ("if-nested-ok", "\\if 1\n\\if 2\n\\elif 3\n\\else\n\\endif\n\\elif 4\n\\endif\n"),
    ("else-extra-arg", "\\else extra\n"),
    ("endif-extra-arg", "\\endif x\n"),
    ("if-structure-after-syntax", "\\if 1\n\\foo\n"),
    # -- \sleep
    ("sleep-missing", "\\sleep\n"),
    ("sleep-too-many", "\\sleep 1 ms x\n"),
    ("sleep-glued-bad-unit", "\\sleep 1x\n"),
    ("sleep-not-a-number", "\\sleep abc\n"),
    ("sleep-bad-unit", "\\sleep 10 min\n"),
    ("sleep-glued-bad-unit-2", "\\sleep 10min\n"),
    ("sleep-glued-unit-ok", "\\sleep 10ms\n"),
    ("sleep-variable-ok", "\\sleep :x ms\n"),
    ("sleep-negative-ok", "\\sleep -5\n"),
    ("sleep-signed-ok", "\\sleep +5 us\n"),
    ("sleep-sign-only-ok", "\\sleep -\n"),
    ("sleep-number-as-unit", "\\sleep 1 2\n"),
    ("sleep-glued-and-unit", "\\sleep 1x ms\n"),
    ("sleep-variable-bad-unit", "\\sleep :x min\n"),
    ("sleep-continued-args", "\\sleep 1 \\\nms x\n"),
    ("sleep-utf8-unit", "\\sleep 1\u00e9\n"),
    # -- \shell, \setshell
    ("shell-missing", "\\shell\n"),
    ("setshell-missing", "\\setshell x\n"),
    ("setshell-nothing", "\\setshell\n"),
    ("shell-ok", "\\shell echo :x ::y\n"),
    ("shell-too-many", "\\shell" + " a" * 256 + "\n"),
    ("shell-max-args-ok", "\\shell" + " a" * 255 + "\n"),
    # -- pipelines: nothing is checked while parsing
    ("startpipeline-arg", "\\startpipeline x\n"),
    ("syncpipeline-arg", "\\syncpipeline 1\n"),
    ("endpipeline-arg", "\\endpipeline now\n"),
    ("pipeline-double-start-ok", "\\startpipeline\n\\startpipeline\n"),
    ("pipeline-end-only-ok", "\\endpipeline\n"),
    ("pipeline-gset-ok", "\\startpipeline\nselect 1 \\gset\n\\endpipeline\n"),
    # -- \gset / \aset
    ("gset-first", "\\gset\n"),
    ("aset-first", "\\aset\n"),
    ("gset-after-meta", "\\set x 1\n\\gset\n"),
    ("gset-after-gset", "select 1 \\gset\n\\gset\n"),
    ("gset-too-many", "select 1 \\gset a b\n"),
    ("gset-too-many-first", "\\gset a b c\n"),
    ("gset-after-semicolon-ok", "select 1;\n\\gset\n"),
    ("gset-after-comment-ok", "select 1;\n-- c\n\n\\gset p\n"),
    ("gset-compound-ok", "select 1 \\; select 2 \\gset\n"),
    ("aset-ok", "select 1 \\aset\n"),
    ("aset-prefix-ok", "select 1; \\aset x\n"),
    ("gset-after-sleep", "\\sleep 1\n\\gset\n"),
    ("gset-after-multiline-meta", "\\set x 1 + \\\n 2\n\\aset\n"),
    # -- empty scripts
    ("empty", ""),
    ("only-comment", "-- c\n\n"),
    ("only-spaces-and-vt", " \t\v\n"),
    ("only-block-comment-ok", "/* c */\n"),
    ("only-semicolon-ok", "  \n;\n"),
    ("only-lone-backslash", "\\\n"),
    # -- SQL splitting that must be accepted
    ("sql-mid-line-meta-ok", "select 1 \\set x 2\n"),
    ("sql-unterminated-quote-ok", "select 'abc\n"),
    ("sql-unterminated-comment-ok", "select 1 /* abc\n"),
    ("sql-unterminated-dollar-ok", "select $$abc\n"),
    ("sql-quoted-backslash-ok", "select '\\foo';\n"),
    ("sql-dollar-quoted-backslash-ok", "select $x$ \\foo $x$;\n"),
    ("sql-comment-backslash", "select 1; -- \\foo\n"),
    ("sql-block-comment-backslash-ok", "select 1 /* \\foo */;\n"),
    ("sql-e-string-backslash-ok", "select E'\\'\\foo';\n"),
    ("sql-e-string-backslash-bad", "select E'\\\\'\\foo';\n"),
    ("sql-std-string-backslash-bad", "select '\\'\\foo';\n"),
    ("sql-ident-backslash-ok", 'select 1 as "\\foo";\n'),
    ("sql-psql-var-quote", "select :'x'\\foo';\n"),
    ("sql-nested-comment-ok", "select 1 /* a /* b */ \\foo */;\n"),
    ("sql-nested-comment-bad", "select 1 /* a */ \\foo */;\n"),
    ("sql-escaped-semicolon-ok", "select 1 \\; select 2;\n"),
    ("sql-escaped-colon-ok", "select 1 \\:x;\n"),
    (
        "sql-begin-atomic-ok",
        "create function f() returns int begin atomic; select 1; end;\n",
    ),
    ("sql-dollar-ident-ok", "select a$b$ \\foo\n"),
    ("sql-string-continuation", "select 'a'\n'\\foo';\n"),
    ("sql-string-no-continuation", "select 'a' '\\x' \\foo;\n"),
    ("sql-u-amp-string", "select U&'\\foo';\n"),
    ("sql-param-then-dollar-quote", "select $1$a$ \\foo $a$;\n"),
    ("sql-number-then-dollar-quote", "select 1$a$ \\foo $a$;\n"),
    ("sql-number-junk-dollar", "select 1_$a$ \\foo $a$;\n"),
    ("sql-dollar-no-close", "select $a \\foo\n"),
    ("sql-newline-then-gset-ok", "select 1\n\\gset\n"),
    # -- more caret and layout cases
    ("sleep-utf8-number", "\\sleep \u00e9\u00e9 ms\n"),
    ("sleep-unit-after-utf8", "\\sleep 1 \u00e9\n"),
    ("set-gset-inside-expr", "\\set x 1 \\gset\n"),
    ("set-utf8-var-ok", "\\set \u00e9t\u00e9 :\u00e9t\u00e9 + 1\n"),
    ("set-var-name-is-checked-later-ok", "\\set 1x 1\n"),
    ("if-caps-keywords-ok", "\\IF :x IS NOT NULL AND NOT FALSE\n\\ENDIF\n"),
    ("set-colon-at-eof", "\\set x :"),
    ("set-error-on-third-line", "select 1;\nselect 2;\n\\set x 1 + * 2\n"),
    ("setshell-too-many", "\\setshell v" + " a" * 255 + "\n"),
    ("gset-after-comment-only", "-- c\n\\gset\n"),
    ("meta-word-continuation", "\\sleep\\\n 1 \\\nms\n"),
]


def _fuzz_expressions(seed: int, count: int) -> list[str]:
    """Random expressions from pgbench's grammar, some broken by a random
    edit, for a seeded (reproducible) differential run."""
    rnd = random.Random(seed)
    leaves = ["1", "2.5", ":x", "true", "null", "9223372036854775807", "0", ".5e3"]
    binops = [" + ", "-", " * ", "/", "%", " = ", "<>", " < ", ">=", " | ", "#"]
    binops += ["<<", " and ", " OR ", "!=", "<=", ">", ">>", "&"]
    junk = ["(", ")", ",", "$", "!", ".", ":", "foo", "is", "not", "end", "~", "-"]
    junk += ["9223372036854775808", "99999999999999999999", "1e-400", "\\\n", "\u00e9"]

    def gen(depth: int) -> str:
        r = rnd.random()
        if depth > 3 or r < 0.3:
            return rnd.choice(leaves)
        if r < 0.55:
            return gen(depth + 1) + rnd.choice(binops) + gen(depth + 1)
        if r < 0.65:
            return rnd.choice(["-", "+", "~", "not ", "- "]) + gen(depth + 1)
        if r < 0.72:
            return gen(depth + 1) + rnd.choice([" is null", " isnull", " notnull"])
        if r < 0.8:
            return "(" + gen(depth + 1) + ")"
        if r < 0.9:
            name, n = rnd.choice([("abs", 1), ("least", 3), ("hash", 1), ("pi", 0)])
            return name + "(" + ", ".join(gen(depth + 1) for _ in range(n)) + ")"
        return "case when " + gen(depth + 1) + " then " + gen(depth + 1) + " end"

    out = []
    for _ in range(count):
        toks = re.findall(r"\s+|\w+|[^\w\s]", gen(0))
        for _ in range(rnd.choice([0, 1, 1, 2])):
            k = rnd.randrange(len(toks) + 1)
            if rnd.random() < 0.4 and toks:
                del toks[min(k, len(toks) - 1)]
            else:
                toks.insert(k, rnd.choice(junk))
        out.append("".join(toks))
    return out


def _run_pgbench(pgbench_bin: Path, tmp_path: Path, text: str, *args: str) -> str:
    (tmp_path / SCRIPT).write_bytes(text.encode("utf-8", "surrogateescape"))
    argv = ["-n", "-t", "1", *args, "-f", SCRIPT, "-h", "/nonexistent_dir"]
    proc = run_pgbench(pgbench_bin, argv, cwd=tmp_path, timeout=30)
    assert proc.status == 1
    return proc.stderr


def _accepted(stderr: str) -> bool:
    return 'connection to server on socket "/nonexistent_dir' in stderr


def _as_pgsurge(stderr: str) -> str:
    return re.sub(r"(?m)^pgbench: ", "pgsurge: ", stderr)


@pytest.mark.parametrize("text", [r[1] for r in ROWS], ids=[r[0] for r in ROWS])
def test_same_errors_as_pgbench(pgbench_bin: Path, tmp_path: Path, text: str) -> None:
    expected = _run_pgbench(pgbench_bin, tmp_path, text)
    try:
        parse_script(SCRIPT, text)
    except ScriptError as e:
        assert not _accepted(expected), (
            f"pgbench accepts it, pgsurge says:\n{e.format()}"
        )
        assert e.format() == _as_pgsurge(expected)
    else:
        assert _accepted(expected), f"pgsurge accepts it, pgbench says:\n{expected}"


FUZZ = _fuzz_expressions(20251201, 300)


def test_random_expressions_like_pgbench(pgbench_bin: Path, tmp_path: Path) -> None:
    """Seeded random (often broken) expressions in \\set, \\if and \\elif:
    same acceptance and same message and caret as pgbench."""
    accepted = 0
    for i, expr in enumerate(FUZZ):
        head = ("\\set x ", "\\if ", "\\if 1\n\\elif ")[i % 3]
        tail = ("\n", "", "\nselect 1;\n")[i % 3 if head == "\\set x " else 0]
        text = head + expr + tail + ("" if head == "\\set x " else "\\endif\n")
        expected = _run_pgbench(pgbench_bin, tmp_path, text)
        try:
            parse_script(SCRIPT, text)
        except ScriptError as e:
            assert e.format() == _as_pgsurge(expected), repr(text)
        else:
            assert _accepted(expected), repr(text)
            accepted += 1
    # both outcomes are well represented
    assert 50 < accepted < len(FUZZ) - 50


def test_rows_cover_both_outcomes(pgbench_bin: Path, tmp_path: Path) -> None:
    """Guard against a table where every row trivially passes one way."""
    outcomes = {_accepted(_run_pgbench(pgbench_bin, tmp_path, t)) for _, t in ROWS[:20]}
    assert outcomes == {True, False}


@pytest.mark.parametrize("nvars", [255, 256])
@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_too_many_sql_variables(
    pgbench_bin: Path, tmp_path: Path, nvars: int, mode: str
) -> None:
    text = "select " + ",\n ".join(f":v{i}" for i in range(nvars)) + ";\n"
    expected = _run_pgbench(pgbench_bin, tmp_path, text, "-M", mode)
    script = parse_script(SCRIPT, text)
    try:
        check_query_mode(script, QueryMode(mode))
    except ScriptError as e:
        assert e.format() == _as_pgsurge(expected)
    else:
        assert _accepted(expected)


def _deep(shape: str, n: int) -> str:
    """An expression nested ``n`` levels deep in one of several ways."""
    if shape == "paren":
        return "(" * n + ":y" + ")" * n
    if shape == "minus":
        return "-" * n + ":y"
    if shape == "not":
        return "not " * n + ":y"
    if shape == "abs":
        return "abs(" * n + ":y" + ")" * n
    if shape == "greatest":
        return "greatest(1, " * n + ":y" + ")" * n
    if shape == "leading-comma":
        return "abs(," * n + ":y" + ")" * n
    if shape == "plus-paren":
        return ":y+(" * n + ":y" + ")" * n
    if shape == "is-not-null":
        return "(" * n + ":y is not null" + ")" * n
    if shape == "case":
        return "case when :y = 1 then " * n + ":y" + " end" * n
    if shape == "case-else":
        return "case when :y then 1 else " * n + ":y" + " end" * n
    if shape == "case-when-when":
        return "case when 1 then 2 when " * n + ":y" + " then 3 end" * n
    raise AssertionError(shape)


# (shape, the deepest nesting pgbench 18.6 accepts): its parser keeps at
# most 10000 states and reports "memory exhausted" past that
DEEPEST = [
    ("paren", 9996),
    ("minus", 9997),
    ("not", 9997),
    ("abs", 4998),
    ("greatest", 2499),
    ("leading-comma", 2499),
    ("plus-paren", 3332),
    ("is-not-null", 9994),
    ("case", 2499),
    ("case-else", 3332),
    ("case-when-when", 3331),
]


@pytest.fixture
def deep_recursion() -> Iterator[None]:
    """The recursion limit the program sets for deep expressions."""
    saved = sys.getrecursionlimit()
    _allow_deep_expressions()
    yield
    sys.setrecursionlimit(saved)


@pytest.mark.parametrize(("shape", "deepest"), DEEPEST, ids=[d[0] for d in DEEPEST])
@pytest.mark.usefixtures("deep_recursion")
def test_nesting_limit_like_pgbench(
    pgbench_bin: Path, tmp_path: Path, shape: str, deepest: int
) -> None:
    """Nesting up to pgbench's parser stack is accepted (it used to end in
    a RecursionError); one more level is pgbench's "memory exhausted", with
    the same caret column."""
    for n in (deepest, deepest + 1):
        text = f"\\set y 1\n\\set x {_deep(shape, n)}\n"
        expected = _run_pgbench(pgbench_bin, tmp_path, text)
        try:
            parse_script(SCRIPT, text)
        except ScriptError as e:
            assert n > deepest, e.format()[:200]
            assert e.format() == _as_pgsurge(expected)
        else:
            assert n == deepest
            assert _accepted(expected), expected[:200]


@pytest.mark.usefixtures("deep_recursion")
def test_long_operator_chain_accepted(pgbench_bin: Path, tmp_path: Path) -> None:
    """Left-associative chains take no parser stack: no length limit."""
    text = "\\set x " + " + ".join([":y"] * 20000) + "\n"
    assert _accepted(_run_pgbench(pgbench_bin, tmp_path, text))
    parse_script(SCRIPT, text)
