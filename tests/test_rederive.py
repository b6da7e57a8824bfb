"""The ledger re-derives itself: every derived row is a function of stored facts.

* An ordinary sync history (a cold sync of streams caught mid-write, appends, a file
  replaced) leaves exactly the derived rows that `rebuild` produces from the stored
  facts alone with every home deleted — whole rows compared, both corpora, SQLite and
  PostgreSQL.
* A DERIVATION_VERSION bump with a changed rule reaches every run, gone ones
  included, on the next sync and on rebuild.
* A stream paused at a newer schema resumes by itself once that schema is understood.
* The change check's skip path is taken deterministically (the clock is an input).
* A ledger written by release 0.1 (committed fixture) upgrades and re-derives with no
  difference in its money.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select, text

from omg_ledger import derive, feed, schema
from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, rebuild, sync

from .builders import ev, write_run
from .conftest import CORPUS
from .ledger_dump import diff, dump

SCALE = CORPUS.parent / "corpus-scale"
FIXTURE = Path(__file__).parent / "fixtures" / "ledger-v0003.sqlite"
DERIVED = ("runs", "legs", "nodes", "rounds", "charges", "findings", "goal_cycles", "invocations")
HOUR_NS = 3600 * 10**9


def _derived(engine) -> dict[str, list[tuple]]:
    data = dump(engine)
    return {name: data[name] for name in DERIVED}


def _copy_home(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def _scale_home(target: Path) -> Path:
    with tarfile.open(SCALE / "home.tar.gz") as archive:
        archive.extractall(target, filter="data")
    return target


def _streams(home: Path) -> list[Path]:
    return sorted(p for p in (home / "runs").glob("*/events.jsonl"))


def _history(engine, home: Path) -> None:
    """Cold sync with every stream cut mid-line, then the rest appended, then one
    stream replaced by a copy (new inode, same bytes) and another truncated + regrown."""
    whole = {}
    for path in _streams(home):
        data = path.read_bytes()
        whole[path] = data
        lines = data.splitlines(keepends=True)
        half = b"".join(lines[: len(lines) // 2])
        path.write_bytes(half + lines[len(lines) // 2][:7] if len(lines) > 1 else data)
    sync(engine, [Home.from_path(str(home), "h")])
    for path, data in whole.items():
        path.write_bytes(data)
    sync(engine, [Home.from_path(str(home), "h")])
    first, second = list(whole)[:2]
    copy = first.with_suffix(".tmp")
    copy.write_bytes(whole[first])
    os.replace(copy, first)
    second.write_bytes(whole[second][:10])
    sync(engine, [Home.from_path(str(home), "h")])
    second.write_bytes(whole[second])
    sync(engine, [Home.from_path(str(home), "h")])


@pytest.mark.parametrize("corpus", ["corpus", "scale"])
def test_sync_history_equals_rebuild_from_facts_alone(tmp_path, db_url, corpus):
    home = (_copy_home(CORPUS / "home", tmp_path / "home") if corpus == "corpus"
            else _scale_home(tmp_path / "home"))
    engine = open_ledger(db_url)
    try:
        _history(engine, home)
        synced = _derived(engine)
        assert len(synced["runs"]) == len(list((home / "runs").iterdir()))
        assert synced["charges"], "the corpus has paid invocations"
        shutil.rmtree(home)
        report = rebuild(engine)
        assert report.runs_rederived == len(synced["runs"])
        rebuilt = _derived(engine)
        assert rebuilt == synced, diff(synced, rebuilt)
    finally:
        engine.dispose()


def _append_lines(run_dir: Path, *lines: dict) -> None:
    with open(run_dir / "events.jsonl", "ab") as f:
        for data in lines:
            f.write(orjson.dumps({**data, "run_id": run_dir.name}) + b"\n")


def test_a_derive_state_is_kept_only_while_the_last_leg_is_open(tmp_path, db_url):
    """derive.RESUMABLE_FROM_LINE: a short run keeps its derive state while its last leg
    is open (the next append walks only the new lines); once the leg has ended the state
    is gone (one left behind would be resumed from a line the stream has passed); a
    resume of the ended run walks its stored lines again, and every row equals a
    rebuild's and a cold sync's of the final stream."""
    home = tmp_path / "home"
    run_dir = write_run(home, "run-s", [ev("run_started"), ev("node_started", 1, node_id="a")])
    engine = open_ledger(db_url)

    def synced() -> tuple[int, int]:
        report = sync(engine, [Home.from_path(str(home), "h")])
        with engine.connect() as conn:
            states = conn.execute(select(func.count()).select_from(schema.derive_states)).scalar()
        return report.events_derived, states

    try:
        assert synced() == (2, 1)  # the leg is open: the state is kept
        _append_lines(run_dir, ev("node_failed", 2, node_id="a", verdict="FAIL", cost_usd=0.5),
                      ev("run_finished", 3, outcome="failed"))
        assert synced() == (2, 0)  # resumed (only the 2 new lines walked); the leg ended: no state
        _append_lines(run_dir, ev("run_started", 10), ev("node_started", 11, node_id="a"),
                      ev("node_passed", 12, node_id="a", verdict="PASS", cost_usd=0.25),
                      ev("run_finished", 13, outcome="passed"))
        assert synced() == (8, 0)  # no state to resume from: all 8 stored lines walked
        with engine.connect() as conn:
            legs, cost = conn.execute(select(schema.runs.c.leg_count, schema.runs.c.cost_nano_usd)).one()
        assert (legs, cost) == (2, 750_000_000)  # $0.50 + $0.25
        rows = _derived(engine)
        rebuild(engine)
        assert _derived(engine) == rows, diff(rows, _derived(engine))
    finally:
        engine.dispose()
    cold = open_ledger(str(tmp_path / "cold.sqlite"))
    try:
        sync(cold, [Home.from_path(str(home), "h")])
        assert _derived(cold) == rows, diff(rows, _derived(cold))
    finally:
        cold.dispose()


def test_appends_in_pieces_walk_each_line_once_and_equal_rebuild(tmp_path, db_url):
    """Every stream grows in six pieces cut at arbitrary bytes (mostly mid-line), a sync
    after each: each sync's derivation resumes where the last one stopped, so every
    stored line is walked exactly once over the whole history — and the rows equal a
    rebuild from the stored facts, whole rows."""
    home = _copy_home(CORPUS / "home", tmp_path / "home")
    whole = {path: path.read_bytes() for path in _streams(home)}
    engine = open_ledger(db_url)
    try:
        ingested = derived = 0
        for piece in range(1, 7):
            for path, data in whole.items():
                path.write_bytes(data[: len(data) * piece // 6])
            report = sync(engine, [Home.from_path(str(home), "h")])
            ingested += report.events_ingested
            derived += report.events_derived
        with engine.connect() as conn:
            stored = conn.execute(select(func.count()).select_from(schema.events)).scalar()
        expected = sum(1 for data in whole.values() for line in data.splitlines() if line.strip())
        assert stored == ingested == expected  # the corpus streams are all valid lines
        assert derived == stored, "an append walked lines an earlier sync had walked"
        synced = _derived(engine)
        shutil.rmtree(home)
        rebuild(engine)
        rebuilt = _derived(engine)
        assert rebuilt == synced, diff(synced, rebuilt)
    finally:
        engine.dispose()


def test_rebuild_matches_a_clean_sync_of_the_same_files(tmp_path, db_url):
    """Independent of the history above: one clean sync, then rebuild, same rows."""
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(CORPUS / "home"), "c")])
        before = _derived(engine)
        rebuild(engine)
        assert _derived(engine) == before
    finally:
        engine.dispose()


def test_a_database_error_while_reading_stored_facts_stops_the_rebuild_and_blames_no_run(tmp_path, db_url):
    """Re-derivation reads each run's facts back from the ledger. A failure of the
    database itself there (here a table an operator renamed by hand) is database trouble:
    exit 3, the batch rolled back, and no run is marked as one its rules cannot derive
    (that is for a run's own facts, and a recorded problem would outlive the repair)."""
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(CORPUS / "home"), "c")])
        before = dump(engine)
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE run_files RENAME TO run_files_hidden"))
    finally:
        engine.dispose()
    result = CliRunner().invoke(main, ["rebuild", "--db", db_url])
    assert result.exit_code == 3, result.output
    assert "run_files" in result.output and "Traceback" not in result.output
    engine = open_ledger(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE run_files_hidden RENAME TO run_files"))
        assert dump(engine) == before
    finally:
        engine.dispose()


# -- a version bump reaches every run, gone ones included ---------------------------


def _bump(monkeypatch) -> None:
    """Version 2 of the rules: graph names are stored upper-cased (one column changes)."""
    original = derive.reconcile

    def reconcile_v2(run):
        rows = original(run)
        if rows.run.get("graph_name"):
            rows.run["graph_name"] = rows.run["graph_name"].upper()
        return rows

    monkeypatch.setattr(derive, "reconcile", reconcile_v2)
    monkeypatch.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION + 1)


