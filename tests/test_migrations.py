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


def _schema_objects(engine) -> tuple:
    with engine.connect() as conn:
        return (conn.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").all(),
                conn.exec_driver_sql("SELECT version_num FROM alembic_version").all(),
                conn.exec_driver_sql("PRAGMA page_size").scalar(),
                conn.exec_driver_sql("PRAGMA journal_mode").scalar(),
                conn.exec_driver_sql("PRAGMA user_version").scalar())


def _migrated_sqlite_ledger(path):
    from omg_ledger.db import create_ledger_engine, migrate

    engine = create_ledger_engine(str(path))
    migrate(engine, from_head_schema=False)
    return engine


def test_a_new_sqlite_ledger_from_the_head_schema_equals_one_the_migrations_made(tmp_path):
    made = open_ledger(str(tmp_path / "made.sqlite"))
    migrated = _migrated_sqlite_ledger(tmp_path / "migrated.sqlite")
    objects = _schema_objects(migrated)
    assert len(objects[0]) > 40 and objects[1] == [(head_revision(),)]  # tables, indexes, views
    assert {kind for kind, *_ in objects[0]} == {"table", "index", "view"}
    assert _schema_objects(made) == objects


def test_the_packaged_head_schema_is_what_the_migrations_build(tmp_path):
    from omg_ledger.db import HEAD_SCHEMA_FILE, head_schema_sql, migrations_dir

    with _migrated_sqlite_ledger(tmp_path / "migrated.sqlite").connect() as conn:
        built = head_schema_sql(conn)
    packaged = (migrations_dir() / HEAD_SCHEMA_FILE).read_text(encoding="utf-8")
    assert packaged == built, "the migrations changed: run `make head-schema` and commit the file"


