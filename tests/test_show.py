"""`show` and `runs --json`: legs read as a line; one key never means two things."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

# examples/home's s15-retry-failed: a first leg that failed, then a retry that passed.
S15 = "20261129-181518.678721711-1"


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("show") / "ledger.sqlite"
    assert cli("sync", "--db", path, "--home", REPO / "examples" / "home").returncode == 0
    return path


def test_show_header_lists_the_legs_as_a_line(db):
    result = cli("show", "--db", db, S15)
    assert result.returncode == 0, result.stderr
    header = result.stdout.split("\n\n", 1)[0]
    assert "legs: 1 initial failed, 2 retry passed" in header.splitlines()
    assert "[{" not in header and "'ordinal'" not in header


def test_legs_is_a_list_in_show_and_leg_count_a_number_in_both(db):
    runs = json.loads(cli("runs", "--db", db, "--json").stdout)
    assert all("legs" not in r and isinstance(r["leg_count"], int) for r in runs)
    listed = next(r for r in runs if r["run_id"] == S15)
    shown = json.loads(cli("show", "--db", db, "--json", S15).stdout)
    assert listed["leg_count"] == shown["leg_count"] == 2
    assert [(leg["ordinal"], leg["kind"], leg["outcome"]) for leg in shown["legs"]] == [
        (1, "initial", "failed"), (2, "retry", "passed")]
    # Every key of a runs row means the same in show.
    assert {k: shown[k] for k in listed} == listed


# examples/home's s12-feedback-2rounds: review sends impl back twice (node_retried with
# feedback), so impl runs three times and review three; spec and merge once each.
S12 = "20261129-181518.131561744-1"


def test_show_lists_rounds_where_a_node_ran_more_than_once(db):
    text = cli("show", "--db", db, S12).stdout
    section = text.split("\nROUNDS\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[0].split() == ["NODE", "LEG", "ROUND", "STARTED", "OUTCOME", "PROVENANCE", "COST", "DETAIL"]
    cells = [line.split() for line in section[2:]]  # (STARTED is two words: date and time)
    assert [(c[0], c[2], c[5]) for c in cells] == [
        ("impl", "0", "PASS"), ("impl", "1", "PASS"), ("impl", "2", "PASS"), ("merge", "0", "PASS"),
        ("review", "0", "FEEDBACK"), ("review", "1", "FEEDBACK"), ("review", "2", "PASS"), ("spec", "0", "PASS")]
    # One run through each node: its round is its NODES line, no ROUNDS section.
    assert "\nROUNDS\n" not in cli("show", "--db", db, "20261129-181512.929654081-1").stdout


# examples/home's s41-feedback-limit-resumed: leg 1's second run of impl (round 1) was
# killed by the session limit, so it has no terminal event and no snapshot record.
S41 = "20261129-181524.756183722-1"


def test_an_execution_without_a_terminal_shows_no_price(db):
    """The engine records a session-limited execution nowhere — no ledger row, no snapshot
    record, no terminal event (scheduler.go:797-807, `outcome.SessionLimited`; corpus
    README #9) — though its call was paid for. Its ROUNDS line is no $0.0000: that would
    be a price the engine never gave; it is "-", with the attempt counted unrecorded."""
    text = cli("show", "--db", db, S41).stdout
    section = text.split("\nROUNDS\n", 1)[1].split("\n\n", 1)[0].splitlines()
    cells = [line.split() for line in section[2:]]  # (STARTED is two words: date and time)
    # NODE LEG ROUND date time OUTCOME PROVENANCE COST
    assert [(c[0], c[1], c[2], c[5], c[7]) for c in cells] == [
        ("impl", "1", "0", "PASS", "$0.0300"), ("impl", "1", "1", "-", "-"),
        ("review", "1", "0", "FEEDBACK", "$0.0150"), ("impl", "2", "1", "PASS", "$0.0300"),
        ("review", "2", "1", "PASS", "$0.0150")]
    assert "unrecorded attempts 1" in text.splitlines()[1]


def test_a_node_never_charged_shows_no_price(db):
    """examples/home's s16-session-limit: beta's one call hit the session limit (recorded
    nowhere, corpus README #9), gamma never ran. Neither has a price: "-", not $0.0000."""
    text = cli("show", "--db", db, "20261129-181518.826010212-1").stdout
    section = text.split("\nNODES\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [(c[0], c[2], c[6]) for c in (line.split() for line in section[2:])] == [
        ("alpha", "settled", "$0.0150"), ("beta", "unfinished", "-"), ("gamma", "pending", "-")]


def test_a_gate_is_free_not_unpriced(db):
    """A gate spawns no subprocess, so its node_passed carries no cost (run-feed contract,
    terminal node events) and the engine's own `show` prints it at 0.0000 (corpus
    truth/show-20261129-181514.934714601-1.txt): examples/home's s10-gate reads $0.0000,
    in NODES and in each of its ROUNDS lines, never "-"."""
    text = cli("show", "--db", db, "20261129-181514.934714601-1").stdout
    nodes = text.split("\nNODES\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert [line.split()[6] for line in nodes if line.startswith("approve ")] == ["$0.0000"]
    rounds = text.split("\nROUNDS\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert [line.split()[7] for line in rounds if line.startswith("approve ")] == ["$0.0000", "$0.0000"]


def test_a_long_leg_detail_is_cut_with_a_mark_and_never_through_an_escape(tmp_path):
    """A leg's DETAIL is cut to 80 columns: the cut is marked, and an escape shown for a
    control character is whole or absent (half of \\x1b would read as other text)."""
    from .builders import ev, write_run

    run_id = "20261129-101500.000000001-1"
    detail = "x" * 77 + "\x1b[31m" + "y" * 30
    write_run(tmp_path / "home", run_id, [ev("run_started"), ev("run_finished", 1, outcome="failed", detail=detail)])
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", tmp_path / "home").returncode == 0
    shown = cli("show", "--db", db, run_id)
    assert shown.returncode == 0, shown.stderr
    leg = next(line for line in shown.stdout.split("\nLEGS\n", 1)[1].splitlines() if line.startswith("1 "))
    # 77 columns of x, then the 4-column escape \x1b would pass 79: the mark comes first.
    assert leg.rstrip().endswith(" " + "x" * 77 + "…"), leg
    assert "\\x1" not in leg and "\x1b" not in leg


def test_a_run_whose_directory_is_gone_says_so(tmp_path):
    """`runs` says "PASS (gone)" and `show --json` has gone: true; the text of `show`
    said nothing, so its header read as a run still on disk."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(REPO / "examples" / "home", home)
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", home).returncode == 0
    shutil.rmtree(home / "runs" / S15)
    assert cli("sync", "--db", db, "--home", home).returncode == 0
    shown = cli("show", "--db", db, S15)
    assert shown.returncode == 0, shown.stderr
    first, *_ = shown.stdout.splitlines()
    assert first.startswith(f"run {S15}  [PASS (gone)]  home "), first
    assert json.loads(cli("show", "--db", db, S15, "--json").stdout)["gone"] is True
    kept = cli("show", "--db", db, "20261129-181514.934714601-1").stdout.splitlines()[0]
    assert "[PASS]" in kept and "gone" not in kept


def _column_ends(section: str, text: str, header: str) -> list[int]:
    """Where each row's cell of column `header` ends, and (first) where the column ends:
    a right-aligned column's cells all end where its dashes do."""
    lines = text.split(f"\n{section}\n", 1)[1].split("\n\n", 1)[0].splitlines()
    start = lines[0].index(header)
    end = lines[1].index(" ", start) if " " in lines[1][start:] else len(lines[1])
    return [end] + [len(line[:end].rstrip()) if len(line) >= end else len(line) for line in lines[2:]]


def test_money_in_show_is_right_aligned_as_in_every_table(tmp_path):
    """README: numbers are right-aligned. NODES and CHARGES wrote COST flush left, so
    $12.3400 over $0.0100 (and a node never charged, "-") put the decimals out of line,
    while ROUNDS right-aligned the same figures."""
    from .builders import ev, graph, write_run

    run_id = "20261129-101500.000000001-1"
    write_run(tmp_path / "home", run_id, [
        ev("run_started"),
        ev("node_started", 1, node_id="big"), ev("node_passed", 2, node_id="big", verdict="PASS", cost_usd=12.34),
        ev("node_started", 3, node_id="small"),
        ev("node_passed", 4, node_id="small", verdict="PASS", cost_usd=0.01),
        ev("run_finished", 5, outcome="failed"),
    ], {"runtime": "claude", "graph": graph("big", "small", "never"),
        "nodes": {"big": {"verdict": "PASS", "cost_usd": 12.34}, "small": {"verdict": "PASS", "cost_usd": 0.01}}})
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", tmp_path / "home").returncode == 0
    shown = cli("show", "--db", db, run_id)
    assert shown.returncode == 0, shown.stderr
    for section in ("NODES", "CHARGES"):
        end, *cells = _column_ends(section, shown.stdout, "COST")
        assert cells and all(cell == end for cell in cells), (section, shown.stdout)
    assert "$12.3400" in shown.stdout and "$0.0100" in shown.stdout
