"""Codex's token counts, as the engine writes them: each paid call's `usage` on its event,
and in state.json a node's record whose usage the snapshot recorder folds across the
feedback rounds it supersedes, as it folds cost_usd (internal/runstate/recorder.go:
RecordNode adds the prior record's Usage). Run directories in the engine's shapes,
synced into real ledgers (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from omg_ledger.db import open_ledger
from omg_ledger.reports.cost import cost_report
from omg_ledger.sync import Home, sync

from .test_cost import ev, passed, state, write_run

RUN = "20261201-100000.000000001-1"
NOW = datetime(2026, 12, 10, tzinfo=UTC)


def _usage(input_: int, cached: int, output: int, reasoning: int) -> dict:
    return {"input_tokens": input_, "cached_input_tokens": cached, "output_tokens": output,
            "reasoning_output_tokens": reasoning}


IMPL_0 = _usage(1000, 400, 100, 20)
REVIEW_MARK = _usage(500, 100, 50, 10)  # the declarer's failing execution (feedback node_retried)
IMPL_1 = _usage(2000, 800, 200, 40)
REVIEW_1 = _usage(600, 200, 60, 12)


def _folded(a: dict, b: dict) -> dict:
    return {key: a[key] + b[key] for key in a}


IMPL_ROUND_1, REVIEW_ROUND_1 = 6, 8  # the lines of their terminal events (0-based)


def _feedback_loop(drop: int | None = None) -> list[dict]:
    t = "2026-12-01T10:00:{:02d}.000000Z".format
    lines = [
        ev(RUN, t(0), "run_started"),
        ev(RUN, t(1), "node_started", node_id="impl", session_id="s-impl-0"),
        passed(RUN, t(2), "impl", None, cost_unknown=True, usage=IMPL_0, session_id="s-impl-0",
               provenance="self-reported"),
        ev(RUN, t(3), "node_started", node_id="review", session_id="s-review-0"),
        ev(RUN, t(4), "node_retried", node_id="review", round=1, cost_unknown=True, usage=REVIEW_MARK,
           detail="feedback round 1/1: re-running impl → review"),
        ev(RUN, t(5), "node_started", node_id="impl", session_id="s-impl-1", round=1),
        passed(RUN, t(6), "impl", None, cost_unknown=True, usage=IMPL_1, session_id="s-impl-1", round=1,
               detail="feedback round 1/1", provenance="self-reported"),
        ev(RUN, t(7), "node_started", node_id="review", session_id="s-review-1", round=1),
        passed(RUN, t(8), "review", None, cost_unknown=True, usage=REVIEW_1, session_id="s-review-1", round=1,
               provenance="self-reported"),
        ev(RUN, t(9), "run_finished", outcome="passed"),
    ]
    if drop is not None:  # the engine's event write failed; state.json was written (RUN-FEED.md)
        del lines[drop]
    return lines


def _snapshot() -> dict:
    # What the recorder holds after the loop: each node's last round, its usage folded with
    # the record it superseded (impl's round 0, review's marker of round 1); cost_usd 0 filler.
    return state(RUN, "loop", {
        "impl": {"verdict": "PASS", "session_id": "s-impl-1", "cost_usd": 0, "cost_unknown": True,
                 "usage": _folded(IMPL_1, IMPL_0), "round": 1, "detail": "feedback round 1/1",
                 "provenance": "self-reported"},
        "review": {"verdict": "PASS", "session_id": "s-review-1", "cost_usd": 0, "cost_unknown": True,
                   "usage": _folded(REVIEW_1, REVIEW_MARK), "round": 1, "provenance": "self-reported"},
    }, runtime="codex")


def _total(engine) -> tuple:
    total = cost_report(engine, tz="UTC", now=NOW)["total"]
    return (total["invocations"], total["unknown_cost_invocations"], total["input_tokens"],
            total["cached_input_tokens"], total["output_tokens"], total["reasoning_output_tokens"])


# Four paid calls, each counted once with its own tokens.
EXPECTED = (4, 4, 1000 + 500 + 2000 + 600, 400 + 100 + 800 + 200, 100 + 50 + 200 + 60, 20 + 10 + 40 + 12)


def test_the_whole_stream_counts_each_calls_tokens_once(db_url, tmp_path):
    home = tmp_path / "home"
    write_run(home, RUN, _feedback_loop(), _snapshot())
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _total(engine) == EXPECTED
    finally:
        engine.dispose()


@pytest.mark.parametrize("dropped", [IMPL_ROUND_1, REVIEW_ROUND_1], ids=["impl round 1", "review round 1"])
def test_a_recovered_feedback_round_counts_only_its_own_tokens(db_url, tmp_path, dropped):
    # The terminal is recovered from its record, whose usage also holds the superseded
    # record's tokens (impl's round 0, review's feedback marker), which their own events
    # already carry: only the dropped call's are new.
    home = tmp_path / "home"
    write_run(home, RUN, _feedback_loop(dropped), _snapshot())
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _total(engine) == EXPECTED
        with engine.connect() as conn:
            kinds = conn.exec_driver_sql("SELECT kind FROM charges WHERE kind = 'recovered'").all()
        assert len(kinds) == 1
    finally:
        engine.dispose()


def test_a_recovered_round_appended_after_a_sync_counts_as_a_cold_sync_does(db_url, tmp_path):
    # The walk resumed from its stored fold must know the tokens already charged, too.
    home = tmp_path / "home"
    lines = _feedback_loop(IMPL_ROUND_1)
    run_dir = write_run(home, RUN, lines[:3], state(RUN, "loop", {
        "impl": {"verdict": "PASS", "session_id": "s-impl-0", "cost_usd": 0, "cost_unknown": True,
                 "usage": IMPL_0, "provenance": "self-reported"}}, runtime="codex"))
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        with open(run_dir / "events.jsonl", "a") as f:
            f.write("".join(json.dumps(e) + "\n" for e in lines[3:]))
        (run_dir / "state.json").write_text(json.dumps(_snapshot()))
        sync(engine, [Home.from_path(str(home), "h")])
        assert _total(engine) == EXPECTED
    finally:
        engine.dispose()
