"""`sql` and `query`: read-only SQL against the ledger, and the saved queries.

Read-only holds by construction in the database connection; no statement parser is
trusted with it:

* **SQLite**: a separate ``sqlite3`` connection opened with ``file:…?mode=ro`` and
  ``PRAGMA query_only=ON``, plus an authorizer that allows only reads (no ATTACH, only
  the pragmas that read and without a value, no temp tables, no transaction control).
  ``sqlite3`` runs exactly one statement per ``execute`` and refuses a second one.
* **PostgreSQL**: the statement goes through the extended query protocol, whose Parse
  step accepts exactly one statement (the simple protocol would run several). It is
  described before it runs and must return rows (a query, EXPLAIN or SHOW: never
  COMMIT, SET, COPY …), runs inside ``SET TRANSACTION READ ONLY`` with
  ``default_transaction_read_only`` on, must leave that transaction open, and the
  transaction is always rolled back and the connection thrown away. A statement whose
  code calls a function that acts outside that transaction (:data:`PG_DENIED_FUNCTIONS`)
  is refused before it is sent: defence in depth, since a function a writer defines
  can wrap one.

Before that, :func:`early_check` reads the text the way the dialect does (E'' escapes
and nested comments on PostgreSQL, [brackets] and `backticks` on SQLite) to refuse
the obvious cases with a friendly message. It is a courtesy, not a guard: whatever it
lets through still meets the connection. A statement it cannot classify goes to the
database, so a typo is reported as the database's syntax error.

On a shared server, connect `sql` with a role that can only read (README, Security).

A statement can always be stopped: ``timeout`` seconds end it with
:class:`QueryTimedOut`, and Ctrl-C ends it at once as a ``KeyboardInterrupt``. On
SQLite the statement runs in a thread the caller waits for (Python runs a SIGINT
handler between bytecodes, never inside a long ``sqlite3`` step, and SQLite looks for a
stop only between the steps of a loop: one step can run for hours), and is then told to
stop (:class:`_SqliteStatement`). On PostgreSQL the server ends the statement (``SET LOCAL statement_timeout``), and
Ctrl-C cancels it on the server and waits (briefly) for the server to confirm.

Saved queries are the ``*.sql`` files of the ``omg_ledger.queries`` package (the
repository's top-level ``queries/``). Each starts with a comment header: its first
line is the summary, and each parameter is declared on a line of its own::

    -- :since  earliest charge time, such as 2026-11-01 (without an offset: in --tz) [default: ]

A parameter without ``[default: …]`` is required. Values are typed by name: ``since``
and ``until`` (and any ``*_at``) go through the time grammar of ``--since`` (7d, 3mo,
today, dates, RFC 3339 with any offset; dates without one in --tz) and are bound as
the ledger's UTC text (``2026-11-01T00:00:00.000000Z``), which orders as the instants
do; ``limit`` (and any ``*_count``) must be a non-negative integer. An empty value
stays empty (the queries read ``''`` as "no bound"). Everything else is text.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..errors import BadArgument, LedgerError, ReadOnlyViolation, require_utf8

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

READING_STATEMENTS = {"select", "with", "values", "table", "explain"}
EXTRA_READING = {"sqlite": {"pragma"}, "postgresql": {"show"}}
# The pragmas `sql` may run: each only reads. Anything else (journal_mode, optimize,
# wal_checkpoint …) is refused, read form or not: a pragma without a value can still act.
SQLITE_READING_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "foreign_key_check", "user_version", "application_id", "schema_version", "data_version", "page_count",
    "page_size", "freelist_count", "encoding", "query_only", "compile_options", "function_list", "pragma_list",
    "collation_list", "module_list", "database_list", "integrity_check", "quick_check",
})
# Of those, the ones whose argument says what to read (a table or an index; for the two
# checks, a table or how many errors to list). The others take a value only to set it.
SQLITE_PRAGMAS_TAKING_A_NAME = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "foreign_key_check", "integrity_check", "quick_check",
})
# Functions a read can still do harm with: load code, write files, or (fts3_tokenizer)
# show a heap address and register a pointer as a tokenizer.
SQLITE_DENIED_FUNCTIONS = frozenset({"load_extension", "writefile", "edit", "fts3_tokenizer"})
_SQLITE_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                   getattr(sqlite3, "SQLITE_RECURSIVE", 33)}


class QueryFailed(LedgerError):
    """The database rejected the statement (syntax, unknown column, …)."""

    exit_code = 2


class QueryTimedOut(LedgerError):
    """The statement ran longer than its timeout and was stopped (nothing was changed).

    A usage error: the statement is the user's, and so is the limit."""

    exit_code = 2


def timed_out(timeout: float) -> QueryTimedOut:
    return QueryTimedOut(f"the query was stopped after {timeout:g} s (--timeout); give a larger "
                         "--timeout, or --timeout 0 for none")


