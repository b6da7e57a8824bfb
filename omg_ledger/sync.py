"""`omg-ledger sync` and `omg-ledger rebuild`: ingest → derive → store.

``sync`` indexes homes and runner streams: for every run directory whose facts may
have changed (the change check, change_check.py, costs a few stat calls), ingest
reads the new facts, derive rebuilds the run's rows from all of its facts, and the
store writes both in one transaction — shared by a batch of runs, so a run is in the
ledger whole or not at all, and a batch commits whole or not at all. Then every run and stream whose rows were derived by older rules
(``DERIVATION_VERSION``) is re-derived from stored facts alone, gone runs included,
in batches that each commit (a killed sync resumes where it stopped).

``rebuild`` is that second stage on demand: it needs no home at all.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import functools
import itertools
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from . import derive, schema
from .backend import backend_of
from .bounds import bounded_path
from .change_check import (
    ABSENT,
    DERIVE_SCOPE,
    FILE_COLUMNS,
    Known,
    SyncReport,
    known_in_chunks,
    look_at,
    plans_to_write,
    read_plans,
)
from .config import Home
from .db import sync_lock, write_transaction, writing_hints
from .derive import RULE_FAILED, STREAM_RULE_FAILED, RunFacts, UnderivableRun, derive_run
from .discover import (
    SkippedEntry,
    home_identity,
    home_lock_scopes,
    list_home_dir,
    stat_or_none,
    trusted_mtime,
)
from .errors import (
    BadArgument,
    DatabaseUnavailable,
    OutOfResources,
    RunNotFound,
    SyncWorkerLost,
    out_of_resources,
)
from .ingest import (
    Problem,
    RunDirRead,
    read_invocation_stream,
    read_run_dir,
)
from .invocation_sync import pair_appended_lines, pair_stream, rederive_stream, store_lines
from .snapshot import SNAPSHOT_NAMES
from .store import (
    CollectedRows,
    PendingRows,
    RowsOnly,
    RunWrite,
    clear_derived,
    create_run,
    delete_new_run,
    fetch_rows,
    insert_rows,
    iter_events,
    load_derive_state,
    load_file_contents,
    load_run_facts,
    machine_problems,
    next_run_pk,
    record_problem,
    replace_derived,
    resolve_home,
    resolve_moved_run_problems,
    resolve_problems,
    resolve_problems_of_reason,
    resolve_runs_problems,
    row_of,
    save_derive_state,
    settle_copies,
    store_while_reading,
    terminal_keys,
    upsert,
    work_tables,
    write_events,
    write_finished,
    write_identities,
    write_run,
)
from .tail import (
    Checkpoint,
    TailRead,
    TailReader,
    holds_what_was_read,
    machine_source,
    needs_reading,
)
from .units import format_instant
from .workfile import COPY_TEXT, WorkFile, WorkFileError, WorkFiles, attaches_read_only

__all__ = ["Home", "Problem", "RebuildReport", "SyncReport", "rebuild", "sync"]

DERIVE_BATCH = 100  # runs re-derived per transaction
# Runs ingested per transaction (each run is still all-or-nothing: a batch commits whole
# or not at all). One commit per run cost ~0.4 ms plus its fsync; a batch is also bounded
# by the rows it holds back (memory), whichever comes first.
SYNC_BATCH_RUNS = 250
SYNC_BATCH_ROWS = 50_000
# A batch counts the changed runs it writes; unchanged ones looked at in between are
# cheap (stat calls), but a batch still ends after this many times its runs looked at,
# so its write lock and the progress line are never held for a whole home. (Counting
# every run looked at, 100 changed runs spread over 10,000 made 29 commits.)
SYNC_BATCH_LOOKS = 10
# A batch of new runs from a pool whose work files a SQLite ledger copies from inside
# SQLite: the writer holds none of its rows, so it may be larger. Each commit rewrites
# the last pages of every B-tree it touched and may checkpoint the WAL: at 10,000 runs,
# 10 commits instead of 40 measured ~0.5 s (~12%) less of the writer's CPU. But the last
# batch is copied after the workers have finished, alone: a batch is at most a tenth of
# the new runs (1,000 runs in one batch made that cold sync 1.6 -> 2.6 s).
POOL_BATCH_RUNS = 1000
POOL_BATCH_ROWS = 200_000
POOL_BATCHES_AT_LEAST = 10
# New runs in one home from which reading and deriving them in worker processes (the
# writer stays this process) pays for starting the workers.
POOL_MIN_RUNS = 100
# New runs sent to a worker at a time. A worker commits its work file after each
# chunk, so larger chunks commit less: 32 runs instead of 8 measured ~5% less CPU and
# wall time for a cold sync of 10,000 runs (less system time: fewer WAL writes). A
# home with few new runs gets smaller chunks, so that every worker has work to the end.
POOL_CHUNK_MIN = 8
POOL_CHUNK_MAX = 32
# New runs handed out ahead of the writer: enough that the workers go on while the
# writer copies and commits a batch (a run waiting is a few hundred bytes: its rows
# are in a work file).
POOL_AHEAD_RUNS = 2 * SYNC_BATCH_RUNS
POOL_MAX_WORKERS = 8
# Work files a batch copies from at most (SQLite attaches up to 10 databases to one
# connection): a batch that would need more commits first.
POOL_FILES_PER_BATCH = 8
# A new run whose stream is larger is read by the writer itself, a batch of lines at a
# time (a worker holds a run's stream whole while it derives it).
POOL_MAX_STREAM_BYTES = 4 << 20
INVOCATIONS_SCOPE = "invocations:"


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
         clock_ns: Callable[[], int] = time.time_ns, batch_runs: int | None = None,
         workers: int | None = None) -> SyncReport:
    """Index every home and runner stream, then bring every outdated derivation up to
    date. Safe to run again at any time. ``wait_seconds`` bounds the whole wait for
    other syncs holding the ledger; ``relabel`` lets a label given for a directory it
    does not hold move to it; ``clock_ns`` is the wall clock the change check trusts
    directory mtimes by (tests set it); ``batch_runs``: changed runs written per
    transaction (1: a transaction per run; None, the default: SYNC_BATCH_RUNS, or up to
    POOL_BATCH_RUNS for the new runs a pool copies into a SQLite ledger); ``workers``:
    processes that read and derive a home's new runs into work files of their own while
    this one writes (workfile.py; not for an in-memory SQLite ledger); None, the default:
    one per CPU when a home has at least POOL_MIN_RUNS new runs and there is more than one
    CPU; 0: none, every run is read here. ``progress("sync", done, total)`` is called when
    runs are committed: ``done`` runs of the home's ``total`` are in the ledger."""
    if batch_runs is not None and batch_runs < 1:
        raise ValueError("batch_runs must be at least 1")
    if workers is not None and workers < 0:
        raise ValueError("workers must be 0 or more")
    report = SyncReport()
    started = time.monotonic()
    deadline = started + wait_seconds
    now = format_instant(datetime.fromtimestamp(clock_ns() / 1e9, UTC))
    _refuse_unknown_missing_homes(engine, homes)
    ledger_file = _ledger_file(engine)
    try:
        for home in homes:
            with sync_lock(engine, home_lock_scopes(home.path, home.label), _left(deadline), home.label):
                looked = report.runs_seen, report.runs_listed, len(report.symlinked_dirs), len(report.problems)

                def sync_home(home: Home = home, looked: tuple[int, int, int, int] = looked) -> None:
                    # (Done again, the home is looked at again: its runs are not seen twice.)
                    report.runs_seen, report.runs_listed = looked[:2]
                    del report.symlinked_dirs[looked[2]:]
                    before = len(report.problems)  # what the tries ended by a deadlock recorded
                    try:
                        _HomeSync(engine, home, report, progress, now, clock_ns, relabel, batch_runs, workers).run()
                    finally:
                        # A problem they recorded that this try finds again (a runs/ entry that
                        # is no run, say) is one problem in the ledger: it is listed once.
                        recorded = {_problem_key(p) for p in report.problems[looked[3]:before]}
                        report.problems[before:] = [p for p in report.problems[before:]
                                                    if _problem_key(p) not in recorded]

                _again_after_deadlock(engine, sync_home)
        seen: set[str] = set()
        for given in invocation_files:
            # Its real path: a stream named through a symlink is the file it leads to.
            path = os.path.realpath(os.path.expanduser(given))
            if path not in seen:
                seen.add(path)
                with sync_lock(engine, INVOCATIONS_SCOPE + path, _left(deadline)):
                    _sync_invocation_stream(engine, path, report, now)
        with sync_lock(engine, DERIVE_SCOPE, _left(deadline)):
            report.runs_rederived = _again_after_deadlock(engine, lambda: _rederive(engine, None, progress)
                                                          ).runs_rederived
    except OperationalError as exc:
        # Disk full, I/O error, read-only or lost database: the open transaction
        # rolled back (every run is all-or-nothing), so say what and stop.
        _refuse_a_lost_ledger_file(ledger_file)
        raise DatabaseUnavailable(f"cannot write the ledger database: {exc.orig}"
                                  f"{writing_hints(engine, str(exc.orig))}; {SYNC_KEEPS}") from exc
    except WorkFileError as exc:
        raise DatabaseUnavailable(f"{exc}; {SYNC_KEEPS}") from None
    except MemoryError:
        raise _out_of_resources_error(None, SYNC_KEEPS) from None
    except OSError as exc:
        if not out_of_resources(exc):
            raise
        raise _out_of_resources_error(exc, SYNC_KEEPS) from None
    except sqlite3.Error as exc:
        # The pool's copy into the ledger runs inside SQLite itself (workfile.copy_attached).
        _refuse_a_lost_ledger_file(ledger_file)
        raise DatabaseUnavailable(
            f"cannot write the ledger database: {exc}; runs committed so far are kept, "
            f"the next sync carries on") from exc
    # A file removed while it is open is still written without an error: done is said only
    # of a ledger still at its path.
    _refuse_a_lost_ledger_file(ledger_file)
    backend_of(engine).settle_file(engine)
    report.seconds = time.monotonic() - started
    return report


