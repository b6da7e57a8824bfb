"""The sync's worker processes (sync._Pool, workfile.py), with real processes, real
files and a real kill -9: they read and derive new runs into work files beside the
ledger, the writer copies them in at each batch's commit. The ledger they make is the
inline path's (tests/test_sync_batches.py compares whole dumps); here: when a pool is
used, that its files never outlive the sync, and that a worker dying mid-sync loses
nothing committed and leaves nothing half-written."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import tarfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from omg_ledger import sync as sync_module
from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.errors import SyncWorkerLost
from omg_ledger.sync import POOL_MIN_RUNS, Home, sync

from .cli_checks import PausedCommand
from .conftest import CORPUS, CORPUS_HOME
from .ledger_dump import diff, dump

SCALE_RUNS = 305


@pytest.fixture(scope="module")
def scale_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("scale") / "home"
    with tarfile.open(CORPUS.parent / "corpus-scale" / "home.tar.gz") as archive:
        archive.extractall(home, filter="data")
    return home


@pytest.fixture(scope="module")
def reference(scale_home, tmp_path_factory):
    """The scale corpus synced with no worker at all."""
    engine = open_ledger(str(tmp_path_factory.mktemp("reference") / "inline.sqlite"))
    sync(engine, [Home.from_path(str(scale_home), "scale")], workers=0)
    yield dump(engine)
    engine.dispose()


def _sync_watching_work_files(db: Path, home: Path, **options) -> tuple[list[list[str]], object]:
    """Sync, noting the work directory's files each time a batch commits."""
    seen: list[list[str]] = []
    work = Path(f"{db}.sync-work")

    def progress(stage, done, total):
        if stage == "sync" and done:
            seen.append(sorted(p.name for p in work.iterdir()) if work.is_dir() else [])

    engine = open_ledger(str(db))
    try:
        report = sync(engine, [Home.from_path(str(home), "scale")], progress=progress, **options)
    finally:
        engine.dispose()
    return seen, report


def test_workers_write_beside_the_ledger_and_leave_nothing_behind(scale_home, reference, tmp_path):
    db = tmp_path / "ledger.sqlite"
    # What a sync killed with kill -9 leaves: its work directory. The next sync (holding
    # the sync lock, so no other sync is using it) starts it afresh.
    stale = Path(f"{db}.sync-work")
    stale.mkdir()
    (stale / "worker-0.sqlite").write_bytes(b"not a database")
    (stale / "left-over").write_text("x")
    seen, report = _sync_watching_work_files(db, scale_home, workers=2, batch_runs=100)
    # Batches of 100: three commits while the pool runs, each with the two workers' files.
    assert seen[:3] == [["worker-0.0.sqlite", "worker-0.0.sqlite-shm", "worker-0.0.sqlite-wal",
                         "worker-1.0.sqlite", "worker-1.0.sqlite-shm", "worker-1.0.sqlite-wal"]] * 3, seen
    assert not stale.exists()
    assert (report.runs_changed, report.problems) == (SCALE_RUNS, [])
    _assert_ledger_is(db, reference)


def _assert_ledger_is(db: Path, expected: dict) -> None:
    engine = open_ledger(str(db))
    try:
        ours = dump(engine)
    finally:
        engine.dispose()
    assert ours == expected, diff(ours, expected)


def test_a_pool_is_used_by_default_for_many_new_runs_on_more_than_one_cpu(scale_home, corpus_home, tmp_path):
    cpus = len(os.sched_getaffinity(0))
    assert SCALE_RUNS >= POOL_MIN_RUNS > len(list((corpus_home / "runs").iterdir()))
    seen, _ = _sync_watching_work_files(tmp_path / "scale.sqlite", scale_home, batch_runs=100)
    assert bool(seen[0]) == (cpus > 1), (cpus, seen)
    assert len([name for name in seen[0] if name.endswith(".sqlite")]) == (min(cpus, 8) if cpus > 1 else 0)
    # Few new runs: read here, no worker started.
    seen, _ = _sync_watching_work_files(tmp_path / "corpus.sqlite", corpus_home, batch_runs=5)
    assert seen and not any(seen), seen
    # A sync of the same home with nothing new starts none either.
    seen, report = _sync_watching_work_files(tmp_path / "scale.sqlite", scale_home, batch_runs=100)
    assert report.runs_changed == 0 and not any(seen), seen


