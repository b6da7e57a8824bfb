"""A run naming two node ids that differ only where one holds NUL and the other
U+FFFD: derived text stores NUL as U+FFFD, so both are one key of nodes and rounds and
no ledger can hold the run. It is a problem on its events.jsonl, not a failed sync:
the other runs are indexed as they would be without it, the problem is not recorded
twice, and once the stream names only one of the ids the run is indexed and the
problem resolved."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from omg_ledger import store
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync

from .ledger_dump import diff, dump

CORPUS_RUNS = Path("/work/shared/corpus/home/runs")
NUL_ID, FFFD_ID = "n\x00", "n\ufffd"


def _corpus_runs() -> list[str]:
    return sorted(p.name for p in CORPUS_RUNS.iterdir() if (p / "events.jsonl").is_file())[:3]


def _node_lines(run_id: str, ts: str, node_id: str, tag: str) -> list[str]:
    started = {"schema": 3, "ts": ts, "run_id": run_id, "event": "node_started", "node_id": node_id,
               "session_id": f"{tag}-start"}
    passed = {"schema": 3, "ts": ts, "run_id": run_id, "event": "node_passed", "node_id": node_id,
              "verdict": "PASS", "cost_usd": 0.01, "session_id": f"{tag}-pass", "provenance": "exit-only"}
    return [json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n" for d in (started, passed)]


def _write_stream(run_dir: Path, original: bytes, ids: list[tuple[str, str]]) -> None:
    """The corpus stream with, before its last line, a start and a PASS per (id, tag)."""
    lines = original.decode("utf-8").splitlines(keepends=True)
    last = json.loads(lines[-1])
    added = [line for node_id, tag in ids for line in _node_lines(run_dir.name, last["ts"], node_id, tag)]
    (run_dir / "events.jsonl").write_text("".join(lines[:-1] + added + lines[-1:]), encoding="utf-8")


def _home(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A home of the first three corpus runs; the middle one (so a good run is written
    before it in the batch and one after) is returned, not yet given its colliding ids."""
    home = tmp_path / "home"
    runs = _corpus_runs()
    for run_id in runs:
        shutil.copytree(CORPUS_RUNS / run_id, home / "runs" / run_id)
    return home, runs, home / "runs" / runs[1]


def _without_problems(dumped: dict) -> dict:
    return {k: v for k, v in dumped.items() if k != "problems"}


