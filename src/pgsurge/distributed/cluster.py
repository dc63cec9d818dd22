"""The coordinator's side of a Dask cluster, apart from the run itself.

Connecting to the scheduler (``local:N``: starting a local cluster on
loopback), finding the load hosts (the Dask workers that offer the
``pgsurge`` resource), measuring a host's clock offset through the
scheduler, quieting Dask's own log lines while a run goes on, and, after
the run, the hosts' ``-l`` files (``logs``).
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TextIO

from pgsurge.distributed.host import monotonic_us
from pgsurge.distributed.logs import collect_logs
from pgsurge.distributed.plan import ClockProbe, HostInfo, best_offset
from pgsurge.distributed.signals import Signals
from pgsurge.engine.worker import WorkerSpec
from pgsurge.errors import PROG, PgsurgeError

__all__ = [
    "LOCAL_CLUSTER_CONFIG",
    "WORKER_HINT",
    "clear_text_peers",
    "client_of",
    "host_of",
    "load_hosts",
    "logs_after_run",
    "probe",
]

#: clock probes per host (the one with the smallest round trip is kept)
CLOCK_PROBES = 5

#: a local cluster shares this machine with the load: its worker processes
#: must be allowed to have children (pgsurge's workers), and Dask's own
#: periodic chores that a pgsurge run does not need are off or rarer (the
#: statistical profiler samples a busy task's thread 100 times a second)
LOCAL_CLUSTER_CONFIG: dict[str, Any] = {
    "distributed.worker.daemon": False,
    "distributed.worker.profile.enabled": False,
    "distributed.scheduler.work-stealing": False,
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.admin.system-monitor.disk": False,
    "distributed.admin.tick.interval": "500ms",
    "distributed.worker.memory.monitor-interval": "1s",
}

WORKER_HINT = (
    "Start each load host with: dask worker tcp://SCHEDULER:8786 "
    "--nthreads 1 --resources pgsurge=1"
)
INSTALL_COMMAND = "pip install 'pgsurge[dask]'"
#: how long the hosts may take to say whether they have pgsurge
CHECK_TIMEOUT_S = 10.0


@contextmanager
def client_of(address: str) -> Iterator[Any]:
    """A Dask client of ``address`` (``local:N``: of a new local cluster,
    closed at the end)."""
    import dask
    from distributed import Client, LocalCluster

    cluster = None
    quiet = quiet_dask_logs()
    try:
        if address.startswith("local:"):
            nworkers = int(address.removeprefix("local:"))
            with dask.config.set(LOCAL_CLUSTER_CONFIG), _no_ctrl_c_for_children():
                cluster = LocalCluster(
                    n_workers=nworkers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    worker_dashboard_address=None,
                    # the scheduler's HTTP server starts whatever the
                    # dashboard: on 8787 by default, and when another
                    # cluster holds that, Dask printed its "Port 8787 is
                    # already in use" warning (4 lines) among the run's
                    scheduler_kwargs={
                        "dashboard": False,
                        "dashboard_address": "127.0.0.1:0",
                    },
                    resources={"pgsurge": 1},
                )
            client = Client(cluster)
            client.wait_for_workers(nworkers)
        else:
            if address.startswith("tls://"):
                _check_tls_settings()
            else:
                _answers_as_dask(address, CONNECT_TIMEOUT_S)
            client = Client(address, timeout=f"{CONNECT_TIMEOUT_S:g}s")
    except (OSError, TimeoutError) as e:
        if cluster is not None:
            cluster.close()
        quiet()
        raise PgsurgeError(
            f'could not connect to the Dask scheduler "{address}": {e}'
        ) from None
    except PgsurgeError:
        quiet()
        raise
    except Exception as e:
        # what answered is not a Dask scheduler after all (a reply that
        # decodes as a frame length of exabytes: a MemoryError, a msgpack
        # error): one line, as for a scheduler that is not there
        if cluster is not None:
            with suppress(Exception):
                cluster.close()
        quiet()
        raise PgsurgeError(
            f'could not connect to the Dask scheduler "{address}": what answered '
            f"is not a Dask scheduler ({type(e).__name__})"
        ) from None
    try:
        yield client
    finally:
        with suppress(Exception):
            client.close(timeout=2)
        if cluster is not None:
            with suppress(Exception):
                cluster.close()
        quiet()


#: how long the coordinator waits for the scheduler (Dask's connect
#: timeout, and the wait for its first bytes)
CONNECT_TIMEOUT_S = 10.0

#: a Dask message's first 8 bytes are the length of what follows: a
#: handshake is a few hundred bytes; text read as that length is exabytes
_MAX_FIRST_FRAME = 64 << 20

NOT_DASK_HINT = (
    "Give the scheduler's own port (8786 by default; 8787 is its dashboard), "
    "and tls:// for a scheduler that speaks TLS"
)


def _answers_as_dask(address: str, timeout_s: float) -> None:
    """Whether a ``tcp://`` address speaks Dask, before Dask is let at it.
    A Dask scheduler sends its handshake as soon as it accepts; Dask's
    client waits for it with no deadline, so a port that accepts and says
    nothing (a PostgreSQL server, which waits for its startup packet; the
    dashboard's HTTP port) hung the run for ever, and one that says
    something else (an SSH banner) made Dask allocate exabytes and die in
    a traceback. A refused or unreachable address is left to Dask's own
    connect, which retries and says so."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address)
        host, port = parse_host_port(loc)
    except ValueError:
        return  # Dask's connect reports it
    if scheme != "tcp":
        return
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return  # refused, unreachable: Dask's connect retries and says so
    head = b""
    with sock:
        try:
            while len(head) < 8:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    raise PgsurgeError(
                        f'could not connect to the Dask scheduler "{address}": it '
                        "closed the connection without a word: not a Dask scheduler",
                        hint=NOT_DASK_HINT,
                    )
                head += chunk
        except TimeoutError:
            raise PgsurgeError(
                f'could not connect to the Dask scheduler "{address}": it accepted '
                f"the connection but said nothing in {timeout_s:g} s: not a Dask "
                "scheduler",
                hint=NOT_DASK_HINT,
            ) from None
        except OSError:
            return  # reset: Dask's connect says so
    (length,) = struct.unpack("Q", head)  # as Dask packs it
    if length > _MAX_FIRST_FRAME:
        raise PgsurgeError(
            f'could not connect to the Dask scheduler "{address}": what answered '
            "is not a Dask scheduler",
            hint=NOT_DASK_HINT,
        )


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Before the run touches its target (the setup connection, the pre-run
    vacuum): whether the scheduler at ``address`` (``tcp://`` or ``tls://``
    HOST:PORT) accepts a connection, retried for ``timeout_s`` as Dask's
    own connect retries it (a scheduler still starting); a ``tcp://`` one
    must also speak Dask (:func:`_answers_as_dask`). A scheduler that is not
    there was found only when the hosts were sought, after the target had
    been vacuumed (hostile finding). ``local:N`` has nothing to check."""
    if address.startswith("local:"):
        return
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address)
        host, port = parse_host_port(loc)
    except ValueError:
        return  # Dask's connect reports it
    if scheme not in ("tcp", "tls"):
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(
                (host, port), timeout=max(0.05, deadline - time.monotonic())
            ).close()
            break
        except OSError as e:
            if time.monotonic() >= deadline:
                raise PgsurgeError(
                    f'could not connect to the Dask scheduler "{address}": '
                    f"{e.strerror or e}"
                ) from None
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    if scheme == "tcp":
        _answers_as_dask(address, timeout_s)


TLS_HINT = (
    "Give the coordinator Dask's TLS settings, e.g. "
    "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT "
    "and DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY (or distributed.comm.tls in "
    "Dask's configuration)"
)


def _check_tls_settings() -> None:
    """A ``tls://`` scheduler needs a CA and a client certificate from
    Dask's configuration (``Security()`` reads it): one error line when
    they are missing (Dask would raise a TypeError)."""
    from distributed.security import Security

    sec = Security()
    if not (
        getattr(sec, "tls_ca_file", None) and getattr(sec, "tls_client_cert", None)
    ):
        raise PgsurgeError(
            "a tls:// Dask scheduler needs Dask's TLS settings, which are not set",
            hint=TLS_HINT,
        )


@contextmanager
def _no_ctrl_c_for_children() -> Iterator[None]:
    """A local cluster's worker processes share the terminal's process
    group: Ctrl-C would kill them (a KeyboardInterrupt in Dask's worker,
    every host lost). Started while SIGINT is ignored, they keep ignoring
    it (Python installs its handler only when SIGINT is not ignored at
    start-up); the coordinator stops them as it stops remote hosts, and
    their pgsurge workers catch Ctrl-C as a local run's do."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def quiet_dask_logs() -> Callable[[], None]:
    """Dask's own log lines (a lost connection's, a closing client's) off
    the coordinator's stderr while it runs: what went wrong is said in
    pgsurge's words. The function puts the levels back."""
    import logging

    # (Dask's configuration gives some of its loggers levels of their own)
    loggers = [
        logging.getLogger(n)
        for n in [*logging.root.manager.loggerDict, "distributed"]
        if n.split(".")[0] in ("distributed", "tornado", "asyncio")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)

    def restore() -> None:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)

    return restore