@pytest.fixture
def chunks_of_8(monkeypatch):
    """Chunks of 8 runs whatever the home's size, for tests whose arithmetic says where
    a chunk starts (runs[200] is the first of the 26th)."""
    monkeypatch.setattr(sync_module, "POOL_CHUNK_MAX", 8)


def _die_at(victim: str, ledger: str | None = None, runs_first: int = 0):
    """_prepare_new_run as it is, except that the worker given ``victim`` SIGKILLs
    itself: a real kill -9 of a real worker process (forked from this one, so it has
    this function), the way the OOM killer ends one. With ``ledger`` (a path or URL),
    it first waits until the writer has committed ``runs_first`` runs (every run before
    the victim's chunk is ready, so the writer gets that far, then waits for this chunk)."""
    prepare = sync_module._prepare_new_run

    def prepare_or_die(job):
        if job[0] == victim:
            deadline = time.monotonic() + 120
            while ledger is not None and _committed_runs(ledger) < runs_first and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        return prepare(job)

    return prepare_or_die


def _committed_runs(ledger: str) -> int:
    """Read on a connection of its own (in a worker: never one inherited from the writer)."""
    if "://" in ledger:
        from sqlalchemy import create_engine

        engine = create_engine(ledger, poolclass=__import__("sqlalchemy.pool").pool.NullPool)
        try:
            with engine.connect() as conn:
                return conn.exec_driver_sql("SELECT COUNT(*) FROM runs").scalar()
        finally:
            engine.dispose()
    with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def _runs_and_event_counts(db: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return dict(conn.execute("SELECT r.run_id, (SELECT COUNT(*) FROM events e WHERE e.run_pk = r.id) "
                                 "FROM runs r").fetchall())


def test_a_worker_killed_mid_sync_loses_no_committed_run_and_the_next_sync_finishes(
        scale_home, reference, tmp_path, monkeypatch, chunks_of_8):
    runs = sorted(p.name for p in (scale_home / "runs").iterdir())
    victim = runs[200]  # the first run of the 26th chunk of 8
    db = tmp_path / "ledger.sqlite"
    with monkeypatch.context() as patched:
        patched.setattr(sync_module, "_prepare_new_run", _die_at(victim, str(db), runs_first=200))
        engine = open_ledger(str(db))
        with pytest.raises(SyncWorkerLost, match="died"):
            sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2, batch_runs=50)
        engine.dispose()
    assert not Path(f"{db}.sync-work").exists()
    held = _runs_and_event_counts(db)
    # The four batches before the victim's were committed; the one it belonged to was not.
    assert set(held) == set(runs[:200])
    engine = open_ledger(str(db))
    try:
        report = sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2)
        assert report.runs_changed == SCALE_RUNS - len(held)
        after = dump(engine)
    finally:
        engine.dispose()
    # Every run the killed sync committed was whole, and the next sync made the same ledger.
    assert after == reference, diff(after, reference)
    full = _runs_and_event_counts(db)
    assert {run: full[run] for run in held} == held


def test_the_cli_says_a_worker_died_in_one_line_and_exits_75(scale_home, tmp_path, monkeypatch):
    runs = sorted(p.name for p in (scale_home / "runs").iterdir())
    monkeypatch.setattr(sync_module, "_prepare_new_run", _die_at(runs[10]))
    result = CliRunner().invoke(main, ["sync", "--db", str(tmp_path / "ledger.sqlite"), "--home",
                                       str(scale_home), "--workers", "2"])
    assert result.exit_code == 75, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == ["omg-ledger: error: a process reading new runs for the sync died (killed or out of memory); "
                     "runs committed so far are kept, the next sync carries on"], result.stderr


def test_a_chunk_is_an_eighth_of_a_workers_share_between_8_and_32_runs():
    # A worker's share of the new runs in eight chunks; never fewer than 8 runs a chunk nor more than 32.
    assert sync_module.pool_chunk_runs(100, 2) == 8  # 100 // 16 = 6, raised to 8
    assert sync_module.pool_chunk_runs(305, 2) == 19  # 305 // 16
    assert sync_module.pool_chunk_runs(512, 2) == 32
    assert sync_module.pool_chunk_runs(10_000, 2) == 32  # capped
    assert sync_module.pool_chunk_runs(10_000, 8) == 32
    assert sync_module.pool_chunk_runs(1_000, 8) == 15  # 1000 // 64


