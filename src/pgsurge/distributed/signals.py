"""The coordinator's signals while its hosts run (main thread only).

SIGINT, SIGTERM and SIGHUP are caught while a multi-host run goes on; the
handler only counts them (a handler must not wait for the scheduler,
which the coordinator's loop then does, see ``coordinator``). The third
ends the program at once: the hosts then stop on their own when the
coordinator's heartbeat stops (``watch``).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

__all__ = ["HANDLED_SIGNALS", "Die", "Signals", "die_of"]

#: the signals that stop the hosts (see ``coordinator``)
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Signals:
    """SIGINT, SIGTERM and SIGHUP while the hosts run (main thread only).

    The handler only counts: the coordinator's loop acts on them (a
    handler must not wait for the scheduler). The third interrupting
    signal ends the program at once; the hosts then stop on their own
    when the coordinator's heartbeat stops."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if len(self.received) >= 3:
            die_of(signum)


def die_of(signum: int) -> None:
    """End this process by ``signum``'s default action (a shell sees it)."""
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)


class Die(Exception):
    """Leave ``drive`` (its clean-up done) and die of ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
