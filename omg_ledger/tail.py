"""The one tail: new complete lines of an append-only file since its checkpoint.

Every stream kind (a run's ``events.jsonl``, a runner's invocation stream) is read
here, with one checkpoint shape (the ``streams`` table) and one set of rules:

* **Resume** only where the file is provably the one read before: same device and
  inode, not shorter than the stored offset, the same first bytes (head) and the same
  bytes just before the stored offset (tail; a file truncated in place and regrown
  past the offset has another line there), and not changed at its old size (an
  append changes the size: a new mtime or ctime at the same size is an in-place
  rewrite). Anything else is read from zero and its rows replaced, never duplicated.
* **Change check** by identity: device, inode, size, mtime and ctime (which no user
  can set back, so an in-place rewrite with its mtime restored still shows).
* **A partial last line** is not a line yet: the offset stays before it.
* **A runaway line** (over MAX_LINE_BYTES) is skipped as a problem, once, and the
  scan position is remembered, so later reads cost what was appended, never the
  whole line again (unless the file is cut shorter than it: then the scanned bytes
  are gone, and reading goes on from the line's start).
* **A line of a newer schema** pauses reading before it; the checkpoint keeps the
  schema, and reading resumes by itself once the code understands it.

Read-only: files are opened ``O_RDONLY|O_NOFOLLOW|O_NONBLOCK`` after an ``lstat``
shows a regular file (a FIFO is never opened: that would release a writer blocked in
``open()``). Nothing here touches the database.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar, NamedTuple

from .bounds import MAX_ID_CHARS
from .errors import BadArgument, out_of_resources, require_utf8

MAX_LINE_BYTES = 1 << 20  # the engine's own per-line cap
READ_CHUNK = 1 << 20
HEAD_BYTES = 1024  # fingerprinted head: a replaced file is noticed even at equal size
TAIL_BYTES = 1024  # fingerprinted bytes before the stored offset
RUNAWAY_REASON = f"line longer than {MAX_LINE_BYTES} bytes; skipped"


class NotARegularFile(OSError):
    pass


ENV_MACHINE = "OMG_LEDGER_MACHINE"


def machine_named() -> str | None:
    """The name ``OMG_LEDGER_MACHINE`` gives this machine, for one whose machine id and
    hostname are not its own for good (a container made anew for every job)."""
    name = os.environ.get(ENV_MACHINE, "").strip()
    if not name:
        return None
    require_utf8(name, ENV_MACHINE)
    if len(name) > MAX_ID_CHARS:
        raise BadArgument(f"{ENV_MACHINE} is at most {MAX_ID_CHARS} characters; this one has {len(name)}")
    return name


@functools.cache
def machine_source() -> str:
    """The source of a stream read on this machine: the name ``OMG_LEDGER_MACHINE``
    gives it, else its machine id where the system has one (stable across hostname
    changes and container restarts that keep it), else the hostname."""
    named = machine_named()
    if named is not None:
        return f"named:{named}"
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path, encoding="ascii") as f:
                value = f.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if value:
            return f"machine:{value}"
    import socket

    return f"host:{socket.gethostname()}"


@dataclass(frozen=True)
class Checkpoint:
    """What the ledger remembers about one stream file (a row of ``streams``)."""

    dev: int | None = None
    inode: int | None = None
    size: int | None = None
    mtime_ns: int | None = None
    ctime_ns: int | None = None
    end_offset: int = 0
    next_line: int = 1
    head_len: int = 0
    head_sha256: str | None = None
    tail_len: int = 0
    tail_sha256: str | None = None
    scan_offset: int | None = None
    scan_line: int | None = None
    paused_schema: int | None = None
    paused_reason: str | None = None

    COLUMNS: ClassVar[tuple[str, ...]] = ()  # set below, from the fields

    @classmethod
    def from_row(cls, row: dict) -> Checkpoint:
        return cls(**{name: row[name] for name in cls.COLUMNS})

    def as_row(self) -> dict:
        return {name: getattr(self, name) for name in self.COLUMNS}

    def without_file(self) -> Checkpoint:
        """The file is absent: keep the resume point (what was read stays), forget the identity."""
        return replace(self, dev=None, inode=None, size=None, mtime_ns=None, ctime_ns=None)


# The `streams` columns a checkpoint fills, in field order (positional loads rely on it).
Checkpoint.COLUMNS = tuple(f.name for f in fields(Checkpoint))


def identity(info: os.stat_result | None) -> tuple:
    if info is None:
        return (None, None, None, None, None)
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def needs_reading(info: os.stat_result | None, checkpoint: Checkpoint | None,
                  supported_schema: int | None = None) -> bool:
    """Whether the file may hold something the checkpoint has not seen."""
    if checkpoint is None:
        return True
    stored = (checkpoint.dev, checkpoint.inode, checkpoint.size, checkpoint.mtime_ns, checkpoint.ctime_ns)
    return _unseen(info, stored, checkpoint.paused_schema, supported_schema)


_PAUSED_SCHEMA = Checkpoint.COLUMNS.index("paused_schema")


def row_needs_reading(info: os.stat_result | None, row: tuple, supported_schema: int | None = None) -> bool:
    """needs_reading of a checkpoint given as its `streams` row, in COLUMNS order (whose
    first five are the file's identity): the change check compares every run's row
    without building a Checkpoint."""
    return _unseen(info, row[:5], row[_PAUSED_SCHEMA], supported_schema)


def _unseen(info: os.stat_result | None, stored: tuple, paused_schema: int | None,
            supported_schema: int | None) -> bool:
    if paused_schema is not None and supported_schema is not None and paused_schema <= supported_schema:
        return True  # this code understands what paused an older one
    return identity(info) != stored


def open_regular(path: str, dir_fd: int | None = None) -> int:
    """Open read-only a regular file, refusing symlinks and never opening a FIFO; with
    ``dir_fd``, ``path``'s last component in that open directory."""
    name = path if dir_fd is None else os.path.basename(path)
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(info.st_mode):
        raise NotARegularFile(f"{path} is not a regular file")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between lstat and open
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    return fd


class Resume(NamedTuple):
    """Where to read an open file from, and the bytes before that point as verified."""

    offset: int
    line: int
    replace: bool  # the file is not the one read before: read from zero, rows rebuilt
    head: bytes = b""  # the file's first bytes, up to the resume point (HEAD_BYTES at most)
    lead: bytes = b""  # the bytes just before the resume point (TAIL_BYTES at most)


def where_to_resume(fd: int, info: os.stat_result, stored: Checkpoint | None) -> Resume:
    """Where to read an open file again: after what ``stored`` read if the file provably
    still holds it, else from zero."""
    if stored is None or (stored.head_sha256 is None and not stored.end_offset):
        return Resume(0, 1, False)
    rewritten = info.st_size == stored.size and (info.st_mtime_ns, info.st_ctime_ns) != (
        stored.mtime_ns, stored.ctime_ns)  # an append changes the size; this was written in place
    if (info.st_dev, info.st_ino) == (stored.dev, stored.inode) and not rewritten:
        verified = _read_as_before(fd, info.st_size, stored)
        if verified is not None:
            return Resume(stored.end_offset, stored.next_line, False, *verified)
    return Resume(0, 1, True)


def _read_as_before(fd: int, size: int, stored: Checkpoint) -> tuple[bytes, bytes] | None:
    """The open file's head and the bytes before its resume point, if they are still the
    bytes ``stored`` read (by their fingerprints, and the file at least that long)."""
    if stored.head_sha256 is None or size < stored.end_offset:
        return None
    head = os.pread(fd, stored.head_len, 0)
    if hashlib.sha256(head).hexdigest() != stored.head_sha256:
        return None
    lead = os.pread(fd, stored.tail_len, stored.end_offset - stored.tail_len)
    if stored.tail_sha256 is not None and hashlib.sha256(lead).hexdigest() != stored.tail_sha256:
        return None
    return head, lead


def holds_what_was_read(path: str, stored: Checkpoint) -> bool:
    """Whether the file at ``path`` still begins with the bytes ``stored`` read (its head and
    the bytes before its resume point fingerprinted alike, and at least that long), whatever
    its name, ctime or mtime now: the same stream, moved or appended to."""
    try:
        fd = open_regular(path)
    except OSError as exc:
        if out_of_resources(exc):
            raise  # (not knowing is not "another file": its lines would be stored twice)
        return False
    try:
        return _read_as_before(fd, os.fstat(fd).st_size, stored) is not None
    finally:
        os.close(fd)


class CompleteLines:
    """The complete lines of a file from a byte offset, in order, never buffering more
    than one runaway line's worth.

    Yields ``(line_no, offset, end, line)``: ``end`` is the offset after the newline and
    ``line`` the bytes without it (and without a CRLF's ``\\r``), or None for a line
    longer than MAX_LINE_BYTES. Bytes after the last newline are a partial line: never
    yielded. When the file ends inside a runaway line, ``runaway_at`` is where that line
    began and ``scanned_to`` where the scan stopped, so a later read can go on from there.

    ``fingerprints`` gives the head and the bytes before a line's end as they were read,
    not as the file holds them by then: a file rewritten while it is read then shows as
    changed to the next reader, which reads it again from zero. ``head`` and ``lead`` are
    the bytes before ``start_offset`` as verified by the caller (see Resume).
    """

    def __init__(self, fd: int, start_offset: int, start_line: int, runaway_at: int | None = None,
                 scan_from: int | None = None, head: bytes = b"", lead: bytes = b"") -> None:
        self.fd, self.start_offset, self.start_line = fd, start_offset, start_line
        self.bytes_read = 0
        self.runaway_at = runaway_at
        self.scan_from = scan_from
        self.scanned_to: int | None = None
        self._head, self._before = head, lead
        # The bytes of the file as read: ``_held`` from offset ``_held_at`` (the current
        # chunk with the bytes before it), enough for the fingerprint of any line's end.
        self._lead, self._held, self._held_at = lead, b"", start_offset

    def __iter__(self) -> Iterator[tuple[int, int, int, bytes | None]]:
        line_no = self.start_line
        runaway_at = self.runaway_at
        # Resuming inside a runaway line: its bytes up to scan_from are known to hold no newline.
        position = self.scan_from if runaway_at is not None and self.scan_from is not None else self.start_offset
        buffer = b""
        if position != self.start_offset:
            self._lead = b""  # resumed past a runaway line's known bytes: held from there (_before stays)
        while True:
            data = os.pread(self.fd, READ_CHUNK, position + len(buffer))
            if not data:
                self.runaway_at = runaway_at
                self.scanned_to = position + len(buffer) if runaway_at is not None else None
                return
            self.bytes_read += len(data)
            chunk = buffer + data
            self._hold(chunk, position)
            # One C-level split per chunk, not a find and a slice per line; the piece
            # after the last newline is a partial line and stays in the buffer.
            lines = chunk.split(b"\n")
            buffer = lines.pop()
            for line in lines:
                end = position + len(line) + 1
                if runaway_at is not None:
                    yield line_no, runaway_at, end, None
                    runaway_at = None
                else:
                    if line[-1:] == b"\r":
                        line = line[:-1]  # CRLF: the JSON is the same
                    yield line_no, position, end, (line if len(line) <= MAX_LINE_BYTES else None)
                line_no += 1
                position = end
            # (A buffer ending in \r may be a line of exactly the cap whose \n is in the
            # next chunk: the same line is kept wherever the chunks happen to end.)
            if len(buffer) > MAX_LINE_BYTES + (buffer[-1:] == b"\r"):
                # A runaway line: remember where it began, drop what we hold, keep
                # scanning for its end without buffering it.
                if runaway_at is None:
                    runaway_at = position
                position += len(buffer)
                buffer = b""

    def _hold(self, chunk: bytes, at: int) -> None:
        held, held_at = self._held, self._held_at
        if held:
            used = at - held_at
            self._lead = (self._lead + held[max(0, used - TAIL_BYTES):used])[-TAIL_BYTES:]
        self._held, self._held_at = chunk, at
        head = self._head
        if len(head) < HEAD_BYTES and at <= len(head) <= at + len(chunk):
            self._head = head + chunk[len(head) - at:HEAD_BYTES - at]

    def _as_read(self, start: int, length: int) -> bytes:
        """The file's bytes [start, start + length) as this read saw them; bytes it no
        longer holds (inside a skipped runaway line) are read again."""
        head = self._head
        if start < len(head):
            # The head as read (or verified at open), and any bytes past it the read skipped.
            known = head[start:start + length]
            return known if len(known) == length else known + self._as_read(len(head), length - len(known))
        before, resumed_at = self._before, self.start_offset
        if resumed_at - len(before) <= start and start + length <= resumed_at:
            # Before the resume point, as verified at open: the only bytes of a runaway
            # line's resume that no chunk holds.
            return before[len(before) - (resumed_at - start):][:length]
        at, lead, held = self._held_at, self._lead, self._held
        if at - len(lead) <= start and start + length <= at + len(held):
            both = lead[len(lead) - (at - start):] if start < at else b""
            return (both + held[max(0, start - at):max(0, start + length - at)])[:length]
        return os.pread(self.fd, length, start)

    def fingerprints(self, end_offset: int) -> tuple[int, str, int, str]:
        """(head_len, head_sha256, tail_len, tail_sha256) of what was read up to ``end_offset``."""
        head_len = min(HEAD_BYTES, end_offset)
        tail_len = min(TAIL_BYTES, end_offset)
        return (head_len, hashlib.sha256(self._as_read(0, head_len)).hexdigest(),
                tail_len, hashlib.sha256(self._as_read(end_offset - tail_len, tail_len)).hexdigest())


@dataclass(frozen=True)
class Rejected:
    """A complete line that is bad input: skipped, recorded as a problem."""

    reason: str


@dataclass(frozen=True)
class Paused:
    """A line this code cannot read yet (a newer schema): reading stops before it."""

    schema: int
    reason: str


_NOT_ITEMS = (Rejected, Paused)
ParseLine = Callable[[bytes, int, int], object]  # (line, line_no, offset) -> item | Rejected | Paused


@dataclass
class TailRead:
    items: list = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (byte offset, reason)
    replace: bool = False  # the file is not the one read before: its rows are rebuilt
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    bytes_read: int = 0


class TailReader:
    """What was appended to a file since its checkpoint, read lazily: iterating yields
    the parsed items one by one (nothing is held but the current line), and once the
    iteration has ended ``problems``, ``checkpoint`` and ``bytes_read`` are filled in.
    ``replace`` is known at once (from the resume check).

    Opening raises FileNotFoundError when there is no file, NotARegularFile or OSError
    when it cannot be read. The file stays open until the iteration ends or ``close``.
    """

    def __init__(self, path: str, checkpoint: Checkpoint | None, parse: ParseLine,
                 dir_fd: int | None = None) -> None:
        self.fd: int | None = None
        self.fd = open_regular(path, dir_fd)
        try:
            self.info = os.fstat(self.fd)
            self.resume = where_to_resume(self.fd, self.info, checkpoint)
        except BaseException:
            self.close()
            raise
        self.stored = checkpoint
        self.parse = parse
        self.problems: list[tuple[int, str]] = []
        self.checkpoint: Checkpoint | None = None  # set when the iteration has ended
        self.bytes_read = 0
        self._started = False

    @property
    def start(self) -> int:
        return self.resume.offset

    @property
    def start_line(self) -> int:
        return self.resume.line

    @property
    def replace(self) -> bool:
        return self.resume.replace

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:  # a reader dropped unread (an error in between) still closes its file
        self.close()

    def __iter__(self) -> Iterator:
        if self._started:
            raise RuntimeError("a tail is read once")
        self._started = True
        try:
            yield from self._read()
        finally:
            self.close()

    def _read(self) -> Iterator:
        fd, info, checkpoint, start, line_no = self.fd, self.info, self.stored, self.start, self.start_line
        # A file now shorter than the scan point was cut inside the runaway line: the bytes
        # known to hold no newline are gone, and what follows its start is read as lines.
        resuming_runaway = not self.replace and checkpoint is not None and checkpoint.scan_offset is not None \
            and start == checkpoint.end_offset and info.st_size >= checkpoint.scan_offset
        lines = CompleteLines(fd, start, line_no,
                              runaway_at=start if resuming_runaway else None,
                              scan_from=checkpoint.scan_offset if resuming_runaway else None,
                              head=self.resume.head, lead=self.resume.lead)
        problems = self.problems
        end_offset, next_line = start, line_no
        paused: Paused | None = None
        parse = self.parse
        for number, offset, end, line in lines:
            if line is None:
                if not resuming_runaway or offset != start:
                    problems.append((offset, RUNAWAY_REASON))
                resuming_runaway = False
            elif line and not line.isspace():  # blank is no line (isspace: the bytes strip() drops)
                item = parse(line, number, offset)
                if not isinstance(item, _NOT_ITEMS):
                    yield item
                elif isinstance(item, Paused):
                    paused = item
                    problems.append((offset, item.reason))
                    break
                else:
                    problems.append((offset, item.reason))
            end_offset, next_line = end, number + 1
        scan_offset = scan_line = None
        if paused is None and lines.runaway_at is not None:
            if not resuming_runaway:  # first seen without its end: recorded once
                problems.append((lines.runaway_at, RUNAWAY_REASON))
            scan_offset, scan_line = lines.scanned_to, next_line
        head_len, head_sha256, tail_len, tail_sha256 = lines.fingerprints(end_offset)
        self.checkpoint = Checkpoint(
            dev=info.st_dev, inode=info.st_ino, size=info.st_size, mtime_ns=info.st_mtime_ns,
            ctime_ns=info.st_ctime_ns, end_offset=end_offset, next_line=next_line,
            head_len=head_len, head_sha256=head_sha256, tail_len=tail_len, tail_sha256=tail_sha256,
            scan_offset=scan_offset, scan_line=scan_line,
            paused_schema=paused.schema if paused else None, paused_reason=paused.reason if paused else None)
        self.bytes_read = lines.bytes_read


def read_new_lines(path: str, checkpoint: Checkpoint | None, parse: ParseLine, dir_fd: int | None = None) -> TailRead:
    """Read what was appended to ``path`` since ``checkpoint``, every item in one list
    (a runner stream's lines are small; a run stream is read lazily, TailReader).

    Raises FileNotFoundError when there is no file, NotARegularFile or OSError when it
    cannot be read (the caller records that as a problem and keeps the checkpoint).
    """
    reader = TailReader(path, checkpoint, parse, dir_fd)
    items = list(reader)
    assert reader.checkpoint is not None
    return TailRead(items, reader.problems, reader.replace, reader.checkpoint, reader.bytes_read)
