"""`omg-ledger sync` with nothing to do reads through the DB-API alone (sqlite3 or
psycopg, no SQLAlchemy) and writes only the homes' last sync time; anything that is not
a no-op still gets the full sync, with the same result as before this shortcut existed.
Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from omg_ledger.backend import schema_lock_key
from omg_ledger.db import database_url, open_ledger
from omg_ledger.discover import home_lock_scopes
from omg_ledger.sync import Home, sync

from .builders import age_tree, ev, graph, write_run
from .conftest import CORPUS_HOME
from .ledger_dump import diff, dump

LABEL = "corpus"


def cli(*args: object, importtime: bool = False) -> subprocess.CompletedProcess:
    # Resource warnings shown: a server-side cursor left open by the check would say so.
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, "-W", "always::ResourceWarning", *flags, "-m", "omg_ledger.cli",
                           *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home, symlinks=True)
    write_run(home, "r-extra", [ev("run_started")])
    age_tree(home)
    return home


@pytest.fixture
def db(db_url) -> str:
    return db_url


@pytest.fixture
def clean_db(db_url, tmp_path, request) -> str:
    """A second, empty ledger on the same backend."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'clean.sqlite'}"
    server = request.getfixturevalue("pg_server")
    name = f"clean_{tmp_path.name}"[:60].lower()
    request.addfinalizer(lambda: server.drop_database(name))
    return server.create_database(name)


def _rows(db: str, sql: str, params: dict | None = None) -> list[tuple]:
    engine = create_engine(database_url(db))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params or {})
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _sync(db: str, home: Path, **kwargs) -> dict:
    result = cli("sync", "--db", db, "--home", f"{LABEL}={home}", "--json", **kwargs)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def _last_synced(db: str) -> str:
    return _rows(db, "SELECT last_synced_at FROM homes WHERE label = :label", {"label": LABEL})[0][0]


def test_a_no_op_sync_imports_no_sqlalchemy_and_writes_only_the_sync_time(home, db):
    _sync(db, home)
    before, synced_before = dump(db, cache_hints=True), _last_synced(db)
    result = _sync(db, home, importtime=True)
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "omg_ledger.change_check" in imported  # the measurement sees our modules
    assert not {m for m in imported if m.split(".")[0] in ("sqlalchemy", "alembic")}, "SQLAlchemy was imported"
    assert "omg_ledger.schema" not in imported
    # Derivation is not a change check's: its modules are a cost the cron no-op never needs.
    assert not imported & {"omg_ledger.reconcile", "omg_ledger.derive", "omg_ledger.invocation_sync"}
    report = json.loads(result.stdout)
    runs = len(list((home / "runs").iterdir()))
    assert (report["runs_seen"], report["runs_changed"], report["runs_gone"], report["runs_rederived"],
            report["events_ingested"], report["problems"]) == (runs, 0, 0, 0, 0, [])
    after = dump(db, cache_hints=True)
    assert after == before, diff(after, before)
    assert _last_synced(db) > synced_before  # metrics' last-sync gauge reads it


def _append(home: Path, db: str) -> dict:
    with open(home / "runs" / "r-extra" / "events.jsonl", "a") as f:
        f.write(json.dumps({**ev("node_started", 1, node_id="a"), "run_id": "r-extra"}, separators=(",", ":")) + "\n")
    return {"runs_changed": 1, "events_ingested": 1}


def _new_run(home: Path, db: str) -> dict:
    write_run(home, "r-new", [ev("run_started")])
    return {"runs_changed": 1, "events_ingested": 1}


def _new_plan(home: Path, db: str) -> dict:
    (home / "plans" / "p-new").mkdir(parents=True)
    (home / "plans" / "p-new" / "graph.json").write_text(json.dumps(graph("a")))
    return {"runs_changed": 0}


def _outdated(home: Path, db: str) -> dict:
    _rows(db, "UPDATE runs SET derivation_version = derivation_version - 1 WHERE run_id = 'r-extra'")
    return {"runs_rederived": 1}


@pytest.mark.parametrize("change", [_append, _new_run, _new_plan, _outdated])
def test_a_change_gets_the_full_sync_and_equals_a_clean_sync(home, db, clean_db, change):
    _sync(db, home)
    expected = change(home, db)
    result = _sync(db, home)
    assert "ServerCursor" not in result.stderr  # the check that stepped aside closed its cursors
    report = json.loads(result.stdout)
    assert {k: report[k] for k in expected} == expected, report
    engine = open_ledger(clean_db)
    sync(engine, [Home.from_path(str(home), LABEL)])
    engine.dispose()
    ours, reference = dump(db), dump(clean_db)
    assert ours == reference, diff(ours, reference)


ASSESSED = "20261129-181522.237468643-1"  # its assess.json bills an assessment of $0.0078


