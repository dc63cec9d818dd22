"""--reconnect's back-off and attempts on the event loop, without a server.

A stand-in engine loses the client's connection at its first step; the
reconnection attempts go to a local port where nothing listens (refused
at once), so every attempt fails. What is checked: the back-off is spent
waiting in the loop (its idle time), not slept inside a client's step,
which would block the worker's other clients (issue 21, item 6); the
attempts end as documented (aborted after N, finished at the end of -T).
The runs against a real server are in tests/server/test_reconnect.py.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from pgsurge.engine import state as C
from pgsurge.engine.client import Engine
from pgsurge.engine.loop import EventLoop
from pgsurge.engine.reconnect import with_reconnect
from pgsurge.engine.state import Client, Settings, WorkerState
from pgsurge.prng import PgPrng
from pgsurge.script.evaluate import EvalContext
from pgsurge.stats.counters import StatsData


class _BadConn:
    """What the engine's connection looks like once it is lost."""

    bad = True


def _refusing_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed: connections are refused


def _run(attempts: int, end_after_s: float = 0.0) -> tuple[Client, Any, list[str]]:
    """One client losing its connection at once; the loop, the log."""
    w = WorkerState(
        stats=StatsData(), per_script=None, choose_rng=PgPrng(1), throttle_rng=PgPrng(2)
    )
    now_us = time.monotonic_ns() // 1000
    settings = Settings(
        nclients=1,
        query_mode=0,
        nxacts=0,
        end_us=now_us + int(end_after_s * 1e6) if end_after_s else 0,
        throttle_delay=0.0,
        latency_limit_us=0,
        detailed=False,
        per_command=False,
        max_tries=1,
        verbose_errors=False,
        continue_on_error=False,
        connect_each_tx=False,
        weights=(1,),
        conninfo={
            "host": "127.0.0.1",
            "port": str(_refusing_port()),
            "dbname": "x",
            "user": "x",
        },
        reconnect=attempts,
    )
    variables: dict[str, Any] = {}
    rng = PgPrng(3)
    st = Client(0, variables, rng, EvalContext(variables, rng))
    loop = EventLoop([st])

    def lose(client: Client) -> None:
        # what the engine does when the connection is lost: abort reason
        # filed, socket detached (connection still bad), connection closed
        w.abort_messages.append("client 0 lost its connection; gone")
        client.conn = _BadConn()  # type: ignore[assignment]
        loop.detach(client)
        client.conn = None
        client.state = C.ABORTED

    log: list[str] = []
    engine = with_reconnect(
        Engine(lose, lambda c, e: None, lambda *a: False),
        settings,
        w,
        loop,
        log.append,
        attempts,
    )
    loop.advance = engine.advance
    started = time.monotonic()
    loop.run()
    elapsed = time.monotonic() - started
    loop.close()
    return st, (w, loop.idle_us / 1e6, elapsed), log


def test_backoff_waits_in_the_loop_then_gives_up() -> None:
    st, (w, idle_s, elapsed), log = _run(attempts=3)
    assert st.state == C.ABORTED
    assert len(log) == 1 and log[0].startswith(
        "pgsurge: error: client 0 could not reconnect in 3 attempts: "
    ), log
    assert "refused" in log[0], log
    assert w.abort_messages == [log[0][len("pgsurge: error: ") : -1]]
    assert w.stats.connection_failures == 1
    # 0.1 + 0.2 + 0.4 s of back-off, spent in the loop's waits (slept in a
    # step, it would not count as idle: the worker could run nothing)
    assert elapsed >= 0.65
    assert idle_s >= 0.5 * elapsed, (idle_s, elapsed)


def test_end_of_run_during_the_backoff_finishes_the_client() -> None:
    st, (w, _idle, elapsed), log = _run(attempts=10, end_after_s=0.25)
    assert st.state == C.FINISHED
    assert log == []
    assert w.abort_messages == []  # it did not abort
    assert w.stats.connection_failures == 1
    assert elapsed < 5  # not the 10 attempts' 13 s of back-off
