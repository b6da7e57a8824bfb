"""`omg-ledger sync` and `omg-ledger rebuild`: ingest → derive → store.

``sync`` indexes homes and runner streams: for every run directory whose facts may
have changed (the change check costs a few stat calls), ingest reads the new facts,
derive rebuilds the run's rows from all of its facts, and the store commits both in
one transaction. Then every run and stream whose rows were derived by older rules
(``DERIVATION_VERSION``) is re-derived from stored facts alone, gone runs included,
in batches that each commit (a killed sync resumes where it stopped).

``rebuild`` is that second stage on demand: it needs no home at all.
"""

from __future__ import annotations

import bisect
import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from . import derive, schema
from .backend import backend_of
from .bounds import bounded_path
from .config import Home
from .db import sync_lock, write_transaction
from .derive import RunFacts, derive_run
from .discover import (
    DirListing,
    home_identity,
    list_home_dir,
    list_run_dir,
    stat_or_none,
    trusted_mtime,
)
from .errors import DatabaseUnavailable, RunNotFound
from .ingest import (
    Problem,
    RunDirRead,
    file_identity,
    read_invocation_stream,
    read_run_dir,
    run_stream_needs_reading,
    stored_identity,
)
from .invocation_sync import rederive_stream, store_lines
from .snapshot import PARSERS, SNAPSHOT_NAMES, BadSnapshot, UnreadableFile, read_small_file
from .store import (
    RunWrite,
    clear_derived,
    create_run,
    iter_events,
    load_derive_state,
    load_file_contents,
    load_run_facts,
    record_problem,
    replace_derived,
    resolve_home,
    resolve_problems,
    save_derive_state,
    settle_copies,
    store_while_reading,
    terminal_keys,
    upsert,
    write_events,
    write_finished,
    write_identities,
    write_run,
)
from .tail import Checkpoint, machine_source, needs_reading
from .units import format_instant

__all__ = ["Home", "Problem", "RebuildReport", "SyncReport", "rebuild", "sync"]

ABSENT = -1  # remembered mtime of a failed/ directory that does not exist
DERIVE_BATCH = 100  # runs re-derived per transaction
INVOCATIONS_SCOPE = "invocations:"
DERIVE_SCOPE = "derive"


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
        }


@dataclass
class RebuildReport:
    runs_rederived: int = 0
    streams_rederived: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"runs_rederived": self.runs_rederived, "streams_rederived": self.streams_rederived,
                "seconds": round(self.seconds, 3)}


Progress = Callable[[str, int, int], None]  # (stage, done, total)


def sync(engine: Engine, homes: Sequence[Home], *, invocation_files: Iterable[str] = (),
         wait_seconds: float = 60.0, progress: Progress | None = None, relabel: bool = False,
         clock_ns: Callable[[], int] = time.time_ns) -> SyncReport:
    """Index every home and runner stream, then bring every outdated derivation up to
    date. Safe to run again at any time. ``wait_seconds`` bounds the whole wait for
    other syncs holding the ledger; ``relabel`` lets a label given for a directory it
    does not hold move to it; ``clock_ns`` is the wall clock the change check trusts
    directory mtimes by (tests set it)."""
    report = SyncReport()
    started = time.monotonic()
    deadline = started + wait_seconds
    now = format_instant(datetime.fromtimestamp(clock_ns() / 1e9, UTC))
    try:
        for home in homes:
            with sync_lock(engine, home.label, _left(deadline)):
                _HomeSync(engine, home, report, progress, now, clock_ns, relabel).run()
        seen: set[str] = set()
        for given in invocation_files:
            path = os.path.abspath(os.path.expanduser(given))
            if path not in seen:
                seen.add(path)
                with sync_lock(engine, INVOCATIONS_SCOPE + path, _left(deadline)):
                    _sync_invocation_stream(engine, path, report, now)
        with sync_lock(engine, DERIVE_SCOPE, _left(deadline)):
            report.runs_rederived = _rederive(engine, None, progress).runs_rederived
    except OperationalError as exc:
        # Disk full, I/O error, read-only or lost database: the open transaction
        # rolled back (every run is all-or-nothing), so say what and stop.
        raise DatabaseUnavailable(
            f"cannot write the ledger database: {exc.orig}; runs committed so far are kept, "
            f"the next sync carries on") from exc
    report.seconds = time.monotonic() - started
    return report


