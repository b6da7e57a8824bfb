"""Spend limits (`limits`, `audit --limit`): spend so far in the current period, cut in
--tz; exit 1 and one line per breach first. "Now" is always a fixed instant here (the
library's `now=`, the CLI's OMG_LEDGER_NOW), so no test depends on today's date.

Expected spend is the cost scenario's, by hand (tests/test_cost.py): everything is on
2026-11-29 (a Sunday) except run C's second leg, $0.03 at 2026-11-30T09:00:02Z.
  2026-11-29 UTC: $0.4514 - $0.03 = $0.4214; 2026-11-30 UTC: $0.03; November: $0.4514.
  graph feedback-graph: $0.12 (all 11-29); node feedback-graph/impl: $0.04 + $0.04 = $0.08.
  runtime codex: $0 known, 2 unpriced (run A) = 8_300_000 n$ with the test book.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from omg_ledger import render
from omg_ledger.cli import main
from omg_ledger.errors import BadArgument
from omg_ledger.limits import Limit, limits_from_config, parse_limit, resolve_limits
from omg_ledger.reports.limits import check_limits
from tests import test_cost
from tests.test_cost import ledger, nanos
from tests.test_estimate import BOOK, book

scenario_home = test_cost.scenario_home

SUNDAY_EVENING = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
MONDAY_NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def spent(report: dict) -> dict:
    return {item["limit"]: item["spent_nano_usd"] for item in report["limits"]}


# -- what a limit is ---------------------------------------------------------------------


@pytest.mark.parametrize("spec, limit", [
    ("day=50", Limit("day", 50 * 10**9)),
    ("month=800", Limit("month", 800 * 10**9)),
    ("week=0.5", Limit("week", 5 * 10**8)),
    ("graph:nightly-refactor/day=5", Limit("day", 5 * 10**9, "graph", "nightly-refactor")),
    ("runtime:codex/week=100", Limit("week", 100 * 10**9, "runtime", "codex")),
    ("node:g/lane-a/review/day=1", Limit("day", 10**9, "node", "g/lane-a/review")),
])
def test_parse_limit(spec, limit):
    assert parse_limit(spec) == limit


@pytest.mark.parametrize("spec, message", [
    ("day", "cannot read limit"), ("year=5", "unknown period"), ("day=0", "more than $0"),
    ("day=-3", "more than $0"), ("day=lots", "number of dollars"), ("team:x/day=5", "the scope is"),
    ("graph:/day=5", "the scope is"), ("day=0.0000000001", "more than 9 decimals"),
    ("day=inf", "a finite number of dollars, not inf"), ("day=Infinity", "a finite number of dollars"),
    ("day=-inf", "a finite number of dollars"), ("day=nan", "a finite number of dollars, not nan"),
])
def test_bad_limits_are_clear(spec, message):
    with pytest.raises(BadArgument, match=message.replace("$", r"\$")):
        parse_limit(spec)


@pytest.mark.parametrize("amount", ["1e400", "1e5000", "1e999999", "1e9999999999", "1000000000.000000001", "2e9"])
def test_a_limit_past_any_spend_a_ledger_can_hold_is_a_usage_error(amount):
    # $1e400 used to reach a float conversion (OverflowError) and 1e999999 Decimal's own
    # context (decimal.Overflow): tracebacks, where every other bad amount is one line.
    with pytest.raises(BadArgument, match=rf"at most \$1,000,000,000, not {amount}$"):
        parse_limit(f"week={amount}")
    assert parse_limit("month=1000000000") == Limit("month", 10**18)  # the bound itself is a limit


@pytest.mark.parametrize("amount", ["1e300", "2e9", "1_000_000_001"])
def test_a_huge_limit_in_the_config_file_is_a_usage_error(tmp_path, monkeypatch, amount):
    config = tmp_path / "config.toml"
    config.write_text(f"[limits.runtime.codex]\nweek = {amount}\n")  # TOML floats: 1e400 would be inf
    monkeypatch.setenv("OMG_LEDGER_CONFIG", str(config))
    with pytest.raises(BadArgument, match=r"at most \$1,000,000,000"):
        limits_from_config()


def test_a_huge_limit_on_the_command_line_is_one_line_and_exit_2(sqlite_url, scenario_home):
    ledger(sqlite_url, scenario_home)
    for amount in ("1e400", "1e999999"):
        result = run(["limits", "--db", sqlite_url, "--limit", f"week={amount}"])
        assert result.exit_code == 2, result.output
        assert result.output == f"omg-ledger: error: limit 'week={amount}': a limit is at most $1,000,000,000, " \
                                f"not {amount}\n"


def test_config_file_limits_and_flags_replace_the_same_limit(tmp_path, monkeypatch):
    config = tmp_path / "omg-ledger" / "config.toml"
    config.parent.mkdir()
    config.write_text('[limits]\nday = 50\nmonth = 800\n[limits.graph."nightly-refactor"]\nday = 5\n'
                      '[limits.runtime.codex]\nweek = 100\n[limits.node."g/review"]\nday = 1.5\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert set(limits_from_config()) == {Limit("day", 50 * 10**9), Limit("month", 800 * 10**9),
                                         Limit("day", 5 * 10**9, "graph", "nightly-refactor"),
                                         Limit("week", 100 * 10**9, "runtime", "codex"),
                                         Limit("day", 15 * 10**8, "node", "g/review")}
    merged = resolve_limits(["day=10", "graph:other/day=2"])
    assert Limit("day", 10 * 10**9) in merged and Limit("day", 50 * 10**9) not in merged
    assert Limit("day", 2 * 10**9, "graph", "other") in merged and len(merged) == 6


@pytest.mark.parametrize("text, message", [
    ("[limits]\nyear = 5\n", "unknown key 'year'"),
    ('[limits.graph."x"]\nfortnight = 5\n', "unknown period 'fortnight'"),
    ("[limits]\nday = -1\n", "more than $0"),
    ("[limits]\nday = inf\n", "a finite number of dollars, not inf"),
    ('[limits.graph."x"]\nweek = nan\n', "a finite number of dollars, not nan"),
    ("[limits\n", "not valid TOML"),
])
def test_bad_config_files(tmp_path, monkeypatch, text, message):
    path = tmp_path / "config.toml"
    path.write_text(text)
    monkeypatch.setenv("OMG_LEDGER_CONFIG", str(path))
    with pytest.raises(BadArgument, match=message.replace("$", r"\$")):
        limits_from_config()


def test_no_config_file_means_no_limits(tmp_path, monkeypatch):
    assert limits_from_config() == []
    monkeypatch.setenv("OMG_LEDGER_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(BadArgument, match="does not exist"):  # named explicitly: a typo must not pass silently
        limits_from_config()


# -- spend so far ------------------------------------------------------------------------------


def test_spend_so_far_per_period_and_scope(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    limits = [parse_limit(s) for s in ("day=100", "week=100", "month=100", "graph:feedback-graph/day=100",
                                       "node:feedback-graph/impl/day=100", "runtime:codex/day=100")]
    sunday = check_limits(engine, limits, tz="UTC", now=SUNDAY_EVENING)
    assert spent(sunday) == {"day": nanos("0.4214"), "week": nanos("0.4214"), "month": nanos("0.4514"),
                             "graph:feedback-graph/day": nanos("0.12"), "node:feedback-graph/impl/day": nanos("0.08"),
                             "runtime:codex/day": 0}
    codex = next(i for i in sunday["limits"] if i["limit"] == "runtime:codex/day")
    assert codex["unpriced_invocations"] == 2 and "estimated_nano_usd" not in codex
    day = sunday["limits"][0]
    assert (day["period_start"], day["period_end"]) == ("2026-11-29T00:00:00+00:00", "2026-11-30T00:00:00+00:00")
    monday = check_limits(engine, limits, tz="UTC", now=MONDAY_NOON)  # a new day and a new week (Monday)
    assert spent(monday)["day"] == nanos("0.03") and spent(monday)["week"] == nanos("0.03")
    assert spent(monday)["month"] == nanos("0.4514") and not monday["breaches"]


def test_a_limit_on_runs_with_no_graph_counts_their_spend(db_url, scenario_home):
    # E refused its plan before a graph existed: $0.0912 on Sunday, keyed "(no graph)" by
    # `cost --by graph` (and `--graph "(no graph)"`), so by its limit too.
    engine = ledger(db_url, scenario_home)
    report = check_limits(engine, [parse_limit("graph:(no graph)/day=0.05")], tz="UTC", now=SUNDAY_EVENING)
    assert spent(report) == {"graph:(no graph)/day": nanos("0.0912")}
    assert [item["exceeded"] for item in report["limits"]] == [True] and len(report["breaches"]) == 1


def test_a_limit_naming_nothing_ever_charged_says_so(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    limits = [parse_limit(s) for s in ("graph:feedback-grahp/day=1", "graph:feedback-graph/day=1",
                                       "node:feedback-graph/impl/day=1", "node:feedback-graph/nope/day=1",
                                       "runtime:codex/day=1", "runtime:gemini/day=1", "day=1")]
    # Monday: none of these graphs, nodes or runtimes was charged today; all were before, but the typos.
    report = check_limits(engine, limits, tz="UTC", now=MONDAY_NOON)
    assert {i["limit"]: i["names_nothing_charged"] for i in report["limits"]} == {
        "graph:feedback-grahp/day": True, "graph:feedback-graph/day": False, "node:feedback-graph/impl/day": False,
        "node:feedback-graph/nope/day": True, "runtime:codex/day": False, "runtime:gemini/day": True, "day": False}
    text = render.limits_text(report)
    assert "limit graph:feedback-grahp/day: no graph 'feedback-grahp' was ever charged in this ledger" in text
    assert "feedback-graph/day: no" not in text


def test_periods_that_start_together_each_count_their_own_spend(db_url, scenario_home):
    # On 2026-11-01 the day and the month begin at the same instant, but the day ends on
    # 11-02 and the month on 12-01: the month holds all the scenario's November spend
    # ($0.4514), the day none of it. Each limit gets its own period's figure, whichever
    # is asked first.
    engine = ledger(db_url, scenario_home)
    first_of_month = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    for specs in (("day=100", "month=100"), ("month=100", "day=100")):
        report = check_limits(engine, [parse_limit(s) for s in specs], tz="UTC", now=first_of_month)
        assert spent(report) == {"day": 0, "month": nanos("0.4514")}, specs
    result = CliRunner().invoke(main, ["limits", "--db", db_url, "--limit", "day=100", "--limit", "month=0.40",
                                       "--tz", "UTC", "--json"], env={"OMG_LEDGER_NOW": "2026-11-01T12:00:00Z"})
    assert result.exit_code == 1, result.output
    assert [(i["limit"], i["spent_nano_usd"], i["exceeded"]) for i in json.loads(result.output)["limits"]] == [
        ("day", 0, False), ("month", nanos("0.4514"), True)]


def test_periods_are_cut_in_the_zone(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    late = datetime(2026, 11, 29, 23, 30, tzinfo=UTC)  # Sunday 23:30 UTC = Monday 00:30 in Berlin
    assert spent(check_limits(engine, [parse_limit("day=1")], tz="UTC", now=late))["day"] == nanos("0.4214")
    berlin = check_limits(engine, [parse_limit("day=1")], tz="Europe/Berlin", now=late)
    assert spent(berlin)["day"] == nanos("0.03")  # Monday in Berlin began at 23:00 UTC: only C's second leg
    assert berlin["limits"][0]["period_start"] == "2026-11-30T00:00:00+01:00"


def test_exceeded_is_above_the_limit_known_then_with_estimate(db_url, scenario_home):
    engine = ledger(db_url, scenario_home)
    at_limit = check_limits(engine, [parse_limit("day=0.4214")], tz="UTC", now=SUNDAY_EVENING)
    assert not at_limit["exceeded"] and at_limit["breaches"] == []  # equal is not over
    over = check_limits(engine, [parse_limit("day=0.4213"), parse_limit("month=1")], tz="UTC", now=SUNDAY_EVENING)
    assert over["exceeded"] and [i["breach"] for i in over["limits"]] == [True, False]
    assert over["breaches"] == ["LIMIT EXCEEDED: day: $0.4214 known spend of $0.4213 (day from 2026-11-29 in UTC); "
                                "2 unpriced invocation(s) not in the known spend"]
    codex = [parse_limit("runtime:codex/day=0.008")]
    assert not check_limits(engine, codex, tz="UTC", now=SUNDAY_EVENING)["exceeded"]  # $0 known
    estimated = check_limits(engine, codex, tz="UTC", now=SUNDAY_EVENING, prices=book())
    item = estimated["limits"][0]
    assert (item["exceeded"], item["exceeded_with_estimate"], item["estimated_nano_usd"]) == (False, True, 8_300_000)
    assert estimated["breaches"] == ["LIMIT EXCEEDED: runtime:codex/day: $0.0000 known + ~$0.0083 estimated of "
                                     "$0.0080 (day from 2026-11-29 in UTC); 2 unpriced invocation(s) not in the "
                                     "known spend"]


def test_a_limit_exceeded_by_less_than_a_hundredth_of_a_cent_never_reads_level_with_it(db_url, scenario_home,
                                                                                        tmp_path):
    # Sunday's $0.4214 is over a limit of $0.42139999 by one nano-dollar: at four decimals
    # both read $0.4214, a breach that looks like spend equal to its limit (which is not
    # over it). The figures of an exceeded limit get the decimals that show them apart.
    engine = ledger(db_url, scenario_home)
    over = check_limits(engine, [parse_limit("day=0.42139999"), parse_limit("month=800")], tz="UTC",
                        now=SUNDAY_EVENING)
    assert over["breaches"] == ["LIMIT EXCEEDED: day: $0.42140000 known spend of $0.42139999 (day from 2026-11-29 "
                                "in UTC); 2 unpriced invocation(s) not in the known spend"]
    rows = render.limits_table(over).splitlines()[3:5]
    assert rows[0].split()[3:] == ["$0.42140000", "2", "$0.42139999", "EXCEEDED"]
    assert rows[1].split()[3:] == ["$0.4514", "2", "$800.0000", "ok"]  # one not exceeded keeps four
    # Known $0 + ~$0.0083 estimated against $0.00829999: over by a nano-dollar too.
    estimated = check_limits(engine, [parse_limit("runtime:codex/day=0.00829999")], tz="UTC", now=SUNDAY_EVENING,
                             prices=book())
    assert estimated["breaches"] == ["LIMIT EXCEEDED: runtime:codex/day: $0.00000000 known + ~$0.00830000 "
                                     "estimated of $0.00829999 (day from 2026-11-29 in UTC); 2 unpriced "
                                     "invocation(s) not in the known spend"]
    assert render.limits_table(estimated).splitlines()[3].split()[3:] == [
        "$0.00000000", "2", "~$0.00830000", "$0.00829999", "EXCEEDED", "with", "estimate"]
    page = tmp_path / "report.html"
    run(["report", "--db", db_url, "--html", str(page), "--tz", "UTC", "--limit", "day=0.42139999"])
    row = page.read_text(encoding="utf-8").split('<tr data-limit="day">')[1].split("</tr>")[0]
    assert ">$0.42140000<" in row and ">$0.42139999<" in row


# -- the command line: OMG_LEDGER_NOW fixes the instant ----------------------------------------


def run(args, **env):
    return CliRunner().invoke(main, args, env={"OMG_LEDGER_NOW": "2026-11-29T20:00:00Z", **env})


def test_cli_limits_exit_codes_and_breach_lines_first(sqlite_url, scenario_home):
    ledger(sqlite_url, scenario_home)
    ok = run(["limits", "--db", sqlite_url, "--tz", "UTC", "--limit", "day=1", "--limit", "month=800"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("spend limits at 2026-11-29 20:00:00.000+0000 (periods in UTC)")
    over = run(["limits", "--db", sqlite_url, "--tz", "UTC", "--limit", "month=800",
                "--limit", "graph:feedback-graph/day=0.1"])
    assert over.exit_code == 1
    assert over.output.splitlines()[0] == ("LIMIT EXCEEDED: graph:feedback-graph/day: $0.1200 known spend of "
                                           "$0.1000 (day from 2026-11-29 in UTC)")
    doc = json.loads(run(["limits", "--db", sqlite_url, "--tz", "UTC", "--json", "--limit", "day=0.4"]).output)
    assert doc["exceeded"] is True and doc["at"] == "2026-11-29T20:00:00+00:00"
    assert doc["limits"][0] == {**doc["limits"][0], "limit": "day", "spent_nano_usd": nanos("0.4214"),
                                "limit_nano_usd": nanos("0.4"), "exceeded": True, "breach": True}


def test_cli_limits_from_config_and_none_is_a_usage_error(sqlite_url, scenario_home, tmp_path):
    ledger(sqlite_url, scenario_home)
    none = run(["limits", "--db", sqlite_url])
    assert none.exit_code == 2 and "no spend limits" in none.output
    config = tmp_path / "config.toml"
    config.write_text('[limits.node."feedback-graph/impl"]\nday = 0.05\n')
    result = run(["limits", "--db", sqlite_url, "--tz", "UTC"], OMG_LEDGER_CONFIG=str(config))
    assert result.exit_code == 1 and result.output.startswith("LIMIT EXCEEDED: node:feedback-graph/impl/day: $0.0800")
    bad_now = run(["limits", "--db", sqlite_url, "--limit", "day=1"], OMG_LEDGER_NOW="tomorrow")
    assert bad_now.exit_code == 2 and "OMG_LEDGER_NOW" in bad_now.output


def test_cli_audit_with_limits(sqlite_url, scenario_home, tmp_path):
    ledger(sqlite_url, scenario_home)
    plain = json.loads(run(["audit", "--db", sqlite_url, "--json"]).output)
    assert "limits" not in plain  # no limit set anywhere: audit is as before
    result = run(["audit", "--db", sqlite_url, "--tz", "UTC", "--limit", "day=0.3", "--limit", "month=10"])
    lines = result.output.splitlines()
    assert result.exit_code == 1
    # the verdict line first, then each breach, then the report
    assert lines[0].startswith("NEEDS ATTENTION: 1 spend limit(s) exceeded")
    assert lines[1] == ("LIMIT EXCEEDED: day: $0.4214 known spend of $0.3000 (day from 2026-11-29 in UTC); "
                        "2 unpriced invocation(s) not in the known spend")
    assert lines[2].startswith("audit ") and "SPEND LIMITS" in result.output
    prices = tmp_path / "prices.toml"
    prices.write_text(BOOK)
    doc = json.loads(run(["audit", "--db", sqlite_url, "--tz", "UTC", "--json", "--estimate", "--prices", str(prices),
                          "--limit", "runtime:codex/day=0.008"]).output)
    assert doc["limits"]["breaches"][0].startswith("LIMIT EXCEEDED: runtime:codex/day: $0.0000 known + ~$0.0083")
    assert doc["unknown_cost"]["estimate"]["estimated_nano_usd"] == 8_300_000
    assert doc["attention"][0] == "1 spend limit(s) exceeded" and doc["needs_attention"] is True


def test_spend_no_period_holds_is_said_beside_the_limits(db_url, tmp_path):
    # test_cost's undated case: assess.json's $0.50 in a run with no stream has no time,
    # so no day's limit counts it; the report says so instead of leaving it out unsaid.
    home = tmp_path / "home"
    run = "20261129-090000.000000001-1"
    test_cost.write_run(home, run, None, test_cost.state(run, "g", {}), assess={"goal_met": True, "assess_cost_usd": 0.5})
    test_cost.one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25)
    engine = ledger(db_url, home)
    report = check_limits(engine, [parse_limit("day=1")], tz="UTC", now=SUNDAY_EVENING)
    assert spent(report) == {"day": nanos("0.25")}
    outside = report["undated_outside_periods"]
    assert (outside["cost_nano_usd"], outside["invocations"]) == (nanos("0.5"), 1)
    result = CliRunner().invoke(main, ["limits", "--db", db_url, "--limit", "day=1", "--tz", "UTC"],
                                env={"OMG_LEDGER_NOW": "2026-11-29T20:00:00Z"})
    assert result.exit_code == 0, result.output
    assert "not in any period, so in no limit: $0.5000 in 1 undated charge " in result.output


# -- node limits when graph names and node ids hold "/" ----------------------------------------
# Graph names are free text from state.json; node ids may hold "/" too (a spliced fragment's
# "top/core"). Graph "team/nightly" node "review" and graph "team" node "nightly/review" are
# both keyed "team/nightly/review" by `cost --by node`.

SLASHED = (("20261129-090000.000000001-1", "team/nightly", "review", 0.1),
           ("20261129-100000.000000001-1", "team", "nightly/review", 0.2),
           ("20261129-110000.000000001-1", "team/nightly", "lint", 0.05),
           ("20261129-120000.000000001-1", 'say "hi"', "n", 0.01))


@pytest.fixture
def slashed_home(tmp_path):
    home = tmp_path / "slashed-home"
    for run_id, graph, node, cost in SLASHED:
        at = "2026-11-29T" + run_id[9:11] + ":00:00.000000Z"
        test_cost.write_run(home, run_id, [
            test_cost.ev(run_id, at, "run_started"), test_cost.ev(run_id, at, "node_started", node_id=node),
            test_cost.passed(run_id, at, node, cost, provenance="exit-only"),
            test_cost.ev(run_id, at, "run_finished", outcome="passed")],
            test_cost.state(run_id, graph, {node: {"verdict": "PASS", "cost_usd": cost}}))
    return home


def test_a_node_limit_names_one_node_when_names_hold_slashes(db_url, slashed_home):
    engine = ledger(db_url, slashed_home)
    specs = ["node:team/nightly/lint/day=1",  # one node has this key: its graph's "/" needs no quoting
             'node:"team/nightly"/review/day=0.15', 'node:"team"/nightly/review/day=0.15',
             'node:"say ""hi"""/n/day=1', 'node:"team"/review/day=1']
    report = check_limits(engine, [parse_limit(s) for s in specs], tz="UTC", now=SUNDAY_EVENING)
    assert spent(report) == {"node:team/nightly/lint/day": nanos("0.05"),
                             'node:"team/nightly"/review/day': nanos("0.1"),
                             'node:"team"/nightly/review/day': nanos("0.2"),
                             'node:"say ""hi"""/n/day': nanos("0.01"), 'node:"team"/review/day': 0}
    assert [i["exceeded"] for i in report["limits"]] == [False, False, True, False, False]
    assert [i["names_nothing_charged"] for i in report["limits"]] == [False, False, False, False, True]


