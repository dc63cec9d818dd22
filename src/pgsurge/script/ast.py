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
from dataclasses import dataclass

Value = None | bool | int | float | str


# --------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True, slots=True)
class Const:
    value: None | bool | int | float


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Call:
    """A function or operator application.

    Operators are calls too, named as pgbench's function table names them
    internally: ``+ - * / mod`` (for ``%``), ``= <> < <=`` (``>``/``>=`` are
    swapped ``<``/``<=``), ``& | # << >> ~``, ``and or not``, ``is``
    (``IS [NOT] NULL/TRUE/FALSE``), ``case``. ``column`` is the 0-based
    offset in the command line where the call starts, for errors.
    """

    name: str
    args: tuple[Expr, ...]
    column: int = -1


Expr = Const | Var | Call


# --------------------------------------------------------------------------
# Commands


class GsetKind(enum.Enum):
    NONE = 0
    GSET = 1  # \gset: exactly one row expected
    ASET = 2  # \aset: every row of every result, last wins


@dataclass(frozen=True, slots=True)
class CommandBase:
    #: 1-based line number of the command's first line in its source
    lineno: int
    #: the first line of the command, as shown by -r and in errors
    first_line: str


@dataclass(frozen=True, slots=True)
class SqlCommand(CommandBase):
    """One SQL command (possibly a ``\\;`` compound).

    ``text`` is the command as pgbench sends it in simple mode before
    variable substitution. ``param_text``/``param_vars`` are the
    extended/prepared form: ``:name`` replaced by ``$1..$n`` and the
    variable names in parameter order (a variable used twice gets two
    parameters, as in pgbench). ``simple_parts`` is the substitution plan
    for simple mode: literal text at even indexes, variable names at odd
    ones.
    """

    text: str
    param_text: str
    param_vars: tuple[str, ...]
    simple_parts: tuple[str, ...]
    gset: GsetKind = GsetKind.NONE
    gset_prefix: str = ""
    #: number of ``\\;``-separated queries (pipelines and \\aset count results)
    nqueries: int = 1


@dataclass(frozen=True, slots=True)
class SetCommand(CommandBase):
    var: str
    expr: Expr


@dataclass(frozen=True, slots=True)
class SleepCommand(CommandBase):
    """``\\sleep N [us|ms|s]``: ``amount`` is an int, or a variable name."""

    amount: int | str
    #: microseconds per unit: 1, 1000 or 1_000_000
    unit_us: int


@dataclass(frozen=True, slots=True)
class ShellCommand(CommandBase):
    """``\\shell`` (``var`` is None) or ``\\setshell var``.

    ``argv`` words are literal, except those starting with a single ``:``
    which name variables (``::x`` is the literal ``:x``).
    """

    var: str | None
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class ElseCommand(CommandBase):
    """``\\else``: reached by falling out of the previous, true branch, it
    jumps to ``end_jump``, the index of the matching ``\\endif``. (When
    the previous conditions were false, the engine jumps past it.)"""

    end_jump: int


@dataclass(frozen=True, slots=True)
class EndifCommand(CommandBase):
    pass


class PipelineOp(enum.Enum):
    START = "startpipeline"
    SYNC = "syncpipeline"
    END = "endpipeline"


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class ParsedScript:
    """A whole script: its commands in order, and where it came from."""

    source: str  # file name or builtin name, for messages
    commands: tuple[Command, ...]
