"""engine/threaded.py: a worker on a thread, with a process's interface.

No server: the target stands for the worker. What the parent relies on:
the exit status, a stop that comes before the worker could take it, a
"kill" that counts the worker as ended, the -T timer that sets its flag
and wakes the loop's pipe, and which runs may be threads at all.
"""

from __future__ import annotations

import os
import select
import threading

from pgsurge.engine import fastloop, threaded
from pgsurge.engine.threaded import ThreadWorker


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_the_exit_status_is_the_targets() -> None:
    for returned, status in ((None, 0), (3, 3)):
        worker = ThreadWorker(lambda host, r=returned: r, (), "w")
        worker.start()
        worker.join(10)
        assert not worker.is_alive()
        assert worker.exitcode == status
        assert worker.pid == os.getpid()


def test_a_crash_of_the_target_ends_it_with_status_1() -> None:
    def crash(host: ThreadWorker) -> int:
        raise RuntimeError("boom")

    worker = ThreadWorker(crash, (), "w")
    # the thread's uncaught exception goes to threading.excepthook
    seen: list[BaseException | None] = []
    old = threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_value)
    try:
        worker.start()
        worker.join(10)
    finally:
        threading.excepthook = old
    assert worker.exitcode == 1
    assert isinstance(seen[0], RuntimeError)


def test_a_stop_before_the_worker_is_ready_reaches_it() -> None:
    """The parent's Ctrl-C may come while the worker still compiles its
    scripts: the stop function it registers later runs at once."""
    registered = threading.Event()
    stopped: list[bool] = []
    release = threading.Event()

    def target(host: ThreadWorker) -> None:
        registered.wait(10)
        host.on_stop(lambda: stopped.append(True))
        release.wait(10)

    worker = ThreadWorker(target, (), "w")
    worker.start()
    worker.request_stop()
    registered.set()
    release.set()
    worker.join(10)
    assert stopped == [True]


def test_a_stop_wakes_the_loop_and_kill_counts_it_ended() -> None:
    release = threading.Event()
    stops: list[bool] = []

    def target(host: ThreadWorker) -> None:
        host.on_stop(lambda: stops.append(True))
        release.wait(10)

    worker = ThreadWorker(target, (), "w")
    wake = worker.wake_r
    worker.start()
    worker.request_stop()
    assert _readable(wake, 10)
    worker.kill()  # a thread cannot be killed: it is given up on
    assert worker.exitcode == -9
    assert not worker.is_alive()
    release.set()
    worker.join(10)
    assert worker.exitcode == -9  # its own end does not undo that
    assert stops == [True, True]


def test_the_alarm_sets_its_flag_then_wakes_the_loop() -> None:
    fired = threading.Event()
    seen: list[bool] = []

    def target(host: ThreadWorker) -> None:
        host.set_alarm(0.05, fired.set)
        seen.append(_readable(host.wake_r, 10) and fired.is_set())

    worker = ThreadWorker(target, (), "w")
    worker.start()
    worker.join(20)
    assert seen == [True]


class _Spec:
    def __init__(
        self, config: object, scripts: tuple[object, ...], nclients: int = 2
    ) -> None:
        self.config = config
        self.scripts = scripts
        self.nclients = nclients


def _specs(args: list[str], tmp_path, text: str = "SELECT 1;\n"):  # type: ignore[no-untyped-def]
    from pgsurge.cli.options import parse_command_line
    from pgsurge.runner import parse_scripts

    script = tmp_path / "s.sql"
    script.write_text(text)
    cfg = parse_command_line([*args, "-f", str(script)], environ={})
    return [_Spec(cfg, tuple(parse_scripts(cfg)))] * cfg.jobs


