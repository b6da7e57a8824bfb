"""`sync --invocations` and `omg-ledger invocations`, through real files and a real ledger.

Every test runs on SQLite and on a real PostgreSQL server (the ``db_url`` fixture).
Expectations are written by hand from the runner contract
(/work/shared/seeds/runner-invocation-events.txt):

* ``{"ts","role","milestone","event":"start"}`` immediately before each dispatched
  invocation; ``{"ts","role","milestone","event":"end","status","duration_ms"}`` after
  it settles -- success, transport failure (runner error code verbatim: TIMEOUT,
  SPAWN_ERROR, ...), throw (``error.code || error.name``: ETIMEDOUT, ENOENT, Error);
* ``recover`` appends one end with role null, duration_ms null, INVOCATION_FAILURE that
  closes the dangling start a killed supervisor left;
* milestone is null for planning (piledriver), alt (instinct) and navi;
* appends are best-effort (a line may be missing) and the file is created lazily.

and from DESIGN.md's invariants (resumable by offset + head fingerprint, rebuilt on
shrink/replace, idempotent, read-only, bad lines recorded with their byte offset).
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import select, text

from omg_ledger import schema
from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.invocations import classify_status
from omg_ledger.reports.invocations import invocation_report, to_csv, to_text
from omg_ledger.sync import SyncReport
from omg_ledger.sync import sync as sync_ledger
from omg_ledger.tail import MAX_LINE_BYTES, RUNAWAY_REASON, machine_source

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def ts(minute: int, second: int = 0, ms: int = 0) -> str:
    return f"2024-05-01T10:{minute:02d}:{second:02d}.{ms:03d}Z"


def norm(minute: int, second: int = 0, ms: int = 0) -> str:
    """The ledger's normalized form of ts(...): UTC, microseconds."""
    return f"2024-05-01T10:{minute:02d}:{second:02d}.{ms:03d}000Z"


def us(minute: int, second: int = 0, ms: int = 0) -> int:
    moment = datetime(2024, 5, 1, 10, minute, second, ms * 1000, tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def start(role, milestone, at) -> bytes:
    # Field order as the runner writes it.
    return orjson.dumps({"ts": at, "role": role, "milestone": milestone, "event": "start"}) + b"\n"


def end(role, milestone, at, status, duration_ms) -> bytes:
    return orjson.dumps({"ts": at, "role": role, "milestone": milestone, "event": "end",
                         "status": status, "duration_ms": duration_ms}) + b"\n"


def recover(milestone, at) -> bytes:
    return end(None, milestone, at, "INVOCATION_FAILURE", None)


@pytest.fixture
def engine(db_url):
    engine = open_ledger(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def stream(tmp_path):
    runner_dir = tmp_path / "runner-ledger"
    runner_dir.mkdir()
    return runner_dir / "events.jsonl"


def sync(engine, *paths) -> SyncReport:
    return sync_ledger(engine, [], invocation_files=[str(p) for p in paths])


def invocation_rows(engine) -> list[tuple]:
    t = schema.invocations
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(t.c.outcome, t.c.role, t.c.milestone, t.c.status, t.c.duration_ms, t.c.duration_source,
                   t.c.start_line, t.c.end_line).order_by(t.c.file_pk, t.c.seq))]


def dump(engine) -> dict[str, list[tuple]]:
    tables = (schema.streams, schema.invocation_lines, schema.invocations, schema.problems)
    with engine.connect() as conn:
        return {t.name: [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]
                for t in tables}


def append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# --------------------------------------------------------------------------- the seed's cases


def test_paired_success(engine, stream):
    stream.write_bytes(start("bulldozer", "M1", ts(0)) + end("bulldozer", "M1", ts(0, 1, 500), "DONE", 1500))
    report = sync(engine, stream)
    assert (report.events_ingested, report.problems) == (2, [])
    assert report.bytes_read == stream.stat().st_size
    assert invocation_rows(engine) == [("paired", "bulldozer", "M1", "DONE", 1500, "reported", 1, 2)]
    t = schema.invocations
    with engine.connect() as conn:
        row = conn.execute(select(t.c.started_at, t.c.started_at_us, t.c.ended_at, t.c.ended_at_us)).one()
    assert tuple(row) == (norm(0), us(0), norm(0, 1, 500), us(0, 1, 500))
    report = invocation_report(engine, now=NOW)
    assert report["rows"] == [{"key": "bulldozer", "invocations": 1, "failures": 0, "failures_by_status": {},
                               "dangling": 0, "p50_ms": 1500, "p95_ms": 1500, "max_ms": 1500,
                               "statuses": {"DONE": 1}}]
    assert report["dangling"] == []


def test_a_time_before_the_year_1000_is_stored_with_four_digits_and_sorts_first(engine, stream):
    """The ledger's times are compared as text: a runner's clock set to the year 999 (any
    RFC 3339 time is accepted) is stored as 0999-…, which sorts before 2024 (999-… sorted
    after it, and a saved query's window cut it on the wrong side)."""
    stream.write_bytes(start("bulldozer", "M1", "0999-12-31T10:00:00Z")
                       + end("bulldozer", "M1", "0999-12-31T10:00:01.5Z", "DONE", 1500)
                       + start("piledriver", None, ts(0)) + end("piledriver", None, ts(0, 2), "DONE", 2000))
    sync(engine, stream)
    t = schema.invocations
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(select(t.c.role, t.c.started_at, t.c.ended_at).order_by(t.c.started_at))]
    assert rows == [("bulldozer", "0999-12-31T10:00:00.000000Z", "0999-12-31T10:00:01.500000Z"),
                    ("piledriver", norm(0), norm(0, 2))]


