"""Initialization mode (``-i``): pgbench's init steps, in pgbench's words.

:func:`run_init` connects once, runs each step letter of ``cfg.steps`` in
order (``d`` drop, ``t`` create, ``g``/``G`` generate client/server side,
``v`` vacuum, ``p`` primary keys, ``f`` foreign keys; spaces are skipped),
times each one, and ends with pgbench's summary line::

    done in 1.23 s (drop tables 0.01 s, create tables 0.01 s, ...).

Everything goes to stderr, as with pgbench. Failures raise
:class:`~pgsurge.errors.InitError` / :class:`~pgsurge.errors.ConnectError`
whose ``format()`` is pgbench's message layout.

:func:`ensure_initialized` (``init.auto``) is for the embedded server: it
creates the tables (scale 1) when they are missing, once however many runs
start together, and again when its own initialization was interrupted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO

from pgsurge.config import InitConfig, PartitionMethod
from pgsurge.errors import InitError
from pgsurge.init import schema
from pgsurge.init.session import Output, Session, cancel_on_interrupt

if TYPE_CHECKING:
    import psycopg

__all__ = ["ensure_initialized", "run_init"]


@dataclass(slots=True)
class _Run:
    """What the steps of one run share."""

    cfg: InitConfig
    session: Session
    #: steps after the current one, to decide where a pending freeze goes
    rest: str = ""
    #: accounts were loaded in parallel and the next ``v`` must freeze them
    freeze_in_vacuum: bool = False

    @property
    def out(self) -> Output:
        return self.session.out


def _drop_tables(run: _Run) -> None:
    run.out.write("dropping old tables...\n")
    run.session.execute(schema.DROP_TABLES_SQL)


def _create_tables(run: _Run) -> None:
    run.out.write("creating tables...\n")
    for sql in schema.create_table_statements(run.cfg):
        run.session.execute(sql)
    if run.cfg.partition_method is not PartitionMethod.NONE:
        run.out.write(f"creating {run.cfg.partitions} partitions...\n")
        for sql in schema.partition_statements(run.cfg):
            run.session.execute(sql)


def _generate_client_side(run: _Run) -> None:
    # the generators are imported by the steps that use them: a run on the
    # embedded server imports this package only to check its tables
    from pgsurge.init.generate import generate_client_side

    cfg = run.cfg

    def open_session() -> Session:
        return run.session.reopen(cfg.conn)

    if not generate_client_side(run.session, cfg, open_session):
        return
    # The parallel load could not use COPY FREEZE. Freeze in the next step
    # that vacuums; if a later step replaces the data anyway, don't bother;
    # if none follows, freeze now so the tables end up as pgbench leaves them.
    upcoming = [s for s in run.rest if s in "dtgGv"]
    if upcoming and upcoming[0] == "v":
        run.freeze_in_vacuum = True
    elif not upcoming:
        run.session.execute(_FREEZE_ACCOUNTS)
        _settle_freeze(run)


_FREEZE_ACCOUNTS = "vacuum (freeze) pgbench_accounts"
_ALL_VISIBLE_SQL = (
    "select relpages, relallvisible from pg_catalog.pg_class"
    " where oid = 'pgbench_accounts'::regclass"
)


def _settle_freeze(run: _Run, tries: int = 5) -> None:
    """After the freeze that stands in for COPY FREEZE: a snapshot held
    elsewhere in the cluster at that moment (an autovacuum's ANALYZE,
    another session's query) keeps the newest rows from being marked
    all-visible and frozen, which COPY FREEZE does whatever else runs;
    vacuum again, a few times, briefly, until every page is (a long
    transaction elsewhere wins: the tables are then as any vacuum leaves
    them)."""
    for _ in range(tries):
        try:
            row = run.session.conn.execute(_ALL_VISIBLE_SQL).fetchone()
        except Exception:  # best effort: the load itself is done
            return
        if row is None or row[1] >= row[0]:
            return
        time.sleep(0.2)
        run.session.execute(_FREEZE_ACCOUNTS)


def _generate_server_side(run: _Run) -> None:
    from pgsurge.init.generate import generate_server_side  # as above

    generate_server_side(run.session, run.cfg.scale)


def _vacuum(run: _Run) -> None:
    run.out.write("vacuuming...\n")
    for sql in schema.vacuum_statements(freeze_accounts=run.freeze_in_vacuum):
        run.session.execute(sql)
    if run.freeze_in_vacuum:
        _settle_freeze(run)
    run.freeze_in_vacuum = False


def _primary_keys(run: _Run) -> None:
    run.out.write("creating primary keys...\n")
    for sql in schema.primary_key_statements(run.cfg.index_tablespace):
        run.session.execute(sql)


def _foreign_keys(run: _Run) -> None:
    run.out.write("creating foreign keys...\n")
    for sql in schema.FOREIGN_KEYS_SQL:
        run.session.execute(sql)


#: step letter → (name in the "done in" line, action)
STEPS: dict[str, tuple[str, Callable[[_Run], None]]] = {
    "d": ("drop tables", _drop_tables),
    "t": ("create tables", _create_tables),
    "g": ("client-side generate", _generate_client_side),
    "G": ("server-side generate", _generate_server_side),
    "v": ("vacuum", _vacuum),
    "p": ("primary keys", _primary_keys),
    "f": ("foreign keys", _foreign_keys),
}


def run_init(cfg: InitConfig, *, stream: TextIO | None = None) -> None:
    """Do what ``pgbench -i`` does; progress and summary go to ``stream``."""
    if cfg.partitions > 0 and cfg.partition_method is PartitionMethod.NONE:
        # pgbench's default method once partitions are asked for
        cfg = replace(cfg, partition_method=PartitionMethod.RANGE)
    out = Output(stream if stream is not None else sys.stderr)
    if cfg.workload is not None and cfg.workload.loader is not None:
        _init_workload(cfg, out)
        return
    session = Session.open(cfg.conn, out)
    try:
        with cancel_on_interrupt(out):
            run = _Run(cfg, session)
            parts: list[str] = []
            total = 0.0
            for i, letter in enumerate(cfg.steps):
                if letter == " ":
                    continue
                if letter not in STEPS:
                    raise InitError(f'unrecognized initialization step "{letter}"')
                name, action = STEPS[letter]
                run.rest = cfg.steps[i + 1 :]
                start = time.perf_counter()
                action(run)
                elapsed = time.perf_counter() - start
                parts.append(f"{name} {elapsed:.2f} s")
                total += elapsed
            out.write(f"done in {total:.2f} s ({', '.join(parts)}).\n")
    finally:
        session.close()


def _init_workload(cfg: InitConfig, out: Output) -> None:
    """-i -b NAME / -i -f FILE.py: the Python workload's own loader (a
    workload without one, py-tpcb, uses pgbench's tables and steps)."""
    from pgsurge.workloads.loading import run_loader

    session = Session.open(cfg.conn, out)
    password = session.password
    session.close()

    def connect() -> psycopg.Connection[Any]:
        return Session.open(cfg.conn, out, password).conn

    elapsed = run_loader(cfg.workload, connect, cfg.scale, cfg.init_jobs, out.stream)
    out.write(f"done in {elapsed:.2f} s ({cfg.workload.name}).\n")


from pgsurge.init.auto import ensure_initialized  # noqa: E402 (uses run_init)
