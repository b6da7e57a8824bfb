"""A SQLite ledger opened for reading, with SQLAlchemy only on demand.

Importing SQLAlchemy costs about a third of a second on a small machine, more than a
report's whole query over 10,000 runs. A read command on a SQLite ledger therefore gets a
:class:`ReadLedger`: the reports that matter (runs, cost, audit) read it through
``backend.reading`` on a plain ``sqlite3`` connection opened ``mode=ro``. Anything else
that asks the handle for an Engine's attribute (``connect``, ``url``, ``dialect``…) gets
a real read-only Engine, made on first use, so code written against SQLAlchemy keeps
working unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
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


class ReadLedger:
    """A SQLite ledger file to read: sqlite3 connections, and an Engine when one is asked for."""

    dialect_name = "sqlite"

    def __init__(self, url: str, path: str, make_engine: Callable[[], object]) -> None:
        self._url = url
        self.sqlite_path = path
        self._make_engine = make_engine
        self._engine = None

    def sqlite3_connection(self) -> sqlite3.Connection:
        return connect_readonly(self.sqlite_path)

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
