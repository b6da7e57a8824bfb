"""Opening the ledger database: engine, pragmas, migrations, the sync lock.

Every path that opens a ledger for writing goes through :func:`open_ledger`, which
brings the database to the migration head first (a new file is created and migrated;
an older one is upgraded with a message; one from a newer omg-ledger is refused).
Commands that only read use :func:`open_ledger_readonly`, which never does any of that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .backend import backend_of
from .errors import (
    DatabaseTooNew,
    DatabaseUnavailable,
    LedgerBusy,
    LedgerError,
    UnreadableValue,
    UpgradeBlocked,
    is_locked,
    ledger_locked,
)

if TYPE_CHECKING:  # SQLAlchemy is imported where an engine is made: start-up never pays for it
    from pathlib import Path

    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

    from .workfile import WorkFiles

# The newest migration this package ships. Every command compares the database's
# revision with it by one plain read, so alembic (about a third of a second to import
# and to load the scripts) is only loaded when there is migrating to do.
# tests/test_migrations.py keeps it equal to alembic's own head.
HEAD_REVISION = "0017"
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_NEW_PAGE_SIZE = 16384  # bytes per page of a ledger file this omg-ledger creates


def migrations_dir() -> Path:
    from importlib import resources
    from pathlib import Path

    return Path(str(resources.files("omg_ledger.migrations")))


def alembic_config(connection: Connection | None = None):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def database_url(db: str) -> str:
    """Accept a SQLAlchemy URL or a plain filesystem path (SQLite)."""
    if "://" in db:
        return with_default_driver(db)
    return "sqlite:///" + os.path.abspath(os.path.expanduser(db))


def _prepare_sqlite_file(url: str) -> None:
    from sqlalchemy.engine import make_url

    path = make_url(url).database
    if not path or path == ":memory:":
        return
    directory = os.path.dirname(path) or "."
    try:
        # Every directory we create is 0700, not only the last one (os.makedirs gives
        # the intermediate ones the umask's default, e.g. 0775 under umask 002).
        missing = []
        while directory and not os.path.isdir(directory):
            missing.append(directory)
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
        for new in reversed(missing):
            try:
                os.mkdir(new, 0o700)
            except FileExistsError:
                if not os.path.isdir(new):  # a concurrent first sync made it: fine
                    raise
        if not os.path.exists(path):
            # Owner-only from the first byte: the runs it indexes are 0700/0600 too.
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
            os.close(fd)
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot create the ledger database {path}: {exc.strerror or exc}") from exc


def create_ledger_engine(db: str) -> Engine:
    from sqlalchemy import create_engine, event

    url = database_url(db)
    if url.startswith("sqlite"):
        from .ledger import plain_sqlite_file

        _prepare_sqlite_file(url)
        path = plain_sqlite_file(url)
        if path is not None:
            # mode=rw: the file is made above, 0600; a connection opened later (a sync opens
            # several) never makes it again — a ledger removed mid-sync is an error then, not
            # a new empty file at its path with the umask's mode.
            import sqlite3
            from urllib.parse import quote

            def connect() -> sqlite3.Connection:
                return sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True,
                                       timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False)

            engine = create_engine(url, creator=connect)
        else:
            engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            # Let SQLAlchemy drive transactions: pysqlite's own implicit BEGIN is off, we
            # issue BEGIN IMMEDIATE for writes so two writers queue instead of deadlocking.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
                # A new ledger (an existing file keeps the page size it was made with):
                # larger pages mean fewer page splits and less b-tree overhead per row;
                # a cold sync's SQLite time measured ~10% less than with 4096. Set
                # before WAL and the first table, the only moment it can be.
                cursor.execute(f"PRAGMA page_size = {SQLITE_NEW_PAGE_SIZE}")
            # Readers never block the sync. On a read-only location WAL cannot be set;
            # reads still work there, so that failure is not an error.
            with contextlib.suppress(Exception):
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn) -> None:  # pragma: no cover - trivial
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN")

        return engine
    return create_engine(url, pool_pre_ping=True)


@contextlib.contextmanager
def write_transaction(engine: Engine, attached: WorkFiles | None = None) -> Iterator[Connection]:
    """One write transaction (BEGIN IMMEDIATE on SQLite). ``attached``: a sync pool's
    work files, attached to the connection for the transaction (SQLite only)."""
    with engine.connect() as conn:
        conn.info["write"] = True
        if attached is not None:
            dbapi = conn.connection.driver_connection
            attached.attach(dbapi)  # outside any transaction: SQLite's rule
        try:
            with conn.begin():
                yield conn
        finally:
            conn.info["write"] = False
            if attached is not None:
                attached.detach(dbapi)


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def stored_revision(ledger) -> str | None:
    """The revision a ledger's alembic_version table holds (None: no such table), read
    with plain SQL: printing it need not import alembic (~0.3 s). ``ledger``: an Engine,
    or a ledger.ReadLedger or PostgresReadLedger (which read it, with sqlite3 or psycopg
    alone, when they were opened)."""
    from .ledger import PostgresReadLedger, ReadLedger

    if isinstance(ledger, ReadLedger | PostgresReadLedger):
        return ledger.revision
    from sqlalchemy import inspect

    with ledger.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()


def _is_at_head(engine: Engine) -> bool:
    """One read, no lock, no alembic: the common case of every command. A PostgreSQL
    ledger in a later schema of the search_path than the current one is refused: the
    ledger is the current schema's (reads look there; a new one is made there)."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with engine.connect() as conn:
            elsewhere = backend_of(conn).ledger_elsewhere(conn)
            if elsewhere is not None:
                raise ledger_elsewhere_error(*elsewhere)
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD_REVISION
    except SQLAlchemyError:
        return False  # no table yet (a new database) or unreadable: take the full path


