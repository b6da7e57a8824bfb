"""The CLI contract: help that teaches, one JSON document with --json, exit codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.db import open_ledger

from .conftest import CORPUS_HOME, REPO


def all_commands(group=main, prefix=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from all_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_the_command_list_never_shows_a_summary_cut_after_an_abbreviation():
    """Click ends a command's summary at its first ". ": export's read "Copy the whole
    ledger into another database, e.g." in `omg-ledger --help`, a sentence cut short."""
    groups = [main, *(c for c in main.commands.values() if hasattr(c, "commands"))]
    for group in groups:
        for name, command in group.commands.items():
            summary = command.get_short_help_str(limit=1000)
            assert not summary.endswith(("e.g.", "i.e.", "etc.", "vs.")), (name, summary)


@pytest.mark.parametrize(("path", "command"), list(all_commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_command_has_a_summary_and_help(path, command):
    assert command.help and command.get_short_help_str().strip(), f"{' '.join(path)} lacks help"
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output, f"{' '.join(path)} --help shows no example"


def test_every_command_group_has_help_with_an_example():
    """README: every command has --help with an example, the groups (db, homes) too."""
    for path in (["db"], ["homes"]):
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0 and "Example" in result.output, path


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


def _text_options(command):
    return [p for p in command.params
            if isinstance(p, click.Option) and not p.is_flag and p.type is click.STRING]


EMPTY_CASES = [(path, max(option.opts, key=len)) for path, command in all_commands()
               for option in _text_options(command)]


@pytest.mark.parametrize(("path", "option"), EMPTY_CASES, ids=[f"{' '.join(p)} {o}" for p, o in EMPTY_CASES])
def test_an_option_given_an_empty_value_is_a_usage_error_naming_it(path, option, tmp_path):
    # `--since "$WINDOW"` with WINDOW unset must not read as --since left out.
    command = dict(all_commands())[path]
    args = [*path, option, ""]
    for param in command.params:  # whatever else the command requires, given
        if param.required and max(param.opts, key=len) != option:
            args += ["x"] if isinstance(param, click.Argument) else [param.opts[0], "x"]
    result = CliRunner().invoke(main, args, env={"OMG_LEDGER_DB": str(tmp_path / "l.sqlite")})
    assert result.exit_code == 2, result.output
    assert f"{option} was given an empty value" in result.output
    assert not (tmp_path / "l.sqlite").exists()  # refused before anything was opened


ARGUMENT_CASES = [(path, p.human_readable_name) for path, command in all_commands() for p in command.params
                  if isinstance(p, click.Argument) and p.type is click.STRING]


@pytest.mark.parametrize(("path", "argument"), ARGUMENT_CASES, ids=[f"{' '.join(p)} {a}" for p, a in ARGUMENT_CASES])
def test_an_argument_given_an_empty_value_is_a_usage_error_naming_it(path, argument, tmp_path):
    # `show "$RUN"` with RUN unset matched every run; `query "$NAME"` listed the queries, exit 0.
    command = dict(all_commands())[path]
    args = [*path, *("" if p.human_readable_name == argument else "x" for p in command.params
                     if isinstance(p, click.Argument))]
    result = CliRunner().invoke(main, args, env={"OMG_LEDGER_DB": str(tmp_path / "l.sqlite")})
    assert result.exit_code == 2, result.output
    assert f"{argument} was given an empty value" in result.output
    assert not (tmp_path / "l.sqlite").exists()


def test_cost_since_empty_prints_no_all_time_total(tmp_path):
    db = str(tmp_path / "l.sqlite")
    cli = [sys.executable, "-m", "omg_ledger.cli"]
    subprocess.run([*cli, "sync", "--db", db, "--home", str(CORPUS_HOME)], capture_output=True, check=True)
    result = subprocess.run([*cli, "cost", "--db", db, "--since", "", "--json"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("omg-ledger: error: --since was given an empty value: give one, or leave --since "
                             "out for its default (`omg-ledger cost --help` says more)\n")
    # An empty environment variable is unset, as click has always read it.
    result = subprocess.run([*cli, "cost", "--json"], capture_output=True, text=True, env={**os.environ,
                            "OMG_LEDGER_DB": db, "OMG_LEDGER_PRICES": ""})
    assert result.returncode == 0 and json.loads(result.stdout)["since"] is None


@pytest.mark.parametrize("args", [[], ["db"]], ids=["omg-ledger", "omg-ledger db"])
def test_a_group_without_a_command_prints_its_help_as_help(args):
    """`omg-ledger` alone is a usage error (exit 2, nothing ran), and what it shows is
    the help laid out as --help lays it out: a line per line, not one line of escapes."""
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == f"Usage: {' '.join(['omg-ledger', *args])} [OPTIONS] COMMAND [ARGS]..."
    assert "Commands:" in lines and "\\x0a" not in result.stderr


def _readme_section(title: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.split(title, 1)[1].split("\n#", 1)[0]


def _top_level_fields(shape: str) -> list[str]:
    """The keys of a README shape such as ``{a, b (why), c: [{d}]}``: what sits at depth 0
    between its braces, each key's first word (notes in parentheses and nested shapes skipped)."""
    depth, parts, part = 0, [], ""
    for char in shape.strip()[1:-1]:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(part)
            part = ""
        elif depth == 0 or (depth == 1 and char in "([{"):
            part += char
    parts.append(part)
    return [re.match(r"\s*`?(\w+)", p).group(1) for p in parts]


def _readme_shape(section: str, command: str) -> list[str]:
    """The field list the README's "JSON shapes" gives for ``command`` (the text from the
    first ``{`` after its name to the brace that closes it)."""
    start = section.index("{", section.index(f"`{command} --json`"))
    depth = 0
    for end in range(start, len(section)):
        depth += section[end] == "{"
        depth -= section[end] == "}"
        if depth == 0:
            return _top_level_fields(section[start:end + 1])
    raise AssertionError(f"{command}: unclosed shape")


def test_the_readme_json_shapes_are_the_fields_the_commands_print(tmp_path):
    """README "JSON shapes (stable)": each field list, in order, is what the command prints
    on a ledger synced from the bundled examples (with one bad line, so that sync and
    problems have a problem to show)."""
    home = tmp_path / "home"
    shutil.copytree(REPO / "examples" / "home", home)
    stream = sorted((home / "runs").iterdir())[0] / "events.jsonl"
    with stream.open("a") as f:
        f.write("{not json\n")
    db = str(tmp_path / "l.sqlite")

    def printed(*args):
        return json.loads(subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", db, "--json"],
                                         capture_output=True, text=True, check=True).stdout)

    section = _readme_section("### JSON shapes (stable)")
    synced = printed("sync", "--home", str(home))
    assert list(synced) == _readme_shape(section, "sync")
    assert list(synced["problems"][0]) == ["path", "offset", "byte_offset", "reason"]
    assert {p["offset"] for p in synced["problems"]} == {p["byte_offset"] for p in synced["problems"]}
    assert list(printed("rebuild")) == _readme_shape(section, "rebuild")
    runs = printed("runs")
    assert list(runs[0]) == _readme_shape(section, "runs")
    assert list(printed("plans")[0]) == _readme_shape(section, "plans")
    assert list(printed("homes")[0]) == _readme_shape(section, "homes")
    assert list(printed("problems")[0]) == _readme_shape(section, "problems")
    shown = printed("show", runs[0]["run_id"])
    # "the same fields (leg_count included) plus …": the names up to what it says of legs.
    plus = section[section.index("`show --json`: the same fields"):section.index("`leg_count` is always")]
    named = {name for name in re.findall(r"`(\w+)`", plus.split(" plus ", 1)[1]) if name != "resolved_at"}
    assert list(shown)[:len(runs[0])] == list(runs[0]) and set(list(shown)[len(runs[0]):]) == named
    legs = shown["legs"]
    start = section.index("{", section.index("`legs` is always a list"))
    assert list(legs[0]) == _top_level_fields(section[start:section.index("}", start) + 1])


def test_the_readme_commands_table_lists_every_command():
    """README "Commands": the table names every command of `omg-ledger --help`."""
    table = _readme_section("## Commands")
    rows = "\n".join(line for line in table.splitlines() if line.startswith("| `omg-ledger"))
    listed = set(re.findall(r"`omg-ledger ([a-z][a-z-]*)", rows))
    assert listed == set(main.commands), set(main.commands) ^ listed


@pytest.mark.parametrize("command", [["sync", "--home", str(CORPUS_HOME)], ["rebuild"], ["export", "OUT"]])
@pytest.mark.parametrize("wait", ["nan", "-1"])
def test_a_wait_that_is_no_number_of_seconds_is_a_usage_error(tmp_path, command, wait):
    """`nan` passes every range check (no comparison holds) and waited for ever."""
    from .cli_checks import one_line_error

    args = [str(tmp_path / "out.sqlite") if a == "OUT" else a for a in command]
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", str(tmp_path / "l.sqlite"),
                             "--wait", wait], capture_output=True, text=True, timeout=60)
    assert "takes a number of seconds >= 0" in one_line_error(result, 2)
    assert not (tmp_path / "l.sqlite").exists()


def test_rebuild_run_takes_a_unique_prefix_as_show_does(tmp_path):
    from .cli_checks import one_line_error

    db = str(tmp_path / "l.sqlite")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", db], capture_output=True,
                              text=True, timeout=120)

    assert cli("sync", "--home", str(CORPUS_HOME)).returncode == 0
    done = cli("rebuild", "--run", "20261129-181518.67", "--run", "20261129-181518.678721711-1", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs_rederived"] == 1  # one run, however it is named
    # 20261129-181518.131561744-1, .535010837-1, .678721711-1 and .826010212-1 (the corpus)
    assert "'20261129-181518' matches 4 runs" in one_line_error(cli("rebuild", "--run", "20261129-181518"), 2)
    assert "no run matches 'nope'" in one_line_error(cli("rebuild", "--run", "nope"), 2)
