"""Runs of SQL tokens that change no scanner state: the splitter's fast paths.

``splitter.SqlScanner`` follows psqlscan token by token, which costs a
pass of its Python loop per token: 15 s for a 4 MB line, seconds for
20,000 statements. Most of a statement changes none of the scanner's state
(parenthesis depth, quote mode, the CREATE FUNCTION ... BEGIN tracking),
and the scanner's output is the source text itself; so runs of such tokens
are taken here in one regex match each, at C speed:

* :func:`word_run_end`: the run of whole tokens at a position --
  operators, plain integers, identifiers, ``:variables``, quoted strings
  and identifiers, comments, balanced parentheses -- once the statement's
  first word is known not to be CREATE (only CREATE [OR REPLACE]
  FUNCTION|PROCEDURE bodies make words count);
* :func:`match_statement`: a whole statement up to its ``;`` in one match,
  when the scanner is between statements.

What a run leaves to the token loop: ``;``, ``\\``, ``$``, a quote prefix
(``E''``, ``B''``, ``X''``, ``N''``, ``U&``), nested comments, numbers with
a fraction, an exponent, ``_`` or junk after them, unbalanced or deeply
nested parentheses. The splitter's tests check both paths give the same
results.

Possessive quantifiers only where CPython's ``re`` matches them right:
it gained them in 3.11.0 and matched some wrongly until 3.11.5
(gh-100061, gh-106052; Debian 12's python3 is 3.11.2), which split
scripts differently there. Before 3.11.5 the runs are greedy, and as
linear, because they have only one way to match: every atom takes all it
can (``X+(?!X)``: a shorter run fails its lookahead at once), the atoms
of a run start with different characters, and what follows a loop
(``;``, ``)``) starts no atom; so a failed match goes back over each
iteration once and finds no other reading of the text. That greedy form
reads every text as the possessive one does
(tests/unit/test_regex_portable.py), at two to four times the cost of
a long run (re keeps a point to go back to per iteration).
"""

# (no ``from __future__ import annotations``: typing.NamedTuple makes a
# ForwardRef of each string annotation, compiling it, and the first
# builtin compile() of a process makes all of the ast module's node types,
# some 200 KiB of every run: issue 25)
import re
import sys
from typing import NamedTuple

from pgsurge.script.lexer import ASCII_IDENT_CHARS, IDENT_CHAR, IDENT_START, wide_class

#: re matches possessive quantifiers right (see the module docstring)
POSSESSIVE = sys.version_info >= (3, 11, 5)

_WORD_CONT = wide_class(ASCII_IDENT_CHARS + "$")
#: an SQL identifier: it may contain "$" (a dollar-quote tag may not);
#: whole (a shorter one fails the lookahead), on every Python
SQL_IDENT = re.compile(f"{IDENT_START}{_WORD_CONT}*(?!{_WORD_CONT})")
#: what follows ":" in a psql variable reference
VARCHARS = IDENT_CHAR
#: whitespace, punctuation and operators that start no longer token
PUNCT = r" \t\n\r\f,+*<>=!%^&|~#@?\[\]{}`"

# what directly after a digit makes it part of a longer token (the
# splitter's _number_end takes those)
_NUM_TAIL = wide_class(ASCII_IDENT_CHARS + "$.")
_NUM_TAIL_RE = re.compile(_NUM_TAIL)
_IDENT_CHAR_OR_DOLLAR = re.compile(wide_class(ASCII_IDENT_CHARS + "$"))
_SPACE = r"[ \t\n\r\f]"

#: how deep balanced parentheses are taken in one run
PAREN_DEPTH = 4


class _Dialect:
    """The two spellings of "all of it": possessive, or greedy with a
    lookahead that a shorter match fails at once."""

    def __init__(self, possessive: bool) -> None:
        self.possessive = possessive
        #: after a loop's quantifier
        self.loop = "+" if possessive else ""

    def whole(self, item: str, times: str) -> str:
        """``item`` (one character) ``times`` ("*" or "+"), as many as
        there are."""
        if self.possessive:
            return f"{item}{times}+"
        return f"{item}{times}(?!{item})"


class Runs(NamedTuple):
    """The compiled regexes of one dialect."""

    leading: re.Pattern[str]
    word_run: re.Pattern[str]
    first_statement: re.Pattern[str]
    next_statement: re.Pattern[str]


