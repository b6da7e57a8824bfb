"""The SQLite file a sync creates: its page size, read from the file's own header
(bytes 16-17, big-endian: the SQLite file format), not from omg-ledger; and that it is
made once, never again by a connection opened later."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync

from .cli_checks import one_line_error
from .ledger_dump import diff, dump


def header_page_size(path: Path) -> int:
    with open(path, "rb") as f:
        header = f.read(100)
    assert header[:16] == b"SQLite format 3\x00"
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def sync_into(db: Path, home: Path, label: str | None = None) -> None:
    engine = open_ledger(str(db))
    try:
        sync(engine, [Home.from_path(str(home), label)])
    finally:
        engine.dispose()


def test_a_new_ledger_file_has_16_kib_pages(corpus_home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    sync_into(db, corpus_home)
    assert header_page_size(db) == 16384
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


def test_an_existing_ledger_file_keeps_its_page_size(corpus_home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    con = sqlite3.connect(db)
    con.execute("PRAGMA page_size = 4096")
    con.execute("CREATE TABLE made_elsewhere (x INTEGER)")  # the file now exists with 4 KiB pages
    con.close()
    assert header_page_size(db) == 4096
    sync_into(db, corpus_home)
    assert header_page_size(db) == 4096


def test_a_connection_opened_after_the_ledger_file_was_removed_does_not_make_it_again(tmp_path):
    """The file is made once, 0600, when the ledger is opened. A sync opens more connections
    as it goes: one opened after the file was removed (`rm`, a clean-up job) fails, instead
    of leaving a new empty file with the umask's mode that the next sync would take for the
    ledger."""
    db = tmp_path / "ledger.sqlite"
    engine = open_ledger(str(db))
    try:
        assert db.stat().st_mode & 0o777 == 0o600
        db.unlink()
        engine.dispose()  # the idle connections go: the next statement opens a new one
        with pytest.raises(OperationalError, match="unable to open database file"), engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()
    assert not db.exists()


def _cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@contextlib.contextmanager
def _reader_kept_open(db: Path) -> Iterator[sqlite3.Connection]:
    """What Datasette or a notebook does between two queries: the ledger open, no
    transaction. A sync is then not the last connection to close, so SQLite leaves what
    the sync wrote in ledger.sqlite-wal unless the sync checkpoints it itself."""
    reader = sqlite3.connect(db)
    try:
        assert reader.execute("SELECT COUNT(*) FROM runs").fetchone() is not None
        assert not reader.in_transaction
        yield reader
    finally:
        reader.close()


V0003 = Path(__file__).parent / "fixtures" / "ledger-v0003.sqlite"

# Every command that writes a SQLite ledger: (what makes the ledger before, the command).
WRITES = {
    "sync": (["db", "upgrade"], ["sync", "--home", "corpus={home}"]),
    "sync with nothing new": (["sync", "--home", "corpus={home}"], ["sync", "--home", "corpus={home}"]),
    "rebuild": (["sync", "--home", "corpus={home}"], ["rebuild"]),
    "homes rename": (["sync", "--home", "corpus={home}"], ["homes", "rename", "corpus", "renamed"]),
    "homes forget": (["sync", "--home", "corpus={home}"], ["homes", "forget", "corpus", "--yes"]),
    "db upgrade": (None, ["db", "upgrade"]),
    "export": (["db", "upgrade"], ["export", "--db", "{source}", "--to"]),
}


def _whole(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


@pytest.mark.parametrize("command", list(WRITES))
def test_what_a_command_wrote_is_in_the_ledger_file_though_a_reader_keeps_it_open(corpus_home, tmp_path, command):
    """A backup tool copies ledger.sqlite (cp, rsync, restic). With a reader keeping the
    ledger open, what the cron sync (or any command that writes) wrote stayed in
    ledger.sqlite-wal: a copy of the file alone held not one of the runs of a first sync,
    its exit 0 notwithstanding. Now the file alone holds all that the ledger holds."""
    setup, args = WRITES[command]
    source = tmp_path / "source.sqlite"
    sync_into(source, corpus_home, "corpus")
    db = tmp_path / "ledger.sqlite"
    if setup is None:
        shutil.copyfile(V0003, db)  # an older release's ledger, in WAL mode as its syncs left it
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    else:
        made = _cli(*(a.format(home=corpus_home) for a in setup), "--db", db)
        assert made.returncode == 0, made.stderr
    if command == "rebuild":  # a hand edit of derived rows, which rebuild derives again
        with contextlib.closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("UPDATE runs SET cost_nano_usd = 1")
    with _reader_kept_open(db):
        result = _cli(*(a.format(home=corpus_home, source=source) for a in args), *([] if command == "export" else
                                                                                  ["--db"]), db)
        assert result.returncode == 0, result.stderr
        copy = tmp_path / "copy" / "ledger.sqlite"
        copy.parent.mkdir()
        shutil.copyfile(db, copy)  # the file alone, as a backup tool takes it
        assert _whole(copy) == _whole(db)
    if command == "sync":
        assert dump(str(copy)) == dump(str(source))


def test_a_backup_moved_over_the_ledger_while_a_reader_keeps_it_open_is_the_ledger_then(
        corpus_home, tmp_path):
    """`mv backup.sqlite ledger.sqlite` with a notebook still open on the ledger: SQLite
    took the frames the last sync left in ledger.sqlite-wal (pages of the replaced file)
    for pages of the backup, and the restored ledger was damaged for good ("malformed
    database schema"), backup and all. Now the ledger reads as the backup, and the next
    sync makes the ledger a cold sync makes."""
    first, second = sorted((corpus_home / "runs").iterdir())[:2]
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    shutil.copytree(first, home / "runs" / first.name, symlinks=True)
    db = tmp_path / "ledger" / "ledger.sqlite"
    assert _cli("sync", "--db", db, "--home", home).returncode == 0
    backup = tmp_path / "backup.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("VACUUM INTO ?", (str(backup),))
    shutil.copytree(second, home / "runs" / second.name, symlinks=True)
    with _reader_kept_open(db):
        result = _cli("sync", "--db", db, "--home", home)
        assert result.returncode == 0, result.stderr
        os.replace(backup, db)
        runs = _cli("runs", "--json", "--db", db)
        assert runs.returncode == 0, runs.stderr
        assert [run["run_id"] for run in json.loads(runs.stdout)] == [first.name]
        result = _cli("sync", "--db", db, "--home", home)
        assert result.returncode == 0, result.stderr
    reference = tmp_path / "reference.sqlite"
    sync_into(reference, home)
    assert dump(str(db)) == dump(str(reference)), diff(dump(str(db)), dump(str(reference)))


def _without_capabilities() -> None:
    """Root as any other user: file modes and owners bind it (no capability survives exec)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP; EINVAL: no such cap
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_sync_stopped_by_a_wal_file_another_user_made_says_so(corpus_home, tmp_path):
    """Datasette run by another user that may write the ledger's directory (not the ledger)
    has SQLite make ledger.sqlite-wal/-shm as that user, and keeps them while it has the
    ledger open: every cron sync then stopped with SQLite's "attempt to write a readonly
    database", of a ledger file that is writable, and was told the next sync carries on.
    The line names the file, its owner and mode, and what to do."""
    if os.geteuid() != 0:
        pytest.skip("root is needed to give the ledger's -wal file to another user")
    import pwd

    db = tmp_path / "ledger" / "ledger.sqlite"
    sync_into(db, corpus_home, "corpus")
    os.chmod(db.parent, 0o777)
    os.chmod(db, 0o644)  # others may read it
    with _reader_kept_open(db):
        for suffix in ("-wal", "-shm"):  # as the other user's SQLite makes them: the ledger's mode, their owner
            os.chown(f"{db}{suffix}", 65534, 65534)
            os.chmod(f"{db}{suffix}", 0o644)
        for args in (["sync", "--home", f"corpus={corpus_home}"], ["rebuild"]):
            result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", str(db)],
                                    capture_output=True, text=True, timeout=120, preexec_fn=_without_capabilities)
            line = one_line_error(result, 3)
            assert ("attempt to write a readonly database (ledger.sqlite-wal beside it is not writable here "
                    f"(owner {pwd.getpwuid(65534).pw_name}, mode 0644): another user's program made it, reading "
                    "the ledger") in line, line


