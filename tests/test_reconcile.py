"""The pure reconcile step, one case per sentence of the contract (RUN-FEED.md)."""

from __future__ import annotations

import pytest

from omg_ledger.reconcile import RunInput, artifact_name, reconcile

from .builders import ev, events, graph

N = 1_000_000_000  # nano-dollars per dollar


def run(*stream, snapshot=None, assess=None, artifacts=(), failed=()):
    return reconcile(RunInput("r1", events(*stream), snapshot, assess, frozenset(artifacts), frozenset(failed)))


def legs(rows):
    return [(leg.phase, leg.outcome, leg.is_open, leg.closed_by) for leg in rows.legs]


LEG_CASES = [
    ("empty stream has no legs", [], []),
    ("one closed leg", [ev("run_started"), ev("run_finished", outcome="passed")],
     [("run", "passed", False, "run_finished")]),
    ("open leg", [ev("run_started"), ev("node_started", node_id="a")], [("run", None, True, None)]),
    ("planning leg closed by the unphased run_started, not a run_finished",
     [ev("run_started", phase="planning"), ev("run_started", cost_usd=0.04), ev("run_finished", outcome="passed")],
     [("planning", "planned", False, "plan_committed"), ("run", "passed", False, "run_finished")]),
    ("refused plan: planning leg closed by run_finished failed with zero node events",
     [ev("run_started", phase="planning"), ev("run_finished", outcome="failed", cost_usd=0.09)],
     [("planning", "failed", False, "run_finished")]),
    ("planner still thinking", [ev("run_started", phase="planning")], [("planning", None, True, None)]),
    ("run_finished without run_started is damage, not a leg", [ev("run_finished", outcome="passed")], []),
    ("a killed leg is superseded by the next run_started",
     [ev("run_started"), ev("node_started", node_id="a"), ev("run_started"), ev("run_finished", outcome="passed")],
     [("run", None, False, "superseded"), ("run", "passed", False, "run_finished")]),
    ("gate pause then resume: one bracket per leg",
     [ev("run_started"), ev("node_started", node_id="g"), ev("gate_paused", node_id="g"),
      ev("run_finished", outcome="paused"), ev("run_started"), ev("run_finished", outcome="passed")],
     [("run", "paused", False, "run_finished"), ("run", "passed", False, "run_finished")]),
]


@pytest.mark.parametrize(("stream", "expected"), [c[1:] for c in LEG_CASES], ids=[c[0] for c in LEG_CASES])
def test_legs(stream, expected):
    assert legs(run(*stream)) == expected


def test_leg_count_counts_only_unphased_run_started():
    rows = run(ev("run_started", phase="planning"), ev("run_started"), ev("run_finished", outcome="passed"))
    assert rows.run["leg_count"] == 1


