"""Shell completion (click's own) works through the installed `omg-ledger` entry point:
the scripts README tells users to load are printed, and bash, loading one, completes
commands, subcommands and options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
