"""The parsed form of a pgbench script: expression nodes and commands.

These frozen dataclasses are the contract between the parser (which builds
them), the evaluator (which compiles ``Expr`` trees into closures) and the
run engine (which executes ``Command`` sequences). They are plain data and
picklable, so scripts are parsed once in the parent and sent to workers.

Values (see ``values.py``) are ``None`` (NULL), ``bool``, ``int`` (int64),
``float`` (double), or ``str`` — a string from ``-D``, ``\\gset`` or
``\\setshell`` whose type is decided lazily when an operator needs it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import field, fields
from typing import Any

from pgsurge.records import record
from pgsurge.script.sqlvars import split_variables, to_params

Value = None | bool | int | float | str


# --------------------------------------------------------------------------
# Expressions
#
# pgsurge._fastparse (script/fastparse.py) makes Const, Var and Call nodes
# in C without calling __init__: it fills in the slots named below, found
# by name. A new field must be filled in there too (test_fastparse compares
# its trees with the parser's).


@record(frozen=True, slots=True)
class Const:
    """A literal. Equality is type-strict: ``Const(1) != Const(True)``
    and ``Const(1) != Const(1.0)`` (plain dataclass equality would say
    they are equal, since ``1 == True == 1.0`` in Python)."""

    value: bool | int | float | None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Const):
            return NotImplemented
        return type(self.value) is type(other.value) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self.value).__name__, self.value))


@record(frozen=True, slots=True)
class Var:
    name: str


@record(frozen=True, slots=True)
class Call:
    """A function or operator application.

    ``name`` is always lower case. Operators are calls too; the parser
    desugars them exactly as pgbench's grammar does, so the evaluator sees
    only these names (the contract with ``evaluate.py``/``functions.py``):

    ===================  ====================================================
    source               Call
    ===================  ====================================================
    ``a + b``            ``"+"(a, b)``
    ``a - b``            ``"-"(a, b)``
    ``a * b``            ``"*"(a, b)``
    ``a / b``            ``"/"(a, b)``
    ``a % b``            ``"mod"(a, b)`` (same name as the function ``mod``)
    ``-a``               ``"-"(Const(0), a)`` (no unary minus node; but
                         ``-9223372036854775808`` is ``Const(INT64_MIN)``)
    ``+a``               ``a`` itself (no node)
    ``~a``               ``"#"(Const(-1), a)`` (no ``~`` node)
    ``a = b``            ``"="(a, b)``
    ``a <> b``, ``!=``   ``"<>"(a, b)``
    ``a < b``            ``"<"(a, b)``
    ``a <= b``           ``"<="(a, b)``
    ``a > b``            ``"<"(b, a)`` (operands swapped)
    ``a >= b``           ``"<="(b, a)`` (operands swapped)
    ``a & b``            ``"&"(a, b)``
    ``a | b``            ``"|"(a, b)``
    ``a # b``            ``"#"(a, b)`` (bitwise xor)
    ``a << b``           ``"<<"(a, b)``
    ``a >> b``           ``">>"(a, b)``
    ``a AND b``          ``"and"(a, b)`` (lazy: b only if needed)
    ``a OR b``           ``"or"(a, b)`` (lazy)
    ``NOT a``            ``"not"(a)``
    ``a IS NULL``        ``"is"(a, Const(None))``; ``a ISNULL`` likewise
    ``a IS TRUE``        ``"is"(a, Const(True))``; ``IS FALSE`` likewise
    ``a IS NOT x``       ``"not"("is"(a, Const(x)))``; ``a NOTNULL`` is
                         ``"not"("is"(a, Const(None)))``
    ``CASE WHEN c1 THEN  ``"case"(c1, r1, c2, r2, ..., e)``: an odd number
    r1 [WHEN ...]        (>= 3) of arguments, the ELSE part last; a missing
    [ELSE e] END``       ELSE is ``Const(None)``. Lazy.
    ===================  ====================================================

    Functions keep their (lower-cased) table names, e.g. ``"abs"``,
    ``"random_gaussian"``, ``"pow"`` and ``"power"`` (both exist). The
    parser adds pgbench's implicit seed argument: ``hash(x)``,
    ``hash_murmur2(x)``, ``hash_fnv1a(x)`` get ``Var("default_seed")`` as
    a second argument and ``permute(i, n)`` gets it as a third, so the
    evaluator always sees 2 (hash*) or 3 (permute) arguments.

    ``column`` is the 0-based byte offset, in the command line, of the
    token that starts the call (for messages only; it takes no part in
    equality, so parse trees compare structurally).
    """

    name: str
    args: tuple[Expr, ...]
    column: int = field(default=-1, compare=False)


Expr = Const | Var | Call


# --------------------------------------------------------------------------
# Commands


class GsetKind(enum.Enum):
    NONE = 0
    GSET = 1  # \gset: exactly one row expected
    ASET = 2  # \aset: every row of every result, last wins


@record(frozen=True, slots=True)
class CommandBase:
    #: 1-based line number in its source: of the backslash for a meta
    #: command, of the first character sent for an SQL command
    lineno: int
    #: what pgbench shows for the command in ``-r`` reports and messages:
    #: for SQL, the first line of ``text`` (at most 127 bytes, cut at the
    #: first CR or LF); for a meta command, its whole text from the
    #: backslash to the end of the command, continuation lines included,
    #: trailing CR/LF removed (trailing spaces are kept, as pgbench does)
    first_line: str


@record(frozen=True, slots=True)
class SqlCommand(CommandBase):
    """One SQL command (possibly a ``\\;`` compound).

    ``text`` is the command exactly as pgbench sends it in simple mode
    before variable substitution: from its first token (leading whitespace
    and ``--`` comments dropped) to its ``;`` included, or to the backslash
    of a ``\\gset``/other meta command on the same line, or to the end of
    the file; later ``--`` and ``/* */`` comments are kept; ``\\;`` is
    written ``;`` and ``\\:`` is written ``:``.

    Variable references (``sqlvars.py``) are found as pgbench finds them,
    *without* regard to quotes (``':x'`` is a reference too): a single
    ``:`` followed by ``[A-Za-z_]`` or a non-ASCII character, then
    ``[A-Za-z0-9_]`` or non-ASCII characters. A run of two or more colons
    (``x::int``, ``:::x``) is never a reference.

    ``param_text``/``param_vars`` are the extended/prepared form: each
    reference replaced by ``$1..$n`` and the variable names in parameter
    order (a variable used twice gets two parameters, as in pgbench). At
    run time an UNDEFINED variable is sent as a NULL parameter (no error;
    checked with pgbench 18.6). More than 255 references is an error under
    ``-M extended/prepared`` only (``compile.check_query_mode``).

    ``simple_parts`` is the substitution plan for simple mode: literal
    text at even indexes, variable names at odd ones. At run time each
    defined variable is replaced by its text value; an UNDEFINED variable
    is left as written (``:name`` is sent to the server as is, which
    usually makes a syntax error there; checked with pgbench 18.6).

    ``nqueries`` counts the ``\\;``-separated parts that hold something to
    run (not only whitespace/comments); at least 1.

    ``simple_parts``, ``param_text`` and ``param_vars`` are functions of
    ``text``, derived on first use and kept: pgbench itself looks for
    variables only when it sends (simple mode) or prepares (extended), and
    the 500,000 parts of a 4 MB statement of references cost more to make
    than the whole rest of the parse. A worker derives them once.
    """

    text: str
    gset: GsetKind = GsetKind.NONE
    #: the ``\\gset``/``\\aset`` prefix ("" when none)
    gset_prefix: str = ""
    nqueries: int = 1
    _parts: tuple[str, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _params: tuple[str, tuple[str, ...]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def simple_parts(self) -> tuple[str, ...]:
        parts = self._parts
        if parts is None:
            parts = split_variables(self.text)
            # frozen: the cache is set past the generated __setattr__
            object.__setattr__(self, "_parts", parts)
        return parts

    @property
    def param_text(self) -> str:
        return self._param_form()[0]

    @property
    def param_vars(self) -> tuple[str, ...]:
        return self._param_form()[1]

    def _param_form(self) -> tuple[str, tuple[str, ...]]:
        params = self._params
        if params is None:
            params = to_params(self.simple_parts)
            object.__setattr__(self, "_params", params)
        return params


def _slot_setters(cls: type, names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The slots' own setters, which a frozen class's __setattr__ does not
    guard; ``names`` must be all of the dataclass's fields, in order."""
    assert tuple(names.split()) == tuple(f.name for f in fields(cls)), cls
    return tuple(getattr(cls, name).__set__ for name in names.split())


