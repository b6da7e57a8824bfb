"""Bad --db values are one-line errors, never tracebacks, naming the database as the
user typed it with the password masked; exit codes are the documented ones."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import sqlite3
import subprocess
import sys

import pytest

from .cli_checks import one_line_error
from .conftest import REPO

EXAMPLES = REPO / "examples" / "home"


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once this socket is closed


WRITE_AND_READ = [["sync", "--home", str(EXAMPLES)], ["runs"], ["cost"], ["db", "current"]]


@pytest.mark.postgres
def test_postgres_spelling_works_like_postgresql(pg_url):
    # pg_url is postgresql+psycopg://…; the same server as users usually write it.
    typed = pg_url.replace("postgresql+psycopg://", "postgres://", 1)
    assert cli("sync", "--db", typed, "--home", EXAMPLES).returncode == 0
    listed = cli("runs", "--db", typed.replace("postgres://", "postgresql://", 1), "--json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count('"run_id"') == 25


@pytest.mark.parametrize("args", WRITE_AND_READ, ids=lambda a: a[0])
def test_unreachable_server_names_the_url_as_typed_with_the_password_masked(args):
    typed = f"postgres://ledger:hunter2@127.0.0.1:{closed_port()}/ledger"
    line = one_line_error(cli(*args, "--db", typed), 3)
    assert "postgres://ledger:***@127.0.0.1:" in line
    assert "hunter2" not in line and "psycopg" not in line


@pytest.mark.parametrize("args", WRITE_AND_READ, ids=lambda a: a[0])
def test_a_password_given_as_a_url_parameter_is_masked_too(args):
    # libpq takes `?password=` as well as `user:password@`; an error line goes to cron mail and logs.
    typed = f"postgresql://ledger@127.0.0.1:{closed_port()}/ledger?sslmode=disable&password=hunter2"
    line = one_line_error(cli(*args, "--db", typed), 3)
    assert "postgresql://ledger@127.0.0.1:" in line and "/ledger?sslmode=disable&password=***" in line
    assert "hunter2" not in line


@pytest.mark.parametrize("args", WRITE_AND_READ, ids=lambda a: a[0])
def test_unknown_or_uninstalled_driver_says_what_to_install(args):
    assert importlib.util.find_spec("pg8000") is None  # SQLAlchemy knows it; it is not installed here
    line = one_line_error(cli(*args, "--db", "postgresql+pg8000://u:pw@db.internal/ledger"), 3)
    assert "pg8000 is not installed" in line and "pip install 'omg-ledger[postgres]'" in line
    assert "pw@" not in line
    line = one_line_error(cli(*args, "--db", "postgresql+nosuchdriver://db.internal/ledger"), 3)
    assert "unknown PostgreSQL driver 'nosuchdriver'" in line and "omg-ledger[postgres]" in line
    line = one_line_error(cli(*args, "--db", "mysql://db.internal/ledger"), 3)
    assert "SQLite or PostgreSQL, not mysql" in line


@pytest.mark.parametrize("args", WRITE_AND_READ, ids=lambda a: a[0])
def test_a_port_that_is_not_a_number_is_one_line(args):
    # SQLAlchemy's URL parser raised a bare ValueError on it (a traceback); libpq refuses it too.
    line = one_line_error(cli(*args, "--db", "postgresql://ledger:hunter2@db.internal:54x2/ledger"), 3)
    assert "postgresql://ledger:***@db.internal:54x2/ledger" in line and "hunter2" not in line


@pytest.mark.parametrize("args", WRITE_AND_READ, ids=lambda a: a[0])
@pytest.mark.parametrize("typed", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_database_is_refused_not_written_and_lost(args, typed):
    # A sync there would index the home and lose it all at exit (and its error would
    # claim the committed runs are kept): refused before anything is read.
    line = one_line_error(cli(*args, "--db", typed), 3)
    assert f"{typed} is an in-memory SQLite database" in line and "--db ledger.sqlite" in line
    assert "committed" not in line


@pytest.mark.parametrize("args", WRITE_AND_READ, ids=lambda a: a[0])
def test_a_directory_or_a_file_that_is_not_sqlite_is_not_a_ledger(tmp_path, args):
    line = one_line_error(cli(*args, "--db", tmp_path), 3)
    assert f"{tmp_path} is a directory" in line
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    line = one_line_error(cli(*args, "--db", notes), 3)
    assert f"{notes} is not a SQLite database" in line
    assert notes.read_text() == "not a database\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_fifo_or_a_device_is_not_a_ledger(tmp_path):
    """--db naming a FIFO (opening it waits for a writer that never comes) or a device
    (/dev/null: SQLite reads it as an empty database and makes a journal beside it): one
    line, exit 3, before anything opens it; nothing is made beside either."""
    fifo = tmp_path / "ledger.sqlite"
    os.mkfifo(fifo)
    beside_null = [f"/dev/null{suffix}" for suffix in ("-journal", "-wal", "-shm", ".sync-lock")]
    there_before = {path for path in beside_null if os.path.exists(path)}
    try:
        for args in (["sync", "--home", EXAMPLES], ["runs"]):
            for db, kind in ((fifo, "a FIFO"), ("/dev/null", "a device")):
                try:
                    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args), "--db", str(db)],
                                            capture_output=True, text=True, timeout=60)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{args[0]} --db {db} blocked")
                line = one_line_error(result, 3)
                assert f"{db} is {kind}, not a regular file" in line
        # The no-op sync's own look at the file (a library caller skips the CLI's check).
        look = "import sys; from omg_ledger.change_check import sqlite_file; print(sqlite_file(sys.argv[1]))"
        for db in (fifo, "/dev/null"):
            try:
                result = subprocess.run([sys.executable, "-c", look, str(db)], capture_output=True, text=True,
                                        timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"change_check.sqlite_file({db}) blocked")
            assert (result.returncode, result.stdout) == (0, "None\n"), result.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite"]
        assert {path for path in beside_null if os.path.exists(path)} == there_before
    finally:
        for path in set(beside_null) - there_before:  # what a ledger opened on /dev/null made
            if os.path.exists(path):
                os.unlink(path)


def _another_programs_database(path) -> bytes:
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE t (x); CREATE TABLE notes (y); CREATE TABLE tags (z); CREATE TABLE w (v);"
                      "INSERT INTO t VALUES (1);")
    con.close()
    return path.read_bytes()


def test_a_foreign_sqlite_database_is_not_a_ledger_for_reads(tmp_path):
    other = tmp_path / "other.sqlite"
    before = _another_programs_database(other)
    line = one_line_error(cli("runs", "--db", other), 3)
    assert "holds no ledger but another program's tables (notes, t, tags and 1 more)" in line
    assert "sync" not in line  # (syncing into it is refused too: the hint must not send the user there)
    assert other.read_bytes() == before


@pytest.mark.parametrize("args", [["sync", "--home", str(EXAMPLES)], ["db", "upgrade"], ["db", "current"]])
def test_a_foreign_sqlite_database_is_never_made_a_ledger(tmp_path, args):
    """A --db that names another program's SQLite file: refused before anything is
    written (no ledger tables beside its own, no WAL mode, no -wal or -shm file)."""
    other = tmp_path / "other.sqlite"
    before = _another_programs_database(other)
    line = one_line_error(cli(*args, "--db", other), 3)
    assert f"{other} holds no ledger but another program's tables" in line
    assert "point --db at the ledger's file, or at a new path for a new ledger" in line
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


def test_export_refuses_another_programs_database_as_its_target(tmp_path):
    ledger, other = tmp_path / "ledger.sqlite", tmp_path / "other.sqlite"
    assert cli("sync", "--db", ledger, "--home", EXAMPLES).returncode == 0
    before = _another_programs_database(other)
    line = one_line_error(cli("export", "--db", ledger, "--to", other), 3)
    assert "holds no ledger but another program's tables" in line
    assert other.read_bytes() == before


def test_an_empty_sqlite_file_becomes_a_ledger(tmp_path):
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()  # (sqlite3 creates a file of no bytes: no table, nobody's data)
    line = one_line_error(cli("runs", "--db", empty), 3)
    assert f"{empty} holds no ledger (an empty database): `omg-ledger sync --db {empty}` makes it one" in line
    assert cli("sync", "--db", empty, "--home", EXAMPLES).returncode == 0
    assert cli("runs", "--db", empty).returncode == 0


def test_unknown_run_is_a_usage_error(tmp_path):
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", EXAMPLES).returncode == 0
    line = one_line_error(cli("show", "--db", db, "no-such-run"), 2)
    assert "no run matches 'no-such-run'" in line


def test_readme_documents_the_exit_codes_in_one_table():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    codes = re.findall(r"^\| `(\d+)` \|", section, re.M)
    assert codes == ["0", "1", "2", "3", "75", "129", "130", "143"]
    assert readme.count("### Exit codes") == 1


@pytest.mark.parametrize("args, says, where", [
    (["snyc"], "No such command 'snyc'. Did you mean 'sync'?", "omg-ledger"),
    (["--bogus"], "No such option '--bogus'.", "omg-ledger"),
    (["db", "bogus"], "No such command 'bogus'.", "omg-ledger db"),
    (["runs", "--stauts", "x"], "No such option '--stauts'.", "omg-ledger runs"),
    (["cost", "--by", "dya"], "Invalid value for '--by': 'dya' is not one of", "omg-ledger cost"),
    (["runs", "--limit", "0"], "Invalid value for '--limit'", "omg-ledger runs"),
    (["show"], "Missing argument 'RUN_ID'.", "omg-ledger show"),
    (["runs", "--status", "finished"], "'finished' is not one of PLANNING, RUNNING, ABANDONED, PAUSED, PASS, FAIL",
     "omg-ledger runs"),
])
def test_a_usage_mistake_is_one_line_naming_the_help_to_read(args, says, where):
    line = one_line_error(cli(*args), 2)
    assert says in line and line.endswith(f"(`{where} --help` says more)")


def test_paths_and_names_that_are_not_utf8_are_one_line_errors(tmp_path):
    """Bytes that are not UTF-8 in a home's path (or where its symlink leads), a label, a
    --db path, a runner stream path or a run id reach Python as lone surrogates, which no
    database driver can encode: one line naming the byte, never a traceback, and no
    ledger is made. (--db is the database's exit code, 3; the rest are usage, 2.)"""
    root = bytes(tmp_path)
    good_home = tmp_path / "home"
    (good_home / "runs").mkdir(parents=True)
    bad_home = root + b"/h\xff"
    os.makedirs(bad_home + b"/runs")
    os.symlink(bad_home, root + b"/link")
    db = tmp_path / "ledger.sqlite"
    at = len(root) + 3  # the byte after "<tmp_path>/h" or "<tmp_path>/x"
    cases = [
        (["sync", "--home", bad_home], 2, f"home directory {tmp_path}/h\\udcff is not valid UTF-8 at byte {at}"),
        (["sync", "--home", root + b"/link"], 2, f"home directory {tmp_path}/h\\udcff is not valid UTF-8 at byte {at}"),
        (["sync", "--home", b"l\xff=" + bytes(good_home)], 2, "home label 'l\\udcff' is not valid UTF-8 at byte 2"),
        (["sync", "--home", good_home, "--invocations", root + b"/x\xff"], 2,
         f"--invocations {tmp_path}/x\\udcff is not valid UTF-8 at byte {at}"),
    ]
    for args, code, expected in cases:
        line = one_line_error(cli_bytes(*args, "--db", db), code)
        assert line == f"omg-ledger: error: {expected}", line
        assert not db.exists()
    bad_db = root + b"/x\xff.sqlite"
    line = one_line_error(cli_bytes("sync", "--home", good_home, "--db", bad_db), 3)
    assert line == f"omg-ledger: error: --db {tmp_path}/x\\udcff.sqlite is not valid UTF-8 at byte {at}", line
    assert sorted(os.listdir(root)) == sorted([b"h\xff", b"home", b"link"])
    assert cli("sync", "--home", good_home, "--db", db).returncode == 0
    for args, expected in [
        (["show", b"2026\xff"], "run id '2026\\udcff' is not valid UTF-8 at byte 5"),
        (["homes", "rename", "x", b"n\xffew"], "home label 'n\\udcffew' is not valid UTF-8 at byte 2"),
        (["homes", "forget", b"\xff", "--yes"], "home label '\\udcff' is not valid UTF-8 at byte 1"),
    ]:
        line = one_line_error(cli_bytes(*args, "--db", db), 2)
        assert line == f"omg-ledger: error: {expected}", line


def cli_bytes(*args) -> subprocess.CompletedProcess:
    """The command line with bytes in it (a shell's $'\\xff'); the error line shows such a
    byte as the escape of its lone surrogate, \\udcff."""
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *[a if isinstance(a, bytes) else str(a)
                                                                        for a in args]],
                            capture_output=True, timeout=120)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