def test_a_new_sqlite_ledger_is_made_without_alembic_and_a_sync_into_it_works(tmp_path):
    db = tmp_path / "new.sqlite"
    code = ("import sys; from omg_ledger.db import open_ledger; open_ledger(sys.argv[1]).dispose(); "
            "print(sorted(m for m in ('alembic', 'alembic.command') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, cwd=REPO)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "[]", "")
    engine = open_ledger(str(db))  # at head now: opened, not created again
    from omg_ledger.sync import Home, sync

    report = sync(engine, [Home.from_path(str(CORPUS_HOME), "corpus")])
    with engine.connect() as conn:
        runs = conn.exec_driver_sql("SELECT COUNT(*) FROM runs").scalar()
    assert runs == report.runs_changed == len([p for p in (CORPUS_HOME / "runs").iterdir() if p.is_dir()])


def test_a_sqlite_file_holding_other_tables_is_migrated_not_given_the_head_schema(tmp_path):
    """Only a database with no schema object at all is created from the head schema; one
    holding anything else goes through the migrations, which build around what is there."""
    import sqlite3

    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    engine = open_ledger(str(db))
    names = {name for _, name, *_ in _schema_objects(engine)[0]}
    assert "notes" in names and "runs" in names


# -- PostgreSQL's head schema (a real server, its own pg_dump) --------------------------

def _pg_schema_dump(pg_server, url: str) -> str:
    """Everything pg_dump prints of a database's schema (the random key of its \\restrict
    lines left out)."""
    from sqlalchemy.engine import make_url

    from .head_schema import pg_dump_of

    libpq_url = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    dump = subprocess.run([pg_dump_of(pg_server), "--schema-only", "-d", libpq_url],
                          check=True, capture_output=True, text=True).stdout
    return "\n".join(line for line in dump.splitlines() if not line.startswith(("\\restrict", "\\unrestrict")))


def _migrated_postgresql_ledger(url: str):
    from omg_ledger.db import create_ledger_engine, migrate

    engine = create_ledger_engine(url)
    migrate(engine, from_head_schema=False)
    return engine


def test_the_postgresql_head_schema_written_from_a_migrated_ledger_builds_that_ledger(pg_server, pg_url):
    """What `make head-schema` writes (head_schema_sql over pg_dump), run on an empty
    database, gives the schema the migrations gave, as pg_dump prints both (compared
    by their effect, not their text: another pg_dump version prints them otherwise)."""
    from omg_ledger.backend import backend_of
    from omg_ledger.db import _head_schema_header, create_ledger_engine, head_schema_sql

    from .head_schema import pg_dump_of

    migrated = _migrated_postgresql_ledger(pg_url)
    with migrated.connect() as conn:
        text = head_schema_sql(conn, pg_dump_of(pg_server))
    migrated.dispose()
    header, _, body = text.partition("\n")
    assert header == _head_schema_header("postgresql", head_revision())
    assert "public." not in body and "search_path" not in body and "\\restrict" not in body
    built_url = pg_server.create_database(f"built_{os.getpid()}")
    try:
        built = create_ledger_engine(built_url)
        with built.begin() as conn:
            backend_of(conn).run_schema_statements(conn, [sql for sql in body.split("\n;\n") if sql.strip()])
        built.dispose()
        assert _pg_schema_dump(pg_server, built_url) == _pg_schema_dump(pg_server, pg_url)
    finally:
        pg_server.drop_database(f"built_{os.getpid()}")


def test_a_new_postgresql_ledger_from_the_head_schema_equals_one_the_migrations_made(pg_server, pg_url):
    """The packaged file (a failure here: the migrations changed, run `make head-schema`;
    a file of an older revision is not used at all, which the test below catches)."""
    made_url = pg_server.create_database(f"made_{os.getpid()}")
    try:
        made = open_ledger(made_url)
        migrated = _migrated_postgresql_ledger(pg_url)
        dumps = [_pg_schema_dump(pg_server, url) for url in (made_url, pg_url)]
        revisions = []
        for engine in (made, migrated):
            with engine.connect() as conn:
                revisions.append(conn.exec_driver_sql("SELECT version_num FROM alembic_version").all())
            engine.dispose()
    finally:
        pg_server.drop_database(f"made_{os.getpid()}")
    assert dumps[1].count("CREATE TABLE") > 15 and dumps[1].count("CREATE VIEW") >= 7
    assert "CREATE INDEX ix_nodes_verdict" in dumps[1] and "nextval('public.runs_id_seq'" in dumps[1]
    assert dumps[0] == dumps[1]
    assert revisions == [[(head_revision(),)]] * 2


def test_a_new_postgresql_ledger_is_made_without_alembic_and_a_sync_into_it_works(pg_url):
    code = ("import sys; from omg_ledger.db import open_ledger; open_ledger(sys.argv[1]).dispose(); "
            "print(sorted(m for m in ('alembic', 'alembic.command') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, pg_url], capture_output=True, text=True, cwd=REPO)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "[]", "")
    from omg_ledger.sync import Home, sync

    engine = open_ledger(pg_url)
    report = sync(engine, [Home.from_path(str(CORPUS_HOME), "corpus")])
    with engine.connect() as conn:
        runs = conn.exec_driver_sql("SELECT COUNT(*) FROM runs").scalar()
        keys = conn.exec_driver_sql("SELECT nextval('runs_id_seq') > MAX(id) FROM runs").scalar()
    engine.dispose()
    assert runs == report.runs_changed == len([p for p in (CORPUS_HOME / "runs").iterdir() if p.is_dir()])
    assert keys is True  # the sequence's default is wired to runs.id, as the migrations wire it


def test_a_postgresql_database_holding_other_tables_is_migrated_not_given_the_head_schema(pg_url):
    import psycopg
    from sqlalchemy.engine import make_url

    libpq_url = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (body text)")
    code = ("import sys; from omg_ledger.db import open_ledger; open_ledger(sys.argv[1]).dispose(); "
            "print('alembic' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code, pg_url], capture_output=True, text=True, cwd=REPO)
    assert (result.returncode, result.stdout.strip()) == (0, "True"), result.stderr
    with psycopg.connect(libpq_url) as conn:
        tables = {name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"notes", "runs", "events", "alembic_version"} <= tables


def test_a_new_postgresql_ledger_is_made_in_the_connections_current_schema(pg_url):
    """The head schema names no schema: a ledger whose connection sets search_path is
    made there, as the migrations would make it."""
    import psycopg
    from sqlalchemy.engine import make_url

    libpq_url = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA books")
    engine = open_ledger(pg_url + "&options=-csearch_path%3Dbooks")
    from omg_ledger.sync import Home, sync

    sync(engine, [Home.from_path(str(CORPUS_HOME), "corpus")])
    engine.dispose()
    with psycopg.connect(libpq_url) as conn:
        placed = dict(conn.execute("SELECT schemaname, COUNT(*) FROM pg_tables "
                                   "WHERE schemaname IN ('public', 'books') GROUP BY 1").fetchall())
        runs = conn.execute("SELECT COUNT(*) FROM books.runs").fetchone()[0]
    assert placed == {"books": len([t for t in _head_tables()])}
    assert runs == len([p for p in (CORPUS_HOME / "runs").iterdir() if p.is_dir()])


def _head_tables() -> list[str]:
    from omg_ledger.db import HEAD_SCHEMA_FILES, migrations_dir

    text = (migrations_dir() / HEAD_SCHEMA_FILES["postgresql"]).read_text(encoding="utf-8")
    return [line.split()[2] for line in text.splitlines() if line.startswith("CREATE TABLE ")]