# What a sync that stops leaves: its batches commit whole, so the next one carries on.
SYNC_KEEPS = "runs committed so far are kept, the next sync carries on"


def _out_of_resources_error(what: OSError | None, kept: str) -> OutOfResources:
    """The error of a sync or rebuild that ran out of memory (``what`` None, or ENOMEM)
    or of open files (EMFILE, ENFILE); ``kept``: what of its work stays."""
    if what is not None and what.errno == errno.EMFILE:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        out = f"out of open files (ulimit -n is {soft}; --workers 0 needs the fewest)"
    elif what is not None and what.errno == errno.ENFILE:
        out = "the system is out of open files"
    else:
        out = "out of memory"
    return OutOfResources(f"{out}: the open batch rolled back; {kept}")


def _problem_key(problem: Problem) -> tuple[str, int, str]:
    return problem.path, problem.offset, problem.reason


# Times a home's sync or the re-derivation is done in all when the database ends it to break
# a deadlock with another writer.
DEADLOCK_TRIES = 3
_T = TypeVar("_T")


def _again_after_deadlock(engine: Engine, work: Callable[[], _T]) -> _T:
    """``work`` (a home's sync, or the re-derivation: each commits batch by batch and
    carries on from what is committed), done again when PostgreSQL rolled its batch back
    to break a deadlock: two machines' syncs writing copies of one run at once each hold
    their own copy's row and wait for the other to settle which copy is billed
    (store.settle_copies); the other one goes on, and this one then settles after it."""
    tries = 1
    while True:
        try:
            return work()
        except OperationalError as exc:
            if tries >= DEADLOCK_TRIES or not backend_of(engine).ended_by_deadlock(exc):
                raise
        tries += 1


def _ledger_file(engine: Engine) -> tuple[str, tuple[int, int] | None] | None:
    """A SQLite ledger's path and the file it names now (device, inode); None for PostgreSQL."""
    path = backend_of(engine).file_path(engine)
    return None if path is None else (path, _file_at(path))


def _file_at(path: str) -> tuple[int, int] | None:
    info = stat_or_none(os.path.realpath(path))
    return None if info is None else (info.st_dev, info.st_ino)


def _refuse_a_lost_ledger_file(ledger_file: tuple[str, tuple[int, int] | None] | None,
                               command: str = "sync") -> None:
    """DatabaseUnavailable when the ledger's path no longer names the file this sync (or
    rebuild) opened (removed, or another put in its place): what it wrote went with that file."""
    if ledger_file is None:
        return
    path, opened = ledger_file
    if _file_at(path) != opened:
        again = ("sync again (into the file now there, or a new ledger from the homes)" if command == "sync"
                 else "the next sync re-derives the file now there as it needs")
        raise DatabaseUnavailable(
            f"the ledger file {path} was removed or replaced while this {command} ran: what the {command} wrote "
            f"went with the file it had opened; {again}")


def read_again_what_older_rules_refused(conn: Connection, home_id: int) -> None:
    """The files of the home's runs derived by older rules (an older DERIVATION_VERSION)
    that left an open problem are read again from zero by this sync: a stream line or a
    document those rules refused was never stored (or stored as an error), so re-deriving
    the stored facts cannot find it, while the rules now may read it (the caller's write
    transaction; the home's sync lock held). Their stored identity is forgotten, which
    makes the tail read the stream again and replace the run's rows, and the snapshot
    file be read again; the problems are then resolved or seen again as for any re-read."""
    runs, streams, files, problems = schema.runs, schema.streams, schema.snapshot_files, schema.problems
    outdated = select(runs.c.id).where(runs.c.home_id == home_id, runs.c.gone.is_(False),
                                       runs.c.derivation_version < derive.DERIVATION_VERSION)
    if conn.execute(outdated.limit(1)).first() is None:
        return  # (every sync but the first after a rule change: no update scans the tables)
    open_paths = select(problems.c.path).where(problems.c.resolved_at.is_(None), problems.c.run_pk.in_(outdated))
    conn.execute(update(streams).where(streams.c.kind == "run", streams.c.run_pk.in_(outdated),
                                       streams.c.path.in_(open_paths)).values(dev=None))
    conn.execute(update(files).where(files.c.run_pk.in_(outdated), files.c.error.is_not(None)).values(dev=None))


def _refuse_unknown_missing_homes(engine: Engine, homes: Sequence[Home]) -> None:
    """A home directory that does not exist is a problem to record for a home the ledger
    indexes already on this machine (a disk not mounted: its runs stay, marked nothing);
    one it has never indexed here is a mistyped --home or OMG_HOME, refused before
    anything is written, so a cron job never keeps syncing a home that is not there.
    Another machine's home at the same path or with the same label is not this
    machine's (a home of no recorded machine, synced before homes had one, may be)."""
    missing = [home for home in homes if not os.path.isdir(home.path)]
    if not missing:
        return
    homes_t = schema.homes
    with engine.connect() as conn:
        for home in missing:
            identity = home_identity(home.path)
            named = [homes_t.c.path == home.path, homes_t.c.real_path == identity["real_path"]]
            if home.explicit:
                named.append(homes_t.c.label == home.label)
            here = or_(homes_t.c.machine == identity["machine"], homes_t.c.machine.is_(None))
            if conn.execute(select(homes_t.c.id).where(here, or_(*named))).first() is None:
                raise _unknown_missing_home(home)


def refuse_missing_homes_of_a_new_ledger(db: str, homes: Sequence[Home]) -> None:
    """A SQLite ledger not created yet has indexed no home: a missing one is refused
    before the ledger file (and its directory) is made, so a mistyped first sync leaves
    nothing that later reads as an empty ledger. ``db`` is --db as given."""
    from .db import database_url
    from .ledger import plain_sqlite_file

    new_file = plain_sqlite_file(database_url(db))
    if new_file is None or os.path.lexists(new_file):
        return
    for home in homes:
        if not os.path.isdir(home.path):
            raise _unknown_missing_home(home)


def _unknown_missing_home(home: Home) -> BadArgument:
    what = "is not a directory" if os.path.lexists(home.path) else "does not exist"
    return BadArgument(f"home directory {home.path} {what} and this ledger has never indexed "
                       f"a home there: check --home or OMG_HOME (nothing was indexed)")


def rebuild(engine: Engine, run_ids: Sequence[str] = (), *, wait_seconds: float = 60.0,
            progress: Progress | None = None) -> RebuildReport:
    """Re-derive runs (all, or those with these run ids) and runner streams from stored
    facts alone: no home is read."""
    started = time.monotonic()
    ledger_file = _ledger_file(engine)
    try:
        with sync_lock(engine, DERIVE_SCOPE, wait_seconds):
            report = _rederive(engine, list(run_ids) if run_ids else None, progress, everything=True)
    except OperationalError as exc:
        _refuse_a_lost_ledger_file(ledger_file, "rebuild")
        raise DatabaseUnavailable(f"cannot write the ledger database: {exc.orig}{writing_hints(engine, str(exc.orig))}; "
                                  f"runs re-derived so far are kept, run rebuild again to finish") from exc
    except MemoryError:
        raise _out_of_resources_error(None, "runs re-derived so far are kept, run rebuild again to finish") from None
    _refuse_a_lost_ledger_file(ledger_file, "rebuild")
    backend_of(engine).settle_file(engine)
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
        stream_query = select(streams.c.id, streams.c.path, streams.c.source).where(streams.c.kind == "invocations")
        if not everything:
            stream_query = stream_query.where(streams.c.derivation_version < derive.DERIVATION_VERSION)
        outdated_streams = [] if run_ids is not None else conn.execute(stream_query.order_by(streams.c.id)).all()
    total = len(run_pks)
    for start in range(0, total, DERIVE_BATCH):
        with write_transaction(engine) as conn:
            to_settle: set[str | None] = set()
            derived: list[int] = []
            for run_pk in run_pks[start:start + DERIVE_BATCH]:
                try:
                    with conn.begin_nested():
                        identities = _rederive_run(conn, run_pk, force=everything)
                except (OperationalError, ProgrammingError):
                    # The database itself (lost, full, locked; a table or column not there, which
                    # PostgreSQL reports as a ProgrammingError), not the run: the batch rolls back,
                    # the next sync carries on, and no run is blamed for it.
                    raise
                except Exception as exc:  # noqa: BLE001 - one run's stored facts must not stop every sync
                    identities = None
                    _record_underivable(conn, run_pk, exc)
                if identities is not None:
                    to_settle.update(identities)
                    report.runs_rederived += 1
                    derived.append(run_pk)
            # Once a batch, on its final rows: what settling after each run would end with.
            settle_copies(conn, to_settle)
            _resolve_underivable(conn, derived)
        if progress is not None:
            progress("derive", min(start + DERIVE_BATCH, total), total)
    for stream_pk, path, source in outdated_streams:
        with write_transaction(engine) as conn:
            failed = rederive_stream(conn, stream_pk, derive.DERIVATION_VERSION)
            now = format_instant(datetime.now(UTC))
            if failed is None:
                _resolve_stream_rule_failure(conn, path, source, now)
            else:
                record_problem(conn, None, path, 0, failed, now, source)
        report.streams_rederived += failed is None
    return report


