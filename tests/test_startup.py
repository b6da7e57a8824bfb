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


# -- the read commands on a SQLite ledger: sqlite3 only ---------------------------------


@pytest.fixture(scope="module")
def synced_corpus(tmp_path_factory) -> str:
    """A SQLite ledger of the conformance corpus, synced (and migrated) by the CLI."""
    from .conftest import CORPUS_HOME

    db = str(tmp_path_factory.mktemp("startup") / "ledger.sqlite")
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", str(CORPUS_HOME)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return db


@pytest.mark.parametrize("argv", [
    ["runs"], ["runs", "--json"], ["runs", "--status", "ABANDONED", "--csv"], ["cost", "--since", "30d", "--by", "day"],
    ["cost", "--by", "node", "--json"], ["cost", "--by", "run"], ["audit"], ["audit", "--json", "--since", "7d"],
    ["sql", "SELECT COUNT(*) FROM v_runs"], ["query", "spend_by_day"], ["metrics"], ["homes", "--json"],
    ["plans", "--json"], ["invocations", "--by", "status", "--json"],
], ids=["runs", "runs-json", "runs-csv", "cost-day", "cost-node", "cost-run", "audit", "audit-json", "sql", "query",
        "metrics", "homes", "plans", "invocations"])
def test_read_commands_on_a_sqlite_ledger_import_no_sqlalchemy_nor_alembic(synced_corpus, argv):
    # audit exits 1: the corpus has ABANDONED runs and findings.
    names = imported_modules("-m", "omg_ledger.cli", *argv, "--db", synced_corpus, exit_codes=(0, 1))
    assert "sqlite3" in names and "omg_ledger.ledger" in names  # it did read the ledger, through sqlite3
    assert heavy_among(names) == []


def test_show_on_a_sqlite_ledger_imports_no_sqlalchemy_nor_alembic(synced_corpus):
    import json

    runs = json.loads(subprocess.run([sys.executable, "-m", "omg_ledger.cli", "runs", "--json", "--db", synced_corpus],
                                     capture_output=True, text=True, timeout=60).stdout)
    for argv in (["show", runs[0]["run_id"], "--home", runs[0]["home"]], ["show", runs[-1]["run_id"][:15], "--json"]):
        names = imported_modules("-m", "omg_ledger.cli", *argv, "--db", synced_corpus)
        assert "sqlite3" in names and "omg_ledger.ledger" in names
        assert heavy_among(names) == []


def test_a_read_command_that_asks_for_an_engine_still_gets_one(synced_corpus):
    """cost --estimate reads through SQLAlchemy: the handle makes the Engine on demand (the check would see it)."""
    names = imported_modules("-m", "omg_ledger.cli", "cost", "--by", "runtime", "--estimate", "--db", synced_corpus)
    assert "sqlalchemy" in heavy_among(names) and "alembic" not in heavy_among(names)


def test_db_current_on_a_sqlite_ledger_imports_no_sqlalchemy_nor_alembic(synced_corpus):
    from omg_ledger.db import head_revision

    names = imported_modules("-m", "omg_ledger.cli", "db", "current", "--db", synced_corpus)
    assert heavy_among(names) == []
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "db", "current", "--db", synced_corpus],
                          capture_output=True, text=True, timeout=60)
    head = head_revision()  # alembic's own word on the head, here in the test
    assert done.stdout.splitlines() == [f"current: {head}", f"head:    {head}"], done.stdout


def test_db_upgrade_of_a_ledger_at_the_head_imports_no_alembic(synced_corpus):
    from omg_ledger.db import head_revision

    names = imported_modules("-m", "omg_ledger.cli", "db", "upgrade", "--db", synced_corpus)
    assert "alembic" not in heavy_among(names)
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "db", "upgrade", "--db", synced_corpus],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == f"ledger database at revision {head_revision()} (head)\n", done.stdout


# -- the read commands on a PostgreSQL ledger: psycopg only -----------------------------


@pytest.fixture(scope="module")
def synced_postgres_corpus(pg_server) -> str:
    """A PostgreSQL ledger (a real server) of the conformance corpus, synced by the CLI."""
    from .conftest import CORPUS_HOME

    url = pg_server.create_database("startup_corpus")
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", url, "--home", str(CORPUS_HOME)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    yield url
    pg_server.drop_database("startup_corpus")


def _stdout(argv: list[str], db: str) -> str:
    """What a command prints, its clock readings (the report's "now", a home's last sync)
    masked: the two ledgers were synced, and are read, at different instants."""
    import re

    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *argv, "--db", db], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # audit exits 1: the corpus has findings
    return re.sub(r'("(?:now|last_synced_at)": )"[^"]*"', r'\1"…"', done.stdout)


POSTGRES_READS = [
    ["runs", "--json"], ["runs", "--status", "ABANDONED", "--csv"],
    ["cost", "--since", "2020-01-01", "--until", "2030-01-01", "--by", "day"],  # (a fixed window: no "now" printed)
    ["cost", "--by", "node", "--json"], ["audit", "--json"], ["audit"], ["problems", "--json"], ["homes", "--json"],
    ["plans", "--json"], ["invocations", "--by", "status", "--json"],
    # (':x' in a string is text, not a placeholder; a saved query's :since and :limit are bound)
    ["sql", "SELECT COUNT(*) AS n, ':x' AS s FROM runs"], ["query", "spend_by_day", "--param", "since=2026-01-01"],
    ["query", "most_expensive_nodes", "--param", "limit=5", "--json"],
]


