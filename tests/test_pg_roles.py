"""PostgreSQL as a team deploys it: the ledger's owner writes, other roles read or are
refused, a ledger may live in a schema of its own; every refusal is one line and exit 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator

import pytest

from .conftest import CORPUS_HOME

pytestmark = pytest.mark.postgres


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def _admin(url: str, *statements: str) -> list[tuple]:
    """Statements run by the superuser in the database of ``url`` (autocommit); the rows of the last."""
    import psycopg

    from omg_ledger.ledger import postgres_conninfo

    rows: list[tuple] = []
    with psycopg.connect(postgres_conninfo(url), autocommit=True) as conn:
        for statement in statements:
            cursor = conn.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
    return rows


@pytest.fixture
def role(pg_server, pg_url) -> Iterator[str]:
    """A login role of no privilege but those PUBLIC has, in the test's database; dropped after."""
    name = f"r_{uuid.uuid4().hex[:10]}"
    pg_server.execute_admin(f"CREATE ROLE {name} LOGIN")
    try:
        yield name
    finally:
        if pg_server.running:
            _admin(pg_url, f"DROP OWNED BY {name}")  # (its grants in this database)
            pg_server.execute_admin(f"DROP ROLE {name}")


def _as(url: str, role: str) -> str:
    assert "://postgres@" in url
    return url.replace("://postgres@", f"://{role}@", 1)


