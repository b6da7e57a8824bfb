"""The fast paths of derivation give what the plain ones give.

* ``reconcile.usd_nanos`` (usd_to_nanos remembered per float value, plain
  multiplication for sane ints) is exact: the expected nano-dollars are worked out by
  hand from the digits the engine wrote (ROUND_HALF_EVEN at the ninth decimal).
* The fold state (one list per node) resumes a walk at any line to the same rows and
  the same state as one walk over every line, and a state laid out the older way (one
  map per fact, tests/fixtures/fold-state-node-maps.json, as omg-ledger wrote it at
  DERIVATION_VERSION 4 before) still resumes.
"""

from __future__ import annotations

import json
import random
from decimal import InvalidOperation
from pathlib import Path

import orjson
import pytest

from omg_ledger import reconcile as reconcile_module
from omg_ledger.reconcile import RunInput, reconcile, usd_nanos
from omg_ledger.units import usd_to_nanos

from .builders import ev, events, graph

FIXTURES = Path(__file__).parent / "fixtures"

# (dollars as the engine wrote them, nano-dollars by hand)
EXACT = [
    (0.1, 100_000_000),  # the float is 0.1000000000000000055...; its repr is "0.1"
    (0.0456, 45_600_000),  # 0.045599999999999995 as a float times 1e9 would truncate to 45_599_999
    (1e-9, 1),
    (123456.789, 123_456_789_000_000),
    (0.07, 70_000_000),
    (2.675, 2_675_000_000),  # binary 2.67499999...: the repr's digits count, not the binary value
    (5e-324, 0),  # the least subnormal: 5e-315 nano-dollars
    (1e22, 10**31),  # repr "1e+22"
    (5e-10, 0),  # half a nano-dollar: half-even goes to 0
    (1.5e-9, 2),  # 1.5 -> 2 (even)
    (2.5e-9, 2),  # 2.5 -> 2 (even)
    (0.1234567895, 123_456_790),  # ...89.5 -> ...90 (even)
    (0.1234567885, 123_456_788),  # ...88.5 -> ...88 (even)
    (0.12345678851, 123_456_789),  # past the half: up
    (99999.999999999, 99_999_999_999_999),
    (0.0, 0),
    (-0.0, 0),
    (1.0, 1_000_000_000),
    (0, 0),
    (3, 3_000_000_000),
    (10**18 - 1, (10**18 - 1) * 10**9),  # the largest int multiplied directly
    (10**18, 10**27),  # the first int left to Decimal
    (12, 12_000_000_000),
]


@pytest.mark.parametrize(("usd", "nanos"), EXACT, ids=[repr(u) for u, _ in EXACT])
def test_usd_nanos_is_exact(usd, nanos):
    assert usd_nanos(usd) == nanos
    assert usd_nanos(usd) == nanos  # the second call is answered from memory
    assert type(usd_nanos(usd)) is int


def test_usd_nanos_equals_usd_to_nanos_on_random_engine_like_costs():
    rng = random.Random(20261201)
    values = [round(rng.uniform(0, 500), rng.randint(0, 12)) for _ in range(20_000)]
    values += [rng.uniform(0, 1e-6) for _ in range(2_000)] + [rng.uniform(1e15, 1e20) for _ in range(2_000)]
    values += [rng.randint(0, 10**20) for _ in range(2_000)]
    for value in values + values:  # the repeat is answered from memory, past its bound too
        assert usd_nanos(value) == usd_to_nanos(value), value
    assert len(reconcile_module._NANOS_OF_FLOAT) <= reconcile_module._NANOS_KEPT


@pytest.mark.parametrize("value", [True, float("nan"), float("inf")])
def test_usd_nanos_refuses_what_usd_to_nanos_refuses(value):
    with pytest.raises((InvalidOperation, ValueError, OverflowError, TypeError)) as plain:
        usd_to_nanos(value)
    with pytest.raises(plain.type):
        usd_nanos(value)


