"""events.jsonl lines: each complete line validated into an event (tail.py reads them).

Bad lines are reported with their byte offset and skipped; a line written in a newer
schema stops reading *before* it, so a newer omg-ledger can resume at that byte.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import NamedTuple, TypeGuard

import orjson

from .bounds import MAX_ID_CHARS, shown, too_long_id
from .tail import MAX_LINE_BYTES, Paused, Rejected
from .units import BadTimestamp, parse_timestamp

__all__ = ["MAX_LINE_BYTES", "SUPPORTED_SCHEMA", "Event", "GoMap", "GoSlice", "GoStruct", "as_go_decodes", "as_go_reads",
           "check_event", "engine_fields", "go_decoded", "go_type_error", "load_line", "parse_stream_line", "read_line", "read_as_written",
           "stored_fields"]

SUPPORTED_SCHEMA = 3
# Plausibility caps. A value above them is damage, not a measurement, and storing it
# would overflow the ledger's 64-bit sums (costs are kept as integer nano-dollars) and
# 32-bit counters; such a line is a problem, never a crash.
MAX_COST_USD = 100_000  # one model invocation
MAX_TOKENS = 10**12  # one model invocation, per token field
MAX_COUNTER = 2**31 - 1  # retries, round
MAX_INT64 = 2**63 - 1  # the engine's Go int: schema, retries, round, token counts

KNOWN_EVENTS = frozenset(
    {
        "run_started",
        "run_finished",
        "node_started",
        "node_passed",
        "node_failed",
        "node_retried",
        "gate_paused",
        "gate_approved",
        "gate_rejected",
    }
)
NODE_EVENTS = frozenset(e for e in KNOWN_EVENTS if e.startswith(("node_", "gate_")))
# The event-type set is closed per schema version: a new type bumps the schema
# (RUN-FEED.md; schema 2 added the gate events). So at a schema this ledger reads, an
# unknown type is bad input, never news.
GATE_EVENTS = frozenset(e for e in KNOWN_EVENTS if e.startswith("gate_"))
EVENTS_OF_SCHEMA = {1: KNOWN_EVENTS - GATE_EVENTS, 2: KNOWN_EVENTS, 3: KNOWN_EVENTS}
TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
_STRING_FIELDS = ("run_id", "node_id", "phase", "outcome", "verdict", "detail", "session_id", "provenance")
# Short by nature (ids and closed sets); a long one is damage, and node_id is indexed.
_BOUNDED_FIELDS = ("run_id", "node_id", "session_id", "phase", "outcome", "verdict", "provenance")
_KEY_PATTERN = re.compile(rb'"\s*:')
TOO_DEEP = object()
# The fast path's view of the fields check_event types (see _plain_engine_event).
# (schema and event are settled before the loop.)
_TEXT, _COST, _COUNTER, _FLAG, _USAGE = range(5)
_FIELD_CODES = {**dict.fromkeys(_STRING_FIELDS, _TEXT), "ts": _TEXT, "cost_usd": _COST,
                "retries": _COUNTER, "round": _COUNTER, "cost_unknown": _FLAG, "usage": _USAGE}
_BOUNDED_SET = frozenset(_BOUNDED_FIELDS)
TOKEN_SET = frozenset(TOKEN_FIELDS)


class GoStruct:
    """One of the engine's structs as encoding/json decodes a JSON object into it: each
    field's JSON name (its tag) with the Go type it holds — a GoStruct, GoMap, GoSlice or
    one of the GO_* names — and the names as Go's case folding matches a key to them."""

    __slots__ = ("fields", "by_fold")

    def __init__(self, fields: dict[str, object]) -> None:
        self.fields = fields
        self.by_fold = {name.upper(): name for name in fields}


class GoMap(NamedTuple):
    """map[string]element: its keys are taken as written (no folding)."""

    element: object


class GoSlice(NamedTuple):
    element: object


