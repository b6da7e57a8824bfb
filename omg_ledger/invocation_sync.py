"""Runner role-invocation streams in the ledger: their lines as facts, their pairs derived.

The runner appends one JSON line per role invocation start and end to ``events.jsonl``
beside its ledger (``seeds/runner-invocation-events.txt``; parsing and pairing are in
:mod:`omg_ledger.invocations`). Such a stream is read by the one tail like every
stream (tail.py: resumable, read-only, a partial last line waits) and checkpointed in
``streams`` under the machine that read it, so equal paths on two machines are two
streams. Every valid line is stored (``invocation_lines``); the paired rows
(``invocations``) are derived from *all* of a stream's stored lines whenever it
changes or its derivation version is old. Same lines in, same rows out, however the
reads were split. A bad line is a problem (path, byte offset, line number) and skipped;
its line number still counts, so numbers match the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .derive import UnderivableStream, derive_appended_invocations, derive_invocations
from .invocations import (
    InvocationLine,
    InvocationLineError,
    PairedInvocation,
    parse_invocation_line,
    parse_rfc3339,
)
from .tail import Rejected
from .units import format_instant, instant_to_us
from .version import DERIVATION_VERSION

if TYPE_CHECKING:  # the writers import SQLAlchemy; parsing a line (ingest, the no-op sync check) does not
    from sqlalchemy.engine import Connection

__all__ = ["MAX_DURATION_MS", "pair_appended_lines", "pair_stream", "parse_tail_line", "rederive_stream", "storable",
           "store_lines"]

# Plausibility cap: a larger duration_ms is damage, not a measurement (and would
# overflow the ledger's 64-bit columns and sums). 10**12 ms is about 31 years.
MAX_DURATION_MS = 10**12


def parse_tail_line(raw: bytes, line_no: int, offset: int) -> tuple[InvocationLine, bytes] | Rejected:
    """One complete line of a runner stream, for the tail."""
    try:
        line = parse_invocation_line(raw, line_no, offset)
    except InvocationLineError as exc:
        return Rejected(f"line {line_no}: {exc.reason}")
    reason = storable(line)
    if reason is not None:
        return Rejected(f"line {line_no}: {reason}")
    return line, raw


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


def store_lines(conn: Connection, stream_pk: int, items: list[tuple[InvocationLine, bytes]], replace: bool) -> None:
    """Append a stream's new valid lines (after deleting the old ones when the file was replaced)."""
    from sqlalchemy import delete

    from . import schema

    if replace:
        conn.execute(delete(schema.invocation_lines).where(schema.invocation_lines.c.file_pk == stream_pk))
    if items:
        conn.execute(schema.invocation_lines.insert(), [_line_row(stream_pk, ln, raw) for ln, raw in items])


def rederive_stream(conn: Connection, stream_pk: int, version: int) -> str | None:
    """Re-derive a stream's paired rows from all of its stored lines (caller's transaction).
    Returns why a rule failed on them (its rows then stay those it had, and every sync
    tries it again), else None."""
    from sqlalchemy import select

    from . import schema

    lines_table = schema.invocation_lines
    stored = conn.execute(
        select(lines_table.c.line_no, lines_table.c.byte_offset, lines_table.c.raw)
        .where(lines_table.c.file_pk == stream_pk)
        .order_by(lines_table.c.line_no)
    )
    lines = []
    for number, offset, raw in stored:
        try:
            lines.append(parse_invocation_line(raw.encode("utf-8"), number, offset))
        except InvocationLineError:
            continue  # stored by an older, laxer omg-ledger; reported when it was read
    return pair_stream(conn, stream_pk, lines, version)


def pair_stream(conn: Connection, stream_pk: int, lines: list[InvocationLine], version: int) -> str | None:
    """A stream's paired rows from ``lines``, every line it stores (just read from its
    first byte, or read back: rederive_stream), in the caller's transaction. Returns why a
    rule failed on them (its rows then stay those it had, and every sync tries it again),
    else None."""
    from . import schema

    try:
        paired = derive_invocations(lines)
    except UnderivableStream as exc:
        return _underivable(conn, stream_pk, exc)
    _replace_pairs(conn, stream_pk, paired)
    conn.execute(schema.streams.update().where(schema.streams.c.id == stream_pk).values(derivation_version=version))
    return None


def pair_appended_lines(conn: Connection, stream_pk: int, appended: list[InvocationLine]) -> str | None:
    """Pair a stream's appended lines on from the starts its earlier lines left open (its
    rows of the current rules: the caller checks): an append costs what was appended and
    those starts, never the stream again. The same rows as rederive_stream (caller's
    transaction). Returns why a rule failed on them (the rows then stay as they were, and
    every sync tries the whole stream again), else None."""
    from sqlalchemy import func, select

    from . import schema

    pairs, lines_table = schema.invocations, schema.invocation_lines
    still_open = []
    for seq, number, offset, raw in conn.execute(
            select(pairs.c.seq, lines_table.c.line_no, lines_table.c.byte_offset, lines_table.c.raw)
            .join_from(pairs, lines_table, (lines_table.c.file_pk == pairs.c.file_pk)
                       & (lines_table.c.line_no == pairs.c.start_line))
            .where(pairs.c.file_pk == stream_pk, pairs.c.outcome == "dangling").order_by(lines_table.c.line_no)):
        try:
            still_open.append((seq, parse_invocation_line(raw.encode("utf-8"), number, offset)))
        except InvocationLineError:  # (stored by laxer rules: the whole stream is paired again)
            return rederive_stream(conn, stream_pk, DERIVATION_VERSION)
    next_seq = conn.execute(select(func.coalesce(func.max(pairs.c.seq) + 1, 0)).where(
        pairs.c.file_pk == stream_pk)).scalar_one()
    try:
        paired = derive_appended_invocations(still_open, appended, next_seq)
    except UnderivableStream as exc:
        return _underivable(conn, stream_pk, exc)
    _replace_pairs(conn, stream_pk, paired, pairs.c.outcome == "dangling")
    return None


def _underivable(conn: Connection, stream_pk: int, exc: UnderivableStream) -> str:
    """The stream's rows stay as they were, stamped with no rules' version (0), so the
    next sync's re-derivation tries it again; the reason, for its problem."""
    from . import schema

    conn.execute(schema.streams.update().where(schema.streams.c.id == stream_pk).values(derivation_version=0))
    return exc.reason


def _replace_pairs(conn: Connection, stream_pk: int, paired: list[PairedInvocation], *which) -> None:
    """The stream's invocation rows (those ``which`` selects, else all) replaced by ``paired``."""
    from sqlalchemy import delete

    from . import schema

    pairs = schema.invocations
    conn.execute(delete(pairs).where(pairs.c.file_pk == stream_pk, *which))
    if paired:
        conn.execute(pairs.insert(), [_invocation_row(stream_pk, row) for row in paired])


def _instant(ts: str | None) -> tuple[str | None, int | None]:
    if ts is None:
        return None, None
    moment = parse_rfc3339(ts)
    return format_instant(moment), instant_to_us(moment)


def _line_row(stream_pk: int, line: InvocationLine, raw: bytes) -> dict:
    ts, ts_us = _instant(line.ts)
    return {
        "file_pk": stream_pk,
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


def _invocation_row(stream_pk: int, row: PairedInvocation) -> dict:
    started_at, started_at_us = _instant(row.started_at)
    ended_at, ended_at_us = _instant(row.ended_at)
    return {
        "file_pk": stream_pk,
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
