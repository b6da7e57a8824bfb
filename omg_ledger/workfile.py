"""A pool worker's finished rows on their way to the writer: a SQLite file of its own.

Handing rows back through pipes as pickled tuples cost more CPU than deriving them, and
the writer then bound every value again. A worker instead inserts its runs' rows into
its work file (no constraints, no index, no fsync), commits after each chunk of runs,
and hands back only where its rows end. At each batch's commit the writer copies what
it has received into the ledger in the batch's transaction, so the batch is still whole
or absent: into a SQLite ledger with one ``INSERT … SELECT`` per table and work file,
inside SQLite (the files attached read-only); into PostgreSQL by one ``COPY … FROM
STDIN`` per table, of text the workers formatted (the COPY_TEXT layout).

The work files live in ``<ledger>.sync-work/`` beside a SQLite ledger file, made under
the sync lock; for PostgreSQL in a directory of the temporary directory named after the
writer's pid. Never in a home. A worker moves to a new file every RUNS_PER_FILE runs and
the writer deletes the ones it has copied; the rest are removed when the home's sync
ends, and those left by a killed sync by the next.
"""

from __future__ import annotations

import contextlib
import errno
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


def _out_of_descriptors(exc: sqlite3.Error) -> Exception:
    """What SQLite's "unable to open database file" meant: when this process can open no
    file at all, the OSError saying so (the process's, not the work file's), else ``exc``."""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as probe:
        if probe.errno in (errno.EMFILE, errno.ENFILE):
            return probe
    return exc


def read_only_uri(path: str) -> str:
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"


def attaches_read_only(path: str) -> bool:
    """Whether this SQLite reads an ATTACH's URI filename, so ``path`` attaches read
    only (builds made with SQLITE_USE_URI do; elsewhere the URI names no file that exists,
    nothing is created, and the writer reads the work files back itself)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("ATTACH DATABASE ? AS probe", (read_only_uri(path),))
        return any(name == "probe" and file and os.path.samefile(file, path)
                   for _, name, file in probe.execute("PRAGMA database_list"))
    except (sqlite3.Error, OSError):
        return False
    finally:
        probe.close()


# A worker starts a new work file after this many runs in one; the writer deletes the
# old one once it has copied all of it, so the files of a sync stay a few hundred runs'
# rows (not a second copy of everything the sync writes).
RUNS_PER_FILE = 500


def work_file_path(work_dir: str, worker: int, generation: int) -> str:
    return os.path.join(work_dir, f"worker-{worker}.{generation}.sqlite")


def _worker_and_generation(path: str) -> tuple[int, int]:
    """What work_file_path made ``path`` of."""
    worker, generation, _ = os.path.basename(path).split(".")
    return int(worker.removeprefix("worker-")), int(generation)


def _create(path: str, tables: Mapping[str, Sequence[str]]) -> None:
    with contextlib.closing(_connect(path)) as conn:
        for table, cols in tables.items():
            conn.execute(f"CREATE TABLE {table} ({', '.join(cols)})")


# The layout of a work file for a ledger that takes COPY's text format (PostgreSQL): per
# run and table, one value holding that table's rows of the run, formatted by the worker.
COPY_TEXT = {"copy_text": ["tbl", "data"]}


def copy_text(rows: Iterable[tuple]) -> bytes:
    """Rows in COPY's text format: a tab between values, \\N for NULL, t/f for a bool,
    backslash, tab, newline and CR escaped (every value is an int, a bool, text or None)."""
    return "".join([f"{chr(9).join(map(_copy_value, row))}\n" for row in rows]).encode()


def _copy_value(value: object) -> str:
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if value.__class__ is str:
        if "\\" in value:
            value = value.replace("\\", "\\\\")
        if "\t" in value or "\n" in value or "\r" in value:
            value = value.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
        return value
    return str(value)


class WorkFile:
    """The worker's side: rows appended per table; a table's rowids are 1, 2, … in the
    order its rows were added, so "where a run's rows end" is a count per table. In the
    COPY_TEXT layout, each table's rows of a run are one row of text."""

    def __init__(self, path: str, tables: Mapping[str, Sequence[str]]) -> None:
        self.tables = tables
        self.as_text = dict(tables) == COPY_TEXT
        self.runs_per_file = RUNS_PER_FILE
        self._inserts = {t: f"INSERT INTO {t} VALUES ({', '.join('?' * len(cols))})" for t, cols in tables.items()}
        self._open(path)

    def _open(self, path: str) -> None:
        self.path = path
        self.worker, self.generation = _worker_and_generation(path)
        self.counts = dict.fromkeys(self.tables, 0)
        self.runs = 0
        try:
            self._conn = _connect(path)
            self._conn.execute("BEGIN")
        except sqlite3.Error as exc:
            cause = _out_of_descriptors(exc)
            if cause is not exc:
                raise cause from None
            raise WorkFileError(path, str(exc)) from None

    def add(self, rows: Mapping[str, list[tuple]]) -> dict[str, int]:
        """One run's rows (in the open transaction); returns where each table ends now."""
        if self.as_text:
            rows = {"copy_text": [(table, copy_text(table_rows)) for table, table_rows in rows.items() if table_rows]}
        try:
            for table, table_rows in rows.items():
                if table_rows:
                    self._conn.executemany(self._inserts[table], table_rows)
                    self.counts[table] += len(table_rows)
        except sqlite3.Error as exc:
            raise WorkFileError(self.path, str(exc)) from None
        self.runs += 1
        return dict(self.counts)

    def commit(self) -> None:
        """What was added is readable by the writer from here on; past RUNS_PER_FILE
        runs, the next ones go to a new file (worker-N.G+1)."""
        try:
            self._conn.execute("COMMIT")
            if self.runs < self.runs_per_file:
                self._conn.execute("BEGIN")
                return
            self._conn.close()
            following = work_file_path(os.path.dirname(self.path), self.worker, self.generation + 1)
            _create(following, self.tables)
        except sqlite3.Error as exc:
            raise WorkFileError(self.path, str(exc)) from None
        self._open(following)