def test_workers_must_be_a_count(tmp_path):
    result = CliRunner().invoke(main, ["sync", "--db", str(tmp_path / "l.sqlite"), "--home", str(CORPUS_HOME),
                                       "--workers", "-1"])
    assert result.exit_code == 2 and "--workers" in result.stderr, result.stderr


def test_a_sync_mixing_changed_runs_new_runs_and_large_streams_equals_the_inline_path(
        scale_home, tmp_path, monkeypatch):
    """Every other run of the scale corpus synced first; then the rest arrive while some
    of the first change (a bad line appended, state.json touched), so runs read here
    and runs from the pool alternate within batches, and streams over a (lowered) size
    bound are left to the writer. With two workers or none: the same ledger."""
    import shutil

    monkeypatch.setattr(sync_module, "POOL_MAX_STREAM_BYTES", 12_000)
    runs = sorted(p.name for p in (scale_home / "runs").iterdir())
    large = [r for r in runs[1::2] if (scale_home / "runs" / r / "events.jsonl").stat().st_size > 12_000]
    assert 5 <= len(large) < len(runs[1::2]) // 2, len(large)  # some, not most, left to the writer
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    for run in runs[::2]:
        shutil.copytree(scale_home / "runs" / run, home / "runs" / run)
    engines = {workers: open_ledger(str(tmp_path / f"ledger-{workers}.sqlite")) for workers in (0, 2)}
    ledgers, reports = {}, {}
    try:
        for workers, engine in engines.items():
            sync(engine, [Home.from_path(str(home), "scale")], workers=workers)
        for run in runs[1::2]:
            shutil.copytree(scale_home / "runs" / run, home / "runs" / run)
        for run in runs[::2][10::20]:
            with open(home / "runs" / run / "events.jsonl", "a") as stream:
                stream.write("{not json\n")
            state = home / "runs" / run / "state.json"
            os.utime(state, ns=(state.stat().st_atime_ns, state.stat().st_mtime_ns + 10**9))
        for workers, engine in engines.items():
            reports[workers] = sync(engine, [Home.from_path(str(home), "scale")], workers=workers, batch_runs=40)
            ledgers[workers] = dump(engine)
    finally:
        for engine in engines.values():
            engine.dispose()
    inline, pooled = ledgers[0], ledgers[2]
    assert pooled == inline, diff(pooled, inline)
    changed = len(runs[::2][10::20])
    assert reports[2].runs_changed == reports[0].runs_changed == len(runs[1::2]) + changed
    assert [p.reason for p in reports[2].problems] == [p.reason for p in reports[0].problems]
    assert len(reports[0].problems) == changed


def test_ctrl_c_mid_sync_stops_the_workers_removes_their_files_and_keeps_whole_batches(
        scale_home, reference, tmp_path):
    """A real SIGINT, delivered to this process when the second batch has committed."""
    import multiprocessing

    db = tmp_path / "ledger.sqlite"
    committed = []

    def progress(stage, done, total):
        if stage == "sync" and done:
            committed.append(done)
            if len(committed) == 2:
                os.kill(os.getpid(), signal.SIGINT)

    engine = open_ledger(str(db))
    try:
        with pytest.raises(KeyboardInterrupt):
            sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2, batch_runs=50, progress=progress)
    finally:
        engine.dispose()
    assert committed[:2] == [50, 100]
    assert not Path(f"{db}.sync-work").exists()
    assert multiprocessing.active_children() == []
    runs = sorted(p.name for p in (scale_home / "runs").iterdir())
    assert set(_runs_and_event_counts(db)) == set(runs[:100])  # the interrupted third batch left nothing
    _next_sync_makes(db, scale_home, reference)


