"""The test server's databases for benchmark runs (fixtures and helpers).

* ``bench_template`` (session): one database initialised once per session
  by the reference ``pgbench -i -s 1``, then closed to connections and
  marked a template. Nothing runs in it.
* ``bench_db`` (per test): ``CREATE DATABASE … TEMPLATE`` of it, a copy
  the test may change at will, dropped at the end. A test that needs
  another scale or partitioning initialises a ``fresh_db`` itself.
* ``draws_db`` (per test): a ``fresh_db`` with the tables ``t`` (scripts
  insert the values they drew: client, script, a, b) and ``u`` (v), for
  comparing runs row by row; :func:`take_rows` reads ``t`` and empties it,
  and :func:`run_both_loops` runs the same arguments on the C loop, then
  on the Python loop, each followed by :func:`take_rows`;
  :func:`run_worker` runs one worker in this process (to look at its loop).

The template is made by the reference pgbench, so this plugin uses
``tests/fix_run.py``'s programs (not the other way round).
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsurge.cli.options import parse_command_line
from pgsurge.config import RunConfig
from pgsurge.engine import fastloop, protocol, worker
from pgsurge.engine.state import WorkerState
from pgsurge.prng import derive_streams
from pgsurge.runner import parse_scripts
from pgsurge.stats.results import WorkerResult
from tests.fix_run import Outcome, run_pgbench, run_pgsurge

#: the scale of the template database
TEMPLATE_SCALE = 1


def _admin_execute(server_dsn: str, *statements: sql.Composable) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def create_database(server_dsn: str, prefix: str, template: str | None = None) -> str:
    """A new database (copied from ``template`` if given); its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("{} TEMPLATE {}").format(
            statement, sql.Identifier(template)
        )
    _admin_execute(server_dsn, statement)
    return name


def drop_database(server_dsn: str, name: str) -> None:
    _admin_execute(
        server_dsn,
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
    )


def db_dsn(server_dsn: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)


@pytest.fixture(scope="session")
def bench_template(server_dsn: str, pgbench_bin: Path) -> Iterator[str]:
    """The name of a database initialised once by ``pgbench -i -s 1``
    (a template: no connections; copy it through ``bench_db``)."""
    name = create_database(server_dsn, "t_template")
    try:
        outcome = run_pgbench(
            pgbench_bin,
            ["-i", "-s", str(TEMPLATE_SCALE), "-q"],
            db_dsn(server_dsn, name),
        )
        assert outcome.status == 0, outcome.stderr
        ident = sql.Identifier(name)
        _admin_execute(
            server_dsn,
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(ident),
            sql.SQL("ALTER DATABASE {} IS_TEMPLATE true").format(ident),
        )
        yield name
    finally:
        _admin_execute(
            server_dsn,
            sql.SQL("ALTER DATABASE {} IS_TEMPLATE false").format(sql.Identifier(name)),
        )
        drop_database(server_dsn, name)


@pytest.fixture
def bench_db(server_dsn: str, bench_template: str) -> Iterator[str]:
    """A database of the pgbench tables at scale 1 for one test (a copy of
    the session's template); yields its conninfo string."""
    name = create_database(server_dsn, "t", template=bench_template)
    yield db_dsn(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.fixture
def draws_db(fresh_db: str) -> str:
    """A new database with the tables ``t`` and ``u`` (module docstring)."""
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t"
            " (id bigserial PRIMARY KEY, cid int, s int, a bigint, b bigint)"
        )
        conn.execute("CREATE TABLE u (v int)")
    return fresh_db


Row = tuple[int, int, int, int]


def take_rows(dsn: str) -> list[Row]:
    """The rows of ``t`` (client, script, a, b) in the order each client
    inserted them; ``t`` is emptied for the next run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT cid, s, a, b FROM t ORDER BY cid, id").fetchall()
        conn.execute("TRUNCATE t")
    return rows


def run_both_loops(
    args: Sequence[str], dsn: str, cwd: Path
) -> tuple[Outcome, list[Row], Outcome, list[Row]]:
    """The same run on the C loop, then on the Python loop, each followed by
    the rows it left in ``t``: (fast, fast_rows, slow, slow_rows)."""
    fast = run_pgsurge(args, dsn, cwd=cwd, loop="c")
    fast_rows = take_rows(dsn)
    slow = run_pgsurge(args, dsn, cwd=cwd, loop="python")
    return fast, fast_rows, slow, take_rows(dsn)


def run_worker(
    args: list[str],
    dsn: str,
    variables: tuple[tuple[str, Any], ...] = (("scale", 1000),),
) -> tuple[WorkerState, WorkerResult]:
    """``worker._run`` for one worker of these arguments (``-j 1``), in this
    process, with the parent's side of its pipe in a thread; returns its
    state and result. Tests read the loop it used through a spy on
    ``FastEventLoop.use_c`` (``_fast.handbacks``, ``_fast.py_calls``)."""
    cfg = parse_command_line([*args, dsn], environ={})
    assert isinstance(cfg, RunConfig)
    parsed = parse_scripts(cfg)
    seeds = derive_streams(cfg.random_seed, cfg.clients, 1)
    spec = worker.WorkerSpec(
        worker_id=0,
        config=cfg,
        scripts=parsed,
        first_client=0,
        nclients=cfg.clients,
        nthreads=1,
        client_rngs=seeds.clients,
        streams=seeds.threads[0],
        variables=variables,
        set_client_id=True,
        detailed=True,
    )
    states: list[WorkerState] = []
    real = worker.WorkerState

    def capture(**kw: Any) -> WorkerState:
        states.append(real(**kw))
        return states[-1]

    parent, child = Pipe()
    got: list[Any] = []

    def drive() -> None:
        assert isinstance(parent.recv(), protocol.Ready)
        # as the parent's drive._start: -T (after --warmup) from the start
        start = time.monotonic_ns() // 1000
        window = start + cfg.warmup * 1_000_000 if cfg.warmup else 0
        end = (window or start) + cfg.duration * 1_000_000 if cfg.duration else 0
        parent.send(protocol.Steady(start, end, window))
        assert isinstance(parent.recv(), protocol.Connected)
        parent.send(protocol.Go())
        got.append(parent.recv())

    thread = threading.Thread(target=drive)
    thread.start()
    threshold = gc.get_threshold()
    worker.WorkerState = capture  # type: ignore[misc, assignment]
    try:
        worker._run(spec, child)
    finally:
        worker.WorkerState = real  # type: ignore[misc]
        gc.unfreeze()
        gc.set_threshold(*threshold)
        thread.join(30)
    assert got and isinstance(got[0], protocol.Done), got
    return states[0], got[0].result


@pytest.fixture
def c_loops(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The C event loops that :func:`run_worker` runs in-process, under
    ``PGSURGE_FASTLOOP=require`` (a run the C loop does not take fails):
    a test reads their counters (``_fast.py_calls``, ``_fast.handbacks``)
    to prove that C ran the commands."""
    loops: list[Any] = []
    use_c = fastloop.FastEventLoop.use_c

    def spy(self: fastloop.FastEventLoop, *a: Any) -> None:
        loops.append(self)
        use_c(self, *a)

    monkeypatch.setattr(fastloop.FastEventLoop, "use_c", spy)
    monkeypatch.setenv("PGSURGE_FASTLOOP", "require")
    return loops
