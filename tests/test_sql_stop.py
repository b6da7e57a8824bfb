"""`sql` and `query` can be stopped: Ctrl-C ends a runaway statement at once (exit 130,
one line), and `--timeout S` ends it after S seconds (exit 2, one line). Real processes,
a real SQLite file and a real PostgreSQL server.

The runaway statement is infinite (a recursive CTE without an end, counted), so only
Ctrl-C or the timeout can end it: no assertion depends on the machine's speed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.reports.sql import QueryTimedOut, run_sql

CLI = [sys.executable, "-m", "omg_ledger.cli"]
RUNAWAY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
# Only a broken implementation waits this long; a working one never comes near it.
SAFETY_S = 120


@pytest.fixture
def ledger_db(db_url) -> str:
    """A migrated, empty ledger; as `--db` takes it (a path for SQLite)."""
    open_ledger(db_url).dispose()
    return db_url.removeprefix("sqlite:///")


def _ledger_fds(pid: int, path: str) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == path
    return count


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# CPU seconds the process burns with the ledger open before it counts as running the
# statement: opening and checking the ledger takes milliseconds of CPU, the rest of the
# start-up is done before it; only the runaway statement burns this much with it open.
RUNNING_CPU_S = 0.5


def _running_on_postgres(url: str) -> int:
    """How many server backends are running the runaway statement in this database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%WITH RECURSIVE c(x)%'")).scalar()
    finally:
        engine.dispose()


def _wait_until_running(proc: subprocess.Popen, db_url: str, ledger: str) -> None:
    """Until the process is running the statement: on SQLite it has the ledger open and
    has burnt RUNNING_CPU_S of CPU since it opened it (CPU time, not wall time: a loaded
    machine only makes the wait longer); on PostgreSQL the server lists it as active."""
    give_up = time.monotonic() + SAFETY_S
    opened_at_cpu = None
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < give_up, "the statement never started"
        with contextlib.suppress(OSError):  # the process may be between states
            if db_url.startswith("sqlite"):
                if _ledger_fds(proc.pid, ledger) >= 1:
                    cpu = _cpu_seconds(proc.pid)
                    opened_at_cpu = cpu if opened_at_cpu is None else opened_at_cpu
                    if cpu - opened_at_cpu >= RUNNING_CPU_S:
                        return
                else:
                    opened_at_cpu = None
            elif _running_on_postgres(db_url):
                return
        time.sleep(0.01)


def _runaway_args(command: str, tmp_path) -> list[str]:
    """The runaway statement as `sql` runs it, or as a saved query `query` runs."""
    if command == "sql":
        return ["sql", RUNAWAY]
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "runaway.sql").write_text(f"-- runaway: counts for ever\n{RUNAWAY}\n")
    return ["query", "runaway", "--queries", str(queries)]


@pytest.mark.parametrize("command", ["sql", "query"])
def test_ctrl_c_stops_a_runaway_statement_at_once(db_url, ledger_db, tmp_path, command):
    args = _runaway_args(command, tmp_path)
    proc = subprocess.Popen([*CLI, *args, "--db", ledger_db, "--timeout", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until_running(proc, db_url, ledger_db)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=SAFETY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err == "omg-ledger: interrupted\n"
    assert out == ""
    if not db_url.startswith("sqlite"):
        # The server stopped it too: the client cancelled before it left.
        assert _running_on_postgres(db_url) == 0


@pytest.mark.parametrize("command", ["sql", "query"])
def test_timeout_stops_a_runaway_statement_with_one_line_and_exit_2(db_url, ledger_db, tmp_path, command):
    args = _runaway_args(command, tmp_path)
    result = subprocess.run([*CLI, *args, "--db", ledger_db, "--timeout", "1"],
                            capture_output=True, text=True, timeout=SAFETY_S)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("omg-ledger: error: ")
    assert "stopped after 1 s (--timeout)" in lines[0]
    if not db_url.startswith("sqlite"):
        assert _running_on_postgres(db_url) == 0


# One step of SQLite's virtual machine that runs for hours, where SQLite never looks for
# a stop: instr() compares its needle (20 million "a" and a "b") at each of 80 million
# places of the haystack, 1.6e15 byte comparisons in one function call, no loop around it.
ONE_LONG_STEP = "SELECT instr(printf('%.*c', 100000000, 'a'), printf('%.*c', 20000000, 'a') || 'b') AS place"


@pytest.mark.parametrize("stop", ["ctrl-c", "timeout"])
def test_a_statement_in_one_long_sqlite_step_is_stopped_too(sqlite_url, tmp_path, stop):
    ledger_db = sqlite_url.removeprefix("sqlite:///")
    open_ledger(sqlite_url).dispose()
    timeout = "0" if stop == "ctrl-c" else "1"
    proc = subprocess.Popen([*CLI, "sql", ONE_LONG_STEP, "--db", ledger_db, "--timeout", timeout],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if stop == "ctrl-c":
            _wait_until_running(proc, sqlite_url, ledger_db)
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=SAFETY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out == ""
    if stop == "ctrl-c":
        assert (proc.returncode, err) == (130, "omg-ledger: interrupted\n")
    else:
        assert proc.returncode == 2, err
        assert err.startswith("omg-ledger: error: the query was stopped after 1 s (--timeout)"), err
        assert len(err.splitlines()) == 1, err


def test_the_library_timeout_restores_ctrl_c(db_url, ledger_db):
    """In a program that imports the library, a timed-out statement leaves SIGINT as it was."""
    engine = open_ledger(db_url)
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(QueryTimedOut, match=r"stopped after 0\.5 s"):
            run_sql(engine, RUNAWAY, timeout=0.5)
        assert signal.getsignal(signal.SIGINT) is before
        # The same connection settings still answer a quick statement, with or without a limit.
        assert run_sql(engine, "SELECT 41 + 1 AS n", timeout=0.5).rows == [(42,)]
        assert run_sql(engine, "SELECT 41 + 1 AS n", timeout=0).rows == [(42,)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_bad_timeout_is_a_usage_error(sqlite_url, value):
    open_ledger(sqlite_url).dispose()
    result = CliRunner().invoke(main, ["sql", "--db", sqlite_url, "--timeout", value, "SELECT 1"])
    assert result.exit_code == 2, result.output
    assert "timeout" in result.output.lower()


@pytest.mark.postgres
def test_a_statement_sent_but_not_yet_awaited_is_cancelled_and_its_end_read(pg_url):
    """The window psycopg cannot cover: Ctrl-C after the statement is sent and before
    psycopg waits for its result. The cancel stops it on the server, and the connection
    is left between commands (a rollback after it would otherwise fail with "another
    command is already in progress")."""
    import psycopg
    from psycopg import pq

    from omg_ledger.reports.sql import _cancel_on_server

    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            driver.pgconn.send_query(RUNAWAY.encode())  # sent; nobody waits for it
            give_up = time.monotonic() + SAFETY_S
            while not _running_on_postgres(pg_url):
                assert time.monotonic() < give_up, "the statement never started"
                time.sleep(0.01)
            assert driver.pgconn.transaction_status == pq.TransactionStatus.ACTIVE
            _cancel_on_server(driver)
            assert driver.pgconn.transaction_status != pq.TransactionStatus.ACTIVE
            assert _running_on_postgres(pg_url) == 0
            with driver.cursor() as cursor:  # the connection takes the next command
                assert cursor.execute("SELECT 1").fetchone() == (1,)
            assert isinstance(driver, psycopg.Connection)
    finally:
        engine.dispose()
