"""``engine.forked`` does what ``multiprocessing``'s fork method did for a run.

The workers are forked by ``engine.forked`` (``multiprocessing`` is not
imported by a run any more): each behaviour the run relies on is checked
here against ``multiprocessing`` itself where it has one (exit statuses,
the crash report, stdin, the wire format), with real processes.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from typing import Any

import pytest

from pgsurge.engine import forked

_MP = multiprocessing.get_context("fork")


def _exit_with(how: str) -> None:
    if how == "return":
        return
    if how == "exit-3":
        sys.exit(3)
    if how == "exit-none":
        sys.exit()
    if how == "exit-text":
        sys.exit("some text")
    if how == "raise":
        raise ValueError("boom")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def _run_both(target: Any, args: tuple[Any, ...], capfd: Any) -> list[Any]:
    out = []
    for kind in ("forked", "mp"):
        proc: Any
        if kind == "forked":
            proc = forked.ForkedProcess(target, args, "pgsurge-worker-0")
        else:
            proc = _MP.Process(
                target=target, args=args, name="pgsurge-worker-0", daemon=True
            )
        proc.start()
        proc.join()
        err = capfd.readouterr().err
        # the traceback's file paths and line numbers are the same; the
        # frames above the target are each implementation's own
        lines = err.splitlines()
        out.append((proc.exitcode, proc.is_alive(), lines[:1], lines[-1:]))
    return out


@pytest.mark.parametrize(
    "how", ["return", "exit-3", "exit-none", "exit-text", "raise", "kill"]
)
def test_exit_status_and_crash_report_as_multiprocessing(how: str, capfd: Any) -> None:
    mine, theirs = _run_both(_exit_with, (how,), capfd)
    assert mine == theirs
    if how == "raise":
        assert mine[2] == ["Process pgsurge-worker-0:"]
        assert mine[3] == ["ValueError: boom"]


def _stdin_target(conn: Any) -> None:
    fd = sys.stdin.fileno()
    conn.send((fd, os.readlink(f"/proc/self/fd/{fd}"), sys.stdin.read()))


def test_child_stdin_is_dev_null_as_multiprocessing() -> None:
    got = []
    for kind in ("forked", "mp"):
        a: Any
        b: Any
        if kind == "forked":
            a, b = forked.pipe()
            proc: Any = forked.ForkedProcess(_stdin_target, (b,), "w")
        else:
            a, b = _MP.Pipe(duplex=True)
            proc = _MP.Process(target=_stdin_target, args=(b,), daemon=True)
        proc.start()
        b.close()
        got.append(a.recv())
        proc.join()
        a.close()
    # (under pytest sys.stdin is not fd 0: the descriptor is the one
    # multiprocessing's child gets too)
    assert got[0] == got[1]
    assert got[0][1:] == (os.devnull, "")


def _echo(conn: Any, inherited: int) -> None:
    os.close(inherited)  # the parent's end: its close must end this loop
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        conn.send(msg)


@pytest.mark.parametrize("size", [0, 10, 16384, 16385, 300_000])
def test_messages_cross_in_multiprocessings_format(size: int) -> None:
    payload = ("x" * size, {"n": size}, [1.5, None])
    # our end talks to a multiprocessing Connection on the other side: the
    # same header and pickle, both ways
    a, b = forked.pipe()
    mp_end = multiprocessing.connection.Connection(os.dup(b.fileno()))
    b.close()
    proc = forked.ForkedProcess(_echo, (mp_end, a.fileno()), "echo")
    proc.start()
    mp_end.close()
    a.send(payload)
    assert a.poll(30)
    assert a.recv() == payload
    a.close()  # the child's recv ends (EOFError) and it exits
    proc.join(30)
    assert proc.exitcode == 0


def test_recv_at_the_peers_close_is_eof() -> None:
    a, b = forked.pipe()
    b.close()
    with pytest.raises(EOFError):
        a.recv()
    a.close()
    assert a.closed


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_join_timeout_kill_and_wait() -> None:
    proc = forked.ForkedProcess(_sleep, (60,), "sleeper")
    proc.start()
    assert proc.is_alive()
    proc.join(0.05)  # returns at the timeout, the child still running
    assert proc.is_alive() and proc.exitcode is None
    proc.kill()
    proc.join(30)
    assert not proc.is_alive()
    assert proc.exitcode == -signal.SIGKILL
    proc.kill()  # on a reaped child: nothing

    r, w = os.pipe()
    a, b = forked.pipe()
    try:
        assert forked.wait([a, r], 0) == []
        b.send("x")
        os.write(w, b"y")
        assert forked.wait([r, a], 5) == [r, a]  # in the given order
    finally:
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()
