"""omg_ledger.liveness against real processes, real files and real flock(2).

Nothing here mocks flock or kill: holders are real child processes (or real
second fds in this process), dead pids are real reaped children, and "nothing
was written" is checked with stat() and with inotify (tests/fswatch.py). The
only injected seam is ``fs_type``, because no NFS mount is available to test
the gate against.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from omg_ledger import liveness
from omg_ledger.liveness import (
    LOCAL_FILESYSTEM_MAGIC,
    LOCK_FILE_NAME,
    LOCK_MARKER,
    Liveness,
    filesystem_type,
    is_local_filesystem,
    probe_lock,
)
from tests.fswatch import IN_OPEN, watch_tree

HELD, FREE, UNKNOWN = Liveness.HELD, Liveness.FREE, Liveness.UNKNOWN

NFS_SUPER_MAGIC = 0x6969
REPO_ROOT = Path(liveness.__file__).resolve().parents[1]
CHILD_TIMEOUT = 10.0
# The cheapest process to spawn and reap for a dead pid (a python child would
# cost ~50 ms per call, and many tests want one).
_TRUE = shutil.which("true")
TRUE_ARGV = [_TRUE] if _TRUE else [sys.executable, "-c", "pass"]

# A lock holder shaped like oh-my-graph's AcquireLock: O_CREAT|O_RDWR, flock,
# then (only once locked) truncate and write marker + pid. Mode "sh" instead
# opens read-only and holds LOCK_SH, i.e. a slow *reader*. It announces
# readiness on stdout and then blocks on stdin, so it also exits on its own if
# this test process dies (EOF) — no orphans.
HOLDER_CODE = r"""
import fcntl, os, sys
path, mode = sys.argv[1], sys.argv[2]
if mode == "ex":
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"oh-my-graph-lock 1\n%d\n" % os.getpid(), 0)
else:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.read()
"""

# A probing process: waits for "go" so all workers overlap, then probes.
PROBER_CODE = r"""
import json, sys
from omg_ledger.liveness import probe_lock
run_dir, n = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
counts = {}
for _ in range(n):
    v = probe_lock(run_dir).value
    counts[v] = counts.get(v, 0) + 1