def _rederive_run(conn: Connection, run_pk: int, force: bool) -> tuple[str | None, str | None] | None:
    """Re-derive one run in the caller's savepoint. Returns the stream identities (before,
    after) whose copies are to be settled, or None when there was nothing to do."""
    backend_of(conn).lock_run(conn, run_pk)
    stored = fetch_rows(conn, "SELECT r.derivation_version, r.stream_identity, r.dir_path, r.gone, h.machine "
                        f"FROM runs r JOIN homes h ON h.id = r.home_id WHERE r.id = {backend_of(conn).mark}", (run_pk,))
    if not stored:
        return None  # gone from the ledger
    [(version, stream_identity_before, dir_path, gone, machine)] = stored
    if version >= derive.DERIVATION_VERSION and not force:
        return None  # another writer got there first
    clear_derived(conn, run_pk)  # (its derive state too)
    # The run's rows are held back and written out as they pass their bound, inside
    # this run's savepoint (flushed before it ends, so a run that fails leaves nothing).
    pending = PendingRows()
    facts = replace(load_run_facts(conn, run_pk), sink=functools.partial(write_finished, conn, pending, run_pk),
                    keep_state=True)
    parsed, refused = derive.parse_files(facts.files)
    rows, scrub = derive_run(facts, parsed)
    replace_derived(conn, run_pk, rows, derive.DERIVATION_VERSION, scrub=scrub, derived_cleared=True,
                    pending=pending)
    _save_state(conn, run_pk, rows, fresh=True, pending=pending)
    pending.flush(conn)
    files = schema.snapshot_files
    for name, reason in refused:
        # A document older rules took and these refuse holds the error a read of it
        # records (and the problem below), as a ledger synced by these rules alone holds.
        conn.execute(update(files).where(files.c.run_pk == run_pk, files.c.name == name).values(error=reason))
    # A gone run's problems ended with its directory (resolve_runs_problems), and no sync
    # reads it again to end one opened here: they stay the history they are.
    refusals = [Problem(os.path.join(dir_path, name), 0, reason) for name, reason in refused]
    for problem in [] if gone else _derived_problems(dir_path, rows) + refusals:
        record_problem(conn, run_pk, problem.path, problem.offset, problem.reason,
                       format_instant(datetime.now(UTC)), machine or "")
    return stream_identity_before, rows.run["stream_identity"]


def _save_state(conn: Connection, run_pk: int, rows, fresh: bool = False, pending: PendingRows | None = None) -> None:
    # rows.state None: the run keeps none (derive.RESUMABLE_FROM_LINE); its rows are then
    # walked whole from the stored lines next time.
    save_derive_state(conn, run_pk, rows.state, derive.DERIVATION_VERSION, fresh, pending)


UNDERIVABLE_REASON = "cannot derive this run's rows from its stored facts: "


def _record_underivable(conn: Connection, run_pk: int, exc: Exception) -> None:
    """A run whose stored facts the rules cannot derive keeps its older rows and is a
    problem (audit says so); it is tried again on every sync until a release fixes it."""
    path, machine = conn.execute(select(schema.runs.c.dir_path, schema.homes.c.machine).join_from(
        schema.runs, schema.homes, schema.homes.c.id == schema.runs.c.home_id).where(schema.runs.c.id == run_pk)).one()
    failed = exc.__cause__ if isinstance(exc, UnderivableRun) and exc.__cause__ is not None else exc  # (a rule's)
    record_problem(conn, run_pk, path or "?", 0, f"{UNDERIVABLE_REASON}{type(failed).__name__}: {failed}",
                   format_instant(datetime.now(UTC)), machine or "")


def _resolve_underivable(conn: Connection, run_pks: list[int]) -> None:
    """The runs just re-derived are no longer runs the rules cannot derive: no sync reads
    an unchanged directory again to end that problem (caller's write transaction)."""
    if run_pks:
        resolve_problems_of_reason(conn, UNDERIVABLE_REASON, format_instant(datetime.now(UTC)),
                                   schema.problems.c.run_pk.in_(run_pks))


def _underivable_problems(run_dir: str, read: RunDirRead, exc: UnderivableRun) -> list[Problem]:
    """A run not indexed: what reading it found, and why it cannot be derived (on its
    stream, whose lines name the ids)."""
    read.finish_stream()
    return [*read.problems, Problem(f"{run_dir}/events.jsonl", 0, exc.reason)]


def _derived_problems(run_dir: str, rows) -> list[Problem]:
    """What derivation itself refused (a charge past the per-run money bound)."""
    return [Problem(os.path.join(run_dir, name), offset or 0, reason) for name, offset, reason in rows.problems]


def _identity(conn: Connection, run_pk: int | None) -> str | None:
    if run_pk is None:
        return None
    return conn.execute(select(schema.runs.c.stream_identity).where(schema.runs.c.id == run_pk)).scalar()


# -- ingest one home ------------------------------------------------------------------


