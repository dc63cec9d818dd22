"""Data locations pgsurge does not own: refused, and nothing written through
them (issue 21, security 1).

A hostile local user ("nobody" here) prepares the location root or an
ordinary user will use — a symlink, a directory of theirs, one anyone can
write, links inside it to a victim file — and pgsurge's real command line
(``python -m pgsurge``) must end with one error line and status 1 while
the victim stays exactly as it was. As root the attacker's files are made
by root and given to "nobody" (what nobody could have made); the ordinary
user's cases run as "nobody" when we are root, else as ourselves.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from pgsurge.server import EmbeddedServer
from pgsurge.server.binaries import wheel_pginstall
from pgsurge.server.embedded import ENV_DATA_DIR
from pgsurge.server.runas import SYSTEM_USER, OsUser, server_user
from tests.fix_run import tool_env
from tests.fix_server import nobody_user, python_for

pytestmark = pytest.mark.server

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root to act as nobody")


@dataclass(frozen=True, slots=True)
class Scene:
    """A temporary directory holding the victim file and the attacker's work."""

    base: Path
    #: a file of the user pgsurge runs as, which must never change
    victim: Path
    #: a directory of that user, which must stay empty
    victim_dir: Path
    attacker: OsUser | None

    def give(self, path: Path) -> None:
        """Hand ``path`` (not what it points to) to the attacker."""
        if self.attacker is not None:
            os.lchown(path, self.attacker.uid, self.attacker.gid)

    def attacker_dir(self, name: str = "attacker") -> Path:
        path = self.base / name
        path.mkdir(mode=0o755)
        os.chmod(path, 0o755)
        self.give(path)
        return path


def _snapshot(path: Path) -> tuple[object, ...]:
    st = os.lstat(path)
    content = (
        path.read_bytes() if stat.S_ISREG(st.st_mode) else sorted(os.listdir(path))
    )
    return (content, st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns, st.st_nlink)


@pytest.fixture
def scene() -> Iterator[Scene]:
    base = Path(tempfile.mkdtemp(prefix="pgsurge-sec-"))
    os.chmod(base, 0o711)  # ours, just made: let nobody and pgsurge pass
    victim = base / "victim"
    victim.write_text("the victim's secret\n")
    victim.chmod(0o640)
    victim_dir = base / "victim-dir"
    victim_dir.mkdir(mode=0o755)
    yield Scene(base, victim, victim_dir, nobody_user() if IS_ROOT else None)
    shutil.rmtree(base, ignore_errors=True)


