"""Data generation: client-side COPY (``g``), server-side INSERT (``G``).

Client-side rows are exactly the text pgbench sends (``aid\\tbid\\t0\\t`` for
accounts, whose filler is an empty string; ``\\N`` fillers for branches and
tellers), built a block at a time: a block never crosses a multiple of
100,000 rows, so every account row of a block has the same ``bid``, and a
whole branch's block is one ``bytes.join`` of precomputed id suffixes.
Rows go into one COPY per table, inside the transaction that truncated the
tables, with FREEZE where pgbench uses it (ordinary tables, server 14 or
later).

``--init-jobs N`` (a pgsurge extension) loads pgbench_accounts over N
connections in parallel, each with one contiguous, block-aligned range of
aids. COPY FREEZE needs the table truncated in the copying transaction,
which N connections cannot share, so these copies run without FREEZE and
the caller freezes the table afterwards with VACUUM (FREEZE) (in the ``v``
step when one follows), leaving the same rows, all frozen, as pgbench.
A partitioned pgbench_accounts is never loaded with FREEZE (pgbench does
not either), so nothing is left to freeze there.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pgsurge.config import InitConfig
from pgsurge.init.progress import ROWS_PER_LINE, Progress
from pgsurge.init.schema import (
    ACCOUNTS_PER_SCALE,
    BRANCHES_PER_SCALE,
    TELLERS_PER_SCALE,
    TRUNCATE_TABLES_SQL,
    copy_statement,
    server_side_insert_statements,
)
from pgsurge.init.session import Output, Session

#: First server version where pgbench loads ordinary tables WITH (FREEZE ON)
FREEZE_MIN_SERVER = 140000

#: Rows per COPY block; the progress cadence, and the accounts per branch.
BLOCK_ROWS = ROWS_PER_LINE
assert ACCOUNTS_PER_SCALE % BLOCK_ROWS == 0


def branch_rows(start: int, end: int) -> bytes:
    """COPY text of branches number ``start+1 … end``."""
    return "".join(f"{k}\t0\t\\N\n" for k in range(start + 1, end + 1)).encode()


def teller_rows(start: int, end: int) -> bytes:
    """COPY text of tellers number ``start+1 … end``."""
    return "".join(
        f"{k + 1}\t{k // TELLERS_PER_SCALE + 1}\t0\t\\N\n" for k in range(start, end)
    ).encode()


def account_rows(start: int, end: int) -> bytes:
    """COPY text of accounts ``start+1 … end``, all of one branch."""
    bid = start // ACCOUNTS_PER_SCALE + 1
    if end <= start or (end - 1) // ACCOUNTS_PER_SCALE + 1 != bid:
        raise ValueError(f"account block {start}..{end} spans branches")
    if end - start == ACCOUNTS_PER_SCALE:
        return _branch_accounts(bid)
    tail = f"\t{bid}\t0\t\n"
    return (tail.join(map(str, range(start + 1, end + 1))) + tail).encode("ascii")


@functools.cache
def _low_digits() -> list[bytes]:
    """b"00001" … b"99999": the last five digits of an account id."""
    width = len(str(ACCOUNTS_PER_SCALE)) - 1
    return [b"%0*d" % (width, i) for i in range(1, ACCOUNTS_PER_SCALE)]


@functools.cache
def _first_branch_accounts() -> bytes:
    return account_rows(0, ACCOUNTS_PER_SCALE - 1) + b"%d\t1\t0\t\n" % (
        ACCOUNTS_PER_SCALE
    )


def _branch_accounts(bid: int) -> bytes:
    """All accounts of branch ``bid``, fast: no int → str per row.

    Branch ``b+1`` holds ids ``b·100000+1 … (b+1)·100000``: all but the last
    are the digits of ``b`` followed by five fixed digits, so the block is
    one join of precomputed suffixes (a memcpy, ~15x faster than str()).
    """
    if bid == 1:
        return _first_branch_accounts()
    tail = b"\t%d\t0\t\n" % bid
    high = b"%d" % (bid - 1)
    last = b"%d" % (bid * ACCOUNTS_PER_SCALE)
    return high + (tail + high).join(_low_digits()) + tail + last + tail


@dataclass(frozen=True, slots=True)
class TableLoad:
    """One table of the client-side load."""

    name: str
    per_scale: int
    rows: Callable[[int, int], bytes]


# Branches, tellers, accounts: the order in which existing foreign keys
# are satisfied.
BRANCHES = TableLoad("pgbench_branches", BRANCHES_PER_SCALE, branch_rows)
TELLERS = TableLoad("pgbench_tellers", TELLERS_PER_SCALE, teller_rows)
ACCOUNTS = TableLoad("pgbench_accounts", ACCOUNTS_PER_SCALE, account_rows)


def block_bounds(start: int, end: int) -> Iterator[tuple[int, int]]:
    """Split rows ``[start, end)`` at every multiple of BLOCK_ROWS."""
    while start < end:
        stop = min((start // BLOCK_ROWS + 1) * BLOCK_ROWS, end)
        yield start, stop
        start = stop


def _would_freeze(session: Session, table: str) -> bool:
    # pgbench asks the server for every table, partitioned or not.
    return session.server_version >= FREEZE_MIN_SERVER and session.relkind(table) == "r"


def populate(session: Session, load: TableLoad, scale: int, quiet: bool) -> None:
    """Load one whole table over ``session``, with pgbench's progress lines."""
    total = load.per_scale * scale
    freeze = _would_freeze(session, load.name)
    progress = Progress(session.out, load.name, total, quiet=quiet)
    chunks = ((load.rows(lo, hi), hi) for lo, hi in block_bounds(0, total))
    session.copy_in(
        copy_statement(load.name, freeze=freeze),
        chunks,
        progress.advance_to,
        progress.finish,
    )


