"""A worker's initial connections, opened in parallel without blocking.

pgbench opens a thread's connections one after the other with the
blocking ``PQconnectdb``: each costs a round trip to the server, which
forks a backend (or a pooler that checks the client in) before it answers,
while the thread waits. A worker here starts its clients' connections with
``PQconnectStart`` and drives them all with ``PQconnectPoll`` as their
sockets become ready (one ``poll`` for all of them), so the worker's
connection ramp is bounded by the server, not by round trips in series.

At most :data:`WINDOW` connections are in flight at once: a burst of
thousands of simultaneous connects overflows the listen backlog of a
server or a pooler (PgBouncer's default is 128), and a refused TCP
handshake is retried only a second later, which would make the ramp
slower than pgbench's. The connections are returned in client order.

A failure is reported for the lowest client that failed (pgbench stops at
its first failing client, which is the lowest of its thread); the others
are closed. ``connect_timeout`` is enforced as libpq's blocking connect
enforces it, with its message; when it expires on one host of several,
that connection goes on from the next host, as libpq's blocking connect
does (``Connecting.rest_of_hosts``), its message starting with the lines
of the hosts given up on. When which host was being tried cannot be told
(``load_balance_hosts=random``, a host named twice), that client is
connected with libpq's blocking connect, from the first host.

:func:`open_one` is the Python engine's ``-C`` connect, opened the same
way so that the parent's Stop, and -T's end, can end it (see its
docstring).
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable

from pgsurge import pgconn

__all__ = ["WINDOW", "open_connections", "open_one"]

#: connections in flight at once per worker
WINDOW = 32

#: how often :func:`open_one` looks whether the run ended (ms)
ENDED_CHECK_MS = 100
#: how long after the end a connection still opening may take before it
#: is given up (s): a server that answers gets to answer, and the
#: connection is closed cleanly (given up at once, every -T run left a
#: "could not send data to client" and a FATAL in the server's log); the
#: C loop's END_GRACE_US
END_GRACE_S = 0.5

_POLL_IN = select.POLLIN | select.POLLERR | select.POLLHUP
_POLL_OUT = select.POLLOUT | select.POLLERR | select.POLLHUP


def open_connections(
    items: dict[str, str],
    password: str | None,
    count: int,
    on_open: Callable[[int, pgconn.PgConn], None],
    window: int = WINDOW,
) -> tuple[int, str]:
    """Open ``count`` connections, calling ``on_open(index, conn)`` for
    each in index order (connections are released in that order, so that a
    failure of a later one never hides an earlier one).

    Returns ``(-1, "")`` when all opened, else ``(index, message)`` for the
    lowest index that failed (libpq's text with its newline); every
    connection opened but not given to ``on_open`` is closed then.
    """
    info = pgconn.conninfo(items, password).encode("utf-8", "surrogateescape")
    timeout = pgconn.connect_timeout_s(info)
    poller = select.poll()
    started: dict[int, tuple[int, pgconn.Connecting, float]] = {}  # fd -> ...
    done: dict[int, pgconn.PgConn] = {}
    failed: dict[int, str] = {}
    # the lines of the hosts a connection has given up on at connect_timeout
    before: dict[int, str] = {}
    next_index = 0
    given = 0

    def fail(index: int, conn: pgconn.Connecting, message: str | None = None) -> None:
        text = message if message is not None else conn.error_message()
        failed[index] = before.pop(index, "") + text
        conn.finish()

    def next_host(index: int, conn: pgconn.Connecting) -> None:
        """``conn`` outlasted connect_timeout: on to the next host, as
        libpq's blocking connect goes, or fail with libpq's message."""
        after = conn.rest_of_hosts() if conn.several_hosts() else None
        if after is None and conn.several_hosts():
            # which host it was on cannot be told: libpq's own blocking
            # connect, from the first (it blocks the ramp, as pgbench's does)
            conn.finish()
            opened, message, _needs = pgconn.connect(items, password)
            if opened is not None:
                before.pop(index, None)
                done[index] = opened
            else:
                failed[index] = before.pop(index, "") + message
            return
        if after is None:
            fail(index, conn, conn.timeout_message())
            return
        before[index] = before.get(index, "") + conn.timeout_message()
        conn.finish()
        step(index, pgconn.connect_start_info(after), time.monotonic(), True)

    def step(
        index: int, conn: pgconn.Connecting, since: float, first: bool = False
    ) -> None:
        """Poll ``conn`` and register its socket for what libpq waits for
        (first: libpq documents a wait for writing before the first poll)."""
        if first:
            r = pgconn.POLL_WRITING if conn.socket >= 0 else pgconn.POLL_FAILED
        else:
            r = conn.poll()
        if r == pgconn.POLL_OK:
            before.pop(index, None)
            done[index] = conn.opened()
            return
        fd = conn.socket
        if r == pgconn.POLL_FAILED or fd < 0:
            fail(index, conn)
            return
        started[fd] = (index, conn, since)
        poller.register(fd, _POLL_IN if r == pgconn.POLL_READING else _POLL_OUT)

    while True:
        # release what opened, in order; stop early on a failure below
        while given in done:
            on_open(given, done.pop(given))
            given += 1
        if failed and min(failed) <= given:
            break
        if given >= count:
            break
        while next_index < count and len(started) < window and not failed:
            step(next_index, pgconn.connect_start_info(info), time.monotonic(), True)
            next_index += 1
        if not started:
            continue
        wait_ms = -1
        if timeout:
            oldest = min(since for _i, _c, since in started.values())
            wait_ms = max(0, int((oldest + timeout - time.monotonic()) * 1000) + 1)
        ready = poller.poll(wait_ms)
        for fd, _events in ready:
            index, conn, since = started.pop(fd)
            poller.unregister(fd)
            step(index, conn, since)
        if timeout:
            now = time.monotonic()
            for fd, (index, conn, since) in list(started.items()):
                if now - since >= timeout:
                    del started[fd]
                    poller.unregister(fd)
                    next_host(index, conn)
    # a failure: close everything not handed out
    for _index, pending, _since in started.values():
        pending.finish()
    for opened in done.values():
        opened.finish()
    if not failed:
        return -1, ""
    first = min(failed)
    return first, failed[first]


def open_one(
    items: dict[str, str],
    password: str | None,
    stop_fd: int,
    rest: tuple[bytes, str] | None = None,
    ended: Callable[[], bool] | None = None,
) -> tuple[pgconn.PgConn | None, str | None]:
    """One connection, as the blocking ``pgconn.connect`` opens it (libpq's
    ``connect_timeout`` and messages), but given up when ``stop_fd`` becomes
    readable: ``(conn, None)`` opened, ``(None, message)`` failed (libpq's
    text with its newline), ``(None, None)`` stopped.

    The Python engine's ``-C`` opens each transaction's connection in its
    worker's thread, as pgbench's ``doConnect`` does. libpq's blocking
    connect retries its ``poll`` when a signal interrupts it, so a worker
    waiting for a server that accepted and never answers (no
    ``connect_timeout``) heard neither Ctrl-C nor the parent's Stop, was
    killed after the grace, and its transactions were lost from the report
    (hostile finding). Here the wait also watches the worker's pipe (its
    event loop's control descriptor): the parent's Stop, or the parent gone,
    ends the attempt; the message is left on the pipe for the loop.

    When ``connect_timeout`` expires on one host of several, libpq's
    blocking connect goes on to the next, and so does this
    (``Connecting.rest_of_hosts``), its message starting with the timed-out
    host's line as libpq's does; when the host being tried cannot be told,
    libpq's blocking connect is called, from the first host. ``rest`` goes
    on from where the C loop gave up (``rest_of_hosts`` and that host's
    message).

    ``ended`` (-T's end, or a stop, flagged in the worker) gives the
    attempt up too, :data:`END_GRACE_S` after it was first seen (looked at
    every :data:`ENDED_CHECK_MS`): a server
    that never answers kept a -T run going forever, as it keeps pgbench's
    (hostile finding; the C loop gives such a connection up at the end
    too). A signal cannot end the wait instead: Python retries an
    interrupted ``poll`` once its handler ran, and on a thread no handler
    runs at all.
    """
    info = pgconn.conninfo(items, password).encode("utf-8", "surrogateescape")
    timeout = pgconn.connect_timeout_s(info)
    before = ""  # the lines of the hosts given up on
    if rest is not None:
        info, before = rest
    conn = pgconn.connect_start_info(info)
    since = time.monotonic()
    ended_at: float | None = None  # when ``ended`` was first seen true
    poller = select.poll()
    poller.register(stop_fd, _POLL_IN)
    # libpq: after PQconnectStart, act as if PQconnectPoll said WRITING
    r = pgconn.POLL_WRITING
    while True:
        fd = conn.socket
        if r == pgconn.POLL_OK:
            return conn.opened(), None
        if r == pgconn.POLL_FAILED or fd < 0:
            message = conn.error_message()
            conn.finish()
            return None, before + message
        poller.register(fd, _POLL_IN if r == pgconn.POLL_READING else _POLL_OUT)
        wait_ms = -1
        if timeout:
            wait_ms = max(0, int((since + timeout - time.monotonic()) * 1000) + 1)
        if ended is not None and (wait_ms < 0 or wait_ms > ENDED_CHECK_MS):
            wait_ms = ENDED_CHECK_MS
        ready = poller.poll(wait_ms)
        poller.unregister(fd)
        if ended_at is None and ended is not None and ended():
            ended_at = time.monotonic()
        if any(ready_fd == stop_fd for ready_fd, _ in ready) or (
            ended_at is not None and time.monotonic() - ended_at >= END_GRACE_S
        ):
            conn.finish()
            return None, None
        if ready:
            r = conn.poll()
            continue
        if not timeout or time.monotonic() - since < timeout:
            continue  # a look at ``ended`` only
        # connect_timeout expired
        if not conn.several_hosts():
            message = conn.timeout_message()
            conn.finish()
            return None, before + message
        after = conn.rest_of_hosts()
        if after is None:
            conn.finish()
            opened, message, _needs = pgconn.connect(items, password)
            return opened, (None if opened is not None else message)
        before += conn.timeout_message()
        conn.finish()
        conn = pgconn.connect_start_info(after)
        since = time.monotonic()
        r = pgconn.POLL_WRITING
