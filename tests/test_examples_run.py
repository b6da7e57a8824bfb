"""Every example command line — of every command's --help and of README.md's sh and
console blocks — runs, on a ledger of the bundled examples, and ends as its text says:
exit 0, or 1 where it says "|| notify-someone" or shows a limit exceeded; never a usage or
database error. The few names the examples invent (a graph, a home, paths on a server)
are replaced by ones this ledger has, and listed here."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main

from .conftest import REPO
from .test_cli import all_commands

NOW = "2026-11-29T20:00:00Z"  # the evening the bundled runs were made (README)


def help_examples() -> list[str]:
    """The command lines of every --help's "Example:" block (continuation lines and a
    quoted statement over two lines joined)."""
    paths = [path for path, _ in all_commands()] + [("db",), ("homes",), ()]
    found = []
    for path in paths:
        text = CliRunner().invoke(main, [*path, "--help"]).output
        lines = text.splitlines()
        if "  Example:" not in lines:
            continue
        block = []
        for line in lines[lines.index("  Example:") + 1:]:
            if not line.startswith("    "):
                break
            block.append(line[4:])
        found += join_lines(block)
    return sorted(set(found))


def readme_examples() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```(?:sh|console)\n(.*?)```", readme, re.S):
        commands = [line.strip()[2:] if line.strip().startswith("$ ") else line.strip()
                    for line in block.splitlines() if line.strip().startswith(("$ ", "omg-ledger", "*/5", "datasette",
                                                                              "eval", "_OMG", "COLUMNS"))
                    or line.startswith("    --")]
        found += join_lines(commands)
    return [line for line in found if "omg-ledger" in line]


def join_lines(lines: list[str]) -> list[str]:
    out, pending = [], ""
    for line in lines:
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the statement goes on on the next line
            continue
        out.append(pending.strip())
        pending = ""
    return out


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("examples")
    home = root / "home"
    shutil.copytree(REPO / "examples" / "home", home)
    stream = root / "events.jsonl"
    stream.write_text('{"ts":"2026-11-29T10:00:00.5Z","role":"dev","milestone":"M1","event":"start"}\n')
    db = root / "ledger.sqlite"
    env = environment(db, home)
    assert subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--home", f"laptop={home}"], env=env,
                          cwd=REPO, capture_output=True).returncode == 0
    return {"root": root, "home": home, "stream": stream, "db": db}


def environment(db: Path, home: Path) -> dict:
    """The ledger, the clock and the home (`sync` with no --home reads $OMG_HOME)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "PYTHONIOENCODING")}
    env.update({"OMG_LEDGER_DB": str(db), "OMG_LEDGER_NOW": NOW, "OMG_HOME": str(home),
                "PYTHONPATH": os.pathsep.join(sys.path)})
    return env


def runnable(line: str, place: dict, n: int) -> tuple[list[list[str]], dict, set[int]]:
    """The omg-ledger invocations of one example line, the environment it sets, and the
    exit codes its text allows."""
    root = place["root"]
    # "|| notify-someone": exit 1 is the attention it acts on (the bundled runs have
    # ABANDONED ones, so audit says it); a limit may or may not be exceeded.
    allowed = {0, 1} if "|| notify-someone" in line or " --limit " in line else {0}
    replaced = {
        "~/.oh-my-graph": str(place["home"]),
        "~/proj/.ledger/events.jsonl": str(place["stream"]),
        "/var/lib/node_exporter/textfile/omg.prom": str(root / "omg.prom"),
        "/var/lib/node_exporter/omg.prom": str(root / "omg.prom"),
        "/tmp/omg.html": str(root / "omg.html"),
        "--to postgresql+psycopg://ledger@db.internal/ledger": f"--to {root / f'export-{n}.sqlite'}",
        "postgresql+psycopg://ledger@db.internal/ledger": str(place["db"]),
        "~/.local/share/omg-ledger/ledger.sqlite": str(place["db"]),
        "--db ledger.sqlite": f"--db {place['db']}",
        '"$OMG_LEDGER_DB"': str(place["db"]),
        "nightly-refactor": "s12-feedback-2rounds",
        "homes rename laptop:/home/me/.oh-my-graph laptop": "homes rename laptop my-laptop",
        "homes forget old-box": "homes forget laptop",
    }
    for example, here in replaced.items():
        line = line.replace(example, here)
    line = re.sub(r"^(\S+ ){5}(?=omg-ledger)", "", line)  # a crontab line's schedule
    if "<(" in line or "$(" in line:  # datasette -m <(…), eval "$(…)": the omg-ledger inside
        line = re.search(r"[<$]\(([^)]*)\)", line).group(1)
    env = {}
    invocations = []
    for part in re.split(r"&&|\|\||\|", line):
        words = shlex.split(part.split(" > ")[0], comments=True)
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        if words and words[0] == "omg-ledger":
            invocations.append(words[1:])
    return invocations, env, allowed


EXAMPLES = [("help", line) for line in help_examples()] + [("README", line) for line in readme_examples()]


@pytest.mark.parametrize(("where", "line"), EXAMPLES, ids=[f"{w}: {line[:60]}" for w, line in EXAMPLES])
def test_the_example_runs_as_its_text_says(where, line, place, tmp_path):
    db = tmp_path / "ledger.sqlite"  # each example on its own copy: rename, forget and export change it
    shutil.copy(place["db"], db)
    invocations, env_extra, allowed = runnable(line, {**place, "db": db}, EXAMPLES.index((where, line)))
    assert invocations, line
    env = {**environment(db, place["home"]), **env_extra}
    for args in invocations:
        result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True,
                                env=env, cwd=REPO, timeout=120)
        assert "Traceback" not in result.stderr and "error:" not in result.stderr, (args, result.stderr)
        assert result.returncode in allowed | {0}, (args, result.returncode, result.stderr)
        if "notify-someone" in line and args[0] == "audit":
            assert result.returncode == 1, (args, result.stdout)


def test_examples_were_found():
    assert len(help_examples()) >= 25 and len(readme_examples()) >= 25
    assert any(line.startswith('omg-ledger sql --json -- "-- runs per state\n') for line in help_examples())
