"""Script text -> :class:`ParsedScript`: pgbench's ParseScript, meta commands
and the static ``\\if`` check.

The loop mirrors pgbench: the SQL scanner (``splitter.py``) collects text
up to a ``;``, a backslash or the end; what it collected becomes an SQL
command unless it is only whitespace and ``--`` comments; a backslash
command is then read by the meta-command lexer (``lexer.py``) and the
expression parser (``parser.py``). ``\\gset``/``\\aset`` attach to the
command just before them, which must be an SQL command without one.

Errors are raised as :class:`~pgsurge.errors.ScriptError` with pgbench's
texts, in pgbench's order: the first syntax error met while reading, then
an empty script, then the ``\\if``/``\\endif`` structure.
"""

from __future__ import annotations

import dataclasses
import gc
import re
from collections.abc import Sequence
from typing import NoReturn, Protocol

from pgsurge.cnum import atoi
from pgsurge.config import QueryMode
from pgsurge.errors import ScriptError
from pgsurge.records import record
from pgsurge.script.ast import (
    Command,
    ElseCommand,
    EndifCommand,
    GsetKind,
    IfCommand,
    ParsedScript,
    PipelineCommand,
    PipelineOp,
    SetCommand,
    ShellCommand,
    SleepCommand,
    SqlCommand,
    set_command,
    sql_command,
)
from pgsurge.script.fastparse import MetaHit, meta_expr
from pgsurge.script.fatal import PlainScriptError
from pgsurge.script.lexer import MetaLexer, byte_len
from pgsurge.script.splitter import SqlScanner, Stop, skip_sql_comments, sql_first_line
from pgsurge.script.sqlvars import MAX_SQL_PARAMS, too_many_params

#: pgbench's MAX_ARGS: words of a meta command, the command name included
MAX_META_WORDS = 256

_META_NAMES = (
    "set",
    "setshell",
    "shell",
    "sleep",
    "if",
    "elif",
    "else",
    "endif",
    "gset",
    "aset",
    "startpipeline",
    "syncpipeline",
    "endpipeline",
)
_SLEEP_UNITS = {"us": 1, "ms": 1_000, "s": 1_000_000}
_SLEEP_NUMBER = re.compile(r"[+-]?([0-9]*)")


class _Fail(Protocol):
    def __call__(
        self, message: str, detail: str | None = None, column: int = -1
    ) -> NoReturn: ...


@record(slots=True)
class _Gset:
    """A ``\\gset``/``\\aset`` read from the script, to merge."""

    kind: GsetKind
    prefix: str
    lineno: int


_BACKSLASH = Stop.BACKSLASH
# what a command cannot start with for skip_sql_comments to drop anything
_NOTHING_TO_SKIP = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz(;:'\"/0123456789"
) | {""}
_EOF = Stop.EOF