class _HomeSync:
    def __init__(self, engine: Engine, home: Home, report: SyncReport, progress: Progress | None, now: str,
                 clock_ns: Callable[[], int], relabel: bool = False, batch_runs: int | None = 1,
                 workers: int | None = 0) -> None:
        self.relabel = relabel
        self.batch_runs = batch_runs
        self.workers = workers
        self._batch: contextlib.AbstractContextManager | None = None  # the open write transaction
        self._conn: Connection | None = None
        self._pending = PendingRows()
        self._next_pk: int | None = None  # the next new run's key, when this writer assigns them
        self._work: WorkFiles | None = None  # the pool's work files, while a pool runs
        self._copy_inside = False  # whether they are attached to the ledger (SQLite) or read back
        self._received: list[tuple[str, PreparedRun]] = []  # the batch's runs from the pool, to write
        self._received_rows = 0  # their rows, in the work files
        self._to_settle: set[str | None] = set()
        self._in_batch = 0  # changed runs in the open batch
        self._looked_in_batch = 0  # run entries looked at since the last commit
        self._looked_at = 0  # run entries looked at, committed or not
        self._total = 0
        self.open_problem_paths: list[str] | None = None  # loaded once, when first needed
        self.engine = engine
        self.home = home
        self.report = report
        self.progress = progress
        self.now = now
        self.machine = machine_source()  # (the machine this home is on: homes.machine)
        self.clock_ns = clock_ns
        self._mark_committed()

    def run(self) -> None:
        with write_transaction(self.engine) as conn:
            self.home_id = resolve_home(conn, self.home.label, self.home.path, self.home.explicit,
                                        home_identity(self.home.path), self.relabel, self.report.moved_homes)
            read_again_what_older_rules_refused(conn, self.home_id)
        self.source = f"home:{self.home_id}"
        runs_dir = os.path.join(self.home.path, "runs")
        if not os.path.isdir(self.home.path):
            self._problem_now(None, self.home.path, 0, "home directory does not exist or is not a directory")
            return
        entries, skipped = self._list(runs_dir)
        if not entries and not skipped and not os.path.lexists(runs_dir) and self._count_not_gone():
            # A home that is a mount point reads as an empty directory while its disk is
            # not mounted: damage, as a home gone missing is, not every run vanishing.
            skipped.append(SkippedEntry(runs_dir, "runs/ does not exist (a disk not mounted?): the runs indexed "
                                                  "from it stay as they were; an empty runs/ records them gone"))
        for item in skipped:
            self._problem_now(None, item.path, 0, item.reason)
        # -- problem lifecycle: the home and its runs/ listing were looked at again just now
        # (a run directory's own problems are its re-read's to resolve).
        listed = not any(item.path == runs_dir for item in skipped)
        with write_transaction(self.engine) as conn:
            resolve_problems(conn, [self.home.path, runs_dir], {(item.path, 0, item.reason) for item in skipped},
                             self.now, self.machine, children_of=runs_dir if listed else None,
                             not_reread={entry.path for entry in entries})
        if any(item.path == runs_dir for item in skipped):
            # runs/ itself could not be listed: that is damage, not every run vanishing.
            self._sync_plans()
            return
        self._total = len(entries)
        if self.progress is not None:
            self.progress("sync", 0, self._total)  # a batch may take a while: say how many there are
        # Read before anything is written: the runs the ledger has that are not gone (to
        # find the vanished ones without holding every run), and, for a pool, their ids.
        not_gone = self._count_not_gone()
        # (With workers=None a pool is for a home with POOL_MIN_RUNS more runs listed than
        # held: then the held ids are read, to know which runs are new.)
        may_pool = self.workers != 0 and (self.workers is not None or len(entries) - not_gone >= POOL_MIN_RUNS)
        known_ids = self._known_run_ids() if may_pool else frozenset()
        new = [entry for entry in entries if entry.run_id not in known_ids] if may_pool else []
        pool = self._pool(len(new))
        batch_runs, batch_rows = self._batch_limits(len(new))
        listed_not_gone = 0
        try:
            # New runs are read and derived by the pool, in order, ahead of the writer,
            # each under the key it gets now: the next free one in listing order (this
            # sync holds the ledger's one sync lock; a run that vanishes leaves its key unused).
            prepared = iter(())
            if pool is not None:
                keys = backend_of(self.engine).reserve_run_keys(self._fetch, len(new))
                prepared = _prefetched(pool, [(e.run_id, e.path, self.home_id, self.source, key)
                                              for e, key in zip(new, keys, strict=True)])
            known_runs = known_in_chunks(self._fetch, backend_of(self.engine).mark, self.home_id,
                                         [entry.run_id for entry in entries])
            for entry, known in zip(entries, known_runs, strict=True):
                if known is not None and not known.gone:
                    listed_not_gone += 1
                changed_before = self.report.runs_listed
                if pool is not None and entry.run_id not in known_ids:
                    self._store_prepared(entry.run_id, entry.path, next(prepared))
                else:
                    self._sync_run(entry.run_id, entry.path, known)
                self.report.runs_seen += 1
                self._looked_at += 1
                self._in_batch += self.report.runs_listed - changed_before
                self._looked_in_batch += 1
                if self._batch is None and not self._received:
                    self._committed()  # nothing written since the last commit: these are done too
                elif (self._in_batch >= batch_runs or self._looked_in_batch >= batch_runs * SYNC_BATCH_LOOKS
                      or self._batch_rows() >= batch_rows):
                    self._commit()
            self._commit()
        except BaseException as exc:
            self._abandon(exc)
            raise
        finally:
            if pool is not None:
                try:
                    pool.close()
                finally:
                    self._work.remove()
                    self._work = None
        vanished = self._vanished({entry.run_id for entry in entries}) if not_gone > listed_not_gone else []
        if vanished:
            # History is kept: a run whose directory is gone stays, marked gone. Its open
            # problems end here (kept as history): what they were about is gone with it.
            with write_transaction(self.engine) as conn:
                conn.execute(update(schema.runs).where(schema.runs.c.id.in_(vanished)).values(gone=True))
                resolve_runs_problems(conn, vanished, self.now)
                settle_copies(conn, conn.execute(select(schema.runs.c.stream_identity).where(
                    schema.runs.c.id.in_(vanished))).scalars())
            self.report.runs_gone += len(vanished)
        self._sync_plans()
        with write_transaction(self.engine) as conn:
            finished = format_instant(datetime.fromtimestamp(self.clock_ns() / 1e9, UTC))
            conn.execute(update(schema.homes).where(schema.homes.c.id == self.home_id).values(last_synced_at=finished))

    def _batch_limits(self, new_runs: int) -> tuple[int, int]:
        """Runs and rows a batch holds at most (once the pool, if any, is made)."""
        if self.batch_runs is not None:
            return self.batch_runs, SYNC_BATCH_ROWS
        if self._work is not None and self._copy_inside:
            runs = max(SYNC_BATCH_RUNS, min(POOL_BATCH_RUNS, new_runs // POOL_BATCHES_AT_LEAST))
            return runs, max(SYNC_BATCH_ROWS, runs * POOL_BATCH_ROWS // POOL_BATCH_RUNS)
        return SYNC_BATCH_RUNS, SYNC_BATCH_ROWS

    def _fetch(self, sql: str, params: tuple) -> Sequence[Sequence[Any]]:
        # A short read of its own: nothing holds a read transaction (or a WAL snapshot)
        # open across the batches written meanwhile.
        with self.engine.connect() as conn:
            return conn.exec_driver_sql(sql, params).fetchall()

    def _count_not_gone(self) -> int:
        mark = backend_of(self.engine).mark
        return self._fetch(f"SELECT COUNT(*) FROM runs WHERE home_id = {mark} AND NOT gone", (self.home_id,))[0][0]

    def _known_run_ids(self) -> frozenset[str]:
        mark = backend_of(self.engine).mark
        return frozenset(row[0] for row in self._fetch(f"SELECT run_id FROM runs WHERE home_id = {mark}",
                                                       (self.home_id,)))

    def _vanished(self, listed: set[str]) -> list[int]:
        """The keys of the home's runs, not gone, whose directories are not listed."""
        mark = backend_of(self.engine).mark
        return [run_pk for run_pk, run_id in self._fetch(
            f"SELECT id, run_id FROM runs WHERE home_id = {mark} AND NOT gone", (self.home_id,))
            if run_id not in listed]

    # -- one run ----------------------------------------------------------------------

    def _sync_run(self, run_id: str, path: str, known: Known | None, new_pk: int | None = None) -> None:
        """The change check: stat calls only, unless something may have changed.
        ``new_pk``: the key a new run was given beforehand (a pool's run read here)."""
        now_ns = self.clock_ns()  # before the directory is looked at: what its mtime is judged against
        look = look_at(path, known)
        if look is None or not look.changed:
            return  # unchanged, or vanished between listing and now (the next sync marks it gone)
        self.report.runs_listed += 1
        moved_from = known.dir_path if known is not None and look.moved else None
        if moved_from is not None:
            # Read whole where it is now, as a cold sync would: what it holds is stored
            # again at this path (its problems too), and what names the old one goes.
            known = _read_whole_again(known)
        checkpoint = known.checkpoint if known else None
        try:
            read = read_run_dir(path, checkpoint, known.files if known else {}, look.file_infos,
                                look.stream_changed or moved_from is not None)
        except OSError as exc:
            if out_of_resources(exc):
                raise
            self._problem_now(known.run_pk if known else None, path, 0,
                              f"cannot list run directory: {exc.strerror or exc}")
            if known is not None:
                self._distrust_dir_mtimes(known.run_pk)
            return
        if new_pk is not None:
            self._writer()
            self._next_pk = new_pk
        self._store_run(run_id, path, known, read, look.dir_info, look.failed_info, now_ns)
        if moved_from is not None and self._has_open_problems_under(moved_from):
            resolve_moved_run_problems(self._writer(), known.run_pk, moved_from, self.now)

    def _distrust_dir_mtimes(self, run_pk: int) -> None:
        """A held run whose directory could not be listed is listed again by every sync
        until it can be: making it readable changes its ctime, not its mtime."""
        row = {"run_pk": run_pk, "dir_mtime_ns": None, "failed_dir_mtime_ns": None}
        columns = ["dir_mtime_ns", "failed_dir_mtime_ns"]
        if self._batch is not None:
            upsert(self._conn, schema.ingest_state, row, ["run_pk"], columns)  # with the batch
        else:
            with write_transaction(self.engine) as conn:
                upsert(conn, schema.ingest_state, row, ["run_pk"], columns)

    def _pool(self, new_runs: int):
        """Worker processes, each with its work file, for ``new_runs`` new runs, or None
        when they would not pay."""
        workers = self.workers
        if workers is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            workers = cpus if cpus > 1 and new_runs >= POOL_MIN_RUNS else 0
        backend = backend_of(self.engine)
        ledger = backend.file_path(self.engine)
        if workers == 0 or new_runs == 0 or (backend.name == "sqlite" and ledger is None):
            return None  # (an in-memory SQLite ledger is this process's alone)
        import multiprocessing

        workers = min(workers, new_runs, POOL_MAX_WORKERS)
        tables = work_tables(self.engine)
        try:
            if ledger is not None:
                self._work = WorkFiles.beside(ledger, workers, tables)
                self._copy_inside = attaches_read_only(self._work.paths[0])
            else:
                # Formatted by the workers for COPY: the writer's part is then bytes alone.
                tables = COPY_TEXT if backend.copies_text else tables
                self._work = WorkFiles.temporary(workers, tables)
                self._copy_inside = False
        except WorkFileError:
            # No room for work files (an unwritable $TMPDIR, say): the pool is a speed-up,
            # not a need; the runs are read here. (A write failing later stops the sync.)
            self._work = None
            return None
        context = multiprocessing.get_context("fork")
        pool = None
        try:
            paths = context.SimpleQueue()
            for path in self._work.paths:
                paths.put(path)
            pool = _Pool(context, workers, paths, tables, self.clock_ns)
            pool.start()
        except (OSError, MemoryError, RuntimeError):
            # Too few file descriptors or too little memory for the workers' pipes, processes
            # or the executor's thread (RuntimeError: "can't start new thread"): as above.
            if pool is not None:
                pool.close()
            self._work.remove()
            self._work = None
            return None
        return pool

    def _store_prepared(self, run_id: str, path: str, prepared) -> None:
        """A new run as a worker read and derived it (see _prepare_new_run): its rows
        are in the worker's work file, copied into the ledger when the batch commits."""
        if prepared is None:
            return  # vanished between listing and now; the next sync marks it gone
        if isinstance(prepared, ReadInline):
            # (Where the database gives run keys, the row is inserted before its lines, as
            # for any run read here, under a key of its own: the one given stays unused.)
            self._sync_run(run_id, path, None,
                           new_pk=prepared.run_pk if backend_of(self.engine).assigns_run_ids else None)
            return
        self.report.runs_listed += 1
        if isinstance(prepared, OSError):
            if out_of_resources(prepared):
                raise prepared
            self._problem_now(None, path, 0, f"cannot list run directory: {prepared.strerror or prepared}")
            return
        if isinstance(prepared, NotIndexed):
            self._not_indexed(None, path, prepared.problems, prepared.not_reread)
            return
        if self._batch is not None or self._work.files_to_copy(prepared.work_file) > POOL_FILES_PER_BATCH:
            # The open transaction sees the work files as they were at its BEGIN, which
            # may be before this run's rows were committed there.
            self._commit()
        self._work.receive(prepared.work_file, prepared.ends)
        self._received.append((path, prepared))
        self._received_rows += prepared.rows
        self._to_settle.add(prepared.stream_identity)
        self.report.events_derived += prepared.events_walked
        self.report.runs_changed += 1
        self.report.events_ingested += prepared.new_events
        self.report.bytes_read += prepared.bytes_read
        self.report.problems.extend(prepared.problems)

    def _write_received(self, conn: Connection) -> None:
        """The batch's runs from the pool: their rows, copied from the work files in
        SQLite, then what the writer adds to each (ingest_state by its clock, problems)."""
        tables = work_tables(conn)
        if self._copy_inside:
            self._work.copy_attached(conn.connection.driver_connection, tables)
        elif (backend := backend_of(conn)).copies_text:  # PostgreSQL: COPY, one per table, in foreign-key order
            texts = collections.defaultdict(list)
            for path, name, after, upto in self._work.not_copied(COPY_TEXT):
                for table, data in self._work.rows(path, name, after, upto):
                    texts[table].append(data)
            for table, columns in tables.items():
                if texts[table]:
                    backend.copy_text_in(conn, table, columns, texts[table])
        else:  # a SQLite that cannot attach them read-only: read back here, inserted as held-back rows are
            for path, table, after, upto in self._work.not_copied(tables):
                insert_rows(conn, table, self._work.rows(path, table, after, upto))
        pending = self._pending
        for path, prepared in self._received:
            run_pk = prepared.run_pk
            pending.add("ingest_state", [row_of(conn, "ingest_state", {
                "run_pk": run_pk, **_dir_cache(path, prepared.dir_info, prepared.failed_info, prepared.looked_at_ns,
                                               prepared.problems)})])
            for problem in prepared.problems:
                record_problem(conn, run_pk, problem.path, problem.offset, problem.reason, self.now, self.machine)
            if self._has_open_problems_under(path):
                resolve_problems(conn, [], _seen(prepared.problems), self.now, self.machine,
                                 under=path, not_reread=prepared.not_reread)
        self._received.clear()
        self._received_rows = 0

    def _store_run(self, run_id: str, path: str, known: Known | None, read: RunDirRead,
                   dir_info: os.stat_result, failed_info: os.stat_result | None, now_ns: int) -> None:
        """Write one changed run into the open batch (``now_ns``: the clock before its
        directory was looked at)."""
        try:
            self._store_read_run(run_id, path, known, read, dir_info, failed_info, now_ns)
        finally:
            if read.stream is not None:
                read.stream.close()

    def _store_read_run(self, run_id: str, path: str, known: Known | None, read: RunDirRead,
                        dir_info: os.stat_result, failed_info: os.stat_result | None, now_ns: int) -> None:
        conn = self._writer()
        # Every row of the run goes to the batch's held-back rows (written out when they
        # pass their bound, so a huge run's memory stays bounded), in the batch's one
        # transaction: the run is whole or absent, and so is the batch.
        pending = self._pending
        insert_row = False
        if known is not None:
            run_pk, created = known.run_pk, False
        elif self._next_pk is not None:
            # The run's row is written once, with its children (store.next_run_pk).
            run_pk, created, insert_row = self._next_pk, True, True
            self._next_pk += 1
        else:
            run_pk, created = create_run(conn, self.home_id, run_id, read.dir_facts(path))
        try:
            if created:
                self._store_run_rows(conn, run_pk, created, insert_row, run_id, path, known, read, dir_info,
                                     failed_info, now_ns)
            else:
                # A run already held keeps its rows if this one is not stored: a savepoint,
                # holding none of the batch's earlier rows (a rollback would drop them too).
                pending.flush(conn)
                with conn.begin_nested():
                    self._store_run_rows(conn, run_pk, created, insert_row, run_id, path, known, read, dir_info,
                                         failed_info, now_ns)
        except UnderivableRun as exc:
            pending.drop_run(conn, run_pk)
            if created:
                delete_new_run(conn, run_pk)  # (no savepoint: it would take the batch's spilled rows along)
            self._not_indexed(None if created else run_pk, path, _underivable_problems(path, read, exc),
                              _not_reread(path, read, known.checkpoint if known else None))

    def _store_run_rows(self, conn: Connection, run_pk: int, created: bool, insert_row: bool, run_id: str,
                        path: str, known: Known | None, read: RunDirRead, dir_info: os.stat_result,
                        failed_info: os.stat_result | None, now_ns: int) -> None:
        stream = read.stream
        pending = self._pending
        has_lines = stream is not None and stream.tail is not None
        # A new run's lines are stored and walked in one pass; otherwise they are stored
        # first (a stream re-read from zero is compared as it is stored).
        teed = created and has_lines
        events_changed, new_events = (False, 0) if not has_lines or teed else write_events(
            conn, run_pk, stream.items, stream.replace, created, pending)
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
        before = None if created else _identity(conn, run_pk)
        contents = load_file_contents(conn, run_pk) if not created else {}
        parsed = {}
        for name, r in read.files.items():
            contents.pop(name, None)
            if r is not None and r.row["error"] is None and r.row["content"] is not None:
                contents[name] = r.row["content"]
                parsed[name] = r.parsed
        # An append resumes the walk where the last derivation stopped (only the new
        # lines are read back); a stream re-read with other lines is walked whole.
        rewritten = stream is not None and stream.replace and events_changed
        resume = None if created or rewritten else load_derive_state(conn, run_pk, derive.DERIVATION_VERSION)
        if not created:
            clear_derived(conn, run_pk, resume)
        if teed:
            events = store_while_reading(conn, run_pk, stream.items, pending)
        else:
            pending.flush(conn)  # the run's new lines are read back from the table
            events = iter_events(conn, run_pk, resume["line"] if resume else 0)
        rows, scrub = derive_run(RunFacts(
            run_id=run_id, events=events, files=contents,
            artifacts=read.listing.artifacts, failed_outputs=read.listing.failed_outputs,
            has_assess="assess.json" in read.listing.names,
            sink=functools.partial(write_finished, conn, pending, run_pk), resume=resume, keep_state=True,
            terminal_lookup=functools.partial(terminal_keys, conn, run_pk, pending=pending)), parsed)
        if teed:
            read.finish_stream()
            facts = self._facts(path, known, read, dir_info, failed_info, now_ns)
            new_events = rows.events_walked
        self._to_settle.add(before)
        # The run's row, identities and state: statements nothing reads back (PostgreSQL:
        # one round trip instead of one each).
        with backend_of(conn).pipelined(conn):
            run_pk = write_run(conn, run_pk, self.home_id, run_id, facts, rows, derive.DERIVATION_VERSION,
                               scrub=scrub, created=created,
                               pending=pending, insert_row=insert_row)
            # (None to resume from: the run's state went with its cleared rows)
            _save_state(conn, run_pk, rows, fresh=created or resume is None, pending=pending)
        self._to_settle.add(rows.run["stream_identity"])
        self.report.events_derived += rows.events_walked
        problems = read.problems + _derived_problems(path, rows)
        read.problems[:] = problems
        for problem in problems:
            record_problem(conn, run_pk, problem.path, problem.offset, problem.reason, self.now, self.machine)
        self._resolve_run_problems(conn, path, read, checkpoint_before=known.checkpoint if known else None,
                                   derived_pk=None if created else run_pk)
        self.report.runs_changed += 1
        self.report.events_ingested += new_events
        self.report.bytes_read += stream.bytes_read if stream else 0
        self.report.problems.extend(read.problems)

    def _facts(self, path: str, known: Known | None, read: RunDirRead, dir_info: os.stat_result,
               failed_info: os.stat_result | None, now_ns: int) -> RunWrite:
        """The run's new facts to store, once its stream's lines have been read."""
        return _run_write(self.source, path, known, read, _dir_cache(path, dir_info, failed_info, now_ns,
                                                                     read.problems))

    @staticmethod
    def _only_identities_changed(conn: Connection, known: Known, read: RunDirRead, facts: RunWrite) -> bool:
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
                    schema.problems.c.resolved_at.is_(None), machine_problems(schema.problems.c.machine, self.machine)
                )).scalars())
        paths = self.open_problem_paths
        at = bisect.bisect_left(paths, path)
        if at < len(paths) and paths[at] == path:
            return True
        # Below it: the first path from "<path>/" on ('X-2/…' and 'X.bak/…' sort between X and X/).
        below = bisect.bisect_left(paths, path + "/")
        return below < len(paths) and paths[below].startswith(path + "/")

    def _resolve_run_problems(self, conn: Connection, path: str, read: RunDirRead,
                              checkpoint_before: Checkpoint | None, derived_pk: int | None = None) -> None:
        """Problem lifecycle, for a run directory read again just now: its open problems
        that were not seen again are resolved — except on files this read did not look at
        again (a JSON file skipped as unchanged; a stream read on from its checkpoint,
        whose earlier bad lines were not re-read). ``derived_pk``: an indexed run just
        derived, which a rule that failed on it before (on lines it appended) no longer
        fails on, though its stream was read on from its checkpoint."""
        if self._has_open_problems_under(path):  # (none in the cold-sync case: nothing to resolve)
            self._resolve_unseen(conn, path, read.problems, _not_reread(path, read, checkpoint_before))
            if derived_pk is not None:
                resolve_problems_of_reason(conn, RULE_FAILED, self.now, schema.problems.c.run_pk == derived_pk)

    def _resolve_unseen(self, conn: Connection, path: str, seen: list[Problem], not_reread: set[str]) -> None:
        resolve_problems(conn, [], _seen(seen), self.now, self.machine,
                         under=path, not_reread=not_reread)

    def _not_indexed(self, run_pk: int | None, path: str, problems: list[Problem], not_reread: set[str]) -> None:
        """A run read again just now that is not stored (derive.UnderivableRun): its
        problems, those no longer seen under it resolved, in the open batch if any."""
        in_batch = self._batch is not None
        with contextlib.ExitStack() as stack:
            conn = self._conn if in_batch else stack.enter_context(write_transaction(self.engine))
            for problem in problems:
                record_problem(conn, run_pk, problem.path, problem.offset, problem.reason, self.now, self.machine)
            if self._has_open_problems_under(path):
                self._resolve_unseen(conn, path, problems, not_reread)
        if not in_batch:
            self._problems_committed.extend(problems)
        self.report.problems.extend(problems)

    def _problem_now(self, run_pk: int | None, path: str, offset: int, reason: str) -> None:
        problem = Problem(path, offset, reason)
        if self._batch is not None:
            record_problem(self._conn, run_pk, path, offset, reason, self.now, self.machine)  # with the batch
        else:
            with write_transaction(self.engine) as conn:
                record_problem(conn, run_pk, path, offset, reason, self.now, self.machine)
            self._problems_committed.append(problem)
        self.report.problems.append(problem)

    # -- the report holds what is committed: a batch rolled back is taken out of it ------

    def _mark_committed(self) -> None:
        """The report as it stands is committed: its counts and problems so far."""
        r = self.report
        self._at_commit = (r.runs_changed, r.events_ingested, r.events_derived, r.bytes_read, len(r.problems))
        self._problems_committed: list[Problem] = []  # since then, in transactions of their own

    def _forget_uncommitted(self) -> None:
        r = self.report
        r.runs_changed, r.events_ingested, r.events_derived, r.bytes_read, problems = self._at_commit
        del r.problems[problems:]
        r.problems.extend(self._problems_committed)
        self._mark_committed()

    # -- the batch: several runs per transaction -----------------------------------------

    def _writer(self) -> Connection:
        """The batch's write transaction, begun at its first write."""
        if self._batch is None:
            self._batch = write_transaction(self.engine, attached=self._work if self._copy_inside else None)
            self._conn = self._batch.__enter__()
            self._next_pk = next_run_pk(self._conn)
        return self._conn

    def _batch_rows(self) -> int:
        return self._pending.batch_rows + self._received_rows

    def _commit(self) -> None:
        """Finish the batch: its held-back rows, which copy of each run is billed, commit."""
        if self._batch is None and not self._received:
            return
        if self._received:
            self._write_received(self._writer())
        self._pending.flush(self._conn)
        settle_copies(self._conn, self._to_settle)
        self._to_settle.clear()
        batch, self._batch, self._conn, self._next_pk = self._batch, None, None, None
        batch.__exit__(None, None, None)
        if self._work is not None:
            self._work.committed()
        self._pending.restart()
        self._committed()

    def _committed(self) -> None:
        self._in_batch = self._looked_in_batch = 0
        self._mark_committed()
        if self.progress is not None:
            self.progress("sync", self._looked_at, self._total)

    def _abandon(self, exc: BaseException) -> None:
        """Roll the open batch back: a batch that did not commit leaves nothing of itself,
        in the ledger or in the report (a sync done again after a deadlock reads its runs again)."""
        self._forget_uncommitted()
        self._pending.restart()
        self._to_settle.clear()
        self._received.clear()
        self._received_rows = 0
        if self._batch is not None:
            batch, self._batch, self._conn, self._next_pk = self._batch, None, None, None
            batch.__exit__(type(exc), exc, exc.__traceback__)

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
            existing = {row["plan_id"]: dict(row) for row in conn.execute(
                select(schema.plans).where(schema.plans.c.home_id == self.home_id)).mappings()}
        rows, problems = read_plans(self.home_id, entries)
        for problem in problems:
            self._problem_now(None, problem.path, problem.offset, problem.reason)
        plans_dir = os.path.join(self.home.path, "plans")
        if self._has_open_problems_under(plans_dir):
            # Every plan was read again just now: what it no longer shows is resolved.
            seen = _seen([Problem(p.path, 0, p.reason) for p in skipped]) | _seen(problems)
            with write_transaction(self.engine) as conn:
                resolve_problems(conn, [], seen, self.now, self.machine, under=plans_dir)
        changed, gone = plans_to_write(rows, existing)
        if not changed and not gone:
            return
        with write_transaction(self.engine) as conn:
            for row in changed:
                upsert(conn, schema.plans, row, ["home_id", "plan_id"],
                       ["has_graph_json", "has_rejected", "graph_name", "gone"])
            if gone:
                conn.execute(update(schema.plans).where(
                    schema.plans.c.home_id == self.home_id, schema.plans.c.plan_id.in_(gone)).values(gone=True))


