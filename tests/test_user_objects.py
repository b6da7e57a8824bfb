"""The ledger is shared: users add their own views, tables, indexes and triggers to its
database (notebooks, Datasette). An upgrade keeps them, and one it cannot keep stops it
with one line naming the object, nothing changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from omg_ledger.db import HEAD_REVISION, alembic_config, open_ledger, write_transaction
from omg_ledger.sync import Home, sync

from .conftest import REPO

FIXTURE_V0003 = Path(__file__).parent / "fixtures" / "ledger-v0003.sqlite"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=300)


def _ledger_at(url: str, revision: str) -> None:
    """A ledger holding the example runs, taken down to ``revision`` (as an older
    omg-ledger left it)."""
    from alembic import command

    engine = open_ledger(url)
    sync(engine, [Home.from_path(str(REPO / "examples" / "home"), "ex")])
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), revision)
    engine.dispose()


def _run(url: str, *statements: str) -> list[list[tuple]]:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            return [list(map(tuple, r)) if r.returns_rows else [] for r in map(conn.exec_driver_sql, statements)]
    finally:
        engine.dispose()


def _error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("omg-ledger: error: ") and all(
        line.startswith("omg-ledger: upgrading") for line in lines[:-1]), result.stderr
    return lines[-1]


@pytest.mark.postgres
def test_postgresql_views_of_a_user_over_the_ledger_survive_the_upgrade_that_changes_every_text_column(
        pg_server, pg_url):
    """0012 changes the collation of every text column, which PostgreSQL refuses while any
    view reads the column: a user's view once made every sync fail, for ever."""
    _ledger_at(pg_url, "0011")
    _run(pg_url,
         "CREATE VIEW my_spend AS SELECT runtime, SUM(cost_nano_usd) AS spent FROM v_charges GROUP BY runtime",
         "CREATE SCHEMA mine",
         "CREATE VIEW mine.graphs AS SELECT graph_name, COUNT(*) AS n FROM runs GROUP BY graph_name",
         "CREATE VIEW mine.top_graph AS SELECT graph_name FROM mine.graphs ORDER BY n DESC, graph_name LIMIT 1",
         "CREATE MATERIALIZED VIEW mine.by_run AS SELECT run_pk, COUNT(*) AS charges FROM charges GROUP BY run_pk",
         "CREATE INDEX by_run_pk ON mine.by_run (run_pk)",
         "COMMENT ON VIEW my_spend IS 'what we paid, it''s ours'",
         "CREATE ROLE reader_h4", "GRANT SELECT ON my_spend TO reader_h4",
         "CREATE TABLE notes (run_id text PRIMARY KEY, note text)",
         "CREATE INDEX my_charges_at ON charges (at_us, run_pk)")
    before = _run(pg_url, "SELECT * FROM my_spend ORDER BY runtime", "SELECT * FROM mine.top_graph",
                  "SELECT COUNT(*), CAST(SUM(charges) AS integer) FROM mine.by_run")
    try:
        result = _cli("sync", "--home", str(REPO / "examples" / "home"), "--db", pg_url)
        assert result.returncode == 0, result.stderr
        assert _run(pg_url, "SELECT version_num FROM alembic_version") == [[(HEAD_REVISION,)]]
        assert _run(pg_url, "SELECT * FROM my_spend ORDER BY runtime", "SELECT * FROM mine.top_graph",
                    "SELECT COUNT(*), CAST(SUM(charges) AS integer) FROM mine.by_run") == before
        # examples/home: 71 charges, over 24 of its 25 runs (the ABANDONED one paid nothing).
        assert before[2] == [(24, 71)]
        assert _run(pg_url,
                    "SELECT obj_description('my_spend'::regclass, 'pg_class')",
                    "SELECT has_table_privilege('reader_h4', 'my_spend', 'SELECT')",
                    "SELECT indexname FROM pg_indexes WHERE indexname IN ('by_run_pk', 'my_charges_at') ORDER BY 1",
                    "SELECT collation_name FROM information_schema.columns WHERE table_name = 'runs' "
                    "AND column_name = 'graph_name'") == [
            [("what we paid, it's ours",)], [(True,)], [("by_run_pk",), ("my_charges_at",)], [("C",)]]
    finally:
        _run(pg_url, "DROP OWNED BY reader_h4", "DROP ROLE reader_h4")


