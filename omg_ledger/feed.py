"""events.jsonl reader: complete lines from a byte offset, validated one by one.

The stream is append-only and crash-safe (RUN-FEED.md): a partial last line is not an
event yet, so the offset we hand back always sits just after the last complete line.
Bad lines are reported with their byte offset and skipped; a line written in a newer
schema stops reading *before* it, so a newer omg-ledger can resume at that byte.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from .bounds import shown, too_long_id
from .units import BadTimestamp, parse_timestamp

SUPPORTED_SCHEMA = 3
MAX_LINE_BYTES = 1 << 20  # the engine's own per-line cap
READ_CHUNK = 1 << 20
HEAD_BYTES = 1024  # fingerprinted head: a replaced file is noticed even at equal size
# Plausibility caps. A value above them is damage, not a measurement, and storing it
# would overflow the ledger's 64-bit sums (costs are kept as integer nano-dollars) and
# 32-bit counters; such a line is a problem, never a crash.
MAX_COST_USD = 100_000  # one model invocation
MAX_TOKENS = 10**12  # one model invocation, per token field
MAX_COUNTER = 2**31 - 1  # retries, round

KNOWN_EVENTS = frozenset(
    {
        "run_started",
        "run_finished",
        "node_started",
        "node_passed",
        "node_failed",
        "node_retried",
        "gate_paused",
        "gate_approved",
        "gate_rejected",
    }
)
NODE_EVENTS = frozenset(e for e in KNOWN_EVENTS if e.startswith(("node_", "gate_")))
# The event-type set is closed per schema version: a new type bumps the schema
# (RUN-FEED.md; schema 2 added the gate events). So at a schema this ledger reads, an
# unknown type is bad input, never news.
GATE_EVENTS = frozenset(e for e in KNOWN_EVENTS if e.startswith("gate_"))
EVENTS_OF_SCHEMA = {1: KNOWN_EVENTS - GATE_EVENTS, 2: KNOWN_EVENTS, 3: KNOWN_EVENTS}
TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
_STRING_FIELDS = ("run_id", "node_id", "phase", "outcome", "verdict", "detail", "session_id", "provenance")
# Short by nature (ids and closed sets); a long one is damage, and node_id is indexed.
_BOUNDED_FIELDS = ("run_id", "node_id", "session_id", "phase", "outcome", "verdict", "provenance")
_KEY_PATTERN = re.compile(rb'"\s*:')
TOO_DEEP = object()


@dataclass(frozen=True)
class Event:
    """One valid stream line. ``data`` is the parsed object; ``raw`` the exact line."""

    line_no: int
    byte_offset: int
    data: dict
    raw: str
    ts: str  # normalized UTC
    at_us: int

    @property
    def type(self) -> str:
        return self.data["event"]


@dataclass(frozen=True)
class LineProblem:
    byte_offset: int
    reason: str


@dataclass
class StreamChunk:
    """What one read of a stream produced."""

    events: list[Event] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)
    offset: int = 0  # byte offset after the last complete line consumed
    next_line: int = 1
    bytes_read: int = 0
    blocked_reason: str | None = None  # set when a newer schema stopped reading


class NotARegularFile(OSError):
    pass


def open_stream(path: str) -> int:
    """Open read-only without following a symlink and without hanging on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    return fd


def read_head(fd: int, length: int) -> bytes:
    return os.pread(fd, length, 0)


@dataclass(frozen=True)
class ResumePoint:
    """What a previous sync remembered about an append-only file."""

    dev: int | None
    inode: int | None
    offset: int
    next_line: int
    head_len: int
    head_sha256: str | None


def where_to_resume(fd: int, info: os.stat_result, stored: ResumePoint | None) -> tuple[int, int, bool]:
    """(offset, line number, replace) for reading an open file again.

    The same file (device and inode), no shorter than the stored offset, whose first
    ``head_len`` bytes still hash the same, resumes at the stored offset. Anything else
    — truncated, replaced, rewritten — is read from zero and its rows replaced.
    """
    if stored is None or (stored.head_sha256 is None and not stored.offset):
        return 0, 1, False
    if stored.head_sha256 is not None and (info.st_dev, info.st_ino) == (stored.dev, stored.inode) \
            and info.st_size >= stored.offset \
            and hashlib.sha256(read_head(fd, stored.head_len)).hexdigest() == stored.head_sha256:
        return stored.offset, stored.next_line, False
    return 0, 1, True


