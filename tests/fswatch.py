"""A tiny Linux inotify watcher for tests: prove that code under test wrote nothing.

Usage::

    with watch_tree(home) as events:
        do_read_only_things(home)
    assert events == []

``events`` is filled when the block exits with ``(path, mask_names)`` tuples,
one per mutating event seen anywhere under the tree (``mask_names`` is a tuple
like ``("IN_CREATE",)`` or ``("IN_CREATE", "IN_ISDIR")``).

The default mask is every *mutating* event and none of the read-only ones
(IN_OPEN, IN_ACCESS, IN_CLOSE_NOWRITE), because reading a tree is allowed. A
test that wants to prove a file was not even opened can pass
``extra_mask=IN_OPEN``.

Why no background thread: inotify queues each event synchronously inside the
syscall that caused it, so by the time the ``with`` block ends every event it
caused is already in the queue, whichever process caused it. Draining once at
exit is therefore complete, and deterministic. The one thing a drain-at-exit
cannot see is the *contents* of a directory created during the block (no watch
existed on it yet); the IN_CREATE on its parent is still reported, and the
drain also walks the new directory and reports what it finds as synthetic
``IN_CREATE`` events so the report names the files.

A queue overflow (IN_Q_OVERFLOW) is reported as an event, never swallowed, so a
test can only pass on a complete record.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import struct
from collections.abc import Iterator

IN_ACCESS = 0x00000001
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_CLOSE_NOWRITE = 0x00000010
IN_OPEN = 0x00000020
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000

IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

MUTATING_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)

_NAMES = {
    IN_ACCESS: "IN_ACCESS",
    IN_MODIFY: "IN_MODIFY",
    IN_ATTRIB: "IN_ATTRIB",
    IN_CLOSE_WRITE: "IN_CLOSE_WRITE",
    IN_CLOSE_NOWRITE: "IN_CLOSE_NOWRITE",
    IN_OPEN: "IN_OPEN",
    IN_MOVED_FROM: "IN_MOVED_FROM",
    IN_MOVED_TO: "IN_MOVED_TO",
    IN_CREATE: "IN_CREATE",
    IN_DELETE: "IN_DELETE",
    IN_DELETE_SELF: "IN_DELETE_SELF",
    IN_MOVE_SELF: "IN_MOVE_SELF",
    IN_UNMOUNT: "IN_UNMOUNT",
    IN_Q_OVERFLOW: "IN_Q_OVERFLOW",
    IN_IGNORED: "IN_IGNORED",
    IN_ISDIR: "IN_ISDIR",
}

_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_READ_SIZE = 64 * 1024

Event = tuple[str, tuple[str, ...]]


def mask_names(mask: int) -> tuple[str, ...]:
    """Symbolic names of the bits set in an inotify mask, lowest bit first."""
    names = tuple(name for bit, name in sorted(_NAMES.items()) if mask & bit)
    unknown = mask & ~sum(_NAMES)
    return names + ((hex(unknown),) if unknown else ())


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_init1.restype = ctypes.c_int
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        lib.inotify_add_watch.restype = ctypes.c_int
        _libc = lib
    return _libc


def _raise_errno(what: str, path: str | None = None) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}", path)


class TreeWatcher:
    """Recursive inotify watch over every directory under *root*."""

    def __init__(self, root: str | os.PathLike[str], *, extra_mask: int = 0) -> None:
        self.root = os.path.abspath(os.fspath(root))
        # IN_ONLYDIR/IN_DONT_FOLLOW: watch real directories only, never chase a
        # symlink out of the tree.
        self.mask = MUTATING_MASK | extra_mask | IN_ONLYDIR | IN_DONT_FOLLOW
        # What we report: the requested bits plus the kernel's always-on
        # overflow/unmount notices. IN_IGNORED alone (watch torn down) is noise.
        self.report_mask = MUTATING_MASK | extra_mask | IN_Q_OVERFLOW | IN_UNMOUNT
        self.fd = -1
        self._wd_path: dict[int, str] = {}

    def start(self) -> None:
        fd = _lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            _raise_errno("inotify_init1")
        self.fd = fd
        # Walk first, watch after: otherwise our own walk's opendir() calls
        # would show up as IN_OPEN when a caller asks for extra_mask=IN_OPEN.
        for dirpath in list(self._walk_dirs(self.root)):
            self._add_watch(dirpath)

    def _walk_dirs(self, top: str) -> Iterator[str]:
        for dirpath, _dirnames, _filenames in os.walk(top, followlinks=False):
            yield dirpath

    def _add_watch(self, path: str) -> bool:
        wd = _lib().inotify_add_watch(self.fd, os.fsencode(path), self.mask)
        if wd < 0:
            err = ctypes.get_errno()
            # Gone or replaced by a non-directory before we got to it: its
            # creation/removal is reported by the parent's events anyway.
            if err in (errno.ENOENT, errno.ENOTDIR):
                return False
            _raise_errno("inotify_add_watch", path)
        self._wd_path[wd] = path
        return True

    def _read_available(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)

    def _parse(self, data: bytes) -> Iterator[tuple[str, int]]:
        offset = 0
        while offset + _EVENT_HEADER.size <= len(data):
            wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            offset += _EVENT_HEADER.size
            raw_name = data[offset : offset + length].rstrip(b"\0")
            offset += length
            base = self._wd_path.get(wd, self.root)
            path = os.path.join(base, os.fsdecode(raw_name)) if raw_name else base
            yield path, mask

    def drain(self, settle: float = 0.02) -> list[Event]:
        """Read every queued event; stop once the queue stays empty for *settle* s."""
        events: list[Event] = []
        while True:
            data = self._read_available()
            if data:
                for path, mask in self._parse(data):
                    if mask & self.report_mask:
                        events.append((path, mask_names(mask)))
                    if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                        events.extend(self._adopt_new_dir(path))
                continue
            ready, _, _ = select.select([self.fd], [], [], settle)
            if not ready:
                return events

    def _adopt_new_dir(self, path: str) -> list[Event]:
        # A directory that appeared during the block had no watch, so anything
        # created inside it produced no event: watch it now and report what is
        # already there so the failure message names it.
        found: list[Event] = []
        new_dirs: list[str] = []
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            new_dirs.append(dirpath)
            for name in dirnames:
                found.append((os.path.join(dirpath, name), ("IN_CREATE", "IN_ISDIR", "synthetic")))
            for name in filenames:
                found.append((os.path.join(dirpath, name), ("IN_CREATE", "synthetic")))
        for dirpath in new_dirs:
            self._add_watch(dirpath)
        return found

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@contextlib.contextmanager
def watch_tree(root: str | os.PathLike[str], *, extra_mask: int = 0) -> Iterator[list[Event]]:
    """Watch *root* recursively; the yielded list is filled when the block exits.

    Events are collected even if the block raises, but the list is only
    meaningful after the ``with`` statement ends.
    """
    watcher = TreeWatcher(root, extra_mask=extra_mask)
    events: list[Event] = []
    watcher.start()
    try:
        yield events
    finally:
        try:
            events.extend(watcher.drain())
        finally:
            watcher.close()
