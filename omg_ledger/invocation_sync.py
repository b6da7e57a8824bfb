"""`omg-ledger sync --invocations PATH`: index a runner's role-invocation stream.

The runner appends one JSON line per role invocation start and end to ``events.jsonl``
beside its ledger (``seeds/runner-invocation-events.txt``; parsing and pairing are in
:mod:`omg_ledger.invocations`). Each file is indexed with the guarantees run streams
have (DESIGN.md, invariants 1-4 and 6):

* **Resumable.** Per file the ledger keeps device, inode, size, mtime, the byte offset
  after the last complete line, the next line number and a SHA-256 of the file's head
  (``invocation_files``). An unchanged file costs one ``open`` + ``fstat``; a grown
  one is read from the stored offset; one that shrank, changed inode or whose head
  changed is re-read from zero and its rows rebuilt (deleted first, never duplicated).
  A partial last line is not a line yet: the offset stays before it and the stored
  size is -1 so the next sync looks again.
* **Pairing across syncs.** A start may arrive in one sync and its end in the next, so
  every valid line is stored (``invocation_lines``) and the paired rows
  (``invocations``) of a file are re-derived from *all* its stored lines whenever it
  changes. Same lines in, same rows out, however the reads were split.
* **Atomic per file.** Lines, paired rows, offsets and problems of one file commit in
  one transaction, under the ledger's sync lock for that file.
* **Read-only.** Opened ``O_RDONLY|O_NOFOLLOW|O_NONBLOCK``; never written, locked,
  renamed or touched.
* **Nothing lost.** A bad line is recorded as a problem (path, byte offset, reason) and
  skipped; its line number is still counted so line numbers match the file.

A missing file is not damage: the runner creates it lazily on its first append, so
nothing is recorded and rows ingested earlier are kept. A missing *directory* is a
problem (most likely a wrong path).
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from . import schema
from .db import sync_lock, write_transaction
from .errors import DatabaseUnavailable
from .feed import (
    HEAD_BYTES,
    MAX_LINE_BYTES,
    CompleteLines,
    NotARegularFile,
    ResumePoint,
    open_stream,
    read_head,
    where_to_resume,
)
from .invocations import (
    InvocationLine,
    InvocationLineError,
    PairedInvocation,
    pair_invocations,
    parse_invocation_line,
    parse_rfc3339,
)
from .store import record_problem, upsert
from .sync import Problem, SyncReport
from .units import format_instant, instant_to_us

__all__ = ["MAX_DURATION_MS", "LineChunk", "read_lines", "storable", "sync_invocation_file", "sync_invocation_files"]

_SCOPE_PREFIX = "invocations:"
# Plausibility cap: a larger duration_ms is damage, not a measurement (and would
# overflow the ledger's 64-bit columns and sums). 10**12 ms is about 31 years.
MAX_DURATION_MS = 10**12


# --------------------------------------------------------------------------- reading


@dataclass
class LineChunk:
    """Complete lines read from a byte offset: (line_no, byte_offset, bytes) each."""

    lines: list[tuple[int, int, bytes]] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (byte offset, reason)
    offset: int = 0  # byte offset after the last complete line consumed
    next_line: int = 1
    bytes_read: int = 0


def read_lines(fd: int, start_offset: int, start_line: int) -> LineChunk:
    """Every complete line from ``start_offset`` to EOF (feed.CompleteLines' rules).

    Blank lines carry nothing and are skipped without a problem; a line over
    :data:`feed.MAX_LINE_BYTES` is a problem and skipped. Both still count as a line.
    """
    chunk = LineChunk(offset=start_offset, next_line=start_line)
    lines = CompleteLines(fd, start_offset, start_line)
    for line_no, offset, end, line in lines:
        if line is None:
            chunk.problems.append((offset, f"line longer than {MAX_LINE_BYTES} bytes; skipped"))
        elif line.strip():
            chunk.lines.append((line_no, offset, line))
        chunk.offset, chunk.next_line = end, line_no + 1
    chunk.bytes_read = lines.bytes_read
    return chunk


def sync_invocation_files(
    engine: Engine,
    paths: Sequence[str],
    report: SyncReport,
    *,
    wait_seconds: float = 60.0,
) -> None:
    """Index each runner invocation stream in ``paths`` into the ledger (one transaction each).

    Adds to ``report``: new valid lines to ``events_ingested``, bytes to ``bytes_read``,
    bad input to ``problems``. Safe to run again at any time; a second run with
    unchanged files changes nothing.
    """
    now = format_instant(datetime.now(UTC))
    seen: set[str] = set()
    for given in paths:
        path = os.path.abspath(os.path.expanduser(given))
        if path in seen:
            continue
        seen.add(path)
        with sync_lock(engine, _SCOPE_PREFIX + path, wait_seconds):
            try:
                sync_invocation_file(engine, path, report, now)
            except OperationalError as exc:
                # The file's transaction rolled back as a whole; earlier files are kept.
                raise DatabaseUnavailable(
                    f"cannot write the ledger database while indexing {path}: {exc.orig}; "
                    f"files committed so far are kept, the next sync carries on") from exc


def sync_invocation_file(engine: Engine, path: str, report: SyncReport, now: str) -> None:
    """One file (absolute ``path``); the caller holds the sync lock for it."""
    table = schema.invocation_files
    with engine.connect() as conn:
        known = conn.execute(select(table).where(table.c.path == path)).mappings().first()
    known = dict(known) if known is not None else None

    try:
        fd = open_stream(path)
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            _problems_now(engine, report, [Problem(path, 0, f"invocation stream: directory {parent} does not exist")], now)
        # else: the runner has not appended yet (the file is created lazily); keep what we have.
        return
    except NotARegularFile as exc:
        _problems_now(engine, report, [Problem(path, 0, f"invocation stream: {exc}")], now)
        return
    except OSError as exc:
        reason = ("is a symlink (not followed; give the real path)" if exc.errno == errno.ELOOP
                  else f"cannot open: {exc.strerror or exc}")
        _problems_now(engine, report, [Problem(path, 0, f"invocation stream: {reason}")], now)
        return

    try:
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if known is not None and identity == (known["dev"], known["inode"], known["size"], known["mtime_ns"]):
            return  # unchanged since the last sync (a pending partial line stores size -1)
        stored = None if known is None else ResumePoint(
            known["dev"], known["inode"], known["stream_offset"], known["next_line"], known["head_len"],
            known["head_sha256"])
        start, line_no, replace = where_to_resume(fd, info, stored)
        chunk = read_lines(fd, start, line_no)
        head_len = min(HEAD_BYTES, chunk.offset)
        state = {
            "dev": info.st_dev,
            "inode": info.st_ino,
            # A partial last line is not a line yet: a size that forces the next look.
            "size": info.st_size if chunk.offset >= info.st_size else -1,
            "mtime_ns": info.st_mtime_ns,
            "stream_offset": chunk.offset,
            "next_line": chunk.next_line,
            "head_len": head_len,
            "head_sha256": hashlib.sha256(read_head(fd, head_len)).hexdigest(),
        }
    finally:
        os.close(fd)

    problems = [Problem(path, offset, reason) for offset, reason in chunk.problems]
    new_lines: list[tuple[InvocationLine, bytes]] = []
    for number, offset, raw in chunk.lines:
        try:
            line = parse_invocation_line(raw, number, offset)
        except InvocationLineError as exc:
            problems.append(Problem(path, offset, exc.reason))
            continue
        reason = storable(line)
        if reason is not None:
            problems.append(Problem(path, offset, reason))
            continue
        new_lines.append((line, raw))

    with write_transaction(engine) as conn:
        if known is None:
            upsert(conn, table, {"path": path}, ["path"], [])
        file_pk = conn.execute(select(table.c.id).where(table.c.path == path)).scalar_one()
        if replace:
            conn.execute(delete(schema.invocation_lines).where(schema.invocation_lines.c.file_pk == file_pk))
        if new_lines:
            conn.execute(schema.invocation_lines.insert(), [_line_row(file_pk, ln, raw) for ln, raw in new_lines])
        if replace or new_lines:
            _rebuild_invocations(conn, file_pk, path, problems)
        conn.execute(update(table).where(table.c.id == file_pk).values(**state))
        for problem in problems:
            record_problem(conn, None, problem.path, problem.offset, problem.reason, now)
    report.events_ingested += len(new_lines)
    report.bytes_read += chunk.bytes_read
    report.problems.extend(problems)


def storable(line: InvocationLine) -> str | None:
    """Why a valid line still cannot be stored faithfully (None when it can).

    ``parse_invocation_line`` checks the contract; this checks what the ledger can
    hold: a NUL character (PostgreSQL text cannot store it), an instant outside the
    representable UTC range (e.g. year 1 with a positive offset), an absurd duration.
    """
    for name in ("role", "milestone", "status"):
        value = getattr(line, name)
        if value is not None and "\x00" in value:
            return f"{name} contains a NUL character"
    try:
        _instant(line.ts)
    except (OverflowError, ValueError) as exc:
        return f"ts {line.ts!r} is outside the representable UTC range: {exc}"
    if line.duration_ms is not None and line.duration_ms > MAX_DURATION_MS:
        return f"duration_ms {line.duration_ms} is beyond any one invocation (max {MAX_DURATION_MS})"
    return None


def _rebuild_invocations(conn: Connection, file_pk: int, path: str, problems: list[Problem]) -> None:
    """Re-derive the file's paired rows from all of its stored lines (caller's transaction)."""
    lines_table = schema.invocation_lines
    stored = conn.execute(
        select(lines_table.c.line_no, lines_table.c.byte_offset, lines_table.c.raw)
        .where(lines_table.c.file_pk == file_pk)
        .order_by(lines_table.c.line_no)
    )
    lines = []
    for number, offset, raw in stored:
        try:
            line = parse_invocation_line(raw.encode("utf-8"), number, offset)
        except InvocationLineError as exc:  # stored by an older, laxer omg-ledger
            problems.append(Problem(path, offset, exc.reason))
            continue
        lines.append(line)
    conn.execute(delete(schema.invocations).where(schema.invocations.c.file_pk == file_pk))
    rows = [_invocation_row(file_pk, row) for row in pair_invocations(lines)]
    if rows:
        conn.execute(schema.invocations.insert(), rows)


def _instant(ts: str | None) -> tuple[str | None, int | None]:
    if ts is None:
        return None, None
    moment = parse_rfc3339(ts)
    return format_instant(moment), instant_to_us(moment)


def _line_row(file_pk: int, line: InvocationLine, raw: bytes) -> dict:
    ts, ts_us = _instant(line.ts)
    return {
        "file_pk": file_pk,
        "line_no": line.line_no,
        "byte_offset": line.byte_offset,
        "ts": ts,
        "ts_us": ts_us,
        "event": line.event,
        "role": line.role,
        "milestone": line.milestone,
        "status": line.status,
        "duration_ms": line.duration_ms,
        # parse_invocation_line accepts only valid UTF-8: the line exactly as written.
        "raw": raw.decode("utf-8"),
    }


def _invocation_row(file_pk: int, row: PairedInvocation) -> dict:
    started_at, started_at_us = _instant(row.started_at)
    ended_at, ended_at_us = _instant(row.ended_at)
    return {
        "file_pk": file_pk,
        "seq": row.seq,
        "role": row.role,
        "milestone": row.milestone,
        "started_at": started_at,
        "started_at_us": started_at_us,
        "ended_at": ended_at,
        "ended_at_us": ended_at_us,
        "status": row.status,
        "duration_ms": row.duration_ms,
        "duration_source": row.duration_source,
        "outcome": row.outcome,
        "start_line": row.start_line,
        "end_line": row.end_line,
    }


def _problems_now(engine: Engine, report: SyncReport, problems: list[Problem], now: str) -> None:
    with write_transaction(engine) as conn:
        for problem in problems:
            record_problem(conn, None, problem.path, problem.offset, problem.reason, now)
    report.problems.extend(problems)