GO_STRING, GO_INT, GO_FLOAT, GO_BOOL, GO_RAW = "string", "int", "float64", "bool", "json.RawMessage"
# runfeed.TokenUsage and runfeed.Event (internal/runfeed/runfeed.go); runstate.TokenUsage
# has the same tags.
TOKEN_USAGE = GoStruct(dict.fromkeys(TOKEN_FIELDS, GO_INT))
EVENT = GoStruct({"schema": GO_INT, "ts": GO_STRING, "event": GO_STRING, **dict.fromkeys(_STRING_FIELDS, GO_STRING),
                  "cost_usd": GO_FLOAT, "cost_unknown": GO_BOOL, "retries": GO_INT, "round": GO_INT,
                  "usage": TOKEN_USAGE})
EVENT_FIELDS = frozenset(EVENT.fields)


class Event:
    """One valid stream line. ``data`` is the parsed object; ``raw`` the exact line.

    A slotted class: one is made per line, and a frozen dataclass's __init__ would
    cost three times as much. Nothing assigns to an event's fields.
    """

    __slots__ = ("line_no", "byte_offset", "data", "raw", "ts", "at_us")

    def __init__(self, line_no: int, byte_offset: int, data: dict, raw: str, ts: str, at_us: int) -> None:
        self.line_no = line_no
        self.byte_offset = byte_offset
        self.data = data
        self.raw = raw
        self.ts = ts  # normalized UTC
        self.at_us = at_us

    @property
    def type(self) -> str:
        return self.data["event"]

    def _fields(self) -> tuple:
        return (self.line_no, self.byte_offset, self.data, self.raw, self.ts, self.at_us)

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if isinstance(other, Event) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # data is a dict

    def __repr__(self) -> str:
        return (f"Event(line_no={self.line_no!r}, byte_offset={self.byte_offset!r}, data={self.data!r}, "
                f"raw={self.raw!r}, ts={self.ts!r}, at_us={self.at_us!r})")


def parse_stream_line(line: bytes, line_no: int, offset: int, run_id: str | None = None) -> Event | Rejected | Paused:
    """One complete line of a run stream, for the tail: an event, bad input (including a
    line naming another run than ``run_id``, its directory's), or a line of a newer
    schema that pauses reading before it."""
    try:
        data, line = read_line(line)
    except orjson.JSONDecodeError as exc:
        return Rejected(f"not JSON: {exc}")
    # (A run_id the fast path passed is a string; an absent one names no other run.)
    if type(data) is dict and _plain_engine_event(line, data) and (
            run_id is None or data.get("run_id", run_id) == run_id):
        try:
            ts, at_us = parse_timestamp(data["ts"])
        except BadTimestamp as exc:
            return Rejected(str(exc))
        return Event(line_no, offset, data, line.decode("utf-8"), ts, at_us)
    return _checked_stream_line(line, data, line_no, offset, run_id)


# A \u escape of a UTF-16 surrogate pair, of a lone surrogate, or any other escape (so
# an escaped backslash is never taken for the start of one).
_ESCAPE = re.compile(rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2}|.)",
                     re.DOTALL)


def _replace_lone_surrogate(match: re.Match[bytes]) -> bytes:
    escape = match.group()
    return b"\\ufffd" if len(escape) == 6 else escape


def _each_invalid_byte_u_fffd(error: UnicodeError) -> tuple[str, int]:
    # Go's utf8.DecodeRune answers (RuneError, 1) at a byte that does not begin valid
    # UTF-8, so encoding/json's unquote makes that one byte U+FFFD and goes on at the next.
    # (Python's "replace" makes one U+FFFD of a cut sequence: b"\xe2\x82" is one, Go's two.)
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "\ufffd", error.start + 1


_GO_UTF8 = "omg-ledger-go-utf8"
codecs.register_error(_GO_UTF8, _each_invalid_byte_u_fffd)


