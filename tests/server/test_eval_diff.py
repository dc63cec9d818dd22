"""Differential tests of expression evaluation against the real pgbench 18.6.

pgbench runs scripts of ``\\set`` lines whose values it prints through
``debug()`` on stderr (``-n -t 1``, against the ``postgres`` database, no
tables). pgsurge evaluates the same expressions, in the same order, with a
client state derived from the same ``--random-seed``; every ``debug`` line
must be identical, and every run-time error must carry the same message.

Expressions are parsed with ``pgsurge.script.parser.parse_expr`` when it
exists; until then with the small Pratt parser below (a temporary stand-in
written for these tests; it knows only the subset of pgbench's grammar the
cases use, and the cases parenthesize where precedence is subtle).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pgsurge.errors import EvalError
from pgsurge.prng import PgPrng, derive_streams
from pgsurge.script.ast import Call, Const, Expr, Value, Var
from pgsurge.script.evaluate import EvalContext, compile_expr
from tests.fix_run import Outcome, run_pgbench

pytestmark = pytest.mark.server

# --------------------------------------------------------------------------
# A stand-in expression parser (until pgsurge.script.parser lands)

_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?"
    r"|[0-9]+[eE][-+]?[0-9]+|[0-9]+)"
    r"|(?P<var>:[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op><>|!=|<=|>=|<<|>>|[-+*/%()<>=&|#~,]))"
)
# binary operators: token -> (precedence, call name, swap operands)
_BINARY = {
    "or": (1, "or", False),
    "and": (2, "and", False),
    "=": (5, "=", False),
    "<>": (5, "<>", False),
    "!=": (5, "<>", False),
    "<": (5, "<", False),
    "<=": (5, "<=", False),
    ">": (5, "<", True),
    ">=": (5, "<=", True),
    "|": (6, "|", False),
    "#": (6, "#", False),
    "&": (6, "&", False),
    "<<": (6, "<<", False),
    ">>": (6, ">>", False),
    "+": (7, "+", False),
    "-": (7, "-", False),
    "*": (8, "*", False),
    "/": (8, "/", False),
    "%": (8, "mod", False),
}
_IS_PREC = 4
_NOT_PREC = 3
_UNARY_PREC = 9


class _MiniParser:
    def __init__(self, text: str) -> None:
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            assert m and m.end() > pos, f"cannot tokenize {text[pos:]!r}"
            kind = m.lastgroup
            assert kind is not None
            val = m.group(kind)
            if kind == "id":
                val = val.lower()
            self.toks.append((kind, val))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, val: str | None = None) -> tuple[str, str]:
        tok = self.toks[self.i]
        assert val is None or tok[1] == val, (tok, val)
        self.i += 1
        return tok

    def parse(self, minprec: int = 0) -> Expr:
        left = self.prefix()
        while (tok := self.peek()) is not None:
            kind, val = tok
            if kind in ("op", "id") and val in _BINARY:
                prec, name, swap = _BINARY[val]
                if prec < minprec:
                    break
                self.take()
                right = self.parse(prec + 1)
                left = Call(name, (right, left) if swap else (left, right))
            elif val in ("is", "isnull", "notnull") and minprec <= _IS_PREC:
                self.take()
                left = self.postfix_is(val, left)
            else:
                break
        return left

    def postfix_is(self, val: str, left: Expr) -> Expr:
        if val == "isnull":
            return Call("is", (left, Const(None)))
        if val == "notnull":
            return Call("not", (Call("is", (left, Const(None))),))
        negate = self.peek() == ("id", "not")
        if negate:
            self.take()
        what = {"null": None, "true": True, "false": False}[self.take()[1]]
        test: Expr = Call("is", (left, Const(what)))
        return Call("not", (test,)) if negate else test

    def prefix(self) -> Expr:
        kind, val = self.take()
        if val == "(" and kind == "op":
            e = self.parse()
            self.take(")")
            return e
        if val == "-" and kind == "op":
            return Call("-", (Const(0), self.parse(_UNARY_PREC)))
        if val == "+" and kind == "op":
            return self.parse(_UNARY_PREC)
        if val == "~" and kind == "op":
            return Call("#", (Const(-1), self.parse(_UNARY_PREC)))
        if kind == "num":
            return Const(int(val) if val.isdigit() else float(val))
        if kind == "var":
            return Var(val[1:])
        if val == "not":
            return Call("not", (self.parse(_NOT_PREC),))
        if val in ("true", "false", "null"):
            return Const({"true": True, "false": False, "null": None}[val])
        if val == "case":
            return self.case()
        # function call
        self.take("(")
        args: list[Expr] = []
        if self.peek() != ("op", ")"):
            args.append(self.parse())
            while self.peek() == ("op", ","):
                self.take()
                args.append(self.parse())
        self.take(")")
        if val in ("hash", "hash_murmur2", "hash_fnv1a") and len(args) == 1:
            args.append(Var("default_seed"))
        if val == "permute" and len(args) == 2:
            args.append(Var("default_seed"))
        return Call(val, tuple(args))

    def case(self) -> Expr:
        args: list[Expr] = []
        while self.peek() == ("id", "when"):
            self.take()
            args.append(self.parse())
            self.take("then")
            args.append(self.parse())
        if self.peek() == ("id", "else"):
            self.take()
            args.append(self.parse())
        else:
            args.append(Const(None))
        self.take("end")
        return Call("case", tuple(args))


def _mini_parse(text: str) -> Expr:
    p = _MiniParser(text)
    e = p.parse()
    assert p.peek() is None, f"trailing tokens in {text!r}"
    return e


def _get_parser() -> Callable[[str], Expr]:
    try:
        from pgsurge.script.parser import parse_expr  # type: ignore[attr-defined]
    except ImportError:
        return _mini_parse
    return parse_expr  # type: ignore[no-any-return]


parse = _get_parser()

# --------------------------------------------------------------------------
# Running pgbench and pgsurge side by side

_DEBUG_RE = re.compile(r"^debug\(script=\d+,command=\d+\): .*$", re.M)
_ERROR_RE = re.compile(r"^pgbench: error: (.*)$", re.M)


def _run_pgbench(
    pgbench: Path,
    dsn: str,
    tmp_path: Path,
    scripts: list[str],
    args: tuple[str, ...] = (),
    *,
    seed: int = 42,
) -> Outcome:
    files = []
    for i, text in enumerate(scripts):
        f = tmp_path / f"s{i}.sql"
        f.write_text(text)
        files += ["-f", str(f)]
    argv = ["-n", "-t1", f"--random-seed={seed}", *args, *files]
    return run_pgbench(pgbench, argv, dsn, timeout=60)


def _script(exprs: list[str]) -> str:
    return "".join(f"\\set v{i} debug({e})\n" for i, e in enumerate(exprs))


def _pgsurge_lines(
    exprs: list[str],
    *,
    seed: int = 42,
    variables: dict[str, Value] | None = None,
) -> tuple[list[str], str | None]:
    """Evaluate like one pgbench client: debug lines, and the error if any."""
    plan = derive_streams(seed, 1, 1)
    lines: list[str] = []
    vars_: dict[str, Value] = {
        "scale": 1,
        "client_id": 0,
        "default_seed": plan.default_seed,
        "random_seed": plan.random_seed,
    }
    vars_.update(variables or {})
    ctx = EvalContext(vars_, plan.clients[0], lines.append)
    for i, text in enumerate(exprs):
        ctx.command = i
        fn = compile_expr(Call("debug", (parse(text),)))
        try:
            vars_[f"v{i}"] = fn(ctx)
        except EvalError as exc:
            return [ln.rstrip("\n") for ln in lines], exc.message
    return [ln.rstrip("\n") for ln in lines], None


# --------------------------------------------------------------------------
# Cases

ARITH = [
    "1 + 2",
    "9223372036854775806 + 1",
    "-9223372036854775807 - 1",
    "3037000499 * 3037000499",
    "-3037000499 * 3037000499",
    "7 / 2",
    "-7 / 2",
    "7 / -2",
    "-7 / -2",
    "5 / -1",
    "(-9223372036854775807 - 1) / 1",
    "7 % 3",
    "-7 % 3",
    "7 % -3",
    "-7 % -3",
    "(-9223372036854775807 - 1) % -1",
    "mod(-7, 3)",
    "mod(7.6, 3)",
    "7.5 % 2",
    "1.5 + 1",
    "1 + 1.5",
    "3 - 3.5",
    "1.0 / 3",
    "2.0 * 3",
    "2 / 4.0",
    "1e308 * 10",
    "-1e308 * 10",
    "1.0 / 0",
    "-1.0 / 0",
    "0.0 / 0",
    "1 / 0.0",
    "0.0 * -1",
    "-(0.0)",
    "1e-300 * 1e-300",
    "0.1 + 0.2",
    "1e15 + 0.3",
    "123456789012345678.0",
    "0.00001",
    "0.0001",
    "1e16",
    "-1.5e-7",
    "2.0 / 3",
    "1e100",
    "1.7976931348623157e308",
    "100.0",
    "1e21",
    "123456.7890123456789",
]
COMPARE = [
    "1 < 2",
    "2 < 1",
    "1 <= 1",
    "1 = 1",
    "1 <> 1",
    "1 != 2",
    "1 > 0.5",
    "1.5 >= 1.5",
    "(0.0 / 0) = (0.0 / 0)",
    "(0.0 / 0) <> (0.0 / 0)",
    "(0.0 / 0) < 1",
    "1 = 1.0",
    "9007199254740993 = 9007199254740992.0",
    "9007199254740993 = 9007199254740992",
    "(-9223372036854775807 - 1) < 9223372036854775807",
]
BITWISE = [
    "5 & 3",
    "5 | 3",
    "5 # 3",
    "~5",
    "~0",
    "~(-9223372036854775807 - 1)",
    "1 << 62",
    "1 << 63",
    "1 << 64",
    "1 << 65",
    "1 << -1",
    "3 << 62",
    "-8 >> 1",
    "-1 >> 63",
    "5 >> 70",
    "5 >> -63",
    "3.6 & 1",
    "2.5 | 0",
    "3.5 | 0",
    "-2.5 | 0",
]
LOGIC = [
    "true and false",
    "true and true",
    "false and (1 / 0 = 1)",
    "true or (1 / 0 = 1)",
    "null and true",
    "true and null",
    "false and null",
    "null or true",
    "false or null",
    "true or null",
    "not true",
    "not false",
    "not null",
    "1 is null",
    "null is null",
    "null isnull",
    "1 notnull",
    "null notnull",
    "null is not null",
    "true is true",
    "false is true",
    "false is false",
    "1 is true",
    "0 is false",
    "null is false",
    "(1 = 1) is not false",
    "(null = 1) is null",
    "case when 1 > 2 then 10 when 2 > 1 then 20 else 30 end",
    "case when false then 1 end",
    "case when 0 then 1 else 2 end",
    "case when 0.5 then 1 else 2 end",
    "case when 0.0 then 1 else 2 end",
    "case when null then 1 else 2 end",
    "case when true then 1 / 1 else 1 / 0 end",
    "case when false then 1 when null then 2 when 3 then 3 else 4 end",
]
NULLS = [
    "null",
    "null + 1",
    "1 + null",
    "null / 0",
    "null * 1.5",
    "null < 1",
    "null & 1",
    "null << 1",
    "abs(null)",
    "sqrt(null)",
    "ln(null)",
    "int(null)",
    "double(null)",
    "greatest(1, null, 3)",
    "least(null)",
    "hash(null)",
    "hash_fnv1a(1, null)",
    "permute(null, 10)",
    "pow(null, 2)",
    "mod(null, 0)",
    "random(null, 5)",
    "random_gaussian(1, 10, null)",
    "random_exponential(null, 10, 1)",
    "random_zipfian(1, null, 1.5)",
    "null = null",
    "null + true",
]
FUNCS = [
    "abs(-5)",
    "abs(5)",
    "abs(-5.5)",
    "abs(-9223372036854775807 - 1)",
    "abs(0.0 * -1)",
    "abs(-1.0 / 0)",
    "double(5)",
    "double(5.5)",
    "double(9007199254740993)",
    "int(5.5)",
    "int(6.5)",
    "int(-5.5)",
    "int(-0.5)",
    "int(0.49999999999999994)",
    "int(9.2e18)",
    "int(-9223372036854775808.0)",
    "int(7)",
    "exp(1)",
    "exp(0)",
    "exp(710)",
    "exp(-1000)",
    "exp(0.5)",
    "ln(10)",
    "ln(2.718281828459045)",
    "ln(0)",
    "ln(-1)",
    "ln(1.0 / 0)",
    "sqrt(2)",
    "sqrt(-1)",
    "sqrt(0.0 * -1)",
    "sqrt(1e300)",
    "pi()",
    "pi() * 2",
    "pow(2, 10)",
    "power(2, 0.5)",
    "pow(-8, 1.0 / 3)",
    "pow(0, -1)",
    "pow(0.0 * -1, -1)",
    "pow(0.0 * -1, -2)",
    "pow(-10, 309)",
    "pow(-10, 310)",
    "pow(10, 309)",
    "pow(10, -400)",
    "pow(-2, 3)",
    "pow(0.0 / 0, 0)",
    "pow(1, 0.0 / 0)",
    "pow(1.0001, 123456.5)",
    "greatest(1, 2, 3)",
    "greatest(1, 2.5, 3)",
    "least(5, 1.5)",
    "least(3, 2, 1)",
    "greatest(0.0 / 0, 1)",
    "greatest(1, 0.0 / 0)",
    "least(0.0 * -1, 0.0)",
    "least(0.0, 0.0 * -1)",
    "greatest(-1)",
    "greatest(2.5)",
    "least(" + ", ".join(str(i) for i in range(16, 0, -1)) + ")",
    "hash(10, 5432)",
    "hash_fnv1a(10, 5432)",
    "hash_murmur2(-1, 0)",
    "hash_murmur2(0, 0)",
    "hash_fnv1a(-9223372036854775807 - 1, 7)",
    "hash_fnv1a(9223372036854775807, -1)",
    "hash(10)",
    "hash_fnv1a(10)",
    "hash_murmur2(123456789)",
    "hash(1.6, 2)",
    "permute(0, 10)",
    "permute(5, 10, 7)",
    "permute(-1, 10, 7)",
    "permute(12, 10, 7)",
    "permute(3, 1, 5)",
    "permute(1, 2, 3)",
    "permute(0, 2, 3)",
    "permute(2, 3, 3)",
    "permute(5, 8, 11)",
    "permute(123456789, 1000000007, 42)",
    "permute(9223372036854775807, 9223372036854775807, -1)",
    "permute(-9223372036854775807 - 1, 9223372036854775807, 1)",
    "permute(77, 100)",
]
RANDOMS = [
    "random(1, 10)",
    "random(-5, 5)",
    "random(0, 0)",
    "random(-9223372036854775807 - 1, -2)",
    "random(1, 9223372036854775807)",
    "random(1.4, 10.6)",
    "random(1, 100000 * :scale)",
    "random_exponential(1, 1000, 2.5)",
    "random_exponential(1, 1000, 0.001)",
    "random_exponential(1, 10, 50)",
    "random_exponential(-1000, 1000, 1)",
    "random_gaussian(1, 1000, 2)",
    "random_gaussian(1, 1000, 10.5)",
    "random_gaussian(-100, 100, 2.0)",
    "random_gaussian(1, 10, 1000)",
    "random_zipfian(1, 1000, 1.001)",
    "random_zipfian(1, 1000, 1.5)",
    "random_zipfian(1, 1000, 1000)",
    "random_zipfian(1, 1, 2)",
    "random_zipfian(1, 9223372036854775806, 1.2)",
    "random_zipfian(-10, 10, 3)",
    "random(1, 1000) + random(1, 1000) * 10000",
]


@pytest.mark.parametrize(
    "group",
    [ARITH, COMPARE, BITWISE, LOGIC, NULLS, FUNCS],
    ids=["arith", "compare", "bitwise", "logic", "nulls", "funcs"],
)
def test_values_match_pgbench(
    group: list[str], pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    proc = _run_pgbench(pgbench_bin, server_dsn, tmp_path, [_script(group)])
    assert proc.status == 0, proc.stderr
    expected = _DEBUG_RE.findall(proc.stderr)
    assert len(expected) == len(group)
    got, err = _pgsurge_lines(group)
    assert err is None
    for text, exp, mine in zip(group, expected, got, strict=True):
        assert mine == exp, text


@pytest.mark.parametrize("seed", [0, 1, 42, 987654321, 18446744073709551615])
def test_random_functions_match_pgbench(
    seed: int, pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    # three passes so that each function sees several states
    exprs = RANDOMS * 3
    proc = _run_pgbench(pgbench_bin, server_dsn, tmp_path, [_script(exprs)], seed=seed)
    assert proc.status == 0, proc.stderr
    got, err = _pgsurge_lines(exprs, seed=seed)
    assert err is None
    assert got == _DEBUG_RE.findall(proc.stderr)


def test_many_draws_match_pgbench(
    pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    """A long stream: 2000 draws mixing every distribution."""
    exprs = [
        "random(1, 3)",
        "random(0, 1000000007)",
        "random_gaussian(0, 99, 2.5)",
        "random_exponential(0, 99, 3)",
        "random_zipfian(1, 50, 1.1)",
    ] * 400
    proc = _run_pgbench(pgbench_bin, server_dsn, tmp_path, [_script(exprs)], seed=7)
    assert proc.status == 0, proc.stderr
    got, _ = _pgsurge_lines(exprs, seed=7)
    assert got == _DEBUG_RE.findall(proc.stderr)


# values from -D are strings, typed when an expression reads them
LAZY = [
    "null",
    "NuLl",
    "t",
    "TRUE",
    "ye",
    "on",
    "of",
    "OFF",
    "f",
    "n",
    "No",
    "1",
    " 12",
    "\t5",
    "+7",
    "-0",
    "00012",
    "9223372036854775807",
    "-9223372036854775808",
    "1.5",
    " 1.5",
    "1e5",
    "-.5e-3",
    "5.",
    "inf",
    "-Infinity",
    "nan",
    "nan(12ab)",
    "0x10",
    "0X1P3",
    "0x.8",
    "0x1p-1070",
    "2.2250738585072014e-308",
    "0e-400",
    "-0.0",
    "1.00000000000000000001",
    "1.7976931348623157e308",
]
LAZY_BAD = [
    "o",
    "12 ",
    "+",
    "-",
    "   ",
    "9223372036854775808",
    "-9223372036854775809",
    "1.5 ",
    "1e400",
    "1e-400",
    "1e-310",
    "2.225073858507201e-308",
    "1.7976931348623159e308",
    "0x",
    "1e",
    ".",
    "1_000",
    "trueX",
    "infin",
    "nan(-)",
    "abc",
]


def test_lazy_strings_match_pgbench(
    pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    defs: tuple[str, ...] = ()
    variables: dict[str, Value] = {}
    for i, s in enumerate(LAZY):
        defs += ("-D", f"x{i}={s}")
        variables[f"x{i}"] = s
    exprs = [f":x{i}" for i in range(len(LAZY))]
    # the typed value, not the text, flows through operators
    exprs += ["case when :x2 then :x11 + 1 else 0 end", ":x19 * 2", ":x12 + :x13"]
    proc = _run_pgbench(pgbench_bin, server_dsn, tmp_path, [_script(exprs)], defs)
    assert proc.status == 0, proc.stderr
    got, err = _pgsurge_lines(exprs, variables=variables)
    assert err is None
    assert got == _DEBUG_RE.findall(proc.stderr)


@pytest.mark.parametrize("text", LAZY_BAD)
def test_lazy_string_errors_match_pgbench(
    text: str, pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    proc = _run_pgbench(
        pgbench_bin, server_dsn, tmp_path, [_script([":x"])], ("-D", f"x={text}")
    )
    assert proc.status == 2
    _, err = _pgsurge_lines([":x"], variables={"x": text})
    assert err == _ERROR_RE.findall(proc.stderr)[0]


ERRORS = [
    "9223372036854775807 + 1",
    "(-9223372036854775807 - 1) - 1",
    "3037000500 * 3037000500",
    "-(-9223372036854775807 - 1)",
    "1 / 0",
    "1 % 0",
    "mod(5, 0)",
    "(-9223372036854775807 - 1) / -1",
    "int(1e19)",
    "int(-1e19)",
    "int(9223372036854775807.0)",
    "int(0.0 / 0)",
    "int(-1.0 / 0)",
    "true + 1",
    "1 + true",
    "1.5 + true",
    "true < 1.5",
    "1 = true",
    "-(true)",
    "not 1",
    "not 1.5",
    "true and 1",
    "1 and true",
    "false or 1",
    "1 or true",
    "greatest(1, true)",
    "greatest(1.5, true)",
    "least(false)",
    "random(10, 1)",
    "random(-9223372036854775807 - 1, 9223372036854775807)",
    "random(0, 9223372036854775807)",
    "random(true, 1)",
    "random(1, 1e30)",
    "random_gaussian(1, 10, 1.99)",
    "random_gaussian(1, 10, 1)",
    "random_gaussian(1, 10, -1.0 / 0)",
    "random_zipfian(1, 10, 1.0)",
    "random_zipfian(1, 10, 1001)",
    "random_zipfian(1, 10, 1.0 / 0)",
    "random_exponential(1, 10, 0)",
    "random_exponential(1, 10, -1)",
    "random_exponential(10, 1, 1)",
    "random_gaussian(1, 10, true)",
    "permute(1, 0)",
    "permute(1, -5, 3)",
    "permute(true, 5, 3)",
    ":undefined_var + 1",
    "hash(true)",
    "sqrt(true)",
    "exp(false)",
    "int(true)",
    "double(false)",
    "mod(true, 2)",
    "abs(1) + (1 << 63) * 2",
    "1 & true",
    "1.5 << true",
    "greatest(" + ", ".join(str(i) for i in range(17)) + ")",
]


def test_errors_match_pgbench(
    pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    mismatches = []
    for text in ERRORS:
        proc = _run_pgbench(pgbench_bin, server_dsn, tmp_path, [_script([text])])
        assert proc.status == 2, (text, proc.stderr)
        expected = _ERROR_RE.findall(proc.stderr)[0]
        _, err = _pgsurge_lines([text])
        if err != expected:
            mismatches.append((text, expected, err))
    assert mismatches == []


# --------------------------------------------------------------------------
# Seeding order: clients, default_seed, then per thread choose/throttle/sample


def _choose(rng: PgPrng, weights: list[int]) -> int:
    """pgbench's chooseScript for several scripts."""
    w = rng.int64_range(0, sum(weights) - 1)
    i = 0
    while True:
        w -= weights[i]
        i += 1
        if w < 0:
            return i - 1