# The real command line, paused after its first batch has committed until the test
# writes a byte to the pipe it gave it: a point in the sync, not a moment, for the test
# to act at. The workers go on meanwhile.
PAUSED_AFTER_FIRST_BATCH = r"""
import os, sys
from omg_ledger import sync
from omg_ledger.cli import main

commit = sync._HomeSync._commit
paused = []

def commit_then_pause(self):
    writes = self._batch is not None or bool(self._received)
    commit(self)
    if writes and not paused:
        paused.append(True)
        os.write(int(sys.argv[1]), b"committed\n")
        os.read(int(sys.argv[2]), 1)

sync._HomeSync._commit = commit_then_pause
main(sys.argv[3:], prog_name="omg-ledger")
"""


def paused_sync(db: Path, home: Path, *options: str, new_session: bool = False) -> PausedCommand:
    """The command line's sync of ``home`` into ``db`` (PAUSED_AFTER_FIRST_BATCH)."""
    return PausedCommand(PAUSED_AFTER_FIRST_BATCH, b"committed", "sync", "--db", str(db), "--home", f"scale={home}",
                         *options, new_session=new_session)


def _children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("to_group", [False, True], ids=["to-the-sync", "to-its-process-group"])
@pytest.mark.parametrize(("signum", "code", "said"), [
    (signal.SIGTERM, 143, "omg-ledger: terminated\n"),
    (signal.SIGHUP, 129, "omg-ledger: hung up (the terminal closed)\n"),
], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_mid_sync_is_one_line_exit_143_whole_batches_and_nothing_left_behind(
        scale_home, reference, tmp_path, to_group, signum, code, said):
    """`kill`, `timeout` and a service manager stop a sync with SIGTERM (the last two send
    it to the workers too), a closed terminal with SIGHUP: it ends as Ctrl-C does (the open
    batch rolled back, the workers stopped, their files removed), says so in one line and
    exits 128 + the signal's number (143, 129), which the README lists; the next sync
    carries on to the ledger a cold sync makes."""
    db = tmp_path / "ledger.sqlite"
    sync_cli = paused_sync(db, scale_home, "--workers", "2", new_session=to_group)
    sync_cli.paused()
    workers = _children_of(sync_cli.proc.pid)
    assert workers and Path(f"{db}.sync-work").is_dir()
    if to_group:
        os.killpg(sync_cli.proc.pid, signum)
    else:
        sync_cli.proc.send_signal(signum)
    assert sync_cli.finish() == (code, "", said)
    _stopped_cleanly(db, scale_home, reference, workers)


def _stopped_cleanly(db: Path, home: Path, reference, workers: list[int]) -> None:
    """A sync stopped mid-way left no work files, no worker and no lock, kept whole batches
    in listing order, and the next sync makes the ledger a cold sync makes."""
    import fcntl

    assert not Path(f"{db}.sync-work").exists()
    assert not any(_running(pid) for pid in workers)
    with open(f"{db}.sync-lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
    runs = sorted(p.name for p in (home / "runs").iterdir())
    held = set(_runs_and_event_counts(db))
    assert 0 < len(held) < SCALE_RUNS and held == set(runs[:len(held)])  # whole batches, in order
    _next_sync_makes(db, home, reference)


def test_a_sync_whose_terminal_is_closed_stops_cleanly_with_exit_129(scale_home, reference, tmp_path):
    """A sync run by hand in a terminal that is then closed (an ssh session dropped, a
    window shut): the kernel hangs the terminal up, which sends SIGHUP, and every later
    write to it fails (EIO), the progress line's too. The sync still ends as on SIGTERM:
    exit 129, no traceback, whole batches kept, nothing left behind."""
    import fcntl
    import subprocess
    import sys
    import termios

    db = tmp_path / "ledger.sqlite"
    master, slave = os.openpty()
    said, says = os.pipe()
    resume, told = os.pipe()

    def own_the_terminal() -> None:  # in the child: a session whose controlling terminal it is
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED_AFTER_FIRST_BATCH, str(says), str(resume), "sync",
         "--db", str(db), "--home", f"scale={scale_home}", "--workers", "2"],
        stdin=slave, stdout=slave, stderr=slave, pass_fds=[says, resume],
        start_new_session=True, preexec_fn=own_the_terminal)
    os.close(slave)
    os.close(says)
    os.close(resume)
    try:
        with os.fdopen(said, "rb") as said_file:
            assert said_file.readline() == b"committed\n"
        workers = _children_of(proc.pid)
        assert workers
        os.close(master)  # the terminal closes: SIGHUP to its session
        master = None
        os.write(told, b"x")
        assert proc.wait(timeout=60) == 129
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if master is not None:
            os.close(master)
        os.close(told)
    _stopped_cleanly(db, scale_home, reference, workers)


