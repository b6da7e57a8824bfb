"""The 305-run scale corpus: every run's status, graph, node count and state.json cost
equal the real engine's own `runs list` (corpus-scale/truth-runs-list.txt)."""

from __future__ import annotations

import re
import tarfile
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.reports.runs import list_runs
from omg_ledger.sync import Home, sync

from .conftest import CORPUS

SCALE = CORPUS.parent / "corpus-scale"
ROW = re.compile(r"^(\d{8}-\d{6}\.\d{9}-\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$")


@pytest.fixture(scope="module")
def scale_ledger(tmp_path_factory):
    if not (SCALE / "home.tar.gz").exists():
        pytest.fail(f"the scale corpus is missing at {SCALE}")
    home = tmp_path_factory.mktemp("scale") / "home"
    with tarfile.open(SCALE / "home.tar.gz") as archive:
        archive.extractall(home, filter="data")
    engine = open_ledger(str(home.parent / "ledger.sqlite"))
    report = sync(engine, [Home.from_path(str(home), "scale")])
    return engine, report


def _truth() -> dict[str, tuple[str, ...]]:
    rows = {}
    for line in (SCALE / "truth-runs-list.txt").read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = match.groups()[1:]
    return rows


def test_scale_corpus_indexes_cleanly_and_matches_the_engine(scale_ledger):
    engine, report = scale_ledger
    truth = _truth()
    assert len(truth) == 305 and report.runs_seen == 305 and report.problems == []
    ours = {r["run_id"]: r for r in list_runs(engine)}
    assert set(ours) == set(truth)
    for run_id, (graph, nodes, _cost, _tokens, status) in truth.items():
        row = ours[run_id]
        assert (row["status"], row["graph"] or "-") == (status, graph), run_id
        assert (str(row["nodes_total"]) if row["nodes_total"] is not None else "-") == nodes, run_id
    with engine.connect() as conn:
        assert conn.execute(select(schema.findings)).all() == []  # stream and snapshot agree everywhere


def test_scale_corpus_state_json_costs_match_the_engine(scale_ledger):
    """The engine prints state.json sums rounded to 4 places; four runs whose exact sum
    ends in 5 at the fifth place print either neighbour (corpus-scale/README.md), so a
    printed value may differ from ours by at most half a unit in the last place."""
    engine, _ = scale_ledger
    truth = _truth()
    with engine.connect() as conn:
        rows = conn.execute(select(schema.runs.c.run_id, schema.runs.c.snapshot_cost_nano_usd,
                                   schema.runs.c.snapshot_cost_unknown, schema.runs.c.cost_nano_usd)).all()
    checked = 0
    for run_id, snapshot_nanos, unknown, _ in rows:
        printed = truth[run_id][2]
        if printed == "unknown":
            assert unknown, run_id
        elif snapshot_nanos is not None:
            assert abs(Decimal(snapshot_nanos).scaleb(-9) - Decimal(printed)) <= Decimal("0.00005"), run_id
            checked += 1
    assert checked > 250


def test_scale_corpus_runs_hold_their_pass_counts_by_provenance(scale_ledger):
    """Each run's passes by provenance on its row, as its nodes and its state.json count them."""
    from .test_run_pass_counts import counted_from_nodes, counted_from_state_json, stored_counts

    engine, _ = scale_ledger
    home = Path(engine.url.database).parent / "home"
    stored = stored_counts(engine)
    assert len(stored) == 305
    assert stored == counted_from_nodes(engine)
    assert stored == counted_from_state_json(home)
    assert sum(run["passes"] for run in stored.values()) > 1000


def test_the_status_reading_of_state_json_now_is_the_one_sync_stored(scale_ledger):
    """status reads a run's state.json again when its stream may have moved on since the
    last sync (status._snapshot_facts_now), apart from reconcile so that reading commands
    need not import it (the PASS rule both use is snapshot.all_nodes_passed). On every
    scale run (PASS, FAIL, PAUSED at a gate, ABANDONED) the two readings agree, so neither
    can drift from the other."""
    from omg_ledger.status import _snapshot_facts_now

    engine, _ = scale_ledger
    r = schema.runs.c
    with engine.connect() as conn:
        rows = conn.execute(select(r.run_id, r.dir_path, r.snapshot_schema, r.all_nodes_passed,
                                   r.gate_paused_at)).all()
    assert len(rows) == 305
    kinds = set()
    for run_id, dir_path, snapshot_schema, all_passed, gate_paused_at in rows:
        now = _snapshot_facts_now(dir_path, run_id)
        assert (now["has_snapshot"], now["snapshot_unreadable"]) == (snapshot_schema is not None, False), run_id
        if now["has_snapshot"]:
            assert (now["all_nodes_passed"], now["gate_paused_at"]) == (bool(all_passed), gate_paused_at), run_id
            kinds.add((bool(all_passed), gate_paused_at is not None))
    assert kinds == {(True, False), (False, False), (False, True)}  # each reading is exercised
