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
nested parentheses. Every quantifier is
possessive, so a run is linear in its length whatever the text. The
splitter's tests check both paths give the same results.
"""

from __future__ import annotations

import re

from pgsurge.script.lexer import ASCII_IDENT_CHARS, IDENT_CHAR, IDENT_START, wide_class

#: an SQL identifier: it may contain "$" (a dollar-quote tag may not);
#: possessive, as everything below: a statement's first word is not inside
#: a possessive loop, and giving back its letters one at a time after a
#: failed match made a long first word quadratic
SQL_IDENT = re.compile(f"{IDENT_START}{wide_class(ASCII_IDENT_CHARS + '$')}*+")
#: what follows ":" in a psql variable reference
VARCHARS = IDENT_CHAR
#: whitespace, punctuation and operators that start no longer token
PUNCT = r" \t\n\r\f,+*<>=!%^&|~#@?\[\]{}`"

# what directly after a digit makes it part of a longer token (the
# splitter's _number_end takes those)
_NUM_TAIL = wide_class(ASCII_IDENT_CHARS + "$.")
_NUM_TAIL_RE = re.compile(_NUM_TAIL)
_IDENT_CHAR_OR_DOLLAR = re.compile(wide_class(ASCII_IDENT_CHARS + "$"))

# Outside parentheses a run of punctuation and digits is taken whole, and
# its trailing digits are given back when they start a longer token
# (word_run_end): a 4 MB IN list is one atom. Inside parentheses there is
# no giving back: such digits fail the group.
_DIGITS = f"[{PUNCT}0-9]++"
_STRICT_DIGITS = rf"[{PUNCT}0-9]++(?:(?<![0-9])|(?!{_NUM_TAIL}))"
_VARIABLE = (
    rf":(?:{VARCHARS}++|'{VARCHARS}++'|\"{VARCHARS}++\"|\{{\?{VARCHARS}++\}}|[:=])?+"
)


def _atoms(digits: str) -> str:
    """The tokens of a run but the parenthesized groups, the commonest
    first (re tries the alternatives in order)."""
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
            rf"{_VARIABLE}[{PUNCT}]*+",
            digits,
            # an identifier: not right after a digit (the junk of a number)
            # and not a one-letter quote prefix
            rf"(?<![0-9])(?![bBxXeEnN]'|[uU]&){SQL_IDENT.pattern}",
            # a string (one continued on a later line, 'a'\n'b', is read
            # as two here: the same text, and the same state after it),
            # a quoted identifier
            r"'(?:[^']++|'')*+'",
            r'"(?:[^"]++|"")*+"',
            r"-(?!-)|--[^\n\r]*+|/(?!\*)",
            # a comment without nesting (psqlscan's xc, depth 0 throughout)
            r"/\*(?:[^*/]++|\*++(?!/)|/(?!\*))*+\*++/",
            r"(?<![0-9])\.(?![0-9])",
        )
    )


#: how deep balanced parentheses are taken in one run
PAREN_DEPTH = 4


def _run_atom() -> str:
    inner = _atoms(_STRICT_DIGITS)
    for _ in range(PAREN_DEPTH - 1):
        inner = rf"{_atoms(_STRICT_DIGITS)}|\((?:{inner})*+\)"
    return rf"(?:{_atoms(_DIGITS)}|\((?:{inner})*+\))"


# (no group tells which atom came last: in a possessive loop Python 3.11's
# re gets a group's span wrong, and a greedy loop keeps a backtracking
# point per atom, 6x slower on 500,000 ":var, ")
_WORD_RUN = re.compile(_run_atom() + "++")

#: what the token loop drops before a statement's first token
LEADING = re.compile(r"(?:[ \t\n\r\f]++|--[^\n\r]*+)*+")
_WORD_CONT = wide_class(ASCII_IDENT_CHARS + "$")
# A statement: what the token loop drops, then (group 1) a first word
# that is not CREATE (a word with a non-ASCII letter never is), and a run
# up to a ";". Digits followed by what makes a longer number stop the run
# short of the ";": no match then.
_FIRST_STATEMENT = re.compile(
    rf"{LEADING.pattern}((?![cC][rR][eE][aA][tT][eE](?!{_WORD_CONT}))"
    rf"(?<![0-9])(?![bBxXeEnN]'|[uU]&){SQL_IDENT.pattern}{_run_atom()}*+;)"
)
# A statement whose first word was read before (a meta command cut it).
_NEXT_STATEMENT = re.compile(rf"{LEADING.pattern}({_run_atom()}++;)")


def match_statement(src: str, pos: int, first_word: bool) -> re.Match[str] | None:
    """A whole statement from ``pos`` to its ``;`` (group 1, after what
    the token loop would drop), when the scanner is between statements
    (no quote or comment open, no parenthesis, no BEGIN block): from its
    first word when ``first_word``, else after a first word that was not
    CREATE."""
    return (_FIRST_STATEMENT if first_word else _NEXT_STATEMENT).match(src, pos)


def word_run_end(src: str, pos: int) -> int:
    """End of the run of whole tokens at ``pos`` (``pos`` when there is
    none). The caller knows the statement's first word is not CREATE."""
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