def _atoms(d: _Dialect, digits: str) -> str:
    """The tokens of a run but the parenthesized groups, the commonest
    first (re tries the alternatives in order)."""
    varchars = d.whole(VARCHARS, "+")
    # what may follow ":" in a variable reference, "::" or ":="
    after_colon = rf"{varchars}|'{varchars}'|\"{varchars}\"|\{{\?{varchars}\}}|[:=]"
    # greedy: the empty reading only where none of them matches (else
    # ":name" would also read as ":" and a name, two ways to fail per
    # variable: exponential)
    variable = (
        rf":(?:{after_colon})?+"
        if d.possessive
        else rf":(?:{after_colon}|(?!{after_colon}))"
    )
    no_nl = d.whole(r"[^\n\r]", "*")
    squoted = d.whole("[^']", "*")
    dquoted = d.whole('[^"]', "*")
    stars = d.whole(r"\*", "+")
    word = d.whole(_WORD_CONT, "*")
    return "|".join(
        (
            # a :variable ("::" and ":=" too), with the punctuation after
            # it: what the next atom would take next, in the same
            # iteration of the loop (a 4 MB line of ":var, " references
            # is a third cheaper); digits after it are left to the next
            # iteration, where they make the same atom as with the
            # punctuation. First: re skips an alternative that starts
            # with another character than the text's at no cost, and no
            # other alternative starts with ":"
            variable + d.whole(f"[{PUNCT}]", "*"),
            digits,
            # an identifier: not right after a digit (the junk of a number)
            # and not a one-letter quote prefix
            rf"(?<![0-9])(?![bBxXeEnN]'|[uU]&){IDENT_START}{word}",
            # a string (one continued on a later line, 'a'\n'b', is read
            # as two here: the same text, and the same state after it),
            # a quoted identifier; not ended by the first quote of a
            # doubled one (greedy, 'a''b' would read as two strings too)
            rf"'{squoted}(?:''{squoted})*{d.loop}'(?!')",
            rf'"{dquoted}(?:""{dquoted})*{d.loop}"(?!")',
            rf"-(?!-)|--{no_nl}|/(?!\*)",
            # a comment without nesting (psqlscan's xc, depth 0 throughout)
            rf"/\*(?:{d.whole('[^*/]', '+')}|{stars}(?!/)|/(?!\*))*{d.loop}{stars}/",
            r"(?<![0-9])\.(?![0-9])",
        )
    )


def _run_atom(d: _Dialect) -> str:
    # Outside parentheses a run of punctuation and digits is taken whole,
    # and its trailing digits are given back when they start a longer
    # token (word_run_end): a 4 MB IN list is one atom. Inside parentheses
    # there is no giving back: such digits fail the group.
    digits = d.whole(f"[{PUNCT}0-9]", "+")
    # (one assertion, not "(?<![0-9])|(?!tail)": a space before "(" meets
    # both, and two ways to match an atom double the work of going back)
    strict = rf"{digits}(?!(?<=[0-9]){_NUM_TAIL})"
    inner = _atoms(d, strict)
    for _ in range(PAREN_DEPTH - 1):
        inner = rf"{_atoms(d, strict)}|\((?:{inner})*{d.loop}\)"
    return rf"(?:{_atoms(d, digits)}|\((?:{inner})*{d.loop}\))"


def build_runs(possessive: bool) -> Runs:
    """The regexes in possessive or greedy form (tests compare the two)."""
    d = _Dialect(possessive)
    # what the token loop drops before a statement's first token;
    # greedy, the lookahead makes a statement match that fails give none
    # of it back (a run may start with blanks or a comment: it would scan
    # the statement again from each)
    spaces = d.whole(_SPACE, "+")
    no_nl = d.whole(r"[^\n\r]", "*")
    leading = rf"(?:{spaces}|--{no_nl})*{d.loop}(?!{_SPACE}|--)"
    word = d.whole(_WORD_CONT, "*")
    atom = _run_atom(d)
    return Runs(
        re.compile(leading),
        # (no group tells which atom came last: in a possessive loop
        # Python 3.11's re gets a group's span wrong, and a group costs a
        # mark per iteration)
        re.compile(f"{atom}+{d.loop}"),
        # A statement: what the token loop drops, then (group 1) a first
        # word that is not CREATE (a word with a non-ASCII letter never
        # is), and a run up to a ";". Digits followed by what makes a
        # longer number stop the run short of the ";": no match then.
        re.compile(
            rf"{leading}((?![cC][rR][eE][aA][tT][eE](?!{_WORD_CONT}))"
            rf"(?<![0-9])(?![bBxXeEnN]'|[uU]&){IDENT_START}{word}{atom}*{d.loop};)"
        ),
        # A statement whose first word was read before (a meta command cut it).
        re.compile(rf"{leading}({atom}+{d.loop};)"),
    )


