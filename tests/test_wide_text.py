"""Wide and long names in text output: graph names and node ids in CJK and emoji line up
as a terminal shows them, and a cut never makes two different names read alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omg_ledger.render import display_width

from .builders import age_tree, copy_run

# The corpus run of s01-parallel-pass: nodes plan, left, right, join ($0.0211, $0.0342,
# $0.0155, $0.0099), one leg, PASS.
S01 = "20261129-181512.929654081-1"
LONG = "a-very-long-graph-name-that-goes-on-and-on-and-on-for-ever-number-"
LEFT = "node-with-a-really-really-long-identifier-that-differs-only-at-the-very-end-AAAA"
RIGHT = "node-with-a-really-really-long-identifier-that-differs-only-at-the-very-end-BBBB"
# graph name, left's and right's new ids, by run id
RUNS = {
    "20261129-181510.100000000-1": ("数据管道-夜间重构-图表", "左侧节点", "🦀右"),
    "20261129-181510.200000000-1": ("🚀🔥-deploy-🎉", "左侧节点", "🦀右"),
    "20261129-181510.300000000-1": (LONG + "one", LEFT, RIGHT),
    "20261129-181510.400000000-1": (LONG + "two", LEFT, RIGHT),
}


def cli(*args, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    from .conftest import CORPUS_HOME

    root = tmp_path_factory.mktemp("wide")
    home = root / "home"
    (home / "runs").mkdir(parents=True)
    for run_id, (graph, left, right) in RUNS.items():
        run_dir = copy_run(CORPUS_HOME / "runs" / S01, home / "runs" / run_id)
        for name in ("events.jsonl", "state.json"):
            path = run_dir / name
            text = path.read_text().replace("s01-parallel-pass", graph)
            path.write_text(text.replace('"left"', json.dumps(left)).replace('"right"', json.dumps(right)))
    age_tree(home)
    path = root / "ledger.sqlite"
    assert cli("sync", "--db", path, "--home", f"wide={home}").returncode == 0
    return path


def columns_of(line: str, cells: list[str]) -> list[int]:
    """The terminal column each of `cells` starts at in `line`, found left to right."""
    at, found = 0, []
    for cell in cells:
        at = line.index(cell, at)
        found.append(display_width(line[:at]))
        at += len(cell)
    return found


def test_show_and_sql_tables_line_up_wide_node_ids(db):
    shown = cli("show", "--db", db, "20261129-181510.1").stdout.splitlines()
    nodes = shown[shown.index("NODES") + 1:shown.index("CHARGES") - 1]
    assert [line.split()[0] for line in nodes[2:]] == ["join", "plan", "左侧节点", "🦀右"]
    # VERDICT starts where its header does, and COST (right-aligned, as money is) ends where
    # its header does, in every row.
    header = columns_of(nodes[0], ["VERDICT", "COST"])
    for line in nodes[2:]:
        verdict, cost = columns_of(line, ["PASS", "$0.0"])
        assert (verdict, cost + len("$0.0000")) == (header[0], header[1] + len("COST")), line
    charges = shown[shown.index("CHARGES") + 1:shown.index("FINDINGS") - 1]
    header = columns_of(charges[0], ["ROUND", "AT"])
    for line in charges[2:]:
        assert columns_of(line, [" 0 ", "2026-11-29"])[1] == header[1], line
    out = cli("sql", "--db", db, "SELECT graph, node, cost_nano_usd FROM v_nodes ORDER BY graph, node").stdout
    lines = out.splitlines()
    header = columns_of(lines[0], ["cost_nano_usd"])[0]
    for line in lines[2:-1]:  # the last cell of every row starts under its header
        assert display_width(line[:line.rindex(" ") + 1]) == header, line


def cells_under(lines: list[str], header: str) -> list[str]:
    """The text of each row in `header`'s column: the span of its dashes in the rule line."""
    start = columns_of(lines[0], [header])[0]
    end = start + len(lines[1][start:].split(" ", 1)[0])  # the rule is ASCII: columns are characters
    out = []
    for line in lines[2:]:
        chars, used = [], 0
        for ch in line:
            if start <= used < end:
                chars.append(ch)
            used += display_width(ch)
        out.append("".join(chars).strip())
    return out


@pytest.mark.parametrize("columns", range(30, 200, 7))
def test_a_cut_never_makes_two_run_ids_or_graphs_read_alike(db, columns):
    """The four runs started in one second: a cut run id is still a prefix naming one run
    (what `show` takes), and the two long graph names, cut, are still two."""
    lines = cli("runs", "--db", db, columns=columns).stdout.splitlines()[:6]  # the header, its rule, 4 runs
    header = lines[0].split()
    runs = [line.split()[0] for line in lines[2:]]
    assert len(set(runs)) == 4 and all(sum(r.startswith(cut.rstrip("…")) for r in RUNS) == 1 for cut in runs), runs
    if "GRAPH" in header:
        graphs = cells_under(lines, "GRAPH")
        assert len(set(graphs)) == 4, graphs


@pytest.mark.parametrize("columns", range(40, 200, 9))
def test_a_cut_never_makes_two_cost_keys_read_alike(db, columns):
    lines = cli("cost", "--db", db, "--by", "node", columns=columns).stdout.splitlines()[3:]
    keys = [line.split("  $")[0].strip() for line in lines[2:-1]]
    assert len(keys) == 16 and len(set(keys)) == 16, keys


def test_the_chart_shows_keys_whole_and_lined_up_and_cut_apart(db):
    wide = cli("cost", "--db", db, "--by", "node", "--chart", columns=300).stdout.splitlines()[3:]
    keys = {f"{graph}/{node}" for graph, left, right in RUNS.values() for node in ("plan", left, right, "join")}
    assert {line.split("  $")[0].rstrip() for line in wide} == keys  # in full, 16 of them
    assert len({columns_of(line, ["$0.0"])[0] for line in wide}) == 1  # the money starts in one column
    for columns in range(40, 200, 9):
        lines = cli("cost", "--db", db, "--by", "node", "--chart", columns=columns).stdout.splitlines()[3:]
        shown = [line.split("  $")[0].rstrip() for line in lines]
        assert len(set(shown)) == 16, (columns, shown)
        assert len({columns_of(line, ["$0.0"])[0] for line in lines}) == 1, (columns, lines)
