"""The ``-l`` files of a multi-host run: written on the hosts, brought back.

Each worker writes its transaction log on its own host, as on one
machine: pgbench's name ``PREFIX.PID`` for worker 0 and ``PREFIX.PID.N``
for worker N, where PID is the coordinator's process id and N the
worker's global number, so the files of all hosts never clash and are
named exactly as those of a one-machine run with the same ``-j``. A
relative prefix is relative to the Dask worker's working directory; with
``--dask local:N`` that is the coordinator's own, so the files are there
already.

``--dask-collect-logs DIR`` copies every host's files into DIR once the
run is over: small Dask tasks pinned to the host read each file in chunks
of :data:`CHUNK` bytes and return them as their results (no other channel
than Dask's, and never more than a chunk or two in memory). A file that
is already the destination (a host on this machine writing into DIR) is
left as it is. The lines are the workers' own: pgbench's format, byte for
byte. A host that leaves the cluster while its files are copied (or that
does not answer for :data:`TASK_TIMEOUT_S`) is given up: its files are
said to stay on it, and the other hosts' are collected.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import PROG
from pgsurge.stats.txlog import log_path

__all__ = ["CHUNK", "FileId", "collect_logs", "file_id", "read_chunk"]

#: bytes read by one task
CHUNK = 8 << 20
#: the longest one task may take (a frozen host's never ends: Dask waits
#: minutes before it gives a silent worker up)
TASK_TIMEOUT_S = 120.0
#: how often a task's host is looked for while the task runs
_LOOK_S = 1.0


class HostGone(Exception):
    """The host of a task left the cluster or stopped answering: its
    other files are not asked for."""


class Interrupted(Exception):
    """A signal came (Ctrl-C on a slow copy): no more files are asked for."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class SchedulerGone(Exception):
    """The client lost the scheduler: no more files can be asked for."""


def _lost_scheduler(client: Any) -> bool:
    return client.status not in ("running", "newly-created")


#: the signal received since the collection began, if any
Stopped = Callable[[], int | None]


def _result(client: Any, future: Any, address: str, stopped: Stopped) -> Any:
    """``future``'s result; ``HostGone`` when its host (``address``)
    leaves the cluster meanwhile (a task pinned to it would wait for it
    for ever) or the task takes longer than :data:`TASK_TIMEOUT_S`;
    ``Interrupted`` when a signal came meanwhile; ``SchedulerGone`` when
    the scheduler did (Dask then cancels every future)."""
    deadline = time.monotonic() + TASK_TIMEOUT_S
    while True:
        try:
            return future.result(timeout=_LOOK_S)
        except TimeoutError:
            pass
        except Exception:
            if _lost_scheduler(client):
                raise SchedulerGone from None
            raise
        if _lost_scheduler(client):
            raise SchedulerGone
        signum = stopped()
        if signum is not None:
            raise Interrupted(signum)
        try:
            info = client.sync(
                client.scheduler.identity, n_workers=-1, callback_timeout=5
            )
            present = address in info["workers"]
        except Exception:
            present = True  # (the scheduler is slow: the deadline decides)
        if not present:
            raise HostGone("its Dask worker left the cluster")
        if time.monotonic() > deadline:
            raise HostGone(f"it did not answer in {TASK_TIMEOUT_S:.0f} s")


@dataclass(frozen=True, slots=True)
class FileId:
    """Where a file is: its machine and inode, and its size."""

    machine: str
    device: int
    inode: int
    size: int


def _machine() -> str:
    """This machine: its boot id where Linux gives one (two containers may
    share a host name), else its host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def file_id(path: str) -> FileId | None:
    """On a host: the identity of ``path``, None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return FileId(_machine(), st.st_dev, st.st_ino, st.st_size)


def read_chunk(path: str, offset: int, size: int) -> bytes:
    """On a host: up to ``size`` bytes of ``path`` from ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def _on(client: Any, address: str, stopped: Stopped, func: Any, *args: Any) -> Any:
    """``func(*args)`` as a task on the Dask worker at ``address`` only."""
    future = client.submit(
        func, *args, workers=[address], allow_other_workers=False, pure=False
    )
    try:
        result = _result(client, future, address, stopped)
    except BaseException:
        with suppress(Exception):  # (not left waiting in the scheduler)
            client.cancel([future])
        raise
    future.release()
    return result


def _copy(
    client: Any, address: str, source: str, target: Path, stopped: Stopped
) -> int:
    """Copy ``source`` on the host into ``target``; the bytes copied.

    The next chunk's task is submitted before the current one is written,
    so reading on the host and writing here overlap.
    """

    def submit(offset: int) -> Any:
        return client.submit(
            read_chunk,
            source,
            offset,
            CHUNK,
            workers=[address],
            allow_other_workers=False,
            pure=False,
        )

    copied = 0
    # never through a link planted in the collecting directory (another
    # user's, when it is shared): root would overwrite what it names
    fd = os.open(
        target,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o666,
    )
    with os.fdopen(fd, "wb") as out:
        future = submit(0)
        try:
            while True:
                data: bytes = _result(client, future, address, stopped)
                future.release()
                if not data:
                    return copied
                copied += len(data)
                future = submit(copied)
                out.write(data)
        except BaseException:
            with suppress(Exception):
                client.cancel([future])
            target.unlink()  # a part of it would pass for all of it
            raise


def collect_logs(
    client: Any,
    hosts: Sequence[tuple[str, Sequence[WorkerSpec]]],
    dest: str,
    err: TextIO,
    stopped: Stopped = lambda: None,
) -> bool:
    """Copy the -l files of every host ((its address, its workers' specs))
    into ``dest``; False when some could not be (said on ``err``), or when
    ``stopped`` says a signal came: the files not yet copied stay on the
    hosts (the report of the run must not wait for them)."""
    try:
        return _collect(client, hosts, dest, err, stopped)
    except (Interrupted, SchedulerGone) as e:
        why = (
            f"was interrupted by {signal.Signals(e.signum).name}"
            if isinstance(e, Interrupted)
            else "lost the Dask scheduler"
        )
        err.write(
            f"{PROG}: error: collecting the -l files {why}: those not yet "
            "collected stay on the hosts\n"
        )
        err.flush()
        return False


def _collect(
    client: Any,
    hosts: Sequence[tuple[str, Sequence[WorkerSpec]]],
    dest: str,
    err: TextIO,
    stopped: Stopped,
) -> bool:
    ok = True
    files = copied = 0
    here = _machine()
    for address, specs in hosts:
        gone: HostGone | None = None
        for spec in specs:
            source = log_path(spec.config.log_prefix, spec.parent_pid, spec.worker_id)
            target = Path(dest) / os.path.basename(source)
            try:
                if gone is not None:
                    raise gone
                where: FileId | None = _on(client, address, stopped, file_id, source)
                if where is None:
                    raise FileNotFoundError("no such file")
                if where.machine == here and _same_file(target, where):
                    files += 1  # the host wrote it here
                    continue
                copied += _copy(client, address, source, target, stopped)
                files += 1
            except (Interrupted, SchedulerGone):
                raise
            except Exception as e:
                if isinstance(e, HostGone):
                    gone = e
                ok = False
                why = (str(e) or type(e).__name__).splitlines()[0]
                err.write(
                    f'{PROG}: error: could not collect "{source}" from host '
                    f"{address}: {why}\n"
                )
    err.write(
        f'{PROG}: dask: {files} -l files in "{dest}" ({copied} bytes copied '
        "from the hosts)\n"
    )
    err.flush()
    return ok


def _same_file(target: Path, where: FileId) -> bool:
    try:
        st = target.lstat()
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (where.device, where.inode)
