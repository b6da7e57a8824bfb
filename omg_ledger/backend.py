"""The backend seam: everything that differs between SQLite and PostgreSQL, one object
per dialect. The rest of the code asks ``backend_of(engine_or_connection)`` and never
branches on a dialect name.

What differs: the DB-API placeholder, the upsert statement, the exclusive right to
sync a scope (an flock beside a SQLite file; a session advisory lock on PostgreSQL)
and an export's right to the whole ledger, the migration lock, how a run's rows are
locked before a re-derivation, and how a report reads: ``reading`` gives one read
transaction on the DB-API connection (sqlite3; psycopg), so the hot read paths never
import SQLAlchemy. Their SQL is portable text with named parameters (``:name``).
SQLAlchemy is imported only by the methods that use it, so importing this module
(every command does) costs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import DatabaseUnavailable, LedgerBusy

if TYPE_CHECKING:  # imported by the dialect methods that use it: reads start without it
    import sqlite3

    from sqlalchemy.engine import Connection, Engine

# Advisory locks belong to the database, not to a schema, and a database may hold ledgers in
# several: each lock of a ledger outside public mixes its schema's name into its key, so two
# ledgers never wait for each other. A ledger in public keeps the keys every omg-ledger took
# for it: a machine not yet upgraded still waits for this one, and is waited for.
MIGRATION_LOCK_KEY = 0x6F6D675F6C6472  # "omg_ldr": the migration lock of the ledger in public (one bigint key)
MIGRATION_LOCK_CLASS = 4  # the migration lock of a ledger in another schema: (4, its schema's key)
# The PostgreSQL ledger as a whole (advisory lock class 3, keyed by the schema it is in: a
# database may hold ledgers in several): every sync lock holds it shared, so syncs of
# different homes still run side by side; an export into the ledger holds it alone, so no
# sync writes while the copy is made (its explicit keys would collide with a sync's new rows).
LEDGER_LOCK = "3, hashtext(coalesce(current_schema(), ''))"
TRY_SHARE_LEDGER = f"SELECT pg_try_advisory_lock_shared({LEDGER_LOCK})"
TRY_OWN_LEDGER = f"SELECT pg_try_advisory_lock({LEDGER_LOCK})"
EXPORT_RUNNING = "an export into this ledger is running"

# A PostgreSQL ledger is its connection's current schema's: the first schema of the
# search_path that exists and that the role may use (PostgreSQL passes over the others).
# Three search_paths would read or write another ledger than the one they name, or find
# none where `sync` could make one. At most one row, (what, schema, current schema, text):
#   'unusable': the role may not use the first schema of the path that exists (the next
#               one, or none, is current); the text is the GRANT it lacks.
#   'missing':  no schema of the path exists; the text is the path, each name as SQL writes it.
#   'later':    the current schema holds no ledger but a later one does (unqualified names
#               would reach that one); both names as a search_path spells them (quote_ident).
# (No % in it: it is sent without parameters.)
PG_LEDGER_ELSEWHERE_SQL = """
WITH path AS (
    SELECT CASE WHEN left(item[1], 1) = '"' THEN replace(substr(item[1], 2, length(item[1]) - 2), '""', '"')
                ELSE lower(item[1]) END AS name, n
    FROM regexp_matches(current_setting('search_path'), '"(?:[^"]|"")*"|[^",[:space:]]+', 'g')
         WITH ORDINALITY AS m(item, n)
), first_schema AS (
    SELECT s.oid, s.nspname FROM path
    JOIN pg_namespace s ON s.nspname = CASE path.name WHEN '$user' THEN current_user::text ELSE path.name END
    ORDER BY path.n LIMIT 1
)
SELECT what, schema, quote_ident(current_schema()), text FROM (
    SELECT 1 AS n, 'unusable' AS what, nspname AS schema,
           'GRANT USAGE ON SCHEMA ' || quote_ident(nspname) || ' TO ' || quote_ident(current_user) AS text
    FROM first_schema WHERE NOT has_schema_privilege(oid, 'USAGE')
    UNION ALL
    SELECT 2, 'missing', NULL, (SELECT string_agg(quote_ident(name), ', ' ORDER BY n) FROM path)
    WHERE current_schema() IS NULL AND NOT EXISTS (SELECT 1 FROM first_schema)
    UNION ALL
    SELECT 3, 'later', quote_ident(n.nspname), NULL FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass('alembic_version') AND n.nspname IS DISTINCT FROM current_schema()
) found ORDER BY n LIMIT 1
"""


@dataclass(frozen=True)
class UserObject:
    """A view or trigger a user made in the ledger's database (a notebook's view over
    v_charges, say), as it can be dropped and made again around a migration."""

    shown: str  # how the error names it: "view my_spend"
    drop: str
    create: tuple[str, ...]
    check: str | None  # a statement that fails once the object no longer works


class Reader:
    """One read transaction on a DB-API connection. ``rows`` gives plain tuples (read by
    position: the cheapest way through many rows), ``dicts`` gives dicts by column name."""

    name: str

    def __init__(self, conn) -> None:
        self.conn = conn

    def _execute(self, sql: str, params: dict | None):
        raise NotImplementedError

    def rows(self, sql: str, params: dict | None = None) -> Iterator[tuple]:
        return iter(self._execute(sql, params))

    def dicts(self, sql: str, params: dict | None = None) -> Iterator[dict]:
        cursor = self._execute(sql, params)
        names = [d[0] for d in cursor.description]
        return (dict(zip(names, row, strict=True)) for row in cursor)

    def scalar(self, sql: str, params: dict | None = None):
        row = self._execute(sql, params).fetchone()
        return None if row is None else row[0]

    def table_rows(self, table: str, where: str, params: dict, order_by: str) -> list[dict]:
        """Every column of ``table``'s rows matching ``where``, as dicts, booleans as bool
        (``table`` and the clauses are the caller's text, never input)."""
        return self.with_booleans(table, self.dicts(f"SELECT * FROM {table} WHERE {where} ORDER BY {order_by}",
                                                    params))

    def with_booleans(self, table: str, rows: Iterable[dict]) -> list[dict]:
        """``rows`` holding ``table``'s columns, its booleans made bool."""
        flags = self.boolean_columns(table)
        rows = list(rows)
        for row in rows:
            for name in flags:
                if row.get(name) is not None:
                    row[name] = bool(row[name])
        return rows

    def boolean_columns(self, table: str) -> frozenset[str]:
        """The columns of ``table`` that hold booleans the driver hands back as something
        else (none, unless the dialect says otherwise)."""
        return frozenset()


class SQLiteReader(Reader):
    name = "sqlite"

    def __init__(self, conn) -> None:
        super().__init__(conn)
        self._booleans: dict[str, frozenset[str]] = {}

    def _execute(self, sql: str, params: dict | None):
        return self.conn.execute(sql, params or {})

    def boolean_columns(self, table: str) -> frozenset[str]:
        # sqlite3 gives a BOOLEAN column's 0 and 1 as ints; the schema declares the type
        # (read once per table and transaction: show asks for runs' twice on a prefix).
        if table not in self._booleans:
            self._booleans[table] = frozenset(name for (name,) in self.conn.execute(
                "SELECT name FROM pragma_table_info(?) WHERE upper(type) = 'BOOLEAN'", (table,)))
        return self._booleans[table]


_NAMED_PARAM = re.compile(r"(?<![:\w]):(\w+)")


class PostgresReader(Reader):
    """``:name`` becomes psycopg's ``%(name)s`` (a literal % is doubled first)."""

    name = "postgresql"

    def _execute(self, sql: str, params: dict | None):
        cursor = self.conn.cursor()
        if not params:
            return cursor.execute(sql)
        return cursor.execute(_NAMED_PARAM.sub(r"%(\1)s", sql.replace("%", "%%")), params)


def _double(name: str) -> str:
    """An identifier's text, to go between double quotes."""
    return name.replace('"', '""')


# Views (and materialized views) reading the ledger's relations of the current schema,
# directly or through one another; the ledger's own views are left out, not what reads them.
_PG_DEPENDENT_VIEWS = """
WITH RECURSIVE ledger AS (
    SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relname = ANY(%s)
), reader(oid, depth) AS (
    SELECT DISTINCT r.ev_class, 1 FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
    WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
      AND d.refobjid IN (SELECT oid FROM ledger) AND r.ev_class <> d.refobjid
    UNION
    SELECT r.ev_class, reader.depth + 1 FROM reader
    JOIN pg_depend d ON d.refobjid = reader.oid AND d.classid = 'pg_rewrite'::regclass
                    AND d.refclassid = 'pg_class'::regclass
    JOIN pg_rewrite r ON r.oid = d.objid AND r.ev_class <> d.refobjid
)
SELECT c.oid, n.nspname, c.relname, c.relkind, pg_get_viewdef(c.oid), c.reloptions,
       pg_get_userbyid(c.relowner), obj_description(c.oid, 'pg_class')
FROM (SELECT oid, MAX(depth) AS depth FROM reader GROUP BY oid) deepest
JOIN pg_class c ON c.oid = deepest.oid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid NOT IN (SELECT oid FROM ledger)
ORDER BY deepest.depth, n.nspname, c.relname
"""


def bind_list(params: dict, prefix: str, values: Iterable) -> str:
    """``(:prefix0, :prefix1, …)`` for an IN list, the values put into ``params``."""
    names = []
    for n, value in enumerate(values):
        params[f"{prefix}{n}"] = value
        names.append(f":{prefix}{n}")
    return "(" + ", ".join(names) + ")"


@functools.cache
def upsert_sql(table: str, columns: tuple[str, ...], keys: tuple[str, ...], update_columns: tuple[str, ...],
               mark: str) -> str:
    """The text of Backend.upsert, made once per table, columns and placeholder style
    (table and column names are the schema's own, never input)."""
    action = (f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in update_columns)}" if update_columns
              else "DO NOTHING")
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))}) "
            f"ON CONFLICT ({', '.join(keys)}) {action}")


