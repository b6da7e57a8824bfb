"""`--graph NAME` on `cost` and `runs`: only the runs of those graphs. Expectations are the
hand-computed per-run sums of tests/test_cost.py's scenario (its PER_RUN table), on SQLite
and on a real PostgreSQL."""

from __future__ import annotations

import json

from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.prices import load_book
from omg_ledger.reports.cost import cost_report
from omg_ledger.reports.runs import list_runs

from .test_cost import NOW, PER_RUN, B, C, E, ledger, nanos
from .test_cost import A as CODEX_RUN
from .test_cost import scenario_home as scenario_home  # a fixture, shared


def test_cost_of_two_graphs_is_their_runs_spend(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    report = cost_report(engine, graphs=("feedback-graph", "retry-graph"), tz="UTC", now=NOW)
    # B (feedback-graph) 0.12 in 4 invocations, C (retry-graph) 0.06 in 2.
    assert (report["total"]["cost_nano_usd"], report["total"]["invocations"]) == (nanos("0.18"), 6)
    assert report["graphs"] == ["feedback-graph", "retry-graph"]
    by_day = {r["key"]: r["cost_nano_usd"] for r in cost_report(
        engine, by="day", graphs=("retry-graph",), tz="UTC", now=NOW)["rows"]}
    assert by_day == {"2026-11-29": nanos("0.03"), "2026-11-30": nanos("0.03")}  # C's two legs, a day apart
    by_run = cost_report(engine, by="run", graphs=("feedback-graph",), tz="UTC", now=NOW)["rows"]
    assert [(r["key"], r["cost_nano_usd"]) for r in by_run] == [(B, nanos(PER_RUN[B][0]))]


def test_no_graph_selects_the_plan_refused_before_a_graph_existed(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    report = cost_report(engine, by="run", graphs=("(no graph)",), tz="UTC", now=NOW)
    assert [(r["key"], r["cost_nano_usd"]) for r in report["rows"]] == [(E, nanos("0.0912"))]
    assert [r["run_id"] for r in list_runs(engine, graphs=("(no graph)",))] == [E]
    both = list_runs(engine, graphs=("(no graph)", "feedback-graph"))
    assert sorted(r["run_id"] for r in both) == sorted([B, E])


def test_runs_of_a_graph(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    rows = list_runs(engine, graphs=("retry-graph",))
    assert [(r["run_id"], r["graph"]) for r in rows] == [(C, "retry-graph")]


def test_estimate_keeps_to_the_graph(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    book = load_book()
    codex = cost_report(engine, graphs=("codex-graph",), tz="UTC", now=NOW, prices=book)["total"]
    other = cost_report(engine, graphs=("feedback-graph",), tz="UTC", now=NOW, prices=book)["total"]
    # A's two Codex invocations are the scenario's only unpriced work, both with tokens.
    assert (codex["unknown_cost_invocations"], codex["estimated_invocations"]) == (2, 2)
    assert codex["estimated_nano_usd"] > 0
    assert (other["unknown_cost_invocations"], other["estimated_invocations"], other["estimated_nano_usd"]) == (0, 0, 0)
    assert [r["run_id"] for r in list_runs(engine, graphs=("codex-graph",))] == [CODEX_RUN]


def test_cli_graph_filter_and_a_name_no_run_has(sqlite_url, scenario_home):
    ledger(sqlite_url, scenario_home)
    runner = CliRunner()
    result = runner.invoke(main, ["cost", "--db", sqlite_url, "--graph", "retry-graph", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["total"]["cost_nano_usd"] == nanos("0.06")
    listed = runner.invoke(main, ["runs", "--db", sqlite_url, "--graph", "retry-graph", "--json"])
    assert [r["run_id"] for r in json.loads(listed.output)] == [C]
    # A typo is not an empty answer: exit 2, naming the graph it was probably meant to be.
    for command in ("cost", "runs"):
        typo = runner.invoke(main, [command, "--db", sqlite_url, "--graph", "retry-grahp"])
        assert typo.exit_code == 2, typo.output
        assert "--graph 'retry-grahp' is no graph of this ledger's runs" in typo.output
        assert "'retry-graph'" in typo.output and "Traceback" not in typo.output