def test_transport_failure_end(engine, stream):
    # {ok:false} from the runner: the end status is the runner error code verbatim.
    stream.write_bytes(start("zen", "M2", ts(0)) + end("zen", "M2", ts(10), "TIMEOUT", 600000)
                       + start("strix-halo", "M2", ts(11)) + end("strix-halo", "M2", ts(11, 0, 3), "SPAWN_ERROR", 3))
    assert sync(engine, stream).problems == []
    assert invocation_rows(engine) == [
        ("paired", "zen", "M2", "TIMEOUT", 600000, "reported", 1, 2),
        ("paired", "strix-halo", "M2", "SPAWN_ERROR", 3, "reported", 3, 4),
    ]
    report = invocation_report(engine, now=NOW, by="milestone")
    assert [(r["key"], r["invocations"], r["failures"], r["failures_by_status"]) for r in report["rows"]] == [
        ("M2", 2, 2, {"SPAWN_ERROR": 1, "TIMEOUT": 1})]


def test_thrown_error_end(engine, stream):
    # A throw ends with error.code || error.name: ETIMEDOUT, or plain Error (zen envelope rejection).
    stream.write_bytes(start("navi", None, ts(0)) + end("navi", None, ts(0, 30), "ETIMEDOUT", 30000)
                       + start("zen", "M3", ts(1)) + end("zen", "M3", ts(1, 0, 12), "Error", 12))
    sync(engine, stream)
    assert invocation_rows(engine) == [
        ("paired", "navi", None, "ETIMEDOUT", 30000, "reported", 1, 2),
        ("paired", "zen", "M3", "Error", 12, "reported", 3, 4),
    ]
    rows = invocation_report(engine, now=NOW, by="status")["rows"]
    assert [(r["key"], r["failures"]) for r in rows] == [("ETIMEDOUT", 1), ("Error", 1)]


def test_recover_end_closes_killed_supervisors_start(engine, stream):
    # The supervisor died after the start; recover appends role null, duration null.
    stream.write_bytes(start("bulldozer", "M1", ts(0)) + recover("M1", ts(45)))
    sync(engine, stream)
    assert invocation_rows(engine) == [("recovered", "bulldozer", "M1", "INVOCATION_FAILURE", None, None, 1, 2)]
    report = invocation_report(engine, now=NOW)
    assert report["dangling"] == []  # no longer shown as working
    assert report["rows"][0]["failures_by_status"] == {"INVOCATION_FAILURE": 1}


def test_null_milestone(engine, stream):
    # planning (piledriver) and alt (instinct) carry no milestone binding.
    stream.write_bytes(start("piledriver", None, ts(0)) + end("piledriver", None, ts(2), "SUCCESS", 2000)
                       + start("instinct", None, ts(3)) + end("instinct", None, ts(4), "SUCCESS", 1000))
    sync(engine, stream)
    assert invocation_rows(engine) == [
        ("paired", "piledriver", None, "SUCCESS", 2000, "reported", 1, 2),
        ("paired", "instinct", None, "SUCCESS", 1000, "reported", 3, 4),
    ]
    rows = invocation_report(engine, now=NOW, by="milestone")["rows"]
    # nearest rank over [1000, 2000]: p50 rank 1, p95 rank 2
    assert [(r["key"], r["invocations"], r["failures"], r["p50_ms"], r["p95_ms"]) for r in rows] == [
        (None, 2, 0, 1000, 2000)]


def test_missing_end_is_dangling_with_age(engine, stream):
    stream.write_bytes(start("jaguar", "M4", ts(30)))
    sync(engine, stream)
    assert invocation_rows(engine) == [("dangling", "jaguar", "M4", None, None, None, 1, None)]
    report = invocation_report(engine, now=NOW)
    # NOW is 12:00:00, the start 10:30:00: 90 minutes ago.
    assert report["dangling"] == [{"role": "jaguar", "milestone": "M4", "started_at": norm(30),
                                   "age_ms": 90 * 60 * 1000, "path": str(stream), "line": 1,
                                   "machine": machine_source()}]
    assert report["rows"][0]["dangling"] == 1
    assert report["rows"][0]["failures"] == 0
    assert "1h30m" in to_text(report)


def test_end_without_start(engine, stream):
    # The start append was lost (best effort): the end is kept, never invented a start.
    stream.write_bytes(end("puma", "M1", ts(5), "ENOENT", 7))
    sync(engine, stream)
    assert invocation_rows(engine) == [("unmatched_end", "puma", "M1", "ENOENT", None, None, None, 1)]
    rows = invocation_report(engine, now=NOW)["rows"]
    assert [(r["key"], r["invocations"], r["failures"], r["max_ms"]) for r in rows] == [("puma", 1, 1, None)]


