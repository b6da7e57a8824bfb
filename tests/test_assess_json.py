"""assess.json, the goal cycle's assessment, as the engine writes it (cmd/oh-my-graph/goal.go:
saveAssessment, called by the `auto --max-cycles` process right after the cycle's own leg
ended, and by nothing else: `resume` never writes one). Run directories in the engine's
shapes, synced into real ledgers (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from omg_ledger.db import open_ledger
from omg_ledger.reports.cost import cost_report
from omg_ledger.sync import Home, sync

from .test_cost import ev, passed, state, write_run

RUN = "20261201-100000.000000001-1"
GOAL = {"text": "make it green", "cycle": 1, "max_cycles": 2, "first_run_id": RUN}
NOW = datetime(2026, 12, 10, tzinfo=UTC)


def _cycle_leg() -> list[dict]:
    """The leg the `auto` process ran: its planner call, the plan committed, a node
    that FAILED, the leg's end (the assessment judged it right after)."""
    return [
        ev(RUN, "2026-12-01T10:00:00.000000Z", "run_started", phase="planning"),
        ev(RUN, "2026-12-01T10:00:05.000000Z", "run_started", cost_usd=0.04),
        ev(RUN, "2026-12-01T10:00:06.000000Z", "node_started", node_id="impl"),
        ev(RUN, "2026-12-01T10:00:09.000000Z", "node_failed", node_id="impl", verdict="FAIL", cost_usd=0.02,
           detail="check failed"),
        ev(RUN, "2026-12-01T10:00:10.000000Z", "run_finished", outcome="failed"),
    ]


def _resume_leg() -> list[dict]:
    """`oh-my-graph resume --retry-failed` two days later: another process, no assessment."""
    return [
        ev(RUN, "2026-12-03T09:00:00.000000Z", "run_started"),
        ev(RUN, "2026-12-03T09:00:01.000000Z", "node_started", node_id="impl"),
        passed(RUN, "2026-12-03T09:00:04.000000Z", "impl", 0.03, provenance="exit-only"),
        ev(RUN, "2026-12-03T09:00:05.000000Z", "run_finished", outcome="passed"),
    ]


def _by_day(engine) -> dict[str, tuple[int, int]]:
    report = cost_report(engine, by="day", tz="UTC", now=NOW)
    return {row["key"]: (row["cost_nano_usd"], row["invocations"]) for row in report["rows"]}


def test_an_assessment_stays_dated_at_its_cycles_leg_when_the_run_is_resumed_later(db_url, tmp_path):
    home = tmp_path / "home"
    run_dir = write_run(home, RUN, _cycle_leg() + _resume_leg(),
                        state(RUN, "g", {"impl": {"verdict": "PASS", "cost_usd": 0.03}}, goal=GOAL,
                              planning_cost_usd=0.04),
                        assess={"goal_met": False, "remaining": "the changelog", "assess_cost_usd": 0.0078})
    assert (run_dir / "assess.json").exists()
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        # Day 1: the planner ($0.04), the failed node ($0.02) and the assessment ($0.0078),
        # which ran right after that leg; day 3: the resumed node ($0.03) alone.
        assert _by_day(engine) == {"2026-12-01": (67_800_000, 3), "2026-12-03": (30_000_000, 1)}
    finally:
        engine.dispose()


def test_an_assessment_synced_before_the_resume_keeps_its_date_after_it(db_url, tmp_path):
    home = tmp_path / "home"
    run_dir = write_run(home, RUN, _cycle_leg(),
                        state(RUN, "g", {"impl": {"verdict": "FAIL", "cost_usd": 0.02}}, goal=GOAL,
                              planning_cost_usd=0.04),
                        assess={"goal_met": False, "remaining": "the changelog", "assess_cost_usd": 0.0078})
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _by_day(engine) == {"2026-12-01": (67_800_000, 3)}
        with open(run_dir / "events.jsonl", "a") as f:
            f.write("".join(json.dumps(e) + "\n" for e in _resume_leg()))
        sync(engine, [Home.from_path(str(home), "h")])
        assert _by_day(engine) == {"2026-12-01": (67_800_000, 3), "2026-12-03": (30_000_000, 1)}
    finally:
        engine.dispose()