def test_a_wal_file_a_reader_of_another_user_left_behind_is_named_as_safe_to_remove(corpus_home, tmp_path):
    """A read-only connection never checkpoints, so the -wal and -shm files it made stay
    when it exits: made by another user's reader, they stop every sync. The -wal then holds
    nothing, and the line says that removing both loses nothing; once removed, the next
    sync carries on."""
    if os.geteuid() != 0:
        pytest.skip("root is needed to give the ledger's -wal file to another user")
    db = tmp_path / "ledger" / "ledger.sqlite"
    sync_into(db, corpus_home, "corpus")
    assert not os.path.exists(f"{db}-wal")
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # as `omg-ledger runs` or Datasette reads it
    assert reader.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
    reader.close()
    assert os.path.getsize(f"{db}-wal") == 0 and os.path.exists(f"{db}-shm")  # left behind
    for suffix in ("-wal", "-shm"):
        os.chown(f"{db}{suffix}", 65534, 65534)
        os.chmod(f"{db}{suffix}", 0o644)

    def synced() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--home", f"corpus={corpus_home}",
                               "--db", str(db)], capture_output=True, text=True, timeout=120,
                              preexec_fn=_without_capabilities)

    line = one_line_error(synced(), 3)
    assert ("ledger.sqlite-wal holds nothing: once no program has the ledger open, removing ledger.sqlite-wal "
            "and ledger.sqlite-shm loses nothing and the next sync carries on") in line, line
    os.remove(f"{db}-wal")
    os.remove(f"{db}-shm")
    assert synced().returncode == 0