def test_interleaved_roles(engine, stream):
    stream.write_bytes(
        start("zen", "M1", ts(0))  # 1
        + start("bulldozer", "M2", ts(1))  # 2
        + start("jaguar", "M1", ts(2))  # 3
        + end("bulldozer", "M2", ts(3), "BLOCKED", 2000)  # 4
        + start("bulldozer", "M2", ts(4))  # 5
        + end("jaguar", "M1", ts(5), "READY", 3000)  # 6
        + end("zen", "M1", ts(6), "GO", 6000)  # 7
        + end("bulldozer", "M2", ts(7), "DONE", 3000)  # 8
    )
    sync(engine, stream)
    assert invocation_rows(engine) == [
        ("paired", "zen", "M1", "GO", 6000, "reported", 1, 7),
        ("paired", "bulldozer", "M2", "BLOCKED", 2000, "reported", 2, 4),
        ("paired", "jaguar", "M1", "READY", 3000, "reported", 3, 6),
        ("paired", "bulldozer", "M2", "DONE", 3000, "reported", 5, 8),
    ]
    rows = invocation_report(engine, now=NOW)["rows"]
    # BLOCKED is a judged verdict, not a failure.
    assert [(r["key"], r["invocations"], r["failures"], r["max_ms"]) for r in rows] == [
        ("bulldozer", 2, 0, 3000), ("jaguar", 1, 0, 3000), ("zen", 1, 0, 6000)]


def test_null_duration_falls_back_to_timestamps(engine, stream):
    stream.write_bytes(start("navi", None, ts(0)) + end("navi", None, ts(0, 2, 250), "OBSERVED", None))
    sync(engine, stream)
    assert invocation_rows(engine) == [("paired", "navi", None, "OBSERVED", 2250, "timestamps", 1, 2)]


# --------------------------------------------------------------------------- resuming


def test_start_in_one_sync_end_in_the_next(engine, stream):
    first = start("zen", "M1", ts(0))
    stream.write_bytes(first)
    report = sync(engine, stream)
    assert report.events_ingested == 1
    assert invocation_rows(engine) == [("dangling", "zen", "M1", None, None, None, 1, None)]
    assert len(invocation_report(engine, now=NOW)["dangling"]) == 1

    second = end("zen", "M1", ts(1), "NO-GO", 60000)
    append(stream, second)
    report = sync(engine, stream)
    assert (report.events_ingested, report.bytes_read) == (1, len(second))  # only the new line is read
    assert invocation_rows(engine) == [("paired", "zen", "M1", "NO-GO", 60000, "reported", 1, 2)]
    assert invocation_report(engine, now=NOW)["dangling"] == []
    with engine.connect() as conn:
        offset = conn.execute(select(schema.streams.c.end_offset)).scalar_one()
    assert offset == len(first) + len(second)


def test_appended_between_syncs_equals_one_read(engine, stream, tmp_path):
    lines = [start("bulldozer", "M1", ts(0)), start("zen", "M1", ts(1)),
             end("bulldozer", "M1", ts(2), "DONE", 2000), start("navi", None, ts(3)),
             recover("M1", ts(4)), start("puma", "M2", ts(5)), end("puma", "M2", ts(6), "ACCEPT", 1000)]
    for line in lines:  # one sync per appended line
        append(stream, line)
        sync(engine, stream)
    stepwise = invocation_rows(engine)
    other = tmp_path / "other" / "events.jsonl"
    other.parent.mkdir()
    other.write_bytes(b"".join(lines))
    sync(engine, other)
    t = schema.invocations
    with engine.connect() as conn:
        ids = dict(conn.execute(select(schema.streams.c.path, schema.streams.c.id)).all())
        at_once = [tuple(r)[1:] for r in conn.execute(
            select(t.c.file_pk, t.c.outcome, t.c.role, t.c.milestone, t.c.status, t.c.duration_ms,
                   t.c.duration_source, t.c.start_line, t.c.end_line)
            .where(t.c.file_pk == ids[str(other)]).order_by(t.c.seq))]
    assert stepwise[: len(at_once)] == at_once
    # recover closes everything open at line 5 (zen and navi), bulldozer was already done.
    assert at_once == [
        ("paired", "bulldozer", "M1", "DONE", 2000, "reported", 1, 3),
        ("recovered", "zen", "M1", "INVOCATION_FAILURE", None, None, 2, 5),
        ("recovered", "navi", None, "INVOCATION_FAILURE", None, None, 4, 5),
        ("paired", "puma", "M2", "ACCEPT", 1000, "reported", 6, 7),
    ]


def test_half_written_last_line_waits(engine, stream):
    whole = start("bulldozer", "M1", ts(0))
    tail = end("bulldozer", "M1", ts(1), "DONE", 1000)
    stream.write_bytes(whole + tail[:20])  # the runner is mid-append
    report = sync(engine, stream)
    assert (report.events_ingested, report.problems) == (1, [])
    assert invocation_rows(engine) == [("dangling", "bulldozer", "M1", None, None, None, 1, None)]
    f = schema.streams
    with engine.connect() as conn:
        state = conn.execute(select(f.c.end_offset, f.c.next_line, f.c.size)).one()
    assert tuple(state) == (len(whole), 2, len(whole) + 20)  # the offset waits before the partial line

    append(stream, tail[20:])
    report = sync(engine, stream)
    assert (report.events_ingested, report.problems) == (1, [])
    assert invocation_rows(engine) == [("paired", "bulldozer", "M1", "DONE", 1000, "reported", 1, 2)]
    with engine.connect() as conn:
        state = conn.execute(select(f.c.end_offset, f.c.next_line, f.c.size)).one()
    assert tuple(state) == (len(whole) + len(tail), 3, len(whole) + len(tail))


def _line_count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT COUNT(*) FROM invocation_lines")).scalar_one()