(_LINENO, _FIRST, _TEXT, _GSET, _PREFIX, _NQUERIES, _PARTS, _PARAMS) = _slot_setters(
    SqlCommand, "lineno first_line text gset gset_prefix nqueries _parts _params"
)


def sql_command(lineno: int, first_line: str, text: str, nqueries: int) -> SqlCommand:
    """``SqlCommand(lineno, first_line, text, nqueries=nqueries)``, made at
    half the cost: a frozen dataclass's __init__ sets each field through
    ``object.__setattr__``, which the parser paid 20,000 times on a big
    script. The slots are set directly instead (no other difference)."""
    cmd = object.__new__(SqlCommand)
    _LINENO(cmd, lineno)
    _FIRST(cmd, first_line)
    _TEXT(cmd, text)
    _GSET(cmd, GsetKind.NONE)
    _PREFIX(cmd, "")
    _NQUERIES(cmd, nqueries)
    _PARTS(cmd, None)
    _PARAMS(cmd, None)
    return cmd


@record(frozen=True, slots=True)
class SetCommand(CommandBase):
    var: str
    expr: Expr


(_SET_LINENO, _SET_FIRST, _SET_VAR, _SET_EXPR) = _slot_setters(
    SetCommand, "lineno first_line var expr"
)


def set_command(lineno: int, first_line: str, var: str, expr: Expr) -> SetCommand:
    """``SetCommand(lineno, first_line, var, expr)`` made as
    :func:`sql_command` makes an SqlCommand: 10,000 ``\\set`` lines of a
    big script paid the frozen dataclass's __init__ as much as their
    parsing in C."""
    cmd = object.__new__(SetCommand)
    _SET_LINENO(cmd, lineno)
    _SET_FIRST(cmd, first_line)
    _SET_VAR(cmd, var)
    _SET_EXPR(cmd, expr)
    return cmd


