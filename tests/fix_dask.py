"""Real Dask clusters for the multi-host tests: ``dask scheduler`` and
``dask worker`` processes on loopback, as a user starts them on their
machines, and pgsurge's command line run against them.

``Cluster`` starts them (each in its own process group, so that a test
can kill or stop a whole host) and finds the pgsurge worker processes a
host started (its Dask worker's children); ``cluster`` is a fixture of two
hosts; ``count_clients`` counts a run's backends (``application_name``
pgsurge) in ``pg_stat_activity``; ``start_run`` runs pgsurge in the
background, its stderr in a file, until the hosts have started; the
checks of a failed run (``assert_kept``: what the ``-P`` lines showed is
in the report and the JSON; ``assert_progress_honest``;
``wait_no_load``: no backend and no pgsurge worker left).
"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from pgsurge.report.json import load_schema

__all__ = [
    "SLACK_S",
    "Cluster",
    "TlsFiles",
    "assert_hosts_add_up",
    "assert_kept",
    "assert_progress_honest",
    "base_env",
    "cluster",
    "count_clients",
    "password_role",
    "pgsurge_cmd",
    "processed",
    "progress",
    "run_cli",
    "start_run",
    "wait_no_load",
]


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TlsFiles:
    """A self-signed CA and one certificate it signed for 127.0.0.1 (made
    with the openssl command), for a ``tls://`` cluster: the scheduler,
    the workers and the clients all present it."""

    def __init__(self, tmp: Path) -> None:
        self.ca, self.cert = tmp / "ca.pem", tmp / "node.pem"
        self.key = tmp / "node.key"
        ca_key, csr, ext = tmp / "ca.key", tmp / "node.csr", tmp / "san.cnf"
        ext.write_text("subjectAltName=IP:127.0.0.1\n")

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        openssl(
            *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(ca_key), "-out", str(self.ca)),
            *("-subj", "/CN=pgsurge test CA"),
        )
        openssl(
            *("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key)),
            *("-out", str(csr), "-subj", "/CN=127.0.0.1"),
        )
        openssl(
            *("x509", "-req", "-in", str(csr), "-CA", str(self.ca)),
            *("-CAkey", str(ca_key), "-CAcreateserial", "-days", "1"),
            *("-out", str(self.cert), "-extfile", str(ext)),
        )

    def dask_args(self) -> list[str]:
        return [
            *("--tls-ca-file", str(self.ca)),
            *("--tls-cert", str(self.cert), "--tls-key", str(self.key)),
        ]

    def env(self) -> dict[str, str]:
        """Dask's configuration for a client (pgsurge's coordinator)."""
        return {
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(self.ca),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(self.cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(self.key),
        }

    def security(self) -> Any:
        from distributed.security import Security

        return Security(
            tls_ca_file=str(self.ca),
            tls_client_cert=str(self.cert),
            tls_client_key=str(self.key),
            require_encryption=True,
        )


class Cluster:
    """``dask scheduler`` and ``dask worker --nthreads 1 --resources
    pgsurge=1`` processes on loopback, each in its own process group."""

    def __init__(
        self,
        tmp: Path,
        nworkers: int,
        tls: TlsFiles | None = None,
        worker_args: dict[int, list[str]] | None = None,
        #: a worker's command before ``-m dask`` (its interpreter's)
        worker_prefix: dict[int, list[str]] | None = None,
    ) -> None:
        scheme = "tcp" if tls is None else "tls"
        self.address = f"{scheme}://127.0.0.1:{free_port()}"
        self.tls = tls
        self.procs: list[subprocess.Popen[bytes]] = []
        port = self.address.rsplit(":", 1)[1]
        secure = [] if tls is None else [*tls.dask_args(), "--protocol", "tls"]
        self._start(
            tmp / "scheduler.log",
            [
                *("scheduler", "--host", "127.0.0.1", "--port", port),
                *("--no-dashboard", *secure),
            ],
        )
        self.workers = []
        #: each worker's working directory, as on a machine of its own
        self.dirs = [tmp / f"load{i}" for i in range(nworkers)]
        for i, cwd in enumerate(self.dirs):
            cwd.mkdir()
            self.workers.append(
                self._start(
                    tmp / f"worker{i}.log",
                    [
                        "worker",
                        self.address,
                        *("--nthreads", "1", "--resources", "pgsurge=1"),
                        *("--host", "127.0.0.1", "--no-dashboard"),
                        *("--name", f"load{i}"),
                        *([] if tls is None else tls.dask_args()),
                        *(worker_args or {}).get(i, []),
                    ],
                    cwd,
                    (worker_prefix or {}).get(i, []),
                )
            )
        self.logs = [
            tmp / "scheduler.log",
            *(tmp / f"worker{i}.log" for i in range(nworkers)),
        ]
        self._wait(nworkers)

    def _start(
        self,
        log: Path,
        args: list[str],
        cwd: Path | None = None,
        prefix: list[str] | None = None,
    ) -> subprocess.Popen[bytes]:
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                [*(prefix or [sys.executable]), "-m", "dask", *args],
                stdout=f,
                stderr=subprocess.STDOUT,
                env=base_env(),
                start_new_session=True,
                cwd=cwd,
            )
        self.procs.append(proc)
        return proc

    def _wait(self, nworkers: int) -> None:
        from distributed import Client

        security = None if self.tls is None else self.tls.security()
        with Client(self.address, timeout="30s", security=security) as client:
            client.wait_for_workers(nworkers, timeout=60)

    def kill_worker(self, index: int) -> None:
        os.killpg(self.workers[index].pid, signal.SIGKILL)

    def signal_host(self, index: int, sig: int) -> None:
        """``sig`` to a host's whole process group (its nanny, its Dask
        worker, its pgsurge workers)."""
        os.killpg(self.workers[index].pid, sig)

    def kill_scheduler(self) -> None:
        os.killpg(self.procs[0].pid, signal.SIGKILL)

    def host_processes(self, index: int) -> set[int]:
        """The children of host ``index``'s Dask worker process (the
        nanny's child): while a run goes on, its pgsurge workers."""
        out: set[int] = set()
        for worker in children(self.workers[index].pid):
            out |= children(worker)
        return out

    def load_processes(self) -> set[int]:
        out: set[int] = set()
        for index in range(len(self.workers)):
            out |= self.host_processes(index)
        return out

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 2)
    try:
        yield c
    finally:
        c.close()


