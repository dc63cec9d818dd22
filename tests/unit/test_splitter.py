"""How scripts are cut into commands: SQL text, line numbers, first lines.

The expected SQL texts were checked against what pgbench 18.6 sends to the
server (``pgbench --debug``, simple protocol) and what it prints with
``-r``; the error behaviour is covered by test_script_errors.py.
"""

from __future__ import annotations

import pytest

from pgsurge.script.ast import (
    GsetKind,
    SetCommand,
    SleepCommand,
    SqlCommand,
)
from pgsurge.script.compile import parse_script
from pgsurge.script.splitter import SqlScanner, Stop, skip_sql_comments, sql_first_line


def sql_texts(text: str) -> list[str]:
    return [
        c.text
        for c in parse_script("t.sql", text).commands
        if isinstance(c, SqlCommand)
    ]


# (script, SQL texts pgbench sends) — checked with pgbench --debug
SEND_CASES = [
    (
        "-- lead\n  select 1\n   , 2 -- c\n;\n",
        ["select 1\n   , 2 -- c\n;"],
    ),
    (
        "/* blk */ select 3 \\; select 4;   select\t5\r\n;\n",
        ["/* blk */ select 3 ; select 4;", "select\t5\r\n;"],
    ),
    (
        "select 1 as \"a;b\"; select 'x;y' as c;\n",
        ['select 1 as "a;b";', "select 'x;y' as c;"],
    ),
    (
        "select $$;$$; select $a$ $b$ ; $a$;\n",
        ["select $$;$$;", "select $a$ $b$ ; $a$;"],
    ),
    ("select E'\\';' as x;\n", ["select E'\\';' as x;"]),
    ("select 'a'\n'b;' as x;\n", ["select 'a'\n'b;' as x;"]),
    ("select 'a' -- c\n 'b;' as x;\n", ["select 'a' -- c\n 'b;' as x;"]),
    ("select (1\n  ); select 2;\n", ["select (1\n  );", "select 2;"]),
    ("select 1 /* a /* ; */ ; */;\n", ["select 1 /* a /* ; */ ; */;"]),
    ("select 1 -- trailing comment\n", ["select 1 -- trailing comment\n"]),
    # an empty statement is still a command: pgbench sends ";" alone
    ("select 1;;; select 2;\n", ["select 1;", ";", ";", "select 2;"]),
    ("select 1;\n;\n  ; -- x\n", ["select 1;", ";", ";"]),
    ("select 1\\;\\; select 2;\n", ["select 1;; select 2;"]),
    (
        "  \t\n\n select 1 ;  \n select 2 -- c\n ; \n",
        ["select 1 ;", "select 2 -- c\n ;"],
    ),
    ("select 1 ::int;\nselect 2::text;\n", ["select 1 ::int;", "select 2::text;"]),
    (
        "select U&'a;b' as x; select U&\"a;b\" from t;\n",
        ["select U&'a;b' as x;", 'select U&"a;b" from t;'],
    ),
    (
        "select b'01' as x, x'0F' as y; select n'ab;' as z;\n",
        ["select b'01' as x, x'0F' as y;", "select n'ab;' as z;"],
    ),
    (
        "create or replace function pg_temp.f() returns int language sql"
        " begin atomic; select 1; end;\nselect 1;\n",
        [
            "create or replace function pg_temp.f() returns int language sql"
            " begin atomic; select 1; end;",
            "select 1;",
        ],
    ),
    (
        "create function f() returns int begin atomic select case when true"
        " then 1 end; end;\nselect 2;\n",
        [
            "create function f() returns int begin atomic select case when true"
            " then 1 end; end;",
            "select 2;",
        ],
    ),
    (
        "select 1e3, 1.5e-3, .5, 0x1F, 1_000;\n",
        ["select 1e3, 1.5e-3, .5, 0x1F, 1_000;"],
    ),
    ("select 1 as a$b$, 2;\n", ["select 1 as a$b$, 2;"]),
    ("select $1\n", ["select $1\n"]),
    # a parameter or a number is not the start of a dollar quote's tag
    ("\t$1$a$\\';\n$a$;\n", ["$1$a$\\';\n$a$;"]),
    ("select 1$a$ \\x $a$;\n", ["select 1$a$ \\x $a$;"]),
    # psql variable syntax is opaque: the quote does not open a string
    ("select :'x';\nselect 2;\n", ["select :'x';", "select 2;"]),
    ("select 1 \\:x;\n", ["select 1 :x;"]),
    # a backslash anywhere outside quotes and comments ends the SQL command
    ("select 1 \\set x 2\nselect 2;\n", ["select 1 ", "select 2;"]),
    # unterminated quote/comment: sent as is at the end of the file
    ("select 'abc\n", ["select 'abc\n"]),
    ("select 1 /* abc", ["select 1 /* abc"]),
    ("select $q$abc", ["select $q$abc"]),
    # an unclosed parenthesis swallows later semicolons, across commands
    ("select (1;\n\\sleep 0\nselect 2;\n", ["select (1;\n", "select 2;\n"]),
    # /* */ alone is a command (an empty query for the server)
    ("/* c */\n", ["/* c */\n"]),
    ("\v\n\nselect 1;", ["select 1;"]),
]


