"""`query --list` is one line per query; NAME --help describes one; users' own saved
queries sit beside the shipped ones; no internal jargon reaches a user."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main

from .cli_checks import one_line_error
from .conftest import REPO
from .test_cli import all_commands

SHIPPED = sorted(p.stem for p in (REPO / "queries").glob("*.sql"))
JARGON = re.compile(r"\bADR\b|\bmigration \d{4}\b|\[ours|RUN-FEED\.md")


def cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)


def test_list_is_one_line_per_query_with_summary_and_parameters():
    result = CliRunner().invoke(main, ["query", "--list"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line and not line.startswith("[name]")]
    assert [line.split()[0] for line in lines] == SHIPPED
    by_name = {line.split()[0]: line for line in lines}
    # queries/spend_by_day.sql: its first header line, and its two optional parameters.
    assert "known spend, invocations and unpriced invocations per UTC day." in by_name["spend_by_day"]
    assert by_name["spend_by_day"].endswith("[since] [until]")
    assert by_name["most_expensive_nodes"].endswith("[limit] [since]")
    assert "spend_by_day:" not in by_name["spend_by_day"]  # the name is not repeated


@pytest.mark.parametrize("how", [["spend_by_day", "--help"], ["--describe", "spend_by_day"],
                                 ["spend_by_day", "-h"]])
def test_one_query_is_described_by_name(how):
    result = CliRunner().invoke(main, ["query", *how])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("spend_by_day — known spend")
    assert "run that spans midnight is split across both days" in result.output
    assert "--param since=VALUE  first day or instant to include" in result.output
    assert "(default '')" in result.output


def test_query_help_without_a_name_is_the_commands_help():
    result = CliRunner().invoke(main, ["query", "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output and "--queries DIR" in result.output


def test_users_own_queries_are_listed_and_run_beside_the_shipped_ones(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", ledger, "--home", REPO / "examples" / "home").returncode == 0
    config = tmp_path / "config"
    mine = config / "omg-ledger" / "queries"
    mine.mkdir(parents=True)
    (mine / "codex_runs.sql").write_text(
        "-- codex_runs: how many runs used Codex.\n--\n-- :runtime  which runtime [default: codex]\n"
        "SELECT COUNT(*) AS n FROM v_runs WHERE runtime = :runtime\n")
    (mine / "spend_by_day.sql").write_text("-- spend_by_day: mine.\nSELECT 42 AS answer\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(config)}
    listing = cli("query", "--list", env=env)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert any(line.startswith("codex_runs ") and "how many runs used Codex. (yours)  [runtime]" in line
               for line in lines)
    shadowed = [line for line in lines if line.startswith("spend_by_day ") and "yours, not used" in line]
    assert len(shadowed) == 1 and str(mine / "spend_by_day.sql") in shadowed[0]
    # examples/home has 2 Codex runs (auto-codex and s18-codex).
    ran = cli("query", "codex_runs", "--db", ledger, "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["rows"] == [{"n": 2}]
    # The shipped query keeps its name and meaning.
    shipped = json.loads(cli("query", "spend_by_day", "--db", ledger, "--json", env=env).stdout)
    assert "answer" not in shipped["columns"]
    # --queries DIR instead of the default directory.
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "one.sql").write_text("-- one: the number one.\nSELECT 1 AS one\n")
    listed = cli("query", "--list", "--queries", other, "--json", env=env)
    names = {q["name"]: q for q in json.loads(listed.stdout)}
    assert "one" in names and "codex_runs" not in names and names["one"]["origin"] == "yours"
    assert json.loads(cli("query", "one", "--queries", other, "--db", ledger, "--json").stdout)["rows"] == [{"one": 1}]


def test_a_queries_directory_that_does_not_exist_is_a_usage_error(tmp_path):
    """`--queries ~/my-qeuries` (a typo) listed the shipped queries alone, exit 0, and then
    said a query of yours was no saved query: the directory named on purpose must exist.
    The default directory may be absent (nobody has written a query yet)."""
    missing = tmp_path / "my-qeuries"
    for args in (["query", "--list"], ["query", "spend_by_day", "--help"], ["query", "mine", "--db", tmp_path / "l"]):
        result = cli(*args, "--queries", missing, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
        assert result.returncode == 2, (args, result.stdout)
        assert result.stderr == f"omg-ledger: error: --queries {missing}: no such directory\n"
    default = cli("query", "--list", env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
    assert default.returncode == 0 and "spend_by_day" in default.stdout


def test_a_missing_parameter_with_no_description_is_named_without_empty_brackets(tmp_path):
    """A query of yours whose :graph its header does not describe said
    "needs --param graph=… ()"; with a description it says it in brackets."""
    ledger = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", ledger, "--home", REPO / "examples" / "home").returncode == 0
    mine = tmp_path / "queries"
    mine.mkdir()
    (mine / "bare.sql").write_text("-- bare: runs of one graph.\nSELECT run_id FROM v_runs WHERE graph = :graph\n")
    (mine / "told.sql").write_text("-- told: runs of one graph.\n-- :graph  the graph's name\n"
                                   "SELECT run_id FROM v_runs WHERE graph = :graph\n")
    bare = cli("query", "bare", "--queries", mine, "--db", ledger)
    assert bare.returncode == 2 and bare.stderr == "omg-ledger: error: query bare needs --param graph=…\n"
    told = cli("query", "told", "--queries", mine, "--db", ledger)
    assert told.returncode == 2
    assert told.stderr == "omg-ledger: error: query told needs --param graph=… (the graph's name)\n"


def test_a_saved_query_that_is_a_fifo_or_a_device_is_one_line_not_read(tmp_path):
    """A FIFO among the saved queries (its open would wait for a writer forever) or a link
    to a device: `query --list` and `query --describe` say so in one line, exit 2."""
    fifo_dir, device_dir = tmp_path / "fifo", tmp_path / "device"
    for directory in (fifo_dir, device_dir):
        directory.mkdir()
        (directory / "fine.sql").write_text("-- fine: the number one.\nSELECT 1 AS one\n")
    os.mkfifo(fifo_dir / "stuck.sql")
    os.symlink("/dev/null", device_dir / "null.sql")
    for directory, bad, kind in ((fifo_dir, "stuck.sql", "a FIFO"), (device_dir, "null.sql", "a device")):
        for args in (["--list"], ["--describe", "fine"]):
            try:
                result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "query", *args, "--queries",
                                         str(directory)], capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"query {' '.join(args)} blocked on {bad}")
            line = one_line_error(result, 2)
            assert f"the saved query {directory / bad} is {kind}, not a regular file" in line


def test_no_internal_jargon_in_help_or_saved_queries():
    runner = CliRunner()
    for path, _command in all_commands():
        text = runner.invoke(main, [*path, "--help"]).output
        assert not JARGON.search(text), (path, JARGON.search(text))
    for query in SHIPPED:
        text = runner.invoke(main, ["query", query, "--help"]).output
        assert not JARGON.search(text), (query, JARGON.search(text))
    for sql in Path(REPO / "queries").glob("*.sql"):
        assert not JARGON.search(sql.read_text()), sql
    for user_facing in (REPO / "README.md", REPO / "omg_ledger" / "render.py"):
        assert not JARGON.search(user_facing.read_text(encoding="utf-8")), user_facing
