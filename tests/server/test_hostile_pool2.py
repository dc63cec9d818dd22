"""Hostile runs of issue 25's multi-host and pooler insight, third pass.

* ``host=primary,standby --reconnect`` through a failover: the first
  host goes away mid-run (its connections cut, its socket gone), every
  client reconnects to the second. Before, each client's transactions
  were all counted on the server it first connected to: every client had
  started on the first host, so the run "reached one server" and had no
  per-server figures, though most of its transactions ran on the second.
  Now each server counts the transactions that ran on it.
* ``--reconnect`` without ``connect_timeout``, the server gone silent
  after a cut (it accepts connections and never answers): the run never
  ended, its clients waiting in CONNECTING for an answer past -T. Now
  -T's end gives the attempt up and the client finishes.
* ``-C`` with ``host=a,b load_balance_hosts=random`` and ``--server-stats``
  (or ``--waits``): the clients' servers are not followed under -C, and
  the monitor, one connection to one of the hosts, divided that server's
  counters by every server's transactions without a word (the same run
  without -C says so). Now a warning names the server it watched.
* ``--monitor`` of a run on several hosts was not checked at all (the
  check that it reaches the run's database on the run's server was for
  one host): a monitor on another database, or on a server that is none
  of the run's, was taken, its samples and counters reported as the
  run's. Now it must reach the run's database on one of its servers.
* ``--monitor DSN`` or ``--pooler-admin DSN`` naming a server that
  accepts and never answers (a wrong port, a host gone silent), with no
  ``connect_timeout``: the run waited before its start, forever. Their
  connections now give up after a bound (15 s; 1 s in the tests).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgsurge.report.json import load_schema
from tests.fix_pooler import Pooler
from tests.fix_run import (
    PGSURGE,
    UnixRelay,
    communicate_or_kill,
    run_pgsurge,
    tool_env,
)

pytestmark = pytest.mark.server

VALIDATOR = jsonschema.Draft202012Validator(load_schema())


class _FailsOver(UnixRelay):
    """A relay that forwards until its clients have sent ``limit`` bytes,
    then fails as a primary does: every connection cut and, unless
    ``hang``, its socket removed (a reconnection goes on to the next
    host); with ``hang`` it goes on accepting connections and never
    answers them (a host that went silent). The cut comes from the
    traffic itself, not from a timer."""

    def __init__(
        self, dsn: str, directory: Path, limit: int, *, hang: bool = False
    ) -> None:
        self.limit = limit
        self.hang = hang
        self.sent = 0
        self.gone = threading.Event()
        super().__init__(dsn, directory)

    def serve(self, client: socket.socket) -> None:
        if self.gone.is_set():
            return  # hung: accepted, never answered (closed by close())
        server = self.connect()
        threading.Thread(target=self._back, args=(server, client), daemon=True).start()
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                server.sendall(data)
                with self.lock:
                    self.sent += len(data)
                    cut = self.sent >= self.limit and not self.gone.is_set()
                    if cut:
                        self.gone.set()
                if cut:
                    self._cut()
                    return

    def _cut(self) -> None:
        if not self.hang:
            self.close()
            return
        with self.lock:
            socks = list(self.socks)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _back(server: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                client.sendall(data)

    def then_server(self, dsn: str) -> str:
        """``dsn`` with two hosts: this relay first, then the server."""
        params = conninfo_to_dict(dsn)
        return make_conninfo(
            dsn,
            host=f"{self.path.parent},{params['host']}",
            port=f"5432,{params.get('port') or 5432}",
        )


def test_reconnect_to_another_host_counts_there(bench_db: str, tmp_path: Path) -> None:
    relay = _FailsOver(bench_db, tmp_path, limit=8000)
    dsn = relay.then_server(bench_db)
    path = tmp_path / "result.json"
    args = ["-n", "-S", "-c", "4", "-j", "2", "-t", "300", "--reconnect"]
    try:
        # (--reconnect runs on the Python engine)
        out = run_pgsurge([*args, f"--json={path}"], dsn, cwd=tmp_path)
    finally:
        relay.close()
    assert relay.gone.is_set()  # the first host went away mid-run
    assert out.status == 0, out.stderr
    assert out.stderr.count("reconnected after") == 4, out.stderr
    doc: dict[str, Any] = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    processed = doc["totals"]["processed"]
    assert processed > 0
    by = {t["target"].split(":")[0]: t for t in doc.get("targets", [])}
    first, second = str(tmp_path), str(conninfo_to_dict(bench_db)["host"])
    assert sorted(by) == sorted([first, second]), doc.get("targets")
    # the transactions where they ran: some on the first before it went,
    # the rest on the second; the clients where they ended
    assert by[first]["transactions"] > 0, by
    assert by[second]["transactions"] > 0, by
    assert by[first]["transactions"] + by[second]["transactions"] == processed
    assert (by[first]["clients"], by[second]["clients"]) == (0, 4), by
    line = next(ln for ln in out.stderr.splitlines() if "reached 2 servers" in ln)
    assert "4 reconnections went to another server" in line, line


def _both(dsn: str, directory: Path) -> tuple[UnixRelay, str]:
    """A relay in ``directory`` and a conninfo of it and the server, the
    clients spread over the two at random."""
    relay = UnixRelay(dsn, directory)
    params = conninfo_to_dict(dsn)
    return relay, make_conninfo(
        dsn,
        host=f"{directory},{params['host']}",
        port=f"5432,{params.get('port') or 5432}",
        load_balance_hosts="random",
    )


def test_monitor_of_connect_each_over_several_hosts_says_it_sees_one(
    bench_db: str, tmp_path: Path
) -> None:
    relay, dsn = _both(bench_db, tmp_path)
    args = ["-n", "-S", "-C", "-c", "2", "-t", "20", "--server-stats", "--waits=50"]
    try:
        out = run_pgsurge(args, dsn, cwd=tmp_path)
        single = run_pgsurge(args, bench_db, cwd=tmp_path)
    finally:
        relay.close()
    assert out.status == 0, out.stderr
    said = [ln for ln in out.stderr.splitlines() if "names several hosts" in ln]
    assert len(said) == 1, out.stderr
    assert "the monitor watches one (" in said[0], said
    # one host: nothing of the kind
    assert single.status == 0, single.stderr
    assert "several hosts" not in single.stderr


def test_T_ends_while_a_reconnection_hangs(bench_db: str, tmp_path: Path) -> None:
    """--reconnect, no connect_timeout: the server's connections are cut
    mid-run and it then accepts connections without ever answering (a
    host gone silent). The run must end at -T, the clients still
    reconnecting finished (pgbench's FINISHED at -T's end), not wait for
    an answer that never comes."""
    relay = _FailsOver(bench_db, tmp_path, limit=4000, hang=True)
    args = ["-n", "-S", "-c", "2", "-j", "1", "-T", "3", "--reconnect"]
    try:
        status, out, err = _run_killable([*PGSURGE, *args, relay.dsn], tmp_path)
    finally:
        relay.close()
    assert relay.gone.is_set()
    assert status == 0, err
    assert err.count("lost its connection") == 2, err
    assert "reconnected" not in err, err
    assert "aborted" not in err, err
    assert "number of transactions actually processed: " in out, out


def test_monitor_of_a_multi_host_run_elsewhere_is_refused(
    bench_db: str, server_dsn: str, tmp_path: Path
) -> None:
    relay, dsn = _both(bench_db, tmp_path)
    args = ["-n", "-S", "-c", "2", "-t", "10", "--server-stats"]
    elsewhere = make_conninfo(server_dsn, dbname="postgres")
    try:
        out = run_pgsurge([*args, f"--monitor={elsewhere}"], dsn, cwd=tmp_path)
        # the run's database on the server, one of its hosts: taken
        fine = run_pgsurge([*args, f"--monitor={bench_db}"], dsn, cwd=tmp_path)
    finally:
        relay.close()
    assert out.status == 1, out.stderr
    name = conninfo_to_dict(bench_db)["dbname"]
    assert (
        '--monitor: it reaches database "postgres" of the server started at '
    ) in out.stderr, out.stderr
    assert f'the run\'s database "{name}" of the server started at ' in out.stderr
    assert "transactions actually processed" not in out.stdout
    assert fine.status == 0, fine.stderr
    assert "--monitor:" not in fine.stderr


class _Silent(UnixRelay):
    """A server that accepts connections and never answers them."""

    def serve(self, client: socket.socket) -> None:
        pass  # (the socket stays open in self.socks until close())


#: pgsurge's command line in a fresh interpreter, with one of its bounds
#: made short (argv[1]: module, argv[2]: name, argv[3]: value)
_WITH_BOUND = (
    "import importlib, sys\n"
    "setattr(importlib.import_module(sys.argv[1]), sys.argv[2], int(sys.argv[3]))\n"
    "from pgsurge.cli import main\n"
    "sys.exit(main(['pgsurge', *sys.argv[4:]]))\n"
)


def _with_bound(
    module: str, name: str, args: list[str], cwd: Path
) -> tuple[int, str, str]:
    return _run_killable(
        [sys.executable, "-c", _WITH_BOUND, module, name, "1", *args], cwd
    )


def _run_killable(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``argv`` in a session of its own,
    killed whole when it has not ended in 60 s: generous for the runs of
    a few seconds here on a loaded box; a hang never ends."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=tool_env(),
        start_new_session=True,
    )
    out, err = communicate_or_kill(proc, 60)
    return proc.returncode, out, err


def test_a_monitor_that_never_answers_is_given_up(
    bench_db: str, tmp_path: Path
) -> None:
    silent = _Silent(bench_db, tmp_path)
    args = ["-n", "-S", "-c", "1", "-t", "5", "--waits=50"]
    try:
        status, out, err = _with_bound(
            "pgsurge.insight.monitor",
            "CONNECT_WAIT_S",
            [*args, f"--monitor={silent.dsn}", bench_db],
            tmp_path,
        )
    finally:
        silent.close()
    assert status == 1, err
    assert "pgsurge: error: --monitor: connection to server on socket" in err, err
    assert "timeout expired" in err, err
    assert "transactions actually processed" not in out


def test_a_pooler_console_that_never_answers_is_given_up(
    pgbouncer_transaction: Pooler, bench_db: str, tmp_path: Path
) -> None:
    silent = _Silent(bench_db, tmp_path)
    args = ["-n", "-S", "-c", "1", "-t", "5", f"--pooler-admin={silent.dsn}"]
    try:
        status, _out, err = _with_bound(
            "pgsurge.insight.pooladmin",
            "CONNECT_WAIT_S",
            [*args, pgbouncer_transaction.pooled(bench_db)],
            tmp_path,
        )
    finally:
        silent.close()
    assert status == 1, err
    assert "pgsurge: error: --pooler-admin: connection to server on socket" in err
    assert "timeout expired" in err, err
