"""A pool worker's finished rows on their way to the writer: a SQLite file of its own.

Handing rows back through pipes as pickled tuples cost more CPU than deriving them, and
the writer then bound every value again. A worker instead inserts its runs' rows into
its work file (no constraints, no index, no fsync), commits after each chunk of runs,
and hands back only where its rows end. At each batch's commit the writer copies what
it has received into the ledger in the batch's transaction, so the batch is still whole
or absent: into a SQLite ledger with one ``INSERT … SELECT`` per table and work file,
inside SQLite (the files attached read-only); into PostgreSQL by one ``COPY … FROM
STDIN`` per table and work file, the rows read back here.

The work files live in ``<ledger>.sync-work/`` beside a SQLite ledger file, made under
the sync lock; for PostgreSQL in a directory of the temporary directory named after the
writer's pid. Never in a home. They are removed when the home's sync ends; those left
by a killed sync are removed by the next.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence

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

    def __init__(self, work_dir: str, count: int, tables: Mapping[str, Sequence[str]]) -> None:
        self.dir = work_dir
        self.tables = {t: list(cols) for t, cols in tables.items()}
        try:
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
        self._readers: dict[str, sqlite3.Connection] = {}

    @classmethod
    def beside(cls, ledger_path: str, count: int, tables: Mapping[str, Sequence[str]]) -> WorkFiles:
        """In ``<ledger>.sync-work/``: a killed sync's is removed first (the caller holds
        the ledger's sync lock, so no other sync is using it)."""
        work_dir = f"{ledger_path}.sync-work"
        try:
            shutil.rmtree(work_dir, ignore_errors=True)
            os.mkdir(work_dir, 0o700)
        except OSError as exc:
            raise WorkFileError(work_dir, exc.strerror or str(exc)) from None
        return cls(work_dir, count, tables)

    @classmethod
    def temporary(cls, count: int, tables: Mapping[str, Sequence[str]]) -> WorkFiles:
        """In a new directory under the temporary directory (a ledger that is no file):
        those of killed syncs, whose process is gone, are removed first."""
        parent = tempfile.gettempdir()
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                if name.startswith(_TEMPORARY_PREFIX) and not _owner_alive(name):
                    shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        try:
            # The owner's pid is in the name from the first instant: another sync never
            # takes a directory being made for one that has not written a file in it yet.
            work_dir = tempfile.mkdtemp(prefix=f"{_TEMPORARY_PREFIX}{os.getpid()}-")
        except OSError as exc:
            raise WorkFileError(parent, exc.strerror or str(exc)) from None
        return cls(work_dir, count, tables)

    def receive(self, path: str, ends: Mapping[str, int]) -> None:
        self.received[path] = dict(ends)

    def not_copied(self, order: Iterable[str]) -> Iterator[tuple[str, str, int, int]]:
        """(work file, table, after rowid, up to rowid) of every received row not copied yet."""
        for path in self.paths:
            received, copied = self.received[path], self.copied[path]
            for table in order:
                if table in received and received[table] > copied[table]:
                    yield path, table, copied[table], received[table]

    def attach(self, dbapi_conn: sqlite3.Connection) -> None:
        """Before the batch's BEGIN (SQLite attaches outside a transaction only), read
        only: BEGIN IMMEDIATE then locks the ledger alone, never a worker's file."""
        for path, alias in self.aliases.items():
            dbapi_conn.execute(f"ATTACH DATABASE ? AS {alias}", (read_only_uri(path),))

    def detach(self, dbapi_conn: sqlite3.Connection) -> None:
        """After the batch's transaction (after one that failed, the error that ended it
        is what the caller hears about)."""
        for alias in self.aliases.values():
            with contextlib.suppress(sqlite3.Error):
                dbapi_conn.execute(f"DETACH DATABASE {alias}")

    def copy_attached(self, dbapi_conn: sqlite3.Connection, order: Iterable[str]) -> None:
        """Into a SQLite ledger with the work files attached: every received row not
        copied yet, in the open transaction, inside SQLite."""
        for path, table, after, upto in self.not_copied(order):
            cols = ", ".join(self.tables[table])
            dbapi_conn.execute(f"INSERT INTO main.{table} ({cols}) SELECT {cols} FROM {self.aliases[path]}.{table} "
                               "WHERE rowid > ? AND rowid <= ?", (after, upto))

    def rows(self, path: str, table: str, after: int, upto: int, booleans: Iterable[str] = ()) -> list[tuple]:
        """Rows of one work file's table, read back (for a ledger that cannot attach
        it). SQLite keeps a bool as 0/1: ``booleans``' columns come back as 'true'/'false'
        (NULL as NULL), text the other database reads as its boolean."""
        flags = set(booleans)
        selected = ", ".join(f"CASE {c} WHEN 0 THEN 'false' WHEN 1 THEN 'true' END" if c in flags else c
                             for c in self.tables[table])
        try:
            reader = self._readers.get(path)
            if reader is None:
                reader = self._readers[path] = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)
            return reader.execute(f"SELECT {selected} FROM {table} WHERE rowid > ? AND rowid <= ?",
                                  (after, upto)).fetchall()
        except sqlite3.Error as exc:
            raise WorkFileError(path, str(exc)) from None

    def row_chunks(self, path: str, table: str, after: int, upto: int,
                   rows_per_chunk: int = 5000) -> Iterator[list[tuple]]:
        """Rows of one work file's table, read back a chunk at a time (for a ledger that
        cannot attach it). A bool comes back as SQLite keeps it: 0/1."""
        try:
            reader = self._readers.get(path)
            if reader is None:
                reader = self._readers[path] = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)
            cursor = reader.execute(f"SELECT {', '.join(self.tables[table])} FROM {table} "
                                    "WHERE rowid > ? AND rowid <= ?", (after, upto))
            while rows := cursor.fetchmany(rows_per_chunk):
                yield rows
        except sqlite3.Error as exc:
            raise WorkFileError(path, str(exc)) from None

    def committed(self) -> None:
        """The batch that copied the received rows committed: ``copied`` moves on (a
        batch rolled back would copy them again)."""
        for path in self.paths:
            self.copied[path] = dict(self.received[path])

    def remove(self) -> None:
        for reader in self._readers.values() if hasattr(self, "_readers") else ():
            reader.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_TEMPORARY_PREFIX = "omg-ledger-sync-"

def _owner_alive(name: str) -> bool:
    """Whether the process named in a work directory's name (…-<pid>-<random>) runs."""
    try:
        pid = int(name[len(_TEMPORARY_PREFIX):].split("-")[0])
    except ValueError:
        return True  # not one of ours after all: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