def ledger_elsewhere_error(what: str, schema: str | None, current: str | None, text: str | None) -> LedgerError:
    """The error for a search_path that names another ledger than its current schema's,
    or none (a row of PG_LEDGER_ELSEWHERE_SQL)."""
    from .errors import NotALedger

    if what == "unusable":  # a refusal of the server's, worded as one
        return DatabaseUnavailable(
            f"permission denied for schema {schema}: it is the first schema of the connection's search_path, where "
            f"omg-ledger keeps its ledger, and this role may not use it (the schema's owner can `{text}`)")
    if what == "missing":
        path = f"no schema of the connection's search_path ({text}) exists" if text else \
            "the connection's search_path is empty"
        return NotALedger(f"{path}, so there is no ledger to read and none to make: create the schema, or name the "
                          f"ledger's schema in the URL's search_path")
    return NotALedger(f"schema {current} (the connection's current schema, where omg-ledger keeps its ledger) "
                      f"holds no ledger, but schema {schema}, later on its search_path, does: put {schema} first "
                      f"on search_path to use that ledger, or leave it out to make a new one in {current}")


# A new ledger is made from the schema the migrations build, not by running them:
# importing alembic and running eleven revisions on an empty database took ~0.3 s of
# every first sync. The file of each database names its revision; tests/test_migrations.py
# keeps it equal, object for object, to a ledger the migrations made, and
# `make head-schema` writes both files again after a new migration. SQLite's is every
# CREATE of its sqlite_master; PostgreSQL's is pg_dump's schema-only output, with what
# binds it to one database left out (settings, owners, the schema name: a ledger lives
# in its connection's current schema).
HEAD_SCHEMA_FILES = {"sqlite": "head-schema.sqlite.sql", "postgresql": "head-schema.postgresql.sql"}
HEAD_SCHEMA_FILE = HEAD_SCHEMA_FILES["sqlite"]
HEAD_SCHEMA_STATEMENT_END = "\n;\n"
_DATABASE_TITLES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _head_schema_header(dialect: str, revision: str) -> str:
    return (f"-- omg-ledger's {_DATABASE_TITLES[dialect]} schema at revision {revision}, "
            "as the migrations build it (make head-schema)")


def head_schema_sql(conn: Connection, pg_dump: str | None = None) -> str:
    """The head-schema file for the ledger on ``conn`` (one made by the migrations).
    SQLite: tables and views in the order they were made, indexes by name (a migration
    may make a table's indexes in any order). PostgreSQL: what ``pg_dump`` (its path)
    prints of the database, in its order."""
    dialect = backend_of(conn).name
    revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    if dialect == "sqlite":
        statements = [sql for (sql,) in conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'view' THEN 2 ELSE 3 END, "
            "CASE type WHEN 'index' THEN name END, rowid")]
    else:
        statements = postgresql_schema_statements(_pg_dump_schema(conn, pg_dump))
    return (_head_schema_header(dialect, revision) + "\n"
            + "".join(sql + HEAD_SCHEMA_STATEMENT_END for sql in statements))


def _pg_dump_schema(conn: Connection, pg_dump: str | None) -> str:
    import subprocess

    if pg_dump is None:
        raise ValueError("a PostgreSQL head schema is read with pg_dump: give its path")
    url = conn.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    return subprocess.run([pg_dump, "--schema-only", "--no-owner", "--no-privileges", "--no-comments",
                           "--schema", conn.exec_driver_sql("SELECT current_schema()").scalar(), "-d", url],
                          check=True, capture_output=True, text=True).stdout