def generate_client_side(
    session: Session, cfg: InitConfig, open_session: Callable[[], Session]
) -> bool:
    """The ``g`` step. True when accounts still need the freeze pgbench gets.

    ``open_session`` makes the extra connections of ``--init-jobs``.
    """
    session.out.write("generating data (client-side)...\n")
    # One transaction, so the backend may skip WAL and write frozen rows.
    session.execute("begin")
    session.execute(TRUNCATE_TABLES_SQL)
    populate(session, BRANCHES, cfg.scale, cfg.quiet)
    populate(session, TELLERS, cfg.scale, cfg.quiet)
    jobs = min(cfg.init_jobs, cfg.scale)
    if jobs <= 1:
        populate(session, ACCOUNTS, cfg.scale, cfg.quiet)
        session.execute("commit")
        return False
    needs_freeze = _would_freeze(session, ACCOUNTS.name)
    # The parallel copies need to see the truncated table: commit first.
    session.execute("commit")
    load_accounts_parallel(session.out, open_session, cfg.scale, jobs, cfg.quiet)
    return needs_freeze


class _Stopped(Exception):
    """Another job failed: this one abandons its COPY."""


def job_ranges(scale: int, jobs: int) -> list[tuple[int, int]]:
    """Contiguous, block-aligned account row ranges, one per job."""
    per = ACCOUNTS_PER_SCALE
    return [
        (scale * i // jobs * per, scale * (i + 1) // jobs * per) for i in range(jobs)
    ]


def load_accounts_parallel(
    out: Output,
    open_session: Callable[[], Session],
    scale: int,
    jobs: int,
    quiet: bool,
) -> None:
    """COPY pgbench_accounts over ``jobs`` connections, one thread each.

    psycopg releases the GIL while it waits on the socket, and the server
    side of COPY is what costs, so threads suffice. Jobs report each block
    they have sent; this thread sums them into one progress line stream.
    """
    total = ACCOUNTS_PER_SCALE * scale
    events: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
    stop = threading.Event()

    def chunks(lo: int, hi: int) -> Iterator[tuple[bytes, int]]:
        for start, end in block_bounds(lo, hi):
            if stop.is_set():
                raise _Stopped
            yield account_rows(start, end), end - start

    def job(lo: int, hi: int) -> None:
        try:
            session = open_session()
            try:
                session.copy_in(
                    copy_statement(ACCOUNTS.name, freeze=False),
                    chunks(lo, hi),
                    lambda rows: events.put((rows, None)),
                    lambda: None,
                )
            finally:
                session.close()
        except BaseException as exc:  # reported to, and raised by, the caller
            events.put((-1, exc))
        else:
            events.put((-1, None))

    progress = Progress(out, ACCOUNTS.name, total, quiet=quiet)
    threads = [
        threading.Thread(target=job, args=bounds, name=f"pgsurge-init-{i}", daemon=True)
        for i, bounds in enumerate(job_ranges(scale, jobs))
    ]
    error: BaseException | None = None
    try:
        for thread in threads:
            thread.start()
        done = finished = 0
        while finished < len(threads):
            rows, exc = events.get()
            if rows >= 0:
                done += rows
                progress.advance_to(done)
                continue
            finished += 1
            if exc is not None and not isinstance(exc, _Stopped) and error is None:
                error = exc
                stop.set()
        progress.finish()
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join()
    if error is not None:
        raise error


def generate_server_side(session: Session, scale: int) -> None:
    """The ``G`` step: one transaction of INSERT … generate_series."""
    session.out.write("generating data (server-side)...\n")
    session.execute("begin")
    session.execute(TRUNCATE_TABLES_SQL)
    for sql in server_side_insert_statements(scale):
        session.execute(sql)
    session.execute("commit")
