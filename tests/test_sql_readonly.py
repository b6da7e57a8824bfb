"""`omg-ledger sql` can never write, whatever the statement text: tricks that fool a
statement splitter (PostgreSQL's E'' escapes and nested comments, quote characters
only SQLite knows) must still change nothing, on a real PostgreSQL server and on
SQLite. Every case runs the command line and then compares the ledger's row counts,
money total, tables and sequences with what they were before."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from omg_ledger.cli import main

from .test_cost import ledger

TABLES = ("homes", "runs", "charges", "nodes", "legs", "problems")


def fingerprint(url: str) -> tuple:
    """Row counts, the money total, the table names, and the sequence positions (PostgreSQL)
    or the schema version (SQLite)."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            counts = tuple(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar() for t in TABLES)
            money = conn.execute(text("SELECT SUM(cost_nano_usd) FROM charges")).scalar()
            if engine.dialect.name == "sqlite":
                names = conn.execute(text("SELECT type, name FROM sqlite_master ORDER BY 1, 2")).all()
                sequences = [(conn.execute(text("PRAGMA user_version")).scalar(),)]
            else:
                names = conn.execute(text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2")).all()
                sequences = conn.execute(text(
                    "SELECT sequencename, last_value FROM pg_sequences ORDER BY 1")).all()
    finally:
        engine.dispose()
    return counts, int(money), tuple(map(tuple, names)), tuple(map(tuple, sequences))


@pytest.fixture(scope="module")
def pg_template(pg_server, tmp_path_factory):
    """One PostgreSQL ledger holding the synced corpus; each test works on a copy."""
    from .conftest import CORPUS_HOME

    name = f"sqlro_{uuid.uuid4().hex[:10]}"
    engine = ledger(pg_server.create_database(name), CORPUS_HOME, "corpus")
    engine.dispose()
    yield name
    pg_server.drop_database(name)


@pytest.fixture
def pg_ledger(pg_server, pg_template):
    name = f"sqlro_{uuid.uuid4().hex[:10]}"
    url = pg_server.create_database(name, template=pg_template)
    yield url
    pg_server.drop_database(name)


@pytest.fixture
def sqlite_ledger(sqlite_url, corpus_home):
    ledger(sqlite_url, corpus_home, "corpus").dispose()
    return sqlite_url


def run_cli(url: str, statement: str):
    return CliRunner().invoke(main, ["sql", "--db", url, statement])


def assert_refused(url: str, statement: str, expect: str = "refused") -> str:
    """The command fails with one clear line on stderr and the ledger is unchanged."""
    before = fingerprint(url)
    assert before[0][1] == 25, before  # the corpus: 25 runs
    result = run_cli(url, statement)
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert result.exit_code not in (0, None), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omg-ledger: error: "), result.stderr
    assert expect in lines[0], lines[0]
    assert result.stdout == ""
    assert fingerprint(url) == before
    return lines[0]


# Each of these is one statement to a splitter that reads quotes and comments the
# SQLite way, and several statements to PostgreSQL.
SPLITTER_TRICKS = [
    ("SELECT E'\\''; COMMIT; DELETE FROM runs; -- '", "e-string-escape"),
    ("SELECT e'\\''; COMMIT; DELETE FROM runs; -- '", "e-string-lowercase"),
    ("SELECT E'\\\\\\''; COMMIT; DELETE FROM runs; -- '", "e-string-escaped-backslash-then-quote"),
    ("SELECT 1 /* /* */ [ */ ; COMMIT; INSERT INTO homes (label, path) VALUES ('x', '/x'); -- ]",
     "nested-comment-bracket-insert"),
    ("SELECT 1 /* /* */ [ */ ; COMMIT; DELETE FROM runs; -- ]", "nested-comment-bracket-delete"),
    ("SELECT 1 /* /* */ ` */ ; COMMIT; DELETE FROM runs; -- `", "nested-comment-backtick"),
    ("SELECT 1 /* /* */ \" */ ; COMMIT; DELETE FROM runs; -- \"", "nested-comment-double-quote"),
    ("SELECT 1 /* /* */ ' */ ; COMMIT; DELETE FROM runs; -- '", "nested-comment-single-quote"),
    ("SELECT 1 /* /* */ $$ */ ; COMMIT; DELETE FROM runs; -- $$", "nested-comment-dollar"),
    ("SELECT 1 /* /* */ /* */ */ */ ; COMMIT; DROP TABLE charges CASCADE; -- */", "nested-comment-drop"),
    ("SELECT E'\\''; COMMIT; UPDATE charges SET cost_nano_usd = 0; -- '", "e-string-update"),
    ("SELECT E'\\''; COMMIT; TRUNCATE runs CASCADE; -- '", "e-string-truncate"),
    ("SELECT E'\\''; SET TRANSACTION READ WRITE; DELETE FROM runs; -- '", "e-string-read-write"),
]

# Writes that the old code already refused; they must stay refused.
ALREADY_REFUSED = [
    ("DELETE FROM runs", "delete"),
    ("SELECT 1; DELETE FROM runs", "two-statements"),
    ("COMMIT; DELETE FROM runs", "commit-then-delete"),
    ("SELECT 1; COMMIT; DELETE FROM runs; --", "select-commit-delete"),
    ("SELECT $$;$$; COMMIT; DELETE FROM runs", "dollar-then-commit"),
    ("SELECT $a$ ; $a$; COMMIT; DELETE FROM runs", "tagged-dollar-then-commit"),
    ("WITH d AS (DELETE FROM runs RETURNING 1) SELECT * FROM d", "data-modifying-cte"),
    ("EXPLAIN ANALYZE DELETE FROM runs", "explain-analyze-delete"),
    ("SELECT set_config('transaction_read_only', 'off', true)", "set-config-read-write"),
    ("SELECT nextval(pg_get_serial_sequence('runs', 'id'))", "nextval"),
    ("SELECT * FROM runs FOR UPDATE", "select-for-update"),
    ("/* SELECT */ DELETE FROM runs", "comment-disguised"),
    ("CREATE TEMP TABLE evil AS SELECT 1", "create-temp"),
]

# A keyword hidden from the splitter by a nested comment: PostgreSQL sees one
# statement that is not a query.
DISGUISED = [
    ("/* /* */ SELECT */ DELETE FROM runs", "nested-comment-delete"),
    ("/* /* */ SELECT */ COMMIT", "nested-comment-commit"),
    ("/* /* */ SELECT */ ROLLBACK", "nested-comment-rollback"),
    ("/* /* */ SELECT */ SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "nested-comment-set-session"),
    ("/* /* */ SELECT */ COPY (SELECT 1) TO PROGRAM 'true'", "nested-comment-copy-to-program"),
]


@pytest.mark.postgres
@pytest.mark.parametrize("statement", [t[0] for t in SPLITTER_TRICKS], ids=[t[1] for t in SPLITTER_TRICKS])
def test_postgres_splitter_tricks_change_nothing(pg_ledger, statement):
    assert_refused(pg_ledger, statement)


@pytest.mark.postgres
@pytest.mark.parametrize("statement", [t[0] for t in ALREADY_REFUSED + DISGUISED],
                         ids=[t[1] for t in ALREADY_REFUSED + DISGUISED])
def test_postgres_writes_stay_refused(pg_ledger, statement):
    assert_refused(pg_ledger, statement)


@pytest.mark.postgres
def test_postgres_the_connection_refuses_several_statements_without_the_splitter(pg_ledger, monkeypatch):
    """The guard is the protocol, not the parser: with the friendly checks switched
    off, PostgreSQL itself refuses a second statement."""
    from omg_ledger.reports import sql as sqlmod

    monkeypatch.setattr(sqlmod, "early_check", lambda sql, dialect: None)
    for statement in ("SELECT 1; DELETE FROM runs", "SELECT 1; COMMIT; DELETE FROM runs",
                      "COMMIT; INSERT INTO homes (label, path) VALUES ('x', '/x')"):
        assert_refused(pg_ledger, statement)
    # Not queries: PostgreSQL describes them as returning no rows, so they never run.
    for statement in ("DELETE FROM runs", "COMMIT", "COPY (SELECT 1) TO STDOUT", "SET search_path = x"):
        assert_refused(pg_ledger, statement)
    # Writes that do return rows run, and the read-only transaction refuses them.
    for statement in ("DELETE FROM runs RETURNING run_id", "UPDATE charges SET cost_nano_usd = 0 RETURNING 1",
                      "INSERT INTO homes (label, path) VALUES ('x', '/x') RETURNING id"):
        line = assert_refused(pg_ledger, statement)
        assert "read-only transaction" in line, line


@pytest.mark.parametrize("statement", [t[0] for t in SPLITTER_TRICKS + ALREADY_REFUSED[:8] + DISGUISED[:3]],
                         ids=[t[1] for t in SPLITTER_TRICKS + ALREADY_REFUSED[:8] + DISGUISED[:3]])
def test_sqlite_the_same_tricks_change_nothing(sqlite_ledger, statement):
    """SQLite reads some of these as one SELECT (`[…]`, `…` and "…" are identifiers
    there, comments do not nest): that one row is fine; anything else is refused."""
    before = fingerprint(sqlite_ledger)
    result = run_cli(sqlite_ledger, statement)
    if result.exit_code == 0:
        assert result.stdout.endswith("(1 row(s))\n"), result.stdout
    else:
        assert isinstance(result.exception, SystemExit), result.exception
        assert result.stderr.startswith("omg-ledger: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert fingerprint(sqlite_ledger) == before


def test_sqlite_several_statements_refused_without_the_splitter(sqlite_ledger, monkeypatch):
    from omg_ledger.reports import sql as sqlmod

    monkeypatch.setattr(sqlmod, "early_check", lambda sql, dialect: None)
    for statement in ("SELECT 1; DELETE FROM runs", "DELETE FROM runs", "BEGIN", "ATTACH ':memory:' AS x"):
        assert_refused(sqlite_ledger, statement)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_syntax_error_is_reported_as_one(backend, request):
    url = request.getfixturevalue("sqlite_ledger" if backend == "sqlite" else "pg_ledger")
    for statement in ("SELEC 1", "SELECT FROM WHERE", "(((", "FROBNICATE runs"):
        line = assert_refused(url, statement, expect="syntax error")
        assert "read-only" not in line, line


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_reads_still_work_after_the_guards(backend, request):
    url = request.getfixturevalue("sqlite_ledger" if backend == "sqlite" else "pg_ledger")
    before = fingerprint(url)
    for statement, expected in [
        ("SELECT COUNT(*) AS n FROM runs", "25"),
        ("SELECT '100%' AS p, 'a;b' AS s, ':x' AS c", "100%"),
        ("SELECT 1 AS one; -- a trailing comment", "1"),
        ("WITH x AS (SELECT 2 AS two) SELECT two FROM x;", "2"),
    ]:
        result = run_cli(url, statement)
        assert result.exit_code == 0, result.output
        assert expected in result.stdout
    if backend == "postgresql":
        for statement, expected in [("SELECT E'it''s \\x41'", "it's A"),
                                    ("SELECT 1 /* nested /* comment */ still */ AS n", "1"),
                                    ("SHOW transaction_read_only", "on"),
                                    # function calls, none of them one that acts outside the transaction
                                    ("SELECT lower(ledger_state) AS s, coalesce(MAX(run_id), '') FROM v_runs "
                                     "GROUP BY 1 ORDER BY 1 LIMIT 1", "fail"),
                                    ("SELECT length('lo_unlink(1)') AS n, pg_backend_pid() > 0 AS p", "12"),
                                    ('SELECT "count"(*) AS n FROM pg_catalog.pg_locks', "n"),
                                    ("SELECT runtime, SUM(cost_nano_usd) AS c FROM v_charges GROUP BY runtime",
                                     "codex")]:
            result = run_cli(url, statement)
            assert result.exit_code == 0, result.output
            assert expected in result.stdout, result.stdout
    assert fingerprint(url) == before


@pytest.mark.parametrize("sql, dialect, expected", [
    ("SELECT E'\\''; DELETE FROM runs; -- '", "postgresql", ["SELECT E'\\''", "DELETE FROM runs"]),
    ("SELECT E'\\''; DELETE FROM runs; -- '", "sqlite", ["SELECT E'\\''; DELETE FROM runs; -- '"]),
    ("SELECT e'a\\\\'; SELECT 2", "postgresql", ["SELECT e'a\\\\'", "SELECT 2"]),
    ("SELECT 'a\\'; SELECT 2", "postgresql", ["SELECT 'a\\'", "SELECT 2"]),  # standard strings: no escapes
    ("SELECT typE'x'", "postgresql", ["SELECT typE'x'"]),
    ("SELECT 1 /* /* */ [ */ ; DELETE FROM runs; -- ]", "postgresql",
     ["SELECT 1 /* /* */ [ */", "DELETE FROM runs"]),
    ("SELECT 1 /* /* */ [ */ ; DELETE FROM runs; -- ]", "sqlite",
     ["SELECT 1 /* /* */ [ */ ; DELETE FROM runs; -- ]"]),
    ("SELECT 1 /* a /* b */ ; */ AS n", "postgresql", ["SELECT 1 /* a /* b */ ; */ AS n"]),
    ("SELECT $é$;$é$", "postgresql", ["SELECT $é$;$é$"]),
], ids=["e-string-pg", "e-string-sqlite", "e-string-escaped-backslash", "standard-string-pg", "e-ending-word",
        "nested-pg", "nested-sqlite", "nested-semicolon", "dollar-non-ascii-tag"])
def test_the_early_check_reads_text_the_way_the_dialect_does(sql, dialect, expected):
    """The friendly check's splitting, per dialect (a courtesy: the guard is the connection)."""
    from omg_ledger.reports.sql import statements

    assert statements(sql, dialect) == expected


def test_the_early_check_finds_a_keyword_hidden_by_a_nested_comment():
    from omg_ledger.reports.sql import first_keyword

    assert first_keyword("/* /* */ SELECT */ DELETE FROM runs", "postgresql") == "delete"
    assert first_keyword("/* /* */ SELECT */ DELETE FROM runs", "sqlite") == "select"


def test_sqlite_fts3_tokenizer_is_refused(sqlite_ledger):
    """fts3_tokenizer('simple') returns the address of a tokenizer module (a heap
    pointer), and with a second argument registers any pointer as one."""
    for statement in ("SELECT hex(fts3_tokenizer('simple'))",
                      "SELECT fts3_tokenizer('evil', x'4141414141414141')",
                      "SELECT FTS3_Tokenizer('simple')"):
        assert "fts3_tokenizer" in assert_refused(sqlite_ledger, statement).lower()


READING_PRAGMAS = [
    "SELECT name FROM pragma_table_info('runs')",
    "SELECT * FROM main.pragma_table_xinfo('runs')",
    "PRAGMA table_info(runs)",
    "PRAGMA main.table_info(runs)",
    "SELECT * FROM pragma_index_list('runs')",
    "SELECT * FROM pragma_index_info('ix_runs_stream_identity')",
    "SELECT * FROM pragma_foreign_key_list('charges')",
    "PRAGMA foreign_key_check",
    "SELECT * FROM pragma_table_list",
    "PRAGMA user_version",
    "SELECT * FROM pragma_user_version",
    "PRAGMA application_id",
    "PRAGMA schema_version",
    "PRAGMA data_version",
    "PRAGMA query_only",
    "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size",
    "PRAGMA freelist_count",
    "PRAGMA encoding",
    "SELECT COUNT(*) FROM pragma_compile_options",
    "SELECT COUNT(*) FROM pragma_function_list",
    "SELECT COUNT(*) FROM pragma_pragma_list",
    "PRAGMA collation_list",
    "PRAGMA module_list",
    "PRAGMA database_list",
    "PRAGMA integrity_check",
    "SELECT * FROM pragma_quick_check('runs')",
]


def test_sqlite_reading_pragmas_run(sqlite_ledger):
    """Each allowed pragma, as a PRAGMA and as a table-valued pragma_… function: it runs,
    and the ledger is unchanged."""
    before = fingerprint(sqlite_ledger)
    for statement in READING_PRAGMAS:
        result = run_cli(sqlite_ledger, statement)
        assert result.exit_code == 0, (statement, result.output)
        assert "row(s))" in result.stdout, (statement, result.stdout)
    assert run_cli(sqlite_ledger, "SELECT name FROM pragma_table_info('runs') WHERE name = 'home_id'").stdout \
        .splitlines()[2] == "home_id"
    assert fingerprint(sqlite_ledger) == before


def test_sqlite_setting_a_pragma_stays_refused_in_every_form(sqlite_ledger):
    """`PRAGMA x = v` and `PRAGMA x(v)` both reach the authorizer with the value: a value
    for a pragma that only reads when given none is refused, and a pragma outside the
    allowed ones is refused even as a read. The fingerprint holds the ledger's user_version."""
    for statement in ("PRAGMA user_version = 7", "PRAGMA user_version(7)", "PRAGMA main.user_version = 7",
                      "PRAGMA \"user_version\" = 7", "PRAGMA application_id = 7", "PRAGMA application_id(7)",
                      "PRAGMA schema_version = 99", "PRAGMA schema_version(99)", "PRAGMA query_only = OFF",
                      "PRAGMA query_only(0)", "PRAGMA page_size = 1024", "PRAGMA encoding = 'UTF-16'",
                      "PRAGMA journal_mode", "PRAGMA journal_mode = DELETE", "SELECT * FROM pragma_journal_mode",
                      "PRAGMA foreign_keys", "PRAGMA optimize", "PRAGMA wal_checkpoint", "PRAGMA writable_schema"):
        assert_refused(sqlite_ledger, statement)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_text_that_is_not_utf8_is_one_line_error(backend, request, tmp_path):
    """Bytes that are not UTF-8 (bash's $'\\xff') in the statement or in a --param value,
    through the real command line: one line naming the byte, exit 2, no traceback."""
    url = request.getfixturevalue("sqlite_ledger" if backend == "sqlite" else "pg_ledger")
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "by_runtime.sql").write_text(
        "-- by_runtime: charges of one runtime\n-- :runtime  the runtime\n"
        "SELECT COUNT(*) AS n FROM v_charges WHERE runtime = :runtime\n", encoding="utf-8")
    before = fingerprint(url)
    command = [sys.executable, "-m", "omg_ledger.cli"]
    query = [*command, "query", "--db", url, "--queries", str(tmp_path / "q"), "by_runtime"]
    for args, expected in [
        ([*command, "sql", "--db", url, b"SELECT '\xff'"], "the statement is not valid UTF-8 at byte 9"),
        ([*command, "sql", "--db", url, "SELECT 'é".encode() + b"\xfe\xff' AS s"],
         "the statement is not valid UTF-8 at byte 11"),
        ([*query, "--param", b"runtime=co\xffdex"], "--param runtime=… is not valid UTF-8 at byte 11"),
        ([*query, "--param", b"run\xfftime=codex"], "--param …=… is not valid UTF-8 at byte 4"),
    ]:
        result = subprocess.run(args, capture_output=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.decode() == f"omg-ledger: error: {expected}\n"
        assert result.stdout == b""
    assert subprocess.run([*query, "--param", "runtime=codex"], capture_output=True, timeout=120).stdout \
        .splitlines()[2].strip() == b"6"
    assert fingerprint(url) == before


def test_sqlite_a_trigger_body_is_refused_as_a_write_not_as_two_statements(sqlite_ledger):
    """The semicolon in BEGIN … END does not end a CREATE TRIGGER: the reason given is
    the write."""
    for statement in ("CREATE TEMP TRIGGER t AFTER INSERT ON runs BEGIN SELECT 1; END",
                      "CREATE TRIGGER t AFTER INSERT ON runs BEGIN DELETE FROM charges; SELECT 1; END;"):
        line = assert_refused(sqlite_ledger, statement, expect="CREATE is not a read-only statement")
        assert "statements given" not in line


def test_sqlite_json_table_functions_read(sqlite_ledger):
    """json_each and json_tree unpack the ledger's JSON columns (inputs_json,
    gate_decisions_json…). SQLite declares such a table the first time a connection names
    it, asking the authorizer to UPDATE sqlite_master as it does: they were refused as
    "vtable constructor failed", a read a user needs."""
    before = fingerprint(sqlite_ledger)
    for statement, expected in [
        ("SELECT COUNT(*) AS n FROM json_each('[10, 20, 30]')", "3"),
        ("SELECT SUM(value) AS n FROM json_each('[10, 20, 30]')", "60"),
        ("SELECT COUNT(*) AS n FROM json_tree('{\"a\": [1, 2]}')", "4"),  # the root, a, a[0], a[1]
        ("SELECT COUNT(*) AS n FROM runs, json_each(runs.inputs_json) WHERE runs.inputs_json IS NOT NULL", None),
    ]:
        result = run_cli(sqlite_ledger, statement)
        assert result.exit_code == 0, (statement, result.output)
        assert "(1 row(s))" in result.stdout, result.stdout
        if expected is not None:
            assert result.stdout.splitlines()[2].strip() == expected, result.stdout
    assert fingerprint(sqlite_ledger) == before


@pytest.mark.postgres
def test_postgres_values_without_a_json_type_are_written(pg_ledger):
    """PostgreSQL hands back values JSON has no type for: numeric's Infinity and NaN, an
    interval (a difference of two times), numbers inside an array, an address, a range.
    Each format writes them (the table and CSV as the JSON's text): no traceback."""
    import json

    statement = ("SELECT 'Infinity'::numeric AS inf, 'NaN'::numeric AS nan, ARRAY[1.5::numeric, 2] AS a, "
                 "'1 day 02:00:00'::interval AS d, '10.0.0.1'::inet AS i, int4range(1, 5) AS r")
    result = CliRunner().invoke(main, ["sql", "--db", pg_ledger, "--json", statement])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == [
        {"inf": None, "nan": None, "a": [1.5, 2], "d": "1 day, 2:00:00", "i": "10.0.0.1", "r": "[1, 5)"}]
    result = CliRunner().invoke(main, ["sql", "--db", pg_ledger, "--csv", statement])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["inf,nan,a,d,i,r", 'inf,nan,"[1.5, 2]","1 day, 2:00:00",10.0.0.1,"[1, 5)"']
    result = CliRunner().invoke(main, ["sql", "--db", pg_ledger, statement])
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("(1 row(s))\n"), result.stdout


def _one_gib_of_address_space() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY))


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_result_larger_than_memory_is_one_line_and_exit_2(backend, request):
    """20 values of 100 MB (2 GB) under a 1 GiB address space: MemoryError was a
    traceback and exit 1 on SQLite. Nothing is changed, and the message says so in one line."""
    url = request.getfixturevalue("sqlite_ledger" if backend == "sqlite" else "pg_ledger")
    value = "zeroblob(100000000)" if backend == "sqlite" else "repeat('x', 100000000)"
    before = fingerprint(url)
    for command in ("sql", "sql --json"):
        result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *command.split(), "--db", url,
                                 "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 20) "
                                 f"SELECT i, {value} AS v FROM r"],
                                capture_output=True, text=True, timeout=300, preexec_fn=_one_gib_of_address_space)
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr.startswith("omg-ledger: error: "), result.stderr[-2000:]
        assert "memory" in result.stderr, result.stderr  # (libpq's own words on PostgreSQL)
        assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert fingerprint(url) == before
