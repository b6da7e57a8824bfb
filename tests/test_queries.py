"""Saved queries (queries/*.sql) and the notebook views (migration 0002), on SQLite
and PostgreSQL, against a ledger built from the corpus."""

from __future__ import annotations

import json
import math

import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import inspect, text

from omg_ledger.cli import main
from omg_ledger.db import alembic_config, write_transaction
from omg_ledger.errors import BadArgument
from omg_ledger.reports.sql import UnknownQuery, placeholders, run_saved, saved_queries
from omg_ledger.views import VIEWS_0002

from .test_cost import ledger

REQUIRED = {"spend_by_day", "spend_by_graph", "most_expensive_nodes", "retry_waste", "abandoned_runs",
            "unverified_passes", "unknown_cost_work"}
# Values for parameters a saved query declares without a default (other engineers' queries).
FILL = {"since_us": "0"}
S09, S15, S22, S33 = ("20261129-181514.879117232-1", "20261129-181518.678721711-1", "20261129-181520.321225011-1",
                      "20261129-181522.722804151-1")
S38, S12 = "20261129-181524.510998091-1", "20261129-181518.131561744-1"


@pytest.fixture
def corpus_ledger(db_url, corpus_home):
    return ledger(db_url, corpus_home, "corpus")


def state_json_pass_provenance(home) -> dict:
    """Counted straight from the corpus files: PASS records in every state.json, by
    provenance (the corpus drops no terminal event, so the snapshot's latest records
    are the stream's latest verdicts)."""
    counts: dict = {}
    for path in sorted(home.glob("runs/*/state.json")):
        for record in (json.loads(path.read_text()).get("nodes") or {}).values():
            if record.get("verdict") == "PASS":
                counts[record.get("provenance")] = counts.get(record.get("provenance"), 0) + 1
    return counts


def _rows(result) -> list[dict]:
    return result.as_dict()["rows"]


def test_saved_queries_exist_and_are_documented():
    queries = {q.name: q for q in saved_queries()}
    assert set(queries) >= REQUIRED
    for name in REQUIRED:
        q = queries[name]
        assert q.summary.startswith(f"{name}: "), name
        assert any("Portable" in line for line in q.header), name
        declared = {p.name: p for p in q.params}
        for used in placeholders(q.sql):
            assert declared[used].description, f"{name}: :{used} is not described in the header"


def test_every_saved_query_runs(corpus_ledger):
    for query in saved_queries():
        given = {p.name: FILL[p.name] for p in query.params if p.default is None}
        result = run_saved(corpus_ledger, query.name, given)
        assert result.columns, query.name


def test_spend_by_day_and_graph(corpus_ledger):
    [day] = _rows(run_saved(corpus_ledger, "spend_by_day"))
    # every corpus event is on 2026-11-29 (UTC); 1.7167 by hand in test_cost
    assert (day["day"], int(day["cost_nano_usd"]), day["unpriced_invocations"]) == ("2026-11-29", 1_716_700_000, 6)
    assert math.isclose(day["cost_usd"], 1.7167)
    assert _rows(run_saved(corpus_ledger, "spend_by_day", {"since": "2026-11-30"})) == []
    graphs = {r["graph"]: r for r in _rows(run_saved(corpus_ledger, "spend_by_graph"))}
    assert int(graphs["s09-budget-cli-kill"]["cost_nano_usd"]) == 210_000_000
    assert int(graphs["(no graph)"]["cost_nano_usd"]) == 91_200_000  # s25's refused plan; s33 spent nothing
    assert graphs["auto-readme-touchup"]["runs"] == 2  # s24 and s27


def test_most_expensive_nodes(corpus_ledger):
    rows = _rows(run_saved(corpus_ledger, "most_expensive_nodes", {"limit": "3"}))
    assert len(rows) == 3
    # s09 runaway 0.21; then s12's impl: three rounds at 0.04 = 0.12 (per-run.md)
    assert [(r["run_id"], r["node"], int(r["cost_nano_usd"])) for r in rows[:2]] == [
        (S09, "runaway", 210_000_000), (S12, "impl", 120_000_000)]


def test_retry_waste(corpus_ledger):
    rows = {(r["run_id"], r["node"]): r for r in _rows(run_saved(corpus_ledger, "retry_waste"))}
    # s15: compile failed in leg 1 at $0.028 (then passed in leg 2)
    assert int(rows[(S15, "compile")]["failed_cost_nano_usd"]) == 28_000_000
    # s38: the failed attempt's 0.006 is recorded, the retried one's is not (corpus README #1)
    assert int(rows[(S38, "crashy")]["failed_cost_nano_usd"]) == 6_000_000
    assert rows[(S38, "crashy")]["unrecorded_attempts"] == 1
    # s12: review's two feedback judgments at 0.022 are shown apart, not as waste
    assert math.isclose(rows[(S12, "review")]["feedback_usd"], 0.044)
    assert int(rows[(S12, "review")]["failed_cost_nano_usd"]) == 0