# -- reading and deriving runs -------------------------------------------------------


def _dir_cache(path: str, dir_info: os.stat_result, failed_info: os.stat_result | None, now_ns: int,
               problems: Iterable[Problem]) -> dict:
    """The run's ingest_state columns: the directory mtimes the next change check trusts,
    with the ctimes they were seen with (taken before the listing, as the mtimes). A
    failed/ that could not be listed is trusted never (NULL: listed again by every sync
    until it can be)."""
    failed = os.path.join(path, "failed")
    if failed_info is None:
        failed_mtime = ABSENT
    elif any(problem.path == failed for problem in problems):
        failed_mtime = None
    else:
        failed_mtime = trusted_mtime(failed_info, now_ns)
    dir_mtime = trusted_mtime(dir_info, now_ns)
    return {"dir_mtime_ns": dir_mtime, "failed_dir_mtime_ns": failed_mtime,
            "dir_ctime_ns": None if dir_mtime is None else dir_info.st_ctime_ns,
            "failed_dir_ctime_ns": None if failed_mtime in (None, ABSENT) else failed_info.st_ctime_ns}


def _run_write(source: str, path: str, known: Known | None, read: RunDirRead, dir_cache: dict) -> RunWrite:
    """A run's new facts to store, once its stream's lines have been read."""
    stream = read.stream
    if stream is not None:
        checkpoint = stream.checkpoint
    else:
        checkpoint = known.checkpoint.without_file() if known and known.checkpoint else None
    return RunWrite(
        dir_facts={**read.dir_facts(path),
                   "stream_paused": bool(checkpoint is not None and checkpoint.paused_schema is not None)},
        stream=(source, bounded_path(f"{path}/events.jsonl"), checkpoint) if checkpoint is not None else None,
        dir_cache=dir_cache,
        snapshot_files={name: (r.row if r is not None else None) for name, r in read.files.items()},
        run_files=read.run_files(),
    )


