"""A node id holding NUL (the JSON escape \\u0000): a valid line of a valid stream, which
PostgreSQL cannot store in a text column. Its events rows hold the id as derived text
holds it (NUL as U+FFFD) on both databases and on every path that writes them (inline,
pool workers' work files, PostgreSQL's COPY text), so a sync goes through, the events
row joins its nodes row, and a node keeps exactly its own terminals."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from omg_ledger.db import HEAD_REVISION, alembic_config, open_ledger, write_transaction
from omg_ledger.reconcile import RECENT_TERMINALS
from omg_ledger.store import terminal_keys, write_events
from omg_ledger.sync import Home, sync

from .builders import ev, events, graph, write_run
from .ledger_dump import diff, dump, with_file_ctimes_unknown

NUL_NODE = "check\x00it"
SCRUBBED = "check\ufffdit"
NUL_TS = "2026-11-29T10:00:03.000000000Z\x00"
# One node, one priced pass: the contract gives verdict PASS, cost 0.25 USD.
PASS_COST_NANO = 250_000_000


def _run_with_nul_node(home: Path, run_id: str) -> None:
    write_run(home, run_id, [
        ev("run_started", 0, graph="g", graph_version="1", node_count=1),
        ev("node_started", 1, node_id=NUL_NODE, round=0),
        ev("node_passed", 2, node_id=NUL_NODE, round=0, cost_usd=0.25),
        ev("run_finished", 3, outcome="succeeded"),
    ], state={"graph": graph(NUL_NODE), "nodes": {NUL_NODE: {"verdict": "PASS", "cost_usd": 0.25}}})


def _events_and_nodes(engine, run_id: str) -> tuple[list[str | None], list[tuple]]:
    """The run's events.node_id in file order, and its nodes rows as (node_id, verdict,
    cost), with a join of the two on node_id (what a user's query does)."""
    with engine.connect() as conn:
        events_ = [r[0] for r in conn.execute(text(
            "SELECT e.node_id FROM events e JOIN runs r ON r.id = e.run_pk WHERE r.run_id = :r "
            "ORDER BY e.line_no"), {"r": run_id})]
        nodes = [tuple(r) for r in conn.execute(text(
            "SELECT n.node_id, n.verdict, n.cost_nano_usd FROM nodes n JOIN runs r ON r.id = n.run_pk "
            "WHERE r.run_id = :r"), {"r": run_id})]
        joined = conn.execute(text(
            "SELECT COUNT(*) FROM events e JOIN nodes n ON n.run_pk = e.run_pk AND n.node_id = e.node_id "
            "JOIN runs r ON r.id = e.run_pk WHERE r.run_id = :r"), {"r": run_id}).scalar()
    assert joined == sum(1 for node_id in events_ if node_id is not None)
    return events_, nodes


def test_a_nul_in_a_node_id_syncs_inline_on_both_databases(db_url, tmp_path):
    home = tmp_path / "home"
    _run_with_nul_node(home, "r1")
    engine = open_ledger(db_url)
    try:
        report = sync(engine, [Home.from_path(str(home), "h")], workers=0)
        assert (report.runs_changed, report.problems) == (1, [])
        events_, nodes = _events_and_nodes(engine, "r1")
        with engine.connect() as conn:
            raw = conn.execute(text("SELECT raw FROM events WHERE line_no = 2")).scalar()
            ts, last_event_at = conn.execute(text(
                "SELECT e.ts, r.last_event_at FROM events e JOIN runs r ON r.id = e.run_pk "
                "WHERE e.line_no = 4")).one()
    finally:
        engine.dispose()
    assert events_ == [None, SCRUBBED, SCRUBBED, None]
    assert nodes == [(SCRUBBED, "PASS", PASS_COST_NANO)]
    assert "check\\u0000it" in raw  # the line as written
    assert (ts, last_event_at) == ("2026-11-29T10:00:03.000000000Z", "2026-11-29T10:00:03.000000Z")


def test_a_nul_in_a_ts_is_a_problem_at_its_line_and_the_rest_is_indexed_on_both_databases(db_url, tmp_path):
    """A NUL is no part of RFC 3339: the line is refused (Python's fromisoformat alone
    stops reading at the NUL and would take it), the run's other lines are indexed."""
    home = tmp_path / "home"
    run_dir = write_run(home, "r1", [
        ev("run_started", 0), ev("node_started", 1, node_id="a"), ev("node_passed", 2, node_id="a", cost_usd=0.25),
        {**ev("run_finished", 3, outcome="succeeded"), "ts": NUL_TS},
    ])
    lines = (run_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
    engine = open_ledger(db_url)
    try:
        report = sync(engine, [Home.from_path(str(home), "h")], workers=0)
        with engine.connect() as conn:
            stored = [r[0] for r in conn.execute(text("SELECT line_no FROM events ORDER BY line_no"))]
            cost = conn.execute(text("SELECT cost_nano_usd FROM runs")).scalar()
    finally:
        engine.dispose()
    assert [(p.path, p.offset, p.reason) for p in report.problems] == [
        (str(run_dir / "events.jsonl"), len(b"".join(lines[:3])), f"not an RFC 3339 timestamp: {NUL_TS!r}")]
    assert (stored, cost) == ([1, 2, 3], PASS_COST_NANO)


def test_a_stream_replaced_by_one_with_a_nul_node_id_is_stored_on_both_databases(db_url, tmp_path):
    """A stream rewritten from zero (another head): its lines are compared with the
    stored ones and replace them, through the same rows."""
    home = tmp_path / "home"
    write_run(home, "r1", [ev("run_started", 0), ev("node_passed", 1, node_id="a", cost_usd=0.1)])
    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    try:
        sync(engine, homes, workers=0)
        _run_with_nul_node(home, "r1")
        report = sync(engine, homes, workers=0)
        assert (report.runs_changed, report.problems) == (1, [])
        events_, nodes = _events_and_nodes(engine, "r1")
    finally:
        engine.dispose()
    assert events_ == [None, SCRUBBED, SCRUBBED, None]
    assert nodes == [(SCRUBBED, "PASS", PASS_COST_NANO)]


def _work_files_seen(engine, db_url: str, tmp_path: Path, monkeypatch):
    """A progress callback noting worker files present while the sync runs: beside a
    SQLite ledger, under the temporary directory (made this test's) for PostgreSQL."""
    where = Path(f"{tmp_path / 'ledger.sqlite'}.sync-work") if db_url.startswith("sqlite") else tmp_path / "tmp"
    if not db_url.startswith("sqlite"):
        where.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(where))
    seen: list[str] = []

    def progress(stage, done, total):
        if stage == "sync" and where.is_dir():
            seen.extend(p.name for p in where.rglob("worker-*.sqlite"))

    return seen, progress


def test_a_nul_in_a_node_id_syncs_through_the_pool_on_both_databases(db_url, tmp_path, monkeypatch):
    """Pool workers make the events rows (in SQLite work files, or as COPY text for
    PostgreSQL): the same rows as the inline path."""
    home = tmp_path / "home"
    _run_with_nul_node(home, "r1")
    _run_with_nul_node(home, "r2")
    engine = open_ledger(db_url)
    try:
        seen, progress = _work_files_seen(engine, db_url, tmp_path, monkeypatch)
        report = sync(engine, [Home.from_path(str(home), "h")], workers=2, progress=progress)
        assert (report.runs_changed, report.problems) == (2, [])
        assert seen, "no pool was used"
        pooled = dump(engine)
        for run_id in ("r1", "r2"):
            events_, nodes = _events_and_nodes(engine, run_id)
            assert events_ == [None, SCRUBBED, SCRUBBED, None]
            assert nodes == [(SCRUBBED, "PASS", PASS_COST_NANO)]
    finally:
        engine.dispose()
    inline_engine = open_ledger(str(tmp_path / "inline.sqlite"))
    try:
        sync(inline_engine, [Home.from_path(str(home), "h")], workers=0)
        inline = dump(inline_engine)
    finally:
        inline_engine.dispose()
    assert pooled == inline, diff(pooled, inline)


def _append(run_dir: Path, run_id: str, *lines: dict) -> None:
    with open(run_dir / "events.jsonl", "a") as f:
        for data in lines:
            f.write(json.dumps({**data, "run_id": run_id}, separators=(",", ":")) + "\n")


def _node(engine, run_id: str) -> tuple:
    with engine.connect() as conn:
        return tuple(conn.execute(text(
            "SELECT n.node_id, n.verdict, n.verdict_source, n.round, n.session_id, n.cost_nano_usd FROM nodes n "
            "JOIN runs r ON r.id = n.run_pk WHERE r.run_id = :r"), {"r": run_id}).one())


def _kinds(engine, table: str, run_id: str) -> list[str]:
    with engine.connect() as conn:
        return sorted(k for (k,) in conn.execute(text(
            f"SELECT t.kind FROM {table} t JOIN runs r ON r.id = t.run_pk WHERE r.run_id = :r"), {"r": run_id}))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_terminal_stored_before_an_append_is_still_found_for_a_nul_node(db_url, tmp_path, workers):
    """The snapshot records the node's first PASS (round 0, session s-0), which has more
    than RECENT_TERMINALS terminals after it: only the lookup in the stored events
    (store.terminal_keys, by node_id) finds it. Found: the snapshot is behind, the
    verdict is the stream's latest terminal. Missed, the ledger would instead recover a
    "dropped" PASS from the snapshot with a charge of its 0.25 USD again."""
    home = tmp_path / "home"
    _run_with_nul_node(home, "plain")  # (a second run, so workers=2 is a pool)
    failures = RECENT_TERMINALS
    stream = [ev("run_started", 0, graph="g", graph_version="1", node_count=1),
              ev("node_started", 1, node_id=NUL_NODE, round=0),
              ev("node_passed", 2, node_id=NUL_NODE, round=0, session_id="s-0", cost_usd=0.25)]
    for n in range(1, failures + 1):
        stream += [ev("node_started", 2 * n + 1, node_id=NUL_NODE, round=n),
                   ev("node_failed", 2 * n + 2, node_id=NUL_NODE, round=n, session_id=f"s-{n}")]
    record = {"verdict": "PASS", "round": 0, "session_id": "s-0", "cost_usd": 0.25}
    run_dir = write_run(home, "r1", stream, state={"graph": graph(NUL_NODE), "nodes": {NUL_NODE: record}})
    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    try:
        assert sync(engine, homes, workers=workers).runs_changed == 2
        # Latest terminal: FAIL round 8; the record's PASS is 9 terminals back.
        assert _node(engine, "r1") == (SCRUBBED, "FAIL", "stream", failures, f"s-{failures}", PASS_COST_NANO)
        assert "snapshot_behind" in _kinds(engine, "findings", "r1")
        assert "dropped_event" not in _kinds(engine, "findings", "r1")

        last = 2 * failures + 2
        _append(run_dir, "r1",
                ev("node_started", last + 1, node_id=NUL_NODE, round=failures + 1),
                ev("node_passed", last + 2, node_id=NUL_NODE, round=failures + 1, session_id="s-9",
                   cost_usd=0.25),
                ev("run_finished", last + 3, outcome="succeeded"))
        report = sync(engine, homes)
        assert (report.runs_changed, report.events_ingested, report.problems) == (1, 3, [])
        # Two priced passes, 0.25 USD each; nothing recovered from the snapshot.
        assert _node(engine, "r1") == (SCRUBBED, "PASS", "stream", failures + 1, "s-9", 2 * PASS_COST_NANO)
        assert _kinds(engine, "charges", "r1") == ["node", "node"]
        findings = _kinds(engine, "findings", "r1")
        assert "snapshot_behind" in findings and "dropped_event" not in findings, findings
        with engine.connect() as conn:
            assert conn.execute(text("SELECT SUM(c.cost_nano_usd) FROM charges c JOIN runs r ON r.id = c.run_pk "
                                     "WHERE r.run_id = 'r1'")).scalar() == 2 * PASS_COST_NANO
    finally:
        engine.dispose()


def test_node_ids_differing_only_by_nul_or_u_fffd_keep_their_own_terminals(db_url, tmp_path):
    """Both ids are stored as "n\\ufffd" in events.node_id: the lookup filters on that and
    keeps the lines whose raw names the exact id asked for.

    (A sync does not index such a pair in one run: derived text turns both into one
    nodes key, so derivation refuses the run (test_colliding_node_ids.py). So the lines
    are stored here through store.write_events, the path every sync stores them by.)"""
    nul, replacement = "n\x00", "n\ufffd"
    home = tmp_path / "home"
    write_run(home, "r1", [])  # an empty stream: the run's row, no line
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")], workers=0)
        lines = events(
            ev("node_passed", 1, node_id=nul, round=0, session_id="nul-0"),
            ev("node_failed", 2, node_id=replacement, round=0, session_id="fffd-0"),
            ev("node_started", 3, node_id=nul, round=1),
            ev("node_failed", 4, node_id=nul, round=1, session_id="nul-1"),
            ev("node_passed", 5, node_id=replacement, round=1, session_id="fffd-1"),
            ev("node_passed", 6, node_id="n", round=0, session_id="plain"))
        with write_transaction(engine) as conn:
            run_pk = conn.execute(text("SELECT id FROM runs WHERE run_id = 'r1'")).scalar()
            assert write_events(conn, run_pk, lines, replace=False) == (True, 6)
        with engine.connect() as conn:
            stored = [r[0] for r in conn.execute(text("SELECT node_id FROM events ORDER BY line_no"))]
            found = {node: list(terminal_keys(conn, run_pk, node)) for node in (nul, replacement, "n")}
    finally:
        engine.dispose()
    assert stored == [replacement, replacement, replacement, replacement, replacement, "n"]
    assert found == {nul: [("PASS", 0, "nul-0"), ("FAIL", 1, "nul-1")],
                     replacement: [("FAIL", 0, "fffd-0"), ("PASS", 1, "fffd-1")],
                     "n": [("PASS", 0, "plain")]}


def test_migration_0011_rewrites_nuls_stored_in_events_and_changes_nothing_else(tmp_path):
    """A SQLite ledger at 0010 holding what 0010's code stored for a run's lines (their
    node_id and ts as parsed, NULs in them), upgraded: those values hold U+FFFD, every
    row of every table is what a sync at the head writes, and the next sync re-derives
    nothing."""
    home = tmp_path / "home"
    _run_with_nul_node(home, "r1")
    write_run(home, "r2", [ev("run_started", 0), ev("node_passed", 1, node_id="plain", cost_usd=0.1)])
    db = tmp_path / "ledger.sqlite"
    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(str(db))
    sync(engine, homes)
    expected = dump(engine)
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0010")
    engine.dispose()

    con = sqlite3.connect(db)
    with con:
        assert con.execute("SELECT version_num FROM alembic_version").fetchone() == ("0010",)
        run_pk = con.execute("SELECT id FROM runs WHERE run_id = 'r1'").fetchone()[0]
        # What 0010's _event_tuple stored: the parsed values, unscrubbed.
        assert con.execute("UPDATE events SET node_id = ? WHERE run_pk = ? AND node_id = ?",
                           (NUL_NODE, run_pk, SCRUBBED)).rowcount == 2
        assert con.execute("UPDATE events SET ts = ? WHERE run_pk = ? AND line_no = 4",
                           (NUL_TS, run_pk)).rowcount == 1
        before = con.execute("SELECT run_pk, line_no, node_id, ts FROM events ORDER BY run_pk, line_no").fetchall()
    con.close()
    assert [row[1] for row in before if "\x00" in (row[2] or "") + row[3]] == [2, 3, 4]

    engine = open_ledger(str(db))  # migrates to the head
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD_REVISION
            after = [tuple(r) for r in conn.execute(text(
                "SELECT run_pk, line_no, node_id, ts FROM events ORDER BY run_pk, line_no"))]
        upgraded = dump(engine)
        assert sync(engine, homes).runs_changed == 0
    finally:
        engine.dispose()
    assert after == [(pk, line, node and node.replace("\x00", "\ufffd"), ts.replace("\x00", "\ufffd"))
                     for pk, line, node, ts in before]
    # The one value no sync at the head writes: a NUL-holding ts, which 0010's code took
    # and a line of new input may no longer hold (it is refused, see above); stored, it
    # stays, as 0011 rewrote it.
    expected = with_file_ctimes_unknown(_with_ts(expected, "r1", 4, NUL_TS.replace("\x00", "\ufffd")))
    assert upgraded == expected, diff(upgraded, expected)


def _with_ts(dumped: dict, run_id: str, line_no: int, ts: str) -> dict:
    """A ledger dump with one events row's ts replaced."""
    rows = []
    for row in dumped["events"]:
        values = dict(row)
        if values["line_no"] == line_no and run_id in str(values["run_pk"]):
            values["ts"] = ts
        rows.append(tuple(values.items()))
    return {**dumped, "events": sorted(rows)}
