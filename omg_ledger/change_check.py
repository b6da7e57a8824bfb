"""The change check of `omg-ledger sync`: stat calls against what the ledger remembers.

What the ledger remembers about a home's runs (their ingest cache, stream checkpoint
and JSON file identities) is read through the DB-API as row tuples (a file row dict is
built only for a run that changed), a few hundred listed runs at a
time (:func:`known_in_chunks`) or streamed in run id order (:func:`known_in_order`), so
memory does not grow with the number of runs.

:func:`unchanged_sync` is the cron case: a SQLite or PostgreSQL ledger at the migration
head where nothing changed. It checks that with ``sqlite3`` or ``psycopg`` alone — no
SQLAlchemy, no schema module — and records only the homes' last sync time. Anything it
is not sure is a no-op (a changed, new or vanished run, a problem to record or resolve,
a plan, an outdated derivation, a home whose identity moved, a runner stream) makes it
step aside for the full sync, which does the same check again and the work.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .bounds import no_nul
from .config import Home
from .discover import (
    DirListing,
    home_identity,
    home_lock_scopes,
    list_home_dir,
    list_run_dir,
    open_directory,
    stat_or_none,
)
from .errors import out_of_resources
from .ingest import Problem, file_identity, run_stream_row_needs_reading
from .ledger import postgres_conninfo
from .snapshot import PARSERS, SNAPSHOT_NAMES, BadSnapshot, UnreadableFile, read_small_file
from .tail import Checkpoint
from .units import format_instant

SQLITE_HEADER = b"SQLite format 3\x00"
ABSENT = -1  # remembered mtime of a failed/ directory that does not exist
# (error and content are not read: content comes before error in the row, and reading
# past a file's content would walk its overflow pages.)
FILE_COLUMNS = ("run_pk", "name", "dev", "inode", "size", "mtime_ns", "ctime_ns", "sha256")


@dataclass
class SyncReport:
    runs_seen: int = 0
    runs_changed: int = 0
    runs_gone: int = 0
    runs_rederived: int = 0
    events_ingested: int = 0
    events_derived: int = 0  # stored events walked by derivation (an append walks only its new lines)
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0
    runs_listed: int = 0  # run directories that went past the stat-only change check
    # A home's runs/ or plans/ that is a symlink: {"home", "dir", "resolved"} (read there).
    symlinked_dirs: list[dict] = field(default_factory=list)
    # A home synced at another path than before (renamed, a symlink): {"home", "from", "to"}.
    moved_homes: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "runs_seen": self.runs_seen,
            "runs_changed": self.runs_changed,
            "runs_gone": self.runs_gone,
            "runs_rederived": self.runs_rederived,
            "events_ingested": self.events_ingested,
            "events_derived": self.events_derived,
            "bytes_read": self.bytes_read,
            "problems": [p.as_dict() for p in self.problems],
            "seconds": round(self.seconds, 3),
            "symlinked_dirs": self.symlinked_dirs,
            "moved_homes": self.moved_homes,
        }


class Known:
    """What the ledger remembers about one run directory, as the rows it was read as."""

    __slots__ = ("run_pk", "gone", "dir_path", "cache", "checkpoint_row", "file_rows")

    def __init__(self, run_pk: int, gone: bool, dir_path: str, cache: tuple | None,
                 checkpoint_row: tuple | None) -> None:
        self.run_pk = run_pk
        self.gone = gone
        self.dir_path = dir_path  # where the run was last read
        # (dir_mtime_ns, failed_dir_mtime_ns, dir_ctime_ns, failed_dir_ctime_ns); None when never scanned
        self.cache = cache
        self.checkpoint_row = checkpoint_row  # Checkpoint.COLUMNS values; None: no stream
        self.file_rows: tuple[Sequence[Any], ...] = ()  # FILE_COLUMNS rows of its JSON files

    @property
    def checkpoint(self) -> Checkpoint | None:
        return Checkpoint(*self.checkpoint_row) if self.checkpoint_row is not None else None

    @property
    def files(self) -> dict[str, dict]:
        """Snapshot file name -> its stored row (identity, sha256, error)."""
        return {row[1]: dict(zip(FILE_COLUMNS, row, strict=True)) for row in self.file_rows}


Fetch = Callable[[str, tuple], Sequence[Sequence[Any]]]  # DB-API: (SQL with `mark` placeholders, parameters) -> rows


def _runs_sql(mark: str) -> str:
    return (f"SELECT runs.id, runs.run_id, runs.gone, runs.dir_path, i.run_pk, i.dir_mtime_ns, i.failed_dir_mtime_ns, "
            f"i.dir_ctime_ns, i.failed_dir_ctime_ns, s.run_pk, "
            f"{', '.join('s.' + n for n in Checkpoint.COLUMNS)} FROM runs "
            f"LEFT OUTER JOIN ingest_state i ON i.run_pk = runs.id "
            f"LEFT OUTER JOIN streams s ON s.run_pk = runs.id WHERE runs.home_id = {mark}")


def _files_sql(mark: str) -> str:
    return (f"SELECT {', '.join('f.' + n for n in FILE_COLUMNS)} FROM snapshot_files f "
            f"JOIN runs ON runs.id = f.run_pk WHERE runs.home_id = {mark}")


def _known(row: Sequence[Any]) -> Known:
    return Known(row[0], bool(row[2]), row[3], tuple(row[5:9]) if row[4] is not None else None,
                 tuple(row[10:]) if row[9] is not None else None)


KNOWN_CHUNK = 500  # listed runs whose Known is read per pair of queries


def load_known(fetch: Fetch, mark: str, home_id: int, run_ids: Sequence[str]) -> dict[str, Known]:
    """Everything the change check compares, for those of these runs the ledger has, in
    two queries."""
    known: dict[str, Known] = {}
    if not run_ids:
        return known
    by_pk: dict[int, Known] = {}
    among = f" AND runs.run_id IN ({', '.join([mark] * len(run_ids))})"
    for row in fetch(_runs_sql(mark) + among, (home_id, *run_ids)):
        known[row[1]] = by_pk[row[0]] = _known(row)
    files: dict[int, list[tuple]] = {}
    for row in fetch(_files_sql(mark) + among, (home_id, *run_ids)):
        files.setdefault(row[0], []).append(tuple(row))
    for run_pk, file_rows in files.items():
        if run_pk in by_pk:
            by_pk[run_pk].file_rows = tuple(file_rows)
    return known


def known_in_chunks(fetch: Fetch, mark: str, home_id: int, run_ids: Sequence[str],
                    chunk: int | None = None) -> Iterator[Known | None]:
    """The Known of each of ``run_ids`` in their order (None: a run the ledger does not
    have), read ``chunk`` runs at a time when the first of them is asked for: memory does
    not grow with the number of runs, and a run's rows are read before anything the
    caller writes about it."""
    chunk = chunk or KNOWN_CHUNK
    for start in range(0, len(run_ids), chunk):
        some = run_ids[start:start + chunk]
        known = load_known(fetch, mark, home_id, some)
        for run_id in some:
            yield known.get(run_id)


Stream = Callable[[str, tuple], Iterator[Sequence[Any]]]  # DB-API: rows of a query, read as they are consumed


def known_in_order(stream: Stream, mark: str, home_id: int, order: str) -> Iterator[tuple[str, Known]]:
    """(run id, Known) of every run of a home in run id order (``order``: the run id in
    the code point order Python sorts by), streamed from two ordered cursors merged:
    memory does not grow with the number of runs."""
    runs = stream(_runs_sql(mark) + f" ORDER BY {order}", (home_id,))
    files = stream(_files_sql(mark).replace("SELECT f.run_pk,", "SELECT runs.run_id,")
                   + f" ORDER BY {order}, f.name", (home_id,))
    file_row = next(files, None)
    for row in runs:
        item = _known(row)
        run_id = row[1]
        while file_row is not None and file_row[0] < run_id:
            file_row = next(files, None)  # a file row of no run here (not expected: foreign key)
        mine = []
        while file_row is not None and file_row[0] == run_id:
            mine.append(file_row)
            file_row = next(files, None)
        item.file_rows = tuple(mine)
        yield run_id, item


@dataclass(slots=True)
class Look:
    """One run directory's stat calls, and whether they show something may have changed."""

    changed: bool
    dir_info: os.stat_result
    failed_info: os.stat_result | None
    stream_changed: bool
    file_infos: dict[str, os.stat_result | None]
    moved: bool = False  # the run was last read at another path (its home renamed, a symlink gone)