def _graph_names(engine) -> dict[str, tuple]:
    r = schema.runs
    with engine.connect() as conn:
        return {row.run_id: (row.graph_name, row.derivation_version, row.gone)
                for row in conn.execute(select(r.c.run_id, r.c.graph_name, r.c.derivation_version, r.c.gone))}


@pytest.mark.parametrize("how", ["sync", "rebuild"])
def test_version_bump_rederives_every_run_including_gone_ones(tmp_path, db_url, monkeypatch, how):
    home = _copy_home(CORPUS / "home", tmp_path / "home")
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        gone_id = "20261129-181518.678721711-1"
        shutil.rmtree(home / "runs" / gone_id)
        sync(engine, [Home.from_path(str(home), "h")])
        before = _graph_names(engine)
        assert before[gone_id][2] is True
        named = {run_id for run_id, (name, _v, _g) in before.items() if name}
        assert gone_id in named and len(named) > 10
        version = derive.DERIVATION_VERSION

        _bump(monkeypatch)
        if how == "sync":
            report = sync(engine, [Home.from_path(str(home), "h")])
            assert (report.runs_changed, report.runs_rederived) == (0, len(before))
        else:
            shutil.rmtree(home)
            assert rebuild(engine).runs_rederived == len(before)
        after = _graph_names(engine)
        for run_id, (name, _v, gone) in before.items():
            assert after[run_id] == ((name.upper() if name else name), version + 1, gone)
        # Done once: the next sync has nothing left to re-derive.
        assert sync(engine, []).runs_rederived == 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", ["sync", "rebuild"])