@pytest.mark.parametrize("remembered", ["ctime", "no ctime (a row from before 0017)"])
def test_a_file_that_arrives_under_a_directory_time_set_back_is_read(home, db, clean_db, remembered):
    """`rsync -t` sets a directory's mtime to the source's when it reaches it, writes into
    it, and sets it again at the end. A sync in between remembered that mtime; the one after
    saw it unchanged and never looked for the assess.json that arrived meanwhile: the
    assessment's charge was lost for good. The ctime shows the change (no user sets it); a
    row that remembers none, as the upgrade leaves every row, is listed again."""
    run_dir = home / "runs" / ASSESSED
    assess = (run_dir / "assess.json").read_bytes()
    (run_dir / "assess.json").unlink()
    source_time = time.time_ns() - 3600 * 10**9  # the source's mtime: old, so trusted
    os.utime(run_dir, ns=(source_time, source_time))
    _sync(db, home)  # mid-transfer
    if remembered != "ctime":
        _rows(db, "UPDATE ingest_state SET dir_ctime_ns = NULL, failed_dir_ctime_ns = NULL")
    assert _rows(db, "SELECT COUNT(*) FROM charges c JOIN runs r ON r.id = c.run_pk "
                     "WHERE r.run_id = :r AND c.kind = 'assessment'", {"r": ASSESSED}) == [(0,)]
    changed_at = os.stat(run_dir).st_ctime_ns
    while time.time_ns() < changed_at + 100_000_000:  # the next change in a later clock tick
        time.sleep(0.01)
    (run_dir / "assess.json").write_bytes(assess)
    os.utime(run_dir, ns=(source_time, source_time))  # rsync's last touch: the same mtime again
    _sync(db, home)
    assert _rows(db, "SELECT c.cost_nano_usd FROM charges c JOIN runs r ON r.id = c.run_pk "
                     "WHERE r.run_id = :r AND c.kind = 'assessment'", {"r": ASSESSED}) == [(7_800_000,)]
    engine = open_ledger(clean_db)
    sync(engine, [Home.from_path(str(home), LABEL)])
    engine.dispose()
    ours, reference = dump(db), dump(clean_db)
    assert ours == reference, diff(ours, reference)


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_vanished_run_is_marked_gone(home, db, which):
    """Wherever it sorts: the check walks the listing and the ledger's runs side by side."""
    _sync(db, home)
    names = sorted(p.name for p in (home / "runs").iterdir())
    assert names[-1] == "r-extra"
    gone = {"first": names[0], "middle": names[len(names) // 2], "last": names[-1]}[which]
    shutil.rmtree(home / "runs" / gone)
    assert json.loads(_sync(db, home).stdout)["runs_gone"] == 1
    assert _rows(db, "SELECT run_id FROM runs WHERE gone") == [(gone,)]
    # And with it gone and marked so, the next sync is a no-op again (the quick path).
    again = _sync(db, home, importtime=True)
    assert "sqlalchemy" not in again.stderr and json.loads(again.stdout)["runs_gone"] == 0


def test_a_problem_in_runs_that_went_away_is_resolved(home, db, tmp_path):
    """The only write a sync would make is resolving a problem (a symlink in runs/, now
    removed): that is not a no-op."""
    link = home / "runs" / "elsewhere"
    link.symlink_to(tmp_path)
    age_tree(home)
    first = json.loads(_sync(db, home).stdout)
    assert [p["path"] for p in first["problems"]] == [str(link)]
    link.unlink()  # (no age_tree here: touching the files' ctimes would make every stream worth a look)
    _sync(db, home)
    assert _rows(db, "SELECT path FROM problems WHERE resolved_at IS NULL") == []
    assert _rows(db, "SELECT path FROM problems WHERE resolved_at IS NOT NULL") == [(str(link),)]


def test_a_run_directory_with_an_mtime_in_the_future_is_trusted_once_its_ctime_is_old(home, db):
    """`touch -d` ahead, or `rsync -t` from a machine whose clock is ahead: the mtime is in
    the future, but the file system stamped the change (ctime) in the past. Once that is
    outside the racy window, the mtime is remembered, and the sync after is the no-op
    instead of listing the run again on every sync."""
    day_ahead = time.time_ns() + 86_400 * 10**9
    run_dir = home / "runs" / "r-extra"
    os.utime(run_dir, ns=(day_ahead, day_ahead))
    engine = open_ledger(db)
    try:
        # The sync runs 10 s after the touch (as a cron sync would, later).
        sync(engine, [Home.from_path(str(home), LABEL)], clock_ns=lambda: time.time_ns() + 10 * 10**9)
    finally:
        engine.dispose()
    assert _rows(db, "SELECT i.dir_mtime_ns FROM ingest_state i JOIN runs r ON r.id = i.run_pk "
                     "WHERE r.run_id = 'r-extra'") == [(day_ahead,)]
    again = _sync(db, home, importtime=True)
    assert "sqlalchemy" not in again.stderr and json.loads(again.stdout)["runs_changed"] == 0


def test_a_run_directory_written_while_the_clock_was_ahead_is_trusted_after_it_steps_back(home, db):
    """A run written while the wall clock was a day ahead (a clock NTP then stepped back):
    its directory's mtime and ctime are both a day in the future. No change can happen in
    that tick until the clock gets there, so the mtime is remembered; it was not, so every
    sync listed the run again, and the no-op sync stepped aside, for that whole day."""
    run_dir = home / "runs" / "r-extra"
    (run_dir / "scratch").write_text("")
    (run_dir / "scratch").unlink()  # the directory changed now: its mtime and ctime are now
    info = os.stat(run_dir)
    engine = open_ledger(db)
    try:
        # The clock, stepped back a day after the run was written, as every sync sees it.
        sync(engine, [Home.from_path(str(home), LABEL)], clock_ns=lambda: info.st_ctime_ns - 86_400 * 10**9)
    finally:
        engine.dispose()
    assert _rows(db, "SELECT i.dir_mtime_ns FROM ingest_state i JOIN runs r ON r.id = i.run_pk "
                     "WHERE r.run_id = 'r-extra'") == [(info.st_mtime_ns,)]
    again = _sync(db, home, importtime=True)
    assert "sqlalchemy" not in again.stderr and json.loads(again.stdout)["runs_changed"] == 0


def test_another_label_for_an_indexed_home_is_still_refused(home, db):
    _sync(db, home)
    result = cli("sync", "--db", db, "--home", f"other={home}", "--json")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"already indexed as home {LABEL!r}" in result.stderr, result.stderr


def test_a_no_op_sync_waits_for_the_lock_like_the_full_sync(home, db):
    _sync(db, home)
    with _sync_lock_held(db, home):
        result = cli("sync", "--db", db, "--home", f"{LABEL}={home}", "--wait", "0")
    assert result.returncode == 75, (result.returncode, result.stderr)
    holder = "another sync or an export holds this ledger" if db.startswith("sqlite") else f"another sync of {LABEL} into"
    assert holder in result.stderr and "Traceback" not in result.stderr


def test_the_same_home_named_another_way_waits_for_the_sync_that_holds_it(home, db, tmp_path):
    """Through a symlink and without its label it is the same home (README "One run, one
    bill"), so it waits for the lock the labelled sync holds: on PostgreSQL, where each home
    has a lock of its own, two such syncs at once moved the home's path without its runs'."""
    _sync(db, home)
    link = tmp_path / "link-to-home"
    link.symlink_to(home, target_is_directory=True)
    with _sync_lock_held(db, home):
        for spec in (str(link), str(home), f"another-label={link}"):
            result = cli("sync", "--db", db, "--home", spec, "--wait", "0.5")
            assert result.returncode == 75, (spec, result.returncode, result.stderr)
            assert "Traceback" not in result.stderr
    assert cli("sync", "--db", db, "--home", str(link)).returncode == 0  # free again: it is that home


@contextlib.contextmanager
def _sync_lock_held(db: str, home) -> Iterator[None]:
    """The lock a sync of the home holds, held by another process's connection."""
    if db.startswith("sqlite"):
        import fcntl

        fd = os.open(db[len("sqlite:///"):] + ".sync-lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
        return
    engine = create_engine(database_url(db), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            key = schema_lock_key(home_lock_scopes(str(home), LABEL)[-1])  # its directory's
            assert conn.execute(text("SELECT pg_try_advisory_lock(1, :k)"), {"k": key}).scalar()
            yield
    finally:
        engine.dispose()


def test_the_no_op_check_takes_the_derivation_lock_of_the_full_sync():
    from omg_ledger import change_check
    from omg_ledger import sync as full_sync

    assert change_check.DERIVE_SCOPE == full_sync.DERIVE_SCOPE


def test_the_change_check_reads_file_identities_from_an_index_not_the_files_content(tmp_path):
    """Every sync compares each file's identity with the ledger's; snapshot_files' rows are
    mostly the files' content, so the check must find the identities in a covering index
    (SQLite's plan says so) instead of reading every content page."""
    import sqlite3

    from omg_ledger.change_check import _files_sql

    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", f"{LABEL}={CORPUS_HOME}").returncode == 0
    conn = sqlite3.connect(db)
    try:
        for query in (_files_sql("?") + " AND runs.run_id IN (?)",
                      _files_sql("?").replace("SELECT f.run_pk,", "SELECT runs.run_id,")
                      + " ORDER BY runs.run_id, f.name"):
            steps = [row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", (1, "x")[:query.count("?")])]
            assert any("snapshot_files" in s or s.startswith("SEARCH f ") for s in steps), steps
            assert all("COVERING INDEX ix_snapshot_files_identity" in s for s in steps if s.startswith("SEARCH f ")
                       or s.startswith("SCAN f ")), steps
    finally:
        conn.close()