@pytest.mark.parametrize("workers", ["2", "0"])
def test_a_ledger_file_removed_mid_sync_is_an_error_and_never_made_again_by_the_sync(
        scale_home, reference, tmp_path, workers):
    """`rm ledger.sqlite` (a clean-up job, a slip) while a sync runs: what the sync writes
    from then on goes to a file that no longer has a name. It must not end as done (exit 0),
    nor say that the runs it committed are kept, nor make a new file at that path on its
    own (with the umask's mode: the README promises a 0600 ledger); the next sync starts the
    ledger again, as a cold sync makes it."""
    db = tmp_path / "ledger.sqlite"
    sync_cli = paused_sync(db, scale_home, "--workers", workers)
    sync_cli.paused()
    db.unlink()
    sync_cli.resume()
    code, out, err = sync_cli.finish()
    assert (code, out) == (3, ""), err
    assert err.startswith("omg-ledger: error: ") and err.count("\n") == 1, err
    assert f"the ledger file {db} was removed or replaced while this sync ran" in err, err
    assert "kept" not in err, err
    assert not db.exists()
    _next_sync_makes(db, scale_home, reference)
    assert db.stat().st_mode & 0o777 == 0o600


def _next_sync_makes(db, scale_home, reference) -> None:
    """The next sync of the home into ``db`` (after a sync that was stopped) makes the
    ledger a cold sync makes."""
    engine = open_ledger(str(db))
    try:
        sync(engine, [Home.from_path(str(scale_home), "scale")])
        after = dump(engine)
    finally:
        engine.dispose()
    assert after == reference, diff(after, reference)


def _own_temporary_work_dirs() -> list[str]:
    import tempfile

    return sorted(name for name in os.listdir(tempfile.gettempdir())
                  if name.startswith(f"omg-ledger-sync-{os.getpid()}-"))


@pytest.mark.postgres
def test_on_postgresql_workers_hand_their_rows_over_through_temporary_work_files(scale_home, reference, pg_url):
    """The same pool into a PostgreSQL ledger: the work files are in a temporary
    directory named after this process (a ledger that is no file has no "beside"), read
    back by the writer and inserted as held-back rows are. Same ledger as SQLite's inline
    path; nothing left behind."""
    import tempfile

    seen = []

    def progress(stage, done, total):
        if stage == "sync" and done:
            seen.append([sorted(f for f in os.listdir(os.path.join(tempfile.gettempdir(), d)) if f.endswith(".sqlite"))
                         for d in _own_temporary_work_dirs()])

    assert _own_temporary_work_dirs() == []
    engine = open_ledger(pg_url)
    try:
        report = sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2, batch_runs=100, progress=progress)
        ours = dump(engine)
    finally:
        engine.dispose()
    assert seen[0] == [["worker-0.0.sqlite", "worker-1.0.sqlite"]], seen
    assert _own_temporary_work_dirs() == []
    assert (report.runs_changed, report.problems) == (SCALE_RUNS, [])
    assert ours == reference, diff(ours, reference)


@pytest.mark.postgres
def test_on_postgresql_a_worker_killed_mid_sync_loses_no_committed_run(scale_home, reference, pg_url, monkeypatch,
                                                                        chunks_of_8):
    runs = sorted(p.name for p in (scale_home / "runs").iterdir())
    engine = open_ledger(pg_url)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(sync_module, "_prepare_new_run", _die_at(runs[200], pg_url, runs_first=200))
            with pytest.raises(SyncWorkerLost):
                sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2, batch_runs=50)
        with engine.connect() as conn:
            held = sorted(r for (r,) in conn.exec_driver_sql("SELECT run_id FROM runs"))
        assert held == runs[:200]  # the four batches before the victim's, whole (compared below)
        assert _own_temporary_work_dirs() == []
        sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2)
        after = dump(engine)
    finally:
        engine.dispose()
    assert after == reference, diff(after, reference)


