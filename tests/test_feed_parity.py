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

import json

from click.testing import CliRunner
from sqlalchemy import select, update

from omg_ledger import derive, schema
from omg_ledger.cli import main
from omg_ledger.db import open_ledger, write_transaction
from omg_ledger.reports.runs import show_run
from omg_ledger.sync import Home, rebuild, sync

from .builders import age_tree, ev, graph, write_run

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


def _line(second: int, **fields) -> dict:
    """A line with exactly ``fields`` besides ts (keys spelled as given)."""
    return {"ts": f"2026-11-29T10:00:{second:02d}.000000000Z", **fields}


def test_a_key_in_another_case_names_its_field_as_in_the_engine(db_url, tmp_path):
    home = tmp_path / "home"
    # encoding/json matches a key to a struct field exactly or else case-insensitively
    # (decode.go object(): byExactName, then byFoldedName[foldName(key)]; fold.go folds
    # ASCII letters, and U+017F and U+212A to S and K). runfeed.Event is such a struct
    # (runfeed.go:151-218), and so is TokenUsage (runfeed.go:221-226).
    write_run(home, "20261129-100000.000000003-1", [
        _line(0, schema=3, event="run_started", PHASE="planning"),
        # The unphased open commits the plan and carries the planner's accounting.
        _line(1, Schema=3, event="run_started", Cost_USD=0.125, usage={"Input_Tokens": 40}),
        _line(2, schema=3, event="node_started", node_id="a"),
        _line(3, schema=3, Event="node_passed", Node_ID="a", verdict="PASS", cost_usd=0.5,
              USAGE={"output_tokens": 5}),
        _line(4, schema=3, event="node_started", node_id="b"),
        # "cost_un\u212anown": KELVIN SIGN folds to K.
        _line(5, schema=3, event="node_failed", node_id="b", verdict="FAIL", **{"cost_un\u212anown": True}),
        # "\u017fchema": LONG S folds to S.
        _line(6, **{"\u017fchema": 3}, EVENT="run_finished", OutCome="paused"),
    ], lock=MARKED_FREE_LOCK)
    engine, problems = _sync(db_url, home)
    try:
        run = show_run(engine, "20261129-100000.000000003-1")
        # LastLeg (reader.go:167-197): the last run_started opens, run_finished closes with
        # outcome "paused" -> runstatus.Derive: PAUSED (runstatus.go:215).
        assert run["status"] == "PAUSED"
        # One scheduler leg: a planning open is not a leg (RUN-FEED.md, "Count legs by
        # run_started events with NO phase").
        assert run["leg_count"] == 1
        # No snapshot: ReadAccounting over the stream (runs.go:249-264, reader.go:31-43):
        # $0.125 + $0.5 known, b's call of unknown price, 40 input and 5 output tokens.
        assert (run["cost_nano_usd"], run["invocations"], run["unknown_cost_invocations"]) == (625 * N // 1000, 3, 1)
        assert (run["input_tokens"], run["output_tokens"]) == (40, 5)
        assert problems == []
        # Derived again from the stored lines alone: the same reading.
        rebuild(engine)
        again = show_run(engine, "20261129-100000.000000003-1")
        assert {k: again[k] for k in ("status", "leg_count", "cost_nano_usd", "unknown_cost_invocations")} == {
            "status": "PAUSED", "leg_count": 1, "cost_nano_usd": 625 * N // 1000, "unknown_cost_invocations": 1}
    finally:
        engine.dispose()


def test_two_spellings_of_one_field_are_a_duplicate_key(tmp_path):
    home = tmp_path / "home"
    # The engine reads the later one (each key assigns the same field); a key repeated
    # within one object is a problem here (README, Reliability: "Closed sets"), and two
    # spellings of one field are the same key to the engine.
    run_dir = write_run(home, "20261129-100000.000000004-1", [
        _line(0, schema=3, event="run_started"),
        _line(1, schema=3, event="run_finished", outcome="passed", Outcome="paused"),
    ])
    engine, problems = _sync(str(tmp_path / "l.sqlite"), home)
    try:
        first_line = len((run_dir / "events.jsonl").read_bytes().split(b"\n")[0]) + 1
        assert [(p.offset, p.reason) for p in problems] == [
            (first_line, "keys 'outcome' and 'Outcome' both name the field 'outcome' (the engine reads a key "
                         "in any case): a duplicate key")]
    finally:
        engine.dispose()


NEWER = ("event schema 4 is newer than this omg-ledger understands (max 3); ingestion of this file waits "
         "here for an upgrade")


def test_a_newer_schema_line_the_engine_decodes_stops_reading_whatever_its_fields(db_url, tmp_path):
    home = tmp_path / "home"
    # Walk decodes the line (every field of runfeed.Event has a value of its Go type) and,
    # its schema being newer than 3, refuses the stream (reader.go:85-87): `runs list`
    # shows no status for it (runs.go:166-169). The ts, the node event without a node_id
    # and the counter past 2^31 are this ledger's checks of schema-3 lines, not the
    # engine's reading of a newer one. Lines after it are not read either.
    cases = {
        "20261129-100000.000000005-1": {"ts": "the day after", "event": "run_finished", "outcome": "passed"},
        "20261129-100000.000000006-1": {"ts": "2026-11-29T10:00:09Z", "event": "node_passed", "retries": 2**40},
    }
    offsets = {}
    for run_id, newer in cases.items():
        head = [ev("run_started", 0), ev("node_started", 1, node_id="a")]
        run_dir = write_run(home, run_id, [*head, {"schema": 4, **newer}, ev("run_finished", 9, outcome="failed")],
                            lock=MARKED_FREE_LOCK)
        offsets[run_id] = sum(len(line) + 1 for line in (run_dir / "events.jsonl").read_bytes().split(b"\n")[:2])
    engine, problems = _sync(db_url, home)
    try:
        assert sorted((p.path.split("/")[-2], p.offset, p.reason) for p in problems) == sorted(
            (run_id, offset, NEWER) for run_id, offset in offsets.items())
        for run_id in cases:
            # Not ABANDONED from the lines before it: not known (status.derive).
            assert show_run(engine, run_id)["status"] == "NOT-KNOWN-YET"
    finally:
        engine.dispose()


def test_a_schema_beyond_64_bits_is_a_line_the_engine_skips(db_url, tmp_path):
    home = tmp_path / "home"
    # runfeed.Event.Schema is a Go int (64 bits): 2^63 does not decode, so Walk skips the
    # line (reader.go:82-84) and reads on; the run_finished after it closes the leg.
    run_dir = write_run(home, "20261129-100000.000000007-1", [
        ev("run_started", 0),
        {"schema": 2**63, "ts": "2026-11-29T10:00:01Z", "event": "run_started"},
        ev("run_finished", 2, outcome="failed"),
    ], lock=MARKED_FREE_LOCK)
    engine, problems = _sync(db_url, home)
    try:
        first = len((run_dir / "events.jsonl").read_bytes().split(b"\n")[0]) + 1
        assert [(p.offset, p.reason) for p in problems] == [
            (first, "missing or invalid 'schema': 9223372036854775808")]
        assert show_run(engine, "20261129-100000.000000007-1")["status"] == "FAIL"
    finally:
        engine.dispose()


def test_a_newer_schema_past_32_bits_waits_like_any_newer_schema(db_url, tmp_path):
    home = tmp_path / "home"
    # Schema 2^31 decodes into the engine's Go int: Walk refuses the stream
    # (reader.go:85-87), as for schema 4. The ledger waits at it, on either database.
    run_dir = write_run(home, "20261129-100000.000000008-1", [
        ev("run_started", 0),
        {"schema": 2**31, "ts": "2026-11-29T10:00:01Z", "event": "run_finished"},
    ], lock=MARKED_FREE_LOCK)
    engine, problems = _sync(db_url, home)
    try:
        first = len((run_dir / "events.jsonl").read_bytes().split(b"\n")[0]) + 1
        assert [(p.offset, p.reason) for p in problems] == [(first, NEWER.replace(" 4 ", f" {2**31} "))]
        assert show_run(engine, "20261129-100000.000000008-1")["status"] == "NOT-KNOWN-YET"
        # The next sync still waits there, and still reads nothing past it.
        again = sync(engine, [Home.from_path(str(home), "h")])
        assert again.events_ingested == 0
        assert show_run(engine, "20261129-100000.000000008-1")["status"] == "NOT-KNOWN-YET"
    finally:
        engine.dispose()


def test_a_lone_surrogate_escape_is_u_fffd_as_in_the_engine(db_url, tmp_path):
    home = tmp_path / "home"
    run_id = "20261129-100000.000000009-1"
    # encoding/json decodes a \u escape of a UTF-16 surrogate that is not half of a pair
    # as U+FFFD (decode.go unquoteBytes: "Invalid surrogate; fall back to replacement
    # rune"), without an error: Walk keeps the line (reader.go:82-84).
    run_dir = write_run(home, run_id, [
        ev("run_started", 0),
        ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.5, detail="half \ud83d of a pair"),
        ev("run_finished", 3, outcome="passed", detail="\udc00 then \ud83d\ude00"),
    ], state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.5}}}, lock=MARKED_FREE_LOCK)
    assert b"\\ud83d of" in (run_dir / "events.jsonl").read_bytes()  # (json.dumps writes the escape)
    engine, problems = _sync(db_url, home)
    try:
        run = show_run(engine, run_id)
        # Closed leg, every node PASS (runstatus.go:217-218); the $0.50 charge.
        assert (run["status"], run["cost_nano_usd"]) == ("PASS", N // 2)
        assert problems == []
        assert run["legs"][-1]["detail"] == "\ufffd then \U0001f600"
        assert [node["detail"] for node in run["nodes"]] == ["half \ufffd of a pair"]
        rebuild(engine)  # the stored line (its exact escapes) read again: the same
        assert show_run(engine, run_id)["legs"][-1]["detail"] == "\ufffd then \U0001f600"
    finally:
        engine.dispose()


def test_a_stored_line_this_version_refuses_derives_nothing(db_url, tmp_path):
    home = tmp_path / "home"
    run_id = "20261129-100000.000000010-1"
    write_run(home, run_id, [
        ev("run_started", 0),
        ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.5),
        ev("node_started", 3, node_id="b"),
        ev("node_passed", 4, node_id="b", verdict="PASS", cost_usd=0.25),
        ev("run_finished", 5, outcome="passed"),
    ])
    engine, problems = _sync(db_url, home)
    try:
        assert problems == [] and show_run(engine, run_id)["cost_nano_usd"] == 3 * N // 4
        # What an omg-ledger that took "Cost_USD" for no field stored: the line holding it
        # was an event. This version reads that key as cost_usd, whose value is no number:
        # the line is refused (a sync of such a stream now would not store it) and its
        # derivation is left out, rather than stopping every sync of the ledger.
        ev_c = schema.events.c
        with write_transaction(engine) as conn:
            (raw,) = conn.execute(select(ev_c.raw).where(ev_c.line_no == 3)).one()
            conn.execute(update(schema.events).where(ev_c.line_no == 3).values(
                raw=raw[:-1] + ',"Cost_USD":"half a dollar"}'))
            conn.execute(update(schema.runs).values(derivation_version=derive.DERIVATION_VERSION - 1))
        sync(engine, [Home.from_path(str(home), "h")])  # derives the run again
        run = show_run(engine, run_id)
        assert (run["cost_nano_usd"], run["invocations"]) == (N // 4, 1)
        assert {node["node_id"]: node["state"] for node in run["nodes"]}["b"] == "settled"
    finally:
        engine.dispose()


def test_a_ledger_whose_older_rules_refused_a_line_or_a_snapshot_reads_them_after_the_bump(
        db_url, tmp_path, monkeypatch):
    """A ledger written by rules that refused a line (a null field, before version 10) or a
    state.json (a negative budget_usd, before 13) never stored the line, and stored the
    document as an error: re-deriving its stored facts alone cannot find them. After the
    bump, the next sync reads those runs' files again from zero: the run settles as the
    engine reads it, its problems resolve, and the ledger equals a cold sync's."""
    from omg_ledger import ingest, snapshot
    from omg_ledger.tail import Rejected

    home = tmp_path / "home"
    refused_line, refused_state = "20261129-100000.000000011-1", "20261129-100000.000000012-1"
    write_run(home, refused_line, [
        ev("run_started", 0), ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.5, provenance="exit-only"),
        ev("run_finished", 3, outcome="passed", detail=None),
    ], state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.5}}}, lock=MARKED_FREE_LOCK)
    write_run(home, refused_state, [
        ev("run_started", 0), ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.25, provenance="exit-only"),
        ev("run_finished", 3, outcome="passed"),
    ], state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.25, "budget_usd": -1}}},
        lock=MARKED_FREE_LOCK)

    older = open_ledger(db_url)
    with monkeypatch.context() as rules:  # the older rules, as they read these two files
        parse = ingest.parse_stream_line
        rules.setattr(ingest, "parse_stream_line", lambda line, *args: (
            Rejected("'detail' must be a string") if b'"detail":null' in line else parse(line, *args)))
        rules.setattr(snapshot, "_budget", lambda value: snapshot._number(value))
        rules.setattr(snapshot, "_plain_record", lambda node_id, record: False)  # every record checked
        rules.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION - 1)
        sync(older, [Home.from_path(str(home), "h")], workers=0)
        assert show_run(older, refused_line)["status"] == "ABANDONED"  # its run_finished never stored
        assert show_run(older, refused_state)["has_snapshot"] is False

    report = sync(older, [Home.from_path(str(home), "h")], workers=0)
    assert (report.runs_changed, report.runs_rederived) == (2, 0)  # read again, not only re-derived
    assert show_run(older, refused_line)["status"] == "PASS"
    assert show_run(older, refused_state)["status"] == "PASS" and show_run(older, refused_state)["has_snapshot"]
    with older.connect() as conn:
        assert conn.execute(select(schema.problems.c.path).where(schema.problems.c.resolved_at.is_(None))).all() == []
    older.dispose()
    _equals_a_cold_sync(db_url, home, tmp_path)


