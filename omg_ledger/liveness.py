"""Read-only liveness probe for an oh-my-graph run directory (ADR 0015).

A run leg holds an exclusive flock(2) on ``<run_dir>/resume.lock`` for its whole
duration, and the kernel drops that lock however the holder dies. A reader asks
"is a leg alive?" by trying a *shared* non-blocking flock on a read-only fd:
contended means a live holder, granted means the holder is gone.

The answer is three-valued on purpose. A false "free" next to an open leg turns
into a false ABANDONED, which invites a second scheduler to re-run paid nodes
over a live run, so every ambiguity — missing file, unmarked file whose pid
still names something, a filesystem whose flock is not the kernel's own, any
error at all — folds into ``Liveness.UNKNOWN`` ("answer as if the lock did not
exist": an open leg reads as in flight).

This module never creates, writes, truncates, renames or removes anything, and
never takes LOCK_EX: an exclusive probe would briefly block the very leg it is
observing and would flicker concurrent readers into a false "held".

Linux only in practice: ``filesystem_type`` understands the Linux ``statfs``
layout and raises ``OSError`` elsewhere, which the probe turns into UNKNOWN.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import errno
import fcntl
import os
import re
import stat
import sys
from collections.abc import Callable

__all__ = [
    "LOCAL_FILESYSTEM_MAGIC",
    "LOCK_FILE_NAME",
    "LOCK_MARKER",
    "Liveness",
    "filesystem_type",
    "is_local_filesystem",
    "probe_lock",
]


class Liveness(enum.Enum):
    """Is a leg of this run alive, per its resume.lock?"""

    # A process holds the exclusive flock right now: the leg is alive. Immune
    # to pid recycling — there is no name involved, only a kernel lock.
    HELD = "held"
    # The leg that wrote the lock is affirmatively gone: either a marked lock
    # nobody flocks, or an unmarked (pre-flock) lock whose pid names no process.
    # The only value that may ever be composed into ABANDONED.
    FREE = "free"
    # The lock could not answer; callers fall back to the open-leg rule.
    UNKNOWN = "unknown"


LOCK_FILE_NAME = "resume.lock"

# The first line of every lock a flock-taking writer produces, and the only
# promise the file's contents make (RUN-FEED "Liveness"). Without it the writer
# took no flock, so a granted probe would prove nothing.
LOCK_MARKER = b"oh-my-graph-lock 1"

# statfs(2) f_type values (include/uapi/linux/magic.h, plus ZFS which is out of
# tree) for filesystems whose flock(2) is the kernel's own whole-file lock.
# Allow-list only: NFS/SMB/FUSE & co. emulate or forward flock (over NFS it
# becomes per-process POSIX record locks that our own close() could drop), and
# that fails silently, so anything unlisted must read UNKNOWN. Being too strict
# costs precision, never safety.
LOCAL_FILESYSTEM_MAGIC: dict[int, str] = {
    0xEF53: "ext2/ext3/ext4",
    0x9123683E: "btrfs",
    0x58465342: "xfs",
    0x01021994: "tmpfs",
    0x794C7630: "overlayfs",
    0x2FC12FC1: "zfs",
    0xF2F52010: "f2fs",
    0x858458F6: "ramfs",
    0xCA451A4E: "bcachefs",
}

# Matches the reference reader's head size. It matters for the legacy rule:
# an unmarked file is judged on this prefix, and only a bare "<pid>\n" passes.
_HEAD_BYTES = 128

# What Go's strconv.Atoi accepts: optional sign, ASCII digits only. Python's
# int() would also take "1_000", "\u0661" and friends — none of which a
# pre-flock writer ever produced, so they must not reach kill(2).
_PID_RE = re.compile(rb"[+-]?[0-9]+")

# pid_t is a C int; anything larger cannot name a process, and os.kill would
# raise OverflowError instead of answering.
_PID_MAX = 2**31 - 1


class _StatfsBuf(ctypes.Structure):
    # Only f_type is read. It is the first member of struct statfs and is a
    # C long (__fsword_t) on x86_64 and aarch64 glibc/musl; the padding just
    # has to cover the rest of the struct (120 bytes on x86_64).
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 248)]


_statfs_fn: Callable[..., int] | None = None


def _libc_statfs() -> Callable[..., int]:
    # Resolved lazily so importing this module never fails on a platform
    # without a usable libc; the probe just reads UNKNOWN there.
    global _statfs_fn
    if _statfs_fn is None:
        # The C library this interpreter is linked with, by the process's own symbols:
        # ctypes.util.find_library would run `ldconfig -p` in a child process to find it.
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.statfs
        fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(_StatfsBuf)]
        fn.restype = ctypes.c_int
        _statfs_fn = fn
    return _statfs_fn


def filesystem_type(path: str | os.PathLike[str]) -> int:
    """Return statfs(2)'s f_type for *path* as an unsigned 32-bit magic.

    Raises ``OSError`` when statfs fails, or on a non-Linux platform where the
    struct layout (and the meaning of f_type) differs.
    """
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "statfs f_type is only understood on Linux", str(path))
    buf = _StatfsBuf()
    rc = _libc_statfs()(os.fsencode(path), ctypes.byref(buf))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fspath(path))
    # Magics are 32-bit; on 32-bit ABIs f_type is a signed int, so e.g. btrfs's
    # 0x9123683E comes back negative. Compare in uint32 everywhere.
    return buf.f_type & 0xFFFFFFFF


def is_local_filesystem(
    path: str | os.PathLike[str],
    fs_type: Callable[[str], int] = filesystem_type,
) -> bool:
    """True only if *path* is on a filesystem known to have real flock(2).

    False means "not known to be local", which includes statfs failing: an
    error must never be read as "local, so carry on".
    """
    try:
        magic = fs_type(os.fspath(path))
    except OSError:
        return False
    return (magic & 0xFFFFFFFF) in LOCAL_FILESYSTEM_MAGIC


def probe_lock(
    run_dir: str | os.PathLike[str],
    *,
    fs_type: Callable[[str], int] = filesystem_type,
) -> Liveness:
    """Probe ``<run_dir>/resume.lock`` without creating, writing or removing anything."""
    run_dir = os.fspath(run_dir)
    # Gate first, and do not even open the file when it fails: on NFS, flock is
    # emulated with per-process record locks, and merely closing our own fd on
    # the file would release a lock this process might hold on it.
    if not is_local_filesystem(run_dir, fs_type):
        return Liveness.UNKNOWN

    path = os.path.join(run_dir, LOCK_FILE_NAME)
    # stat before open so a FIFO, device or socket is never opened at all:
    # opening a FIFO can release a writer blocked in open(), and opening a
    # device can have side effects. A symlink is followed, as the engine's own
    # AcquireLock and ProbeLock follow it: a leg that opened resume.lock through
    # a link holds its flock on the link's target, so that is the lock to probe.
    try:
        pre = os.stat(path)
    except OSError:
        return Liveness.UNKNOWN
    if not stat.S_ISREG(pre.st_mode):
        return Liveness.UNKNOWN
    # The lock file itself may be on another filesystem than its directory (a file
    # bind-mounted there, or a link's target) whose flock is not the directory's:
    # statfs the file too (statfs follows links), so such a lock is not opened either.
    if not is_local_filesystem(path, fs_type):
        return Liveness.UNKNOWN

    try:
        # No O_CREAT: a reader never makes a lock appear. O_NONBLOCK means a
        # swapped-in FIFO cannot hang us (and _probe_fd refuses anything but the
        # file stat saw); O_CLOEXEC keeps the fd (and any lock on it) out of children.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return Liveness.UNKNOWN
    try:
        return _probe_fd(fd, pre)
    except OSError:
        return Liveness.UNKNOWN
    finally:
        os.close(fd)


def _probe_fd(fd: int, pre: os.stat_result) -> Liveness:
    st = os.fstat(fd)
    # Same checks on what we actually opened, in case the name (or a link's
    # target) was replaced between stat and open.
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (pre.st_dev, pre.st_ino):
        return Liveness.UNKNOWN

    head = _read_head(fd)
    if not _has_marker(head):
        # The writer predates the flock format and holds no flock, so the lock
        # is silent about it; ask its pid instead, in one direction only.
        return _legacy_liveness(head)

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        # EWOULDBLOCK/EAGAIN: someone holds LOCK_EX. Only this reads as alive.
        return Liveness.HELD
    except OSError:
        # ENOLCK, EINVAL, ...: we failed to ask, which is not an answer.
        return Liveness.UNKNOWN
    # Give the shared lock back at once so a starting leg's LOCK_EX is refused
    # for no longer than these two syscalls. close() would also drop it; an
    # unlock error therefore changes nothing about the answer.
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    return Liveness.FREE


def _read_head(fd: int) -> bytes:
    # pread at offset 0 (no reliance on the fd offset), looping over short
    # reads until the bound or EOF.
    chunks: list[bytes] = []
    got = 0
    while got < _HEAD_BYTES:
        chunk = os.pread(fd, _HEAD_BYTES - got, got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _has_marker(head: bytes) -> bool:
    # Same acceptance as the reference reader: the first line (up to "\n" or
    # EOF), with trailing CRs ignored, must be exactly the marker. So
    # "oh-my-graph-lock 1", "...1\n" and "...1\r\n" are marked;
    # "oh-my-graph-lock 1 " or "oh-my-graph-lock 2" are not, and take the
    # legacy arm.
    first_line = head.split(b"\n", 1)[0]
    return first_line.rstrip(b"\r") == LOCK_MARKER


def _legacy_pid(head: bytes) -> int | None:
    # Accept exactly what a pre-flock writer produced: one decimal line, and
    # nothing but whitespace after it. A second line means some other file;
    # an empty head is also what a marked lock looks like mid-rewrite, and
    # must never read as anything but unknown.
    line, _, rest = head.partition(b"\n")
    if rest.strip():
        return None
    token = line.strip()
    if not _PID_RE.fullmatch(token):
        return None
    pid = int(token)
    # pid <= 0 names process groups in kill(2) (0 = our own group) and would
    # "succeed"; refuse before the syscall rather than answer a different
    # question.
    if pid <= 0 or pid > _PID_MAX:
        return None
    return pid


def _legacy_liveness(head: bytes) -> Liveness:
    pid = _legacy_pid(head)
    if pid is None:
        return Liveness.UNKNOWN
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        # ESRCH: no process bears this pid, so the writer has exited. Recycling
        # can only *add* a process under a pid, never hide a live one, which
        # is why this direction (and only this one) is evidence.
        return Liveness.FREE
    except OSError:
        # EPERM: some process exists (another user's). Existence proves
        # nothing — it may be a recycled stranger.
        return Liveness.UNKNOWN
    # Alive (or a zombie): holder or stranger, indistinguishable.
    return Liveness.UNKNOWN
