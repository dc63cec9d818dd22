"""Which implementation ran, and the notice when a C extension is missing
(issue 11, item 9), on real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_run import plain_env

pytestmark = pytest.mark.server

_HIDE = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    if name: sys.modules['pgsurge.' + name] = None  # ImportError\n"
    "sys.argv = ['pgsurge', *sys.argv[2:]]\n"
    "from pgsurge.cli import main\n"
    "sys.exit(main())\n"
)


def _run(hide: str, args: list[str], cwd: Path, **env: str):  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-c", _HIDE, hide, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**plain_env(), **env},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("hide", "env", "impl", "notice"),
    [
        ("", {}, "C event loop", False),
        ("_fastloop", {}, "Python engine, C libpq calls", True),
        ("_fastloop,_fastpq,_speedups", {}, "pure Python", True),
        ("", {"PGSURGE_PURE": "1"}, "pure Python", False),  # asked for: silent
    ],
)
def test_implementation_recorded_and_notice(
    server_dsn: str,
    tmp_path: Path,
    hide: str,
    env: dict[str, str],
    impl: str,
    notice: bool,
) -> None:
    script = tmp_path / "s.sql"
    script.write_text("select 1;\n")
    args = ["-n", "-f", str(script), "-t", "50", "-c", "2", "--client-cpu"]
    proc = _run(hide, [*args, server_dsn], tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert "wall " in proc.stdout and proc.stdout.count(f"), {impl}\n") == 1
    lines = [x for x in proc.stderr.splitlines() if "pure-Python paths" in x]
    assert len(lines) == (1 if notice else 0), proc.stderr
    # the JSON result records it too (--json runs on the same loop)
    proc = _run(hide, [*args, "--json", "r.json", server_dsn], tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    got = {w["implementation"] for w in doc["client_cpu"]["workers"]}
    assert got == {impl}
