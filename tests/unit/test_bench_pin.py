"""bench/suite.py --pin: the option's value, finding a server's postmaster
from a backend, and pinning a process tree (children started later too);
and the .pyc files the suite writes before measuring.

bench/ is not a package, so _suite_proc is loaded from its file. The tests
use child processes of their own (no server): the test process stands in
for a postmaster, its children for backends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_run import load_bench_module

proc = load_bench_module("_suite_proc")

needs_two_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs two CPUs this process may use",
)


@pytest.mark.parametrize(
    ("text", "want"), [("0,1", (0, 1)), ("1,0", (1, 0)), (" 3 , 2", (3, 2))]
)
def test_parse_pin_accepts_two_distinct_cpus(text: str, want: tuple[int, int]) -> None:
    assert proc.parse_pin(text, 4) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "two CPU numbers"),
        ("0,1,2", "two CPU numbers"),
        ("a,b", "two CPU numbers"),
        ("1,1", "two distinct CPUs"),
        ("-1,0", "two distinct CPUs"),
        ("0,2", "CPUs 0-1"),
    ],
)
def test_parse_pin_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        proc.parse_pin(text, 2)


def test_postmaster_of_is_the_parent_process() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
    ) as child:
        try:
            assert proc.postmaster_of(child.pid) == os.getpid()
        finally:
            assert child.stdin is not None
            child.stdin.close()


def test_postmaster_of_an_unknown_process() -> None:
    with pytest.raises(OSError):
        proc.postmaster_of(2**22 + 12345)  # above Linux's pid_max limit


# A child that waits for a line, then forks a grandchild which prints the
# CPUs it may use: the grandchild is started after the pinning.
_FORK_LATER = """
import os, sys
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    print(sorted(os.sched_getaffinity(0)), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@needs_two_cpus
def test_pin_tree_pins_the_tree_and_what_it_forks_later() -> None:
    cpu = max(os.sched_getaffinity(0))
    with subprocess.Popen(
        [sys.executable, "-c", _FORK_LATER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        pinned = proc.pin_tree(child.pid, {cpu})
        assert pinned == [child.pid]
        assert proc.affinity_of(child.pid) == [cpu]
        out, _ = child.communicate("go\n", timeout=30)
    assert out.strip() == str([cpu])
    # the test process itself was left alone
    assert len(os.sched_getaffinity(0)) >= 2


def test_byte_compile_writes_the_pyc_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as under PYTHONDONTWRITEBYTECODE=1: imports write none, compileall does
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("X = 1\n")
    assert proc.byte_compile(pkg)
    assert list((pkg / "sub" / "__pycache__").glob("mod.*.pyc"))
    (pkg / "bad.py").write_text("def (:\n")
    assert not proc.byte_compile(pkg)
