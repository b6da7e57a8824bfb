"""A ledger opened for a command that reads, with SQLAlchemy only on demand.

Importing SQLAlchemy costs about a third of a second on a small machine, more than a
report's whole query over 10,000 runs. A SQLite ledger already at the migration head is
therefore opened with one plain ``sqlite3`` read of its revision, and the reports read it
through ``backend.reading`` (the DB-API). Anything else that asks the handle for an
Engine's attribute (``connect``, ``url``, ``dialect``…) gets the real Engine, made on
first use, so code written against SQLAlchemy keeps working unchanged. A new database,
one below the head, or a PostgreSQL URL takes ``db.open_ledger``'s path from the start.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from urllib.parse import quote

from .db import HEAD_REVISION, SQLITE_BUSY_TIMEOUT_MS, database_url, open_ledger

_SQLITE_PREFIX = "sqlite:///"


def sqlite_file(url: str) -> str | None:
    """The file of a plain ``sqlite:///PATH`` URL; None for anything SQLAlchemy must read
    (another driver, URL options, escapes, an in-memory database, PostgreSQL)."""
    if not url.startswith(_SQLITE_PREFIX):
        return None
    path = url[len(_SQLITE_PREFIX):]
    if not path or path == ":memory:" or "?" in path or "%" in path:
        return None
    return path


def _connect(path: str, mode: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(path)}?mode={mode}", uri=True, isolation_level=None,
                           timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)


def _at_head(path: str) -> bool:
    """One read: is this existing file at this omg-ledger's migration head?"""
    try:
        conn = _connect(path, "rw")  # rw: never creates the file (a new ledger is made by open_ledger)
    except sqlite3.Error:
        return False
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return row is not None and row[0] == HEAD_REVISION


class Ledger:
    """The URL, a sqlite3 way in for SQLite reads, and an Engine when one is asked for."""

    def __init__(self, url: str, engine=None) -> None:
        self._url = url
        self._path = sqlite_file(url)
        self._engine = engine

    @property
    def dialect_name(self) -> str:
        return "sqlite" if self._path is not None else self.engine.dialect.name

    @property
    def sqlite_path(self) -> str | None:
        """The SQLite file when sqlite3 can open it directly, else None."""
        return self._path

    def sqlite3_connection(self) -> sqlite3.Connection:
        """A new connection to the SQLite file, in autocommit mode (the reader begins)."""
        return _connect(self._path, "rw")

    @property
    def engine(self):
        if self._engine is None:
            from .db import create_ledger_engine

            self._engine = create_ledger_engine(self._url)
        return self._engine

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.engine, name)


def open_reader(db: str, say: Callable[[str], None] | None = None) -> Ledger:
    """Open a ledger for a command: migrated like ``open_ledger``, SQLAlchemy only if needed."""
    url = database_url(db)
    path = sqlite_file(url)
    if path is not None and _at_head(path):
        return Ledger(url)
    return Ledger(url, open_ledger(db, say=say))
