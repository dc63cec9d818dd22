"""Clock offsets measured directly between the coordinator and each host.

Every host runs on its own monotonic clock; the coordinator needs each
one's offset to give all of them one common start (``plan``). Round trips
through the scheduler (``Client.run``) cross it twice each way and its
event loop: their error bound was ±1–8 ms between two workers of one
machine. So the coordinator listens on a TCP port of its own (on the
address it reaches the scheduler from; any port, only while the hosts
start) and each host, before it says ``ready``, exchanges a few
NTP-style timestamps with it over one connection:

* the host sends when it sends (``t1``, its clock);
* the coordinator answers when it received it (``t2``) and when it
  answers (``t3``), on its clock;
* the host notes when the answer arrived (``t4``).

The exchange with the shortest round trip ``(t4 - t1) - (t3 - t2)`` is
kept: the host's clock minus the coordinator's is then ``((t1 - t2) +
(t4 - t3)) / 2``, within half that round trip (the error bound, in the
JSON per host). A host that cannot reach the coordinator's port (a
firewall) sends nothing, and the coordinator falls back to its probes
through the scheduler (``clock_method`` says which).
"""

from __future__ import annotations

import socket
import struct
import threading
import time

__all__ = ["ClockServer", "exchange"]

#: exchanges per host (the one with the shortest round trip is kept)
EXCHANGES = 8
#: how long a host tries to reach the coordinator's port
CONNECT_TIMEOUT_S = 2.0

_ASK = struct.Struct("!q")
_ANSWER = struct.Struct("!qq")


def _now_us() -> int:
    return time.monotonic_ns() // 1000


class ClockServer:
    """The coordinator's side: answers every host's timestamps."""

    def __init__(self, host: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self.address = (host, int(self._sock.getsockname()[1]))
        self._closed = False
        threading.Thread(target=self._accept, name="pgsurge-clock", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(
                target=self._answer, args=(conn,), name="pgsurge-clock", daemon=True
            ).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(10)
            for _ in range(EXCHANGES):
                try:
                    ask = _recv_exactly(conn, _ASK.size)
                except OSError:
                    return
                if ask is None:
                    return
                received = _now_us()
                try:
                    conn.sendall(_ANSWER.pack(received, _now_us()))
                except OSError:
                    return

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def exchange(address: tuple[str, int]) -> tuple[int, int] | None:
    """A host's side: (its clock minus the coordinator's, the round trip
    it was measured with), µs; None when the coordinator is out of reach."""
    best: tuple[int, int] | None = None
    try:
        with socket.create_connection(address, timeout=CONNECT_TIMEOUT_S) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(EXCHANGES):
                t1 = _now_us()
                conn.sendall(_ASK.pack(t1))
                answer = _recv_exactly(conn, _ANSWER.size)
                t4 = _now_us()
                if answer is None:
                    break
                t2, t3 = _ANSWER.unpack(answer)
                rtt = (t4 - t1) - (t3 - t2)
                offset = ((t1 - t2) + (t4 - t3)) // 2
                if best is None or rtt < best[1]:
                    best = (offset, max(0, rtt))
    except OSError:
        return best
    return best