print(json.dumps(counts), flush=True)
"""


# ---------------------------------------------------------------- helpers


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _await_line(proc: subprocess.Popen[str], expected: str) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], CHILD_TIMEOUT)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != expected:
        proc.kill()
        _, err = proc.communicate(timeout=CHILD_TIMEOUT)
        pytest.fail(f"child did not say {expected!r} (got {line!r}); stderr:\n{err}")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=CHILD_TIMEOUT)


@contextlib.contextmanager
def hold_in_child(lock: Path, mode: str = "ex") -> Iterator[subprocess.Popen[str]]:
    """A separate process holding LOCK_EX (as a leg) or LOCK_SH (as a reader)."""
    proc = _spawn(HOLDER_CODE, str(lock), mode)
    try:
        _await_line(proc, "ready")
        yield proc
    finally:
        _stop(proc)


@contextlib.contextmanager
def hold_in_process(lock: Path) -> Iterator[None]:
    """LOCK_EX through a second open file description in *this* process.

    The embedded live view probes from the very process that holds the lock;
    flock conflicts per open file description, so it must still read HELD
    (POSIX record locks would grant it and misreport the run).
    """
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def dead_pid() -> int:
    """The pid of a process that has really exited and been reaped."""
    proc = subprocess.Popen(TRUE_ARGV)
    proc.wait(timeout=CHILD_TIMEOUT)
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    return proc.pid


def marked(pid: int | None = None) -> bytes:
    return LOCK_MARKER + b"\n" + (b"%d\n" % (pid if pid is not None else os.getpid()))


def snapshot(path: Path) -> tuple[object, ...]:
    st = os.lstat(path)
    content = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
    return (content, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode, st.st_nlink, st.st_size)


def dir_snapshot(d: Path) -> tuple[object, ...]:
    st = os.stat(d)
    return (sorted(os.listdir(d)), st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def probe_with_deadline(run: Path, seconds: float = 5.0) -> Liveness:
    """Run the probe on a thread so a hang fails the test instead of freezing it."""
    result: list[Liveness] = []
    t = threading.Thread(target=lambda: result.append(probe_lock(run)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "probe_lock hung"
    return result[0]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "20260803-125311.878285000-1"
    d.mkdir(parents=True)
    return d


@pytest.fixture
def lock(run: Path) -> Path:
    return run / LOCK_FILE_NAME


# ---------------------------------------------------------------- filesystem gate


def test_tmp_path_is_on_a_known_local_filesystem(tmp_path: Path) -> None:
    # Every other test here relies on this: if it fails, this machine's tmp
    # filesystem is missing from LOCAL_FILESYSTEM_MAGIC and all probes read UNKNOWN.
    magic = filesystem_type(tmp_path)
    assert magic in LOCAL_FILESYSTEM_MAGIC, f"tmp_path fs magic {magic:#x} is not in the local list"
    assert is_local_filesystem(tmp_path)


def test_filesystem_type_reads_real_statfs() -> None:
    # /proc always reports PROC_SUPER_MAGIC; this pins the ctypes struct layout
    # against a value we did not choose, and proc is (rightly) not "local".
    assert filesystem_type("/proc") == 0x9FA0
    assert not is_local_filesystem("/proc")


def test_filesystem_type_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        filesystem_type(tmp_path / "nope")
    assert not is_local_filesystem(tmp_path / "nope")


def test_local_magic_table() -> None:
    assert LOCAL_FILESYSTEM_MAGIC == {
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
    assert NFS_SUPER_MAGIC not in LOCAL_FILESYSTEM_MAGIC


@pytest.mark.parametrize(
    ("magic", "local"),
    [
        (0xEF53, True),
        (0x9123683E - 2**32, True),  # btrfs as a 32-bit ABI's signed f_type
        (0x794C7630, True),
        (NFS_SUPER_MAGIC, False),
        (0xFF534D42, False),  # cifs
        (0xFE534D42, False),  # smb2
        (0x65735546, False),  # fuse
        (0, False),
    ],
    ids=["ext4", "btrfs-signed32", "overlayfs", "nfs", "cifs", "smb2", "fuse", "zero"],
)
def test_is_local_filesystem_with_injected_type(tmp_path: Path, magic: int, local: bool) -> None:
    assert is_local_filesystem(tmp_path, lambda _p: magic) is local


@pytest.mark.parametrize(
    "content",
    ["marked-held", "marked-free", "legacy-dead-pid"],
)
def test_non_local_filesystem_is_unknown_and_lock_never_opened(
    run: Path, lock: Path, content: str
) -> None:
    # How "never opened" is proven: inotify's IN_OPEN fires on any open(2) of
    # a watched directory's entry, read-only included, from any process. We
    # watch with IN_OPEN for this test only, and run a local-fs probe as a
    # control in the same shape to show the detector does see the probe's open
    # (so an empty list below means "not opened", not "watcher blind").
    lock.write_bytes(marked(dead_pid()) if content != "legacy-dead-pid" else b"%d\n" % dead_pid())
    calls: list[str] = []

    def nfs(path: str) -> int:
        calls.append(path)
        return NFS_SUPER_MAGIC

    holder = hold_in_child(lock) if content == "marked-held" else contextlib.nullcontext()
    with holder:
        with watch_tree(run, extra_mask=IN_OPEN) as events:
            # A held lock would read HELD, a free one FREE, a dead legacy pid
            # FREE — on NFS all of them must be UNKNOWN.
            assert probe_lock(run, fs_type=nfs) is UNKNOWN
        assert events == []
        assert calls == [str(run)]

        with watch_tree(run, extra_mask=IN_OPEN) as control:
            assert probe_lock(run) is (HELD if content == "marked-held" else FREE)
        assert (str(lock), ("IN_OPEN",)) in control


@pytest.mark.parametrize(
    "err",
    [errno.ENOENT, errno.EACCES, errno.ENOSYS, errno.EIO],
    ids=["ENOENT", "EACCES", "ENOSYS", "EIO"],
)
def test_fs_type_error_is_unknown(run: Path, lock: Path, err: int) -> None:
    lock.write_bytes(marked())  # free and marked: would be FREE if the gate passed

    def failing(path: str) -> int:
        raise OSError(err, os.strerror(err), path)

    assert probe_lock(run, fs_type=failing) is UNKNOWN
    assert probe_lock(run) is FREE


def test_missing_run_dir_is_unknown_and_not_created(tmp_path: Path) -> None:
    ghost = tmp_path / "no-such-run"
    assert probe_lock(ghost) is UNKNOWN
    assert not ghost.exists()


# ---------------------------------------------------------------- marked locks


def test_killed_holder_goes_from_held_to_free(run: Path, lock: Path) -> None:
    with hold_in_child(lock) as holder:
        assert lock.read_bytes() == marked(holder.pid)
        assert probe_lock(run) is HELD
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(timeout=CHILD_TIMEOUT) == -signal.SIGKILL
        # No cleanup path ran in the holder; the kernel released the flock.
        assert probe_lock(run) is FREE
        # ...and the file the dead leg left is untouched (never unlinked).
        assert lock.read_bytes() == marked(holder.pid)


def test_lock_held_by_another_fd_in_this_process_is_held(run: Path, lock: Path) -> None:
    lock.write_bytes(marked())
    with hold_in_process(lock):
        assert probe_lock(run) is HELD
    assert probe_lock(run) is FREE


def test_reader_holding_lock_sh_does_not_look_like_a_holder(run: Path, lock: Path) -> None:
    # The probe is LOCK_SH: another reader's shared lock must not read HELD.
    # (An exclusive probe would deterministically fail this.)
    lock.write_bytes(marked())
    with hold_in_child(lock, mode="sh"):
        assert probe_lock(run) is FREE
        # and the probe really does conflict with an exclusive holder
        fd = os.open(lock, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


@pytest.mark.parametrize(
    "content",
    [
        b"oh-my-graph-lock 1\n%(pid)d\n",
        b"oh-my-graph-lock 1\n",
        b"oh-my-graph-lock 1",
        b"oh-my-graph-lock 1\r\n%(pid)d\n",
        b"oh-my-graph-lock 1\n%(dead)d\n",
        b"oh-my-graph-lock 1\nnot a pid\n",
        b"oh-my-graph-lock 1\n" + b"x" * 500,
    ],
    ids=[
        "marker+pid",
        "marker-only",
        "marker-at-eof",
        "marker-crlf",
        "marker+dead-pid",
        "marker+garbage",
        "marker+long-tail",
    ],
)
def test_marked_lock_is_decided_by_flock_alone(run: Path, lock: Path, content: bytes) -> None:
    # The pid line of a marked file is informational: a dead pid does not make
    # a held lock free, a live one does not make a free lock held.
    lock.write_bytes(content % {b"pid": os.getpid(), b"dead": dead_pid()})
    assert probe_lock(run) is FREE
    with hold_in_process(lock):
        assert probe_lock(run) is HELD
    assert probe_lock(run) is FREE


# ---------------------------------------------------------------- missing / unmarked locks


def test_missing_lock_is_unknown_and_nothing_is_created(run: Path, lock: Path) -> None:
    (run / "events.jsonl").write_text("{}\n")
    before = dir_snapshot(run)
    with watch_tree(run) as events:
        assert probe_lock(run) is UNKNOWN
    assert events == []
    assert dir_snapshot(run) == before
    assert not lock.exists()


@pytest.mark.parametrize(
    "content",
    [b"%(d)d\n", b"%(d)d", b"  %(d)d  \n", b"\t%(d)d\r\n", b"+%(d)d\n", b"%(d)d\n\n  \n"],
    ids=["pid-nl", "pid-eof", "padded", "tab-crlf", "plus-sign", "trailing-blank-lines"],
)
def test_unmarked_lock_with_dead_pid_is_free(run: Path, lock: Path, content: bytes) -> None:
    pid = dead_pid()
    lock.write_bytes(content % {b"d": pid})
    assert probe_lock(run) is FREE


def test_unmarked_lock_naming_this_process_is_unknown(run: Path, lock: Path) -> None:
    lock.write_bytes(b"%d\n" % os.getpid())
    assert probe_lock(run) is UNKNOWN


def test_unmarked_lock_naming_a_live_child_is_unknown(run: Path, lock: Path) -> None:
    # A live pid may be the holder or a recycled stranger: never evidence.
    child = _spawn("import sys; print('ready', flush=True); sys.stdin.read()")
    try:
        _await_line(child, "ready")
        lock.write_bytes(b"%d\n" % child.pid)
        assert probe_lock(run) is UNKNOWN
    finally:
        _stop(child)
    # Reaped: now the same file affirmatively names nobody.
    assert probe_lock(run) is FREE


PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_KILL = 24, 1, 2, 5


def _probe_without(run: Path, *caps: int) -> str:
    """Probe from a child that, though root, lacks ``caps``: removed from the bounding
    set before exec, so kill(2) and file modes are enforced on it as on any user."""

    def drop() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in caps:
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    code = "import sys; from omg_ledger.liveness import probe_lock; print(probe_lock(sys.argv[1]).value)"
    result = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=30,
                            preexec_fn=drop if os.geteuid() == 0 else None, check=True)
    return result.stdout.strip()


def test_unmarked_lock_naming_another_users_process_is_unknown(run: Path, lock: Path) -> None:
    # kill(pid, 0) on another user's live process answers EPERM: it names a process,
    # so it proves nothing (never FREE). As root, a stranger is made: a process of
    # uid 65534, probed by a child without CAP_KILL.
    kwargs = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    stranger = subprocess.Popen(["sleep", "60"], **kwargs)
    try:
        lock.write_bytes(b"%d\n" % stranger.pid)
        assert _probe_without(run, CAP_KILL) == "unknown"
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n",
        b"   \n",
        b"abc\n",
        b"0\n",
        b"-1\n",
        b"-%(d)d\n",
        b"%(d)d\nextra\n",
        b"%(d)d %(d)d\n",
        b"%(d)d.0\n",
        b"%(u)s\n",
        b"%(us)s\n",
        b"99999999999\n",
        b"oh-my-graph-lock 2\n%(d)d\n",
        b"oh-my-graph-lock 1 \n%(d)d\n",
        b"OH-MY-GRAPH-LOCK 1\n%(d)d\n",
        b"\x00\xff\xfe garbage",
    ],
    ids=[
        "empty",
        "blank-line",
        "spaces",
        "word",
        "zero",
        "minus-one",
        "negative-dead",
        "second-line",
        "two-pids",
        "decimal",
        "underscore-digits",
        "unicode-digits",
        "overflow",
        "marker-v2",
        "marker-trailing-space",
        "marker-uppercase",
        "binary",
    ],
)
def test_unmarked_garbage_is_unknown(run: Path, lock: Path, content: bytes) -> None:
    # Every template uses a *dead* pid where it has one, so a lenient parser
    # (int() accepts "1_2" and Arabic-Indic digits) would wrongly answer FREE.
    d = dead_pid()
    digits = str(d)
    lock.write_bytes(
        content
        % {
            b"d": d,
            b"u": (digits[0] + "_" + digits[1:]).encode(),
            b"us": "".join(chr(0x0660 + int(c)) for c in digits).encode(),
        }
    )
    assert probe_lock(run) is UNKNOWN


# ---------------------------------------------------------------- not a regular file


def test_symlinked_lock_is_probed_at_its_target_and_the_target_untouched(
    tmp_path: Path, run: Path, lock: Path
) -> None:
    # The engine opens resume.lock by name, following a link, both to take it
    # (AcquireLock) and to probe it (ProbeLock): a leg started through a link holds
    # its flock on the target, so the target is what answers.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "resume.lock"
    target.write_bytes(marked())
    lock.symlink_to(target)

    assert probe_lock(run) is FREE
    with hold_in_child(target):  # a leg holding it through the link's target
        assert probe_lock(run) is HELD
    with hold_in_child(lock):  # ...or through the link itself: the same lock
        assert probe_lock(run) is HELD
    before = snapshot(target), snapshot(lock)
    assert probe_lock(run) is FREE  # the holder was killed: the kernel let go
    assert (snapshot(target), snapshot(lock)) == before  # read-only through the link too

    # ...and nothing is left locked on it: an exclusive lock is immediately free.
    fd = os.open(target, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)

    target.write_bytes(b"%d\n" % dead_pid())  # an unmarked target: the legacy rule
    assert probe_lock(run) is FREE
    target.write_bytes(b"%d\n" % os.getpid())
    assert probe_lock(run) is UNKNOWN
    target.unlink()  # dangling link: absence is not evidence
    assert probe_lock(run) is UNKNOWN


@pytest.mark.parametrize(
    "make",
    [lambda p: _make_dir(p), lambda p: _make_fifo(p)],
    ids=["directory", "fifo"],
)
def test_lock_linked_to_a_non_regular_file_is_unknown_and_never_opened(
    tmp_path: Path, run: Path, lock: Path, make: Callable[[Path], None]
) -> None:
    target = tmp_path / "special"
    make(target)
    lock.symlink_to(target)
    with watch_tree(tmp_path, extra_mask=IN_OPEN) as events:
        assert probe_with_deadline(run) is UNKNOWN
    assert [e for e in events if e[0] == str(target)] == []


def test_run_dir_reached_through_a_symlink_still_probes(
    tmp_path: Path, run: Path, lock: Path
) -> None:
    # O_NOFOLLOW only refuses a symlinked *lock file*; the run directory path
    # may contain links (e.g. a symlinked runs root).
    lock.write_bytes(marked())
    alias = tmp_path / "alias"
    alias.symlink_to(run, target_is_directory=True)
    assert probe_lock(alias) is FREE
    with hold_in_process(lock):
        assert probe_lock(alias) is HELD


def _make_dir(p: Path) -> None:
    p.mkdir()
    (p / "inner").write_bytes(marked())


def _make_fifo(p: Path) -> None:
    os.mkfifo(p)


def _make_socket(p: Path) -> None:
    # AF_UNIX paths are limited to ~108 bytes; bind relative to the directory.
    cwd = os.getcwd()
    os.chdir(p.parent)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(p.name)
        s.close()
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    "make",
    [_make_dir, _make_fifo, _make_socket],
    ids=["directory", "fifo", "socket"],
)
def test_non_regular_lock_is_unknown_without_hanging(
    run: Path, lock: Path, make: Callable[[Path], None]
) -> None:
    make(lock)
    before = snapshot(lock)
    # IN_OPEN proves the special file is not opened at all: opening a FIFO,
    # even O_NONBLOCK, would wake a writer blocked in open(2).
    with watch_tree(run, extra_mask=IN_OPEN) as events:
        assert probe_with_deadline(run) is UNKNOWN
    assert [e for e in events if e[0] == str(lock)] == []
    assert snapshot(lock) == before


def test_unreadable_lock_is_unknown(run: Path, lock: Path) -> None:
    lock.write_bytes(marked())
    lock.chmod(0)
    try:
        assert _probe_without(run, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) == "unknown"
    finally:
        lock.chmod(0o600)
    assert probe_lock(run) is FREE  # the same file, readable: the probe itself works


# ---------------------------------------------------------------- read-only, no leaks


STATES = ["marked-free", "marked-held", "legacy-dead", "legacy-live", "garbage"]


@contextlib.contextmanager
def arrange(state: str, lock: Path) -> Iterator[Liveness]:
    if state == "marked-free":
        lock.write_bytes(marked())
        yield FREE
    elif state == "marked-held":
        with hold_in_child(lock):
            yield HELD
    elif state == "legacy-dead":
        lock.write_bytes(b"%d\n" % dead_pid())
        yield FREE
    elif state == "legacy-live":
        lock.write_bytes(b"%d\n" % os.getpid())
        yield UNKNOWN
    else:
        lock.write_bytes(b"not a lock\n")
        yield UNKNOWN


@pytest.mark.parametrize("state", STATES)
def test_probe_never_modifies_the_lock(run: Path, lock: Path, state: str) -> None:
    with arrange(state, lock) as expected:
        before, dir_before = snapshot(lock), dir_snapshot(run)
        with watch_tree(run) as events:
            answers = Counter(probe_lock(run) for _ in range(100))
        assert answers == Counter({expected: 100})
        assert events == []
        assert snapshot(lock) == before
        assert dir_snapshot(run) == dir_before


def test_probe_closes_every_fd(tmp_path: Path) -> None:
    shapes: dict[str, Callable[[Path], None]] = {
        "missing": lambda p: None,
        "marked": lambda p: p.write_bytes(marked()),
        "legacy": lambda p: p.write_bytes(b"%d\n" % os.getpid()),
        "garbage": lambda p: p.write_bytes(b"??"),
        "directory": _make_dir,
        "fifo": _make_fifo,
        "symlink": lambda p: p.symlink_to(p.parent / "target"),
    }
    runs = []
    for name, make in shapes.items():
        d = tmp_path / name
        d.mkdir()
        make(d / LOCK_FILE_NAME)
        runs.append(d)
    held = tmp_path / "held"
    held.mkdir()
    (held / LOCK_FILE_NAME).write_bytes(marked())
    runs.append(held)

    with hold_in_process(held / LOCK_FILE_NAME):
        before = open_fds()
        for _ in range(50):
            for d in runs:
                probe_lock(d)
            probe_lock(held, fs_type=lambda _p: NFS_SUPER_MAGIC)
        assert open_fds() == before


# ---------------------------------------------------------------- concurrency


def _probe_in_threads(run: Path, threads: int, per_thread: int) -> Counter[Liveness]:
    barrier = threading.Barrier(threads)
    results: list[Counter[Liveness]] = [Counter() for _ in range(threads)]

    def worker(i: int) -> None:
        barrier.wait()
        for _ in range(per_thread):
            results[i][probe_lock(run)] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(CHILD_TIMEOUT)
    return sum(results, Counter())


@pytest.mark.parametrize("state", ["held", "free"])
def test_concurrent_probes_agree(run: Path, lock: Path, state: str) -> None:
    # 4 probing processes and 8 probing threads all at once. Against a held
    # lock no probe may slip to FREE (other readers cannot make a live leg look
    # dead); against a free one no probe may flicker to HELD (shared probes do
    # not block each other — an LOCK_EX probe would fail this).
    lock.write_bytes(marked())
    holder = hold_in_child(lock) if state == "held" else contextlib.nullcontext()
    expected = HELD if state == "held" else FREE
    with holder:
        procs = [_spawn(PROBER_CODE, str(run), "200") for _ in range(4)]
        try:
            for p in procs:
                _await_line(p, "ready")
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            in_threads = _probe_in_threads(run, threads=8, per_thread=200)
            outs = [p.communicate(timeout=CHILD_TIMEOUT) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    _stop(p)
    assert in_threads == Counter({expected: 1600})
    for (out, err), p in zip(outs, procs, strict=True):
        assert p.returncode == 0, err
        assert json.loads(out) == {expected.value: 200}


@pytest.mark.parametrize("content", ["marked-held", "marked-free"])
def test_lock_file_on_another_filesystem_than_its_run_dir_is_unknown_and_never_opened(
    run: Path, lock: Path, content: str
) -> None:
    # A lock file can be a mount point of its own (a file bind-mounted from an NFS
    # export) while its directory is on ext4: the gate must judge the file's own
    # filesystem. statfs is injected to answer NFS for the lock's path only.
    lock.write_bytes(marked())
    calls: list[str] = []

    def nfs_lock_only(path: str) -> int:
        calls.append(path)
        return NFS_SUPER_MAGIC if path == str(lock) else filesystem_type(path)

    holder = hold_in_child(lock) if content == "marked-held" else contextlib.nullcontext()
    with holder:
        with watch_tree(run, extra_mask=IN_OPEN) as events:
            assert probe_lock(run, fs_type=nfs_lock_only) is UNKNOWN
        assert events == []
        assert str(lock) in calls
        assert probe_lock(run) is (HELD if content == "marked-held" else FREE)


def test_probe_gives_the_lock_back_before_it_returns(run: Path, lock: Path) -> None:
    # A leg starting right after a probe must get its LOCK_EX at once: another process
    # takes it non-blocking after each of many probes (a leaked shared lock would refuse it).
    lock.write_bytes(marked())
    code = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nprint('took', flush=True)\nsys.stdin.read()\n")
    for _ in range(3):
        assert probe_lock(run) is FREE
        leg = _spawn(code, str(lock))
        try:
            _await_line(leg, "took")
            assert probe_lock(run) is HELD
        finally:
            _stop(leg)
