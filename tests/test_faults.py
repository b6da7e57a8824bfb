"""Fault injection with real processes and real files (no mocks): kill -9 at random
instants, writers appending under a reading sync, overlapping syncs, files that change
identity, and a database that is read-only, full, too new or half-migrated.

The yardstick everywhere is tests/ledger_dump.py: after the fault and one more sync,
the ledger must hold exactly what one clean sync of the same files produces
(DESIGN.md invariants 1-3). See tests/README.md for the fault model.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from select import POLLIN, poll

import orjson
import pytest
from sqlalchemy import select

from omg_ledger import schema
from omg_ledger.db import current_revision, head_revision, open_ledger
from omg_ledger.sync import Home, sync

from .builders import age_tree, copy_run, retarget
from .conftest import CORPUS_HOME
from .ledger_dump import diff, dump, runs_of

KILL_TRIALS = int(os.environ.get("OMG_LEDGER_KILL_TRIALS", "60"))
SEED = int(os.environ.get("OMG_LEDGER_FAULT_SEED", str(random.randrange(1 << 30))))
CLI = [sys.executable, "-m", "omg_ledger.cli"]
LONG_RUN = "20261129-181522.329723440-2"  # the corpus run with the longest stream


def cli(*args: object, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kwargs)


def popen(*args: object, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def assert_clean_exit(result, code: int = 0) -> None:
    assert result.returncode == code, f"exit {result.returncode}, expected {code}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def writable_tree(root: Path) -> None:
    for r, dirs, files in os.walk(root):
        for n in dirs:
            os.chmod(os.path.join(r, n), 0o700)
        for n in files:
            os.chmod(os.path.join(r, n), 0o600)


def make_home(root: Path, copies: int = 1) -> Path:
    """The real corpus, each run copied ``copies`` times under new run ids."""
    (root / "runs").mkdir(parents=True)
    for src in sorted((CORPUS_HOME / "runs").iterdir()):
        for i in range(copies):
            copy_run(src, root / "runs" / (src.name if copies == 1 else f"{src.name}-x{i}"))
    shutil.copytree(CORPUS_HOME / "plans", root / "plans")
    writable_tree(root)
    return root


def lib_sync(db: str | Path, home: Path):
    engine = open_ledger(str(db))
    try:
        return sync(engine, [Home.from_path(str(home))])
    finally:
        engine.dispose()


def clean_dump(tmp_path: Path, home: Path, name: str = "clean", cache_hints: bool = False):
    db = tmp_path / f"{name}.sqlite"
    for suffix in ("", "-wal", "-shm", ".sync-lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{db}{suffix}")
    lib_sync(db, home)
    return dump(str(db), cache_hints=cache_hints)


def assert_same(actual, expected, what: str) -> None:
    if actual != expected:
        pytest.fail(f"{what}: ledger differs from a clean sync (seed {SEED})\n{diff(actual, expected)}")


def assert_runs_atomic(partial, clean_runs, what: str) -> int:
    """Every run present in a killed ledger is exactly its clean self (never a mix).
    Returns how many runs it holds."""
    held = runs_of(partial)
    for key, tables in held.items():
        if tables != clean_runs.get(key):
            pytest.fail(f"{what}: run {key} is half-written\n"
                        f"{diff(tables, clean_runs.get(key, {}))}")
    return len(held)


def lock_is_held(lock_path: str) -> bool:
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def big_home(tmp_path_factory) -> Path:
    """150 real runs (the 25-run corpus ×6), mtimes aged: big enough that a kill lands
    mid-run and mid-transaction, small enough for 60 kills in CI's time budget."""
    home = make_home(tmp_path_factory.mktemp("big") / "home", copies=6)
    age_tree(home)
    return home


# -- kill -9 at random instants ----------------------------------------------------------