def test_replaced_file_is_rebuilt_without_duplicates(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + end("zen", "M1", ts(1), "GO", 1000))
    sync(engine, stream)
    # Atomic replace (new inode) with other content.
    replacement = stream.with_name("events.jsonl.new")
    replacement.write_bytes(start("navi", None, ts(5)) + end("navi", None, ts(6), "DONE", 1000)
                            + start("jaguar", "M2", ts(7)))
    os.replace(replacement, stream)
    report = sync(engine, stream)
    assert report.events_ingested == 3
    assert invocation_rows(engine) == [
        ("paired", "navi", None, "DONE", 1000, "reported", 1, 2),
        ("dangling", "jaguar", "M2", None, None, None, 3, None),
    ]
    assert _line_count(engine) == 3
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM streams WHERE kind = 'invocations'")).scalar_one() == 1


def test_truncated_file_is_rebuilt(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + end("zen", "M1", ts(1), "GO", 1000) + start("zen", "M1", ts(2)))
    sync(engine, stream)
    with open(stream, "r+b") as f:  # same inode, shrunk
        f.truncate(0)
        f.write(start("puma", "M3", ts(9)))
    sync(engine, stream)
    assert invocation_rows(engine) == [("dangling", "puma", "M3", None, None, None, 1, None)]
    assert _line_count(engine) == 1


def test_rewritten_head_same_size_is_rebuilt(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)))
    sync(engine, stream)
    with open(stream, "r+b") as f:  # same inode, same size, different head, then grown
        f.write(start("zen", "M9", ts(0)))
        f.write(end("zen", "M9", ts(1), "GO", 1000))
    sync(engine, stream)
    assert invocation_rows(engine) == [("paired", "zen", "M9", "GO", 1000, "reported", 1, 2)]
    assert _line_count(engine) == 2


def test_a_runaway_line_cut_off_does_not_swallow_the_lines_appended_after_it(engine, stream):
    """A torn line longer than the cap, still being scanned for its end, is cut off (the
    file truncated in place to the last whole line) and the runner appends again: the
    bytes scanned are gone, so what follows the last whole line is read as lines."""
    first = start("zen", "M1", ts(0))
    stream.write_bytes(first + b'{"ts":"' + b"r" * (MAX_LINE_BYTES + 10))
    report = sync(engine, stream)
    assert [(p.offset, p.reason) for p in report.problems] == [(len(first), RUNAWAY_REASON)]
    with open(stream, "r+b") as f:  # same inode, cut back to the last newline
        f.truncate(len(first))
    append(stream, end("zen", "M1", ts(1), "GO", 1000) + start("puma", "M2", ts(2)))
    report = sync(engine, stream)
    assert (report.events_ingested, report.problems) == (2, [])
    assert invocation_rows(engine) == [("paired", "zen", "M1", "GO", 1000, "reported", 1, 2),
                                       ("dangling", "puma", "M2", None, None, None, 3, None)]


def test_second_sync_changes_nothing(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + b"{broken\n" + end("zen", "M1", ts(1), "GO", 1000)
                       + start("bulldozer", "M2", ts(2)) + b'{"ts":"2024-05-01T10:0')
    sync(engine, stream)
    before = dump(engine)
    report = sync(engine, stream)
    assert report.events_ingested == 0
    assert report.problems == []  # bad lines are not re-read
    assert dump(engine) == before
    report = sync(engine, stream)
    assert dump(engine) == before


def test_unchanged_complete_file_is_not_read_again(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)))
    sync(engine, stream)
    report = sync(engine, stream)
    assert (report.events_ingested, report.bytes_read, report.problems) == (0, 0, [])


