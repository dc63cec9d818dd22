"""Lexer for pgbench backslash commands: exprscan.l's role.

A backslash command is lexed in one of two modes, as pgbench does:

* word mode: whitespace-separated words (``\\sleep 10 ms``, the command
  name itself, the variable name of ``\\set``);
* expression mode: the tokens of the ``\\set``/``\\if`` expression language.

Both modes stop at the first newline that is not escaped by a trailing
backslash (``\\`` + ``\\n`` or ``\\r\\n`` continues the command) or at the end
of the text. Positions are indexes into the whole script text; error
columns are *byte* offsets from the command's backslash, because pgbench
counts bytes when it places its ``^ error found here`` caret.

When a lexing or parsing error happens, pgbench first lexes on to the end of
the command line (to print it whole), and a lexing error met on the way
replaces the first one. :meth:`MetaLexer.fail` reproduces that.
"""

# (no ``from __future__ import annotations``: typing.NamedTuple makes a
# ForwardRef of each string annotation, compiling it, and the first
# builtin compile() of a process makes all of the ast module's node types,
# some 200 KiB of every run: issue 25)
import bisect
import enum
import math
import re
import sys
from functools import cache
from typing import NamedTuple, NoReturn

from pgsurge.cnum import INT64_MAX
from pgsurge.errors import ScriptError


class Tok(enum.Enum):
    """Expression token kinds (exprparse.y's terminals)."""

    OP = "operator"  # value: the operator text, e.g. "+", "<>", "<<"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    INT = "integer"
    DOUBLE = "double"
    MAXINT_PLUS_ONE = "9223372036854775808"
    VARIABLE = "variable"
    FUNCTION = "identifier"
    NULL = "NULL"
    BOOLEAN = "boolean"
    AND = "AND"
    OR = "OR"
    NOT = "NOT"
    IS = "IS"
    ISNULL = "ISNULL"
    NOTNULL = "NOTNULL"
    CASE = "CASE"
    WHEN = "WHEN"
    THEN = "THEN"
    ELSE = "ELSE"
    END = "END"
    EOL = "end of command"


class Token(NamedTuple):
    """One expression token (a named tuple: made for every token read)."""

    kind: Tok
    #: operator text, identifier/variable name, or the numeric/boolean value
    value: object
    start: int
    end: int


# Keywords are matched case-insensitively, ASCII only, and only when the
# whole identifier is the keyword ("andx" is an identifier).
_KEYWORDS: dict[str, Tok] = {
    "and": Tok.AND,
    "or": Tok.OR,
    "not": Tok.NOT,
    "is": Tok.IS,
    "isnull": Tok.ISNULL,
    "notnull": Tok.NOTNULL,
    "case": Tok.CASE,
    "when": Tok.WHEN,
    "then": Tok.THEN,
    "else": Tok.ELSE,
    "end": Tok.END,
    "null": Tok.NULL,
    "true": Tok.BOOLEAN,
    "false": Tok.BOOLEAN,
}


def wide_class(ascii_members: str) -> str:
    """A regex character class: ``ascii_members`` plus every non-ASCII
    character (every code point above 0x7f, surrogates included).

    pgbench's flex classes work on bytes and count every byte >= 0x80 as a
    letter; on decoded text that is "every non-ASCII character". Written as
    ``[A-Za-z_\\x80-\\U0010ffff]`` such a class costs ``re`` some 3-5 ms to
    compile (it folds the whole Unicode range into a bitmap), paid by every
    start-up; the complement of the ASCII characters left out is the same
    set and compiles in microseconds.
    """
    assert ascii_members.isascii()
    out: list[str] = []
    code = 0
    while code < 128:
        if chr(code) in ascii_members:
            code += 1
            continue
        last = code
        while last + 1 < 128 and chr(last + 1) not in ascii_members:
            last += 1
        out.append(f"\\x{code:02x}" if last == code else f"\\x{code:02x}-\\x{last:02x}")
        code = last + 1
    return f"[^{''.join(out)}]"