def as_go_decodes(data: bytes) -> str:
    """``data`` as text, each byte that is not part of valid UTF-8 U+FFFD: what Go's
    encoding/json makes of a string's bytes (decode.go unquoteBytes, "Coerce to well-formed
    UTF-8"). Outside a string such a byte is a syntax error to Go, and U+FFFD is one to
    any JSON parser, so parsing this text answers as Go does."""
    return data.decode("utf-8", _GO_UTF8)


def as_go_reads(data: bytes) -> tuple[bytes, bytes]:
    """(``data`` decoded as encoding/json decodes it — each byte that is not part of valid
    UTF-8 U+FFFD —, that text with each \\u escape of a lone UTF-16 surrogate, not half of
    a pair, as \\ufffd): the text to keep, and the text that parses as Go reads ``data``
    (orjson refuses both kinds). Both are ``data`` itself where it holds neither."""
    text = as_go_decodes(data).encode("utf-8")
    return text, _ESCAPE.sub(_replace_lone_surrogate, text)


def read_line(line: bytes) -> tuple[object, bytes]:
    """(a stream line parsed as the engine's decoder reads it, the bytes it was parsed
    from). Nearly always ``line`` itself; when orjson refuses it, the line is read again
    as encoding/json reads it (as_go_reads; the bytes returned keep a surrogate's escape).
    Raises orjson.JSONDecodeError for a line that is not JSON."""
    try:
        return orjson.loads(line), line
    except orjson.JSONDecodeError:
        text, escaped = as_go_reads(line)
        if escaped == line:
            raise  # neither: a line that is not JSON to the engine either
    return orjson.loads(escaped), text


def load_line(raw: str) -> object:
    """A stored line (events.raw) parsed as the engine's decoder reads it (read_line).
    Raises orjson.JSONDecodeError for a line that is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return read_line(raw.encode("utf-8"))[0]


def engine_fields(data: dict) -> dict:
    """The event's fields as the engine's reader decodes them (runfeed.Walk: encoding/json
    into runfeed.Event; go_decoded). Keys naming no field are kept as written."""
    return data if _read_as_written(data) else go_decoded(data, EVENT)[0]


def _read_as_written(data: dict) -> bool:
    """Whether the decoder reads ``data`` as it is (nearly every line): every key of it and
    of its usage a field spelled exactly, and no null. Stricter than read_as_written(data,
    EVENT), which also passes a key naming no field (go_decoded keeps one as written), and
    made of set operations: it runs for every line."""
    if not EVENT_FIELDS.issuperset(data) or None in data.values():
        return False
    usage = data.get("usage")
    return type(usage) is not dict or (TOKEN_SET.issuperset(usage) and None not in usage.values())


def stored_fields(raw: str) -> dict | None:
    """A stored line's fields as this version reads them (engine_fields), or None for a
    line an older omg-ledger stored that this one refuses: a key spelled in another case
    that it took for no field, holding a bad value or repeating a field. Such a line
    derives nothing, as a sync of the stream now would not store it."""
    data = load_line(raw)
    if _read_as_written(data):
        return data  # the fields as stored: checked when they were
    fields, repeated = go_decoded(data, EVENT)
    if repeated is not None or check_event(fields) is not None:
        return None
    return fields


# encoding/json's folding (fold.go), as far as it can reach an ASCII field name: ASCII
# letters by case, and the only two other runes whose fold is ASCII, U+017F (S) and U+212A (K).
_FOLDS_TO_ASCII = str.maketrans({"\u017f": "S", "\u212a": "K"})


def _field_named(key: str, by_fold: dict[str, str]) -> str | None:
    """The field ``key`` names when it is not spelled exactly, or None."""
    folded = key.translate(_FOLDS_TO_ASCII)
    return by_fold.get(folded.upper()) if folded.isascii() else None


def go_decoded(data: dict, struct: GoStruct) -> tuple[dict, tuple[str, str, str] | None]:
    """(``data``'s fields as encoding/json decodes the object into ``struct``, the first two
    keys found naming one field with that field, or None). A key names a field exactly or
    else in any case (Go's folding), the later of two keys naming one field is the one
    read, and a JSON null leaves a field its zero value, which is the field absent here
    (the engine omits zero values). Nested structs, and the elements of maps and slices,
    are decoded the same way; keys naming no field are kept as written, and so is a value
    of another type than its field's (the caller's checks word that)."""
    fields: dict = {}
    spelled: dict[str, str] = {}
    repeated = None
    kinds = struct.fields
    for key, value in data.items():
        name = key if key in kinds else _field_named(key, struct.by_fold)
        if name is None:
            fields[key] = value
            continue
        if name in spelled and repeated is None:
            repeated = (spelled[name], key, name)
        spelled.setdefault(name, key)
        if value is None:
            continue  # a null assigns nothing
        kind = kinds[name]
        value, inner = _go_value(value, kind)
        repeated = repeated or inner
        earlier = fields.get(name)
        if type(kind) is GoStruct and type(earlier) is dict and type(value) is dict:
            value = {**earlier, **value}  # decoded into the same struct: its other fields stay
        fields[name] = value
    return fields, repeated


def _go_value(value: object, kind: object) -> tuple[object, tuple[str, str, str] | None]:
    """A field's value (not null) as go_decoded reads it into ``kind``."""
    if isinstance(kind, GoStruct):
        return go_decoded(value, kind) if type(value) is dict else (value, None)
    if isinstance(kind, GoMap) and type(value) is dict:
        decoded, repeated = {}, None
        for key, item in value.items():
            decoded[key], inner = _go_element(item, kind.element)
            repeated = repeated or inner
        return decoded, repeated
    if isinstance(kind, GoSlice) and type(value) is list:
        elements = [_go_element(item, kind.element) for item in value]
        return [item for item, _ in elements], next((inner for _, inner in elements if inner), None)
    return value, None


