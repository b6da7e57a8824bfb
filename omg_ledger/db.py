"""Opening the ledger database: engine, pragmas, migrations, the sync lock.

Every path that opens a ledger goes through :func:`open_ledger`, which brings the
database to the migration head first (a new file is created and migrated; an older
one is upgraded with a message; one from a newer omg-ledger is refused).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from .backend import backend_of
from .errors import DatabaseTooNew, DatabaseUnavailable

if TYPE_CHECKING:  # SQLAlchemy is imported where an engine is made: start-up never pays for it
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

# The newest migration this package ships. Every command compares the database's
# revision with it by one plain read, so alembic (about a third of a second to import
# and to load the scripts) is only loaded when there is migrating to do.
# tests/test_migrations.py keeps it equal to alembic's own head.
HEAD_REVISION = "0005"
SQLITE_BUSY_TIMEOUT_MS = 30_000


def migrations_dir() -> Path:
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
        return db
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
        _prepare_sqlite_file(url)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            # Let SQLAlchemy drive transactions: pysqlite's own implicit BEGIN is off, we
            # issue BEGIN IMMEDIATE for writes so two writers queue instead of deadlocking.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
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
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """One write transaction (BEGIN IMMEDIATE on SQLite)."""
    with engine.connect() as conn:
        conn.info["write"] = True
        try:
            with conn.begin():
                yield conn
        finally:
            conn.info["write"] = False


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def _is_at_head(engine: Engine) -> bool:
    """One read, no lock, no alembic: the common case of every command."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD_REVISION
    except SQLAlchemyError:
        return False  # no table yet (a new database) or unreadable: take the full path


def migrate(engine: Engine, say: Callable[[str], None] | None = None) -> None:
    """Bring the database to head; refuse one that is ahead of this omg-ledger."""
    if _is_at_head(engine):
        return
    from alembic import command
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import OperationalError

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    try:
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
                        f"omg-ledger, or point --db at another database"
                    ) from exc
                if say is not None:
                    say(f"upgrading the ledger database from revision {current} to {head}")
            command.upgrade(alembic_config(conn), "head")
    except OperationalError as exc:
        raise DatabaseUnavailable(f"cannot open the ledger database {engine.url!r}: {exc.orig}") from exc


def open_ledger(db: str, say: Callable[[str], None] | None = None) -> Engine:
    from sqlalchemy.exc import SQLAlchemyError

    engine = create_ledger_engine(db)
    try:
        migrate(engine, say=say)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise DatabaseUnavailable(f"cannot open the ledger database {db}: {exc}") from exc
    except BaseException:
        engine.dispose()
        raise
    return engine


def default_database_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "omg-ledger", "ledger.sqlite")


def sync_lock(engine: Engine, scope: str, wait_seconds: float) -> contextlib.AbstractContextManager:
    """Exclusive right to sync ``scope`` into this ledger (backend.py says how)."""
    return backend_of(engine).sync_lock(engine, scope, wait_seconds)


def stderr_say(message: str) -> None:
    print(f"omg-ledger: {message}", file=sys.stderr)