def _problems(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT path, byte_offset, reason, resolved_at IS NOT NULL, run_pk FROM problems ORDER BY id"))]


def _sync_dump(home: Path, db: str, workers: int) -> dict:
    engine = open_ledger(db)
    try:
        sync(engine, [Home.from_path(str(home), "h")], workers=workers)
        return dump(engine)
    finally:
        engine.dispose()


@pytest.mark.parametrize("spill", [False, True], ids=["held", "spilled"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_whose_node_ids_collide_is_a_problem_and_the_others_are_indexed(db_url, tmp_path, workers, spill,
                                                                             monkeypatch):
    if spill:
        # Held-back rows written out every few rows: the bad run's first rows are then in
        # the database (inline) before its derivation refuses it.
        monkeypatch.setattr(store, "HELD_BACK_ROWS", 3)
    home, runs, bad = _home(tmp_path)
    original = (bad / "events.jsonl").read_bytes()
    shutil.move(bad, tmp_path / "aside")
    # The engine's truth for the two good runs: a home holding only them.
    expected = _sync_dump(home, str(tmp_path / "expected.sqlite"), workers=0)
    shutil.move(tmp_path / "aside", bad)
    _write_stream(bad, original, [(NUL_ID, "nul"), (FFFD_ID, "fffd")])
    bad_stream = f"{bad}/events.jsonl"

    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    try:
        report = sync(engine, homes, workers=workers)
        assert report.runs_changed == 2
        assert [p.path for p in report.problems] == [bad_stream]
        reason = report.problems[0].reason
        # Lines: the corpus stream's lines before its last, then the four added.
        first = len(original.decode().splitlines())
        assert f"'n\\x00' (first on line {first}) and 'n\\ufffd' (first on line {first + 2})" in reason, reason
        got = dump(engine)
        assert _without_problems(got) == _without_problems(expected), diff(_without_problems(got),
                                                                          _without_problems(expected))
        assert _problems(engine) == [(bad_stream, 0, reason, False, None)]
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM runs WHERE run_id = :r"), {"r": bad.name}).scalar() == 0

        again = sync(engine, homes, workers=workers)
        assert (again.runs_changed, [p.reason for p in again.problems]) == (0, [reason])
        assert _problems(engine) == [(bad_stream, 0, reason, False, None)]
        assert _without_problems(dump(engine)) == _without_problems(expected)

        # Fixed: the stream names only the NUL id.
        _write_stream(bad, original, [(NUL_ID, "nul")])
        fixed = sync(engine, homes, workers=workers)
        assert (fixed.runs_changed, fixed.problems) == (1, [])
        with engine.connect() as conn:
            nodes = [tuple(r) for r in conn.execute(text(
                "SELECT n.node_id, n.verdict, n.session_id, n.cost_nano_usd FROM nodes n JOIN runs r "
                "ON r.id = n.run_pk WHERE r.run_id = :r AND n.node_id LIKE 'n%' ORDER BY n.node_id"),
                {"r": bad.name})]
        assert (bad_stream, 0, reason, True) == _problems(engine)[0][:4]
        fixed_dump = dump(engine)
    finally:
        engine.dispose()
    # NUL stored as U+FFFD; its PASS: 0.01 USD.
    assert nodes == [(FFFD_ID, "PASS", "nul-pass", 10_000_000)]
    clean = _sync_dump(home, str(tmp_path / "clean.sqlite"), workers=0)
    assert _without_problems(fixed_dump) == _without_problems(clean), diff(_without_problems(fixed_dump),
                                                                          _without_problems(clean))


def test_an_append_that_makes_node_ids_collide_leaves_the_run_as_it_was(db_url, tmp_path):
    """A run already indexed whose stream grows the second id: its rows stay those of
    the lines before (its savepoint is rolled back), the runs after it in the batch are
    indexed, and the problem names its run."""
    home, runs, bad = _home(tmp_path)
    original = (bad / "events.jsonl").read_bytes()
    _write_stream(bad, original, [(NUL_ID, "nul")])
    later = home / "runs" / runs[2]
    shutil.move(later, tmp_path / "aside")
    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    try:
        sync(engine, homes, workers=0)
        before = dump(engine)
        with open(bad / "events.jsonl", "a", encoding="utf-8") as f:
            f.writelines(_node_lines(bad.name, json.loads(original.decode().splitlines()[-1])["ts"], FFFD_ID, "fffd"))
        shutil.move(tmp_path / "aside", later)
        report = sync(engine, homes, workers=0)
        assert report.runs_changed == 1  # the run added back
        assert [p.path for p in report.problems] == [f"{bad}/events.jsonl"]
        after = dump(engine)
        with engine.connect() as conn:
            bad_pk = conn.execute(text("SELECT id FROM runs WHERE run_id = :r"), {"r": bad.name}).scalar()
        assert [p[3:] for p in _problems(engine)] == [(False, bad_pk)]
    finally:
        engine.dispose()
    only_before = {table: [row for row in rows if (("run_pk", ("h", later.name)) not in row
                                                   and ("run_id", later.name) not in row)]
                   for table, rows in _without_problems(after).items()}
    assert only_before["homes"] and only_before == _without_problems(before), diff(only_before,
                                                                                  _without_problems(before))


def test_the_cli_syncs_past_such_a_run_and_strict_says_so(tmp_path):
    home, runs, bad = _home(tmp_path)
    _write_stream(bad, (bad / "events.jsonl").read_bytes(), [(NUL_ID, "nul"), (FFFD_ID, "fffd")])
    db = tmp_path / "ledger.sqlite"

    def cli(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", str(db)],
                              capture_output=True, text=True, timeout=120)

    synced = cli("sync", "--home", str(home), "--json", "--workers", "0")
    assert synced.returncode == 0, synced.stderr
    assert "Traceback" not in synced.stderr
    problems = json.loads(synced.stdout)["problems"]
    assert [(p["path"], "'n\\x00'" in p["reason"] and "'n\\ufffd'" in p["reason"]) for p in problems] \
        == [(f"{bad}/events.jsonl", True)]
    assert [line for line in synced.stderr.splitlines() if line.startswith("omg-ledger: problem:")] \
        == [line for line in synced.stderr.splitlines() if line]
    listed = cli("runs", "--json")
    assert listed.returncode == 0 and bad.name not in listed.stdout
    assert sum(run_id in listed.stdout for run_id in (runs[0], runs[2])) == 2
    shown = cli("problems")
    assert shown.returncode == 0 and f"{bad}/events.jsonl" in shown.stdout
    strict = cli("sync", "--home", str(home), "--strict")
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    assert strict.stderr.count("omg-ledger: problem:") == 1


def test_the_problem_of_such_a_run_is_resolved_once_its_directory_is_removed(tmp_path):
    """The run is not indexed, so the ledger holds no run for it, only its problem; once its
    directory is gone, the next sync (the no-op check first) resolves that problem, as a
    full sync does, instead of leaving it open for good."""
    home, runs, bad = _home(tmp_path)
    _write_stream(bad, (bad / "events.jsonl").read_bytes(), [(NUL_ID, "nul"), (FFFD_ID, "fffd")])
    db = tmp_path / "ledger.sqlite"

    def sync_cli() -> list[dict]:
        synced = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db), "--home", str(home),
                                 "--json", "--workers", "0"], capture_output=True, text=True, timeout=120)
        assert synced.returncode == 0 and "Traceback" not in synced.stderr, synced.stderr
        return json.loads(synced.stdout)["problems"]

    assert [p["path"] for p in sync_cli()] == [f"{bad}/events.jsonl"]
    shutil.rmtree(bad)
    assert sync_cli() == []
    engine = open_ledger(str(db))
    try:
        assert [(path, resolved) for path, _, _, resolved, _ in _problems(engine)] == [(f"{bad}/events.jsonl", True)]
    finally:
        engine.dispose()


