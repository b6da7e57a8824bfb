"""The full sync reads what the ledger remembers a few hundred runs at a time (memory flat
in the number of runs): read two at a time, every kind of change gives the same ledger
and the same report as one chunk holding every run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from omg_ledger import change_check
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync

from .builders import age_tree, ev, write_run
from .conftest import CORPUS_HOME
from .ledger_dump import diff, dump

LABEL = "corpus"
COUNTS = ("runs_seen", "runs_changed", "runs_gone", "events_ingested")


def _both(home: Path, engines: dict, monkeypatch) -> dict[int, dict]:
    reports = {}
    for chunk, engine in engines.items():
        monkeypatch.setattr(change_check, "KNOWN_CHUNK", chunk)
        report = sync(engine, [Home.from_path(str(home), LABEL)])
        reports[chunk] = {k: report.as_dict()[k] for k in COUNTS}
    return reports


def _same_ledgers(engines: dict) -> None:
    small, whole = (dump(engine) for engine in engines.values())
    assert small == whole, diff(small, whole)


def test_known_read_two_runs_at_a_time_gives_the_same_ledger(tmp_path, monkeypatch, db_url, request):
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home, symlinks=True)
    age_tree(home)
    runs = sorted(p.name for p in (home / "runs").iterdir())
    assert len(runs) == 25  # an odd number: the last chunk of two holds one run
    if db_url.startswith("sqlite"):
        other = f"sqlite:///{tmp_path / 'whole.sqlite'}"
    else:
        server = request.getfixturevalue("pg_server")
        other = server.create_database(f"whole_{tmp_path.name}"[:60].lower())
        request.addfinalizer(lambda: server.drop_database(other.split("?")[0].rsplit("/", 1)[1]))
    engines = {2: open_ledger(db_url), 1000: open_ledger(other)}
    try:
        first = _both(home, engines, monkeypatch)
        assert first[2] == first[1000] == {"runs_seen": 25, "runs_changed": 25, "runs_gone": 0,
                                           "events_ingested": first[1000]["events_ingested"]}
        _same_ledgers(engines)

        # A run removed at each end and in the middle, one appended to, a new one between.
        gone = [runs[0], runs[12], runs[-1]]
        saved = tmp_path / "saved"
        saved.mkdir()
        for run_id in gone:
            shutil.move(home / "runs" / run_id, saved / run_id)
        with open(home / "runs" / runs[5] / "events.jsonl", "a") as f:
            f.write(json.dumps({**ev("node_started", 1, node_id="extra"), "run_id": runs[5]},
                               separators=(",", ":")) + "\n")
        write_run(home, runs[7] + "x", [ev("run_started")])
        second = _both(home, engines, monkeypatch)
        assert second[2] == second[1000] == {"runs_seen": 23, "runs_changed": 2, "runs_gone": 3,
                                             "events_ingested": 2}
        _same_ledgers(engines)

        # Nothing changed: nothing written.
        third = _both(home, engines, monkeypatch)
        assert third[2] == third[1000] == {"runs_seen": 23, "runs_changed": 0, "runs_gone": 0,
                                           "events_ingested": 0}

        # The gone runs come back: revived, and none is marked gone again.
        for run_id in gone:
            shutil.move(saved / run_id, home / "runs" / run_id)
        fourth = _both(home, engines, monkeypatch)
        assert fourth[2] == fourth[1000]
        assert (fourth[2]["runs_seen"], fourth[2]["runs_gone"]) == (26, 0)
        _same_ledgers(engines)
        with engines[2].connect() as conn:
            assert conn.exec_driver_sql("SELECT COUNT(*) FROM runs WHERE gone").scalar() == 0
    finally:
        for engine in engines.values():
            engine.dispose()


@pytest.mark.parametrize("chunk", [1, 3, 500])
def test_known_in_chunks_yields_each_listed_runs_known_in_order(tmp_path, chunk):
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home, symlinks=True)
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    try:
        sync(engine, [Home.from_path(str(home), LABEL)])
        with engine.connect() as conn:
            home_id = conn.exec_driver_sql("SELECT id FROM homes").scalar()
            pks = dict(conn.exec_driver_sql("SELECT run_id, id FROM runs").fetchall())
            file_counts = dict(conn.exec_driver_sql(
                "SELECT runs.run_id, COUNT(f.name) FROM runs LEFT JOIN snapshot_files f ON f.run_pk = runs.id "
                "GROUP BY runs.run_id").fetchall())
        listed = ["a-not-in-the-ledger", *sorted(pks, reverse=True), "z-not-either"]

        def fetch(sql: str, params: tuple) -> list[tuple]:
            with engine.connect() as conn:
                return conn.exec_driver_sql(sql, params).fetchall()

        got = list(change_check.known_in_chunks(fetch, "?", home_id, listed, chunk))
        assert len(got) == len(listed)
        assert got[0] is None and got[-1] is None
        assert [k.run_pk for k in got[1:-1]] == [pks[run_id] for run_id in listed[1:-1]]
        assert [len(k.file_rows) for k in got[1:-1]] == [file_counts[run_id] for run_id in listed[1:-1]]
        assert all(k.cache is not None for k in got[1:-1])
    finally:
        engine.dispose()
