"""Walk an oh-my-graph home: run and plan directories and the facts of each.

Read-only: scandir and stat only. Symlinks are never followed (a run directory or file
that is a symlink is reported, not read), so nothing outside the home is reached and
a link loop cannot hang the walk.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass

RACY_WINDOW_NS = 2_000_000_000  # a directory changed this recently may change again unseen
# The contract's JSON files. One that exists but is no regular file (a FIFO, a
# directory, a socket) is damage to report, never the file's absence.
CONTRACT_FILES = frozenset({"state.json", "assess.json", "rejected.json", "graph.json"})


@dataclass(frozen=True)
class RunDirEntry:
    run_id: str
    path: str


@dataclass(frozen=True)
class SkippedEntry:
    path: str
    reason: str


@dataclass(frozen=True)
class DirListing:
    """What a run directory holds, from one scandir (plus one of failed/)."""

    names: frozenset[str]  # regular files directly in the directory
    artifacts: frozenset[str]  # '*.out' regular files directly in the directory
    failed_outputs: frozenset[str]  # '*.out' regular files under failed/
    symlinks: frozenset[str]
    damage: tuple[SkippedEntry, ...] = ()  # contract files that are not regular files; an unlistable failed/


def is_utf8(name: str) -> bool:
    """False for a file name that is not valid UTF-8 (Python holds its bytes as
    surrogate escapes, which no database text column accepts)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_path(path: str) -> str:
    """``path`` with undecodable bytes shown as \\xNN, safe to store and print."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def list_entries(parent: str) -> tuple[list[RunDirEntry], list[SkippedEntry]]:
    """Subdirectories of ``parent`` (runs/ or plans/), sorted by name."""
    entries: list[RunDirEntry] = []
    skipped: list[SkippedEntry] = []
    try:
        with os.scandir(parent) as it:
            items = list(it)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [SkippedEntry(parent, f"cannot list directory: {exc.strerror or exc}")]
    for item in sorted(items, key=lambda e: e.name):
        if not is_utf8(item.name):
            skipped.append(SkippedEntry(printable_path(item.path), "name is not valid UTF-8; skipped"))
        elif item.is_symlink():
            skipped.append(SkippedEntry(item.path, "symlink not followed (omg-ledger never leaves the home)"))
        elif item.is_dir(follow_symlinks=False):
            entries.append(RunDirEntry(item.name, item.path))
    return entries, skipped


def stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def trusted_mtime(info: os.stat_result | None, now_ns: int | None = None) -> int | None:
    """A directory mtime we may compare next time, or None when it is too recent to trust.

    File timestamps are coarse (a kernel tick): an entry created in the same tick as our
    scan would leave the mtime unchanged and go unseen. Like git's "racy" index entries,
    a recent mtime is not remembered, so the next sync rescans.
    """
    if info is None:
        return None
    now_ns = time.time_ns() if now_ns is None else now_ns
    if now_ns - info.st_mtime_ns < RACY_WINDOW_NS:
        return None
    return info.st_mtime_ns


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def list_run_dir(path: str) -> DirListing:
    names: set[str] = set()
    artifacts: set[str] = set()
    links: set[str] = set()
    damage: list[SkippedEntry] = []
    with os.scandir(path) as it:
        for item in it:
            if item.is_symlink():
                links.add(printable_path(item.name))
            elif not is_utf8(item.name):
                continue  # cannot be any file of the contract (their names are ASCII)
            elif item.is_file(follow_symlinks=False):
                names.add(item.name)
                if item.name.endswith(".out"):
                    artifacts.add(item.name)
            elif item.name in CONTRACT_FILES:
                try:
                    kind = _kind(item.stat(follow_symlinks=False).st_mode)
                except OSError as exc:
                    kind = f"unreadable ({exc.strerror or exc})"
                damage.append(SkippedEntry(item.path, f"{item.name} is {kind}, not a regular file: not read"))
    failed: set[str] = set()
    try:
        with os.scandir(os.path.join(path, "failed")) as it:
            for item in it:
                if item.name.endswith(".out") and item.is_file(follow_symlinks=False):
                    failed.add(item.name)
    except FileNotFoundError:
        pass  # no failed replies: the common case
    except OSError as exc:
        # Unreadable is not empty: which nodes left a failed reply is unknown.
        damage.append(SkippedEntry(os.path.join(path, "failed"),
                                   f"cannot list failed/: {exc.strerror or exc}; its replies are not known"))
    return DirListing(frozenset(names), frozenset(artifacts), frozenset(failed), frozenset(links),
                      tuple(sorted(damage, key=lambda d: d.path)))
