"""The coordinator's heartbeat to the hosts, and the hosts' watch of it.

The hosts beat towards the coordinator (``heartbeat`` events, see
``host``); this module is the other way. While a run lives, the
coordinator sets the run's Dask ``Variable`` (``names(run)["beat"]``)
every :data:`BEAT_S` to ``{"n": a counter, "stop": level}`` from a thread
of its own (so that a busy main loop does not look like a dead
coordinator). ``stop`` is 0 (run on), 1 (stop gracefully: the
transactions in flight finish) or 2 (stop now: what runs is cancelled).

Each host task starts a read of the variable every :data:`BEAT_S` from
a thread of its own (:class:`Watch`; reads overlap, as a read may take
long on a slow link, and never return when the scheduler is gone) and
remembers, on its own clock, when it last saw the counter grow. When
it has not grown for :data:`COORDINATOR_GRACE_S` (the
coordinator was killed, its machine or the scheduler is unreachable, the
host itself is cut off), the host stops its load on its own: its workers
cancel what their clients run, close their connections and exit. Nobody
waits for that host's figures any more; they are thrown away.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BEAT_S", "COORDINATOR_GRACE_S", "MAX_READS", "Beat", "Watch"]

#: how often the coordinator beats, and how often a host looks
BEAT_S = 0.5
#: a host whose coordinator has been silent this long stops its load
COORDINATOR_GRACE_S = 5.0
#: the most reads of the coordinator's beat a host has in flight at once
MAX_READS = 8
#: the most reads of the coordinator's beat a host has in flight at once
MAX_READS = 8


class Beat:
    """The coordinator's side: a daemon thread setting the variable and
    publishing each beat (``publish``: ``Client.log_event`` on the run's
    beat topic, pushed to the hosts that subscribed)."""

    def __init__(
        self, variable: Any, publish: Callable[[dict[str, int]], object] | None = None
    ) -> None:
        self._variable = variable
        self._publish = publish
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
            beat = {"n": self._n, "stop": self.stop_level}
            try:
                self._variable.set(beat, timeout=5)
                if self._publish is not None:
                    self._publish(beat)
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
    """A host's side: the beats pushed to it, and a daemon thread reading
    the variable.

    On a slow link a read of the variable (a round trip to the
    scheduler) takes longer than :data:`BEAT_S`; a 2.5 s delay each way
    makes it 5 s, as long as the grace, and a host that waited for its
    reads would call a slow link a dead coordinator. The beats pushed
    through the run's topic (``subscribe``: ``Client.subscribe_topic`` of
    the worker's client) cross the link once, every :data:`BEAT_S`, only
    late. The reads stay as a second way (a new one every :data:`BEAT_S`
    while fewer than :data:`MAX_READS` are in flight, each in a daemon
    thread: a read on a dead link may never return, and must not keep the
    process alive). The coordinator is silent when neither has brought a
    newer beat for the grace period.
    """

    def __init__(
        self,
        variable: Any,
        grace_s: float = COORDINATOR_GRACE_S,
        *,
        subscribe: Callable[[Callable[[Any], None]], object] | None = None,
    ) -> None:
        self._variable = variable
        self._subscribe = subscribe
        self.grace_s = grace_s
        self._last_n = -1
        self._last_change = time.monotonic()
        self.stop_level = 0
        self._lock = threading.Lock()
        self._in_flight = 0
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="pgsurge-watch", daemon=True
        )

    def start(self) -> None:
        if self._subscribe is not None:
            self._subscribe(self._pushed)
        self._thread.start()

    def close(self) -> None:
        self._done.set()

    def silent_s(self) -> float:
        """How long the coordinator has been silent (this host's clock)."""
        return time.monotonic() - self._last_change

    @property
    def orphaned(self) -> bool:
        return self.silent_s() > self.grace_s

    def _pushed(self, event: Any) -> None:
        """A beat event (``(time, beat)``), on the Dask client's loop."""
        with contextlib.suppress(Exception):
            self._seen(event[1])

    def _run(self) -> None:
        while not self._done.is_set():
            with self._lock:
                room = self._in_flight < MAX_READS
                if room:
                    self._in_flight += 1
            if room:
                threading.Thread(
                    target=self._read, name="pgsurge-watch-read", daemon=True
                ).start()
            self._done.wait(BEAT_S)

    def _read(self) -> None:
        try:
            value = self._variable.get(timeout=BEAT_S * 4)
        except Exception:
            value = None  # no word: the silence goes on
        with self._lock:
            self._in_flight -= 1
        self._seen(value)

    def _seen(self, value: Any) -> None:
        if not isinstance(value, dict) or self._done.is_set():
            return
        with self._lock:
            n = int(value.get("n", -1))
            # (beats come by two ways, reads out of order: only a newer one
            # counts)
            if n > self._last_n:
                self._last_n = n
                self._last_change = time.monotonic()
            self.stop_level = max(self.stop_level, int(value.get("stop", 0)))
