"""`omg-ledger sql`: read-only, on SQLite and PostgreSQL. Every refusal must change
nothing: the test fingerprints the ledger before and after."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from omg_ledger.cli import main
from omg_ledger.errors import ReadOnlyViolation
from omg_ledger.reports import sql as sqlmod
from omg_ledger.reports.sql import QueryFailed, run_sql, statements

from .test_cost import ledger


def fingerprint(engine) -> tuple:
    with engine.connect() as conn:
        counts = tuple(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar()
                       for t in ("homes", "runs", "charges", "nodes", "legs"))
        money = conn.execute(text("SELECT SUM(cost_nano_usd) FROM charges")).scalar()
        names = conn.execute(text(
            "SELECT name FROM sqlite_master ORDER BY name" if engine.dialect.name == "sqlite" else
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")).all()
        version = (conn.execute(text("PRAGMA user_version")).scalar()
                   if engine.dialect.name == "sqlite" else None)
    return counts, int(money), tuple(n[0] for n in names), version


@pytest.fixture
def corpus_ledger(db_url, corpus_home):
    return ledger(db_url, corpus_home, "corpus")


WRITES = [
    ("DELETE FROM runs", "delete"),
    ("UPDATE charges SET cost_nano_usd = 0", "update"),
    ("INSERT INTO homes (label, path) VALUES ('x', '/x')", "insert"),
    ("DROP TABLE charges", "drop-table"),
    ("DROP VIEW v_charges", "drop-view"),
    ("CREATE TABLE evil (x INTEGER)", "create"),
    ("CREATE TEMP TABLE evil (x INTEGER)", "create-temp"),
    ("SELECT 1; DELETE FROM runs", "two-statements"),
    ("SELECT 1;\nDELETE FROM runs;", "two-statements-newline"),
    ("COMMIT; DELETE FROM runs", "commit-then-delete"),
    ("WITH x AS (SELECT 1) DELETE FROM runs", "with-delete"),
    ("/* SELECT */ DELETE FROM runs", "comment-disguised"),
    ("BEGIN", "begin"),
    ("VACUUM", "vacuum"),
]


@pytest.mark.parametrize("statement", [w[0] for w in WRITES], ids=[w[1] for w in WRITES])
def test_writes_are_refused_and_change_nothing(corpus_ledger, statement):
    before = fingerprint(corpus_ledger)
    with pytest.raises(ReadOnlyViolation, match="refused"):
        run_sql(corpus_ledger, statement)
    assert fingerprint(corpus_ledger) == before


@pytest.mark.parametrize("statement", [
    "PRAGMA user_version = 7",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA writable_schema = ON",
], ids=["user-version", "query-only-off", "journal-mode", "writable-schema"])
def test_sqlite_pragma_writes_refused(sqlite_url, corpus_home, statement):
    engine = ledger(sqlite_url, corpus_home, "corpus")
    before = fingerprint(engine)
    with pytest.raises(ReadOnlyViolation):
        run_sql(engine, statement)
    assert fingerprint(engine) == before


def test_sqlite_attach_refused_and_creates_no_file(sqlite_url, corpus_home, tmp_path):
    engine = ledger(sqlite_url, corpus_home, "corpus")
    target = tmp_path / "other.sqlite"
    with pytest.raises(ReadOnlyViolation):
        run_sql(engine, f"ATTACH DATABASE '{target}' AS other")
    assert not target.exists()


def test_the_connection_itself_is_read_only(corpus_ledger):
    """Past the statement check, the database layer refuses on its own."""
    before = fingerprint(corpus_ledger)
    runner = sqlmod._sqlite_run if corpus_ledger.dialect.name == "sqlite" else sqlmod._postgres_run
    for statement in ("DELETE FROM runs", "UPDATE homes SET label = 'x'", "CREATE TABLE evil (x INTEGER)"):
        with pytest.raises(ReadOnlyViolation):
            runner(corpus_ledger, statement, None)
    assert fingerprint(corpus_ledger) == before


def test_reads_work(corpus_ledger):
    result = run_sql(corpus_ledger, "SELECT COUNT(*) AS n, SUM(cost_nano_usd) AS nanos FROM v_charges")
    assert result.columns == ["n", "nanos"]
    n, nanos = result.rows[0]
    assert int(nanos) == 1_716_700_000  # the corpus total (see test_cost.test_corpus_total_by_hand)
    # literals with ; % and : stay literal; a trailing semicolon and comments are fine
    odd = run_sql(corpus_ledger, "SELECT 'a;b' AS s, '100%' AS p, '10:30' AS c -- trailing; comment\n;")
    assert odd.rows == [("a;b", "100%", "10:30")]
    # Empty statements after the one: none on either database.
    assert run_sql(corpus_ledger, "SELECT ';;' AS s;; ; -- and a comment\n;").rows == [(";;",)]
    with pytest.raises(QueryFailed):
        run_sql(corpus_ledger, "SELECT no_such_column FROM runs")


def test_sqlite_reading_pragma_allowed(sqlite_url, corpus_home):
    engine = ledger(sqlite_url, corpus_home, "corpus")
    names = [row[1] for row in run_sql(engine, "PRAGMA table_info(charges)").rows]
    assert "cost_nano_usd" in names


@pytest.mark.parametrize("sql, expected", [
    ("SELECT 1", ["SELECT 1"]),
    ("SELECT 1;", ["SELECT 1"]),
    ("SELECT ';'; SELECT 2", ["SELECT ';'", "SELECT 2"]),
    ("-- only a comment\n", []),
    ("SELECT $$a;b$$", ["SELECT $$a;b$$"]),
    ('SELECT "a;b" FROM t', ['SELECT "a;b" FROM t']),
    ("SELECT 1 /* ; */", ["SELECT 1 /* ; */"]),
], ids=["plain", "trailing", "quoted", "comment-only", "dollar", "ident", "block-comment"])
def test_statement_splitting(sql, expected):
    assert statements(sql) == expected


def test_cli(sqlite_url, corpus_home):
    ledger(sqlite_url, corpus_home, "corpus")
    runner = CliRunner()
    refused = runner.invoke(main, ["sql", "--db", sqlite_url, "DELETE FROM runs"])
    assert refused.exit_code == 2
    assert "refused" in refused.output and "Nothing was changed" in refused.output
    doc = json.loads(runner.invoke(main, ["sql", "--db", sqlite_url, "--json",
                                          "SELECT runtime, COUNT(*) AS n FROM v_charges "
                                          "WHERE runtime = 'codex' GROUP BY runtime"]).output)
    assert doc == {"columns": ["runtime", "n"], "rows": [{"runtime": "codex", "n": 6}]}
    csv_out = runner.invoke(main, ["sql", "--db", sqlite_url, "--csv", "SELECT 1 AS a, NULL AS b"]).output
    assert csv_out == "a,b\n1,\n"
    table = runner.invoke(main, ["sql", "--db", sqlite_url, "SELECT 1 AS a"]).output
    assert "(1 row(s))" in table


def test_postgresql_placeholders_are_numbered_in_code_only():
    """`:name` becomes `$n` where PostgreSQL's lexer would see code: not in a string, an
    E'' string, a dollar-quoted body, a quoted name or a comment; a repeated name is one
    value; `x::int` is a cast and `:a::int` a placeholder cast."""
    from omg_ledger.errors import BadArgument
    from omg_ledger.reports.sql import _pg_bind

    statement = ("SELECT :a, ':b', E'\\':c', $$:d$$, \"x:e\", :a::int, n::int -- :f\n"
                 "/* :g /* :h */ */ FROM t WHERE y = :i")
    assert _pg_bind(statement, {"a": 1, "i": "two", "unused": 3}) == (
        "SELECT $1, ':b', E'\\':c', $$:d$$, \"x:e\", $1::int, n::int -- :f\n"
        "/* :g /* :h */ */ FROM t WHERE y = $2", [1, "two"])
    assert _pg_bind(statement, None) == (statement, None)
    with pytest.raises(BadArgument, match="missing a value for a placeholder: :i"):
        _pg_bind(statement, {"a": 1})


def test_sql_help_says_how_to_give_a_statement_starting_with_a_comment(sqlite_url, corpus_home):
    """click reads "-- c" as an option; after "--" it is the statement, as --help says."""
    ledger(sqlite_url, corpus_home, "corpus")
    runner = CliRunner()
    assert 'goes after "--"' in " ".join(runner.invoke(main, ["sql", "--help"]).output.split())
    result = runner.invoke(main, ["sql", "--db", sqlite_url, "--json", "--", "-- runs per state\n"
                                  "SELECT COUNT(*) AS n FROM v_runs"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows"] == [{"n": 25}]


@pytest.mark.parametrize("statement", ["SELECT ?", "SELECT $1", "SELECT :since", "SELECT 1 WHERE 'a' = ?1"],
                         ids=["question-mark", "dollar", "named", "numbered"])
def test_a_placeholder_given_no_value_says_how_to_give_one(corpus_ledger, statement):
    # `sql` binds nothing: each backend's own words for it (a prepared statement's internal
    # name on PostgreSQL) are replaced by what to do. PostgreSQL reads only $1 as one.
    if corpus_ledger.dialect.name == "postgresql" and "$" not in statement:
        with pytest.raises(QueryFailed) as refused:
            run_sql(corpus_ledger, statement)
        assert "placeholder" not in str(refused.value)  # a syntax error there, said as such
        return
    with pytest.raises(QueryFailed) as refused:
        run_sql(corpus_ledger, statement)
    message = str(refused.value)
    assert message.startswith("the statement has a placeholder") and "query NAME --param" in message
    assert "_pg3" not in message and "dictionary" not in message