def rebuild(engine: Engine, run_ids: Sequence[str] = (), *, wait_seconds: float = 60.0,
            progress: Progress | None = None) -> RebuildReport:
    """Re-derive runs (all, or those with these run ids) and runner streams from stored
    facts alone: no home is read."""
    started = time.monotonic()
    try:
        with sync_lock(engine, DERIVE_SCOPE, wait_seconds):
            report = _rederive(engine, list(run_ids) if run_ids else None, progress, everything=True)
    except OperationalError as exc:
        raise DatabaseUnavailable(f"cannot write the ledger database: {exc.orig}; runs re-derived so far are "
                                  f"kept, run rebuild again to finish") from exc
    report.seconds = time.monotonic() - started
    return report


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


# -- derive from stored facts ---------------------------------------------------------


def _rederive(engine: Engine, run_ids: list[str] | None, progress: Progress | None,
              everything: bool = False) -> RebuildReport:
    """Re-derive outdated runs and streams (``everything``: all of them, or the runs
    named), a batch per transaction."""
    runs, streams = schema.runs, schema.streams
    report = RebuildReport()
    with engine.connect() as conn:
        query = select(runs.c.id)
        if run_ids is not None:
            query = query.where(runs.c.run_id.in_(run_ids))
        elif not everything:
            query = query.where(runs.c.derivation_version < derive.DERIVATION_VERSION)
        run_pks = [pk for (pk,) in conn.execute(query.order_by(runs.c.id))]
        if run_ids is not None:
            found = {r for (r,) in conn.execute(select(runs.c.run_id).where(runs.c.run_id.in_(run_ids)))}
            missing = [r for r in run_ids if r not in found]
            if missing:
                raise RunNotFound(f"no run {', '.join(missing)} in this ledger (omg-ledger runs lists them)")
        stream_query = select(streams.c.id).where(streams.c.kind == "invocations")
        if not everything:
            stream_query = stream_query.where(streams.c.derivation_version < derive.DERIVATION_VERSION)
        stream_pks = [] if run_ids is not None else [pk for (pk,) in conn.execute(stream_query.order_by(streams.c.id))]
    total = len(run_pks)
    for start in range(0, total, DERIVE_BATCH):
        with write_transaction(engine) as conn:
            for run_pk in run_pks[start:start + DERIVE_BATCH]:
                try:
                    with conn.begin_nested():
                        done = _rederive_run(conn, run_pk, force=everything)
                except OperationalError:
                    raise  # the database itself: the batch rolls back, the next sync carries on
                except Exception as exc:  # noqa: BLE001 - one run's stored facts must not stop every sync
                    done = False
                    _record_underivable(conn, run_pk, exc)
                if done:
                    report.runs_rederived += 1
        if progress is not None:
            progress("derive", min(start + DERIVE_BATCH, total), total)
    for stream_pk in stream_pks:
        with write_transaction(engine) as conn:
            rederive_stream(conn, stream_pk, derive.DERIVATION_VERSION)
        report.streams_rederived += 1
    return report


def _rederive_run(conn: Connection, run_pk: int, force: bool) -> bool:
    backend_of(conn).lock_run(conn, run_pk)
    r = schema.runs.c
    stored = conn.execute(select(r.derivation_version, r.stream_identity, r.dir_path).where(r.id == run_pk)).first()
    if stored is None or (stored.derivation_version >= derive.DERIVATION_VERSION and not force):
        return False  # gone from the ledger, or another writer got there first
    clear_derived(conn, run_pk)
    facts = replace(load_run_facts(conn, run_pk), sink=functools.partial(write_finished, conn, run_pk),
                    keep_state=True)
    rows, scrub = derive_run(facts)
    replace_derived(conn, run_pk, rows, derive.DERIVATION_VERSION, scrub=scrub, derived_cleared=True)
    _save_state(conn, run_pk, rows)
    settle_copies(conn, [stored.stream_identity, rows.run["stream_identity"]])
    for problem in _derived_problems(stored.dir_path, rows):
        record_problem(conn, run_pk, problem.path, problem.offset, problem.reason,
                       format_instant(datetime.now(UTC)))
    return True


