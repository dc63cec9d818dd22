"""Hostile-tester regressions: files pgsurge writes where a planted
symbolic link could aim them (``fs.protected_symlinks`` guards only sticky
directories, and is off on some machines).

* ``-l``: a worker opened ``PREFIX.<pid>`` following a link, as pgbench's
  fopen does: root's ``-l`` in a directory another user could write to
  overwrote whatever the link named (pgbench 18.6 still does). The log is
  now opened with ``O_NOFOLLOW``: one error line, exit status 1.
* ``history --json FILE`` was a plain ``open``: it wrote through another
  user's link, where every other ``--json`` refuses one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_cli import run_cli
from tests.fix_data import write_result
from tests.fix_run import tool_env

pytestmark = pytest.mark.server

TIMEOUT = 180


def test_a_link_at_the_transaction_log_is_not_followed(
    bench_db: str, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    work = tmp_path / "work"
    work.mkdir()
    # the link is named after the pid pgsurge will have: the shell's, which
    # exec hands on
    script = (
        f'ln -s "{victim}" evil.$$ && exec "{sys.executable}" -m pgsurge '
        f'-n -t 5 -l --log-prefix=evil "$1"'
    )
    r = subprocess.run(
        ["sh", "-c", script, "sh", bench_db],
        cwd=work,
        env=tool_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert victim.read_text() == "keep\n"
    assert r.returncode == 1, r.stderr
    (link,) = work.iterdir()
    assert link.is_symlink()
    assert r.stderr == (
        f'pgsurge: error: could not open logfile "{link.name}": '
        "Too many levels of symbolic links\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant another user's link")
def test_history_json_refuses_another_users_link(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    store = tmp_path / "s.sqlite"
    assert (
        run_cli(
            [
                "store",
                "import",
                write_result(tmp_path / "r.json", 1.0),
                f"--store={store}",
            ]
        ).status
        == 0
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    link = shared / "h.json"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)  # nobody's link
    r = run_cli(["history", f"--store={store}", "--json", str(link)])
    assert r.status == 1
    assert victim.read_text() == "keep\n"
    assert r.stderr == (
        f'pgsurge: error: refusing to write history JSON to "{link}": it is a '
        'symbolic link owned by "nobody"\n'
    )
