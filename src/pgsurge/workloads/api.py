"""What a workload file uses: statements, transactions, the context, results.

A workload is a Python module. It declares its statements once, with
``$n`` parameters, and its transactions as generator functions that yield
statement calls and receive their results::

    from pgsurge.workloads import sql, transaction

    get_balance = sql("SELECT abalance FROM pgbench_accounts WHERE aid = $1")

    @transaction(weight=3)
    def lookup(ctx):
        aid = ctx.random(1, 100000 * ctx.scale)
        balance = (yield get_balance(aid)).scalar()

The engine (``pgsurge.engine.pyworkload``) prepares each statement once
per connection under ``-M prepared`` and advances the generator when the
result has arrived: a transaction never blocks. Calling a statement only
builds a ``(statement, args)`` tuple (its arity checked); yielding it
runs it.
``ctx.random*`` draw from the client's own pgbench PRNG stream, which a
retry (serialization failure, deadlock) restores: the retried transaction
draws the same values. A statement's error is raised at the ``yield``
that sent it (:class:`SqlError`): caught, the transaction goes on; not
caught, it is handled as a script's error. A yielded list of statement
calls is a batch: one implicit transaction in every query mode.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Generator, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any, overload

from pgsurge.cnum import INT64_MAX as _INT64_MAX
from pgsurge.errors import EvalError, WorkloadUsageError
from pgsurge.prng import PgPrng, speedups
from pgsurge.script.functions import (
    hash_fnv1a,
    hash_murmur2,
    permute,
    random_exponential,
    random_gaussian,
    random_uniform,
    random_zipfian,
)

__all__ = [
    "Context",
    "Result",
    "Sleep",
    "SqlError",
    "Statement",
    "Transaction",
    "WorkloadUsageError",
    "load",
    "setup",
    "sql",
    "transaction",
]

_keys = itertools.count()

#: statements whose result nobody reads: the generator gets None for them
_NO_FETCH = frozenset(
    {
        "begin",
        "commit",
        "end",
        "rollback",
        "start",
        "set",
        "savepoint",
        "release",
        "abort",
        "lock",
    }
)


class SqlError(Exception):
    """A statement's error, raised at the ``yield`` that sent it.

    ``sqlstate`` (``"23505"``), ``message`` (the primary message, without
    its severity), ``statement`` (the declared :class:`Statement`; in a
    batch, the one that failed); ``str(e)`` is the server's whole text
    (``ERROR:  ...`` with its ``DETAIL``). A transaction that catches it
    goes on; inside ``BEGIN`` the server has aborted the transaction
    block, so the code rolls back (to a savepoint) before going on. One
    that does not catch it is handled as a script's error: serialization
    failures and deadlocks are retried (``--max-tries``), other errors
    fail the transaction (``--continue-on-error``) or abort the client.
    """

    def __init__(
        self, sqlstate: str, text: str, statement: Statement | None, where: str
    ) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate
        first = text.split("\n", 1)[0]
        severity, sep, rest = first.partition(":  ")
        self.message = rest if sep and severity.isupper() else first
        self.statement = statement
        #: ``file:line`` of the ``yield`` that sent the statement
        self.where = where


def _caller(depth: int = 2) -> str:
    """``file:line`` of the user code ``depth`` calls up from here."""
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def split_params(text: str) -> tuple[tuple[str | int, ...], int]:
    """The SQL text split at its ``$n`` parameters (outside quotes, quoted
    identifiers, comments and dollar quotes): literal text at even indexes,
    parameter numbers at odd ones; and the highest parameter number."""
    parts: list[str | int] = []
    nparams = 0
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "'" or c == '"':
            j = text.find(c, i + 1)
            while j != -1 and j + 1 < n and text[j + 1] == c:
                j = text.find(c, j + 2)
            i = n if j == -1 else j + 1
        elif c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j == -1 else j + 1
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j == -1 else j + 2
        elif c == "$":
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            if j > i + 1 and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
                number = int(text[i + 1 : j])
                parts.append(text[start:i])
                parts.append(number)
                nparams = max(nparams, number)
                start = i = j
                continue
            # a dollar quote: $tag$ ... $tag$
            k = i + 1
            while k < n and (text[k].isalnum() or text[k] == "_"):
                k += 1
            if k < n and text[k] == "$" and not text[i + 1 : k][:1].isdigit():
                tag = text[i : k + 1]
                end = text.find(tag, k + 1)
                i = n if end == -1 else end + len(tag)
            else:
                i += 1
        else:
            i += 1
    parts.append(text[start:])
    return tuple(parts), nparams


#: the C base of Statement when pgsurge._speedups is built: its call (the
#: (statement, args) tuple, arity checked) runs without a Python frame,
#: which is a good part of what a transaction costs the client
_StatementBase: Any = getattr(speedups, "StatementCall", None)
#: the C base of Context when pgsurge._speedups is built: ctx.random(lo,
#: hi) as a C method of the class (see Context)
_ContextBase: Any = getattr(speedups, "ContextBase", None)


class _PyContextBase:
    """The pure-Python base of Context: random is Context._random."""

    __slots__ = ()

    def _fast_rng(self, rng: PgPrng) -> None:
        pass


if TYPE_CHECKING:
    _CtxBase = _PyContextBase
else:
    _CtxBase = _ContextBase or _PyContextBase


class _PyStatementBase:
    """The pure-Python base of Statement: the same call."""

    __slots__ = ("nparams",)
    nparams: int

    def __call__(self, *args: object) -> tuple[Any, tuple[object, ...]]:
        """The statement with its parameters, to be yielded: a plain tuple
        (the cheapest object to make; the engine checks its type)."""
        if len(args) != self.nparams:
            self._arity_error(len(args))
        return (self, args)

    def _arity_error(self, count: int) -> Any:
        raise NotImplementedError


if TYPE_CHECKING:
    _Base = _PyStatementBase
else:
    _Base = _StatementBase or _PyStatementBase


class Statement(_Base):
    """An SQL statement with ``$1..$n`` parameters, declared once.

    Calling it makes the ``(statement, args)`` tuple a transaction yields,
    after checking the number of parameters."""

    __slots__ = (
        "fetch",
        "first_line",
        "key",
        "name",
        "simple_parts",
        "sql",
        "where",
    )

    def __init__(self, text: str, name: str | None, fetch: bool | None) -> None:
        self.sql = text
        self.name = name
        self.key = next(_keys)
        self.simple_parts, self.nparams = split_params(text)
        first = text.split(None, 1)[0].lower().rstrip(";") if text.strip() else ""
        self.fetch = first not in _NO_FETCH if fetch is None else fetch
        #: what -r prints: the statement on one line
        self.first_line = " ".join(text.split())
        self.where = _caller(3)  # who called sql()

    def _arity_error(self, count: int) -> Any:
        """A call with ``count`` parameters, not ``nparams``: the error,
        naming the caller's line (the C base calls this from the user's
        frame, the Python base from its __call__)."""
        depth = 2 if _StatementBase is not None else 3
        raise WorkloadUsageError(
            f"{_caller(depth)}: statement {self.name or self.first_line!r} takes "
            f"{self.nparams} parameter{'s' if self.nparams != 1 else ''}, "
            f"got {count}"
        )

    def __repr__(self) -> str:
        return f"<statement {self.name or self.first_line!r} ({self.where})>"


class Sleep:
    """``yield ctx.sleep(seconds)``: think time inside a transaction."""

    __slots__ = ("usec",)

    def __init__(self, usec: int) -> None:
        self.usec = usec


def sql(text: str, *, name: str | None = None, fetch: bool | None = None) -> Statement:
    """Declare a statement. ``fetch=False``: its result is not read (the
    generator receives None, and the engine takes its cheapest path);
    by default every statement but transaction control (BEGIN, COMMIT,
    SET, ...) is fetched."""
    return Statement(text, name, fetch)


TransactionFn = Callable[["Context"], Generator[Any, Any, Any]]


class Transaction:
    """A generator function declared as a transaction, with its weight."""

    __slots__ = ("fn", "name", "order", "weight")

    def __init__(self, fn: TransactionFn, weight: int, name: str | None) -> None:
        self.fn = fn
        self.weight = weight
        self.name = name or fn.__name__
        self.order = next(_keys)


@overload
def transaction(
    fn: TransactionFn, *, weight: int = 1, name: str | None = None
) -> Transaction: ...
@overload
def transaction(
    fn: None = None, *, weight: int = 1, name: str | None = None
) -> Callable[[TransactionFn], Transaction]: ...
def transaction(
    fn: TransactionFn | None = None, *, weight: int = 1, name: str | None = None
) -> Transaction | Callable[[TransactionFn], Transaction]:
    """Declare a transaction: ``@transaction``, ``@transaction(weight=45)``,
    or ``NAME = transaction(fn, weight=45)``."""
    if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
        raise WorkloadUsageError(
            f"{_caller()}: a transaction's weight is an integer >= 0, not {weight!r}"
        )
    if fn is not None:
        return Transaction(fn, weight, name)
    return lambda f: Transaction(f, weight, name)


class _Hook:
    __slots__ = ("fn", "kind")

    def __init__(self, kind: str, fn: Callable[..., Any]) -> None:
        self.kind = kind
        self.fn = fn


def setup(fn: Callable[[Any], None]) -> Any:
    """Declare the per-connection setup: ``fn(conn)``, where
    ``conn.execute(sql)`` runs a statement (blocking, once per connection,
    before the benchmark)."""
    return _Hook("setup", fn)


def load(fn: Callable[[Any], None]) -> Any:
    """Declare the data loader run by ``pgsurge -i``: ``fn(db)`` (see
    :class:`pgsurge.workloads.loading.Loader`)."""
    return _Hook("load", fn)


class Context(_CtxBase):
    """A client's view in its transactions (``ctx``): pgbench's random
    functions on the client's stream, its id, the scale, think time.

    It lives as long as the client: a transaction may keep its own state
    in attributes (not restored on a retry).
    """

    def __init__(self, rng: PgPrng, variables: dict[str, Any], client_id: int) -> None:
        self._rng = rng
        self._variables = variables
        #: pgbench's :client_id
        self.client_id = client_id
        # the C base draws random(lo, hi) from rng itself (the same draws),
        # and calls _random for anything but its fast path
        self._fast_rng(rng)

    # Read once, on first use: both are set before the run starts and
    # never change during it, and a transaction reads ctx.scale every time.
    @functools.cached_property
    def scale(self) -> int:
        """pgbench's :scale (-s, or what the workload reads from its tables)."""
        return int(self._variables.get("scale", 1))

    @functools.cached_property
    def default_seed(self) -> int:
        return int(self._variables.get("default_seed", 0))

    def random(self, lo: int, hi: int) -> int:
        """``random(lo, hi)``: uniform in [lo, hi]."""
        if type(lo) is int and type(hi) is int and lo <= hi < lo + _INT64_MAX:
            return self._rng.int64_range(lo, hi)
        return _checked(random_uniform(self._rng, lo, hi))

    random_uniform = random
    #: the Python code of random: the C base's fallback
    _random = random

    def random_exponential(self, lo: int, hi: int, parameter: float) -> int:
        return _checked(random_exponential(self._rng, lo, hi, float(parameter)))

    def random_gaussian(self, lo: int, hi: int, parameter: float) -> int:
        return _checked(random_gaussian(self._rng, lo, hi, float(parameter)))

    def random_zipfian(self, lo: int, hi: int, parameter: float) -> int:
        return _checked(random_zipfian(self._rng, lo, hi, float(parameter)))

    def random_double(self) -> float:
        """Uniform in [0, 1) (pgbench's ``pg_prng_double``)."""
        return self._rng.double()

    def permute(self, value: int, size: int, seed: int | None = None) -> int:
        """``permute(i, size[, seed])``; the default seed is :default_seed."""
        if size <= 0:
            raise WorkloadUsageError("permute size parameter must be greater than zero")
        return permute(value, size, self.default_seed if seed is None else seed)

    def hash(self, value: int, seed: int | None = None) -> int:
        """``hash(v[, seed])``: ``hash_murmur2``."""
        return hash_murmur2(value, self.default_seed if seed is None else seed)

    def hash_murmur2(self, value: int, seed: int | None = None) -> int:
        return hash_murmur2(value, self.default_seed if seed is None else seed)

    def hash_fnv1a(self, value: int, seed: int | None = None) -> int:
        return hash_fnv1a(value, self.default_seed if seed is None else seed)

    @staticmethod
    def sleep(seconds: float) -> Sleep:
        """``yield ctx.sleep(s)``: pause this client (others go on)."""
        return Sleep(max(0, int(seconds * 1_000_000)))