class WorkFiles:
    """The writer's side: the work files of one home's sync (one to start with per
    worker, made here; the workers make the following ones), what of each was received
    (handed back, committed) and what is already copied into the ledger."""

    def __init__(self, work_dir: str, count: int, tables: Mapping[str, Sequence[str]]) -> None:
        self.dir = work_dir
        self.tables = {t: list(cols) for t, cols in tables.items()}
        self.received: dict[str, dict[str, int]] = {}
        self.copied: dict[str, dict[str, int]] = {}
        self._latest: dict[int, str] = {}  # worker → the file it writes now
        self._attached: dict[str, str] = {}  # path → alias, during a batch
        self._readers: dict[str, sqlite3.Connection] = {}
        try:
            self.paths = [work_file_path(self.dir, i, 0) for i in range(count)]
            for path in self.paths:
                _create(path, self.tables)
        except (OSError, sqlite3.Error) as exc:
            self.remove()
            raise WorkFileError(self.dir, getattr(exc, "strerror", None) or str(exc)) from None

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
        if path not in self.received:
            self.copied[path] = dict.fromkeys(self.tables, 0)
            self._latest[_worker_and_generation(path)[0]] = path
        self.received[path] = dict(ends)

    def files_to_copy(self, adding: str) -> int:
        """The files the batch would copy from, with ``adding``'s rows received too."""
        return len({*self._unfinished(), adding})

    def _unfinished(self) -> list[str]:
        return [path for path, received in self.received.items() if received != self.copied[path]]

    def not_copied(self, order: Iterable[str]) -> Iterator[tuple[str, str, int, int]]:
        """(work file, table, after rowid, up to rowid) of every received row not copied yet."""
        for path in self._unfinished():
            received, copied = self.received[path], self.copied[path]
            for table in order:
                if table in received and received[table] > copied[table]:
                    yield path, table, copied[table], received[table]

    def attach(self, dbapi_conn: sqlite3.Connection) -> None:
        """Before the batch's BEGIN (SQLite attaches outside a transaction only) the
        files with rows to copy, read only: BEGIN IMMEDIATE then locks the ledger alone,
        never a worker's file."""
        for i, path in enumerate(self._unfinished()):
            try:
                dbapi_conn.execute(f"ATTACH DATABASE ? AS work{i}", (read_only_uri(path),))
            except sqlite3.Error as exc:
                raise _out_of_descriptors(exc) from None
            self._attached[path] = f"work{i}"

    def detach(self, dbapi_conn: sqlite3.Connection) -> None:
        """After the batch's transaction (after one that failed, the error that ended it
        is what the caller hears about)."""
        for alias in self._attached.values():
            with contextlib.suppress(sqlite3.Error):
                dbapi_conn.execute(f"DETACH DATABASE {alias}")
        self._attached.clear()

    def copy_attached(self, dbapi_conn: sqlite3.Connection, order: Iterable[str]) -> None:
        """Into a SQLite ledger with the work files attached: every received row not
        copied yet, in the open transaction, inside SQLite."""
        for path, table, after, upto in self.not_copied(order):
            cols = ", ".join(self.tables[table])
            dbapi_conn.execute(f"INSERT INTO main.{table} ({cols}) SELECT {cols} FROM {self._attached[path]}.{table} "
                               "WHERE rowid > ? AND rowid <= ?", (after, upto))

    def rows(self, path: str, table: str, after: int, upto: int) -> list[tuple]:
        """Rows of one work file's table, read back (for a ledger that cannot attach it)."""
        selected = ", ".join(self.tables[table])
        try:
            reader = self._readers.get(path)
            if reader is None:
                reader = self._readers[path] = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)
            return reader.execute(f"SELECT {selected} FROM {table} WHERE rowid > ? AND rowid <= ?",
                                  (after, upto)).fetchall()
        except sqlite3.Error as exc:
            raise WorkFileError(path, str(exc)) from None

    def committed(self) -> None:
        """The batch that copied the received rows committed: ``copied`` moves on (a
        batch rolled back would copy them again), and a file copied whole that its
        worker has left for a newer one is deleted."""
        latest = set(self._latest.values())
        for path, received in list(self.received.items()):
            self.copied[path] = dict(received)
            if path not in latest:
                reader = self._readers.pop(path, None)
                if reader is not None:
                    reader.close()
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path + suffix)
                del self.received[path], self.copied[path]

    def remove(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        if os.path.lexists(self.dir):
            # rmtree lists the directory through a descriptor: with none left to open (a
            # low ulimit -n), the files this side knows of are removed by name.
            for path in {*self.paths, *self.received}:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(OSError):
                        os.unlink(path + suffix)
            with contextlib.suppress(OSError):
                os.rmdir(self.dir)


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