def _times_differ(mtime_ns: int | None, ctime_ns: int | None, info: os.stat_result) -> bool:
    """Whether a directory may hold other entries than when its times were remembered: its
    mtime differs, or its ctime does (an mtime set back after a change, as `rsync -t` sets
    it, leaves the ctime moved; no user sets a ctime). A ctime not remembered (a row from
    before revision 0017) is a change: the directory is listed once more."""
    return mtime_ns != info.st_mtime_ns or ctime_ns != info.st_ctime_ns


def look_at(path: str, known: Known | None) -> Look | None:
    """The change check of one run directory: stat calls only. None: it vanished
    between listing and now (the next sync marks it gone)."""
    dir_info = stat_or_none(path)
    if dir_info is None:
        return None
    cache = known.cache if known else None
    dir_changed = cache is None or _times_differ(cache[0], cache[2], dir_info)
    # An unchanged directory without failed/ has none now: creating it would have changed its mtime.
    failed_info = None if not dir_changed and cache[1] == ABSENT else stat_or_none(f"{path}/failed")
    if failed_info is None:
        failed_changed = cache is None or cache[1] != ABSENT
    else:
        failed_changed = cache is None or _times_differ(cache[1], cache[3], failed_info)
    if known is None:
        # A run never seen is read whole: the stream and the JSON files it lists are
        # stat-ed as they are read (read_run_dir), the absent ones not at all.
        return Look(True, dir_info, failed_info, True, {})
    checkpoint_row = known.checkpoint_row
    stream_info = stat_or_none(f"{path}/events.jsonl")
    if checkpoint_row is None:
        stream_changed = stream_info is not None
    else:
        stream_changed = run_stream_row_needs_reading(stream_info, checkpoint_row)
    remembered = {row[1]: row[2:7] for row in known.file_rows}  # name -> identity (ingest.file_identity)
    file_infos = {}
    files_changed = False
    for name in SNAPSHOT_NAMES:
        identity_then = remembered.get(name)
        if not dir_changed and identity_then is None:
            continue  # the directory is unchanged, so no file was created in it
        info = stat_or_none(f"{path}/{name}")
        file_infos[name] = info
        if file_identity(info) != identity_then:
            files_changed = True
    # The same directory at another path (its home renamed or reached another way): what
    # the ledger holds about it names where it is no longer, the lock probe's path included.
    moved = known.dir_path != path
    changed = known.gone or dir_changed or failed_changed or stream_changed or files_changed or moved
    return Look(changed, dir_info, failed_info, stream_changed, file_infos, moved)


