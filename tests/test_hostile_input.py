"""Hostile and broken input: every bad thing is a problem (path + byte offset), never a
crash, and everything good around it is still indexed (DESIGN.md invariant 6).

Each case is its own run directory in one home, so one sync proves both halves: the
bad bytes are recorded exactly where they are, and the other runs are unaffected.
Offsets are computed from the bytes the test wrote, not read back from the code.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from omg_ledger import schema
from omg_ledger.change_check import unchanged_sync
from omg_ledger.db import HEAD_REVISION, open_ledger
from omg_ledger.discover import list_run_dir
from omg_ledger.feed import MAX_LINE_BYTES, SUPPORTED_SCHEMA, engine_fields
from omg_ledger.ingest import read_run_stream
from omg_ledger.reports.problems import list_problems
from omg_ledger.reports.runs import list_runs
from omg_ledger.sync import Home, sync
from omg_ledger.version import DERIVATION_VERSION

from .builders import age_tree, copy_run, retarget
from .conftest import CORPUS_HOME
from .ledger_dump import diff, dump

TS = "2026-11-29T18:15:12.93149401Z"


def line(event: str, **fields) -> bytes:
    data = {"schema": 3, "ts": TS, "event": event, **fields}  # no run_id: the directory says which run
    return orjson.dumps(data) + b"\n"


def raw(text: str | bytes) -> bytes:
    """A line given literally (the test controls every byte)."""
    data = text.encode() if isinstance(text, str) else text
    return data + b"\n"


GOOD_HEAD = [line("run_started"), line("node_started", node_id="a", session_id="s-1")]
GOOD_TAIL = [line("node_passed", node_id="a", verdict="PASS", cost_usd=0.0211, provenance="exit-only"),
             line("run_finished", outcome="passed")]
PREFIX = '{"schema":3,"ts":"' + TS + '","event":"node_passed","node_id":"a"'

# name -> the bad line (complete, newline-terminated). Every one must become a problem.
BAD_LINES: dict[str, bytes] = {
    "not-json": raw("this is not json at all"),
    "truncated-json": raw('{"schema":3,"ts":"' + TS + '","event":"node_st'),
    "json-array": raw("[1, 2, 3]"),
    "json-string": raw('"just a string"'),
    "json-number": raw("42"),
    "json-null": raw("null"),
    "cost-as-string": raw(PREFIX + ',"cost_usd":"0.5"}'),
    "negative-cost": raw(PREFIX + ',"cost_usd":-0.5}'),
    "nan-cost": raw(PREFIX + ',"cost_usd":NaN}'),
    "infinity-cost": raw(PREFIX + ',"cost_usd":Infinity}'),
    "minus-infinity-cost": raw(PREFIX + ',"cost_usd":-Infinity}'),
    "overflowing-cost": raw(PREFIX + ',"cost_usd":1e999}'),
    "absurd-cost-float": raw(PREFIX + ',"cost_usd":1e300}'),
    "absurd-cost-int": raw(PREFIX + ',"cost_usd":' + str(10**18) + "}"),
    "cost-unknown-as-string": raw(PREFIX + ',"cost_unknown":"true"}'),
    "tokens-as-floats": raw(PREFIX + ',"usage":{"input_tokens":1.5,"output_tokens":2}}'),
    "tokens-integral-floats": raw(PREFIX + ',"usage":{"input_tokens":10.0}}'),
    "tokens-over-2-64": raw(PREFIX + ',"usage":{"input_tokens":' + str(2**64 + 1) + "}}"),
    "tokens-over-2-63": raw(PREFIX + ',"usage":{"input_tokens":' + str(2**63) + "}}"),
    "tokens-negative": raw(PREFIX + ',"usage":{"output_tokens":-3}}'),
    "usage-not-object": raw(PREFIX + ',"usage":[1,2]}'),
    "retries-over-int32": raw(PREFIX + ',"retries":' + str(2**31) + "}"),
    "round-huge": raw(PREFIX + ',"round":' + str(2**62) + "}"),
    "tokens-over-plausible": raw(PREFIX + ',"usage":{"input_tokens":' + str(2**62) + "}}"),
    "retries-as-string": raw(PREFIX + ',"retries":"2"}'),
    "missing-schema": raw('{"ts":"' + TS + '","event":"run_started"}'),
    "missing-ts": raw('{"schema":3,"event":"run_started"}'),
    "missing-event": raw('{"schema":3,"ts":"' + TS + '"}'),
    "node-event-without-node-id": raw('{"schema":3,"ts":"' + TS + '","event":"node_passed","verdict":"PASS"}'),
    "schema-as-string": raw('{"schema":"3","ts":"' + TS + '","event":"run_started"}'),
    "schema-as-bool": raw('{"schema":true,"ts":"' + TS + '","event":"run_started"}'),
    "schema-zero": raw('{"schema":0,"ts":"' + TS + '","event":"run_started"}'),
    "ts-not-a-time": raw('{"schema":3,"ts":"yesterday","event":"run_started"}'),
    "node-id-as-number": raw('{"schema":3,"ts":"' + TS + '","event":"node_started","node_id":7}'),
    "duplicate-key": raw(PREFIX + ',"cost_usd":0.5,"cost_usd":0.0}'),
    "duplicate-nested-key": raw(PREFIX + ',"usage":{"input_tokens":1,"input_tokens":2}}'),
    "duplicate-key-with-colon-in-string": raw(PREFIX + ',"detail":"x\\":","detail":"y"}'),
    "deep-nesting-100000": raw(PREFIX + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}"),
    "deep-nesting-bare": raw("[" * 100_000 + "]" * 100_000),
    "deep-nesting-with-duplicate": raw(PREFIX + ',"x":' + '{"k":' * 1010 + "1" + "}" * 1010 + ',"x":1}'),
    "line-over-1-mib": raw(PREFIX + ',"detail":"' + "x" * (MAX_LINE_BYTES + 10) + '"}'),
    "line-over-2-mib": raw(PREFIX + ',"detail":"' + "y" * (2 * MAX_LINE_BYTES + 10) + '"}'),
    "invalid-utf8-outside-a-string": raw(PREFIX.encode() + b',"detail":"x"\xff}'),
    "nul-byte": raw(PREFIX.encode() + b',"detail":"a\x00b"}'),
    "nul-outside-string": raw(PREFIX.encode() + b"\x00}"),
    "trailing-garbage": raw(PREFIX + "}}"),
    "two-objects-one-line": raw(PREFIX + "}" + PREFIX + "}"),
}


@dataclass
class Case:
    name: str
    stream: bytes
    good_events: int
    bad_offsets: list[int] = field(default_factory=list)


def sandwich(name: str, bad: bytes) -> Case:
    """good, good, BAD, good, BAD, good: offsets computed from the bytes written."""
    parts = [GOOD_HEAD[0], GOOD_HEAD[1], bad, GOOD_TAIL[0], bad, GOOD_TAIL[1]]
    offsets, position = [], 0
    for part in parts:
        if part is bad:
            offsets.append(position)
        position += len(part)
    return Case(name, b"".join(parts), 4, offsets)


def stream_cases() -> list[Case]:
    cases = [sandwich(name, bad) for name, bad in BAD_LINES.items()]
    crlf = b"".join(x[:-1] + b"\r\n" for x in GOOD_HEAD + GOOD_TAIL)
    cases.append(Case("crlf-line-ends", crlf, 4))
    mixed = GOOD_HEAD[0][:-1] + b"\r\n" + GOOD_HEAD[1] + b"\n" + GOOD_TAIL[0] + GOOD_TAIL[1]  # a blank line too
    cases.append(Case("mixed-line-ends-and-blank-line", mixed, 4))
    cases.append(Case("escaped-nul-in-detail", b"".join(GOOD_HEAD) + line(
        "node_passed", node_id="a", verdict="PASS", cost_usd=0.5, detail="a\u0000b") + GOOD_TAIL[1], 4))
    # A lone surrogate escape is U+FFFD, as the engine's decoder reads it (test_feed_parity.py).
    cases.append(Case("lone-surrogate-escape", b"".join(GOOD_HEAD) + raw(
        PREFIX + ',"verdict":"PASS","cost_usd":0.5,"detail":"\\ud800"}') + GOOD_TAIL[1], 4))
    # A byte that is not UTF-8 in a string is U+FFFD, as the engine's decoder reads it (test_feed_parity.py).
    for name, written in (("invalid-utf8", b"\xff\xfe\xc3"), ("overlong-utf8", b"\xc0\xaf")):
        cases.append(Case(name, b"".join(GOOD_HEAD) + raw(
            PREFIX.encode() + b',"verdict":"PASS","cost_usd":0.5,"detail":"' + written + b'"}') + GOOD_TAIL[1], 4))
    cases.append(Case("control-chars-escaped", b"".join(GOOD_HEAD) + line(
        "node_passed", node_id="a", verdict="PASS", cost_usd=0.5, detail="\u001b[31mred\u0007\u009b") + GOOD_TAIL[1], 4))
    # Nested deeper than Python's recursion limit but within JSON's: a valid event (an
    # unknown field is ignored), and it must not crash the duplicate-key check.
    for name, extra in (("arrays", "[" * 1010 + "]" * 1010), ("objects", '{"k":' * 1010 + "1" + "}" * 1010)):
        deep = raw(PREFIX + ',"verdict":"PASS","cost_usd":0.5,"x":' + extra + "}")
        cases.append(Case(f"deep-but-valid-{name}", b"".join(GOOD_HEAD) + deep + GOOD_TAIL[1], 4))
    cases.append(Case("empty-file", b"", 0))
    cases.append(Case("only-a-partial-line", GOOD_HEAD[0][:30], 0))
    cases.append(Case("complete-lines-then-partial", b"".join(GOOD_HEAD) + GOOD_TAIL[0][:25], 2))
    return cases


STREAM_CASES = stream_cases()

GOOD_STATE = (CORPUS_HOME / "runs" / "20261129-181512.929654081-1" / "state.json").read_bytes()
GOOD_EVENTS = (CORPUS_HOME / "runs" / "20261129-181512.929654081-1" / "events.jsonl").read_bytes()


def _state(mutate) -> bytes:
    data = json.loads(GOOD_STATE)
    mutate(data)
    return json.dumps(data).encode()


def _set(path: list, value):
    def mutate(data):
        target = data
        for key in path[:-1]:
            target = target[key] if not isinstance(target, dict) or key in target else target.setdefault(key, {})
        target[path[-1]] = value
    return mutate


FIRST_NODE = next(iter(json.loads(GOOD_STATE)["nodes"]))

# name -> (file name, bytes). Each is one problem at offset 0 of that file; the run's
# stream is still ingested.
BAD_FILES: dict[str, tuple[str, bytes]] = {
    "state-not-json": ("state.json", b"{this is not json"),
    "state-empty": ("state.json", b""),
    "state-array": ("state.json", b"[1,2]"),
    "state-other-schema": ("state.json", _state(_set(["schema"], 99))),
    "state-schema-string": ("state.json", _state(_set(["schema"], "3"))),
    "state-nodes-list": ("state.json", _state(_set(["nodes"], [1, 2]))),
    "state-node-cost-string": ("state.json", _state(_set(["nodes", FIRST_NODE, "cost_usd"], "0.5"))),
    "state-node-cost-negative": ("state.json", _state(_set(["nodes", FIRST_NODE, "cost_usd"], -1))),
    "state-node-tokens-float": ("state.json", _state(_set(["nodes", FIRST_NODE, "usage"], {"input_tokens": 1.5}))),
    "state-node-cost-absurd": ("state.json", _state(_set(["nodes", FIRST_NODE, "cost_usd"], 1e300))),
    "state-planning-cost-absurd": ("state.json", _state(_set(["planning_cost_usd"], 10**18))),
    "state-deep-inputs": ("state.json", _state(_set(["inputs"], json.loads('{"k":' * 400 + "1" + "}" * 400)))),
    "state-node-retries-huge": ("state.json", _state(_set(["nodes", FIRST_NODE, "retries"], 2**40))),
    "state-node-duration-huge": ("state.json", _state(_set(["nodes", FIRST_NODE, "duration"], 2**70))),
    "state-node-detail-number": ("state.json", _state(_set(["nodes", FIRST_NODE, "detail"], 12))),
    "state-node-provenance-list": ("state.json", _state(_set(["nodes", FIRST_NODE, "provenance"], ["x"]))),
    "state-graph-name-number": ("state.json", _state(_set(["graph", "name"], 7))),
    "state-graph-node-type-number": ("state.json", _state(_set(["graph", "nodes"], [{"id": "a", "type": 5}]))),
    "state-goal-cycle-string": ("state.json", _state(_set(["goal"], {"text": "t", "cycle": "two"}))),
    "state-goal-text-number": ("state.json", _state(_set(["goal"], {"text": 5, "cycle": 1}))),
    "state-evidence-answer-number": ("state.json", _state(_set(["build_evidence"], {"answer": 1}))),
    "state-gate-paused-at-number": ("state.json", _state(_set(["gate"], {"paused_at": 3}))),
    "state-runtime-number": ("state.json", _state(_set(["runtime"], 5))),
    "state-graph-not-object": ("state.json", _state(_set(["graph"], "a graph"))),
    "state-graph-nodes-not-list": ("state.json", _state(_set(["graph", "nodes"], "abc"))),
    "state-graph-node-without-id": ("state.json", _state(_set(["graph", "nodes"], [{"name": "x"}, 3]))),
    # Outside a string (inside one, such bytes are U+FFFD, as the engine reads them: test_feed_parity.py).
    "state-invalid-utf8-outside-a-string": ("state.json", GOOD_STATE.replace(b'"run_id"', b'\xff\xfe"run_id"', 1)),
    "state-nul-byte": ("state.json", GOOD_STATE[:20] + b"\x00" + GOOD_STATE[20:]),
    "state-deep-nesting": ("state.json", b'{"schema":3,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "assess-not-json": ("assess.json", b"nope"),
    "assess-goal-met-string": ("assess.json", b'{"goal_met":"yes","assess_cost_usd":0.1}'),
    "assess-cost-nan": ("assess.json", b'{"goal_met":true,"assess_cost_usd":NaN}'),
    "assess-cost-absurd": ("assess.json", b'{"goal_met":true,"assess_cost_usd":1e300}'),
    "assess-remaining-number": ("assess.json", b'{"goal_met":false,"remaining":5}'),
    "assess-cost-negative": ("assess.json", b'{"goal_met":true,"assess_cost_usd":-1}'),
    "assess-cost-unknown-string": ("assess.json", b'{"goal_met":true,"assess_cost_usd":0,"assess_cost_unknown":"yes"}'),
    "assess-usage-negative": ("assess.json", b'{"goal_met":true,"assess_cost_usd":0,"usage":{"input_tokens":-5}}'),
    "assess-usage-not-object": ("assess.json", b'{"goal_met":true,"assess_cost_usd":0,"usage":[1,2]}'),
    "rejected-not-json": ("rejected.json", b"<html>refused</html>"),
    "rejected-truncated": ("rejected.json", b'{"name":"x","nodes":['),
    "graph-not-json": ("graph.json", b"\x00\x01\x02"),
    "graph-nodes-not-list": ("graph.json", b'{"name":"g","nodes":{"a":1}}'),
}


def _build_home(root: Path) -> Path:
    runs = root / "runs"
    runs.mkdir(parents=True)
    for case in STREAM_CASES:
        d = runs / f"stream-{case.name}"
        d.mkdir()
        (d / "events.jsonl").write_bytes(case.stream)
    for name, (file_name, content) in BAD_FILES.items():
        d = runs / f"file-{name}"
        d.mkdir()
        (d / "events.jsonl").write_bytes(retarget(GOOD_EVENTS, d.name))
        if file_name != "state.json":
            (d / "state.json").write_bytes(retarget(GOOD_STATE, d.name))
        (d / file_name).write_bytes(content)
    # Untouched real runs beside all of it.
    for src in sorted((CORPUS_HOME / "runs").iterdir())[:5]:
        copy_run(src, runs / f"real-{src.name}")
    for r, dirs, files in os.walk(root):
        for n in dirs:
            os.chmod(os.path.join(r, n), 0o700)
        for n in files:
            os.chmod(os.path.join(r, n), 0o600)
    plans = root / "plans" / "bad-plan"
    plans.mkdir(parents=True)
    (plans / "graph.json").write_bytes(b"{not json")
    then = os.stat(CORPUS_HOME).st_mtime  # old mtimes: no directory is "racy" on the second sync
    for r, dirs, files in os.walk(root, topdown=False):
        for n in dirs + files:
            os.utime(os.path.join(r, n), (then, then))
    return root


@pytest.fixture(scope="module")
def hostile_home(tmp_path_factory) -> Path:
    return _build_home(tmp_path_factory.mktemp("hostile") / "home")


def _problems(engine) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    with engine.connect() as conn:
        for row in conn.execute(select(schema.problems.c.path, schema.problems.c.byte_offset)):
            out.setdefault(row.path, set()).add(row.byte_offset)
    return out


def _event_offsets(engine) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    runs, events = schema.runs, schema.events
    with engine.connect() as conn:
        for row in conn.execute(select(runs.c.run_id, events.c.byte_offset).select_from(
                runs.join(events, events.c.run_pk == runs.c.id)).order_by(runs.c.run_id, events.c.line_no)):
            out.setdefault(row.run_id, []).append(row.byte_offset)
    return out


def _offsets_of_good(case: Case) -> list[int]:
    bad = set(case.bad_offsets)
    offsets, position = [], 0
    for chunk in case.stream.split(b"\n")[:-1]:
        if chunk.strip(b"\r") and position not in bad:
            offsets.append(position)
        position += len(chunk) + 1
    return offsets


@pytest.fixture(scope="module")
def hostile_synced(hostile_home, tmp_path_factory):
    """One sync of the hostile home, on SQLite (the PostgreSQL run is its own test)."""
    db = tmp_path_factory.mktemp("hostile-db") / "ledger.sqlite"
    engine = open_ledger(str(db))
    report = sync(engine, [Home.from_path(str(hostile_home))])
    yield engine, report
    engine.dispose()


@pytest.mark.parametrize("case", STREAM_CASES, ids=lambda c: c.name)
def test_bad_stream_line_is_a_problem_at_its_offset_and_good_lines_are_ingested(case, hostile_home, hostile_synced):
    engine, _ = hostile_synced
    path = str(hostile_home / "runs" / f"stream-{case.name}" / "events.jsonl")
    assert _problems(engine).get(path, set()) == set(case.bad_offsets)
    assert _event_offsets(engine).get(f"stream-{case.name}", []) == _offsets_of_good(case)
    assert len(_offsets_of_good(case)) == case.good_events


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_json_file_is_a_problem_and_the_stream_is_still_ingested(name, hostile_home, hostile_synced):
    engine, _ = hostile_synced
    file_name, _content = BAD_FILES[name]
    path = str(hostile_home / "runs" / f"file-{name}" / file_name)
    problems = _problems(engine)
    assert problems.get(path) == {0}, f"{name}: expected one problem at offset 0 of {file_name}"
    run_dir = str(hostile_home / "runs" / f"file-{name}")
    assert not [p for p in problems if p.startswith(run_dir + os.sep) and p != path]
    assert len(_event_offsets(engine)[f"file-{name}"]) == GOOD_EVENTS.count(b"\n")


def test_the_rest_of_the_home_is_indexed_and_plans_are_checked(hostile_home, hostile_synced):
    engine, report = hostile_synced
    expected_runs = len(STREAM_CASES) + len(BAD_FILES) + 5
    assert report.runs_seen == expected_runs == report.runs_changed
    rows = {r["run_id"]: r for r in list_runs(engine)}
    assert len(rows) == expected_runs
    for run_id, row in rows.items():
        if run_id.startswith("real-"):
            assert row["leg_count"] >= 1 or row["status"] != "NOT-KNOWN-YET"
    # An empty stream and a lone partial line: the run has said nothing yet.
    assert rows["stream-empty-file"]["status"] == "NOT-KNOWN-YET"
    assert rows["stream-only-a-partial-line"]["status"] == "NOT-KNOWN-YET"
    assert _problems(engine).get(str(hostile_home / "plans" / "bad-plan" / "graph.json")) == {0}


def test_hostile_home_second_sync_changes_nothing(hostile_home, hostile_synced):
    engine, _ = hostile_synced
    again = sync(engine, [Home.from_path(str(hostile_home))])
    assert again.events_ingested == 0
    # Only the runs whose stream ends in a partial line (or an unreadable thing) look again.
    assert again.runs_changed <= 4, again


@pytest.mark.postgres
def test_hostile_home_on_postgresql(hostile_home, hostile_synced, pg_url):
    """The same bytes on PostgreSQL: same problems, same events, no crash (NUL, huge ints)."""
    sqlite_engine, _ = hostile_synced
    engine = open_ledger(pg_url)
    try:
        sync(engine, [Home.from_path(str(hostile_home))])
        assert _problems(engine) == _problems(sqlite_engine)
        assert _event_offsets(engine) == _event_offsets(sqlite_engine)
    finally:
        engine.dispose()


def test_cli_sync_of_hostile_home_exits_0_without_traceback(hostile_home, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(tmp_path / "l.sqlite"),
         "--home", str(hostile_home), "--json"], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["problems"]
    # Every problem named on stderr as printable text (no raw control bytes from input).
    assert b"\x1b" not in result.stderr and b"\x00" not in result.stderr
    strict = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(tmp_path / "l.sqlite"),
         "--home", str(hostile_home), "--strict"], capture_output=True, timeout=120)
    assert strict.returncode == 1 and b"Traceback" not in strict.stderr


# -- newer schema: ingestion pauses at the line ------------------------------------------


def test_newer_schema_line_pauses_ingestion_there(tmp_path, sqlite_url):
    home = tmp_path / "home"
    run = home / "runs" / "r-newer"
    run.mkdir(parents=True)
    newer = orjson.dumps({"schema": SUPPORTED_SCHEMA + 1, "ts": TS, "event": "node_passed", "node_id": "a"}) + b"\n"
    content = GOOD_HEAD[0] + GOOD_HEAD[1] + newer + GOOD_TAIL[0]
    (run / "events.jsonl").write_bytes(content)
    engine = open_ledger(sqlite_url)
    sync(engine, [Home.from_path(str(home))])
    sync(engine, [Home.from_path(str(home))])
    offset = len(GOOD_HEAD[0] + GOOD_HEAD[1])
    assert _problems(engine) == {str(run / "events.jsonl"): {offset}}
    assert _event_offsets(engine)["r-newer"] == [0, len(GOOD_HEAD[0])]
    with engine.connect() as conn:
        state = conn.execute(select(schema.streams)).one()
    assert state.end_offset == offset and state.paused_schema == SUPPORTED_SCHEMA + 1 and state.paused_reason
    engine.dispose()


# -- the file system itself being hostile ------------------------------------------------


def test_stream_that_is_a_fifo_or_a_directory_does_not_hang(tmp_path, sqlite_url):
    home = tmp_path / "home"
    fifo_run = home / "runs" / "fifo"
    dir_run = home / "runs" / "dir"
    fifo_run.mkdir(parents=True)
    dir_run.mkdir()
    os.mkfifo(fifo_run / "events.jsonl")
    os.mkfifo(fifo_run / "state.json")
    (dir_run / "events.jsonl").mkdir()
    (dir_run / "state.json").mkdir()
    good = home / "runs" / "good"
    copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", good)
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", sqlite_url.removeprefix("sqlite:///"),
         "--home", str(home), "--json"], capture_output=True, timeout=60)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    paths = {p["path"] for p in json.loads(result.stdout)["problems"]}
    assert str(fifo_run / "events.jsonl") in paths
    assert str(dir_run / "events.jsonl") in paths
    engine = open_ledger(sqlite_url)
    assert len(_event_offsets(engine)["good"]) == GOOD_EVENTS.count(b"\n")
    engine.dispose()


def test_symlinks_are_never_followed_out_of_the_home_and_loops_do_not_hang(tmp_path, sqlite_url):
    outside = tmp_path / "outside"
    shutil.copytree(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", outside / "run")
    home = tmp_path / "home"
    runs = home / "runs"
    runs.mkdir(parents=True)
    os.symlink(outside / "run", runs / "linked-run")  # a run directory that is a link
    os.symlink(runs / "loop-a", runs / "loop-b")  # a loop
    os.symlink(runs / "loop-b", runs / "loop-a")
    r = runs / "linked-files"
    r.mkdir()
    os.symlink(outside / "run" / "events.jsonl", r / "events.jsonl")
    os.symlink(outside / "run" / "state.json", r / "state.json")
    os.symlink(r / "self", r / "self")
    os.symlink("/", r / "failed")
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", sqlite_url.removeprefix("sqlite:///"),
         "--home", str(home), "--json"], capture_output=True, timeout=60)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    engine = open_ledger(sqlite_url)
    with engine.connect() as conn:
        ingested = conn.execute(select(schema.events.c.raw)).all()
        run_ids = {row.run_id for row in conn.execute(select(schema.runs.c.run_id))}
        contents = conn.execute(select(schema.snapshot_files.c.content)).all()
    assert ingested == [] and contents == []  # nothing from outside the home was read
    assert run_ids == {"linked-files"}
    problems = _problems(engine)
    for name in ("linked-run", "loop-a", "loop-b"):
        assert str(runs / name) in problems
    assert str(r / "events.jsonl") in problems
    engine.dispose()


ODD_NAMES = ["with space", "ünïcödé-运行-🚀", "semi;colon", "$(touch pwned)", "`id`", "quote'\"", "back\\slash",
             "-dash-first", "new\nline", "star*?[x]", "esc\x1b[31m", "x' OR '1'='1"]


def test_run_directory_names_that_a_shell_would_mangle(tmp_path, sqlite_url):
    home = tmp_path / "home"
    for run_id in ODD_NAMES:
        copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", home / "runs" / run_id)
    db = sqlite_url.removeprefix("sqlite:///")
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", str(home),
                             "--json"], capture_output=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    assert json.loads(result.stdout)["problems"] == []
    assert not (tmp_path / "pwned").exists()
    engine = open_ledger(sqlite_url)
    offsets = _event_offsets(engine)
    engine.dispose()
    for run_id in ODD_NAMES:
        assert len(offsets[run_id]) == GOOD_EVENTS.count(b"\n"), run_id
    for run_id in ("$(touch pwned)", "x' OR '1'='1", "-dash-first"):
        shown = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "show", "--db", db, "--json", "--", run_id],
                               capture_output=True, timeout=60, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr.decode()
        assert json.loads(shown.stdout)["run_id"] == run_id
    assert not (tmp_path / "pwned").exists()


def test_run_directory_name_that_is_not_utf8(tmp_path, sqlite_url):
    """A name the database cannot store as text is a problem, not a crash."""
    home = tmp_path / "home"
    runs = home / "runs"
    runs.mkdir(parents=True)
    bad = os.path.join(os.fsencode(runs), b"bad-\xff\xfe-name")
    os.mkdir(bad)
    shutil.copyfile(CORPUS_HOME / "runs" / "20261129-181512.929654081-1" / "events.jsonl",
                    os.path.join(bad, b"events.jsonl"))
    os.symlink(b"/", os.path.join(bad, b"link-\xff"))
    copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", runs / "good")
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", sqlite_url.removeprefix("sqlite:///"),
         "--home", str(home), "--json"], capture_output=True, timeout=60)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    report = json.loads(result.stdout)
    assert any("bad-" in p["path"] for p in report["problems"])
    engine = open_ledger(sqlite_url)
    assert len(_event_offsets(engine)["good"]) == GOOD_EVENTS.count(b"\n")
    engine.dispose()


def test_failed_reply_name_that_is_not_utf8_is_no_reply_and_not_a_crash(tmp_path, sqlite_url):
    """failed/ is listed like the run directory: a name the database cannot store as
    text names no node's reply (node ids are JSON text), and the sync goes on."""
    home = tmp_path / "home"
    run = copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", home / "runs" / "r1")
    (run / "failed").mkdir()
    (run / "failed" / "plan.out").write_bytes(b"x")
    open(os.path.join(os.fsencode(run / "failed"), b"n\xff.out"), "wb").close()
    copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", home / "runs" / "r2")
    assert list_run_dir(str(run)).failed_outputs == {"plan.out"}
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", sqlite_url.removeprefix("sqlite:///"),
         "--home", str(home), "--json"], capture_output=True, timeout=60)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    assert json.loads(result.stdout)["problems"] == []
    engine = open_ledger(sqlite_url)
    offsets = _event_offsets(engine)
    engine.dispose()
    assert len(offsets["r1"]) == len(offsets["r2"]) == GOOD_EVENTS.count(b"\n")


