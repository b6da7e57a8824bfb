"""Files as a crash, a power loss or a restarted engine leave them, synced between two
states: the ledger agrees with the engine's reader at each sync and ends equal to a
cold sync of the final files, every paid call counted once.

The engine's rules (jitokim/oh-my-graph):
- internal/runfeed/runfeed.go StreamWriter.Emit: one write of line and newline, then
  fsync — a crash leaves at most one cut final line; NewStreamWriter opens O_APPEND, so
  the next leg's first line lands right after the cut bytes, on the same line.
- internal/runfeed/reader.go Walk: bufio.Scanner lines, json.Unmarshal each; "a line
  that does not decode is skipped". A cut line glued to the next, or one that NULs left
  by a crash run into, decodes to nothing: both events are gone for the engine too.
- cmd/oh-my-graph/goal.go saveAssessment: os.WriteFile (truncate, then write; no
  temp file), so a sync can find assess.json empty or half written.

Expected values are worked out from the corpus bytes and corpus/per-run.md, not read
back from the code.
"""

from __future__ import annotations

import os

import pytest
from sqlalchemy import select, text

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, rebuild, sync

from .builders import copy_run, nanos
from .conftest import CORPUS_HOME
from .ledger_dump import diff, dump

RETRY_FAILED = "20261129-181518.678721711-1"  # s15: 12 lines, $0.077 on 4 terminal events
GOAL_CYCLE = "20261129-181522.237468643-1"  # s30 cycle 1: $0.0966 on the stream, assess $0.0078


def _home(tmp_path, run_id: str):
    home = tmp_path / "home"
    copy_run(CORPUS_HOME / "runs" / run_id, home / "runs" / run_id)
    for root, dirs, files in os.walk(home):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), 0o600)
    return home, home / "runs" / run_id


def _facts(engine) -> tuple[list[int], int, list[tuple[int, str, bool]]]:
    """(stored line numbers, known spend, problems as (offset, reason start, resolved))."""
    with engine.connect() as conn:
        lines = list(conn.execute(select(schema.events.c.line_no).order_by(schema.events.c.line_no)).scalars())
        spent = conn.execute(select(schema.runs.c.cost_nano_usd)).scalar_one()
        problems = [(r.byte_offset, r.reason.split(":")[0], r.resolved_at is not None)
                    for r in conn.execute(select(schema.problems))]
    return lines, spent, problems


def _assert_equals_a_cold_sync(engine, home, tmp_path) -> None:
    cold = open_ledger(str(tmp_path / "cold.sqlite"))
    try:
        sync(cold, [Home.from_path(str(home), "h")])
        expected, got = dump(cold), dump(engine)
    finally:
        cold.dispose()
    # (The incremental ledger also keeps the problems it saw and resolved on the way.)
    got["problems"] = [row for row in got["problems"] if dict(row)["resolved_at"] is None]
    assert got == expected, diff(expected, got)


# name -> (the stream at the first sync, what the engine appends after it), from the
# 12 lines of s15, and the line numbers the engine's Walk decodes in the final file.
# Line 11 is package's node_passed ($0.009); line 12 the leg's run_finished.
STREAMS = {
    # Cut inside line 11, then line 12 appended onto the cut bytes: one line that decodes
    # to nothing (offset of line 11), so the file has 11 lines and Walk keeps 1-10.
    "a cut last line and the next line glued to it": (
        lambda lines: b"".join(lines[:10]) + lines[10][:57], lambda lines: lines[11], list(range(1, 11))),
    # Line 11 whole but its newline never written, then line 12: `{…}{…}` is no JSON value.
    "a last line cut just before its newline, then the next": (
        lambda lines: b"".join(lines[:10]) + lines[10][:-1], lambda lines: lines[11], list(range(1, 11))),
    # NULs where line 11 was never written back, then the engine appends lines 11 and 12:
    # the NULs and line 11 are one line that decodes to nothing, line 12 decodes.
    "NULs at the end, then appended lines": (
        lambda lines: b"".join(lines[:10]) + b"\0" * 300, lambda lines: lines[10] + lines[11], [1, 2, 3, 4, 5, 6, 7,
                                                                                              8, 9, 10, 12]),
}


@pytest.mark.parametrize("shape", list(STREAMS), ids=list(STREAMS))
def test_a_stream_a_crash_cut_then_appended_to_reads_as_the_engine_reads_it(tmp_path, shape):
    home, run_dir = _home(tmp_path, RETRY_FAILED)
    stream = run_dir / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    first, appended, decoded = STREAMS[shape]
    stream.write_bytes(first(lines))
    glued_at = sum(map(len, lines[:10]))  # where line 11 began
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        # Lines 1-10; package's PASS is in state.json only so far (recovered, $0.009 once).
        assert _facts(engine) == (list(range(1, 11)), nanos("0.077"), [])
        with open(stream, "ab") as f:
            f.write(appended(lines))
        sync(engine, [Home.from_path(str(home), "h")])
        stored, spent, problems = _facts(engine)
        assert stored == decoded
        # The stream no longer holds package's node_passed (for the engine neither): its
        # $0.009 is still state.json's record, counted once; 0.012 + 0.028 + 0.028 + 0.009.
        assert spent == nanos("0.077")
        assert problems == [(glued_at, "not JSON", False)]
        _assert_equals_a_cold_sync(engine, home, tmp_path)
    finally:
        engine.dispose()


def _assessment_charges(engine) -> list[tuple]:
    """(cost_nano_usd, cost_unknown) of each assessment charge."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT cost_nano_usd, cost_unknown FROM charges WHERE kind = 'assessment' ORDER BY seq"))]


@pytest.mark.parametrize("caught", ["empty", "half written"])
def test_assess_json_caught_mid_write_is_a_problem_then_counted_once_when_whole(tmp_path, caught):
    home, run_dir = _home(tmp_path, GOAL_CYCLE)
    assess = run_dir / "assess.json"
    whole = assess.read_bytes()
    with open(assess, "r+b") as f:  # as os.WriteFile leaves it: truncated in place, then written
        f.truncate(0 if caught == "empty" else len(whole) // 2)
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        _, spent, problems = _facts(engine)
        assert spent == nanos("0.0966")  # the stream's calls; the assessment's is not known yet
        # ... but it was paid: assess.json is written once the assessment call returned.
        assert _assessment_charges(engine) == [(None, 1)]
        assert [(offset, resolved) for offset, _, resolved in problems] == [(0, False)]
        before = dump(engine)
        rebuild(engine)  # the same from the ledger's stored facts alone
        assert dump(engine) == before, diff(before, dump(engine))
        pooled = open_ledger(str(tmp_path / "pooled.sqlite"))  # and through a worker process
        try:
            sync(pooled, [Home.from_path(str(home), "h")], workers=1)
            assert _assessment_charges(pooled) == [(None, 1)]
        finally:
            pooled.dispose()
        with open(assess, "r+b") as f:
            f.write(whole)
        sync(engine, [Home.from_path(str(home), "h")])
        sync(engine, [Home.from_path(str(home), "h")])
        _, spent, problems = _facts(engine)
        assert spent == nanos("0.0966") + nanos("0.0078")
        assert _assessment_charges(engine) == [(nanos("0.0078"), 0)]
        assert [(offset, resolved) for offset, _, resolved in problems] == [(0, True)]
        _assert_equals_a_cold_sync(engine, home, tmp_path)
    finally:
        engine.dispose()