def postgresql_schema_statements(dump: str) -> list[str]:
    """pg_dump's schema-only output as statements that build the same objects in any
    database's current schema: its comments, psql meta-commands, session settings (the
    empty search_path among them) and the schema's own CREATE left out, and the schema
    qualifier taken off every name. Each statement ends at a line that ends with ';'
    (the ledger has no function bodies, which could hold such lines: refused)."""
    if "$$" in dump:
        raise ValueError("pg_dump's output holds a function body: split it by hand")
    schema = re.search(r"^CREATE TABLE (\w+)\.", dump, re.MULTILINE)
    if schema is None:
        raise ValueError("pg_dump's output creates no table")
    qualifier = re.compile(rf"\b{schema.group(1)}\.(?=\w)")
    statements, lines = [], []
    for line in dump.splitlines():
        if not lines and (not line.strip() or line.startswith(("--", "\\", "SET ", "SELECT pg_catalog.set_config("))):
            continue
        lines.append(qualifier.sub("", line))
        if line.endswith(";"):
            statement = "\n".join(lines)[:-1]
            if statement != f"CREATE SCHEMA {schema.group(1)}":
                statements.append(statement)
            lines = []
    if lines:
        raise ValueError(f"pg_dump's output ends inside a statement: {lines[0]!r}")
    return statements


def write_head_schema_file(url: str | None = None, pg_dump: str | None = None) -> Path:
    """Run the migrations on a new ledger and write its head-schema file (the checkout's
    migrations/, which an editable install reads): SQLite in a temporary file; with
    ``url``, the empty PostgreSQL database there, read back with ``pg_dump``."""
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        engine = create_ledger_engine(url or os.path.join(work, "ledger.sqlite"))
        try:
            migrate(engine, from_head_schema=False)
            with engine.connect() as conn:
                text = head_schema_sql(conn, pg_dump)
        finally:
            engine.dispose()
    target = migrations_dir() / HEAD_SCHEMA_FILES[backend_of(engine).name]
    target.write_text(text, encoding="utf-8")
    return target


def _head_schema_statements(dialect: str) -> list[str] | None:
    """The packaged head schema's statements, or None when it is not this package's head
    (then the migrations run, as for any other database)."""
    try:
        text = (migrations_dir() / HEAD_SCHEMA_FILES[dialect]).read_text(encoding="utf-8")
    except (OSError, KeyError):
        return None
    first, _, body = text.partition("\n")
    if first != _head_schema_header(dialect, HEAD_REVISION):
        return None
    return [sql for sql in body.split(HEAD_SCHEMA_STATEMENT_END) if sql.strip()]


def _create_at_head(engine: Engine) -> bool:
    """A database with no schema object yet (PostgreSQL: in its current schema) is given
    the head schema in one write transaction, under the migration lock (two first syncs
    queue; the second finds the tables). False: not empty, or no head schema packaged for
    it: migrate instead."""
    backend = backend_of(engine)
    statements = _head_schema_statements(backend.name)
    if statements is None:
        return False
    with write_transaction(engine) as conn:
        backend.lock_migrations(conn)
        if backend.holds_schema_objects(conn):
            return False
        backend.run_schema_statements(conn, statements)
        conn.exec_driver_sql(f"INSERT INTO alembic_version (version_num) VALUES ({backend.mark})", (HEAD_REVISION,))
    return True


def migrate(engine: Engine, say: Callable[[str], None] | None = None, from_head_schema: bool = True,
            option: str = "--db") -> None:
    """Bring the database to head; refuse one that is ahead of this omg-ledger.
    ``from_head_schema``: a new database takes the packaged head schema (False: run the
    migrations, as tests do to check that schema); ``option``: the command's option that
    named the database, for the refusal's advice."""
    if _is_at_head(engine):
        return
    from sqlalchemy.exc import OperationalError

    try:
        if not (from_head_schema and _create_at_head(engine)):
            _run_migrations(engine, say, option)
        backend_of(engine).settle_file(engine)
    except OperationalError as exc:
        if is_locked(str(exc.orig)):
            raise ledger_locked(f"the ledger database {engine.url!r}") from exc
        raise DatabaseUnavailable(f"cannot open the ledger database {engine.url!r}: {exc.orig}"
                                  f"{_writing_hints(_sqlite_path(engine), str(exc.orig))}") from exc


def _run_migrations(engine: Engine, say: Callable[[str], None] | None, option: str = "--db") -> None:
    from alembic import command
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    with write_transaction(engine) as conn:
        backend_of(conn).lock_migrations(conn)
        current = current_revision(conn)
        if current == head:
            return
        if current is not None:
            try:
                script.get_revision(current)
            except Exception as exc:
                raise DatabaseTooNew(
                    f"the ledger database is at revision {current}, which this omg-ledger does not "
                    f"know (its newest is {head}); it was written by a newer omg-ledger — upgrade "
                    f"omg-ledger, or point {option} at another database"
                ) from exc
            if say is not None:
                say(f"upgrading the ledger database from revision {current} to {head}")
        users = _set_user_objects_aside(conn)
        command.upgrade(alembic_config(conn), "head")
        _restore_user_objects(conn, users)