def read_plans(home_id: int, entries: Sequence) -> tuple[list[dict], list[Problem]]:
    """The plans rows of a home's plans/ entries, and the problems reading them found."""
    rows, problems = [], []
    for entry in entries:
        try:
            listing, graph_name = _read_plan_dir(entry.path, problems)
        except OSError as exc:
            if out_of_resources(exc):
                raise
            problems.append(Problem(entry.path, 0, f"cannot list plan directory: {exc.strerror or exc}"))
            continue
        rows.append({"home_id": home_id, "plan_id": entry.run_id,
                     "has_graph_json": "graph.json" in listing.names,
                     "has_rejected": "rejected.json" in listing.names,
                     "graph_name": no_nul(graph_name) if isinstance(graph_name, str) else None, "gone": False})
    return rows, problems


def _read_plan_dir(path: str, problems: list[Problem]) -> tuple[DirListing, object]:
    """A plan directory's listing and its graph's name, read through one descriptor of it
    (a directory swapped for a link meanwhile is never followed). Raises OSError when it
    cannot be listed."""
    dir_fd = open_directory(path)
    try:
        listing = list_run_dir(path, dir_fd)
        problems.extend(Problem(item.path, 0, item.reason) for item in listing.damage)
        graph_name = None
        if "graph.json" in listing.names:
            graph_path = os.path.join(path, "graph.json")
            try:
                graph_name = PARSERS["graph.json"](read_small_file(graph_path, dir_fd).content).get("name")
            except (UnreadableFile, BadSnapshot) as exc:
                problems.append(Problem(graph_path, 0, str(exc)))
        return listing, graph_name
    finally:
        os.close(dir_fd)


