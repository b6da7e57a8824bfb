"""Ingest: the only code that reads homes and runner streams.

It reads what changed since the ledger's memory of it and hands back facts —
new stream lines (through the one tail, tail.py), the bytes of changed JSON files,
the directory's facts — for the store to keep. It never touches the database;
what the ledger remembers comes in as arguments.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import feed
from .bounds import shown
from .discover import DirListing, list_run_dir, open_directory, stat_or_none
from .errors import out_of_resources
from .feed import parse_stream_line
from .snapshot import (
    PARSERS,
    SNAPSHOT_NAMES,
    BadSnapshot,
    UnreadableFile,
    read_small_file,
    snapshot_names_another_run,
)
from .tail import (
    Checkpoint,
    NotARegularFile,
    TailRead,
    TailReader,
    read_new_lines,
    row_needs_reading,
)

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
        # ``byte_offset`` as ``problems --json`` names it; ``offset`` stays for scripts reading it.
        return {"path": self.path, "offset": self.offset, "byte_offset": self.offset, "reason": self.reason}


def file_identity(info: os.stat_result | None) -> tuple | None:
    """A JSON file's identity as the ledger remembers it (snapshot_files' columns). The
    ctime is in it as in a stream's: a same-size rewrite in place with the mtime set back
    (`cp -p`, a restore keeping times) changes nothing else."""
    if info is None:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def stored_identity(row: dict) -> tuple:
    return (row["dev"], row["inode"], row["size"], row["mtime_ns"], row["ctime_ns"])


@dataclass
class StreamRead:
    """A stream as ingest found it: new lines, or why it could not be read.

    With a lazy tail (a run stream: TailReader) ``items`` is iterated once, and
    ``checkpoint``, ``problems`` and ``bytes_read`` are what that iteration found; with
    an eager one (TailRead) they are known at once.
    """

    tail: TailRead | TailReader | None  # None: nothing read (absent or unreadable)
    stored: Checkpoint  # what to remember when nothing was read
    failures: list[Problem] = field(default_factory=list)  # why it could not be opened
    path: str = ""

    @property
    def replace(self) -> bool:
        return self.tail is not None and self.tail.replace

    @property
    def items(self) -> Iterable:
        if self.tail is None:
            return []
        return self.tail if isinstance(self.tail, TailReader) else self.tail.items

    @property
    def checkpoint(self) -> Checkpoint:
        if self.tail is None:
            return self.stored
        if self.tail.checkpoint is None:
            raise RuntimeError("the stream's checkpoint is known once its lines have been read")
        return self.tail.checkpoint

    @property
    def problems(self) -> list[Problem]:
        found = [Problem(self.path, offset, reason) for offset, reason in self.tail.problems] if self.tail else []
        return self.failures + found

    @property
    def bytes_read(self) -> int:
        return self.tail.bytes_read if self.tail is not None else 0

    def close(self) -> None:
        if isinstance(self.tail, TailReader):
            self.tail.close()


def read_stream(path: str, checkpoint: Checkpoint | None, parse, label: str, lazy: bool = False,
                dir_fd: int | None = None) -> StreamRead | None:
    """New lines of one stream. None when the file does not exist (a fact, not damage:
    a run that said nothing yet, a runner that has not appended yet). ``lazy``: the
    lines are read while ``items`` is iterated (the file stays open until then)."""
    stored = checkpoint or Checkpoint()
    # A file that cannot be opened is remembered as an absent one is: what was read stays,
    # its identity is forgotten, so once it opens it is read from its first byte and every
    # problem of it (this one too) is looked at again.
    unopened = stored.without_file()
    try:
        tail = TailReader(path, checkpoint, parse, dir_fd) if lazy else read_new_lines(path, checkpoint, parse, dir_fd)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        return StreamRead(None, unopened, [Problem(path, 0, f"{label}: {exc}")], path)
    except OSError as exc:
        if out_of_resources(exc):
            raise
        reason = ("is a symlink (not followed; give the real path)" if exc.errno == errno.ELOOP
                  else f"cannot open: {exc.strerror or exc}")
        return StreamRead(None, unopened, [Problem(path, 0, f"{label}: {reason}")], path)
    return StreamRead(tail, stored, [], path)


def read_run_stream(path: str, checkpoint: Checkpoint | None, run_id: str | None = None,
                    lazy: bool = False, dir_fd: int | None = None) -> StreamRead | None:
    """A run's stream; with ``run_id``, a line naming another run is refused as a problem.
    ``lazy``: read while iterated (a stream may be gigabytes: it is never held whole)."""
    def parse(line: bytes, line_no: int, offset: int) -> object:
        # (A closure: a partial with a keyword builds a dict on every line.)
        return parse_stream_line(line, line_no, offset, run_id)

    return read_stream(path, checkpoint, parse, "events.jsonl", lazy, dir_fd)


def read_invocation_stream(path: str, checkpoint: Checkpoint | None) -> StreamRead | None:
    # (Imported here: it loads derivation, which a run's change check never needs.)
    from .invocation_sync import parse_tail_line

    return read_stream(path, checkpoint, parse_tail_line, "invocation stream")


def run_stream_row_needs_reading(info: os.stat_result | None, checkpoint_row: tuple) -> bool:
    """Whether a run's stream may hold lines its checkpoint (its `streams` row) has not
    seen, or lines of a schema an older omg-ledger paused at and this one reads."""
    return row_needs_reading(info, checkpoint_row, feed.SUPPORTED_SCHEMA)  # read now: an upgrade raises it


@dataclass
class SnapshotRead:
    """One small JSON file read now: the row to store and its parsed document."""

    row: dict
    parsed: dict | None


def read_snapshot_file(path: str, name: str, info: os.stat_result,
                       dir_fd: int | None = None) -> tuple[SnapshotRead, Problem | None]:
    try:
        small = read_small_file(path, dir_fd)
    except UnreadableFile as exc:
        # Its identity is remembered, so an unchanged unreadable file is not re-reported.
        row = {"dev": info.st_dev, "inode": info.st_ino, "size": info.st_size, "mtime_ns": info.st_mtime_ns,
               "ctime_ns": info.st_ctime_ns, "sha256": None, "content": None, "error": str(exc)}
        return SnapshotRead(row, None), Problem(path, 0, f"{name}: {exc}")
    problem = None
    parsed = None
    error = None
    # The text derivation parses again: a byte that is not UTF-8 is U+FFFD, as state.json's
    # parser reads it (the other files holding one are refused, their text never parsed).
    text = feed.as_go_decodes(small.content)
    try:
        parsed = PARSERS[name](small.content)
    except BadSnapshot as exc:
        error = str(exc)
        problem = Problem(path, 0, error)
    if name == "state.json" and parsed is not None:
        problem = _snapshot_of_another_run(path, parsed) or problem
    ident = small.identity
    row = {"dev": ident.dev, "inode": ident.inode, "size": ident.size, "mtime_ns": ident.mtime_ns,
           "ctime_ns": ident.ctime_ns, "sha256": small.sha256, "content": text, "error": error}
    return SnapshotRead(row, parsed), problem


def _snapshot_of_another_run(path: str, parsed: dict) -> Problem | None:
    """The problem of a state.json naming another run (derivation then ignores it)."""
    run_id = os.path.basename(os.path.dirname(path))
    if not snapshot_names_another_run(parsed, run_id):
        return None
    return Problem(path, 0, f"state.json names run_id {shown(parsed['run_id'])}, not this directory's "
                            f"{run_id!r}: another run's snapshot, not used here (nor the assess.json beside it)")


@dataclass
class RunDirRead:
    """What ingest found in one run directory."""

    listing: DirListing
    stream: StreamRead | None  # None: no events.jsonl
    files: dict[str, SnapshotRead | None]  # changed files only; None = gone
    problems: list[Problem]
    stream_problems_at: int = 0  # where the stream's problems go in ``problems`` once it is read
    stream_finished: bool = False

    def finish_stream(self) -> None:
        """Take in the stream's problems, once its lines have been read (in file order:
        the directory's own, the stream's, then the JSON files'); again, nothing more."""
        if self.stream is not None and not self.stream_finished:
            self.problems[self.stream_problems_at:self.stream_problems_at] = self.stream.problems
        self.stream_finished = True

    def dir_facts(self, path: str) -> dict:
        names = self.listing.names
        return {
            "dir_path": path,
            "gone": False,
            "has_events": "events.jsonl" in names,
            "has_lock": "resume.lock" in names,
            **{column: name in names for name, column in HAS_COLUMN.items()},
        }

    def run_files(self) -> set[tuple[str, str]]:
        return {("", n) for n in self.listing.artifacts} | {("failed", n) for n in self.listing.failed_outputs}


