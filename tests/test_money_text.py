"""One amount, one text: a run's spend reads the same in runs, show, cost and audit, with
thousands grouped as README's tables promise ("$12,345.6789")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .builders import age_tree, copy_run
from .conftest import CORPUS_HOME

# The corpus's s09-budget-cli-kill run: one node, runaway, failed for its budget
# ($0.21 of $0.20). Here it spent $1,234.50 of $1,000: the engine's own numbers, scaled.
S09 = "20261129-181514.879117232-1"
RUN = "20261129-181514.500000000-1"


def cli(*args) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("money")
    run_dir = copy_run(CORPUS_HOME / "runs" / S09, root / "home" / "runs" / RUN)
    for name in ("events.jsonl", "state.json"):
        path = run_dir / name
        text = path.read_text().replace('"cost_usd":0.21', '"cost_usd":1234.5').replace('"cost_usd": 0.21',
                                                                                           '"cost_usd": 1234.5')
        text = text.replace('"budget_usd": 0.2', '"budget_usd": 1000')
        path.write_text(text.replace("$0.2100 actual vs $0.2000 budgeted (over by $0.0100)",
                                     "$1234.5000 actual vs $1000.0000 budgeted (over by $234.5000)"))
    age_tree(root / "home")
    path = root / "ledger.sqlite"
    cli("sync", "--db", path, "--home", root / "home")
    return path


def test_a_run_over_a_thousand_dollars_reads_alike_everywhere(db):
    runs = cli("runs", "--db", db).splitlines()
    assert "$1,234.5000" in runs[2].split()
    shown = cli("show", "--db", db, RUN).splitlines()
    assert "spend $1,234.5000 " in shown[1]
    nodes = shown[shown.index("NODES") + 3]
    charges = shown[shown.index("CHARGES") + 3]
    assert "$1,234.5000" in nodes.split() and "$1,234.5000" in charges.split()
    by_run = cli("cost", "--db", db, "--by", "run").splitlines()
    assert "$1,234.5000" in by_run[5].split()
    audit = cli("audit", "--db", db)
    assert "an invocation spent $1,234.5000 of a $1,000.0000 budget ($1,234.5000 in all)" in audit
