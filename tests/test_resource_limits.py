"""A sync that runs out of open files or memory (real limits, set with setrlimit in a real
`omg-ledger sync` child process): one line and exit 75, the open batch rolled back,
nothing recorded as a problem of the home, no work file left, and the next sync with
the limit gone makes the ledger a sync with no limit makes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync

from .ledger_dump import diff, dump

REPO = Path(__file__).resolve().parent.parent

# The command line, its open files limited from the first run directory it reads on to
# those open then and argv[1] more: a point in the sync, whatever the machine.
FEW_FILES_FROM_THE_FIRST_RUN = r"""
import os, resource, sys
from omg_ledger import sync
from omg_ledger.cli import main

spare = int(sys.argv[1])
read = sync.read_run_dir
limited = []

def read_with_few_files(*args, **kwargs):
    if not limited:
        limited.append(True)
        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + spare, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return read(*args, **kwargs)

sync.read_run_dir = read_with_few_files
main(sys.argv[2:], prog_name="omg-ledger")
"""


def _child_sync(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def _cold_sync(db: Path, home: Path) -> dict:
    engine = open_ledger(str(db))
    try:
        sync(engine, [Home.from_path(str(home), "h")], workers=0)
        return dump(engine)
    finally:
        engine.dispose()


def test_a_sync_out_of_open_files_stops_in_one_line_and_records_no_problem(corpus_home, tmp_path):
    """Out of open files, a run's state.json "cannot open: Too many open files" was a
    problem of the home, and its identity was remembered as an unreadable file's: the run
    was indexed without it, exit 0, and no later sync read the unchanged file again (the
    ledger never became the one a sync with enough files makes)."""
    reference = _cold_sync(tmp_path / "reference.sqlite", corpus_home)
    stopped = 0
    for spare in range(8):
        db = tmp_path / f"spare-{spare}.sqlite"
        result = _child_sync(FEW_FILES_FROM_THE_FIRST_RUN, str(spare), "sync", "--db", str(db), "--home",
                             f"h={corpus_home}", "--workers", "0")
        if result.returncode == 75:
            stopped += 1
            assert result.stdout == "", result.stdout
            assert result.stderr.startswith("omg-ledger: error: out of open files (ulimit -n is "), result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
        else:
            assert result.returncode == 0, result.stderr
        with sqlite3.connect(db) as conn:
            said = conn.execute("SELECT path, reason FROM problems WHERE reason LIKE '%open files%'").fetchall()
        assert said == [], said
        assert not Path(f"{db}.sync-work").exists()
        after = _cold_sync(db, corpus_home)  # the limit gone
        assert after == reference, (spare, diff(after, reference))
    assert stopped, "no limit tried stopped the sync: give fewer spare files"


# The command line, its address space limited as its pool of workers is made to what it
# uses then and argv[1] MiB more: enough for some of the pool's threads (8 MiB of stack
# each) or none.
LITTLE_MEMORY_FOR_THE_POOL = r"""
import resource, sys
from omg_ledger import sync
from omg_ledger.cli import main

margin = int(sys.argv[1]) << 20
make = sync._Pool.__init__

def make_with_little_memory(self, *args, **kwargs):
    with open("/proc/self/status") as status:
        used = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (used + margin, resource.RLIM_INFINITY))
    make(self, *args, **kwargs)

sync._Pool.__init__ = make_with_little_memory
main(sys.argv[2:], prog_name="omg-ledger")
"""


def test_a_pool_out_of_memory_for_its_threads_never_hangs_nor_prints_a_traceback(corpus_home, tmp_path):
    """Too little memory for the pool's threads: the executor's first thread not started
    was a RuntimeError traceback (exit 1) leaving the work directory behind; its second
    (the queue's feeder, started by the first) dying left the writer waiting for a result
    for ever. A pool that cannot start is no pool (its runs are read by the writer), and
    memory that runs out then is one line, exit 75."""
    reference = _cold_sync(tmp_path / "reference.sqlite", corpus_home)
    for margin in (2, 6, 12, 20):
        db = tmp_path / f"margin-{margin}.sqlite"
        result = _child_sync(LITTLE_MEMORY_FOR_THE_POOL, str(margin), "sync", "--db", str(db), "--home",
                             f"h={corpus_home}", "--workers", "2")
        assert result.stdout == ""
        if result.returncode == 75:
            assert result.stderr.startswith("omg-ledger: error: out of memory: "), result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
        else:
            assert (result.returncode, result.stderr) == (0, ""), (margin, result.stderr)
        assert not Path(f"{db}.sync-work").exists()
        after = _cold_sync(db, corpus_home)
        assert after == reference, (margin, diff(after, reference))


# The command line, its address space limited from the first run directory it reads on
# to what it uses then and argv[1] MiB more.
LITTLE_MEMORY_FROM_THE_FIRST_RUN = r"""
import resource, sys
from omg_ledger import sync
from omg_ledger.cli import main

margin = int(sys.argv[1]) << 20
read = sync.read_run_dir
limited = []

def read_with_little_memory(*args, **kwargs):
    if not limited:
        limited.append(True)
        with open("/proc/self/status") as status:
            used = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (used + margin, resource.RLIM_INFINITY))
    return read(*args, **kwargs)

sync.read_run_dir = read_with_little_memory
main(sys.argv[2:], prog_name="omg-ledger")
"""


def test_a_sync_out_of_memory_is_one_line_and_exit_75_with_nothing_half_written(tmp_path):
    """A run whose state.json (48 MiB, under the 64 MiB a snapshot may hold) does not fit
    in what memory is left: MemoryError was a traceback and exit 1."""
    from .builders import write_run

    home = tmp_path / "home"
    run_id = "20261129-101500.000000001-1"
    run_dir = write_run(home, run_id, [{"schema": 3, "ts": "2026-11-29T10:15:00Z", "event": "run_started"}],
                        state={"status": "running", "padding": "x" * (48 << 20)})
    db = tmp_path / "ledger.sqlite"
    result = _child_sync(LITTLE_MEMORY_FROM_THE_FIRST_RUN, "16", "sync", "--db", str(db), "--home", f"h={home}",
                         "--workers", "0")
    assert (result.returncode, result.stdout) == (75, ""), result.stderr
    assert result.stderr.startswith("omg-ledger: error: out of memory: the open batch rolled back; "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM problems").fetchone() == (0,)
    (run_dir / "state.json").unlink()
    _cold_sync(db, home)  # the run, once it fits
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT run_id, has_state FROM runs").fetchall() == [(run_id, 0)]
