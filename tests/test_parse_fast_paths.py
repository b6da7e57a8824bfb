"""The parsers' fast paths (feed, units, snapshot) only ever accept: each edge of a fast
path is a line or document that must take the general path and get its answer, and
every input gets the same outcome as the general path alone would give it.

Expected values are worked out here from the contract (RUN-FEED.md's fields, RFC 3339),
with the standard library's datetime as the independent clock; the differential tests
run the general path (the code every reason text comes from) as the reference.
"""

from __future__ import annotations

import calendar
import json
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omg_ledger import feed, snapshot, units
from omg_ledger.feed import Event, parse_stream_line
from omg_ledger.snapshot import BadSnapshot, parse_json_object, parse_state
from omg_ledger.tail import Paused, Rejected
from omg_ledger.units import BadTimestamp, parse_timestamp

from .conftest import CORPUS_HOME

TS = "2026-11-29T18:15:12.93149401Z"
TS_US = calendar.timegm((2026, 11, 29, 18, 15, 12)) * 1_000_000 + 931494
RUN = "20261129-181512.000000000-1"
SESSION = "a24582b1-070a-4f5f-8976-c702446f7802"


def engine_line(**fields) -> bytes:
    """A line as the engine writes it: compact, keys in its order."""
    data = {"schema": 3, "ts": TS, "run_id": RUN, **fields}
    return orjson.dumps(data)