class _ScriptCompiler:
    def __init__(self, source: str, text: str, *, native: bool = True) -> None:
        # pgbench reads the file as a C string: a NUL byte ends it (found
        # first: split() would copy a 4 MB script that has none)
        nul = text.find("\0")
        self.src = text if nul < 0 else text[:nul]
        self.source = source
        self.commands: list[Command] = []
        self._line_pos = 0
        self._line_no = 1
        #: the script is all ASCII: meta commands count columns in characters
        self._ascii = self.src.isascii()
        #: has an \\if, \\elif, \\else or \\endif been read?
        self._conditionals = False
        #: the C reader of \\set/\\if/\\elif lines (script.fastparse), if any
        self._fast = meta_expr if native else None

    # ------------------------------------------------------------------

    def run(self, check_structure: bool) -> ParsedScript:
        scanner = SqlScanner(self.src)
        scan = scanner.scan
        between = scanner.between_statements
        append = self.commands.append
        # Between statements the C reader is asked first (in a script that
        # has a backslash at all): a \\set line then costs no scan(), which
        # would only skip the blanks before it and stop at its backslash.
        fast = self._fast if "\\" in self.src else None
        while True:
            if fast is not None and between():
                hit = fast(self.src, scanner.pos)
                if hit is not None:
                    scanner.pos = self._fast_command(hit)
                    continue
            stop, text, start, end, nqueries = scan()
            if text[:1] in _NOTHING_TO_SKIP:
                sql, skipped = text, 0  # "" too
            else:
                sql, skipped = skip_sql_comments(text)
            if sql:
                lineno = self._lineno(start)
                if skipped:
                    lineno += text.count("\n", 0, skipped)
                append(sql_command(lineno, sql_first_line(sql), sql, nqueries))
            if stop is _BACKSLASH:
                scanner.pos = self._meta_command(end)
            elif stop is _EOF:
                break
        if not self.commands:
            raise PlainScriptError(
                self.source, f'empty command list for script "{self.source}"'
            )
        if not self._conditionals:
            # nothing to check or link (two passes less over 20,000 commands)
            return ParsedScript(self.source, tuple(self.commands))
        if check_structure:
            check_conditionals(self.source, self.commands)
        elif not _balanced(self.commands):
            # unlinkable: the caller must run check_conditionals() later
            return ParsedScript(self.source, tuple(self.commands))
        return ParsedScript(self.source, self._link_conditionals())

    def _lineno(self, pos: int) -> int:
        # positions only grow while reading, so count newlines incrementally
        pos = max(pos, 0)
        if pos < self._line_pos:
            self._line_pos, self._line_no = 0, 1
        self._line_no += self.src.count("\n", self._line_pos, pos)
        self._line_pos = pos
        return self._line_no

    # ------------------------------------------------------------------
    # backslash commands (pgbench's process_backslash_command)

    def _meta_command(self, start: int) -> int:
        """Read the backslash command at ``start``; return where SQL
        scanning resumes."""
        if self._fast is not None:
            hit = self._fast(self.src, start)
            if hit is not None:
                return self._fast_command(hit)
        lineno = self._lineno(start)
        lex = MetaLexer(self.src, start, self.source, lineno, ascii_text=self._ascii)
        first = lex.next_word()
        if first is None:
            return lex.pos  # a lone backslash: ignored
        name = first[0]
        lex.command = name
        meta = name.lower() if name.isascii() else ""
        if meta not in _META_NAMES:
            meta = ""
        if meta in ("if", "elif", "else", "endif"):
            self._conditionals = True
        if meta in ("set", "if", "elif"):
            self.commands.append(self._expr_command(lex, meta, lineno))
            return lex.pos

        words = [name]
        offsets = [first[1]]
        while (word := lex.next_word()) is not None:
            if len(words) >= MAX_META_WORDS:
                self._error(lex, "too many arguments", show_line=False)
            words.append(word[0])
            offsets.append(word[1])
        line = lex.line_text()
        args = words[1:]

        def fail(message: str, detail: str | None = None, column: int = -1) -> NoReturn:
            raise ScriptError(
                self.source,
                lineno,
                message,
                line=line,
                detail=detail,
                command=name,
                column=column,
            )

        cmd: Command | _Gset
        if meta == "sleep":
            cmd = self._sleep(line, lineno, args, offsets, fail)
        elif meta == "setshell":
            if len(args) < 2:
                fail("missing argument")
            cmd = ShellCommand(lineno, line, args[0], tuple(args[1:]))
        elif meta == "shell":
            if not args:
                fail("missing command")
            cmd = ShellCommand(lineno, line, None, tuple(args))
        elif meta in ("else", "endif", "startpipeline", "syncpipeline", "endpipeline"):
            if args:
                fail("unexpected argument")
            if meta == "else":
                cmd = ElseCommand(lineno, line, -1)
            elif meta == "endif":
                cmd = EndifCommand(lineno, line)
            else:
                cmd = PipelineCommand(lineno, line, PipelineOp(meta))
        elif meta in ("gset", "aset"):
            if len(args) > 1:
                fail("too many arguments")
            kind = GsetKind.GSET if meta == "gset" else GsetKind.ASET
            cmd = _Gset(kind, args[0] if args else "", lineno)
        else:
            fail("invalid command")

        if isinstance(cmd, _Gset):
            self._attach_gset(cmd)
        else:
            self.commands.append(cmd)
        return lex.pos

    def _fast_command(self, hit: MetaHit) -> int:
        """Add the command the C reader read (the tree the parser below
        would build); return where SQL scanning resumes."""
        which, var, expr, line, start, end = hit
        lineno = self._lineno(start)
        if which == 0:
            assert var is not None
            self.commands.append(set_command(lineno, line, var, expr))
        else:
            self._conditionals = True
            self.commands.append(IfCommand(lineno, line, expr, which == 2, -1, -1))
        return end

    def _error(self, lex: MetaLexer, message: str, *, show_line: bool) -> NoReturn:
        raise ScriptError(
            self.source,
            lex.lineno,
            message,
            line=lex.line_text() if show_line else None,
            command=lex.command,
        )

    def _expr_command(self, lex: MetaLexer, meta: str, lineno: int) -> Command:
        var = ""
        if meta == "set":
            word = lex.next_word()
            if word is None:
                # pgbench has no line to show yet at this point
                self._error(lex, "missing argument", show_line=False)
            var = word[0]
        # imported here: a script whose expressions the C parser takes
        # (fastparse), or that has none, does without the Python parser
        from pgsurge.script.parser import ExprParser

        expr = ExprParser(lex).parse()
        line = lex.line_text()
        if meta == "set":
            return SetCommand(lineno, line, var, expr)
        # jumps are filled in by _link_conditionals
        return IfCommand(lineno, line, expr, meta == "elif", -1, -1)

    def _sleep(
        self,
        line: str,
        lineno: int,
        args: list[str],
        offsets: list[int],
        fail: _Fail,
    ) -> SleepCommand:
        if not args:
            fail("missing argument")
        if len(args) > 2:
            fail("too many arguments", column=offsets[3])
        amount_text = args[0]
        unit = args[1] if len(args) == 2 else None
        unit_offset = offsets[2] if unit is not None else -1
        if not amount_text.startswith(":"):
            m = _SLEEP_NUMBER.match(amount_text)
            assert m is not None
            rest = amount_text[m.end() :]
            if rest:
                if unit is None and m.group(1):
                    # "\sleep 10ms": the number and its unit in one word
                    amount_text = amount_text[: m.end()]
                    unit = rest
                    unit_offset = offsets[1] + byte_len(amount_text)
                else:
                    fail(
                        "invalid sleep time, must be an integer",
                        args[0],
                        offsets[1],
                    )
        unit_us = 1_000_000
        if unit is not None:
            factor = _SLEEP_UNITS.get(unit.lower()) if unit.isascii() else None
            if factor is None:
                fail("unrecognized time unit, must be us, ms or s", unit, unit_offset)
            unit_us = factor
        amount: int | str
        amount = amount_text[1:] if amount_text.startswith(":") else atoi(amount_text)
        return SleepCommand(lineno, line, amount, unit_us)

    def _attach_gset(self, gset: _Gset) -> None:
        """pgbench merges ``\\gset``/``\\aset`` into the previous command."""
        message = "\\gset must follow an SQL command"
        if not self.commands:
            raise ScriptError(self.source, gset.lineno, message)
        prev = self.commands[-1]
        if not isinstance(prev, SqlCommand) or prev.gset is not GsetKind.NONE:
            # pgbench shows the previous command's first line, which an SQL
            # command does not have yet at that point
            detail = None if isinstance(prev, SqlCommand) else prev.first_line
            raise ScriptError(self.source, gset.lineno, message, detail=detail)
        self.commands[-1] = dataclasses.replace(
            prev, gset=gset.kind, gset_prefix=gset.prefix
        )

    # ------------------------------------------------------------------
    # \if structure

    def _link_conditionals(self) -> tuple[Command, ...]:
        """Fill in IfCommand.false_jump/end_jump and ElseCommand.end_jump."""
        cmds = list(self.commands)
        # per open \if: indexes of its \if/\elif/\else commands
        open_blocks: list[list[int]] = []
        for i, cmd in enumerate(cmds):
            if isinstance(cmd, IfCommand) and not cmd.is_elif:
                open_blocks.append([i])
            elif isinstance(cmd, IfCommand | ElseCommand):
                open_blocks[-1].append(i)
            elif isinstance(cmd, EndifCommand):
                branches = open_blocks.pop()
                for k, idx in enumerate(branches):
                    branch = cmds[idx]
                    if isinstance(branch, ElseCommand):
                        cmds[idx] = dataclasses.replace(branch, end_jump=i)
                        continue
                    assert isinstance(branch, IfCommand)
                    if k + 1 < len(branches):
                        nxt = branches[k + 1]
                        # a false condition goes to the next \elif, or into
                        # the \else branch (past the \else itself)
                        false_jump = (
                            nxt + 1 if isinstance(cmds[nxt], ElseCommand) else nxt
                        )
                    else:
                        false_jump = i
                    cmds[idx] = dataclasses.replace(
                        branch, false_jump=false_jump, end_jump=i
                    )
        return tuple(cmds)