class CompleteLines:
    """The complete lines of a file from a byte offset, in order, never buffering more
    than one runaway line's worth: the one line splitter both streams share.

    Yields ``(line_no, offset, end, line)``: ``end`` is the offset after the newline and
    ``line`` the bytes without it (and without a CRLF's ``\\r``), or None for a line
    longer than MAX_LINE_BYTES. Bytes after the last newline are a partial line: never
    yielded, so a consumer's offset stays before them.
    """

    def __init__(self, fd: int, start_offset: int, start_line: int) -> None:
        self.fd, self.start_offset, self.start_line = fd, start_offset, start_line
        self.bytes_read = 0

    def __iter__(self) -> Iterator[tuple[int, int, int, bytes | None]]:
        line_no = self.start_line
        position = self.start_offset  # where `buffer` starts in the file
        buffer = b""
        runaway_at: int | None = None
        while True:
            data = os.pread(self.fd, READ_CHUNK, position + len(buffer))
            if not data:
                return
            self.bytes_read += len(data)
            buffer += data
            start = 0
            while (newline := buffer.find(b"\n", start)) != -1:
                end = position + newline + 1
                if runaway_at is not None:
                    yield line_no, runaway_at, end, None
                    runaway_at = None
                else:
                    line = buffer[start:newline]
                    if line.endswith(b"\r"):
                        line = line[:-1]  # CRLF: the JSON is the same
                    yield line_no, position + start, end, (line if len(line) <= MAX_LINE_BYTES else None)
                line_no += 1
                start = newline + 1
            position += start
            buffer = buffer[start:]
            if len(buffer) > MAX_LINE_BYTES:
                # A runaway line: remember where it began, drop what we hold, keep
                # scanning for its end without buffering it.
                if runaway_at is None:
                    runaway_at = position
                position += len(buffer)
                buffer = b""


def read_stream(fd: int, start_offset: int, start_line: int) -> StreamChunk:
    """Read complete lines from ``start_offset`` to EOF of an open file descriptor."""
    chunk = StreamChunk(offset=start_offset, next_line=start_line)
    lines = CompleteLines(fd, start_offset, start_line)
    for line_no, offset, end, line in lines:
        if line is None:
            chunk.problems.append(LineProblem(offset, f"line longer than {MAX_LINE_BYTES} bytes; skipped"))
        elif _take_line(chunk, line, offset, line_no):
            break  # a newer schema: the offset stays before this line
        chunk.offset, chunk.next_line = end, line_no + 1
    chunk.bytes_read = lines.bytes_read
    return chunk


def _take_line(chunk: StreamChunk, line: bytes, offset: int, line_no: int) -> bool:
    """Validate one complete line into ``chunk``. Returns True to stop reading."""
    if not line.strip():
        return False  # a blank line carries nothing
    result = parse_event_line(line)
    if isinstance(result, str):
        chunk.problems.append(LineProblem(offset, result))
        return False
    data, ts, at_us = result
    if data["schema"] > SUPPORTED_SCHEMA:
        chunk.blocked_reason = (
            f"event schema {data['schema']} is newer than this omg-ledger understands "
            f"(max {SUPPORTED_SCHEMA}); ingestion of this file waits here for an upgrade"
        )
        chunk.problems.append(LineProblem(offset, chunk.blocked_reason))
        return True
    chunk.events.append(Event(line_no, offset, data, line.decode("utf-8"), ts, at_us))
    return False


