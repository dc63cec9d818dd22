"""The password prompt of a run and of -i, as pgbench's (a hostile finding).

pgbench asks for a password when the server wants one and none was given
(``simple_prompt``): on the terminal, or, without one (a cron job, a
pipeline, CI), with the prompt on stderr and the password read from
stdin. pgsurge asked only when stdin was a terminal: without one a run
that pgbench runs failed ("fe_sendauth: no password supplied"), and its
stderr lacked pgbench's prompt line. The cluster is the test's own (its
``pg_hba.conf`` asks a role for a SCRAM password), the programs run in a
new session (no controlling terminal).
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest

from pgsurge.server.embedded import SUPERUSER, EmbeddedServer
from tests.fix_run import PGSURGE, Outcome, tool_env
from tests.fix_tap import make_base

pytestmark = pytest.mark.server

#: the role's password: a space, a quote and a backslash
PASSWORD = "a b'c\\d"


@pytest.fixture(scope="module")
def scram_dsn(pgbench_bin: Path) -> Iterator[str]:
    """A conninfo (no password) of a role the test's own cluster asks a
    SCRAM password of, with the pgbench tables at scale 1."""
    base = make_base()
    server = EmbeddedServer(base / "srv", port=54337)
    try:
        params = server.ensure_running()
        admin = psycopg.conninfo.make_conninfo(
            host=str(params.host),
            port=str(params.port),
            user=server.superuser,
            dbname="postgres",
        )
        subprocess.run(
            [str(pgbench_bin), "-i", "-s", "1", "-q", admin],
            check=True,
            capture_output=True,
            env=tool_env(None),
        )
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL("CREATE ROLE pw LOGIN PASSWORD {}").format(
                    psycopg.sql.Literal(PASSWORD)
                )
            )
            conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO pw")
            row = conn.execute("SHOW hba_file").fetchone()
            assert row is not None
            hba = Path(row[0])
            hba.write_text("local all pw scram-sha-256\n" + hba.read_text())
            conn.execute("SELECT pg_reload_conf()")
        yield psycopg.conninfo.make_conninfo(admin, user="pw")
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _no_terminal(
    argv: Sequence[str], stdin: bytes, executable: Path | None = None
) -> Outcome:
    """``argv`` in a new session (no controlling terminal), fed ``stdin``."""
    proc = subprocess.run(
        list(argv),
        executable=executable,
        input=stdin,
        capture_output=True,
        env=tool_env(None),
        timeout=120,
        check=False,
        start_new_session=True,
    )
    return Outcome(
        proc.returncode,
        proc.stdout.decode(errors="surrogateescape"),
        proc.stderr.decode(errors="surrogateescape"),
    )


@pytest.mark.parametrize("stdin", ["password", "nothing"])
@pytest.mark.parametrize("connect_each", [False, True], ids=["plain", "C"])
def test_password_read_from_stdin_without_a_terminal(
    scram_dsn: str, pgbench_bin: Path, stdin: str, connect_each: bool
) -> None:
    args = ["-n", "-S", "-c", "2", "-j", "2", "-t", "5", scram_dsn]
    if connect_each:
        args.insert(0, "-C")
    data = (PASSWORD + "\n").encode() if stdin == "password" else b""
    ref = _no_terminal(["pgbench", *args], data, pgbench_bin)
    got = _no_terminal([*PGSURGE, *args], data)
    if stdin == "password":
        # the workers' connections (each transaction's under -C) use it
        assert ref.status == 0, ref.stderr
        assert ref.stderr == "Password: \n"
        assert got.number("number of transactions actually processed:") == "10/10"
    else:
        assert ref.status == 1, ref.stderr
        assert "no password supplied" in ref.stderr
    assert got.status == ref.status, got.stderr
    assert got.stderr == ref.stderr.replace("pgbench:", "pgsurge:")
    assert got.stdout.count("\n") == ref.stdout.count("\n")
    if ref.status == 0:
        assert got.report == ref.report


@pytest.mark.parametrize("stdin", ["password", "nothing"])
def test_init_reads_the_password_from_stdin_without_a_terminal(
    scram_dsn: str, pgbench_bin: Path, stdin: str
) -> None:
    """``-i`` asks as a run does (it asked only on a terminal)."""
    owner = psycopg.conninfo.conninfo_to_dict(scram_dsn)
    admin = psycopg.conninfo.make_conninfo(scram_dsn, user=SUPERUSER)
    with psycopg.connect(admin, autocommit=True) as conn:
        for db in ("pw_ref", "pw_got"):
            conn.execute(f"DROP DATABASE IF EXISTS {db}")
            conn.execute(f"CREATE DATABASE {db} OWNER pw")
    data = (PASSWORD + "\n").encode() if stdin == "password" else b""
    outcomes = []
    for argv, exe, db in (
        (["pgbench"], pgbench_bin, "pw_ref"),
        (list(PGSURGE), None, "pw_got"),
    ):
        target = psycopg.conninfo.make_conninfo(scram_dsn, dbname=db)
        outcomes.append(_no_terminal([*argv, "-i", "-s", "1", "-q", target], data, exe))
    ref, got = outcomes
    assert owner["user"] == "pw"
    assert got.status == ref.status, (ref.stderr, got.stderr)
    if stdin == "password":
        assert ref.status == 0, ref.stderr
        assert ref.stderr.startswith("Password: \n")
        assert got.stderr.startswith("Password: \n"), got.stderr
        with psycopg.connect(
            psycopg.conninfo.make_conninfo(admin, dbname="pw_got")
        ) as conn:
            row = conn.execute("SELECT count(*) FROM pgbench_accounts").fetchone()
        assert row == (100000,)
    else:
        assert ref.status == 1, ref.stderr
        assert "no password supplied" in ref.stderr
        assert got.stderr == ref.stderr.replace("pgbench:", "pgsurge:")


class _PasswordTrap:
    """A socket that answers like a server asking for a cleartext password
    and keeps whatever password message it gets (then refuses)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.got: list[bytes] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(directory / ".s.PGSQL.5432"))
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with client:
                client.settimeout(30)
                try:
                    head = client.recv(4)
                    if len(head) < 4:  # a probe that closed before it spoke
                        continue
                    size = struct.unpack("!i", head)[0]
                    client.recv(size - 4)  # the start-up message
                    client.sendall(b"R" + struct.pack("!ii", 8, 3))
                    data = client.recv(4096)
                    if data:
                        self.got.append(data)
                    client.sendall(
                        b"E" + struct.pack("!i", 4 + 20) + b"SFATAL\0C28P01\0Mno\0\0"
                    )
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def test_a_typed_password_goes_to_no_other_server(
    scram_dsn: str, tmp_path: Path
) -> None:
    # the password typed for the run's server went to the --monitor
    # connection whatever server that named: one that asks for a
    # cleartext password got it (--pooler-admin follows the same rule)
    trap = _PasswordTrap(tmp_path / "trap")
    other = f"host={trap.directory} port=5432 user=pw dbname=bench"
    option = "--monitor"
    args = ["-n", "-S", "-c", "1", "-t", "5", "--server-stats", f"{option}={other}"]
    args.append(scram_dsn)
    try:
        got = _no_terminal([*PGSURGE, *args], (PASSWORD + "\n").encode())
    finally:
        trap.close()
    assert not any(PASSWORD.encode() in data for data in trap.got), trap.got
    assert got.status == 1, got.stderr
    assert f"pgsurge: error: {option}: " in got.stderr, got.stderr
    assert "no password supplied" in got.stderr, got.stderr