def check_conditionals(source: str, commands: Sequence[Command]) -> None:
    """pgbench's CheckConditional: the \\if/\\elif/\\else/\\endif structure
    errors it reports, in its order (1-based command numbers)."""
    stack: list[bool] = []  # True once the level has seen its \else

    def fail(index: int, message: str) -> NoReturn:
        raise PlainScriptError(
            source,
            f'condition error in script "{source}" command {index + 1}: {message}',
        )

    for i, cmd in enumerate(commands):
        if isinstance(cmd, IfCommand) and not cmd.is_elif:
            stack.append(False)
        elif isinstance(cmd, IfCommand):
            if not stack:
                fail(i, "\\elif without matching \\if")
            if stack[-1]:
                fail(i, "\\elif after \\else")
        elif isinstance(cmd, ElseCommand):
            if not stack:
                fail(i, "\\else without matching \\if")
            if stack[-1]:
                fail(i, "\\else after \\else")
            stack[-1] = True
        elif isinstance(cmd, EndifCommand):
            if not stack:
                fail(i, "\\endif without matching \\if")
            stack.pop()
    if stack:
        fail(len(commands), "\\if without matching \\endif")


def _balanced(commands: Sequence[Command]) -> bool:
    try:
        check_conditionals("", commands)
    except ScriptError:
        return False
    return True