@functools.cache
def _scalar_defaults(table) -> dict[str, object]:
    """A table's Python-side column defaults (each a constant, the schema's only kind)."""
    for column in table.columns:
        if column.default is not None and not column.default.is_scalar:
            raise TypeError(f"{table.name}.{column.name}: upsert fills constant defaults only")
    return {c.name: c.default.arg for c in table.columns if c.default is not None}


class Backend:
    name: str
    mark: str  # DB-API placeholder

    def reading(self, bind) -> contextlib.AbstractContextManager[Reader]:
        """One read transaction (one consistent snapshot for a whole report) on the DB-API
        connection of ``bind``: an Engine, or a ledger.ReadLedger or PostgresReadLedger
        (sqlite3 or psycopg, no Engine).
        A driver error inside it is a one-line LedgerError (errors.database_trouble)."""
        raise NotImplementedError

    def insert(self, table):
        raise NotImplementedError

    def upsert(self, conn: Connection, table, values: dict, keys: Sequence[str],
               update_columns: Iterable[str]) -> None:
        """INSERT … ON CONFLICT (keys) DO UPDATE SET the update columns (DO NOTHING: none),
        the same text for SQLite and PostgreSQL (upsert_sql): building SQLAlchemy's
        statement (its ``excluded`` columns) on every call cost ~2 ms, a fifth of a cron
        sync that changed 100 runs. A column left out takes its scalar default, as
        SQLAlchemy's insert would give it."""
        row = {**{c: v for c, v in _scalar_defaults(table).items() if c not in values}, **values}
        sql = upsert_sql(table.name, tuple(row), tuple(keys), tuple(update_columns), self.mark)
        conn.exec_driver_sql(sql, tuple(row.values()))

    def sync_lock(self, engine: Engine, scope: str | tuple[str, ...], wait_seconds: float, name: str | None = None
                  ) -> contextlib.AbstractContextManager:
        """``name``: what the scope is to a user (a home's label), for the message."""
        raise NotImplementedError

    def export_lock(self, engine: Engine, wait_seconds: float) -> contextlib.AbstractContextManager:
        """The ledger to one writer, an export copying into it: no sync lock is held
        while it is, none is given until it ends; waited for up to ``wait_seconds``."""
        raise NotImplementedError

    def lock_migrations(self, conn: Connection) -> None:
        """Inside the migrating transaction: two first-time syncs must not both migrate."""

    def lock_run(self, conn: Connection, run_pk: int) -> None:
        """Inside a write transaction: no other writer re-derives this run meanwhile."""

    def pipelined(self, conn: Connection) -> contextlib.AbstractContextManager[None]:
        """Statements whose results nobody reads, sent without waiting for each (a driver
        error is raised, as SQLAlchemy's, by the end of the block at the latest)."""
        return contextlib.nullcontext()

    def lock_identities(self, conn: Connection, identities: Sequence[str]) -> None:
        """Inside a write transaction: one writer at a time settles the copies of a run."""

    def ended_by_deadlock(self, exc: BaseException) -> bool:
        """Whether the database rolled the transaction back to break a deadlock with another
        writer (the other goes on), so that doing the work again may succeed."""
        return False

    def after_explicit_ids(self, conn: Connection, tables: Sequence[str]) -> None:
        """Rows with explicit ids were inserted into ``tables``: new ids must come after them."""

    assigns_run_ids = False  # next_run_pk gives keys (else the database assigns them)

    def file_path(self, engine: Engine) -> str | None:
        """The ledger's file, when it is one (a sync's pool works beside it), else None."""
        return None

    def settle_file(self, engine: Engine) -> None:
        """After a command's last write: nothing of it left outside the ledger's own file."""

    copies_text = False

    def copy_text_in(self, conn: Connection, table: str, columns: Sequence[str], texts: Iterable[bytes]) -> None:
        raise NotImplementedError

    def reserve_run_keys(self, fetch: Callable[[str, tuple], list[tuple]], count: int) -> list[int]:
        """``count`` keys for new runs, given now, in order (a sync pool hands one to each
        new run it reads); one left unused (a run that vanished) stays unused. The caller
        holds the sync lock of the home."""
        raise NotImplementedError

    def next_run_pk(self, conn: Connection) -> int | None:
        """Inside a write transaction: the id a new run gets when this writer assigns run
        ids itself (then the transaction's foreign keys are checked at commit), or None:
        the database assigns them."""
        return None

    # Whether a report over most of the charges is faster scanning in run order than
    # through the at_us index plus a sort (measured on SQLite: 0.18 s vs 0.55 s, 300k charges).
    scan_wide_windows = False

    def table_names(self, conn: Connection) -> set[str]:
        raise NotImplementedError

    def holds_schema_objects(self, conn: Connection) -> bool:
        """Whether the database holds any table, view, index or sequence (PostgreSQL: in
        the current schema): only one holding none is given the head schema."""
        raise NotImplementedError

    def run_schema_statements(self, conn: Connection, statements: Sequence[str]) -> None:
        """The head schema's statements, in the caller's transaction."""
        raise NotImplementedError

    def ledger_elsewhere(self, conn: Connection) -> tuple[str, str | None, str | None, str | None] | None:
        """PostgreSQL: (what, schema, current schema, text) when the search_path names
        another ledger than the current schema's, or none (PG_LEDGER_ELSEWHERE_SQL says
        which and how); None otherwise."""
        return None

    def user_objects(self, conn: Connection, ledger_names: frozenset[str]) -> list[UserObject]:
        """The views (and SQLite triggers) not among ``ledger_names`` that a migration of
        the ledger's tables and views could break or be refused by, in an order they can
        be created in."""
        raise NotImplementedError


