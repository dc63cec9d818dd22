"""The C loop runs a script's transactions without the GIL (issue: workers as threads).

``FastLoop.run`` gives the GIL up once its loop starts and takes it back
only where it must touch CPython (a hand-back to Python, an error, a tick,
the return); ``FastLoop.gil_takes`` counts the takes. The first tests run
one worker in this process (:func:`tests.fix_db.run_worker`, under
``PGSURGE_FASTLOOP=require``) through thousands of transactions of each
kind the C loop runs (plain SQL, tpcb-like, random_zipfian and
random_gaussian, a pipeline, -C, -l) and require a count of takes that does
not grow with the transactions. The last ones run two C loops in two
threads of this process against the server, at the same time, with a
Python thread counting beside them.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.engine import fastloop, interrupt, protocol, worker
from pgsurge.prng import derive_streams
from pgsurge.runner import parse_scripts
from pgsurge.stats.results import WorkerResult
from tests.fix_db import run_worker

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not fastloop.available, reason="pgsurge._fastloop not usable"),
]

#: transactions per client of the counted runs
TX = 2000

_PLAIN = "\\set a random(1, 100000)\nSELECT :a;\n"
_DISTRIBUTIONS = (
    "\\set a random_zipfian(1, 100000, 1.07)\n"
    "\\set b random_gaussian(1, 100000, 2.5)\n"
    "\\set c random_exponential(1, 100000, 3.0)\n"
    "\\set d (:a + :b) * 2 % 1000 + abs(:c - 7)\n"
    "SELECT :a, :b, :c, :d;\n"
)
_PIPELINE = (
    "\\set a random(1, 1000)\n"
    "\\startpipeline\nSELECT :a;\nSELECT :a + 1;\n\\endpipeline\n"
)
_NOTICE = "DO $$ BEGIN RAISE NOTICE 'n'; END $$;\n"
_SLEEP = "\\set a random(1, 1000)\n\\sleep 0 us\nSELECT :a;\n"

# (id, script text or None for -b tpcb-like, extra arguments, clients, tx)
_CASES = [
    ("plain-simple", _PLAIN, ["-M", "simple"], 2, TX),
    ("plain-prepared", _PLAIN, ["-M", "prepared", "-r"], 2, TX),
    ("tpcb-like", None, ["-b", "tpcb-like", "-M", "extended"], 2, TX),
    ("distributions", _DISTRIBUTIONS, ["-M", "extended"], 2, TX),
    ("pipeline", _PIPELINE, ["-M", "extended"], 2, TX),
    ("sleep", _SLEEP, [], 2, TX),
    ("connect-each", _PLAIN, ["-C", "-M", "prepared"], 2, 1000),
    ("log", _PLAIN, ["-l"], 2, TX),
    ("aggregate-log", _PLAIN, ["-l", "--aggregate-interval", "1"], 2, TX),
    # psycopg's notice receiver takes the GIL itself (PyGILState_Ensure)
    ("notice", _NOTICE, ["-M", "extended"], 2, 200),
]


def _args(tmp_path: Path, script: str | None, extra: list[str]) -> list[str]:
    args = ["-n", *extra]
    if script is not None:
        (tmp_path / "s.sql").write_text(script)
        args += ["-f", str(tmp_path / "s.sql")]
    return args


@pytest.mark.parametrize(
    ("script", "extra", "clients", "tx"),
    [c[1:] for c in _CASES],
    ids=[c[0] for c in _CASES],
)
def test_gil_taken_o1_times(
    c_loops: list[Any],
    bench_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: str | None,
    extra: list[str],
    clients: int,
    tx: int,
) -> None:
    # -l writes its file in the working directory
    monkeypatch.chdir(tmp_path)
    args = [*_args(tmp_path, script, extra), "-c", str(clients), "-t", str(tx)]
    _w, result = run_worker(args, bench_db)
    total = clients * tx
    assert result.total.cnt == total
    assert len(c_loops) == 1
    fast = c_loops[0]._fast
    # C ran the transactions (a hand-back or two per client, not per
    # transaction) ...
    assert fast.handbacks <= 3 * clients, fast.handbacks
    # ... and gave the GIL up while it did: it took it back (at least at
    # its return) a number of times that does not grow with them
    assert 1 <= fast.gil_takes < total / 20, (fast.gil_takes, fast.py_calls)
    assert fast.gil_takes <= 40, (fast.gil_takes, fast.py_calls)


def test_gil_takes_do_not_grow(
    c_loops: list[Any], bench_db: str, tmp_path: Path
) -> None:
    # the same run at -t 200 and -t 2000 takes the GIL as often: per
    # client and per run() call, never per transaction
    args = [*_args(tmp_path, _PIPELINE, ["-M", "extended"]), "-c", "3"]
    takes = []
    for t in (200, 2000):
        c_loops.clear()
        _w, result = run_worker([*args, "-t", str(t)], bench_db)
        assert result.total.cnt == 3 * t
        takes.append(c_loops[0]._fast.gil_takes)
    assert takes[1] <= takes[0] + 2, takes


def test_python_workload_keeps_the_gil(c_loops: list[Any], bench_db: str) -> None:
    # a Python workload's generators are Python: its loop never gives the
    # GIL up, so it never takes it back (gil_takes 0)
    args = ["-n", "-b", "py-tpcb", "-c", "2", "-t", "50"]
    _w, result = run_worker(args, bench_db, variables=(("scale", 1),))
    assert result.total.cnt == 100
    assert c_loops and c_loops[0]._fast.gil_takes == 0


# ---------------------------------------------------------------------------
# two C loops in two threads of one process


def _spec(cfg: RunConfig, worker_id: int, nworkers: int) -> worker.WorkerSpec:
    per = cfg.clients // nworkers
    seeds = derive_streams(cfg.random_seed, cfg.clients, nworkers)
    first = worker_id * per
    return worker.WorkerSpec(
        worker_id=worker_id,
        config=cfg,
        scripts=parse_scripts(cfg),
        first_client=first,
        nclients=per,
        nthreads=nworkers,
        client_rngs=tuple(seeds.clients[first : first + per]),
        streams=seeds.threads[worker_id],
        variables=(("scale", 1),),
        set_client_id=True,
        detailed=True,
    )


def _worker_thread(spec: worker.WorkerSpec, out: dict[int, Any]) -> threading.Thread:
    """A thread running ``worker._run`` of ``spec``, with its parent's side
    of the pipe in another; ``out[worker_id]`` gets its Done (or the
    exception it raised)."""
    parent, child = Pipe()
    cfg = spec.config

    def drive() -> None:
        # (an EOFError once the worker failed: its end is closed)
        assert isinstance(parent.recv(), protocol.Ready)
        start = time.monotonic_ns() // 1000
        end = start + cfg.duration * 1_000_000 if cfg.duration else 0
        parent.send(protocol.Steady(start, end, 0))
        assert isinstance(parent.recv(), protocol.Connected)
        parent.send(protocol.Go())
        out[spec.worker_id] = parent.recv()

    def body() -> None:
        driver = threading.Thread(target=drive)
        driver.start()
        try:
            worker._run(spec, child)
        except BaseException as exc:  # reported by the test
            out[-1 - spec.worker_id] = exc
        finally:
            child.close()
            driver.join(60)

    return threading.Thread(target=body, name=f"worker-{spec.worker_id}")


@pytest.fixture
def thread_loops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The C loops of the workers run in threads, under
    ``PGSURGE_FASTLOOP=require``. Each is given a wakeup descriptor of its
    own (``set_signal_fd``: the pipe a threaded worker's stop is written
    to), as a worker run as a thread must have: without one the loop looks
    at ``timer_exceeded`` after every wait, taking the GIL each time. The
    workers' signal handlers are not installed (only the main thread may;
    a threaded run's stop is the main thread's business)."""
    monkeypatch.setattr(interrupt.WorkerStop, "install", lambda self: None)
    loops: list[Any] = []
    pipes: list[int] = []
    use_c = fastloop.FastEventLoop.use_c

    def spy(self: fastloop.FastEventLoop, *a: Any) -> None:
        use_c(self, *a)
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        pipes.extend((rfd, wfd))
        self._fast.set_signal_fd(rfd)
        loops.append(self)

    monkeypatch.setattr(fastloop.FastEventLoop, "use_c", spy)
    monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
    yield loops
    for fd in pipes:
        os.close(fd)


