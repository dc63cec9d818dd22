"""Running pgsurge and pgbench against the test server, and masking their output.

* :func:`run_pgsurge` runs ``python -m pgsurge ARGS [DSN]`` and
  :func:`run_pgbench` the reference pgbench 18.6 with the same shape, both
  in :func:`tool_env` (the test process's environment without ``PG*``
  variables, ``LC_ALL=C``); both return an :class:`Outcome`.
  ``loop`` chooses pgsurge's event loop: ``"auto"`` (the C loop where the
  run is eligible), ``"python"`` (``PGSURGE_NO_FASTLOOP=1``) or ``"c"``
  (``PGSURGE_FASTLOOP=require``: the run must be one the C loop takes).
* :func:`mask_numbers` (pgbench against pgsurge: every number masked);
  :func:`mask_timing` (one program against itself, e.g. the C loop against
  the Python loop: only what depends on timing is masked).
* :func:`wait_on_server` waits until a background run is seen under way
  on the server (``running_like``, ``COMMITTED``), :func:`wait_logged`
  until its ``-l`` files have a line: a signal then meets a started run,
  whatever the box's load; :data:`LONG_GRACE` runs pgsurge with a 60 s
  grace and says when the first signal was handled (:func:`wait_stopping`).

The databases these run against are ``tests/fix_db.py``'s.
"""

from __future__ import annotations

import compileall
import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgsurge
from pgsurge.report.json import load_schema

Loop = Literal["auto", "c", "python"]

#: the environment variables that choose pgsurge's event loop
ENV_NO_FASTLOOP = "PGSURGE_NO_FASTLOOP"
ENV_FASTLOOP = "PGSURGE_FASTLOOP"

#: pgsurge's client-bound warning (report/extras.py), printed only when the
#: machine kept a worker busy: on a loaded box any run may print it
CLIENT_BOUND = re.compile(
    r"pgsurge: warning: (worker \d+ was busy|\d+ of \d+ workers were busy)"
)
#: pgsurge's -R warning (report/rate.py): whether a schedule was kept
#: depends on how busy the machine is as much as on the run
RATE_NOT_SUSTAINED = re.compile(r"pgsurge: warning: the rate of .* was not sustained")


def load_free(stderr: str) -> list[str]:
    """stderr's lines but the warnings a loaded machine alone may cause
    (client-bound, -R not sustained): for comparing two runs' stderr."""
    return [
        line
        for line in stderr.splitlines()
        if not CLIENT_BOUND.match(line) and not RATE_NOT_SUSTAINED.match(line)
    ]


# -- programs ------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a run of pgsurge or pgbench gave."""

    status: int
    stdout: str
    stderr: str

    @property
    def report(self) -> list[str]:
        """Report lines without the banner, numbers masked."""
        lines = self.stdout.splitlines()
        assert lines, self.stderr
        assert lines[0].startswith(("pgbench (", "pgsurge (")), lines[0]
        return [mask_numbers(line) for line in lines[1:]]

    @property
    def messages(self) -> Counter[str]:
        """stderr lines but progress and pgsurge's client-bound warning
        (it depends on how busy the machine is; tests of it read stderr),
        program name normalized, numbers masked."""
        text = self.stderr.replace('("pgbench -i")', '("pgsurge -i")')
        return Counter(
            mask_numbers(line.replace("pgbench: ", "pgsurge: "))
            for line in text.splitlines()
            if not line.startswith("progress:")
            and not CLIENT_BOUND.match(line)
            and not RATE_NOT_SUSTAINED.match(line)
        )

    @property
    def progress(self) -> set[str]:
        """The progress lines, numbers masked."""
        return {
            mask_numbers(line)
            for line in self.stderr.splitlines()
            if line.startswith("progress:")
        }

    def line(self, prefix: str) -> str:
        """The first report line that starts with ``prefix``."""
        for line in self.stdout.splitlines():
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line {prefix!r} in:\n{self.stdout}")

    def number(self, prefix: str) -> str:
        """What follows ``prefix`` on its report line."""
        return self.line(prefix)[len(prefix) :].strip()


