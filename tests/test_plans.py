"""`omg-ledger plans`: plan previews with their graph names and whether each was refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from .builders import graph
from .cli_checks import one_line_error
from .conftest import REPO


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_plans_lists_previews_with_graph_and_refusal(tmp_path):
    home = tmp_path / "home"
    shutil.copytree(REPO / "examples" / "home" / "plans", home / "plans")
    (home / "runs").mkdir()
    refused = home / "plans" / "20261130-080000.000000001-1"
    refused.mkdir()
    (refused / "rejected.json").write_text('{"reason": "the goal is not a software change"}\n')
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", f"here={home}").returncode == 0

    listed = cli("plans", "--db", db, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"home": "here", "plan_id": "20261130-080000.000000001-1", "graph": None, "refused": True,
         "has_graph_json": False, "gone": False},
        # examples/home/plans/…/graph.json names the graph auto-readme-touchup.
        {"home": "here", "plan_id": "20261129-181522.137935627-1", "graph": "auto-readme-touchup",
         "refused": False, "has_graph_json": True, "gone": False},
    ]
    text = cli("plans", "--db", db)
    assert text.returncode == 0
    rows = [line.split() for line in text.stdout.splitlines()[2:4]]
    assert rows == [["20261130-080000.000000001-1", "-", "yes", "here"],
                    ["20261129-181522.137935627-1", "auto-readme-touchup", "no", "here"]]
    assert "2 plan preview(s), 1 refused" in text.stdout

    shutil.rmtree(refused)
    assert cli("sync", "--db", db, "--home", f"here={home}").returncode == 0
    gone = {p["plan_id"]: p["gone"] for p in json.loads(cli("plans", "--db", db, "--json").stdout)}
    assert gone == {"20261130-080000.000000001-1": True, "20261129-181522.137935627-1": False}
    assert "(gone)" in cli("plans", "--db", db).stdout
    # A label that names no home of this ledger is a usage mistake, not an empty listing.
    unknown = cli("plans", "--db", db, "--home", "elsewhere", "--json")
    assert "--home 'elsewhere' is no home of this ledger" in one_line_error(unknown, 2)
    assert unknown.stdout == ""


def test_a_plan_graph_name_holding_nul_is_stored_with_u_fffd(db_url, tmp_path):
    """PostgreSQL text cannot hold NUL: a plan whose graph.json names its graph with a
    \\u0000 escape is stored with U+FFFD there, as derived text is, and the sync goes on
    (on SQLite too, so both ledgers agree); the next sync finds nothing changed."""
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    plan = home / "plans" / "20261130-090000.000000001-1"
    plan.mkdir(parents=True)
    (plan / "graph.json").write_text(json.dumps({**graph("scan"), "name": "nightly\x00build"}))
    assert "\\u0000" in (plan / "graph.json").read_text()
    for _ in range(2):
        synced = cli("sync", "--db", db_url, "--home", f"here={home}", "--json")
        assert synced.returncode == 0, synced.stderr
        assert json.loads(synced.stdout)["problems"] == []
    listed = cli("plans", "--db", db_url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(p["plan_id"], p["graph"]) for p in json.loads(listed.stdout)] == \
        [("20261130-090000.000000001-1", "nightly\ufffdbuild")]