def test_source_file_untouched(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + b"garbage\n" + end("zen", "M1", ts(1), "GO", 1000)
                       + b'{"partial')
    os.utime(stream, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = (stream.read_bytes(), stream.stat().st_mtime_ns, stream.stat().st_mode, sorted(os.listdir(stream.parent)))
    sync(engine, stream)
    sync(engine, stream)
    after = (stream.read_bytes(), stream.stat().st_mtime_ns, stream.stat().st_mode, sorted(os.listdir(stream.parent)))
    assert after == before


# --------------------------------------------------------------------------- bad input


def test_bad_lines_recorded_with_offset_and_skipped(engine, stream):
    good1 = start("zen", "M1", ts(0))
    bad_json = b"{not json\n"
    bad_event = orjson.dumps({"ts": ts(1), "role": "zen", "milestone": "M1", "event": "begin"}) + b"\n"
    bad_ts = orjson.dumps({"ts": "yesterday", "role": "zen", "milestone": "M1", "event": "start"}) + b"\n"
    good2 = end("zen", "M1", ts(2), "GO", 2000)
    stream.write_bytes(good1 + bad_json + bad_event + bad_ts + b"\n" + good2)
    report = sync(engine, stream)
    offsets = [len(good1), len(good1 + bad_json), len(good1 + bad_json + bad_event)]
    assert [(p.path, p.offset) for p in report.problems] == [(str(stream), o) for o in offsets]
    assert "not JSON" in report.problems[0].reason
    assert "event must be 'start' or 'end'" in report.problems[1].reason
    assert "bad ts" in report.problems[2].reason
    assert report.events_ingested == 2
    # Line numbers stay physical: the blank line (5) and bad lines still count.
    assert invocation_rows(engine) == [("paired", "zen", "M1", "GO", 2000, "reported", 1, 6)]
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT path, byte_offset FROM problems ORDER BY byte_offset")).all()
    assert [tuple(r) for r in stored] == [(str(stream), o) for o in offsets]


def test_unstorable_lines_are_problems_not_crashes(engine, stream):
    # Valid JSON the ledger cannot hold faithfully: NUL in a string (PostgreSQL text),
    # an instant outside the UTC range, a duration beyond 64-bit sums.
    nul = orjson.dumps({"ts": ts(0), "role": "ze\u0000n", "milestone": "M1", "event": "start"}) + b"\n"
    year1 = orjson.dumps({"ts": "0001-01-01T00:00:00+01:00", "role": "zen", "milestone": "M1",
                          "event": "start"}) + b"\n"
    huge = end("zen", "M1", ts(1), "DONE", 2**64 - 1)
    huger = b'{"ts":"2024-05-01T10:01:00Z","role":"zen","milestone":"M1","event":"end","status":"DONE",' \
            b'"duration_ms":99999999999999999999}\n'  # (a float to JSON parsers past 64 bits)
    good = start("navi", None, ts(2))
    stream.write_bytes(nul + year1 + huge + huger + good)
    report = sync(engine, stream)
    assert [p.offset for p in report.problems] == [0, len(nul), len(nul + year1), len(nul + year1 + huge)]
    assert "NUL" in report.problems[0].reason
    assert "representable" in report.problems[1].reason
    assert "beyond" in report.problems[2].reason and "beyond" in report.problems[3].reason
    assert invocation_rows(engine) == [("dangling", "navi", None, None, None, None, 5, None)]


def test_missing_file_is_not_damage_but_missing_directory_is(engine, stream, tmp_path):
    report = sync(engine, stream)  # created lazily by the runner: nothing yet
    assert (report.events_ingested, report.problems) == (0, [])
    wrong = tmp_path / "no-such-dir" / "events.jsonl"
    report = sync(engine, wrong)
    assert [(p.path, p.offset) for p in report.problems] == [(str(wrong), 0)]
    assert "does not exist" in report.problems[0].reason


def _open_problems(engine) -> set[tuple[str, int, str]]:
    with engine.connect() as conn:
        return {tuple(r) for r in conn.execute(text(
            "SELECT path, byte_offset, reason FROM problems WHERE resolved_at IS NULL"))}


def test_a_stream_that_could_not_be_opened_for_a_while_is_read_from_its_first_byte_once_it_can_be(
        engine, stream, tmp_path):
    """For one sync a FIFO is at the stream's path (never read) while the runner goes on
    appending to the file; then the file is back at its path, the same inode. The next read
    starts from its first byte: the FIFO's problem is resolved, the bad line stays open,
    and the rows are what one read of the file makes."""
    stream.write_bytes(start("zen", "M1", ts(0)) + b"{not json\n")
    sync(engine, stream)
    bad_line = _open_problems(engine)
    assert [(path, offset) for path, offset, _ in bad_line] == [(str(stream), len(start("zen", "M1", ts(0))))]
    aside = tmp_path / "aside.jsonl"
    os.rename(stream, aside)
    os.mkfifo(stream)
    append(aside, end("zen", "M1", ts(1), "GO", 1000))
    report = sync(engine, stream)
    assert [(p.path, p.offset) for p in report.problems] == [(str(stream), 0)]
    assert "not a regular file" in report.problems[0].reason
    os.unlink(stream)
    os.rename(aside, stream)
    sync(engine, stream)
    assert _open_problems(engine) == bad_line
    assert invocation_rows(engine) == [("paired", "zen", "M1", "GO", 1000, "reported", 1, 3)]


def test_vanished_file_keeps_its_rows(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + end("zen", "M1", ts(1), "GO", 1000))
    sync(engine, stream)
    stream.unlink()
    sync(engine, stream)
    assert invocation_rows(engine) == [("paired", "zen", "M1", "GO", 1000, "reported", 1, 2)]


def _stream_paths(engine) -> list[str]:
    with engine.connect() as conn:
        return [p for (p,) in conn.execute(text("SELECT path FROM streams WHERE kind = 'invocations' ORDER BY id"))]


PAIR = ("paired", "bulldozer", "m1", "DONE", 5000, "reported", 1, 2)


def test_a_stream_named_through_a_symlink_is_the_file_it_leads_to(engine, stream, tmp_path):
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000))
    alias = tmp_path / "alias"
    alias.symlink_to(stream.parent, target_is_directory=True)
    sync(engine, stream, alias / "events.jsonl")
    sync(engine, alias / "events.jsonl")
    # One start and one end in the file: one invocation, its two lines stored once.
    assert invocation_rows(engine) == [PAIR]
    assert _line_count(engine) == 2
    assert _stream_paths(engine) == [str(stream.resolve())]


def test_a_stream_an_older_omg_ledger_keyed_by_its_symlink_is_not_read_again(engine, stream, tmp_path):
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000))
    alias = tmp_path / "alias"
    alias.symlink_to(stream.parent, target_is_directory=True)
    sync(engine, stream)
    with engine.begin() as conn:  # the key an older omg-ledger gave it: the path as given
        conn.execute(text("UPDATE streams SET path = :p"), {"p": str(alias / "events.jsonl")})
    report = sync(engine, stream)
    assert report.events_ingested == 0 and report.bytes_read == 0
    assert invocation_rows(engine) == [PAIR] and _line_count(engine) == 2
    assert _stream_paths(engine) == [str(stream.resolve())]