def _save_state(conn: Connection, run_pk: int, rows, fresh: bool = False) -> None:
    if rows.state is not None:  # None: a derivation that keeps none (the rows are then walked whole next time)
        save_derive_state(conn, run_pk, rows.state, derive.DERIVATION_VERSION, fresh)


def _record_underivable(conn: Connection, run_pk: int, exc: Exception) -> None:
    """A run whose stored facts the rules cannot derive keeps its older rows and is a
    problem (audit says so); it is tried again on every sync until a release fixes it."""
    path = conn.execute(select(schema.runs.c.dir_path).where(schema.runs.c.id == run_pk)).scalar() or "?"
    record_problem(conn, run_pk, path, 0, f"cannot derive this run's rows from its stored facts: "
                                          f"{type(exc).__name__}: {exc}", format_instant(datetime.now(UTC)))


def _derived_problems(run_dir: str, rows) -> list[Problem]:
    """What derivation itself refused (a charge past the per-run money bound)."""
    return [Problem(os.path.join(run_dir, name), offset or 0, reason) for name, offset, reason in rows.problems]


def _identity(conn: Connection, run_pk: int | None) -> str | None:
    if run_pk is None:
        return None
    return conn.execute(select(schema.runs.c.stream_identity).where(schema.runs.c.id == run_pk)).scalar()


# -- ingest one home ------------------------------------------------------------------


@dataclass
class _Known:
    """What the ledger remembers about one run directory."""

    run_pk: int
    gone: bool
    dir_cache: dict | None  # ingest_state columns, None when never scanned
    checkpoint: Checkpoint | None
    files: dict[str, dict]  # snapshot file name -> identity + sha256