def test_a_typed_password_goes_to_the_same_server_again(
    scram_dsn: str, tmp_path: Path
) -> None:
    # --monitor naming the run's own server and user (spelt otherwise) is
    # given the typed password, as psql's \connect reuses it
    params = psycopg.conninfo.conninfo_to_dict(scram_dsn)
    monitor = f"port={params['port']} host={params['host']} user=pw dbname=postgres"
    args = ["-n", "-S", "-c", "1", "-t", "5", "--waits=20", f"--monitor={monitor}"]
    got = _no_terminal([*PGSURGE, *args, scram_dsn], (PASSWORD + "\n").encode())
    assert got.status == 0, got.stderr
    assert got.number("number of transactions actually processed:") == "5/5"


def _on_a_terminal(argv: Sequence[str], answer: bytes, limit_s: float) -> Outcome:
    """``argv`` in a new session whose controlling terminal is a pty: the
    first ``Password: `` it shows is answered with ``answer``; killed
    (status -9) when it has not ended within ``limit_s``."""
    import os
    import pty
    import select
    import signal
    import time

    env = tool_env(None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once (nothing of pytest runs here)
        try:
            os.execvpe(argv[0], list(argv), env)
        finally:
            os._exit(127)
    out = b""
    answered = False
    deadline = time.monotonic() + limit_s
    status = None
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            os.killpg(pid, signal.SIGKILL)  # its runs are in groups of their own
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -9
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:  # the pty closed: the child is gone
                data = b""
            out += data
            if b"Password: " in out and not answered:
                os.write(fd, answer + b"\n")
                answered = True
        done, wstatus = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(wstatus)
    os.close(fd)
    return Outcome(status, out.decode(errors="replace"), "")


@pytest.mark.parametrize("password", ["right", "wrong"])
def test_ab_asks_once_on_the_terminal_and_its_runs_never_stop_to_ask(
    scram_dsn: str, tmp_path: Path, password: str
) -> None:
    # hostile finding: `pgsurge ab` on a terminal, against a server that
    # wants a password none was given for: each run, in a process group of
    # its own, asked on the terminal, was stopped there (SIGTTIN), and ab
    # waited for it for ever. Now ab asks once, as pgbench asks, and its
    # runs get the answer; a wrong one fails the run with libpq's message
    answer = PASSWORD if password == "right" else "nope"
    out = tmp_path / "ab"
    got = _on_a_terminal(
        [
            *PGSURGE,
            "ab",
            "--runs",
            "1",
            "--out",
            str(out),
            "--",
            "-n",
            "-S",
            "-t",
            "20",
            scram_dsn,
        ],
        answer.encode(),
        limit_s=240,
    )
    assert got.status != -9, f"ab did not end:\n{got.stdout}"
    assert got.stdout.count("Password: ") == 1, got.stdout
    if password == "right":
        assert got.status == 0, got.stdout
        assert "run 1/1  A" in got.stdout, got.stdout
        # the answer is in no file the experiment wrote
        for path in out.iterdir():
            assert answer.encode() not in path.read_bytes(), path
    else:
        assert got.status == 1, got.stdout
        assert "password authentication failed" in got.stdout, got.stdout