def load_hosts(client: Any) -> list[tuple[str, str]]:
    """(address, name) of every Dask worker offering the pgsurge resource,
    those not busy with another run's host task first."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    hosts = [
        (addr, str(info.get("name", addr)))
        for addr, info in workers.items()
        if (info.get("resources") or {}).get("pgsurge", 0) >= 1
    ]
    if not hosts:
        raise PgsurgeError(
            f"no Dask worker offers the pgsurge resource ({len(workers)} workers)",
            hint=WORKER_HINT,
        )
    # the hosts another run holds last: a run that needs fewer hosts than
    # there are takes free ones rather than wait for busy ones
    try:
        processing = client.processing()
    except Exception:
        processing = {}
    busy = {
        addr
        for addr, keys in processing.items()
        if any(str(k).startswith("pgsurge-") for k in keys)
    }
    return sorted(hosts, key=lambda h: (h[0] in busy, h))


def check_pgsurge(client: Any, hosts: Sequence[tuple[str, str]]) -> None:
    """Fail (status 1) when pgsurge cannot be imported on one of ``hosts``
    ((address, name)): its Dask worker could not even read its task (Dask
    drops the worker's connection over it, and the host would only look
    lost). Asked with the standard library's own ``find_spec``, which every
    worker can run; a host that does not answer in time is left to the
    run's own watch."""
    import importlib.util

    try:
        found = client.run(
            importlib.util.find_spec,
            "pgsurge",
            workers=[address for address, _ in hosts],
            on_error="return",
            callback_timeout=CHECK_TIMEOUT_S,
        )
    except Exception:
        return
    missing = [
        f"{name} ({address})"
        for address, name in hosts
        if address in found
        and (found[address] is None or isinstance(found[address], BaseException))
    ]
    if missing:
        raise PgsurgeError(
            f"pgsurge cannot be imported on the Dask worker"
            f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
            hint="Install it there, the same version on every load host: "
            + INSTALL_COMMAND,
        )