class SQLiteBackend(Backend):
    name = "sqlite"
    mark = "?"
    scan_wide_windows = True
    assigns_run_ids = True

    def table_names(self, conn: Connection) -> set[str]:
        return set(conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars())

    def holds_schema_objects(self, conn: Connection) -> bool:
        return bool(conn.exec_driver_sql("SELECT COUNT(*) FROM sqlite_master").scalar())

    def run_schema_statements(self, conn: Connection, statements: Sequence[str]) -> None:
        for sql in statements:
            conn.exec_driver_sql(sql)

    def user_objects(self, conn: Connection, ledger_names: frozenset[str]) -> list[UserObject]:
        # Every view and trigger of the file: SQLite checks them all when a migration
        # renames a table (batch mode), and drops a copied table's triggers with it.
        # Views first: an INSTEAD OF trigger needs its view.
        rows = conn.exec_driver_sql(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger') AND sql IS NOT NULL "
            "ORDER BY type = 'trigger', rowid").fetchall()
        return [UserObject(f"{kind} {name}", f'DROP {kind.upper()} "{_double(name)}"', (sql,),
                           f'SELECT * FROM "{_double(name)}" LIMIT 0' if kind == "view" else None)
                for kind, name, sql in rows if name not in ledger_names]

    def reserve_run_keys(self, fetch: Callable[[str, tuple], list[tuple]], count: int) -> list[int]:
        # The sync lock is the ledger's (one sync writes a SQLite file at a time) and
        # runs.id has no AUTOINCREMENT: the keys after the largest are free until it ends.
        first = fetch("SELECT COALESCE(MAX(id), 0) + 1 FROM runs", ())[0][0]
        return list(range(first, first + count))

    def next_run_pk(self, conn: Connection) -> int | None:
        # BEGIN IMMEDIATE holds the one write lock: no other connection inserts a run
        # before this transaction ends. runs.id is a rowid without AUTOINCREMENT, so
        # MAX + 1 is the id SQLite itself would give. Deferred foreign keys (reset at
        # the transaction's end) let a run's children be written before its row.
        conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")
        return conn.exec_driver_sql("SELECT COALESCE(MAX(id), 0) + 1 FROM runs").scalar()

    @contextlib.contextmanager
    def reading(self, bind) -> Iterator[SQLiteReader]:
        import sqlite3

        from .errors import database_trouble

        raw = None
        try:
            if hasattr(bind, "sqlite3_connection"):  # a ledger.ReadLedger: sqlite3, no Engine
                conn = bind.sqlite3_connection()
            else:
                raw = bind.raw_connection()
                conn = raw.driver_connection
        except sqlite3.Error as exc:
            raise database_trouble(exc) from exc
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            yield SQLiteReader(conn)
        except sqlite3.Error as exc:  # busy past the timeout, a damaged file…
            raise database_trouble(exc) from exc
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            (raw or conn).close()

    def insert(self, table):
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    def file_path(self, engine: Engine) -> str | None:
        from sqlalchemy.engine import make_url

        path = make_url(str(engine.url)).database
        return None if not path or path == ":memory:" else path

    def settle_file(self, engine: Engine) -> None:
        if self.file_path(engine) is None:
            return
        raw = engine.raw_connection()
        try:
            checkpoint_without_waiting(raw.driver_connection)
        finally:
            raw.close()

    @contextlib.contextmanager
    def sync_lock(self, engine: Engine, scope: str | tuple[str, ...], wait_seconds: float,
                  name: str | None = None) -> Iterator[None]:
        """An flock on a file beside the database (never inside a home): one writer
        per ledger file (SQLite has one writer anyway)."""
        path = self.file_path(engine)
        if path is None:
            yield
            return
        try:
            with sqlite_sync_lock(path, wait_seconds):
                yield
        except SyncLockUnavailable as exc:
            raise DatabaseUnavailable(f"cannot create the sync lock {exc.lock_path}: "
                                      f"{exc.__cause__.strerror or exc.__cause__}") from exc.__cause__

    def export_lock(self, engine: Engine, wait_seconds: float) -> contextlib.AbstractContextManager:
        return self.sync_lock(engine, "export", wait_seconds)  # the flock is the whole ledger's already


