"""Huge streams (issue 13): memory that does not grow with the stream, appends that
cost what was appended.

* A generated stream of valid events (benchmarks/bigstream.py: legs of 40 nodes with
  ~3 KB lines) synced by a real `omg-ledger sync` child process: its peak RSS
  (``ru_maxrss`` from wait4) stays under one fixed cap for a ~50 MB and a ~400 MB
  stream, under an address-space limit — the money is the hand-computed total.
* An append of k lines to a run of N lines walks k stored events, not N
  (``SyncReport.events_derived``), including appends cut mid-line; a rewritten
  stream and a new DERIVATION_VERSION walk it whole again (the fallback), with the
  same rows.
"""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import select

from benchmarks import bigstream
from omg_ledger import derive, schema
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, rebuild, sync

from .ledger_dump import diff, dump

DERIVED = ("runs", "legs", "nodes", "rounds", "charges", "findings", "goal_cycles")
MIB = 1 << 20
# A sync of a run of any size: the interpreter, SQLAlchemy and a batch of lines and rows.
# The code before issue 13 peaked at 671 MiB for a 200 MiB stream of this shape.
PEAK_RSS_CAP_MIB = 300
ADDRESS_SPACE_LIMIT = 2 << 30


def _totals(db) -> tuple:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT cost_nano_usd, unknown_cost_invocations, invocations, event_count, leg_count "
                            "FROM runs").fetchone()


def _expected(legs: int) -> tuple:
    nodes = bigstream.NODES
    return (bigstream.expected_known_nanos(legs), bigstream.expected_unknown(legs), legs * nodes,
            legs * bigstream.LINES_PER_LEG, legs)


def test_hand_computed_money_of_the_generated_stream():
    # 3 legs of 40 nodes at $0.0125: legs 0 and 1 known, leg 2 of unknown cost.
    assert round(bigstream.COST_USD * 1e9) == bigstream.COST_NANOS
    assert bigstream.expected_known_nanos(3) == 2 * 40 * 12_500_000 == 1_000_000_000
    assert bigstream.expected_unknown(3) == 40
    assert bigstream.LINES_PER_LEG == 82


def test_peak_memory_does_not_grow_with_the_stream(tmp_path):
    peaks = {}
    for size_mib in (50, 400):
        root = tmp_path / f"s{size_mib}"
        root.mkdir()
        home, legs = bigstream.make_home(root, size_mib * MIB)
        db = root / "ledger.sqlite"
        result = bigstream.measured_sync(home, db, limit_as=ADDRESS_SPACE_LIMIT)
        assert result["rc"] == 0, result["stderr"][-2000:]
        assert result["report"]["events_ingested"] == legs * bigstream.LINES_PER_LEG
        assert _totals(db) == _expected(legs)
        peaks[size_mib] = result["max_rss_mib"]
        stream = home / "runs" / bigstream.RUN_ID / "events.jsonl"
        assert stream.stat().st_size >= size_mib * MIB
        stream.unlink()  # the disk, not the test, was the limit
    assert all(peak < PEAK_RSS_CAP_MIB for peak in peaks.values()), peaks


@pytest.fixture
def big_run(tmp_path):
    legs = 150  # 12,300 lines
    home, written = bigstream.make_home(tmp_path, legs * 100_000)
    return home, home / "runs" / bigstream.RUN_ID / "events.jsonl", written


def _derived(engine) -> dict:
    data = dump(engine)
    return {name: data[name] for name in DERIVED}