def test_damage_is_a_finding_and_its_money_is_kept():
    rows = run(ev("run_finished", outcome="failed", cost_usd=0.5))
    assert [f.kind for f in rows.findings] == ["run_finished_without_leg"]
    assert [(c.kind, c.cost_nano_usd) for c in rows.charges] == [("other", N // 2)]
    assert rows.run["any_leg"] is False


def charges(rows):
    return [(c.kind, c.node_id, c.round, c.cost_nano_usd, c.cost_unknown) for c in rows.charges]


CHARGE_CASES = [
    ("terminal node events carry the spend",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_passed", node_id="a", cost_usd=0.25),
      ev("node_started", node_id="b"), ev("node_failed", node_id="b", cost_usd=0.5)],
     [("node", "a", 0, N // 4, False), ("node", "b", 0, N // 2, False)]),
    ("feedback node_retried carries the declarer's accounting; the body node charges per round",
     [ev("run_started"), ev("node_started", node_id="impl"), ev("node_passed", node_id="impl", cost_usd=0.04),
      ev("node_started", node_id="rev"), ev("node_retried", node_id="rev", round=1, cost_usd=0.022),
      ev("node_started", node_id="impl", round=1), ev("node_passed", node_id="impl", round=1, cost_usd=0.04),
      ev("node_started", node_id="rev", round=1), ev("node_passed", node_id="rev", round=1, cost_usd=0.022)],
     [("node", "impl", 0, 40_000_000, False), ("feedback", "rev", 0, 22_000_000, False),
      ("node", "impl", 1, 40_000_000, False), ("node", "rev", 1, 22_000_000, False)]),
    ("a plain retry's node_retried carries no cost: no charge is invented",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_retried", node_id="a", retries=1),
      ev("node_passed", node_id="a", retries=1, cost_usd=0.025)],
     [("node", "a", 0, 25_000_000, False)]),
    ("the unphased run_started that commits a plan carries the planner's spend",
     [ev("run_started", phase="planning"), ev("run_started", cost_usd=0.0456)],
     [("planning", None, None, 45_600_000, False)]),
    ("a refused plan's run_finished carries the planner's spend",
     [ev("run_started", phase="planning"), ev("run_finished", outcome="failed", cost_usd=0.0912)],
     [("refused", None, None, 91_200_000, False)]),
    ("cost_unknown: the number is not a measurement — NULL, never 0",
     [ev("run_started"), ev("node_started", node_id="a"),
      ev("node_passed", node_id="a", cost_unknown=True, usage={"input_tokens": 10, "output_tokens": 2})],
     [("node", "a", 0, None, True)]),
    ("cost_unknown beside a number still means unknown",
     [ev("run_started"), ev("node_passed", node_id="a", cost_unknown=True, cost_usd=0)],
     [("node", "a", 0, None, True)]),
    ("a gate spawns nothing: its node_passed carries no cost and is no invocation",
     [ev("run_started"), ev("node_started", node_id="g"), ev("gate_approved", node_id="g"),
      ev("node_passed", node_id="g", provenance="approved")],
     []),
    ("a retry-failed leg does not erase what the failed leg cost",
     [ev("run_started"), ev("node_failed", node_id="c", cost_usd=0.028), ev("run_finished", outcome="failed"),
      ev("run_started"), ev("node_passed", node_id="c", cost_usd=0.028), ev("run_finished", outcome="passed")],
     [("node", "c", 0, 28_000_000, False), ("node", "c", 0, 28_000_000, False)]),
    ("unknown event types are kept as events but derive nothing",
     [ev("run_started"), ev("node_teleported", node_id="a", cost_usd=9.0)], []),
]


@pytest.mark.parametrize(("stream", "expected"), [c[1:] for c in CHARGE_CASES], ids=[c[0] for c in CHARGE_CASES])
def test_charges(stream, expected):
    assert charges(run(*stream)) == expected


def test_money_is_exact_in_nano_dollars():
    stream = [ev("run_started")] + [ev("node_passed", node_id=f"n{i}", cost_usd=0.1) for i in range(10)]
    assert run(*stream).run["cost_nano_usd"] == N  # ten dimes are a dollar, not 0.9999999999999999


def test_assessment_spend_exists_only_in_assess_json():
    rows = run(ev("run_started"), ev("run_finished", outcome="passed", ),
               snapshot={"schema": 3, "goal": {"text": "t", "cycle": 1, "max_cycles": 2, "first_run_id": "r1"}},
               assess={"goal_met": False, "assess_cost_usd": 0.0078, "remaining": "x"})
    assert charges(rows) == [("assessment", None, None, 7_800_000, False)]
    assert rows.charges[0].at == rows.legs[0].finished_at  # dated at the cycle's last event
    assert rows.goal_cycle["first_run_id"] == "r1" and rows.goal_cycle["goal_met"] is False


def test_planning_cost_in_the_snapshot_is_not_charged_twice():
    rows = run(ev("run_started", phase="planning"), ev("run_started", cost_usd=0.0456),
               snapshot={"schema": 3, "planning_cost_usd": 0.0456, "graph": graph("a"), "nodes": {}})
    assert [c.kind for c in rows.charges] == ["planning"]
    assert rows.run["planning_cost_nano_usd"] == 45_600_000


def test_latest_terminal_event_wins_across_legs():
    rows = run(ev("run_started"), ev("node_started", node_id="c"), ev("node_failed", node_id="c", cost_usd=0.1),
               ev("run_finished", outcome="failed"), ev("run_started"), ev("node_started", node_id="c"),
               ev("node_passed", node_id="c", cost_usd=0.1, provenance="verified"), ev("run_finished", outcome="passed"))
    node = rows.nodes[0]
    assert (node["verdict"], node["provenance"], node["last_leg"], node["cost_nano_usd"]) == ("PASS", "verified", 2, 2 * N // 10)


def test_highest_feedback_round_is_authoritative_and_rounds_are_rows():
    rows = run(ev("run_started"), ev("node_started", node_id="rev"), ev("node_retried", node_id="rev", round=1, cost_usd=0.01),
               ev("node_started", node_id="rev", round=1), ev("node_passed", node_id="rev", round=1, cost_usd=0.01))
    assert [(e.round, e.outcome) for e in rows.rounds] == [(0, "FEEDBACK"), (1, "PASS")]
    assert rows.nodes[0]["round"] == 1


def test_a_node_running_again_in_feedback_is_not_settled():
    # state.json keeps round 0's PASS while round 1 executes: liveness comes from the stream.
    rows = run(ev("run_started"), ev("node_started", node_id="impl"), ev("node_passed", node_id="impl", cost_usd=0.04),
               ev("node_started", node_id="impl", round=1),
               snapshot={"schema": 3, "graph": graph("impl"), "nodes": {"impl": {"verdict": "PASS", "cost_usd": 0.04}}})
    assert rows.nodes[0]["state"] == "running"


def test_feedback_marker_with_empty_verdict_is_not_terminal():
    snapshot = {"schema": 3, "graph": graph("rev"), "nodes": {"rev": {"verdict": "", "round": 1, "cost_usd": 0.02}}}
    rows = run(ev("run_started"), ev("node_started", node_id="rev"), ev("node_retried", node_id="rev", round=1, cost_usd=0.02),
               snapshot=snapshot)
    assert rows.nodes[0]["verdict"] is None and rows.findings == []
    assert rows.run["all_nodes_passed"] is False


def test_gate_paused_terminates_the_nodes_turn():
    rows = run(ev("run_started"), ev("node_started", node_id="g"), ev("gate_paused", node_id="g"))
    assert rows.nodes[0]["state"] == "paused"


def test_dropped_terminal_event_is_recovered_from_the_snapshot_and_flagged():
    snapshot = {"schema": 3, "graph": graph("a", "b"), "nodes": {
        "a": {"verdict": "PASS", "cost_usd": 0.1, "session_id": "s-a"},
        "b": {"verdict": "PASS", "cost_usd": 0.2, "session_id": "s-b", "provenance": "verified"}}}
    rows = run(ev("run_started"), ev("node_started", node_id="a", session_id="s-a"),
               ev("node_passed", node_id="a", cost_usd=0.1, session_id="s-a"),
               ev("node_started", node_id="b", session_id="s-b"), ev("run_finished", outcome="passed"),
               snapshot=snapshot)
    b = next(n for n in rows.nodes if n["node_id"] == "b")
    assert (b["verdict"], b["verdict_source"], b["provenance"]) == ("PASS", "snapshot", "verified")
    assert [f.kind for f in rows.findings] == ["dropped_event"]
    recovered = [c for c in rows.charges if c.kind == "recovered"]
    assert [(c.node_id, c.cost_nano_usd, c.source_file) for c in recovered] == [("b", N // 5, "state.json")]
    assert recovered[0].at == rows.rounds[-1].started_at  # dated at b's node_started
    assert rows.run["cost_nano_usd"] == 3 * N // 10


def test_terminal_event_without_snapshot_record_is_a_dropped_snapshot_write():
    rows = run(ev("run_started"), ev("node_passed", node_id="a", cost_usd=0.1), ev("run_finished", outcome="passed"),
               snapshot={"schema": 3, "graph": graph("a"), "nodes": {}})
    assert [f.kind for f in rows.findings] == ["snapshot_record_missing"]


def test_snapshot_cost_that_differs_from_the_stream_is_a_finding():
    rows = run(ev("run_started"), ev("node_passed", node_id="a", cost_usd=0.1),
               snapshot={"schema": 3, "graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.3}}})
    assert [f.kind for f in rows.findings] == ["cost_mismatch"]


def test_snapshot_folds_feedback_rounds_like_the_engine_so_no_false_mismatch():
    # s12 in miniature: review's record accumulates 3 × 0.022 through two markers.
    stream = [ev("run_started"), ev("node_started", node_id="rev"), ev("node_retried", node_id="rev", round=1, cost_usd=0.022),
              ev("node_started", node_id="rev", round=1), ev("node_retried", node_id="rev", round=2, cost_usd=0.022),
              ev("node_started", node_id="rev", round=2), ev("node_passed", node_id="rev", round=2, cost_usd=0.022)]
    snapshot = {"schema": 3, "graph": graph("rev"), "nodes": {"rev": {"verdict": "PASS", "round": 2, "cost_usd": 0.066}}}
    assert run(*stream, snapshot=snapshot).findings == []


def test_fail_with_its_out_on_disk_is_a_budget_overrun_not_a_disagreement():
    rows = run(ev("run_started"), ev("node_failed", node_id="a", cost_usd=0.3),
               snapshot={"schema": 3, "graph": graph("a"), "nodes": {"a": {"verdict": "FAIL", "cost_usd": 0.3}}},
               artifacts={"a.out"})
    assert rows.nodes[0]["budget_overrun"] is True and rows.findings == []


@pytest.mark.parametrize(("node_id", "name"), [("a", "a.out"), ("check/probe", "check~probe.out"),
                                               ("lane-a/gate/e2e", "lane-a~gate~e2e.out")],
                         ids=["plain", "fragment", "nested-fragment"])
def test_artifact_names_replace_every_slash(node_id, name):
    assert artifact_name(node_id) == name


def test_runtime_absent_means_claude_and_codex_is_read():
    assert run(snapshot={"schema": 3, "graph": graph("a")}).run["runtime"] == "claude"
    assert run(snapshot={"schema": 3, "runtime": "codex", "graph": graph("a")}).run["runtime"] == "codex"


def test_pass_needs_every_graph_node_settled_pass():
    snapshot = {"schema": 3, "graph": graph("a", "b"), "nodes": {"a": {"verdict": "PASS"}}}
    assert run(snapshot=snapshot).run["all_nodes_passed"] is False
    snapshot["nodes"]["b"] = {"verdict": "PASS"}
    assert run(snapshot=snapshot).run["all_nodes_passed"] is True


def test_session_limited_node_is_unfinished_and_its_attempt_unrecorded():
    rows = run(ev("run_started"), ev("node_started", node_id="beta"),
               ev("run_finished", outcome="paused", detail="session limit reached at beta: You've hit your limit"))
    assert rows.legs[0].session_limited is True
    assert rows.nodes[0]["state"] == "unfinished" and rows.nodes[0]["unrecorded_attempts"] == 1


def test_reconcile_is_deterministic():
    stream = [ev("run_started"), ev("node_passed", node_id="b", cost_usd=0.1), ev("node_passed", node_id="a", cost_usd=0.2)]
    assert run(*stream) == run(*stream)
