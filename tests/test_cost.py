"""`omg-ledger cost`: expectations come from the contract and from reading the run
files by hand (never from the code's output). Every report test runs on SQLite and
on a real PostgreSQL (db_url)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.prices import load_book
from omg_ledger.reports.cost import GROUPINGS, cost_report
from omg_ledger.reports.overview import overview
from omg_ledger.sync import Home, sync

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


# -- hand-made run directories --------------------------------------------------------


def ts(moment: datetime | str) -> str:
    if isinstance(moment, str):
        return moment
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ev(run_id: str, at, event: str, **fields) -> dict:
    return {"schema": 3, "ts": ts(at), "run_id": run_id, "event": event, **fields}


def write_run(home: Path, run_id: str, events: list[dict] | None, state: dict | None = None,
              assess: dict | None = None, files: dict[str, str] | None = None) -> Path:
    run = home / "runs" / run_id
    run.mkdir(parents=True)
    if events is not None:
        (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if state is not None:
        (run / "state.json").write_text(json.dumps(state))
    if assess is not None:
        (run / "assess.json").write_text(json.dumps(assess))
    for name, content in (files or {}).items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(content)
    return run


def state(run_id: str, graph: str, nodes: dict, runtime: str = "claude", **extra) -> dict:
    return {"schema": 3, "run_id": run_id, "runtime": runtime, "graph_source_path": f"/x/{graph}.yaml",
            "graph_sha256": "0" * 64, "graph": {"name": graph, "nodes": [{"id": n} for n in nodes]},
            "nodes": nodes, "gate": {}, **extra}


def passed(run_id: str, at, node: str, cost: float | None = None, **fields) -> dict:
    if cost is not None:
        fields["cost_usd"] = cost
    return ev(run_id, at, "node_passed", node_id=node, verdict="PASS", **fields)


def one_charge_run(home: Path, run_id: str, at: str, cost: float, graph: str = "g") -> None:
    """run_started, one node PASS at `at` costing `cost`, run_finished — all at `at`."""
    write_run(home, run_id, [
        ev(run_id, at, "run_started"),
        ev(run_id, at, "node_started", node_id="n"),
        passed(run_id, at, "n", cost, provenance="exit-only"),
        ev(run_id, at, "run_finished", outcome="passed"),
    ], state(run_id, graph, {"n": {"verdict": "PASS", "cost_usd": cost}}))


def ledger(url: str, home: Path, label: str = "hand"):
    engine = open_ledger(url)
    sync(engine, [Home.from_path(str(home), label)])
    return engine


# The scenario home: one run per sentence of the money contract. Times are UTC.
A = "20261129-100000.000000001-1"  # Codex: every node cost_unknown, no cost_usd
B = "20261129-101000.000000001-1"  # feedback loop
C = "20261129-102000.000000001-1"  # retry-failed: leg 2 the next day
D = "20261129-104000.000000001-1"  # auto run: planning charge on the unphased run_started
E = "20261129-105000.000000001-1"  # refused plan: charge on run_finished, no state.json
F1 = "20261129-110000.000000001-1"  # goal cycle 1 (assess.json)
F2 = "20261129-111000.000000002-2"  # goal cycle 2 (assess.json)
G = "20261129-112000.000000001-1"  # dropped terminal event, recovered from state.json


def t(hms: str, day: str = "2026-11-29") -> str:
    return f"{day}T{hms}.000000Z"


@pytest.fixture
def scenario_home(tmp_path) -> Path:
    home = tmp_path / "home"
    usage1 = {"input_tokens": 1000, "cached_input_tokens": 400, "output_tokens": 200, "reasoning_output_tokens": 50}
    usage2 = {"input_tokens": 2000, "cached_input_tokens": 600, "output_tokens": 300, "reasoning_output_tokens": 70}
    write_run(home, A, [
        ev(A, t("10:00:00"), "run_started"),
        ev(A, t("10:00:01"), "node_started", node_id="scan"),
        passed(A, t("10:00:02"), "scan", cost_unknown=True, usage=usage1, provenance="exit-only"),
        ev(A, t("10:00:03"), "node_started", node_id="fix"),
        passed(A, t("10:00:04"), "fix", cost_unknown=True, usage=usage2, provenance="self-reported"),
        ev(A, t("10:00:05"), "run_finished", outcome="passed"),
    ], state(A, "codex-graph", {
        "scan": {"verdict": "PASS", "cost_usd": 0, "cost_unknown": True, "usage": usage1},
        "fix": {"verdict": "PASS", "cost_usd": 0, "cost_unknown": True, "usage": usage2},
    }, runtime="codex"))
    write_run(home, B, [
        ev(B, t("10:10:00"), "run_started"),
        ev(B, t("10:10:01"), "node_started", node_id="impl"),
        passed(B, t("10:10:02"), "impl", 0.04, provenance="self-reported"),
        ev(B, t("10:10:03"), "node_started", node_id="review"),
        ev(B, t("10:10:04"), "node_retried", node_id="review", cost_usd=0.02, round=1,
           detail="feedback round 1/2: re-running impl → review"),
        ev(B, t("10:10:05"), "node_started", node_id="impl", round=1),
        passed(B, t("10:10:06"), "impl", 0.04, round=1, provenance="self-reported"),
        ev(B, t("10:10:07"), "node_started", node_id="review", round=1),
        passed(B, t("10:10:08"), "review", 0.02, round=1, provenance="self-reported"),
        ev(B, t("10:10:09"), "run_finished", outcome="passed"),
    ], state(B, "feedback-graph", {  # rounds accumulate into the record (corpus README #2)
        "impl": {"verdict": "PASS", "cost_usd": 0.08, "round": 1},
        "review": {"verdict": "PASS", "cost_usd": 0.04, "round": 1},
    }))
    write_run(home, C, [
        ev(C, t("10:20:00"), "run_started"),
        ev(C, t("10:20:01"), "node_started", node_id="compile"),
        ev(C, t("10:20:02"), "node_failed", node_id="compile", verdict="FAIL", cost_usd=0.03, detail="broken"),
        ev(C, t("10:20:03"), "run_finished", outcome="failed"),
        ev(C, t("09:00:00", "2026-11-30"), "run_started"),
        ev(C, t("09:00:01", "2026-11-30"), "node_started", node_id="compile"),
        passed(C, t("09:00:02", "2026-11-30"), "compile", 0.03, provenance="self-reported"),
        ev(C, t("09:00:03", "2026-11-30"), "run_finished", outcome="passed"),
    ], state(C, "retry-graph", {"compile": {"verdict": "PASS", "cost_usd": 0.03}}))  # only leg 2's record
    write_run(home, D, [
        ev(D, t("10:40:00"), "run_started", phase="planning"),
        ev(D, t("10:40:01"), "run_started", cost_usd=0.0456),
        ev(D, t("10:40:02"), "node_started", node_id="survey"),
        passed(D, t("10:40:03"), "survey", 0.021, provenance="exit-only"),
        ev(D, t("10:40:04"), "run_finished", outcome="passed"),
    ], state(D, "auto-graph", {"survey": {"verdict": "PASS", "cost_usd": 0.021}}, planning_cost_usd=0.0456,
             build_evidence={"answer": "declared", "declared_by": "--accept-no-build-evidence",
                             "signals": ["Makefile"]}))
    write_run(home, E, [
        ev(E, t("10:50:00"), "run_started", phase="planning"),
        ev(E, t("10:50:01"), "run_finished", cost_usd=0.0912, outcome="failed"),
    ])
    goal = {"text": "ship it", "max_cycles": 2, "first_run_id": F1}
    write_run(home, F1, [
        ev(F1, t("11:00:00"), "run_started", phase="planning"),
        ev(F1, t("11:00:01"), "run_started", cost_usd=0.01),
        ev(F1, t("11:00:02"), "node_started", node_id="a"),
        passed(F1, t("11:00:03"), "a", 0.02, provenance="exit-only"),
        ev(F1, t("11:00:04"), "run_finished", outcome="passed"),
    ], state(F1, "goal-one", {"a": {"verdict": "PASS", "cost_usd": 0.02}}, planning_cost_usd=0.01,
             goal={**goal, "cycle": 1}, build_evidence={"answer": "none-detected"}),
        assess={"goal_met": False, "remaining": "more", "evidence": "e", "assess_cost_usd": 0.0078})
    write_run(home, F2, [
        ev(F2, t("11:10:00"), "run_started", phase="planning"),
        ev(F2, t("11:10:01"), "run_started", cost_usd=0.01),
        ev(F2, t("11:10:02"), "node_started", node_id="b"),
        passed(F2, t("11:10:03"), "b", 0.03, provenance="verified"),
        ev(F2, t("11:10:04"), "run_finished", outcome="passed"),
    ], state(F2, "goal-two", {"b": {"verdict": "PASS", "cost_usd": 0.03}}, planning_cost_usd=0.01,
             goal={**goal, "cycle": 2}, build_evidence={"answer": "none-detected"}),
        assess={"goal_met": True, "remaining": "", "evidence": "e", "assess_cost_usd": 0.0078})
    write_run(home, G, [
        ev(G, t("11:20:00"), "run_started"),
        ev(G, t("11:20:01"), "node_started", node_id="x"),
        passed(G, t("11:20:02"), "x", 0.011, provenance="exit-only"),
        ev(G, t("11:20:03"), "node_started", node_id="y"),
        # y's node_passed was dropped (a non-fatal write failure in the engine)
        ev(G, t("11:20:05"), "run_finished", outcome="passed"),
    ], state(G, "dropped-graph", {"x": {"verdict": "PASS", "cost_usd": 0.011},
                                  "y": {"verdict": "PASS", "cost_usd": 0.017, "provenance": "exit-only"}}))
    return home


def nanos(usd: str) -> int:
    """Exact nano-dollars from a decimal string (no float arithmetic in expectations)."""
    whole, _, frac = usd.partition(".")
    return int(whole) * 10**9 + int((frac + "0" * 9)[:9])


# By hand, per run (USD):
#   A  0 known, 2 unpriced (Codex), tokens 3000/1000/500/120
#   B  impl 0.04 + review feedback 0.02 + impl round 1 0.04 + review 0.02      = 0.12   (4)
#   C  leg 1 compile FAIL 0.03 + leg 2 compile PASS 0.03 (state.json has 0.03) = 0.06   (2)
#   D  planning 0.0456 (once, not again from planning_cost_usd) + survey 0.021 = 0.0666 (2)
#   E  refused plan on run_finished                                          = 0.0912 (1)
#   F1 planning 0.01 + a 0.02 + assessment 0.0078                            = 0.0378 (3)
#   F2 planning 0.01 + b 0.03 + assessment 0.0078                            = 0.0478 (3)
#   G  x 0.011 + y 0.017 recovered from state.json                           = 0.028  (2)
PER_RUN = {A: ("0", 2, 2), B: ("0.12", 4, 0), C: ("0.06", 2, 0), D: ("0.0666", 2, 0), E: ("0.0912", 1, 0),
           F1: ("0.0378", 3, 0), F2: ("0.0478", 3, 0), G: ("0.028", 2, 0)}
TOTAL = "0.4514"  # 0.12 + 0.06 + 0.0666 + 0.0912 + 0.0378 + 0.0478 + 0.028


def test_hand_total_is_the_sum_of_the_runs():
    assert sum(nanos(v[0]) for v in PER_RUN.values()) == nanos(TOTAL)


def test_scenarios_per_run(db_url, scenario_home):
    report = cost_report(ledger(db_url, scenario_home), by="run", tz="UTC", now=NOW)
    got = {r["key"]: (r["cost_nano_usd"], r["invocations"], r["unknown_cost_invocations"]) for r in report["rows"]}
    assert got == {k: (nanos(v[0]), v[1], v[2]) for k, v in PER_RUN.items()}
    total = report["total"]
    assert total["cost_nano_usd"] == nanos(TOTAL)
    assert total["invocations"] == 19 and total["unknown_cost_invocations"] == 2
    assert total["cost_is_lower_bound"] is True
    assert total["cost_usd"] == 0.4514
    assert {r["home"] for r in report["rows"]} == {"hand"}


def test_codex_run_is_a_lower_bound_with_its_tokens(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    report = cost_report(engine, by="runtime", tz="UTC", now=NOW)
    codex = next(r for r in report["rows"] if r["key"] == "codex")
    assert codex == {**codex, "cost_nano_usd": 0, "invocations": 2, "unknown_cost_invocations": 2,
                     "cost_is_lower_bound": True, "input_tokens": 3000, "cached_input_tokens": 1000,
                     "output_tokens": 500, "reasoning_output_tokens": 120}
    # E never wrote state.json: its runtime is not known
    assert next(r for r in report["rows"] if r["key"] == "(no snapshot)")["cost_nano_usd"] == nanos("0.0912")
    claude = next(r for r in report["rows"] if r["key"] == "claude")
    assert claude["cost_is_lower_bound"] is False
    assert claude["cost_nano_usd"] == nanos(TOTAL) - nanos("0.0912")


def test_by_node_keys_and_run_level_charges(db_url, scenario_home):
    report = cost_report(ledger(db_url, scenario_home), by="node", tz="UTC", now=NOW)
    got = {r["key"]: (r["cost_nano_usd"], r["invocations"]) for r in report["rows"]}
    assert got["feedback-graph/impl"] == (nanos("0.08"), 2)
    assert got["feedback-graph/review"] == (nanos("0.04"), 2)  # the declarer's node_retried is charged
    assert got["retry-graph/compile"] == (nanos("0.06"), 2)  # both legs
    assert got["auto-graph/(planning)"] == (nanos("0.0456"), 1)
    assert got["(no graph)/(refused)"] == (nanos("0.0912"), 1)
    assert got["goal-one/(assessment)"] == (nanos("0.0078"), 1)
    assert got["dropped-graph/y"] == (nanos("0.017"), 1)
    row = next(r for r in report["rows"] if r["key"] == "feedback-graph/impl")
    assert (row["graph"], row["node_id"]) == ("feedback-graph", "impl")


def test_by_goal_adds_up_cycles_and_assessments(db_url, scenario_home):
    report = cost_report(ledger(db_url, scenario_home), by="goal", tz="UTC", now=NOW)
    got = {r["key"]: r["cost_nano_usd"] for r in report["rows"]}
    assert got[F1] == nanos("0.0378") + nanos("0.0478")  # both cycles, both assessments
    assert got["(no goal)"] == nanos(TOTAL) - got[F1]


def test_by_graph_adds_up_each_graphs_runs(db_url, scenario_home):
    report = cost_report(ledger(db_url, scenario_home), by="graph", tz="UTC", now=NOW)
    got = {r["key"]: (r["cost_nano_usd"], r["invocations"], r["unknown_cost_invocations"]) for r in report["rows"]}
    # One run a graph in this home: each graph's row is its run's (PER_RUN); E refused its
    # plan before a graph existed.
    graph_of = {A: "codex-graph", B: "feedback-graph", C: "retry-graph", D: "auto-graph", E: "(no graph)",
                F1: "goal-one", F2: "goal-two", G: "dropped-graph"}
    assert got == {graph_of[run]: (nanos(v[0]), v[1], v[2]) for run, v in PER_RUN.items()}
    assert {r["key"]: r["graph"] for r in report["rows"]}["(no graph)"] is None
    assert next(r for r in report["rows"] if r["key"] == "codex-graph")["cost_is_lower_bound"] is True
    # Largest known spend first; the all-unpriced graph last.
    assert [r["key"] for r in report["rows"]][:2] == ["feedback-graph", "(no graph)"]
    assert report["rows"][-1]["key"] == "codex-graph"
    assert report["total"]["cost_nano_usd"] == nanos(TOTAL)


def test_by_graph_sums_the_runs_of_one_graph(db_url, tmp_path):
    home = tmp_path / "home"
    one_charge_run(home, "20261129-090000.000000001-1", "2026-11-29T09:00:00.000000Z", 1.25, graph="nightly")
    one_charge_run(home, "20261129-100000.000000001-1", "2026-11-29T10:00:00.000000Z", 0.5, graph="nightly")
    one_charge_run(home, "20261129-110000.000000001-1", "2026-11-29T11:00:00.000000Z", 2.0, graph="weekly")
    report = cost_report(ledger(db_url, home), by="graph", since="2026-11-29T09:30:00Z", tz="UTC", now=NOW)
    # The window leaves the 09:00 run out.
    assert [(r["key"], r["cost_nano_usd"], r["invocations"]) for r in report["rows"]] == [
        ("weekly", 2 * 10**9, 1), ("nightly", 5 * 10**8, 1)]


def test_by_home_bills_a_copied_run_to_its_billed_copy_once(db_url, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    run_id = "20261129-090000.000000001-1"
    at = "2026-11-29T09:00:00.000000Z"
    full = [ev(run_id, at, "run_started"), ev(run_id, at, "node_started", node_id="n"),
            passed(run_id, at, "n", 1.0, provenance="exit-only"), ev(run_id, at, "node_started", node_id="m"),
            passed(run_id, at, "m", 0.5, provenance="exit-only"), ev(run_id, at, "run_finished", outcome="passed")]
    write_run(one, run_id, full)
    # Home two holds a copy taken mid-run (the first three lines: n's charge only) and a run of its own.
    write_run(two, run_id, full[:3])
    one_charge_run(two, "20261129-100000.000000001-1", "2026-11-29T10:00:00.000000Z", 2.0)
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(one), "one"), Home.from_path(str(two), "two")])
    report = cost_report(engine, by="home", tz="UTC", now=NOW)
    # The copy holding most of the stream is billed (README "One run, one bill"): 1.0 + 0.5
    # to home one, once; home two only its own run's 2.0.
    assert [(r["key"], r["cost_nano_usd"], r["invocations"]) for r in report["rows"]] == [
        ("two", 2 * 10**9, 1), ("one", 15 * 10**8, 2)]
    assert report["total"]["cost_nano_usd"] == 35 * 10**8
    assert cost_report(engine, by="home", home_labels=("one",), tz="UTC", now=NOW)["rows"] == [
        next(r for r in report["rows"] if r["key"] == "one")]


def test_nodes_whose_keys_read_alike_stay_two_rows(db_url, tmp_path):
    """Graph "a/b" node "c" and graph "a" node "b/c" are both shown as "a/b/c": two groups
    still, each with its own spend (the rows carry graph and node_id apart)."""
    home = tmp_path / "home"
    for run_id, graph, node, cost in (("20261129-090000.000000001-1", "a/b", "c", 0.1),
                                      ("20261129-100000.000000001-1", "a", "b/c", 0.2)):
        at = run_id[:4] + "-11-29T" + run_id[9:11] + ":00:00.000000Z"
        write_run(home, run_id, [ev(run_id, at, "run_started"), ev(run_id, at, "node_started", node_id=node),
                                 passed(run_id, at, node, cost, provenance="exit-only"),
                                 ev(run_id, at, "run_finished", outcome="passed")],
                  state(run_id, graph, {node: {"verdict": "PASS", "cost_usd": cost}}))
    engine = ledger(db_url, home)
    for prices in (None, load_book()):
        rows = cost_report(engine, by="node", tz="UTC", now=NOW, prices=prices)["rows"]
        assert [(r["key"], r["graph"], r["node_id"], r["cost_nano_usd"], r["invocations"]) for r in rows] == [
            ("a/b/c", "a", "b/c", 2 * 10**8, 1), ("a/b/c", "a/b", "c", 10**8, 1)]
    graphs = cost_report(engine, by="graph", tz="UTC", now=NOW)["rows"]
    assert [(r["key"], r["cost_nano_usd"]) for r in graphs] == [("a", 2 * 10**8), ("a/b", 10**8)]


def test_cli_groupings_are_the_reports(sqlite_url):
    """The --by choices are written out in cli.py (it imports no report at start-up)."""
    by = next(p for p in main.commands["cost"].params if p.name == "by")
    assert tuple(by.type.choices) == GROUPINGS


def test_by_leg_kind(db_url, scenario_home):
    report = cost_report(ledger(db_url, scenario_home), by="leg-kind", tz="UTC", now=NOW)
    got = {r["key"]: r["cost_nano_usd"] for r in report["rows"]}
    assert got["retry"] == nanos("0.03")  # C's second leg after a failed one
    assert got["planning"] == nanos("0.0456") + nanos("0.0912") + 2 * nanos("0.01")
    assert got["assessment"] == 2 * nanos("0.0078")


def test_charges_count_at_their_own_time(db_url, scenario_home):
    # C's second leg is on 2026-11-30: its spend is there, not on the run's first day.
    report = cost_report(ledger(db_url, scenario_home), by="day", tz="UTC", now=NOW)
    got = {r["key"]: r["cost_nano_usd"] for r in report["rows"]}
    assert got == {"2026-11-29": nanos(TOTAL) - nanos("0.03"), "2026-11-30": nanos("0.03")}
    day = report["rows"][0]
    assert (day["start"], day["end"]) == ("2026-11-29T00:00:00+00:00", "2026-11-30T00:00:00+00:00")


def test_undated_charge_counts_in_all_time_only(db_url, tmp_path):
    # A run with state.json and assess.json but no stream: the assessment charge has no time.
    home = tmp_path / "home"
    run = "20261129-090000.000000001-1"
    write_run(home, run, None, state(run, "g", {}), assess={"goal_met": True, "assess_cost_usd": 0.5})
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25)
    engine = ledger(db_url, home)
    all_time = cost_report(engine, by="day", tz="UTC", now=NOW)
    assert all_time["total"]["cost_nano_usd"] == nanos("0.75")
    assert {r["key"]: r["cost_nano_usd"] for r in all_time["rows"]} == {"2026-11-29": nanos("0.25"),
                                                                         "(undated)": nanos("0.5")}
    windowed = cost_report(engine, since="1d", tz="UTC", now=NOW)
    assert windowed["total"]["cost_nano_usd"] == nanos("0.25")
    assert all_time["undated_outside_window"] is None  # all time holds them, in the total


def test_a_window_ending_now_says_how_much_spend_is_dated_after_now(db_url, tmp_path):
    """A run written on a machine whose clock runs ahead: its charge is in the all-time
    total and in no window that ends now (--since without --until), which says so under
    its total instead of leaving it out unsaid. A window with --until says nothing: it
    ends where it was told to."""
    home = tmp_path / "home"
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25)
    one_charge_run(home, "20261129-130000.000000001-1", "2026-11-29T13:00:00.000000Z", 0.5)  # an hour after NOW
    one_charge_run(home, "20261129-120000.000000001-1", "2026-11-29T12:00:00.000000Z", 0.125)  # at NOW: [since, now)
    engine = ledger(db_url, home)
    assert cost_report(engine, tz="UTC", now=NOW)["total"]["cost_nano_usd"] == nanos("0.875")
    windowed = cost_report(engine, since="1d", tz="UTC", now=NOW)
    assert windowed["total"]["cost_nano_usd"] == nanos("0.25")
    ahead = windowed["after_now_outside_window"]
    assert (ahead["cost_nano_usd"], ahead["invocations"]) == (nanos("0.625"), 2)
    assert cost_report(engine, since="1d", until="2026-11-29T12:00:00Z", tz="UTC", now=NOW)[
        "after_now_outside_window"] is None
    assert cost_report(engine, tz="UTC", now=NOW)["after_now_outside_window"] is None

    env = {"OMG_LEDGER_NOW": "2026-11-29T12:00:00Z", "COLUMNS": "200"}
    text = CliRunner().invoke(main, ["cost", "--db", db_url, "--since", "1d"], env=env)
    assert text.exit_code == 0, text.output
    assert "not in the window: $0.6250 in 2 charges dated after now" in text.output
    told = CliRunner().invoke(main, ["cost", "--db", db_url, "--since", "1d", "--until", "2026-11-29T12:00:00Z"],
                              env=env)
    assert "dated after now" not in told.output


def test_a_window_says_how_much_undated_spend_it_leaves_out(db_url, tmp_path):
    # The run above (assess.json's $0.50, no stream) is also copied into a second home:
    # outside every window, and counted once however many copies there are.
    home, backup = tmp_path / "home", tmp_path / "backup"
    run = "20261129-090000.000000001-1"
    for where in (home, backup):
        write_run(where, run, None, state(run, "g", {}), assess={"goal_met": True, "assess_cost_usd": 0.5})
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25)
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "hand"), Home.from_path(str(backup), "backup")])
    windowed = cost_report(engine, since="1d", by="day", tz="UTC", now=NOW)
    assert windowed["total"]["cost_nano_usd"] == nanos("0.25")
    outside = windowed["undated_outside_window"]
    assert (outside["cost_nano_usd"], outside["invocations"], outside["unknown_cost_invocations"]) == (nanos("0.5"), 1, 0)
    assert cost_report(engine, since="1d", tz="UTC", now=NOW, home_labels=("nowhere",))[
        "undated_outside_window"]["invocations"] == 0

    env = {"OMG_LEDGER_NOW": "2026-11-29T12:00:00Z", "COLUMNS": "200"}
    text = CliRunner().invoke(main, ["cost", "--db", db_url, "--since", "1d"], env=env)
    assert text.exit_code == 0, text.output
    assert "not in any window: $0.5000 in 1 undated charge " in text.output
    all_time = CliRunner().invoke(main, ["cost", "--db", db_url], env=env)
    assert "not in any window" not in all_time.output and "$0.7500" in all_time.output


def test_corpus_total_by_hand(db_url, corpus_home):
    # corpus/per-run.md, "events $" column, every run in table order:
    #   0.0807 + 0.0500 + 0.0300 + 0.0330 + 0.2100 + 0.0720 + 0.2010 + 0.0610 + 0.0770
    # + 0.0150 + 0.0000 (s18, +unknown) + 0.0700 + 0.0130 + 0.1086 + 0.0912 + 0.1542
    # + 0.0966 + 0.0746 + 0.0000 (s32, +unknown) + 0.0000 (s33) + 0.0786 + 0.0786
    # + 0.0060 + 0.0100 + 0.0900                                             = 1.7011
    # plus assess_cost_usd in the two assess.json files (s30's cycles): 0.0078 × 2 = 0.0156
    #                                                                    total = 1.7167
    # Unpriced: s18's three node_passed + s32's plan commit and two nodes = 6.
    events = ["0.0807", "0.0500", "0.0300", "0.0330", "0.2100", "0.0720", "0.2010", "0.0610", "0.0770",
              "0.0150", "0", "0.0700", "0.0130", "0.1086", "0.0912", "0.1542", "0.0966", "0.0746", "0", "0",
              "0.0786", "0.0786", "0.0060", "0.0100", "0.0900"]
    assert sum(nanos(x) for x in events) == nanos("1.7011")
    expected = nanos("1.7011") + 2 * nanos("0.0078")
    report = cost_report(ledger(db_url, corpus_home, "corpus"), tz="UTC", now=NOW)
    assert report["total"]["cost_nano_usd"] == expected == nanos("1.7167")
    assert report["total"]["unknown_cost_invocations"] == 6
    assert report["total"]["cost_is_lower_bound"] is True
    assert report["rows"] == []
    # s18 (per-run.md): runs list TOKENS 14900/10100/2230/920
    by_run = cost_report(ledger(db_url, corpus_home, "corpus"), by="run", tz="UTC", now=NOW)
    s18 = next(r for r in by_run["rows"] if r["key"] == "20261129-181519.049176714-1")
    assert [s18[k] for k in ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")] \
        == [14900, 10100, 2230, 920]


# -- windows, zones, DST ----------------------------------------------------------------


def _boundary_home(tmp_path, instants: list[str]) -> Path:
    home = tmp_path / "home"
    for i, at in enumerate(instants):
        # cost 1, 2, 4, 8, … so every subset sum is unique
        one_charge_run(home, f"20261001-000000.{i:09d}-1", at, float(2**i))
    return home


def _dollars(report: dict) -> dict[str, int]:
    return {r["key"]: r["cost_nano_usd"] // 10**9 for r in report["rows"]}


def test_berlin_dst_end_day_is_25_hours(db_url, tmp_path):
    # Europe/Berlin leaves CEST (+2) for CET (+1) at 2026-10-25 01:00 UTC, so local
    # 2026-10-25 runs from 2026-10-24T22:00Z to 2026-10-25T23:00Z (25 hours).
    home = _boundary_home(tmp_path, [
        "2026-10-24T21:59:59.000000Z",  # 1: 23:59:59 CEST on the 24th
        "2026-10-24T22:00:00.000000Z",  # 2: 00:00 CEST on the 25th
        "2026-10-25T00:30:00.000000Z",  # 4: 02:30 CEST, the first 02:30
        "2026-10-25T01:30:00.000000Z",  # 8: 02:30 CET, the second 02:30
        "2026-10-25T22:59:59.000000Z",  # 16: 23:59:59 CET on the 25th
        "2026-10-25T23:00:00.000000Z",  # 32: 00:00 CET on Monday the 26th
    ])
    engine = ledger(db_url, home)
    by_day = cost_report(engine, by="day", tz="Europe/Berlin", now=NOW)
    assert _dollars(by_day) == {"2026-10-24": 1, "2026-10-25": 2 + 4 + 8 + 16, "2026-10-26": 32}
    day = next(r for r in by_day["rows"] if r["key"] == "2026-10-25")
    assert (day["start"], day["end"]) == ("2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00")
    by_week = cost_report(engine, by="week", tz="Europe/Berlin", now=NOW)
    assert _dollars(by_week) == {"2026-10-19": 1 + 2 + 4 + 8 + 16, "2026-10-26": 32}  # weeks start Monday
    in_utc = cost_report(engine, by="day", tz="UTC", now=NOW)
    assert _dollars(in_utc) == {"2026-10-24": 1 + 2, "2026-10-25": 4 + 8 + 16 + 32}
    assert by_day["tz"] == "Europe/Berlin"


def test_new_york_dst_end_month_and_week(db_url, tmp_path):
    # America/New_York leaves EDT (-4) for EST (-5) at 2026-11-01 06:00 UTC: local
    # 2026-11-01 is 2026-11-01T04:00Z .. 2026-11-02T05:00Z. Nov 1 is a Sunday.
    home = _boundary_home(tmp_path, [
        "2026-11-01T03:59:59.000000Z",  # 1: Oct 31 23:59:59 EDT
        "2026-11-01T04:00:00.000000Z",  # 2: Nov 1 00:00 EDT
        "2026-11-02T04:59:59.000000Z",  # 4: Nov 1 23:59:59 EST (Sunday)
        "2026-11-02T05:00:00.000000Z",  # 8: Nov 2 00:00 EST (Monday)
    ])
    engine = ledger(db_url, home)
    tz = "America/New_York"
    assert _dollars(cost_report(engine, by="day", tz=tz, now=NOW)) == {"2026-10-31": 1, "2026-11-01": 6,
                                                                       "2026-11-02": 8}
    months = cost_report(engine, by="month", tz=tz, now=NOW)
    assert _dollars(months) == {"2026-10": 1, "2026-11": 14}
    nov = next(r for r in months["rows"] if r["key"] == "2026-11")
    assert (nov["start"], nov["end"]) == ("2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00")
    assert _dollars(cost_report(engine, by="week", tz=tz, now=NOW)) == {"2026-10-26": 7, "2026-11-02": 8}
    # an absolute --since without an offset is read in --tz: local midnight (EDT)
    since = cost_report(engine, since="2026-11-01", until="2026-11-02", tz=tz, now=NOW)
    assert since["total"]["cost_nano_usd"] // 10**9 == 2 + 4
    assert (since["since"], since["until"]) == ("2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00")


def test_days_of_a_zone_whose_offset_was_not_a_multiple_of_15_minutes(db_url, tmp_path):
    # Pacific/Kiritimati was UTC-10:40 until 1979 and Africa/Monrovia UTC-0:44:30 until
    # 1972, both inside the instants the ledger takes. Kiritimati's 1970-01-01 began at
    # 10:40Z and Monrovia's at 00:44:30Z, inside a 15-minute UTC slot.
    home = _boundary_home(tmp_path, [
        "1970-01-01T10:35:00.000000Z",  # 1: 1969-12-31 23:55 in Kiritimati
        "1970-01-01T10:42:00.000000Z",  # 2: 1970-01-01 00:02 in Kiritimati
        "1970-01-02T00:40:00.000000Z",  # 4: 1970-01-01 23:55:30 in Monrovia
        "1970-01-02T00:44:40.000000Z",  # 8: 1970-01-02 00:00:10 in Monrovia
    ])
    engine = ledger(db_url, home)
    kiritimati = cost_report(engine, by="day", tz="Pacific/Kiritimati", now=NOW)
    assert _dollars(kiritimati) == {"1969-12-31": 1, "1970-01-01": 2 + 4 + 8}
    window = cost_report(engine, since="1970-01-01", until="1970-01-02", tz="Pacific/Kiritimati", now=NOW)
    assert window["total"]["cost_nano_usd"] // 10**9 == 2 + 4 + 8  # the window and the day agree
    assert _dollars(cost_report(engine, by="day", tz="Africa/Monrovia", now=NOW)) == {"1970-01-01": 1 + 2 + 4,
                                                                                        "1970-01-02": 8}
    assert _dollars(cost_report(engine, by="month", tz="Pacific/Kiritimati", now=NOW)) == {"1969-12": 1,
                                                                                             "1970-01": 14}
    # the HTML report's spend per day cuts the same days
    days = overview(engine, tz="Pacific/Kiritimati", now=NOW)["days"]
    assert {d["day"]: sum(c["cost_nano_usd"] for c in d["runtimes"].values()) // 10**9 for d in days} == {
        "1969-12-31": 1, "1970-01-01": 14}


def test_relative_since_is_exact_hours_up_to_now(db_url, tmp_path):
    home = _boundary_home(tmp_path, [
        "2026-11-22T11:59:59.000000Z",  # 1: just before now - 7×24h
        "2026-11-22T12:00:00.000000Z",  # 2: exactly now - 7d: included
        "2026-11-29T11:59:59.000000Z",  # 4: just before now
        "2026-11-29T12:00:00.000000Z",  # 8: now itself: the window is [since, now)
    ])
    engine = ledger(db_url, home)
    report = cost_report(engine, since="7d", tz="UTC", now=NOW)
    assert report["total"]["cost_nano_usd"] // 10**9 == 6
    assert (report["since"], report["until"]) == ("2026-11-22T12:00:00+00:00", "2026-11-29T12:00:00+00:00")
    assert cost_report(engine, since="1w", tz="UTC", now=NOW)["total"] == report["total"]
    assert cost_report(engine, since="12h", tz="UTC", now=NOW)["total"]["cost_nano_usd"] // 10**9 == 4
    assert cost_report(engine, since="30m", tz="UTC", now=NOW)["total"]["cost_nano_usd"] // 10**9 == 4
    rfc = cost_report(engine, since="2026-11-22T13:00:00+01:00", until="2026-11-29T12:00:00Z", tz="UTC", now=NOW)
    assert rfc["total"]["cost_nano_usd"] // 10**9 == 6
    assert cost_report(engine, tz="UTC", now=NOW)["total"]["cost_nano_usd"] // 10**9 == 15  # all time


def test_home_filter(db_url, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one_charge_run(one, "20261129-090000.000000001-1", "2026-11-29T09:00:00.000000Z", 1.0)
    # Same run id on another machine: another run (its first line's nanosecond time differs).
    one_charge_run(two, "20261129-090000.000000001-1", "2026-11-29T09:00:00.000000001Z", 2.0)
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(one), "one"), Home.from_path(str(two), "two")])
    assert cost_report(engine, home_labels=("two",), tz="UTC", now=NOW)["total"]["cost_nano_usd"] == 2 * 10**9
    by_run = cost_report(engine, by="run", tz="UTC", now=NOW)
    assert [(r["key"], r["home"], r["cost_nano_usd"]) for r in by_run["rows"]] == [
        ("20261129-090000.000000001-1", "one", 10**9), ("20261129-090000.000000001-1", "two", 2 * 10**9)]


@pytest.mark.parametrize("args, message", [
    (["--tz", "Mars/Olympus"], "unknown time zone"),
    (["--since", "yesterday-ish"], "cannot read time"),
    (["--since", "2026-11-02", "--until", "2026-11-01"], "empty window"),
    (["--json", "--csv"], "exclusive"),
], ids=["bad-zone", "bad-time", "empty-window", "json-and-csv"])
def test_cli_bad_arguments(sqlite_url, args, message):
    open_ledger(sqlite_url).dispose()  # reading commands never create a ledger
    result = CliRunner().invoke(main, ["cost", "--db", sqlite_url, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


# -- the command line -------------------------------------------------------------------


def test_cli_json_csv_text(sqlite_url, scenario_home):
    ledger(sqlite_url, scenario_home)
    runner = CliRunner()
    result = runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "runtime", "--tz", "Europe/Berlin", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert set(doc) >= {"rows", "total", "since", "until", "tz"}
    assert doc["tz"] == "Europe/Berlin" and doc["since"] is None and doc["until"] is None
    fields = {"key", "cost_usd", "cost_nano_usd", "invocations", "unknown_cost_invocations", "input_tokens",
              "cached_input_tokens", "output_tokens", "reasoning_output_tokens"}
    assert all(fields <= set(row) for row in doc["rows"]) and fields - {"key"} <= set(doc["total"])
    assert doc["total"]["cost_nano_usd"] == nanos(TOTAL) and doc["total"]["cost_usd"] == 0.4514

    text = runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "runtime", "--tz", "UTC"]).output
    assert "≥ $0.4514 +2 unpriced" in text  # the total is a lower bound, never a plain number
    assert "unknown (2 unpriced)" in text  # the codex group: no known spend at all
    assert "window: all time (periods and times in UTC)" in text

    csv_out = runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "day", "--tz", "UTC", "--csv"]).output
    lines = csv_out.splitlines()
    assert lines[0].startswith("key,cost_usd,cost_nano_usd,cost_is_lower_bound,invocations")
    assert not any(line.startswith("TOTAL") for line in lines)  # no TOTAL among the data rows unasked
    by_day = json.loads(runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "day", "--tz", "UTC",
                                              "--json"]).output)
    assert sorted(lines[0].split(",")) == sorted(by_day["rows"][0])  # the --json row's columns
    assert lines[1].endswith(",2026-11-29T00:00:00+00:00,2026-11-30T00:00:00+00:00")  # start, end: last
    totalled = runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "day", "--tz", "UTC", "--csv",
                                    "--total"]).output.splitlines()
    assert totalled[:-1] == lines and totalled[-1].startswith(f"TOTAL,0.4514,{nanos(TOTAL)},true,19,2,")
    by_runtime = runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "runtime", "--tz", "UTC",
                                      "--csv"]).output.splitlines()
    codex = next(line for line in by_runtime if line.startswith("codex,"))
    assert codex.startswith("codex,,,true,")  # no known price at all: empty cells, never 0
    refused = runner.invoke(main, ["cost", "--db", sqlite_url, "--total"])
    assert refused.exit_code == 2 and "--csv" in refused.output

    windowed = runner.invoke(main, ["cost", "--db", sqlite_url, "--since", "2026-11-29T10:00:00Z", "--until",
                                    "2026-11-29T10:30:00Z", "--tz", "Europe/Berlin"]).output
    assert "window: 2026-11-29T11:00:00+01:00 → 2026-11-29T11:30:00+01:00 (periods and times in Europe/Berlin)" \
        in windowed


# -- scale -------------------------------------------------------------------------------


def test_scale_10k_runs_300k_charges_totals_are_exact(tmp_path):
    # Speed is measured in benchmarks/ (a timed test on a shared machine measures the
    # neighbours); here the scale only checks that exact integer sums survive it.
    path = tmp_path / "big.sqlite"
    engine = open_ledger(str(path))
    engine.dispose()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO homes (id, label, path) VALUES (1, 'big', '/x')")
    base = 1_785_000_000_000_000  # 2026-07-25; runs every 10 minutes until October
    conn.executemany(
        "INSERT INTO runs (id, home_id, run_id, dir_path, gone, has_events, has_state, has_graph_json, "
        "has_rejected, has_assess, has_lock, runtime, graph_name, event_count, leg_count, any_leg, last_leg_open, "
        "stream_paused, cost_nano_usd, invocations, unknown_cost_invocations, unrecorded_attempts, input_tokens, "
        "cached_input_tokens, output_tokens, reasoning_output_tokens) "
        "VALUES (?, 1, ?, '/x', 0, 1, 1, 0, 0, 0, 0, ?, ?, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)",
        [(i, f"run-{i:05d}", "codex" if i % 10 == 0 else "claude", f"graph-{i % 50}") for i in range(1, 10_001)])
    conn.executemany(
        "INSERT INTO charges (run_pk, seq, leg_ordinal, leg_kind, node_id, kind, at_us, cost_nano_usd, "
        "cost_unknown, input_tokens, cached_input_tokens, output_tokens, reasoning_output_tokens, source_file) "
        "VALUES (?, ?, 1, 'initial', ?, 'node', ?, ?, ?, 0, 0, 0, 0, 'events.jsonl')",
        [(run, seq, f"n{seq}", base + run * 600_000_000 + seq * 1_000_000,
          None if run % 10 == 0 else 1_000_000, run % 10 == 0)
         for run in range(1, 10_001) for seq in range(1, 31)])
    conn.commit()
    conn.close()
    engine = open_ledger(str(path))
    for by in (None, *GROUPINGS):
        report = cost_report(engine, since="2026-07-01", by=by, tz="Europe/Berlin", now=NOW)
        assert report["total"]["invocations"] == 300_000
        assert report["total"]["unknown_cost_invocations"] == 30_000
        assert report["total"]["cost_nano_usd"] == 270_000 * 1_000_000


def test_a_report_that_reads_an_empty_since_as_all_time_says_nothing_is_after_now(db_url, tmp_path):
    """window() reads since="" (a notebook's unset variable) as no since: the report is all
    time, whose total holds the charges dated after now, so after_now_outside_window is
    null as for all time — not the whole spend said to be outside a window there is not."""
    home = tmp_path / "home"
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25)
    one_charge_run(home, "20261129-130000.000000001-1", "2026-11-29T13:00:00.000000Z", 0.5)  # an hour after NOW
    report = cost_report(ledger(db_url, home), since="", tz="UTC", now=NOW)
    assert report["total"]["cost_nano_usd"] == nanos("0.75")
    assert (report["undated_outside_window"], report["after_now_outside_window"]) == (None, None)