U = {"input_tokens": 120, "cached_input_tokens": 30, "output_tokens": 9, "reasoning_output_tokens": 2}
# Every kind of fold fact: a planning leg committed by the run's start (with its charge),
# a plain retry (an unrecorded attempt), feedback, a budget failure, a leg that failed
# and one that follows it, an open execution, a node outside any graph, a gate pause.
STREAM = [
    ev("run_started", 0, phase="planning"),
    ev("run_started", 1, cost_usd=0.04, usage=U),
    ev("node_started", 2, node_id="impl", session_id="s-1"),
    ev("node_retried", 3, node_id="impl", retries=1),
    ev("node_passed", 4, node_id="impl", retries=1, cost_usd=0.0456, usage=U, provenance="self-reported"),
    ev("node_started", 5, node_id="rev", session_id="s-2"),
    ev("node_retried", 6, node_id="rev", round=1, cost_usd=0.022),
    ev("node_started", 7, node_id="impl", round=1, session_id="s-3"),
    ev("node_failed", 8, node_id="impl", round=1, cost_usd=0.1,
       detail='node "impl" exceeded budget_usd: $0.1000 actual vs $0.0500 budgeted (over by $0.0500)'),
    ev("run_finished", 9, outcome="failed"),
    ev("run_started", 10),
    ev("node_started", 11, node_id="impl", round=1, session_id="s-4"),
    ev("node_passed", 12, node_id="impl", round=1, cost_usd=123.456789, usage=U),
    ev("node_started", 13, node_id="rev", round=1, session_id="s-5"),
    ev("node_started", 14, node_id="web/ui", session_id="s-6"),
    ev("gate_paused", 15, node_id="gate"),
]
# A snapshot that agrees with some nodes and not others (a dropped terminal for rev, a
# cost mismatch for impl), so the snapshot checks after the walk run on a resumed fold.
SNAPSHOT = {"graph": graph("impl", "rev", "gate"), "nodes": {
    "impl": {"verdict": "PASS", "round": 1, "cost_usd": 123.5, "session_id": "s-4"},
    "rev": {"verdict": "PASS", "round": 1, "cost_usd": 0.03, "session_id": "s-5"},
}}


def _walk(stream, resume=None, snapshot=None):
    return reconcile(RunInput("r1", stream, snapshot=snapshot, keep_state=True, resume=resume,
                              artifacts=frozenset({"impl.out", "web~ui.out"})))


def _json(value):
    return orjson.loads(orjson.dumps(value))


def _comparable(rows):
    """What a resumed walk rewrites: nodes, run row, goal cycle, the open leg and
    executions, and the snapshot checks' charges and findings (numbered after the walk's)."""
    return (rows.nodes, rows.run, rows.goal_cycle, [leg for leg in rows.legs if leg.is_open],
            [e for e in rows.rounds if e.outcome is None or e.ended_at is None],
            [c for c in rows.charges if c.source_file != "events.jsonl"],
            [(f.kind, f.node_id, f.detail, f.seq) for f in rows.findings if f.kind != "run_finished_without_leg"],
            rows.problems)


@pytest.mark.parametrize("snapshot", [None, SNAPSHOT], ids=["no-snapshot", "snapshot"])
def test_a_walk_resumed_at_any_line_ends_in_the_same_rows_and_state(snapshot):
    lines = events(*STREAM)
    whole = _walk(lines, snapshot=snapshot)
    whole_state = _json(whole.state)
    assert "nodes" in whole_state and "last_execution" not in whole_state
    for cut in range(1, len(lines)):
        first = _walk(lines[:cut], snapshot=snapshot)
        resumed = _walk(lines[cut:], resume=_json(first.state), snapshot=snapshot)
        assert _json(resumed.state) == whole_state, cut
        assert _comparable(resumed) == _comparable(whole), cut
        assert resumed.events_walked == len(lines) - cut


def test_a_state_with_one_map_per_fact_still_resumes():
    # Saved after line 13 (rev's round-1 node_started): impl has two terminals, rev is
    # running, the second run leg is open.
    old = json.loads((FIXTURES / "fold-state-node-maps.json").read_text())
    assert "last_execution" in old and "nodes" not in old and old["last_line"] == 13
    lines = events(*STREAM)
    for snapshot in (None, SNAPSHOT):
        whole = _walk(lines, snapshot=snapshot)
        resumed = _walk(lines[13:], resume=old, snapshot=snapshot)
        assert _json(resumed.state) == _json(whole.state)
        assert _comparable(resumed) == _comparable(whole)


def test_the_fold_state_writes_each_node_id_once():
    state = orjson.dumps(_walk(events(*STREAM)).state).decode()
    # In the per-node lists; the legs' and executions' rows name their node as a column.
    per_node_maps = state.count('"impl":') + state.count('"rev":')
    assert per_node_maps == 2


def test_the_watched_stream_notes_the_first_line_and_a_nul_escape_when_it_is_seen():
    from omg_ledger.derive import _Watched

    lines = events(ev("run_started", 0), ev("node_started", 1, node_id="a"),
                   ev("node_passed", 2, node_id="a", detail="bad\x00byte"), ev("run_finished", 3, outcome="passed"))
    assert "\\u0000" in lines[2].raw and "\\u0000" not in lines[1].raw
    seen = _Watched(lines)
    walked = []
    for event in seen:
        walked.append((event.line_no, seen.nul))
        if event.line_no == 2:
            break  # a walk that stops early; iterating again goes on after it
    walked += [(event.line_no, seen.nul) for event in seen]
    assert walked == [(1, False), (2, False), (3, True), (4, True)]
    assert seen.first_raw == lines[0].raw
    resumed = _Watched(lines[1:], nul=True)  # a resumed walk that has seen one already
    assert [e.line_no for e in resumed] == [2, 3, 4] and resumed.nul and resumed.first_raw == lines[1].raw
