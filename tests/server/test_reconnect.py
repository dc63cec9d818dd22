"""``--reconnect`` across a server restart (issue 11, item 4).

A dedicated embedded server (not the session's: it is restarted mid-run,
``pg_ctl stop -m fast`` then start, which is what ``pg_ctl restart -m
fast`` does), initialized by the reference pgbench.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgsurge.server import EmbeddedServer
from tests.fix_run import plain_env

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def own_server(pgbench_bin: Path) -> Iterator[tuple[EmbeddedServer, str]]:
    tmp = Path(tempfile.mkdtemp(prefix="pgsurge-reconnect-"))
    if os.geteuid() == 0:
        os.chmod(tmp, 0o711)  # let the server's system user pass
    server = EmbeddedServer(tmp / "srv")
    try:
        items = server.ensure_running().conninfo_items()
        items.pop("fallback_application_name", None)
        dsn = psycopg.conninfo.make_conninfo(**items)
        subprocess.run(
            [str(pgbench_bin), "-i", "-q", dsn],
            check=True,
            capture_output=True,
            env=plain_env(),
        )
        yield server, dsn
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _run_across_restart(
    server: EmbeddedServer, dsn: str, cwd: Path, extra: list[str]
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    args = ["-c", "4", "-j", "2", "-T", "8", "-P", "1", *extra, dsn]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsurge", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=plain_env(),
    )
    time.sleep(3.5)
    assert server.stop()
    server.ensure_running()
    out, err = proc.communicate(timeout=120)
    return proc, out, err  # type: ignore[return-value]


def test_reconnect_across_restart(own_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, dsn = own_server
    proc, out, err = _run_across_restart(
        server,
        dsn,
        tmp_path,
        ["--reconnect", "--failures-detailed", "-l", "--json", "r.json"],
    )
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lost = int(out.split("number of connection failures: ")[1].split()[0])
    assert 1 <= lost <= 4  # at most the 4 transactions in flight
    assert f"number of failed transactions: {lost} " in out
    assert err.count(" reconnected after ") == 4, err
    # the progress lines show the gap, then the recovery
    tps = [
        float(line.split(", ")[1].split()[0])
        for line in err.splitlines()
        if line.startswith("progress: ")
    ]
    # (how deep the dip goes depends on how fast the server restarts: the
    # interval of the restart has fewer transactions and the failures)
    failed = [
        line
        for line in err.splitlines()
        if line.startswith("progress: ") and not line.endswith(" 0 failed")
    ]
    assert len(tps) >= 6 and min(tps) < 0.8 * max(tps) and failed, err
    assert tps[-1] > max(tps) / 4, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["totals"]["connection_failures"] == lost
    assert doc["config"]["reconnect"] == 10
    assert not doc["aborted"]
    logged = [
        line
        for path in tmp_path.glob("pgbench_log.*")
        for line in path.read_text().splitlines()
        if " connection " in line
    ]
    assert len(logged) == lost


def test_without_reconnect_clients_abort(own_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """pgbench's behaviour: every client aborts, status 2."""
    server, dsn = own_server
    proc, out, err = _run_across_restart(server, dsn, tmp_path, [])
    assert proc.returncode == 2, err
    assert "connection failures" not in out
    assert "reconnected" not in err
    assert "Run was aborted; the above results are incomplete." in err