@pytest.mark.parametrize("spec", ["", "nightly="])
def test_an_empty_home_is_refused_not_read_as_the_current_directory(tmp_path, spec):
    """--home "$DIR" with DIR unset: the current directory is no home the user named."""
    (tmp_path / "runs").mkdir()
    db = tmp_path / "ledger.sqlite"
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--home", spec, "--db", str(db)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    said = ("--home was given an empty value: give one, or leave --home out for its default "
            "(`omg-ledger sync --help` says more)" if spec == "" else f"--home {spec!r} names no directory")
    assert one_line_error(result, 2) == f"omg-ledger: error: {said}"
    assert not db.exists()


@pytest.mark.parametrize("command", [["sync", "--home"], ["runs"], ["cost"]])
def test_an_empty_db_is_refused_not_read_as_the_default_ledger(tmp_path, command):
    """--db "$LEDGER" with LEDGER unset: the default ledger is not the one the user named,
    and sync must not create it (XDG_DATA_HOME points the default into tmp_path here)."""
    (tmp_path / "home" / "runs").mkdir(parents=True)
    args = [*command, str(tmp_path / "home")] if command[-1] == "--home" else command
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("OMG_LEDGER_DB", None)
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", ""],
                            capture_output=True, text=True, timeout=120, env=env)
    assert "--db was given an empty value" in one_line_error(result, 2)
    assert not (tmp_path / "data").exists()