def test_workers_move_to_new_work_files_and_the_writer_deletes_the_copied_ones(
        scale_home, reference, tmp_path, monkeypatch, chunks_of_8):
    """With a new file every 20 runs a worker (files of 24: chunks of 8): a file copied
    whole that its worker has left is deleted at the commit, so the work files hold the
    runs ahead of the writer, not the sync's second copy of everything."""
    from omg_ledger import workfile

    monkeypatch.setattr(workfile, "RUNS_PER_FILE", 20)
    db = tmp_path / "ledger.sqlite"
    seen, report = _sync_watching_work_files(db, scale_home, workers=2, batch_runs=50)
    files = [[name for name in names if name.endswith(".sqlite")] for names in seen]
    generations = {int(name.split(".")[1]) for names in files for name in names}
    # 305 runs: one worker read at least 153, in files of 24 runs: 7 or more files.
    assert max(generations) >= 6, files
    # After the last commit every file its worker had left, copied whole, is gone: of
    # the seven or more one of them wrote, a worker keeps the last it wrote runs in, and
    # the empty one it may have begun after it.
    left: dict[str, list[int]] = {}
    for name in files[-1]:
        worker, generation, _ = name.split(".")
        left.setdefault(worker, []).append(int(generation))
    assert all(len(gens) <= 2 and max(gens) - min(gens) == len(gens) - 1 for gens in left.values()), files[-1]
    assert report.runs_changed == SCALE_RUNS
    _assert_ledger_is(db, reference)


AWKWARD = ["back\\slash", "tab\there", "new\nline", "carriage\rreturn", "\\N", "\\.", "", "ü ✓ 𝄞",
           "NUL\x00inside", "trailing\\"]


@pytest.mark.postgres
def test_awkward_text_through_postgresqls_copy_is_stored_as_sqlite_stores_it(tmp_path, pg_url):
    """COPY's text format escapes backslash, tab, newline and CR and spells NULL \\N: values
    that look like its escapes, or hold them, reach PostgreSQL through the workers' COPY
    text as they reach SQLite through the inline path (NUL as U+FFFD in derived text and
    in events.node_id, the event's raw line byte for byte)."""
    from .builders import ev, graph, write_run

    home = tmp_path / "home"
    for i, text in enumerate(AWKWARD):
        node = f"node {text}"
        write_run(home, f"r{i:02d}", [
            ev("run_started", 0, graph=f"g {text}", graph_version="1", node_count=1),
            ev("node_started", 1, node_id=node, round=1),
            ev("node_failed", 2, node_id=node, round=1, detail=f"failed: {text}", judged=False),
            ev("run_finished", 3, outcome="failed", detail=text),
        ], state={"graph": graph(node), "nodes": {node: {"state": "FAIL", "detail": text}}})
    ledgers = {}
    for url, workers in ((str(tmp_path / "inline.sqlite"), 0), (pg_url, 2)):
        engine = open_ledger(url)
        try:
            report = sync(engine, [Home.from_path(str(home), "h")], workers=workers)
            ledgers[workers] = dump(engine)
        finally:
            engine.dispose()
        assert report.runs_changed == len(AWKWARD)
    assert ledgers[2] == ledgers[0], diff(ledgers[2], ledgers[0])
    raw = [dict(row)["raw"] for row in ledgers[2]["events"]]
    assert any("\\\\N" in line for line in raw) and any("\\u0000" in line for line in raw)
    assert "node NUL\ufffdinside" in {dict(row)["node_id"] for row in ledgers[2]["events"]}


def test_where_sqlite_cannot_attach_a_work_file_read_only_the_writer_reads_it_back(
        scale_home, reference, tmp_path, monkeypatch):
    """A SQLite built without URI filenames cannot ATTACH a file read-only: the writer
    then reads the rows back itself and inserts them (booleans stay 0/1). The same ledger."""
    monkeypatch.setattr(sync_module, "attaches_read_only", lambda path: False)
    db = tmp_path / "ledger.sqlite"
    _, report = _sync_watching_work_files(db, scale_home, workers=2)
    assert report.runs_changed == SCALE_RUNS
    _assert_ledger_is(db, reference)


