"""report.output.write_output: whole documents or none, and special paths
written in place (a full disk must not leave a truncated JSON result)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgsurge.errors import PgsurgeError
from pgsurge.report.output import write_output


def test_new_file_is_whole_with_the_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    old = os.umask(0o027)
    try:
        write_output('{"a": 1}\n', str(target), "JSON result")
    finally:
        os.umask(old)
    assert target.read_text() == '{"a": 1}\n'
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp left


def test_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o600)
    write_output("new", str(target), "JSON result")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o600


def test_symlink_and_device_written_in_place(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_output("via link", str(link), "JSON result")
    assert link.is_symlink() and real.read_text() == "via link"
    write_output("gone", os.devnull, "JSON result")  # not replaced by a file
    assert Path(os.devnull).is_char_device()


def test_unwritable_directory_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(PgsurgeError) as info:
        write_output("x", str(tmp_path / "missing" / "r.json"), "JSON result")
    assert str(info.value) == (
        f'could not write JSON result to "{tmp_path}/missing/r.json": '
        "No such file or directory"
    )


_FULL_DISK = """
import resource, signal, sys
from pgsurge.errors import PgsurgeError
from pgsurge.report.output import write_output
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_output("x" * 100000, sys.argv[1], "JSON result")
except PgsurgeError as e:
    print(e)
"""


def test_failed_write_leaves_the_earlier_result_whole(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text('{"earlier": true}\n')
    out = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(target)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == f'could not write JSON result to "{target}": File too large\n'
    assert target.read_text() == '{"earlier": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant nobody's files")
def test_another_users_link_or_file_is_not_trusted(tmp_path: Path) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # a directory others may write (not sticky)
    victim = tmp_path / "victim"
    victim.write_text("secret")
    link = shared / "r.json"
    link.symlink_to(victim)
    os.lchown(link, nobody, -1)
    with pytest.raises(PgsurgeError) as e:
        write_output("{}", str(link), "JSON result")
    assert e.value.message == (
        f'refusing to write JSON result to "{link}": it is a symbolic link '
        'owned by "nobody"'
    )
    assert victim.read_text() == "secret"
    # a plain file of theirs, 0666: replaced by ours, with our umask's mode
    planted = shared / "p.json"
    planted.write_text("")
    os.chown(planted, nobody, -1)
    planted.chmod(0o666)
    old = os.umask(0o077)
    try:
        write_output("{}", str(planted), "JSON result")
    finally:
        os.umask(old)
    st = planted.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    assert planted.read_text() == "{}"