# Two threads write their debug lines concurrently, and pgbench prints a
# line's prefix and its value with two separate writes, so lines can be torn
# apart; each value encodes its client and script, so only values are read.


@pytest.mark.parametrize("define_default_seed", [False, True])
def test_seeding_order_matches_pgbench(
    define_default_seed: bool, pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    """Two clients on two threads, two weighted scripts.

    Each line names the client, the script pgbench chose with its thread's
    choose state, and a draw from the client's own state, so the test pins
    both the client states (first derived) and the thread states (after
    the ``default_seed`` draw, which ``-D default_seed`` suppresses). A
    wrong order, a missing or extra draw, fails it.
    """
    nclients, nthreads, ntx, weights = 2, 2, 25, [1, 3]
    scripts = [
        f"\\set r debug(:client_id * 1000000000 + {s} * 100000000 "
        "+ random(0, 99999999))\n"
        for s in range(2)
    ]
    args = ("-t", str(ntx), "-c", str(nclients), "-j", str(nthreads))
    if define_default_seed:
        args += ("-D", "default_seed=5")
    files = []
    for i, text in enumerate(scripts):
        f = tmp_path / f"w{i}.sql"
        f.write_text(text)
        files += ["-f", f"{f}@{weights[i]}"]
    argv = ["-n", "--random-seed=1234", *args, *files]
    proc = run_pgbench(pgbench_bin, argv, server_dsn, timeout=60)
    assert proc.status == 0, proc.stderr

    seen: dict[int, list[tuple[int, int]]] = {c: [] for c in range(nclients)}
    values = re.findall(r"\bint (\d+)", proc.stderr)
    assert len(values) == nclients * ntx
    for value in values:
        client, rest = divmod(int(value), 1000000000)
        seen[client].append(divmod(rest, 100000000))

    plan = derive_streams(
        1234, nclients, nthreads, draw_default_seed=not define_default_seed
    )
    for c in range(nclients):
        crng = plan.clients[c].copy()
        choose = plan.threads[c].choose.copy()  # one client per thread
        expected = []
        for _ in range(ntx):
            s = _choose(choose, weights)
            expected.append((s, crng.int64_range(0, 99999999)))
        assert seen[c] == expected, f"client {c}"


def test_default_seed_and_random_seed_variables(
    pgbench_bin: Path, server_dsn: str, tmp_path: Path
) -> None:
    """``:default_seed`` is the draw after the clients' states."""
    script = "\\set a debug(:default_seed)\n\\set b debug(:random_seed)\n"
    for nclients in (1, 3):
        proc = _run_pgbench(
            pgbench_bin,
            server_dsn,
            tmp_path,
            [script],
            ("-c", str(nclients)),
            seed=18446744073709551615,
        )
        assert proc.status == 0, proc.stderr
        plan = derive_streams(18446744073709551615, nclients, 1)
        lines = set(_DEBUG_RE.findall(proc.stderr))
        assert lines == {
            f"debug(script=0,command=1): int {plan.default_seed}",
            f"debug(script=0,command=2): int {plan.random_seed}",
        }
