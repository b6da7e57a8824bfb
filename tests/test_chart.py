"""`cost --by day --chart`: a bar per row, fitted to $COLUMNS, ASCII when stdout is not
UTF-8. Run as a real process so the output encoding is the one a terminal would give.

By hand (the cost scenario, tests/test_cost.py, in UTC): 2026-11-29 $0.4214 with 2
unpriced, 2026-11-30 $0.03. At COLUMNS=60 the key column is 10 wide, the label column
22 (">= $0.4214 +2 unpriced"), so a bar has 60 - 10 - 22 - 4 = 24 cells: the largest day
gets 24, 2026-11-30 gets 24 * 0.03 / 0.4214 = 1.709 cells (ASCII: 2; eighths: 14/8)."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

from omg_ledger.cli import main
from tests import test_cost
from tests.test_cost import ledger
from tests.test_estimate import BOOK

scenario_home = test_cost.scenario_home


def chart(db: str, columns: int, encoding: str, *extra: str) -> list[str]:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONIOENCODING": encoding}
    out = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--db", db, "--by", "day", "--tz", "UTC",
                          "--chart", *extra], capture_output=True, env=env, check=True)
    return out.stdout.decode(encoding).splitlines()


def test_ascii_chart_fits_and_scales(sqlite_url, scenario_home):
    ledger(sqlite_url, scenario_home)
    lines = chart(sqlite_url, 60, "ascii")
    assert "2026-11-29  >= $0.4214 +2 unpriced  " + "#" * 24 in lines
    assert "2026-11-30  " + "$0.0300".rjust(22) + "  ##" in lines
    assert all(len(line) <= 60 and line.isascii() for line in lines)
    assert lines[1] == "window: all time (periods and times in UTC)"


def test_utf8_chart_uses_eighths(sqlite_url, scenario_home):
    ledger(sqlite_url, scenario_home)
    lines = chart(sqlite_url, 60, "utf-8")
    # "≥ $0.4214 +2 unpriced" is one column shorter than ">=": bars of 25 cells
    assert "2026-11-29  ≥ $0.4214 +2 unpriced  " + "█" * 25 in lines
    # 25 * 0.03 / 0.4214 = 1.780 cells = 14 eighths: one full cell and 6/8
    assert "2026-11-30  " + "$0.0300".rjust(21) + "  █▊" in lines
    assert all(len(line) <= 60 for line in lines)


def test_chart_with_estimate_and_narrow_terminal(sqlite_url, scenario_home, tmp_path):
    ledger(sqlite_url, scenario_home)
    prices = tmp_path / "prices.toml"
    prices.write_text(BOOK)
    # label ">= $0.4214 +2 unpriced ~$0.0083" is 31 wide: bars of 60 - 10 - 31 - 4 = 15 cells, the top
    # being known + estimate = 429.7e6 n$: known 15 * 421.4 / 429.7 = 14.7 -> 15 '#', estimate 0.29 -> 1 '.'
    lines = chart(sqlite_url, 60, "ascii", "--estimate", "--prices", str(prices))
    assert "2026-11-29  >= $0.4214 +2 unpriced ~$0.0083  " + "#" * 15 + "." in lines
    narrow = chart(sqlite_url, 40, "utf-8")
    assert all(len(line) <= 40 for line in narrow[2:])


def test_chart_needs_by_and_a_terminal(sqlite_url):
    for args in (["--chart"], ["--chart", "--by", "day", "--json"], ["--chart", "--by", "day", "--csv"]):
        result = CliRunner().invoke(main, ["cost", "--db", sqlite_url, *args])
        assert result.exit_code == 2 and "--chart" in result.output


def test_a_row_of_unpriced_work_alone_reads_as_in_the_table(tmp_path):
    """The corpus's codex runs (auto-codex, s18-codex) have 6 invocations, none priced:
    `cost --by runtime` says "unknown (6 unpriced)", never a $0.0000 lower bound, and so
    does its chart."""
    from tests.conftest import CORPUS_HOME

    db = str(tmp_path / "l.sqlite")
    subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", str(CORPUS_HOME)],
                   check=True, capture_output=True)
    env = {**os.environ, "COLUMNS": "100", "PYTHONIOENCODING": "utf-8"}
    out = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--db", db, "--by", "runtime", "--chart"],
                         capture_output=True, env=env, check=True, text=True).stdout
    codex = next(line for line in out.splitlines() if line.startswith("codex "))
    assert codex.split() == ["codex", "unknown", "(6", "unpriced)"]