def test_runs_symlinked_to_a_path_that_is_not_utf8_is_a_problem_not_a_crash(tmp_path, sqlite_url):
    """Every run path under such a runs/ would be one no text column holds: runs/ is one
    problem (as when it cannot be listed), exit 0, and the home's plans are still read."""
    home = tmp_path / "home"
    target = os.path.join(os.fsencode(home), b"runs-\xff")
    os.makedirs(target)
    copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1",
             Path(os.fsdecode(os.path.join(target, b"20261129-181512.929654081-1"))))
    os.symlink(b"runs-\xff", home / "runs")
    (home / "plans" / "20261129-181522.137935627-1").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", sqlite_url.removeprefix("sqlite:///"),
         "--home", str(home), "--json"], capture_output=True, timeout=60)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    problems = json.loads(result.stdout)["problems"]
    assert [(p["path"], p["offset"]) for p in problems] == [(str(home / "runs"), 0)], problems
    assert problems[0]["reason"] == (f"cannot list directory: it is a symlink to {home}/runs-\\xff, "
                                     f"a path that is not valid UTF-8")
    engine = open_ledger(sqlite_url)
    assert _event_offsets(engine) == {}
    engine.dispose()


def test_a_run_directory_lists_its_files_by_name_and_kind(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("a.out", "\u00e9t\u00e9.out", "state.json", "notes.txt"):
        (run / name).write_bytes(b"x")
    (run / "sub.out").mkdir()
    (run / "link.out").symlink_to(run / "a.out")
    (run / "\u00e9.json").symlink_to(run / "a.out")
    open(os.path.join(os.fsencode(run), b"bad-\xff.out"), "wb").close()  # no UTF-8 name: no file of ours
    listing = list_run_dir(str(run))
    assert listing.names == {"a.out", "\u00e9t\u00e9.out", "state.json", "notes.txt"}
    assert listing.artifacts == {"a.out", "\u00e9t\u00e9.out"}
    assert listing.symlinks == {"link.out", "\u00e9.json"}
    assert listing.failed_outputs == frozenset() and listing.damage == ()


# -- unreadable files: root ignores permissions, so drop its DAC capabilities ------------

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _without_dac_override() -> None:
    """preexec_fn: remove root's permission bypass from the bounding set before exec, so
    the child (still uid 0, still able to run the venv under /root) obeys file modes.
    Running as `nobody` is not possible here: the interpreter lives under /root (0700)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _can_drop_dac() -> str | None:
    if os.geteuid() != 0:
        return None  # not root: plain permissions already apply
    probe = subprocess.run([sys.executable, "-c", "open('/proc/1/environ','rb')"], preexec_fn=_without_dac_override,
                           capture_output=True)
    if probe.returncode == 0:
        return "cannot drop CAP_DAC_OVERRIDE here: permissions are not enforced for this test"
    return None


def test_unreadable_files_and_directories_are_problems(tmp_path):
    reason = _can_drop_dac()
    if reason:
        pytest.skip(reason)
    home = tmp_path / "home"
    runs = home / "runs"
    src = CORPUS_HOME / "runs" / "20261129-181512.929654081-1"
    for name in ("stream-unreadable", "state-unreadable", "dir-unreadable", "good"):
        copy_run(src, runs / name)
    for r, dirs, files in os.walk(home):
        for n in dirs:
            os.chmod(os.path.join(r, n), 0o700)
        for n in files:
            os.chmod(os.path.join(r, n), 0o600)
    os.chmod(runs / "stream-unreadable" / "events.jsonl", 0)
    os.chmod(runs / "state-unreadable" / "state.json", 0)
    os.chmod(runs / "dir-unreadable", 0o100)  # can stat inside, cannot list
    db = tmp_path / "ledger.sqlite"
    result = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db), "--home", str(home), "--json"],
        capture_output=True, timeout=60, preexec_fn=_without_dac_override if os.geteuid() == 0 else None)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode()
    paths = {p["path"] for p in json.loads(result.stdout)["problems"]}
    assert str(runs / "stream-unreadable" / "events.jsonl") in paths
    assert str(runs / "state-unreadable" / "state.json") in paths
    assert str(runs / "dir-unreadable") in paths
    engine = open_ledger(str(db))
    offsets = _event_offsets(engine)
    engine.dispose()
    assert len(offsets["good"]) == len(offsets["state-unreadable"]) == GOOD_EVENTS.count(b"\n")
    # An unreadable runs/ directory is damage, not the disappearance of every run.
    os.chmod(runs, 0o300)
    again = subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db), "--home", str(home), "--json"],
        capture_output=True, timeout=60, preexec_fn=_without_dac_override if os.geteuid() == 0 else None)
    os.chmod(runs, 0o700)
    assert again.returncode == 0 and b"Traceback" not in again.stderr, again.stderr.decode()
    assert json.loads(again.stdout)["runs_gone"] == 0
    engine = open_ledger(str(db))
    assert not any(r["gone"] for r in list_runs(engine))
    engine.dispose()


def _sync_obeying_modes(db: Path, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db), "--home", str(home), "--json"],
        capture_output=True, timeout=60, preexec_fn=_without_dac_override if os.geteuid() == 0 else None)


def test_a_failed_dir_that_could_not_be_listed_is_listed_once_it_can_be(tmp_path):
    """chmod changes a directory's ctime, not its mtime: a failed/ made listable again must
    not be trusted by its unchanged mtime, or its replies stay unknown for good."""
    reason = _can_drop_dac()
    if reason:
        pytest.skip(reason)
    run_id = "20261129-181513.435710166-1"  # its failed/ holds lane-a.out (corpus)
    home = tmp_path / "home"
    run_dir = copy_run(CORPUS_HOME / "runs" / run_id, home / "runs" / run_id)
    age_tree(home)
    os.chmod(run_dir / "failed", 0)
    db = tmp_path / "ledger.sqlite"
    first = _sync_obeying_modes(db, home)
    assert first.returncode == 0 and b"Traceback" not in first.stderr, first.stderr.decode()
    assert [p["path"] for p in json.loads(first.stdout)["problems"]] == [str(run_dir / "failed")]
    os.chmod(run_dir / "failed", 0o700)
    again = _sync_obeying_modes(db, home)
    assert again.returncode == 0 and json.loads(again.stdout)["problems"] == [], again.stdout
    engine = open_ledger(str(db))
    try:
        with engine.connect() as conn:
            failed = conn.execute(select(schema.run_files.c.name).where(schema.run_files.c.place == "failed")).all()
        assert [name for (name,) in failed] == ["lane-a.out"]
        assert [p for p in list_problems(engine) if p["open"]] == []
    finally:
        engine.dispose()


def _one_corpus_run_under_modes(tmp_path: Path) -> tuple[Path, Path]:
    """A home holding one corpus run, for a test whose syncs obey file modes (root's
    override dropped; skipped where that cannot be done)."""
    reason = _can_drop_dac()
    if reason:
        pytest.skip(reason)
    run_id = "20261129-181512.929654081-1"
    home = tmp_path / "home"
    return home, copy_run(CORPUS_HOME / "runs" / run_id, home / "runs" / run_id)


def test_a_run_directory_that_could_not_be_listed_is_read_again_once_it_can_be(tmp_path):
    """A run read before, then unlistable for one sync (its problem recorded), then made
    listable by chmod, which changes the directory's ctime, not its mtime: the next sync
    reads it again and resolves the problem, and the sync after that is the no-op."""
    home, run_dir = _one_corpus_run_under_modes(tmp_path)
    age_tree(home)
    db = tmp_path / "ledger.sqlite"
    assert _sync_obeying_modes(db, home).returncode == 0
    mtime_ns = run_dir.stat().st_mtime_ns
    os.chmod(run_dir, 0)
    try:
        denied = _sync_obeying_modes(db, home)
    finally:
        os.chmod(run_dir, 0o755)
    assert run_dir.stat().st_mtime_ns == mtime_ns
    assert denied.returncode == 0 and b"Traceback" not in denied.stderr, denied.stderr.decode()
    assert [(p["path"], p["reason"]) for p in json.loads(denied.stdout)["problems"]] == [
        (str(run_dir), "cannot list run directory: Permission denied")]
    again = _sync_obeying_modes(db, home)
    assert again.returncode == 0 and json.loads(again.stdout)["problems"] == [], again.stdout
    assert _open_problems(db) == set()
    noop = unchanged_sync(str(db), [Home("h", str(home), explicit=False)], head_revision=HEAD_REVISION,
                          derivation_version=DERIVATION_VERSION)
    assert noop is not None and noop.runs_seen == 1


def _open_problems(db: Path) -> set[tuple[str, int, str]]:
    engine = open_ledger(str(db))
    try:
        return {(p["path"], p["byte_offset"], p["reason"]) for p in list_problems(engine) if p["open"]}
    finally:
        engine.dispose()


def test_a_stream_that_could_not_be_opened_for_a_while_is_read_from_its_first_byte_once_it_can_be(tmp_path):
    """A stream read before, then unreadable for one sync while its run goes on appending
    (the open fails), then readable: the next read starts from its first byte, so "cannot
    open" is resolved (audit stops asking for attention) and the bad lines in it are open.
    Then the ledger is what one sync of the files makes."""
    home, run_dir = _one_corpus_run_under_modes(tmp_path)
    stream = run_dir / "events.jsonl"
    bad_at = stream.stat().st_size
    with stream.open("ab") as out:
        out.write(b"{not json\n")
    age_tree(home)
    db = tmp_path / "ledger.sqlite"
    first = _sync_obeying_modes(db, home)
    assert first.returncode == 0, first.stderr.decode()
    bad_line = _open_problems(db)
    assert [(path, offset) for path, offset, _ in bad_line] == [(str(stream), bad_at)]
    os.chmod(stream, 0)
    second_bad_at = stream.stat().st_size
    with stream.open("ab") as out:  # (this process may: root)
        out.write(b"{still not json\n")
    unreadable = _sync_obeying_modes(db, home)
    assert unreadable.returncode == 0, unreadable.stderr.decode()
    cannot_open = (str(stream), 0, "events.jsonl: cannot open: Permission denied")
    assert _open_problems(db) == bad_line | {cannot_open}
    os.chmod(stream, 0o600)
    again = _sync_obeying_modes(db, home)
    assert again.returncode == 0, again.stderr.decode()
    assert {(path, offset) for path, offset, _ in _open_problems(db)} == {(str(stream), bad_at),
                                                                         (str(stream), second_bad_at)}
    cold = tmp_path / "cold.sqlite"
    assert _sync_obeying_modes(cold, home).returncode == 0
    healed, clean = dump(str(db)), dump(str(cold))
    del healed["problems"], clean["problems"]  # (the resolved row stays, as history)
    assert healed == clean, diff(healed, clean)


def test_a_stream_of_garbage_is_every_problem_in_the_ledger_and_a_hundred_lines_on_stderr(tmp_path):
    """20,000 bad lines after the good ones: each is a problem in the ledger (path, byte
    offset), the good lines are indexed, and stderr (what cron mails) says the first 100
    and how many more there are."""
    home = tmp_path / "home"
    run_dir = copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", home / "runs" / "garbage")
    good = (run_dir / "events.jsonl").read_bytes()
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(b"x\n" * 20_000)
    db = tmp_path / "ledger.sqlite"
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db), "--home", str(home)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 101 and all(line.startswith("omg-ledger: problem: ") for line in lines[:100])
    assert f"at byte {len(good)}: " in lines[0]  # the first bad line starts where the good ones end
    assert lines[-1] == "omg-ledger: ... and 19,900 more problem(s): `omg-ledger problems` lists every one"
    engine = open_ledger(str(db))
    try:
        problems = list_problems(engine)
        assert sorted(p["byte_offset"] for p in problems) == [len(good) + 2 * n for n in range(20_000)]
        assert len(_event_offsets(engine)["garbage"]) == GOOD_EVENTS.count(b"\n")
    finally:
        engine.dispose()


# -- property: random mutations of real corpus lines --------------------------------------

REAL_LINES = [
    ln + b"\n"
    for p in sorted((CORPUS_HOME / "runs").glob("*/events.jsonl"))
    for ln in p.read_bytes().split(b"\n")
    if ln.strip()
]


def _mutate(data: bytes, kind: str, draw) -> bytes:
    body = data[:-1]
    if kind == "flip":
        i = draw(st.integers(0, len(body) - 1))
        bit = draw(st.integers(0, 7))
        body = body[:i] + bytes([body[i] ^ (1 << bit)]) + body[i + 1:]
    elif kind == "truncate":
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif kind == "insert":
        i = draw(st.integers(0, len(body)))
        body = body[:i] + draw(st.binary(min_size=1, max_size=8)) + body[i:]
    elif kind == "duplicate":
        i = draw(st.integers(0, len(body) - 1))
        j = draw(st.integers(i + 1, len(body)))
        body = body[:j] + body[i:j] + body[j:]
    elif kind == "type-swap":
        obj = json.loads(body)
        key = draw(st.sampled_from(sorted(obj)))
        obj[key] = draw(st.sampled_from(["1", 1, 1.5, -1, None, True, [], {}, "x", 2**70]))
        body = json.dumps(obj).encode()
    elif kind == "drop-key":
        obj = json.loads(body)
        obj.pop(draw(st.sampled_from(sorted(obj))))
        body = json.dumps(obj).encode()
    return body.replace(b"\n", b" ") + b"\n"


@st.composite
def mutated_streams(draw):
    lines = draw(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=12))
    out, bad = [], []
    for ln in lines:
        if draw(st.booleans()):
            kind = draw(st.sampled_from(["flip", "truncate", "insert", "duplicate", "type-swap", "drop-key"]))
            mutated = _mutate(ln, kind, draw)
            out.append(mutated)
            bad.append(mutated != ln)
        else:
            out.append(ln)
            bad.append(False)
    return out, bad


def _expect(lines: list[bytes], mutated: list[bool]):
    """(offset, line) of lines that must be events; offsets where a problem is allowed;
    whether reading is blocked (a newer schema) at an offset."""
    good, maybe_bad, position = [], [], 0
    for ln, was_mutated in zip(lines, mutated, strict=True):
        if was_mutated:
            maybe_bad.append((position, ln))
        else:
            good.append((position, ln))
        position += len(ln)
    return good, maybe_bad


def _check_chunk(lines, mutated, chunk):
    good, maybe_bad = _expect(lines, mutated)
    events = {e.byte_offset: e for e in chunk.events}
    problems = {p.byte_offset: p.reason for p in chunk.problems}
    assert not set(events) & set(problems), "a line was both an event and a problem"
    blocked_at = min((o for o, r in problems.items() if "newer than" in r), default=None)
    for offset, ln in good:
        if blocked_at is not None and offset > blocked_at:
            assert offset not in events
            continue
        assert offset in events, f"good line at {offset} not ingested: {problems.get(offset)}"
        assert events[offset].raw.encode() == ln.rstrip(b"\n").rstrip(b"\r")
    for offset, ln in maybe_bad:
        if blocked_at is not None and offset > blocked_at:
            assert offset not in events and offset not in problems
            continue
        if offset in events:
            # Accepted: then it must really be a JSON object with the basic fields (as the
            # engine reads its keys: in any case, and a byte that is not UTF-8 as U+FFFD).
            parsed = json.loads(ln.decode("utf-8", "replace"))
            assert isinstance(parsed, dict)
            fields = engine_fields(parsed)
            assert isinstance(fields.get("schema"), int) and isinstance(fields.get("event"), str)
        elif ln.strip():
            assert offset in problems, f"mutated line at {offset} neither ingested nor a problem: {ln[:80]!r}"
    line_starts = {o for o, _ in good} | {o for o, _ in maybe_bad}
    assert set(events) | set(problems) <= line_starts
    assert chunk.offset == (blocked_at if blocked_at is not None else sum(len(x) for x in lines))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated_streams())
def test_property_mutated_real_lines_feed(tmp_path, case):
    lines, mutated = case
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(lines))
    read = read_run_stream(str(path), None)
    chunk = SimpleNamespace(events=read.items, offset=read.checkpoint.end_offset,
                            problems=[SimpleNamespace(byte_offset=p.offset, reason=p.reason) for p in read.problems])
    _check_chunk(lines, mutated, chunk)


@pytest.fixture(scope="module")
def property_ledger(tmp_path_factory):
    root = tmp_path_factory.mktemp("prop")
    engine = open_ledger(str(root / "ledger.sqlite"))
    yield engine, root / "home"
    engine.dispose()


_counter = iter(range(10**9))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated_streams())
def test_property_mutated_real_lines_through_sync(property_ledger, case):
    """The same property end to end: one run per example, synced into one ledger."""
    engine, home = property_ledger
    lines, mutated = case
    assume(any(mutated))
    run_id = f"p{next(_counter):06d}"
    run = home / "runs" / run_id
    run.mkdir(parents=True)
    lines = [retarget(ln, run_id) for ln in lines]  # the directory's own run
    (run / "events.jsonl").write_bytes(b"".join(lines))
    report = sync(engine, [Home.from_path(str(home))])
    assert report.runs_changed >= 1
    path = str(run / "events.jsonl")
    good, maybe_bad = _expect(lines, mutated)
    offsets = set(_event_offsets(engine).get(run_id, []))
    problems = _problems(engine).get(path, set())
    blocked = [p for p in report.problems if p.path == path and "newer than" in p.reason]
    limit = blocked[0].offset if blocked else float("inf")
    for offset, _ in good:
        assert (offset in offsets) == (offset < limit)
    for offset, ln in maybe_bad:
        if offset < limit and offset not in offsets and ln.strip():
            assert offset in problems
        if offset in offsets:
            assert offset not in problems


def test_a_json_file_holding_more_than_its_size_says_is_read_no_further_than_the_cap(monkeypatch):
    """The size cap on a run's JSON files holds for the bytes read, not only for the size
    fstat gave before reading: a state.json growing while it is read cannot take memory
    past it. A /proc file is a real regular file whose size (0) says less than it holds."""
    from omg_ledger import snapshot

    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.fail("this test needs Linux's /proc")
    assert os.stat(status).st_size == 0 and len(status.read_bytes()) > 64
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_BYTES", 64)
    with pytest.raises(snapshot.UnreadableFile, match="larger than 64 bytes"):
        snapshot.read_small_file(str(status))
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_BYTES", 1 << 20)
    assert b"Pid:" in snapshot.read_small_file(str(status)).content  # within the cap: read whole
