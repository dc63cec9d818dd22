"""Big scripts parse in linear time (issue 11), with the same results.

The splitter takes runs of characters that change no scanner state in one
regex match, and quoted text up to its possible end in one; variable
references are split by one ``re.split``. Hypothesis checks that each fast
path gives exactly what the token-by-token path gives; the sizes of the
issue (a 4 MB line, 20,000 lines) are parsed within a generous bound
(``bench/parse_bench.py`` measures them against pgbench).
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsurge.script import splitter
from pgsurge.script.compile import parse_script
from pgsurge.script.lexer import IDENT_CHAR, IDENT_START
from pgsurge.script.splitter import SqlScanner, Stop
from pgsurge.script.sqlvars import split_variables

_ALPHABET = " \t\n,;:()'\"$-/*.\\eEx01_9a=é:{}?"


def _scan_all(text: str) -> list[object]:
    sc = SqlScanner(text)
    out: list[object] = []
    while True:
        r = sc.scan()
        out.append((r.stop, r.text, r.start, r.end, r.nqueries))
        if r.stop is Stop.EOF:
            return out
        if r.stop is Stop.BACKSLASH:
            sc.pos = r.end + 1  # past the backslash: enough for the comparison


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=60))
def test_fast_paths_scan_as_token_by_token(text: str) -> None:
    fast = _scan_all(text)
    saved = splitter._PLAIN_FIRST
    splitter._PLAIN_FIRST = frozenset()
    try:
        slow = _scan_all(text)
    finally:
        splitter._PLAIN_FIRST = saved
    assert fast == slow


_REFERENCE = re.compile(f":+(?:({IDENT_START}{IDENT_CHAR}*))?")


def _split_by_finditer(sql: str) -> tuple[str, ...]:
    """The former split_variables (a Python loop over matches)."""
    parts: list[str] = []
    literal_start = 0
    for m in _REFERENCE.finditer(sql):
        name = m.group(1)
        if name is None or m.start(1) - 1 != m.start():
            continue
        parts += [sql[literal_start : m.start(1) - 1], name]
        literal_start = m.end()
    parts.append(sql[literal_start:])
    return tuple(parts)


@settings(max_examples=3000)
@given(st.text(alphabet=":ab1_ é'\"$", max_size=40))
def test_split_variables_as_before(sql: str) -> None:
    assert split_variables(sql) == _split_by_finditer(sql)


def _four_mb(unit: str) -> str:
    return unit * (4 * 1024 * 1024 // len(unit))


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("in-list", "SELECT 1 WHERE 1 IN (" + _four_mb("12345,") + "1);\n"),
        ("literal", "SELECT '" + _four_mb("x") + "';\n"),
        ("comment", "SELECT 1 /* " + _four_mb("y") + " */;\n"),
        (
            "20000 lines",
            "".join(f"SELECT {i}, 'a:b' WHERE :scale > 0;\n" for i in range(20000)),
        ),
    ],
)
def test_big_scripts_parse_fast(name: str, text: str) -> None:
    t0 = time.perf_counter()
    parse_script(name, text)
    # measured at 0.02-0.7 s; the bound only catches a return to quadratic
    # or per-character loops (15 s for the 4 MB line before)
    assert time.perf_counter() - t0 < 6.0


@settings(max_examples=300)
@given(
    st.text(alphabet="ab é\u20ac+1", min_size=1, max_size=40),
    st.lists(st.integers(min_value=0, max_value=41), max_size=20),
)
def test_column_counts_bytes_in_any_order(text: str, positions: list[int]) -> None:
    """MetaLexer.column counts on from positions asked before (a 4 MB
    \\set line was quadratic); any order gives the bytes from the backslash."""
    from pgsurge.script.lexer import MetaLexer, byte_len

    src = "\\" + text
    lexer = MetaLexer(src, 0, "x", 1)
    for pos in positions:
        pos = min(pos, len(src))
        assert lexer.column(pos) == byte_len(src[:pos])
