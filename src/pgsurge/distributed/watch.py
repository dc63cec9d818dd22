"""The coordinator's heartbeat to the hosts, and the hosts' watch of it.

The hosts beat towards the coordinator (``heartbeat`` events, see
``host``); this module is the other way. While a run lives, the
coordinator sets the run's Dask ``Variable`` (``names(run)["beat"]``)
every :data:`BEAT_S` to ``{"n": a counter, "stop": level}`` from a thread
of its own (so that a busy main loop does not look like a dead
coordinator). ``stop`` is 0 (run on), 1 (stop gracefully: the
transactions in flight finish) or 2 (stop now: what runs is cancelled).

Each host task reads the variable every :data:`BEAT_S` from a thread of
its own (:class:`Watch`; a read may block for long when the scheduler is
gone) and remembers, on its own clock, when it last saw the counter
move. When it has not moved for :data:`COORDINATOR_GRACE_S` (the
coordinator was killed, its machine or the scheduler is unreachable, the
host itself is cut off), the host stops its load on its own: its workers
cancel what their clients run, close their connections and exit. Nobody
waits for that host's figures any more; they are thrown away.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["BEAT_S", "COORDINATOR_GRACE_S", "Beat", "Watch"]

#: how often the coordinator beats, and how often a host looks
BEAT_S = 0.5
#: a host whose coordinator has been silent this long stops its load
COORDINATOR_GRACE_S = 5.0


class Beat:
    """The coordinator's side: a daemon thread setting the variable."""

    def __init__(self, variable: Any) -> None:
        self._variable = variable
        self._n = 0
        self.stop_level = 0
        self._done = threading.Event()
        self._kick = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name="pgsurge-beat", daemon=True
        )

    def start(self) -> None:
        self._send()
        self._thread.start()

    def stop_hosts(self, level: int) -> None:
        """Tell the hosts to stop (1: gracefully, 2: now), at once (not
        from a signal handler: this waits for the scheduler)."""
        if level > self.stop_level:
            self.stop_level = level
            self._send()

    def close(self) -> None:
        """No more beats (the run is over; the hosts' tasks have ended or
        will stop on their own)."""
        self._done.set()
        self._kick.set()

    def _send(self) -> None:
        with self._lock:
            self._n += 1
            try:
                self._variable.set({"n": self._n, "stop": self.stop_level}, timeout=5)
            except Exception:
                pass  # the scheduler is gone: the hosts stop on their own

    def _run(self) -> None:
        while not self._done.is_set():
            self._kick.wait(BEAT_S)
            self._kick.clear()
            if self._done.is_set():
                return
            self._send()


class Watch:
    """A host's side: a daemon thread reading the variable."""

    def __init__(self, variable: Any, grace_s: float = COORDINATOR_GRACE_S) -> None:
        self._variable = variable
        self.grace_s = grace_s
        self._last_n = -1
        self._last_change = time.monotonic()
        self.stop_level = 0
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="pgsurge-watch", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._done.set()

    def silent_s(self) -> float:
        """How long the coordinator has been silent (this host's clock)."""
        return time.monotonic() - self._last_change

    @property
    def orphaned(self) -> bool:
        return self.silent_s() > self.grace_s

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                value = self._variable.get(timeout=BEAT_S * 4)
            except Exception:
                value = None  # no word: the silence goes on
            if isinstance(value, dict):
                n = int(value.get("n", -1))
                if n != self._last_n:
                    self._last_n = n
                    self._last_change = time.monotonic()
                self.stop_level = max(self.stop_level, int(value.get("stop", 0)))
            self._done.wait(BEAT_S)
