"""A ledger written at revision 0001 (committed as a fixture) upgrades to head with a
message, keeps every row, and then equals a ledger built fresh at head."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import text

from omg_ledger.db import HEAD_REVISION, open_ledger
from omg_ledger.sync import Home, sync

from .conftest import REPO
from .ledger_dump import dump

FIXTURE = Path(__file__).parent / "fixtures" / "ledger-v0001.sqlite"


def test_v0001_ledger_upgrades_with_a_message_and_keeps_its_data(tmp_path):
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE, db)
    said: list[str] = []
    engine = open_ledger(str(db), say=said.append)
    assert said == [f"upgrading the ledger database from revision 0001 to {HEAD_REVISION}"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD_REVISION
        # The views of 0002 work over the old rows.
        assert conn.execute(text("SELECT COUNT(*) FROM v_charges")).scalar() == 71

    # The fixture was synced from examples/home under this label; a fresh ledger at head
    # synced from the same files holds the same data (ingest cache hints aside).
    fresh = open_ledger(str(tmp_path / "fresh.sqlite"))
    sync(fresh, [Home.from_path(str(REPO / "examples" / "home"), "fixture:examples/home")])
    sync(engine, [])  # derived by release 0.1's rules: re-derived from the stored facts
    old_data, new_data = dump(engine), dump(fresh)
    # Where and when the files were when the fixture was made (paths, inodes, mtimes of
    # a checkout) is not data about the runs; everything else must match.
    for data in (old_data, new_data):
        data.pop("homes"), data.pop("ingest_state"), data.pop("streams")
        for table, columns in (("runs", {"dir_path"}), ("snapshot_files", {"dev", "inode", "mtime_ns", "ctime_ns"})):
            data[table] = [tuple(kv for kv in row if kv[0] not in columns) for row in data[table]]
    assert old_data == new_data


def test_down_to_0003_and_up_again_keeps_every_fact(tmp_path):
    """No migration step may copy `runs` on SQLite: dropping the old table would take its
    ON DELETE CASCADE children (events, charges…) with it."""
    from alembic import command

    from omg_ledger.db import alembic_config, write_transaction

    db = tmp_path / "old.sqlite"
    shutil.copy(Path(__file__).parent / "fixtures" / "ledger-v0003.sqlite", db)
    engine = open_ledger(str(db))
    tables = ("events", "charges", "legs", "nodes", "snapshot_files", "invocation_lines")

    def counts():
        with engine.connect() as conn:
            return {t: conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar() for t in tables}

    before = counts()
    assert before["events"] == 197 and before["charges"] == 71
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0003")
    assert counts() == before
    with write_transaction(engine) as conn:
        command.upgrade(alembic_config(conn), "head")
    assert counts() == before
    engine.dispose()


def _cli(*args: str):
    from click.testing import CliRunner

    from omg_ledger.cli import main

    return CliRunner().invoke(main, list(args))


def test_db_upgrade_makes_an_empty_sqlite_file_a_ledger_and_current_then_prints_its_revision(tmp_path):
    from omg_ledger.db import head_revision

    empty = tmp_path / "empty.sqlite"
    empty.touch()  # a file with no table: current says so, and changes nothing
    result = _cli("db", "current", "--db", str(empty))
    assert result.exit_code == 3 and "holds no ledger" in result.stderr, result.stderr
    assert empty.stat().st_size == 0
    result = _cli("db", "upgrade", "--db", str(empty))
    assert result.exit_code == 0 and result.stdout == f"ledger database at revision {head_revision()} (head)\n"
    result = _cli("db", "current", "--db", str(empty))
    assert result.stdout == f"current: {head_revision()}\nhead:    {head_revision()}\n"


@pytest.mark.postgres
def test_db_current_and_upgrade_on_an_empty_postgresql_database(pg_url):
    from omg_ledger.db import head_revision

    result = _cli("db", "current", "--db", pg_url)
    assert result.exit_code == 3 and "holds no ledger" in result.stderr, result.stderr
    result = _cli("db", "upgrade", "--db", pg_url)
    assert result.exit_code == 0 and result.stdout == f"ledger database at revision {head_revision()} (head)\n"
    result = _cli("db", "current", "--db", pg_url)
    assert result.exit_code == 0 and result.stdout == f"current: {head_revision()}\nhead:    {head_revision()}\n"