def _go_element(item: object, kind: object) -> tuple[object, tuple[str, str, str] | None]:
    """A map's or slice's element: stored whatever it holds, so a null one is its zero
    value (a struct's is an object with no field; a map's, slice's or RawMessage's null)."""
    if item is not None:
        return _go_value(item, kind)
    if isinstance(kind, GoStruct):
        return {}, None
    return _GO_ZERO.get(kind) if isinstance(kind, str) else None, None


_GO_ZERO = {GO_STRING: "", GO_INT: 0, GO_FLOAT: 0.0, GO_BOOL: False}


def read_as_written(value: object, kind: GoStruct | GoMap | GoSlice) -> bool:
    """Whether go_decoded reads ``value`` into ``kind`` as it is: every key of each struct
    in it a field spelled exactly or naming none, and no null where a field or an element
    is (then no decoded copy need be built)."""
    if isinstance(kind, GoStruct):
        if type(value) is not dict:
            return True
        for key, item in value.items():
            inner = kind.fields.get(key)
            if inner is None:
                if _field_named(key, kind.by_fold) is not None:
                    return False
            elif item is None or (not isinstance(inner, str) and not read_as_written(item, inner)):
                return False
        return True
    if isinstance(kind, GoMap):
        items = value.values() if type(value) is dict else ()
    else:
        items = value if type(value) is list else ()
    element = kind.element
    if isinstance(element, str):
        return None not in items
    return all(item is not None and read_as_written(item, element) for item in items)


