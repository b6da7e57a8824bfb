"""Commands that only read never create, migrate or write a ledger, and read a ledger
the reader may not write. Real files, real processes; as root, the reader runs without
CAP_DAC_OVERRIDE so that file modes bind it as they bind any user."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .cli_checks import one_line_error
from .conftest import REPO

EXAMPLES = REPO / "examples" / "home"
V0003 = Path(__file__).parent / "fixtures" / "ledger-v0003.sqlite"
V0001 = Path(__file__).parent / "fixtures" / "ledger-v0001.sqlite"
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2

# Every command that only reads, with what it needs to run.
READS = {
    "runs": ["runs", "--json"],
    "show": ["show", "20261129-181518.6"],
    "cost": ["cost", "--by", "run"],
    "audit": ["audit"],
    "sql": ["sql", "SELECT COUNT(*) AS n FROM v_runs"],
    "query": ["query", "spend_by_day"],
    "invocations": ["invocations"],
    "db current": ["db", "current"],
    "problems": ["problems", "--all"],
    "homes": ["homes"],
    "plans": ["plans"],
    "metrics": ["metrics"],
}


def _without_dac_override() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def cli(*args, as_stranger: bool = False) -> subprocess.CompletedProcess:
    preexec = _without_dac_override if as_stranger and os.geteuid() == 0 else None
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, preexec_fn=preexec)


def fingerprint(directory: Path) -> dict[str, tuple[str, int]]:
    """Every entry of the directory: content hash and mtime (ns)."""
    out = {}
    for entry in sorted(directory.iterdir()):
        st = entry.stat()
        out[entry.name] = (hashlib.sha256(entry.read_bytes()).hexdigest() if entry.is_file() else "dir",
                           st.st_mtime_ns)
    return out


def synced_ledger(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", EXAMPLES).returncode == 0
    return db


def rollback_journal_copy(source: Path, target: Path) -> Path:
    """A consistent copy in rollback-journal mode (what README says to share)."""
    con = sqlite3.connect(source)
    try:
        con.execute("VACUUM INTO ?", (str(target),))
    finally:
        con.close()
    return target


@pytest.mark.parametrize("name", list(READS))
def test_a_read_of_a_path_without_a_ledger_is_an_error_and_creates_nothing(tmp_path, name):
    typo = tmp_path / "typo" / "ledger.sqlite"
    line = one_line_error(cli(*READS[name], "--db", typo), 3)
    assert str(typo) in line and f"omg-ledger sync --db {typo}" in line
    assert not (tmp_path / "typo").exists()
    # In an existing directory: still no file.
    missing = tmp_path / "ledger.sqlite"
    one_line_error(cli(*READS[name], "--db", missing), 3)
    assert list(tmp_path.iterdir()) == []


def test_every_read_leaves_the_ledger_file_as_it_was(tmp_path):
    db = synced_ledger(tmp_path / "wal")
    before = fingerprint(db.parent)
    for name, args in READS.items():
        result = cli(*args, "--db", db)
        assert result.returncode in ((0, 1) if name == "audit" else (0,)), (name, result.stderr)
        after = fingerprint(db.parent)
        assert after[db.name] == before[db.name], f"{name} changed the ledger file"
        # A reader of a WAL database may create SQLite's -wal/-shm beside it (documented);
        # nothing else, and nothing that was there changes.
        assert set(after) - set(before) <= {"ledger.sqlite-wal", "ledger.sqlite-shm"}, name
        assert all(after[k] == v for k, v in before.items()), name
    # A rollback-journal ledger (a shared copy) gets nothing at all: its journal mode is
    # not switched to WAL and no file appears.
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    copy = rollback_journal_copy(db, copy_dir / "ledger.sqlite")
    before = fingerprint(copy_dir)
    for name, args in READS.items():
        result = cli(*args, "--db", copy)
        assert result.returncode in ((0, 1) if name == "audit" else (0,)), (name, result.stderr)
        assert fingerprint(copy_dir) == before, f"{name} changed {copy_dir}"


def test_a_ledger_the_reader_may_not_write_is_readable(tmp_path):
    if os.geteuid() == 0:
        probe = subprocess.run([sys.executable, "-c", "open('/proc/1/environ','rb')"],
                               preexec_fn=_without_dac_override, capture_output=True)
        assert probe.returncode != 0, "cannot drop CAP_DAC_OVERRIDE: file modes would not bind the reader"
    db = synced_ledger(tmp_path / "owner")
    shared = tmp_path / "shared"
    shared.mkdir()
    copy = rollback_journal_copy(db, shared / "ledger.sqlite")
    os.chmod(copy, 0o444)
    os.chmod(shared, 0o555)
    try:
        before = fingerprint(shared)
        for name, args in READS.items():
            result = cli(*args, "--db", copy, as_stranger=True)
            assert result.returncode in ((0, 1) if name == "audit" else (0,)), (name, result.stderr)
            assert "Traceback" not in result.stderr and "error" not in result.stderr, (name, result.stderr)
        runs = json.loads(cli("runs", "--json", "--db", copy, as_stranger=True).stdout)
        assert len(runs) == 25  # examples/home's 25 run directories
        assert json.loads(cli("sql", "SELECT COUNT(*) AS n FROM v_runs", "--json", "--db", copy,
                              as_stranger=True).stdout)["rows"] == [{"n": 25}]
        assert fingerprint(shared) == before
        # The WAL-mode original in a directory the reader may not write, without its
        # -shm: SQLite cannot read it; the error says why, on one line.
        os.chmod(db.parent, 0o555)
        for leftover in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
            assert not (db.parent / leftover).exists()
        line = one_line_error(cli("runs", "--db", db, as_stranger=True), 3)
        assert "ledger.sqlite-shm" in line and "Sharing a ledger" in line
    finally:
        os.chmod(shared, 0o755)
        os.chmod(db.parent, 0o755)


def test_an_older_ledger_is_read_where_the_schema_allows_and_never_migrated(tmp_path):
    """Release 0.1's ledger (revision 0003): its views answer `sql`; what needs later
    tables (billed copies, streams) says to upgrade; nothing is migrated or written."""
    db = tmp_path / "old.sqlite"
    shutil.copy(V0003, db)
    before = fingerprint(tmp_path)
    counted = cli("sql", "--json", "SELECT COUNT(*) AS n FROM v_runs", "--db", db)
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout)["rows"][0] in ([25], {"n": 25})  # the fixture holds the corpus home
    current = cli("db", "current", "--db", db)
    assert current.returncode == 0 and "current: 0003" in current.stdout
    for args in (["runs"], ["cost"], ["invocations"]):
        line = one_line_error(cli(*args, "--db", db), 3)
        assert "revision 0003" in line and f"omg-ledger db upgrade --db {db}" in line
    after = fingerprint(tmp_path)
    assert after[db.name] == before[db.name]
    assert set(after) - set(before) <= {"old.sqlite-wal", "old.sqlite-shm"}
    assert sqlite3.connect(db).execute("SELECT version_num FROM alembic_version").fetchone() == ("0003",)


def test_a_first_revision_ledger_is_refused_with_the_upgrade_command(tmp_path):
    db = tmp_path / "old.sqlite"
    shutil.copy(V0001, db)
    for args in (["runs"], ["cost"], ["sql", "SELECT 1"], ["query", "spend_by_day"]):
        line = one_line_error(cli(*args, "--db", db), 3)
        assert "revision 0001" in line and f"omg-ledger db upgrade --db {db}" in line
    assert sqlite3.connect(db).execute("SELECT version_num FROM alembic_version").fetchone() == ("0001",)


def test_an_empty_file_left_by_an_older_db_current_is_not_a_ledger(tmp_path):
    db = tmp_path / "ledger.sqlite"
    db.write_bytes(b"")
    line = one_line_error(cli("db", "current", "--db", db), 3)
    assert "holds no ledger" in line and f"omg-ledger sync --db {db}" in line
    assert db.read_bytes() == b""
