"""Readers for a run's small JSON files: state.json, assess.json, rejected.json, graph.json.

Each is read whole (they are rewritten atomically, never appended), hashed, and
type-checked. A missing file is a fact about the run; an unreadable or malformed one
is a problem, reported with the reason, and the rest of the run still indexes.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass

import orjson

from .bounds import MAX_ID_CHARS, MAX_RUN_NANOS, NANOS_PER_USD, RUN_BOUND_TEXT, shown, too_long_id
from .errors import out_of_resources
from .feed import (
    GO_BOOL,
    GO_FLOAT,
    GO_INT,
    GO_RAW,
    GO_STRING,
    MAX_COST_USD,
    MAX_COUNTER,
    MAX_TOKENS,
    TOKEN_FIELDS,
    TOKEN_SET,
    TOKEN_USAGE,
    TOO_DEEP,
    GoMap,
    GoSlice,
    GoStruct,
    as_go_reads,
    duplicate_key,
    go_decoded,
    go_type_error,
    read_as_written,
    written_as_serialized,
)
from .units import usd_to_nanos

SUPPORTED_SNAPSHOT_SCHEMA = 3
MAX_SNAPSHOT_BYTES = 64 << 20
SNAPSHOT_NAMES = ("state.json", "assess.json", "rejected.json", "graph.json")
MAX_NESTING = 255  # orjson's own serialisation limit; a real snapshot nests about 5 deep


@dataclass(frozen=True)
class FileIdentity:
    dev: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True)
class SmallFile:
    identity: FileIdentity
    content: bytes
    sha256: str


class UnreadableFile(OSError):
    """The file exists but cannot be read as a regular file."""


def read_small_file(path: str, dir_fd: int | None = None) -> SmallFile:
    """Read a whole file read-only, refusing symlinks, FIFOs and directories; with
    ``dir_fd``, ``path``'s last component in that open directory."""
    try:
        fd = os.open(path if dir_fd is None else os.path.basename(path),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if out_of_resources(exc):
            raise  # (the process's, not the file's: it must not be remembered as unreadable)
        raise UnreadableFile(f"cannot open: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile("not a regular file")
        if info.st_size > MAX_SNAPSHOT_BYTES:
            raise UnreadableFile(f"larger than {MAX_SNAPSHOT_BYTES} bytes")
        chunks = []
        # The cap holds for what is read too: a file growing while it is read (or one whose
        # size says less than it holds) is never taken into memory past it.
        left = MAX_SNAPSHOT_BYTES + 1
        while left > 0:
            data = os.read(fd, min(1 << 20, left))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        if left <= 0:
            raise UnreadableFile(f"larger than {MAX_SNAPSHOT_BYTES} bytes")
        content = b"".join(chunks)
    except OSError as exc:
        if isinstance(exc, UnreadableFile) or out_of_resources(exc):
            raise
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    identity = FileIdentity(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    return SmallFile(identity, content, hashlib.sha256(content).hexdigest())


class BadSnapshot(ValueError):
    pass


def parse_json_object(content: bytes, name: str, go_reads: bool = False) -> dict:
    """``content`` parsed into an object. ``go_reads``, for a file the engine reads with
    encoding/json: a byte that is not UTF-8 inside a string, and a \\u escape of a lone
    UTF-16 surrogate, are U+FFFD, as Go decodes them (feed.as_go_reads); otherwise such a
    file is not JSON, as orjson has it."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        text = as_go_reads(content)[1] if go_reads else content
        if text == content:
            raise BadSnapshot(f"{name} is not JSON: {exc}") from exc
        content = text
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError as again:
            raise BadSnapshot(f"{name} is not JSON: {again}") from again
    # The engine writes its files as orjson does, indented by two: then the document
    # re-serialises (so it is not too deep) and holds no key twice, settled in C.
    if type(data) is dict and written_as_serialized(
            content, data, orjson.OPT_INDENT_2 if content[1:2] == b"\n" else None):
        return data
    return _checked_object(content, data, name)


def _checked_object(content: bytes, data: object, name: str) -> dict:
    """parse_json_object's general path, for a document the fast path did not settle."""
    if not isinstance(data, dict):
        raise BadSnapshot(f"{name} is not a JSON object but {type(data).__name__}")
    if not _depth_ok(data):
        raise BadSnapshot(f"{name} nests deeper than {MAX_NESTING} levels")
    # The engine writes each key once; a repeated one means two writers or an edit, and
    # a JSON parser would silently keep the last value (the stream refuses the same).
    duplicate = duplicate_key(content, data)
    if duplicate is TOO_DEEP:
        raise BadSnapshot(f"{name} nests too deeply to check for duplicate keys")
    if duplicate is not None:
        raise BadSnapshot(f"{name} has the key {shown(duplicate)} more than once in one object")
    return data


def _number(value: object) -> bool:
    """A dollar amount: finite, non-negative, and within the plausibility cap (feed.py)."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= MAX_COST_USD)


def _budget(value: object) -> bool:
    """A budget_usd: finite and within the plausibility cap. The engine writes a graph's value
    as declared and applies none that is not positive (scheduler.evaluateBudget; claude gets
    --max-budget-usd only when it is), so a negative one is a node without a budget, not damage."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value <= MAX_COST_USD)


def _int(value: object, limit: int = 2**63 - 1) -> bool:
    """A non-negative integer the ledger's columns can hold (BIGINT unless ``limit``)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def _depth_ok(value: object) -> bool:
    """Whether the document can be re-serialised (the ledger stores parts of it as JSON).

    orjson refuses more than MAX_NESTING levels, in C and without Python recursion; a
    real snapshot nests about 5 deep.
    """
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def snapshot_names_another_run(snapshot: dict | None, run_id: str) -> bool:
    """Whether a parsed state.json names a run_id other than its directory's."""
    named = snapshot.get("run_id") if snapshot is not None else None
    return isinstance(named, str) and named != run_id


def all_nodes_passed(snapshot: dict, graph_node_ids: Collection[str]) -> bool:
    """Whether a parsed state.json holds the engine's PASS for a closed leg of the graph
    with ``graph_node_ids`` (runstatus.Gather and Derive): as many PASS records, of any
    node, as the graph has nodes; a record of a node not in the graph counts too."""
    records = snapshot.get("nodes") or {}
    passed = sum(1 for record in records.values() if isinstance(record, dict) and record.get("verdict") == "PASS")
    return bool(graph_node_ids) and passed == len(graph_node_ids)


# runstate.Snapshot, the struct the engine's runstate.Load decodes state.json into with
# encoding/json (internal/runstate/runstate.go), and the structs it holds.
NODE_RECORD = GoStruct({
    "verdict": GO_STRING, "session_id": GO_STRING, "cost_usd": GO_FLOAT, "cost_unknown": GO_BOOL,
    "usage": TOKEN_USAGE, "budget_usd": GO_FLOAT, "duration": GO_INT, "artifact_path": GO_STRING,
    "detail": GO_STRING, "round": GO_INT, "judged": GO_BOOL, "provenance": GO_STRING})
_TOOL_POLICY = GoStruct({
    "allowed_tools": GoSlice(GO_STRING), "disallowed_tools": GoSlice(GO_STRING), "tools": GoSlice(GO_STRING),
    "setting_sources": GO_STRING, "strict_mcp_config": GO_BOOL, "plugin_dirs": GoSlice(GO_STRING)})
SNAPSHOT = GoStruct({
    "schema": GO_INT, "run_id": GO_STRING, "runtime": GO_STRING, "planning_cost_usd": GO_FLOAT,
    "planning_cost_unknown": GO_BOOL, "planning_usage": TOKEN_USAGE, "graph_source_path": GO_STRING,
    "graph_sha256": GO_STRING, "graph": GO_RAW, "inputs": GoMap(GO_STRING), "continue_on_fail": GO_BOOL,
    "tool_policies": GoMap(_TOOL_POLICY),
    "goal": GoStruct({"text": GO_STRING, "cycle": GO_INT, "max_cycles": GO_INT, "first_run_id": GO_STRING}),
    "build_evidence": GoStruct({"answer": GO_STRING, "declared_by": GO_STRING, "signals": GoSlice(GO_STRING)}),
    "nodes": GoMap(NODE_RECORD),
    "gate": GoStruct({"paused_at": GO_STRING, "decisions": GoMap(GO_STRING)})})


def as_the_engine_reads(data: dict) -> dict:
    """A parsed state.json's fields as runstate.Load decodes them (feed.go_decoded): a key
    in another case names its field, a null is the field absent (a null record in
    ``nodes`` an empty one). Two keys naming one field are a duplicate key, as in the stream."""
    if read_as_written(data, SNAPSHOT):
        return data  # (every file the engine writes)
    fields, repeated = go_decoded(data, SNAPSHOT)
    if repeated is not None:
        first, second, name = repeated
        raise BadSnapshot(f"state.json has the keys {shown(first)} and {shown(second)} in one object, which both "
                          f"name the field {shown(name)} (the engine reads a key in any case): a duplicate key")
    return fields


def parse_state(content: bytes) -> dict:
    """Validate state.json's shape wherever the ledger derives from it. The engine reads it
    with encoding/json (runstate.Load): a byte that is not UTF-8 in a string, and a lone
    surrogate's \\u escape, are U+FFFD, and its fields are read as as_the_engine_reads has them."""
    data = as_the_engine_reads(parse_json_object(content, "state.json", go_reads=True))
    schema = data.get("schema")
    if not _int(schema):
        raise BadSnapshot(f"state.json has no valid schema: {shown(schema)}")
    if schema != SUPPORTED_SNAPSHOT_SCHEMA:
        raise BadSnapshot(f"state.json schema {schema} is not understood (this omg-ledger reads "
                          f"{SUPPORTED_SNAPSHOT_SCHEMA})")
    for key in ("runtime", "run_id", "graph_source_path", "graph_sha256"):
        if key in data and not isinstance(data[key], str):
            raise BadSnapshot(f"state.json '{key}' must be a string, got {shown(data[key])}")
    for key in ("planning_cost_usd",):
        if key in data and not _number(data[key]):
            raise BadSnapshot(f"state.json '{key}' must be a non-negative number, got {shown(data[key])}")
    usage = data.get("planning_usage")
    if usage is not None and (
        not isinstance(usage, dict) or not all(_int(usage.get(t, 0), MAX_TOKENS) for t in TOKEN_FIELDS)
    ):
        raise BadSnapshot("state.json 'planning_usage' must hold non-negative integer token counts")
    for key in ("goal", "build_evidence", "gate", "inputs"):
        if key in data and data[key] is not None and not isinstance(data[key], dict):
            raise BadSnapshot(f"state.json '{key}' must be an object")
    # Every other field the ledger stores must have the column's type (PostgreSQL is
    # strict where SQLite would quietly keep a number in a text column).
    for where, keys in (("goal", ("text", "first_run_id")), ("build_evidence", ("answer", "declared_by")),
                        ("gate", ("paused_at",))):
        section = data.get(where) or {}
        for key in keys:
            if section.get(key) is not None and not isinstance(section[key], str):
                raise BadSnapshot(f"state.json '{where}.{key}' must be a string, got {shown(section[key])}")
    goal = data.get("goal") or {}
    reason = too_long_id("goal.first_run_id", goal.get("first_run_id"))
    if reason is not None:
        raise BadSnapshot(f"state.json {reason}")
    for key in ("cycle", "max_cycles"):
        if goal.get(key) is not None and not _int(goal[key], MAX_COUNTER):
            raise BadSnapshot(f"state.json 'goal.{key}' must be a non-negative integer, got {shown(goal[key])}")
    _check_graph(data.get("graph"), "state.json graph")
    nodes = data.get("nodes")
    if nodes is None:
        data["nodes"] = {}
    elif not isinstance(nodes, dict):
        raise BadSnapshot("state.json 'nodes' must be an object")
    else:
        for node_id, record in nodes.items():
            if not _plain_record(node_id, record):
                _check_record(node_id, record)
        # Each record is capped; their sum must fit the per-run bound too (bounds.py).
        # The planning cost and each record are at most MAX_COST_USD (checked above),
        # so only a run of very many records can reach the bound: sum only then.
        if (len(nodes) + 1) * MAX_COST_USD * NANOS_PER_USD > MAX_RUN_NANOS:
            total = usd_to_nanos(data.get("planning_cost_usd") or 0) + sum(
                usd_to_nanos(record.get("cost_usd") or 0) for record in nodes.values())
            if total > MAX_RUN_NANOS:
                raise BadSnapshot(f"state.json's costs add up to more than {RUN_BOUND_TEXT} "
                                  f"(the ledger's per-run bound)")
    # The fields the ledger does not read hold what the engine's types take too: a file
    # runstate.Load cannot decode is one the engine cannot read at all (no status, no row).
    reason = go_type_error(data, SNAPSHOT)
    if reason is not None:
        raise BadSnapshot(f"state.json {reason}: the engine cannot read it (runstate.Load)")
    return data


def _check_graph(graph: object, where: str) -> None:
    if graph is None:
        return
    if not isinstance(graph, dict):
        raise BadSnapshot(f"{where} must be an object")
    graph_nodes = graph.get("nodes")
    if graph_nodes is None:
        return
    if type(graph_nodes) is list and _plain_graph_nodes(graph_nodes):
        graph_nodes = []  # every node passes the per-node checks below (seen in one pass)
    elif not isinstance(graph_nodes, list) or not all(
        isinstance(n, dict) and isinstance(n.get("id"), str) and n["id"] for n in graph_nodes
    ):
        raise BadSnapshot(f"{where} nodes must be a list of objects with string ids")
    for node in graph_nodes:
        reason = too_long_id("node id", node["id"])
        if reason is not None:
            raise BadSnapshot(f"{where} nodes: {reason}")
    for key in ("name", "version"):
        if graph.get(key) is not None and not isinstance(graph[key], str):
            raise BadSnapshot(f"{where} '{key}' must be a string, got {shown(graph[key])}")
    for node in graph_nodes:
        if node.get("type") is not None and not isinstance(node["type"], str):
            raise BadSnapshot(f"{where} node {shown(node['id'])} 'type' must be a string")
        if "budget_usd" in node and node["budget_usd"] is not None and not _budget(node["budget_usd"]):
            raise BadSnapshot(f"{where} node {shown(node['id'])} 'budget_usd' must be a number up to {MAX_COST_USD}")


def _plain_graph_nodes(graph_nodes: list) -> bool:
    """True only when _check_graph would find nothing wrong with any node, in one pass.
    False means "not sure": its checks decide, in their order, and word the reason."""
    for node in graph_nodes:
        if type(node) is not dict:
            return False
        node_id, kind = node.get("id"), node.get("type")
        if type(node_id) is not str or not node_id or len(node_id) > MAX_ID_CHARS \
                or (kind is not None and type(kind) is not str):
            return False
        budget = node.get("budget_usd")
        # NaN fails both comparisons and infinity the cap: only finite amounts pass.
        if budget is not None and ((type(budget) is not float and type(budget) is not int)
                                   or not -MAX_COST_USD <= budget <= MAX_COST_USD):
            return False
    return True


_RECORD_TYPED = frozenset(("verdict", "cost_usd", "budget_usd", "round", "retries", "duration", "provenance",
                           "session_id", "detail", "artifact_path", "cost_unknown", "judged", "usage"))
_RECORD_TEXT = frozenset(("verdict", "provenance", "session_id", "detail", "artifact_path"))
# The lowest amount each money field may hold (a budget that is not positive is none: _budget).
_RECORD_MONEY = {"cost_usd": 0, "budget_usd": -MAX_COST_USD}
_RECORD_FLAGS = frozenset(("cost_unknown", "judged"))
_RECORD_NULLABLE = frozenset(("provenance", "session_id", "detail", "artifact_path", "usage"))


def _plain_record(node_id: str, record: object) -> bool:
    """True only when _check_record would find nothing wrong: one pass over the fields
    present. False means "not sure": _check_record decides and words the reason."""
    if type(record) is not dict or len(node_id) > MAX_ID_CHARS:
        return False
    for key, value in record.items():
        kind = type(value)
        if kind is str:
            if key not in _RECORD_TEXT and key in _RECORD_TYPED:
                return False
        elif kind is float:
            # NaN fails both comparisons and infinity the cap: only finite amounts pass.
            if key in _RECORD_MONEY:
                if not _RECORD_MONEY[key] <= value <= MAX_COST_USD:
                    return False
            elif key in _RECORD_TYPED:
                return False
        elif kind is int:
            if key in _RECORD_MONEY:
                if not _RECORD_MONEY[key] <= value <= MAX_COST_USD:
                    return False
            elif key == "round" or key == "retries":
                if not 0 <= value <= MAX_COUNTER:
                    return False
            elif key == "duration":
                if not 0 <= value <= 2**63 - 1:
                    return False
            elif key in _RECORD_TYPED:
                return False
        elif kind is bool:
            if key not in _RECORD_FLAGS and key in _RECORD_TYPED:
                return False
        elif value is None:
            if key not in _RECORD_NULLABLE and key in _RECORD_TYPED:
                return False
        elif kind is dict and key == "usage":
            for token in TOKEN_SET.intersection(value):
                count = value[token]
                if type(count) is not int or not 0 <= count <= MAX_TOKENS:
                    return False
        elif key in _RECORD_TYPED:
            return False
    return True


def _check_record(node_id: str, record: object) -> None:
    reason = too_long_id("node id", node_id)
    if reason is not None:
        raise BadSnapshot(f"state.json nodes: {reason}")
    where = f"state.json nodes[{shown(node_id)}]"
    if not isinstance(record, dict):
        raise BadSnapshot(f"{where} must be an object")
    if not isinstance(record.get("verdict", ""), str):
        raise BadSnapshot(f"{where}.verdict must be a string")
    if "cost_usd" in record and not _number(record["cost_usd"]):
        raise BadSnapshot(f"{where}.cost_usd must be a non-negative number, got {shown(record['cost_usd'])}")
    if "budget_usd" in record and not _budget(record["budget_usd"]):
        raise BadSnapshot(f"{where}.budget_usd must be a number up to {MAX_COST_USD}, got {shown(record['budget_usd'])}")
    for key, limit in (("round", MAX_COUNTER), ("retries", MAX_COUNTER), ("duration", 2**63 - 1)):
        if key in record and not _int(record[key], limit):
            raise BadSnapshot(f"{where}.{key} must be a non-negative integer (max {limit}), got {shown(record[key])}")
    for key in ("provenance", "session_id", "detail", "artifact_path"):
        if record.get(key) is not None and not isinstance(record[key], str):
            raise BadSnapshot(f"{where}.{key} must be a string, got {shown(record[key])}")
    for key in ("cost_unknown", "judged"):
        if key in record and not isinstance(record[key], bool):
            raise BadSnapshot(f"{where}.{key} must be a boolean")
    usage = record.get("usage")
    if usage is not None and (
        not isinstance(usage, dict) or not all(_int(usage.get(t, 0), MAX_TOKENS) for t in TOKEN_FIELDS)
    ):
        raise BadSnapshot(f"{where}.usage must hold non-negative integer token counts")


def parse_assess(content: bytes) -> dict:
    data = parse_json_object(content, "assess.json")
    if "goal_met" in data and not isinstance(data["goal_met"], bool):
        raise BadSnapshot("assess.json 'goal_met' must be a boolean")
    if "assess_cost_usd" in data and not _number(data["assess_cost_usd"]):
        raise BadSnapshot(f"assess.json 'assess_cost_usd' must be a non-negative number, got "
                          f"{shown(data['assess_cost_usd'])}")
    if "assess_cost_unknown" in data and not isinstance(data["assess_cost_unknown"], bool):
        raise BadSnapshot("assess.json 'assess_cost_unknown' must be a boolean")
    usage = data.get("usage")
    if usage is not None and (
        not isinstance(usage, dict) or not all(_int(usage.get(t, 0), MAX_TOKENS) for t in TOKEN_FIELDS)
    ):
        raise BadSnapshot("assess.json 'usage' must hold non-negative integer token counts")
    for key in ("remaining", "evidence"):
        if key in data and not isinstance(data[key], str):
            raise BadSnapshot(f"assess.json '{key}' must be a string")
    return data


def parse_graph_file(content: bytes, name: str) -> dict:
    """graph.json / rejected.json: a graph document (a refused one may be anything JSON)."""
    data = parse_json_object(content, name)
    _check_graph(data, name)
    return data


PARSERS = {
    "state.json": parse_state,
    "assess.json": parse_assess,
    "graph.json": lambda content: parse_graph_file(content, "graph.json"),
    # A refused planner reply was refused: its shape is not ours to judge, only that it is JSON.
    "rejected.json": lambda content: parse_json_object(content, "rejected.json"),
}
