"""The indexer's contract: idempotent, resumable, read-only, history kept."""

from __future__ import annotations

import json
import os
import shutil

from sqlalchemy import func, select

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync

from .builders import age_tree, ev, graph, write_run
from .conftest import CORPUS_HOME


def dump(engine) -> dict[str, list[tuple]]:
    """Every row of every table, in key order: the ledger's data (not when a home last synced)."""
    out = {}
    with engine.connect() as conn:
        for table in schema.metadata.sorted_tables:
            key = list(table.primary_key.columns) or list(table.columns)
            columns = [c for c in table.columns if (table.name, c.name) != ("homes", "last_synced_at")]
            out[table.name] = [tuple(r) for r in conn.execute(select(*columns).order_by(*key))]
    return out


def count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar()


def test_second_sync_of_the_corpus_changes_nothing(db_url):
    engine = open_ledger(db_url)
    home = [Home.from_path(str(CORPUS_HOME), "corpus")]
    first = sync(engine, home)
    before = dump(engine)
    second = sync(engine, home)
    assert first.runs_changed == 25 and first.events_ingested == 197
    assert (second.runs_changed, second.events_ingested, second.bytes_read) == (0, 0, 0)
    assert dump(engine) == before


def test_a_second_sync_writes_only_the_homes_last_sync_time(tmp_path):
    """Every table but homes.last_synced_at (when the sync ran, for `omg-ledger homes`
    and metrics) is byte for byte what the first sync left."""
    import sqlite3

    db = tmp_path / "ledger.sqlite"
    engine = open_ledger(str(db))
    home = [Home.from_path(str(CORPUS_HOME), "corpus")]
    sync(engine, home)
    engine.dispose()

    def contents():
        con = sqlite3.connect(db)
        try:
            tables = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            data = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables if t != "homes"}
            homes = con.execute("SELECT id, label, path, machine, dev, inode, real_path, last_synced_at "
                                "FROM homes").fetchall()
            return data, homes
        finally:
            con.close()

    first, first_homes = contents()
    engine = open_ledger(str(db))
    sync(engine, home)
    engine.dispose()
    second, second_homes = contents()
    assert second == first
    assert [h[:-1] for h in second_homes] == [h[:-1] for h in first_homes]
    assert second_homes[0][-1] >= first_homes[0][-1]


def test_appended_lines_are_read_from_the_offset_and_a_partial_line_waits(tmp_path):
    home = tmp_path / "home"
    run_dir = write_run(home, "r1", [ev("run_started"), ev("node_started", node_id="a")])
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    homes = [Home.from_path(str(home), "h")]
    assert sync(engine, homes).events_ingested == 2
    passed = json.dumps({**ev("node_passed", node_id="a", cost_usd=0.5), "run_id": "r1"}).encode() + b"\n"
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(passed[:20])  # the writer is mid-line
    report = sync(engine, homes)
    assert report.events_ingested == 0 and report.problems == []
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(passed[20:])
    report = sync(engine, homes)
    assert report.events_ingested == 1
    assert report.bytes_read == len(passed)  # only the new bytes, from the stored offset
    assert count(engine, schema.events) == 3 and count(engine, schema.charges) == 1


def test_unchanged_state_json_is_not_reparsed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    run_dir = write_run(home, "r1", [ev("run_started")], state={"graph": graph("a"), "nodes": {}})
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    homes = [Home.from_path(str(home), "h")]
    sync(engine, homes)
    import omg_ledger.change_check as change_check_module
    import omg_ledger.ingest as ingest_module

    reads = []
    real = ingest_module.read_small_file
    for module in (ingest_module, change_check_module):  # run directories' JSON files; plans' graph.json
        monkeypatch.setattr(module, "read_small_file", lambda p: reads.append(p) or real(p))
    with open(run_dir / "events.jsonl", "a") as f:
        f.write(json.dumps({**ev("node_started", node_id="a"), "run_id": "r1"}) + "\n")
    assert sync(engine, homes).events_ingested == 1
    assert reads == []


