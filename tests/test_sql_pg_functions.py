"""`omg-ledger sql` on PostgreSQL refuses, before sending it, a statement whose code
calls a function that acts outside its read-only transaction (writes WAL, ends other
sessions, takes session locks, touches server files, settings, slots or statistics),
on a real server as its superuser: the refusal is one line, exit 2, and the server is
as it was. The same name in a string, a comment or a $$ body is not a call."""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
import pytest

from omg_ledger.backend import schema_lock_key
from omg_ledger.change_check import DERIVE_SCOPE

from .test_sql_readonly import assert_refused, pg_ledger, pg_template, run_cli  # noqa: F401 (fixtures)

pytestmark = pytest.mark.postgres

OUTSIDE = "acts outside the read-only transaction"


def conninfo(url: str) -> str:
    """libpq's form of a test server's SQLAlchemy URL."""
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    return f"host={parts.query['host']} port={parts.query['port']} user={parts.username} dbname={parts.database}"


# One or more calls per family of PG_DENIED_FUNCTIONS; each runs (or fails for its own
# reasons) on the code before the check.
DENIED = [
    ("SELECT pg_logical_emit_message(false, 'x', repeat('x', 1000)) FROM generate_series(1, 3)", "wal-message"),
    ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()", "terminate"),
    ("SELECT pg_cancel_backend(pg_backend_pid())", "cancel"),
    ("SELECT pg_advisory_lock(42)", "advisory-lock"),
    ("SELECT pg_advisory_xact_lock(1, 42)", "advisory-xact-lock"),
    ("SELECT pg_try_advisory_lock(42)", "try-advisory-lock"),
    ("SELECT pg_try_advisory_xact_lock_shared(42)", "try-advisory-xact-lock-shared"),
    ("SELECT lo_from_bytea(0, 'x')", "lo-from-bytea"),
    ("SELECT lo_create(0)", "lo-create"),
    ("SELECT lo_unlink(1)", "lo-unlink"),
    ("SELECT lo_import('/etc/hostname')", "lo-import"),
    ("SELECT pg_create_physical_replication_slot('evil')", "create-slot"),
    ("SELECT pg_drop_replication_slot('evil')", "drop-slot"),
    ("SELECT pg_copy_physical_replication_slot('a', 'b')", "copy-slot"),
    ("SELECT pg_replication_origin_create('evil')", "origin"),
    ("SELECT pg_stat_reset()", "stat-reset"),
    ("SELECT pg_stat_reset_shared('bgwriter')", "stat-reset-shared"),
    ("SELECT pg_switch_wal()", "switch-wal"),
    ("SELECT pg_create_restore_point('evil')", "restore-point"),
    ("SELECT pg_backup_start('evil')", "backup-start"),
    ("SELECT pg_start_backup('evil')", "start-backup-old-name"),
    ("SELECT pg_reload_conf()", "reload-conf"),
    ("SELECT pg_rotate_logfile()", "rotate-logfile"),
    ("SELECT pg_log_backend_memory_contexts(pg_backend_pid())", "memory-contexts"),
    ("SELECT pg_promote()", "promote"),
    ("SELECT pg_wal_replay_pause()", "replay-pause"),
    ("SELECT pg_read_file('postgresql.conf')", "read-file"),
    ("SELECT pg_read_binary_file('postgresql.conf')", "read-binary-file"),
    ("SELECT * FROM pg_ls_dir('.')", "ls-dir"),
    ("SELECT * FROM pg_ls_waldir()", "ls-waldir"),
    ("SELECT pg_stat_file('postgresql.conf')", "stat-file"),
    ("SELECT pg_file_write('evil', 'x', false)", "adminpack-file-write"),
    ("SELECT set_config('work_mem', '1MB', false)", "set-config"),
    ("SELECT pg_notify('channel', 'x')", "notify"),
    ("SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(x int)", "dblink"),
    ("SELECT pg_import_system_collations('public')", "import-collations"),
    ("SELECT txid_current()", "txid-current"),
    ("SELECT pg_current_xact_id()", "current-xact-id"),
    ("SELECT brin_summarize_new_values('ix_charges_run_id')", "brin-summarize"),
    ("SELECT pg_nextoid('pg_class'::regclass, 'oid', 'pg_class_oid_index'::regclass)", "nextoid"),
    ("SELECT pg_log_standby_snapshot()", "standby-snapshot"),  # PostgreSQL 16: writes WAL
    ("SELECT pg_sync_replication_slots()", "sync-slots"),  # 17
    ("SELECT pg_restore_relation_stats('schemaname', 'public', 'relname', 'runs', 'relpages', 1)",
     "restore-stats"),  # 18: rewrites catalog statistics
    ("SELECT pg_clear_relation_stats('public', 'runs')", "clear-stats"),  # 18
]


