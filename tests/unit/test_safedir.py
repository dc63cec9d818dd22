"""safedir's file operations against planted links (no server; issue 21).

Each test plants what the server's account (or another user) could leave
in a directory pgsurge writes into as root — a symlink or a hard link to a
victim file, a dangling link, the temporary name itself — and checks that
the victim is never written, its owner never changed.
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgsurge.errors import ServerError
from pgsurge.server.safedir import (
    append_own_file,
    check_ancestors,
    check_dir_stat,
    open_dir,
    open_lock_file,
    read_file_at,
    read_own_text,
    replace_file,
)


@pytest.fixture
def where() -> Iterator[tuple[Path, int, Path]]:
    """A directory (and its fd) to write in, and a victim file beside it."""
    base = Path(tempfile.mkdtemp(prefix="pgsurge-safedir-"))
    work = base / "work"
    work.mkdir(mode=0o700)
    victim = base / "victim"
    victim.write_bytes(b"secret\n")
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield work, fd, victim
    finally:
        os.close(fd)
        for p in sorted(base.rglob("*"), reverse=True):
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink()
        base.rmdir()


def _same(victim: Path, before: os.stat_result) -> bool:
    now = os.stat(victim)
    return victim.read_bytes() == b"secret\n" and (now.st_uid, now.st_mode) == (
        before.st_uid,
        before.st_mode,
    )


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "dangling", "tmpname"])
def test_replace_file_never_writes_through(
    where: tuple[Path, int, Path], plant: str
) -> None:
    work, fd, victim = where
    before = os.stat(victim)
    conf = work / "pgsurge.conf"
    if plant == "symlink":
        conf.symlink_to(victim)
    elif plant == "hardlink":
        os.link(victim, conf)
    elif plant == "dangling":
        conf.symlink_to(work.parent / "created")
    else:  # the temporary name replace_file is about to use
        (work / f".pgsurge.conf.pgsurge-{os.getpid()}").symlink_to(victim)
    replace_file(fd, "pgsurge.conf", b"port = 5432\n")
    assert _same(victim, before)
    assert not (work.parent / "created").exists()
    st = os.lstat(conf)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert conf.read_bytes() == b"port = 5432\n"
    assert sorted(os.listdir(work)) == ["pgsurge.conf"]


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        ("symlink", "it is a symbolic link"),
        ("dangling", "it is a symbolic link"),
        ("hardlink", "it has other hard links"),
        ("directory", "it is not a regular file"),
    ],
)
def test_lock_file_refuses_links(
    where: tuple[Path, int, Path], plant: str, why: str
) -> None:
    work, fd, victim = where
    before = os.stat(victim)
    lock = work / ".lock"
    if plant == "symlink":
        lock.symlink_to(victim)
    elif plant == "dangling":
        lock.symlink_to(work.parent / "created")
    elif plant == "hardlink":
        os.link(victim, lock)
    else:
        lock.mkdir()
    with pytest.raises((ServerError, IsADirectoryError)) as info:
        open_lock_file(fd, ".lock", lock)
    if isinstance(info.value, ServerError):
        assert info.value.message == f"refusing to use {lock}: {why}"
    assert _same(victim, before)
    assert not (work.parent / "created").exists()


def test_lock_file_is_made_0600(where: tuple[Path, int, Path]) -> None:
    work, fd, _ = where
    os.close(open_lock_file(fd, ".lock", work / ".lock"))
    assert stat.S_IMODE(os.lstat(work / ".lock").st_mode) == 0o600


@pytest.mark.parametrize("plant", ["symlink", "hardlink"])
def test_append_refuses_links(where: tuple[Path, int, Path], plant: str) -> None:
    work, fd, victim = where
    before = os.stat(victim)
    conf = work / "postgresql.conf"
    if plant == "symlink":
        conf.symlink_to(victim)
    else:
        os.link(victim, conf)
    with pytest.raises((OSError, ServerError)):
        append_own_file(fd, "postgresql.conf", b"include = 'x'\n", os.geteuid())
    assert _same(victim, before)


def test_append_to_own_file(where: tuple[Path, int, Path]) -> None:
    work, fd, _ = where
    (work / "postgresql.conf").write_bytes(b"a = 1\n")
    append_own_file(fd, "postgresql.conf", b"b = 2\n", os.geteuid())
    assert (work / "postgresql.conf").read_bytes() == b"a = 1\nb = 2\n"


def test_read_refuses_a_symlink(where: tuple[Path, int, Path]) -> None:
    """An error message quotes PG_VERSION and the log: never a linked secret."""
    work, _, victim = where
    (work / "PG_VERSION").symlink_to(victim)
    with pytest.raises(OSError):
        read_own_text(work / "PG_VERSION")
    (work / "server.log").write_text("LOG: ready\n")
    assert read_own_text(work / "server.log") == "LOG: ready\n"


def test_open_dir_refuses_symlink_and_open_modes(
    where: tuple[Path, int, Path],
) -> None:
    work, fd, _ = where
    me = {os.geteuid()}
    (work / "link").symlink_to(work)
    with pytest.raises(ServerError, match=r"link: it is a symbolic link$"):
        open_dir("link", me, dir_fd=fd, shown=work / "link")
    (work / "open").mkdir()
    os.chmod(work / "open", 0o757)
    with pytest.raises(ServerError, match=r"writable by group or others \(mode 0757\)"):
        open_dir("open", me, dir_fd=fd, shown=work / "open")
    with pytest.raises(FileNotFoundError):
        open_dir("missing", me, dir_fd=fd)
    os.close(open_dir(work, me))


def test_check_dir_stat_names_the_owner(where: tuple[Path, int, Path]) -> None:
    work, _, _ = where
    st = os.stat(work)
    with pytest.raises(ServerError, match=r'it is owned by ".+", not by "'):
        check_dir_stat(st, work, {st.st_uid + 1})


def test_check_ancestors_resolves_our_own_links(
    where: tuple[Path, int, Path],
) -> None:
    """Our links (absolute, relative, with "..") in our own directories are
    followed once, and the resolved path is what the caller goes on with."""
    work, _, _ = where
    real = work / "real"
    (real / "sub").mkdir(parents=True)
    (work / "abs").symlink_to(real)
    (work / "rel").symlink_to("real/sub/..")
    assert check_ancestors(work / "abs" / "loc") == real / "loc"
    assert check_ancestors(work / "rel" / "sub" / "loc") == real / "sub" / "loc"
    # missing ancestors end the walk; the rest is kept as given
    assert check_ancestors(work / "abs" / "new" / "loc") == real / "new" / "loc"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link away")
def test_check_ancestors_refuses_a_link_of_another_user(
    where: tuple[Path, int, Path],
) -> None:
    """Someone else's link on the way could be re-pointed after the check."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")
    work, _, _ = where
    (work / "real").mkdir()
    link = work / "link"
    link.symlink_to(work / "real")
    os.lchown(link, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(ServerError) as info:
        check_ancestors(link / "loc")
    assert str(info.value) == (
        f"refusing to use {link / 'loc'}: the symbolic link {link} on the way "
        'to it is owned by "nobody" (who could re-point it)'
    )


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_read_file_at_refuses_fifos_and_links(
    where: tuple[Path, int, Path], plant: str
) -> None:
    """A FIFO would block the reader forever, a link lead to a secret."""
    work, fd, victim = where
    if plant == "fifo":
        os.mkfifo(work / "postmaster.pid", 0o600)
        why = "it is not a regular file"
    else:
        (work / "postmaster.pid").symlink_to(victim)
        why = "it is a symbolic link"
    with pytest.raises(ServerError, match=why):
        read_file_at(fd, "postmaster.pid", work / "postmaster.pid")
    (work / "plain").write_text("42\n")
    assert read_file_at(fd, "plain", work / "plain") == "42\n"
    with pytest.raises(FileNotFoundError):
        read_file_at(fd, "missing", work / "missing")