def test_rewritten_stream_is_reread_from_zero_without_duplicates(tmp_path):
    home = tmp_path / "home"
    run_dir = write_run(home, "r1", [ev("run_started"), ev("node_passed", node_id="a", cost_usd=0.1)])
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    homes = [Home.from_path(str(home), "h")]
    sync(engine, homes)
    # Same size, different head: a different file.
    write_run(home, "r1", [ev("run_started"), ev("node_passed", node_id="b", cost_usd=0.2)])
    sync(engine, homes)
    with engine.connect() as conn:
        nodes = [r.node_id for r in conn.execute(select(schema.nodes.c.node_id))]
    assert nodes == ["b"] and count(engine, schema.events) == 2 and count(engine, schema.charges) == 1
    # Truncated.
    write_run(home, "r1", [ev("run_started")])
    sync(engine, homes)
    assert count(engine, schema.events) == 1 and count(engine, schema.charges) == 0
    assert run_dir.exists()


def test_a_vanished_run_is_kept_and_marked_gone(tmp_path):
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home)
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    homes = [Home.from_path(str(home), "h")]
    sync(engine, homes)
    victim = "20261129-181512.929654081-1"
    os.chmod(home / "runs", 0o755)
    shutil.rmtree(home / "runs" / victim, onerror=lambda f, p, e: (os.chmod(os.path.dirname(p), 0o755), f(p)))
    report = sync(engine, homes)
    assert report.runs_gone == 1
    with engine.connect() as conn:
        row = conn.execute(select(schema.runs).where(schema.runs.c.run_id == victim)).one()
        charges = conn.execute(select(func.count()).select_from(schema.charges)
                               .where(schema.charges.c.run_pk == row.id)).scalar()
    assert row.gone and charges == 4  # s01's four node_passed charges survive the directory


def test_runs_are_keyed_by_home_and_run_id(tmp_path):
    """Two homes holding copies of the same runs keep a row per copy; each run is billed once."""
    import shutil

    laptop, ci = tmp_path / "laptop", tmp_path / "ci"
    shutil.copytree(CORPUS_HOME, laptop)
    shutil.copytree(CORPUS_HOME, ci)
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    sync(engine, [Home.from_path(str(laptop), "laptop:/h"), Home.from_path(str(ci), "ci:/h")])
    assert count(engine, schema.runs) == 50 and count(engine, schema.homes) == 2
    with engine.connect() as conn:
        assert conn.execute(select(schema.runs.c.id).where(schema.runs.c.billed)).all().__len__() == 25


def test_default_home_label_names_the_host_and_path(tmp_path):
    home = Home.from_path(str(tmp_path))
    assert home.label.endswith(f":{tmp_path}") and home.label.split(":")[0]


def test_a_new_failed_reply_is_seen_whether_or_not_failed_dir_existed(tmp_path):
    home = tmp_path / "home"
    run_dir = write_run(home, "r1", [ev("run_started"), ev("node_failed", node_id="a", cost_usd=0.1),
                                     ev("node_failed", node_id="b", cost_usd=0.1),
                                     ev("run_finished", outcome="failed")],
                        state={"graph": graph("a", "b"), "nodes": {"a": {"verdict": "FAIL", "cost_usd": 0.1},
                                                                   "b": {"verdict": "FAIL", "cost_usd": 0.1}}})
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    homes = [Home.from_path(str(home), "h")]
    age_tree(home)
    sync(engine, homes)

    def failed_outputs():
        with engine.connect() as conn:
            return {r.node_id: r.has_failed_output for r in conn.execute(select(schema.nodes))}

    assert failed_outputs() == {"a": False, "b": False}
    (run_dir / "failed").mkdir()  # creating failed/ changes the run directory's mtime
    (run_dir / "failed" / "a.out").write_text("why a failed")
    assert sync(engine, homes).runs_changed == 1
    assert failed_outputs() == {"a": True, "b": False}
    age_tree(home)
    assert sync(engine, homes).runs_changed == 0
    (run_dir / "failed" / "b.out").write_text("why b failed")  # only failed/'s mtime changes
    assert sync(engine, homes).runs_changed == 1
    assert failed_outputs() == {"a": True, "b": True}