def compile_script(
    source: str, text: str, *, check_structure: bool = True, native: bool = True
) -> ParsedScript:
    """Parse a whole script; see :func:`parse_script`.

    ``native=False`` reads every backslash command in Python, also when
    ``pgsurge._fastparse`` is built (the tests compare both readers).

    pgbench checks the \\if structure after its "at most 128 scripts" check;
    a caller that wants that order passes ``check_structure=False`` and
    calls :func:`check_conditionals` itself (the jumps of a script with a
    broken structure are then left unset, -1).
    """
    # The collector off while reading, as during pgsurge's start-up (see
    # cli.dispatch): a parse makes no reference cycles, and its passes
    # over the growing list of commands (and all else alive) found
    # nothing, at a third of the time of a 20,000-line script.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _ScriptCompiler(source, text, native=native).run(check_structure)
    finally:
        if collecting:
            gc.enable()


def parse_script(source_name: str, text: str) -> ParsedScript:
    """Parse a whole pgbench script (the text of a ``-f`` file or a builtin).

    ``source_name`` is what pgbench calls the script in messages (the file
    name as given, or the builtin's description). Raises
    :class:`~pgsurge.errors.ScriptError` with pgbench's message for any
    error pgbench 18.6 reports while reading scripts.
    """
    return compile_script(source_name, text)


def check_query_mode(script: ParsedScript, mode: QueryMode) -> None:
    """pgbench's late check (after every script is parsed): under
    ``-M extended``/``prepared`` an SQL command takes at most 255
    variables. Raises the ``ScriptError`` pgbench prints."""
    if mode is QueryMode.SIMPLE:
        return
    for cmd in script.commands:
        if isinstance(cmd, SqlCommand) and len(cmd.param_vars) > MAX_SQL_PARAMS:
            raise too_many_params(script.source, cmd.text)