def _checked_stream_line(line: bytes, data: object, line_no: int, offset: int,
                         run_id: str | None) -> Event | Rejected | Paused:
    """parse_stream_line's general path, for a parsed line the fast path did not settle."""
    if not isinstance(data, dict):
        return Rejected(f"not a JSON object but {type(data).__name__}")
    fields, repeated = go_decoded(data, EVENT)
    schema = fields.get("schema")
    # The engine's reader refuses the stream at a line it decodes whose schema is newer
    # (runfeed.Walk): this ledger's checks of the fields are for the schemas it reads.
    if _is_int(schema) and SUPPORTED_SCHEMA < schema <= MAX_INT64 and _engine_decodes(fields):
        # (streams.paused_schema is 32-bit: a schema past it waits for an upgrade the same.)
        return Paused(min(schema, MAX_COUNTER), (
            f"event schema {schema} is newer than this omg-ledger understands "
            f"(max {SUPPORTED_SCHEMA}); ingestion of this file waits here for an upgrade"))
    result = _check_parsed_line(line, data, fields, repeated)
    if isinstance(result, str):
        return Rejected(result)
    data, ts, at_us = result
    if run_id is not None and (reason := foreign_run_id(data, run_id)) is not None:
        return Rejected(reason)
    return Event(line_no, offset, data, line.decode("utf-8"), ts, at_us)


def _engine_decodes(fields: dict) -> bool:
    """Whether encoding/json decodes ``fields`` (as go_decoded reads them) into runfeed.Event
    without an error."""
    return go_type_error(fields, EVENT) is None


def go_type_error(value: object, kind: object) -> str | None:
    """Why encoding/json fails to decode ``value`` (as go_decoded reads it) into ``kind``
    ("<where> must be …, got …"), or None: each field a value of its Go type, integers
    within 64 bits (a null is any type's zero value, a key naming no field is ignored). Go
    goes on decoding past such a value, but Unmarshal then fails as a whole."""
    fault = _go_type_fault(value, kind)
    if fault is None:
        return None
    steps, named, held = fault
    where = ""
    for step in reversed(steps):  # (gathered from the value outwards)
        if type(step) is int:
            where += f"[{step}]"
        elif step[0] == "key":
            where += f"[{shown(step[1])}]"
        else:
            where = f"{where}.{step[1]}" if where else step[1]
    return f"{where} must be {named}, got {shown(held)}"


_GO_SCALARS = {GO_STRING: ((str,), "a string"), GO_INT: ((int,), "an integer within 64 bits"),
               GO_FLOAT: ((float, int), "a number"),  # (orjson's numbers are finite)
               GO_BOOL: ((bool,), "a boolean")}
_GO_SCALAR_TYPES = {kind: types for kind, (types, _named) in _GO_SCALARS.items()}


def _go_type_fault(value: object, kind: object) -> tuple[list, str, object] | None:
    """go_type_error's walk: None, or (the steps to the value at fault, innermost first —
    ("field", name), ("key", key) or an index —, what its type takes, the value). No text
    is made unless something is at fault: the walk visits every value of a state.json."""
    if value is None:
        return None
    held = type(value)
    known = type(kind)
    if known is GoStruct:
        if held is not dict:
            return [], "an object", value
        fields = kind.fields
        for key, item in value.items():
            inner = fields.get(key)
            if inner is None or item is None:
                continue
            types = _GO_SCALAR_TYPES.get(inner)
            if types is not None and type(item) in types and (
                    type(item) is not int or -MAX_INT64 - 1 <= item <= MAX_INT64):
                continue  # (most fields: checked here, without a call)
            fault = _go_type_fault(item, inner)
            if fault is not None:
                fault[0].append(("field", key))
                return fault
        return None
    if known is GoMap or known is GoSlice:
        if known is GoMap:
            if held is not dict:
                return [], "an object", value
            elements = ((("key", key), item) for key, item in value.items())
        else:
            if held is not list:
                return [], "a list", value
            elements = enumerate(value)
        element = kind.element
        for step, item in elements:
            if item is not None:
                fault = _go_type_fault(item, element)
                if fault is not None:
                    fault[0].append(step)
                    return fault
        return None
    scalar = _GO_SCALARS.get(kind)
    if scalar is None:
        return None  # json.RawMessage: any JSON
    types, named = scalar
    if held not in types or (held is int and kind == GO_INT and not -MAX_INT64 - 1 <= value <= MAX_INT64):
        return [], named, value
    return None