@pytest.mark.postgres
def test_with_no_room_for_work_files_the_runs_are_read_by_the_writer(scale_home, reference, pg_url, tmp_path,
                                                                   monkeypatch):
    """$TMPDIR under a regular file (no directory can be made there): no pool, no error,
    the same ledger."""
    import tempfile

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    engine = open_ledger(pg_url)
    try:
        report = sync(engine, [Home.from_path(str(scale_home), "scale")], workers=2)
        ours = dump(engine)
    finally:
        engine.dispose()
    assert (report.runs_changed, report.problems) == (SCALE_RUNS, [])
    assert ours == reference, diff(ours, reference)


def test_a_directory_a_worker_looked_at_in_its_racy_window_is_looked_at_again_however_late_the_writer_gets_it(
        tmp_path):
    """A directory's mtime is remembered only when it was old enough at the moment the
    directory was looked at (an entry made in the same clock tick right after the listing
    leaves the mtime as it was). A worker's run reaches the writer later, here 9.5 s of
    the clock later: judged by the writer's clock, the racy mtime passed as old, and a
    state.json made in its tick was never seen by any later sync."""
    from .builders import write_run

    home = tmp_path / "home"
    run_id = "20261129-101500.000000001-1"
    run_dir = write_run(home, run_id, [{"schema": 3, "ts": "2026-11-29T10:15:00Z", "event": "run_started"}])
    mtime = os.stat(run_dir).st_mtime_ns
    writer = os.getpid()
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    # The clock of whoever asks: a worker, half a second after the directory changed; the writer, 10 s after.
    report = sync(engine, [Home.from_path(str(home), "h")], workers=2,
                  clock_ns=lambda: mtime + (10 if os.getpid() == writer else 0.5) * 10**9)
    assert report.runs_changed == 1

    # state.json made in the same tick as the listing: the directory's mtime is what it was.
    (run_dir / "state.json").write_text(json.dumps({"schema": 3, "run_id": run_id, "status": "running"}))
    os.utime(run_dir, ns=(mtime, mtime))
    report = sync(engine, [Home.from_path(str(home), "h")], workers=0, clock_ns=lambda: mtime + 20 * 10**9)
    with engine.connect() as conn:
        has_state = conn.exec_driver_sql("SELECT has_state FROM runs WHERE run_id = ?", (run_id,)).scalar_one()
    engine.dispose()
    assert report.runs_changed == 1 and has_state


def test_a_worker_started_after_its_writer_was_killed_goes_at_once_and_frees_the_ledger(tmp_path):
    """A worker is forked while the writer holds the ledger's sync lock, so it holds it
    too. It dies with the writer by the signal it asks for as it starts; on a loaded
    machine a worker may start only after the writer was killed (kill -9 as soon as the
    first batch committed), and then no signal comes: it waited for work for ever, and the
    next sync found the ledger locked ("another sync holds this ledger"). Here the worker
    is held at its start until its writer is dead, by a real kill -9."""
    import fcntl
    import multiprocessing

    from sqlalchemy import create_engine

    from omg_ledger.store import work_tables

    from .test_faults import lock_is_held

    lock_path = tmp_path / "ledger.sqlite.sync-lock"
    tables = work_tables(create_engine("sqlite://"))
    gate_r, gate_w = os.pipe()
    told_r, told_w = os.pipe()
    writer = os.fork()
    if writer == 0:  # the writer: holds the lock, forks its worker, waits to be killed
        try:
            lock = os.open(lock_path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)
            paths = multiprocessing.get_context("fork").SimpleQueue()
            paths.put(str(tmp_path / "worker-0.0.sqlite"))
            writer_pid = os.getpid()
            worker = os.fork()
            if worker == 0:  # the worker: starts only once the gate opens
                os.read(gate_r, 1)
                sync_module._worker_started(paths, tables, time.time_ns, writer_pid)
                time.sleep(3600)  # waiting for work, as a pool worker does
                os._exit(0)
            os.write(told_w, b"%d\n" % worker)
            time.sleep(3600)
        finally:
            os._exit(0)
    worker = int(os.read(told_r, 64))
    os.kill(writer, signal.SIGKILL)
    os.waitpid(writer, 0)
    os.write(gate_w, b"x")  # the worker starts now, its writer dead
    deadline = time.monotonic() + 60
    try:
        while lock_is_held(str(lock_path)):
            assert time.monotonic() < deadline, "the worker still holds the ledger's sync lock 60 s on"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
        for fd in (gate_r, gate_w, told_r, told_w):
            os.close(fd)