def parse_event_line(line: bytes) -> tuple[dict, str, int] | str:
    """Parse and type-check one line. Returns (object, ts, at_us) or a reason string."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    if not isinstance(data, dict):
        return f"not a JSON object but {type(data).__name__}"
    duplicate = duplicate_key(line, data)
    if duplicate is TOO_DEEP:
        return "nested too deeply to check for duplicate keys"
    if duplicate is not None:
        return f"duplicate key {duplicate!r}"
    reason = check_event(data)
    if reason is not None:
        return reason
    try:
        ts, at_us = parse_timestamp(data["ts"])
    except BadTimestamp as exc:
        return str(exc)
    return data, ts, at_us


def check_event(data: dict) -> str | None:
    """Type-check the fields this ledger derives from; None when the event is usable."""
    schema = data.get("schema")
    if not _is_int(schema) or schema < 1:
        return f"missing or invalid 'schema': {shown(schema)}"
    event = data.get("event")
    if not isinstance(event, str) or not event:
        return f"missing or invalid 'event': {shown(event)}"
    if not isinstance(data.get("ts"), str):
        return f"missing or invalid 'ts': {shown(data.get('ts'))}"
    if schema <= SUPPORTED_SCHEMA and event not in EVENTS_OF_SCHEMA[schema]:
        return (f"unknown event type {shown(event)} at schema {schema}, whose event types are closed "
                f"(a new type comes with a new schema); skipped")
    for name in _STRING_FIELDS:
        if name in data and not isinstance(data[name], str):
            return f"'{name}' must be a string, got {shown(data[name])}"
    for name in _BOUNDED_FIELDS:
        reason = too_long_id(name, data.get(name))
        if reason is not None:
            return reason
    if event in NODE_EVENTS and not data.get("node_id"):
        return f"{event} without a node_id"
    if "cost_usd" in data:
        cost = data["cost_usd"]
        if not isinstance(cost, int | float) or isinstance(cost, bool) or not math.isfinite(cost) or cost < 0:
            return f"'cost_usd' must be a non-negative number, got {shown(cost)}"
        if cost > MAX_COST_USD:
            return f"'cost_usd' {shown(cost)} is beyond any one invocation (max {MAX_COST_USD})"
    if "cost_unknown" in data and not isinstance(data["cost_unknown"], bool):
        return f"'cost_unknown' must be a boolean, got {shown(data['cost_unknown'])}"
    for name in ("retries", "round"):
        if name in data and (not _is_int(data[name]) or not 0 <= data[name] <= MAX_COUNTER):
            return f"'{name}' must be a non-negative integer (max {MAX_COUNTER}), got {shown(data[name])}"
    if "usage" in data:
        usage = data["usage"]
        if not isinstance(usage, dict):
            return f"'usage' must be an object, got {shown(usage)}"
        for name in TOKEN_FIELDS:
            if name in usage and (not _is_int(usage[name]) or not 0 <= usage[name] <= MAX_TOKENS):
                return f"'usage.{name}' must be a non-negative integer (max {MAX_TOKENS}), got {shown(usage[name])}"
    return None


def foreign_run_id(data: dict, run_id: str) -> str | None:
    """Why a line naming another run than its directory is refused, or None.

    Indexing it under this directory would bill another run's work here (and twice,
    when that run's own directory is indexed too).
    """
    named = data.get("run_id")
    if named is None or named == run_id:
        return None
    return (f"the line names run_id {shown(named)}, not this directory's {run_id!r}: another run's "
            f"line, not indexed here")


def refuse_other_runs(chunk: StreamChunk, run_id: str) -> list[LineProblem]:
    """Take the events of ``chunk`` that name another run out of it, as problems."""
    kept: list[Event] = []
    refused: list[LineProblem] = []
    for event in chunk.events:
        reason = foreign_run_id(event.data, run_id)
        if reason is None:
            kept.append(event)
        else:
            refused.append(LineProblem(event.byte_offset, reason))
    chunk.events = kept
    return refused


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count_keys(value: dict) -> int:
    """Keys in an event object. Fast path for the engine's shape: scalars and one level
    of objects (usage); anything deeper takes the general walk."""
    total = len(value)
    for item in value.values():
        kind = type(item)
        if kind is dict:
            total += len(item)
            for inner in item.values():
                if type(inner) in (dict, list):
                    return _count_keys_deep(value)
        elif kind is list:
            return _count_keys_deep(value)
    return total


def _count_keys_deep(value: object) -> int:
    # Iterative: a hostile line may nest ~1000 deep (orjson's limit is above Python's
    # recursion limit), and that must be a problem report, not a RecursionError.
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            total += len(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return total


def duplicate_key(line: bytes, data: dict) -> str | object | None:
    """Find a key repeated within one object (JSON parsers silently keep the last).

    Cheap pre-check: a line whose `"<ws>:` count equals the parsed key count cannot
    hold a duplicate; only the rare mismatch (a detail containing '":', or a real
    duplicate) pays for the slow exact check.
    """
    if len(_KEY_PATTERN.findall(line)) == _count_keys(data):
        return None
    found: list[str] = []

    def hook(pairs: list[tuple[str, object]]) -> dict:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(pairs)

    try:
        json.loads(line, object_pairs_hook=hook)
    except ValueError:
        return None
    except RecursionError:
        # Too deep for the exact check: refuse rather than risk a silently kept duplicate.
        return TOO_DEEP
    return found[0] if found else None