def test_re_deriving_a_gone_run_opens_none_of_its_problems_again(tmp_path, db_url, monkeypatch, how):
    """A problem derivation itself finds (a charge past the per-run bound) ends, as every
    problem of the run, when the run's directory is removed: no sync reads it again. Re-
    deriving the gone run (a rule change's next sync, rebuild) does not open it again, or
    audit would ask for attention for ever about a directory that is not there."""
    from .test_reliability import charges_at_cap, write_stream

    home = tmp_path / "home"
    stream, _offsets = write_stream(home, "huge", charges_at_cap("huge", 10_001))  # one charge past $1e9
    write_run(home, "small", [ev("run_started"), ev("run_finished", 1, outcome="passed")])
    engine = open_ledger(db_url)

    def open_problems() -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(select(schema.problems.c.path).where(
                schema.problems.c.resolved_at.is_(None))).scalars())

    try:
        sync(engine, [Home.from_path(str(home), "h")])
        assert open_problems() == [str(stream)]
        shutil.rmtree(home / "runs" / "huge")
        sync(engine, [Home.from_path(str(home), "h")])
        assert open_problems() == []
        before = dump(engine)["problems"]

        _bump(monkeypatch)
        if how == "sync":
            sync(engine, [Home.from_path(str(home), "h")])
        else:
            rebuild(engine)
        assert {run_id: rest for run_id, (_name, *rest) in _graph_names(engine).items()} == {
            "huge": [derive.DERIVATION_VERSION, True], "small": [derive.DERIVATION_VERSION, False]}
        assert open_problems() == []
        assert dump(engine)["problems"] == before
    finally:
        engine.dispose()
    audit = CliRunner().invoke(main, ["audit", "--db", db_url])
    assert audit.exit_code == 0, audit.output


def test_a_killed_rederivation_resumes(tmp_path, monkeypatch):
    """Batches commit: runs re-derived before a failure keep their new version."""
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    sync(engine, [Home.from_path(str(CORPUS / "home"), "c")])
    _bump(monkeypatch)
    monkeypatch.setattr("omg_ledger.sync.DERIVE_BATCH", 5)
    calls = {"n": 0}
    original = derive.derive_run

    def failing(facts, parsed=None):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return original(facts, parsed)

    monkeypatch.setattr("omg_ledger.sync.derive_run", failing)
    with pytest.raises(KeyboardInterrupt):
        sync(engine, [])
    versions = [v for _n, v, _g in _graph_names(engine).values()]
    assert versions.count(derive.DERIVATION_VERSION) == 5  # the first batch committed, the second did not
    monkeypatch.setattr("omg_ledger.sync.derive_run", original)
    assert sync(engine, []).runs_rederived == 25 - 5
    assert {v for _n, v, _g in _graph_names(engine).values()} == {derive.DERIVATION_VERSION}


