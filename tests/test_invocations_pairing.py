"""Parsing and pairing of the runner's events.jsonl stream (omg_ledger.invocations).

Expectations are written by hand from the runner contract
(/work/shared/seeds/runner-invocation-events.txt):

* start ``{"ts","role","milestone","event":"start"}`` before each invocation;
* end ``{"ts","role","milestone","event":"end","status","duration_ms"}`` after it
  settles -- success, transport failure (runner error code such as TIMEOUT),
  throw (``error.code || error.name``: ETIMEDOUT, ENOENT, Error) alike;
* ``recover`` writes one end with role null, duration null, INVOCATION_FAILURE
  that closes the dangling start of a killed supervisor;
* milestone is null for planning (piledriver), alt (instinct) and navi;
* appends are best-effort: a line may be missing.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omg_ledger.invocations import (
    InvocationLine,
    InvocationLineError,
    PairedInvocation,
    classify_status,
    is_recover_end,
    pair_invocations,
    parse_invocation_line,
    percentile,
    summarize,
)


def ts(second: int) -> str:
    return f"2024-05-01T10:00:{second:02d}.000Z"


def start(role, milestone, at=0, **extra):
    return {"ts": ts(at), "role": role, "milestone": milestone, "event": "start", **extra}


def end(role, milestone, status, duration_ms, at=1, **extra):
    return {
        "ts": ts(at),
        "role": role,
        "milestone": milestone,
        "event": "end",
        "status": status,
        "duration_ms": duration_ms,
        **extra,
    }


def recover(milestone=None, at=59):
    return end(None, milestone, "INVOCATION_FAILURE", None, at=at)


def to_lines(objs) -> list[InvocationLine]:
    """Serialise like the runner (one JSON object + newline) and parse back."""
    out, offset = [], 0
    for line_no, obj in enumerate(objs, start=1):
        raw = orjson.dumps(obj) + b"\n"
        out.append(parse_invocation_line(raw, line_no, offset))
        offset += len(raw)
    return out


def shape(row: PairedInvocation):
    return (
        row.outcome,
        row.role,
        row.milestone,
        row.status,
        row.duration_ms,
        row.duration_source,
        row.start_line,
        row.end_line,
    )


# (id, stream, expected rows as (outcome, role, milestone, status, duration_ms,
#  duration_source, start_line, end_line) in output order)
PAIRING_CASES = [
    (
        "paired_success_bulldozer_done",
        [start("bulldozer", "M1"), end("bulldozer", "M1", "DONE", 1500)],
        [("paired", "bulldozer", "M1", "DONE", 1500, "reported", 1, 2)],
    ),
    (
        "judged_verdict_zen_no_go_is_still_paired",
        [start("zen", "M1"), end("zen", "M1", "NO-GO", 42)],
        [("paired", "zen", "M1", "NO-GO", 42, "reported", 1, 2)],
    ),
    (
        "transport_failure_timeout",
        [start("zen", "M1"), end("zen", "M1", "TIMEOUT", 600000)],
        [("paired", "zen", "M1", "TIMEOUT", 600000, "reported", 1, 2)],
    ),
    (
        "transport_failure_spawn_error_specialist",
        [start("strix-halo", "M4"), end("strix-halo", "M4", "SPAWN_ERROR", 3)],
        [("paired", "strix-halo", "M4", "SPAWN_ERROR", 3, "reported", 1, 2)],
    ),
    (
        "thrown_error_code_etimedout",
        [start("navi", None), end("navi", None, "ETIMEDOUT", 30000)],
        [("paired", "navi", None, "ETIMEDOUT", 30000, "reported", 1, 2)],
    ),
    (
        "thrown_plain_error_zen_envelope_rejection",
        [start("zen", "M2"), end("zen", "M2", "Error", 12)],
        [("paired", "zen", "M2", "Error", 12, "reported", 1, 2)],
    ),
    (
        "reported_zero_duration_is_kept_not_recomputed",
        [start("puma", "M1", at=0), end("puma", "M1", "ACCEPT", 0, at=5)],
        [("paired", "puma", "M1", "ACCEPT", 0, "reported", 1, 2)],
    ),
    (
        "recover_closes_killed_supervisors_start",
        [start("bulldozer", "M3"), recover("M3")],
        [("recovered", "bulldozer", "M3", "INVOCATION_FAILURE", None, None, 1, 2)],
    ),
    (
        "recover_with_null_milestone_closes_named_milestone_start",
        [start("bulldozer", "M3"), recover(None)],
        [("recovered", "bulldozer", "M3", "INVOCATION_FAILURE", None, None, 1, 2)],
    ),
    (
        "recover_closes_every_open_start_ledger_has_no_active_role",
        [start("piledriver", None), start("jaguar", "M1"), start("puma", "M1"), recover("M1")],
        [
            ("recovered", "piledriver", None, "INVOCATION_FAILURE", None, None, 1, 4),
            ("recovered", "jaguar", "M1", "INVOCATION_FAILURE", None, None, 2, 4),
            ("recovered", "puma", "M1", "INVOCATION_FAILURE", None, None, 3, 4),
        ],
    ),
    (
        "recover_leaves_already_settled_invocations_alone",
        [
            start("zen", "M1"),
            end("zen", "M1", "GO", 10),
            start("bulldozer", "M1"),
            recover("M1"),
        ],
        [
            ("paired", "zen", "M1", "GO", 10, "reported", 1, 2),
            ("recovered", "bulldozer", "M1", "INVOCATION_FAILURE", None, None, 3, 4),
        ],
    ),
    (
        "recover_with_nothing_open_is_kept_as_unmatched_end",
        [recover("M1")],
        [("unmatched_end", None, "M1", "INVOCATION_FAILURE", None, None, None, 1)],
    ),
    (
        "second_recover_finds_nothing_open",
        [start("navi", None), recover(), recover()],
        [
            ("recovered", "navi", None, "INVOCATION_FAILURE", None, None, 1, 2),
            ("unmatched_end", None, None, "INVOCATION_FAILURE", None, None, None, 3),
        ],
    ),
    (
        "late_end_after_recover_is_unmatched",
        [start("bulldozer", "M1"), recover("M1"), end("bulldozer", "M1", "DONE", 9)],
        [
            ("recovered", "bulldozer", "M1", "INVOCATION_FAILURE", None, None, 1, 2),
            ("unmatched_end", "bulldozer", "M1", "DONE", None, None, None, 3),
        ],
    ),
    (
        "starts_after_recover_are_not_touched_by_it",
        [start("zen", "M1"), recover("M1"), start("zen", "M1"), end("zen", "M1", "GO", 7)],
        [
            ("recovered", "zen", "M1", "INVOCATION_FAILURE", None, None, 1, 2),
            ("paired", "zen", "M1", "GO", 7, "reported", 3, 4),
        ],
    ),
    (
        "null_milestone_planning_piledriver",
        [start("piledriver", None), end("piledriver", None, "SUCCESS", 800)],
        [("paired", "piledriver", None, "SUCCESS", 800, "reported", 1, 2)],
    ),
    (
        "null_milestone_does_not_match_a_named_milestone",
        [start("instinct", None), end("instinct", "M1", "SUCCESS", 5)],
        [
            ("dangling", "instinct", None, None, None, None, 1, None),
            ("unmatched_end", "instinct", "M1", "SUCCESS", None, None, None, 2),
        ],
    ),
    (
        "missing_end_is_dangling",
        [start("bulldozer", "M1")],
        [("dangling", "bulldozer", "M1", None, None, None, 1, None)],
    ),
    (
        "end_without_start_is_unmatched",
        [end("bulldozer", "M1", "DONE", 5)],
        [("unmatched_end", "bulldozer", "M1", "DONE", None, None, None, 1)],
    ),
    (
        "end_of_other_role_does_not_close_a_start",
        [start("zen", "M1"), end("bulldozer", "M1", "DONE", 5)],
        [
            ("dangling", "zen", "M1", None, None, None, 1, None),
            ("unmatched_end", "bulldozer", "M1", "DONE", None, None, None, 2),
        ],
    ),
    (
        "interleaved_roles",
        [
            start("bulldozer", "M1", at=0),
            start("jaguar", "M1", at=1),
            start("navi", None, at=2),
            end("jaguar", "M1", "READY", 200, at=3),
            end("bulldozer", "M1", "BLOCKED", 900, at=4),
            end("navi", None, "OBSERVED", 50, at=5),
        ],
        [
            ("paired", "bulldozer", "M1", "BLOCKED", 900, "reported", 1, 5),
            ("paired", "jaguar", "M1", "READY", 200, "reported", 2, 4),
            ("paired", "navi", None, "OBSERVED", 50, "reported", 3, 6),
        ],
    ),
    (
        "same_role_different_milestones_are_separate",
        [
            start("bulldozer", "M1"),
            start("bulldozer", "M2"),
            end("bulldozer", "M2", "NEEDS_DEEP", 20),
            end("bulldozer", "M1", "DONE", 10),
        ],
        [
            ("paired", "bulldozer", "M1", "DONE", 10, "reported", 1, 4),
            ("paired", "bulldozer", "M2", "NEEDS_DEEP", 20, "reported", 2, 3),
        ],
    ),
    (
        "concurrent_same_role_and_milestone_oldest_closed_first",
        [
            start("puma", "M1", at=0),
            start("puma", "M1", at=1),
            end("puma", "M1", "ACCEPT", 10, at=2),
            end("puma", "M1", "SPAWN_ERROR", 20, at=3),
        ],
        [
            ("paired", "puma", "M1", "ACCEPT", 10, "reported", 1, 3),
            ("paired", "puma", "M1", "SPAWN_ERROR", 20, "reported", 2, 4),
        ],
    ),
    (
        "concurrent_same_key_one_end_lost_newest_dangles",
        [start("bobcat", "M2"), start("bobcat", "M2"), end("bobcat", "M2", "READY", 4)],
        [
            ("paired", "bobcat", "M2", "READY", 4, "reported", 1, 3),
            ("dangling", "bobcat", "M2", None, None, None, 2, None),
        ],
    ),
    (
        "duration_from_timestamps_when_duration_null",
        [
            {"ts": "2024-05-01T10:00:00.000Z", "role": "zen", "milestone": "M1", "event": "start"},
            {
                "ts": "2024-05-01T10:00:01.250Z",
                "role": "zen",
                "milestone": "M1",
                "event": "end",
                "status": "GO",
                "duration_ms": None,
            },
        ],
        [("paired", "zen", "M1", "GO", 1250, "timestamps", 1, 2)],
    ),
    (
        "duration_from_timestamps_across_offsets",
        [
            {"ts": "2024-05-01T10:00:00Z", "role": "zen", "milestone": "M1", "event": "start"},
            {
                "ts": "2024-05-01T12:00:02.5+02:00",
                "role": "zen",
                "milestone": "M1",
                "event": "end",
                "status": "GO",
                "duration_ms": None,
            },
        ],
        [("paired", "zen", "M1", "GO", 2500, "timestamps", 1, 2)],
    ),
    (
        "clock_backwards_with_null_duration_gives_no_duration",
        [start("zen", "M1", at=9), end("zen", "M1", "GO", None, at=3)],
        [("paired", "zen", "M1", "GO", None, None, 1, 2)],
    ),
    (
        "unmatched_ends_ordered_by_their_end_line",
        [
            end("navi", None, "DONE", 1),
            start("zen", "M1"),
            end("zen", "M1", "GO", 2),
            end("jaguar", "M1", "READY", 3),
        ],
        [
            ("unmatched_end", "navi", None, "DONE", None, None, None, 1),
            ("paired", "zen", "M1", "GO", 2, "reported", 2, 3),
            ("unmatched_end", "jaguar", "M1", "READY", None, None, None, 4),
        ],
    ),
    ("empty_stream", [], []),
]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [(s, e) for _, s, e in PAIRING_CASES],
    ids=[case_id for case_id, _, _ in PAIRING_CASES],
)
def test_pairing(stream, expected):
    rows = pair_invocations(to_lines(stream))
    assert [shape(r) for r in rows] == expected
    assert [r.seq for r in rows] == list(range(len(expected)))


def test_pairing_carries_timestamps_and_is_deterministic():
    stream = [start("zen", "M1", at=3), end("zen", "M1", "GO", 10, at=4), start("navi", None, at=5)]
    lines = to_lines(stream)
    rows = pair_invocations(lines)
    assert (rows[0].started_at, rows[0].ended_at) == (ts(3), ts(4))
    assert (rows[1].started_at, rows[1].ended_at) == (ts(5), None)
    assert pair_invocations(iter(lines)) == rows


# --------------------------------------------------------------------------- parsing

GOOD_TS = '"2024-05-01T10:00:00.000Z"'

MALFORMED_CASES = [
    ("not_json", b"hello world\n", "not JSON"),
    ("truncated_json", b'{"ts": "2024-05-01T10:00:00Z", "role": "zen"', "not JSON"),
    ("trailing_garbage", b'{"event": "start"} tail', "not JSON"),
    ("nan_is_not_json", b'{"event": "end", "duration_ms": NaN}', "not JSON"),
    ("invalid_utf8", b'{"event": "\xff"}', "not JSON"),
    ("empty_line", b"\n", "empty line"),
    ("array", b'[{"event": "start"}]', "not a JSON object: got list"),
    ("string", b'"start"', "not a JSON object: got str"),
    ("null", b"null", "not a JSON object"),
    (
        "missing_event",
        b'{"ts": ' + GOOD_TS.encode() + b', "role": "zen", "milestone": "M1"}',
        "missing field 'event'",
    ),
    (
        "unknown_event",
        b'{"ts": ' + GOOD_TS.encode() + b', "event": "begin"}',
        "event must be 'start' or 'end', got 'begin'",
    ),
    ("event_not_string", b'{"event": ["start"]}', "event must be 'start' or 'end'"),
    ("missing_ts", b'{"event": "start", "role": "zen", "milestone": null}', "missing field 'ts'"),
    (
        "ts_number",
        b'{"event": "start", "ts": 1714557600000}',
        "ts must be an RFC 3339 string, got 1714557600000",
    ),
    ("ts_words", b'{"event": "start", "ts": "yesterday"}', "bad ts 'yesterday'"),
    (
        "ts_without_offset",
        b'{"event": "start", "ts": "2024-05-01T10:00:00"}',
        "not an RFC 3339 date-time",
    ),
    ("ts_date_only", b'{"event": "start", "ts": "2024-05-01"}', "not an RFC 3339 date-time"),
    (
        "ts_impossible_date",
        b'{"event": "start", "ts": "2024-02-30T10:00:00Z"}',
        "not a valid date-time",
    ),
    (
        "missing_role",
        b'{"event": "start", "ts": ' + GOOD_TS.encode() + b', "milestone": null}',
        "missing field 'role'",
    ),
    (
        "role_number",
        b'{"event": "start", "ts": ' + GOOD_TS.encode() + b', "role": 5, "milestone": null}',
        "role must be a string or null, got 5",
    ),
    (
        "milestone_object",
        b'{"event": "start", "ts": '
        + GOOD_TS.encode()
        + b', "role": "zen", "milestone": {"id": 1}}',
        "milestone must be a string or null",
    ),
]


def _end_bytes(**fields) -> bytes:
    obj = {"ts": "2024-05-01T10:00:00.000Z", "role": "zen", "milestone": "M1", "event": "end"}
    obj.update(fields)
    return orjson.dumps(obj)


MALFORMED_CASES += [
    ("end_missing_status", _end_bytes(duration_ms=1), "missing field 'status'"),
    (
        "end_null_status",
        _end_bytes(status=None, duration_ms=1),
        "status must be a string on an end line",
    ),
    ("end_missing_duration", _end_bytes(status="DONE"), "missing field 'duration_ms'"),
    (
        "duration_string",
        _end_bytes(status="DONE", duration_ms="abc"),
        "duration_ms must be a non-negative number or null, got 'abc'",
    ),
    ("duration_numeric_string", _end_bytes(status="DONE", duration_ms="12"), "got '12'"),
    (
        "duration_bool",
        _end_bytes(status="DONE", duration_ms=True),
        "duration_ms must be a non-negative number or null, got True",
    ),
    ("duration_negative", _end_bytes(status="DONE", duration_ms=-1), "got -1"),
    ("status_bool", _end_bytes(status=True, duration_ms=1), "status must be a string or null, got True"),
    ("status_fraction", _end_bytes(status=2.5, duration_ms=1), "status must be a string or null, got 2.5"),
    (
        "duration_on_start_still_checked",
        b'{"ts":"2024-05-01T10:00:00Z","role":"zen","milestone":"M1","event":"start","duration_ms":-5}',
        "got -5",
    ),
]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [(raw, reason) for _, raw, reason in MALFORMED_CASES],
    ids=[case_id for case_id, _, _ in MALFORMED_CASES],
)
def test_malformed_line_rejected_with_reason(raw, reason):
    with pytest.raises(InvocationLineError) as info:
        parse_invocation_line(raw, 7, 1234)
    err = info.value
    assert reason in err.reason
    assert isinstance(err, ValueError)
    assert (err.line_no, err.byte_offset) == (7, 1234)
    assert str(err).startswith("line 7, byte 1234: ")


VALID_CASES = [
    (
        "start_shape",
        b'{"ts":"2024-05-01T10:00:00.000Z","role":"bulldozer","milestone":"M1","event":"start"}\n',
        ("start", "bulldozer", "M1", None, None),
    ),
    (
        "end_shape",
        b'{"ts":"2024-05-01T10:00:01.000Z","role":"bulldozer","milestone":"M1","event":"end","status":"DONE","duration_ms":1000}',
        ("end", "bulldozer", "M1", "DONE", 1000),
    ),
    (
        "recover_shape",
        b'{"ts":"2024-05-01T11:00:00Z","role":null,"milestone":"M1","event":"end","status":"INVOCATION_FAILURE","duration_ms":null}\r\n',
        ("end", None, "M1", "INVOCATION_FAILURE", None),
    ),
    (
        "null_milestone_with_offset_ts",
        b'{"ts":"2024-05-01T12:00:00.123456789+02:00","role":"instinct","milestone":null,"event":"start"}',
        ("start", "instinct", None, None, None),
    ),
    # What JavaScript writes that the runner's own formulas allow: a field whose value is
    # undefined left out, a DOMException's numeric code (`error.code || error.name`; an
    # AbortSignal timeout's is 23), a duration from performance.now().
    (
        "milestone_left_out_is_null",
        b'{"ts":"2024-05-01T10:00:00Z","role":"piledriver","event":"start"}',
        ("start", "piledriver", None, None, None),
    ),
    (
        "numeric_status_is_its_decimal_text",
        _end_bytes(status=23, duration_ms=30000),
        ("end", "zen", "M1", "23", 30000),
    ),
    (
        "fractional_duration_is_its_whole_milliseconds",
        _end_bytes(status="DONE", duration_ms=1500.75),
        ("end", "zen", "M1", "DONE", 1500),
    ),
    (
        "status_kept_verbatim_even_unknown_case",
        b'{"ts":"2024-05-01t10:00:00z","role":"piledriver","milestone":null,"event":"end","status":"partial ok","duration_ms":0}',
        ("end", "piledriver", None, "partial ok", 0),
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(raw, e) for _, raw, e in VALID_CASES],
    ids=[case_id for case_id, _, _ in VALID_CASES],
)
def test_valid_line_parsed(raw, expected):
    line = parse_invocation_line(raw, 3, 99)
    assert (line.event, line.role, line.milestone, line.status, line.duration_ms) == expected
    assert (line.line_no, line.byte_offset) == (3, 99)
    assert line.raw == orjson.loads(raw)


def test_extra_fields_preserved_in_raw():
    raw = orjson.dumps(start("zen", "M1", pid=4242, note={"redacted": True}))
    line = parse_invocation_line(raw, 1, 0)
    assert line.raw["pid"] == 4242
    assert line.raw["note"] == {"redacted": True}
    assert line.ts == ts(0)


def test_invocation_line_is_frozen():
    line = parse_invocation_line(orjson.dumps(start("zen", "M1")), 1, 0)
    with pytest.raises(AttributeError):
        line.role = "navi"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("obj", "is_recover"),
    [
        (recover("M1"), True),
        (end(None, None, "SOMETHING_NEW", None), True),  # role null is the key, not the status
        (end("zen", "M1", "INVOCATION_FAILURE", None), False),
        (start(None, "M1"), False),
    ],
    ids=["recover", "null_role_other_status", "named_role_invocation_failure", "null_role_start"],
)
def test_is_recover_end(obj, is_recover):
    assert is_recover_end(to_lines([obj])[0]) is is_recover


# --------------------------------------------------------------------------- summary


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([], 50, None),
        ([7], 50, 7),
        ([7], 95, 7),
        ([1, 2, 3, 4], 0, 1),
        ([1, 2, 3, 4], 50, 2),  # rank ceil(2.0) = 2
        ([1, 2, 3, 4], 51, 3),  # rank ceil(2.04) = 3
        ([1, 2, 3, 4], 95, 4),
        ([1, 2, 3, 4], 100, 4),
        (list(range(10, 101, 10)), 50, 50),  # rank 5 of 10
        (list(range(10, 101, 10)), 95, 100),  # rank ceil(9.5) = 10
        (list(range(1, 101)), 95, 95),  # rank 95 of 100
    ],
    ids=[
        "empty",
        "single_p50",
        "single_p95",
        "p0_is_min",
        "p50_even_count",
        "p51_next_rank",
        "p95_small",
        "p100_is_max",
        "p50_of_ten",
        "p95_of_ten",
        "p95_of_hundred",
    ],
)
def test_percentile_nearest_rank(values, p, expected):
    assert percentile(values, p) == expected


@pytest.mark.parametrize("p", [-1, 100.5, float("nan")], ids=["negative", "above_100", "nan"])
def test_percentile_rejects_bad_p(p):
    with pytest.raises(ValueError):
        percentile([1, 2], p)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("DONE", "success"),
        ("GO", "success"),
        ("SUCCESS", "success"),
        ("OBSERVED", "success"),
        ("READY", "success"),
        ("ACCEPT", "success"),
        ("BLOCKED", "judged"),
        ("NEEDS_DEEP", "judged"),
        ("NO-GO", "judged"),
        ("NEEDS_CONFIRMATION", "judged"),
        ("TIMEOUT", "failure"),
        ("SPAWN_ERROR", "failure"),
        ("MODEL_ERROR", "failure"),
        ("ETIMEDOUT", "failure"),
        ("ENOENT", "failure"),
        ("Error", "failure"),
        ("ERROR", "failure"),
        ("INVOCATION_FAILURE", "failure"),
        ("done", "failure"),  # verbatim statuses: case matters, unknown is a failure
        (None, None),
    ],
    ids=lambda v: str(v),
)
def test_classify_status(status, expected):
    assert classify_status(status) == expected


SUMMARY_STREAM = [
    start("bulldozer", "M1"),  # 1
    end("bulldozer", "M1", "DONE", 100),  # 2
    start("bulldozer", "M1"),  # 3
    end("bulldozer", "M1", "TIMEOUT", 300),  # 4
    start("bulldozer", "M2"),  # 5
    end("bulldozer", "M2", "BLOCKED", 200),  # 6
    start("zen", "M1"),  # 7
    end("zen", "M1", "NO-GO", 50),  # 8
    start("navi", None),  # 9  (never ends: dangling)
    end("jaguar", "M2", "ENOENT", 7),  # 10 (no start: unmatched, no duration)
]


def _summary_row(key_name, key, invocations, failures, dangling, p50, p95, mx, statuses):
    return {
        key_name: key,
        "invocations": invocations,
        "failures": failures,
        "dangling": dangling,
        "p50_ms": p50,
        "p95_ms": p95,
        "max_ms": mx,
        "statuses": statuses,
    }


SUMMARY_CASES = [
    (
        "role",
        [
            # durations [100, 200, 300]: p50 rank ceil(1.5)=2, p95 rank ceil(2.85)=3
            _summary_row(
                "role", "bulldozer", 3, 1, 0, 200, 300, 300, {"BLOCKED": 1, "DONE": 1, "TIMEOUT": 1}
            ),
            _summary_row("role", "jaguar", 1, 1, 0, None, None, None, {"ENOENT": 1}),
            _summary_row("role", "navi", 1, 0, 1, None, None, None, {}),
            _summary_row("role", "zen", 1, 0, 0, 50, 50, 50, {"NO-GO": 1}),
        ],
    ),
    (
        "milestone",
        [
            # durations [50, 100, 300]
            _summary_row(
                "milestone", "M1", 3, 1, 0, 100, 300, 300, {"DONE": 1, "NO-GO": 1, "TIMEOUT": 1}
            ),
            _summary_row("milestone", "M2", 2, 1, 0, 200, 200, 200, {"BLOCKED": 1, "ENOENT": 1}),
            _summary_row("milestone", None, 1, 0, 1, None, None, None, {}),
        ],
    ),
    (
        "status",
        [
            _summary_row("status", "BLOCKED", 1, 0, 0, 200, 200, 200, {"BLOCKED": 1}),
            _summary_row("status", "DONE", 1, 0, 0, 100, 100, 100, {"DONE": 1}),
            _summary_row("status", "ENOENT", 1, 1, 0, None, None, None, {"ENOENT": 1}),
            _summary_row("status", "NO-GO", 1, 0, 0, 50, 50, 50, {"NO-GO": 1}),
            _summary_row("status", "TIMEOUT", 1, 1, 0, 300, 300, 300, {"TIMEOUT": 1}),
            _summary_row("status", None, 1, 0, 1, None, None, None, {}),
        ],
    ),
]


@pytest.mark.parametrize(
    ("by", "expected"),
    [(by, e) for by, e in SUMMARY_CASES],
    ids=[by for by, _ in SUMMARY_CASES],
)
def test_summarize(by, expected):
    rows = pair_invocations(to_lines(SUMMARY_STREAM))
    assert summarize(rows, by) == expected


def test_summarize_counts_recovered_as_failures():
    rows = pair_invocations(to_lines([start("zen", "M1"), start("puma", "M1"), recover("M1")]))
    assert summarize(rows, "milestone") == [
        _summary_row("milestone", "M1", 2, 2, 0, None, None, None, {"INVOCATION_FAILURE": 2})
    ]


def test_summarize_rejects_unknown_key():
    with pytest.raises(ValueError):
        summarize([], "duration")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

# Few keys so that same-(role, milestone) collisions, concurrent starts and
# unmatched ends are common.
ROLES = ["bulldozer", "jaguar"]
MILESTONES = [None, "M1"]
STATUSES = ["DONE", "BLOCKED", "GO", "TIMEOUT", "ETIMEDOUT", "Error"]

_start_op = st.tuples(st.just("start"), st.sampled_from(ROLES), st.sampled_from(MILESTONES))
_end_op = st.tuples(
    st.just("end"),
    st.sampled_from(ROLES),
    st.sampled_from(MILESTONES),
    st.sampled_from(STATUSES),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10**9)),
)
_recover_op = st.tuples(st.just("recover"), st.sampled_from(MILESTONES))
# Recover is rare (a killed supervisor), starts and ends are the bulk.
_op = st.one_of(_start_op, _end_op, _start_op, _end_op, _start_op, _end_op, _recover_op)


def _op_to_obj(op, i):
    stamp = f"2024-05-01T10:{i // 60 % 60:02d}:{i % 60:02d}.000Z"
    if op[0] == "start":
        return {"ts": stamp, "role": op[1], "milestone": op[2], "event": "start"}
    if op[0] == "end":
        return {
            "ts": stamp,
            "role": op[1],
            "milestone": op[2],
            "event": "end",
            "status": op[3],
            "duration_ms": op[4],
        }
    return {
        "ts": stamp,
        "role": None,
        "milestone": op[1],
        "event": "end",
        "status": "INVOCATION_FAILURE",
        "duration_ms": None,
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_start_op, _end_op), max_size=60))
def test_property_without_recover_every_line_in_exactly_one_row(ops):
    lines = to_lines([_op_to_obj(op, i) for i, op in enumerate(ops)])
    rows = pair_invocations(lines)
    starts = sorted(ln.line_no for ln in lines if ln.event == "start")
    ends = sorted(ln.line_no for ln in lines if ln.event == "end")
    assert sorted(r.start_line for r in rows if r.start_line is not None) == starts
    assert sorted(r.end_line for r in rows if r.end_line is not None) == ends
    assert len(rows) == len(starts) + sum(1 for r in rows if r.outcome == "unmatched_end")
    # An end never stays unmatched while an older start of its key is open, and a
    # dangling start never has a later end of its key left unmatched.
    for r in rows:
        if r.outcome == "unmatched_end":
            assert not any(
                d.outcome == "dangling"
                and (d.role, d.milestone) == (r.role, r.milestone)
                and d.start_line < r.end_line
                for d in rows
            )
    _assert_fifo(rows)


def _assert_fifo(rows):
    """Within one (role, milestone), paired starts and ends never cross."""
    keys = {(r.role, r.milestone) for r in rows if r.outcome == "paired"}
    for key in keys:
        ends = [r.end_line for r in rows if r.outcome == "paired" and (r.role, r.milestone) == key]
        assert ends == sorted(ends)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=60))
def test_property_nothing_lost_nothing_duplicated(ops):
    lines = to_lines([_op_to_obj(op, i) for i, op in enumerate(ops)])
    rows = pair_invocations(lines)

    starts = [ln.line_no for ln in lines if ln.event == "start"]
    ends = [ln.line_no for ln in lines if ln.event == "end" and not is_recover_end(ln)]
    recovers = [ln.line_no for ln in lines if is_recover_end(ln)]
    start_refs = [r.start_line for r in rows if r.start_line is not None]
    end_refs = [r.end_line for r in rows if r.end_line is not None]

    # Every start in exactly one row.
    assert sorted(start_refs) == starts
    # Every ordinary end in exactly one row.
    for no in ends:
        assert end_refs.count(no) == 1
    # A recover end is never lost; it fans out to one 'recovered' row per start it
    # closed (it closes every open start), or is one 'unmatched_end' row.
    for no in recovers:
        mine = [r for r in rows if r.end_line == no]
        assert mine
        assert all(r.outcome == "recovered" for r in mine) or [r.outcome for r in mine] == [
            "unmatched_end"
        ]
    # No row references a line that does not exist; every row references one.
    assert set(end_refs) <= set(ends) | set(recovers)
    assert all(r.start_line is not None or r.end_line is not None for r in rows)

    # Output order and seq.
    assert [r.seq for r in rows] == list(range(len(rows)))
    anchors = [r.start_line if r.start_line is not None else r.end_line for r in rows]
    assert anchors == sorted(anchors)

    by_line = {ln.line_no: ln for ln in lines}
    for r in rows:
        if r.outcome == "paired":
            s, e = by_line[r.start_line], by_line[r.end_line]
            assert s.line_no < e.line_no
            assert (s.role, s.milestone) == (e.role, e.milestone) == (r.role, r.milestone)
        elif r.outcome == "recovered":
            assert r.start_line < r.end_line
            assert (r.duration_ms, r.status) == (None, "INVOCATION_FAILURE")
        elif r.outcome == "dangling":
            # A recover closes everything open: nothing before the last recover dangles.
            assert all(r.start_line > no for no in recovers)
            assert (r.end_line, r.status, r.duration_ms) == (None, None, None)
        else:
            assert r.start_line is None and r.duration_ms is None

    _assert_fifo(rows)

    # Deterministic.
    assert pair_invocations(lines) == rows


_json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=80),
        _json_value.map(lambda v: orjson.dumps(v)),
        st.fixed_dictionaries(
            {},
            optional={
                "ts": st.sampled_from(["2024-05-01T10:00:00Z", "2024-05-01", 5, None]),
                "role": st.sampled_from(["zen", None, 3]),
                "milestone": st.sampled_from(["M1", None, []]),
                "event": st.sampled_from(["start", "end", "END", None]),
                "status": st.sampled_from(["DONE", None, 1]),
                "duration_ms": st.sampled_from([0, 5, -1, 1.0, True, None, "5"]),
            },
        ).map(lambda d: orjson.dumps(d)),
    )
)
def test_property_parser_only_raises_invocation_line_error(raw):
    try:
        line = parse_invocation_line(raw, 1, 0)
    except InvocationLineError as err:
        assert err.reason
    else:
        assert line.event in ("start", "end")
        assert line.duration_ms is None or (type(line.duration_ms) is int and line.duration_ms >= 0)
        if line.event == "end":
            assert isinstance(line.status, str)