def test_an_append_walks_only_the_appended_lines(tmp_path, db_url, big_run):
    home, stream, legs = big_run
    engine = open_ledger(db_url)
    try:
        first = sync(engine, [Home.from_path(str(home), "h")])
        n = legs * bigstream.LINES_PER_LEG
        assert first.events_ingested == first.events_derived == n

        # k = one leg of 82 lines appended to N = 12,300: 82 walked.
        legs = bigstream.append_legs(stream, legs, 1)
        report = sync(engine, [Home.from_path(str(home), "h")])
        assert (report.events_ingested, report.events_derived) == (82, 82)

        # An append cut mid-line: the complete lines now, the rest (and the cut line) next.
        whole = b"".join(bigstream.leg_lines(legs, legs * bigstream.LINES_PER_LEG))
        lines = whole.splitlines(keepends=True)
        cut = sum(len(line) for line in lines[:30]) + 17  # 30 lines and 17 bytes of the 31st
        with open(stream, "ab") as f:
            f.write(whole[:cut])
        report = sync(engine, [Home.from_path(str(home), "h")])
        assert (report.events_ingested, report.events_derived) == (30, 30)
        with open(stream, "ab") as f:
            f.write(whole[cut:])
        legs += 1
        report = sync(engine, [Home.from_path(str(home), "h")])
        assert (report.events_ingested, report.events_derived) == (52, 52)
        assert sync(engine, [Home.from_path(str(home), "h")]).events_derived == 0  # nothing new: nothing walked

        with engine.connect() as conn:
            row = conn.execute(select(schema.runs.c.cost_nano_usd, schema.runs.c.unknown_cost_invocations,
                                      schema.runs.c.invocations, schema.runs.c.event_count,
                                      schema.runs.c.leg_count)).one()
        assert tuple(row) == _expected(legs)
        synced = _derived(engine)
        rebuild(engine)
        assert _derived(engine) == synced, diff(synced, _derived(engine))
    finally:
        engine.dispose()


def test_a_rewritten_stream_or_new_rules_walk_it_whole(tmp_path, big_run, monkeypatch):
    home, stream, legs = big_run
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        n = legs * bigstream.LINES_PER_LEG
        # Truncated in place to its first leg: re-read from zero and walked whole (82
        # lines; a resumed walk would have walked none, its state being at line N).
        data = stream.read_bytes()
        first_leg = len(b"".join(bigstream.leg_lines(0, 0)))
        stream.write_bytes(data[:first_leg])
        report = sync(engine, [Home.from_path(str(home), "h")])
        assert report.events_derived == bigstream.LINES_PER_LEG
        assert _totals(tmp_path / "ledger.sqlite") == _expected(1)
        # Then grown again: an append. A run of one closed leg of 82 lines (under
        # derive.RESUMABLE_FROM_LINE) kept no state: its stored lines are walked again.
        assert bigstream.LINES_PER_LEG < derive.RESUMABLE_FROM_LINE
        bigstream.append_legs(stream, 1, legs - 1)
        assert sync(engine, [Home.from_path(str(home), "h")]).events_derived == n
        assert _totals(tmp_path / "ledger.sqlite") == _expected(legs)
        synced = _derived(engine)

        # New rules: the stored state is of the old version, so the next append walks all.
        monkeypatch.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION + 1)
        legs = bigstream.append_legs(stream, legs, 1)
        assert sync(engine, [Home.from_path(str(home), "h")]).events_derived == legs * bigstream.LINES_PER_LEG
        assert _totals(tmp_path / "ledger.sqlite") == _expected(legs)
        legs = bigstream.append_legs(stream, legs, 1)
        assert sync(engine, [Home.from_path(str(home), "h")]).events_derived == bigstream.LINES_PER_LEG
        assert synced != _derived(engine)  # two legs more
        rebuilt_before = _derived(engine)
        rebuild(engine)
        assert _derived(engine) == rebuilt_before
    finally:
        engine.dispose()


def test_a_snapshot_record_of_an_old_terminal_is_found_beyond_the_recent_ones(tmp_path, db_url):
    """The walk keeps a node's latest few terminals; a state.json still holding the
    record of its 2nd of 12 is found in the stored stream: the snapshot is behind (a
    finding), not a dropped terminal (which would charge the record's cost again)."""
    from .builders import ev, write_run

    stream = []
    for leg in range(12):
        stream += [ev("run_started", leg), ev("node_started", leg, node_id="a", session_id=f"s{leg}"),
                   ev("node_passed", leg, node_id="a", verdict="PASS", session_id=f"s{leg}", cost_usd=0.5),
                   ev("run_finished", leg, outcome="passed")]
    state = {"graph": {"name": "g", "nodes": [{"id": "a"}]},
             "nodes": {"a": {"verdict": "PASS", "session_id": "s1", "cost_usd": 0.5}}}
    write_run(tmp_path / "home", "r1", stream, state)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(tmp_path / "home"), "h")])
        with engine.connect() as conn:
            kinds = [k for (k,) in conn.execute(select(schema.findings.c.kind))]
            charges = conn.execute(select(schema.charges.c.kind, schema.charges.c.cost_nano_usd)).all()
        assert kinds == ["snapshot_behind"]
        assert sorted(charges) == [("node", 500_000_000)] * 12
    finally:
        engine.dispose()