def plans_to_write(rows: list[dict], existing: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """(plans new or changed, plan ids gone) against the stored ``existing`` rows."""
    seen = {r["plan_id"] for r in rows}
    changed = [r for r in rows if r["plan_id"] not in existing or
               {k: existing[r["plan_id"]][k] for k in r} != r]
    gone = [pid for pid, row in existing.items() if pid not in seen and not row["gone"]]
    return changed, gone


# -- the no-op sync, through the DB-API ------------------------------------------------


# The lock scope of the derivation step (sync takes it too: the full sync's is this one).
DERIVE_SCOPE = "derive"


class _NotSure(Exception):
    """Something the full sync must look at: step aside for it."""


class _Ledger:
    """The no-op check's reads and its one write, on a DB-API connection (SQL written
    with ``?`` placeholders)."""

    mark = "?"
    run_order = "runs.run_id"  # SQLite's BINARY collation: UTF-8 byte order = code point order

    def __init__(self, conn) -> None:
        self.conn = conn

    def sql(self, text: str) -> str:
        return text if self.mark == "?" else text.replace("?", self.mark)

    def fetch(self, sql: str, params: tuple = ()) -> Sequence[Sequence[Any]]:
        return self.conn.execute(self.sql(sql), params).fetchall()

    def stream(self, sql: str, params: tuple) -> Iterator[Sequence[Any]]:
        return iter(self.conn.execute(self.sql(sql), params))

    def write(self, statements: list[tuple[str, tuple]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        for sql, params in statements:
            self.conn.execute(sql, params)
        self.conn.execute("COMMIT")


class _PostgresLedger(_Ledger):
    mark = "%s"
    run_order = 'runs.run_id COLLATE "C"'  # code point order whatever the database's collation
    STREAM_ROWS = 500  # rows per round trip of a server-side cursor (~0.7 MiB held for both)

    def __init__(self, conn) -> None:
        super().__init__(conn)
        self._cursors: list = []

    def stream(self, sql: str, params: tuple) -> Iterator[Sequence[Any]]:
        # A server-side cursor: the rows are not all held by the client at once.
        cursor = self.conn.cursor(name=f"omg_ledger_noop_{len(self._cursors)}")
        self._cursors.append(cursor)
        cursor.itersize = self.STREAM_ROWS
        cursor.execute(self.sql(sql), params)
        return iter(cursor)

    def close_cursors(self) -> None:
        """Close the server-side cursors (those a step-aside left unread too)."""
        while self._cursors:
            self._cursors.pop().close()

    def write(self, statements: list[tuple[str, tuple]]) -> None:
        with self.conn.transaction():
            for sql, params in statements:
                self.conn.execute(self.sql(sql), params)


def sqlite_file(db: str) -> str | None:
    """The file of a ledger given as a plain path or sqlite:/// URL, when it exists."""
    if db.startswith("sqlite:///"):
        db = db[len("sqlite:///"):]
    elif "://" in db:
        return None
    path = os.path.abspath(os.path.expanduser(db))
    # Anything else (no file, not SQLite, a FIFO or device) is the full sync's to refuse,
    # before any lock file exists.
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError:
        return None
    return path if header == SQLITE_HEADER else None


def unchanged_sync(db: str, homes: Sequence[Home], *, head_revision: str, derivation_version: int,
                   wait_seconds: float = 60.0, clock_ns: Callable[[], int] = time.time_ns) -> SyncReport | None:
    """The report of a sync that finds nothing to do, having recorded the homes' sync
    time — or None when the full sync is needed (or this is not a SQLite ledger file or a
    PostgreSQL ledger at ``head_revision``). Waits for another sync's lock like the full
    sync does. It draws no progress: it takes a fraction of a second, and when it steps
    aside the full sync's progress starts from the beginning."""
    report = SyncReport()
    started = time.monotonic()
    path = sqlite_file(db)
    if path is not None:
        from .backend import checkpoint_without_waiting

        try:
            with _sync_lock(path, wait_seconds), contextlib.closing(_connect(path)) as conn:
                ledger = _Ledger(conn)
                home_ids = _unchanged(ledger, homes, head_revision, derivation_version, report)
                if home_ids is None:
                    return None
                _record_synced(ledger, home_ids, clock_ns)
                checkpoint_without_waiting(conn)
        except (_NotSure, sqlite3.Error):
            return None  # the full sync looks again, and words any database trouble
    else:
        conninfo = postgres_conninfo(db)
        if conninfo is None:
            return None
        try:
            import psycopg
        except ImportError:
            return None  # the full sync says what to install
        from .backend import PG_LEDGER_ELSEWHERE_SQL

        try:
            with contextlib.closing(psycopg.connect(conninfo, autocommit=True)) as conn:
                if conn.execute(PG_LEDGER_ELSEWHERE_SQL).fetchone() is not None:
                    return None  # a search_path naming another ledger than its current schema's: the full sync refuses it
                _postgres_sync_locks(conn, homes, wait_seconds)
                ledger = _PostgresLedger(conn)
                with conn.transaction():
                    try:
                        home_ids = _unchanged(ledger, homes, head_revision, derivation_version, report)
                    finally:
                        ledger.close_cursors()
                if home_ids is None:
                    return None
                _record_synced(ledger, home_ids, clock_ns)
        except (_NotSure, psycopg.Error):
            return None
    report.seconds = time.monotonic() - started
    return report


def _unchanged(ledger: _Ledger, homes: Sequence[Home], head_revision: str, derivation_version: int,
               report: SyncReport) -> list[int] | None:
    """The keys of ``homes`` when nothing under them needs a write but their sync time;
    None (or _NotSure) when something does."""
    fetch = ledger.fetch
    if fetch("SELECT version_num FROM alembic_version") != [(head_revision,)]:
        return None
    if fetch("SELECT 1 FROM runs WHERE derivation_version < ? LIMIT 1", (derivation_version,)) or fetch(
            "SELECT 1 FROM streams WHERE kind = 'invocations' AND derivation_version < ? LIMIT 1",
            (derivation_version,)):
        return None
    return [_unchanged_home(ledger, home, report) for home in homes]


def _record_synced(ledger: _Ledger, home_ids: list[int], clock_ns: Callable[[], int]) -> None:
    statements = []
    for home_id in home_ids:
        finished = format_instant(datetime.fromtimestamp(clock_ns() / 1e9, UTC))
        statements.append(("UPDATE homes SET last_synced_at = ? WHERE id = ?", (finished, home_id)))
    ledger.write(statements)


def _postgres_sync_locks(conn, homes: Sequence[Home], wait_seconds: float) -> None:
    """The session advisory locks the full sync takes (backend.PostgresBackend.sync_lock):
    the ledger's shared, each home's, then the derivation's, waited for within
    ``wait_seconds`` in all. Held until the connection closes."""
    from .backend import take_sync_locks

    scopes = [*((scope, home.label) for home in homes for scope in home_lock_scopes(home.path, home.label)),
              (DERIVE_SCOPE, DERIVE_SCOPE)]
    take_sync_locks(lambda sql, params: conn.execute(sql, params).fetchone()[0], scopes, wait_seconds)


@contextlib.contextmanager
def _sync_lock(path: str, wait_seconds: float) -> Iterator[None]:
    """The full sync's lock on a SQLite ledger (backend.sqlite_sync_lock); a lock file
    that cannot be opened is the full sync's to word."""
    from .backend import SyncLockUnavailable, sqlite_sync_lock

    try:
        with sqlite_sync_lock(path, wait_seconds):
            yield
    except SyncLockUnavailable as exc:
        raise _NotSure from exc


def _connect(path: str) -> sqlite3.Connection:
    from .db import SQLITE_BUSY_TIMEOUT_MS

    conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _unchanged_home(ledger: _Ledger, home: Home, report: SyncReport) -> int:
    """The home's key when nothing under it needs a write but its sync time; else _NotSure."""
    fetch = ledger.fetch
    if not os.path.isdir(home.path):
        raise _NotSure
    identity = home_identity(home.path)
    if identity["dev"] is None:
        raise _NotSure
    same = fetch("SELECT id, label, path, real_path FROM homes WHERE machine = ? AND dev = ? AND inode = ?",
                 (identity["machine"], identity["dev"], identity["inode"]))
    # Exactly the home store.resolve_home finds by identity, with nothing to update and no
    # label to refuse (a default label only names a new home).
    if len(same) != 1:
        raise _NotSure
    home_id, label, path, real_path = same[0]
    if (path, real_path) != (home.path, identity["real_path"]) or (home.explicit and label != home.label):
        raise _NotSure
    runs_dir = os.path.join(home.path, "runs")
    runs = list_home_dir(runs_dir)
    plans_dir = os.path.join(home.path, "plans")
    plans = list_home_dir(plans_dir)
    if runs.skipped or plans.skipped:
        raise _NotSure  # problems to record
    # Open problems the full sync would resolve now: on the home, runs/ or an entry of runs/,
    # or under an entry no longer listed of a run the ledger never held (store.resolve_problems).
    prefix = runs_dir + "/"
    listed = {entry.run_id for entry in runs.entries}
    # (Another machine's problems at the same paths are its own sync's to resolve.)
    machine = identity["machine"]
    for path, run_pk in fetch("SELECT path, run_pk FROM problems WHERE resolved_at IS NULL AND machine IN (?, '') "
                              "AND (path = ? OR path = ? OR substr(path, 1, ?) = ?)",
                              (machine, home.path, runs_dir, len(prefix), prefix)):
        entry, below, _ = path[len(prefix):].partition("/")
        if not path.startswith(prefix) or not below or (run_pk is None and entry not in listed):
            raise _NotSure
    # The listing (sorted by name) and the ledger's runs (ordered by run id) side by side.
    known = known_in_order(ledger.stream, ledger.mark, home_id, ledger.run_order)
    current = next(known, None)
    previous = None
    for entry in runs.entries:
        if previous is not None and entry.run_id <= previous:
            raise _NotSure  # not in the order the merge needs
        previous = entry.run_id
        while current is not None and current[0] < entry.run_id:
            if not current[1].gone:
                raise _NotSure  # a vanished run to mark gone
            current = next(known, None)
        mine = None
        if current is not None and current[0] == entry.run_id:
            mine = current[1]
            current = next(known, None)
        look = look_at(entry.path, mine)
        if look is None:
            raise _NotSure  # vanished between listing and now
        if look.changed:
            raise _NotSure
    while current is not None:
        if not current[1].gone:
            raise _NotSure  # a vanished run to mark gone
        current = next(known, None)
    rows, problems = read_plans(home_id, plans.entries)
    existing = {r[0]: dict(zip(("plan_id", "home_id", "has_graph_json", "has_rejected", "graph_name", "gone"), r,
                               strict=True))
                for r in fetch("SELECT plan_id, home_id, has_graph_json, has_rejected, graph_name, gone FROM plans "
                               "WHERE home_id = ?", (home_id,))}
    if problems or plans_to_write(rows, existing) != ([], []):
        raise _NotSure
    # Open problems on plans/ or a plan, which the full sync resolves when not seen again.
    plans_prefix = plans_dir + "/"
    if fetch("SELECT 1 FROM problems WHERE resolved_at IS NULL AND machine IN (?, '') AND "
             "(path = ? OR substr(path, 1, ?) = ?) LIMIT 1", (machine, plans_dir, len(plans_prefix), plans_prefix)):
        raise _NotSure
    report.runs_seen += len(runs.entries)
    for listing, parent in ((runs, runs_dir), (plans, plans_dir)):
        if listing.resolved is not None:
            report.symlinked_dirs.append({"home": home.label, "dir": parent, "resolved": listing.resolved})
    return home_id