def plain_env() -> dict[str, str]:
    """This process's environment without any ``PG*`` variable (pgsurge's
    own ``PGSURGE_*`` included), in the C locale: for tests that set every
    variable they need themselves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


#: the benchmark scripts (not a package: loaded by path)
BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench_module(name: str) -> ModuleType:
    """Import ``bench/<name>.py`` under its own name (the suite's modules
    import each other by name, and dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def python_c(code: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """The stdout of ``python -c code args`` in a fresh interpreter (what a
    module import does is per process), in :func:`plain_env` unless ``env``
    is given; a non-zero exit fails the test."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=plain_env() if env is None else dict(env),
        check=True,
        timeout=60,
    ).stdout


def byte_compile_pgsurge() -> None:
    """pgsurge's modules byte-compiled, as ``pip install`` leaves them: a
    module without a current ``.pyc`` (a checkout just edited, a fresh
    clone) is compiled from its source at import, by the builtin
    ``compile()``, whose first call in a process makes the ``ast`` node
    types the tests of what a run makes look for."""
    assert compileall.compile_dir(Path(pgsurge.__file__).parent, quiet=1)


def psycopg_env(**env: str) -> dict[str, str]:
    """This environment without ``PGSURGE_PSYCOPG`` (how pgsurge imports
    psycopg: each test says), with ``env`` on top."""
    out = {k: v for k, v in os.environ.items() if k != "PGSURGE_PSYCOPG"}
    out.update(env)
    return out


def tool_env(
    env: Mapping[str, str] | None = None, *, loop: Loop = "auto"
) -> dict[str, str]:
    """The environment of both programs: this process's, without libpq's
    ``PG*`` variables (the target is always given) but with pgsurge's own
    (``PGSURGE_PURE`` in the lane without C extensions), in the C locale;
    then ``env`` and the choice of ``loop``."""
    out = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PG") or k.startswith("PGSURGE_")
    }
    out["LC_ALL"] = "C"
    # a developer's results store never receives the tests' runs
    out.pop("PGSURGE_STORE", None)
    if loop == "python":
        out[ENV_NO_FASTLOOP] = "1"
    elif loop == "c":
        if os.environ.get("PGSURGE_PURE", "") not in ("", "0"):
            # the lane without C extensions: there is no C loop to require
            pytest.skip("the C loop is off in the pure lane (PGSURGE_PURE)")
        out.pop(ENV_NO_FASTLOOP, None)
        out[ENV_FASTLOOP] = "require"
    elif loop != "auto":
        raise ValueError(f"unknown loop {loop!r}")
    if env:
        out.update(env)
    return out


PGSURGE = (sys.executable, "-m", "pgsurge")


def _decode(data: bytes) -> str:
    # bytes that are not UTF-8 (a -D value, \setshell output) as they came
    return data.decode("utf-8", "surrogateescape")


def _run(
    argv: Sequence[str],
    dsn: str | None,
    *,
    cwd: Path | None,
    env: dict[str, str],
    timeout: float | None,
    stdin: bytes | None = None,
    executable: Path | None = None,
) -> Outcome:
    proc = subprocess.run(
        [*argv, *([dsn] if dsn is not None else [])],
        executable=executable,
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )
    return Outcome(proc.returncode, _decode(proc.stdout), _decode(proc.stderr))


def run_pgsurge(
    args: Sequence[str],
    dsn: str | None = None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    loop: Loop = "auto",
    timeout: float | None = 120,
) -> Outcome:
    """``python -m pgsurge ARGS DSN`` (see the module docstring)."""
    argv = [*PGSURGE, *args]
    return _run(argv, dsn, cwd=cwd, env=tool_env(env, loop=loop), timeout=timeout)


def run_pgbench(
    pgbench: Path,
    args: Sequence[str],
    dsn: str | None = None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float | None = 120,
) -> Outcome:
    """The reference ``pgbench ARGS DSN``, in the same environment (or in
    exactly ``environ``). Its argv[0] is ``pgbench``, as a user's would be
    (glibc's getopt messages print argv[0] as is)."""
    return _run(
        ["pgbench", *args],
        dsn,
        cwd=cwd,
        env=tool_env(env) if environ is None else dict(environ),
        timeout=timeout,
        stdin=stdin,
        executable=pgbench,
    )


# -- masks ---------------------------------------------------------------------

_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def mask_numbers(line: str) -> str:
    """Every number masked, runs of blanks collapsed (the -r table pads its
    columns to the width of numbers that differ between runs)."""
    return re.sub(r" {2,}", " ", _NUM.sub("N", line))


#: report lines whose figures all depend on timing
_TIMING_LINE = re.compile(r"^( - )?(latency|initial connection time|tps|progress:)")
#: ... and under -R/-L, the lines that depend on which slots were late
_SCHEDULE_LINE = re.compile(
    r"^( - )?(rate limit schedule lag|number of transactions "
    r"(skipped|above|actually processed))"
)
#: a -r line: the command's latency (timing), then its failures (exact)
_STATEMENT = re.compile(r"^(\s+)[\d.]+(\s+\d+\s)")
_TPS = re.compile(r"tps = [\d.]+")
#: a duration of -i ("done in 0.52 s (drop tables 0.00 s, ...)")
_DURATION = re.compile(r"\d+\.\d\d s")


def mask_timing(text: str, *, schedule: bool = False, per_script: bool = True) -> str:
    """``text`` (a report, or -i's messages) with what depends on timing
    masked, everything else exact, line ends kept: latencies, tps,
    progress figures, -i's durations; with ``schedule`` (runs under -R and
    -L) also the schedule lag and the processed, skipped and late counts.
    Without ``per_script``, the per-script lines (`` - …``) are left out."""
    out = []
    for line in text.splitlines(keepends=True):
        if not per_script and line.startswith(" - "):
            continue
        if _TIMING_LINE.match(line) or (schedule and _SCHEDULE_LINE.match(line)):
            line = _NUM.sub("N", line)
        else:
            line = _STATEMENT.sub(r"\1N\2", _TPS.sub("tps = N", line))
        out.append(_DURATION.sub("N s", line))
    return "".join(out)


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends (a test relay's one
    direction), then end ``dst``'s writing side."""
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def stop_listening(sock: socket.socket) -> None:
    """Close a test's listening socket so that its accept thread ends:
    close() alone leaves accept() blocked in the other thread (and the fd
    number free for reuse under it); shutdown() wakes it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class UnixRelay:
    """A Unix socket in ``directory`` (port 5432 there) in front of the test
    server, whose ``dsn`` is the test server's pointed at it (with ``extra``
    conninfo parameters). Each connection it accepts goes to :meth:`serve`
    in a thread of its own, which forwards it both ways; a test makes the
    server slow, silent or cut by overriding it (connecting made slow or
    broken without the kernel's netem)."""

    def __init__(self, dsn: str, directory: Path, **extra: str) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "/tmp").split(",")[0]
        port = int(str(params.get("port") or 5432).split(",")[0])
        self.target: tuple[int, str | tuple[str, int]] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self.path = directory / ".s.PGSQL.5432"
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        params.update(host=str(directory), port="5432", **extra)
        self.dsn = make_conninfo(**params)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.socks.append(client)
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client: socket.socket) -> None:
        """Forward ``client`` to the server and back."""
        server = self.connect()
        threading.Thread(target=pump, args=(server, client), daemon=True).start()
        pump(client, server)

    def connect(self) -> socket.socket:
        """A new connection to the test server."""
        family, address = self.target
        server = socket.socket(family, socket.SOCK_STREAM)
        self.socks.append(server)
        server.connect(address)
        return server

    def close(self) -> None:
        stop_listening(self.listener)
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.path.unlink(missing_ok=True)


class HangingRelay(UnixRelay):
    """A relay forwarding its first ``forward`` connections and leaving
    every later one unanswered: a server that accepts and never answers.
    Its ``dsn`` has ``connect_timeout=2``."""

    def __init__(self, dsn: str, directory: Path, forward: int) -> None:
        self.forward = forward
        super().__init__(dsn, directory, connect_timeout="2")

    def serve(self, client: socket.socket) -> None:
        with self.lock:
            self.forward -= 1
            answer = self.forward >= 0
        if answer:
            super().serve(client)

    def then_server(self, dsn: str) -> str:
        """``dsn`` with two hosts: this relay first, then the test server
        itself (``connect_timeout=2``), as libpq tries them in turn."""
        params = conninfo_to_dict(dsn)
        return make_conninfo(
            dsn,
            host=f"{self.path.parent},{params['host']}",
            port=f"5432,{params.get('port') or 5432}",
            connect_timeout="2",
        )


def start_in_session(
    args: list[str], cwd: Path, prog: list[str] | None = None, **env: str
) -> subprocess.Popen[str]:
    """Start pgsurge (or ``prog``) with ``args`` in its own process group."""
    return subprocess.Popen(
        [*(prog or [sys.executable, "-m", "pgsurge"]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**plain_env(), **env},
        start_new_session=True,  # its own process group, as a terminal's job
    )


def communicate_or_kill(
    proc: subprocess.Popen[str], timeout: float = 30
) -> tuple[str, str]:
    """``proc.communicate``; on a timeout its whole process group is killed
    first (a leaked process would fail later tests), then the test fails."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate()
        pytest.fail(f"no exit within {timeout} s; stderr: {err!r}")


@contextlib.contextmanager
def killed_on_failure(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Within the block, a failure (or a pytest timeout) kills ``proc``'s
    process group before it propagates."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise


def worker_pids(pid: int) -> list[int]:
    """The worker processes of pgsurge ``pid`` (its children)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()]


def valid_json(doc: dict[str, object]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, load_schema())


def log_lines(tmp_path: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted(tmp_path.glob("pgbench_log.*")):
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"cut line in {path}"
        lines += text.splitlines()
    return lines


# -- a run seen under way, a run with a long grace ---------------------------


def wait_on_server(proc: subprocess.Popen[str], dsn: str, query: str) -> None:
    """Until ``query`` (one boolean) is true on ``dsn``, polled, while
    ``proc`` runs: a run's clients are seen running on the server, which
    also says that the run has started (its workers were sent GO: a signal
    now stops it gracefully, where one before the start ends it at once).
    A fixed time after the workers appear did not always cover their
    connections and barriers on a loaded box."""
    import psycopg  # here: the system Python's tests import this module too

    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        if row is not None and row[0]:
            return
        assert time.monotonic() < deadline, f"not seen within 60 s: {query}"
        time.sleep(0.05)


def running_like(like: str, count: int) -> str:
    """The query that is true once ``count`` sessions of the run's database
    run (or last ran) a statement like ``like``."""
    return (
        f"select count(*) >= {count} from pg_stat_activity"
        " where datname = current_database() and pid <> pg_backend_pid()"
        f" and query like '{like}'"
    )


#: a select-only run's clients
SELECT_ONLY = "%pgbench_accounts%"
#: a tpcb-like run: it committed a transaction
COMMITTED = "select exists (select from pgbench_history)"


def wait_logged(proc: subprocess.Popen[str], tmp_path: Path) -> None:
    """Until the run's -l files have a line (a transaction finished)."""
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in tmp_path.glob("pgbench_log.*")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no -l line within 60 s"
        time.sleep(0.05)


#: pgsurge with a 60 s grace (engine/interrupt.py's GRACE_S, 2 s) and a
#: file ``stopping`` made in its directory once the parent has handled the
#: first signal: a test of what a second signal skips sends it after that
#: file (two signals sent too close are one), and an end "at once" is then
#: told from the end of the grace by a margin no loaded box eats
LONG_GRACE = [
    sys.executable,
    "-c",
    """
import os, runpy, sys
from pgsurge.engine import interrupt
assert interrupt.GRACE_S < 60.0  # (renamed: an AttributeError, not a silent no-op)
interrupt.GRACE_S = 60.0
_stop = interrupt.ParentStop.stop
def stop(self, now_us):
    _stop(self, now_us)
    os.close(os.open("stopping", os.O_CREAT | os.O_WRONLY, 0o644))
interrupt.ParentStop.stop = stop
sys.argv[0] = "pgsurge"
runpy.run_module("pgsurge", run_name="__main__")
""",
]


def wait_stopping(proc: subprocess.Popen[str], tmp_path: Path) -> None:
    """Until a LONG_GRACE pgsurge has handled the first signal."""
    deadline = time.monotonic() + 60
    while not (tmp_path / "stopping").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first signal was not handled"
        time.sleep(0.02)
