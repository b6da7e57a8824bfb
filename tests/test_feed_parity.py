"""Line acceptance as the engine's own reader has it, for the lines that decide a run's
status or money.

oh-my-graph reads events.jsonl through internal/runfeed/reader.go: Walk (lines 69-96)
decodes each line with encoding/json into runfeed.Event and skips only a line that does
not decode; LastLeg (lines 167-197) takes the legs and the last outcome from what it
decoded, and ReadAccounting (lines 31-43) sums the accounting fields. A line the engine
reads must therefore not be a skipped problem here, or the ledger shows a finished run
ABANDONED (or RUNNING) while `oh-my-graph runs list` shows it settled.

Each run is a real directory synced into a real ledger; the expected values are the
engine's reading of the bytes, worked out by hand from the Go source cited beside them.
"""

from __future__ import annotations

from omg_ledger.db import open_ledger
from omg_ledger.reports.runs import show_run
from omg_ledger.sync import Home, sync

from .builders import ev, graph, write_run

N = 10**9
MARKED_FREE_LOCK = "oh-my-graph-lock 1\n"  # marked, and nobody holds its flock: a dead leg


def _sync(db_url: str, home) -> tuple[object, list]:
    engine = open_ledger(db_url)
    report = sync(engine, [Home.from_path(str(home), "h")])
    return engine, report.problems


def test_a_null_field_is_the_engine_s_zero_value_not_a_bad_line(db_url, tmp_path):
    home = tmp_path / "home"
    # encoding/json leaves a string, number, bool or struct field untouched on a JSON null
    # (decode.go literalStore, case 'n'): no error, so Walk keeps the line
    # (reader.go:82-84). runfeed.Event's fields are all such (runfeed.go:151-226).
    write_run(home, "20261129-100000.000000001-1", [
        ev("run_started", 0),
        ev("node_started", 1, node_id="a", session_id=None),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.5, cost_unknown=None, retries=None,
           round=None, provenance="exit-only", usage={"input_tokens": 10, "output_tokens": None}),
        # LastLeg closes the leg on it (reader.go:175-186): outcome "passed", detail "".
        ev("run_finished", 3, outcome="passed", detail=None, phase=None),
    ], state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.5}}},
        lock=MARKED_FREE_LOCK)
    # No snapshot: `runs list` takes the money from ReadAccounting over the stream
    # (runs.go:249-264), and a usage of null is no tokens (reader.go:34-39).
    write_run(home, "20261129-100000.000000002-1", [
        ev("run_started", 0, cost_usd=None, usage=None),
        ev("node_started", 1, node_id="b"),
        ev("node_failed", 2, node_id="b", verdict="FAIL", cost_usd=0.25, usage=None, detail=None,
           session_id=None),
        ev("run_finished", 3, outcome="failed", cost_usd=None, cost_unknown=None),
    ], lock=MARKED_FREE_LOCK)
    engine, problems = _sync(db_url, home)
    try:
        assert problems == []
        first = show_run(engine, "20261129-100000.000000001-1")
        # runstatus.Derive (runstatus.go:207-222): closed leg, not paused, every node of
        # the snapshot's graph PASS -> PASS.
        assert first["status"] == "PASS"
        assert (first["cost_nano_usd"], first["input_tokens"], first["output_tokens"]) == (N // 2, 10, 0)
        second = show_run(engine, "20261129-100000.000000002-1")
        # Closed leg, outcome "failed", no snapshot -> FAIL; $0.25 over the stream.
        assert second["status"] == "FAIL"
        assert (second["cost_nano_usd"], second["unknown_cost_invocations"]) == (N // 4, 0)
    finally:
        engine.dispose()
