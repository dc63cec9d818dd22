"""The results store's tables in SQLite or PostgreSQL, one versioned schema.

Tables (in PostgreSQL, in the schema ``pgsurge``):

* ``store_meta(key, value)``: ``schema_version``;
* ``runs``: one stored result — ``id``, ``stored_at``, ``started_at`` (the
  run's start, UTC), ``workload_key`` (the digest of the workload that
  ``compare`` requires runs to share, ``experiment.results.Workload``),
  ``source`` (``run`` or the imported file's name), ``doc`` (the result
  document: JSONB in PostgreSQL, text in SQLite) and, from schema 2,
  ``fingerprint_key`` (``experiment.fingerprint``) and ``digest`` (the
  SHA-256 of the canonical document: the same result is stored once);
* ``run_labels(run_id, key, value)``: ``--label K=V``, indexed by (key, value).

``MIGRATIONS`` takes a store of any older schema forward, one step at a
time, in one transaction per step, under a lock (SQLite: ``BEGIN
IMMEDIATE``; PostgreSQL: an advisory lock), so concurrent runs that open
an old store migrate it once. A store of a newer schema than this pgsurge
knows is refused (one line: upgrade pgsurge).

SQLite runs in WAL mode with a busy timeout of :data:`BUSY_TIMEOUT_S`:
readers never block the writer, and concurrent writers (several runs
storing at once) wait for each other instead of failing. Each run is
stored in one short transaction.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pgsurge.store.location import Location, StoreError, check_place, prepare_file

__all__ = [
    "BUSY_TIMEOUT_S",
    "SCHEMA_VERSION",
    "Store",
    "StoredRun",
    "canonical_digest",
    "open_store",
]

#: the store schema this pgsurge writes (MIGRATIONS reach it)
SCHEMA_VERSION = 2
#: how long a SQLite writer waits for another one (seconds)
BUSY_TIMEOUT_S = 60.0
#: pg_advisory_xact_lock key of the store's migrations ("pgsurge" in ASCII)
_PG_LOCK = 0x7067737572676500 >> 8


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as read back from the store."""

    id: int
    stored_at: str
    started_at: str | None
    workload_key: str
    fingerprint_key: str | None
    source: str
    labels: Mapping[str, str]
    doc: Mapping[str, Any]


def canonical_digest(doc: Mapping[str, Any]) -> str:
    """The SHA-256 of a document's canonical JSON (key order, spacing)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# -- the schema, per dialect -------------------------------------------------

#: dialect → (table prefix, id column, time type, document type)
_TYPES = {
    "sqlite": ("", "INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT", "TEXT"),
    "postgresql": ("pgsurge.", "BIGSERIAL PRIMARY KEY", "TIMESTAMPTZ", "JSONB"),
}


def _v1(dialect: str) -> list[str]:
    t, ident, time, doc = _TYPES[dialect]
    return [
        f"CREATE TABLE {t}runs (id {ident}, stored_at {time} NOT NULL,"
        f" started_at {time}, workload_key TEXT NOT NULL,"
        f" source TEXT NOT NULL, doc {doc} NOT NULL)",
        f"CREATE INDEX runs_workload ON {t}runs (workload_key, started_at)",
        f"CREATE INDEX runs_started ON {t}runs (started_at)",
        f"CREATE TABLE {t}run_labels (run_id BIGINT NOT NULL"
        f" REFERENCES {t}runs (id) ON DELETE CASCADE,"
        " key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (run_id, key))",
        f"CREATE INDEX run_labels_kv ON {t}run_labels (key, value)",
    ]


def _v2(dialect: str) -> list[str]:
    t = _TYPES[dialect][0]
    return [
        f"ALTER TABLE {t}runs ADD COLUMN fingerprint_key TEXT",
        f"ALTER TABLE {t}runs ADD COLUMN digest TEXT",
        f"CREATE INDEX runs_fingerprint ON {t}runs (fingerprint_key)",
    ]


def _v2_data(store: Store) -> None:
    """Schema 2's columns for the runs stored before it."""
    from pgsurge.experiment.fingerprint import fingerprint_key

    t = store.prefix
    for run_id, doc in store.fetch(f"SELECT id, doc FROM {t}runs"):
        data = store.load_doc(doc)
        store.execute(
            f"UPDATE {t}runs SET fingerprint_key = {store.ph}, digest = {store.ph}"
            f" WHERE id = {store.ph}",
            (fingerprint_key(data), canonical_digest(data), run_id),
        )
    store.execute(f"CREATE INDEX runs_digest ON {t}runs (digest)")