def _effective_timeout(timeout: float | None) -> float | None:
    """Seconds the statement may run, or None for no limit (0, None and infinity)."""
    import math

    if timeout is None:
        return None
    if math.isnan(timeout) or timeout < 0:
        raise BadArgument(f"--timeout takes a number of seconds >= 0 (0: none), got {timeout}")
    return None if timeout == 0 or math.isinf(timeout) else timeout


class UnknownQuery(LedgerError):
    """No saved query has that name."""

    exit_code = 2


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]

    def as_dict(self) -> dict:
        names = _unique(self.columns)
        return {"columns": names, "rows": [dict(zip(names, map(plain, row), strict=True)) for row in self.rows]}


@dataclass(frozen=True)
class Param:
    name: str
    description: str
    default: str | None  # None: required


@dataclass
class SavedQuery:
    name: str
    sql: str
    header: list[str] = field(default_factory=list)
    params: list[Param] = field(default_factory=list)
    path: str = ""  # the user's file; "" for a shipped query
    shadowed: bool = False  # a user's query whose name a shipped one has: never run

    @property
    def summary(self) -> str:
        return self.header[0] if self.header else ""

    @property
    def one_line(self) -> str:
        """The summary without its leading "name:"."""
        text = self.summary
        prefix = f"{self.name}:"
        return text[len(prefix):].strip() if text.startswith(prefix) else text

    @property
    def origin(self) -> str:
        return "yours" if self.path else "shipped"


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def plain(value: object) -> object:
    """A JSON-friendly value: exact integers stay integers, an array's and a row's items
    are made so too, and a value JSON has no type for (an interval, an address, a range)
    is its text."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():  # PostgreSQL's numeric NaN and ±Infinity
            return float(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, list | tuple):
        items = [plain(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return str(value)


# -- friendly early checks (not the guard) ------------------------------------------

_DOLLAR = re.compile(r"\$([A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")
# Commands that are not queries: refused early with a clear message. A first word
# outside this set and the reading ones is left to the database to judge.
KNOWN_NON_READING = {
    "abort", "alter", "analyze", "analyse", "attach", "begin", "call", "checkpoint", "close", "cluster", "comment",
    "commit", "copy", "create", "deallocate", "declare", "delete", "detach", "discard", "do", "drop", "end",
    "execute", "fetch", "grant", "import", "insert", "listen", "load", "lock", "merge", "move", "notify",
    "prepare", "reassign", "refresh", "reindex", "release", "replace", "reset", "revoke", "rollback",
    "savepoint", "security", "set", "start", "truncate", "unlisten", "update", "upsert", "vacuum",
}


# What continues a PostgreSQL string after its closing quote (SQL's rule): white space
# and -- comments holding at least one newline, then a quote. The next piece is then the
# same string, so an E'' string's backslash escapes go on in it. (\v: PostgreSQL 16's
# white space; to an older server it is no white space at all, so it never lexes this.)
# Possessive: each run of white space or comment is taken whole, never split two ways
# (backtracking over a long one would take exponential time).
_PG_STRING_CONTINUES = re.compile(r"(?:[ \t\f\v]|--[^\n\r]*+)*+[\n\r](?:[ \t\n\r\f\v]++|--[^\n\r]*+[\n\r])*+'")


def _is_word_char(ch: str) -> bool:
    """A character an identifier continues with. Every non-ASCII character is one to
    PostgreSQL and SQLite alike (their lexers take any byte >= 0x80), a no-break space
    included: in `x•$$` no dollar quote opens."""
    return not ch.isascii() or ch.isalnum() or ch in "_$"


def code_spans(sql: str, dialect: str = "") -> list[tuple[str, str]]:
    """(kind, text) pieces: kind is 'code', 'string', 'ident' or 'comment'.

    `dialect` picks the lexical rules: "postgresql" knows E'…' backslash escapes (in the
    string's continued pieces too), nested /* */ comments and -- comments ended by \r,
    and has no [ ] or ` quoting; "sqlite" the reverse; "" (saved queries, which run on
    both) follows SQLite's quoting.
    """
    postgres = dialect == "postgresql"
    quotes = "'\"" if postgres else "'\"`"
    spans: list[tuple[str, str]] = []
    i, n, start = 0, len(sql), 0

    def flush(upto: int) -> None:
        if upto > start:
            spans.append(("code", sql[start:upto]))

    while i < n:
        ch = sql[i]
        end = None
        kind = None
        if ch in quotes:
            kind = "string" if ch == "'" else "ident"
            backslash = (postgres and ch == "'" and i > 0 and sql[i - 1] in "Ee"
                         and not (i > 1 and _is_word_char(sql[i - 2])))
            j = i + 1
            while j < n:
                if backslash and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    if backslash and (more := _PG_STRING_CONTINUES.match(sql, j + 1)):
                        j = more.end()  # the next piece is this E'' string's, escapes and all
                        continue
                    break
                j += 1
            end = min(j + 1, n)
        elif ch == "[" and not postgres:
            kind, end = "ident", (sql.find("]", i) + 1 or n)
        elif sql.startswith("--", i):
            kind = "comment"
            end = _line_comment_end(sql, i, postgres)
        elif sql.startswith("/*", i):
            kind = "comment"
            end = _comment_end(sql, i, nested=postgres)
        elif ch == "$" and (m := _DOLLAR.match(sql, i)) and not (i and _is_word_char(sql[i - 1])):
            kind = "string"
            close = sql.find(m.group(0), m.end())
            end = n if close == -1 else close + len(m.group(0))
        if kind is None:
            i += 1
            continue
        flush(i)
        spans.append((kind, sql[i:end]))
        i = start = end
    flush(n)
    return spans


def _line_comment_end(sql: str, i: int, postgres: bool) -> int:
    """Index just past the -- comment opening at `i`: its line end included. PostgreSQL
    ends it at a carriage return too (its lexer takes \\r as a newline); SQLite only at \\n."""
    ends = [end for end in (sql.find("\n", i), sql.find("\r", i) if postgres else -1) if end != -1]
    return min(ends) + 1 if ends else len(sql)


def _comment_end(sql: str, i: int, nested: bool) -> int:
    """Index just past the block comment opening at `i` (PostgreSQL's nest)."""
    depth, j, n = 1, i + 2, len(sql)
    while j < n:
        if sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0 or not nested:
                return j
        elif nested and sql.startswith("/*", j):
            depth += 1
            j += 2
        else:
            j += 1
    return n


def statements(sql: str, dialect: str = "") -> list[str]:
    """The non-empty statements of `sql` (comments alone are not a statement)."""
    out, current, meaningful = [], [], False
    for kind, piece in code_spans(sql, dialect):
        if kind != "code":
            current.append(piece)
            meaningful = meaningful or kind != "comment"
            continue
        parts = piece.split(";")
        for k, part in enumerate(parts):
            if k:
                if meaningful:
                    out.append("".join(current).strip())
                current, meaningful = [], False
            current.append(part)
            meaningful = meaningful or bool(part.strip())
    if meaningful:
        out.append("".join(current).strip())
    return out


def _without_empty_tail(sql: str, dialect: str) -> str:
    """``sql`` up to its last character that is neither a blank, a `;` nor in a comment:
    sqlite3 takes a second `;` (`SELECT 1;;`) for a second statement, where PostgreSQL
    reads an empty one. Anything else after the statement stays, for sqlite3 to refuse."""
    end = at = 0
    for kind, piece in code_spans(sql, dialect):
        if kind == "code":
            kept = len(piece.rstrip(" \t\r\n\f\v;"))
            if kept:
                end = at + kept
        elif kind != "comment":
            end = at + len(piece)
        at += len(piece)
    return sql[:end]


def first_keyword(statement: str, dialect: str = "") -> str:
    code = " ".join(piece for kind, piece in code_spans(statement, dialect) if kind == "code")
    match = re.match(r"[\s(]*([A-Za-z]+)", code)
    return match.group(1).lower() if match else ""


def early_check(sql: str, dialect: str) -> None:
    """Refuse what is plainly not one read-only statement, with a message that says so.

    A courtesy only: the connection enforces read-only whatever this lets through.
    """
    found = statements(sql, dialect)
    if not found:
        raise BadArgument("no SQL statement given")
    # The first statement's verb before the count: a CREATE TRIGGER's BEGIN … END body
    # holds semicolons that do not end it, and "not a read-only statement" is the reason.
    keyword = first_keyword(found[0], dialect)
    if keyword in KNOWN_NON_READING or (keyword in ("pragma", "show") and keyword not in EXTRA_READING[dialect]):
        raise ReadOnlyViolation(f"refused: {keyword.upper()} is not a read-only statement; the ledger "
                                "is read-only here (SELECT, WITH, VALUES, EXPLAIN). Nothing was changed.")
    if len(found) > 1:
        raise ReadOnlyViolation(f"refused: {len(found)} statements given; `sql` and `query` run exactly one "
                                "read-only statement (nothing was run)")


# -- PostgreSQL functions that act outside the transaction --------------------------

# Functions a READ ONLY transaction does not stop: they write WAL, end or signal other
# sessions, take session locks (pg_advisory_lock blocks sync), read or write server
# files, change settings, slots, statistics or indexes, or use up a transaction id or
# an OID (PostgreSQL 16-18's names included: refused by name before any server sees them).
# A statement whose code calls one is refused before it is sent. An entry ending in "*"
# stands for every function whose name starts with what precedes it.
PG_DENIED_FUNCTIONS = (
    "pg_logical_emit_message", "pg_terminate_backend", "pg_cancel_backend", "pg_advisory_*",
    "pg_try_advisory_*", "lo_*", "pg_create_physical_replication_slot", "pg_create_logical_replication_slot",
    "pg_drop_replication_slot", "pg_copy_physical_replication_slot", "pg_copy_logical_replication_slot",
    "pg_replication_slot_advance", "pg_logical_slot_get_changes", "pg_logical_slot_get_binary_changes",
    "pg_replication_origin_*", "pg_stat_reset*", "pg_stat_statements_reset", "pg_switch_wal", "pg_switch_xlog",
    "pg_create_restore_point", "pg_backup_start", "pg_backup_stop", "pg_start_backup", "pg_stop_backup",
    "pg_reload_conf", "pg_rotate_logfile", "pg_rotate_logfile_old", "pg_log_backend_memory_contexts",
    "pg_promote", "pg_wal_replay_pause", "pg_wal_replay_resume", "pg_xlog_replay_pause", "pg_xlog_replay_resume",
    "pg_read_*", "pg_ls_*", "pg_stat_file", "pg_file_*", "set_config", "pg_notify", "dblink*",
    "pg_import_system_collations", "txid_current", "pg_current_xact_id", "brin_summarize_new_values",
    "brin_summarize_range", "brin_desummarize_range", "gin_clean_pending_list", "pg_nextoid",
    "pg_log_standby_snapshot", "pg_sync_replication_slots", "pg_restore_*", "pg_clear_*",
    "pg_hba_file_rules", "pg_ident_file_mappings", "pg_show_all_file_settings",
)
# Functions that run SQL given to them as text, or read the tables a text names (the
# views below among them), which the check above cannot read.
PG_SQL_RUNNING_FUNCTIONS = ("query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "ts_stat",
                            "ts_rewrite", "table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema",
                            "schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema")
# Views that show the server's configuration files (pg_hba.conf, pg_ident.conf,
# postgresql.conf): server files like those pg_read_file reads, refused wherever the
# statement names them.
PG_DENIED_RELATIONS = ("pg_hba_file_rules", "pg_ident_file_mappings", "pg_file_settings")

# A name (PostgreSQL's: any non-ASCII character is a letter, "$" may follow the first),
# white space, or any other one character.
_PG_CODE_TOKEN = re.compile(r"(?P<name>[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*)|(?P<space>\s+)|.",
                            re.DOTALL)
# PostgreSQL folds only ASCII letters of an unquoted name.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _pg_denied(name: str) -> bool:
    return any(name.startswith(entry[:-1]) if entry.endswith("*") else name == entry
               for entry in PG_DENIED_FUNCTIONS)


def pg_called_functions(statement: str) -> list[str]:
    """The names of the functions the statement's code calls, as PostgreSQL reads them:
    a name followed by "(", unquoted ones folded to lower case and quoted ones exact,
    whatever schema qualifies it and whatever comments sit between. Nothing in a
    string, a comment or a $$ body counts. A U&"…" name is refused: its escapes could
    spell any name."""
    tokens = _pg_tokens(statement)
    return [name for (is_name, name), after in zip(tokens, tokens[1:], strict=False)
            if is_name and after == (False, "(")]


def pg_named(statement: str) -> list[str]:
    """Every name in the statement's code (functions, tables, columns…), as
    :func:`pg_called_functions` reads them."""
    return [name for is_name, name in _pg_tokens(statement) if is_name]


def _pg_tokens(statement: str) -> list[tuple[bool, str]]:
    tokens: list[tuple[bool, str]] = []  # (is a name, its text): names, "(" and the rest
    spans = code_spans(statement, "postgresql")
    for index, (kind, piece) in enumerate(spans):
        if kind == "string":
            tokens.append((False, ""))
        elif kind == "ident":
            if index and spans[index - 1][1].endswith(("U&", "u&")):
                raise ReadOnlyViolation('refused: a U&"…" name (Unicode escapes) could spell a function that '
                                        "acts outside the read-only transaction; write the name plainly "
                                        "(nothing was run)")
            tokens.append((True, piece[1:-1].replace('""', '"')))
        elif kind == "code":
            for match in _PG_CODE_TOKEN.finditer(piece):
                if match.group("name"):
                    tokens.append((True, match.group("name").translate(_ASCII_LOWER)))
                elif not match.group("space"):
                    tokens.append((False, match.group(0)))
    return tokens


def refuse_pg_functions_outside_transaction(statement: str) -> None:
    """Refuse a statement that calls a function of :data:`PG_DENIED_FUNCTIONS` or
    :data:`PG_SQL_RUNNING_FUNCTIONS`. Defence in depth: a function someone with write
    access defines can still wrap one; the reading role is the boundary (README)."""
    for name in pg_named(statement):
        if name in PG_DENIED_RELATIONS:
            raise ReadOnlyViolation(f"refused: the statement reads {name}, which shows the server's configuration "
                                    "files (nothing was run)")
    for name in pg_called_functions(statement):
        if _pg_denied(name):
            raise ReadOnlyViolation(f"refused: the statement calls {name}, which acts outside the read-only "
                                    "transaction (nothing was run)")
        if name in PG_SQL_RUNNING_FUNCTIONS:
            raise ReadOnlyViolation(f"refused: the statement calls {name}, which runs SQL given as text, or reads "
                                    "tables named in text, that cannot be checked (nothing was run)")


# -- execution --------------------------------------------------------------------------


def _authorizer(action: int, arg1, arg2, _db, _trigger) -> int:
    if action in _SQLITE_ALLOWED:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in SQLITE_DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        # arg1 is the pragma's name and arg2 its argument, the same for `PRAGMA x = v`,
        # `PRAGMA x(v)` and the table-valued `pragma_x(v)`: one rule covers the three.
        name = (arg1 or "").lower()
        if name in SQLITE_READING_PRAGMAS and (arg2 is None or name in SQLITE_PRAGMAS_TAKING_A_NAME):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


# Table-valued functions that only read, besides the pragmas': they unpack JSON text
# (the ledger's *_json columns).
SQLITE_READING_TABLE_FUNCTIONS = ("json_each", "json_tree")


def _declare_reading_tables(conn: sqlite3.Connection) -> None:
    """Declare the table-valued functions a statement may read (the allowed pragmas'
    pragma_table_info …, and :data:`SQLITE_READING_TABLE_FUNCTIONS`) before the authorizer
    is set. SQLite declares one the first time a connection names it and asks the
    authorizer to UPDATE sqlite_master as it does, which the authorizer must refuse for
    any statement of the user's."""
    names = [f"pragma_{name}" for name in sorted(SQLITE_READING_PRAGMAS)] + list(SQLITE_READING_TABLE_FUNCTIONS)
    for name in names:
        with contextlib.suppress(sqlite3.OperationalError):  # one this SQLite does not have
            conn.execute(f"SELECT 1 FROM {name} LIMIT 0").fetchall()


def _is_write_error(message: str) -> bool:
    lowered = message.lower()
    return any(s in lowered for s in ("not authorized", "readonly", "read-only", "read only", "read-write",
                                      "query_only", "prohibited"))


def _one_line(message: str) -> str:
    return " ".join(message.strip().splitlines()[:1]) or "the database rejected the statement"


# How many SQLite virtual-machine steps run between two checks for a stop: a few
# microseconds of work, so a stop is seen at once and the check costs nothing measurable.
_PROGRESS_STEPS = 10_000
# How long a stopped statement is given to end before the caller goes on without it.
_STOP_GRACE_S = 1.0


class _SqliteStatement(threading.Thread):
    """One statement on a read-only connection of its own, run in a thread so that the
    caller waits for it, not in it: Ctrl-C and the deadline end the caller's wait at once.
    SQLite itself notices a stop (its progress handler, or an interrupt) only between
    the steps of a loop, and one step can run for hours (instr() over two strings of
    millions of characters), so a stopped statement is given a moment to end and is
    otherwise left to end by itself; its thread closes the connection when it does."""

    def __init__(self, path: str, statement: str, params: dict) -> None:
        super().__init__(name="omg-ledger sql", daemon=True)
        self._path, self._statement, self._params = path, statement, params
        self.stopped = False
        self.done = threading.Event()
        self.outcome: tuple[list[str], list[tuple]] | BaseException | None = None

    def run(self) -> None:
        try:
            conn = sqlite3.connect(f"file:{quote(self._path)}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error as exc:
            self.outcome = QueryFailed(f"cannot open {self._path} read-only: {exc}")
            self.done.set()
            return
        try:
            conn.execute("PRAGMA query_only = ON")
            _declare_reading_tables(conn)
            conn.set_authorizer(_authorizer)
            conn.set_progress_handler(lambda: int(self.stopped), _PROGRESS_STEPS)
            # sqlite3 compiles one statement and raises if anything but comments follows.
            cursor = conn.execute(self._statement, self._params)
            columns = [d[0] for d in cursor.description or []]
            self.outcome = (columns, cursor.fetchall() if cursor.description else [])
        except BaseException as exc:  # (handed to the caller, which raises it)
            self.outcome = exc
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            conn.close()
            self.done.set()

    def result(self, timeout: float | None) -> tuple[list[str], list[tuple]]:
        """Start the statement and wait for its columns and rows, at most ``timeout``
        seconds (None: no limit); a Ctrl-C while waiting stops it too."""
        self.start()
        if timeout is not None and timeout >= threading.TIMEOUT_MAX:  # (longer than any wait can be)
            timeout = None
        try:
            if not self.done.wait(timeout):
                self._stop_and_wait()
                raise timed_out(timeout)
        except KeyboardInterrupt:
            self._stop_and_wait()
            raise
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def _stop_and_wait(self) -> None:
        self.stopped = True
        self.done.wait(_STOP_GRACE_S)


def _sqlite_run(engine: Engine, statement: str, params: dict | None,
                timeout: float | None = None) -> QueryResult:
    path = getattr(engine, "sqlite_path", None)  # a ledger.ReadLedger: no Engine needed
    if path is None:
        from sqlalchemy.engine import make_url

        path = make_url(str(engine.url)).database
    if not path or path == ":memory:":
        raise BadArgument("read-only SQL needs a ledger in a file or on a server, not an in-memory SQLite")
    try:
        columns, rows = _SqliteStatement(path, statement, params or {}).result(timeout)
    except sqlite3.ProgrammingError as exc:
        if "one statement" in str(exc):
            raise ReadOnlyViolation("refused: more than one statement (nothing was run)") from exc
        raise QueryFailed(_one_line(str(exc))) from exc
    except sqlite3.Error as exc:
        if _is_write_error(str(exc)):
            raise ReadOnlyViolation(f"refused: the statement would write ({exc}); nothing was changed") from exc
        raise QueryFailed(_one_line(str(exc))) from exc
    return QueryResult(columns, rows)


# SQLSTATEs PostgreSQL raises for an attempt to write or to leave read-only mode.
_PG_READ_ONLY_STATES = {"25006", "25001"}


def _pg_refusal(sqlstate: str | None, primary: str, position: str | None = None) -> LedgerError:
    message = _one_line(primary)
    if "multiple commands" in message:
        return ReadOnlyViolation("refused: more than one statement; `sql` and `query` run exactly one "
                                 "read-only statement (nothing was run)")
    if sqlstate in _PG_READ_ONLY_STATES or _is_write_error(message):
        return ReadOnlyViolation(f"refused: the statement would write ({message}); nothing was changed")
    return QueryFailed(message + (f" (at character {position})" if position else ""))


def _pg_bind(statement: str, params: dict | None) -> tuple[str, list | None]:
    """The statement with `:name` turned into PostgreSQL's own `$n`, and the values. A
    placeholder is what `placeholders` finds: in the code, never in a string, a quoted
    name or a comment (PostgreSQL's lexical rules: E'…', $tag$…$tag$, nested comments);
    `x::int` is a cast, `:x::int` a placeholder cast."""
    if params is None:
        return statement, None
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = "".join(_PLACEHOLDER.sub(number, piece) if kind == "code" else piece
                   for kind, piece in code_spans(statement, "postgresql"))
    missing = [name for name in names if name not in params]
    if missing:
        raise BadArgument(f"missing a value for a placeholder: :{missing[0]}")
    return text, [params[name] for name in names]


# PostgreSQL's statement_timeout is an int of milliseconds.
_PG_MAX_TIMEOUT_MS = 2**31 - 1
_PG_QUERY_CANCELED = "57014"


_PG_CANCEL_WAIT_S = 5.0


def _cancel_on_server(driver) -> None:
    """Cancel the statement in progress and read its end, so the server has stopped it
    when this returns. Bounded: a server that does not answer in time is left to end
    the statement when the connection closes."""
    import select
    import time

    pgconn = driver.pgconn
    try:
        driver.cancel_safe(timeout=_PG_CANCEL_WAIT_S)
        deadline = time.monotonic() + _PG_CANCEL_WAIT_S
        while True:
            pgconn.consume_input()
            while not pgconn.is_busy():
                if pgconn.get_result() is None:
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            select.select([pgconn.socket], [], [], left)
    except Exception:  # the connection is thrown away either way
        return


def _postgres_run(engine: Engine, statement: str, params: dict | None,
                  timeout: float | None = None) -> QueryResult:
    import math
    import time

    import psycopg
    from psycopg import pq

    query, values = _pg_bind(statement, params)
    # The text the server gets, not the one written: a bound :x becomes $1, and `$:x`
    # becomes `$$1`, which opens a $$ string the written text did not have.
    refuse_pg_functions_outside_transaction(query)
    started = time.monotonic()

    def refusal(sqlstate: str | None, primary: str, position: str | None) -> LedgerError:
        # The server cancels a statement for its timeout and for other reasons (an
        # administrator's pg_cancel_backend): only ours, once it has run out, is a timeout.
        if sqlstate == _PG_QUERY_CANCELED and timeout is not None and time.monotonic() - started >= timeout:
            return timed_out(timeout)
        return _pg_refusal(sqlstate, primary, position)

    with _postgres_session(engine) as driver:
        pgconn = driver.pgconn
        try:
            driver.execute("SET TRANSACTION READ ONLY")  # the first statement: opens the transaction
            driver.execute("SET default_transaction_read_only = on")
            # The server must read quotes the way pg_called_functions and _pg_bind do: with
            # this off (a role's or database's old setting), '\'' ends a string later.
            driver.execute("SET LOCAL standard_conforming_strings = on")
            if timeout is not None:
                # LOCAL: it ends with the transaction, which is always rolled back.
                milliseconds = min(max(math.ceil(timeout * 1000), 1), _PG_MAX_TIMEOUT_MS)
                driver.execute(f"SET LOCAL statement_timeout = {milliseconds}")
            encoded = query.encode(driver.info.encoding)
            # Parse (the extended protocol's one-statement step) and Describe, without
            # running anything: a statement that returns no rows is not a query.
            for result in (pgconn.prepare(b"", encoded), pgconn.describe_prepared(b"")):
                if result.status != pq.ExecStatus.COMMAND_OK:
                    field = pq.DiagnosticField
                    raise _pg_refusal((result.error_field(field.SQLSTATE) or b"").decode(),
                                      (result.error_field(field.MESSAGE_PRIMARY) or b"").decode(errors="replace"),
                                      (result.error_field(field.STATEMENT_POSITION) or b"").decode() or None)
            if result.nfields == 0:
                raise ReadOnlyViolation("refused: the statement returns no rows, so it is not a query; `sql` "
                                        "and `query` run one SELECT, WITH, VALUES, TABLE, EXPLAIN or SHOW "
                                        "(nothing was run)")
            # The same text, run the same way (prepare=True: extended protocol, and no
            # '%' placeholder parsing in the user's literals).
            cursor = psycopg.RawCursor(driver)
            cursor.execute(query, values, prepare=True)
            columns = [d.name for d in cursor.description or []]
            rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
            if pgconn.transaction_status != pq.TransactionStatus.INTRANS:
                raise ReadOnlyViolation("refused: the statement ended the read-only transaction")
            return QueryResult(columns, rows)
        except psycopg.Error as exc:
            diag = exc.diag
            raise refusal(exc.sqlstate, diag.message_primary or str(exc), diag.statement_position) from exc
        except BaseException:
            # Ctrl-C can land between psycopg sending the statement and its wait for the
            # result, where psycopg cannot cancel it: the server would run on, and the
            # rollback below would find a command still in progress.
            if pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                _cancel_on_server(driver)
            raise
        finally:
            if pgconn.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
                with contextlib.suppress(psycopg.Error):  # (the connection is thrown away either way)
                    driver.rollback()


@contextlib.contextmanager
def _postgres_session(engine):
    """A psycopg connection for one statement, closed after it: nothing the statement did
    to the session outlives it. A ledger.PostgresReadLedger opens one of its own (no
    SQLAlchemy); from an Engine, the pool's connection is invalidated, not given back."""
    if hasattr(engine, "psycopg_session"):
        import psycopg

        from ..errors import database_trouble

        try:
            driver = engine.psycopg_session()
        except psycopg.Error as exc:  # the server went away since the ledger was opened
            raise database_trouble(exc) from exc
        try:
            yield driver
        finally:
            driver.close()
        return
    with engine.connect() as conn:
        try:
            yield conn.connection.dbapi_connection
        finally:
            conn.invalidate()


def run_sql(engine: Engine, sql: str, params: dict | None = None, timeout: float | None = None) -> QueryResult:
    """Run one read-only statement. `params` binds `:name` placeholders; `timeout`
    seconds (None or 0: no limit) stop it with :class:`QueryTimedOut`."""
    dialect = getattr(engine, "dialect_name", None) or engine.dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise BadArgument(f"read-only SQL is not supported on {dialect}")
    limit = _effective_timeout(timeout)
    require_utf8(sql, "the statement")
    for name, value in (params or {}).items():
        if isinstance(value, str):
            require_utf8(value, f"the value of :{name}")
    early_check(sql, dialect)
    statement = sql.strip()
    try:
        if dialect == "sqlite":
            return _sqlite_run(engine, _without_empty_tail(statement, dialect), params, limit)
        return _postgres_run(engine, statement, params, limit)
    except MemoryError:
        raise QueryFailed(RESULT_TOO_BIG) from None
    except QueryFailed as exc:
        if params is None and _UNBOUND.search(str(exc)):
            raise QueryFailed("the statement has a placeholder (such as ?, $1 or :name) and `sql` binds no values: "
                              "write the value into the statement, or save the statement as a query and give the "
                              "value with `query NAME --param name=…`") from exc
        raise


# The rows are all held before any is written (a table's columns are as wide as their
# widest value); libpq says "out of memory for query result" in its own words.
RESULT_TOO_BIG = "the result does not fit in memory: ask for fewer rows (LIMIT) or smaller values"


# The drivers' words for a placeholder given no value (sqlite3; PostgreSQL's server).
_UNBOUND = re.compile(r"supply a value for binding parameter|Binding \d+ has no name|"
                      r"bind message supplies 0 parameters")


# -- saved queries ----------------------------------------------------------------------

_PARAM_LINE = re.compile(r"^:(\w+)\s*(.*?)\s*(?:\[default:\s*(.*?)\s*\])?\s*$")


def parse_saved(name: str, sql: str) -> SavedQuery:
    header, params = [], []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            if stripped:
                break
            continue
        body = stripped[2:].strip()
        header.append(body)
        match = _PARAM_LINE.match(body)
        if match:
            params.append(Param(match.group(1), match.group(2), match.group(3)))
    while header and not header[-1]:
        header.pop()
    declared = {p.name for p in params}
    for used in placeholders(sql):
        if used not in declared:  # used but not described in the header: required
            params.append(Param(used, "", None))
            declared.add(used)
    return SavedQuery(name, sql, header, params)


_PLACEHOLDER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def placeholders(sql: str) -> list[str]:
    """The `:name` placeholders in the statement's code (not in strings or comments)."""
    found: list[str] = []
    for kind, piece in code_spans(sql):
        if kind == "code":
            for match in _PLACEHOLDER.finditer(piece):
                if match.group(1) not in found:
                    found.append(match.group(1))
    return found


def user_queries_dir() -> str:
    """Where a user keeps their own saved queries: queries/ in the platform's config
    directory ($XDG_CONFIG_HOME/omg-ledger/queries on Linux)."""
    import os

    from ..paths import config_dir

    return os.path.join(config_dir(), "queries")


def _user_queries(directory: str, shipped: set[str]) -> list[SavedQuery]:
    import os

    from ..files import read_text_file

    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".sql"))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BadArgument(f"cannot list the saved queries in {directory}: {exc.strerror or exc}") from exc
    found = []
    for file_name in names:
        path = os.path.join(directory, file_name)
        try:
            text = read_text_file(path, "the saved query")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadArgument(f"cannot read the saved query {path}: {getattr(exc, 'strerror', None) or exc}") from exc
        query = parse_saved(file_name[:-4], text)
        query.path = path
        query.shadowed = query.name in shipped
        found.append(query)
    return found