# -- a stream paused at a newer schema resumes after an upgrade -----------------------


def test_newer_schema_pause_resumes_once_understood(tmp_path, db_url, monkeypatch):
    home = tmp_path / "home"
    stream = [ev("run_started", 0), ev("node_started", 1, node_id="a"),
              {**ev("node_passed", 2, node_id="a", cost_usd=0.5), "schema": 4},
              ev("node_started", 3, node_id="b"), ev("node_passed", 4, node_id="b", cost_usd=0.25),
              ev("run_finished", 5, outcome="passed")]
    run_dir = write_run(home, "r1", stream)
    engine = open_ledger(db_url)
    try:
        first = sync(engine, [Home.from_path(str(home), "h")])
        assert (first.runs_changed, first.events_ingested) == (1, 2)
        assert any("schema 4 is newer" in p.reason for p in first.problems)
        again = sync(engine, [Home.from_path(str(home), "h")])
        assert (again.runs_changed, again.events_ingested) == (0, 0)  # still waiting, nothing re-read

        with engine.connect() as conn:
            assert conn.execute(select(schema.runs.c.stream_paused)).scalar_one() is True
            assert conn.execute(select(schema.streams.c.paused_schema)).scalar_one() == 4

        monkeypatch.setattr(feed, "SUPPORTED_SCHEMA", 4)
        resumed = sync(engine, [Home.from_path(str(home), "h")])
        assert (resumed.runs_changed, resumed.events_ingested) == (1, 4)
        with engine.connect() as conn:
            lines = [n for (n,) in conn.execute(select(schema.events.c.line_no).order_by(schema.events.c.line_no))]
            assert lines == [1, 2, 3, 4, 5, 6]  # every event exactly once
            assert conn.execute(select(schema.runs.c.stream_paused)).scalar_one() is False
            assert conn.execute(select(schema.streams.c.paused_schema)).scalar_one() is None
            # 0.5 + 0.25 dollars, both charges now known
            assert conn.execute(select(schema.runs.c.cost_nano_usd)).scalar_one() == 750_000_000
        assert run_dir.exists()
        assert sync(engine, [Home.from_path(str(home), "h")]).runs_changed == 0
    finally:
        engine.dispose()


# -- the change check's skip path, deterministically ----------------------------------


def test_unchanged_run_costs_only_stat_calls(tmp_path):
    home = _copy_home(CORPUS / "home", tmp_path / "home")
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    newest = max(os.stat(p).st_mtime_ns for p in (home / "runs").iterdir())
    later = lambda: newest + HOUR_NS  # noqa: E731 - every directory is old by then
    cold = sync(engine, [Home.from_path(str(home), "h")], clock_ns=later)
    assert cold.runs_listed == 25
    noop = sync(engine, [Home.from_path(str(home), "h")], clock_ns=later)
    assert (noop.runs_listed, noop.runs_changed, noop.bytes_read) == (0, 0, 0)

    target = _streams(home)[3]
    with open(target, "ab") as f:
        f.write(orjson.dumps(ev("gate_paused", 59, node_id="x", run_id=target.parent.name)) + b"\n")
    grown = sync(engine, [Home.from_path(str(home), "h")], clock_ns=later)
    assert (grown.runs_listed, grown.runs_changed, grown.events_ingested) == (1, 1, 1)


def test_a_racy_directory_mtime_is_not_trusted(tmp_path):
    home = _copy_home(CORPUS / "home", tmp_path / "home")
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    oldest = min(os.stat(p).st_mtime_ns for p in (home / "runs").iterdir())
    racy = lambda: oldest  # noqa: E731 - the sync runs in the same tick as every directory's last change
    sync(engine, [Home.from_path(str(home), "h")], clock_ns=racy)
    again = sync(engine, [Home.from_path(str(home), "h")], clock_ns=racy)
    # Every directory is looked into again, but nothing is re-derived or re-read.
    assert (again.runs_listed, again.runs_changed, again.bytes_read) == (25, 0, 0)


