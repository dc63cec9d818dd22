"""Split script text into SQL commands and backslash commands: psqlscan's role.

pgbench runs the script through psql's SQL lexer (``psqlscan.l``), which
collects text into a query buffer until one of:

* a ``;`` outside quotes, comments and parentheses (and outside a
  ``CREATE FUNCTION ... BEGIN ATOMIC ... END`` body) — the ``;`` is kept;
* a backslash outside quotes and comments, wherever it is on the line —
  the backslash command is then lexed separately (``lexer.py``) and SQL
  scanning resumes after it;
* the end of the text — whatever was collected is still a command, even
  inside an unterminated quote or comment (pgbench reports nothing).

On the way the lexer drops whitespace and ``--`` comments before the first
token, keeps them after it, keeps ``/* */`` comments (nested), turns ``\\;`` into ``;``
(so one command may hold several queries) and ``\\:`` into ``:``. Its
state (parenthesis depth, ``BEGIN`` depth, quote state) carries over from
one command to the next, exactly as in pgbench, so an unbalanced ``(``
swallows later semicolons.

Standard-conforming strings are assumed on (as pgbench does): ``'...'``
has no backslash escapes, ``E'...'`` has.

The scanner below goes token by token; where tokens change none of its
state it takes them in runs instead, one regex match each (``sqlruns``:
whole statements, runs of tokens once the first word is known not to be
CREATE; ``_PLAIN_RUN`` before that), so a 4 MB line or 20,000 statements
cost a few passes of its loop per statement, not one per token.
"""

# (no ``from __future__ import annotations``: typing.NamedTuple makes a
# ForwardRef of each string annotation, compiling it, and the first
# builtin compile() of a process makes all of the ast module's node types,
# some 200 KiB of every run: issue 25)
import enum
import re
from collections.abc import Callable
from functools import partial
from typing import NamedTuple, Protocol, cast

from pgsurge.script.lexer import (
    ASCII_IDENT_CHARS,
    ASCII_LETTERS,
    IDENT_CHAR,
    IDENT_START,
    byte_len,
    wide_class,
)
from pgsurge.script.sqlruns import (
    SQL_IDENT,
    VARCHARS,
    leading_match,
    match_statement,
    word_run_end,
)


class _Emit(Protocol):
    def __call__(self, text: str, at: int, significant: bool = True) -> None: ...


class Stop(enum.Enum):
    """Why :meth:`SqlScanner.scan` returned."""

    SEMICOLON = 1
    BACKSLASH = 2
    EOF = 3


class ScanResult(NamedTuple):
    """One stop of the scanner (a named tuple: made once per statement)."""

    stop: Stop
    #: the collected query buffer (psqlscan's output)
    text: str
    #: index in the source of the first collected character, or -1
    start: int
    #: index of the backslash (BACKSLASH), else where scanning stopped
    end: int
    #: number of ``\\;``-separated parts that hold something to run
    nqueries: int


class _Mode(enum.Enum):
    INITIAL = 0
    XC = 1  # /* comment */
    XB = 2  # b'...'
    XH = 3  # x'...'
    XQ = 4  # '...'
    XE = 5  # E'...'
    XUS = 6  # U&'...'
    XD = 7  # "..."
    XUI = 8  # U&"..."
    XDOLQ = 9  # $tag$...$tag$


_INITIAL = _Mode.INITIAL
_SEMICOLON = Stop.SEMICOLON
_BACKSLASH = Stop.BACKSLASH


#: ``ScanResult(*fields)`` at C speed: the named tuple's own ``__new__``
#: is a Python function (this is what its ``_make`` does)
_result = cast(
    "Callable[[tuple[Stop, str, int, int, int]], ScanResult]",
    partial(tuple.__new__, ScanResult),
)
_LEADING_MATCH = leading_match