class _HomeSync:
    def __init__(self, engine: Engine, home: Home, report: SyncReport, progress: Progress | None, now: str,
                 clock_ns: Callable[[], int], relabel: bool = False) -> None:
        self.relabel = relabel
        self.open_problem_paths: list[str] | None = None  # loaded once, when first needed
        self.engine = engine
        self.home = home
        self.report = report
        self.progress = progress
        self.now = now
        self.clock_ns = clock_ns

    def run(self) -> None:
        with write_transaction(self.engine) as conn:
            self.home_id = resolve_home(conn, self.home.label, self.home.path, self.home.explicit,
                                        home_identity(self.home.path), self.relabel)
        self.source = f"home:{self.home_id}"
        with self.engine.connect() as conn:
            known = self._load_known(conn)
        runs_dir = os.path.join(self.home.path, "runs")
        if not os.path.isdir(self.home.path):
            self._problem_now(None, self.home.path, 0, "home directory does not exist or is not a directory")
            return
        entries, skipped = self._list(runs_dir)
        for item in skipped:
            self._problem_now(None, item.path, 0, item.reason)
        # -- problem lifecycle: the home and its runs/ listing were looked at again just now
        # (a run directory's own problems are its re-read's to resolve).
        listed = not any(item.path == runs_dir for item in skipped)
        with write_transaction(self.engine) as conn:
            resolve_problems(conn, [self.home.path, runs_dir], {(item.path, 0, item.reason) for item in skipped},
                             self.now, children_of=runs_dir if listed else None,
                             not_reread={entry.path for entry in entries})
        if any(item.path == runs_dir for item in skipped):
            # runs/ itself could not be listed: that is damage, not every run vanishing.
            self._sync_plans()
            return
        for done, entry in enumerate(entries, 1):
            self._sync_run(entry.run_id, entry.path, known.get(entry.run_id))
            self.report.runs_seen += 1
            if self.progress is not None:
                self.progress("sync", done, len(entries))
        seen = {entry.run_id for entry in entries}
        vanished = [k.run_pk for run_id, k in known.items() if run_id not in seen and not k.gone]
        if vanished:
            # History is kept: a run whose directory is gone stays, marked gone.
            with write_transaction(self.engine) as conn:
                conn.execute(update(schema.runs).where(schema.runs.c.id.in_(vanished)).values(gone=True))
                settle_copies(conn, conn.execute(select(schema.runs.c.stream_identity).where(
                    schema.runs.c.id.in_(vanished))).scalars())
            self.report.runs_gone += len(vanished)
        self._sync_plans()
        with write_transaction(self.engine) as conn:
            finished = format_instant(datetime.fromtimestamp(self.clock_ns() / 1e9, UTC))
            conn.execute(update(schema.homes).where(schema.homes.c.id == self.home_id).values(last_synced_at=finished))

    def _load_known(self, conn: Connection) -> dict[str, _Known]:
        """Everything the change check compares, for every run of this home, in two
        plain queries (tuples, not ORM-ish rows: a no-op sync of 10,000 runs is mostly
        this and the stat calls)."""
        mark = backend_of(conn).mark
        names = Checkpoint.COLUMNS
        rows = conn.exec_driver_sql(
            f"SELECT runs.id, runs.run_id, runs.gone, i.run_pk, i.dir_mtime_ns, i.failed_dir_mtime_ns, s.run_pk, "
            f"{', '.join('s.' + n for n in names)} FROM runs "
            f"LEFT OUTER JOIN ingest_state i ON i.run_pk = runs.id "
            f"LEFT OUTER JOIN streams s ON s.run_pk = runs.id WHERE runs.home_id = {mark}",
            (self.home_id,)).fetchall()
        known: dict[str, _Known] = {}
        by_pk: dict[int, _Known] = {}
        for row in rows:
            cache = {"dir_mtime_ns": row[4], "failed_dir_mtime_ns": row[5]} if row[3] is not None else None
            checkpoint = Checkpoint(*row[7:]) if row[6] is not None else None
            item = _Known(row[0], bool(row[2]), cache, checkpoint, {})
            known[row[1]] = by_pk[row[0]] = item
        file_names = ["run_pk", "name", "dev", "inode", "size", "mtime_ns", "sha256", "error"]
        file_rows = conn.exec_driver_sql(
            f"SELECT {', '.join('f.' + n for n in file_names)} FROM snapshot_files f "
            f"JOIN runs ON runs.id = f.run_pk WHERE runs.home_id = {mark}", (self.home_id,)).fetchall()
        for row in file_rows:
            if row[0] in by_pk:
                by_pk[row[0]].files[row[1]] = dict(zip(file_names, row, strict=True))
        return known

    # -- one run ----------------------------------------------------------------------

    def _sync_run(self, run_id: str, path: str, known: _Known | None) -> None:
        """The change check: stat calls only, unless something may have changed."""
        dir_info = stat_or_none(path)
        if dir_info is None:
            return  # vanished between listing and now; the next sync marks it gone
        cache = known.dir_cache if known else None
        dir_changed = cache is None or cache["dir_mtime_ns"] != dir_info.st_mtime_ns
        if not dir_changed and cache["failed_dir_mtime_ns"] == ABSENT:
            failed_info = None  # creating failed/ would have changed the directory's mtime
        else:
            failed_info = stat_or_none(f"{path}/failed")
        failed_now = ABSENT if failed_info is None else failed_info.st_mtime_ns
        failed_changed = cache is None or cache["failed_dir_mtime_ns"] != failed_now
        checkpoint = known.checkpoint if known else None
        stream_info = stat_or_none(f"{path}/events.jsonl")
        stream_changed = known is None or (
            (stream_info is not None or checkpoint is not None) and run_stream_needs_reading(stream_info, checkpoint))
        file_infos = {}
        files_changed = False
        for name in SNAPSHOT_NAMES:
            if not dir_changed and known is not None and name not in known.files:
                continue  # the directory is unchanged, so no file was created in it
            info = stat_or_none(f"{path}/{name}")
            file_infos[name] = info
            previous = known.files.get(name) if known else None
            if file_identity(info) != (stored_identity(previous) if previous else None):
                files_changed = True
        if known is not None and not known.gone and not (
                dir_changed or failed_changed or stream_changed or files_changed):
            return
        self.report.runs_listed += 1
        try:
            read = read_run_dir(path, checkpoint, known.files if known else {}, file_infos, stream_changed)
        except OSError as exc:
            self._problem_now(known.run_pk if known else None, path, 0,
                              f"cannot list run directory: {exc.strerror or exc}")
            return
        self._store_run(run_id, path, known, read, dir_info, failed_info)

    def _store_run(self, run_id: str, path: str, known: _Known | None, read: RunDirRead,
                   dir_info: os.stat_result, failed_info: os.stat_result | None) -> None:
        try:
            self._store_read_run(run_id, path, known, read, dir_info, failed_info)
        finally:
            if read.stream is not None:
                read.stream.close()

    def _store_read_run(self, run_id: str, path: str, known: _Known | None, read: RunDirRead,
                        dir_info: os.stat_result, failed_info: os.stat_result | None) -> None:
        stream = read.stream
        now_ns = self.clock_ns()
        with write_transaction(self.engine) as conn:
            # The stream's new lines are stored as they are read, in this run's one
            # transaction: memory holds a batch of lines, never the stream.
            run_pk, created = (known.run_pk, False) if known else create_run(
                conn, self.home_id, run_id, read.dir_facts(path))
            # A new run's lines are stored and walked in one pass; otherwise they are
            # stored first (a stream re-read from zero is compared as it is stored).
            teed = created and stream is not None and stream.tail is not None
            events_changed, new_events = (False, 0) if stream is None or stream.tail is None or teed else write_events(
                conn, run_pk, stream.items, stream.replace, created)
            if not teed:
                read.finish_stream()
                facts = self._facts(path, known, read, dir_info, failed_info, now_ns)
            if known is not None and not events_changed and self._only_identities_changed(conn, known, read, facts):
                # E.g. state.json rewritten by atomic rename with the same bytes: a new inode
                # is normal and is no reason to re-derive. Remember the new identities only.
                write_identities(conn, known.run_pk, facts)
                self._resolve_run_problems(conn, path, read, checkpoint_before=known.checkpoint)
                self.report.bytes_read += stream.bytes_read if stream else 0
                return
            contents = load_file_contents(conn, run_pk) if not created else {}
            parsed = {}
            for name, r in read.files.items():
                contents.pop(name, None)
                if r is not None and r.row["error"] is None and r.row["content"] is not None:
                    contents[name] = r.row["content"]
                    parsed[name] = r.parsed
            before = None if created else _identity(conn, run_pk)
            # An append resumes the walk where the last derivation stopped (only the new
            # lines are read back); a stream re-read with other lines is walked whole.
            rewritten = stream is not None and stream.replace and events_changed
            resume = None if created or rewritten else load_derive_state(conn, run_pk, derive.DERIVATION_VERSION)
            if not created:
                clear_derived(conn, run_pk, resume)
            events = (store_while_reading(conn, run_pk, stream.items) if teed
                      else iter_events(conn, run_pk, resume["line"] if resume else 0))
            rows, scrub = derive_run(RunFacts(
                run_id=run_id, events=events, files=contents,
                artifacts=read.listing.artifacts, failed_outputs=read.listing.failed_outputs,
                sink=functools.partial(write_finished, conn, run_pk), resume=resume, keep_state=True,
                terminal_lookup=functools.partial(terminal_keys, conn, run_pk)), parsed)
            if teed:
                read.finish_stream()
                facts = self._facts(path, known, read, dir_info, failed_info, now_ns)
                new_events = rows.events_walked
            run_pk = write_run(conn, run_pk, self.home_id, run_id, facts, rows, derive.DERIVATION_VERSION,
                               scrub=scrub, created=created, derived_cleared=True)
            _save_state(conn, run_pk, rows, fresh=created)
            self.report.events_derived += rows.events_walked
            settle_copies(conn, [before, rows.run["stream_identity"]])
            problems = read.problems + _derived_problems(path, rows)
            read.problems[:] = problems
            for problem in problems:
                record_problem(conn, run_pk, problem.path, problem.offset, problem.reason, self.now)
            self._resolve_run_problems(conn, path, read, checkpoint_before=known.checkpoint if known else None)
        self.report.runs_changed += 1
        self.report.events_ingested += new_events
        self.report.bytes_read += stream.bytes_read if stream else 0
        self.report.problems.extend(read.problems)

    def _facts(self, path: str, known: _Known | None, read: RunDirRead, dir_info: os.stat_result,
               failed_info: os.stat_result | None, now_ns: int) -> RunWrite:
        """The run's new facts to store, once its stream's lines have been read."""
        stream = read.stream
        if stream is not None:
            checkpoint = stream.checkpoint
        else:
            checkpoint = known.checkpoint.without_file() if known and known.checkpoint else None
        return RunWrite(
            dir_facts={**read.dir_facts(path),
                       "stream_paused": bool(checkpoint is not None and checkpoint.paused_schema is not None)},
            new_events=(),  # stored as they were read
            replace_events=False,
            stream=(self.source, bounded_path(f"{path}/events.jsonl"), checkpoint) if checkpoint is not None else None,
            dir_cache={"dir_mtime_ns": trusted_mtime(dir_info, now_ns),
                       "failed_dir_mtime_ns": ABSENT if failed_info is None else trusted_mtime(failed_info, now_ns)},
            snapshot_files={name: (r.row if r is not None else None) for name, r in read.files.items()},
            run_files=read.run_files(),
        )

    @staticmethod
    def _only_identities_changed(conn: Connection, known: _Known, read: RunDirRead, facts: RunWrite) -> bool:
        """True when no fact derivation reads has changed: no new event (the caller
        knows: a stream re-read from zero is compared line by line as it is stored),
        every re-read file has the bytes already stored, the directory facts and '.out'
        names are what the ledger holds, and the run's rows are of the current derivation."""
        if known.gone or read.problems:
            return False
        for name, row in facts.snapshot_files.items():
            previous = known.files.get(name)
            if row is None or previous is None or row["sha256"] is None or row["sha256"] != previous["sha256"]:
                return False
        runs = schema.runs
        columns = list(facts.dir_facts)
        stored = conn.execute(select(*[runs.c[k] for k in columns], runs.c.derivation_version)
                              .where(runs.c.id == known.run_pk)).one()
        if tuple(stored[:-1]) != tuple(facts.dir_facts[k] for k in columns) or stored[-1] != derive.DERIVATION_VERSION:
            return False
        listed = {(place, name) for place, name in conn.execute(
            select(schema.run_files.c.place, schema.run_files.c.name).where(schema.run_files.c.run_pk == known.run_pk))}
        return listed == facts.run_files

    def _has_open_problems_under(self, path: str) -> bool:
        if self.open_problem_paths is None:
            with self.engine.connect() as conn:
                self.open_problem_paths = sorted(conn.execute(select(schema.problems.c.path).where(
                    schema.problems.c.resolved_at.is_(None))).scalars())
        at = bisect.bisect_left(self.open_problem_paths, path)
        return at < len(self.open_problem_paths) and (
            self.open_problem_paths[at] == path or self.open_problem_paths[at].startswith(path + "/"))

    def _resolve_run_problems(self, conn: Connection, path: str, read: RunDirRead,
                              checkpoint_before: Checkpoint | None) -> None:
        """Problem lifecycle, for a run directory read again just now: its open problems
        that were not seen again are resolved — except on files this read did not look at
        again (a JSON file skipped as unchanged; a stream read on from its checkpoint,
        whose earlier bad lines were not re-read)."""
        if not self._has_open_problems_under(path):
            return  # nothing recorded before under this run: nothing to resolve (the cold-sync case)
        stream_path = f"{path}/events.jsonl"
        stream = read.stream
        stream_reread = stream is None or (stream.tail is not None and (checkpoint_before is None or stream.replace))
        not_reread = {f"{path}/{name}" for name in SNAPSHOT_NAMES if name not in read.files}
        if not stream_reread:
            not_reread.add(stream_path)
        resolve_problems(conn, [], {(p.path, p.offset, p.reason) for p in read.problems}, self.now,
                         under=path, not_reread=not_reread)

    def _problem_now(self, run_pk: int | None, path: str, offset: int, reason: str) -> None:
        with write_transaction(self.engine) as conn:
            record_problem(conn, run_pk, path, offset, reason, self.now)
        self.report.problems.append(Problem(path, offset, reason))

    # -- plans --------------------------------------------------------------------------

    def _list(self, parent: str) -> tuple[list, list]:
        """runs/ or plans/, read where a symlink leads (and that remembered in the report)."""
        listing = list_home_dir(parent)
        if listing.resolved is not None:
            self.report.symlinked_dirs.append({"home": self.home.label, "dir": parent, "resolved": listing.resolved})
        return listing.entries, listing.skipped

    def _sync_plans(self) -> None:
        entries, skipped = self._list(os.path.join(self.home.path, "plans"))
        for item in skipped:
            self._problem_now(None, item.path, 0, item.reason)
        with self.engine.connect() as conn:
            existing = {
                row.plan_id: row for row in conn.execute(
                    select(schema.plans).where(schema.plans.c.home_id == self.home_id))
            }
        rows = []
        for entry in entries:
            try:
                listing: DirListing = list_run_dir(entry.path)
            except OSError as exc:
                self._problem_now(None, entry.path, 0, f"cannot list plan directory: {exc.strerror or exc}")
                continue
            for item in listing.damage:
                self._problem_now(None, item.path, 0, item.reason)
            graph_name = None
            if "graph.json" in listing.names:
                try:
                    graph_name = PARSERS["graph.json"](read_small_file(os.path.join(entry.path, "graph.json")).content).get("name")
                except (UnreadableFile, BadSnapshot) as exc:
                    self._problem_now(None, os.path.join(entry.path, "graph.json"), 0, str(exc))
            rows.append({"home_id": self.home_id, "plan_id": entry.run_id,
                         "has_graph_json": "graph.json" in listing.names,
                         "has_rejected": "rejected.json" in listing.names,
                         "graph_name": graph_name if isinstance(graph_name, str) else None, "gone": False})
        seen = {r["plan_id"] for r in rows}
        changed = [r for r in rows if r["plan_id"] not in existing or
                   {k: getattr(existing[r["plan_id"]], k) for k in r} != r]
        gone = [pid for pid, row in existing.items() if pid not in seen and not row.gone]
        if not changed and not gone:
            return
        with write_transaction(self.engine) as conn:
            for row in changed:
                upsert(conn, schema.plans, row, ["home_id", "plan_id"],
                       ["has_graph_json", "has_rejected", "graph_name", "gone"])
            if gone:
                conn.execute(update(schema.plans).where(
                    schema.plans.c.home_id == self.home_id, schema.plans.c.plan_id.in_(gone)).values(gone=True))


