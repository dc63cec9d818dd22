"""A worker whose clients never wait still sees its end and its stops.

Both loops run pgbench's rounds: while clients are runnable (they finished
a transaction), they run again before any socket is looked at, and the
sockets are read only once no client is runnable (``EventLoop.run``, the C
loop's ``loop``). A script of meta-commands alone never waits, so its
clients stay runnable for the whole run; the loops then look at their
control descriptor (and the C loop at its signal one) every ``LOOK_US``.
Without those looks the C loop never sees -T's alarm and the run never
ends (checked by taking the look out: ``test_clients_that_never_wait_end_at_T
[c-threads]`` runs into its timeout). The Ctrl-C case guards the other
way out of such a run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_run import (
    communicate_or_kill,
    killed_on_failure,
    run_pgsurge,
    tool_env,
)

LOOPS = ("c", "python")
WORKERS = ("threads", "processes")

#: every test runs on both loops, with workers as threads and as processes
pytestmark = [
    pytest.mark.server,
    pytest.mark.parametrize("workers", WORKERS),
    pytest.mark.parametrize("loop", LOOPS),
]


def _meta_only(tmp_path: Path) -> Path:
    script = tmp_path / "meta.sql"
    script.write_text("\\set a random(1, 1000)\n\\set b :a * 2\n")
    return script


def test_clients_that_never_wait_end_at_T(
    server_dsn: str, tmp_path: Path, loop: str, workers: str
) -> None:
    script = _meta_only(tmp_path)
    out = run_pgsurge(
        ["-n", "-f", str(script), "-c", "4", "-j", "2", "-T", "1"],
        server_dsn,
        cwd=tmp_path,
        env={"PGSURGE_WORKERS": workers},
        loop=loop,  # type: ignore[arg-type]
        timeout=120,
    )
    assert out.status == 0, out.stderr
    assert "duration: 1 s" in out.stdout
    processed = [
        line
        for line in out.stdout.splitlines()
        if line.startswith("number of transactions actually processed: ")
    ]
    assert processed and int(processed[0].split()[-1]) > 0, out.stdout


def test_clients_that_never_wait_stop_on_ctrl_c(
    server_dsn: str, tmp_path: Path, loop: str, workers: str
) -> None:
    script = _meta_only(tmp_path)
    env = tool_env({"PGSURGE_WORKERS": workers}, loop=loop)  # type: ignore[arg-type]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgsurge",
            "-n",
            "-f",
            str(script),
            "-c",
            "4",
            "-j",
            "2",
            "-T",
            "600",
            "-P",
            "1",
            server_dsn,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
    )
    with killed_on_failure(proc):
        # the clients are running once a progress line is out
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("progress: "):
                break
        else:
            pytest.fail(f"no progress line: {''.join(seen)!r}")
        proc.send_signal(signal.SIGINT)
        out, err = communicate_or_kill(proc, timeout=60)
    assert "number of transactions actually processed: " in out, "".join(seen) + err