def test_which_runs_are_threads(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Asked for: every SQL run without the panel; unasked (AUTO): the runs
    the C loop carries; never a Python workload or the panel."""
    sql = _specs(["-c", "4", "-j", "2"], tmp_path)
    shell = _specs(["-c", "4", "-j", "2"], tmp_path, "\\shell true\nSELECT 1;\n")
    python = [_Spec(sql[0].config, (object(),))]
    monkeypatch.delenv(threaded.ENV, raising=False)
    monkeypatch.delenv("PGSURGE_NO_FASTLOOP", raising=False)
    monkeypatch.setattr(threaded, "AUTO", False)
    assert not threaded.wanted(sql, show_live=False)
    monkeypatch.setattr(threaded, "AUTO", True)
    # (the lane without C extensions has no C loop: processes there)
    assert threaded.wanted(sql, show_live=False) is fastloop.available
    assert not threaded.wanted(shell, show_live=False)  # the Python engine's
    assert not threaded.wanted(sql, show_live=True)
    monkeypatch.setenv("PGSURGE_NO_FASTLOOP", "1")
    assert not threaded.wanted(sql, show_live=False)
    monkeypatch.setenv(threaded.ENV, "threads")
    assert threaded.wanted(sql, show_live=False)
    assert threaded.wanted(shell, show_live=False)
    assert not threaded.wanted(sql, show_live=True)
    assert not threaded.wanted(python, show_live=False)
    monkeypatch.setenv(threaded.ENV, "processes")
    monkeypatch.delenv("PGSURGE_NO_FASTLOOP")
    assert not threaded.wanted(sql, show_live=False)


def test_a_late_stop_writes_to_no_reused_descriptor() -> None:
    """A stop (or -T's alarm) that comes once the thread has ended and
    closed its wake-up pipe: the pipe's descriptor numbers may be another
    file's by then (a -C connection of another worker, a log file), which
    the stop must not write its byte to. The parent gives such a worker up
    (``kill``) when its result is still in the pipe at the grace's end."""
    worker = ThreadWorker(lambda host: 0, (), "w")
    numbers = {worker.wake_r, worker._wake_w}
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    r, w = os.pipe()  # the lowest free numbers: the closed pipe's
    try:
        assert numbers & {r, w}, "the numbers were not reused"
        worker.kill()
        worker.request_stop()
        assert not _readable(r, 0.2)
        os.write(w, b"!")  # and the descriptors are still this pipe's
        assert os.read(r, 8) == b"!"
    finally:
        os.close(r)
        os.close(w)


def test_threads_only_where_the_open_file_limit_holds_them(
    monkeypatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Worker threads hold every client's socket and each worker's pipes
    and epoll in one process, where -j processes share them out: the soft
    limit is raised for them where the hard limit allows; where it does
    not, an unasked run keeps its processes (an asked one fails as it
    must, with the hint to ask for processes)."""
    import resource

    limits = [100, 100]
    monkeypatch.setattr(resource, "getrlimit", lambda which: tuple(limits))
    monkeypatch.setattr(
        resource, "setrlimit", lambda which, new: limits.__setitem__(0, new[0])
    )
    few = _specs(["-c", "4", "-j", "2"], tmp_path)
    # 60 clients + 2 workers' files + this process's own: 136 files
    many = [_Spec(few[0].config, few[0].scripts, 30)] * 2
    assert threaded.files_fit(few)
    assert not threaded.files_fit(many)
    monkeypatch.delenv("PGSURGE_NO_FASTLOOP", raising=False)
    monkeypatch.delenv(threaded.ENV, raising=False)
    monkeypatch.setattr(threaded, "AUTO", True)
    assert threaded.wanted(few, show_live=False) is fastloop.available
    assert not threaded.wanted(many, show_live=False)
    monkeypatch.setenv(threaded.ENV, "threads")
    assert threaded.wanted(many, show_live=False)
    limits[1] = 1000  # a hard limit with room: the soft one is raised
    assert threaded.files_fit(many)
    assert limits[0] == 60 + 2 * threaded.WORKER_FILES + threaded.BASE_FILES


def test_a_misspelt_choice_is_an_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``PGSURGE_WORKERS=thread`` silently ignored would measure what the
    user did not ask for."""
    import pytest

    from pgsurge.errors import PgsurgeError

    monkeypatch.setenv(threaded.ENV, "thread")
    with pytest.raises(PgsurgeError, match='must be "threads" or "processes"'):
        threaded.requested()
    for choice in ("threads", "processes", ""):
        monkeypatch.setenv(threaded.ENV, choice)
        assert threaded.requested() == choice
