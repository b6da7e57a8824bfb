"""The money rules end to end: run directories written from the engine's shapes, synced
into real ledgers (SQLite and PostgreSQL), read through the reports."""

from __future__ import annotations

import shutil

from sqlalchemy import select, update

from omg_ledger import derive, schema
from omg_ledger.db import open_ledger, write_transaction
from omg_ledger.reports.audit import audit_report
from omg_ledger.reports.cost import cost_report
from omg_ledger.reports.runs import show_run
from omg_ledger.sync import Home, sync

from .test_cost import NOW, ev, passed, state, t, write_run

N = 10**9
CYCLES = ["20261129-100000.000000001-1", "20261129-101000.000000001-1", "20261129-102000.000000001-1"]
USAGE = {"input_tokens": 900, "cached_input_tokens": 100, "output_tokens": 30, "reasoning_output_tokens": 12}


def _codex_goal_loop(home) -> None:
    """Three cycles of an iterated auto run on Codex: every node and every assessment
    unpriced (the real engine writes assess_cost_usd 0 beside assess_cost_unknown)."""
    for k, run_id in enumerate(CYCLES, 1):
        minute = f"10:{(k - 1) * 10:02d}"
        goal = {"text": "make it green", "cycle": k, "max_cycles": 3, "first_run_id": CYCLES[0]}
        write_run(home, run_id, [
            ev(run_id, t(f"{minute}:00"), "run_started"),
            ev(run_id, t(f"{minute}:01"), "node_started", node_id="impl"),
            passed(run_id, t(f"{minute}:02"), "impl", None, cost_unknown=True, usage=USAGE),
            ev(run_id, t(f"{minute}:03"), "run_finished", outcome="passed"),
        ], state(run_id, "goal", {"impl": {"verdict": "PASS", "cost_unknown": True}}, runtime="codex", goal=goal),
            assess={"goal_met": k == 3, "remaining": "" if k == 3 else "more", "evidence": "e",
                    "assess_cost_usd": 0, "assess_cost_unknown": True, "usage": USAGE})


def test_codex_assessments_are_unknown_cost_with_their_tokens(db_url, tmp_path):
    home = tmp_path / "home"
    _codex_goal_loop(home)
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "h")])
    total = cost_report(engine, tz="UTC", now=NOW)["total"]
    # 3 node calls + 3 assessments, all unpriced; tokens of all six counted; $0 known
    assert (total["cost_nano_usd"], total["invocations"], total["unknown_cost_invocations"]) == (0, 6, 6)
    assert (total["input_tokens"], total["output_tokens"], total["reasoning_output_tokens"]) == (5400, 180, 72)
    by_kind = {row["key"]: row for row in cost_report(engine, by="leg-kind", tz="UTC", now=NOW)["rows"]}
    assert by_kind["assessment"]["unknown_cost_invocations"] == 3 and by_kind["assessment"]["cost_usd"] == 0
    goal = show_run(engine, CYCLES[0])["goal_cycle"]
    assert goal["assess_cost_nano_usd"] is None and goal["assessed"] is True
    assert audit_report(engine, now=NOW)["unknown_cost"]["by_runtime"] == {"codex": 6}


def test_the_derivation_bump_corrects_an_existing_ledger_gone_runs_included(db_url, tmp_path):
    home = tmp_path / "home"
    _codex_goal_loop(home)
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "h")])
    # What version 2 derived: the assessment booked as a known $0 without tokens.
    c, r = schema.charges.c, schema.runs.c
    with write_transaction(engine) as conn:
        conn.execute(update(schema.charges).where(c.kind == "assessment").values(
            cost_nano_usd=0, cost_unknown=False, input_tokens=0, cached_input_tokens=0, output_tokens=0,
            reasoning_output_tokens=0))
        conn.execute(update(schema.runs).values(derivation_version=2))
    assert cost_report(engine, tz="UTC", now=NOW)["total"]["unknown_cost_invocations"] == 3
    shutil.rmtree(home / "runs" / CYCLES[0])  # its directory is gone; its history is not
    sync(engine, [Home.from_path(str(home), "h")])
    with engine.connect() as conn:
        rows = conn.execute(select(r.run_id, r.gone, r.derivation_version).order_by(r.run_id)).all()
        assessments = conn.execute(select(c.cost_nano_usd, c.cost_unknown, c.output_tokens)
                                   .where(c.kind == "assessment")).all()
    assert [(run_id, bool(gone), v) for run_id, gone, v in rows] == [
        (CYCLES[0], True, derive.DERIVATION_VERSION), (CYCLES[1], False, derive.DERIVATION_VERSION),
        (CYCLES[2], False, derive.DERIVATION_VERSION)]
    assert [(cost, bool(unknown), out) for cost, unknown, out in assessments] == [(None, True, 30)] * 3
    assert cost_report(engine, tz="UTC", now=NOW)["total"]["unknown_cost_invocations"] == 6


