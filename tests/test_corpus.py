"""The real engine's corpus: every run indexes cleanly and matches the engine's truth.

Expectations come from the corpus's own files: truth/runs-list.txt (the engine's
`runs list`), per-run.md (the harness's table of designed facts) and simple counts over
the raw event lines — never from running omg-ledger and pasting its answer.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.reports.runs import list_runs
from omg_ledger.sync import Home, sync

from .conftest import CORPUS


def _per_run_table() -> dict[str, dict]:
    rows = {}
    for line in (CORPUS / "per-run.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 17 and cells[1].startswith("`"):
            run_id = cells[1].strip("`")
            rows[run_id] = {"status": cells[4], "legs": int(cells[7]), "events": int(cells[11]),
                            "state_usd": cells[12], "events_usd": cells[13]}
    return rows


def _engine_runs_list() -> dict[str, dict]:
    rows = {}
    for line in (CORPUS / "truth" / "runs-list.txt").read_text().splitlines():
        match = re.match(r"^(\d{8}-\d{6}\.\d{9}-\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", line)
        if match:
            run_id, graph, nodes, cost, tokens, status = match.groups()
            rows[run_id] = {"graph": graph, "nodes": nodes, "cost": cost, "tokens": tokens, "status": status}
    return rows


PER_RUN = _per_run_table()
ENGINE = _engine_runs_list()


@pytest.fixture(scope="module")
def corpus_ledger(tmp_path_factory):
    db = tmp_path_factory.mktemp("corpus") / "ledger.sqlite"
    engine = open_ledger(str(db))
    report = sync(engine, [Home.from_path(str(CORPUS / "home"), "corpus")])
    return engine, report


def test_the_truth_files_were_parsed():
    assert len(ENGINE) == 25 and len(PER_RUN) == 25


def test_every_corpus_run_indexes_without_a_problem(corpus_ledger):
    engine, report = corpus_ledger
    assert report.problems == []
    assert report.runs_seen == 25
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(schema.problems)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(schema.findings)).scalar() == 0


def test_status_matches_the_engines_runs_list(corpus_ledger):
    engine, _ = corpus_ledger
    ours = {row["run_id"]: row for row in list_runs(engine)}
    assert set(ours) == set(ENGINE)
    for run_id, truth in ENGINE.items():
        assert ours[run_id]["status"] == truth["status"], run_id


def test_graph_node_count_and_tokens_match_the_engine(corpus_ledger):
    engine, _ = corpus_ledger
    ours = {row["run_id"]: row for row in list_runs(engine)}
    for run_id, truth in ENGINE.items():
        row = ours[run_id]
        assert (row["graph"] or "-") == truth["graph"], run_id
        assert (str(row["nodes_total"]) if row["nodes_total"] is not None else "-") == truth["nodes"], run_id
        if truth["tokens"] != "-":
            expected = [int(x) for x in truth["tokens"].split("/")]
            got = [row["input_tokens"], row["cached_input_tokens"], row["output_tokens"],
                   row["reasoning_output_tokens"]]
            assert got == expected, run_id


def test_snapshot_cost_equals_the_engines_state_json_sum(corpus_ledger):
    """The engine's `runs list` cost is state.json's sum (+ planning); ours must agree."""
    engine, _ = corpus_ledger
    with engine.connect() as conn:
        rows = {r.run_id: r for r in conn.execute(select(schema.runs))}
    for run_id, truth in ENGINE.items():
        if truth["cost"] in ("-", "unknown") or rows[run_id].snapshot_cost_nano_usd is None:
            continue
        assert Decimal(rows[run_id].snapshot_cost_nano_usd).scaleb(-9).quantize(Decimal("0.0001")) == \
            Decimal(truth["cost"]), run_id


def _raw_events(run_id: str) -> list[dict]:
    path = CORPUS / "home" / "runs" / run_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("run_id", sorted(PER_RUN))
def test_legs_events_rounds_and_charges_per_run(corpus_ledger, run_id):
    engine, _ = corpus_ledger
    raw = _raw_events(run_id)
    expected = PER_RUN[run_id]
    # Independent counts straight from the file: a charge per line carrying accounting
    # (cost_usd present or cost_unknown true), plus assess.json's assessment; one round
    # per node_started (the real engine starts every execution with one).
    accounting_lines = [e for e in raw if "cost_usd" in e or e.get("cost_unknown") or e.get("usage")]
    assess = CORPUS / "home" / "runs" / run_id / "assess.json"
    expected_charges = len(accounting_lines) + (1 if assess.exists() else 0)
    expected_rounds = sum(1 for e in raw if e["event"] == "node_started")
    with engine.connect() as conn:
        run = conn.execute(select(schema.runs).where(schema.runs.c.run_id == run_id)).one()
        charges = conn.execute(select(func.count()).select_from(schema.charges)
                               .where(schema.charges.c.run_pk == run.id)).scalar()
        rounds = conn.execute(select(func.count()).select_from(schema.rounds)
                              .where(schema.rounds.c.run_pk == run.id)).scalar()
        events = conn.execute(select(func.count()).select_from(schema.events)
                              .where(schema.events.c.run_pk == run.id)).scalar()
    assert run.leg_count == expected["legs"]
    assert run.event_count == events == expected["events"] == len(raw)
    assert charges == expected_charges
    assert rounds == expected_rounds
    # Stream spend (every leg, every round) equals the harness's "events $" column.
    if expected["events_usd"] not in ("—", "-") and "unknown" not in expected["events_usd"]:
        stream_spend = Decimal(0)
        for e in accounting_lines:
            stream_spend += Decimal(repr(e.get("cost_usd", 0)))
        assert stream_spend.quantize(Decimal("0.0001")) == Decimal(expected["events_usd"])
        with engine.connect() as conn:
            ours = conn.execute(select(func.sum(schema.charges.c.cost_nano_usd)).where(
                schema.charges.c.run_pk == run.id, schema.charges.c.source_file == "events.jsonl")).scalar() or 0
        assert Decimal(ours).scaleb(-9) == stream_spend


def test_unknown_cost_is_null_never_zero(corpus_ledger):
    engine, _ = corpus_ledger
    with engine.connect() as conn:
        unknown = conn.execute(select(schema.charges.c.cost_nano_usd).where(schema.charges.c.cost_unknown)).all()
    # s18 (3 codex nodes), s32 (planner + 2 codex nodes), s22/s33 nothing settled:
    # six invocations whose price is unknown, every one stored as NULL.
    assert len(unknown) == 6
    assert all(row.cost_nano_usd is None for row in unknown)


def test_plan_previews_are_recorded_apart_from_runs(corpus_ledger):
    engine, _ = corpus_ledger
    with engine.connect() as conn:
        plans = conn.execute(select(schema.plans)).all()
        run_ids = {r.run_id for r in conn.execute(select(schema.runs.c.run_id))}
    assert [p.plan_id for p in plans] == ["20261129-181522.137935627-1"]
    assert plans[0].has_graph_json and plans[0].plan_id not in run_ids


def test_fragment_artifacts_use_the_tilde_rule(corpus_ledger):
    engine, _ = corpus_ledger
    with engine.connect() as conn:
        run = conn.execute(select(schema.runs.c.id).where(
            schema.runs.c.run_id == "20261129-181518.535010837-1")).scalar_one()
        nodes = {n.node_id: n for n in conn.execute(select(schema.nodes).where(schema.nodes.c.run_pk == run))}
    assert nodes["lane-a/gate/judge"].artifact_name == "lane-a~gate~judge.out"
    assert nodes["lane-a/gate/judge"].has_artifact
    assert nodes["check/probe"].has_artifact