@pytest.mark.postgres
def test_a_server_error_mid_write_names_the_ledger(pg_url):
    # The server refuses a write halfway through the sync (a user's trigger here; a server
    # shutting down or a full disk reads the same): one line naming which ledger, exit 3.
    import psycopg

    assert cli("db", "upgrade", "--db", pg_url).returncode == 0
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$BEGIN RAISE EXCEPTION 'disk quota exceeded (a test)'; END$$")
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse()")
    line = one_line_error(cli("sync", "--db", pg_url, "--home", EXAMPLES, "--workers", "0"), 3)
    shown = re.sub(r"://([^:@/]+):[^@/]*@", r"://\1:***@", pg_url)
    assert f"database {shown}" in line and "disk quota exceeded (a test)" in line, line


@pytest.mark.parametrize("args, option", [
    (["runs", "--since", "yesterdy"], "--since"),
    (["cost", "--since", "7d", "--until", "3M"], "--until"),
    (["audit", "--stale-after", "2x"], "--stale-after"),
    (["invocations", "--since", "next tuesday"], "--since"),
    (["report", "--html", "page.html", "--since", "1 week"], "--since"),
])
def test_a_time_that_cannot_be_read_is_a_usage_error_naming_its_option(args, option, tmp_path):
    """Which of a command's times was wrong is said, before any ledger is opened (the
    --db named here does not exist and is not made)."""
    db = tmp_path / "none.sqlite"
    line = one_line_error(cli(*args, "--db", db), 2)
    assert line.startswith(f"omg-ledger: error: {option}: cannot read time"), line
    assert not db.exists()