def test_budget_kill_without_artifact_and_a_feedback_fail_beside_an_earlier_pass(db_url, tmp_path):
    home = tmp_path / "home"
    kill = "20261129-100000.000000001-1"
    write_run(home, kill, [
        ev(kill, t("10:00:00"), "run_started"),
        ev(kill, t("10:00:01"), "node_started", node_id="runaway"),
        ev(kill, t("10:00:09"), "node_failed", node_id="runaway", verdict="FAIL", cost_usd=0.21,
           detail='node "runaway" exceeded budget_usd: $0.2100 actual vs $0.2000 budgeted (over by $0.0100)'),
        ev(kill, t("10:00:10"), "run_finished", outcome="failed"),
    ], {**state(kill, "budget", {"runaway": {"verdict": "FAIL", "cost_usd": 0.21, "budget_usd": 0.2}}),
        "graph": {"name": "budget", "nodes": [{"id": "runaway", "budget_usd": 0.2}]}})  # no runaway.out
    loop = "20261129-110000.000000001-1"
    write_run(home, loop, [
        ev(loop, t("11:00:00"), "run_started"),
        ev(loop, t("11:00:01"), "node_started", node_id="impl"),
        passed(loop, t("11:00:02"), "impl", 0.04),
        ev(loop, t("11:00:03"), "node_started", node_id="review"),
        ev(loop, t("11:00:04"), "node_retried", node_id="review", round=1, cost_usd=0.02),
        ev(loop, t("11:00:05"), "node_started", node_id="impl", round=1),
        ev(loop, t("11:00:06"), "node_failed", node_id="impl", round=1, verdict="FAIL", cost_usd=0.04,
           detail="codex exited 1: stream disconnected before completion"),
        ev(loop, t("11:00:07"), "run_finished", outcome="failed"),
    ], state(loop, "loop", {"impl": {"verdict": "FAIL", "round": 1, "cost_usd": 0.08},
                            "review": {"verdict": "", "round": 1, "cost_usd": 0.02}}),
        files={"impl.out": "round 0's work\n"})
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "h")])
    overruns = audit_report(engine, now=NOW)["budget"]["overruns"]
    assert [(o["run_id"], o["node_id"], o["failed_for_budget"], o["spend_over_budget"]) for o in overruns] == [
        (kill, "runaway", True, True)]  # one entry; impl's FAIL beside round 0's .out is none


def test_runs_csv_limit_and_tz(sqlite_url, tmp_path):
    import csv
    import io
    import json

    from click.testing import CliRunner

    from omg_ledger.cli import main

    home = tmp_path / "home"
    _codex_goal_loop(home)
    sync(open_ledger(sqlite_url), [Home.from_path(str(home), "h")])
    runner = CliRunner()
    as_json = json.loads(runner.invoke(main, ["runs", "--db", sqlite_url, "--json"]).output)
    out = runner.invoke(main, ["runs", "--db", sqlite_url, "--csv", "--limit", "2"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert [r["run_id"] for r in rows] == [CYCLES[2], CYCLES[1]]  # newest first, two of three
    assert set(rows[0]) <= set(as_json[0])  # the --json row's fields
    # every call unpriced: an empty cost cell, never 0; booleans true/false; no TOTAL row
    assert (rows[0]["cost_usd"], rows[0]["cost_nano_usd"], rows[0]["gone"], rows[0]["has_snapshot"]) == (
        "", "", "false", "true")
    text = runner.invoke(main, ["runs", "--db", sqlite_url, "--tz", "Europe/Berlin"]).output
    assert "2026-11-29 11:20:00.000+0100" in text  # 10:20 UTC shown in Berlin
    assert "2026-11-29 10:20:00.000Z" in runner.invoke(main, ["runs", "--db", sqlite_url]).output
    bad = runner.invoke(main, ["runs", "--db", sqlite_url, "--since", "3M"])
    assert bad.exit_code == 2 and "3mo" in bad.output and "Traceback" not in bad.output
