"""Messages that help: a time zone matched case-insensitively or a suggestion, --by in
any case, an ambiguous prefix that says how much it did not list, an empty window that
says --until is exclusive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

EXAMPLES = REPO / "examples" / "home"


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("messages") / "ledger.sqlite"
    assert cli("sync", "--db", path, "--home", EXAMPLES).returncode == 0
    return path


def error_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_time_zone_is_matched_case_insensitively(db):
    for typed in ("europe/berlin", "EUROPE/BERLIN"):
        result = cli("cost", "--db", db, "--tz", typed, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["tz"] == "Europe/Berlin"


def test_a_misspelt_time_zone_gets_a_suggestion(db):
    line = error_line(cli("cost", "--db", db, "--tz", "Europe/Berln"))
    assert "unknown time zone 'Europe/Berln'" in line and "did you mean Europe/Berlin?" in line
    line = error_line(cli("cost", "--db", db, "--tz", "Qqqq/Zzzz"))
    assert "did you mean" not in line and "IANA name" in line


def test_by_choices_are_case_insensitive(db):
    lower = cli("cost", "--db", db, "--by", "runtime", "--json", "--tz", "UTC")
    upper = cli("cost", "--db", db, "--by", "RunTime", "--json", "--tz", "UTC")
    assert upper.returncode == 0, upper.stderr
    assert json.loads(upper.stdout)["rows"] == json.loads(lower.stdout)["rows"]
    assert json.loads(upper.stdout)["by"] == "runtime"
    assert cli("invocations", "--db", db, "--by", "ROLE").returncode == 0


def test_ambiguous_prefix_says_how_many_it_did_not_list(db):
    # examples/home holds 25 runs, every id starting 20261129-1815.
    line = error_line(cli("show", "--db", db, "2026"))
    assert "'2026' matches 25 runs" in line
    assert line.count("20261129-1815") == 20
    assert "and 5 more not listed" in line and "longer prefix" in line


def test_a_since_not_before_now_is_named_not_an_until_never_given(db):
    """`cost --since today` run at midnight exactly (or a --since in the future): the window
    ends now, not at an --until the user never gave; its times are shown in --tz."""
    for since in ("today", "2026-12-01T09:00"):
        result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--db", str(db), "--since", since,
                                 "--tz", "Europe/Berlin"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "OMG_LEDGER_NOW": "2026-11-29T23:00:00Z"})  # midnight in Berlin
        line = error_line(result)
        assert "--until" not in line, line
        assert "empty window: --since (" in line and "is not before now (2026-11-30T00:00:00+01:00)" in line, line


def test_an_empty_window_says_until_is_exclusive(db):
    line = error_line(cli("cost", "--db", db, "--since", "2026-11-29", "--until", "2026-11-29", "--tz", "UTC"))
    assert "empty window" in line and "--until is exclusive" in line
    quiet = cli("cost", "--db", db, "--since", "2020-01-01", "--until", "2020-01-02", "--by", "day", "--tz", "UTC")
    assert quiet.returncode == 0, quiet.stderr
    assert "no charges in this window (--until is exclusive" in quiet.stdout