# -- runner streams: keyed by the machine that read them; --wait covers them -----------


def test_equal_paths_on_two_machines_are_two_streams(tmp_path, db_url, monkeypatch):
    stream = tmp_path / "runner" / "events.jsonl"
    stream.parent.mkdir()
    stream.write_bytes(b'{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"M1","event":"start"}\n')
    engine = open_ledger(db_url)
    try:
        monkeypatch.setattr("omg_ledger.sync.machine_source", lambda: "machine:a")
        sync(engine, [], invocation_files=[str(stream)])
        stream.write_bytes(b'{"ts":"2026-11-29T11:00:00Z","role":"navi","milestone":null,"event":"start"}\n'
                           b'{"ts":"2026-11-29T11:00:01Z","role":"navi","milestone":null,"event":"end",'
                           b'"status":"DONE","duration_ms":1000}\n')
        monkeypatch.setattr("omg_ledger.sync.machine_source", lambda: "machine:b")
        sync(engine, [], invocation_files=[str(stream)])
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT source, role, outcome FROM v_invocations ORDER BY source, seq")).all()
        assert [tuple(r) for r in rows] == [("machine:a", "zen", "dangling"), ("machine:b", "navi", "paired")]
    finally:
        engine.dispose()


def test_sync_wait_zero_with_invocations_exits_75_at_once(tmp_path):
    db = tmp_path / "ledger.sqlite"
    open_ledger(str(db)).dispose()
    stream = tmp_path / "events.jsonl"
    stream.write_bytes(b"")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         f"fd = os.open({str(db) + '.sync-lock'!r}, os.O_CREAT | os.O_RDWR)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = CliRunner().invoke(main, ["sync", "--db", str(db), "--home", str(_empty_home(tmp_path)),
                                           "--wait", "0", "--invocations", str(stream)])
        assert result.exit_code == 75, result.output
        assert "another sync or an export holds this ledger" in result.output
    finally:
        holder.kill()
        holder.wait()


def _empty_home(tmp_path):
    """A home with no runs: these syncs are about the invocation stream."""
    home = tmp_path / "empty-home"
    home.mkdir(exist_ok=True)
    return home


@pytest.mark.postgres
def test_wait_covers_the_invocation_stream_on_postgresql(tmp_path, pg_url):
    """PostgreSQL locks per scope: a sync of the stream itself held elsewhere → 75."""
    import zlib

    stream = tmp_path / "events.jsonl"
    stream.write_bytes(b"")
    engine = open_ledger(pg_url)
    key = zlib.crc32(("invocations:" + str(stream)).encode()) & 0x7FFFFFFF
    try:
        with engine.connect() as other:
            other = other.execution_options(isolation_level="AUTOCOMMIT")
            assert other.execute(text("SELECT pg_try_advisory_lock(1, :k)"), {"k": key}).scalar()
            result = CliRunner().invoke(main, ["sync", "--db", pg_url, "--home", str(_empty_home(tmp_path)),
                                               "--wait", "0", "--invocations", str(stream)])
            other.execute(text("SELECT pg_advisory_unlock(1, :k)"), {"k": key})
        assert result.exit_code == 75, result.output
        assert "invocations:" in result.output
    finally:
        engine.dispose()


# -- a ledger written by release 0.1 upgrades and re-derives, its money unchanged -------


def _money(path: Path) -> dict[str, list[tuple]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            "charges": sorted(con.execute(
                "SELECT r.run_id, c.seq, c.kind, c.node_id, c.leg_ordinal, c.at_us, c.cost_nano_usd, c.cost_unknown, "
                "c.input_tokens, c.cached_input_tokens, c.output_tokens, c.reasoning_output_tokens, c.source_file, "
                "c.source_offset FROM charges c JOIN runs r ON r.id = c.run_pk").fetchall()),
            "runs": sorted(con.execute(
                "SELECT run_id, gone, cost_nano_usd, invocations, unknown_cost_invocations, unrecorded_attempts, "
                "snapshot_cost_nano_usd, planning_cost_nano_usd FROM runs").fetchall()),
            "nodes": sorted(con.execute(
                "SELECT r.run_id, n.node_id, n.cost_nano_usd, n.invocations, n.verdict, n.state FROM nodes n "
                "JOIN runs r ON r.id = n.run_pk").fetchall()),
            "invocations": sorted(con.execute(
                "SELECT seq, role, milestone, outcome, status, duration_ms FROM invocations").fetchall()),
        }
    finally:
        con.close()