def _check_parsed_line(line: bytes, data: dict, fields: dict, repeated: tuple[str, str, str] | None
                       ) -> tuple[dict, str, int] | str:
    """The general check of a parsed object (``fields``, ``repeated``: as go_decoded reads
    it), in the order that picks each reason."""
    duplicate = duplicate_key(line, data)
    if duplicate is TOO_DEEP:
        return "nested too deeply to check for duplicate keys"
    if duplicate is not None:
        return f"duplicate key {duplicate!r}"
    if repeated is not None:
        first, second, name = repeated
        return (f"keys {first!r} and {second!r} both name the field {name!r} (the engine reads a key in any "
                f"case): a duplicate key")
    reason = check_event(fields)
    if reason is not None:
        return reason
    try:
        ts, at_us = parse_timestamp(fields["ts"])
    except BadTimestamp as exc:
        return str(exc)
    return fields, ts, at_us


def _plain_engine_event(line: bytes, data: dict) -> bool:
    """True only when the general path would find nothing wrong with the fields and no
    duplicate key: a line of the engine's own shape at a schema this code reads. False
    means "not sure": the general path decides, so every reason text comes from one
    place. One pass over the fields present, one lookup each.
    """
    schema, event = data.get("schema"), data.get("event")
    if type(schema) is not int or type(event) is not str or event not in EVENTS_OF_SCHEMA.get(schema, ()) \
            or "ts" not in data:  # its type is checked with the other fields
        return False
    for name, value in data.items():
        code = _FIELD_CODES.get(name)
        if code is None:
            if name not in EVENT_FIELDS and _field_named(name, EVENT.by_fold) is not None:
                return False  # a field spelled in another case: the general path reads it
            continue  # a field this ledger does not read: anything
        kind = type(value)
        if code == _TEXT:
            if kind is not str or (len(value) > MAX_ID_CHARS and name in _BOUNDED_SET):
                return False
        elif code == _COST:
            # NaN fails both comparisons and infinity the cap: only finite costs pass.
            if (kind is not float and kind is not int) or not 0 <= value <= MAX_COST_USD:
                return False
        elif code == _COUNTER:
            if kind is not int or not 0 <= value <= MAX_COUNTER:
                return False
        elif code == _FLAG:
            if kind is not bool:
                return False
        elif code == _USAGE:
            if kind is not dict:
                return False
            for token, count in value.items():
                if token in TOKEN_SET:
                    if type(count) is not int or not 0 <= count <= MAX_TOKENS:
                        return False
                elif _field_named(token, TOKEN_USAGE.by_fold) is not None:
                    return False
    if event in NODE_EVENTS and not data.get("node_id"):
        return False
    try:  # written_as_serialized, inline: it runs for every line
        return orjson.dumps(data) == line
    except orjson.JSONEncodeError:
        return False


def written_as_serialized(text: bytes, data: dict, option: int | None = None) -> bool:
    """Whether ``text`` is byte for byte orjson's serialization of what it parsed to.

    Then no object in it holds a key twice: a serialized dict writes each of its keys
    once, and these are the very bytes. The engine writes what orjson writes (compact
    lines, state.json indented by two), so this C-level comparison settles nearly every
    file; any other spelling (a space before ':', an escaped '&', 0.10) is merely not
    settled here and takes duplicate_key's exact check.
    """
    try:
        return orjson.dumps(data, option=option) == text
    except orjson.JSONEncodeError:  # too deep or an integer beyond 64 bits: not settled here
        return False


