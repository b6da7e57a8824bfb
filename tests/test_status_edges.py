"""Where the stream's last word cannot be read the ordinary way, the status concludes
nothing it cannot affirm (ADR 0015: ABANDONED "requires two affirmative facts, never the
absence of one"), and reads what the engine's own reader reads (runfeed.Walk).

Real run directories, a real `resume.lock` held by a real process and freed by a real
kill -9, a real SQLite file and a real PostgreSQL server (``db_url``).
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from omg_ledger import render
from omg_ledger.db import open_ledger
from omg_ledger.reports.audit import audit_report
from omg_ledger.reports.runs import list_runs, show_run
from omg_ledger.sync import Home, sync

from .builders import ev, graph, write_run
from .test_status import hold_lock, kill9

MARKED_FREE = "oh-my-graph-lock 1\n4000000\n"  # the engine's marked lock, nobody holding it


def _line(run_id: str, data: dict) -> bytes:
    return json.dumps({**data, "run_id": run_id}, separators=(",", ":")).encode()


def _row(engine, run_id: str) -> dict:
    return {r["run_id"]: r for r in list_runs(engine)}[run_id]


def _ledger_state(engine, run_id: str) -> str:
    with engine.connect() as conn:
        return conn.execute(text("SELECT ledger_state FROM v_runs WHERE run_id = :r"), {"r": run_id}).scalar_one()


def _one_node_run(home, run_id: str, lock: str = MARKED_FREE):
    return write_run(home, run_id, [ev("run_started"), ev("node_started", 1, node_id="a"),
                                    ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.25,
                                       provenance="exit-only")],
                     state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.25}}}, lock=lock)


# -- a stream that waits at a newer event schema ------------------------------------------------


def test_a_stream_waiting_at_a_newer_schema_is_not_known_never_abandoned(tmp_path, db_url):
    # The lines this omg-ledger reads leave the leg open and the lock is free; the line it
    # cannot read (schema 4) may be the run_finished. The engine refuses such a stream.
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-n")
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(_line("run-n", {**ev("run_finished", 3, outcome="passed"), "schema": 4}) + b"\n")
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        row = _row(engine, "run-n")
        assert row["status"] == "NOT-KNOWN-YET"
        assert "newer than this omg-ledger reads" in row["hint"] and "upgrade omg-ledger" in row["hint"]
        assert "ABANDONED" not in row["hint"] and "resume" not in row["hint"]
        assert list_runs(engine, statuses=("ABANDONED",)) == []
        assert [r["run_id"] for r in list_runs(engine, statuses=("NOT-KNOWN-YET",))] == ["run-n"]
        assert show_run(engine, "run-n")["status"] == "NOT-KNOWN-YET"
        assert audit_report(engine)["abandoned"] == []
        assert _ledger_state(engine, "run-n") == "NOT-KNOWN-YET"
        # The spend read before the newer line still counts.
        assert row["cost_nano_usd"] == 250_000_000
    finally:
        engine.dispose()


def test_a_paused_run_resumed_in_a_newer_schema_is_not_known_never_paused(tmp_path, db_url):
    # Stopped at a gate, then resumed by a newer engine (its run_started in schema 4) that
    # still holds the lock: "PAUSED, approve the gate" would be the older lines' word.
    home = tmp_path / "home"
    run_dir = write_run(home, "run-g", [ev("run_started"), ev("node_started", 1, node_id="gate"),
                                        ev("run_finished", 2, outcome="paused", detail="gate g")],
                        state={"graph": graph("gate", gate="gate"), "nodes": {}, "gate": {"paused_at": "gate"}},
                        lock=MARKED_FREE)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _row(engine, "run-g")["status"] == "PAUSED"
        child = hold_lock(run_dir)
        try:
            with open(run_dir / "events.jsonl", "ab") as f:
                f.write(_line("run-g", {**ev("run_started", 10), "schema": 4}) + b"\n")
            for status_now in (_row(engine, "run-g")["status"], show_run(engine, "run-g")["status"]):
                assert status_now == "NOT-KNOWN-YET"  # read from the stream now, before any sync
            sync(engine, [Home.from_path(str(home), "h")])
            assert _row(engine, "run-g")["status"] == "NOT-KNOWN-YET"
            assert list_runs(engine, statuses=("PAUSED",)) == []
        finally:
            kill9(child)
    finally:
        engine.dispose()


def test_a_newer_schema_line_without_its_newline_is_not_known_never_abandoned(tmp_path, db_url):
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-p")
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(_line("run-p", {**ev("run_finished", 3, outcome="passed"), "schema": 4}))  # no "\n"
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        row = _row(engine, "run-p")
        assert row["status"] == "NOT-KNOWN-YET" and "upgrade omg-ledger" in row["hint"]
        assert show_run(engine, "run-p")["status"] == "NOT-KNOWN-YET"
    finally:
        engine.dispose()


def test_show_says_no_unfinished_line_where_reading_waits_at_a_newer_schema(tmp_path, db_url):
    # Whole lines follow the newer one: none of them is a line without its newline.
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-w")
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(_line("run-w", {**ev("node_started", 3, node_id="b"), "schema": 4}) + b"\n")
        f.write(_line("run-w", ev("run_finished", 4, outcome="passed")) + b"\n")
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        detail = show_run(engine, "run-w")
        assert detail["status"] == "NOT-KNOWN-YET"
        assert detail["unindexed_tail_at"] is None
        assert "without its newline" not in render.run_detail(detail)
    finally:
        engine.dispose()


# -- a last event written without its newline ---------------------------------------------------


def test_a_run_finished_without_its_newline_ends_the_leg_once_the_lock_is_free(tmp_path, db_url):
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-f", lock="")
    child = hold_lock(run_dir)
    complete_bytes = (run_dir / "events.jsonl").stat().st_size
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(_line("run-f", ev("run_finished", 3, outcome="passed")))  # no "\n": the write was cut there
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        # Held: the writer may still add the newline (the contract's "re-poll").
        assert _row(engine, "run-f")["status"] == "RUNNING"
        kill9(child)
        # Free: nobody is left to add it. The engine's reader counts the line: the leg ended.
        row = _row(engine, "run-f")
        assert (row["status"], row["hint"]) == ("PASS", None)
        detail = show_run(engine, "run-f")
        assert detail["status"] == "PASS"
        # show says its tables stop before that line: where it starts is the size of the three lines before it.
        assert detail["unindexed_tail_at"] == complete_bytes and detail["stream_changed_since_sync"] is False
        assert f"without its newline (from byte {complete_bytes})" in render.run_detail(detail)
        assert [leg["is_open"] for leg in detail["legs"]] == [True]
        assert list_runs(engine, statuses=("ABANDONED",)) == []
        assert audit_report(engine)["abandoned"] == []
    finally:
        engine.dispose()


def test_a_run_finished_without_its_newline_appended_after_the_sync(tmp_path, db_url):
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-l")
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _row(engine, "run-l")["status"] == "ABANDONED"  # open leg, free lock, nothing after
        assert show_run(engine, "run-l")["unindexed_tail_at"] is None
        with open(run_dir / "events.jsonl", "ab") as f:
            f.write(_line("run-l", ev("run_finished", 3, outcome="passed")))
        assert _row(engine, "run-l")["status"] == "PASS"  # read from the stream now, before any sync
        assert show_run(engine, "run-l")["status"] == "PASS"
    finally:
        engine.dispose()


def test_a_line_cut_mid_write_leaves_the_run_abandoned(tmp_path, db_url):
    # kill -9 in the middle of a write: a cut line, not an event. The leg never ended.
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-c")
    whole = _line("run-c", ev("run_finished", 3, outcome="passed"))
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(whole[:-1])  # its closing brace never written
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _row(engine, "run-c")["status"] == "ABANDONED"
        assert show_run(engine, "run-c")["status"] == "ABANDONED"
    finally:
        engine.dispose()


def test_a_final_node_event_without_its_newline_ends_no_leg(tmp_path, db_url):
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-e")
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(_line("run-e", ev("node_started", 3, node_id="b")))
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _row(engine, "run-e")["status"] == "ABANDONED"
    finally:
        engine.dispose()


# -- an unreadable snapshot is not an absent one -------------------------------------------------


def test_an_abandoned_runs_unreadable_snapshot_is_not_said_never_written(tmp_path, db_url):
    home = tmp_path / "home"
    run_dir = _one_node_run(home, "run-u")
    (run_dir / "state.json").write_text('{"schema": 3, "run_id": "run-u", "gra')  # cut
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        row = _row(engine, "run-u")
        assert row["status"] == "ABANDONED"
        assert "state.json is there but cannot be read" in row["hint"]
        assert "never wrote a snapshot" not in row["hint"]
    finally:
        engine.dispose()


def test_a_fifo_put_in_place_of_an_abandoned_runs_stream_is_never_waited_on(tmp_path):
    """The last look at an ABANDONED run's cut final line opens its stream as sync does:
    a FIFO (or a symlink) swapped in after the change check is refused, so `runs` cannot
    hang on it waiting for a writer that never comes. The answer is then "not known"."""
    import os
    import threading

    from omg_ledger.status import RUNNING, StatusFacts, _with_final_line
    from omg_ledger.tail import Checkpoint

    run_dir = tmp_path / "run-f"
    run_dir.mkdir()
    os.mkfifo(run_dir / "events.jsonl")
    facts = StatusFacts(any_leg=True, last_leg_open=True, last_leg_phase="run", last_outcome=None,
                        has_snapshot=False, all_nodes_passed=False)
    cut = Checkpoint(size=120, end_offset=100, next_line=3)  # 20 bytes after the last complete line
    answer = []
    looking = threading.Thread(target=lambda: answer.append(_with_final_line(facts, str(run_dir), "run-f", cut)),
                               daemon=True)
    looking.start()
    looking.join(30)
    if looking.is_alive():  # blocked in open(): let it go before failing
        os.close(os.open(run_dir / "events.jsonl", os.O_WRONLY))
        looking.join(30)
        pytest.fail("the FIFO was opened and waited on")
    status, _, line = answer[0]
    assert (status, line) == (RUNNING, None)


@pytest.mark.parametrize(("stream", "lock", "stored"), [
    ([ev("run_started"), ev("node_started", 1, node_id="gate"), ev("run_finished", 2, outcome="paused")],
     MARKED_FREE, "PAUSED"),
    ([ev("run_started"), ev("node_started", 1, node_id="gate")], MARKED_FREE, "ABANDONED"),
    ([ev("run_started"), ev("node_started", 1, node_id="gate")], None, "RUNNING"),
], ids=["paused", "abandoned", "running"])
def test_the_status_filter_finds_a_run_not_known_since_a_newer_schema_line_appended_after_the_sync(
        tmp_path, db_url, stream, lock, stored):
    # Lines of a newer event schema appended since the last sync: the status is read from
    # the stream now (NOT-KNOWN-YET), and `runs --status NOT-KNOWN-YET` must list the run
    # that `runs` shows with that word, however the stored facts read.
    home = tmp_path / "home"
    run_dir = write_run(home, "run-s", stream, state={"graph": graph("gate", gate="gate"), "nodes": {}}, lock=lock)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert _row(engine, "run-s")["status"] == stored
        with open(run_dir / "events.jsonl", "ab") as f:
            f.write(_line("run-s", {**ev("run_started", 10), "schema": 4}) + b"\n")
        assert _row(engine, "run-s")["status"] == "NOT-KNOWN-YET"
        assert [r["run_id"] for r in list_runs(engine, statuses=("NOT-KNOWN-YET",))] == ["run-s"]
    finally:
        engine.dispose()