def test_a_node_limit_whose_key_names_two_nodes_is_refused(db_url, slashed_home):
    engine = ledger(db_url, slashed_home)
    with pytest.raises(BadArgument) as refused:
        check_limits(engine, [parse_limit("node:team/nightly/review/day=0.15")], tz="UTC", now=SUNDAY_EVENING)
    assert str(refused.value) == (
        "limit node:team/nightly/review/day: team/nightly/review names 2 nodes (graph 'team' node "
        "'nightly/review', graph 'team/nightly' node 'review'): quote the graph to say which, "
        'node:"team"/nightly/review or node:"team/nightly"/review')


@pytest.mark.parametrize("spec", ['node:"team/day=1', 'node:"team"review/day=1', 'node:"team"/day=1',
                                  'node:"say "hi""/n/day=1'])
def test_a_badly_quoted_graph_is_clear(spec):
    with pytest.raises(BadArgument, match=r'node:"GRAPH"/NODE'):
        parse_limit(spec)


def test_cli_node_limits_with_slashes_in_the_config_file(sqlite_url, slashed_home, tmp_path):
    ledger(sqlite_url, slashed_home)
    config = tmp_path / "config.toml"
    config.write_text("[limits.node.'\"team/nightly\"/review']\nday = 0.05\n")
    result = run(["limits", "--db", sqlite_url, "--tz", "UTC"], OMG_LEDGER_CONFIG=str(config))
    assert result.exit_code == 1
    assert result.output.startswith('LIMIT EXCEEDED: node:"team/nightly"/review/day: $0.1000 known spend of $0.0500')
    config.write_text('[limits.node."team/nightly/review"]\nday = 0.05\n')
    ambiguous = run(["limits", "--db", sqlite_url, "--tz", "UTC"], OMG_LEDGER_CONFIG=str(config))
    assert ambiguous.exit_code == 2 and "team/nightly/review names 2 nodes" in ambiguous.output
    bad = run(["limits", "--db", sqlite_url, "--limit", 'node:"team/nightly/day=1'])
    assert bad.exit_code == 2 and 'node:"GRAPH"/NODE' in bad.output
