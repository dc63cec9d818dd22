"""Expression parser for ``\\set``, ``\\if`` and ``\\elif``: exprparse.y's role.

Grammar (pgbench 18), lowest precedence first::

    expr    := expr OR expr                      left
             | expr AND expr                     left
             | NOT expr                          right (prefix)
             | expr IS [NOT] (NULL|TRUE|FALSE)   postfix, also ISNULL, NOTNULL
             | expr (= | <> | != | < | <= | > | >=) expr     non-associative
             | expr (| | # | & | << | >>) expr   left;  ~ expr (prefix, same level)
             | expr (+ | -) expr                 left
             | expr (* | / | %) expr             left
             | (+ | -) expr                      prefix, highest
             | - 9223372036854775808             INT64_MIN, only after a unary -
             | ( expr )
             | NULL | TRUE | FALSE | INTEGER | DOUBLE | :variable
             | function ( [ [,] expr {, expr} ] )   note: one leading comma is
                                                     accepted, as in pgbench
             | CASE WHEN expr THEN expr {WHEN expr THEN expr} [ELSE expr] END

Keywords are case-insensitive. The parser is a precedence climber that
behaves like pgbench's LALR parser in everything a user can observe:

* the same trees (see ``ast.Call`` for how operators are desugared);
* the error is found at the same token: a prefix operator's operand takes
  every operator that binds tighter than the prefix operator's own level
  (so ``~ a + b`` is ``~(a + b)`` and ``NOT a = b`` is ``NOT (a = b)``);
  chained comparisons are an error, chained postfix ``IS`` are not;
* function names and argument counts are checked when pgbench checks them:
  the name right after it is read, the count right after the ``)``; so
  the messages and caret columns match;
* nesting has pgbench's limit: its parser keeps a stack of at most
  10000 states and reports ``memory exhausted`` when a shift would fill
  it. The parser counts the states the LALR parser would hold (one per
  ``(``, prefix operator, pending left operand and operator, function
  name, ...) and fails at the token pgbench fails at. Sequences of
  left-associative operators hold no states, so ``1 + 1 + ... + 1`` has
  no length limit, as in pgbench.

``parse_expr(text)`` parses a standalone expression (tests, evaluator);
``format_expr(expr)`` prints a tree back so that
``parse_expr(format_expr(e)) == e`` for every tree the parser can build.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pgsurge.cnum import INT64_MIN
from pgsurge.script.ast import Call, Const, Expr, Var

# Function names and argument counts come from functions.ARITY (the
# evaluator's table), and so do the functions that take pgbench's implicit
# last argument (beside the table: the C parser needs them, not this one)
from pgsurge.script.functions import ARITY, DEFAULT_SEED, SEEDED_FUNCTIONS
from pgsurge.script.lexer import MetaLexer, Tok, Token

#: bison's default YYMAXDEPTH: a shift that makes the state stack this deep
#: fails with "memory exhausted" (the stack starts with one state)
MAX_PARSER_STATES = 10000

# Token kinds in tuples, not sets: an Enum member hashes in Python code,
# while "in" on a tuple compares identities first.
# Tokens that start an operand (besides the prefix operators - + ~).
_OPERAND_START = (
    Tok.NOT,
    Tok.LPAREN,
    Tok.INT,
    Tok.DOUBLE,
    Tok.BOOLEAN,
    Tok.NULL,
    Tok.VARIABLE,
    Tok.FUNCTION,
    Tok.CASE,
)
# Operands that are a leaf of the tree; the token's value is the
# constant's (None for NULL) or the variable's name.
_LEAVES = (Tok.INT, Tok.VARIABLE, Tok.DOUBLE, Tok.BOOLEAN, Tok.NULL)
_POSTFIX = (Tok.IS, Tok.ISNULL, Tok.NOTNULL)
_OP = Tok.OP

# Precedence levels, as in exprparse.y (higher binds tighter).
OR, AND, NOT, IS, CMP, BIT, ADD, MUL, UNARY = range(1, 10)

# binary operator text -> (level, Call name, swap operands)
_BINARY: dict[str, tuple[int, str, bool]] = {
    "=": (CMP, "=", False),
    "<>": (CMP, "<>", False),
    "!=": (CMP, "<>", False),
    "<": (CMP, "<", False),
    "<=": (CMP, "<=", False),
    ">": (CMP, "<", True),
    ">=": (CMP, "<=", True),
    "|": (BIT, "|", False),
    "#": (BIT, "#", False),
    "&": (BIT, "&", False),
    "<<": (BIT, "<<", False),
    ">>": (BIT, ">>", False),
    "+": (ADD, "+", False),
    "-": (ADD, "-", False),
    "*": (MUL, "*", False),
    "/": (MUL, "/", False),
    "%": (MUL, "mod", False),
}


class ExprParser:
    """Parses one expression from a :class:`MetaLexer` in expression mode.

    Tokens are read lazily, one lookahead at most, so that lexing errors
    surface exactly when pgbench's parser would meet them.
    """

    def __init__(self, lexer: MetaLexer) -> None:
        self.lexer = lexer
        self._tok: Token | None = None
        #: states pgbench's parser holds for the constructs still open
        #: around the current point (its stack, less the initial state)
        self._held = 0

    # -- token helpers -------------------------------------------------

    def peek(self) -> Token:
        if self._tok is None:
            self._tok = self.lexer.next_token()
        return self._tok

    def advance(self) -> Token:
        tok = self.peek()
        self._tok = None
        return tok

    def expect(self, kind: Tok) -> Token:
        if self.peek().kind is not kind:
            self.syntax_error()
        return self.advance()

    def shifted(self, states: int) -> None:
        """The token just read is shifted with ``states`` states of the
        current construct on pgbench's stack (the token included)."""
        if 1 + self._held + states >= MAX_PARSER_STATES:
            self.lexer.fail("memory exhausted")

    def syntax_error(self) -> None:
        self.peek()  # the offending token must have been read
        self.lexer.fail("syntax error")

    def col(self, tok: Token) -> int:
        return self.lexer.column(tok.start)

    # -- grammar ---------------------------------------------------------

    def parse(self) -> Expr:
        """``expr`` followed by the end of the command."""
        expr = self.expr(OR)
        self.expect(Tok.EOL)
        return expr

    def expr(self, min_level: int, held: int = 0) -> Expr:
        """An expression of operators binding at least as tight as
        ``min_level``, parsed while ``held`` states of the enclosing
        construct wait on pgbench's stack."""
        # (counted here rather than by the callers so that each level of
        # nesting costs two Python frames only, prefix() and expr():
        # pgbench's deepest expressions then fit cli's recursion limit)
        self._held += held
        left = self.prefix()
        # Was the last operator applied at this level a comparison? Then
        # another comparison is an error (they are non-associative).
        after_cmp = False
        while True:
            # (peek(), advance() and shifted() written out: this loop runs
            # for every operand of every \set of a script)
            tok = self._tok
            if tok is None:
                tok = self._tok = self.lexer.next_token()
            kind = tok.kind
            if kind is _OP:
                if tok.value == "~":
                    break
                level, name, swap = _BINARY[str(tok.value)]
                if level < min_level:
                    break
                if level == CMP and after_cmp:
                    self.syntax_error()
                self._tok = None
                if 3 + self._held >= MAX_PARSER_STATES:
                    self.lexer.fail("memory exhausted")
                right = self.expr(level + 1, 2)
                args = (right, left) if swap else (left, right)
                left = Call(name, args, self.col(tok))
                after_cmp = level == CMP
                continue
            if kind is Tok.AND or kind is Tok.OR:
                level = AND if kind is Tok.AND else OR
                if level < min_level:
                    break
                self.advance()
                self.shifted(2)
                right = self.expr(level + 1, 2)
                name = "and" if level == AND else "or"
                left = Call(name, (left, right), self.col(tok))
                after_cmp = False
                continue
            if kind in _POSTFIX:
                if min_level > IS:
                    break
                left = self.postfix(left)
                after_cmp = False
                continue
            break
        self._held -= held
        return left

    def postfix(self, operand: Expr) -> Expr:
        tok = self.advance()
        col = self.col(tok)
        self.shifted(2)  # the operand and this token
        if tok.kind is Tok.ISNULL:
            return Call("is", (operand, Const(None)), col)
        if tok.kind is Tok.NOTNULL:
            return Call("not", (Call("is", (operand, Const(None)), col),), col)
        negate = False
        if self.peek().kind is Tok.NOT:
            self.advance()
            self.shifted(3)
            negate = True
        nxt = self.peek()
        if nxt.kind is Tok.NULL:
            value: bool | None = None
        elif nxt.kind is Tok.BOOLEAN:
            value = bool(nxt.value)
        else:
            self.syntax_error()
        self.advance()
        self.shifted(4 if negate else 3)
        test = Call("is", (operand, Const(value)), col)
        return Call("not", (test,), col) if negate else test

    def prefix(self) -> Expr:
        tok = self._tok
        if tok is None:
            tok = self.lexer.next_token()
        else:
            self._tok = None
        kind = tok.kind
        if kind in _LEAVES:
            # (no column: a leaf has none, and counting bytes up to every
            # operand was a third of the time on a long \set)
            if 2 + self._held >= MAX_PARSER_STATES:
                self.lexer.fail("memory exhausted")
            if kind is Tok.VARIABLE:
                return Var(str(tok.value))
            return Const(tok.value)  # type: ignore[arg-type]
        # asked in reading order, so that MetaLexer.column counts on from
        # here when the operators around are asked later
        col = self.col(tok)
        if kind in _OPERAND_START or (kind is Tok.OP and tok.value in ("-", "+", "~")):
            self.shifted(1)
        if kind is Tok.OP:
            if tok.value == "-":
                if self.peek().kind is Tok.MAXINT_PLUS_ONE:
                    self.advance()
                    self.shifted(2)
                    return Const(INT64_MIN)
                return Call("-", (Const(0), self.expr(UNARY + 1, 1)), col)
            if tok.value == "+":
                return self.expr(UNARY + 1, 1)
            if tok.value == "~":
                return Call("#", (Const(-1), self.expr(BIT + 1, 1)), col)
        elif kind is Tok.NOT:
            return Call("not", (self.expr(NOT + 1, 1),), col)
        elif kind is Tok.LPAREN:
            inner = self.expr(OR, 1)
            self.expect(Tok.RPAREN)
            self.shifted(3)
            return inner
        elif kind is Tok.FUNCTION:
            return self.function(tok)
        elif kind is Tok.CASE:
            return self.case(col)
        self._tok = tok  # put it back: the error is reported at this token
        self.syntax_error()
        raise AssertionError("unreachable")

    def function(self, tok: Token) -> Expr:
        typed = str(tok.value)
        name = typed.lower() if typed.isascii() else typed
        arity = ARITY.get(name)
        if arity is None:
            # checked as soon as the name is read, before the "("
            self.lexer.fail("unexpected function name", typed)
        self.expect(Tok.LPAREN)
        self.shifted(2)
        # on pgbench's stack: the function, "(" and then the element list,
        # which a "," keeps open while the next argument is parsed
        args: list[Expr] = []
        held = 2
        if self.peek().kind is not Tok.RPAREN:
            if self.peek().kind is Tok.COMMA:
                # pgbench's "elist: <empty> | elist ',' expr" accepts it
                self.advance()
                self.shifted(4)
                held = 4
            args.append(self.expr(OR, held))
            while self.peek().kind is Tok.COMMA:
                self.advance()
                self.shifted(4)
                args.append(self.expr(OR, 4))
        self.expect(Tok.RPAREN)
        # an empty list is reduced (one state) before the ")" too
        self.shifted(4)
        low, high = arity
        if len(args) < low or (high is not None and len(args) > high):
            message = (
                "at least one argument expected"
                if high is None
                else "unexpected number of arguments"
            )
            self.lexer.fail(message, name)
        if name in SEEDED_FUNCTIONS and len(args) == low:
            args.append(DEFAULT_SEED)
        return Call(name, tuple(args), self.col(tok))

    def case(self, col: int) -> Expr:
        # on pgbench's stack: CASE, the WHEN ... THEN list read so far (one
        # state once reduced), then the open WHEN, THEN or ELSE part
        args: list[Expr] = []
        self.expect(Tok.WHEN)
        self.shifted(2)
        held = 1
        while True:
            args.append(self.expr(OR, held + 1))
            self.expect(Tok.THEN)
            self.shifted(held + 3)
            args.append(self.expr(OR, held + 3))
            held = 2
            kind = self.peek().kind
            if kind is Tok.WHEN:
                self.advance()
                self.shifted(3)
                continue
            if kind is Tok.ELSE:
                self.advance()
                self.shifted(3)
                args.append(self.expr(OR, 3))
                self.expect(Tok.END)
                self.shifted(5)
            elif kind is Tok.END:
                self.advance()
                self.shifted(3)
                args.append(Const(None))
            else:
                self.syntax_error()
            return Call("case", tuple(args), col)