@pytest.mark.parametrize("statement", [d[0] for d in DENIED], ids=[d[1] for d in DENIED])
def test_postgres_calls_acting_outside_the_transaction_are_refused(pg_ledger, statement):  # noqa: F811
    line = assert_refused(pg_ledger, statement, expect=OUTSIDE)
    assert "(nothing was run)" in line, line


@pytest.mark.parametrize("statement", [
    "SELECT query_to_xml('SELECT pg_try_advisory_lock(42)', true, true, '')",
    "SELECT ts_stat('SELECT to_tsvector(pg_try_advisory_lock(42)::text)')",
], ids=["query-to-xml", "ts-stat"])
def test_postgres_functions_that_run_sql_text_are_refused(pg_ledger, statement):  # noqa: F811
    """They run the SQL in their string argument, which the check does not read."""
    assert_refused(pg_ledger, statement, expect="runs SQL given as text")


@pytest.fixture
def victim(pg_ledger):  # noqa: F811
    """Another session on the ledger, open while the test runs."""
    with psycopg.connect(conninfo(pg_ledger), autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("call", [
    "pg_terminate_backend({pid})",
    "PG_TERMINATE_BACKEND({pid})",
    "pg_catalog.pg_terminate_backend({pid})",
    '"pg_terminate_backend"({pid})',
    '"pg_catalog"."pg_terminate_backend"({pid})',
    "pg_catalog . /* a comment */ pg_terminate_backend -- another\n ({pid})",
    "Pg_Cancel_Backend({pid})",
], ids=["plain", "upper-case", "qualified", "quoted", "quoted-qualified", "comments-between", "cancel"])
def test_postgres_another_session_survives_a_refused_terminate(pg_ledger, victim, call):  # noqa: F811
    pid = victim.info.backend_pid
    assert_refused(pg_ledger, f"SELECT {call.format(pid=pid)}", expect=OUTSIDE)
    assert victim.execute("SELECT 1").fetchone() == (1,)
    assert victim.execute("SELECT pg_backend_pid()").fetchone() == (pid,)


def test_postgres_no_advisory_lock_is_taken(pg_ledger):  # noqa: F811
    """sync's derive lock stays free: pg_locks, read while the command runs, never shows
    an advisory lock (the statement would hold it for two seconds)."""
    key = schema_lock_key(DERIVE_SCOPE)
    statement = f"SELECT pg_advisory_lock(1, {key}) FROM pg_sleep(2)"
    seen = []
    with psycopg.connect(conninfo(pg_ledger), autocommit=True) as watcher:
        command = subprocess.Popen([sys.executable, "-m", "omg_ledger.cli", "sql", "--db", pg_ledger, statement],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while command.poll() is None:
            seen += watcher.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory'").fetchall()
            time.sleep(0.02)
        _, stderr = command.communicate()
        assert watcher.execute("SELECT pg_try_advisory_lock(1, %s)", (key,)).fetchone() == (True,)
    assert command.returncode == 2, stderr
    assert OUTSIDE in stderr.decode() and b"Traceback" not in stderr
    assert seen == []


def test_postgres_refused_calls_leave_the_server_as_it_was(pg_server, pg_ledger, victim):  # noqa: F811
    """No WAL written, no slot created, statistics not reset, no file written by lo_export."""

    def state() -> tuple:
        return victim.execute(
            "SELECT (SELECT COUNT(*) FROM pg_replication_slots),"
            " (SELECT stats_reset FROM pg_stat_database WHERE datname = current_database())").fetchone()

    def wal() -> str:
        return victim.execute("SELECT pg_current_wal_lsn()").fetchone()[0]

    exported = pg_server.data_dir / "exported_by_sql"
    before, wal_before = state(), wal()
    assert_refused(pg_ledger, "SELECT pg_logical_emit_message(false, 'x', repeat('x', 1000000)) "
                              "FROM generate_series(1, 20)", expect=OUTSIDE)
    assert_refused(pg_ledger, "SELECT pg_create_physical_replication_slot('evil_slot')", expect=OUTSIDE)
    assert_refused(pg_ledger, "SELECT pg_stat_reset()", expect=OUTSIDE)
    assert_refused(pg_ledger, f"SELECT lo_export(lo_from_bytea(0, 'secret'), '{exported}')", expect=OUTSIDE)
    written = victim.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (wal_before,)).fetchone()[0]
    assert written < 1_000_000  # the messages alone would be 20 MB
    assert state() == before
    assert not exported.exists()


# The name in a string, an E'' string, a $$ body, a comment or a quoted column name,
# beside the same name called in code.
HIDDEN_AND_CALLED = [
    ("SELECT 'pg_terminate_backend(1)' AS s", "SELECT pg_terminate_backend(1) AS s"),
    ("SELECT E'pg_advisory_lock(\\'1\\')' AS s", "SELECT pg_advisory_lock(1) AS s"),
    ("SELECT $$lo_unlink(1)$$ AS s", "SELECT lo_unlink(1) AS s"),
    ("SELECT $body$ set_config('a', 'b', false) $body$ AS s", "SELECT set_config('a', 'b', false) AS s"),
    ("SELECT 1 AS n -- pg_cancel_backend(1)", "SELECT 1 AS n, pg_cancel_backend(1)"),
    ("SELECT 1 /* pg_switch_wal() /* nested */ */ AS n", "SELECT 1 AS n, pg_switch_wal()"),
    ('SELECT 1 AS "pg_read_file(x)"', "SELECT pg_read_file('x')"),
    ("SELECT 1 AS lo_bound, 2 AS dblink_count", "SELECT lo_get(1), dblink_connect('x')"),
]


@pytest.mark.parametrize("hidden, called", HIDDEN_AND_CALLED,
                         ids=["string", "e-string", "dollar", "tagged-dollar", "line-comment", "nested-comment",
                              "quoted-column-name", "unquoted-column-names"])
def test_postgres_only_a_call_in_the_code_is_refused(pg_ledger, hidden, called):  # noqa: F811
    result = run_cli(pg_ledger, hidden)
    assert result.exit_code == 0, result.output
    assert "(1 row(s))" in result.stdout
    assert_refused(pg_ledger, called, expect=OUTSIDE)


@pytest.mark.parametrize("before", ["\u2022", "\u00a0", "\u00e9", "\u4e2d"], ids=["bullet", "no-break-space", "e-acute", "han"])
def test_postgres_a_name_ending_in_a_non_ascii_character_opens_no_dollar_quote(pg_ledger, victim, before):  # noqa: F811
    """PostgreSQL's identifiers continue with any non-ASCII character (its lexer takes any
    byte >= 0x80, a no-break space's included) and with $: `x•$$` is one name, not the
    start of a $$ string, so a call after it is in the code and refused."""
    pid = victim.info.backend_pid
    hiding = f"SELECT 1 AS x{before}$$, pg_terminate_backend({pid}) AS y$$"
    assert_refused(pg_ledger, hiding, expect=OUTSIDE)
    assert_refused(pg_ledger, f"SELECT 1 AS {before}$$, pg_try_advisory_lock(42) AS x$$", expect=OUTSIDE)
    assert victim.execute("SELECT 1").fetchone() == (1,)  # not terminated
    # The same characters beside a real $$ string still leave its body alone.
    result = run_cli(pg_ledger, f"SELECT $$pg_terminate_backend({pid}){before}$$ AS s")
    assert result.exit_code == 0, result.output


def test_postgres_a_unicode_escaped_name_is_refused(pg_ledger, victim):  # noqa: F811
    """U&"…" can spell any name (here pg_terminate_backend): refused outright."""
    pid = victim.info.backend_pid
    line = assert_refused(pg_ledger, f'SELECT U&"pg_termin\\0061te_backend"({pid})', expect='U&"…"')
    assert "nothing was run" in line
    assert_refused(pg_ledger, 'SELECT u&"x" FROM v_runs', expect='U&"…"')
    assert victim.execute("SELECT 1").fetchone() == (1,)


def test_postgres_backslashes_cannot_hide_a_call_when_strings_take_them(pg_server, pg_ledger, victim):  # noqa: F811
    """With standard_conforming_strings off (a database's old setting), '\\'' would be one
    string to the server and an unfinished one to the check, hiding the call after it:
    the statement runs with the setting on, so both read it as one string."""
    from sqlalchemy.engine import make_url

    database = make_url(pg_ledger).database
    pg_server.execute_admin(f'ALTER DATABASE "{database}" SET standard_conforming_strings = off')
    pid = victim.info.backend_pid
    result = run_cli(pg_ledger, f"SELECT '\\'', pg_terminate_backend({pid}) --'")
    assert victim.execute("SELECT 1").fetchone() == (1,)
    assert result.exit_code == 0, result.output
    assert "pg_terminate_backend" in result.stdout  # the text of the one string


@pytest.mark.parametrize("line_end", ["\r", "\n", "\r\n"], ids=["cr", "lf", "crlf"])
def test_postgres_a_line_comment_ends_where_postgresql_ends_it(pg_ledger, victim, line_end):  # noqa: F811
    """PostgreSQL ends a -- comment at a carriage return as at a line feed: a call on the
    line after it is in the code, and refused."""
    pid = victim.info.backend_pid
    assert_refused(pg_ledger, f"SELECT 1 AS n -- a comment{line_end}, pg_terminate_backend({pid})", expect=OUTSIDE)
    assert victim.execute("SELECT 1").fetchone() == (1,)


# E'…' continued by another quoted piece after white space holding a newline (SQL's
# string continuation): the piece is part of the E'' string and takes its backslash
# escapes, so \' does not end it and the call after it is in the code.
CONTINUED_E_STRINGS = [
    ("SELECT E'a'\n'\\'', pg_terminate_backend({pid}) AS x --'", "newline"),
    ("SELECT E'a'\r'\\'', pg_terminate_backend({pid}) AS x --'", "carriage-return"),
    ("SELECT E'a' \t\n \n\f '\\'', pg_terminate_backend({pid}) AS x --'", "blank-lines"),
    ("SELECT E'a' -- a comment\n'\\'', pg_terminate_backend({pid}) AS x --'", "comment-then-newline"),
    ("SELECT E'a'\n-- a comment\n'\\'', pg_terminate_backend({pid}) AS x --'", "newline-comment-newline"),
    ("SELECT E'a'\n'b'\n'\\'', pg_terminate_backend({pid}) AS x --'", "continued-twice"),
]


@pytest.mark.parametrize("statement", [c[0] for c in CONTINUED_E_STRINGS], ids=[c[1] for c in CONTINUED_E_STRINGS])
def test_postgres_a_continued_e_string_keeps_its_escapes(pg_ledger, victim, statement):  # noqa: F811
    pid = victim.info.backend_pid
    assert_refused(pg_ledger, statement.format(pid=pid), expect=OUTSIDE)
    assert victim.execute("SELECT 1").fetchone() == (1,)


def test_postgres_a_call_inside_a_continued_string_is_text(pg_ledger, victim):  # noqa: F811
    """The converse: a name in the continuation of a string (E'' or not) is not a call."""
    pid = victim.info.backend_pid
    for statement in (f"SELECT E'a\\''\n'pg_terminate_backend({pid})' AS s",
                      f"SELECT 'a'\r'pg_terminate_backend({pid})' AS s"):
        result = run_cli(pg_ledger, statement)
        assert result.exit_code == 0, (statement, result.output)
        assert "(1 row(s))" in result.stdout
    assert victim.execute("SELECT 1").fetchone() == (1,)


# The server's configuration files (pg_hba.conf, pg_ident.conf, postgresql.conf) are
# server files like those pg_read_file reads: their views and functions are refused, and
# so are the functions that read tables named in a string (a view among them).
CONFIGURATION_FILES = [
    ("SELECT * FROM pg_hba_file_rules", "hba-view"),
    ("SELECT * FROM pg_catalog.pg_file_settings", "file-settings-view"),
    ('SELECT * FROM "pg_ident_file_mappings"', "ident-view-quoted"),
    ("SELECT * FROM pg_hba_file_rules()", "hba-function"),
    ("SELECT count(*) FROM pg_show_all_file_settings()", "file-settings-function"),
    ("SELECT table_to_xml('pg_hba_file_rules', true, false, '')", "table-to-xml"),
    ("SELECT schema_to_xml('pg_catalog', true, false, '')", "schema-to-xml"),
]


@pytest.mark.parametrize("statement", [c[0] for c in CONFIGURATION_FILES], ids=[c[1] for c in CONFIGURATION_FILES])
def test_postgres_the_servers_configuration_files_are_not_read(pg_ledger, statement):  # noqa: F811
    assert_refused(pg_ledger, statement, expect="(nothing was run)")


def test_postgres_a_configuration_view_named_in_text_is_no_reference(pg_ledger):  # noqa: F811
    result = run_cli(pg_ledger, "SELECT 'pg_hba_file_rules' AS pg_settings_view -- pg_file_settings")
    assert result.exit_code == 0, result.output


def test_postgres_a_bound_placeholder_cannot_open_a_dollar_quote_that_hides_a_call(pg_ledger, victim, tmp_path):  # noqa: F811
    """`query` sends :x as $1: after a `$`, `$:x` becomes `$$1`, the opening of a $$
    string that the text as written did not have. The call between that string's end and
    the next $$ is code to the server, and must be to the check too (a saved query is
    often someone else's file)."""
    from click.testing import CliRunner

    from omg_ledger.cli import main

    pid = victim.info.backend_pid
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "hidden.sql").write_text(
        "-- hidden: looks like one string after $\n-- :x  any value [default: 1]\n"
        f"SELECT :x::text AS p, $:x $$, pg_terminate_backend({pid}) AS t, $$ AS s $$\n", encoding="utf-8")
    (queries / "plain.sql").write_text(  # a placeholder beside a real $$ string still binds
        "-- plain: a value and a $$ string\n-- :x  any value [default: 1]\n"
        "SELECT :x::text AS p, $$a :x b$$ AS s\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["query", "--db", pg_ledger, "--queries", str(queries), "hidden"])
    assert victim.execute("SELECT 1").fetchone() == (1,)  # not terminated
    assert result.exit_code == 2, result.output
    assert OUTSIDE in result.stderr and "pg_terminate_backend" in result.stderr, result.stderr
    plain = CliRunner().invoke(main, ["query", "--db", pg_ledger, "--queries", str(queries), "--json", "plain",
                                      "--param", "x=7"])
    assert plain.exit_code == 0, plain.output
    assert '"p": "7"' in plain.stdout and '"s": "a :x b"' in plain.stdout, plain.stdout