# Kills are aimed by progress, not by time, so every kill lands mid-batch whatever the
# machine's speed. The victim is a real sync (the library's `sync` with a progress
# callback, VICTIM_BATCH runs per transaction) in its own process. After each batch it
# commits, it writes the number of runs done to a FIFO; the test SIGKILLs it as soon as
# it reads the trial's target k. The victim goes on working meanwhile (the kill usually
# lands inside the next batch's transaction), but it never gets past run k+2 batches:
# there it waits to be killed. So a killed ledger holds between k and k + 2 batches of
# runs, by construction.
#
# "Warm" victims are forked from a zygote that has already imported omg_ledger, so the
# interpreter's ~0.6 s of imports is not paid 60 times on a 2-core machine; every fifth
# trial is "cold" (a fresh interpreter from exec).
VICTIM = r"""
import json, os, signal, sys
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync

def drive(db, home, fifo, stop_at):
    out = os.open(fifo, os.O_WRONLY)
    stop_at = int(stop_at)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # held pending until sigwait takes it

    def progress(stage, done, total):
        if stage != "sync" or done == 0:
            return
        os.write(out, b"%d\n" % done)
        if done == stop_at:
            # As far as this victim may go: wait here, holding the ledger, for the kill
            # (or SIGUSR1, which lets it finish).
            signal.sigwait({signal.SIGUSR1})

    engine = open_ledger(db)
    report = sync(engine, [Home.from_path(home)], progress=progress, batch_runs=@BATCH@)
    engine.dispose()
    print(json.dumps(report.as_dict()), flush=True)
"""
# Small enough that a 150-run sync commits 30 batches (kills land in all of them); a
# divisor of the 50 runs test_second_sync_… pauses at.
VICTIM_BATCH = 5
VICTIM = VICTIM.replace("@BATCH@", str(VICTIM_BATCH))
ZYGOTE = VICTIM + r"""
while request := sys.stdin.readline():
    args, errors = json.loads(request)
    pid = os.fork()
    if pid == 0:
        fd = os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        try:
            drive(*args)
        except BaseException:
            import traceback
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    print(pid, flush=True)
    sys.stdin.readline()  # not reaped before the test says so: its pid cannot be recycled
    _, status = os.waitpid(pid, 0)
    print(status, flush=True)
"""
COLD_VICTIM = VICTIM + "\ndrive(*sys.argv[1:])\n"


class Zygote:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def start(self, args: list[str], errors: Path) -> int:
        self.proc.stdin.write(json.dumps([args, str(errors)]) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def wait(self) -> int:
        """The child's exit code, or -signal like Popen.returncode."""
        self.proc.stdin.write("reap\n")
        self.proc.stdin.flush()
        status = int(self.proc.stdout.readline())
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def read_progress(reader: int, pid: int, until: int | None) -> list[int]:
    """The run counts a victim reports on the FIFO ``reader``, up to ``until`` (or its
    exit, with None)."""
    reported: list[int] = []
    poller = poll()
    poller.register(reader, POLLIN)
    pending = b""
    while until is None or until not in reported:
        if not poller.poll(120_000):
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the victim reported nothing for 120 s (reported so far: {reported})")
        chunk = os.read(reader, 4096)
        if not chunk:
            break  # the victim exited
        pending += chunk
        *lines, pending = pending.split(b"\n")
        reported += [int(n) for n in lines]
    return reported


def run_victim(zygote: Zygote, db: Path, home: Path, cold: bool, kill_at: int | None,
               pause: float = 0.0) -> tuple[int, list[int]]:
    """Sync ``home`` into ``db`` in a victim process. With ``kill_at``, SIGKILL it
    ``pause`` seconds after it reports run ``kill_at`` committed (it waits for the kill
    two batches later). Returns its exit code and the progress counts it reported."""
    fifo = Path(f"{db}.progress")
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo, 0o600)
    # Opened before the victim starts, non-blocking: poll then waits for its first write,
    # and sees end-of-file once it has exited, however it died.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    args = [str(db), str(home), str(fifo), str(0 if kill_at is None else kill_at + 2 * VICTIM_BATCH)]
    errors = Path(f"{db}.stderr")
    errors.write_bytes(b"")
    proc = None
    if cold:
        with errors.open("wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", COLD_VICTIM, *args], stdout=subprocess.DEVNULL, stderr=err)
        pid = proc.pid
    else:
        pid = zygote.start(args, errors)
    reported: list[int] = []
    try:
        reported = read_progress(reader, pid, kill_at)
        if kill_at is not None and kill_at in reported:
            time.sleep(pause)
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(reader)
        code = proc.wait(timeout=120) if cold else zygote.wait()
        fifo.unlink()
    text = errors.read_text(errors="replace")
    assert "Traceback" not in text, text
    return code, reported