def _run_threads(args: list[str], dsn: str) -> tuple[dict[int, Any], int, float]:
    """Two workers of ``args`` (-c even) as two threads, and a Python thread
    counting while they run: their outcomes, the count and the seconds."""
    cfg = parse_command_line([*args, dsn], environ={})
    assert isinstance(cfg, RunConfig)
    out: dict[int, Any] = {}
    threads = [_worker_thread(_spec(cfg, w, 2), out) for w in range(2)]
    stop = threading.Event()
    counted = [0]

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    seconds = time.monotonic() - t0
    stop.set()
    counter.join(10)
    assert not any(t.is_alive() for t in threads)
    return out, counted[0], seconds


def _result(out: dict[int, Any], w: int) -> WorkerResult:
    assert -1 - w not in out, out[-1 - w]
    done = out.get(w)
    assert isinstance(done, protocol.Done), done
    return done.result


@pytest.mark.parametrize(
    "extra",
    [
        ["-M", "simple"],
        ["-M", "prepared", "-r"],
        ["-b", "tpcb-like"],
        ["-M", "extended", "-C"],
    ],
    ids=["simple", "prepared", "tpcb-like", "connect-each"],
)
def test_two_loops_in_two_threads(
    thread_loops: list[Any], bench_db: str, tmp_path: Path, extra: list[str]
) -> None:
    script = None if "-b" in extra else _DISTRIBUTIONS
    tx = 300 if "-C" in extra else 1500
    args = [*_args(tmp_path, script, extra), "-c", "4", "-j", "2", "-t", str(tx)]
    out, counted, _seconds = _run_threads(args, bench_db)
    for w in range(2):
        assert _result(out, w).total.cnt == 2 * tx
    assert len(thread_loops) == 2
    for loop in thread_loops:
        fast = loop._fast
        assert fast.handbacks <= 3 * 2, fast.handbacks
        assert 1 <= fast.gil_takes < 2 * tx / 20, fast.gil_takes
    # the Python thread ran while the loops did
    assert counted > 1000


def test_two_loops_run_at_once(
    thread_loops: list[Any], draws_db: str, tmp_path: Path
) -> None:
    # the two loops ran over the same stretch of time: in the order the
    # rows went in, the worker that inserted changes many times (two loops
    # one after the other would change it once), and every row is there
    (tmp_path / "w.sql").write_text(
        "INSERT INTO t (cid, s, a, b) VALUES (:client_id, 0, 0, 0);\n"
    )
    args = ["-n", "-f", str(tmp_path / "w.sql"), "-c", "2", "-j", "2", "-t", "1500"]
    out, _counted, _seconds = _run_threads(args, draws_db)
    assert _result(out, 0).total.cnt == _result(out, 1).total.cnt == 1500
    with psycopg.connect(draws_db, autocommit=True) as conn:
        cids = [r[0] for r in conn.execute("SELECT cid FROM t ORDER BY id")]
    assert len(cids) == 3000
    assert sorted(set(cids)) == [0, 1]
    switches = sum(1 for a, b in itertools.pairwise(cids) if a != b)
    assert switches > 50, switches