if _ContextBase is not None:
    # random and random_uniform are the C base's methods: a method of the
    # class, which the interpreter's attribute cache serves, where an
    # instance attribute (a bound C draw) was looked up in the instance's
    # dict on every call (about 230 instructions a call)
    del Context.random, Context.random_uniform


def _checked(value: object) -> int:
    if type(value) is not int:
        raise EvalError("random function returned no integer")
    return value


def _decode_bool(b: bytes) -> bool:
    return b == b"t"


def _decode_text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _decode_numeric(b: bytes) -> Decimal:
    return Decimal(b.decode())


_DECODERS: dict[int, Callable[[bytes], Any]] = {
    16: _decode_bool,
    20: int,
    21: int,
    23: int,
    26: int,
    700: float,
    701: float,
    1700: _decode_numeric,
}


class Result:
    """A statement's result: rows decoded to Python values (int, float,
    Decimal, bool, str; NULL is None), and ``rowcount``."""

    __slots__ = ("_res",)

    def __init__(self, res: Any) -> None:
        self._res = res

    @property
    def rowcount(self) -> int:
        """Rows returned or affected (PQcmdTuples), 0 when not known."""
        n = self._res.command_tuples
        return int(n) if n is not None else 0

    def __len__(self) -> int:
        return int(self._res.ntuples)

    def rows(self) -> list[tuple[Any, ...]]:
        res = self._res
        nfields = res.nfields
        decoders = [_DECODERS.get(res.ftype(c), _decode_text) for c in range(nfields)]
        get = res.get_value
        out = []
        for r in range(res.ntuples):
            row = []
            for c, dec in enumerate(decoders):
                v = get(r, c)
                row.append(None if v is None else dec(v))
            out.append(tuple(row))
        return out

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows())

    def one(self) -> tuple[Any, ...]:
        """The only row; an error if there are none or several."""
        n = self._res.ntuples
        if n != 1:
            raise WorkloadUsageError(f"expected one row, got {n}")
        return self.rows()[0]

    def first(self) -> tuple[Any, ...] | None:
        """The first row, or None."""
        return self.rows()[0] if self._res.ntuples else None

    def scalar(self) -> Any:
        """The first column of the only row."""
        return self.one()[0]
