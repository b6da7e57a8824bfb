"""An append to a runner stream is paired on from the starts its earlier lines left open
(invocations.pair_appended), never from the stream's first line: the rows must be those
pairing every line makes, however the lines fall across appends. Pure property first,
then real files appended between real syncs on both databases."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from omg_ledger import invocations, schema
from omg_ledger.db import open_ledger
from omg_ledger.invocations import InvocationLine, pair_appended, pair_invocations
from omg_ledger.sync import sync

# (event, role, milestone, status, duration_ms): a recover end has no role.
_LINE = st.one_of(
    st.tuples(st.just("start"), st.sampled_from(["zen", "puma"]), st.sampled_from(["M1", "M2", None]),
              st.none(), st.none()),
    st.tuples(st.just("end"), st.sampled_from(["zen", "puma"]), st.sampled_from(["M1", "M2", None]),
              st.sampled_from(["DONE", "TIMEOUT"]), st.one_of(st.none(), st.integers(0, 5000))),
    st.tuples(st.just("end"), st.none(), st.sampled_from(["M1", None]), st.just("INVOCATION_FAILURE"), st.none()),
)


def _ts(n: int) -> str:
    return f"2024-05-01T10:{n // 60:02d}:{n % 60:02d}.000Z"


def _lines(specs: list[tuple]) -> list[InvocationLine]:
    return [InvocationLine(n, 100 * n, _ts(n), event, role, milestone, status, duration, {})
            for n, (event, role, milestone, status, duration) in enumerate(specs, 1)]


@settings(max_examples=400, deadline=None)
@given(specs=st.lists(_LINE, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=6))
def test_pairing_appended_lines_on_from_the_open_starts_makes_the_rows_of_one_pairing(specs, cuts):
    lines = _lines(specs)
    whole = pair_invocations(lines)
    by_line = {line.line_no: line for line in lines}
    stored: dict[int, invocations.PairedInvocation] = {}  # seq -> row, as the ledger holds them
    edges = sorted({0, len(lines), *(min(c, len(lines)) for c in cuts)})
    for start, end in zip(edges, edges[1:], strict=False):
        dangling = sorted((row for row in stored.values() if row.outcome == "dangling"), key=lambda r: r.start_line)
        still_open = [(row.seq, by_line[row.start_line]) for row in dangling]
        rows = pair_appended(still_open, lines[start:end], max(stored, default=-1) + 1)
        for row in dangling:
            del stored[row.seq]
        for row in rows:
            assert row.seq not in stored
            stored[row.seq] = row
    assert [stored[seq] for seq in sorted(stored)] == whole


def _line(event: str, n: int, role: str | None = "zen", milestone: str | None = "M1", **end) -> bytes:
    fields = {"ts": _ts(n), "role": role, "milestone": milestone, "event": event, **end}
    return orjson.dumps(fields) + b"\n"


def _rows(engine) -> list[tuple]:
    t = schema.invocations
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(t.c.seq, t.c.outcome, t.c.role, t.c.milestone, t.c.status,
                                                      t.c.duration_ms, t.c.duration_source, t.c.start_line,
                                                      t.c.end_line, t.c.started_at, t.c.ended_at).order_by(t.c.seq))]


def test_appends_between_syncs_equal_one_sync_of_the_whole_file(db_url, tmp_path):
    pieces = [
        _line("start", 1) + _line("start", 2, "puma", None),
        _line("end", 3, status="DONE", duration_ms=1500) + _line("start", 4),  # zen closed; another zen opens
        _line("start", 5, "puma", "M2"),
        _line("end", 6, "puma", None, status="TIMEOUT", duration_ms=None)  # puma's planning start, by timestamps
        + _line("end", 7, "navi", None, status="DONE", duration_ms=3),  # no start: an unmatched end
        _line("end", 8, None, "M1", status="INVOCATION_FAILURE", duration_ms=None),  # recover: closes all open
        _line("start", 9, "zen", "M2"),
    ]
    stream = tmp_path / "events.jsonl"
    stream.write_bytes(b"")
    engine = open_ledger(db_url)
    try:
        for piece in pieces:
            with open(stream, "ab") as f:
                f.write(piece)
            report = sync(engine, [], invocation_files=[str(stream)])
            assert report.problems == [] and report.events_ingested == piece.count(b"\n")
        appended = _rows(engine)
    finally:
        engine.dispose()
    whole = open_ledger(str(tmp_path / "whole.sqlite"))
    try:
        sync(whole, [], invocation_files=[str(stream)])
        assert appended == _rows(whole)
    finally:
        whole.dispose()
    # By hand, from the runner contract: FIFO per (role, milestone); a recover closes every
    # start still open; rows in start (or end) line order.
    assert [(seq, outcome, role, status, duration, source, start, end)
            for seq, outcome, role, _m, status, duration, source, start, end, _s, _e in appended] == [
        (0, "paired", "zen", "DONE", 1500, "reported", 1, 3),
        (1, "paired", "puma", "TIMEOUT", 4000, "timestamps", 2, 6),
        (2, "recovered", "zen", "INVOCATION_FAILURE", None, None, 4, 8),
        (3, "recovered", "puma", "INVOCATION_FAILURE", None, None, 5, 8),
        (4, "unmatched_end", "navi", "DONE", None, None, None, 7),
        (5, "dangling", "zen", None, None, None, 9, None),
    ]