#: the ASCII characters that may start an identifier ...
ASCII_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
#: ... and those that may continue it
ASCII_IDENT_CHARS = ASCII_LETTERS + "0123456789"
#: flex's ``[A-Za-z_\\200-\\377]``: what starts an identifier
IDENT_START = wide_class(ASCII_LETTERS)
#: flex's ``[A-Za-z_0-9\\200-\\377]``: what continues it
IDENT_CHAR = wide_class(ASCII_IDENT_CHARS)

# Whitespace inside a command; a newline ends it.
_SPACE = " \t\r\f\v"
_CONTINUATION_RE = re.compile(r"\\\r?\n")


# exprscan.l's rules in the order flex prefers them (two-character
# operators before one-character ones); "\\" + newline continues the
# command, a newline ends it. No group matches: an unexpected character,
# or the end of the text. (Greedy, not possessive, loops: what follows
# them cannot fail, so nothing goes back over them; splitter.py says why
# the reader uses no possessive quantifier.)
# (Compiled on first use, with _WORD_SKIP: the C parser reads the scripts
# of most runs, which then never need either.)
@cache
def _expr_token() -> re.Pattern[str]:
    return re.compile(
        r"(?:[ \t\r\f\v]+|\\\r?\n)*"
        r"(?:(?P<op><>|!=|<=|>=|<<|>>|[-+*/%=<>|&#~])"
        rf"|(?P<word>{IDENT_START}{IDENT_CHAR}*)"
        r"|(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)"
        r"|(?P<lparen>\()|(?P<rparen>\))|(?P<comma>,)"
        rf"|:(?P<var>{IDENT_CHAR}+)"
        r"|(?P<eol>\n))?"
    )


_SINGLE = {
    "lparen": Tok.LPAREN,
    "rparen": Tok.RPAREN,
    "comma": Tok.COMMA,
    "eol": Tok.EOL,
}
_NONSPACE_RE = re.compile(r"[^ \t\r\f\v\n]+")


@cache
def _word_skip() -> re.Pattern[str]:
    """What separates words: whitespace and continuations (not the newline)."""
    return re.compile(r"(?:[ \t\r\f\v]+|\\\r?\n)*")


