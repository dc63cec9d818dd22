"""A host's watch of its coordinator (``distributed.watch``, issue 24):
the beats pushed to it keep it alive when every read of the beat
variable hangs (a slow link: a read waits a whole round trip), silence
orphans it, and reads that never return stay bounded.

The variable here is a stand-in for Dask's (``get`` as it blocks on a
slow or dead link); ``tests/server/test_dask_netns.py`` runs the real
thing behind a delaying relay.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pgsurge.distributed.watch import MAX_READS, Watch


class _HangingVariable:
    """Every read blocks until ``release`` (a dead or very slow link)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.in_flight = 0
        self.most = 0
        self._lock = threading.Lock()

    def get(self, timeout: float | None = None) -> Any:
        with self._lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        self.release.wait()
        with self._lock:
            self.in_flight -= 1
        return None


def _watch(
    grace_s: float,
) -> tuple[Watch, _HangingVariable, list[Callable[[Any], None]]]:
    var = _HangingVariable()
    handlers: list[Callable[[Any], None]] = []
    watch = Watch(var, grace_s, subscribe=handlers.append)
    watch.start()
    return watch, var, handlers


@pytest.mark.slow
def test_pushed_beats_keep_a_host_whose_reads_hang() -> None:
    watch, var, handlers = _watch(grace_s=2.0)
    try:
        (push,) = handlers
        deadline = time.monotonic() + 4.0  # twice the grace
        n = 0
        while time.monotonic() < deadline:
            n += 1
            push((time.time(), {"n": n, "stop": 0}))
            time.sleep(0.1)
        assert not watch.orphaned, watch.silent_s()
        # a stop level comes the same way
        push((time.time(), {"n": n + 1, "stop": 1}))
        assert watch.stop_level == 1
        # the hanging reads are bounded
        assert 1 <= var.most <= MAX_READS
    finally:
        var.release.set()
        watch.close()


def test_silence_orphans_a_host() -> None:
    watch, var, handlers = _watch(grace_s=0.5)
    try:
        handlers[0]((time.time(), {"n": 1, "stop": 0}))
        deadline = time.monotonic() + 30
        while not watch.orphaned:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert watch.silent_s() > 0.5
    finally:
        var.release.set()
        watch.close()


def test_an_older_beat_is_no_news() -> None:
    watch, var, handlers = _watch(grace_s=0.5)
    try:
        push = handlers[0]
        push((time.time(), {"n": 7, "stop": 0}))
        time.sleep(0.7)
        assert watch.orphaned
        # a late read bringing an older beat (reads overlap) does not count
        push((time.time(), {"n": 6, "stop": 0}))
        assert watch.orphaned
        push((time.time(), {"n": 8, "stop": 0}))
        assert not watch.orphaned
    finally:
        var.release.set()
        watch.close()