def check_event(data: dict) -> str | None:
    """Type-check the fields this ledger derives from; None when the event is usable."""
    schema = data.get("schema")
    if not _is_int(schema) or not 1 <= schema <= MAX_INT64:
        return f"missing or invalid 'schema': {shown(schema)}"
    event = data.get("event")
    if not isinstance(event, str) or not event:
        return f"missing or invalid 'event': {shown(event)}"
    if not isinstance(data.get("ts"), str):
        return f"missing or invalid 'ts': {shown(data.get('ts'))}"
    # A schema this code reads but has no table for (only when SUPPORTED_SCHEMA was
    # raised ahead of the table) is taken to have the newest known set.
    if schema <= SUPPORTED_SCHEMA and event not in EVENTS_OF_SCHEMA.get(schema, KNOWN_EVENTS):
        return (f"unknown event type {shown(event)} at schema {schema}, whose event types are closed "
                f"(a new type comes with a new schema); skipped")
    for name in _STRING_FIELDS:
        if name in data and not isinstance(data[name], str):
            return f"'{name}' must be a string, got {shown(data[name])}"
    for name in _BOUNDED_FIELDS:
        reason = too_long_id(name, data.get(name))
        if reason is not None:
            return reason
    if event in NODE_EVENTS and not data.get("node_id"):
        return f"{event} without a node_id"
    if "cost_usd" in data:
        cost = data["cost_usd"]
        if not isinstance(cost, int | float) or isinstance(cost, bool) or not math.isfinite(cost) or cost < 0:
            return f"'cost_usd' must be a non-negative number, got {shown(cost)}"
        if cost > MAX_COST_USD:
            return f"'cost_usd' {shown(cost)} is beyond any one invocation (max {MAX_COST_USD})"
    if "cost_unknown" in data and not isinstance(data["cost_unknown"], bool):
        return f"'cost_unknown' must be a boolean, got {shown(data['cost_unknown'])}"
    for name in ("retries", "round"):
        if name in data and (not _is_int(data[name]) or not 0 <= data[name] <= MAX_COUNTER):
            return f"'{name}' must be a non-negative integer (max {MAX_COUNTER}), got {shown(data[name])}"
    if "usage" in data:
        usage = data["usage"]
        if not isinstance(usage, dict):
            return f"'usage' must be an object, got {shown(usage)}"
        for name in TOKEN_FIELDS:
            if name in usage and (not _is_int(usage[name]) or not 0 <= usage[name] <= MAX_TOKENS):
                return f"'usage.{name}' must be a non-negative integer (max {MAX_TOKENS}), got {shown(usage[name])}"
    return None


def foreign_run_id(data: dict, run_id: str) -> str | None:
    """Why a line naming another run than its directory is refused, or None.

    Indexing it under this directory would bill another run's work here (and twice,
    when that run's own directory is indexed too).
    """
    named = data.get("run_id")
    if named is None or named == run_id:
        return None
    return (f"the line names run_id {shown(named)}, not this directory's {run_id!r}: another run's "
            f"line, not indexed here")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _count_keys(value: dict) -> int:
    """Keys in an event object. Fast path for the engine's shape: scalars and one level
    of objects (usage); anything deeper takes the general walk."""
    total = len(value)
    for item in value.values():
        kind = type(item)
        if kind is dict:
            total += len(item)
            for inner in item.values():
                if type(inner) in (dict, list):
                    return _count_keys_deep(value)
        elif kind is list:
            return _count_keys_deep(value)
    return total


def _count_keys_deep(value: object) -> int:
    # Iterative: a hostile line may nest ~1000 deep (orjson's limit is above Python's
    # recursion limit), and that must be a problem report, not a RecursionError.
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            total += len(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return total


def duplicate_key(line: bytes, data: dict) -> str | object | None:
    """Find a key repeated within one object (JSON parsers silently keep the last).

    Cheap pre-check: a line whose `"<ws>:` count equals the parsed key count cannot
    hold a duplicate; only the rare mismatch (a detail containing '":', or a real
    duplicate) pays for the slow exact check.
    """
    if len(_KEY_PATTERN.findall(line)) == _count_keys(data):
        return None
    found: list[str] = []

    def hook(pairs: list[tuple[str, object]]) -> dict:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(pairs)

    try:
        json.loads(line, object_pairs_hook=hook)
    except ValueError:
        return None
    except RecursionError:
        # Too deep for the exact check: refuse rather than risk a silently kept duplicate.
        return TOO_DEEP
    return found[0] if found else None