#: version → (DDL for a dialect, data step or None)
MIGRATIONS: dict[
    int, tuple[Callable[[str], list[str]], Callable[[Store], None] | None]
] = {
    1: (_v1, None),
    2: (_v2, _v2_data),
}
assert max(MIGRATIONS) == SCHEMA_VERSION


class Store:
    """An open store (see the module doc); use :func:`open_store`."""

    def __init__(self, location: Location, conn: Any, dialect: str) -> None:
        self.location = location
        self.conn = conn
        self.dialect = dialect
        self.prefix = _TYPES[dialect][0]
        #: the parameter placeholder of the driver
        self.ph = "?" if dialect == "sqlite" else "%s"

    # -- plumbing ---------------------------------------------------------

    def _error(self, action: str, exc: Exception) -> StoreError:
        from pgsurge.redact import redact_text

        reason = redact_text(str(exc).strip().splitlines()[0] if str(exc) else "")
        return StoreError(
            f"could not {action} results store {self.location.shown}: "
            f"{reason or exc.__class__.__name__}"
        )

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cur = self.conn.cursor()
        cur.execute(sql, tuple(params))
        return cur

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.execute(sql, params).fetchall())

    def load_doc(self, value: Any) -> dict[str, Any]:
        data = json.loads(value) if isinstance(value, (str, bytes)) else value
        return dict(data)

    @contextmanager
    def transaction(self, action: str) -> Iterator[None]:
        """One write transaction, holding the store's write lock."""
        try:
            if self.dialect == "sqlite":
                self.execute("BEGIN IMMEDIATE")
            else:
                self.execute("BEGIN")
                self.execute(f"SELECT pg_catalog.pg_advisory_xact_lock({_PG_LOCK})")
            yield
            self.execute("COMMIT")
        except StoreError:
            self._rollback()
            raise
        except Exception as exc:
            self._rollback()
            raise self._error(action, exc) from None

    def _rollback(self) -> None:
        try:
            self.execute("ROLLBACK")
        except Exception:
            pass  # the connection is gone: nothing to undo

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass

    # -- the schema ---------------------------------------------------------

    def version(self) -> int:
        """The store's schema version (0: an empty database)."""
        t = self.prefix
        if self.dialect == "sqlite":
            found = self.fetch(
                "SELECT 1 FROM sqlite_master WHERE type = 'table'"
                " AND name = 'store_meta'"
            )
        else:
            found = self.fetch("SELECT to_regclass('pgsurge.store_meta')")
            found = [r for r in found if r[0] is not None]
        if not found:
            return 0
        rows = self.fetch(
            f"SELECT value FROM {t}store_meta WHERE key = 'schema_version'"
        )
        return int(rows[0][0]) if rows else 0

    def migrate(self, upto: int = SCHEMA_VERSION) -> int:
        """Bring the schema to version ``upto`` (the newest by default);
        returns the version found before."""
        t = self.prefix
        with self.transaction("migrate"):
            if self.dialect == "postgresql":
                self.execute("CREATE SCHEMA IF NOT EXISTS pgsurge")
            found = self.version()
            if found > SCHEMA_VERSION:
                raise StoreError(
                    f"results store {self.location.shown} has schema {found}, "
                    f"newer than this pgsurge writes ({SCHEMA_VERSION}): "
                    "upgrade pgsurge"
                )
            if found == 0:
                self.execute(
                    f"CREATE TABLE {t}store_meta (key TEXT PRIMARY KEY,"
                    " value TEXT NOT NULL)"
                )
                self.execute(
                    f"INSERT INTO {t}store_meta VALUES ('schema_version', '0')"
                )
            for version in range(found + 1, upto + 1):
                ddl, data = MIGRATIONS[version]
                for statement in ddl(self.dialect):
                    self.execute(statement)
                if data is not None:
                    data(self)
                self.execute(
                    f"UPDATE {t}store_meta SET value = {self.ph}"
                    " WHERE key = 'schema_version'",
                    (str(version),),
                )
        return found

    # -- runs ---------------------------------------------------------------

    def add(
        self,
        doc: Mapping[str, Any],
        *,
        workload_key: str,
        fingerprint_key: str | None,
        labels: Mapping[str, str],
        source: str,
        stored_at: str,
    ) -> tuple[int, bool]:
        """Store a result: (its id, True), or (the id it already has, False)
        when the same document is stored already."""
        t, ph = self.prefix, self.ph
        digest = canonical_digest(doc)
        started = doc.get("start") if isinstance(doc.get("start"), str) else None
        text = json.dumps(doc, allow_nan=False)
        with self.transaction("write to"):
            same = self.fetch(f"SELECT id FROM {t}runs WHERE digest = {ph}", (digest,))
            if same:
                return int(same[0][0]), False
            cur = self.execute(
                f"INSERT INTO {t}runs (stored_at, started_at, workload_key, source,"
                f" doc, fingerprint_key, digest) VALUES ({ph}, {ph}, {ph}, {ph},"
                f" {ph}, {ph}, {ph})" + (" RETURNING id" if ph == "%s" else ""),
                (
                    stored_at,
                    started,
                    workload_key,
                    source,
                    text,
                    fingerprint_key,
                    digest,
                ),
            )
            run_id = int(cur.fetchone()[0] if ph == "%s" else cur.lastrowid)
            for key, value in labels.items():
                self.execute(
                    f"INSERT INTO {t}run_labels VALUES ({ph}, {ph}, {ph})",
                    (run_id, key, value),
                )
        return run_id, True

    def _where(
        self, labels: Mapping[str, str] | None, workload: str | None = None
    ) -> tuple[str, list[str]]:
        """The WHERE clause (on ``runs r``) of the runs with every label of
        ``labels`` (and of ``workload``), and its parameters."""
        t, ph = self.prefix, self.ph
        where, params = [], []
        for key, value in (labels or {}).items():
            where.append(
                f"EXISTS (SELECT 1 FROM {t}run_labels l WHERE l.run_id = r.id"
                f" AND l.key = {ph} AND l.value = {ph})"
            )
            params += [key, value]
        if workload is not None:
            where.append(f"r.workload_key = {ph}")
            params.append(workload)
        return (f" WHERE {' AND '.join(where)}" if where else ""), params

    def workloads(
        self, labels: Mapping[str, str] | None = None
    ) -> list[tuple[str, int]]:
        """The workload keys of the runs with ``labels`` and their run
        counts, the newest run's workload last (no document is read)."""
        clause, params = self._where(labels)
        try:
            rows = self.fetch(
                f"SELECT workload_key, count(*) FROM {self.prefix}runs r{clause}"
                " GROUP BY workload_key"
                " ORDER BY max(coalesce(started_at, stored_at)), max(id)",
                params,
            )
        except Exception as exc:
            raise self._error("read", exc) from None
        return [(str(k), int(n)) for k, n in rows]

    def runs(
        self, labels: Mapping[str, str] | None = None, workload: str | None = None
    ) -> list[StoredRun]:
        """The stored runs carrying every label of ``labels`` (of one
        ``workload`` when given), oldest first (by start, then id)."""
        t = self.prefix
        clause, params = self._where(labels, workload)
        try:
            rows = self.fetch(
                "SELECT id, stored_at, started_at, workload_key, fingerprint_key,"
                f" source, doc FROM {t}runs r{clause}"
                " ORDER BY coalesce(started_at, stored_at), id",
                params,
            )
            label_rows = self.fetch(
                f"SELECT run_id, key, value FROM {t}run_labels"
                f" WHERE run_id IN (SELECT id FROM {t}runs r{clause})",
                params,
            )
        except Exception as exc:
            raise self._error("read", exc) from None
        by_run: dict[int, dict[str, str]] = {}
        for run_id, key, value in label_rows:
            by_run.setdefault(int(run_id), {})[key] = value
        return [
            StoredRun(
                id=int(r[0]),
                stored_at=_time_text(r[1]),
                started_at=None if r[2] is None else _time_text(r[2]),
                workload_key=r[3],
                fingerprint_key=r[4],
                source=r[5],
                labels=by_run.get(int(r[0]), {}),
                doc=self.load_doc(r[6]),
            )
            for r in rows
        ]


