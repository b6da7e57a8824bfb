"""`omg-ledger sync`: discover → read → reconcile → store, one transaction per run.

Only what changed is read: a run directory whose mtime, stream identity/size and JSON
file identities match what the ledger remembers costs three or four stat calls. A
stream that grew is read from its stored offset; one that shrank, changed inode, or
whose head changed is re-read from zero and its run rebuilt (never duplicated).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson
from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from . import schema
from .config import Home
from .db import sync_lock, write_transaction
from .discover import (
    DirListing,
    list_entries,
    list_run_dir,
    stat_or_none,
    trusted_mtime,
)
from .errors import DatabaseUnavailable
from .feed import (
    HEAD_BYTES,
    NotARegularFile,
    ResumePoint,
    StreamChunk,
    open_stream,
    read_head,
    read_stream,
    refuse_other_runs,
    where_to_resume,
)
from .reconcile import RunInput, reconcile
from .snapshot import PARSERS, SNAPSHOT_NAMES, BadSnapshot, UnreadableFile, read_small_file
from .store import ensure_home, load_events, record_problem, upsert, write_run
from .units import format_instant

ABSENT = -1  # remembered mtime of a failed/ directory that does not exist
HAS_COLUMN = {
    "state.json": "has_state",
    "graph.json": "has_graph_json",
    "rejected.json": "has_rejected",
    "assess.json": "has_assess",
}


@dataclass
class Problem:
    path: str
    offset: int
    reason: str

    def as_dict(self) -> dict:
        return {"path": self.path, "offset": self.offset, "reason": self.reason}


@dataclass
class SyncReport:
    runs_seen: int = 0
    runs_changed: int = 0
    runs_gone: int = 0
    events_ingested: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "runs_seen": self.runs_seen,
            "runs_changed": self.runs_changed,
            "runs_gone": self.runs_gone,
            "events_ingested": self.events_ingested,
            "bytes_read": self.bytes_read,
            "problems": [p.as_dict() for p in self.problems],
            "seconds": round(self.seconds, 3),
        }


Progress = Callable[[int, int], None]


def sync(engine: Engine, homes: list[Home], *, wait_seconds: float = 60.0,
         progress: Progress | None = None) -> SyncReport:
    """Index every home into the ledger. Safe to run again at any time."""
    report = SyncReport()
    started = time.monotonic()
    for home in homes:
        with sync_lock(engine, home.label, wait_seconds):
            try:
                _HomeSync(engine, home, report, progress).run()
            except OperationalError as exc:
                # Disk full, I/O error, read-only or lost database: the open transaction
                # rolled back (every run is all-or-nothing), so say what and stop.
                raise DatabaseUnavailable(
                    f"cannot write the ledger database while syncing {home.path}: {exc.orig}; "
                    f"runs committed so far are kept, the next sync carries on") from exc
    report.seconds = time.monotonic() - started
    return report


@dataclass
class _Known:
    """What the ledger remembers about one run directory."""

    run_pk: int
    gone: bool
    has_events: bool
    ingest: dict | None
    files: dict[str, dict]  # snapshot file name -> identity + sha256 (content loaded lazily)


class _HomeSync:
    def __init__(self, engine: Engine, home: Home, report: SyncReport, progress: Progress | None) -> None:
        self.engine = engine
        self.home = home
        self.report = report
        self.progress = progress
        self.now = format_instant(datetime.now(UTC))

    def run(self) -> None:
        with write_transaction(self.engine) as conn:
            self.home_id = ensure_home(conn, self.home.label, self.home.path)
        with self.engine.connect() as conn:
            known = self._load_known(conn)
        runs_dir = os.path.join(self.home.path, "runs")
        if not os.path.isdir(self.home.path):
            self._problem_now(None, self.home.path, 0, "home directory does not exist or is not a directory")
            return
        entries, skipped = list_entries(runs_dir)
        for item in skipped:
            self._problem_now(None, item.path, 0, item.reason)
        if any(item.path == runs_dir for item in skipped):
            # runs/ itself could not be listed: that is damage, not every run vanishing.
            self._sync_plans()
            return
        for done, entry in enumerate(entries, 1):
            self._sync_run(entry.run_id, entry.path, known.get(entry.run_id))
            self.report.runs_seen += 1
            if self.progress is not None:
                self.progress(done, len(entries))
        seen = {entry.run_id for entry in entries}
        vanished = [k.run_pk for run_id, k in known.items() if run_id not in seen and not k.gone]
        if vanished:
            # History is kept: a run whose directory is gone stays, marked gone.
            with write_transaction(self.engine) as conn:
                conn.execute(update(schema.runs).where(schema.runs.c.id.in_(vanished)).values(gone=True))
            self.report.runs_gone += len(vanished)
        self._sync_plans()

    # -- what the ledger remembers --------------------------------------------------

    def _load_known(self, conn: Connection) -> dict[str, _Known]:
        """Everything the change check compares, for every run of this home, in two
        plain queries (tuples, not ORM-ish rows: a no-op sync of 10,000 runs is mostly
        this and the stat calls)."""
        names = [c.name for c in schema.ingest_state.c if c.name != "run_pk"]
        offset_at = names.index("stream_offset")
        mark = "%s" if conn.dialect.name == "postgresql" else "?"
        rows = conn.exec_driver_sql(
            f"SELECT runs.id, runs.run_id, runs.gone, runs.has_events, {', '.join('i.' + n for n in names)} "
            f"FROM runs LEFT OUTER JOIN ingest_state i ON i.run_pk = runs.id WHERE runs.home_id = {mark}",
            (self.home_id,)).fetchall()
        known: dict[str, _Known] = {}
        by_pk: dict[int, _Known] = {}
        for row in rows:
            values = row[4:]
            state = dict(zip(names, values, strict=True)) if values[offset_at] is not None else None
            item = _Known(row[0], bool(row[2]), bool(row[3]), state, {})
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
        dir_info = stat_or_none(path)
        if dir_info is None:
            return  # vanished between listing and now; the next sync marks it gone
        stream_path = f"{path}/events.jsonl"  # path comes from scandir: no trailing slash
        stream_info = stat_or_none(stream_path)
        ingest = known.ingest if known else None
        dir_changed = ingest is None or ingest["dir_mtime_ns"] != dir_info.st_mtime_ns
        if not dir_changed and ingest["failed_dir_mtime_ns"] == ABSENT:
            failed_info = None  # creating failed/ would have changed the directory's mtime
        else:
            failed_info = stat_or_none(f"{path}/failed")
        failed_now = ABSENT if failed_info is None else failed_info.st_mtime_ns
        failed_changed = ingest is None or ingest["failed_dir_mtime_ns"] != failed_now
        stream_changed = ingest is None or _stream_identity(stream_info) != (
            ingest["stream_dev"], ingest["stream_inode"], ingest["stream_size"], ingest["stream_mtime_ns"])
        file_infos = {}
        files_changed = False
        for name in SNAPSHOT_NAMES:
            if not dir_changed and known is not None and name not in known.files:
                continue  # the directory is unchanged, so no file was created in it
            info = stat_or_none(f"{path}/{name}")
            file_infos[name] = info
            previous = known.files.get(name) if known else None
            if _file_identity(info) != (_stored_identity(previous) if previous else None):
                files_changed = True
        if known is not None and known.gone is False and not (
            dir_changed or failed_changed or stream_changed or files_changed
        ):
            return
        self._ingest_run(run_id, path, known, dir_info, stream_path, failed_info, file_infos)

    def _ingest_run(self, run_id, path, known, dir_info, stream_path, failed_info, file_infos) -> None:
        problems: list[Problem] = []
        try:
            listing = list_run_dir(path)
        except OSError as exc:
            self._problem_now(known.run_pk if known else None, path, 0,
                              f"cannot list run directory: {exc.strerror or exc}")
            return
        for name in sorted(listing.symlinks):
            problems.append(Problem(os.path.join(path, name), 0, "symlink not followed (omg-ledger never leaves the home)"))
        problems.extend(Problem(item.path, 0, item.reason) for item in listing.damage)

        # The stream: new complete lines from the stored offset, or all of it again.
        ingest = dict(known.ingest) if known and known.ingest else None
        stream = self._read_stream(stream_path, ingest, problems)
        replace_events, chunk, new_ingest = stream
        problems.extend(Problem(stream_path, p.byte_offset, p.reason) for p in refuse_other_runs(chunk, run_id))

        # The small JSON files: re-read only when their identity changed.
        parsed: dict[str, dict | None] = {}
        file_rows: dict[str, dict | None] = {}
        for name in SNAPSHOT_NAMES:
            file_path = os.path.join(path, name)
            info = file_infos[name] if name in file_infos else stat_or_none(file_path)
            previous = known.files.get(name) if known else None
            if info is None or name not in listing.names:
                if previous is not None:
                    file_rows[name] = None
                parsed[name] = None
                continue
            if previous is not None and _file_identity(info) == _stored_identity(previous):
                parsed[name] = self._parse_stored(known.run_pk, name, previous)
                continue
            try:
                small = read_small_file(file_path)
            except UnreadableFile as exc:
                problems.append(Problem(file_path, 0, f"{name}: {exc}"))
                # Remember its identity so an unchanged unreadable file is not re-reported.
                file_rows[name] = {"dev": info.st_dev, "inode": info.st_ino, "size": info.st_size,
                                   "mtime_ns": info.st_mtime_ns, "sha256": None, "content": None,
                                   "error": str(exc)}
                parsed[name] = None
                continue
            error = None
            try:
                parsed[name] = PARSERS[name](small.content)
            except BadSnapshot as exc:
                error = str(exc)
                problems.append(Problem(file_path, 0, error))
                parsed[name] = None
            ident = small.identity
            file_rows[name] = {"dev": ident.dev, "inode": ident.inode, "size": ident.size,
                               "mtime_ns": ident.mtime_ns, "sha256": small.sha256,
                               "content": small.content.decode("utf-8", "replace"), "error": error}

        run_facts = {
            "dir_path": path,
            "gone": False,
            "has_events": "events.jsonl" in listing.names,
            "has_lock": "resume.lock" in listing.names,
            **{column: name in listing.names for name, column in HAS_COLUMN.items()},
        }
        new_ingest.update({
            "dir_mtime_ns": trusted_mtime(dir_info),
            "failed_dir_mtime_ns": ABSENT if failed_info is None else trusted_mtime(failed_info),
        })
        if known is not None and self._only_identities_changed(known, chunk, replace_events, problems, file_rows,
                                                               listing, run_facts):
            # E.g. state.json rewritten by atomic rename with the same bytes: a new inode
            # is normal and is no reason to rebuild. Remember the new identities only.
            with write_transaction(self.engine) as conn:
                upsert(conn, schema.ingest_state, {"run_pk": known.run_pk, **new_ingest}, ["run_pk"],
                       list(new_ingest))
                for name, row in file_rows.items():
                    identity = {k: row[k] for k in ("dev", "inode", "size", "mtime_ns")}
                    conn.execute(update(schema.snapshot_files).where(
                        schema.snapshot_files.c.run_pk == known.run_pk, schema.snapshot_files.c.name == name)
                        .values(**identity))
            self.report.bytes_read += chunk.bytes_read
            return
        with write_transaction(self.engine) as conn:
            run_pk = known.run_pk if known else None
            previous_events = [] if replace_events or run_pk is None else load_events(conn, run_pk)
            events = previous_events + chunk.events
            rows = reconcile(RunInput(
                run_id=run_id,
                events=events,
                snapshot=parsed.get("state.json"),
                assess=parsed.get("assess.json"),
                artifacts=listing.artifacts,
                failed_outputs=listing.failed_outputs,
            ))
            problems.extend(Problem(os.path.join(path, name), offset or 0, reason)  # the per-run bound
                            for name, offset, reason in rows.problems)
            # Text can only hold a NUL through a JSON \u0000 escape (a raw NUL is not JSON).
            scrub = any("\\u0000" in e.raw for e in events) or any(
                b"\\u0000" in orjson.dumps(doc) for doc in parsed.values() if doc is not None)
            run_pk = write_run(conn, run_pk, self.home_id, run_id, rows, run_facts, chunk.events, replace_events,
                               new_ingest, file_rows, scrub=scrub)
            for problem in problems:
                record_problem(conn, run_pk, problem.path, problem.offset, problem.reason, self.now)
        self.report.runs_changed += 1
        self.report.events_ingested += len(chunk.events)
        self.report.bytes_read += chunk.bytes_read
        self.report.problems.extend(problems)

    def _only_identities_changed(self, known: _Known, chunk: StreamChunk, replace_events: bool,
                                 problems: list[Problem], file_rows: dict[str, dict | None],
                                 listing: DirListing, run_facts: dict) -> bool:
        """True when nothing reconcile reads has changed: no new event, every re-read
        file has the bytes already stored, and the directory facts (file presence,
        every node's .out and failed/ reply) are what the ledger holds."""
        if known.gone or replace_events or chunk.events or problems:
            return False
        for name, row in file_rows.items():
            previous = known.files.get(name)
            if row is None or previous is None or row["sha256"] is None or row["sha256"] != previous["sha256"]:
                return False
        runs, nodes = schema.runs, schema.nodes
        with self.engine.connect() as conn:
            stored = conn.execute(select(*[runs.c[k] for k in run_facts]).where(runs.c.id == known.run_pk)).one()
            node_files = conn.execute(select(nodes.c.artifact_name, nodes.c.has_artifact, nodes.c.has_failed_output)
                                      .where(nodes.c.run_pk == known.run_pk)).all()
        if tuple(stored) != tuple(run_facts.values()):
            return False
        return all((name in listing.artifacts, name in listing.failed_outputs) == (bool(out), bool(failed))
                   for name, out, failed in node_files)

    def _read_stream(self, stream_path: str, ingest: dict | None, problems: list[Problem]):
        """Returns (replace_events, chunk, new ingest state) for the run's stream."""
        blank = {"stream_dev": None, "stream_inode": None, "stream_size": None, "stream_mtime_ns": None,
                 "stream_offset": 0, "next_line": 1, "head_len": 0, "head_sha256": None, "blocked_reason": None}
        try:
            fd = open_stream(stream_path)
        except FileNotFoundError:
            # No stream (yet): the run has said nothing. Keep what was ingested before.
            state = dict(ingest) if ingest else dict(blank)
            state.update({"stream_dev": None, "stream_inode": None, "stream_size": None, "stream_mtime_ns": None})
            return False, StreamChunk(offset=state["stream_offset"], next_line=state["next_line"]), state
        except (NotARegularFile, OSError) as exc:
            reason = str(exc) if isinstance(exc, NotARegularFile) else f"cannot open: {exc.strerror or exc}"
            problems.append(Problem(stream_path, 0, f"events.jsonl: {reason}"))
            state = dict(ingest) if ingest else dict(blank)
            return False, StreamChunk(offset=state["stream_offset"], next_line=state["next_line"]), state
        try:
            info = os.fstat(fd)
            stored = None if ingest is None else ResumePoint(
                ingest["stream_dev"], ingest["stream_inode"], ingest["stream_offset"], ingest["next_line"],
                ingest["head_len"], ingest["head_sha256"])
            start, line, replace = where_to_resume(fd, info, stored)
            chunk = read_stream(fd, start, line)
            head_len = min(HEAD_BYTES, chunk.offset)
            state = {
                "stream_dev": info.st_dev,
                "stream_inode": info.st_ino,
                "stream_size": info.st_size,
                "stream_mtime_ns": info.st_mtime_ns,
                "stream_offset": chunk.offset,
                "next_line": chunk.next_line,
                "head_len": head_len,
                "head_sha256": hashlib.sha256(read_head(fd, head_len)).hexdigest(),
                "blocked_reason": chunk.blocked_reason,
            }
            if chunk.offset < info.st_size and chunk.blocked_reason is None:
                # A partial last line (or a runaway one) is not an event yet: remember a
                # size that forces the next sync to look again.
                state["stream_size"] = -1
            for problem in chunk.problems:
                problems.append(Problem(stream_path, problem.byte_offset, problem.reason))
            return replace, chunk, state
        finally:
            os.close(fd)

    def _parse_stored(self, run_pk: int, name: str, previous: dict) -> dict | None:
        if previous.get("error"):
            return None
        with self.engine.connect() as conn:
            content = conn.execute(
                select(schema.snapshot_files.c.content).where(
                    schema.snapshot_files.c.run_pk == run_pk, schema.snapshot_files.c.name == name)
            ).scalar_one_or_none()
        if content is None:
            return None
        try:
            return PARSERS[name](content.encode("utf-8"))
        except BadSnapshot:
            return None

    def _problem_now(self, run_pk: int | None, path: str, offset: int, reason: str) -> None:
        with write_transaction(self.engine) as conn:
            record_problem(conn, run_pk, path, offset, reason, self.now)
        self.report.problems.append(Problem(path, offset, reason))

    # -- plans --------------------------------------------------------------------------

    def _sync_plans(self) -> None:
        entries, skipped = list_entries(os.path.join(self.home.path, "plans"))
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


def _stream_identity(info: os.stat_result | None) -> tuple | None:
    if info is None:
        return (None, None, None, None)
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _file_identity(info: os.stat_result | None) -> tuple | None:
    if info is None:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _stored_identity(row: dict) -> tuple:
    return (row["dev"], row["inode"], row["size"], row["mtime_ns"])