def test_rebuild_keeps_the_rows_of_a_run_whose_stored_lines_collide_and_records_it(db_url, tmp_path):
    """Stored lines naming both ids (stored here through store.write_events, the path a
    sync stores lines by: no sync stores such a run): rebuild records the run as one it
    cannot derive, keeps its rows, and goes on with the others."""
    from omg_ledger.db import write_transaction
    from omg_ledger.store import write_events
    from omg_ledger.sync import rebuild

    from .builders import ev, events

    home, runs, bad = _home(tmp_path)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")], workers=0)
        with engine.connect() as conn:
            bad_pk, lines = conn.execute(text(
                "SELECT r.id, COUNT(e.line_no) FROM runs r JOIN events e ON e.run_pk = r.id WHERE r.run_id = :r "
                "GROUP BY r.id"), {"r": bad.name}).one()
        before = dump(engine)
        added = events(*[ev("run_started", 0)] * lines,  # (line numbers after the stored ones; not stored)
                       ev("node_started", 1, node_id=NUL_ID), ev("node_passed", 2, node_id=NUL_ID, cost_usd=0.01),
                       ev("node_started", 3, node_id=FFFD_ID), ev("node_passed", 4, node_id=FFFD_ID, cost_usd=0.01))
        with write_transaction(engine) as conn:
            assert write_events(conn, bad_pk, added[lines:], replace=False) == (True, 4)
        with_lines = dump(engine)
        report = rebuild(engine)
        assert report.runs_rederived == 2
        assert dump(engine)["nodes"] == with_lines["nodes"] == before["nodes"]
        [(path, offset, reason, resolved, run_pk)] = _problems(engine)
    finally:
        engine.dispose()
    assert (path, offset, resolved, run_pk) == (str(bad), 0, False, bad_pk)
    assert reason.startswith("cannot derive this run's rows from its stored facts: UnderivableRun: node ids 'n\\x00' "
                             f"(first on line {lines + 1}) and 'n\\ufffd' (first on line {lines + 3})"), reason