# Compiled on first use, not at import: compiling these four costs some 80
# million instructions (about 20 ms, a tenth of a run's start-up), and the
# splitter only uses them on long scripts (splitter.RUNS_FROM)
_RUNS: Runs | None = None
_LEADING: re.Pattern[str] | None = None
_WORD_RUN: re.Pattern[str] | None = None
_FIRST_STATEMENT: re.Pattern[str] | None = None
_NEXT_STATEMENT: re.Pattern[str] | None = None


def runs() -> Runs:
    """The regexes of this interpreter's dialect, compiled once."""
    global _RUNS, _LEADING, _WORD_RUN, _FIRST_STATEMENT, _NEXT_STATEMENT
    if _RUNS is None:
        _RUNS = build_runs(POSSESSIVE)
    # (one a test put in place is kept)
    _LEADING = _LEADING or _RUNS.leading
    _WORD_RUN = _WORD_RUN or _RUNS.word_run
    _FIRST_STATEMENT = _FIRST_STATEMENT or _RUNS.first_statement
    _NEXT_STATEMENT = _NEXT_STATEMENT or _RUNS.next_statement
    return _RUNS


def leading_match(src: str, pos: int) -> re.Match[str] | None:
    """What the token loop drops before a statement's first token (blanks
    and ``--`` comments), from ``pos``: always a match, maybe empty."""
    if _LEADING is None:
        runs()
    assert _LEADING is not None
    return _LEADING.match(src, pos)


def match_statement(src: str, pos: int, first_word: bool) -> re.Match[str] | None:
    """A whole statement from ``pos`` to its ``;`` (group 1, after what
    the token loop would drop), when the scanner is between statements
    (no quote or comment open, no parenthesis, no BEGIN block): from its
    first word when ``first_word``, else after a first word that was not
    CREATE."""
    if _FIRST_STATEMENT is None or _NEXT_STATEMENT is None:
        runs()
    assert _FIRST_STATEMENT is not None and _NEXT_STATEMENT is not None
    return (_FIRST_STATEMENT if first_word else _NEXT_STATEMENT).match(src, pos)


def word_run_end(src: str, pos: int) -> int:
    """End of the run of whole tokens at ``pos`` (``pos`` when there is
    none). The caller knows the statement's first word is not CREATE."""
    if _WORD_RUN is None:
        runs()
    assert _WORD_RUN is not None
    m = _WORD_RUN.match(src, pos)
    if m is None:
        return pos
    end = m.end()
    if "0" <= src[end - 1] <= "9" and _NUM_TAIL_RE.match(src, end):
        # "12.5", "1e5", "12abc", "1_000", "12$": when these digits are a
        # number (not the end of a name or a :variable), the token loop
        # takes it, from its first digit
        first = end - 1
        while first > pos and "0" <= src[first - 1] <= "9":
            first -= 1
        if first == pos or _digits_are_number(src, pos, first):
            end = first
    return end


def _digits_are_number(src: str, pos: int, first: int) -> bool:
    """Are the digits of a run (from ``pos``) starting at ``first`` a
    number? Not when they end an identifier (after a letter, "_", "$" or
    a non-ASCII character) or a :variable (after an odd run of colons:
    "::" is a token of its own, so in ":::12" the last colon and the
    digits are the variable)."""
    before = src[first - 1]
    if before == ":":
        colons = first - 1
        while colons > pos and src[colons - 1] == ":":
            colons -= 1
        return (first - colons) % 2 == 0
    return _IDENT_CHAR_OR_DOLLAR.match(before) is None