def _time_text(value: Any) -> str:
    """A stored time as ISO 8601 UTC text, whichever backend gave it."""
    if isinstance(value, str):
        return value
    import datetime as dt

    assert isinstance(value, dt.datetime)
    text = value.astimezone(dt.UTC).isoformat(timespec="microseconds")
    return text.replace("+00:00", "Z")


def _connect_sqlite(location: Location) -> Any:
    check_place(location.target)
    prepare_file(location.target)
    try:
        conn = sqlite3.connect(
            location.target, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        raise StoreError(
            f"could not open results store {location.shown}: {exc}"
        ) from None
    if not mode or str(mode[0]).lower() != "wal":
        conn.close()
        raise StoreError(
            f"could not open results store {location.shown}: WAL mode refused "
            "(a file system without shared memory?)"
        )
    return conn


def _connect_postgresql(location: Location) -> Any:
    import psycopg

    from pgsurge.redact import redact_echo

    try:
        return psycopg.connect(location.target, connect_timeout=10, autocommit=True)
    except (psycopg.Error, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc) else ""
        # (libpq's message may quote a piece of the URI it could not parse)
        raise StoreError(
            f"could not connect to results store {location.shown}: "
            f"{redact_echo(first, location.target) or exc.__class__.__name__}"
        ) from None


def _read_sqlite(location: Location) -> Any:
    """A read-only connection to an existing SQLite store: reading a
    history creates no file and needs no write permission."""
    path = location.target
    if not os.path.lexists(path):
        raise StoreError(f"no results store at {location.shown}")
    prepare_file(path)  # exists: a link or not a regular file is refused
    # another user's store is only read (root could write anywhere): its
    # history is theirs to vouch for; our own is held to check_place
    ours = os.lstat(path).st_uid == os.geteuid()
    if (
        ours
        and os.access(path, os.W_OK)
        and os.access(os.path.dirname(path) or ".", os.W_OK)
    ):
        return _connect_sqlite(location)  # WAL readers need the -shm file
    try:
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise StoreError(
            f"could not read results store {location.shown}: {exc}"
        ) from None
    return conn


def open_store(
    location: Location, *, migrate: bool = True, read_only: bool = False
) -> Store:
    """Open (and, unless told otherwise, migrate) the store at ``location``.
    ``read_only``: an existing store, never created, migrated only when it
    can be written (a read-only one of an older schema is refused)."""
    if location.kind == "sqlite" and read_only:
        store = Store(location, _read_sqlite(location), "sqlite")
        migrate = migrate and os.access(location.target, os.W_OK)
        if not migrate and store.version() < SCHEMA_VERSION:
            store.close()
            raise StoreError(
                f"results store {location.shown} has an older schema and is "
                "read-only here: open it once with write access to migrate it"
            )
    elif location.kind == "sqlite":
        store = Store(location, _connect_sqlite(location), "sqlite")
    else:
        store = Store(location, _connect_postgresql(location), "postgresql")
    if migrate:
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
    return store