def test_sqlite_views_and_triggers_of_a_user_survive_the_upgrades_that_copy_tables(tmp_path):
    """0004 copies invocations and invocation_lines (batch mode): SQLite's rename then
    checked every view and refused one reading a table that was being copied."""
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE_V0003, db)
    url = f"sqlite:///{db}"
    _run(url,
         "CREATE TABLE notes (what text)",
         "CREATE VIEW my_invocations AS SELECT * FROM invocation_lines",
         "CREATE VIEW my_spend AS SELECT SUM(cost_nano_usd) AS spent FROM v_charges",
         "CREATE TRIGGER my_new_invocation AFTER INSERT ON invocations BEGIN INSERT INTO notes VALUES ('inv'); END",
         "CREATE INDEX my_lines ON invocation_lines (file_pk)")
    before = _run(url, "SELECT * FROM my_spend", "SELECT * FROM my_invocations ORDER BY 1, 2")
    assert len(before[1]) == 5  # the fixture's runner stream
    result = _cli("db", "upgrade", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert _run(url, "SELECT version_num FROM alembic_version") == [[(HEAD_REVISION,)]]
    assert _run(url, "SELECT type, name FROM sqlite_master WHERE name LIKE 'my%' ORDER BY name") == [[
        ("view", "my_invocations"), ("index", "my_lines"), ("trigger", "my_new_invocation"), ("view", "my_spend")]]
    assert _run(url, "SELECT * FROM my_spend", "SELECT * FROM my_invocations ORDER BY 1, 2") == before


def test_a_user_view_reading_a_column_an_upgrade_removes_stops_it_naming_the_view_nothing_changed(tmp_path):
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE_V0003, db)
    url = f"sqlite:///{db}"
    _run(url, "CREATE VIEW my_offsets AS SELECT run_pk, stream_offset FROM ingest_state")
    before = _run(url, "SELECT * FROM my_offsets ORDER BY run_pk", "SELECT COUNT(*) FROM charges")
    line = _error_line(_cli("db", "upgrade", "--db", str(db)))
    assert "your view my_offsets does not work over the upgraded tables" in line, line
    assert "no such column: stream_offset" in line and "nothing was changed" in line, line
    assert _run(url, "SELECT version_num FROM alembic_version") == [[("0003",)]]
    assert _run(url, "SELECT * FROM my_offsets ORDER BY run_pk", "SELECT COUNT(*) FROM charges") == before
    # Once the user drops it, the upgrade goes through.
    _run(url, "DROP VIEW my_offsets")
    assert _cli("db", "upgrade", "--db", str(db)).returncode == 0


@pytest.mark.postgres
def test_a_postgresql_user_view_an_upgrade_cannot_keep_stops_it_naming_the_view_nothing_changed(pg_url):
    _ledger_at(pg_url, "0003")
    _run(pg_url, "CREATE VIEW my_offsets AS SELECT run_pk, stream_offset FROM ingest_state")
    line = _error_line(_cli("db", "upgrade", "--db", pg_url))
    assert "your view public.my_offsets does not work over the upgraded tables" in line, line
    assert _run(pg_url, "SELECT version_num FROM alembic_version",
                "SELECT COUNT(*) FROM my_offsets") == [[("0003",)], [(25,)]]


@pytest.mark.postgres
def test_a_ledger_in_a_schema_whose_name_needs_quotes_upgrades_keeping_a_users_view(pg_url):
    """The views reading the ledger were looked for by current_schema()::regnamespace, which
    reads the schema's name as SQL text: a ledger in schema "Old Books" (a capital, a space)
    failed every upgrade, exit 3 ("invalid name syntax"), and one in "Books" would have
    looked in books. The upgrade now finds the schema by its name and keeps the view."""
    _run(pg_url, 'CREATE SCHEMA "Old Books"')
    url = pg_url + "&options=-csearch_path%3D%22Old%5C%20Books%22"  # -c search_path="Old\ Books"
    _ledger_at(url, "0011")
    _run(url, "CREATE VIEW my_spend AS SELECT runtime, SUM(cost_nano_usd) AS spent FROM v_charges GROUP BY runtime")
    before = _run(url, "SELECT * FROM my_spend ORDER BY runtime")
    result = _cli("db", "upgrade", "--db", url)
    assert result.returncode == 0, result.stderr
    assert _run(url, "SELECT version_num FROM alembic_version", "SELECT * FROM my_spend ORDER BY runtime",
                "SELECT collation_name FROM information_schema.columns WHERE table_schema = 'Old Books' "
                "AND table_name = 'runs' AND column_name = 'graph_name'") == [[(HEAD_REVISION,)], *before, [("C",)]]
    assert _run(pg_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [[(0,)]]
