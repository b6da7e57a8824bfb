"""A pool worker's finished rows on their way to the writer: a SQLite file of its own.

Handing rows back through pipes as pickled tuples cost more CPU than deriving them, and
the writer then bound every value again. A worker instead inserts its runs' rows into
its work file (no constraints, no index, no fsync), commits after each chunk of runs,
and hands back only where its rows end. At each batch's commit the writer copies what
it has received into the ledger with one ``INSERT … SELECT`` per table and work file,
inside SQLite, in the batch's transaction: the batch is still whole or absent.

The work files live in ``<ledger>.sync-work/`` (never in a home), made by the writer
under the sync lock and removed when the home's sync ends; one left by a killed sync is
removed by the next.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["WorkFile", "WorkFileError", "WorkFiles"]


class WorkFileError(Exception):
    """A work file could not be written or read (disk full, I/O error): the sync stops,
    its open batch rolled back, as for the ledger itself."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot write the sync's work file {self.path}: {self.reason}"


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    # WAL: the writer reads committed chunks while the worker writes the next one.
    # No fsync: a work file is worth nothing after a crash (the next sync starts over).
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    return conn


def read_only_uri(path: str) -> str:
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"


def attaches_read_only(path: str) -> bool:
    """Whether this SQLite reads an ATTACH's URI filename, so ``path`` attaches read
    only (builds made with SQLITE_USE_URI do; elsewhere the URI names no file that exists,
    nothing is created, and the sync reads its runs without a pool)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("ATTACH DATABASE ? AS probe", (read_only_uri(path),))
        return any(name == "probe" and file and os.path.samefile(file, path)
                   for _, name, file in probe.execute("PRAGMA database_list"))
    except (sqlite3.Error, OSError):
        return False
    finally:
        probe.close()


class WorkFile:
    """The worker's side: rows appended per table; a table's rowids are 1, 2, … in the
    order its rows were added, so "where a run's rows end" is a count per table."""

    def __init__(self, path: str, tables: Mapping[str, Sequence[str]]) -> None:
        self.path = path
        self.counts = dict.fromkeys(tables, 0)
        self._inserts = {t: f"INSERT INTO {t} VALUES ({', '.join('?' * len(cols))})" for t, cols in tables.items()}
        try:
            self._conn = _connect(path)
            self._conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise WorkFileError(path, str(exc)) from None

    def add(self, rows: Mapping[str, list[tuple]]) -> dict[str, int]:
        """One run's rows (in the open transaction); returns where each table ends now."""
        try:
            for table, table_rows in rows.items():
                if table_rows:
                    self._conn.executemany(self._inserts[table], table_rows)
                    self.counts[table] += len(table_rows)
        except sqlite3.Error as exc:
            raise WorkFileError(self.path, str(exc)) from None
        return dict(self.counts)

    def commit(self) -> None:
        """What was added is readable by the writer from here on."""
        try:
            self._conn.execute("COMMIT")
            self._conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise WorkFileError(self.path, str(exc)) from None


class WorkFiles:
    """The writer's side: the work files of one home's sync, what of each was received
    (handed back, committed) and what is already copied into the ledger."""

    def __init__(self, ledger_path: str, count: int, tables: Mapping[str, Sequence[str]]) -> None:
        self.dir = f"{ledger_path}.sync-work"
        self.tables = {t: list(cols) for t, cols in tables.items()}
        try:
            shutil.rmtree(self.dir, ignore_errors=True)  # a killed sync's: we hold the sync lock
            os.mkdir(self.dir, 0o700)
            self.paths = [os.path.join(self.dir, f"worker-{i}.sqlite") for i in range(count)]
            for path in self.paths:
                with _connect(path) as conn:
                    for table, cols in self.tables.items():
                        conn.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
                conn.close()
        except (OSError, sqlite3.Error) as exc:
            self.remove()
            raise WorkFileError(self.dir, getattr(exc, "strerror", None) or str(exc)) from None
        self.aliases = {path: f"work{i}" for i, path in enumerate(self.paths)}
        self.received = {path: dict.fromkeys(self.tables, 0) for path in self.paths}
        self.copied = {path: dict.fromkeys(self.tables, 0) for path in self.paths}
        self._copies = {t: (f"INSERT INTO main.{t} ({', '.join(cols)}) SELECT {', '.join(cols)} "
                            f"FROM {{alias}}.{t} WHERE rowid > ? AND rowid <= ?") for t, cols in self.tables.items()}

    def receive(self, path: str, ends: Mapping[str, int]) -> None:
        self.received[path] = dict(ends)

    def attach(self, dbapi_conn: sqlite3.Connection) -> None:
        """Before the batch's BEGIN (SQLite attaches outside a transaction only), read
        only: BEGIN IMMEDIATE then locks the ledger alone, never a worker's file."""
        for path, alias in self.aliases.items():
            dbapi_conn.execute(f"ATTACH DATABASE ? AS {alias}", (read_only_uri(path),))

    def detach(self, dbapi_conn: sqlite3.Connection) -> None:
        """After the batch's transaction; after one that failed, the pool discards
        the connection anyway (what failed is what the caller hears about)."""
        for alias in self.aliases.values():
            with contextlib.suppress(sqlite3.Error):
                dbapi_conn.execute(f"DETACH DATABASE {alias}")

    def copy_received(self, dbapi_conn: sqlite3.Connection, order: Iterable[str]) -> None:
        """Every received row not copied yet, into the ledger, in the open transaction.
        ``copied`` moves on at :meth:`committed` only: a batch rolled back copies again."""
        for path, alias in self.aliases.items():
            received, copied = self.received[path], self.copied[path]
            for table in order:
                if table in received and received[table] > copied[table]:
                    dbapi_conn.execute(self._copies[table].format(alias=alias), (copied[table], received[table]))

    def committed(self) -> None:
        for path in self.paths:
            self.copied[path] = dict(self.received[path])

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