def _pgsurge(
    location: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = tool_env({ENV_DATA_DIR: str(location)})
    return subprocess.run(
        [sys.executable, "-m", "pgsurge", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _refused(
    proc: subprocess.CompletedProcess[str], path: Path, why: str, *, after: str = ""
) -> None:
    """Status 1 and one error line (``after``: the lines before it)."""
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"{after}pgsurge: error: refusing to use {path}: {why}\n"


# -- as root ----------------------------------------------------------------
# Each case prepares the scene and returns (location, refused path, reason).


def _location_symlink(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.symlink_to(s.victim_dir)
    s.give(loc)
    return loc, loc, "it is a symbolic link"


def _dangling_location_link(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.symlink_to(s.victim_dir / "created")
    s.give(loc)
    return loc, loc, "it is a symbolic link"


def _dangling_data_link(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    (loc / "data").symlink_to(s.victim_dir / "created")
    return loc, loc / "data", "it is a symbolic link"


def _location_of_another_user(s: Scene) -> tuple[Path, Path, str]:
    loc = s.attacker_dir("loc")
    (loc / ".lock").symlink_to(s.victim)
    s.give(loc / ".lock")
    return loc, loc, 'it is owned by "nobody", not by "root"'


def _location_open_to_all(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir()
    os.chmod(loc, 0o777)  # root's own directory, but anyone may plant links
    (loc / ".lock").symlink_to(s.victim)
    s.give(loc / ".lock")
    return loc, loc, "it is writable by group or others (mode 0777)"


def _dangling_lock_link(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    (loc / ".lock").symlink_to(s.victim_dir / "created")
    return loc, loc / ".lock", "it is a symbolic link"


def _hard_linked_lock(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    os.link(s.victim, loc / ".lock")
    return loc, loc / ".lock", "it has other hard links"


def _data_symlink(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    fake = s.attacker_dir()
    (fake / "PG_VERSION").write_text("18\n")
    (fake / "pgsurge.conf").symlink_to(s.victim)
    (loc / "data").symlink_to(fake)
    s.give(loc / "data")
    return loc, loc / "data", "it is a symbolic link"


def _data_of_another_user(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    data = loc / "data"
    data.mkdir(mode=0o700)
    (data / "PG_VERSION").write_text("18\n")
    (data / "pgsurge.conf").symlink_to(s.victim)
    s.give(data / "pgsurge.conf")
    s.give(data)
    return loc, data, 'it is owned by "nobody", not by "root" or "pgsurge"'


def _location_of_the_server_account(s: Scene) -> tuple[Path, Path, str]:
    # the server's account may own data/, not the location root works in
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    account = pwd.getpwnam(SYSTEM_USER)
    os.chown(loc, account.pw_uid, account.pw_gid)
    (loc / ".lock").symlink_to(s.victim)
    os.lchown(loc / ".lock", account.pw_uid, account.pw_gid)
    return loc, loc, f'it is owned by "{SYSTEM_USER}", not by "root"'


def _parent_writable_by_a_group(s: Scene) -> tuple[Path, Path, str]:
    shared = s.base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)
    assert s.attacker is not None
    os.chown(shared, 0, s.attacker.gid)  # nobody's group may write here
    loc = shared / "loc"
    why = f"the directory {shared} above it is writable by group or others"
    return loc, loc, why + " (mode 0775)"


def _data_open_to_all(s: Scene) -> tuple[Path, Path, str]:
    loc = s.base / "loc"
    loc.mkdir(mode=0o755)
    data = loc / "data"
    data.mkdir()
    os.chmod(data, 0o777)
    (data / "PG_VERSION").write_text("18\n")
    return loc, data, "it is writable by group or others (mode 0777)"


def _parent_of_another_user(s: Scene) -> tuple[Path, Path, str]:
    # nobody could rename loc away and put a symlink in its place later
    loc = s.attacker_dir() / "loc"
    why = f'the directory {s.base / "attacker"} above it is owned by "nobody"'
    return loc, loc, why + " (another user could replace it)"


def _link_of_another_user(s: Scene) -> tuple[Path, Path, str]:
    # nobody's link to root's directory: nobody could re-point it later, at
    # a directory of theirs holding a fake server's socket directory
    real = s.base / "rootdir"
    real.mkdir(mode=0o755)
    link = s.base / "hlink"
    link.symlink_to(real)
    s.give(link)
    loc = link / "loc"
    why = f'the symbolic link {link} on the way to it is owned by "nobody"'
    return loc, loc, why + " (who could re-point it)"


def _link_in_a_directory_of_another_user(s: Scene) -> tuple[Path, Path, str]:
    # root's link, but nobody may replace it: as a real directory there is
    real = s.base / "rootdir"
    real.mkdir(mode=0o755)
    hxn = s.attacker_dir()
    (hxn / "l").symlink_to(real)
    loc = hxn / "l" / "loc"
    why = f'the directory {hxn} above it is owned by "nobody"'
    return loc, loc, why + " (another user could replace it)"


ROOT_CASES: dict[str, Callable[[Scene], tuple[Path, Path, str]]] = {
    "location-symlink": _location_symlink,
    "dangling-location-link": _dangling_location_link,
    "dangling-data-link": _dangling_data_link,
    "location-of-another-user": _location_of_another_user,
    "location-open-to-all": _location_open_to_all,
    "dangling-lock-link": _dangling_lock_link,
    "hard-linked-lock": _hard_linked_lock,
    "location-of-the-server-account": _location_of_the_server_account,
    "parent-writable-by-a-group": _parent_writable_by_a_group,
    "data-symlink": _data_symlink,
    "data-of-another-user": _data_of_another_user,
    "data-open-to-all": _data_open_to_all,
    "parent-of-another-user": _parent_of_another_user,
    "link-of-another-user": _link_of_another_user,
    "link-in-a-directory-of-another-user": _link_in_a_directory_of_another_user,
}


@pytest.fixture(autouse=True)
def _server_account() -> None:
    """As root, make sure the "pgsurge" account exists, so that the messages
    (which name the accounts allowed to own the location) are fixed."""
    if IS_ROOT:
        server_user()


@needs_root
@pytest.mark.parametrize("case", list(ROOT_CASES))
def test_root_refuses_location_it_does_not_own(scene: Scene, case: str) -> None:
    if scene.attacker is None:
        pytest.skip("no user 'nobody'")
    loc, refused, why = ROOT_CASES[case](scene)
    before = (_snapshot(scene.victim), _snapshot(scene.victim_dir))
    _refused(_pgsurge(loc, "server", "start"), refused, why)
    assert (_snapshot(scene.victim), _snapshot(scene.victim_dir)) == before
    assert not (scene.victim_dir / "created").exists()
    assert not (scene.base / "rootdir" / "loc").exists()


@needs_root
@pytest.mark.parametrize("command", ["status", "uri"])
@pytest.mark.parametrize(
    "case", ["location-of-another-user", "link-of-another-user", "data-symlink"]
)
def test_root_status_and_uri_refuse_as_start_does(
    scene: Scene, case: str, command: str
) -> None:
    """A postmaster.pid another user planted, naming a live postgres-like
    PID (ours) and their own socket directory, is never read: status and
    uri refuse the location exactly as start does."""
    if scene.attacker is None:
        pytest.skip("no user 'nobody'")
    loc, refused, why = ROOT_CASES[case](scene)
    fake_run = scene.attacker_dir("fake-run")
    if not loc.exists():
        loc.mkdir(mode=0o755)  # root's own, below the link
    data = loc / "data"
    if not data.is_dir():
        data.mkdir(mode=0o700)
        scene.give(data)
    pid = data / "postmaster.pid"
    pid.write_text(f"{os.getpid()}\n{data}\n0\n5432\n{fake_run}\n\n0 0\nready\n")
    scene.give(pid)
    _refused(_pgsurge(loc, "server", command), refused, why)


@needs_root
@pytest.mark.parametrize("plant", ["fifo", "symlink"])
@pytest.mark.parametrize("command", ["status", "uri", "stop"])
def test_root_refuses_a_postmaster_pid_that_is_no_plain_file(
    scene: Scene, plant: str, command: str
) -> None:
    """The server's account owns data/ and could leave a FIFO (reading it
    would hang root's command) or a link to a secret as postmaster.pid."""
    loc = scene.base / "loc"
    loc.mkdir(mode=0o755)
    data = loc / "data"
    data.mkdir(mode=0o700)
    (data / "PG_VERSION").write_text("18\n")
    pid = data / "postmaster.pid"
    if plant == "fifo":
        os.mkfifo(pid, 0o600)
        why = "it is not a regular file"
    else:
        pid.symlink_to(scene.victim)
        why = "it is a symbolic link"
    account = pwd.getpwnam(SYSTEM_USER)
    for path in (data, data / "PG_VERSION", pid):
        os.lchown(path, account.pw_uid, account.pw_gid)
    before = _snapshot(scene.victim)
    _refused(_pgsurge(loc, "server", command, timeout=60), pid, why)
    assert _snapshot(scene.victim) == before


@needs_root
def test_root_resolves_its_own_link_once(scene: Scene) -> None:
    """root's own link in root's directory is accepted, and only the path it
    resolves to is used afterwards (the socket directory in the URI)."""
    real = scene.base / "real"
    real.mkdir(mode=0o755)
    (scene.base / "link").symlink_to(real)
    proc = _pgsurge(scene.base / "link" / "loc", "server", "uri")
    assert proc.returncode == 0, proc.stderr
    run = quote(str(real / "loc" / "run"), safe="")
    assert proc.stdout == f"postgresql://postgres@/postgres?host={run}&port=5432\n"


@needs_root
def test_root_run_refuses_location_through_the_benchmark_path(scene: Scene) -> None:
    """The same refusal from a benchmark run that wants the embedded server."""
    if scene.attacker is None:
        pytest.skip("no user 'nobody'")
    loc, refused, why = _location_of_another_user(scene)
    before = _snapshot(scene.victim)
    using = f"pgsurge: using the embedded PostgreSQL {wheel_pginstall().version} "
    using += f"server in {loc / 'data'}\n"
    _refused(_pgsurge(loc, "--embedded", "-t", "1"), refused, why, after=using)
    assert _snapshot(scene.victim) == before


@needs_root
def test_root_replaces_a_link_the_server_account_planted(scene: Scene) -> None:
    """data/ belongs to the "pgsurge" account: a symlink it leaves as
    pgsurge.conf is replaced by root's file, never written through, and
    the server starts."""
    loc = scene.base / "loc"
    server = EmbeddedServer(loc)
    try:
        server.ensure_running()
        server.stop()
        conf = loc / "data" / "pgsurge.conf"
        conf.unlink()
        conf.symlink_to(scene.victim)
        account = pwd.getpwnam(SYSTEM_USER)
        os.lchown(conf, account.pw_uid, account.pw_gid)
        before = _snapshot(scene.victim)
        proc = _pgsurge(loc, "server", "start")
        assert proc.returncode == 0, proc.stderr
        assert _snapshot(scene.victim) == before
        st = os.lstat(conf)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == account.pw_uid
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert "unix_socket_directories" in conf.read_text()
    finally:
        server.stop()


# -- as an ordinary user ----------------------------------------------------


@pytest.fixture
def ordinary() -> Iterator[
    tuple[Path, Callable[..., subprocess.CompletedProcess[str]]]
]:
    """A home directory and a way to run pgsurge in it as an ordinary user:
    "nobody" when we are root, else ourselves."""
    user = nobody_user() if IS_ROOT else None
    python = python_for(user) if user is not None else None
    if IS_ROOT and (user is None or python is None):
        pytest.skip("no user 'nobody' that can run this Python")
    home = Path(tempfile.mkdtemp(prefix="pgsurge-home-"))
    os.chmod(home, 0o711)
    if user is not None:
        os.chown(home, user.uid, user.gid)

    def run(location: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = tool_env({ENV_DATA_DIR: str(location), "HOME": str(home)})
        switch: dict[str, object] = {}
        exe = sys.executable
        if user is not None and python is not None:
            exe = python[0]
            env["PYTHONPATH"] = python[1]
            switch = {"user": user.uid, "group": user.gid, "extra_groups": []}
        return subprocess.run(
            [exe, "-m", "pgsurge", *args],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **switch,  # type: ignore[arg-type]
        )

    yield home, run
    shutil.rmtree(home, ignore_errors=True)


def test_user_refuses_location_others_can_write(
    ordinary: tuple[Path, Callable[..., subprocess.CompletedProcess[str]]],
) -> None:
    """A location anyone may write into: another user plants ``.lock`` as a
    link to ``~/.bashrc``; pgsurge refuses and ``~/.bashrc`` is unchanged."""
    home, run = ordinary
    bashrc = home / ".bashrc"
    bashrc.write_text("alias ls='ls -F'\n")
    loc = home / "shared"
    loc.mkdir()
    os.chmod(loc, 0o777)
    (loc / ".lock").symlink_to(bashrc)
    (loc / "data").symlink_to(home)
    if IS_ROOT:
        owner = os.stat(home)
        os.chown(loc, owner.st_uid, owner.st_gid)
        os.chown(bashrc, owner.st_uid, owner.st_gid)
    before = (_snapshot(bashrc), stat.S_IMODE(os.stat(home).st_mode))
    _refused(
        run(loc, "server", "start"),
        loc,
        "it is writable by group or others (mode 0777)",
    )
    assert (_snapshot(bashrc), stat.S_IMODE(os.stat(home).st_mode)) == before


def test_user_refuses_a_symlinked_location(
    ordinary: tuple[Path, Callable[..., subprocess.CompletedProcess[str]]],
) -> None:
    home, run = ordinary
    target = home / "elsewhere"
    target.mkdir(mode=0o700)
    if IS_ROOT:
        owner = os.stat(home)
        os.chown(target, owner.st_uid, owner.st_gid)
    loc = home / "loc"
    loc.symlink_to(target)
    before = _snapshot(target)
    _refused(run(loc, "server", "start"), loc, "it is a symbolic link")
    assert _snapshot(target) == before


@needs_root
def test_user_refuses_location_of_another_user(
    ordinary: tuple[Path, Callable[..., subprocess.CompletedProcess[str]]],
) -> None:
    home, run = ordinary
    loc = home / "roots"
    loc.mkdir(mode=0o755)  # root's, in nobody's home
    _refused(run(loc, "server", "start"), loc, 'it is owned by "root", not by "nobody"')
    assert os.listdir(loc) == []


def test_user_refuses_location_below_a_directory_open_to_all(
    ordinary: tuple[Path, Callable[..., subprocess.CompletedProcess[str]]],
) -> None:
    """Not sticky, writable by all: anyone could swap the location itself."""
    home, run = ordinary
    shared = home / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    if IS_ROOT:
        owner = os.stat(home)
        os.chown(shared, owner.st_uid, owner.st_gid)
    loc = shared / "loc"
    why = f"the directory {shared} above it is writable by group or others (mode 0777)"
    _refused(run(loc, "server", "start"), loc, why)
    assert not loc.exists()


def test_user_accepts_parent_writable_by_own_private_group(
    ordinary: tuple[Path, Callable[..., subprocess.CompletedProcess[str]]],
) -> None:
    """umask 002 systems make ``~/.local`` 0775 with the user's own group:
    no other user can write there, so the location is used."""
    home, run = ordinary
    shared = home / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)
    owner = os.stat(home)
    os.chown(shared, owner.st_uid, owner.st_gid)
    if set(grp.getgrgid(owner.st_gid).gr_mem) - {pwd.getpwuid(owner.st_uid).pw_name}:
        pytest.skip("the user's primary group has other members")
    loc = shared / "loc"
    try:
        proc = run(loc, "server", "start")
        assert proc.returncode == 0, proc.stderr
        st = os.stat(loc)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (owner.st_uid, 0o700)
    finally:
        run(loc, "server", "stop")
