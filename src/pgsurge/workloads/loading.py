"""A workload's data loading for ``pgsurge -i -b NAME`` / ``-i -f FILE.py``.

The workload's ``@load`` function receives a :class:`Loader`: blocking
``execute`` of DDL (parameters as ``$1..$n``, as in ``sql()``), ``copy``
of generated rows (COPY FROM STDIN, text
format, sent in large chunks), the ``scale`` (``-s``) and ``parallel``,
which runs a function over parts of the data on ``--init-jobs``
connections at once (forked processes: generating rows is Python work, so
one process per job is what makes it parallel).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import psycopg

from pgsurge.workloads.api import split_params
from pgsurge.workloads.loader import Workload, WorkloadError, import_error

__all__ = ["LoadError", "Loader", "run_loader"]

#: bytes of COPY data handed to libpq at once
_CHUNK = 1 << 18

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


class LoadError(Exception):
    """A statement or COPY of the loader failed, or a parallel part did."""


def _field(v: object) -> str:
    if v is None:
        return "\\N"
    if type(v) is str:
        return v.translate(_ESCAPES)
    if type(v) is bool:
        return "t" if v else "f"
    return str(v)


class Loader:
    """What a workload's ``@load`` function works with (see the module doc)."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        scale: int,
        jobs: int,
        out: TextIO,
        files: frozenset[str] = frozenset(),
    ) -> None:
        self._connect = connect
        self._conn = connect()
        self.scale = scale
        self.jobs = jobs
        self._out = out
        #: the workload's files: a failed parallel part shows their frames
        self._files = files

    def log(self, text: str) -> None:
        """A progress line on stderr."""
        self._out.write(text.rstrip("\n") + "\n")
        self._out.flush()

    def execute(self, sql: str, params: Sequence[object] | None = None) -> None:
        """Run a statement (autocommit); ``params`` fill its ``$1..$n``."""
        query, values = _psycopg_query(sql, params)
        try:
            self._conn.execute(query, values)
        except psycopg.Error as e:
            raise LoadError(f"query failed: {e}\nQuery was: {sql}") from None

    def copy(
        self, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]
    ) -> int:
        """COPY ``rows`` into ``table`` (``columns`` in order); the row count."""
        statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        n = 0
        buf: list[str] = []
        size = 0
        try:
            with self._conn.cursor() as cur, cur.copy(statement) as cp:
                for row in rows:
                    line = "\t".join([_field(v) for v in row]) + "\n"
                    buf.append(line)
                    size += len(line)
                    n += 1
                    if size >= _CHUNK:
                        cp.write("".join(buf).encode())
                        buf.clear()
                        size = 0
                if buf:
                    cp.write("".join(buf).encode())
        except psycopg.Error as e:
            raise LoadError(f"COPY into {table} failed: {e}") from None
        return n

    def parallel(self, fn: Callable[[Loader, Any], None], parts: Sequence[Any]) -> None:
        """``fn(loader, part)`` for every part, on ``jobs`` connections (and
        processes) at once; in this process when ``jobs`` is 1."""
        if (
            self.jobs <= 1
            or len(parts) <= 1
            or "fork" not in (multiprocessing.get_all_start_methods())
        ):
            for part in parts:
                fn(self, part)
            return
        ctx = multiprocessing.get_context("fork")
        njobs = min(self.jobs, len(parts))
        shares = [list(parts[i::njobs]) for i in range(njobs)]
        procs = [
            ctx.Process(target=self._child, args=(fn, share), daemon=True)
            for share in shares
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise LoadError("a parallel part of the load failed (message above)")

    def _child(self, fn: Callable[[Loader, Any], None], share: list[Any]) -> None:
        part = None
        try:
            loader = Loader(self._connect, self.scale, 1, self._out, self._files)
            for part in share:
                fn(loader, part)
            loader.close()
        except BaseException as e:  # reported by the parent's exit status
            # the exception and the workload's lines that led to it
            files = set(self._files) | {fn.__code__.co_filename}
            what = f"part {part!r} of the load failed"
            sys.stderr.write(import_error(e, files, fn.__name__, what).message + "\n")
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)

    def close(self) -> None:
        self._conn.close()


def _psycopg_query(
    sql: str, params: Sequence[object] | None
) -> tuple[str, list[object] | None]:
    """``sql`` with ``$n`` parameters as psycopg's ``%s`` ones (each
    occurrence, in order, so that ``$1`` may come twice or after ``$2``),
    and the values in that order. Without parameters, ``sql`` as it is."""
    if params is None:
        return sql, None
    parts, nparams = split_params(sql)
    values = list(params)
    if nparams != len(values):
        raise LoadError(
            f"the statement takes {nparams} parameter{'s' if nparams != 1 else ''}"
            f" ($1..$n, as in sql()), got {len(values)}\nQuery was: {sql}"
        )
    text = []
    ordered = []
    for i, part in enumerate(parts):
        if i % 2:
            text.append("%s")
            ordered.append(values[int(part) - 1])
        else:
            text.append(str(part).replace("%", "%%"))
    return "".join(text), ordered


def run_loader(
    workload: Workload,
    connect: Callable[[], psycopg.Connection[Any]],
    scale: int,
    jobs: int,
    out: TextIO,
) -> float:
    """Run a workload's ``@load`` function; its elapsed seconds. Failures
    are :class:`WorkloadError` (with the user's traceback for an exception
    in the workload's code)."""
    load = workload.loader
    assert load is not None
    start = time.perf_counter()
    files = frozenset({workload.path, load.__code__.co_filename})
    loader = Loader(connect, scale, jobs, out, files)
    try:
        load(loader)
    except LoadError as e:
        raise WorkloadError(f"{workload.name}: {e}") from None
    except (Exception, SystemExit) as e:
        raise import_error(
            e, set(files), workload.name, "loading data failed"
        ) from None
    finally:
        loader.close()
    return time.perf_counter() - start