def _not_reread(path: str, read: RunDirRead, checkpoint_before: Checkpoint | None) -> set[str]:
    """The paths under a run directory whose problems a read did not look at again (a
    JSON file skipped as unchanged; a stream read on from its checkpoint, whose earlier
    bad lines were not re-read)."""
    stream = read.stream
    # Read from its first byte: never read, replaced, or nothing read from it before (a
    # checkpoint stored when it could not be opened).
    from_start = checkpoint_before is None or _nothing_read(checkpoint_before)
    stream_reread = stream is None or (stream.tail is not None and (from_start or stream.replace))
    not_reread = {f"{path}/{name}" for name in SNAPSHOT_NAMES if name not in read.files}
    if not stream_reread:
        not_reread.add(f"{path}/events.jsonl")
    return not_reread


def _read_whole_again(known: Known) -> Known:
    """``known`` with its files' identities forgotten (what was read stays: stored lines
    and file contents are compared, not duplicated), so the stream is read from zero and
    every JSON file again."""
    checkpoint = known.checkpoint
    again = Known(known.run_pk, known.gone, known.dir_path, known.cache,
                  tuple(checkpoint.without_file().as_row().values()) if checkpoint is not None else None)
    forgotten = {"dev", "inode", "size", "mtime_ns", "ctime_ns"}  # what ingest.file_identity compares
    again.file_rows = tuple(tuple(None if column in forgotten else value
                                  for column, value in zip(FILE_COLUMNS, row, strict=True))
                            for row in known.file_rows)
    return again