# Every table and view a revision of the ledger ever made: anything else in its database
# (or, on PostgreSQL, reading its schema) is a user's.
def _ledger_names() -> frozenset[str]:
    from .schema import metadata
    from .views import VIEWS_0002, VIEWS_0005, VIEWS_0006, VIEWS_0015, VIEWS_0016

    return frozenset({*metadata.tables, "invocation_files", "alembic_version", "v_invocations",
                      *VIEWS_0002, *VIEWS_0005, *VIEWS_0006, *VIEWS_0015, *VIEWS_0016})


def _set_user_objects_aside(conn: Connection) -> list:
    """Drop the user's views (and SQLite triggers) over the ledger for the migration, which
    could not change what they read while they stand (PostgreSQL), or would fail on their
    account (SQLite's table rename checks every view). Those that worked are checked again
    once they are back."""
    from sqlalchemy.exc import SQLAlchemyError

    users = backend_of(conn).user_objects(conn, _ledger_names())
    working = []
    for user in users:
        if user.check is not None:
            try:
                with conn.begin_nested():
                    conn.exec_driver_sql(user.check)
                working.append(user)
            except SQLAlchemyError:  # broken before the upgrade: made again as it was, unchecked
                working.append(dataclasses.replace(user, check=None))
        else:
            working.append(user)
    for user in reversed(working):
        try:
            conn.exec_driver_sql(user.drop)
        except SQLAlchemyError as exc:
            raise UpgradeBlocked(
                f"cannot upgrade the ledger: your {user.shown} reads its tables and cannot be set aside for the "
                f"upgrade ({one_line(exc)}); nothing was changed — drop it, run `omg-ledger db upgrade`, then create it again") from exc
    return working


def _restore_user_objects(conn: Connection, users: list) -> None:
    """Make the user's objects again over the upgraded ledger; one that no longer works
    there rolls the whole upgrade back, naming it."""
    from sqlalchemy.exc import SQLAlchemyError

    for user in users:
        try:
            for statement in user.create:
                conn.exec_driver_sql(statement)
            if user.check is not None:
                conn.exec_driver_sql(user.check)
        except SQLAlchemyError as exc:
            raise UpgradeBlocked(
                f"cannot upgrade the ledger: your {user.shown} does not work over the upgraded tables "
                f"({one_line(exc)}); nothing was changed — drop or change it, then run `omg-ledger db upgrade`"
            ) from exc


def open_ledger(db: str, say: Callable[[str], None] | None = None, option: str = "--db") -> Engine:
    """The ledger at ``db``, migrated to the head; ``option`` is the command's option that
    named it (export's target is --to), for the advice of a refusal."""
    from sqlalchemy.exc import SQLAlchemyError

    engine = create_ledger_engine(db)
    try:
        migrate(engine, say=say, option=option)
    except (DatabaseUnavailable, LedgerBusy) as exc:
        engine.dispose()  # name the database as the user typed it, password masked
        raise type(exc)(str(exc).replace(repr(engine.url), shown_url(db))) from exc
    except SQLAlchemyError as exc:
        engine.dispose()
        if is_locked(str(exc)):
            raise ledger_locked(f"the ledger database {shown_url(db)}") from exc
        raise DatabaseUnavailable(f"cannot open the ledger database {shown_url(db)}: {one_line(exc)}"
                                  f"{_writing_hints(_sqlite_path(engine), str(exc))}") from exc
    except BaseException:
        engine.dispose()
        raise
    return engine


def default_database_path() -> str:
    from .paths import default_ledger_path

    return default_ledger_path()


def sync_lock(engine: Engine, scope: str | tuple[str, ...], wait_seconds: float, name: str | None = None
              ) -> contextlib.AbstractContextManager:
    """Exclusive right to sync ``scope`` into this ledger (backend.py says how); ``name`` is
    what the scope is to a user, for the message when another sync holds it."""
    return backend_of(engine).sync_lock(engine, scope, wait_seconds, name)


