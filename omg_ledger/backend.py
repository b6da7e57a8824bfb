"""The backend seam: everything that differs between SQLite and PostgreSQL, one object
per dialect. The rest of the code asks ``backend_of(engine_or_connection)`` and never
branches on a dialect name.

What differs: the DB-API placeholder, the upsert statement, the exclusive right to
sync a scope (an flock beside a SQLite file; a session advisory lock on PostgreSQL),
the migration lock, how a run's rows are locked before a re-derivation, and how a
report reads: through the DB-API directly (``reading``), so that the read paths never
import SQLAlchemy. The SQL they run is portable; parameters are named (``:name``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from .errors import DatabaseUnavailable, LedgerBusy

if TYPE_CHECKING:  # imported by the dialect methods that use it: reads start without it
    from sqlalchemy.engine import Connection, Engine

MIGRATION_LOCK_KEY = 0x6F6D675F6C6472  # "omg_ldr": PostgreSQL advisory lock for migrations


class SQLiteReader:
    """One read transaction on a sqlite3 connection; rows are read by column name."""

    name = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, params: dict | None = None) -> Iterator:
        cursor = self.conn.cursor()
        cursor.row_factory = sqlite3.Row
        return cursor.execute(sql, params or {})

    def tuples(self, sql: str, params: dict | None = None) -> Iterator[tuple]:
        """Rows as plain tuples, read by position: the cheapest way through many rows."""
        return self.conn.execute(sql, params or {})

    def dicts(self, sql: str, params: dict | None = None) -> Iterator[dict]:
        """Rows as dicts: faster to read many fields of than a sqlite3.Row (its name
        lookup scans the columns)."""
        cursor = self.conn.execute(sql, params or {})
        names = [d[0] for d in cursor.description]
        return (dict(zip(names, row, strict=True)) for row in cursor)

    def scalar(self, sql: str, params: dict | None = None):
        row = self.conn.execute(sql, params or {}).fetchone()
        return None if row is None else row[0]


_NAMED_PARAM = re.compile(r"(?<![:\w]):(\w+)")


class _Row(tuple):
    """A row read by position or by column name, as a sqlite3.Row is."""

    __slots__ = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key):
        return tuple.__getitem__(self, self._index[key] if isinstance(key, str) else key)

    def keys(self) -> list[str]:
        return list(self._index)


def _named_rows(cursor):
    """psycopg row factory: one _Row subclass per result, knowing its column names."""
    index = {column.name: n for n, column in enumerate(cursor.description or [])}
    return type("Row", (_Row,), {"__slots__": (), "_index": index})


class PostgresReader:
    """One read transaction on a psycopg connection; ``:name`` becomes ``%(name)s``."""

    name = "postgresql"

    def __init__(self, conn) -> None:
        self.conn = conn

    def rows(self, sql: str, params: dict | None = None) -> Iterator:
        cursor = self.conn.cursor(row_factory=_named_rows)
        return cursor.execute(_NAMED_PARAM.sub(r"%(\1)s", sql.replace("%", "%%")), params or None)

    def tuples(self, sql: str, params: dict | None = None) -> Iterator[tuple]:
        return self.rows(sql, params)

    def dicts(self, sql: str, params: dict | None = None) -> Iterator[dict]:
        return (dict(zip(row.keys(), row, strict=True)) for row in self.rows(sql, params))

    def scalar(self, sql: str, params: dict | None = None):
        row = next(iter(self.rows(sql, params)), None)
        return None if row is None else row[0]


def bind_list(params: dict, prefix: str, values: Iterable) -> str:
    """``(:prefix0, :prefix1, …)`` for an IN list, the values put into ``params``."""
    names = []
    for n, value in enumerate(values):
        params[f"{prefix}{n}"] = value
        names.append(f":{prefix}{n}")
    return "(" + ", ".join(names) + ")"


class Backend:
    name: str
    mark: str  # DB-API placeholder

    def reading(self, bind) -> contextlib.AbstractContextManager:
        """One read transaction (a consistent snapshot for a whole report) on the
        DB-API connection, as a reader with ``rows(sql, params)`` and ``scalar``."""
        raise NotImplementedError

    def insert(self, table):
        raise NotImplementedError

    def upsert(self, conn: Connection, table, values: dict, keys: Sequence[str],
               update_columns: Iterable[str]) -> None:
        statement = self.insert(table).values(**values)
        columns = list(update_columns)
        if columns:
            statement = statement.on_conflict_do_update(
                index_elements=list(keys), set_={c: statement.excluded[c] for c in columns})
        else:
            statement = statement.on_conflict_do_nothing(index_elements=list(keys))
        conn.execute(statement)

    def sync_lock(self, engine: Engine, scope: str, wait_seconds: float) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def lock_migrations(self, conn: Connection) -> None:
        """Inside the migrating transaction: two first-time syncs must not both migrate."""

    def lock_run(self, conn: Connection, run_pk: int) -> None:
        """Inside a write transaction: no other writer re-derives this run meanwhile."""

    def lock_identity(self, conn: Connection, identity: str) -> None:
        """Inside a write transaction: one writer at a time settles the copies of a run."""

    def after_explicit_ids(self, conn: Connection, tables: Sequence[str]) -> None:
        """Rows with explicit ids were inserted into ``tables``: new ids must come after them."""


class SQLiteBackend(Backend):
    name = "sqlite"
    mark = "?"

    @contextlib.contextmanager
    def reading(self, bind) -> Iterator[SQLiteReader]:
        raw = None
        path = getattr(bind, "sqlite_path", None)  # a ledger.Ledger on a file: no engine needed
        try:
            if path:
                conn = bind.sqlite3_connection()
            else:
                raw = bind.raw_connection()
                conn = raw.driver_connection
        except sqlite3.Error as exc:
            raise DatabaseUnavailable(f"cannot open the ledger database {path or bind.url}: {exc}") from exc
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            yield SQLiteReader(conn)
        except sqlite3.Error as exc:  # busy past the timeout, a damaged file, a full disk…
            raise DatabaseUnavailable(f"cannot read the ledger database {path or bind.url}: {exc}") from exc
        finally:
            conn.rollback()
            (raw or conn).close()

    def insert(self, table):
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    @contextlib.contextmanager
    def sync_lock(self, engine: Engine, scope: str, wait_seconds: float) -> Iterator[None]:
        """An flock on a file beside the database (never inside a home): one writer
        per ledger file (SQLite has one writer anyway)."""
        from sqlalchemy.engine import make_url

        path = make_url(str(engine.url)).database
        if not path or path == ":memory:":
            yield
            return
        lock_path = path + ".sync-lock"
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise DatabaseUnavailable(f"cannot create the sync lock {lock_path}: {exc.strerror or exc}") from exc
        deadline = time.monotonic() + wait_seconds
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LedgerBusy(f"another sync holds this ledger ({lock_path}); gave up after "
                                         f"{wait_seconds:g}s (use --wait to wait longer)") from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)


class PostgresBackend(Backend):
    name = "postgresql"
    mark = "%s"

    @contextlib.contextmanager
    def reading(self, bind) -> Iterator[PostgresReader]:
        raw = bind.raw_connection()
        try:
            yield PostgresReader(raw.driver_connection)
        finally:
            try:
                raw.driver_connection.rollback()
            finally:
                raw.close()

    def insert(self, table):
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    @contextlib.contextmanager
    def sync_lock(self, engine: Engine, scope: str, wait_seconds: float) -> Iterator[None]:
        """A session advisory lock per scope, so different homes sync in parallel."""
        from sqlalchemy import text

        key = zlib.crc32(scope.encode()) & 0x7FFFFFFF
        deadline = time.monotonic() + wait_seconds
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            while not conn.execute(text("SELECT pg_try_advisory_lock(1, :k)"), {"k": key}).scalar():
                if time.monotonic() >= deadline:
                    raise LedgerBusy(f"another sync of {scope} into this ledger is running; gave up after "
                                     f"{wait_seconds:g}s (use --wait to wait longer)")
                time.sleep(0.2)
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(1, :k)"), {"k": key})

    def lock_migrations(self, conn: Connection) -> None:
        from sqlalchemy import text

        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})

    def lock_run(self, conn: Connection, run_pk: int) -> None:
        conn.exec_driver_sql("SELECT id FROM runs WHERE id = %s FOR UPDATE", (run_pk,))

    def lock_identity(self, conn: Connection, identity: str) -> None:
        # Two machines syncing two copies of one run must not both see "no other copy".
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(2, %s)", (zlib.crc32(identity.encode()) & 0x7FFFFFFF,))

    def after_explicit_ids(self, conn: Connection, tables: Sequence[str]) -> None:
        from sqlalchemy import text

        for table in tables:  # names from schema.py, never user input
            conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                              f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"))


_BACKENDS: dict[str, Backend] = {"sqlite": SQLiteBackend(), "postgresql": PostgresBackend()}


def backend_of(bind: Engine | Connection) -> Backend:
    name = getattr(bind, "dialect_name", None) or bind.dialect.name
    if name not in _BACKENDS:
        raise DatabaseUnavailable(f"omg-ledger supports SQLite and PostgreSQL ledgers, not {name}")
    return _BACKENDS[name]


def reading(bind) -> contextlib.AbstractContextManager:
    """A report's read transaction on ``bind`` (an Engine, or a ledger.Ledger)."""
    return backend_of(bind).reading(bind)