def _derive_new_run(run_id: str, read: RunDirRead):
    """In a pool worker: a new run's rows and derive state from what was read alone. Its
    stream is read whole into a list, so the pool is for the many small runs of a cold
    sync. Returns (RunRows, scrub)."""
    stream = read.stream
    if stream is not None and isinstance(stream.tail, TailReader):
        reader = stream.tail
        items = list(reader)
        stream.tail = TailRead(items, reader.problems, reader.replace, reader.checkpoint, reader.bytes_read)
    events = list(stream.items) if stream is not None else []
    contents, parsed = {}, {}
    for name, r in read.files.items():
        if r is not None and r.row["error"] is None and r.row["content"] is not None:
            contents[name] = r.row["content"]
            parsed[name] = r.parsed
    return derive_run(RunFacts(
        run_id=run_id, events=events, files=contents,
        artifacts=read.listing.artifacts, failed_outputs=read.listing.failed_outputs, keep_state=True,
        has_assess="assess.json" in read.listing.names,
        terminal_lookup=functools.partial(_terminal_keys_in, events)), parsed)


def _terminal_keys_in(events: list, node_id: str) -> list[tuple[str, int, str | None]]:
    """store.terminal_keys over a run's events in memory (the same keys, the same order),
    so a worker's fold state is the one the writer's inline walk would save."""
    return [("PASS" if e.data["event"] == "node_passed" else "FAIL", int(e.data.get("round") or 0),
             e.data.get("session_id"))
            for e in events
            if e.data.get("node_id") == node_id and e.data.get("event") in ("node_passed", "node_failed")]


class _Pool:
    """The worker processes of one home's sync. Forked: they start at once with every
    module loaded; they never touch the ledger (this process's connections are not
    theirs to use), only their work file. A worker that dies (kill -9, the OOM killer)
    is noticed (the executor breaks), never waited for."""

    def __init__(self, context, workers: int, paths, tables: dict[str, list[str]],
                 clock_ns: Callable[[], int]) -> None:
        # (Forked: the clock, a test's lambda too, is inherited, never pickled.)
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        self._executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_started,
                                             initargs=(paths, tables, clock_ns, os.getpid()))

    def start(self) -> None:
        """Fork the workers and start the executor's threads now, by a job that does nothing
        (it does all of that at its first job): a pool that cannot start (too few file
        descriptors or too little memory for its pipes, processes or threads) is known before
        any run is handed to it. Its thread dying of it would leave every job waiting for ever."""
        import threading

        died: list[BaseException] = []
        hook = threading.excepthook
        threading.excepthook = lambda args: died.append(args.exc_value)  # (raised here, not printed)
        try:
            started = self._executor.submit(int)
            while True:
                try:
                    started.result(timeout=0.05)
                    return
                except TimeoutError:
                    if died:
                        raise died[0] from None
        finally:
            threading.excepthook = hook

    def submit(self, jobs: list):
        return self._executor.submit(_prepare_new_runs, jobs)

    def close(self) -> None:
        # Work still queued is the writer's to abandon; a chunk being read is not waited for.
        kill_workers = getattr(self._executor, "kill_workers", None)  # Python 3.14+
        if kill_workers is not None:
            with contextlib.suppress(Exception):
                kill_workers()
        else:
            for process in list((getattr(self._executor, "_processes", None) or {}).values()):
                with contextlib.suppress(OSError):
                    process.kill()
        # (An executor whose thread never started cannot join it: its workers are killed above.)
        with contextlib.suppress(RuntimeError):
            self._executor.shutdown(wait=True, cancel_futures=True)


