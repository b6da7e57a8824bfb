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
    assert rows.charges[0].at == rows.legs[0].finished_at  # dated at the end of the cycle's leg
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


def test_a_gate_verdict_recovered_from_the_snapshot_is_no_invocation():
    # A gate spawns no subprocess: its node_passed carries no cost, usage or session, and
    # so does its state.json record. Its dropped terminal is recovered as a verdict only.
    snapshot = {"schema": 3, "graph": graph("a", "g", g="gate"), "nodes": {
        "a": {"verdict": "PASS", "cost_usd": 0.1, "session_id": "s-a"},
        "g": {"verdict": "PASS", "provenance": "approved"}}}
    rows = run(ev("run_started"), ev("node_started", node_id="a", session_id="s-a"),
               ev("node_passed", node_id="a", cost_usd=0.1, session_id="s-a"),
               ev("node_started", node_id="g"), ev("run_finished", outcome="passed"),
               snapshot=snapshot)
    g = next(n for n in rows.nodes if n["node_id"] == "g")
    assert (g["verdict"], g["verdict_source"], g["provenance"], g["state"]) == ("PASS", "snapshot", "approved",
                                                                                "settled")
    assert [f.kind for f in rows.findings] == ["dropped_event"]
    assert [(c.kind, c.node_id) for c in rows.charges] == [("node", "a")]
    assert (rows.run["invocations"], rows.run["cost_nano_usd"]) == (1, N // 10)
    gate_round = next(x for x in rows.rounds if x.node_id == "g")
    assert (gate_round.outcome, gate_round.cost_nano_usd) == ("PASS", None)  # no charge: no cost, as on the stream


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


# The engine's budget failure, word for word (internal/schedule/errors.go: 'node %q exceeded budget_usd: …').
BUDGET_DETAIL = 'node "a" exceeded budget_usd: $0.2100 actual vs $0.2000 budgeted (over by $0.0100)'
BUDGET_SNAPSHOT = {"schema": 3, "graph": {"name": "g", "nodes": [{"id": "a", "budget_usd": 0.2}]}}

BUDGET_CASES = [
    ("the engine failed it for its budget, .out on disk",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_failed", node_id="a", cost_usd=0.21,
                                                             detail=BUDGET_DETAIL)], {"a.out"}, True),
    ("a CLI killed at its budget writes no .out: still an overrun",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_failed", node_id="a", cost_usd=0.21,
                                                             detail=BUDGET_DETAIL)], set(), True),
    ("round 0 PASS left a .out; round 1 failed on a CLI error: not an overrun",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_passed", node_id="a", cost_usd=0.05),
      ev("node_started", node_id="rev"), ev("node_retried", node_id="rev", round=1, cost_usd=0.01),
      ev("node_started", node_id="a", round=1),
      ev("node_failed", node_id="a", round=1, cost_usd=0.05, detail="claude exited 1: API error 529 overloaded")],
     {"a.out"}, False),
    ("an ordinary FAIL without a .out is not an overrun",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_failed", node_id="a", cost_usd=0.05,
                                                             detail="check failed")], set(), False),
    ("a budget FAIL followed by a PASS in a later leg is no overrun now",
     [ev("run_started"), ev("node_started", node_id="a"), ev("node_failed", node_id="a", cost_usd=0.21,
                                                             detail=BUDGET_DETAIL),
      ev("run_finished", outcome="failed"), ev("run_started"), ev("node_started", node_id="a"),
      ev("node_passed", node_id="a", cost_usd=0.1), ev("run_finished", outcome="passed")], {"a.out"}, False),
]


@pytest.mark.parametrize(("stream", "artifacts", "overrun"), [c[1:] for c in BUDGET_CASES],
                         ids=[c[0] for c in BUDGET_CASES])
def test_budget_overrun_is_what_the_engine_failed_for_its_budget(stream, artifacts, overrun):
    rows = run(*stream, artifacts=artifacts)
    assert next(n for n in rows.nodes if n["node_id"] == "a")["budget_overrun"] is overrun


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


USAGE = {"input_tokens": 1200, "cached_input_tokens": 300, "output_tokens": 45, "reasoning_output_tokens": 7}
GOAL = {"schema": 3, "runtime": "codex", "graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_unknown": True}},
        "goal": {"text": "t", "cycle": 1, "max_cycles": 3, "first_run_id": "r1"}}

