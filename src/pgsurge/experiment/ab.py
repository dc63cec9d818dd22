"""``pgsurge ab``: run an A/B (or repeat) experiment, one process per run.

An experiment is a ``Plan``: one or two arms (each a list of pgsurge
arguments plus environment variables, e.g. ``PGOPTIONS`` for server
settings), the arguments common to both, the runs per arm and their order.
``Experiment.run`` executes it:

1. one warm-up run per arm (``--warmup N``, default 1), discarded;
2. the counted runs, interleaved ABBA ABBA … (or ABAB with ``--order
   abab``) so that a drift of the machine weighs on both arms alike;
3. before each counted run with ``--checkpoint``, a ``CHECKPOINT`` on the
   arm's server: the target its validated arguments name (``Arm.conn``,
   kept in memory only: it may hold a password), resolved as a run does.

Each run is ``python -m pgsurge COMMON-ARGS ARM-ARGS --json FILE`` in its
own process group, its output in ``FILE.log`` beside it; after each run a
line (arm, tps, p99, client CPU) goes to stdout and ``manifest.json`` in the
output directory is rewritten, so that a directory always tells what ran;
each run's JSON gets an ``experiment`` section (its arm, the arm's
arguments and environment, the common arguments) so that a result file
says what it measured on its own. Everything written or printed passes
through ``pgsurge.redact`` (no password form survives), the directory is
0700 and its files 0600 whatever the umask: a conninfo in the arguments or
the logs may still name users, hosts and databases.

Ctrl-C (SIGINT) stops the experiment after the current run; a second one
(or SIGTERM, or SIGHUP) stops the current run at once and discards it. What finished
is then compared. A run that aborts (pgsurge's exit status 2) ends the
experiment with status 2; one that fails otherwise, with status 1.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from pgsurge import __version__
from pgsurge.config import ConnParams
from pgsurge.errors import PROG, ExitStatus, PgsurgeError
from pgsurge.experiment.render import run_line
from pgsurge.experiment.results import RunSummary, load_result
from pgsurge.redact import redact_echo, redact_env, redact_text, redact_words

__all__ = ["Arm", "Experiment", "Plan", "RunRecord", "die_with_us", "schedule"]

MANIFEST = "manifest.json"
#: the experiment directory and its files: the owner's only
DIR_MODE = 0o700
FILE_MODE = 0o600

#: runs the child's checkpoint: the arm's environment applies to it too
#: (a dbname that is a conninfo string or URI is expanded, as libpq does
#: for the program's own connections). The items come on stdin, never in
#: argv: they may hold the password, and argv is readable by every user.
_CHECKPOINT_CODE = (
    "import json, sys, psycopg\n"
    "items = json.loads(sys.stdin.read())\n"
    "db = items.get('dbname') or ''\n"
    "base = items.pop('dbname') if '=' in db or '://' in db else ''\n"
    "with psycopg.connect(base, **items, autocommit=True, connect_timeout=30) as c:\n"
    "    c.execute('CHECKPOINT')\n"
)


#: in a child with the arm's environment: does the arm's server want a
#: password that nothing given (the connection string, PGPASSWORD, the
#: password file) holds? Exit status 3 if so; any other failure is left to
#: the runs, which report it as pgbench would
_NEEDS_PASSWORD_CODE = (
    "import json, sys\n"
    "from pgsurge import pgconn\n"
    "conn, _, needs = pgconn.connect(json.loads(sys.stdin.read()))\n"
    "if conn is not None:\n"
    "    conn.finish()\n"
    "sys.exit(3 if needs else 0)\n"
)
_NEEDS_PASSWORD = 3
#: how long that check may take (a server that hangs at connect)
_ASK_CHECK_S = 60


def die_with_us() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when this
    process dies, even of SIGKILL (a CI job's timeout, the OOM killer,
    ``kill -9``): the run, in a process group of its own, went on loading
    the server for its whole ``-T`` behind an experiment that was gone (a
    new one, or a ``--resume``, measured the server under its load). On
    SIGTERM the run stops as it does on ``kill``. None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the request: too late
            os._exit(1)

    return preexec


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a file only its owner may read (0600
    whatever the umask; a symlink planted there is refused, not followed)."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE
        )
        with open(fd, "w", encoding="utf-8") as f:
            os.fchmod(fd, FILE_MODE)
            f.write(text)
    except OSError as exc:
        # a full disk, a read-only file system: one line, never a traceback
        raise PgsurgeError(
            f'could not write "{path}": {os.strerror(exc.errno or 0)}'
        ) from None


@dataclass(frozen=True, slots=True)
class Arm:
    """One side of the experiment."""

    name: str
    #: the arm's own arguments, as given (shell words) and split
    text: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    #: where its runs connect, from its validated arguments (None: not
    #: validated); in memory only, it may hold a password
    conn: ConnParams | None = field(default=None, repr=False, compare=False)
    force_embedded: bool = False

    def describe(self) -> str:
        """The arm's arguments and environment, passwords masked."""
        words = shlex.join(redact_words(self.args)) or "(no arguments)"
        env = "".join(f" {k}={shlex.quote(v)}" for k, v in redact_env(self.env).items())
        return words + env

    def record(self, common: Sequence[str]) -> dict[str, Any]:
        """The arm as the manifest and its runs' JSON record it (masked)."""
        return {
            "arm": self.name,
            "args": redact_words(self.args),
            "env": redact_env(self.env),
            "common": redact_words(common),
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """An experiment, validated (``command.py`` builds it from argv)."""

    arms: tuple[Arm, ...]
    common: tuple[str, ...]
    runs: int
    warmup: int
    order: str
    checkpoint: bool
    out_dir: Path


def schedule(n_arms: int, runs: int, order: str) -> list[int]:
    """Arm indexes of the counted runs: ABBA ABBA … (``abba``) or ABAB …
    (``abab``); one arm just repeats."""
    if n_arms == 1:
        return [0] * runs
    seq: list[int] = []
    for i in range(runs):
        seq.extend((1, 0) if order == "abba" and i % 2 else (0, 1))
    return seq


@dataclass(slots=True)
class RunRecord:
    """One run as the manifest lists it."""

    seq: int
    arm: str
    warmup: bool
    file: str
    log: str
    status: str = "running"
    exit_status: int | None = None
    started: str | None = None
    ended: str | None = None
    summary: RunSummary | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "arm": self.arm,
            "warmup": self.warmup,
            "file": self.file,
            "log": self.log,
            "status": self.status,
            "exit_status": self.exit_status,
            "started": self.started,
            "ended": self.ended,
        }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class RunAborted(PgsurgeError):
    """A run of the experiment aborted: ab ends with pgsurge's status 2."""

    exit_status = ExitStatus.RUN_ABORTED