class PostgresBackend(Backend):
    name = "postgresql"
    mark = "%s"

    copies_text = True  # copy_text_in takes rows in COPY's text format

    def copy_text_in(self, conn: Connection, table: str, columns: Sequence[str], texts: Iterable[bytes]) -> None:
        """Rows in COPY's text format (workfile.copy_text) into ``table`` by one COPY …
        FROM STDIN (the caller's transaction): the server parses one statement, none per
        row. A driver error is raised as SQLAlchemy's, like every other statement's."""
        import psycopg
        from sqlalchemy.exc import DBAPIError

        statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"  # names from schema.py
        try:
            with conn.connection.driver_connection.cursor() as cursor, cursor.copy(statement) as copy:
                for text in texts:
                    copy.write(text)
        except psycopg.Error as exc:
            raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc

    def reserve_run_keys(self, fetch: Callable[[str, tuple], list[tuple]], count: int) -> list[int]:
        # From the sequence that gives runs their ids: syncs of other homes may take keys
        # meanwhile, so these need not be consecutive; they are this sync's alone.
        return [key for (key,) in fetch("SELECT nextval(pg_get_serial_sequence('runs', 'id')) "
                                        "FROM generate_series(1, %s) ORDER BY 1", (count,))]

    def table_names(self, conn: Connection) -> set[str]:
        return set(conn.exec_driver_sql("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = current_schema()").scalars())

    def holds_schema_objects(self, conn: Connection) -> bool:
        return bool(conn.exec_driver_sql(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema())").scalar())

    def run_schema_statements(self, conn: Connection, statements: Sequence[str]) -> None:
        # One round trip: psycopg sends a text without parameters by the simple query
        # protocol, which takes many statements (and reads no % as a placeholder). A
        # refusal (a role that may not create in the schema) is raised as SQLAlchemy's,
        # like every other statement's: the caller words it in one line.
        import psycopg
        from sqlalchemy.exc import DBAPIError

        script = "".join(f"{sql};\n" for sql in statements)
        try:
            conn.connection.driver_connection.execute(script)
        except psycopg.Error as exc:
            raise DBAPIError.instance(script, None, exc, psycopg.Error, dialect=conn.dialect) from exc

    def ledger_elsewhere(self, conn: Connection) -> tuple[str, str | None, str | None, str | None] | None:
        row = conn.exec_driver_sql(PG_LEDGER_ELSEWHERE_SQL).first()
        return None if row is None else tuple(row)

    def user_objects(self, conn: Connection, ledger_names: frozenset[str]) -> list[UserObject]:
        # PostgreSQL refuses to drop a view or change a column another view reads: every
        # view or materialized view, in any schema, reading the ledger's relations
        # directly or through other such views, deepest last.
        rows = conn.exec_driver_sql(_PG_DEPENDENT_VIEWS, (sorted(ledger_names),)).fetchall()
        found = []
        for oid, schema, name, kind, definition, options, owner, comment in rows:
            what = "MATERIALIZED VIEW" if kind == "m" else "VIEW"
            qualified = f'"{_double(schema)}"."{_double(name)}"'
            create = [f"CREATE {what} {qualified}"
                      + (f" WITH ({', '.join(options)})" if options else "") + f" AS {definition.rstrip().rstrip(';')}",
                      f'ALTER {what} {qualified} OWNER TO "{_double(owner)}"']
            if comment is not None:
                create.append(f"COMMENT ON {what} {qualified} IS '{comment.replace(chr(39), chr(39) * 2)}'")
            grants = conn.exec_driver_sql(
                "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, "
                "a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a "
                "WHERE c.oid = %s AND a.grantee <> c.relowner ORDER BY 1, 2", (oid,)).fetchall()
            create += [f"GRANT {privilege} ON {qualified} TO {grantee}" + (" WITH GRANT OPTION" if grantable else "")
                       for grantee, privilege, grantable in grants]
            create += conn.exec_driver_sql(  # a materialized view's indexes go with it
                "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s ORDER BY indexrelid",
                (oid,)).scalars().all()
            create += conn.exec_driver_sql(  # INSTEAD OF triggers on a view
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s AND NOT tgisinternal ORDER BY oid",
                (oid,)).scalars().all()
            found.append(UserObject(f"{'materialized view' if kind == 'm' else 'view'} {schema}.{name}",
                                    f"DROP {what} {qualified}", tuple(create), None))
        return found

    @contextlib.contextmanager
    def reading(self, bind) -> Iterator[PostgresReader]:
        import psycopg

        from .errors import database_trouble

        lending = bind.psycopg_reading() if hasattr(bind, "psycopg_reading") else _pooled_driver_connection(bind)
        try:  # (a ledger.PostgresReadLedger lends psycopg connections: no Engine)
            with lending as conn:
                try:
                    yield PostgresReader(conn)
                finally:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
        except psycopg.Error as exc:
            raise database_trouble(exc) from exc

    def insert(self, table):
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    @contextlib.contextmanager
    def sync_lock(self, engine: Engine, scope: str | tuple[str, ...], wait_seconds: float,
                  name: str | None = None) -> Iterator[None]:
        """A session advisory lock per scope, so different homes sync in parallel; several
        scopes (a home's directory and its label) are taken in the order given, within
        ``wait_seconds`` in all."""
        scopes = (scope,) if isinstance(scope, str) else scope
        with engine.connect() as conn:
            # A session of its own, holding nothing but these locks: all of them go at the end.
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            try:
                take_sync_locks(lambda sql, params: conn.exec_driver_sql(sql, params).scalar(),
                                [(one, name or one) for one in scopes], wait_seconds)
                yield
            finally:
                conn.exec_driver_sql("SELECT pg_advisory_unlock_all()")

    @contextlib.contextmanager
    def export_lock(self, engine: Engine, wait_seconds: float) -> Iterator[None]:
        from sqlalchemy import text

        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            retry_until(lambda: bool(conn.execute(text(TRY_OWN_LEDGER)).scalar()), wait_seconds, 0.2,
                        "another sync, rebuild or export into this ledger is running")
            try:
                yield
            finally:
                conn.execute(text(f"SELECT pg_advisory_unlock({LEDGER_LOCK})"))

    def lock_migrations(self, conn: Connection) -> None:
        schema = _current_schema(conn)
        if schema == "public":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        else:
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s, %s)",
                                 (MIGRATION_LOCK_CLASS, schema_lock_key("", schema)))

    def lock_run(self, conn: Connection, run_pk: int) -> None:
        # Storing a changed run asks three times (its lines, its cleared rows, its row):
        # one round trip per run and (sub)transaction. A savepoint rolled back releases
        # what was locked in it, and its object is then no longer active: locked again.
        scope = conn.get_nested_transaction() or conn.get_transaction()
        if scope is not None and scope.is_active and conn.info.get("omg_locked_run") == (run_pk, scope):
            return  # (a Transaction compares by identity)
        conn.exec_driver_sql("SELECT id FROM runs WHERE id = %s FOR UPDATE", (run_pk,))
        conn.info["omg_locked_run"] = (run_pk, scope)

    @contextlib.contextmanager
    def pipelined(self, conn: Connection) -> Iterator[None]:
        # psycopg's pipeline mode: one round trip for the block instead of one a statement
        # (an executemany is one already). A statement refused is raised at the block's
        # end, where the driver's error is turned into SQLAlchemy's as executemany does.
        import logging

        import psycopg
        from sqlalchemy import exc as sa_exc

        # A pipeline ended by a refused statement also logs "error ignored terminating
        # <Pipeline …>" as a warning, which Python prints to stderr: the error raised here
        # is the one line the user gets.
        driver_log = logging.getLogger("psycopg")
        if not driver_log.handlers:
            driver_log.addHandler(logging.NullHandler())
        try:
            with conn.connection.dbapi_connection.pipeline():
                yield
        except psycopg.Error as exc:
            raise sa_exc.DBAPIError.instance(None, None, exc, psycopg.Error, dialect=conn.dialect) from exc

    def lock_identities(self, conn: Connection, identities: Sequence[str]) -> None:
        # Two machines syncing two copies of one run must not both see "no other copy".
        # One round trip for a whole batch; taken in key order, so two writers locking
        # overlapping batches queue instead of deadlocking.
        schema = _current_schema(conn)
        keys = sorted({schema_lock_key(identity, schema) for identity in identities})
        if keys:
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(2, k) FROM unnest(%s::integer[]) AS k ORDER BY k",
                                 (keys,))

    def ended_by_deadlock(self, exc: BaseException) -> bool:
        return getattr(getattr(exc, "orig", None), "sqlstate", None) == "40P01"  # deadlock_detected

    def after_explicit_ids(self, conn: Connection, tables: Sequence[str]) -> None:
        from sqlalchemy import text

        for table in tables:  # names from schema.py, never user input
            conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                              f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"))