ASSESS_CASES = [
    ("codex assessor: filler 0 beside assess_cost_unknown is unknown, its usage its tokens",
     {"goal_met": False, "assess_cost_usd": 0, "assess_cost_unknown": True, "usage": USAGE, "remaining": "x"},
     (None, True, (1200, 300, 45, 7)), None),
    ("claude assessor with usage: known price and tokens",
     {"goal_met": True, "assess_cost_usd": 0.0078, "usage": USAGE}, (7_800_000, False, (1200, 300, 45, 7)), 7_800_000),
    ("claude assessor without usage: known price, no tokens",
     {"goal_met": True, "assess_cost_usd": 0.0078}, (7_800_000, False, (0, 0, 0, 0)), 7_800_000),
    ("unknown without any number is still a paid call",
     {"goal_met": False, "assess_cost_unknown": True}, (None, True, (0, 0, 0, 0)), None),
    ("a known $0 stays a known $0", {"goal_met": True, "assess_cost_usd": 0}, (0, False, (0, 0, 0, 0)), 0),
    # The engine always writes assess_cost_usd (no omitempty): a file without it still
    # records an assessment that ran, whose price nobody wrote down.
    ("no assess_cost_usd at all is a paid call of unknown cost, never dropped",
     {"goal_met": True, "usage": USAGE}, (None, True, (1200, 300, 45, 7)), None),
]


@pytest.mark.parametrize(("assess", "charge", "cycle_cost"), [c[1:] for c in ASSESS_CASES],
                         ids=[c[0] for c in ASSESS_CASES])
def test_assessment_charge(assess, charge, cycle_cost):
    rows = run(ev("run_started"), ev("node_started", node_id="a"),
               ev("node_passed", node_id="a", cost_unknown=True, cost_usd=0), ev("run_finished", outcome="passed"),
               snapshot=GOAL, assess=assess)
    assessment = [c for c in rows.charges if c.kind == "assessment"]
    assert [(c.cost_nano_usd, c.cost_unknown, c.tokens) for c in assessment] == [charge]
    assert rows.goal_cycle["assess_cost_nano_usd"] == cycle_cost
    assert rows.run["unknown_cost_invocations"] == 1 + (1 if charge[1] else 0)  # the node is unknown too
    assert rows.run["input_tokens"] == charge[2][0]


def test_codex_goal_loop_of_three_cycles_counts_every_assessment_unknown():
    from omg_ledger.snapshot import parse_assess

    assess = parse_assess(b'{"goal_met": false, "remaining": "more", "assess_cost_usd": 0, '
                          b'"assess_cost_unknown": true, "usage": {"input_tokens": 900, "cached_input_tokens": 0, '
                          b'"output_tokens": 30, "reasoning_output_tokens": 12}}')
    cycles = [{**GOAL, "nodes": {}, "goal": {**GOAL["goal"], "cycle": k}} for k in (1, 2, 3)]
    totals = [run(ev("run_started"), ev("run_finished", outcome="passed"), snapshot=snap, assess=assess).run
              for snap in cycles]
    assert [(t["cost_nano_usd"], t["unknown_cost_invocations"], t["output_tokens"]) for t in totals] == [(0, 1, 30)] * 3


def test_refused_recovery_does_not_borrow_another_nodes_leg():
    # b's dropped terminal is recovered in leg 2; a's recovery is refused (the snapshot
    # holds less than the stream already charged). a's last leg is its own: leg 1.
    snapshot = {"schema": 3, "graph": graph("a", "b"), "nodes": {
        "a": {"verdict": "PASS", "round": 1, "cost_usd": 0.01},
        "b": {"verdict": "PASS", "cost_usd": 0.2}}}
    rows = run(ev("run_started"), ev("node_started", node_id="a"), ev("node_retried", node_id="a", round=1, cost_usd=0.5),
               ev("run_finished", outcome="failed"),
               ev("run_started"), ev("node_started", node_id="b"), ev("run_finished", outcome="passed"),
               snapshot=snapshot)
    nodes = {n["node_id"]: n for n in rows.nodes}
    assert "recovery_negative" in [f.kind for f in rows.findings]
    assert (nodes["a"]["last_leg"], nodes["b"]["last_leg"]) == (1, 2)
    assert [(c.seq, c.kind, c.node_id) for c in rows.charges] == [(1, "feedback", "a"), (2, "recovered", "b")]


UNRECORDED_CASES = [
    ("killed call in a leg a later leg followed",
     [ev("run_started"), ev("node_started", node_id="a"), ev("run_started"), ev("run_finished", outcome="failed")],
     1, "unfinished"),
    ("killed call in the open leg: the stream says it is still running (status decides at query time)",
     [ev("run_started"), ev("node_started", node_id="a")], 0, "running"),
]


@pytest.mark.parametrize(("stream", "stored", "state"), [c[1:] for c in UNRECORDED_CASES],
                         ids=[c[0] for c in UNRECORDED_CASES])
def test_unrecorded_attempts_and_the_stored_state_are_stream_facts(stream, stored, state):
    node = run(*stream).nodes[0]
    assert (node["unrecorded_attempts"], node["state"]) == (stored, state)