@record(frozen=True, slots=True)
class SleepCommand(CommandBase):
    """``\\sleep N [us|ms|s]`` (also ``\\sleep 10ms``; default unit: s).

    ``amount`` is an int (pgbench's ``atoi`` of the word: may be negative
    or 0, e.g. ``\\sleep -`` is 0) or, for ``\\sleep :name``, the
    variable name (a str, possibly empty), read at run time.
    """

    amount: int | str
    #: microseconds per unit: 1, 1000 or 1_000_000
    unit_us: int


@record(frozen=True, slots=True)
class ShellCommand(CommandBase):
    """``\\shell`` (``var`` is None) or ``\\setshell var``.

    ``argv`` holds the command's words as written (for ``\\setshell``
    without the variable name): at run time a word starting with a single
    ``:`` names a variable, ``::x`` stands for the literal ``:x``, others
    are literal. The parser checks nothing in them.
    """

    var: str | None
    argv: tuple[str, ...]


@record(frozen=True, slots=True)
class IfCommand(CommandBase):
    """``\\if expr`` or ``\\elif expr`` (``is_elif``).

    ``false_jump``: index of the command to go to when the condition is
    false (the next ``\\elif``/``\\else`` of this level, or the matching
    ``\\endif``). ``end_jump``: for an ``\\elif`` reached by falling out of
    the previous, true branch, the index of the matching ``\\endif``.
    Both are computed by the parser over the whole script.

    Engine protocol: ``false_jump`` is the index of the next ``\\elif`` of
    this level, or the index just after the ``\\else``, or the index of the
    matching ``\\endif``. When a false condition lands on an ``\\elif``,
    the engine evaluates that ``\\elif``. When the engine reaches an
    ``\\elif`` or ``\\else`` sequentially (a true branch ended), it jumps to
    ``end_jump``. ``\\endif`` does nothing.
    """

    expr: Expr
    is_elif: bool
    false_jump: int
    end_jump: int


@record(frozen=True, slots=True)
class ElseCommand(CommandBase):
    """``\\else``: reached by falling out of the previous, true branch, it
    jumps to ``end_jump``, the index of the matching ``\\endif``. (When
    the previous conditions were false, the engine jumps past it.)"""

    end_jump: int


@record(frozen=True, slots=True)
class EndifCommand(CommandBase):
    pass


class PipelineOp(enum.Enum):
    START = "startpipeline"
    SYNC = "syncpipeline"
    END = "endpipeline"


@record(frozen=True, slots=True)
class PipelineCommand(CommandBase):
    op: PipelineOp


Command = (
    SqlCommand
    | SetCommand
    | SleepCommand
    | ShellCommand
    | IfCommand
    | ElseCommand
    | EndifCommand
    | PipelineCommand
)


@record(frozen=True, slots=True)
class ParsedScript:
    """A whole script: its commands in order, and where it came from."""

    source: str  # file name or builtin name, for messages
    commands: tuple[Command, ...]