_SPACE = " \t\n\r\f"
# psqlscan's letter classes: ASCII letters and "_" plus every byte >= 0x80,
# i.e. every non-ASCII character (see lexer.wide_class for why they are not
# written with a "\x80-\U0010ffff" range)
_IDENT_START = re.compile(IDENT_START)
_IDENT = SQL_IDENT
_TAG = f"{IDENT_START}{IDENT_CHAR}*"
_DOLQ_DELIM = re.compile(rf"\$(?:{_TAG})?\$")
_DOLQ_FAILED = re.compile(rf"\${_TAG}")
_PARAM = re.compile(r"\$[0-9](?:_?[0-9])*")
# psql variable references: ":name", ":'name'", ':"name"', ":{?name}"
_VARCHARS = VARCHARS
_PSQL_VAR = re.compile(
    rf":(?:{_VARCHARS}+|'{_VARCHARS}+'|\"{_VARCHARS}+\"|\{{\?{_VARCHARS}+\}})"
)
# Numbers (PostgreSQL 16+ lexer): a number directly followed by an
# identifier is one "junk" token, and flex takes the longest of the
# readings, e.g. "1.e5$" is "1." + "e5$", not "1.e5" + "$".
_DEC = r"[0-9](?:_?[0-9])*"
_NUM_DEC = re.compile(_DEC)
_NUM_NUMERIC = re.compile(rf"{_DEC}\.(?:{_DEC})?|\.{_DEC}")
_NUM_REAL = re.compile(rf"(?:{_DEC}\.(?:{_DEC})?|\.{_DEC}|{_DEC})[eE][-+]?{_DEC}")
_NUM_FAIL = re.compile(rf"{_DEC}\.\.")
_JUNK = _IDENT  # the letters of an identifier, "$" included


def _number_end(src: str, pos: int) -> int:
    """End of the number token (with any junk) starting at ``pos``."""
    fail = _NUM_FAIL.match(src, pos)
    best = pos
    for regex in (_NUM_DEC, _NUM_NUMERIC, _NUM_REAL):
        m = regex.match(src, pos)
        if m is None:
            continue
        end = m.end()
        junk = _JUNK.match(src, end)
        if junk:
            end = junk.end()
        best = max(best, end)
    if fail and fail.end() > best:
        # "1..": the integer alone, the ".." is another token
        dec = _NUM_DEC.match(src, pos)
        assert dec is not None
        return dec.end()
    return best


# A run of characters that change no scanner state and start no token of
# interest: whitespace, punctuation and operators (but "--", "/*", the
# parentheses, ";", "\\", ":", the quotes and "$"), and plain integers
# not followed by what would make them a longer token (".", "e", "_", a
# letter, "$": see _number_end). The output is the source text anyway, so
# such a run is taken in one match: a 4 MB "IN (1,2,3,...)" line no longer
# goes through the loop once per token. Nothing follows the loop, so no
# match goes back over it: linear.
_PLAIN_RUN = re.compile(
    r"(?:[ \t\n\r\f,+*<>=!%^&|~#@?\[\]{}`]+"
    r"|-(?!-)|/(?!\*)|\.(?![0-9])"
    rf"|[0-9]+(?!{wide_class(ASCII_IDENT_CHARS + '$.')})"
    # a psql variable reference (sent as written: pgbench substitutes
    # nothing while splitting), "::", ":=" or a lone ":", as below
    rf"|:(?:{_VARCHARS}+|'{_VARCHARS}+'|\"{_VARCHARS}+\"|\{{\?{_VARCHARS}+\}}|[:=])?"
    r")+"
)
_PLAIN_FIRST = frozenset(",+*<>=!%^&|~#@?[]{}`-/.:0123456789")
# the text of a quoted string or comment up to what may end it
_XC_TEXT = re.compile(r"[^*/]+")
_XQ_TEXT = re.compile(r"[^']+")
_XE_TEXT = re.compile(r"[^'\\]+")

# where the runs of sqlruns may start (whitespace and comments only once
# the part has something to run); emptied, it turns the runs off
_WORD_FIRST = _PLAIN_FIRST | frozenset(ASCII_LETTERS + _SPACE + "'\"(")
#: the shortest script the runs of sqlruns are used on: below it the token
#: loop costs less than compiling their regexes (a builtin script is 300
#: to 600 characters, 20 ms of compiling against well under 1 ms of loop)
RUNS_FROM = 16384
_NO_RUNS: frozenset[str] = frozenset()
_COMMENTS = ("--", "/*")
# what "\\" escapes in SQL text (any other character starts a meta command)
_ESCAPED = (";", ":")

# After a closing quote: whitespace holding a newline, then a quote, makes
# the string continue (SQL's string continuation). Linear on hostile
# input: a comment is taken whole (a shorter one fails its lookahead), and
# no loop iteration starts with what follows the loop, so a failed match
# goes back over each iteration once.
_QUOTE_CONTINUE = re.compile(
    r"(?:[ \t\f]|--[^\n\r]*(?![^\n\r]))*[\n\r](?:[ \t\n\r\f]|--[^\n\r]*[\n\r])*'"
)
_FUNC_WORDS = {
    "create": "c",
    "function": "f",
    "procedure": "p",
    "or": "o",
    "replace": "r",
}