def test_a_moved_stream_is_the_same_stream_at_its_new_path(engine, stream, tmp_path):
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000))
    sync(engine, stream)
    moved = tmp_path / "moved"
    stream.parent.rename(moved)  # the same file (device and inode) under another path
    append(moved / "events.jsonl", start("zen", "M2", ts(1)))
    report = sync(engine, moved / "events.jsonl")
    assert report.events_ingested == 1  # only the appended line is read
    assert invocation_rows(engine) == [PAIR, ("dangling", "zen", "M2", None, None, None, 3, None)]
    assert _line_count(engine) == 3
    assert _stream_paths(engine) == [str((moved / "events.jsonl").resolve())]


def test_a_stream_moved_as_it_is_reads_nothing_again(engine, stream, tmp_path):
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000))
    sync(engine, stream)
    moved = tmp_path / "moved"
    stream.parent.rename(moved)  # (a rename changes the file's ctime, not its bytes)
    report = sync(engine, moved / "events.jsonl")
    assert (report.events_ingested, report.bytes_read) == (0, 0)
    assert invocation_rows(engine) == [PAIR] and _line_count(engine) == 2


def test_a_stream_moved_to_another_file_system_is_the_same_stream_at_its_new_path(engine, stream, tmp_path):
    """A move across file systems is a copy and an unlink: another inode (and device), the
    same bytes, nothing left at the old path. Its invocations are counted once, and the
    start still open is listed as working once, at the new path."""
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000)
                       + start("zen", "M2", ts(1)))
    sync(engine, stream)
    moved = tmp_path / "elsewhere" / "events.jsonl"
    moved.parent.mkdir()
    moved.write_bytes(stream.read_bytes())
    stream.unlink()
    append(moved, end("zen", "M2", ts(2), "GO", 60_000) + start("navi", None, ts(3)))
    sync(engine, moved)
    assert invocation_rows(engine) == [PAIR, ("paired", "zen", "M2", "GO", 60_000, "reported", 3, 4),
                                       ("dangling", "navi", None, None, None, None, 5, None)]
    assert _line_count(engine) == 5
    assert _stream_paths(engine) == [str(moved.resolve())]
    report = invocation_report(engine, now=NOW)
    assert report["total"]["invocations"] == 3
    assert [(d["role"], d["path"]) for d in report["dangling"]] == [("navi", str(moved.resolve()))]


def test_a_copy_beside_its_stream_is_a_stream_of_its_own(engine, stream, tmp_path):
    """A copy whose original is still at its path is another file (two runners' streams
    may begin alike): it is read as a stream of its own, the original's rows untouched."""
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000))
    sync(engine, stream)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(stream.read_bytes())
    sync(engine, copy)
    assert invocation_rows(engine) == [PAIR, PAIR]
    assert _stream_paths(engine) == [str(stream.resolve()), str(copy.resolve())]


def test_another_file_given_a_deleted_streams_inode_is_a_stream_of_its_own(engine, stream, tmp_path):
    """A file system hands a freed inode to the next file: same device and inode, other
    bytes. It is not the stream read before (whose history stays)."""
    stream.write_bytes(start("bulldozer", "m1", ts(0)) + end("bulldozer", "m1", ts(0, 5), "DONE", 5000))
    sync(engine, stream)
    stream.unlink()
    other = tmp_path / "other.jsonl"
    other.write_bytes(start("navi", None, ts(9)))
    info = other.stat()
    with engine.begin() as conn:  # as if the freed inode went to it
        conn.execute(text("UPDATE streams SET dev = :d, inode = :i"), {"d": info.st_dev, "i": info.st_ino})
    sync(engine, other)
    assert invocation_rows(engine) == [PAIR, ("dangling", "navi", None, None, None, None, 1, None)]
    assert _line_count(engine) == 3
    assert _stream_paths(engine) == [str(stream.resolve()), str(other.resolve())]


# --------------------------------------------------------------------------- report, view, query, CLI


def test_since_filters_rows_but_not_dangling(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + start("bulldozer", "M1", ts(10))
                       + end("bulldozer", "M1", ts(11), "DONE", 1000))
    sync(engine, stream)
    report = invocation_report(engine, now=NOW, since_us=us(5))
    assert [(r["key"], r["invocations"]) for r in report["rows"]] == [("bulldozer", 1)]
    assert [(d["role"], d["started_at"]) for d in report["dangling"]] == [("zen", norm(0))]
    assert report["since"] == norm(5)


def test_view_status_class_matches_python(engine, stream):
    statuses = ["DONE", "GO", "SUCCESS", "OBSERVED", "READY", "ACCEPT", "BLOCKED", "NEEDS_DEEP", "NO-GO",
                "NEEDS_CONFIRMATION", "TIMEOUT", "ETIMEDOUT", "Error", "done"]
    data = b"".join(start("r", f"M{i}", ts(i)) + end("r", f"M{i}", ts(i, 1), s, 1000) for i, s in enumerate(statuses))
    stream.write_bytes(data + start("r", "open", ts(59)))
    sync(engine, stream)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, status_class, path FROM v_invocations ORDER BY seq")).all()
    assert [(r.status, r.status_class) for r in rows] == [(s, classify_status(s)) for s in [*statuses, None]]
    assert {r.path for r in rows} == {str(stream)}


