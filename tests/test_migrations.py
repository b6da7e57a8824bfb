"""Migrations: the schema they build equals schema.py; versions are checked on open;
the package works installed (migrations and queries shipped in the wheel)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from omg_ledger.db import head_revision, open_ledger
from omg_ledger.errors import DatabaseTooNew
from omg_ledger.schema import metadata

from .conftest import CORPUS_HOME, REPO


def test_schema_from_migrations_equals_schema_py(db_url):
    engine = open_ledger(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diff == []


def test_the_packaged_head_constant_is_alembics_head():
    from omg_ledger.db import HEAD_REVISION

    assert head_revision() == HEAD_REVISION


def test_new_database_is_at_head(tmp_path):
    engine = open_ledger(str(tmp_path / "new.sqlite"))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()


def test_database_from_a_newer_omg_ledger_is_refused_naming_both_revisions(tmp_path):
    db = tmp_path / "newer.sqlite"
    engine = open_ledger(str(db))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff9999'"))
    engine.dispose()
    with pytest.raises(DatabaseTooNew, match=f"ffff9999.*{head_revision()}"):
        open_ledger(str(db))


def test_ledger_file_is_owner_only(tmp_path):
    open_ledger(str(tmp_path / "private" / "ledger.sqlite")).dispose()
    assert (tmp_path / "private" / "ledger.sqlite").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
def test_installed_wheel_finds_migrations_and_queries(tmp_path):
    """A fresh virtualenv with the built package (not the checkout) runs sync."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    python = env_dir / "bin" / "python"
    wheel_dir = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(wheel_dir), str(REPO)], check=True, capture_output=True, env=clean)
    wheel = next(wheel_dir.glob("*.whl"))
    site = subprocess.run([sys.executable, "-c", "import sqlalchemy, os; print(os.path.dirname(os.path.dirname(sqlalchemy.__file__)))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies come from this interpreter's site-packages (no network needed);
    # omg-ledger itself only from the wheel.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True,
                   env=clean)
    env = {**clean, "PYTHONPATH": site}
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run([str(env_dir / "bin" / "omg-ledger"), "sync", "--json", "--db", str(tmp_path / "w.sqlite"),
                             "--home", str(CORPUS_HOME)], cwd=workdir, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert '"runs_seen": 25' in result.stdout
    files = subprocess.run([str(python), "-c", "import omg_ledger.migrations, omg_ledger.queries, pathlib;"
                            "print(sorted(p.name for p in pathlib.Path(omg_ledger.queries.__path__[0]).glob('*.sql')));"
                            "print(omg_ledger.migrations.__path__[0])"],
                           cwd=workdir, env=env, capture_output=True, text=True, check=True).stdout
    assert str(REPO) not in files.splitlines()[1]
    assert Path(files.splitlines()[1]).joinpath("env.py").exists()
