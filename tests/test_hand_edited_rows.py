"""Users open the SQLite ledger in notebooks and edit rows by hand. A value of a type its
column never holds (SQLite stores what it is given) is named in one line, exit 3 (a
damaged database), never a traceback; the rows it came from can be derived again."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from .cli_checks import one_line_error
from .conftest import REPO

RUN = "20261129-181518.678721711-1"  # s15-retry-failed: $0.0770 over its charges


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("edits") / "ledger.sqlite")
    assert _cli("sync", "--home", str(REPO / "examples" / "home"), "--db", db).returncode == 0
    return db


def _edited(synced: str, tmp_path, statement: str) -> str:
    db = str(tmp_path / "edited.sqlite")
    with sqlite3.connect(synced) as source, sqlite3.connect(db) as target:
        source.backup(target)
    with sqlite3.connect(db) as conn:
        conn.execute(statement, (RUN,))
    return db


@pytest.mark.parametrize("value, shown", [("'lots'", "'lots' (not an integer)"), ("1e308", "1e+308 (not an integer)"),
                                          ("9223372036854775807", "9223372036854775807 (too large to add up)")],
                         ids=["text", "huge-real", "int64-max"])
@pytest.mark.parametrize("command", [["show", RUN], ["show", RUN, "--json"], ["cost"], ["cost", "--by", "day"],
                                     ["cost", "--by", "run", "--json"], ["metrics"], ["runs", "--estimate"]],
                         ids=" ".join)
def test_a_hand_edited_cost_is_named_in_one_line_with_exit_3(synced, tmp_path, command, value, shown):
    db = _edited(synced, tmp_path, "UPDATE charges SET cost_nano_usd = " + value + " WHERE seq = 1 AND run_pk = "
                 "(SELECT id FROM runs WHERE run_id = ?)")
    result = _cli(*command, "--db", db)
    # A command that never converts this value may read it as it is (cost sums a huge
    # integer exactly); one that sums a value that is no integer must not (SQLite sums
    # text as 0 and a real as a float: a silently wrong total).
    if result.returncode == 0 and not (command[0] in ("cost", "metrics") and "not an integer" in shown):
        assert "Traceback" not in result.stderr
        return
    line = one_line_error(result, 3)
    assert line == (f"omg-ledger: error: the ledger holds a value it cannot read: charges.cost_nano_usd is {shown} "
                    f"in run {RUN}; `omg-ledger rebuild --run {RUN}` derives the run's rows again from its events")


def test_text_in_a_token_count_stops_the_estimate_naming_it(synced, tmp_path):
    db = _edited(synced, tmp_path, "UPDATE charges SET input_tokens = 'many' WHERE run_pk = "
                 "(SELECT id FROM runs WHERE run_id = ?)")
    for command in (["runs", "--estimate"], ["report", "--html", str(tmp_path / "r.html")]):
        result = _cli(*command, "--db", db)
        if result.returncode != 0:
            assert "charges.input_tokens is 'many' (not an integer)" in one_line_error(result, 3)


def test_the_rebuild_the_error_names_puts_the_derived_value_back(synced, tmp_path):
    db = _edited(synced, tmp_path, "UPDATE charges SET cost_nano_usd = 'lots' WHERE run_pk = "
                 "(SELECT id FROM runs WHERE run_id = ?)")
    one_line_error(_cli("show", RUN, "--db", db), 3)
    assert _cli("rebuild", "--run", RUN, "--db", db).returncode == 0
    result = _cli("show", RUN, "--db", db, "--json")
    assert result.returncode == 0, result.stderr
    # README: s15-retry-failed paid $0.028 (failed first leg) + $0.049 = $0.077.
    assert _cli("cost", "--by", "run", "--json", "--db", db).stdout.count('"cost_nano_usd": 77000000') == 1


@pytest.mark.parametrize("command", [["runs"], ["runs", "--tz", "Europe/Berlin"], ["show", RUN],
                                     ["show", RUN, "--tz", "Europe/Berlin"]], ids=" ".join)
def test_a_hand_edited_time_that_is_no_instant_is_shown_as_stored(synced, tmp_path, command):
    """A run's start and a leg's start edited to text that is no time: shown as stored, in
    UTC and in --tz alike (in --tz the table stopped with a ValueError traceback; in UTC
    'garbage' read 'garbage Z', as if it were a time)."""
    db = _edited(synced, tmp_path, "UPDATE runs SET first_event_at = 'garbage' WHERE run_id = ?")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE legs SET started_at = '2026-13-45' WHERE ordinal = 1 AND run_pk = "
                     "(SELECT id FROM runs WHERE run_id = ?)", (RUN,))
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *command, "--db", db], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "COLUMNS": "300"})  # every column shown
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    row = next(line for line in result.stdout.splitlines()
               if (line.startswith(RUN) if command[0] == "runs" else line.startswith("1 ")))
    assert ("  garbage  " if command[0] == "runs" else "  2026-13-45  ") in row, row
