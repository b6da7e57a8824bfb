"""Walk an oh-my-graph home: run and plan directories and the facts of each.

Read-only: scandir and stat only. Symlinks are never followed (a run directory or file
that is a symlink is reported, not read), so nothing outside the home is reached and
a link loop cannot hang the walk.

One link is legitimate: ``<home>/runs`` (or ``plans``) itself may be a symlink, say to
a bigger disk. It is resolved once; the entries are then listed and read under the
resolved directory, so nothing outside that tree is read, and since such a link may
lead anywhere (``runs -> /etc``), only entries shaped like the engine's ids count there
— any other directory is skipped as a problem.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass

from .errors import out_of_resources
from .files import file_kind
from .tail import machine_source

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
class HomeDirListing:
    """The entries of runs/ or plans/, and where they really are."""

    entries: list[RunDirEntry]
    skipped: list[SkippedEntry]
    resolved: str | None  # the directory a symlinked runs/ or plans/ leads to; None when not a link


# The engine's run and plan ids: UTC date-time, nanoseconds (trailing zeros may be
# trimmed), a counter, e.g. 20261129-181518.678721711-1.
ENGINE_ID = re.compile(r"[0-9]{8}-[0-9]{6}(?:\.[0-9]{1,9})?-[0-9]{1,6}")
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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


def list_home_dir(parent: str) -> HomeDirListing:
    """Subdirectories of ``parent`` (runs/ or plans/), sorted by name. A ``parent`` that
    is a symlink is listed where it leads (``resolved``), and only engine-id-shaped
    entries count there. A ``parent`` that cannot be listed (a dangling link: an
    unmounted disk, say) is one skipped entry with ``parent`` as its path: damage, not
    every run vanishing. A missing ``parent`` is simply empty."""
    try:
        info = os.lstat(parent)
    except FileNotFoundError:
        return HomeDirListing([], [], None)
    except OSError as exc:
        if out_of_resources(exc):
            raise
        return HomeDirListing([], [SkippedEntry(parent, f"cannot list directory: {exc.strerror or exc}")], None)
    resolved = None
    where = parent
    if stat.S_ISLNK(info.st_mode):
        resolved = where = os.path.realpath(parent)
        if not is_utf8(resolved):  # every run path under it would be one no text column takes
            return HomeDirListing([], [SkippedEntry(parent, f"cannot list directory: it is a symlink to "
                                                            f"{printable_path(resolved)}, a path that is not "
                                                            f"valid UTF-8")], None)
    try:
        # Listed through a descriptor opened O_NOFOLLOW: what realpath resolved cannot
        # be swapped for a link before it is read.
        items = sorted(_scan_directory(where))
    except OSError as exc:
        if out_of_resources(exc):
            raise
        why = exc.strerror or str(exc)
        if resolved is not None:
            why = f"it is a symlink to {resolved}: {why}"
        return HomeDirListing([], [SkippedEntry(parent, f"cannot list directory: {why}")], resolved)
    entries: list[RunDirEntry] = []
    skipped: list[SkippedEntry] = []
    for name, kind in items:
        path = os.path.join(where, name)
        if not is_utf8(name):
            skipped.append(SkippedEntry(printable_path(path), "name is not valid UTF-8; skipped"))
        elif kind == "link":
            skipped.append(SkippedEntry(path, "symlink not followed (omg-ledger never leaves the home)"))
        elif kind == "dir":
            if resolved is not None and not ENGINE_ID.fullmatch(name):
                skipped.append(SkippedEntry(path, f"not an oh-my-graph run or plan id, in {parent}, a symlink to "
                                                  f"{resolved}; skipped"))
            else:
                entries.append(RunDirEntry(name, path))
    return HomeDirListing(entries, skipped, resolved)


def stat_or_none(path: str, dir_fd: int | None = None) -> os.stat_result | None:
    """lstat of ``path``; with ``dir_fd``, of its last component in that open directory."""
    try:
        if dir_fd is not None:
            return os.stat(os.path.basename(path), dir_fd=dir_fd, follow_symlinks=False)
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def open_directory(path: str) -> int:
    """A descriptor of the directory ``path``, refused (ELOOP) when ``path`` is a symlink.
    What is then read through it is that directory's, whatever its path names later: a
    run directory swapped for a link while it is read is never followed."""
    return os.open(path, DIRECTORY_FLAGS)


def trusted_mtime(info: os.stat_result | None, now_ns: int | None = None) -> int | None:
    """A directory mtime we may compare next time, or None when it is too recent to trust.

    File timestamps are coarse (a kernel tick): an entry created in the same tick as our
    scan would leave the mtime unchanged and go unseen. Like git's "racy" index entries,
    a recent mtime is not remembered, so the next sync rescans.

    An mtime well in the future (`touch -d`, `rsync -t` from a machine whose clock is
    ahead) is trusted once the ctime, which the file system stamps on every change, is
    outside the window too: old, or itself well in the future (written while this
    machine's clock was ahead, before it stepped back). No change can happen in that tick
    until the clock reaches it. Otherwise the run would be listed again by every sync,
    and the no-op sync would step aside each time.
    """
    if info is None:
        return None
    now_ns = time.time_ns() if now_ns is None else now_ns
    if now_ns - info.st_mtime_ns >= RACY_WINDOW_NS:
        return info.st_mtime_ns
    if info.st_mtime_ns - now_ns >= RACY_WINDOW_NS and abs(now_ns - info.st_ctime_ns) >= RACY_WINDOW_NS:
        return info.st_mtime_ns
    return None


def _scan_directory(path: str, dir_fd: int | None = None) -> list[tuple[str, str]]:
    """(name, kind) of every entry of ``path`` (with ``dir_fd``: relative to that open
    directory), kind one of "link", "dir", "file", "other". A ``path`` that is itself a
    symlink is refused (ELOOP), so a directory swapped for a link after it was listed is
    never read."""
    fd = os.open(path, DIRECTORY_FLAGS, dir_fd=dir_fd)
    try:
        return _scan_open_directory(fd)
    finally:
        os.close(fd)


def _scan_open_directory(fd: int) -> list[tuple[str, str]]:
    with os.scandir(fd) as it:
        # Classified while the descriptor is open: where the file system gives no
        # entry type, DirEntry stats relative to it.
        return [(item.name, "link" if item.is_symlink() else "dir" if item.is_dir(follow_symlinks=False)
                 else "file" if item.is_file(follow_symlinks=False) else "other") for item in it]


def list_run_dir(path: str, dir_fd: int | None = None) -> DirListing:
    """What the run directory ``path`` holds; with ``dir_fd``, read through that open
    descriptor of it (``path`` names it in problems)."""
    if dir_fd is None:
        fd = open_directory(path)
        try:
            return list_run_dir(path, fd)
        finally:
            os.close(fd)
    names: set[str] = set()
    artifacts: set[str] = set()
    links: set[str] = set()
    damage: list[SkippedEntry] = []
    for name, kind in _scan_open_directory(dir_fd):
        if kind == "file":
            if name.isascii() or is_utf8(name):  # isascii first: nearly every entry
                names.add(name)
                if name.endswith(".out"):
                    artifacts.add(name)
        elif kind == "link":
            links.add(printable_path(name))
        elif name in CONTRACT_FILES:  # (ASCII names: one not UTF-8 is none of them)
            entry = os.path.join(path, name)
            try:
                what = file_kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError as exc:
                if out_of_resources(exc):
                    raise
                what = f"unreadable ({exc.strerror or exc})"
            damage.append(SkippedEntry(entry, f"{name} is {what}, not a regular file: not read"))
    failed: set[str] = set()
    try:
        for name, kind in _scan_directory("failed", dir_fd):
            if name.endswith(".out") and kind == "file" and (name.isascii() or is_utf8(name)):
                failed.add(name)
    except FileNotFoundError:
        pass  # no failed replies: the common case
    except OSError as exc:
        if out_of_resources(exc):
            raise
        # Unreadable (or a link, never followed) is not empty: which nodes left a failed reply is unknown.
        damage.append(SkippedEntry(os.path.join(path, "failed"),
                                   f"cannot list failed/: {exc.strerror or exc}; its replies are not known"))
    return DirListing(frozenset(names), frozenset(artifacts), frozenset(failed), frozenset(links),
                      tuple(sorted(damage, key=lambda d: d.path)))


def home_lock_scopes(path: str, label: str) -> tuple[str, ...]:
    """The sync locks a home is synced under: its label, then its real directory where there
    is one, so the same home named by another label, through a symlink or by its path waits
    for the sync that holds it, and so does another directory given the same label
    (PostgreSQL locks per scope; one SQLite lock file holds the whole ledger)."""
    identity = home_identity(path)
    if identity["dev"] is None:
        return (f"home:{label}",)
    return f"home:{label}", f"home:{identity['machine']}:{identity['dev']}:{identity['inode']}"


def home_identity(path: str) -> dict:
    """What a home directory is, whatever names it: the machine it is on, its device and
    inode (None when it does not exist) and its path with symlinks resolved."""
    real = os.path.realpath(path)
    info = os.stat(real) if os.path.isdir(real) else None
    return {"machine": machine_source(), "dev": info.st_dev if info else None,
            "inode": info.st_ino if info else None, "real_path": real}