def general(line: bytes, run_id: str | None = RUN) -> object:
    """parse_stream_line's answer from the general path alone."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return Rejected(f"not JSON: {exc}")
    return feed._checked_stream_line(line, data, 7, 100, run_id)


def parsed(line: bytes, run_id: str | None = RUN) -> object:
    return parse_stream_line(line, 7, 100, run_id)


# --- stream lines: accepted ---------------------------------------------------------

def test_an_engine_line_is_an_event_with_every_field():
    line = engine_line(event="node_passed", node_id="build", verdict="PASS", cost_usd=0.068764,
                       session_id=SESSION, provenance="self-reported")
    event = parsed(line)
    assert isinstance(event, Event)
    assert (event.line_no, event.byte_offset, event.raw, event.ts, event.at_us, event.type) == (
        7, 100, line.decode(), "2026-11-29T18:15:12.931494Z", TS_US, "node_passed")
    assert event.data == {"schema": 3, "ts": TS, "run_id": RUN, "event": "node_passed", "node_id": "build",
                          "verdict": "PASS", "cost_usd": 0.068764, "session_id": SESSION,
                          "provenance": "self-reported"}


SAME_EVENT_OTHER_SPELLINGS = {
    # a space before ':' (and after): not what the engine writes, the same object
    "spaces": b'{"schema" : 3, "ts" : "' + TS.encode() + b'", "run_id" : "' + RUN.encode()
              + b'", "event" : "node_passed", "node_id" : "a", "cost_usd" : 0.5}',
    "tab-before-colon": b'{"schema"\t:3,"ts":"' + TS.encode() + b'","run_id":"' + RUN.encode()
                        + b'","event":"node_passed","node_id":"a","cost_usd":0.5}',
    "cr-before-colon": b'{"schema"\r:3,"ts":"' + TS.encode() + b'","run_id":"' + RUN.encode()
                       + b'","event":"node_passed","node_id":"a","cost_usd":0.5}',
    # 0.50 parses to 0.5, which orjson writes as 0.5: not byte-identical
    "trailing-zero": b'{"schema":3,"ts":"' + TS.encode() + b'","run_id":"' + RUN.encode()
                     + b'","event":"node_passed","node_id":"a","cost_usd":0.50}',
    # an escaped letter: the same string
    "escaped-letter": b'{"schema":3,"ts":"' + TS.encode() + b'","run_id":"' + RUN.encode()
                      + b'","event":"node_p\\u0061ssed","node_id":"a","cost_usd":0.5}',
}


@pytest.mark.parametrize("name", sorted(SAME_EVENT_OTHER_SPELLINGS))
def test_other_spellings_of_an_engine_line_give_the_same_event(name):
    line = SAME_EVENT_OTHER_SPELLINGS[name]
    event = parsed(line)
    assert isinstance(event, Event), event
    assert event.data == {"schema": 3, "ts": TS, "run_id": RUN, "event": "node_passed", "node_id": "a",
                          "cost_usd": 0.5}
    assert (event.ts, event.at_us, event.raw) == ("2026-11-29T18:15:12.931494Z", TS_US, line.decode())


def test_a_detail_containing_quote_colon_is_no_duplicate():
    detail = 'node "lint" failed: {"exit": 3} "a":"b"'
    line = engine_line(event="node_failed", node_id="lint", verdict="FAIL", detail=detail)
    assert b'\\":' in line  # the text really holds what looks like a key's end
    event = parsed(line)
    assert isinstance(event, Event)
    assert event.data["detail"] == detail


def test_go_style_escapes_are_the_same_text():
    # Go escapes < > & in strings; orjson does not, so the bytes differ and the general
    # path decides: the same event.
    line = (b'{"schema":3,"ts":"' + TS.encode() + b'","run_id":"' + RUN.encode()
            + b'","event":"node_failed","node_id":"v","detail":"a \\u0026\\u0026 b \\u003c c"}')
    event = parsed(line)
    assert isinstance(event, Event)
    assert event.data["detail"] == "a && b < c"


def test_nested_unknown_fields_are_kept():
    line = engine_line(event="node_started", node_id="a", extra={"deep": [{"x": [1, {"y": None}]}]})
    event = parsed(line)
    assert isinstance(event, Event)
    assert event.data["extra"] == {"deep": [{"x": [1, {"y": None}]}]}


def test_a_line_nested_past_the_serialiser_limit_still_gets_the_general_answer():
    # orjson parses 300 levels but will not write them: the fast path cannot settle it.
    nested = b'{"k":' * 300 + b"1" + b"}" * 300
    line = engine_line(event="node_started", node_id="a")[:-1] + b',"extra":' + nested + b"}"
    event = parsed(line)
    assert isinstance(event, Event)
    assert event == general(line)


# --- stream lines: refused ------------------------------------------------------------

def test_a_real_duplicate_key_is_refused():
    line = engine_line(event="node_passed", node_id="a", cost_usd=0.5)[:-1] + b',"cost_usd":0.01}'
    assert parsed(line) == Rejected("duplicate key 'cost_usd'")


def test_a_duplicate_hidden_by_a_space_before_colon_is_refused():
    # Counting '":' alone would balance: the first cost_usd is not counted (its space),
    # and the detail's escaped quote-colon is counted in its place.
    line = (b'{"schema":3,"ts":"' + TS.encode() + b'","event":"node_passed","node_id":"a",'
            b'"cost_usd" :0.5,"cost_usd":0.01,"detail":"\\":"}')
    assert parsed(line) == Rejected("duplicate key 'cost_usd'")


def test_a_duplicate_inside_usage_is_refused():
    line = (b'{"schema":3,"ts":"' + TS.encode() + b'","event":"node_passed","node_id":"a",'
            b'"usage":{"input_tokens":1,"input_tokens":2}}')
    assert parsed(line) == Rejected("duplicate key 'input_tokens'")


REFUSED = {
    # hand-written reasons: the texts tests/test_hostile_input.py and operators see
    "bool-cost": (engine_line(event="node_passed", node_id="a", cost_usd=True),
                  "'cost_usd' must be a non-negative number, got True"),
    "negative-cost": (engine_line(event="node_passed", node_id="a", cost_usd=-1),
                      "'cost_usd' must be a non-negative number, got -1"),
    "cost-cap": (engine_line(event="node_passed", node_id="a", cost_usd=100_001),
                 "'cost_usd' 100001 is beyond any one invocation (max 100000)"),
    "bool-tokens": (engine_line(event="node_passed", node_id="a", usage={"output_tokens": True}),
                    "'usage.output_tokens' must be a non-negative integer (max 1000000000000), got True"),
    "int-detail": (engine_line(event="node_failed", node_id="a", detail=3),
                   "'detail' must be a string, got 3"),
    "list-round": (engine_line(event="node_passed", node_id="a", round=[1]),
                   "'round' must be a non-negative integer (max 2147483647), got [1]"),
    "string-unknown": (engine_line(event="node_passed", node_id="a", cost_unknown="yes"),
                       "'cost_unknown' must be a boolean, got 'yes'"),
    "no-node-id": (engine_line(event="node_passed"), "node_passed without a node_id"),
    "empty-node-id": (engine_line(event="node_passed", node_id=""), "node_passed without a node_id"),
    "long-session": (engine_line(event="node_started", node_id="a", session_id="s" * 513),
                     "'session_id' is 513 characters long (max 512): not an id"),
    "gate-at-schema-1": (orjson.dumps({"schema": 1, "ts": TS, "event": "gate_paused", "node_id": "g"}),
                         "unknown event type 'gate_paused' at schema 1, whose event types are closed "
                         "(a new type comes with a new schema); skipped"),
    "list-event": (engine_line(event=["node_passed"]), "missing or invalid 'event': ['node_passed']"),
    "bool-schema": (orjson.dumps({"schema": True, "ts": TS, "event": "run_started"}),
                    "missing or invalid 'schema': True"),
    "february-30": (orjson.dumps({"schema": 3, "ts": "2026-02-30T00:00:00Z", "event": "run_started"}),
                    "not an RFC 3339 timestamp: '2026-02-30T00:00:00Z'"),
    "foreign-run": (orjson.dumps({"schema": 3, "ts": TS, "run_id": "other", "event": "run_started"}),
                    f"the line names run_id 'other', not this directory's {RUN!r}: another run's line, "
                    f"not indexed here"),
}


def test_a_null_field_is_the_field_absent():
    # encoding/json leaves a field its zero value on null (the engine's reader), and a
    # zero value is an absent field on the stream.
    line = engine_line(event="node_passed", node_id="a", verdict=None, usage=None, cost_usd=0.5,
                       detail=None, extra=None)
    event = parsed(line)
    assert isinstance(event, Event) and event == general(line)
    assert event.data == {"schema": 3, "ts": TS, "run_id": RUN, "event": "node_passed", "node_id": "a",
                          "cost_usd": 0.5, "extra": None}
    inner = parsed(engine_line(event="node_passed", node_id="a", usage={"input_tokens": None, "output_tokens": 4}))
    assert inner.data["usage"] == {"output_tokens": 4}
    # A null schema, event or ts is the field missing: still a bad line.
    assert parsed(orjson.dumps({"schema": None, "ts": TS, "event": "run_started"})) == Rejected(
        "missing or invalid 'schema': None")


def test_a_key_in_another_case_is_its_field():
    # encoding/json matches keys case-insensitively (and U+017F, U+212A as S, K).
    line = engine_line(Event="node_passed", NODE_ID="a", cost_usd=0.5, Usage={"Output_Tokens": 4},
                       **{"cost_un\u212anown": False, "\u017fession_id": "s"})
    event = parsed(line)
    assert isinstance(event, Event) and event == general(line)
    assert event.data == {"schema": 3, "ts": TS, "run_id": RUN, "event": "node_passed", "node_id": "a",
                          "cost_usd": 0.5, "usage": {"output_tokens": 4}, "cost_unknown": False, "session_id": "s"}
    # A rune that folds to no ASCII letter names no field: "\u0131" (dotless i) is not I.
    assert parsed(engine_line(event="node_passed", node_id="a", **{"ret\u0131ries": "x"})).data[
        "ret\u0131ries"] == "x"
    assert parsed(engine_line(event="node_passed", node_id="a", verdict="PASS", VERDICT="FAIL")) == Rejected(
        "keys 'verdict' and 'VERDICT' both name the field 'verdict' (the engine reads a key in any case): "
        "a duplicate key")


@pytest.mark.parametrize(("escaped", "text"), [
    (rb"\ud800", "\ufffd"),  # a lone high surrogate
    (rb"x\udc00y", "x\ufffdy"),  # a lone low one
    (rb"\ude00\ud83d", "\ufffd\ufffd"),  # a pair the wrong way round: two lone ones
    (rb"\ud83d\ude00", "\U0001f600"),  # a pair
    (rb"\ud83d\ud83d\ude00", "\ufffd\U0001f600"),
    (rb"\\ud800", "\\ud800"),  # an escaped backslash, then plain text
    (rb"\\\ud800", "\\\ufffd"),
])
def test_a_lone_surrogate_escape_is_u_fffd(escaped, text):
    # encoding/json's unquote: a surrogate escape that is not the first half of a pair
    # decodes as U+FFFD; orjson refuses the line.
    line = b'{"schema":3,"ts":"' + TS.encode() + b'","event":"node_failed","node_id":"a","detail":"' + escaped + b'"}'
    event = parsed(line)
    assert isinstance(event, Event) and event.data["detail"] == text
    assert event.raw == line.decode()  # the line as written


_LINE_HEAD = b'{"schema":3,"ts":"' + TS.encode() + b'","event":"node_failed","node_id":"a","cost_usd":0.5'


@pytest.mark.parametrize(("written", "text", "kept"), [
    # Go's utf8.DecodeRune answers (RuneError, 1) at each byte that does not begin a valid
    # sequence (a lead byte that is none, a sequence cut short, an overlong form, a surrogate,
    # past U+10FFFF), and unquote writes U+FFFD for it and goes on at the next byte.
    (b"\xff", "\ufffd", "\ufffd"),
    (b"a\xfe\xffb", "a\ufffd\ufffdb", "a\ufffd\ufffdb"),
    (b"\xe2\x82", "\ufffd\ufffd", "\ufffd\ufffd"),  # cut after two of three: two (Python's "replace": one)
    (b"\xf0\x9f\x98!", "\ufffd\ufffd\ufffd!", "\ufffd\ufffd\ufffd!"),  # cut after three of four
    (b"\xc0\xaf", "\ufffd\ufffd", "\ufffd\ufffd"),  # '/' overlong: C0 begins nothing
    (b"\xed\xa0\x80", "\ufffd" * 3, "\ufffd" * 3),  # U+D800 encoded: ED takes 80-9F
    (b"\xf4\x90\x80\x80", "\ufffd" * 4, "\ufffd" * 4),  # past U+10FFFF: F4 takes 80-8F
    (b"\xf0\x9f\x98\x80\xff", "\U0001f600\ufffd", "\U0001f600\ufffd"),  # a valid rune stays
    (b"\xef\xbf\xbd", "\ufffd", "\ufffd"),  # U+FFFD itself, written: one
    (rb"\ud800" + b"\xff", "\ufffd\ufffd", "\\ud800\ufffd"),  # beside a lone surrogate escape
])
def test_bytes_that_are_not_utf8_in_a_string_are_u_fffd(written, text, kept):
    line = _LINE_HEAD + b',"detail":"' + written + b'"}'
    event = parsed(line)
    assert isinstance(event, Event) and (event.data["detail"], event.data["cost_usd"]) == (text, 0.5)
    # events.raw: the line as the engine decodes its bytes (TEXT holds nothing else).
    assert event.raw == _LINE_HEAD.decode() + ',"detail":"' + kept + '"}'


def test_a_key_holding_bytes_that_are_not_utf8_names_no_field():
    # "cost_usd\xff" unquotes to "cost_usd\ufffd", which no field is (nor any folding of one).
    event = parsed(_LINE_HEAD[:-len(b',"cost_usd":0.5')] + b',"cost_usd\xff":0.5}')
    assert isinstance(event, Event) and "cost_usd" not in event.data
    assert event.data["cost_usd\ufffd"] == 0.5


@pytest.mark.parametrize("line", [
    _LINE_HEAD + b"\xff}",  # outside a string: the scanner's invalid character
    _LINE_HEAD + b',"detail":\xff"x"}',
    _LINE_HEAD + b',"detail":"\\\xff"}',  # an escape of it: unquote refuses it
    _LINE_HEAD + b',"detail":"\xff\x01"}',  # a control character beside it
    _LINE_HEAD + b',"detail":"\xff}',  # the string never closed
])
def test_a_line_holding_such_bytes_that_is_not_json_to_the_engine_is_a_bad_line(line):
    assert isinstance(parsed(line), Rejected)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_fields_keep_their_reason(name):
    line, reason = REFUSED[name]
    assert parsed(line) == Rejected(reason)


def test_two_bad_fields_give_the_first_reason_in_check_order():
    # The string fields are checked before cost_usd, whatever order the line has them in.
    line = engine_line(event="node_passed", node_id="a", cost_usd=-1, verdict=5)
    assert parsed(line) == Rejected("'verdict' must be a string, got 5")


def test_a_newer_schema_pauses():
    line = orjson.dumps({"schema": 4, "ts": TS, "event": "node_teleported"})
    assert parsed(line) == Paused(4, "event schema 4 is newer than this omg-ledger understands (max 3); "
                                     "ingestion of this file waits here for an upgrade")


def test_the_run_id_is_only_checked_when_the_directory_gives_one():
    line = orjson.dumps({"schema": 3, "ts": TS, "run_id": "other", "event": "run_started"})
    assert isinstance(parsed(line, run_id=None), Event)
    assert isinstance(parsed(engine_line(event="run_started")), Event)
    assert isinstance(parsed(orjson.dumps({"schema": 3, "ts": TS, "event": "run_started"})), Event)


# --- stream lines: the fast path and the general path agree on everything -----------

_TEXT = st.text(max_size=6) | st.sampled_from(['"', '":', '" :', "\\", "&<>", ":x", "é"])
_VALUE = (st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
          | _TEXT | st.lists(st.integers(0, 3), max_size=2) | st.dictionaries(_TEXT, st.integers(0, 9), max_size=2))
_FIELD = st.sampled_from(["run_id", "node_id", "phase", "outcome", "verdict", "detail", "session_id",
                          "provenance", "cost_usd", "cost_unknown", "retries", "round", "usage", "extra"])
_USAGE = st.dictionaries(st.sampled_from([*feed.TOKEN_FIELDS, "other"]),
                         st.integers(-1, 10**12 + 1) | st.booleans() | st.floats(0, 9) | st.none(), max_size=3)


@st.composite
def stream_lines(draw) -> bytes:
    data = {"schema": draw(st.sampled_from([3, 3, 3, 2, 1, 4, 0, True, "3"])),
            "ts": draw(st.sampled_from([TS, "2026-11-29T18:15:12Z", "2026-02-29T00:00:00Z", "bad",
                                        "2026-11-29T19:15:12+01:00"])),
            "event": draw(st.sampled_from(sorted(feed.KNOWN_EVENTS) + ["node_teleported", ""]))}
    for name in draw(st.lists(_FIELD, max_size=6)):
        data[name] = draw(_USAGE if name == "usage" and draw(st.booleans()) else _VALUE)
    if draw(st.booleans()):
        data["node_id"] = draw(st.sampled_from(["a", "build", "n" * 513]))
    if draw(st.booleans()):
        data["run_id"] = draw(st.sampled_from([RUN, "other"]))
    spelling = draw(st.sampled_from(["orjson", "spaced", "space-before-colon", "ascii"]))
    if spelling == "orjson":
        line = orjson.dumps(data)
    elif spelling == "spaced":
        line = json.dumps(data, ensure_ascii=False).encode()
    elif spelling == "space-before-colon":
        line = json.dumps(data, separators=(",", " :"), ensure_ascii=False).encode()
    else:
        line = json.dumps(data, separators=(",", ":")).encode()
    if draw(st.integers(0, 5)) == 0:  # repeat a key, in one of the spellings
        name = draw(st.sampled_from(sorted(data)))
        line = line[:-1] + draw(st.sampled_from([b',"', b', "'])) + name.encode() + draw(
            st.sampled_from([b'":', b'" :'])) + orjson.dumps(data[name]) + b"}"
    return line


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream_lines())
def test_every_line_gets_the_general_paths_answer(line):
    assert parsed(line) == general(line)
    assert parsed(line, run_id=None) == general(line, run_id=None)


def test_every_corpus_line_gets_the_general_paths_answer():
    lines = [line for path in sorted(Path(CORPUS_HOME).glob("runs/*/events.jsonl"))
             for line in path.read_bytes().split(b"\n") if line.strip()]
    assert len(lines) > 100
    for line in lines:
        assert parsed(line, run_id=None) == general(line, run_id=None)


# --- timestamps -----------------------------------------------------------------------

def utc_us(year, month, day, hour=0, minute=0, second=0, micros=0) -> int:
    return calendar.timegm((year, month, day, hour, minute, second)) * 1_000_000 + micros


@pytest.mark.parametrize(("digits", "micros"), [
    ("1", 100000), ("12", 120000), ("123", 123000), ("1234", 123400), ("12345", 123450),
    ("123456", 123456), ("1234567", 123456), ("12345678", 123456), ("123456789", 123456)])
def test_every_fraction_length(digits, micros):
    assert parse_timestamp(f"2026-11-29T18:15:12.{digits}Z") == (
        f"2026-11-29T18:15:12.{micros:06d}Z", utc_us(2026, 11, 29, 18, 15, 12, micros))


def test_no_fraction_and_offsets():
    assert parse_timestamp("2026-11-29T18:15:12Z") == ("2026-11-29T18:15:12.000000Z",
                                                       utc_us(2026, 11, 29, 18, 15, 12))
    assert parse_timestamp("2026-11-29T19:15:12.5+01:00") == ("2026-11-29T18:15:12.500000Z",
                                                              utc_us(2026, 11, 29, 18, 15, 12, 500000))
    assert parse_timestamp("2026-11-29T18:15:12.5z") == ("2026-11-29T18:15:12.500000Z",
                                                         utc_us(2026, 11, 29, 18, 15, 12, 500000))
    assert parse_timestamp("2026-01-01T00:30:00-01:00")[1] == utc_us(2026, 1, 1, 1, 30)


def test_consecutive_timestamps_across_minutes_days_and_years():
    # The fast path remembers the last second it converted: each must still be its own.
    texts = ["2026-12-31T23:59:59.999999Z", "2026-12-31T23:59:00Z", "2027-01-01T00:00:00.000001Z",
             "2026-12-31T23:59:30Z", "2026-12-31T23:58:30Z", "2026-12-31T22:58:30Z", "2026-12-31T22:58:31.5Z", "2026-12-31T22:58:31.25Z", "2024-02-29T12:00:00Z", "2024-03-01T12:00:00Z", "2024-02-29T12:00:01Z"]
    for text in texts:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        expected = utc_us(moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second,
                          moment.microsecond)
        assert parse_timestamp(text)[1] == expected, text


@pytest.mark.parametrize("text", ["2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-04-31T00:00:00Z",
                                  "2026-11-29T24:00:00Z", "2026-11-29T18:60:00Z", "2026-11-29T18:15:60Z",
                                  "2026-11-29T18:15:12", "2026-11-29T18:15:12.1+1:00"])
def test_impossible_dates_and_times_are_refused(text):
    with pytest.raises(BadTimestamp) as caught:
        parse_timestamp(text)
    assert str(caught.value) == f"not an RFC 3339 timestamp: {text!r}"


@pytest.mark.parametrize(("text", "micros"), [
    ("2026-11-29T18:15:12.1234567890Z", 123456),  # ten digits: past the engine's nine
    ("2026-11-29 18:15:12Z", 0),  # a space for the T (RFC 3339 allows it)
    ("2026-11-29t18:15:12z", 0),  # and lower case
    ("2026-11-29T19:45:12+01:30", 0),
])
def test_lenient_shapes_outside_the_fast_path_are_read_by_the_general_path(text, micros):
    assert parse_timestamp(text) == (f"2026-11-29T18:15:12.{micros:06d}Z", utc_us(2026, 11, 29, 18, 15, 12, micros))


# What Python's fromisoformat takes and RFC 3339's date-time is not: refused in new
# input; read as before where an older omg-ledger stored such a line (strict=False).
NOT_RFC3339 = {
    "nul-separator": ("2026-11-29\x0018:15:12Z", 0),
    "letter-separator": ("2026-11-29X18:15:12Z", 0),
    "empty-fraction": ("2026-11-29T18:15:12.Z", 0),
    "week-date": ("2026-W48-7T18:15:12Z", 0),
    "basic-format": ("20261129T181512.5+00:00", 500000),
    "comma-fraction": ("2026-11-29T18:15:12,5Z", 500000),
    "hour-only-offset": ("2026-11-29T19:15:12.5+01", 500000),
    "offset-without-colon": ("2026-11-29T19:15:12.5+0100", 500000),
    "leading-space": (" 2026-11-29T18:15:12Z", 0),
    "trailing-newline": ("2026-11-29T18:15:12Z\n", 0),
}


@pytest.mark.parametrize("name", sorted(NOT_RFC3339))
def test_what_is_not_rfc3339_is_refused_in_new_input_and_read_where_it_was_stored(name):
    text, micros = NOT_RFC3339[name]
    with pytest.raises(BadTimestamp) as caught:
        parse_timestamp(text)
    assert str(caught.value) == f"not an RFC 3339 timestamp: {text!r}"
    line = orjson.dumps({"schema": 3, "ts": text, "event": "run_started"})
    assert parsed(line) == Rejected(f"not an RFC 3339 timestamp: {text!r}")
    assert parse_timestamp(text, strict=False) == (f"2026-11-29T18:15:12.{micros:06d}Z",
                                                        utc_us(2026, 11, 29, 18, 15, 12, micros))


def test_the_range_is_checked_on_the_fast_path():
    with pytest.raises(BadTimestamp) as caught:
        parse_timestamp("9999-01-01T00:00:00Z")
    assert str(caught.value) == ("timestamp '9999-01-01T00:00:00Z' is outside the range this ledger accepts "
                                 "(1970-01-01T00:00:00Z to 9998-12-31T23:59:59.999999Z)")
    assert parse_timestamp("1969-12-31T23:59:59.5Z", strict=False) == ("1969-12-31T23:59:59.500000Z",
                                                                            -500000)
    assert parse_timestamp("9998-12-31T23:59:59.999999Z")[1] == utc_us(9999, 1, 1) - 1


def test_digits_of_other_scripts_keep_the_general_paths_answer():
    # The engine writes ASCII; the general pattern's \d also takes Arabic-Indic digits,
    # and what it made of them is kept (the fast path is ASCII only).
    text = "\u0662\u0660\u0662\u0666-11-29T18:15:12Z"
    assert parse_timestamp(text) == ("\u0662\u0660\u0662\u0666-11-29T18:15:12.000000Z",
                                     utc_us(2026, 11, 29, 18, 15, 12))


def test_the_minute_memory_holds_one_entry():
    parse_timestamp("2026-11-29T18:15:12Z")
    parse_timestamp("2025-01-02T03:04:05Z")
    assert units._last_second[0] == "2025-01-02T03:04:05"


# --- state.json -----------------------------------------------------------------------

def corpus_state() -> tuple[bytes, dict]:
    path = next(p for p in sorted(Path(CORPUS_HOME).glob("runs/*/state.json"))
                if len(json.loads(p.read_bytes()).get("nodes") or {}) >= 2)
    content = path.read_bytes()
    return content, json.loads(content)


def indented(data: dict) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2)


def test_the_engine_writes_state_as_orjson_indents_it():
    content, data = corpus_state()
    assert content == indented(data)  # the shape the fast path settles
    assert parse_state(content) == data


def test_an_indented_state_with_a_repeated_key_is_refused():
    content, data = corpus_state()
    node_id = next(iter(data["nodes"]))
    record = data["nodes"][node_id]
    text = indented(data).decode()
    first_key = next(iter(record))
    # Repeat the record's first key right after itself: still indented by two.
    at = text.index(f'"{first_key}": ', text.index(f'"{node_id}": {{'))
    line_end = text.index("\n", at)
    repeated = text[:line_end] + ("," if not text[:line_end].endswith(",") else "") + "\n" + \
        text[text.rindex("\n", 0, at) + 1:line_end].rstrip(",") + "," + text[line_end:]
    with pytest.raises(BadSnapshot) as caught:
        parse_state(repeated.encode())
    assert str(caught.value) == f"state.json has the key {first_key!r} more than once in one object"


def test_other_spellings_of_a_state_give_the_same_document():
    _, data = corpus_state()
    data = {**data, "note": "a && b <c> \"q\": :x"}
    for content in (orjson.dumps(data), json.dumps(data, indent=4).encode(), indented(data) + b"\n",
                    json.dumps(data, ensure_ascii=True, indent=2).encode()):
        assert parse_state(content) == data


def test_a_state_with_bytes_that_are_not_utf8_in_a_string_reads_them_as_u_fffd():
    # runstate.Load decodes with encoding/json: each such byte in a string is U+FFFD (a key
    # too), one per byte; outside a string it is a syntax error.
    _, data = corpus_state()
    node_id = next(iter(data["nodes"]))
    data = {**data, "note": "@1@", "nodes": {**data["nodes"], "@2@": {"verdict": "PASS"}}}
    content = indented(data).replace(b"@1@", b"caf\xe9 \xe2\x82").replace(b"@2@", b"n\xff")
    parsed = parse_state(content)
    assert parsed["note"] == "caf\ufffd \ufffd\ufffd"
    assert parsed["nodes"]["n\ufffd"] == {"verdict": "PASS"} and node_id in parsed["nodes"]
    with pytest.raises(BadSnapshot, match="^state.json is not JSON: "):
        parse_state(content.replace(b'"note"', b'\xff"note"'))
    # assess.json: the engine never reads it (it only writes it, as valid UTF-8): such a
    # byte there is damage, as before.
    with pytest.raises(BadSnapshot, match="^assess.json is not JSON: "):
        snapshot.parse_assess(b'{"goal_met":true,"assess_cost_usd":0.1,"remaining":"caf\xe9"}')


def test_a_state_with_a_lone_surrogate_escape_reads_it_as_u_fffd():
    # encoding/json decodes a \u escape of a lone UTF-16 surrogate (not half of a pair) as
    # U+FFFD, in state.json as in a stream line; a pair is its one character.
    _, data = corpus_state()
    content = indented({**data, "note": "@1@"}).replace(b"@1@", b"a\\ud800b \\ud83d\\ude00")
    assert parse_state(content)["note"] == "a\ufffdb \U0001f600"
    with pytest.raises(BadSnapshot, match="^assess.json is not JSON: "):  # never read by the engine
        snapshot.parse_assess(b'{"goal_met":true,"assess_cost_usd":0.1,"remaining":"\\ud800"}')


# Keys of runstate.Snapshot's structs, some in another case, some naming no field.
_GO_KEY = st.sampled_from(sorted(snapshot.NODE_RECORD.fields.keys() | {"other", "Verdict", "COST_USD", "\u017fession_id"}))
_GO_VALUE = st.none() | st.booleans() | st.integers(-1, 3) | st.text(max_size=2) | st.lists(st.none() | st.text(max_size=1),
                                                                                              max_size=2)
_GO_RECORD = st.dictionaries(_GO_KEY, _GO_VALUE | st.dictionaries(st.sampled_from(["input_tokens", "Output_Tokens"]),
                                                                   st.none() | st.integers(0, 2), max_size=2), max_size=4)


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(st.sampled_from(["schema", "Schema", "runtime", "nodes", "goal", "gate", "inputs", "graph",
                                        "tool_policies", "other"]),
                       _GO_VALUE | st.dictionaries(st.sampled_from(["a", "B", "text", "Paused_At", "signals"]),
                                                   st.none() | _GO_RECORD | _GO_VALUE, max_size=3), max_size=5))
def test_a_state_read_as_written_is_what_the_decoder_makes_of_it(data):
    # read_as_written only ever accepts: whatever it accepts, go_decoded gives back as it is.
    if feed.read_as_written(data, snapshot.SNAPSHOT):
        assert feed.go_decoded(data, snapshot.SNAPSHOT) == (data, None)


def test_a_state_too_deep_to_write_back_is_refused_as_before():
    nested = b'{"k":' * 300 + b"1" + b"}" * 300
    with pytest.raises(BadSnapshot) as caught:
        parse_json_object(b'{"schema":3,"x":' + nested + b"}", "state.json")
    assert str(caught.value) == "state.json nests deeper than 255 levels"


def record_outcome(record: object) -> str | None:
    try:
        snapshot._check_record("n", record)
    except BadSnapshot as exc:
        return str(exc)
    return None


_RECORD_VALUE = (st.none() | st.booleans() | st.integers(-2, 2**63) | st.floats(-1, 200_000)
                 | st.just(float("nan")) | st.just(float("inf")) | st.text(max_size=3)
                 | st.lists(st.integers(), max_size=1) | _USAGE)


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(snapshot._RECORD_TYPED | {"other"})), _RECORD_VALUE, max_size=5))
def test_a_record_is_plain_exactly_when_the_general_check_passes(record):
    assert snapshot._plain_record("n", record) == (record_outcome(record) is None)


def test_a_record_with_two_bad_fields_gives_the_first_reason_in_check_order():
    content, data = corpus_state()
    node_id = next(iter(data["nodes"]))
    data["nodes"][node_id] = {"cost_usd": -1, "verdict": 5}
    with pytest.raises(BadSnapshot) as caught:
        parse_state(indented(data))
    assert str(caught.value) == f"state.json nodes[{node_id!r}].verdict must be a string"


def test_a_long_node_id_is_refused():
    _, data = corpus_state()
    data["nodes"] = {"n" * 513: {"verdict": "PASS"}}
    with pytest.raises(BadSnapshot) as caught:
        parse_state(indented(data))
    assert str(caught.value) == "state.json nodes: 'node id' is 513 characters long (max 512): not an id"


def test_the_per_run_cost_bound_is_still_summed_when_records_can_reach_it():
    # $100k is one record's cap: 9,999 records and the planning cost reach $1e9 exactly
    # (allowed); one record more is past the bound.
    base = {"schema": 3, "planning_cost_usd": 100_000}
    at_bound = {**base, "nodes": {f"n{i}": {"cost_usd": 100_000} for i in range(9_999)}}
    assert len(parse_state(indented(at_bound))["nodes"]) == 9_999
    past = {**base, "nodes": {f"n{i}": {"cost_usd": 100_000} for i in range(10_000)}}
    with pytest.raises(BadSnapshot) as caught:
        parse_state(indented(past))
    assert str(caught.value) == "state.json's costs add up to more than $1,000,000,000 (the ledger's per-run bound)"


def graph_outcome(graph: dict, *, one_pass: bool, monkeypatch) -> str | None:
    with monkeypatch.context() as patched:
        if not one_pass:
            patched.setattr(snapshot, "_plain_graph_nodes", lambda nodes: False)
        try:
            snapshot._check_graph(graph, "graph.json")
        except BadSnapshot as exc:
            return str(exc)
    return None


_GRAPH_VALUE = (st.none() | st.booleans() | st.integers(-2, 2) | st.floats(-1, 200_000) | st.just(float("nan"))
                | st.just(float("inf")) | st.just(100_000) | st.sampled_from(["", "a", "n" * 513]))
# Mostly nodes of the engine's shape, each field sometimes of another type or absent.
_GRAPH_NODE = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", "c"]) | _GRAPH_VALUE},
    optional={"type": st.sampled_from(["claude-run", None]) | _GRAPH_VALUE,
              "budget_usd": st.floats(0, 9) | _GRAPH_VALUE, "prompt": _GRAPH_VALUE}) | st.integers(0, 1)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_GRAPH_NODE, max_size=4), st.sampled_from([None, "g", 5]))
def test_graph_nodes_seen_in_one_pass_keep_the_general_answer(monkeypatch, nodes, name):
    graph = {"name": name, "nodes": nodes}
    assert graph_outcome(graph, one_pass=True, monkeypatch=monkeypatch) == graph_outcome(
        graph, one_pass=False, monkeypatch=monkeypatch)


def test_a_plain_graph_still_has_its_name_checked():
    graph = {"name": 5, "nodes": [{"id": "a", "type": "claude-run", "budget_usd": 0.5}]}
    assert snapshot._plain_graph_nodes(graph["nodes"])
    with pytest.raises(BadSnapshot) as caught:
        snapshot._check_graph(graph, "graph.json")
    assert str(caught.value) == "graph.json 'name' must be a string, got 5"