def saved_queries(user_dir: str | None = None) -> list[SavedQuery]:
    """The shipped queries and the user's (from `user_dir`, default :func:`user_queries_dir`),
    by name. A user's query whose name a shipped query has is listed as shadowed and never
    run: the shipped ones are documented, and their meaning must not change under a reader."""
    root = resources.files("omg_ledger.queries")
    found = [parse_saved(entry.name[:-4], entry.read_text(encoding="utf-8"))
             for entry in root.iterdir() if entry.name.endswith(".sql")]
    found += _user_queries(user_dir or user_queries_dir(), {q.name for q in found})
    return sorted(found, key=lambda q: (q.name, q.shadowed))


def saved_query(name: str, user_dir: str | None = None) -> SavedQuery:
    queries = saved_queries(user_dir)
    for query in queries:
        if query.name == name and not query.shadowed:
            return query
    names = ", ".join(q.name for q in queries if not q.shadowed)
    raise UnknownQuery(f"no saved query named {name!r} (saved: {names}; `omg-ledger query --list` describes them)")


def parse_params(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        require_utf8(pair, f"--param {key if key.isprintable() else '…'}=…")  # (a lone surrogate is not printable)
        if not sep or not key:
            raise BadArgument(f"--param takes NAME=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def _is_time(name: str) -> bool:
    return name in ("since", "until") or name.endswith("_at")


def _is_integer(name: str) -> bool:
    return name == "limit" or name.endswith("_count")


# The largest whole-number parameter: SQL's INTEGER on both backends (a saved query casts
# :limit to it; SQLite's would take 2**63 - 1 where PostgreSQL's stops here).
MAX_INTEGER_PARAM = 2**31 - 1


def typed_value(name: str, value: str, now=None, zone=None) -> object:
    """One --param value, typed by its name (module docstring). An empty time is "no bound"
    (the shipped queries' `:since = ''`); an empty number is no number."""
    if value == "" and not _is_integer(name):
        return value
    if _is_time(name):
        from ..timespec import parse_time
        from ..units import format_instant

        try:
            return format_instant(parse_time(value, now, zone))
        except BadArgument as exc:
            raise BadArgument(f"--param {name}: {exc}") from None
    if _is_integer(name):
        if not re.fullmatch(r"\s*\d{1,18}\s*", value) or int(value) > MAX_INTEGER_PARAM:
            raise BadArgument(f"--param {name} must be a whole number from 0 to {MAX_INTEGER_PARAM}, got {value!r}")
        return int(value)
    return value


def run_saved(engine: Engine, name: str, given: dict[str, str] | None = None, user_dir: str | None = None,
              now=None, zone=None, timeout: float | None = None) -> QueryResult:
    """Run a saved query (shipped, or one of the user's in ``user_dir``) with its declared
    defaults, overridden by `given`; every value typed by :func:`typed_value` (``now``
    and ``zone`` read relative and local times; ``timeout`` stops a runaway statement)."""
    query = saved_query(name, user_dir)
    given = dict(given or {})
    declared = {p.name: p for p in query.params}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise BadArgument(f"query {name} has no parameter {', '.join(unknown)} "
                          f"(it takes: {', '.join(declared) or 'none'})")
    values = {}
    for param in query.params:
        if param.name in given:
            values[param.name] = given[param.name]
        elif param.default is not None:
            values[param.name] = param.default
        else:
            told = f" ({param.description})" if param.description else ""  # a :name its header never describes
            raise BadArgument(f"query {name} needs --param {param.name}=…{told}")
    values = {key: typed_value(key, value, now, zone) for key, value in values.items()}
    return run_sql(engine, query.sql, values, timeout)