def _prefetched(pool: _Pool, jobs: list[tuple[str, str, int, str, int]]) -> Iterator:
    """_prepare_new_run of every job, in order, from the pool; at most POOL_AHEAD_RUNS
    are in flight or waiting, so memory stays bounded when the writer is slower."""
    from concurrent.futures.process import BrokenProcessPool

    size = pool_chunk_runs(len(jobs), pool.workers)
    chunks = (jobs[i:i + size] for i in range(0, len(jobs), size))
    ahead = max(2 * pool.workers, POOL_AHEAD_RUNS // size)
    pending = collections.deque(pool.submit(chunk) for chunk in itertools.islice(chunks, ahead))
    while pending:
        try:
            results = pending.popleft().result()
        except BrokenProcessPool:
            raise SyncWorkerLost(f"a process reading new runs for the sync died (killed or out of memory); "
                                 f"{SYNC_KEEPS}") from None
        following = next(chunks, None)
        if following is not None:
            pending.append(pool.submit(following))
        yield from results


def pool_chunk_runs(new_runs: int, workers: int) -> int:
    """The runs of one chunk: a worker's share of the new runs in eight chunks, kept
    between POOL_CHUNK_MIN and POOL_CHUNK_MAX runs."""
    return max(POOL_CHUNK_MIN, min(POOL_CHUNK_MAX, new_runs // (8 * workers)))


def _prepare_new_runs(jobs: list[tuple[str, str, int, str, int]]) -> list:
    """In a pool worker: a chunk of new runs, their rows added to the work file, which
    is committed before the chunk is handed back (the writer reads only what it received)."""
    results = [_prepare_new_run(job) for job in jobs]
    _WORKER.work_file().commit()
    return results


class _Worker:
    path: str
    tables: dict[str, list[str]]
    clock_ns: Callable[[], int]
    file: WorkFile | None = None

    def work_file(self) -> WorkFile:
        # Opened at the first chunk, not as the worker starts: a failure (too few file
        # descriptors, say) then reaches the writer as that chunk's error, in one line,
        # instead of breaking the pool with a traceback on stderr.
        if self.file is None:
            self.file = WorkFile(self.path, self.tables)
        return self.file


_WORKER = _Worker()


def _worker_started(paths, tables: dict[str, list[str]], clock_ns: Callable[[], int], writer: int) -> None:
    """In a pool worker: its work file's path; Ctrl-C, SIGTERM and SIGHUP (sent to the whole
    process group by a terminal, `timeout` or a service manager) are the writer's to handle
    (it ends the pool), and a worker dies with the writer (kill -9 included) instead of
    waiting for work forever: forked while the writer held the ledger's sync lock, it
    holds the lock too for as long as it lives."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with contextlib.suppress(Exception):  # Linux only; elsewhere the pool's own shutdown stands
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != writer:
        # The writer died before the line above ran (a loaded machine may start a worker
        # late): no signal will come, so go now.
        os._exit(1)
    _WORKER.path = paths.get()
    _WORKER.tables = tables
    _WORKER.clock_ns = clock_ns


@dataclass
class ReadInline:
    """A new run a pool worker leaves to the writer (a large stream), under its key."""

    run_pk: int


@dataclass
class NotIndexed:
    """A new run a pool worker read and could not derive (derive.UnderivableRun): its
    problems, nothing of it in the work file."""

    problems: list[Problem]
    not_reread: set[str]


@dataclass
class PreparedRun:
    """A new run as a pool worker read and derived it: every row it adds to the ledger
    but its ingest_state (the writer adds it, judging the directory's mtimes by the clock
    the worker read before looking: ``looked_at_ns``) is in
    ``work_file``, whose tables end at ``ends`` after this run's rows."""

    run_pk: int
    looked_at_ns: int  # the clock before its directory was looked at (the writer gets it later)
    work_file: str
    ends: dict[str, int]
    rows: int  # of them, this run's
    dir_info: os.stat_result
    failed_info: os.stat_result | None
    stream_identity: str | None
    problems: list[Problem]
    not_reread: set[str]
    events_walked: int
    new_events: int
    bytes_read: int


def _prepare_new_run(job: tuple[str, str, int, str, int]):
    """In a pool worker: a new run's change check, read, derivation and rows (a new
    run's rows come from what is read alone). Returns None (vanished), the OSError that
    kept its directory from being listed, ReadInline, NotIndexed, or a PreparedRun."""
    run_id, path, home_id, source, run_pk = job
    looked_at_ns = _WORKER.clock_ns()
    look = look_at(path, None)
    if look is None:
        return None
    try:
        read = read_run_dir(path, None, {}, look.file_infos, look.stream_changed)
    except OSError as exc:
        return exc
    try:
        stream = read.stream
        if stream is not None and isinstance(stream.tail, TailReader) \
                and stream.tail.info.st_size > POOL_MAX_STREAM_BYTES:
            return ReadInline(run_pk)  # (the stream, opened, is not read: closed below)
        try:
            rows, scrub = _derive_new_run(run_id, read)
        except UnderivableRun as exc:
            return NotIndexed(_underivable_problems(path, read, exc), _not_reread(path, read, None))
        table = RowsOnly("sqlite")  # (a run's rows are the same tuples for either database)
        collected = CollectedRows()
        new_events = 0
        if stream is not None and stream.tail is not None:
            _, new_events = write_events(table, run_pk, stream.items, stream.replace, True, collected)
        read.finish_stream()
        facts = _run_write(source, path, None, read, {})
        write_run(table, run_pk, home_id, run_id, facts, rows, derive.DERIVATION_VERSION, scrub=scrub,
                  created=True, pending=collected, insert_row=True)
        _save_state(table, run_pk, rows, fresh=True, pending=collected)
        del collected.rows["ingest_state"]
        work_file = _WORKER.work_file()
        ends = work_file.add(collected.rows)
        row_count = sum(len(table_rows) for table_rows in collected.rows.values())
        problems = read.problems + _derived_problems(path, rows)
        return PreparedRun(
            run_pk=run_pk, looked_at_ns=looked_at_ns, work_file=work_file.path, ends=ends, rows=row_count,
            dir_info=look.dir_info, failed_info=look.failed_info, stream_identity=rows.run["stream_identity"],
            problems=problems, not_reread=_not_reread(path, read, None), events_walked=rows.events_walked,
            new_events=new_events, bytes_read=stream.bytes_read if stream else 0)
    finally:
        if read.stream is not None:
            read.stream.close()


# -- runner invocation streams ----------------------------------------------------------


def _sync_invocation_stream(engine: Engine, path: str, report: SyncReport, now: str) -> None:
    """One runner stream (absolute ``path``); the caller holds the sync lock for it."""
    streams = schema.streams
    source = machine_source()
    key = bounded_path(path)  # short enough for PostgreSQL's index, and still this path's own
    with engine.connect() as conn:
        row = conn.execute(select(streams).where(
            streams.c.kind == "invocations", streams.c.source == source, streams.c.path == key)).mappings().first()
    if row is None:
        row = _moved_invocation_stream(engine, source, path, key)
    checkpoint = Checkpoint.from_row(row) if row is not None else None
    if checkpoint is not None and row["derivation_version"] < derive.DERIVATION_VERSION \
            and _has_open_problems_at(engine, path, source):
        # Older rules left a problem: a line they refused was never stored, and these may
        # read it. The stream is read again from its first byte, its rows replaced.
        checkpoint = checkpoint.without_file()
    if checkpoint is not None and not needs_reading(stat_or_none(path), checkpoint):
        return  # unchanged since the last sync
    read = read_invocation_stream(path, checkpoint)
    if read is None:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            _problems_now(engine, report, [Problem(path, 0, f"invocation stream: directory {parent} does not exist")],
                          now, source)
        else:
            # The runner has not appended yet (the file is created lazily): keep what we
            # have; what was wrong with a file that is not there is not wrong any more.
            _resolve_stream_problems(engine, path, now, source)
        return
    if read.tail is None:
        if row is not None:  # its identity forgotten: once it opens, it is read from its first byte
            with write_transaction(engine) as conn:
                conn.execute(streams.update().where(streams.c.id == row["id"]).values(**read.checkpoint.as_row()))
        _problems_now(engine, report, read.problems, now, source)
        return
    with write_transaction(engine) as conn:
        if row is None:
            upsert(conn, streams, {"kind": "invocations", "source": source, "path": key}, ["kind", "source", "path"],
                   [])
        stream_pk = conn.execute(select(streams.c.id).where(
            streams.c.kind == "invocations", streams.c.source == source, streams.c.path == key)).scalar_one()
        store_lines(conn, stream_pk, read.items, read.replace)
        conn.execute(streams.update().where(streams.c.id == stream_pk).values(**read.checkpoint.as_row()))
        failed = None
        if read.replace or read.items or row is None:
            lines = [line for line, _raw in read.items]
            if read.replace or row is None:  # read from its first byte: every line it stores
                failed = pair_stream(conn, stream_pk, lines, derive.DERIVATION_VERSION)
            elif row["derivation_version"] != derive.DERIVATION_VERSION:
                failed = rederive_stream(conn, stream_pk, derive.DERIVATION_VERSION)
            else:
                failed = pair_appended_lines(conn, stream_pk, lines)
            if failed is None:
                _resolve_stream_rule_failure(conn, path, source, now)
        problems = [*read.problems, *([Problem(path, 0, failed)] if failed is not None else [])]
        for problem in problems:
            record_problem(conn, None, problem.path, problem.offset, problem.reason, now, source)
        if checkpoint is None or _nothing_read(checkpoint) or read.replace:
            # Read from its first byte: what it no longer shows is resolved.
            resolve_problems(conn, [path], _seen(problems), now, source)
    report.events_ingested += len(read.items)
    report.bytes_read += read.bytes_read
    report.problems.extend(problems)


def _has_open_problems_at(engine: Engine, path: str, source: str) -> bool:
    p = schema.problems.c
    with engine.connect() as conn:
        return conn.execute(select(p.id).where(p.path == path, p.machine == source, p.resolved_at.is_(None))
                            .limit(1)).first() is not None


def _resolve_stream_rule_failure(conn: Connection, path: str, source: str, now: str) -> None:
    """A runner stream just paired: a rule that failed on it before no longer does."""
    p = schema.problems.c
    resolve_problems_of_reason(conn, STREAM_RULE_FAILED, now, p.path == path, p.machine == source)


def _moved_invocation_stream(engine: Engine, source: str, path: str, key: str):
    """The ``streams`` row of the file at ``path`` read before under another path of this
    machine (moved there, or named through a symlink by an older omg-ledger), its path now
    ``key`` (and its open problems' with it); None when there is none. The same file: its
    device and inode, its old path gone or naming it still, and the bytes read from it still
    at its start (an inode freed and given to another file holds other bytes). Or the same
    bytes in another file, nothing left at the old path: a move across file systems (a copy
    and an unlink). Its lines are then not stored, nor its invocations counted, twice."""
    streams = schema.streams
    info = stat_or_none(path)
    if info is None:
        return None
    with write_transaction(engine) as conn:
        for candidate in conn.execute(select(streams).where(
                streams.c.kind == "invocations", streams.c.source == source).order_by(
                streams.c.id)).mappings().all():
            if (candidate["dev"], candidate["inode"]) == (info.st_dev, info.st_ino):
                try:
                    same = os.path.samefile(candidate["path"], path)
                except OSError:
                    same = not os.path.lexists(candidate["path"])  # moved away: nothing is there now
            else:
                # Another file: the same stream only when its old path is a real one (not a
                # bounded key) with nothing there now, and something was read from it.
                same = os.path.isabs(candidate["path"]) and not os.path.lexists(candidate["path"]) \
                    and candidate["end_offset"] > 0
            if same and holds_what_was_read(path, Checkpoint.from_row(candidate)):
                conn.execute(streams.update().where(streams.c.id == candidate["id"]).values(path=key))
                _move_open_problems(conn, candidate["path"], key, source)
                return {**candidate, "path": key}
    return None


def _move_open_problems(conn: Connection, old: str, new: str, machine: str) -> None:
    """``machine``'s open problems recorded under ``old`` now under ``new``: one the same
    there already (a problem is its machine, path, offset and reason) is opened again, and
    the old row goes."""
    problems = schema.problems
    p = problems.c
    for row in conn.execute(select(p.id, p.byte_offset, p.reason).where(
            p.path == old, p.resolved_at.is_(None), machine_problems(p.machine, machine))).all():
        there = conn.execute(select(p.id).where(p.machine == machine, p.path == new, p.byte_offset == row.byte_offset,
                                                p.reason == row.reason)).scalar()
        if there is None:
            conn.execute(problems.update().where(p.id == row.id).values(path=new, machine=machine))
        else:
            conn.execute(problems.update().where(p.id == there).values(resolved_at=None))
            conn.execute(problems.delete().where(p.id == row.id))


def _resolve_stream_problems(engine: Engine, path: str, now: str, machine: str) -> None:
    """Resolve every open problem ``machine`` has of the stream at ``path``."""
    problems = schema.problems.c
    with engine.connect() as conn:  # (a write transaction only when there is something to resolve)
        if conn.execute(select(problems.id).where(problems.path == bounded_path(path), problems.resolved_at.is_(None),
                                                  machine_problems(problems.machine, machine)).limit(1)).first() is None:
            return
    with write_transaction(engine) as conn:
        resolve_problems(conn, [path], set(), now, machine)


def _seen(problems: Iterable[Problem]) -> set[tuple[str, int, str]]:
    """The problems a read saw, as resolve_problems takes them."""
    return {(p.path, p.offset, p.reason) for p in problems}


def _nothing_read(checkpoint: Checkpoint) -> bool:
    """A checkpoint from which the next read starts at byte 0 again (stored when the file could
    not be opened): not one still scanning its first line, longer than the longest line."""
    return checkpoint.end_offset == 0 and checkpoint.scan_offset is None


def _problems_now(engine: Engine, report: SyncReport, problems: list[Problem], now: str, machine: str) -> None:
    with write_transaction(engine) as conn:
        for problem in problems:
            record_problem(conn, None, problem.path, problem.offset, problem.reason, now, machine)
    report.problems.extend(problems)