@pytest.mark.parametrize("argv", POSTGRES_READS, ids=[" ".join(a) for a in POSTGRES_READS])
def test_read_commands_on_a_postgresql_ledger_import_no_sqlalchemy_and_print_what_sqlite_prints(
        synced_corpus, synced_postgres_corpus, argv):
    names = imported_modules("-m", "omg_ledger.cli", *argv, "--db", synced_postgres_corpus, exit_codes=(0, 1))
    assert "psycopg" in names and "omg_ledger.ledger" in names  # it did read the ledger, through psycopg
    assert heavy_among(names) == []
    # The same corpus in either database: the same bytes out, whichever driver read them.
    assert _stdout(argv, synced_postgres_corpus) == _stdout(argv, synced_corpus)


def test_show_and_db_current_on_a_postgresql_ledger_import_no_sqlalchemy(synced_corpus, synced_postgres_corpus):
    import json

    from omg_ledger.db import head_revision

    runs = json.loads(_stdout(["runs", "--json"], synced_postgres_corpus))
    for argv in (["show", runs[0]["run_id"], "--home", runs[0]["home"], "--json"], ["show", runs[-1]["run_id"][:15]]):
        names = imported_modules("-m", "omg_ledger.cli", *argv, "--db", synced_postgres_corpus)
        assert "psycopg" in names and heavy_among(names) == []
        assert _stdout(argv, synced_postgres_corpus) == _stdout(argv, synced_corpus)
    names = imported_modules("-m", "omg_ledger.cli", "db", "current", "--db", synced_postgres_corpus)
    assert heavy_among(names) == []
    head = head_revision()
    assert _stdout(["db", "current"], synced_postgres_corpus).splitlines() == [f"current: {head}", f"head:    {head}"]


def test_a_postgresql_reading_session_refuses_a_write(synced_postgres_corpus):
    """The psycopg connection a read command gets is read-only on the server's side."""
    import psycopg

    from omg_ledger.db import open_ledger_readonly

    ledger = open_ledger_readonly(synced_postgres_corpus)
    try:
        assert type(ledger).__name__ == "PostgresReadLedger"
        conn = ledger.psycopg_connection()
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM runs")
        conn.rollback()
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
    finally:
        ledger.dispose()


def test_nested_readings_of_a_postgresql_ledger_each_have_their_own_transaction(synced_postgres_corpus):
    """A reader inside another (a report reading while it renders another's rows) gets a
    connection of its own, so its end does not end the outer reader's snapshot; the kept
    connection is lent again afterwards."""
    from psycopg.pq import TransactionStatus

    from omg_ledger.backend import reading
    from omg_ledger.db import open_ledger_readonly

    ledger = open_ledger_readonly(synced_postgres_corpus)
    try:
        with reading(ledger) as outer:
            runs = outer.scalar("SELECT COUNT(*) FROM runs")
            with reading(ledger) as inner:
                assert inner.conn is not outer.conn
                assert inner.scalar("SELECT COUNT(*) FROM runs") == runs
            assert outer.conn.info.transaction_status == TransactionStatus.INTRANS  # still in its transaction
            assert inner.conn.closed
            assert outer.scalar("SELECT COUNT(*) FROM runs") == runs
        with reading(ledger) as again:
            assert again.conn is outer.conn
            assert again.scalar("SELECT COUNT(*) FROM runs") == runs
        assert outer.conn.info.transaction_status == TransactionStatus.IDLE  # each reader rolls back
    finally:
        ledger.dispose()


def test_the_html_report_imports_no_sqlalchemy_and_is_the_same_page_from_either_database(
        synced_corpus, synced_postgres_corpus, tmp_path):
    """report --html reads through the DB-API (SQLAlchemy only with a price book, for the
    estimate); the corpus gives the same page from SQLite and PostgreSQL but for the
    instants it was generated at and its ledger synced at."""
    import re

    pages = []
    for n, db in enumerate((synced_corpus, synced_postgres_corpus)):
        page = tmp_path / f"report{n}.html"
        names = imported_modules("-m", "omg_ledger.cli", "report", "--html", str(page), "--db", db)
        assert heavy_among(names) == []
        pages.append(re.sub(r'<span id="synced".*?</span>', "synced …",
                            re.sub(r"generated [0-9T:.+-]+", "generated …", page.read_text())))
    assert "generated …" in pages[0] and "synced …" in pages[0]
    assert pages[0] == pages[1]


def test_a_ledger_in_a_schema_named_by_the_url_options_is_read_and_stays_read_only(pg_server, synced_corpus):
    """`?options=-c search_path=…` puts the ledger in a schema: sync writes it there, and
    the reading session keeps the URL's options (it used to replace them with its
    read-only setting, so no read command found the ledger), both through psycopg and
    through an Engine (--estimate); a URL that turns read-only off does not win."""
    import json

    from .conftest import CORPUS_HOME

    url = pg_server.create_database("schema_options")
    try:
        import psycopg

        from omg_ledger.ledger import postgres_conninfo

        with psycopg.connect(postgres_conninfo(url), autocommit=True) as conn:
            conn.execute("CREATE SCHEMA led")
        in_schema = f"{url}&options=-csearch_path%3Dled"
        done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", in_schema, "--home",
                               str(CORPUS_HOME)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert _stdout(["runs", "--json"], in_schema) == _stdout(["runs", "--json"], synced_corpus)
        estimate = ["cost", "--by", "runtime", "--estimate", "--json"]
        assert json.loads(_stdout(estimate, in_schema))["total"] == json.loads(_stdout(estimate, synced_corpus))["total"]
        writable = f"{in_schema}%20-c%20default_transaction_read_only%3Doff"
        setting = _stdout(["sql", "SELECT current_schema() AS s, current_setting('default_transaction_read_only') "
                                  "AS ro", "--json"], writable)
        assert json.loads(setting)["rows"] == [{"s": "led", "ro": "on"}]
    finally:
        pg_server.drop_database("schema_options")