class SyncLockUnavailable(Exception):
    """The lock file beside a SQLite ledger cannot be opened (its OSError is the cause)."""

    def __init__(self, lock_path: str) -> None:
        super().__init__(lock_path)
        self.lock_path = lock_path


def checkpoint_without_waiting(conn: sqlite3.Connection) -> None:
    """Copy what the WAL holds into the SQLite ledger file and empty the WAL, on ``conn``
    (sqlite3's) after its last write.

    SQLite does that itself only when its last connection to the file closes. A reader
    that keeps the ledger open (Datasette, a notebook) makes a sync's connection not the
    last: what the sync wrote would stay in ledger.sqlite-wal alone, missing from a backup
    tool's copy of ledger.sqlite, and laid over the pages of a backup moved in its place.
    Never waits: a reader in a transaction keeps the frames it may still read (SQLite
    copies the rest), and a failure leaves the WAL as it was, whole."""
    import sqlite3

    from .db import SQLITE_BUSY_TIMEOUT_MS

    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


@contextlib.contextmanager
def sqlite_sync_lock(path: str, wait_seconds: float) -> Iterator[None]:
    """The sync lock of a SQLite ledger: an flock held on the file beside it, waited for
    up to ``wait_seconds`` (then LedgerBusy).

    Beside the file itself, not beside the name it was given: syncs naming one ledger
    through a symlink and through its path take one lock. A lock path that is itself a
    symlink is refused, never followed (creating the file it names elsewhere)."""
    lock_path = os.path.realpath(path) + ".sync-lock"
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise SyncLockUnavailable(lock_path) from exc
    try:
        def take() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        retry_until(take, wait_seconds, 0.1, f"another sync or an export holds this ledger ({lock_path})")
        yield
    finally:
        os.close(fd)