@pytest.mark.parametrize(("text", "expected"), SEND_CASES)
def test_sql_text_as_pgbench_sends_it(text: str, expected: list[str]) -> None:
    assert sql_texts(text) == expected


def test_semicolon_kept_and_nqueries() -> None:
    (cmd,) = parse_script("t", "select 1 \\; select 2 \\; select 3;").commands
    assert isinstance(cmd, SqlCommand)
    assert cmd.text == "select 1 ; select 2 ; select 3;"
    assert cmd.nqueries == 3


@pytest.mark.parametrize(
    ("text", "nqueries"),
    [
        ("select 1;", 1),
        ("select 1 \\; select 2;", 2),
        ("\\; select 1;", 1),
        ("select 1 \\; /* c */ \\; -- c\n select 2 \\;", 2),
        ("select 1 \\; '\\;' \\; ", 2),
    ],
)
def test_nqueries_counts_parts_with_content(text: str, nqueries: int) -> None:
    cmd = parse_script("t", text).commands[0]
    assert isinstance(cmd, SqlCommand)
    assert cmd.nqueries == nqueries


def test_line_numbers() -> None:
    text = (
        "-- comment\n"  # 1
        "\n"  # 2
        "  select 1,\n"  # 3
        "   2;  select 3;\n"  # 4
        "\\set x 1 + \\\n"  # 5
        "  2\n"  # 6
        "select 4 \\gset p_\n"  # 7
        "/* a\n"  # 8
        "b */ select 5;\n"  # 9
        "\\sleep 1 ms\n"  # 10
    )
    cmds = parse_script("t", text).commands
    assert [c.lineno for c in cmds] == [3, 4, 5, 7, 8, 10]
    assert [c.first_line for c in cmds] == [
        "select 1,",
        "select 3;",
        "\\set x 1 + \\\n  2",
        "select 4 ",
        "/* a",
        "\\sleep 1 ms",
    ]


def test_first_line_of_meta_keeps_trailing_spaces_and_continuations() -> None:
    # as pgbench -r shows it: "\set x 1 + \" newline "  2   "
    cmd = parse_script("t", "\\set x 1 + \\\n  2   \r\n").commands[0]
    assert isinstance(cmd, SetCommand)
    assert cmd.first_line == "\\set x 1 + \\\n  2   "


def test_sql_first_line_is_127_bytes_at_most() -> None:
    assert sql_first_line("select 1\r\n, 2") == "select 1"
    assert sql_first_line("x" * 200) == "x" * 127
    # a UTF-8 character cut in the middle keeps its first byte (as pgbench)
    line = sql_first_line("select '" + "\u00e9" * 70 + "'")
    assert (
        line.encode("utf-8", "surrogateescape")
        == (("select '" + "\u00e9" * 70).encode()[:127])
    )


def test_gset_attaches_to_previous_sql() -> None:
    cmds = parse_script("t", "select 1 as a \\gset\nselect 2;\n\\aset pre_\n").commands
    assert len(cmds) == 2
    first, second = cmds
    assert isinstance(first, SqlCommand) and isinstance(second, SqlCommand)
    assert (first.gset, first.gset_prefix) == (GsetKind.GSET, "")
    assert (second.gset, second.gset_prefix) == (GsetKind.ASET, "pre_")
    assert first.text == "select 1 as a "


def test_mid_line_meta_command_after_sql() -> None:
    cmds = parse_script("t", "select 1 \\sleep 2 ms\n").commands
    assert [type(c) for c in cmds] == [SqlCommand, SleepCommand]


def test_nul_ends_the_script() -> None:
    assert sql_texts("select 1;\0select 2;") == ["select 1;"]


def test_crlf_script() -> None:
    cmds = parse_script("t", "\\set x 1\r\nselect :x;\r\n\\sleep 1 ms\r\n").commands
    assert [c.first_line for c in cmds] == ["\\set x 1", "select :x;", "\\sleep 1 ms"]
    assert [c.lineno for c in cmds] == [1, 2, 3]


def test_scanner_stops() -> None:
    sc = SqlScanner("select 1; x \\y\nz")
    res = sc.scan()
    assert (res.stop, res.text, res.start) == (Stop.SEMICOLON, "select 1;", 0)
    res = sc.scan()
    assert (res.stop, res.text, res.end) == (Stop.BACKSLASH, "x ", 12)
    assert sc.pos == 12
    sc.pos = 15
    res = sc.scan()
    assert (res.stop, res.text) == (Stop.EOF, "z")


def test_skip_sql_comments() -> None:
    assert skip_sql_comments(" \v\t-- a\n  -- b\nselect") == ("select", 15)
    assert skip_sql_comments("  -- only") == ("", 9)
    assert skip_sql_comments("") == ("", 0)


def test_dot_before_non_ascii_digit_does_not_hang() -> None:
    # "²" and "٣" are str.isdigit() but not SQL digits: the scanner once
    # stopped advancing on ".²" (found by hypothesis)
    for text in ("select .\u00b2;", "select .\u0663 ;", "select 1.\u00b2;"):
        (cmd,) = parse_script("x.sql", text).commands
        assert cmd.text == text
