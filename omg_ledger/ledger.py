"""A ledger opened for reading, with SQLAlchemy only on demand.

Importing SQLAlchemy costs about a third of a second on a small machine, more than a
report's whole query over 10,000 runs. A read command therefore gets a :class:`ReadLedger`
(SQLite) or a :class:`PostgresReadLedger`: the reports read it through
``backend.reading`` on a plain ``sqlite3`` connection opened ``mode=ro``, or on one
``psycopg`` connection whose transactions are read-only. Anything else that asks the
handle for an Engine's attribute (``connect``, ``url``, ``dialect``…) gets a real
read-only Engine, made on first use, so code written against SQLAlchemy keeps working
unchanged.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from urllib.parse import quote

from .db import SQLITE_BUSY_TIMEOUT_MS

SQLITE_PREFIX = "sqlite:///"


def plain_sqlite_file(url: str) -> str | None:
    """The file of a plain ``sqlite:///PATH`` URL; None for anything SQLAlchemy must read
    (another driver, URL options, escapes, an in-memory database, PostgreSQL)."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX):]
    if not path or path == ":memory:" or "?" in path or "%" in path:
        return None
    return path


def connect_readonly(path: str) -> sqlite3.Connection:
    """mode=ro: never created, never written, no journal_mode or synchronous pragma (both
    write, or fail on a file the reader may not write). Autocommit: the reader begins."""
    connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
                                 isolation_level=None, check_same_thread=False)
    try:
        connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA query_only = ON")
    except BaseException:
        connection.close()
        raise
    return connection


def postgres_conninfo(db: str) -> str | None:
    """The libpq URI of a ledger given as a postgres:// or postgresql[+psycopg]:// URL
    (None for any other URL; one libpq does not take fails to connect)."""
    scheme, sep, rest = db.partition("://")
    if not sep or scheme.lower() not in ("postgres", "postgresql", "postgresql+psycopg"):
        return None
    return "postgresql://" + rest


# Every transaction of a reading session is read-only: the server refuses a write.
POSTGRES_READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"


def read_only_options(url_options: str | tuple | None) -> str:
    """The ``options`` of a reading session: the URL's own (a ledger in a schema named by
    ``-c search_path=…``) and then the read-only setting, which the URL cannot undo."""
    if isinstance(url_options, tuple):  # (SQLAlchemy's URL query, the parameter repeated)
        url_options = " ".join(url_options)
    return f"{url_options} {POSTGRES_READ_ONLY_OPTIONS}" if url_options else POSTGRES_READ_ONLY_OPTIONS


def psycopg_read_only_connection(conninfo: str):
    """A psycopg connection whose transactions are read-only (the URL's options kept)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    return psycopg.connect(conninfo, options=read_only_options(conninfo_to_dict(conninfo).get("options")))


class _LazyEngine:
    """An Engine's attributes, the Engine made on first use."""

    def __init__(self, make_engine: Callable[[], object]) -> None:
        self._make_engine = make_engine
        self._engine = None

    @property
    def engine(self):
        """The read-only SQLAlchemy Engine on the same file (made on first use)."""
        if self._engine is None:
            self._engine = self._make_engine()
        return self._engine

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.engine, name)


class ReadLedger(_LazyEngine):
    """A SQLite ledger file to read: sqlite3 connections, and an Engine when one is asked for."""

    dialect_name = "sqlite"

    def __init__(self, url: str, path: str, revision: str | None, make_engine: Callable[[], object]) -> None:
        super().__init__(make_engine)
        self._url = url
        self.sqlite_path = path
        self.revision = revision  # (its migration revision, read when it was opened)

    def sqlite3_connection(self) -> sqlite3.Connection:
        return connect_readonly(self.sqlite_path)


class PostgresReadLedger(_LazyEngine):
    """A PostgreSQL ledger to read: one psycopg connection (read-only transactions), kept
    for the command's reads as SQLAlchemy's pool would keep it, and an Engine when one is
    asked for."""

    dialect_name = "postgresql"

    def __init__(self, connection, conninfo: str, revision: str | None, make_engine: Callable[[], object]) -> None:
        super().__init__(make_engine)
        self._connection = connection
        self._conninfo = conninfo
        self.revision = revision  # (its migration revision, read when it was opened)
        self._lent = False

    def psycopg_connection(self):
        """The connection, outside any transaction (a reader rolls back when it is done)."""
        return self._connection

    @contextlib.contextmanager
    def psycopg_reading(self) -> Iterator:
        """A connection for one reader: the kept one, or, while a reader holds it (readings
        nested), a new one closed after: each reader has its own transaction, as each
        has its own pool connection from an Engine."""
        if self._lent:
            connection = self.psycopg_session()
            try:
                yield connection
            finally:
                connection.close()
            return
        self._lent = True
        try:
            yield self._connection
        finally:
            self._lent = False

    def psycopg_session(self):
        """A new connection of the caller's to close (``sql`` throws its session away)."""
        return psycopg_read_only_connection(self._conninfo)

    def dispose(self) -> None:
        try:
            self._connection.close()
        finally:
            super().dispose()