def test_abandoned_unverified_unknown(corpus_ledger, corpus_home):
    assert {r["run_id"] for r in _rows(run_saved(corpus_ledger, "abandoned_runs"))} == {S22, S33}
    unverified = _rows(run_saved(corpus_ledger, "unverified_passes"))
    assert {r["provenance"] for r in unverified} == {"self-reported", "exit-only"}
    assert len(unverified) == sum(v for k, v in state_json_pass_provenance(corpus_home).items()
                                  if k in ("self-reported", "exit-only", None))
    unknown = _rows(run_saved(corpus_ledger, "unknown_cost_work"))
    assert sum(r["unpriced_invocations"] for r in unknown) == 6
    s18 = next(r for r in unknown if r["graph"] == "s18-codex")
    assert (s18["input_tokens"], s18["output_tokens"]) == (14900, 2230)  # per-run.md, s18


def test_query_errors(corpus_ledger):
    with pytest.raises(UnknownQuery, match="spend_by_day"):
        run_saved(corpus_ledger, "no_such_query")
    with pytest.raises(BadArgument, match="no parameter"):
        run_saved(corpus_ledger, "spend_by_day", {"sinse": "2026-11-01"})


def test_cli_list_and_run(sqlite_url, corpus_home):
    ledger(sqlite_url, corpus_home, "corpus")
    runner = CliRunner()
    listing = runner.invoke(main, ["query", "--list"])
    assert listing.exit_code == 0
    lines = listing.output.splitlines()
    for name in REQUIRED:
        assert sum(line.startswith(f"{name} ") for line in lines) == 1, name
    assert "CAUTION: status is live" in runner.invoke(main, ["query", "abandoned_runs", "--help"]).output
    result = runner.invoke(main, ["query", "--db", sqlite_url, "--json", "most_expensive_nodes", "--param", "limit=1"])
    assert result.exit_code == 0, result.output
    assert [r["node"] for r in json.loads(result.output)["rows"]] == ["runaway"]
    bad = runner.invoke(main, ["query", "--db", sqlite_url, "spend_by_day", "--param", "oops"])
    assert bad.exit_code == 2 and "NAME=VALUE" in bad.output
    typo = runner.invoke(main, ["query", "--db", sqlite_url, "most_expensive_nodes", "--param", "limit=abc"])
    assert typo.exit_code == 2 and "--param limit must be a whole number from 0 to 2147483647" in typo.output
    assert "Traceback" not in typo.output
    # The bounds of SQL's INTEGER on both backends, and no empty number (an unset variable):
    # the same answer from SQLite and PostgreSQL, never a silent 0 rows on one.
    for value in ("", "2147483648", "999999999999999999"):
        out = runner.invoke(main, ["query", "--db", sqlite_url, "most_expensive_nodes", "--param", f"limit={value}"])
        assert out.exit_code == 2 and "from 0 to 2147483647" in out.output, (value, out.output)
    widest = runner.invoke(main, ["query", "--db", sqlite_url, "--json", "most_expensive_nodes", "--param",
                                  "limit=2147483647"])
    assert widest.exit_code == 0, widest.output
    unit = runner.invoke(main, ["query", "--db", sqlite_url, "spend_by_day", "--param", "since=3M"])
    assert unit.exit_code == 2 and "3mo" in unit.output and "3m" in unit.output


def test_query_times_compare_as_instants(corpus_ledger):
    # Every corpus charge is 2026-11-29 18:15:1x UTC. 20:00+02:00 is 18:00 UTC: before them
    # all (as text, "…T20:00…" would sort after them and drop the day).
    [day] = _rows(run_saved(corpus_ledger, "spend_by_day", {"since": "2026-11-29T20:00:00+02:00"}))
    assert int(day["cost_nano_usd"]) == 1_716_700_000
    assert _rows(run_saved(corpus_ledger, "spend_by_day", {"since": "2026-11-29T18:30:00Z"})) == []
    assert _rows(run_saved(corpus_ledger, "spend_by_day", {"until": "2026-11-29T13:00:00-05:00"})) == []


# -- views ------------------------------------------------------------------------------