def pgsurge_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgsurge", *args]


def run_cli(args: list[str], cwd: Path | None = None) -> tuple[int, str, str, int]:
    """pgsurge's exit status, stdout, stderr and process id (in -l names)."""
    with subprocess.Popen(
        pgsurge_cmd(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_env(),
        cwd=cwd,
    ) as proc:
        out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err, proc.pid


def count_clients(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
            " and application_name = 'pgsurge'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def wait_running_clients(
    dsn: str, count: int, proc: subprocess.Popen[Any], timeout: float = 60.0
) -> None:
    """Until ``count`` pgsurge sessions on ``dsn`` have each run a statement
    on ``pgbench_accounts`` (the run's clients are under way, the setup
    connection is not counted): the moment the hosts start, which a loaded
    box puts off well past the common start 2 s ahead of the ``dask:``
    line. ``proc`` (the coordinator) must not end meanwhile."""
    deadline = time.monotonic() + timeout
    running = -1
    while running != count:
        assert proc.poll() is None, f"the run ended with {running} clients under way"
        assert time.monotonic() < deadline, f"{running} clients under way"
        time.sleep(0.1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from pg_stat_activity"
                " where datname = current_database() and pid <> pg_backend_pid()"
                " and application_name = 'pgsurge'"
                " and query like '%pgbench_accounts%'"
            ).fetchone()
        assert row is not None
        running = int(row[0])


def committed(dsn: str) -> int:
    """The transactions committed in ``dsn``'s database so far, as the
    server's statistics show them (a backend reports at most once a second)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_stat_clear_snapshot()")
        row = conn.execute(
            "select xact_commit from pg_stat_database"
            " where datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def children(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.add(int(entry.name))
    return out


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` that still run (zombies do not)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


class Run:
    """pgsurge running in the background, its stderr in a file."""

    def __init__(self, args: list[str], tmp: Path, env: dict[str, str] | None = None):
        self.err_path = tmp / f"stderr{time.monotonic_ns()}"
        self.out_path = self.err_path.with_suffix(".out")
        with open(self.err_path, "w") as err, open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(
                pgsurge_cmd(*args),
                stdout=out,
                stderr=err,
                env=env or base_env(),
            )

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            assert self.proc.poll() is None, self.stderr
            assert time.monotonic() < deadline, self.stderr
            time.sleep(0.1)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


#: what a loaded 2-core box may add to any bound below
SLACK_S = 15.0

_PROGRESS = re.compile(r"^progress: ([^ ,]+) s, ([^ ]+) tps, lat ([^ ]+) ms", re.M)


def progress(stderr: str) -> list[tuple[float, float, float]]:
    """(label, tps, latency) of every -P line."""
    return [(float(a), float(b), float(c)) for a, b, c in _PROGRESS.findall(stderr)]


def processed(stdout: str) -> int:
    m = re.search(r"number of transactions actually processed: (\d+)", stdout)
    assert m is not None, stdout
    return int(m.group(1))


def assert_progress_honest(stderr: str) -> list[tuple[float, float, float]]:
    """Labels 1, 2, 3 ... strictly increasing (-P 1), no NaN or negative."""
    lines = progress(stderr)
    labels = [label for label, _, _ in lines]
    assert labels == [float(k) for k in range(1, len(labels) + 1)], stderr
    for _, tps, lat in lines:
        assert math.isfinite(tps) and tps >= 0, stderr
        assert math.isfinite(lat) and lat >= 0, stderr
    return lines


def assert_kept(stdout: str, stderr: str, doc: dict) -> None:
    """The report and the JSON hold at least what the -P lines showed
    (the document valid against the schema)."""
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    lines = assert_progress_honest(stderr)
    shown = sum(tps for _, tps, _ in lines)  # -P 1: one second each
    total = processed(stdout)
    assert total >= shown - len(lines), (total, shown, stderr)
    assert doc["totals"]["processed"] == total
    assert total > 0
    conn = re.search(r"initial connection time = ([0-9.]+) ms", stdout)
    assert conn is not None and float(conn.group(1)) > 0, stdout


def assert_hosts_add_up(doc: dict) -> None:
    """The hosts' own figures add up to the run's."""
    hosts = doc["hosts"]
    assert sum(h["transactions"] for h in hosts) == doc["totals"]["processed"], hosts
    assert sum(h["failed"] for h in hosts) == doc["totals"]["failed"], hosts
    assert sum(h["clients"] for h in hosts) == doc["config"]["clients"], hosts
    if doc.get("intervals"):
        # the series, the run's histogram and each host's: the same count
        processed = doc["totals"]["processed"]
        assert sum(iv["transactions"] for iv in doc["intervals"]) == processed
        assert doc["histograms"]["latency"]["count"] == processed
        for h in hosts:
            assert h["latency_histogram"]["count"] == h["transactions"], h


def wait_no_load(dsn: str, procs: set[int], since: float, bound_s: float) -> None:
    """No backend of the run and none of its pgsurge workers, by
    ``since + bound_s``."""
    while count_clients(dsn) or alive(procs):
        assert time.monotonic() < since + bound_s, (
            count_clients(dsn),
            alive(procs),
        )
        time.sleep(0.2)


def start_run(args: list[str], tmp: Path, env: dict[str, str] | None = None) -> Run:
    """pgsurge started in the background, once its hosts are under way
    (the ``dask:`` line: the common start is 2 s ahead)."""
    run = Run(args, tmp, env)
    try:
        run.wait_for("pgsurge: dask: host")
    except BaseException:
        run.kill()
        raise
    return run


@pytest.fixture
def password_role(server_dsn: str) -> Iterator[tuple[str, str]]:
    """A superuser role that must give its password (scram) on the test
    server's Unix socket: a line of its own in pg_hba.conf (the others
    keep theirs), taken out after."""
    from psycopg import sql

    role, password = f"t_dask_{os.getpid()}_{time.monotonic_ns() % 10**6}", "k9:dask'pw"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        row = conn.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba = Path(str(row[0]))
        assert os.access(hba, os.W_OK), f"{hba} is not writable"
        saved = hba.read_text()
        hba.write_text(f"local all {role} scram-sha-256\n{saved}")
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        conn.execute("SELECT pg_reload_conf()")
        # (the reload is asynchronous: until the server has read the line)
        deadline = time.monotonic() + 30
        while conn.execute(
            "select count(*) from pg_hba_file_rules where %s = any(user_name)",
            [role],
        ).fetchone() != (1,) or _trusted(server_dsn, role):
            assert time.monotonic() < deadline, "pg_hba.conf was not reloaded"
            time.sleep(0.2)
        try:
            yield role, password
        finally:
            hba.write_text(saved)
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _trusted(dsn: str, role: str) -> bool:
    """Whether ``role`` connects without a password."""
    try:
        psycopg.connect(dsn, user=role, password="").close()
    except psycopg.OperationalError:
        return False
    return True