class Interrupted(Exception):
    """The experiment was stopped by Ctrl-C or SIGTERM."""


def _server_key(target: ConnParams) -> tuple[tuple[str, str], ...]:
    """Which server (and role) a password is for: a password typed for one
    goes to no other."""
    return tuple(sorted(target.conninfo_items().items()))


class Experiment:
    """Runs a ``Plan``; ``records`` are all runs so far, in order."""

    #: the subcommand, as its notices name it
    command = "ab"

    def __init__(
        self,
        plan: Plan,
        *,
        argv: Sequence[str] = (),
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        python: str = sys.executable,
    ) -> None:
        self.plan = plan
        self.argv = tuple(argv)
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.python = python
        self.records: list[RunRecord] = []
        self.state = "running"
        self._stop = 0
        #: stderr's descriptor for the signal handler's notice, else the
        #: notice it left for the normal flow (see _on_signal)
        self._err_fd: int | None = None
        self._pending = ""
        self._proc: subprocess.Popen[bytes] | None = None
        #: each arm's resolved target for --checkpoint (in memory only)
        self._targets: dict[str, ConnParams] = {}
        #: the passwords asked for (_ask_passwords), by server
        self._passwords: dict[tuple[tuple[str, str], ...], str] = {}

    # -- signals --------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # the handler runs between two bytecodes of the main thread, perhaps
        # inside a write to the same stream (a reentrant write fails) or
        # holding a lock: it counts, signals the run, and writes its notice
        # with os.write to stderr's descriptor, or leaves it to the flow
        self._stop += 1 if signum == signal.SIGINT else 2
        if self._stop == 1:
            self._notify(
                f"pgsurge {self.command}: stopping after the current run "
                "(Ctrl-C again to stop it now and discard it)\n"
            )
        elif self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def _notify(self, text: str) -> None:
        if self._err_fd is None:
            self._pending += text
            return
        try:
            os.write(self._err_fd, text.encode())
        except OSError:  # stderr closed: nothing to tell
            pass

    def _flush_pending(self) -> None:
        """A notice the handler could not write itself (no descriptor)."""
        if self._pending:
            text, self._pending = self._pending, ""
            self.err.write(text)
            self.err.flush()

    def _install(self) -> Callable[[], None]:
        try:
            self.err.flush()  # what it holds comes before a notice
            self._err_fd = self.err.fileno()
        except (OSError, ValueError, AttributeError):  # a StringIO, a closed stream
            self._err_fd = None
        # SIGHUP (the terminal or ssh session went away) stops the run now,
        # as SIGTERM does: left to its default, it killed the experiment
        # alone and its run, in a process group of its own, went on loading
        # the server with the manifest still saying "running". A signal
        # ignored when pgsurge started (nohup) stays ignored, in its runs
        # too. SIGINT is always caught, even where a script's ``cmd &`` had
        # it ignored: the handler is what stops a run at once, and a run
        # started with SIGINT ignored would never hear it.
        old = {
            sig: signal.getsignal(sig)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        for sig, handler in old.items():
            if sig != signal.SIGHUP or handler != signal.SIG_IGN:
                signal.signal(sig, self._on_signal)

        def restore() -> None:
            for sig, handler in old.items():
                if handler is not None:
                    signal.signal(sig, handler)

        return restore

    # -- the manifest ---------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        p = self.plan
        return {
            "schema": 1,
            "kind": "pgsurge-ab",
            "pgsurge": __version__,
            "command": redact_words(self.argv),
            "arms": [
                {
                    "name": a.name,
                    # the shell words as one string, as before; the list too
                    "args": shlex.join(redact_words(a.args)),
                    "argv": redact_words(a.args),
                    "env": redact_env(a.env),
                    "describe": a.describe(),
                }
                for a in p.arms
            ],
            "common": redact_words(p.common),
            "runs_per_arm": p.runs,
            "warmup": p.warmup,
            "order": p.order,
            "checkpoint": p.checkpoint,
            "state": self.state,
            "runs": [r.to_dict() for r in self.records],
        }

    def write_manifest(self) -> None:
        path = self.plan.out_dir / MANIFEST
        tmp = path.with_suffix(".json.tmp")
        tmp.unlink(missing_ok=True)
        write_private(tmp, json.dumps(self.manifest(), indent=2) + "\n")
        os.replace(tmp, path)

    # -- running --------------------------------------------------------------

    def _target(self, arm: Arm, env: Mapping[str, str]) -> ConnParams | None:
        """The arm's server, chosen as its runs choose it (the embedded
        server started if they would use it), once per arm."""
        if arm.name not in self._targets and arm.conn is not None:
            # lazily: only --checkpoint needs the target choice
            from pgsurge.server.target import resolve_target

            self._targets[arm.name] = resolve_target(
                arm.conn,
                force_embedded=arm.force_embedded,
                env=env,
                stderr=io.StringIO(),  # the runs say which server they use
            )
        return self._targets.get(arm.name)

    def _env(self, arm: Arm) -> dict[str, str]:
        """The environment of the arm's runs: the experiment's, the arm's,
        and the password asked for its server, if one was."""
        env = os.environ | dict(arm.env)
        if self._passwords and "PGPASSWORD" not in env:
            target = self._target(arm, env)
            if target is not None:
                password = self._passwords.get(_server_key(target))
                if password is not None:
                    env["PGPASSWORD"] = password
        return env

    def _ask_passwords(self) -> None:
        """Ask for the password of each arm's server that wants one none was
        given for, once per server, before the first run, as pgbench asks
        (``Password: `` on the terminal, else on stderr with the answer
        read from stdin), and give it to the runs in their environment
        (``PGPASSWORD``: never in argv, the manifest or a log).

        The runs cannot ask: each runs off the terminal (so that its Ctrl-C
        reaches the experiment only). In a process group of its own, as
        they were, reading the terminal stopped a run (SIGTTIN), and the
        experiment waited for it for ever (hostile finding)."""
        for arm in self.plan.arms:
            env = os.environ | dict(arm.env)
            if "PGPASSWORD" in env:
                continue
            target = self._target(arm, env)
            if target is None or _server_key(target) in self._passwords:
                continue
            try:
                proc = subprocess.run(
                    [self.python, "-c", _NEEDS_PASSWORD_CODE],
                    input=json.dumps(target.conninfo_items()),
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                    preexec_fn=die_with_us(),  # (ab runs no thread: fork-safe)
                    timeout=_ASK_CHECK_S,
                )
            except subprocess.TimeoutExpired:
                continue  # a server that does not answer: the runs say so
            if proc.returncode != _NEEDS_PASSWORD:
                continue
            from pgsurge.pgconn import ask_password

            try:
                password = ask_password(self.err)
            except KeyboardInterrupt:
                self.err.write("\n")
                raise Interrupted() from None
            except EOFError:
                password = ""
            self._passwords[_server_key(target)] = password

    def _checkpoint(self, arm: Arm) -> None:
        env = self._env(arm)
        target = self._target(arm, env)
        if target is None:
            return  # arguments not validated (an in-process caller)
        items = target.conninfo_items()
        proc = subprocess.run(
            [self.python, "-c", _CHECKPOINT_CODE],
            input=json.dumps(items),
            env=env,
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=die_with_us(),  # (ab runs no thread: fork-safe)
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise PgsurgeError(
                f"CHECKPOINT on arm {arm.name}'s server failed: {redact_text(last)}"
            )

    def _run_one(self, arm: Arm, record: RunRecord) -> RunSummary | None:
        """Run one benchmark; its summary, or None when it was discarded."""
        out_dir = self.plan.out_dir
        json_path = out_dir / record.file
        cmd = [
            self.python,
            "-m",
            "pgsurge",
            # the arm's (and a sweep cell's) options after the common ones:
            # the later one wins, so "--a '-c 2' -- -c 4" runs arm A with
            # -c 2, as its label says (it ran -c 4 under the name "-c 2")
            *self.plan.common,
            *arm.args,
            # which arm, and whether it counts (ab=run, sweep=warmup): in the
            # run's JSON, and in the results store when the runs are stored
            # (--store, PGSURGE_STORE); a sweep's cells are in the workload
            f"--label=arm={arm.name}",
            f"--label={self.command}={'warmup' if record.warmup else 'run'}",
            "--json",
            str(json_path),
        ]
        env = self._env(arm)
        record.started = _now()
        self.records.append(record)
        self.write_manifest()
        log_fd = os.open(
            out_dir / record.log,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
            FILE_MODE,
        )
        os.fchmod(log_fd, FILE_MODE)
        with open(log_fd, "wb") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # a session of its own, without the terminal: its Ctrl-C
                # reaches ab only (the run finishes), and a run never
                # reads it (a process group of its own that asked for a
                # password there was stopped by SIGTTIN, and ab waited for
                # ever; ab asks, _ask_passwords)
                start_new_session=True,
                # the run's --json file: the owner's only, like the rest
                umask=0o077,
                preexec_fn=die_with_us(),  # (ab runs no thread: fork-safe)
            )
            try:
                rc = self._proc.wait()
            finally:
                if self._proc.poll() is None:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None
        record.ended = _now()
        record.exit_status = rc
        if self._stop >= 2 and rc != 0:
            record.status = "discarded"
            json_path.unlink(missing_ok=True)
            self.write_manifest()
            return None
        if rc != 0:
            record.status = "aborted" if rc == ExitStatus.RUN_ABORTED else "failed"
            self.write_manifest()
            # (libpq's message may quote a piece of a password it could
            # not parse: "invalid percent-encoded token")
            last = redact_echo(
                self._last_error(out_dir / record.log), [*self.plan.common, *arm.args]
            )
            what = f"run {record.seq} (arm {record.arm})"
            if rc == ExitStatus.RUN_ABORTED:
                raise RunAborted(f"{what} was aborted: {last}")
            raise PgsurgeError(f"{what} failed with exit status {rc}: {last}")
        self._tag_result(json_path, arm)
        summary = load_result(str(json_path))
        record.status = "ok"
        record.summary = summary
        self.write_manifest()
        return summary

    @staticmethod
    def _last_error(log: Path) -> str:
        """The run's first error message, with where the rest is."""
        try:
            lines = log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        errors = [ln.strip() for ln in lines if ": error: " in ln]
        first = (errors or lines or ["(no output)"])[0].strip()
        return f"{first.removeprefix('pgsurge: error: ')} (see {log})"

    def _tag_result(self, path: Path, arm: Arm) -> None:
        """Add the ``experiment`` section to a finished run's JSON (left as
        it is when it is not a JSON object: ``load_result`` then says so)."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(doc, dict):
            return
        doc["experiment"] = arm.record(self.plan.common)
        tmp = path.with_suffix(".json.tmp")
        tmp.unlink(missing_ok=True)
        write_private(tmp, json.dumps(doc, indent=2, allow_nan=False) + "\n")
        os.replace(tmp, path)

    def _step(self, arm: Arm, record: RunRecord, label: str) -> None:
        self._flush_pending()
        if self._stop:
            raise Interrupted
        if self.plan.checkpoint and not record.warmup:
            self._checkpoint(arm)
        summary = self._run_one(arm, record)
        if summary is None:
            self.out.write(f"{label}  discarded (interrupted)\n")
            self.out.flush()
            raise Interrupted
        suffix = "  (warm-up, discarded)" if record.warmup else ""
        self.out.write(run_line(label, summary) + suffix + "\n")
        self.out.flush()

    @contextmanager
    def running(self) -> Iterator[None]:
        """The plan's runs under the signal handlers, with the experiment's
        state kept as they go: finished, interrupted (Ctrl-C/SIGTERM) or
        failed (a run went wrong, or an unexpected exception); the pending
        output and the manifest are written whatever happened."""
        self._ask_passwords()
        restore = self._install()
        finished = False
        stopped_by = ""
        try:
            yield
            finished = True
            self.state = "finished"
        except Interrupted:
            self.state = "interrupted"
            raise
        except PgsurgeError as e:
            self.state = "failed"
            stopped_by = e.message
            raise
        finally:
            restore()
            self._flush_pending()
            if self.state == "running":  # an unexpected exception
                self.state = "failed"
            try:
                self.write_manifest()
            except PgsurgeError as e:
                if finished:
                    raise
                # the error that stopped the experiment comes first; this
                # one only says the manifest is behind (once)
                if e.message != stopped_by:
                    self.err.write(f"{PROG}: warning: {e.message}\n")
                    self.err.flush()

    def run(self) -> None:
        """Execute the plan. Returns normally when every run finished; raises
        ``Interrupted`` after Ctrl-C/SIGTERM, ``RunAborted`` or
        ``PgsurgeError`` when a run went wrong (the manifest says which)."""
        p = self.plan
        seq = 0
        with self.running():
            for arm in p.arms:
                for w in range(p.warmup):
                    seq += 1
                    tag = f"warmup{w + 1 if p.warmup > 1 else ''}-{arm.name}"
                    record = RunRecord(seq, arm.name, True, f"{tag}.json", f"{tag}.log")
                    self._step(arm, record, f"warm-up   {arm.name}")
            order = schedule(len(p.arms), p.runs, p.order)
            width = len(str(len(order)))
            for k, index in enumerate(order, 1):
                seq += 1
                arm = p.arms[index]
                base = f"run-{k:0{width}d}-{arm.name}"
                record = RunRecord(seq, arm.name, False, f"{base}.json", f"{base}.log")
                self._step(arm, record, f"run {k:>{width}}/{len(order)}  {arm.name}")

    def finished(self, arm: str) -> list[RunSummary]:
        """The counted runs of ``arm`` that finished, in run order."""
        return [
            r.summary
            for r in self.records
            if r.arm == arm and not r.warmup and r.summary is not None
        ]
