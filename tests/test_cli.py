"""The CLI contract: help that teaches, one JSON document with --json, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.db import open_ledger

from .conftest import CORPUS_HOME


def all_commands(group=main, prefix=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from all_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


@pytest.mark.parametrize(("path", "command"), list(all_commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_command_has_a_summary_and_help(path, command):
    assert command.help and command.get_short_help_str().strip(), f"{' '.join(path)} lacks help"
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output, f"{' '.join(path)} --help shows no example"


def test_sync_json_is_one_document_and_runs_json_has_the_documented_fields(tmp_path):
    db = str(tmp_path / "l.sqlite")
    cli = [sys.executable, "-m", "omg_ledger.cli"]
    out = subprocess.run([*cli, "sync", "--db", db, "--home", str(CORPUS_HOME), "--json"],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert set(report) >= {"runs_seen", "runs_changed", "events_ingested", "bytes_read", "problems", "seconds"}
    runs = json.loads(subprocess.run([*cli, "runs", "--db", db, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    assert len(runs) == 25
    assert set(runs[0]) >= {"run_id", "home", "graph", "status", "nodes_total", "nodes_passed", "leg_count", "cost_usd",
                            "unknown_cost_invocations", "started_at", "last_event_at"}
    shown = json.loads(subprocess.run([*cli, "show", "--db", db, "--json", runs[0]["run_id"]], capture_output=True,
                                      text=True, check=True).stdout)
    assert set(shown) >= {"run_id", "status", "legs", "nodes", "charges", "findings"}


def test_unknown_run_is_a_clear_error_not_a_traceback(tmp_path):
    open_ledger(str(tmp_path / "l.sqlite")).dispose()
    result = CliRunner().invoke(main, ["show", "--db", str(tmp_path / "l.sqlite"), "nope"])
    assert result.exit_code == 2 and "no run matches 'nope'" in result.output
