"""A load host in a network namespace, behind a link the test controls.

This kernel has no ``netem``, so the link is a userspace TCP relay:
:class:`Link` listens on the root namespace's end of a veth pair and
forwards each connection; it can add a delay to every byte, stall (stop
reading and forwarding: a partition, where packets vanish and the
connections hang) or cut (close every connection and every new one: the
peer is gone). Everything the namespaced host exchanges goes through it:
its Dask worker's connections to the scheduler, the scheduler's (and the
coordinator's results') connections to the worker (its contact address is
a relay port), and its clients' connections to PostgreSQL (the embedded
server's Unix socket, or the test server's TCP address, behind a relay
port). A connection that does not come from the namespace (the root
namespace's own hosts reach PostgreSQL through the same port, as every
host of a run connects with the same parameters) passes unimpaired.

:class:`NetnsCluster` is ``tests.fix_dask.Cluster``'s scheduler with one
host on loopback (``load0``) and one in a namespace (``load1``, started
with ``ip netns exec``). Names (namespace, interfaces) are unique per
test and per process, the subnet is one no interface uses, and
everything is taken down after the test, whatever happened (and a
previous test process's leftovers when its process is gone). Needs root
and ``ip``; a test fails, never skips, without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.fix_dask import Cluster, base_env

__all__ = ["Link", "Namespace", "NetnsCluster", "netns_cluster"]

#: every name this module gives starts so (interface names: 15 bytes)
PREFIX = "pgsn"
#: what crosses the link: the Dask connections, the PostgreSQL ones
KINDS = ("dask", "pg")
_counter = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, check=check, timeout=30
    )


def _sweep_leftovers() -> None:
    """Namespaces and interfaces of test processes that no longer run (a
    test process killed before its clean-up)."""
    names = _ip("netns", "list", check=False).stdout.split()
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in _ip("-o", "link", "show", check=False).stdout.splitlines()
    ]
    for name in names + links:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("_")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            if name in names:
                _kill_namespace_processes(name)
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)


def _kill_namespace_processes(name: str) -> None:
    for pid in _ip("netns", "pids", name, check=False).stdout.split():
        with contextlib.suppress(OSError):
            os.kill(int(pid), signal.SIGKILL)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 in 10.240.0.0/12 that no interface's address lies in."""
    used = []
    for line in _ip("-o", "-4", "addr", "show", check=False).stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            used.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]))
    pool = ipaddress.ip_network("10.240.0.0/12")
    for _ in range(1000):
        net = ipaddress.ip_network(
            (
                int(pool.network_address)
                + 4 * random.randrange(pool.num_addresses // 4),
                30,
            )
        )
        if not any(u.network.overlaps(net) for u in used):
            return net
    raise AssertionError("no free /30 in 10.240.0.0/12")


class Namespace:
    """A network namespace joined to the root one by a veth pair:
    ``outer`` (root side) and ``inner`` (its side) addresses of a /30."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise AssertionError("network namespaces need root (ip netns)")
        _sweep_leftovers()
        self.name = f"{PREFIX}{os.getpid()}_{next(_counter)}"
        self.veth_out, self.veth_in = f"{self.name}o", f"{self.name}i"
        assert len(self.veth_out) <= 15, self.veth_out
        net = _free_subnet()
        self.outer, self.inner = (str(a) for a in list(net.hosts())[:2])
        created = False
        try:
            _ip("netns", "add", self.name)
            created = True
            _ip(
                "link",
                "add",
                self.veth_out,
                "type",
                "veth",
                "peer",
                "name",
                self.veth_in,
            )
            _ip("link", "set", self.veth_in, "netns", self.name)
            _ip("addr", "add", f"{self.outer}/30", "dev", self.veth_out)
            _ip("link", "set", self.veth_out, "up")
            inside = ("netns", "exec", self.name, "ip")
            _ip(*inside, "addr", "add", f"{self.inner}/30", "dev", self.veth_in)
            _ip(*inside, "link", "set", self.veth_in, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            if created:
                self.close()
            else:
                _ip("link", "del", self.veth_out, check=False)
            raise

    def exec_args(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *args]

    def pids(self) -> set[int]:
        """Every process in the namespace."""
        out = _ip("netns", "pids", self.name, check=False).stdout.split()
        return {int(p) for p in out}

    def close(self) -> None:
        _kill_namespace_processes(self.name)
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.veth_out, check=False)


@dataclass(frozen=True)
class _Route:
    listen: tuple[str, int]
    #: ("tcp", host, port) or ("unix", path)
    target: tuple[str, ...]
    #: every connection of the route crosses the link (towards the
    #: namespace); else only those from ``Link.peer``
    inbound: bool
    #: what it carries ("dask" or "pg"): the controls may pick
    kind: str


class Link:
    """The userspace relay: delay, stall, cut (see the module docstring).

    Runs an asyncio loop in a daemon thread; the controls are thread-safe.
    """

    def __init__(self, peer: str) -> None:
        #: the namespace's address: its connections cross the link
        self.peer = peer
        self.delay_s = 0.0
        self.loop = asyncio.new_event_loop()
        self._flowing: dict[str, asyncio.Event] = {}
        self._cut: set[str] = set()
        self._conns: dict[str, set[asyncio.StreamWriter]] = {k: set() for k in KINDS}
        self._servers: list[asyncio.base_events.Server] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._init)

    async def _init(self) -> None:
        for kind in KINDS:
            self._flowing[kind] = asyncio.Event()
            self._flowing[kind].set()

    def _call(self, coro_fn: object, *args: object, timeout: float = 30) -> object:
        fut = asyncio.run_coroutine_threadsafe(coro_fn(*args), self.loop)  # type: ignore[operator]
        return fut.result(timeout)

    # -- routes ------------------------------------------------------------

    def add(
        self,
        kind: str,
        listen_host: str,
        target: tuple[str, ...],
        inbound: bool = False,
    ) -> int:
        """A listening port on ``listen_host`` forwarding to ``target``;
        its port number."""
        return int(self._call(self._add, kind, listen_host, target, inbound))  # type: ignore[arg-type]

    async def _add(
        self, kind: str, host: str, target: tuple[str, ...], inbound: bool
    ) -> int:
        route_box: list[_Route] = []

        async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await self._serve(route_box[0], r, w)

        server = await asyncio.start_server(accept, host, 0)
        port = int(server.sockets[0].getsockname()[1])
        route_box.append(_Route((host, port), target, inbound, kind))
        self._servers.append(server)
        return port

    async def _serve(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        crossing = route.inbound or writer.get_extra_info("peername")[0] == self.peer
        kind = route.kind
        if crossing and kind in self._cut:
            writer.transport.abort()
            return
        try:
            if route.target[0] == "unix":
                up_r, up_w = await asyncio.open_unix_connection(route.target[1])
            else:
                up_r, up_w = await asyncio.open_connection(
                    route.target[1], int(route.target[2])
                )
        except OSError:
            writer.transport.abort()
            return
        flowing = self._flowing[kind] if crossing else None
        if crossing:
            self._conns[kind] |= {writer, up_w}
        try:
            await asyncio.gather(
                self._pump(reader, up_w, flowing), self._pump(up_r, writer, flowing)
            )
        finally:
            self._conns[kind] -= {writer, up_w}
            for w in (writer, up_w):
                w.transport.abort()

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        flowing: asyncio.Event | None,
    ) -> None:
        """Bytes from ``src`` to ``dst``; across the link (``flowing``
        given) each chunk held ``delay_s`` after it was read (in order: a
        queue), none moved while stalled."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                if flowing is not None:
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    await flowing.wait()
                dst.write(data)
                await dst.drain()
            with contextlib.suppress(OSError):
                dst.write_eof()

        writer_task = asyncio.ensure_future(forward())
        try:
            while True:
                if flowing is not None:
                    await flowing.wait()
                try:
                    data = await src.read(65536)
                except OSError:
                    data = b""
                due = time.monotonic() + (self.delay_s if flowing is not None else 0.0)
                await queue.put((due, data))
                if not data:
                    break
            await writer_task
        except (OSError, asyncio.CancelledError):
            writer_task.cancel()
            raise

    # -- controls ----------------------------------------------------------

    def set_delay(self, seconds: float) -> None:
        """Every byte read from now on is forwarded ``seconds`` later."""
        self.loop.call_soon_threadsafe(setattr, self, "delay_s", seconds)

    def stall(self, kinds: tuple[str, ...] = KINDS) -> None:
        """Nothing of ``kinds`` crosses any more (connections stay open,
        unread: a partition)."""
        self._call(self._set_flowing, kinds, False)

    def resume(self, kinds: tuple[str, ...] = KINDS) -> None:
        """Bytes cross again (held ones first); new connections are taken."""
        self._call(self._set_flowing, kinds, True)

    def cut(self, kinds: tuple[str, ...] = KINDS) -> None:
        """Every connection of ``kinds`` across the link closed (reset),
        and each new one as it comes."""
        self._call(self._cut_all, kinds)

    async def _set_flowing(self, kinds: tuple[str, ...], flowing: bool) -> None:
        for kind in kinds:
            if flowing:
                self._cut.discard(kind)
                self._flowing[kind].set()
            else:
                self._flowing[kind].clear()

    async def _cut_all(self, kinds: tuple[str, ...]) -> None:
        for kind in kinds:
            self._cut.add(kind)
            for w in list(self._conns[kind]):
                w.transport.abort()

    def close(self) -> None:
        async def shut() -> None:
            for server in self._servers:
                server.close()
            for conns in self._conns.values():
                for w in list(conns):
                    w.transport.abort()

        with contextlib.suppress(Exception):
            self._call(shut, timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class NetnsCluster(Cluster):
    """A scheduler on loopback, ``load0`` on loopback and ``load1`` in a
    network namespace behind :attr:`link`; :attr:`dsn` reaches PostgreSQL
    from both (through the link's relay port)."""

    def __init__(self, tmp: Path, server_dsn: str, dbname: str) -> None:
        self.ns = Namespace()
        self.link = Link(self.ns.inner)
        self.procs = []
        try:
            super().__init__(tmp, 1)
            self._start_namespaced(tmp)
            self.dsn = self._pg_route(server_dsn, dbname)
            self._wait(2)
        except BaseException:
            self.close()
            raise

    def _start_namespaced(self, tmp: Path) -> None:
        ns, link = self.ns, self.link
        sched_port = int(self.address.rsplit(":", 1)[1])
        to_sched = link.add("dask", ns.outer, ("tcp", "127.0.0.1", str(sched_port)))
        inner_port = random.randrange(20000, 60000)  # (the namespace is empty)
        contact = link.add(
            "dask", ns.outer, ("tcp", ns.inner, str(inner_port)), inbound=True
        )
        cwd = tmp / "load1"
        cwd.mkdir()
        self.dirs.append(cwd)
        log = tmp / "worker1.log"
        self.logs.append(log)
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                ns.exec_args(
                    sys.executable,
                    *("-m", "dask", "worker", f"tcp://{ns.outer}:{to_sched}"),
                    *("--nthreads", "1", "--resources", "pgsurge=1"),
                    *("--no-dashboard", "--name", "load1"),
                    *("--listen-address", f"tcp://{ns.inner}:{inner_port}"),
                    *("--contact-address", f"tcp://{ns.outer}:{contact}"),
                ),
                stdout=f,
                stderr=subprocess.STDOUT,
                env=base_env(),
                start_new_session=True,
                cwd=cwd,
            )
        self.procs.append(proc)
        self.workers.append(proc)
        #: the namespaced host's address, as the scheduler knows it
        self.ns_address = f"tcp://{ns.outer}:{contact}"

    def _pg_route(self, server_dsn: str, dbname: str) -> str:
        params = psycopg.conninfo.conninfo_to_dict(server_dsn)
        host, port = str(params.get("host") or "/tmp"), str(params.get("port") or 5432)
        if host.startswith("/"):
            target: tuple[str, ...] = ("unix", f"{host}/.s.PGSQL.{port}")
        else:
            target = ("tcp", host, port)
        relay = self.link.add("pg", self.ns.outer, target)
        params.update(host=self.ns.outer, port=str(relay), dbname=dbname)
        params.pop("hostaddr", None)
        return psycopg.conninfo.make_conninfo(**params)

    def namespace_load(self) -> set[int]:
        """The processes in the namespace but its Dask nanny and worker:
        while a run goes on, the namespaced host's pgsurge workers.

        Each process is judged by its own ``stat``, read once: a Dask worker
        that the nanny restarts (the link cut, it cannot reach the
        scheduler) may exit between a listing of the namespace and a listing
        of the nanny's children, and a zombie holds no load (CI finding: a
        restarted worker counted as load)."""
        nanny = self.workers[1].pid
        out = set()
        for pid in self.ns.pids() - {nanny}:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue  # gone
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] in ("Z", "X") or int(fields[1]) == nanny:
                continue
            out.add(pid)
        return out

    def describe(self, pids: set[int]) -> str:
        """``pids`` with their command lines, for an assertion's message."""
        lines = []
        for pid in sorted(pids):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                lines.append(f"{pid}: gone")
                continue
            lines.append(f"{pid} ({stat[0]}, parent {stat[1]}): {cmd.decode()[:200]}")
        return "\n".join(lines)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.link.resume()
        try:
            super().close()
        finally:
            self.link.close()
            self.ns.close()


@pytest.fixture
def netns_cluster(
    tmp_path: Path, server_dsn: str, bench_db: str
) -> Iterator[NetnsCluster]:
    dbname = psycopg.conninfo.conninfo_to_dict(bench_db)["dbname"]
    c = NetnsCluster(tmp_path, server_dsn, str(dbname))
    try:
        yield c
    finally:
        c.close()