def schema_lock_key(name: str, schema: str | None = "public") -> int:
    """The PostgreSQL advisory lock key of ``name`` (a sync scope, class 1; a run's stream
    identity, class 2) for the ledger in ``schema`` (the session's current schema): its
    schema's name mixed in, but for public (see MIGRATION_LOCK_KEY)."""
    text = name if schema == "public" else f"{name}\0{schema or ''}"
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _current_schema(conn: Connection) -> str | None:
    """The session's current schema (its ledger's), asked once per connection: the URL's
    search_path sets it, and nothing omg-ledger runs changes it."""
    if "omg_schema" not in conn.info:
        conn.info["omg_schema"] = conn.exec_driver_sql("SELECT current_schema()").scalar()
    return conn.info["omg_schema"]


def take_sync_locks(scalar: Callable[[str, tuple], object], scopes: Sequence[tuple[str, str]],
                    wait_seconds: float) -> None:
    """PostgreSQL's sync locks, on the session ``scalar`` runs its SQL in (``%s``
    placeholders): the ledger's lock shared (an export holds it alone), then each (scope,
    name)'s (class 1, keyed with the ledger's schema) in the order given, within
    ``wait_seconds`` in all (then LedgerBusy, naming what holds it). Held until the session
    lets them go (pg_advisory_unlock_all) or ends."""
    deadline = time.monotonic() + wait_seconds
    retry_until(lambda: bool(scalar(TRY_SHARE_LEDGER, ())), wait_seconds, 0.2, EXPORT_RUNNING)
    schema = scalar("SELECT current_schema()", ())
    for scope, name in scopes:
        key = schema_lock_key(scope, schema)
        retry_until(lambda k=key: bool(scalar("SELECT pg_try_advisory_lock(1, %s)", (k,))),
                    max(0.0, deadline - time.monotonic()), 0.2, f"another sync of {name} into this ledger is running")