class SqlScanner:
    """psqlscan's state over one script; call :meth:`scan` repeatedly."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        #: _WORD_FIRST, or nothing (no runs) for a short script
        self.word_first = _WORD_FIRST if len(src) >= RUNS_FROM else _NO_RUNS
        self.mode = _Mode.INITIAL
        self.paren_depth = 0
        self.begin_depth = 0
        self.xc_depth = 0
        self.dolq_start = ""
        # CREATE [OR REPLACE] FUNCTION|PROCEDURE detection, for BEGIN ATOMIC
        self.ident_count = 0
        self.idents = ["", "", "", ""]

    def between_statements(self) -> bool:
        """No quote, comment, parenthesis or BEGIN block is open: what
        comes next (after blanks and ``--`` comments, which :meth:`scan`
        would drop) starts a statement or a backslash command."""
        return self.mode is _INITIAL and self.paren_depth == 0 and self.begin_depth == 0

    def scan(self) -> ScanResult:
        """Collect text from :attr:`pos` up to the next stop."""
        src = self.src
        # (module constants and a C-level tuple.__new__: this prologue runs
        # once per statement, 20,000 times for a big script)
        if (
            self.mode is _INITIAL
            and self.paren_depth == 0
            and self.begin_depth == 0
            and self.word_first
        ):
            # between statements: the whole next one in one match, unless
            # it is (or may be) a CREATE FUNCTION or holds what only the
            # token loop handles
            first_word = self.ident_count == 0
            if first_word or self.idents[0] != "c":
                m = match_statement(src, self.pos, first_word)
                if m is not None:
                    # (a single part: its nqueries is 1 whatever it holds;
                    # its ";" ends the statement's word tracking)
                    pos = m.start(1)
                    end = self.pos = m.end()
                    self.ident_count = 0
                    return _result((_SEMICOLON, src[pos:end], pos, end, 1))
            # what the token loop would drop anyway
            lead = _LEADING_MATCH(src, self.pos)
            assert lead is not None  # the pattern matches the empty string
            pos = self.pos = lead.end()
            if src.startswith("\\", pos) and src[pos + 1 : pos + 2] not in _ESCAPED:
                # a meta command right away (a \set line): nothing collected
                return _result((_BACKSLASH, "", -1, pos, 1))
        n = len(src)
        out: list[str] = []
        start = -1
        nqueries = 0
        content = False  # the current \;-separated part has something to run

        def emit(text: str, at: int, significant: bool = True) -> None:
            nonlocal start, content
            if start < 0:
                start = at
            out.append(text)
            if significant:
                content = True

        while True:
            pos = self.pos
            mode = self.mode
            if pos >= n:
                stop = Stop.EOF
                break
            ch = src[pos]

            if mode is not _Mode.INITIAL:
                self._scan_quoted(pos, emit)
                continue

            # ---- INITIAL
            if (
                self.ident_count > 0
                and self.idents[0] != "c"
                and ch in self.word_first
                and (content or not (ch in _SPACE or src.startswith(_COMMENTS, pos)))
            ):
                # (a run emitted whole is significant: it starts with
                # something to run, or the part has something already)
                end = word_run_end(src, pos)
                if end > pos:
                    emit(src[pos:end], pos)
                    self.pos = end
                    continue
            if ch in _SPACE:
                end = pos + 1
                while end < n and src[end] in _SPACE:
                    end += 1
                if out:
                    emit(src[pos:end], pos, significant=False)
                self.pos = end
                continue
            if ch in _PLAIN_FIRST:
                m = _PLAIN_RUN.match(src, pos)
                if m is not None:
                    end = m.end()
                    emit(src[pos:end], pos)
                    self.pos = end
                    continue
            two = src[pos : pos + 2]
            if two == "--":
                # a "--" comment is whitespace: dropped before the first
                # token, kept after it (pgbench sends it to the server)
                end = pos + 2
                while end < n and src[end] not in "\n\r":
                    end += 1
                if out:
                    emit(src[pos:end], pos, significant=False)
                self.pos = end
                continue
            if two == "/*":
                self.mode = _Mode.XC
                self.xc_depth = 0
                emit(two, pos, significant=False)
                self.pos = pos + 2
                continue
            if ch == "(":
                self.paren_depth += 1
                emit(ch, pos)
                self.pos = pos + 1
                continue
            if ch == ")":
                if self.paren_depth > 0:
                    self.paren_depth -= 1
                emit(ch, pos)
                self.pos = pos + 1
                continue
            if ch == ";":
                emit(ch, pos, significant=False)
                self.pos = pos + 1
                if self.paren_depth == 0 and self.begin_depth == 0:
                    self.ident_count = 0
                    stop = Stop.SEMICOLON
                    break
                continue
            if ch == "\\":
                nxt = src[pos + 1 : pos + 2]
                if nxt in (";", ":") and nxt:
                    emit(nxt, pos, significant=nxt == ":")
                    self.pos = pos + 2
                    if nxt == ";":
                        self.ident_count = 0
                        nqueries += content
                        content = False
                    continue
                stop = Stop.BACKSLASH
                break
            if ch == ":":
                m = _PSQL_VAR.match(src, pos)
                end = m.end() if m else pos + (2 if two in ("::", ":=") else 1)
                emit(src[pos:end], pos)
                self.pos = end
                continue
            if ch == "'":
                self._open(_Mode.XQ, pos, 1, emit)
                continue
            if ch == '"':
                self._open(_Mode.XD, pos, 1, emit)
                continue
            if ch == "$":
                m = _DOLQ_DELIM.match(src, pos)
                if m:
                    self.dolq_start = m.group()
                    self._open(_Mode.XDOLQ, pos, m.end() - pos, emit)
                    continue
                m = _PARAM.match(src, pos)
                if m:
                    # a parameter "$1" (plus any junk): one token
                    end = m.end()
                    junk = _JUNK.match(src, end)
                    if junk:
                        end = junk.end()
                    emit(src[pos:end], pos)
                    self.pos = end
                    continue
                # "$" alone, or "$name" without a closing "$": only the "$"
                emit(ch, pos)
                self.pos = pos + 1
                continue
            # ASCII digits only: str.isdigit() also accepts "²" or "٣",
            # which no number regex matches (the scanner would not advance)
            if "0" <= ch <= "9" or (ch == "." and "0" <= src[pos + 1 : pos + 2] <= "9"):
                end = _number_end(src, pos)
                if end > pos:
                    emit(src[pos:end], pos)
                    self.pos = end
                    continue
            if _IDENT_START.match(ch):
                if self._quote_prefix(pos, emit):
                    continue
                m = _IDENT.match(src, pos)
                assert m is not None
                word = m.group()
                self._track_identifier(word)
                emit(word, pos)
                self.pos = m.end()
                continue
            # operators and any other single character
            emit(ch, pos)
            self.pos = pos + 1

        nqueries += content
        return ScanResult(stop, "".join(out), start, self.pos, max(nqueries, 1))

    # ------------------------------------------------------------------

    def _open(self, mode: _Mode, pos: int, length: int, emit: _Emit) -> None:
        self.mode = mode
        emit(self.src[pos : pos + length], pos)
        self.pos = pos + length

    def _quote_prefix(self, pos: int, emit: _Emit) -> bool:
        """b'..', x'..', E'..', n'..', U&'..', U&".." (a one-letter word
        directly followed by the quote)."""
        src = self.src
        ch = src[pos]
        nxt = src[pos + 1 : pos + 2]
        low = ch.lower() if ch.isascii() else ""
        if nxt == "'" and low in ("b", "x", "e"):
            mode = {"b": _Mode.XB, "x": _Mode.XH, "e": _Mode.XE}[low]
            self._open(mode, pos, 2, emit)
            return True
        if nxt == "'" and low == "n":
            emit(ch, pos)  # N'..' is a national string: "n" then a quote
            self.pos = pos + 1
            return True
        if nxt == "&" and low == "u":
            third = src[pos + 2 : pos + 3]
            if third == "'":
                self._open(_Mode.XUS, pos, 3, emit)
            elif third == '"':
                self._open(_Mode.XUI, pos, 3, emit)
            else:
                emit(ch, pos)
                self.pos = pos + 1
            return True
        return False

    def _track_identifier(self, word: str) -> None:
        """Follow CREATE [OR REPLACE] FUNCTION/PROCEDURE ... BEGIN ... END
        so that semicolons inside a BEGIN ATOMIC body do not end it."""
        if self.ident_count == 0:
            self.idents = ["", "", "", ""]
        low = word.lower() if word.isascii() else ""
        if low in _FUNC_WORDS and self.ident_count < 4:
            self.idents[self.ident_count] = _FUNC_WORDS[low]
        self.ident_count += 1
        ids = self.idents
        if (
            ids[0] == "c"
            and (
                ids[1] in ("f", "p")
                or (ids[1] == "o" and ids[2] == "r" and ids[3] in ("f", "p"))
            )
            and self.paren_depth == 0
        ):
            if low == "begin":
                self.begin_depth += 1
            elif low == "case":
                if self.begin_depth >= 1:
                    self.begin_depth += 1
            elif low == "end" and self.begin_depth > 0:
                self.begin_depth -= 1

    def _scan_quoted(self, pos: int, emit: _Emit) -> None:
        """One step inside a quoted string, identifier or comment."""
        src = self.src
        mode = self.mode
        ch = src[pos]
        if mode is _Mode.XC:
            if src.startswith("/*", pos):
                self.xc_depth += 1
                emit("/*", pos, significant=False)
                self.pos = pos + 2
            elif ch == "*":
                end = pos
                while end < len(src) and src[end] == "*":
                    end += 1
                if src.startswith("/", end):
                    end += 1
                    if self.xc_depth <= 0:
                        self.mode = _Mode.INITIAL
                    else:
                        self.xc_depth -= 1
                emit(src[pos:end], pos, significant=False)
                self.pos = end
            else:
                m = _XC_TEXT.match(src, pos)
                end = m.end() if m else pos + 1
                emit(src[pos:end], pos, significant=False)
                self.pos = end
            return
        if mode is _Mode.XDOLQ:
            if ch == "$":
                m = _DOLQ_DELIM.match(src, pos)
                if m:
                    if m.group() == self.dolq_start:
                        self.mode = _Mode.INITIAL
                        end = m.end()
                    else:
                        end = m.end() - 1  # the last "$" may open the real end
                else:
                    m = _DOLQ_FAILED.match(src, pos)
                    end = m.end() if m else pos + 1
            else:
                end = src.find("$", pos)
                if end < 0:
                    end = len(src)
            emit(src[pos:end], pos)
            self.pos = end
            return
        if mode is _Mode.XD or mode is _Mode.XUI:
            if ch == '"':
                if src.startswith('""', pos):
                    emit('""', pos)
                    self.pos = pos + 2
                else:
                    emit(ch, pos)
                    self.pos = pos + 1
                    self.mode = _Mode.INITIAL
                return
            end = src.find('"', pos)
            if end < 0:
                end = len(src)
            emit(src[pos:end], pos)
            self.pos = end
            return
        # single-quoted kinds: XB XH XQ XE XUS
        if ch == "'":
            if (
                mode is not _Mode.XB
                and mode is not _Mode.XH
                and src.startswith("''", pos)
            ):
                emit("''", pos)
                self.pos = pos + 2
                return
            emit(ch, pos)
            m = _QUOTE_CONTINUE.match(src, pos + 1)
            if m:
                # the string goes on after whitespace with a newline
                emit(m.group(), pos + 1)
                self.pos = m.end()
            else:
                self.pos = pos + 1
                self.mode = _Mode.INITIAL
            return
        if ch == "\\" and mode is _Mode.XE:
            emit(src[pos : pos + 2], pos)  # the escaped character is taken as is
            self.pos = min(pos + 2, len(src))
            return
        m = (_XE_TEXT if mode is _Mode.XE else _XQ_TEXT).match(src, pos)
        end = m.end() if m else pos + 1
        emit(src[pos:end], pos)
        self.pos = end


def skip_sql_comments(text: str) -> tuple[str, int]:
    """pgbench's ``skip_sql_comments``: drop leading whitespace (C's
    ``isspace``) and ``--`` lines. Returns the rest ("" if nothing is left)
    and how many characters were dropped."""
    m = _SQL_LEADING.match(text)
    assert m is not None  # the pattern matches the empty string
    pos = m.end()
    if pos == 0 and not text.startswith("--"):
        return text, 0
    if text.startswith("--", pos):
        return "", len(text)  # a "--" comment without a newline: nothing left
    return text[pos:], pos


# (nothing follows the loop: no match goes back over it)
_SQL_LEADING = re.compile(r"(?:[ \t\n\v\f\r]+|--[^\n]*\n)*")


def sql_first_line(text: str) -> str:
    """What pgbench shows for an SQL command in ``-r`` reports: its first
    127 bytes, cut at the first newline or carriage return."""
    if len(text) <= 127 and text.isascii() and "\n" not in text and "\r" not in text:
        return text  # the common case, without a copy
    # 127 characters hold at least 127 bytes: only they are looked at (a
    # 4 MB statement is neither encoded nor scanned)
    head = text[:127]
    if not head.isascii() and byte_len(head) > 127:
        head = head.encode("utf-8", "surrogateescape")[:127].decode(
            "utf-8", "surrogateescape"
        )
    m = _FIRST_LINE.match(head)
    assert m is not None  # the pattern matches the empty string
    return m.group()


_FIRST_LINE = re.compile(r"[^\n\r]*")