def parse_expr(text: str, *, source: str = "<expression>") -> Expr:
    """Parse a standalone expression (raises ``ScriptError``).

    Errors are laid out as for a ``\\set`` whose command line is ``text``.
    """
    text = text.split("\0", 1)[0]
    lexer = MetaLexer(text, 0, source, 1)
    lexer.pos = 0
    lexer.command = "set"
    return ExprParser(lexer).parse()


# --------------------------------------------------------------------------
# printing

_INFIX = {
    "+": "+",
    "-": "-",
    "*": "*",
    "/": "/",
    "mod": "%",
    "=": "=",
    "<>": "<>",
    "<": "<",
    "<=": "<=",
    "&": "&",
    "|": "|",
    "#": "#",
    "<<": "<<",
    ">>": ">>",
    "and": "AND",
    "or": "OR",
}


def _format_const(value: bool | int | float | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        if value < 0:
            # only INT64_MIN comes out of the parser as a negative literal
            return f"(-{-value})"
        return str(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"no literal for double {value!r}")
    text = repr(value)
    if value < 0:
        return f"(0 - {text[1:]})"
    return text


def format_expr(expr: Expr) -> str:
    """Source text for ``expr``, fully parenthesized."""
    fmt: Callable[[Expr], str] = format_expr
    if isinstance(expr, Const):
        return _format_const(expr.value)
    if isinstance(expr, Var):
        return ":" + expr.name
    name, args = expr.name, expr.args
    first = args[0] if args else None
    if name == "#" and len(args) == 2 and first == Const(-1):
        return f"(~{fmt(args[1])})"
    if name in _INFIX and len(args) == 2:
        if name == "-" and first == Const(0):
            return f"(-{fmt(args[1])})"
        return f"({fmt(args[0])} {_INFIX[name]} {fmt(args[1])})"
    if name == "not" and len(args) == 1:
        return f"(NOT {fmt(args[0])})"
    if name == "is" and len(args) == 2 and isinstance(args[1], Const):
        return f"({fmt(args[0])} IS {_format_const(args[1].value)})"
    if name == "case" and len(args) >= 3 and len(args) % 2 == 1:
        whens = [
            f"WHEN {fmt(args[i])} THEN {fmt(args[i + 1])}"
            for i in range(0, len(args) - 1, 2)
        ]
        return " ".join(["(CASE", *whens, f"ELSE {fmt(args[-1])} END)"])
    return f"{name}({', '.join(fmt(a) for a in args)})"