def retry_until(attempt: Callable[[], bool], wait_seconds: float, pause: float, holder: str) -> None:
    """Call ``attempt`` until it succeeds or ``wait_seconds`` have passed (then LedgerBusy)."""
    deadline = time.monotonic() + wait_seconds
    while not attempt():
        if time.monotonic() >= deadline:
            raise LedgerBusy(f"{holder}; gave up after {wait_seconds:g}s (use --wait to wait longer)")
        time.sleep(pause)


_BACKENDS: dict[str, Backend] = {"sqlite": SQLiteBackend(), "postgresql": PostgresBackend()}


@contextlib.contextmanager
def _pooled_driver_connection(engine: Engine) -> Iterator:
    raw = engine.raw_connection()
    try:
        yield raw.driver_connection
    finally:
        raw.close()


def backend_of(bind: Engine | Connection) -> Backend:
    name = getattr(bind, "dialect_name", None) or bind.dialect.name
    if name not in _BACKENDS:
        raise DatabaseUnavailable(f"omg-ledger supports SQLite and PostgreSQL ledgers, not {name}")
    return _BACKENDS[name]


def reading(bind) -> contextlib.AbstractContextManager[Reader]:
    """A report's read transaction on ``bind`` (an Engine, or a ledger.ReadLedger)."""
    return backend_of(bind).reading(bind)