def byte_len(text: str) -> int:
    """Length of ``text`` in bytes, as pgbench sees the file."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogateescape"))


def parse_double(text: str) -> float | None:
    """``strtod`` with pgbench's range check: None when out of range.

    glibc reports ERANGE for overflow and for results that underflow to a
    subnormal number or to zero; pgbench rejects both.
    """
    value = float(text)
    if math.isinf(value):
        return None
    if value == 0.0:
        mantissa = text.lower().split("e")[0]
        if any(ch in "123456789" for ch in mantissa):
            return None
    elif abs(value) < sys.float_info.min:
        return None
    return value


class MetaLexer:
    """Lexes one backslash command of ``src`` starting at ``cmd_start``.

    ``pos`` starts just after the backslash. ``command`` (the command name,
    for messages) is set by the caller once the first word is known.
    """

    def __init__(
        self,
        src: str,
        cmd_start: int,
        source: str,
        lineno: int,
        *,
        ascii_text: bool = False,
    ) -> None:
        self.src = src
        #: ``src`` is all ASCII (the caller knows): a byte column is then
        #: a character count, and column() counts nothing
        self._ascii = ascii_text
        self.cmd_start = cmd_start
        self.pos = cmd_start + 1
        self.source = source
        self.lineno = lineno
        self.command: str | None = None
        #: did the last token read end the command with a newline?
        self.last_was_newline = False
        # column(): positions counted so far (increasing) and their offsets
        self._col_marks = [cmd_start]
        self._col_counts = [0]

    # ------------------------------------------------------------------
    # positions and messages

    def column(self, pos: int) -> int:
        """Byte offset of ``pos`` from the command's backslash.

        Counted on from the nearest position asked for before (the parser
        asks at every token, in order, and again for an operator once its
        right operand is parsed): counting from the backslash each time
        made a 4 MB ``\\set`` line quadratic."""
        if self._ascii:
            return pos - self.cmd_start
        marks, counts = self._col_marks, self._col_counts
        if pos >= marks[-1]:
            count = counts[-1] + byte_len(self.src[marks[-1] : pos])
            if pos > marks[-1]:
                marks.append(pos)
                counts.append(count)
            return count
        i = bisect.bisect_right(marks, pos) - 1
        return counts[i] + byte_len(self.src[marks[i] : pos])

    def line_text(self) -> str:
        """The command text read so far, without trailing newlines."""
        return self.src[self.cmd_start : self.pos].rstrip("\r\n")

    def fail(self, message: str, detail: str | None = None) -> NoReturn:
        """Report an error at the end of the last token read, like pgbench."""
        column = self.column(self.pos) - 1
        if not self.last_was_newline:
            # pgbench lexes on to the end of the line to show it whole; a
            # lexing error found on the way is the one reported.
            while self.next_token().kind is not Tok.EOL:
                pass
        raise ScriptError(
            self.source,
            self.lineno,
            message,
            line=self.line_text(),
            detail=detail,
            command=self.command,
            column=column,
        )

    # ------------------------------------------------------------------
    # word mode

    def next_word(self) -> tuple[str, int] | None:
        """Next whitespace-separated word and its byte column, or None at
        the end of the command (the newline is consumed)."""
        src = self.src
        self.last_was_newline = False
        skip = _word_skip().match(src, self.pos)
        assert skip is not None  # the pattern matches the empty string
        pos = skip.end()
        m = _NONSPACE_RE.match(src, pos)
        if m is None:
            # the end of the text, or the newline that ends the command
            if pos < len(src):
                pos += 1
                self.last_was_newline = True
            self.pos = pos
            return None
        word = m.group()
        end = m.end()
        if word.endswith("\\"):
            cont = _CONTINUATION_RE.match(src, end - 1)
            if cont:
                # "word\<newline>": the word without its backslash, and
                # the continuation is eaten with it.
                word = word[:-1]
                end = cont.end()
        self.pos = end
        # pgbench computes the word's offset as "end - length", which
        # is off when a continuation was eaten; keep that quirk.
        return word, self.column(end) - byte_len(word)

    # ------------------------------------------------------------------
    # expression mode

    def next_token(self) -> Token:
        """Next expression token; lexing errors are reported via fail()."""
        src = self.src
        self.last_was_newline = False
        # one match: the whitespace and continuations before the token,
        # then the token, its kind named by the group that matched
        m = _expr_token().match(src, self.pos)
        assert m is not None  # the pattern matches the empty string
        kind = m.lastgroup
        end = m.end()
        self.pos = end
        if kind == "op":
            return Token(Tok.OP, m.group(kind), end - len(m.group(kind)), end)
        if kind == "word":
            word = m.group(kind)
            start = end - len(word)
            tok = _KEYWORDS.get(word.lower()) if word.isascii() else None
            if tok is None:
                return Token(Tok.FUNCTION, word, start, end)
            value: object = word.lower() == "true" if tok is Tok.BOOLEAN else None
            return Token(tok, value, start, end)
        if kind == "num":
            text = m.group(kind)
            return self._number(text, end - len(text), end)
        if kind == "var":
            name = m.group(kind)
            return Token(Tok.VARIABLE, name, end - len(name) - 1, end)
        if kind is not None:
            # "(", ")", ",", or the newline that ends the command
            tok = _SINGLE[kind]
            if tok is Tok.EOL:
                self.last_was_newline = True
                return Token(Tok.EOL, None, end - 1, end)
            return Token(tok, m.group(kind), end - 1, end)
        if end >= len(src):
            return Token(Tok.EOL, None, end, end)
        # any other character
        self.pos = end + 1
        self.fail("unexpected character", src[end])

    def _number(self, text: str, start: int, end: int) -> Token:
        self.pos = end
        if text.isdigit():
            if text == "9223372036854775808":
                # INT64_MIN's magnitude: only valid right after a unary minus
                return Token(Tok.MAXINT_PLUS_ONE, None, start, end)
            value = int(text)
            if value > INT64_MAX:
                self.fail("bigint constant overflow", text)
            return Token(Tok.INT, value, start, end)
        dvalue = parse_double(text)
        if dvalue is None:
            self.fail("double constant overflow", text)
        return Token(Tok.DOUBLE, dvalue, start, end)
