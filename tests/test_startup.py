"""Start-up stays light: the CLI and the commands that only print (--version, --help)
import neither SQLAlchemy nor alembic (about a third of a second on a small machine,
more than a report's whole query). Read from `python -X importtime`, which lists every
module a process imported: a deterministic check, no timing involved."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "alembic")


def imported_modules(*args: str, exit_codes: tuple[int, ...] = (0,)) -> set[str]:
    """Every module a fresh `python -X importtime ARGS` imported (its stderr says)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP",)}
    done = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode in exit_codes, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                names.add(name)
    assert "omg_ledger" in names or "omg_ledger.cli" in names, "importtime output not understood"
    return names


def heavy_among(names: set[str]) -> list[str]:
    return sorted(n for n in names if n.split(".")[0] in HEAVY)


def test_importing_the_cli_imports_no_sqlalchemy_nor_alembic():
    names = imported_modules("-c", "import omg_ledger.cli")
    assert "click" in names  # the check sees the CLI's own imports
    assert heavy_among(names) == []


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["cost", "--help"], ["audit", "--help"]])
def test_printing_commands_import_no_sqlalchemy_nor_alembic(argv):
    names = imported_modules("-m", "omg_ledger.cli", *argv)
    assert heavy_among(names) == []


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    from omg_ledger.version import VERSION

    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == f"omg-ledger, version {version('omg-ledger')}" == f"omg-ledger, version {VERSION}"


def test_version_does_not_read_package_metadata():
    """importlib.metadata (and the email package it reads METADATA with) is most of the cost."""
    names = imported_modules("-m", "omg_ledger.cli", "--version")
    assert "importlib.metadata" not in names and "email" not in names


def test_the_check_would_see_sqlalchemy():
    """The detector itself: a process that does import SQLAlchemy is caught."""
    names = imported_modules("-c", "import omg_ledger.cli, omg_ledger.schema")
    assert "sqlalchemy" in heavy_among(names)


# -- the read commands on a SQLite ledger at the head: sqlite3 only ----------------------


@pytest.fixture
def synced_corpus(tmp_path, corpus_home) -> str:
    """A SQLite ledger of the conformance corpus, synced by the CLI (which migrates it)."""
    db = str(tmp_path / "ledger.sqlite")
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", str(corpus_home)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return db


@pytest.mark.parametrize("argv", [
    ["runs", "--json"], ["cost", "--since", "30d", "--by", "day"], ["cost", "--by", "node"], ["audit"],
    ["sql", "SELECT COUNT(*) FROM v_runs"],
], ids=["runs", "cost-day", "cost-node", "audit", "sql"])
def test_read_commands_on_a_sqlite_ledger_import_no_sqlalchemy(synced_corpus, argv):
    # audit exits 1: the corpus has ABANDONED runs and findings.
    names = imported_modules("-m", "omg_ledger.cli", *argv, "--db", synced_corpus, exit_codes=(0, 1))
    assert "sqlite3" in names  # it did read the ledger
    assert heavy_among(names) == []


def test_a_new_ledger_is_still_created_and_migrated(tmp_path):
    """The sqlite3 shortcut is only for a ledger at the head: a new one takes alembic's path."""
    db = tmp_path / "sub" / "new.sqlite"
    names = imported_modules("-m", "omg_ledger.cli", "runs", "--json", "--db", str(db))
    assert "alembic" in heavy_among(names)
    assert db.exists() and oct(db.stat().st_mode & 0o777) == "0o600"


def test_reports_read_the_same_through_sqlite3_and_through_sqlalchemy(synced_corpus):
    """The same report functions, given the sqlite3 handle or a SQLAlchemy Engine."""
    from datetime import UTC, datetime

    from omg_ledger.db import open_ledger
    from omg_ledger.ledger import Ledger, open_reader
    from omg_ledger.reports.audit import audit_report
    from omg_ledger.reports.cost import cost_report
    from omg_ledger.reports.runs import list_runs

    handle, engine = open_reader(synced_corpus), open_ledger(synced_corpus)
    assert isinstance(handle, Ledger) and handle._engine is None  # the shortcut was taken
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert list_runs(handle) == list_runs(engine) and len(list_runs(engine)) == 25
    for by in (None, "day", "node", "run", "runtime", "goal", "leg-kind"):
        assert cost_report(handle, by=by, tz="UTC", now=now) == cost_report(engine, by=by, tz="UTC", now=now)
    assert audit_report(handle, now=now) == audit_report(engine, now=now)
    assert handle._engine is None  # none of it needed SQLAlchemy


def test_a_ledger_gone_under_a_reader_is_a_one_line_database_error(synced_corpus):
    """The sqlite3 path reports database trouble as the SQLAlchemy path does: exit 3, one line."""
    import pathlib

    from omg_ledger.errors import DatabaseUnavailable
    from omg_ledger.ledger import open_reader
    from omg_ledger.reports.runs import list_runs

    handle = open_reader(synced_corpus)
    for suffix in ("", "-wal", "-shm"):
        pathlib.Path(synced_corpus + suffix).unlink(missing_ok=True)
    with pytest.raises(DatabaseUnavailable, match="cannot open the ledger database"):
        list_runs(handle)