def test_saved_query_invocations_by_role(engine, stream):
    stream.write_bytes(start("zen", "M1", ts(0)) + end("zen", "M1", ts(1), "TIMEOUT", 5000)
                       + start("zen", "M1", ts(2)) + end("zen", "M1", ts(3), "NO-GO", 1000)
                       + start("navi", None, ts(4)) + recover(None, ts(5)))
    sync(engine, stream)
    # Through the saved-query runner (read-only connection, header defaults).
    from omg_ledger.reports.sql import run_saved, saved_query

    assert saved_query("invocations_by_role").summary.startswith("invocations_by_role:")
    every = run_saved(engine, "invocations_by_role").as_dict()
    later = run_saved(engine, "invocations_by_role", {"since": norm(2)}).as_dict()
    got = [(r["role"], r["invocations"], r["failures"], r["judged"], r["recovered"], r["max_ms"])
           for r in every["rows"]]
    assert got == [("navi", 1, 1, 0, 1, None), ("zen", 2, 1, 1, 0, 5000)]
    assert [(r["role"], r["invocations"]) for r in later["rows"]] == [("navi", 1), ("zen", 1)]


def test_cli_sync_and_invocations(db_url, stream, tmp_path):
    stream.write_bytes(start("zen", "M1", ts(0)) + end("zen", "M1", ts(1), "TIMEOUT", 5000)
                       + start("bulldozer", "M1", ts(2)))
    source = (stream.read_bytes(), stream.stat().st_mtime_ns)
    runner = CliRunner()
    env = {"OMG_LEDGER_DB": db_url, "OMG_HOME": str(tmp_path / "empty-home")}
    (tmp_path / "empty-home" / "runs").mkdir(parents=True)
    result = runner.invoke(main, ["sync", "--json", "--invocations", str(stream)], env=env)
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["events_ingested"] == 3

    result = runner.invoke(main, ["invocations", "--json", "--by", "role"], env=env)
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert [(r["key"], r["invocations"], r["failures"], r["p50_ms"], r["p95_ms"], r["max_ms"])
            for r in doc["rows"]] == [("bulldozer", 1, 0, None, None, None), ("zen", 1, 1, 5000, 5000, 5000)]
    assert [(d["role"], d["milestone"], d["started_at"]) for d in doc["dangling"]] == [("bulldozer", "M1", norm(2))]
    assert doc["dangling"][0]["age_ms"] > 0

    result = runner.invoke(main, ["invocations", "--csv", "--by", "status"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "key,invocations,failures,dangling,p50_ms,p95_ms,max_ms,failures_by_status,statuses",
        "TIMEOUT,1,1,0,5000,5000,5000,TIMEOUT=1,TIMEOUT=1",
        ",1,0,1,,,,,",
    ]
    result = runner.invoke(main, ["invocations", "--json", "--csv"], env=env)
    assert result.exit_code == 2

    # The env var works like the flag; a second sync reads nothing new.
    result = runner.invoke(main, ["sync", "--json"], env={**env, "OMG_LEDGER_INVOCATIONS": str(stream)})
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["events_ingested"] == 0
    assert (stream.read_bytes(), stream.stat().st_mtime_ns) == source


def test_text_and_csv_render_empty_ledger(engine):
    report = invocation_report(engine, now=NOW)
    assert report["rows"] == [] and report["dangling"] == [] and report["total"]["invocations"] == 0
    assert "sync --invocations" in to_text(report)
    assert to_csv(report) == "key,invocations,failures,dangling,p50_ms,p95_ms,max_ms,failures_by_status,statuses\n"


def test_head_fingerprint_is_of_the_file_head(engine, stream):
    data = start("zen", "M1", ts(0)) * 40  # longer than the 1024-byte head
    stream.write_bytes(data)
    sync(engine, stream)
    f = schema.streams
    with engine.connect() as conn:
        head_len, sha = conn.execute(select(f.c.head_len, f.c.head_sha256)).one()
    assert head_len == 1024
    assert sha == hashlib.sha256(data[:1024]).hexdigest()


def test_a_bad_line_names_its_line_number_in_the_file(engine, stream, tmp_path):
    """Line numbers as an editor shows them (1-based; blank lines count), in the problem
    the ledger keeps and on `sync`'s stderr."""
    good = start("zen", "M1", ts(0))
    bad_json = b"{not json\n"
    nul = orjson.dumps({"ts": ts(1), "role": "ze\u0000n", "milestone": "M1", "event": "start"}) + b"\n"
    stream.write_bytes(good + b"\n" + bad_json + good + nul)  # bad lines: 3 and 5
    report = sync(engine, stream)
    assert [p.reason.split(":", 1)[0] for p in report.problems] == ["line 3", "line 5"]
    with engine.connect() as conn:
        stored = [r[0] for r in conn.execute(text("SELECT reason FROM problems ORDER BY byte_offset"))]
    assert [r.split(":", 1)[0] for r in stored] == ["line 3", "line 5"]
    if engine.dialect.name != "sqlite":
        return
    other = tmp_path / "other.sqlite"
    # No --home, and no home at the default place (~/.oh-my-graph): the streams alone are synced.
    result = CliRunner().invoke(main, ["sync", "--db", str(other), "--invocations", str(stream)],
                                env={"HOME": str(tmp_path / "user"), "OMG_HOME": None})
    problem_lines = [ln for ln in result.stderr.splitlines() if str(stream) in ln]
    assert len(problem_lines) == 2, result.stderr
    assert "line 3:" in problem_lines[0] and "line 5:" in problem_lines[1], result.stderr
    assert result.exit_code == 0 and len(result.stderr.splitlines()) == 2, result.stderr  # (no home problem)


def _dev_done_and_qa_working(tmp_path, stream) -> Path:
    """A ledger of a runner stream of 2024-05-01 10:00-10:02 UTC: dev's M1 done, qa's M1 started."""
    stream.write_bytes(start("dev", "M1", ts(0)) + end("dev", "M1", ts(1), "DONE", 60_000)
                       + start("qa", "M1", ts(2)))
    db = tmp_path / "ledger.sqlite"
    home = tmp_path / "home"
    home.mkdir()
    synced = CliRunner().invoke(main, ["sync", "--db", str(db), "--home", str(home), "--invocations", str(stream)])
    assert synced.exit_code == 0, synced.output
    return db


def test_the_command_reads_now_from_omg_ledger_now(tmp_path, stream):
    """As every reading command does: a replay at a fixed instant reproduces."""
    db = _dev_done_and_qa_working(tmp_path, stream)
    runner = CliRunner()
    # The stream is of 2024-05-01 10:00 (ts above): at 11:00 that day, the 3 hours before hold it.
    result = runner.invoke(main, ["invocations", "--db", str(db), "--since", "3h", "--json"],
                           env={"OMG_LEDGER_NOW": "2024-05-01T11:00:00Z"})
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert (doc["now"], doc["since"]) == ("2024-05-01T11:00:00.000000Z", "2024-05-01T08:00:00.000000Z")
    assert [(r["key"], r["invocations"]) for r in doc["rows"]] == [("dev", 1), ("qa", 1)]  # (a start counts)
    assert [d["role"] for d in doc["dangling"]] == ["qa"]


def test_invocations_reads_and_shows_times_in_tz(tmp_path, stream):
    """--tz as every reading command takes it: a date without an offset is midnight there,
    and the starts with no end are shown there. The stream is of 2024-05-01 10:00-10:02 UTC,
    which is 19:00-19:02 in Tokyo (+09:00) and 06:00-06:02 in New York (-04:00, summer time)."""
    db = _dev_done_and_qa_working(tmp_path, stream)
    runner = CliRunner()
    env = {"OMG_LEDGER_NOW": "2024-05-01T11:00:00Z"}

    def counted(*args: str) -> tuple[str, list]:
        result = runner.invoke(main, ["invocations", "--db", str(db), "--json", *args], env=env)
        assert result.exit_code == 0, result.output
        doc = orjson.loads(result.stdout)
        return doc["since"], [(r["key"], r["invocations"]) for r in doc["rows"]]

    # Tokyo's 2024-05-01 began at 2024-04-30 15:00 UTC: both starts are in it.
    assert counted("--since", "2024-05-01", "--tz", "Asia/Tokyo") == (
        "2024-04-30T15:00:00.000000Z", [("dev", 1), ("qa", 1)])
    # New York's 2024-05-01 begins at 04:00 UTC, Tokyo's 2024-05-02 at 2024-05-01 15:00 UTC: after them.
    assert counted("--since", "2024-05-01", "--tz", "America/New_York")[0] == "2024-05-01T04:00:00.000000Z"
    assert counted("--since", "2024-05-02", "--tz", "Asia/Tokyo") == ("2024-05-01T15:00:00.000000Z", [])

    text = runner.invoke(main, ["invocations", "--db", str(db), "--tz", "Asia/Tokyo"], env=env).output
    assert "STARTED (Asia/Tokyo)" in text and "2024-05-01 19:02:00.000+0900" in text
    text = runner.invoke(main, ["invocations", "--db", str(db)], env=env).output
    assert "STARTED (UTC)" in text and "2024-05-01 10:02:00.000Z" in text


def test_a_line_older_rules_refused_is_read_once_the_rules_take_it(engine, stream, monkeypatch):
    """A ledger an older release synced: its rules refused the end whose status is a
    DOMException's numeric code (`error.code || error.name`), so the start read as working.
    The first sync of rules that take it reads the stream again from its first byte: the
    invocation is paired and the problem resolved."""
    from omg_ledger import derive, invocation_sync

    stream.write_bytes(start("zen", "M1", ts(0)) + end("zen", "M1", ts(0, 30), 23, 30000))
    strict = invocation_sync.parse_invocation_line

    def older_rules(raw, line_no, offset):
        line = strict(raw, line_no, offset)
        if line.raw.get("status") == 23:
            raise invocation_sync.InvocationLineError("status must be a string or null, got 23", line_no, offset)
        return line

    with monkeypatch.context() as m:
        m.setattr(invocation_sync, "parse_invocation_line", older_rules)
        first = sync(engine, stream)
    assert [p.offset for p in first.problems] == [len(start("zen", "M1", ts(0)))]
    assert invocation_rows(engine) == [("dangling", "zen", "M1", None, None, None, 1, None)]
    with engine.begin() as conn:  # as that release left it: its rules' version
        conn.execute(text("UPDATE streams SET derivation_version = :v"), {"v": derive.DERIVATION_VERSION - 1})

    again = sync(engine, stream)
    assert again.problems == []
    assert invocation_rows(engine) == [("paired", "zen", "M1", "23", 30000, "reported", 1, 2)]
    with engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(text("SELECT resolved_at IS NOT NULL FROM problems"))] == [(True,)]
    assert sync(engine, stream).events_ingested == 0  # and then read on as before