def stderr_say(message: str) -> None:
    print(f"omg-ledger: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- read-only opening
# Reads never create, migrate or write a ledger. The oldest revision each kind of read
# understands: a migration that changes what a read uses raises its constant.
# 0007 (ix_nodes_verdict) only adds an index: audit reads an older ledger without it, slower.
# 0008 (derive_states) is sync's own cache of where a derivation stopped: no read uses it.
RUN_TABLES_SINCE = "0006"  # runs.billed (0005), problems.resolved_at (0006): what runs, show, cost, audit read
# 0010 (runs.passes*): audit reads each run's PASS counts there; before it, from the nodes.
PASS_COUNTS_SINCE = "0010"
PROBLEM_MACHINES_SINCE = "0016"  # problems.machine: before it, every problem reads as of no machine ('')


def read_at_least(reader, since: str) -> bool:
    """Whether the ledger a report reads (``reader``: backend.reading's) is at revision
    ``since`` or later."""
    revision = str(reader.scalar("SELECT version_num FROM alembic_version") or "")
    return revision.isdigit() and int(revision) >= int(since)
VIEWS_SINCE = "0002"  # the v_* views: what sql and saved queries read
INVOCATIONS_SINCE = "0004"  # the runner invocation tables keyed by streams: what `invocations` reads


SUPPORTED_DATABASES = "a SQLite file path (or sqlite:///PATH) or postgresql://USER@HOST/DB"
SQLITE_HEADER = b"SQLite format 3\x00"


def with_default_driver(url: str) -> str:
    """postgres:// (the common spelling) and a bare postgresql:// mean the psycopg driver
    omg-ledger ships with (its [postgres] extra); SQLAlchemy alone would look for psycopg2."""
    scheme, sep, rest = url.partition("://")
    if scheme.lower() in ("postgres", "postgresql"):
        return "postgresql+psycopg" + sep + rest
    return url


def one_line(exc: BaseException) -> str:
    """The driver's own message, without SQLAlchemy's [SQL: …] and background lines."""
    message = str(getattr(exc, "orig", None) or exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def check_database_target(db: str, option: str = "--db") -> None:
    """Refuse, in one line, what cannot be a ledger, before any engine exists: a URL of
    another database or an uninstalled driver, an in-memory SQLite database, a directory,
    a file that is not SQLite. ``option``: the command's option that named ``db``, which
    the advice names."""
    from .ledger import plain_sqlite_file

    path = plain_sqlite_file(database_url(db))
    if path is not None:  # the common case, checked without SQLAlchemy
        _check_sqlite_file(path, shown_url(db), option)
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from .errors import UnsupportedDatabase

    shown = shown_url(db)
    try:
        url = make_url(database_url(db))
    except (ArgumentError, ValueError) as exc:  # (ValueError: a port that is not a number)
        raise UnsupportedDatabase(f"cannot read {shown} as a database URL: give {SUPPORTED_DATABASES}") from exc
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = url.database
        if not path or path == ":memory:":
            raise UnsupportedDatabase(f"{shown} is an in-memory SQLite database, which vanishes when omg-ledger "
                                      f"exits: give the ledger a file ({option} ledger.sqlite)")
        _check_sqlite_file(path, shown, option)
        return
    if backend != "postgresql":
        raise UnsupportedDatabase(f"{shown}: omg-ledger keeps its ledger in SQLite or PostgreSQL, not {backend}; "
                                  f"give {SUPPORTED_DATABASES}")
    try:
        url.get_dialect().import_dbapi()
    except NoSuchModuleError as exc:
        raise UnsupportedDatabase(f"{shown}: unknown PostgreSQL driver {url.get_driver_name()!r}; use "
                                  f"postgresql://… (the psycopg driver: pip install 'omg-ledger[postgres]')") from exc
    except ImportError as exc:
        raise UnsupportedDatabase(f"{shown}: the PostgreSQL driver {url.get_driver_name()} is not installed: "
                                  f"pip install 'omg-ledger[postgres]'") from exc


def check_sqlite_target(db: str) -> None:
    """check_database_target's SQLite-file half alone (no SQLAlchemy): for the no-op
    sync, which takes a lock beside the file before anything else looks at it."""
    from .ledger import plain_sqlite_file

    path = plain_sqlite_file(database_url(db))
    if path is not None:
        _check_sqlite_file(path, shown_url(db))


NOT_SQLITE = ("is not a SQLite database: not a ledger, or a damaged one (restore it from a backup, or delete it "
              "and run `omg-ledger sync` to rebuild it from the homes)")


def _check_sqlite_file(path: str, shown: str, option: str = "--db") -> None:
    """A directory, a FIFO or device, or a file that is not SQLite is refused; a missing
    file is the caller's."""
    from .errors import NotALedger

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(mode):
        raise NotALedger(f"{shown} is a directory, not a ledger file "
                         f"(the default file name is ledger.sqlite: {option} {os.path.join(shown, 'ledger.sqlite')})")
    if not stat.S_ISREG(mode):
        # Opening a FIFO blocks; SQLite would read a device and write a journal beside it.
        from .files import file_kind

        raise NotALedger(f"{shown} is {file_kind(mode)}, not a regular file: a ledger is a SQLite file; "
                         f"point {option} at the ledger's file, or at a new path for a new ledger")
    try:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if header and header != SQLITE_HEADER:
        raise NotALedger(f"{shown} {NOT_SQLITE}")
    if header:
        foreign = _foreign_sqlite_tables(path, shown)
        if foreign:
            raise NotALedger(f"{shown} holds no ledger but another program's tables ({_names(foreign)}): "
                             f"omg-ledger neither reads it nor adds its own tables to it; point {option} at the "
                             f"ledger's file, or at a new path for a new ledger")


def _foreign_sqlite_tables(path: str, shown: str) -> list[str]:
    """The tables of a SQLite file that holds some but no ledger (no alembic_version),
    read through a read-only connection; [] for a ledger, an empty file, or one that
    cannot be read here (the caller's own open then says why). A file another process
    keeps locked past the busy timeout is LedgerBusy now: the caller's open would only
    wait as long again."""
    import sqlite3

    from .ledger import connect_readonly

    try:
        conn = connect_readonly(path)
        try:
            names = [name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if is_locked(str(exc)):
            raise ledger_locked(f"the ledger database {shown}") from exc
        return []
    return [] if "alembic_version" in names else names


def _names(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def shown_url(db: str) -> str:
    """What the user typed, with a password masked: in the user info, and as the URL
    parameter libpq takes too (``?password=``)."""
    import re

    shown = re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", db)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", shown, flags=re.IGNORECASE)


def _existing_sqlite_file(path: str | None) -> str:
    from .errors import LedgerMissing, NotALedger

    if not path or path == ":memory:":
        raise NotALedger("an in-memory SQLite database holds no ledger: give the ledger's file")
    if not os.path.exists(path):
        raise LedgerMissing(f"no ledger at {path}: `omg-ledger sync --db {path}` creates one "
                            f"(reading commands never create a ledger)")
    return path


def _readonly_sqlite_engine(url: str, path: str) -> Engine:
    from sqlalchemy import create_engine, event

    from .ledger import connect_readonly

    engine = create_engine(url, creator=lambda: connect_readonly(path))

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn) -> None:  # pragma: no cover - trivial
        conn.exec_driver_sql("BEGIN")  # one consistent snapshot per read

    return engine


def _readonly_postgres_engine(url: str) -> Engine:
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from .ledger import read_only_options

    options = read_only_options(make_url(url).query.get("options"))
    return create_engine(url, pool_pre_ping=True, connect_args={"options": options})


def _postgres_read_ledger(url: str, shown: str, oldest: str | None):
    """A PostgresReadLedger (psycopg alone, no SQLAlchemy) for a PostgreSQL URL libpq
    takes, its revision checked; None when psycopg cannot connect with it: the Engine's
    path then connects again and words the failure, as it does for any other URL."""
    from .ledger import PostgresReadLedger, postgres_conninfo, psycopg_read_only_connection

    conninfo = postgres_conninfo(url)
    if conninfo is None:
        return None
    try:
        import psycopg
    except ImportError:
        return None
    try:
        connection = psycopg_read_only_connection(conninfo)
    except psycopg.OperationalError as exc:  # no server, refused, bad password: worded as the Engine's path does
        raise DatabaseUnavailable(f"cannot read the ledger database {shown}: {one_line(exc)}") from exc
    except (psycopg.Error, ValueError):  # a URL libpq does not take (a SQLAlchemy-only option…)
        return None
    try:
        try:
            current = _postgres_revision(connection)
        except psycopg.Error as exc:  # the server went away, a statement or lock timeout (a migration holds the table)
            raise DatabaseUnavailable(f"cannot read the ledger database {shown}: {one_line(exc)}") from exc
        finally:
            with contextlib.suppress(psycopg.Error):  # (a lost connection: the error above says so)
                connection.rollback()
        _check_revision(current, shown, oldest)
    except BaseException:
        connection.close()
        raise
    return PostgresReadLedger(connection, conninfo, current, lambda: _readonly_postgres_engine(url))


def _postgres_revision(connection) -> str | None:
    """alembic_version's revision in the connection's current schema (None: no such table;
    a search_path naming another schema's ledger is refused, PG_LEDGER_ELSEWHERE_SQL).
    Looked for in pg_class, which lists it to every role: information_schema leaves out
    the tables a role may not read, and a ledger the role may not read is no empty database."""
    from .backend import PG_LEDGER_ELSEWHERE_SQL

    elsewhere = connection.execute(PG_LEDGER_ELSEWHERE_SQL).fetchone()
    if elsewhere is not None:
        raise ledger_elsewhere_error(*elsewhere)
    found = connection.execute("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                               "WHERE n.nspname = current_schema() AND c.relname = 'alembic_version'").fetchone()
    if found is None:
        return None
    row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    return None if row is None else row[0]


def _revision_number(revision: str) -> int | None:
    return int(revision) if revision.isdigit() else None


def _check_readable(engine: Engine, shown: str, oldest: str | None) -> str | None:
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError, SQLAlchemyError

    from .errors import NotALedger

    try:
        with engine.connect() as conn:
            elsewhere = backend_of(conn).ledger_elsewhere(conn)
            if elsewhere is not None:
                raise ledger_elsewhere_error(*elsewhere)
            has_version = "alembic_version" in _table_names(conn)
            current = conn.execute(text("SELECT version_num FROM alembic_version")).scalar() if has_version else None
    except OperationalError as exc:
        if "not a database" in str(exc):
            raise NotALedger(f"{shown} {NOT_SQLITE}") from exc
        if is_locked(str(exc)):
            raise ledger_locked(f"the ledger database {shown}") from exc
        path = _sqlite_path(engine)
        raise DatabaseUnavailable(f"cannot read the ledger database {shown}: {one_line(exc)}"
                                  f"{_wal_hint(path)}{_full_disk_hint(path, str(exc))}") from exc
    except SQLAlchemyError as exc:
        if "not a database" in str(exc):
            raise NotALedger(f"{shown} {NOT_SQLITE}") from exc
        raise DatabaseUnavailable(f"cannot read the ledger database {shown}: {one_line(exc)}") from exc
    return _check_revision(current, shown, oldest)


def _sqlite_revision(path: str, shown: str) -> str | None:
    """The migration revision of a SQLite ledger file, read through sqlite3 alone."""
    import sqlite3

    from .errors import NotALedger
    from .ledger import connect_readonly

    try:
        conn = connect_readonly(path)
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
                            ).fetchone() is None:
                return None
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if "not a database" in str(exc):
            raise NotALedger(f"{shown} {NOT_SQLITE}") from exc
        if is_locked(str(exc)):
            raise ledger_locked(f"the ledger database {shown}") from exc
        raise DatabaseUnavailable(f"cannot read the ledger database {shown}: {one_line(exc)}"
                                  f"{_wal_hint(path)}{_full_disk_hint(path, str(exc))}") from exc
    return None if row is None else row[0]


def _check_revision(current: str | None, shown: str, oldest: str | None) -> str | None:
    """Refuse a revision the caller cannot read: none (not a ledger), newer than this
    omg-ledger knows, or older than ``oldest`` (reads never migrate)."""
    from .errors import DatabaseTooOld, NotALedger

    if current is None:
        raise NotALedger(f"{shown} holds no ledger (an empty database): `omg-ledger sync --db {shown}` makes it one")
    if oldest is None:
        return current
    number, head = _revision_number(current), _revision_number(HEAD_REVISION)
    if number is None or number > head:
        raise DatabaseTooNew(f"the ledger database is at revision {current}, which this omg-ledger does not "
                             f"know (its newest is {HEAD_REVISION}); it was written by a newer omg-ledger — "
                             f"upgrade omg-ledger, or point --db at another database")
    if number < int(oldest):
        raise DatabaseTooOld(f"the ledger database {shown} is at revision {current}, older than this command "
                             f"reads ({oldest}); run `omg-ledger db upgrade --db {shown}` (reads never migrate)")
    return current


def _wal_hint(path: str | None) -> str:
    """Why a mode=ro reader fails on a WAL ledger: SQLite needs the -shm file beside it,
    and a reader that may not write the directory cannot create it."""
    if not path or os.path.exists(path + "-shm") or os.access(os.path.dirname(path) or ".", os.W_OK):
        return ""
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return ""
    if len(header) < 20 or header[18] != 2:
        return ""
    return (f" (a WAL-mode ledger needs its {os.path.basename(path)}-shm file, which does not exist and which "
            f"you may not create here: read a copy instead, see README 'Sharing a ledger')")


def _full_disk_hint(path: str | None, message: str) -> str:
    """Why SQLite says only "disk I/O error" when it opens a WAL ledger on a full file
    system: it cannot make or grow the -shm file beside it (readers need it too)."""
    if not path or "disk I/O error" not in message:
        return ""
    try:
        free = os.statvfs(os.path.dirname(os.path.abspath(path))).f_bavail
    except OSError:
        return ""
    if free:
        return ""
    return (f" (the file system holding it is full: SQLite cannot make or grow {os.path.basename(path)}-shm "
            f"beside it, which every reader needs too; free some space there)")


def _read_only_dir_hint(path: str | None, message: str) -> str:
    """Why SQLite says only "unable to open database file" (or that the database is read
    only) when a sync opens a ledger in a directory it may not write: to write a WAL
    ledger it makes the -wal and -shm files beside it."""
    if not path or not any(words in message for words in ("unable to open database file", "readonly database")):
        return ""
    directory = os.path.dirname(os.path.abspath(path))
    if os.access(directory, os.W_OK):
        return ""
    name = os.path.basename(path)
    return (f" (its directory {directory} is not writable here: to write the ledger SQLite makes {name}-wal "
            f"and {name}-shm beside it; sync where the directory is writable, or to a copy elsewhere)")


def _unwritable_wal_hint(path: str | None, message: str) -> str:
    """Why SQLite says the database is read only when the ledger file is writable: its -wal
    or -shm file beside it is not, made by another user's program. One that may write the
    ledger removes them when the last program closes it; one that only reads leaves them
    behind when it exits (a read-only connection never checkpoints)."""
    if not path or "readonly database" not in message or not os.access(path, os.W_OK):
        return ""
    for suffix in ("-wal", "-shm"):
        try:
            info = os.stat(path + suffix)
        except OSError:
            continue
        if not os.access(path + suffix, os.W_OK):
            name = os.path.basename(path) + suffix
            base = os.path.basename(path)
            try:
                empty = os.stat(path + "-wal").st_size == 0
            except OSError:
                empty = True
            removal = (f"; {base}-wal holds nothing: once no program has the ledger open, removing {base}-wal "
                       f"and {base}-shm loses nothing and the next sync carries on" if empty else "")
            return (f" ({name} beside it is not writable here (owner {_user_name(info.st_uid)}, mode "
                    f"{stat.S_IMODE(info.st_mode):04o}): another user's program made it, reading the ledger — one "
                    f"that has it open, or one that read it and left the file behind when it exited{removal}; "
                    f"let readers share it through a group, or read a copy (README 'Sharing a ledger'))")
    return ""


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _writing_hints(path: str | None, message: str) -> str:
    """What SQLite's words leave out when a command that writes cannot open or write the ledger."""
    return _full_disk_hint(path, message) + _read_only_dir_hint(path, message) + _unwritable_wal_hint(path, message)


def writing_hints(engine: Engine, message: str) -> str:
    """_writing_hints for the ledger ``engine`` writes (nothing for PostgreSQL)."""
    return _writing_hints(_sqlite_path(engine), message)


def _sqlite_path(engine: Engine) -> str | None:
    return engine.url.database if engine.dialect.name == "sqlite" else None


def _table_names(conn: Connection) -> set[str]:
    return backend_of(conn).table_names(conn)


def unreadable_value(db: str) -> UnreadableValue | None:
    """The error naming a value of the ledger at ``db`` that its column's type cannot
    hold (a user's hand edit: SQLite stores what it is given), or None. Asked only when
    a report failed converting a value, so a clean ledger never pays for the scan."""
    ledger = open_ledger_readonly(db, oldest=None)
    try:
        return _first_unreadable_value(ledger)
    finally:
        ledger.dispose()


# No count or sum of nano-dollars, tokens or microseconds comes near it; sums of values
# beyond it overflow 64 bits.
_HUGE = 2 ** 62


def _first_unreadable_value(ledger) -> UnreadableValue | None:
    from .backend import reading
    from .schema import metadata
    from .store import DERIVED_TABLES

    with reading(ledger) as reader:
        if reader.name != "sqlite":  # PostgreSQL enforces its column types
            return None
        for table in metadata.sorted_tables:
            run = "(SELECT run_id FROM runs WHERE runs.id = t.run_pk)" if "run_pk" in table.columns else "NULL"
            for column in (c for c in table.columns if c.type.python_type in (int, bool)):
                name = f't."{column.name}"'
                for value, kind, run_id in reader.rows(
                        f'SELECT {name}, typeof({name}), {run} FROM "{table.name}" t '
                        f"WHERE typeof({name}) NOT IN ('integer', 'null') OR {name} > {_HUGE} OR {name} < -{_HUGE} "
                        "LIMIT 1"):
                    kind = "not an integer" if kind != "integer" else "too large to add up"
                    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
                    if run_id is not None and table in DERIVED_TABLES:
                        fix = f"`omg-ledger rebuild --run {run_id}` derives the run's rows again from its events"
                    else:
                        fix = "correct that row by hand, or restore the ledger from a backup"
                    return UnreadableValue(
                        f"the ledger holds a value it cannot read: {table.name}.{column.name} is {shown} ({kind})"
                        f"{f' in run {run_id}' if run_id is not None else ''}; {fix}")
    return None


def open_ledger_readonly(db: str, oldest: str | None = HEAD_REVISION):
    """A handle for reading an existing ledger: nothing is created, migrated or written.

    SQLite is opened ``mode=ro`` (a ledger the reader may not write is readable), as a
    ledger.ReadLedger: sqlite3 for the reports, an Engine only if one is asked for.
    PostgreSQL sessions default to read-only transactions; a URL libpq takes is read as a
    ledger.PostgresReadLedger (psycopg for the reports, likewise). ``oldest`` is the oldest
    revision the caller can read (None: any, e.g. to print the revision).
    """
    from .ledger import ReadLedger, plain_sqlite_file

    url = database_url(db)
    shown = shown_url(db)
    plain = plain_sqlite_file(url)
    if plain is None:
        postgres = _postgres_read_ledger(url, shown, oldest)
        if postgres is not None:
            return postgres
    check_database_target(db)
    if plain is not None:
        path = _existing_sqlite_file(plain)
        revision = _check_revision(_sqlite_revision(path, shown), shown, oldest)
        return ReadLedger(url, path, revision, lambda: _readonly_sqlite_engine(url, path))

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        engine = _readonly_sqlite_engine(url, _existing_sqlite_file(make_url(url).database))
    elif backend == "postgresql":
        engine = _readonly_postgres_engine(url)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    try:
        _check_readable(engine, shown, oldest)
    except BaseException:
        engine.dispose()
        raise
    return engine
