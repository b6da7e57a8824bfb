"""Shell completion (click's own) works through the installed `omg-ledger` entry point:
the scripts README tells users to load are printed, and bash, loading one, completes
commands, subcommands and options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import CORPUS_HOME

ENTRY_POINT = Path(sys.executable).parent / "omg-ledger"


def _env() -> dict[str, str]:
    # The completion function calls `omg-ledger` by name, as a user's shell would.
    return {**os.environ, "PATH": f"{ENTRY_POINT.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _source(shell: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ENTRY_POINT)], capture_output=True, text=True, timeout=120,
                          env={**_env(), "_OMG_LEDGER_COMPLETE": f"{shell}_source"})


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", "complete -o nosort -F _omg_ledger_completion omg-ledger"),
    ("zsh", "#compdef omg-ledger"),
    ("fish", "complete --no-files --command omg-ledger"),
])
def test_the_entry_point_prints_a_completion_script(shell, marker):
    assert ENTRY_POINT.is_file(), f"the entry point is not installed at {ENTRY_POINT} (make install)"
    result = _source(shell)
    assert result.returncode == 0, result.stderr
    assert marker in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(("words", "expected"), [
    (["omg-ledger", "sq"], ["sql"]),
    (["omg-ledger", "db", "up"], ["upgrade"]),
    (["omg-ledger", "sql", "--time"], ["--timeout"]),
    (["omg-ledger", "cost", "--by", "we"], ["week"]),
])
def test_bash_completes_with_the_loaded_script(words, expected):
    script = _source("bash").stdout
    words_array = " ".join(f"'{w}'" for w in words)
    driver = (f"{script}\nCOMP_WORDS=({words_array}); COMP_CWORD={len(words) - 1}\n"
              "_omg_ledger_completion omg-ledger\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    result = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, timeout=120, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == expected, result.stderr


# -- values from the ledger: run ids, graph names, home labels, saved queries ----------------


@pytest.fixture(scope="module")
def corpus_ledger(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("completion") / "ledger.sqlite")
    subprocess.run([str(ENTRY_POINT), "sync", "--db", db, "--home", f"corpus={CORPUS_HOME}"], check=True,
                   capture_output=True, timeout=300, env=_env())
    return db


def _bash_completes(words: list[str], env: dict[str, str]) -> list[str]:
    script = _source("bash").stdout
    words_array = " ".join(f"'{w}'" for w in words)
    driver = (f"{script}\nCOMP_WORDS=({words_array}); COMP_CWORD={len(words) - 1}\n"
              "_omg_ledger_completion omg-ledger\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    result = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _corpus_graphs() -> set[str]:
    names = set()
    for state in (CORPUS_HOME / "runs").glob("*/state.json"):
        graph = json.loads(state.read_text()).get("graph") or {}
        if graph.get("name"):
            names.add(graph["name"])
    return names


def test_run_ids_graphs_labels_and_queries_complete_from_the_ledger(corpus_ledger):
    env = {**_env(), "OMG_LEDGER_DB": corpus_ledger}
    run_dirs = sorted((p.name for p in (CORPUS_HOME / "runs").iterdir() if p.is_dir()), reverse=True)
    prefix = "20261129-18152"
    assert _bash_completes(["omg-ledger", "show", prefix], env) == [r for r in run_dirs if r.startswith(prefix)]
    assert _bash_completes(["omg-ledger", "rebuild", "--run", prefix], env) == \
        [r for r in run_dirs if r.startswith(prefix)]
    assert _bash_completes(["omg-ledger", "cost", "--graph", "s1"], env) == \
        sorted(g for g in _corpus_graphs() if g.startswith("s1"))
    assert _bash_completes(["omg-ledger", "runs", "--graph", ""], env) == sorted(_corpus_graphs())
    for words in (["runs", "--home", "c"], ["show", "x", "--home", ""], ["homes", "forget", "co"]):
        assert _bash_completes(["omg-ledger", *words], env) == ["corpus"], words
    shipped = sorted(p.stem for p in (Path(__file__).parents[1] / "queries").glob("spend*.sql"))
    assert shipped and _bash_completes(["omg-ledger", "query", "spend"], env) == shipped
    # --db on the line wins over the environment.
    assert _bash_completes(["omg-ledger", "show", "--db", corpus_ledger, prefix],
                           {**_env(), "OMG_LEDGER_DB": "/nonexistent/ledger.sqlite"})[:1] == [run_dirs[0]]


def test_no_ledger_completes_nothing_and_creates_none(tmp_path):
    missing = tmp_path / "none.sqlite"
    env = {**_env(), "OMG_LEDGER_DB": str(missing)}
    assert _bash_completes(["omg-ledger", "show", "2026"], env) == []
    assert not missing.exists() and list(tmp_path.iterdir()) == []