def test_views_give_correct_money(corpus_ledger):
    with corpus_ledger.connect() as conn:
        nanos, usd, n, unpriced = conn.execute(text(
            "SELECT SUM(cost_nano_usd), SUM(cost_usd), COUNT(*), COUNT(*) - COUNT(cost_nano_usd) FROM v_charges"
        )).one()
        assert (int(nanos), n, unpriced) == (1_716_700_000, 71, 6)
        assert math.isclose(usd, 1.7167, rel_tol=1e-12)
        runs = conn.execute(text("SELECT SUM(cost_nano_usd), SUM(unknown_cost_invocations) FROM v_runs")).one()
        assert (int(runs[0]), int(runs[1])) == (1_716_700_000, 6)
        s22 = conn.execute(text("SELECT ledger_state FROM v_runs WHERE run_id = :r"), {"r": S22}).scalar()
        assert s22 == "OPEN"
        nodes = conn.execute(text("SELECT SUM(cost_nano_usd) FROM v_nodes")).scalar()
        # node spend excludes run-level charges: planning 0.0456 (s24) + 0.0912 (s27) +
        # 0.0456 + 0.0456 (s30 cycles) + 0.0456 × 2 (s35, s36), refused 0.0912 (s25),
        # assessments 0.0156 — per-run.md and corpus README #10
        run_level = 456 + 912 + 456 + 456 + 456 + 456 + 912 + 156
        assert int(nodes) == 1_716_700_000 - run_level * 100_000
        columns = {c["name"] for c in inspect(conn).get_columns("v_charges")}
        assert {"home", "run_id", "graph", "runtime", "node", "kind", "at", "cost_usd", "cost_nano_usd"} <= columns


def test_views_drop_in_downgrade_and_come_back(db_url):
    from omg_ledger.db import open_ledger

    engine = open_ledger(db_url)
    with engine.connect() as conn:
        assert set(VIEWS_0002) <= set(inspect(conn).get_view_names())
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0001")
    with engine.connect() as conn:
        assert not set(VIEWS_0002) & set(inspect(conn).get_view_names())
    with write_transaction(engine) as conn:
        command.upgrade(alembic_config(conn), "head")
    with engine.connect() as conn:
        assert set(VIEWS_0002) <= set(inspect(conn).get_view_names())


def test_graphs_with_no_known_spend_are_listed_last_on_both_backends(corpus_ledger):
    """ORDER BY a spend that is NULL (every invocation unpriced): PostgreSQL sorts NULL
    first in DESC order, SQLite last; the query says where unknown spend goes."""
    rows = _rows(run_saved(corpus_ledger, "spend_by_graph"))
    # The corpus's two Codex graphs: every charge cost_unknown (corpus README), by name.
    assert [(r["graph"], r["cost_nano_usd"]) for r in rows[-2:]] == [("auto-codex", None), ("s18-codex", None)]
    assert all(r["cost_nano_usd"] is not None for r in rows[:-2])



def test_retry_waste_counts_a_failure_of_unknown_price_never_as_a_known_zero(db_url, tmp_path):
    """A Codex node that failed was paid for at a price nobody recorded: its execution
    costs NULL (unknown), not $0, and retry_waste lists it with the unpriced count that
    makes its $0 of failed cost a lower bound; a PASS is no waste."""
    from .test_cost import ev, state, t, write_run

    run = "20261129-120000.000000001-1"
    home = tmp_path / "home"
    write_run(home, run, [
        ev(run, t("12:00:00"), "run_started"),
        ev(run, t("12:00:01"), "node_started", node_id="build"),
        ev(run, t("12:00:02"), "node_passed", node_id="build", verdict="PASS", cost_unknown=True,
           provenance="exit-only"),
        ev(run, t("12:00:03"), "node_started", node_id="lint"),
        ev(run, t("12:00:04"), "node_failed", node_id="lint", verdict="FAIL", cost_unknown=True, detail="exit 1"),
        ev(run, t("12:00:05"), "run_finished", outcome="failed"),
    ], state(run, "g", {"build": {"verdict": "PASS", "cost_unknown": True},
                        "lint": {"verdict": "FAIL", "cost_unknown": True}}, runtime="codex"))
    engine = ledger(db_url, home)
    try:
        with engine.connect() as conn:
            executions = {node: (cost, bool(unknown)) for node, cost, unknown in conn.execute(text(
                "SELECT node, cost_nano_usd, cost_unknown FROM v_node_rounds"))}
        assert executions == {"build": (None, True), "lint": (None, True)}
        rows = _rows(run_saved(engine, "retry_waste"))
        assert [(r["node"], r["failed_executions"], int(r["failed_cost_nano_usd"]), r["unpriced_invocations"])
                for r in rows] == [("lint", 1, 0, 1)]
    finally:
        engine.dispose()