def read_run_dir(path: str, checkpoint: Checkpoint | None, known_files: dict[str, dict],
                 file_infos: dict[str, os.stat_result | None], stream_changed: bool = True,
                 dir_fd: int | None = None) -> RunDirRead:
    """Read a run directory's new facts. Raises OSError when it cannot be listed (or is a
    symlink).

    Every file is opened through one descriptor of the directory (``dir_fd``, or one
    opened here): a directory swapped for a link to elsewhere while it is read is never
    followed, whatever the timing.

    The stream is read lazily: its lines are parsed while ``stream.items`` is iterated
    (the caller stores them as they come, then calls ``finish_stream``).

    ``known_files``: the stored identity of each JSON file; a file whose identity is
    unchanged is not read again. ``file_infos``: stat results already taken.
    ``stream_changed`` False: the stream's identity is what the checkpoint holds, so it
    is not read (a paused stream is not re-read line by line to find the same pause).
    """
    if dir_fd is None:
        fd = open_directory(path)
        try:
            return read_run_dir(path, checkpoint, known_files, file_infos, stream_changed, fd)
        finally:
            os.close(fd)
    listing = list_run_dir(path, dir_fd)
    problems = [Problem(os.path.join(path, name), 0, "symlink not followed (omg-ledger never leaves the home)")
                for name in sorted(listing.symlinks)]
    problems.extend(Problem(item.path, 0, item.reason) for item in listing.damage)
    if stream_changed or checkpoint is None:
        stream = read_run_stream(f"{path}/events.jsonl", checkpoint, os.path.basename(path), lazy=True, dir_fd=dir_fd)
    else:
        stream = StreamRead(None, checkpoint)
    stream_problems_at = len(problems)
    files: dict[str, SnapshotRead | None] = {}
    for name in SNAPSHOT_NAMES:
        previous = known_files.get(name)
        file_path = os.path.join(path, name)
        # Not in the listing: not stat-ed (absent whatever a stat would say).
        info = ((file_infos[name] if name in file_infos else stat_or_none(file_path, dir_fd))
                if name in listing.names else None)
        if info is None:
            if previous is not None:
                files[name] = None
            continue
        if previous is not None and file_identity(info) == stored_identity(previous):
            continue
        read, problem = read_snapshot_file(file_path, name, info, dir_fd)
        files[name] = read
        if problem is not None:
            problems.append(problem)
    return RunDirRead(listing, stream, files, problems, stream_problems_at)

