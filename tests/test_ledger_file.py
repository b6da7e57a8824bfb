"""The SQLite file a sync creates: its page size, read from the file's own header
(bytes 16-17, big-endian: the SQLite file format), not from omg-ledger; and that it is
made once, never again by a connection opened later."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync


def header_page_size(path: Path) -> int:
    with open(path, "rb") as f:
        header = f.read(100)
    assert header[:16] == b"SQLite format 3\x00"
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def sync_into(db: Path, home: Path) -> None:
    engine = open_ledger(str(db))
    try:
        sync(engine, [Home.from_path(str(home))])
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