def _assert_one_line(done: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert done.returncode == code, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("omg-ledger: error: "), done.stderr[-3000:]
    for word in words:
        assert word in lines[0]


def test_a_role_that_may_not_create_in_the_schema_is_refused_in_one_line_and_nothing_is_made(pg_url, role, tmp_path):
    """An empty database whose schema the role may not create in: sync, db upgrade and
    export --to are each one line and exit 3 (the head schema's CREATE used to escape as
    a psycopg traceback, exit 1), and the database is still empty."""
    _admin(pg_url, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")  # (PostgreSQL 15's default: said for older ones)
    url = _as(pg_url, role)
    source = str(tmp_path / "source.sqlite")
    assert _cli("sync", "--db", source, "--home", str(CORPUS_HOME)).returncode == 0
    for args in (["sync", "--db", url, "--home", str(CORPUS_HOME)], ["db", "upgrade", "--db", url],
                 ["export", "--db", source, "--to", url]):
        _assert_one_line(_cli(*args), 3, "permission denied for schema public")
    # A search_path naming no schema there: nowhere to create the ledger in.
    _assert_one_line(_cli("sync", "--db", f"{pg_url}&options=-csearch_path%3Dmissing", "--home", str(CORPUS_HOME)),
                     3, "no schema of the connection's search_path (missing) exists")
    assert _admin(pg_url, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                          "WHERE n.nspname = 'public'") == [(0,)]


def test_reading_while_a_migration_holds_the_version_table_past_the_roles_timeout_is_one_line(pg_url, tmp_path):
    """A reader whose role sets a lock (or statement) timeout, while `db upgrade` on
    another machine holds alembic_version: the revision read is cancelled, which is one
    line and exit 3 (it escaped as a psycopg traceback, exit 1, as did a server going
    away at that moment)."""
    import psycopg

    from omg_ledger.ledger import postgres_conninfo

    assert _cli("sync", "--db", pg_url, "--home", str(CORPUS_HOME)).returncode == 0
    impatient = f"{pg_url}&options=-clock_timeout%3D100"
    with psycopg.connect(postgres_conninfo(pg_url)) as migrating:
        migrating.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
        for args in (["runs"], ["db", "current"], ["sql", "SELECT 1 AS one"],
                     ["export", "--to", str(tmp_path / "copy.sqlite")]):
            _assert_one_line(_cli(*args, "--db", impatient), 3, "cannot read the ledger database",
                             "canceling statement due to lock timeout")
        migrating.rollback()
    assert not (tmp_path / "copy.sqlite").exists()
    assert _cli("runs", "--db", impatient).returncode == 0


def test_a_role_not_granted_select_on_the_ledger_is_told_so_not_that_the_database_is_empty(pg_url, role):
    """The grants to an analysts' role forgotten (or made before the ledger's tables, with
    no default privileges): reading is refused by the server, and that is what the one
    line says; the database was said to hold no ledger and `sync` was said to make one."""
    assert _cli("sync", "--db", pg_url, "--home", str(CORPUS_HOME)).returncode == 0
    url = _as(pg_url, role)
    for args in (["runs"], ["db", "current"], ["cost"]):
        done = _cli(*args, "--db", url)
        _assert_one_line(done, 3, "permission denied for table alembic_version")
        assert "holds no ledger" not in done.stderr
    _admin(pg_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    assert _cli("runs", "--db", url).returncode == 0


def test_two_ledgers_in_two_schemas_of_one_database_sync_without_waiting_for_each_other(pg_url):
    """Advisory locks are the database's: the sync locks of a ledger in a schema of its own
    were those of the ledger in public, so a sync of one (its home, or the derivation a
    rebuild holds for minutes) made a sync of the other give up, exit 75, saying "another
    sync … into this ledger". Two URLs naming one ledger still share its locks."""
    from omg_ledger.change_check import DERIVE_SCOPE
    from omg_ledger.db import open_ledger, sync_lock
    from omg_ledger.discover import home_lock_scopes

    _admin(pg_url, "CREATE SCHEMA books")
    books = f"{pg_url}&options=-csearch_path%3Dbooks"
    home = ["--home", f"corpus={CORPUS_HOME}"]
    for db in (pg_url, books):
        assert _cli("sync", "--db", db, *home).returncode == 0
    public = open_ledger(pg_url)
    try:
        with sync_lock(public, (*home_lock_scopes(str(CORPUS_HOME), "corpus"), DERIVE_SCOPE), 0, "corpus"):
            for args in (["sync", *home], ["rebuild"]):  # (the no-op sync's locks, the full one's)
                done = _cli(*args, "--db", books, "--wait", "0")
                assert done.returncode == 0, done.stderr
    finally:
        public.dispose()
    in_books = open_ledger(books)
    try:
        with sync_lock(in_books, home_lock_scopes(str(CORPUS_HOME), "corpus"), 0, "corpus"):
            also_books = f"{pg_url}&options=-csearch_path%3Dbooks,public"  # the same ledger, spelt otherwise
            _assert_one_line(_cli("sync", *home, "--db", also_books, "--wait", "0"), 75,
                             "another sync of corpus into this ledger is running")
            assert _cli("sync", *home, "--db", pg_url, "--wait", "0").returncode == 0
    finally:
        in_books.dispose()


def test_a_search_path_whose_current_schema_holds_no_ledger_never_writes_the_ledger_of_a_later_schema(pg_url,
                                                                                                     tmp_path):
    """search_path=staging,public with the ledger in public alone: reads look in the
    current schema (staging) and found no ledger, while sync, through unqualified names,
    wrote the staging machine's runs into public's ledger (and a no-op sync stamped its
    homes there). Both now refuse, in one line naming both schemas, and nothing is written;
    with public off the path, staging gets a ledger of its own."""
    from .builders import ev, write_run
    from .ledger_dump import dump

    stage_home = tmp_path / "stage"
    write_run(stage_home, "20261129-100000.000000001-1",
              [ev("run_started", 0), ev("node_started", 1, node_id="a"),
               ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.25), ev("run_finished", 3, outcome="passed")])
    assert _cli("sync", "--db", pg_url, "--home", f"corpus={CORPUS_HOME}").returncode == 0
    before = dump(pg_url, cache_hints=True)
    _admin(pg_url, "CREATE SCHEMA staging")
    both = f"{pg_url}&options=-csearch_path%3Dstaging,public"
    for args in (["sync", "--home", f"stage={stage_home}"],  # a new home: the full sync
                 ["sync", "--home", f"corpus={CORPUS_HOME}"],  # nothing changed: the no-op sync
                 ["runs"], ["db", "upgrade"]):
        _assert_one_line(_cli(*args, "--db", both), 3, "schema staging", "schema public")
    assert dump(pg_url, cache_hints=True) == before
    assert _admin(pg_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'staging'") == [(0,)]

    staging = f"{pg_url}&options=-csearch_path%3Dstaging"
    assert _cli("sync", "--db", staging, "--home", f"stage={stage_home}").returncode == 0
    assert [h["label"] for h in json.loads(_cli("homes", "--json", "--db", both).stdout)] == ["stage"]
    assert dump(pg_url, cache_hints=True) == before


def test_the_advice_to_put_a_later_schema_first_spells_its_name_as_a_search_path_must(pg_url):
    """A ledger in a schema whose name needs quotes ("Old Books"), later on the search_path
    than a schema holding none: the refusal's advice names it quoted, as it must be put on
    the search_path (unquoted, `Old Books` is two names, and `old books` another schema)."""
    _admin(pg_url, 'CREATE SCHEMA "Old Books"', "CREATE SCHEMA staging")
    old_books = f"{pg_url}&options=-csearch_path%3D%22Old%5C%20Books%22"
    assert _cli("sync", "--db", old_books, "--home", f"corpus={CORPUS_HOME}").returncode == 0
    both = f"{pg_url}&options=-csearch_path%3Dstaging,%22Old%5C%20Books%22"
    _assert_one_line(_cli("runs", "--db", both), 3,
                     'but schema "Old Books", later on its search_path, does: put "Old Books" first',
                     "make a new one in staging")


# The migration lock every release took, for a ledger in any schema: one bigint key.
OLD_MIGRATION_LOCK = 0x6F6D675F6C6472


def _in_schema(url: str, schema: str) -> str:
    """``url`` with ``schema`` as its search_path, and a lock wait of 200 ms at most: a
    command kept waiting for a lock fails, and says so, instead of waiting."""
    return f"{url}&options=-csearch_path%3D{schema}%20-clock_timeout%3D200"


def test_migrating_a_ledger_in_one_schema_never_waits_for_a_migration_in_another(pg_url):
    """The migration lock (a first sync making the ledger, an upgrade) was one key for the
    whole database: a migration of the ledger in public made a first sync into another
    schema wait for it, and the other way round. Each schema's is its own now; public's is
    still the old key, so an older omg-ledger migrating public and this one take turns."""
    import psycopg

    from omg_ledger.backend import backend_of
    from omg_ledger.db import create_ledger_engine, write_transaction
    from omg_ledger.ledger import postgres_conninfo

    _admin(pg_url, "CREATE SCHEMA books", "CREATE SCHEMA staging")
    home = ["--home", f"corpus={CORPUS_HOME}"]
    with psycopg.connect(postgres_conninfo(pg_url), autocommit=True) as older:
        older.execute("SELECT pg_advisory_lock(%s)", (OLD_MIGRATION_LOCK,))  # an older omg-ledger migrating
        done = _cli("sync", "--db", _in_schema(pg_url, "books"), *home)
        assert done.returncode == 0, done.stderr
        _assert_one_line(_cli("sync", "--db", _in_schema(pg_url, "public"), *home), 3, "lock timeout")
    migrating = create_ledger_engine(_in_schema(pg_url, "staging"))
    try:
        with write_transaction(migrating) as conn:
            backend_of(conn).lock_migrations(conn)  # this omg-ledger migrating staging
            _assert_one_line(_cli("sync", "--db", _in_schema(pg_url, "staging"), *home), 3, "lock timeout")
            _assert_one_line(_cli("db", "upgrade", "--db", _in_schema(pg_url, "staging")), 3, "lock timeout")
            done = _cli("sync", "--db", _in_schema(pg_url, "public"), *home)
            assert done.returncode == 0, done.stderr
    finally:
        migrating.dispose()
    assert _cli("sync", "--db", _in_schema(pg_url, "staging"), *home).returncode == 0
    assert _admin(pg_url, "SELECT schemaname, count(*) FROM pg_tables WHERE tablename = 'runs' GROUP BY 1 "
                          "ORDER BY 1") == [("books", 1), ("public", 1), ("staging", 1)]


def test_settling_a_runs_copies_in_one_schema_never_waits_for_another_schemas(pg_url, tmp_path):
    """Which copy of a run is billed is settled under a lock keyed by the run's stream
    identity (class 2), which was the database's: a sync settling a run in public made a
    sync of a copy of it into another schema wait. Each schema's is its own now; public's
    keys are the old ones, so an older omg-ledger and this one still take turns there."""
    import psycopg

    from omg_ledger.backend import backend_of
    from omg_ledger.db import create_ledger_engine, write_transaction
    from omg_ledger.ledger import postgres_conninfo

    from .builders import ev, write_run

    _admin(pg_url, "CREATE SCHEMA books")
    home, copy = tmp_path / "home", tmp_path / "copy"
    write_run(home, "20261129-100000.000000001-1",
              [ev("run_started", 0), ev("node_started", 1, node_id="a"),
               ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.25), ev("run_finished", 3, outcome="passed")])
    shutil.copytree(home, copy)
    assert _cli("sync", "--db", pg_url, "--home", f"home={home}").returncode == 0
    [(identity,)] = _admin(pg_url, "SELECT stream_identity FROM runs")
    old_key = zlib.crc32(identity.encode()) & 0x7FFFFFFF  # the key every release took, in any schema
    with psycopg.connect(postgres_conninfo(pg_url), autocommit=True) as older:
        older.execute("SELECT pg_advisory_lock(2, %s)", (old_key,))  # an older omg-ledger settling it
        done = _cli("sync", "--db", _in_schema(pg_url, "books"), "--home", f"home={home}")
        assert done.returncode == 0, done.stderr
        _assert_one_line(_cli("sync", "--db", _in_schema(pg_url, "public"), "--home", f"copy={copy}"), 3,
                         "lock timeout")
    in_books = create_ledger_engine(_in_schema(pg_url, "books"))
    try:
        with write_transaction(in_books) as conn:
            backend_of(conn).lock_identities(conn, [identity])  # this omg-ledger settling it in books
            _assert_one_line(_cli("sync", "--db", _in_schema(pg_url, "books"), "--home", f"copy={copy}"), 3,
                             "lock timeout")
            done = _cli("sync", "--db", _in_schema(pg_url, "public"), "--home", f"copy={copy}")
            assert done.returncode == 0, done.stderr
    finally:
        in_books.dispose()
    assert _cli("sync", "--db", _in_schema(pg_url, "books"), "--home", f"copy={copy}").returncode == 0
    for schema in ("public", "books"):
        assert _admin(pg_url, f"SELECT h.label, r.billed FROM {schema}.runs r JOIN {schema}.homes h ON h.id = r.home_id "
                              "ORDER BY h.label") == [("copy", False), ("home", True)]


def test_a_role_that_may_not_use_its_ledgers_schema_is_told_so_naming_the_schema(pg_url, role, tmp_path):
    """The ledger in schema books, a role granted SELECT on its tables but not USAGE on the
    schema: PostgreSQL leaves a schema a role may not use off its search path, so with
    search_path=books the role's current schema was none, and every read said the database
    holds no ledger (sync: "no schema has been selected to create in"); with
    search_path=books,public the current schema was public, whose ledger was read and
    written instead. Every command now says the role may not use schema books, in one
    line, exit 3 (as for a table it may not read), and writes nothing."""
    from .builders import ev, write_run
    from .ledger_dump import dump

    home = tmp_path / "home"
    write_run(home, "20261129-100000.000000001-1",
              [ev("run_started", 0), ev("node_started", 1, node_id="a"),
               ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.25), ev("run_finished", 3, outcome="passed")])
    _admin(pg_url, "CREATE SCHEMA books")
    books = f"{pg_url}&options=-csearch_path%3Dbooks"
    for db in (books, pg_url):
        assert _cli("sync", "--db", db, "--home", f"corpus={CORPUS_HOME}").returncode == 0
    _admin(pg_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA books TO {role}",
           f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    before = dump(pg_url, cache_hints=True)
    source = str(tmp_path / "source.sqlite")
    assert _cli("sync", "--db", source, "--home", f"home={home}").returncode == 0
    for path in ("books", "books,public"):
        url = _as(f"{pg_url}&options=-csearch_path%3D{path}", role)
        for args in (["runs"], ["db", "current"], ["cost"], ["audit"], ["sql", "SELECT count(*) AS n FROM runs"],
                     ["export", "--to", str(tmp_path / "copy.sqlite")],
                     ["sync", "--home", f"corpus={CORPUS_HOME}"], ["sync", "--home", f"home={home}"],
                     ["rebuild"], ["db", "upgrade"]):
            done = _cli(*args, "--db", url)
            _assert_one_line(done, 3, "permission denied for schema books", f"GRANT USAGE ON SCHEMA books TO {role}")
            assert "holds no ledger" not in done.stderr
        _assert_one_line(_cli("export", "--db", source, "--to", url), 3, "permission denied for schema books")
    assert not (tmp_path / "copy.sqlite").exists()
    assert dump(pg_url, cache_hints=True) == before

    _admin(pg_url, f"GRANT USAGE ON SCHEMA books TO {role}")
    listed = _cli("runs", "--json", "--db", _as(f"{pg_url}&options=-csearch_path%3Dbooks,public", role))
    assert listed.returncode == 0, listed.stderr
    assert {run["home"] for run in json.loads(listed.stdout)} == {"corpus"}


def test_a_search_path_naming_no_schema_that_exists_says_so_not_that_sync_makes_a_ledger(pg_url):
    """A typo in the URL's schema (search_path=boks): no schema is current, so reads found
    no ledger and said "`omg-ledger sync --db …` makes it one", which fails (nowhere to
    create it). Every command now names the search_path and says no schema of it exists."""
    _admin(pg_url, "CREATE SCHEMA books")
    assert _cli("sync", "--db", f"{pg_url}&options=-csearch_path%3Dbooks", "--home", f"corpus={CORPUS_HOME}"
                ).returncode == 0
    typo = f"{pg_url}&options=-csearch_path%3Dboks,%22Old%5C%20Books%22"
    for args in (["runs"], ["db", "current"], ["cost"], ["sync", "--home", f"corpus={CORPUS_HOME}"],
                 ["db", "upgrade"], ["rebuild"]):
        done = _cli(*args, "--db", typo)
        _assert_one_line(done, 3, 'no schema of the connection\'s search_path (boks, "Old Books") exists')
        assert "makes it one" not in done.stderr
    _assert_one_line(_cli("runs", "--db", f"{pg_url}&options=-csearch_path%3D"), 3,
                     "the connection's search_path is empty")
    assert _admin(pg_url, "SELECT DISTINCT schemaname FROM pg_tables WHERE tablename = 'runs'") == [("books",)]