def test_release_0_1_ledger_upgrades_and_rederives_with_the_same_money(tmp_path):
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE, db)
    before = _money(db)
    assert len(before["runs"]) == 25 and sum(1 for r in before["runs"] if r[1]) == 1  # one run is gone
    assert sum(c[6] or 0 for c in before["charges"]) == 1_716_700_000  # $1.7167 known, hand-summed in the README
    engine = open_ledger(str(db))
    try:
        with engine.connect() as conn:
            assert set(conn.execute(text("SELECT DISTINCT derivation_version FROM runs")).scalars()) == {0}
        report = sync(engine, [])  # no home at all: the facts are in the ledger
        assert report.runs_rederived == 25
    finally:
        engine.dispose()
    assert _money(db) == before
    con = sqlite3.connect(db)
    try:
        assert {v for (v,) in con.execute("SELECT derivation_version FROM runs")} == {derive.DERIVATION_VERSION}
        assert {v for (v,) in con.execute("SELECT derivation_version FROM streams WHERE kind = 'invocations'")} \
            == {derive.DERIVATION_VERSION}
    finally:
        con.close()


def _rules_cannot_derive(run_id: str, monkeypatch) -> None:
    """From here on, a rule fails on ``run_id``'s stored facts (every other run derives)."""
    original = derive.derive_run

    def failing(facts, parsed=None):
        if facts.run_id == run_id:
            raise ValueError("a rule that cannot read this run")
        return original(facts, parsed)

    monkeypatch.setattr("omg_ledger.sync.derive_run", failing)


def test_a_run_the_rules_cannot_derive_is_a_problem_not_a_stopped_ledger(tmp_path, db_url, monkeypatch):
    """One run whose stored facts make a (new) rule fail keeps its rows and is a problem;
    every other run is re-derived and sync completes."""
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(CORPUS / "home"), "c")])
        _bump(monkeypatch)
        broken = "20261129-181518.678721711-1"
        _rules_cannot_derive(broken, monkeypatch)
        report = sync(engine, [])
        assert report.runs_rederived == 24
        names = _graph_names(engine)
        assert names[broken][1] == derive.DERIVATION_VERSION - 1  # its older rows are kept
        assert {v for run_id, (_n, v, _g) in names.items() if run_id != broken} == {derive.DERIVATION_VERSION}
        with engine.connect() as conn:
            reasons = conn.execute(text("SELECT reason FROM problems")).scalars().all()
        assert any("cannot derive this run's rows" in r and "a rule that cannot read this run" in r for r in reasons)
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", ["sync", "rebuild"])
def test_a_run_the_rules_could_not_derive_is_no_problem_once_a_release_derives_it(tmp_path, db_url, monkeypatch,
                                                                                  how):
    """Its directory unchanged, no sync reads the run again: the re-derivation that
    succeeds (the next release's first sync, or rebuild) ends the problem the failed one
    recorded, or audit would ask for attention for ever about a run that is fine."""
    home = _copy_home(CORPUS / "home", tmp_path / "home")
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "c")])
        _bump(monkeypatch)
        broken = "20261129-181518.678721711-1"
        _rules_cannot_derive(broken, monkeypatch)
        sync(engine, [Home.from_path(str(home), "c")])
        with engine.connect() as conn:
            [reason] = conn.execute(text("SELECT reason FROM problems WHERE resolved_at IS NULL")).scalars()
        assert reason.startswith("cannot derive this run's rows")

        # The next release: its rules derive the run.
        monkeypatch.setattr("omg_ledger.sync.derive_run", derive.derive_run)
        monkeypatch.setattr(derive, "DERIVATION_VERSION", derive.DERIVATION_VERSION + 1)
        if how == "sync":
            sync(engine, [Home.from_path(str(home), "c")])
        else:
            rebuild(engine, [broken])
        assert _graph_names(engine)[broken][1] == derive.DERIVATION_VERSION
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT reason, resolved_at IS NULL FROM problems")).all()
        assert [(r.startswith("cannot derive this run's rows"), bool(still_open)) for r, still_open in rows] == \
            [(True, False)]
    finally:
        engine.dispose()
    audit = CliRunner().invoke(main, ["audit", "--db", db_url])
    assert "open input problem" not in audit.output, audit.output