def probe(client: Any, address: str) -> ClockProbe:
    probes = []
    for _ in range(CLOCK_PROBES):
        sent = monotonic_us()
        host_us = client.run(monotonic_us, workers=[address])[address]
        probes.append(ClockProbe(sent, int(host_us), monotonic_us()))
    return best_offset(probes)


def logs_after_run(
    client: Any,
    address: str,
    hosts: Sequence[HostInfo],
    groups: Sequence[Sequence[WorkerSpec]],
    err: TextIO,
) -> None:
    """-l: bring the hosts' files back (--dask-collect-logs), or say where
    they are (a local cluster writes them in our working directory)."""
    dest = groups[0][0].config.dask_collect_logs
    for host in hosts:
        if host.lost:
            err.write(
                f"{PROG}: error: the -l files of host {host.index} "
                f"({host.address}) stay on it: it was lost\n"
            )
    kept = [
        (h.address, group)
        for h, group in zip(hosts, groups, strict=False)
        if not h.lost
    ]
    if dest is not None:
        # a signal stops the copy (a slow link, a host that hangs): the
        # run's report, which follows, must not wait for the files
        with Signals() as signals:
            received = signals.received
            collect_logs(
                client, kept, dest, err, lambda: received[0] if received else None
            )
    elif not address.startswith("local:"):
        err.write(
            f"{PROG}: dask: the -l files are on the hosts, in each Dask worker's "
            "working directory (--dask-collect-logs DIR brings them here)\n"
        )
    err.flush()


def clear_text_peers(address: str, hosts: Sequence[str]) -> list[str]:
    """The scheduler and hosts of a plain ``tcp://`` cluster that are on
    another machine: a password in the tasks' arguments would reach them
    in clear (``tls://`` encrypts it; ``local:N`` stays on loopback)."""
    if not address.startswith("tcp://"):
        return []
    mine = _local_addresses()
    return [a for a in [address, *hosts] if not _is_local(host_of(a), mine)]


def host_of(address: str) -> str:
    """The host part of a Dask address (``tcp://[::1]:8786``: ``::1``)."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return host.removeprefix("[").removesuffix("]")


def _local_addresses() -> set[str]:
    """This machine's addresses (as its host name resolves)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


def _is_local(host: str, mine: set[str]) -> bool:
    if host == "localhost" or host in mine:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return _is_local(socket.gethostbyname(host), mine)
    except OSError:
        return False