# -- runner invocation streams ----------------------------------------------------------


def _sync_invocation_stream(engine: Engine, path: str, report: SyncReport, now: str) -> None:
    """One runner stream (absolute ``path``); the caller holds the sync lock for it."""
    streams = schema.streams
    source = machine_source()
    key = bounded_path(path)  # short enough for PostgreSQL's index, and still this path's own
    with engine.connect() as conn:
        row = conn.execute(select(streams).where(
            streams.c.kind == "invocations", streams.c.source == source, streams.c.path == key)).mappings().first()
    checkpoint = Checkpoint.from_row(row) if row is not None else None
    if checkpoint is not None and not needs_reading(stat_or_none(path), checkpoint):
        return  # unchanged since the last sync
    read = read_invocation_stream(path, checkpoint)
    if read is None:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            _problems_now(engine, report, [Problem(path, 0, f"invocation stream: directory {parent} does not exist")],
                          now)
        # else: the runner has not appended yet (the file is created lazily); keep what we have.
        return
    if read.tail is None:
        _problems_now(engine, report, read.problems, now)
        return
    with write_transaction(engine) as conn:
        if row is None:
            upsert(conn, streams, {"kind": "invocations", "source": source, "path": key}, ["kind", "source", "path"],
                   [])
        stream_pk = conn.execute(select(streams.c.id).where(
            streams.c.kind == "invocations", streams.c.source == source, streams.c.path == key)).scalar_one()
        store_lines(conn, stream_pk, read.items, read.replace)
        conn.execute(streams.update().where(streams.c.id == stream_pk).values(**read.checkpoint.as_row()))
        if read.replace or read.items or row is None:
            rederive_stream(conn, stream_pk, derive.DERIVATION_VERSION)
        for problem in read.problems:
            record_problem(conn, None, problem.path, problem.offset, problem.reason, now)
    report.events_ingested += len(read.items)
    report.bytes_read += read.bytes_read
    report.problems.extend(read.problems)


def _problems_now(engine: Engine, report: SyncReport, problems: list[Problem], now: str) -> None:
    with write_transaction(engine) as conn:
        for problem in problems:
            record_problem(conn, None, problem.path, problem.offset, problem.reason, now)
    report.problems.extend(problems)