def _remove_ledger(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".sync-lock", ".stderr"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{db}{suffix}")


@pytest.mark.slow
def test_kill_9_during_sync_then_one_more_sync_equals_a_clean_sync(big_home, tmp_path):
    template = tmp_path / "template.sqlite"
    open_ledger(str(template)).dispose()  # migrated and empty: kills land in the sync proper
    assert not os.path.exists(f"{template}-wal")
    reference = tmp_path / "reference.sqlite"
    shutil.copyfile(template, reference)
    assert_clean_exit(cli("sync", "--db", reference, "--home", big_home))  # the clean sync, as operators run it
    clean = dump(str(reference), cache_hints=True)
    clean_runs = runs_of(clean)
    total_runs = len(clean_runs)
    zygote = Zygote()
    db = tmp_path / "unkilled.sqlite"
    shutil.copyfile(template, db)
    started = time.monotonic()
    code, reported = run_victim(zygote, db, big_home, False, None)
    per_run = (time.monotonic() - started) / total_runs
    per_batch = per_run * VICTIM_BATCH
    assert code == 0 and reported == [*range(VICTIM_BATCH, total_runs, VICTIM_BATCH), total_runs], (code, reported)
    assert_same(dump(str(db), cache_hints=True), clean, "the victim's sync, not killed")  # same sync as the CLI's
    _remove_ledger(db)

    rng = random.Random(SEED)
    # Targets are batch ends; the victim stops two batches later, before the last run.
    targets = (total_runs - 1) // VICTIM_BATCH - 2
    plan = []
    for i in range(KILL_TRIALS):
        # Targets stratified over the runs (each trial its own slice), so kills cover
        # the start, the middle and the end of the sync in every CI run.
        target = VICTIM_BATCH * (1 + int((i + rng.random()) * targets / KILL_TRIALS))
        # A pause of up to one batch's time after the report: the kill lands anywhere in
        # the next batch's reading and transaction, or later (at the stop, on a slow host).
        plan.append((i % 5 == 4, target, rng.random() * per_batch))
    rng.shuffle(plan)

    def killed_sync(i: int):
        db = tmp_path / f"trial-{i}.sqlite"
        shutil.copyfile(template, db)
        cold, target, pause = plan[i]
        return db, cold, target, pause, run_victim(zygote, db, big_home, cold, target, pause)

    within_next_run = 0
    test_started = time.monotonic()
    # Pipelined: the next victim runs in its own process while this one is checked.
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(killed_sync, 0)
        for i in range(KILL_TRIALS):
            db, cold, target, pause, (returncode, reported) = future.result()
            if i + 1 < KILL_TRIALS:
                future = pool.submit(killed_sync, i + 1)
            what = f"trial {i} ({'cold' if cold else 'warm'}, killed {pause * 1000:.1f} ms after run {target})"
            assert returncode == -signal.SIGKILL, f"{what}: exit {returncode}"
            assert target in reported, f"{what}: it reported {reported}"
            with contextlib.closing(sqlite3.connect(db)) as raw:
                assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",), what
            held = assert_runs_atomic(dump(str(db), cache_hints=True), clean_runs, what)
            assert target <= held <= target + 2 * VICTIM_BATCH < total_runs, \
                f"{what}: the killed ledger holds {held} runs"
            assert held % VICTIM_BATCH == 0, f"{what}: the killed ledger holds {held} runs, not whole batches"
            within_next_run += held == target
            lib_sync(db, big_home)  # the next sync finishes the job
            assert_same(dump(str(db), cache_hints=True), clean, what)
            _remove_ledger(db)
    zygote.close()
    elapsed = time.monotonic() - test_started
    print(f"kill -9: {KILL_TRIALS} trials in {elapsed:.1f}s, all mid-sync ({within_next_run} before the next batch "
          f"committed), {per_run * 1000:.1f} ms per run, seed {SEED}")


# -- writers appending while sync reads ----------------------------------------------------


def test_half_written_lines_are_not_events_until_complete(tmp_path):
    home = tmp_path / "home"
    run = home / "runs" / "growing"
    run.mkdir(parents=True)
    lines = retarget((CORPUS_HOME / "runs" / LONG_RUN / "events.jsonl").read_bytes(),
                     "growing").splitlines(keepends=True)
    # A line with multi-byte UTF-8, so a cut can land inside one character.
    lines.insert(3, orjson.dumps({"schema": 3, "ts": "2026-11-29T18:15:22.5Z", "event": "gate_paused",
                                  "node_id": "ünï/cödé", "detail": "détail ✓ 运行"}) + b"\n")
    full = b"".join(lines)
    rng = random.Random(SEED)
    utf8_cut = full.index("✓".encode()) + 1
    cuts = sorted({utf8_cut, len(lines[0]) // 2, len(lines[0]), *(rng.randrange(1, len(full)) for _ in range(14))})
    db = tmp_path / "ledger.sqlite"
    engine = open_ledger(str(db))
    written = 0
    stream = run / "events.jsonl"
    stream.touch()
    for cut in [*cuts, len(full)]:
        with open(stream, "ab") as f:  # a real append, as the engine does
            f.write(full[written:cut])
        written = cut
        report = sync(engine, [Home.from_path(str(home))])
        assert report.problems == [], f"cut at {cut}: {report.problems}"
        complete = full[:cut].count(b"\n")
        with engine.connect() as conn:
            raws = [r.raw for r in conn.execute(select(schema.events.c.raw).order_by(schema.events.c.line_no))]
        assert raws == [ln.rstrip(b"\n").decode() for ln in lines[:complete]], f"cut at {cut}"
    engine.dispose()
    assert_same(dump(str(db)), clean_dump(tmp_path, home), "after appends in pieces")


WRITER = r"""
import os, random, sys, time, orjson
paths, count, seed, chunks = sys.argv[1].split(os.pathsep), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
fds = [os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) for p in paths]
def emit(fd, data):
    # Usually one write (the contract); sometimes torn in two with a pause between, so
    # readers meet half a line.
    if rng.random() < 0.4:
        cut = rng.randrange(1, len(data))
        os.write(fd, data[:cut]); time.sleep(rng.random() * 0.004); os.write(fd, data[cut:])
    else:
        os.write(fd, data)
ts = "2026-11-29T18:15:12.5Z"
for fd in fds:
    emit(fd, orjson.dumps({"schema": 3, "ts": ts, "event": "run_started"}) + b"\n")
for i in range(count):
    if i % (count // chunks) == 0:
        sys.stdin.readline()  # paced by the test: a chunk of appends per round of syncs
    fd = fds[i % len(fds)]
    node = f"node-{i:05d}"
    emit(fd, orjson.dumps({"schema": 3, "ts": ts, "event": "node_started", "node_id": node}) + b"\n")
    emit(fd, orjson.dumps({"schema": 3, "ts": ts, "event": "node_passed", "node_id": node, "verdict": "PASS",
                           "cost_usd": 0.001 * (i % 7), "detail": "ok ✓" * (i % 5)}) + b"\n")
    time.sleep(rng.random() * 0.003)
print("done", flush=True)
"""


@pytest.mark.slow
def test_concurrent_writer_process_while_several_syncs_run(tmp_path):
    home = tmp_path / "home"
    streams = []
    for name in ("w1", "w2", "w3"):
        (home / "runs" / name).mkdir(parents=True)
        streams.append(str(home / "runs" / name / "events.jsonl"))
    count, rounds = 900, 4
    writer = subprocess.Popen([sys.executable, "-c", WRITER, os.pathsep.join(streams), str(count), str(SEED),
                               str(rounds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    db = tmp_path / "ledger.sqlite"
    # Rounds of syncs, some one at a time, some two at once; the writer appends a
    # chunk while each round runs (paced by the test, not by a clock, so every round
    # has a writer at work whatever the host's speed).
    for syncs in range(rounds):
        procs = [popen("sync", "--db", db, "--home", home, "--json") for _ in range(1 + syncs % 2)]
        writer.stdin.write("go\n")
        writer.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and "Traceback" not in err, err
            assert json.loads(out)["problems"] == []
    writer.stdin.close()
    assert writer.wait(timeout=120) == 0
    syncs = rounds
    assert_clean_exit(cli("sync", "--db", db, "--home", home))
    final = dump(str(db))
    assert_same(final, clean_dump(tmp_path, home), f"after {syncs} syncs under a writer")
    assert len(final["events"]) == 3 + 2 * count
    assert final["problems"] == []


# -- two syncs at once (cron overlap) ----------------------------------------------------


@pytest.mark.slow
def test_two_syncs_started_together_both_succeed_without_duplicates(big_home, tmp_path):
    db = tmp_path / "ledger.sqlite"  # does not exist yet: they also race to create + migrate it
    procs = [popen("sync", "--db", db, "--home", big_home, "--json") for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err and "locked" not in err, err
    changed = sorted(json.loads(out)["runs_changed"] for out, _ in outputs)
    assert changed == [0, 150], changed  # the second waited, then found nothing to do
    assert_same(dump(str(db)), clean_dump(tmp_path, big_home), "two overlapping syncs")


@pytest.mark.slow
def test_second_sync_with_wait_0_is_refused_and_a_report_runs_during_sync(big_home, tmp_path):
    """The first sync is held still mid-way (its progress callback waits at run 50,
    holding the ledger), so the overlap is there by construction, not by timing."""
    from omg_ledger.errors import LedgerBusy
    from omg_ledger.reports.runs import list_runs

    db = tmp_path / "ledger.sqlite"
    fifo = tmp_path / "progress"
    os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    paused_at = 50
    first = subprocess.Popen([sys.executable, "-c", COLD_VICTIM, str(db), str(big_home), str(fifo), str(paused_at)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert paused_at in read_progress(reader, first.pid, paused_at), first.stderr.read()
        assert lock_is_held(f"{db}.sync-lock")
        engine = open_ledger(str(db))
        try:
            # A second sync while the first holds the ledger: refused at once with --wait 0.
            with pytest.raises(LedgerBusy, match="another sync or an export holds"):
                sync(engine, [Home.from_path(str(big_home))], wait_seconds=0)
            # Reports while the sync is mid-way (WAL: readers do not block and are not
            # blocked): they see the runs committed so far, all of them and no more.
            assert len(list_runs(engine)) == paused_at
        finally:
            engine.dispose()
        report = cli("runs", "--db", db, "--json")
        assert_clean_exit(report)
        assert len(json.loads(report.stdout)) == paused_at
        os.kill(first.pid, signal.SIGUSR1)  # let it finish
        out, err = first.communicate(timeout=120)
    finally:
        os.close(reader)
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0 and "Traceback" not in err, err
    assert json.loads(out)["runs_changed"] == 150
    assert_same(dump(str(db)), clean_dump(tmp_path, big_home), "sync with a refused second sync")


def test_cli_sync_while_another_holds_the_ledger_exits_75(big_home, tmp_path):
    """What cron sees: the lock a running sync holds (taken here by a real process, so
    the test does not depend on how long a sync takes), `--wait 0`, exit 75."""
    db = tmp_path / "ledger.sqlite"
    open_ledger(str(db)).dispose()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"), f"{db}.sync-lock"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        refused = cli("sync", "--db", db, "--home", big_home, "--wait", "0")
        assert refused.returncode == 75 and "Traceback" not in refused.stderr, refused.stderr
        assert "another sync or an export holds" in refused.stderr
        waited = cli("sync", "--db", db, "--home", big_home, "--wait", "0.5")
        assert waited.returncode == 75 and time.monotonic() - started >= 0.5
    finally:
        holder.kill()
        holder.wait()
    assert_clean_exit(cli("sync", "--db", db, "--home", big_home))  # the lock died with its holder


def test_a_ledger_named_through_a_symlink_takes_the_same_sync_lock(big_home, tmp_path):
    """Cron naming the ledger through a symlink, a user through its path: one lock, so the
    second sync waits (here: refused, --wait 0) instead of racing the first."""
    real = tmp_path / "data" / "ledger.sqlite"
    real.parent.mkdir()
    open_ledger(str(real)).dispose()
    link = tmp_path / "ledger.sqlite"
    link.symlink_to(real)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"), f"{real}.sync-lock"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        refused = cli("sync", "--db", link, "--home", big_home, "--wait", "0")
        assert refused.returncode == 75 and "another sync or an export holds" in refused.stderr, refused.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert not os.path.lexists(f"{link}.sync-lock")
    assert_clean_exit(cli("sync", "--db", link, "--home", big_home))


def test_a_sync_lock_path_that_is_a_symlink_is_refused_not_followed(tmp_path):
    """The lock file is created beside the ledger; a symlink planted in its place (into a
    home, say) is not followed: nothing is created where it points, one line, exit 3."""
    db = tmp_path / "ledger.sqlite"
    target = tmp_path / "elsewhere" / "planted"
    target.parent.mkdir()
    os.symlink(target, f"{db}.sync-lock")
    result = cli("sync", "--db", db, "--home", CORPUS_HOME)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("omg-ledger: error: cannot create the sync lock")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not os.path.lexists(target)


def _exclusive_lock_holder(db: Path) -> subprocess.Popen:
    """A real process holding SQLite's exclusive lock on ``db`` (locking_mode EXCLUSIVE)
    for two minutes; it prints 'held' once the lock is taken."""
    return subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA locking_mode = EXCLUSIVE')\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "c.execute('SELECT count(*) FROM runs').fetchone()\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"), str(db)], stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("command", [["cost", "--json"], ["runs", "--json"], ["audit"], ["sql", "SELECT 1"],
                                     ["sync", "--home", str(CORPUS_HOME)]])
def test_a_ledger_another_process_locks_exclusively_is_busy_exit_75(tmp_path, command):
    """A program holding SQLite's exclusive lock (locking_mode EXCLUSIVE: a real process,
    a real lock) locks readers out too: that is "busy, try again" for cron (75), not a
    broken database (3). The busy timeout is cut to 0.2 s in the child: the wait is
    SQLite's own, the answer at its end is what is tested."""
    db = tmp_path / "ledger.sqlite"
    assert_clean_exit(cli("sync", "--db", db, "--home", CORPUS_HOME))
    holder = _exclusive_lock_holder(db)
    short_wait = ("import sys; import omg_ledger.db as d; d.SQLITE_BUSY_TIMEOUT_MS = 200; "
                  "import omg_ledger.ledger as l; l.SQLITE_BUSY_TIMEOUT_MS = 200; "
                  "from omg_ledger.cli import main; sys.argv[0] = 'omg-ledger'; main()")
    try:
        assert holder.stdout.readline() == "held\n"
        result = subprocess.run([sys.executable, "-c", short_wait, *command, "--db", str(db)],
                                capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 75, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"omg-ledger: error: the ledger database {db} is locked by another process"
                                    if command[0] != "sync" else "omg-ledger: error: ")
    assert "locked by another process" in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert_clean_exit(cli(*command, "--db", db), code=1 if command[0] == "audit" else 0)  # the lock died with it


def test_a_ledger_locked_exclusively_is_waited_for_once_not_twice(tmp_path):
    """The check that --db names a ledger (not another program's SQLite file) reads the
    file first: when another process holds it locked past the busy timeout, that check
    is the answer (LedgerBusy), instead of passing it on to an open that would wait as
    long again (a `runs` took 60 s to say "busy" with the 30 s timeout)."""
    db = tmp_path / "ledger.sqlite"
    assert_clean_exit(cli("sync", "--db", db, "--home", CORPUS_HOME))
    holder = _exclusive_lock_holder(db)
    check = ("import sys; import omg_ledger.ledger as l; l.SQLITE_BUSY_TIMEOUT_MS = 200\n"
             "from omg_ledger.db import check_database_target\n"
             "from omg_ledger.errors import LedgerBusy\n"
             "try:\n    check_database_target(sys.argv[1])\nexcept LedgerBusy as exc:\n    print('busy:', exc)\n"
             "else:\n    print('passed on')\n")
    try:
        assert holder.stdout.readline() == "held\n"
        result = subprocess.run([sys.executable, "-c", check, str(db)], capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert result.stdout.startswith(f"busy: the ledger database {db} is locked by another process"), result


# -- files that change identity --------------------------------------------------------------


@pytest.fixture
def home(tmp_path) -> Path:
    home = make_home(tmp_path / "home")
    age_tree(home)
    return home


def _events_of(db: Path, run_id: str) -> list[str]:
    engine = open_ledger(str(db))
    try:
        with engine.connect() as conn:
            return [r.raw for r in conn.execute(
                select(schema.events.c.raw).join(schema.runs, schema.runs.c.id == schema.events.c.run_pk)
                .where(schema.runs.c.run_id == run_id).order_by(schema.events.c.line_no))]
    finally:
        engine.dispose()


def test_stream_truncated_while_sync_was_not_running(home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    lib_sync(db, home)
    stream = home / "runs" / LONG_RUN / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    with open(stream, "r+b") as f:
        f.truncate(sum(map(len, lines[:3])))
    lib_sync(db, home)
    assert _events_of(db, LONG_RUN) == [ln.rstrip(b"\n").decode() for ln in lines[:3]]
    assert_same(dump(str(db)), clean_dump(tmp_path, home), "after truncation")
    with open(stream, "r+b") as f:  # truncated into the middle of a line, then it grows back
        f.truncate(len(lines[0]) + 7)
    lib_sync(db, home)
    assert _events_of(db, LONG_RUN) == [lines[0].rstrip(b"\n").decode()]
    stream.write_bytes(b"".join(lines))
    lib_sync(db, home)
    assert_same(dump(str(db)), clean_dump(tmp_path, home), "after truncation mid-line and regrowth")


def _other_stream(length_at_least: int) -> bytes:
    """Different real bytes (other runs' events, as this run's) at least as long as asked."""
    data = b""
    for p in sorted((CORPUS_HOME / "runs").glob("*/events.jsonl")):
        if p.parent.name != LONG_RUN:
            data += retarget(p.read_bytes(), LONG_RUN)
        if len(data) >= length_at_least:
            return data
    raise AssertionError("corpus too small")


@pytest.mark.parametrize("how", ["rename-same-size", "rename-larger", "in-place-same-size", "in-place-larger",
                                 "delete-and-recreate"])
def test_stream_replaced_by_a_different_file(how, home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    lib_sync(db, home)
    stream = home / "runs" / LONG_RUN / "events.jsonl"
    old = stream.read_bytes()
    other = _other_stream(len(old) + 500)
    new = other[: other.rindex(b"\n", 0, len(old) - 1) + 1] if how.endswith("same-size") else other
    if how.endswith("same-size"):
        new = new + b" " * (len(old) - len(new) - 1) + b"\n"  # blank padding line: same size exactly
        assert len(new) == len(old)
    inode = stream.stat().st_ino
    if how.startswith("rename"):
        tmp = stream.with_name("events.jsonl.tmp")
        tmp.write_bytes(new)
        os.rename(tmp, stream)
    elif how.startswith("in-place"):
        with open(stream, "r+b") as f:
            f.write(new)
    else:
        stream.unlink()
        stream.write_bytes(new)  # the freed inode is often reused at once
    if how.startswith("in-place"):
        assert stream.stat().st_ino == inode
    lib_sync(db, home)
    assert _events_of(db, LONG_RUN) == [ln.decode() for ln in new.splitlines() if ln.strip()]
    assert_same(dump(str(db)), clean_dump(tmp_path, home), f"after {how}")


def test_state_json_atomic_rename_same_content_is_not_a_rebuild(home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    assert_clean_exit(cli("sync", "--db", db, "--home", home))
    state = home / "runs" / LONG_RUN / "state.json"
    before = dump(str(db))
    tmp = state.with_name("state.json.tmp")
    tmp.write_bytes(state.read_bytes())
    os.rename(tmp, state)  # new inode, identical bytes: what the engine does after every node
    result = cli("sync", "--db", db, "--home", home, "--json")
    assert_clean_exit(result)
    report = json.loads(result.stdout)
    assert report["events_ingested"] == 0 and report["problems"] == []
    assert report["runs_changed"] == 0  # nothing reconcile reads changed: not a rebuild
    after = dump(str(db))
    for table in after:
        if table != "snapshot_files":  # its identity columns record the new inode
            assert after[table] == before[table], table
    assert_same(after, clean_dump(tmp_path, home), "after an identical atomic rename")
    # New content: must be picked up.
    data = json.loads(state.read_bytes())
    node = next(iter(data["nodes"]))
    data["nodes"][node]["cost_usd"] = 7.25
    tmp.write_bytes(json.dumps(data).encode())
    os.rename(tmp, state)
    result = cli("sync", "--db", db, "--home", home, "--json")
    assert_clean_exit(result)
    assert json.loads(result.stdout)["runs_changed"] == 1
    assert_same(dump(str(db)), clean_dump(tmp_path, home), "after a changed atomic rename")


def test_run_directory_deleted_then_recreated_with_other_content(home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    lib_sync(db, home)
    run = home / "runs" / LONG_RUN
    kept = tmp_path / "kept"
    shutil.move(run, kept)
    report = lib_sync(db, home)
    assert report.runs_gone == 1
    listed = cli("runs", "--db", db, "--json")
    assert_clean_exit(listed)
    rows = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert rows[LONG_RUN]["gone"] is True and len(rows) == 25
    assert len(_events_of(db, LONG_RUN)) == (kept / "events.jsonl").read_bytes().count(b"\n")
    # Recreated with different content under the same name.
    copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", run)
    writable_tree(run)
    lib_sync(db, home)
    rows = {r["run_id"]: r for r in json.loads(cli("runs", "--db", db, "--json").stdout)}
    assert rows[LONG_RUN]["gone"] is False and len(rows) == 25
    assert_same(dump(str(db)), clean_dump(tmp_path, home), "after delete + recreate")


# -- database trouble ------------------------------------------------------------------------


def _files_under(path: Path) -> list[str]:
    return sorted(str(p) for p in path.rglob("*")) if path.exists() else []


def test_ledger_path_under_a_regular_file_is_a_clear_error(home, tmp_path):
    """As root, chmod does not stop writes; a parent that is a regular file (ENOTDIR)
    fails for everyone."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    result = cli("sync", "--db", blocker / "sub" / "ledger.sqlite", "--home", home)
    assert_clean_exit(result, 3)
    assert "error:" in result.stderr and "ledger" in result.stderr
    assert blocker.read_text() == "x"


@contextlib.contextmanager
def read_only_bind_mount(path: Path):
    """`path` made read-only for everyone, root included (a read-only bind mount)."""
    if os.geteuid() != 0:
        os.chmod(path, 0o500)
        try:
            yield
        finally:
            os.chmod(path, 0o700)
        return
    r = subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here ({r.stderr.strip()}); ENOTDIR case covers the rest")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_ledger_in_a_read_only_directory(home, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    existing = tmp_path / "ro-existing"
    existing.mkdir()
    lib_sync(existing / "ledger.sqlite", home)
    digest = hashlib.sha256((existing / "ledger.sqlite").read_bytes()).hexdigest()
    (home / "runs" / LONG_RUN / "events.jsonl").open("ab").write(
        orjson.dumps({"schema": 3, "ts": "2026-11-29T18:16:00Z", "event": "run_started"}) + b"\n")
    with read_only_bind_mount(ro):
        result = cli("sync", "--db", ro / "ledger.sqlite", "--home", home)
        assert_clean_exit(result, 3)
        assert "error:" in result.stderr
        assert _files_under(ro) == []
    with read_only_bind_mount(existing):
        result = cli("sync", "--db", existing / "ledger.sqlite", "--home", home)
        assert_clean_exit(result, 3)
        # SQLite says only "unable to open database file": the line says why.
        assert f"(its directory {existing} is not writable here: to write the ledger SQLite makes " \
               "ledger.sqlite-wal and ledger.sqlite-shm beside it" in result.stderr, result.stderr
    assert hashlib.sha256((existing / "ledger.sqlite").read_bytes()).hexdigest() == digest


@contextlib.contextmanager
def small_filesystem(path: Path, size: str):
    """A tmpfs of ``size`` at ``path``; yields a function that grows it."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        yield None
        return
    try:
        yield lambda new: subprocess.run(["mount", "-o", f"remount,size={new}", str(path)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.slow
def test_full_disk_is_a_clear_error_and_a_later_sync_with_space_succeeds(big_home, tmp_path):
    mount = tmp_path / "small"
    clean = clean_dump(tmp_path, big_home, cache_hints=True)
    # Room for a migrated empty ledger (~0.8 MB with its 16 KiB pages), not for the whole
    # ledger of the 150 runs (~2.2 MB, and its WAL): the disk fills mid-sync.
    with small_filesystem(mount, "1500k") as grow:
        db = mount / "ledger.sqlite"
        if grow is None:  # no tmpfs: RLIMIT_FSIZE makes writes past the limit fail (EFBIG)
            mount.mkdir(exist_ok=True)
            result = cli("sync", "--db", db, "--home", big_home, preexec_fn=_limit_file_size(1_500_000))
        else:
            result = cli("sync", "--db", db, "--home", big_home)
        assert_clean_exit(result, 3)
        assert "error:" in result.stderr and ("full" in result.stderr or "large" in result.stderr
                                               or "disk" in result.stderr), result.stderr
        if grow is not None:
            grow("64m")
        # No half-written run, and the next sync with space finishes the job.
        assert_runs_atomic(dump(str(db), cache_hints=True), runs_of(clean), "after disk full")
        assert_clean_exit(cli("sync", "--db", db, "--home", big_home))
        assert_same(dump(str(db), cache_hints=True), clean, "after disk full and a retry")


def test_a_full_file_system_under_the_ledger_is_named_when_sqlite_says_only_disk_io_error(home, tmp_path):
    """A ledger closed cleanly has no -shm file; with no byte free beside it SQLite cannot
    make one, and every command fails with SQLite's bare "disk I/O error", which reads as
    failing hardware. The error says the file system is full (exit 3); freed, all is well."""
    mount = tmp_path / "small"
    with small_filesystem(mount, "4m") as grow:
        if grow is None:
            pytest.skip("no tmpfs can be mounted here (root needed): a full file system cannot be made")
        db = mount / "ledger.sqlite"
        lib_sync(db, home)
        assert sorted(p.name for p in mount.iterdir()) == ["ledger.sqlite", "ledger.sqlite.sync-lock"]
        filler = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(filler, bytes(1 << 16))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(filler)
        for args in (["runs"], ["audit"], ["sync", "--home", home]):
            result = cli(*args, "--db", db)
            assert_clean_exit(result, 3)
            assert result.stderr.startswith("omg-ledger: error: ") and result.stderr.count("\n") == 1, result.stderr
            assert "disk I/O error (the file system holding it is full" in result.stderr, result.stderr
        (mount / "filler").unlink()
        assert_clean_exit(cli("runs", "--db", db))
        assert_clean_exit(cli("sync", "--db", db, "--home", home))


@pytest.fixture(scope="module")
def scale_home(tmp_path_factory) -> Path:
    import tarfile

    home = tmp_path_factory.mktemp("scale") / "home"
    with tarfile.open(CORPUS_HOME.parents[1] / "corpus-scale" / "home.tar.gz") as archive:
        archive.extractall(home, filter="data")
    return home


@pytest.mark.slow
def test_a_disk_that_fills_anywhere_in_a_pooled_sync_is_one_line_and_exit_3(scale_home, tmp_path):
    """305 runs (the worker pool's path) into a ledger on disks of 14 to 28 MiB (its ledger
    is ~14 MiB, with its work files and WAL more): the disk fills in a worker's work file,
    in the writer's copy of a batch inside SQLite, or at a commit. Each is one line naming
    what could not be written, and exit 3 for cron (the test above: a later sync finishes)."""
    for mib in range(14, 29, 2):
        with small_filesystem(tmp_path / f"small-{mib}", f"{mib}m") as grow:
            db = tmp_path / f"small-{mib}" / "ledger.sqlite"
            if grow is None:  # no tmpfs: RLIMIT_FSIZE makes writes past the limit fail (EFBIG)
                result = cli("sync", "--db", db, "--home", scale_home,
                             preexec_fn=_limit_file_size(mib * 2**20 // 2))
            else:
                result = cli("sync", "--db", db, "--home", scale_home)
            if result.returncode == 0:
                continue  # it fitted
            assert_clean_exit(result, 3)
            assert "cannot write" in result.stderr and ("full" in result.stderr or "large" in result.stderr), \
                result.stderr


def test_database_from_a_newer_version_is_refused_naming_both_revisions(home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    lib_sync(db, home)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffff9999'")
    conn.close()
    before = dump(str(db), cache_hints=True)
    (home / "runs" / LONG_RUN / "events.jsonl").open("ab").write(
        orjson.dumps({"schema": 3, "ts": "2026-11-29T18:16:00Z", "event": "run_started"}) + b"\n")
    for args in (["sync", "--home", home], ["runs"], ["show", LONG_RUN], ["db", "upgrade"]):
        result = cli(*args, "--db", db)
        assert_clean_exit(result, 3)
        assert "ffff9999" in result.stderr and head_revision() in result.stderr, result.stderr
    assert dump(str(db), cache_hints=True) == before  # refused before writing anything


def _schema_of(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


@pytest.mark.slow
def test_migration_killed_midway_is_clean_or_resumable(home, tmp_path):
    reference = tmp_path / "reference.sqlite"
    started = time.monotonic()
    assert_clean_exit(cli("db", "upgrade", "--db", reference))
    duration = time.monotonic() - started
    expected_schema = _schema_of(reference)
    clean = clean_dump(tmp_path, home)
    rng = random.Random(SEED)
    trials = max(6, KILL_TRIALS // 8)
    for i in range(trials):
        db = tmp_path / f"m{i}.sqlite"
        proc = popen("db", "upgrade", "--db", db)
        time.sleep(rng.uniform(0.3 * duration, duration))  # the first 30 % is interpreter start-up
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        engine = open_ledger(str(db))  # what every command does first
        try:
            with engine.connect() as conn:
                assert current_revision(conn) == head_revision(), f"trial {i}"
            assert _schema_of(db) == expected_schema, f"trial {i}"
            sync(engine, [Home.from_path(str(home))])
        finally:
            engine.dispose()
        assert_same(dump(str(db)), clean, f"migration trial {i}")