def _cli(*args: str) -> dict | list:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _with_bytes(run_dir, marks: dict[str, bytes], name: str = "events.jsonl") -> None:
    """The run's file with each mark (a JSON string's content) replaced by raw bytes."""
    path = run_dir / name
    data = path.read_bytes()
    for mark, written in marks.items():
        assert data.count(mark.encode()) == 1
        data = data.replace(mark.encode(), written)
    path.write_bytes(data)


def test_bytes_that_are_not_utf8_in_a_string_are_u_fffd_as_in_the_engine(db_url, tmp_path):
    """encoding/json takes any byte inside a string (scanner.go stateInString refuses only
    control characters) and unquote coerces what is not UTF-8: utf8.DecodeRune answers
    (RuneError, 1) at such a byte, so each one is U+FFFD (decode.go unquoteBytes, "Coerce to
    well-formed UTF-8"). Walk keeps the line (reader.go:82-84) and ReadAccounting counts its
    cost; a byte outside a string is a syntax error to it, the line skipped."""
    home = tmp_path / "home"
    run_id, broken = "20261129-100000.000000013-1", "20261129-100000.000000014-1"
    run_dir = write_run(home, run_id, [
        ev("run_started", 0), ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.5, provenance="exit-only", detail="@1@"),
        ev("run_finished", 3, outcome="passed", detail="@2@"),
    ], state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.5}}}, lock=MARKED_FREE_LOCK)
    # A 3-byte sequence cut after two bytes is two U+FFFD (Python's "replace" makes one).
    _with_bytes(run_dir, {"@1@": b"cut \xe2\x82 here", "@2@": b"\xff\xfe\xc3"})
    broken_dir = write_run(home, broken, [
        ev("run_started", 0), ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.25, detail="x"),
    ], lock=MARKED_FREE_LOCK)
    stream = broken_dir / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    stream.write_bytes(lines[0] + lines[1] + lines[2][:-2] + b"\xff}\n")  # after the last value
    bad_offset = len(lines[0]) + len(lines[1])

    db = db_url
    report = _cli("sync", "--db", db, "--home", f"h={home}")
    assert [(p["path"], p["offset"]) for p in report["problems"]] == [(str(stream), bad_offset)]
    run = _cli("show", "--db", db, run_id)
    # Closed leg, every node PASS (runstatus.go:217-218); the $0.50 on the node_passed line.
    assert (run["status"], run["cost_nano_usd"]) == ("PASS", N // 2)
    assert [node["detail"] for node in run["nodes"]] == ["cut \ufffd\ufffd here"]
    assert run["legs"][-1]["detail"] == "\ufffd\ufffd\ufffd"
    assert _cli("show", "--db", db, broken)["cost_nano_usd"] == 0  # its one paid line skipped
    engine = open_ledger(db_url)
    try:
        ev_c = schema.events.c
        with engine.connect() as conn:
            stored = conn.execute(select(ev_c.raw).where(ev_c.line_no == 3, ev_c.raw.contains("cut"))).scalar_one()
        # events.raw: the line as the engine decodes its bytes (a TEXT column holds no other).
        assert stored == (run_dir / "events.jsonl").read_bytes().splitlines()[2].replace(
            b"\xe2\x82", "\ufffd\ufffd".encode()).decode()
        rebuild(engine)  # the stored line read again: the same
        assert show_run(engine, run_id)["nodes"][0]["detail"] == "cut \ufffd\ufffd here"
        assert show_run(engine, run_id)["cost_nano_usd"] == N // 2
    finally:
        engine.dispose()


def test_a_ledger_whose_older_rules_refused_bytes_that_are_not_utf8_counts_them_after_the_bump(
        db_url, tmp_path, monkeypatch):
    """A ledger synced by rules that refused a line holding bytes that are not UTF-8 in a
    string (orjson's "str is not valid UTF-8") never stored it, and left a problem on the
    stream: after the bump the next sync reads the stream again, stores the line as the
    engine decodes it, counts its money, resolves the problem, and equals a cold sync."""
    import orjson

    from omg_ledger import ingest
    from omg_ledger.tail import Rejected

    home = tmp_path / "home"
    run_id = "20261129-100000.000000015-1"
    run_dir = write_run(home, run_id, [
        ev("run_started", 0), ev("node_started", 1, node_id="a"),
        ev("node_failed", 2, node_id="a", verdict="FAIL", cost_usd=0.125, detail="@1@"),
        ev("node_retried", 3, node_id="a", retries=1),
        ev("node_started", 4, node_id="a"),
        ev("node_passed", 5, node_id="a", verdict="PASS", cost_usd=0.5, provenance="exit-only"),
        ev("run_finished", 6, outcome="passed", detail="@2@"),
    ], lock=MARKED_FREE_LOCK)
    _with_bytes(run_dir, {"@1@": b"stderr: \xc3(", "@2@": b"\xe2\x82"})
    stream = run_dir / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)

    def refusing(line: bytes, *args):  # the release's reading: orjson's refusal of the bytes
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                return Rejected(f"not JSON: {exc}")
        return parse(line, *args)

    parse = ingest.parse_stream_line
    with monkeypatch.context() as rules:
        rules.setattr(ingest, "parse_stream_line", refusing)
        rules.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION - 1)
        before = _cli("sync", "--db", db_url, "--home", f"h={home}")
        # The node_failed line and the run_finished refused: $0.50 of $0.625, the leg open.
        assert [p["offset"] for p in before["problems"]] == [len(b"".join(lines[:2])), len(b"".join(lines[:6]))]
        run = _cli("show", "--db", db_url, run_id)
        assert (run["status"], run["cost_nano_usd"]) == ("ABANDONED", N // 2)

    after = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert (after["runs_changed"], after["runs_rederived"], after["problems"]) == (1, 0, [])
    run = _cli("show", "--db", db_url, run_id)
    # The leg closed, no snapshot: FAIL (runstatus.go Derive: PASS needs a snapshot whose every
    # node completed); $0.125 + $0.50, as ReadAccounting sums the lines (reader.go:31-43).
    assert (run["status"], run["cost_nano_usd"]) == ("FAIL", 5 * N // 8)
    assert run["legs"][-1]["detail"] == "\ufffd\ufffd"
    assert _cli("problems", "--db", db_url) == []
    _equals_a_cold_sync(db_url, home, tmp_path)


def _equals_a_cold_sync(db_url: str, home, tmp_path) -> None:
    """The ledger a bump brought up to date holds what a cold sync of ``home`` makes (its
    problems aside: a log, where the older rules' problems stay, resolved)."""
    from .ledger_dump import diff, dump

    older = open_ledger(db_url)
    cold = open_ledger(str(tmp_path / "cold.sqlite"))
    try:
        sync(cold, [Home.from_path(str(home), "h")], workers=0)
        theirs, ours = dump(str(tmp_path / "cold.sqlite")), dump(older)
        for data in (theirs, ours):
            data.pop("problems")
        assert ours == theirs, diff(theirs, ours)
    finally:
        older.dispose()
        cold.dispose()


def _state_with_bytes_that_are_not_utf8(home) -> tuple[str, str]:
    """Two runs whose state.json holds bytes that are not UTF-8 inside strings: one with its
    stream, one without (its money is the snapshot's). (run ids)"""
    streamed, stream_less = "20261129-100000.000000016-1", "20261129-100000.000000017-1"
    state = {"graph": graph("a"), "goal": {"text": "@1@", "cycle": 1},
             "nodes": {"a": {"verdict": "PASS", "cost_usd": 0.5, "detail": "@2@"}}}
    run_dir = write_run(home, streamed, [
        ev("run_started", 0), ev("node_started", 1, node_id="a"),
        ev("node_passed", 2, node_id="a", verdict="PASS", cost_usd=0.5, provenance="exit-only"),
        ev("run_finished", 3, outcome="passed"),
    ], state=state, lock=MARKED_FREE_LOCK)
    _with_bytes(run_dir, {"@1@": b"caf\xe9", "@2@": b"cut \xe2\x82"}, "state.json")
    run_dir = write_run(home, stream_less, state={**state, "planning_cost_usd": 0.25})
    _with_bytes(run_dir, {"@1@": b"caf\xe9", "@2@": b"cut \xe2\x82"}, "state.json")
    return streamed, stream_less


def test_bytes_that_are_not_utf8_in_a_state_json_string_are_u_fffd_as_in_the_engine(db_url, tmp_path):
    """The engine reads state.json with encoding/json too (runstate.Load, runstate.go:610-623):
    a byte that is not UTF-8 inside a string is U+FFFD, and `runs list` uses the snapshot
    (runs.go:249-300). Outside a string it is a syntax error, the snapshot refused."""
    home = tmp_path / "home"
    streamed, stream_less = _state_with_bytes_that_are_not_utf8(home)
    report = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert report["problems"] == []
    run = _cli("show", "--db", db_url, streamed)
    # Closed leg, the snapshot's every node PASS: PASS (runstatus.go Derive); the $0.50 line.
    assert (run["status"], run["cost_nano_usd"], run["has_snapshot"]) == ("PASS", N // 2, True)
    # No stream: the snapshot's money, planning $0.25 + node a's $0.50 (runs.go:270-282).
    run = _cli("show", "--db", db_url, stream_less)
    assert (run["status"], run["cost_nano_usd"], run["has_snapshot"]) == ("PASS", 3 * N // 4, True)
    assert [node["detail"] for node in run["nodes"]] == ["cut \ufffd\ufffd"]
    engine = open_ledger(db_url)
    try:
        files = schema.snapshot_files.c
        with engine.connect() as conn:
            contents = conn.execute(select(files.content).where(files.name == "state.json")).scalars().all()
        # The text stored, and derived from again, is the file as the engine decodes it.
        assert [text.count('"caf\ufffd"') + text.count('"cut \ufffd\ufffd"') for text in contents] == [2, 2]
        rebuild(engine)
        assert show_run(engine, stream_less)["cost_nano_usd"] == 3 * N // 4
    finally:
        engine.dispose()


def test_a_ledger_whose_older_rules_refused_a_state_json_not_utf8_reads_it_after_the_bump(
        db_url, tmp_path, monkeypatch):
    """A ledger synced by rules that refused a state.json holding bytes that are not UTF-8
    in a string stored it as an error (its text decoded with Python's "replace"): after the
    bump the next sync reads the file again, the snapshot's money counts, the problems
    resolve, and the ledger equals a cold sync."""
    import orjson

    from omg_ledger import feed, snapshot
    from omg_ledger.snapshot import BadSnapshot

    home = tmp_path / "home"
    streamed, stream_less = _state_with_bytes_that_are_not_utf8(home)
    parse = snapshot.PARSERS["state.json"]

    def refusing(content: bytes) -> dict:  # the release's reading: orjson's refusal of the bytes
        try:
            orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise BadSnapshot(f"state.json is not JSON: {exc}") from exc
        return parse(content)

    with monkeypatch.context() as rules:
        rules.setitem(snapshot.PARSERS, "state.json", refusing)
        rules.setattr(feed, "as_go_decodes", lambda data: data.decode("utf-8", "replace"))
        rules.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION - 1)
        before = _cli("sync", "--db", db_url, "--home", f"h={home}")
        assert len(before["problems"]) == 2
        # Stored without a snapshot, and no money at all for the copy without a stream.
        assert _cli("show", "--db", db_url, streamed)["has_snapshot"] is False
        run = _cli("show", "--db", db_url, stream_less)
        assert (run["has_snapshot"], run["cost_nano_usd"]) == (False, 0)

    after = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert (after["runs_changed"], after["runs_rederived"], after["problems"]) == (2, 0, [])
    assert _cli("show", "--db", db_url, streamed)["status"] == "PASS"
    run = _cli("show", "--db", db_url, stream_less)
    assert (run["status"], run["cost_nano_usd"]) == ("PASS", 3 * N // 4)  # planning $0.25 + node a's $0.50
    assert _cli("problems", "--db", db_url) == []
    _equals_a_cold_sync(db_url, home, tmp_path)


# --- state.json as runstate.Load decodes it ------------------------------------------
# runstate.Load (runstate.go:610-623) is json.Unmarshal into runstate.Snapshot, whose
# fields and tags are runstate.go:147-174 (NodeRecord), 183-188 (TokenUsage), 265-274
# (GoalRef), 290-314 (BuildEvidence), 320-332 (GateState) and 395-491 (Snapshot). The
# engine's `runs list` bills a run from it (runs.go:270-282: planning cost plus every
# record's cost_usd and usage) and runstatus.Derive calls a closed leg PASS when the
# records whose verdict is "PASS" are as many as the graph's nodes (runstatus.go:217).

S01, S20, S24 = "20261129-181512.929654081-1", "20261129-181519.193612939-1", "20261129-181521.715955568-1"
S35, S36 = "20261129-181524.062929782-1", "20261129-181524.161957784-1"


def _corpus_run(corpus_home, home, run_id: str, *, stream: bool = True):
    """A copy of the corpus run ``run_id`` in ``home`` (without its events.jsonl unless
    ``stream``), with its state.json as a dict to edit and a function writing it back
    as the engine does (indented by two)."""
    import shutil

    run_dir = home / "runs" / run_id
    shutil.copytree(corpus_home / "runs" / run_id, run_dir)
    for path in (run_dir, *run_dir.iterdir()):
        path.chmod(0o700 if path.is_dir() else 0o600)
    if not stream:
        (run_dir / "events.jsonl").unlink()
    state = json.loads((run_dir / "state.json").read_text())
    return run_dir, state, lambda: (run_dir / "state.json").write_text(json.dumps(state, indent=2))


def _renamed(obj: dict, old: str, new: str) -> None:
    obj[new] = obj.pop(old)


def _state_keys_in_another_case(corpus_home, home) -> None:
    # s01 (4 nodes, every record PASS): each record's verdict spelled "Verdict".
    _, state, write = _corpus_run(corpus_home, home, S01)
    for record in state["nodes"].values():
        _renamed(record, "verdict", "Verdict")
    write()
    # s24 (auto, planning $0.0456; survey $0.021, edit $0.033, check $0.009), its stream gone.
    _, state, write = _corpus_run(corpus_home, home, S24, stream=False)
    _renamed(state, "planning_cost_usd", "Planning_Cost_USD")
    _renamed(state["nodes"]["edit"], "cost_usd", "COST_USD")
    write()
    # s35 (auto, planning $0.0456; change $0.027, wrapup $0.006), its stream gone.
    _, state, write = _corpus_run(corpus_home, home, S35, stream=False)
    _renamed(state, "schema", "Schema")
    _renamed(state, "nodes", "NODES")
    write()


def _state_nulls(corpus_home, home) -> None:
    # s20 (dev $0.05, e2e $0.02): e2e's node_passed dropped from the stream (the record is
    # its only word), and nulls where the engine writes values.
    run_dir, state, write = _corpus_run(corpus_home, home, S20)
    lines = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    assert '"node_passed","node_id":"e2e"' in lines[4]
    (run_dir / "events.jsonl").write_text("".join(lines[:4] + lines[5:]))
    state["runtime"] = None
    state["nodes"]["e2e"].update(cost_unknown=None, judged=None, round=None, budget_usd=None, detail=None)
    write()
    # s36 (auto, planning $0.0456; change $0.027, wrapup $0.006), its stream gone.
    _, state, write = _corpus_run(corpus_home, home, S36, stream=False)
    state["graph_source_path"] = None
    state["nodes"]["ghost"] = None
    state["nodes"]["wrapup"]["usage"] = {"input_tokens": 120, "output_tokens": None}
    write()


def test_a_state_json_key_in_another_case_names_its_field_as_in_the_engine(db_url, tmp_path, corpus_home):
    """encoding/json matches a key to a field exactly or else in any case (decode.go
    object: byExactName, then byFoldedName), so "Verdict" is NodeRecord.Verdict,
    "Planning_Cost_USD" Snapshot.PlanningCostUSD, "Schema" Snapshot.Schema."""
    home = tmp_path / "home"
    _state_keys_in_another_case(corpus_home, home)
    report = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert report["problems"] == []
    run = _cli("show", "--db", db_url, S01)
    # Closed leg, 4 records whose verdict is PASS for a graph of 4 nodes: PASS; the stream's $0.0807.
    assert (run["status"], run["nodes_passed"], run["cost_nano_usd"]) == ("PASS", 4, 80_700_000)
    run = _cli("show", "--db", db_url, S24)
    # No stream: what runs list counts, $0.0456 + $0.021 + $0.033 + $0.009; every record PASS.
    assert (run["status"], run["cost_nano_usd"]) == ("PASS", 108_600_000)
    run = _cli("show", "--db", db_url, S35)
    # Schema 3 as Load wants it (runstate.go:619), the records read: $0.0456 + $0.027 + $0.006.
    assert (run["status"], run["has_snapshot"], run["cost_nano_usd"]) == ("PASS", True, 78_600_000)


def test_two_spellings_of_one_state_json_field_are_a_duplicate_key(db_url, tmp_path, corpus_home):
    """Go would read the later of the two (both decode into one field); like a key written
    twice, in the stream or here, it is a problem: the snapshot is damaged, the stream's
    own "passed" and money stand (README, Reliability)."""
    home = tmp_path / "home"
    run_dir, state, write = _corpus_run(corpus_home, home, S20)
    state["nodes"]["dev"]["VERDICT"] = "FAIL"
    write()
    report = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert [(p["path"], p["reason"]) for p in report["problems"]] == [(
        str(run_dir / "state.json"),
        "state.json has the keys 'verdict' and 'VERDICT' in one object, which both name the field 'verdict' "
        "(the engine reads a key in any case): a duplicate key")]
    run = _cli("show", "--db", db_url, S20)
    assert (run["status"], run["has_snapshot"], run["cost_nano_usd"]) == ("PASS", False, 70_000_000)


def test_a_null_in_state_json_is_the_engine_s_zero_value(db_url, tmp_path, corpus_home):
    """A JSON null leaves a field its zero value (decode.go literalStore, case 'n'), with no
    error, and a null element of a map is that element's zero value (decode.go object:
    the map element is set whatever it decoded to): a NodeRecord with no verdict and no cost."""
    home = tmp_path / "home"
    _state_nulls(corpus_home, home)
    report = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert report["problems"] == []
    run = _cli("show", "--db", db_url, S20)
    # Both records PASS for a graph of 2: PASS. runs list's $0.05 + $0.02: the dropped
    # e2e terminal is recovered from its record (cost_usd $0.02, cost_unknown false).
    assert (run["status"], run["cost_nano_usd"]) == ("PASS", 70_000_000)
    assert {node["node_id"]: (node["verdict"], node["verdict_source"]) for node in run["nodes"]} == {
        "dev": ("PASS", "stream"), "e2e": ("PASS", "snapshot")}
    run = _cli("show", "--db", db_url, S36)
    # $0.0456 + $0.027 + $0.006 and wrapup's 120 input tokens; "ghost" is a record with no
    # verdict (not one of the graph's 2 nodes, not counted by Derive): PASS.
    assert (run["status"], run["cost_nano_usd"], run["input_tokens"], run["output_tokens"]) == (
        "PASS", 78_600_000, 120, 0)
    assert {node["node_id"]: node["verdict"] for node in run["nodes"]} == {
        "change": "PASS", "wrapup": "PASS", "ghost": None}


def test_a_ledger_whose_older_rules_misread_or_refused_a_state_json_reads_it_after_the_bump(
        db_url, tmp_path, monkeypatch, corpus_home):
    """A ledger synced by rules that read state.json's keys only as spelled and refused a
    null took "Verdict" for no field (a stored document, re-derived after the bump) and
    refused "Schema" and the nulls (stored as errors, read again after the bump): the
    next sync corrects both, resolves the problems and equals a cold sync."""
    from omg_ledger import snapshot

    home = tmp_path / "home"
    _state_keys_in_another_case(corpus_home, home)
    _state_nulls(corpus_home, home)
    age_tree(home)  # (a fresh directory mtime is re-listed by every sync: not what is counted here)
    with monkeypatch.context() as rules:  # the older rules: the document as parsed
        rules.setattr(snapshot, "as_the_engine_reads", lambda data: data)
        rules.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION - 1)
        before = _cli("sync", "--db", db_url, "--home", f"h={home}")
        assert sorted(p["path"].split("/")[-2] for p in before["problems"]) == [S20, S35, S36]
        assert _cli("show", "--db", db_url, S01)["status"] == "FAIL"
        assert _cli("show", "--db", db_url, S36)["cost_nano_usd"] == 0

    after = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert (after["runs_changed"], after["runs_rederived"], after["problems"]) == (3, 2, [])
    assert [_cli("show", "--db", db_url, run_id)["status"] for run_id in (S01, S20, S24, S35, S36)] == ["PASS"] * 5
    assert [_cli("show", "--db", db_url, run_id)["cost_nano_usd"] for run_id in (S01, S20, S24, S35, S36)] == [
        80_700_000, 70_000_000, 108_600_000, 78_600_000, 78_600_000]
    assert _cli("problems", "--db", db_url) == []
    _equals_a_cold_sync(db_url, home, tmp_path)


def _state_the_engine_cannot_decode(corpus_home, home) -> None:
    # s01 (4 nodes): join's node_passed dropped from the stream, and continue_on_fail (a Go
    # bool) holding a string.
    run_dir, state, write = _corpus_run(corpus_home, home, S01)
    lines = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    assert '"node_passed","node_id":"join"' in lines[8]
    (run_dir / "events.jsonl").write_text("".join(lines[:8] + lines[9:]))
    state["continue_on_fail"] = "yes"
    write()
    # s24, its stream gone: planning_cost_unknown (a Go bool) holding a string.
    _, state, write = _corpus_run(corpus_home, home, S24, stream=False)
    state["planning_cost_unknown"] = "no"
    write()


def test_a_state_json_the_engine_cannot_decode_is_damaged(db_url, tmp_path, corpus_home):
    """A value of another type than its field's is an error for the whole json.Unmarshal
    (decode.go: d.saveError, returned at the end), so runstate.Load fails: runstatus.Gather
    returns the error (runstatus.go:285-302) and `runs list` drops the row, counting it
    skipped (runs.go:149-153, 233-236). Here it is a damaged snapshot, a problem: the
    stream's own "passed" and money stand (README, Reliability), and nothing is recovered
    or billed from a record the engine never reads."""
    home = tmp_path / "home"
    _state_the_engine_cannot_decode(corpus_home, home)
    report = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert sorted((p["path"].split("/")[-2], p["reason"]) for p in report["problems"]) == [
        (S01, "state.json continue_on_fail must be a boolean, got 'yes': the engine cannot read it (runstate.Load)"),
        (S24, "state.json planning_cost_unknown must be a boolean, got 'no': the engine cannot read it "
              "(runstate.Load)")]
    run = _cli("show", "--db", db_url, S01)
    # The stream's plan $0.0211 + left $0.0342 + right $0.0155; join has no terminal anywhere.
    assert (run["status"], run["has_snapshot"], run["cost_nano_usd"]) == ("PASS", False, 70_800_000)
    assert {node["node_id"]: node["verdict"] for node in run["nodes"]}["join"] is None
    run = _cli("show", "--db", db_url, S24)
    assert (run["has_snapshot"], run["cost_nano_usd"], run["invocations"], run["unknown_cost_invocations"]) == (
        False, 0, 0, 0)


def test_a_ledger_whose_older_rules_took_a_state_json_the_engine_cannot_decode_refuses_it_after_the_bump(
        db_url, tmp_path, monkeypatch, corpus_home):
    """Older rules stored such a document as read (no error): after the bump its
    re-derivation refuses it as a read would, the stored file's error and the problem
    included, and the ledger equals a cold sync."""
    from omg_ledger import snapshot

    home = tmp_path / "home"
    _state_the_engine_cannot_decode(corpus_home, home)
    age_tree(home)
    with monkeypatch.context() as rules:  # the older rules: types checked only where the ledger reads them
        rules.setattr(snapshot, "go_type_error", lambda value, kind: None)
        rules.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION - 1)
        assert _cli("sync", "--db", db_url, "--home", f"h={home}")["problems"] == []
        # join recovered from its record; the planner's call unknown (a truthy string).
        assert _cli("show", "--db", db_url, S01)["cost_nano_usd"] == 80_700_000
        assert _cli("show", "--db", db_url, S24)["unknown_cost_invocations"] == 1

    after = _cli("sync", "--db", db_url, "--home", f"h={home}")
    assert (after["runs_changed"], after["runs_rederived"]) == (0, 2)
    assert (_cli("show", "--db", db_url, S01)["cost_nano_usd"], _cli("show", "--db", db_url, S24)["invocations"]) == (
        70_800_000, 0)
    assert sorted(p["path"].split("/")[-2] for p in _cli("problems", "--db", db_url)) == [S01, S24]
    _equals_a_cold_sync(db_url, home, tmp_path)


def test_pass_counts_the_snapshots_pass_records_against_the_graphs_nodes_as_the_engine(db_url, tmp_path,
                                                                                       corpus_home):
    """runstatus.Gather: CompletedNodes is len(snap.CompletedNodes()) — every record whose
    verdict is PASS, of any node id — and TotalNodes len(g.Nodes); Derive says PASS of a
    closed leg only when the two are equal. A record of a node not in the graph counts."""
    home = tmp_path / "home"
    # s01: 4 nodes, every record PASS, and a fifth PASS record of no node: 5 != 4, FAIL.
    _, state, write = _corpus_run(corpus_home, home, S01)
    state["nodes"]["ghost"] = {"verdict": "PASS"}
    write()
    # s20: dev and e2e; e2e's record FAIL and a PASS record of no node: 2 == 2, PASS.
    _, state, write = _corpus_run(corpus_home, home, S20)
    assert sorted(state["nodes"]) == ["dev", "e2e"]
    state["nodes"]["e2e"]["verdict"] = "FAIL"
    state["nodes"]["ghost"] = {"verdict": "PASS"}
    write()
    age_tree(home)
    _cli("sync", "--db", db_url, "--home", f"h={home}")
    statuses = {r["run_id"]: r["status"] for r in _cli("runs", "--db", db_url)}
    assert statuses == {S01: "FAIL", S20: "PASS"}
    assert (_cli("show", "--db", db_url, S01)["status"], _cli("show", "--db", db_url, S20)["status"]) == ("FAIL", "PASS")
