"""The run engine's fused libpq calls (``pgsurge._fastpq``), when usable.

A transaction of pgbench's builtins makes about ten calls into libpq
through psycopg (send, flush, consume, is-busy, get-result, status, ...).
The optional C extension ``pgsurge._fastpq`` does the send-and-flush and
the consume-and-read-results sequences in one call each, on the libpq
psycopg has loaded, and on the same connections (given by address,
psycopg's ``pgconn_ptr``). This module decides whether it may be used and
hands its functions to the engine:

* :data:`available` is True when the extension is built and current,
  ``PGSURGE_PURE`` is unset, and exactly one libpq of psycopg's version is
  loaded in the process (checked by ``bind``); otherwise the engine keeps
  calling psycopg, with the same results;
* :func:`usable_with` checks a live connection (the extension's view of
  its socket must match psycopg's) before the engine trusts it;
* :class:`ErrorResult` stands in for a failed result that ``drain`` has
  read and cleared: it answers the questions pgconn's helpers ask a
  psycopg result (``status``, ``error_message``, ``error_field``).

Return conventions (see src/pgsurge/_native/_fastpq.c): the send functions return
0 (all sent), 1 (data left to flush: wait for writability), -1 (the flush
failed) or -2 (the send failed); ``send_prepared_vars``,
``send_params_vars`` and ``send_query_parts`` build the parameters (the
query text) from the client's variables like ``sql.params_of``
(``substitute``) for ints and strings, and return :data:`SEND_FALLBACK`
without sending for any other value; ``drain(conn, count)`` returns
``count * 4 + code`` with code 0 (libpq needs more data), 1 (all results
read) or 3 (reading from the socket failed), or, for a result that is
neither rows, command-ok nor empty, a tuple ``(count, status, sqlstate,
message)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pgsurge import _native, pgconn

__all__ = [
    "DRAIN_BUSY",
    "DRAIN_DONE",
    "DRAIN_FAILED",
    "FASTPQ_API",
    "SEND_FALLBACK",
    "ErrorResult",
    "Failed",
    "available",
    "drain",
    "send_params",
    "send_params_vars",
    "send_prepared",
    "send_prepared_vars",
    "send_query",
    "send_query_parts",
    "usable_with",
]

#: the interface version of pgsurge._fastpq this code expects
FASTPQ_API = 3

#: what the *_vars/parts senders return when a value needs Python's
#: formatting (a double, a boolean, NULL): nothing was sent
SEND_FALLBACK = -3

# drain()'s codes, in the low two bits of its int result
DRAIN_BUSY = 0
DRAIN_DONE = 1
DRAIN_FAILED = 3

#: PG_DIAG_SQLSTATE, the diagnostic field code libpq gives as 'C'
_DIAG_SQLSTATE = ord("C")

Params = Sequence[bytes | None] | None
#: drain()'s report of a failed result: (count, status, sqlstate, message)
Failed = tuple[int, int, bytes | None, bytes | None]
SendPrepared = Callable[[int, bytes, Params], int]
SendParams = Callable[[int, bytes, Params], int]
SendQuery = Callable[[int, bytes], int]
SendVars = Callable[[int, bytes, dict[str, Any], tuple[str, ...]], int]
SendParts = Callable[[int, tuple[str, ...], dict[str, Any]], int]
Drain = Callable[[int, int], "int | Failed"]


def _bind() -> Any:
    module = _native.load("_fastpq", FASTPQ_API)
    if module is None or not module.bind(pgconn.LIBPQ_VERSION):
        return None
    return module


def _unavailable(*args: object) -> NoReturn:
    raise RuntimeError("pgsurge._fastpq is not in use")


_module = _bind()

#: whether the fused calls may be used at all in this process (when not,
#: the functions below raise RuntimeError: callers check ``available`` or
#: a connection's :func:`usable_with` first)
available: bool = _module is not None
send_prepared: SendPrepared = _unavailable
send_params: SendParams = _unavailable
send_query: SendQuery = _unavailable
send_prepared_vars: SendVars = _unavailable
send_params_vars: SendVars = _unavailable
send_query_parts: SendParts = _unavailable
drain: Drain = _unavailable
if _module is not None:
    send_prepared = _module.send_prepared
    send_params = _module.send_params
    send_query = _module.send_query
    send_prepared_vars = _module.send_prepared_vars
    send_params_vars = _module.send_params_vars
    send_query_parts = _module.send_query_parts
    drain = _module.drain


def usable_with(conn: pgconn.PgConn) -> int:
    """The connection's ``PGconn`` address if the fused calls can drive it,
    else 0.

    The extension must see the socket psycopg sees: a cheap proof that
    both work on the same libpq and the same connection structure.
    """
    if _module is None:
        return 0
    # psycopg's PGconn behind the wrapper (the engine drives it directly too)
    ptr: int = conn._pgconn.pgconn_ptr or 0
    if not ptr or _module.socket(ptr) != conn.socket:
        return 0
    return ptr


class ErrorResult:
    """A failed result, already read and cleared by ``drain``.

    Only what pgsurge asks of a failed result is kept: its status, libpq's
    error message and the SQLSTATE (``error_field`` knows no other field).
    """

    __slots__ = ("_sqlstate", "error_message", "status")

    def __init__(self, status: int, sqlstate: bytes | None, message: bytes | None):
        self.status = status
        self._sqlstate = sqlstate
        self.error_message = message

    def error_field(self, code: int) -> bytes | None:
        return self._sqlstate if code == _DIAG_SQLSTATE else None
