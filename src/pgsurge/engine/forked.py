"""Forked worker processes and their pipes, without ``multiprocessing``.

A run forks its workers (``engine.pool``): ``multiprocessing`` did it, and
importing it costs every run's start-up (and each of its processes'
memory) its contexts, reduction, connection and utility modules, which
import ``tempfile``, ``random``, ``shutil`` with ``bz2`` and ``lzma``, and
``subprocess``: about 30 million instructions of a parent's 470, for a
fork, a socket pair and pickled messages. This module does exactly what
the run used of it, the same way:

* :class:`Connection`: one end of a socket pair carrying pickled objects,
  each behind ``multiprocessing``'s header (a 4-byte big-endian length, or
  -1 then 8 bytes for 2 GiB and more); ``send``, ``recv`` (``EOFError``
  when the other end is closed), ``poll``, ``fileno``, ``close``;
* :func:`wait`: the objects (connections, descriptors, anything with
  ``fileno``) ready to read, as ``multiprocessing.connection.wait``;
* :class:`ForkedProcess`: ``multiprocessing``'s fork start method with a
  daemonic process: the standard streams flushed before the fork; in the
  child, stdin on ``/dev/null``, the target run, its exit status (0, a
  ``SystemExit`` code, or 1 with ``Process NAME:`` and the traceback on
  stderr), the streams flushed, ``os._exit``; in the parent ``pid``,
  ``exitcode`` (minus the signal's number for a killed one),
  ``is_alive``, ``join`` with a timeout, ``kill``; and at the parent's
  normal exit the children still alive get SIGTERM and are waited for.

Where ``fork`` is not the start method (``PGSURGE_START_METHOD``, or a
platform without it) ``engine.pool`` uses ``multiprocessing`` itself.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import struct
import sys

# pickle's C implementation, which ``pickle.dumps``/``loads`` are: the
# ``pickle`` module around it (its Python pickler, unpickler and their
# tables, some 250 KiB in each process of a run) is not imported
from _pickle import dumps as _dumps
from _pickle import loads as _loads
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["Connection", "ForkedProcess", "PipeEnd", "pipe", "wait"]

_HEADER = struct.Struct("!i")
_LONG_HEADER = struct.Struct("!Q")


class PipeEnd(Protocol):
    """What the run uses of a pipe's end: a :class:`Connection` or, under
    another start method, ``multiprocessing``'s."""

    def send(self, obj: Any) -> None: ...
    def recv(self) -> Any: ...
    def poll(self, timeout: float | None = ...) -> bool: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class Connection:
    """One end of a duplex pipe of pickled objects (see the module doc)."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        if self._fd < 0:
            raise OSError("handle is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def send(self, obj: object) -> None:
        buf = _dumps(obj)
        n = len(buf)
        if n > 0x7FFFFFFF:
            self._write(_HEADER.pack(-1) + _LONG_HEADER.pack(n))
            self._write(buf)
        elif n > 16384:
            self._write(_HEADER.pack(n))
            self._write(buf)
        else:
            self._write(_HEADER.pack(n) + buf)

    def recv(self) -> Any:
        (size,) = _HEADER.unpack(self._read(4))
        if size == -1:
            (size,) = _LONG_HEADER.unpack(self._read(8))
        return _loads(self._read(size))

    def poll(self, timeout: float | None = 0.0) -> bool:
        return bool(wait([self], timeout))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        fd = self.fileno()
        while view:
            view = view[os.write(fd, view) :]

    def _read(self, size: int) -> bytes:
        fd = self.fileno()
        chunks = []
        remaining = size
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


def pipe() -> tuple[Connection, Connection]:
    """Two connected ends (``multiprocessing.Pipe(duplex=True)``)."""
    # _socket's own socketpair (AF_UNIX, SOCK_STREAM), as socket.socketpair
    # calls it: only the descriptors are kept, and the socket module (with
    # selectors and its enums) would be memory in each process of a run
    import _socket

    a, b = _socket.socketpair()
    return Connection(a.detach()), Connection(b.detach())


def wait(objects: Iterable[Any], timeout: float | None = None) -> list[Any]:
    """The objects of ``objects`` ready to read (or at their end) within
    ``timeout`` seconds (None: no limit), in their order."""
    objects = list(objects)
    poller = select.poll()
    by_fd: dict[int, list[Any]] = {}
    for obj in objects:
        fd = obj if isinstance(obj, int) else obj.fileno()
        by_fd.setdefault(fd, []).append(obj)
        poller.register(fd, select.POLLIN)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    ready_fds = {fd for fd, _ in poller.poll(ms)}
    return [obj for fd, objs in by_fd.items() if fd in ready_fds for obj in objs]


class ForkedProcess:
    """A daemonic child running ``target(*args)`` (see the module doc)."""

    def __init__(
        self,
        target: Callable[..., object],
        args: tuple[Any, ...],
        name: str,
        close_in_child: Iterable[PipeEnd] = (),
    ) -> None:
        self._target = target
        self._args = args
        self.name = name
        #: the parent's ends of other children's pipes: the child closes them
        self._close_in_child = tuple(close_in_child)
        self.pid: int | None = None
        self.exitcode: int | None = None
        self._sentinel = -1

    def start(self) -> None:
        _flush_std_streams()
        parent_r, child_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(parent_r)
                code = self._bootstrap()
            finally:
                os._exit(code)
        os.close(child_w)
        self.pid = pid
        self._sentinel = parent_r
        _alive.add(self)

    def _bootstrap(self) -> int:
        """In the child: run the target, return its exit status."""
        # the parent's children are not this one's, nor are their pipes: a
        # child holding another's parent end would keep that pipe open
        # after the parent died (no EOF for the other child to see)
        try:
            for proc in list(_alive):
                proc._close_sentinel()  # (which takes it out of the set)
            for end in self._close_in_child:
                end.close()
            _close_stdin()
            self._target(*self._args)
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                sys.stderr.write(str(e.code) + "\n")
                code = 1
        except BaseException:
            import traceback  # lazily: only for a crash

            code = 1
            sys.stderr.write(f"Process {self.name}:\n")
            traceback.print_exc()
        finally:
            # (threading only if something imported it: without it no
            # thread was started through it, so there is none to wait for)
            threading = sys.modules.get("threading")
            shutdown = getattr(threading, "_shutdown", None)
            if shutdown is not None:
                shutdown()  # non-daemon threads, as multiprocessing waits
            _flush_std_streams()
        return code

    def _poll(self, flag: int) -> int | None:
        if self.exitcode is None and self.pid is not None:
            try:
                pid, status = os.waitpid(self.pid, flag)
            except OSError:
                return None  # reaped elsewhere: as multiprocessing, unknown
            if pid == self.pid:
                self.exitcode = os.waitstatus_to_exitcode(status)
                self._close_sentinel()
        return self.exitcode

    def _close_sentinel(self) -> None:
        _alive.discard(self)
        if self._sentinel >= 0:
            fd, self._sentinel = self._sentinel, -1
            os.close(fd)

    def is_alive(self) -> bool:
        return self.pid is not None and self._poll(os.WNOHANG) is None

    def join(self, timeout: float | None = None) -> None:
        if self.pid is None or self.exitcode is not None:
            return
        if timeout is not None and not wait([self._sentinel], timeout):
            return
        self._poll(os.WNOHANG if timeout == 0.0 else 0)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, signum: int) -> None:
        if self.pid is not None and self.exitcode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass


#: the children started here and not yet reaped
_alive: set[ForkedProcess] = set()


@atexit.register
def _stop_children() -> None:
    """At the parent's normal exit, as ``multiprocessing`` does for daemonic
    children: SIGTERM to those still running, then wait for them."""
    children = [p for p in list(_alive) if p.is_alive()]
    for p in children:
        p.terminate()
    for p in children:
        p.join()


def _close_stdin() -> None:
    """stdin on ``/dev/null`` (``multiprocessing``'s child does the same:
    fd 0 closed, then the lowest free descriptor, 0, opened on it)."""
    if sys.stdin is None:
        return
    try:
        sys.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            sys.stdin = open(fd, encoding="utf-8", closefd=False)  # noqa: SIM115
        except BaseException:
            os.close(fd)
            raise
    except (OSError, ValueError):
        pass


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (AttributeError, ValueError):
            pass
