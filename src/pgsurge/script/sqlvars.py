"""``:name`` variable references in SQL text, found the way pgbench finds them.

pgbench does not look at quotes here: ``':x'`` and ``"a:x"`` are references
too. A reference is a colon followed by a letter (ASCII, ``_`` or any
non-ASCII character) and then letters and digits; where a colon is not
followed by such a name, the whole run of colons is skipped, so a cast
``x::int`` never names a variable.

* extended/prepared modes (pgbench's ``parseQuery``): every reference
  becomes ``$1``, ``$2``… in order (a variable used twice takes two
  parameters); at most 255 per statement.
* simple mode (pgbench's ``assignVariables``): each reference is replaced
  by the variable's text at run time, or left as written when the variable
  does not exist.
"""

from __future__ import annotations

import re

from pgsurge.script.fatal import PlainScriptError
from pgsurge.script.lexer import IDENT_CHAR, IDENT_START

#: pgbench's MAX_ARGS - 1: the statement itself takes one slot
MAX_SQL_PARAMS = 255

_REFERENCE = re.compile(f":+(?:({IDENT_START}{IDENT_CHAR}*))?")
_NAME = re.compile(f"{IDENT_START}{IDENT_CHAR}*")
# The colon first and the "not after another colon" test after it: a pattern
# that starts with a literal lets re skip to each ":" at C speed (with the
# look-behind first, re tried every position: 70 ms for a 4 MB statement
# without a colon, now about 1 ms).
_SPLIT = re.compile(f":(?<!::)({IDENT_START}{IDENT_CHAR}*)")


def valid_variable_name(name: str) -> bool:
    """pgbench's ``valid_variable_name``: an ASCII letter, ``_`` or any
    non-ASCII character, then those or digits (so not empty, no leading
    digit). Names given by ``-D`` and by ``\\gset`` results must pass it."""
    return _NAME.fullmatch(name) is not None


def split_variables(sql: str) -> tuple[str, ...]:
    """Literal text at even indexes, variable names at odd ones.

    A reference is one colon, not preceded by another, then a name: pgbench
    skips a whole run of colons when no name follows the first of them, so
    ``::x`` (a cast) names nothing. One ``re.split`` (C speed: a 4 MB
    statement of references is split in milliseconds)."""
    return tuple(_SPLIT.split(sql))


def to_params(parts: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The ``$n`` form of :func:`split_variables`'s result: the SQL text
    and the variable names in parameter order."""
    if len(parts) == 1:
        return parts[0], ()
    names = parts[1::2]
    # the names' slots take "$1", "$2", ... in one slice assignment (a
    # Python loop over 400,000 references took half a second)
    out = list(parts)
    out[1::2] = map("${}".format, range(1, len(names) + 1))
    return "".join(out), names


def too_many_params(source: str, sql: str) -> PlainScriptError:
    """pgbench's error for a statement with more than 255 variables under
    ``-M extended``/``-M prepared`` (found after all scripts are parsed)."""
    return PlainScriptError(
        source,
        f"statement has too many arguments (maximum is {MAX_SQL_PARAMS}): {sql}",
    )
