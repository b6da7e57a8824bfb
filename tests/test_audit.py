"""`omg-ledger audit`: expectations from corpus/per-run.md, corpus/README.md and the
contract; hand-made runs for the sections the corpus leaves empty."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.reports.audit import audit_report
from omg_ledger.status import ORPHAN_WARNING

from .test_cost import ev, ledger, passed, state, t, write_run
from .test_queries import state_json_pass_provenance

NOW = datetime(2026, 12, 1, tzinfo=UTC)
S03, S07, S09 = "20261129-181513.435710166-1", "20261129-181514.780559427-1", "20261129-181514.879117232-1"
S01, S10, S16 = "20261129-181512.929654081-1", "20261129-181514.934714601-1", "20261129-181518.826010212-1"
S22, S33, S35 = "20261129-181520.321225011-1", "20261129-181522.722804151-1", "20261129-181524.062929782-1"
S36, S38, S39 = "20261129-181524.161957784-1", "20261129-181524.510998091-1", "20261129-181524.604560538-1"
S25 = "20261129-181521.843936003-1"
AUTO_NONE_DETECTED = {"20261129-181521.715955568-1", "20261129-181521.972665837-1", "20261129-181522.237468643-1",
                      "20261129-181522.329723440-2", "20261129-181522.625907719-1"}


@pytest.fixture
def corpus_audit(db_url, corpus_home):
    return audit_report(ledger(db_url, corpus_home, "corpus"), now=NOW)


def test_corpus_provenance(corpus_audit, corpus_home):
    prov = corpus_audit["provenance"]
    # s35's sink wrapup is verified (per-run.md); s10's gate approve is approved.
    assert prov["mix"]["verified"] == 1 and prov["mix"]["approved"] == 1
    assert prov["mix"]["unknown"] == 0  # every corpus PASS carries provenance
    by_hand = state_json_pass_provenance(corpus_home)
    assert prov["mix"] == {"verified": 1, "approved": 1, "self-reported": by_hand["self-reported"],
                           "exit-only": by_hand["exit-only"], "unknown": 0}
    weak = {r["run_id"] for r in prov["runs_all_unverified"]}
    assert {S01, S36} <= weak  # s01: 4 exit-only; s36: both nodes exit-only
    assert S35 not in weak and S10 not in weak
    s01 = next(r for r in prov["runs_all_unverified"] if r["run_id"] == S01)
    assert (s01["passes"], s01["exit_only"], s01["self_reported"]) == (4, 4, 0)


def test_corpus_failures_judged_vs_machinery(corpus_audit):
    fails = corpus_audit["failures"]
    # s03 lane-a (exit_zero, judged), s07 impl (judged=true), s38 crashy (a failed check)
    assert {(f["run_id"], f["node_id"]) for f in fails["judged"]} == {(S03, "lane-a"), (S07, "impl"),
                                                                       (S38, "crashy")}
    # s09: a blown budget is never judged (RUN-FEED.md, judged)
    assert [(f["run_id"], f["node_id"]) for f in fails["machinery"]] == [(S09, "runaway")]
    assert "omg-ledger's own reading" in fails["note"]


def test_corpus_budget_live_status_and_evidence(corpus_audit):
    over = corpus_audit["budget"]["overruns"]
    # s09: the engine failed runaway for its budget (node_failed cost 0.21 against 0.2); the
    # CLI persisted nothing (no runaway.out), and that changes nothing. One entry, not two.
    assert [(b["run_id"], b["node_id"], b["cost_nano_usd"], b["budget_nano_usd"], b["failed_for_budget"],
             b["spend_over_budget"]) for b in over] == [(S09, "runaway", 210_000_000, 200_000_000, True, True)]

    abandoned = {a["run_id"]: a for a in corpus_audit["abandoned"]}
    assert set(abandoned) == {S22, S33}  # no lock is held in the corpus
    assert ORPHAN_WARNING in abandoned[S22]["hint"]
    assert f"oh-my-graph resume {S22} --retry-failed" in abandoned[S22]["hint"]
    assert "never wrote a snapshot" in abandoned[S33]["hint"]

    paused = corpus_audit["paused"]
    assert [(p["run_id"], p["gate"]) for p in paused["gate"]] == [(S39, "gate-b")]
    assert [p["run_id"] for p in paused["session_limit"]] == [S16]
    assert paused["other"] == []

    evidence = corpus_audit["build_evidence"]
    assert evidence["counts"] == {"attached": 1, "declared": 1, "disclosed": 0, "none-detected": 5,
                                  "not recorded": 2}  # s25 (refused) and s33 (killed) have no snapshot
    answers = {r["run_id"]: r for r in evidence["runs"]}
    assert answers[S35]["answer"] == "attached" and answers[S35]["signals"] == ["Makefile"]
    assert answers[S36]["declared_by"] == "--accept-no-build-evidence"
    assert {k for k, v in answers.items() if v["answer"] == "none-detected"} == AUTO_NONE_DETECTED
    assert answers[S25]["answer"] == "not recorded"

    assert corpus_audit["unknown_cost"]["by_runtime"] == {"codex": 6}  # s18: 3, s32: plan + 2 nodes
    assert corpus_audit["findings"] == [] and corpus_audit["problems"] == []
    assert corpus_audit["needs_attention"] is True
    assert corpus_audit["attention"] == ["2 ABANDONED run(s)", "2 PAUSED run(s)", "1 budget overrun(s)"]


def test_since_limits_every_section_but_the_runs_that_need_a_human_now(db_url, corpus_home):
    report = audit_report(ledger(db_url, corpus_home, "corpus"), since="2026-11-30T00:00:00Z", now=NOW)
    assert report["provenance"]["passes"] == 0 and report["budget"]["overruns"] == []
    # The daily cron use: an orphan warning must not vanish a day after the run died.
    assert {a["run_id"] for a in report["abandoned"]} == {S22, S33}
    assert [p["run_id"] for p in report["paused"]["gate"]] == [S39]
    assert [p["run_id"] for p in report["paused"]["session_limit"]] == [S16]
    assert report["attention"] == ["2 ABANDONED run(s)", "2 PAUSED run(s)"]
    # Killed calls of abandoned runs outside the window are not this window's.
    assert report["unknown_cost"]["unrecorded_attempts"] == 0


def _clean_run(home, run_id="20261129-090000.000000001-1"):
    write_run(home, run_id, [
        ev(run_id, t("09:00:00"), "run_started"),
        ev(run_id, t("09:00:01"), "node_started", node_id="build"),
        passed(run_id, t("09:00:02"), "build", 0.01, provenance="verified"),
        ev(run_id, t("09:00:03"), "run_finished", outcome="passed"),
    ], state(run_id, "clean", {"build": {"verdict": "PASS", "cost_usd": 0.01, "provenance": "verified"}}))


def test_nothing_needs_attention_exit_0(db_url, tmp_path):
    home = tmp_path / "home"
    _clean_run(home)
    report = audit_report(ledger(db_url, home), now=NOW)
    assert report["needs_attention"] is False and report["attention"] == []
    assert report["provenance"]["runs_all_unverified"] == []
    assert report["build_evidence"]["runs"] == []


def test_cli_exit_codes_and_empty_sections(sqlite_url, tmp_path, corpus_home):
    home = tmp_path / "home"
    _clean_run(home)
    ledger(sqlite_url, home)
    runner = CliRunner()
    clean = runner.invoke(main, ["audit", "--db", sqlite_url])
    assert clean.exit_code == 0, clean.output
    assert "ABANDONED NOW\n  none" in clean.output
    assert "BUILD EVIDENCE (auto runs): attached 0, declared 0, disclosed 0, none-detected 0, not recorded 0" \
        in clean.output
    assert "nothing needs attention" in clean.output
    as_json = runner.invoke(main, ["audit", "--db", sqlite_url, "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["needs_attention"] is False

    ledger(sqlite_url, corpus_home, "corpus")
    dirty = runner.invoke(main, ["audit", "--db", sqlite_url])
    assert dirty.exit_code == 1
    assert "NEEDS ATTENTION: 2 ABANDONED run(s); 2 PAUSED run(s); 1 budget overrun(s)" in dirty.output
    assert "WARNING: " + ORPHAN_WARNING in dirty.output


def test_overrun_finding_problem_each_need_attention(db_url, tmp_path):
    home = tmp_path / "home"
    over = "20261129-100000.000000001-1"
    # A post-hoc budget failure: the node's artifact is on disk and the verdict is FAIL.
    write_run(home, over, [
        ev(over, t("10:00:00"), "run_started"),
        ev(over, t("10:00:01"), "node_started", node_id="big"),
        ev(over, t("10:00:02"), "node_failed", node_id="big", verdict="FAIL", cost_usd=0.5,
           detail='node "big" exceeded budget_usd: $0.5000 actual vs $0.1000 budgeted'),
        ev(over, t("10:00:03"), "run_finished", outcome="failed"),
    ], state(over, "g", {"big": {"verdict": "FAIL", "cost_usd": 0.5, "budget_usd": 0.1}}),
        files={"big.out": "the work\n"})
    missing = "20261129-110000.000000001-1"
    # The stream's node_passed has no record in state.json: a finding.
    write_run(home, missing, [
        ev(missing, t("11:00:00"), "run_started"),
        ev(missing, t("11:00:01"), "node_started", node_id="a"),
        passed(missing, t("11:00:02"), "a", 0.01, provenance="exit-only"),
        ev(missing, t("11:00:03"), "run_finished", outcome="passed"),
    ], state(missing, "g2", {}))
    broken = "20261129-120000.000000001-1"
    write_run(home, broken, [ev(broken, t("12:00:00"), "run_started")], state(broken, "g3", {}))
    with open(home / "runs" / broken / "events.jsonl", "a") as fh:
        fh.write("{not json\n")
    report = audit_report(ledger(db_url, home), now=NOW)
    assert [(b["node_id"], b["failed_for_budget"], b["spend_over_budget"])
            for b in report["budget"]["overruns"]] == [("big", True, True)]  # one entry per node
    assert [(f["run_id"], f["kind"]) for f in report["findings"]] == [(missing, "snapshot_record_missing")]
    assert [p["run_id"] for p in report["problems"]] == [broken]
    assert report["failures"]["machinery"][0]["node_id"] == "big"  # judged absent on a budget FAIL
    assert report["attention"] == ["1 budget overrun(s)", "1 reconciliation finding(s)",
                                   "1 open input problem(s)"]


def test_a_judged_fail_quoting_the_budget_words_is_no_budget_overrun(db_url, tmp_path):
    """The contract: judged is "never … a blown budget". A verify FAIL whose output quotes the
    engine's budget message (a project testing its own budgets) is judged, not an overrun;
    the engine's own message is the whole detail ('node "<id>" exceeded budget_usd: …')."""
    home = tmp_path / "home"
    run_id = "20261129-100000.000000001-1"
    detail = ('node "impl" failed success_check verify: `go test ./internal/schedule/` exited 1, want 0; '
              'output: --- FAIL: TestBudget: want error "node \\"a\\" exceeded budget_usd: $0.2100 actual vs '
              '$0.2000 budgeted", got nil')
    write_run(home, run_id, [
        ev(run_id, t("10:00:00"), "run_started"),
        ev(run_id, t("10:00:01"), "node_started", node_id="impl"),
        ev(run_id, t("10:00:02"), "node_failed", node_id="impl", verdict="FAIL", cost_usd=0.05, detail=detail),
        ev(run_id, t("10:00:03"), "run_finished", outcome="failed"),
    ], state(run_id, "g", {"impl": {"verdict": "FAIL", "cost_usd": 0.05, "judged": True, "detail": detail}}))
    report = audit_report(ledger(db_url, home), now=NOW)
    assert report["budget"]["overruns"] == []
    assert [f["node_id"] for f in report["failures"]["judged"]] == ["impl"]
    assert "budget overrun" not in " ".join(report["attention"])


def test_a_fail_whose_snapshot_record_is_an_earlier_terminals_has_judged_unknown(db_url, tmp_path):
    """Leg 2 failed the node for its budget; the snapshot write after it failed, so state.json
    still holds leg 1's judged FAIL. That record's judged is not the budget failure's: the
    FAIL is not listed as judged (and is an overrun, with a snapshot_behind finding)."""
    home = tmp_path / "home"
    run_id = "20261129-100000.000000001-1"
    judged_detail = "node \"impl\" failed success_check verify: exited 1, want 0"
    budget_detail = 'node "impl" exceeded budget_usd: $0.5000 actual vs $0.2000 budgeted (over by $0.3000)'
    write_run(home, run_id, [
        ev(run_id, t("10:00:00"), "run_started"),
        ev(run_id, t("10:00:01"), "node_started", node_id="impl"),
        ev(run_id, t("10:00:02"), "node_failed", node_id="impl", verdict="FAIL", cost_usd=0.1, detail=judged_detail,
           session_id="s-leg-1"),
        ev(run_id, t("10:00:03"), "run_finished", outcome="failed"),
        ev(run_id, t("11:00:00"), "run_started"),
        ev(run_id, t("11:00:01"), "node_started", node_id="impl"),
        ev(run_id, t("11:00:02"), "node_failed", node_id="impl", verdict="FAIL", cost_usd=0.5, detail=budget_detail,
           session_id="s-leg-2"),
        ev(run_id, t("11:00:03"), "run_finished", outcome="failed"),
    ], state(run_id, "g", {"impl": {"verdict": "FAIL", "cost_usd": 0.1, "judged": True, "detail": judged_detail,
                                    "budget_usd": 0.2, "session_id": "s-leg-1", "duration": 7_000_000_000}}))
    engine = ledger(db_url, home)
    report = audit_report(engine, now=NOW)
    assert report["failures"]["judged"] == []
    assert [b["node_id"] for b in report["budget"]["overruns"]] == ["impl"]
    assert [f["kind"] for f in report["findings"]] == ["snapshot_behind"]
    # Leg 1's 7 s is that execution's, not the latest's: unknown, as its judged is.
    from sqlalchemy import text

    with engine.connect() as conn:
        assert conn.execute(text("SELECT judged, duration_ns FROM nodes WHERE node_id = 'impl'")).one() == (None, None)


def test_our_machinery_reading_is_labelled(db_url, tmp_path):
    home = tmp_path / "home"
    run = "20261129-100000.000000001-1"
    write_run(home, run, [
        ev(run, t("10:00:00"), "run_started"),
        ev(run, t("10:00:01"), "node_started", node_id="slow"),
        ev(run, t("10:00:02"), "node_failed", node_id="slow", verdict="FAIL", cost_unknown=True,
           detail='node "slow" timed out after 10m0s'),
        ev(run, t("10:00:03"), "run_finished", outcome="failed"),
    ], state(run, "g", {"slow": {"verdict": "FAIL", "cost_unknown": True, "judged": True}}))
    report = audit_report(ledger(db_url, home), now=NOW)
    [judged] = report["failures"]["judged"]
    assert judged["ours_likely_machinery"] is True  # the engine said judged; we say "reads like machinery"
    assert report["unknown_cost"]["by_runtime"] == {"claude": 1}  # not Codex-only (corpus README #4)


def test_text_lists_the_newest_fails_of_each_kind_and_says_how_many(db_url, tmp_path, corpus_home):
    """A person reads the text: each FAIL list shows its 20 newest (by run id, which is
    the run's start time) and how many there are; --verbose and --json list every one."""
    from .builders import copy_run

    home = tmp_path / "home"
    shutil.copytree(corpus_home, home, symlinks=True)
    copies = [f"20261130-0000{i:02d}.000000000-1" for i in range(1, 23)]  # 22 copies of s03, newer than the corpus
    for run_id in copies:
        copy_run(corpus_home / "runs" / S03, home / "runs" / run_id)
    ledger(db_url, home, "corpus")
    db = db_url.removeprefix("sqlite:///")
    runner = CliRunner()

    text = runner.invoke(main, ["audit", "--db", db]).output
    judged = text.split("FAILS JUDGED (engine's judged field)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # 25 judged FAILs: s03, s07, s38 and s03's lane-a in each of the 22 copies.
    assert judged[0] == "  the 20 newest of 25 (--verbose lists every one; --json has all)"
    assert [line.split()[0:2] for line in judged[1:]] == [[run_id, "lane-a:"] for run_id in copies[2:]]
    machinery = text.split("FAILS BY MACHINERY (judged absent)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0:2] for line in machinery] == [[S09, "runaway:"]]  # one: nothing left out

    verbose = runner.invoke(main, ["audit", "--db", db, "--verbose"]).output
    judged = verbose.split("FAILS JUDGED (engine's judged field)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in judged] == sorted([S03, S07, S38, *copies])
    as_json = json.loads(runner.invoke(main, ["audit", "--db", db, "--json"]).output)
    assert len(as_json["failures"]["judged"]) == 25


def _set_synced(engine, label: str, instant: str | None) -> None:
    value = "NULL" if instant is None else f"'{instant}'"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE homes SET last_synced_at = {value} WHERE label = '{label}'")


def _two_clean_homes(url: str, tmp_path):
    """Two homes, "here" and "there", each with a clean run: only staleness can need attention."""
    here, there = tmp_path / "here", tmp_path / "there"
    _clean_run(here)
    _clean_run(there, "20261129-090000.000000002-1")
    engine = ledger(url, here, "here")
    ledger(url, there, "there")
    return engine, there


def test_stale_after_names_the_homes_whose_last_sync_is_older(db_url, tmp_path):
    # NOW is 2026-12-01T00:00Z: --stale-after 2h means "synced since 2026-11-30T22:00Z".
    engine, there = _two_clean_homes(db_url, tmp_path)
    _set_synced(engine, "here", "2026-11-30T23:00:00.000000Z")
    _set_synced(engine, "there", "2026-11-30T20:00:00.000000Z")

    report = audit_report(engine, now=NOW, stale_after="2h")
    assert report["synced_since"] == "2026-11-30T22:00:00.000000Z"
    assert [(h["label"], h["path"], h["last_synced_at"]) for h in report["stale_homes"]] == [
        ("there", str(there), "2026-11-30T20:00:00.000000Z")]
    assert report["attention"] == ["1 home(s) not synced since 2026-11-30T22:00:00.000000Z"]
    assert report["needs_attention"] is True

    # A wider window, or a date before both syncs: nothing stale.
    for wider in ("6h", "2026-11-30T19:59:59Z"):
        report = audit_report(engine, now=NOW, stale_after=wider)
        assert report["stale_homes"] == [] and report["needs_attention"] is False
    # A date between the two syncs: the older one only.
    assert [h["label"] for h in audit_report(engine, now=NOW, stale_after="2026-11-30T21:00:00Z")["stale_homes"]] \
        == ["there"]
    # Without the option the check is off, however old a sync is.
    report = audit_report(engine, now=NOW)
    assert (report["synced_since"], report["stale_homes"], report["needs_attention"]) == (None, [], False)

    # A home whose sync never completed is stale under any window; so is one whose
    # stored instant cannot be read (a row edited by hand).
    _set_synced(engine, "here", None)
    _set_synced(engine, "there", "yesterday-ish")
    report = audit_report(engine, now=NOW, stale_after="1y")
    assert [(h["label"], h["last_synced_at"]) for h in report["stale_homes"]] == [
        ("here", None), ("there", "yesterday-ish")]
    assert report["attention"] == ["2 home(s) not synced since 2025-12-01T00:00:00.000000Z"]


def test_cli_stale_after_exits_1_and_lists_the_home(sqlite_url, tmp_path):
    engine, there = _two_clean_homes(sqlite_url, tmp_path)
    # Instants far from any clock this test runs under: one long past, one ahead.
    _set_synced(engine, "here", "2999-01-01T00:00:00.000000Z")
    _set_synced(engine, "there", "2001-02-03T04:05:06.000000Z")
    runner = CliRunner()
    assert runner.invoke(main, ["audit", "--db", sqlite_url]).exit_code == 0
    stale = runner.invoke(main, ["audit", "--db", sqlite_url, "--stale-after", "2h"])
    assert stale.exit_code == 1, stale.output
    lines = stale.output.splitlines()
    assert lines[0].startswith("NEEDS ATTENTION: 1 home(s) not synced since ")
    section = lines.index(next(line for line in lines if line.startswith("HOMES NOT SYNCED SINCE ")))
    assert lines[section + 1] == f"  there  {there}: last synced 2001-02-03 04:05:06.000Z"
    assert lines[section + 2] == ""
    as_json = json.loads(runner.invoke(main, ["audit", "--db", sqlite_url, "--stale-after", "2h", "--json"]).output)
    assert [h["label"] for h in as_json["stale_homes"]] == ["there"]
    empty = runner.invoke(main, ["audit", "--db", sqlite_url, "--stale-after", ""])
    assert empty.exit_code == 2 and "--stale-after was given an empty value" in empty.output


def test_budget_usd_bounds_each_invocation_not_the_nodes_total(db_url, tmp_path):
    """The engine applies budget_usd to each invocation (claude's --max-budget-usd per
    process; scheduler.evaluateBudget per outcome). A feedback loop running `impl` twice at
    $0.06 against a $0.10 budget stayed within it ($0.12 in all is no overrun); a second
    round whose one invocation spent $0.15 did not (and the engine failed it)."""
    home = tmp_path / "home"
    within, over = "20261129-100000.000000001-1", "20261129-110000.000000001-1"
    budget_fail = 'node "impl" exceeded budget_usd: $0.1500 actual vs $0.1000 budgeted (over by $0.0500)'
    for run_id, hour, second_round in ((within, "10", passed(within, t("10:00:06"), "impl", 0.06, round=1)),
                                       (over, "11", ev(over, t("11:00:06"), "node_failed", node_id="impl",
                                                       round=1, verdict="FAIL", cost_usd=0.15,
                                                       detail=budget_fail))):
        write_run(home, run_id, [
            ev(run_id, t(f"{hour}:00:00"), "run_started"),
            ev(run_id, t(f"{hour}:00:01"), "node_started", node_id="impl"),
            passed(run_id, t(f"{hour}:00:02"), "impl", 0.06),
            ev(run_id, t(f"{hour}:00:03"), "node_started", node_id="review"),
            ev(run_id, t(f"{hour}:00:04"), "node_retried", node_id="review", round=1, cost_usd=0.01),
            ev(run_id, t(f"{hour}:00:05"), "node_started", node_id="impl", round=1),
            second_round,
            ev(run_id, t(f"{hour}:00:07"), "run_finished", outcome="passed" if run_id == within else "failed"),
        ], state(run_id, "g", {
            "impl": {"verdict": "PASS" if run_id == within else "FAIL", "round": 1, "budget_usd": 0.1,
                     "cost_usd": 0.12 if run_id == within else 0.21},
            "review": {"verdict": "", "round": 1, "cost_usd": 0.01}}))
    report = audit_report(ledger(db_url, home), now=NOW)
    assert [(b["run_id"], b["node_id"], b["cost_nano_usd"], b["largest_invocation_nano_usd"], b["budget_nano_usd"],
             b["failed_for_budget"], b["spend_over_budget"]) for b in report["budget"]["overruns"]] == [
        (over, "impl", 210_000_000, 150_000_000, 100_000_000, True, True)]
    assert "1 budget overrun(s)" in report["attention"]


def test_a_fail_with_no_snapshot_record_of_its_own_is_neither_judged_nor_machinery(db_url, tmp_path):
    """The engine writes `judged` only into state.json's record of a terminal
    (scheduler.go:946-956 recordFail → recordSnapshot → toNodeRecord's Judged,
    scheduler.go:1182-1201; terminalEvent, scheduler.go:1214-1232, puts none on the event),
    and absent there means false: the machinery (run-feed contract, "judged … absent
    (false)"). A FAIL whose record never landed (`lost`: no record at all) or was left an
    earlier terminal's (`behind`: the snapshot holds leg 1's judged FAIL) has no judged
    field on record at all — the engine said neither, so audit lists it apart, never as a
    machinery FAIL. `broken`, whose record is its own and says nothing of judged, is one."""
    home = tmp_path / "home"
    run_id = "20261129-100000.000000001-1"
    judged_detail = "node \"behind\" failed success_check verify: exited 1, want 0"
    write_run(home, run_id, [
        ev(run_id, t("10:00:00"), "run_started"),
        ev(run_id, t("10:00:01"), "node_started", node_id="behind"),
        ev(run_id, t("10:00:02"), "node_failed", node_id="behind", verdict="FAIL", cost_usd=0.1,
           detail=judged_detail, session_id="s-leg-1"),
        ev(run_id, t("10:00:03"), "run_finished", outcome="failed"),
        ev(run_id, t("11:00:00"), "run_started"),
        ev(run_id, t("11:00:01"), "node_started", node_id="behind"),
        ev(run_id, t("11:00:02"), "node_failed", node_id="behind", verdict="FAIL", cost_usd=0.2,
           detail="exit code 1", session_id="s-leg-2"),
        ev(run_id, t("11:00:03"), "node_started", node_id="lost"),
        ev(run_id, t("11:00:04"), "node_failed", node_id="lost", verdict="FAIL", cost_usd=0.1, detail="exit code 2",
           session_id="s-lost"),
        ev(run_id, t("11:00:05"), "node_started", node_id="broken"),
        ev(run_id, t("11:00:06"), "node_failed", node_id="broken", verdict="FAIL", cost_usd=0.1,
           detail="exit code 3", session_id="s-broken"),
        ev(run_id, t("11:00:07"), "run_finished", outcome="failed"),
    ], state(run_id, "g", {
        "behind": {"verdict": "FAIL", "cost_usd": 0.1, "judged": True, "detail": judged_detail,
                   "session_id": "s-leg-1"},
        "broken": {"verdict": "FAIL", "cost_usd": 0.1, "detail": "exit code 3", "session_id": "s-broken"},
    }) | {"graph": {"name": "g", "nodes": [{"id": "behind"}, {"id": "lost"}, {"id": "broken"}]}})
    report = audit_report(ledger(db_url, home), now=NOW)
    fails = report["failures"]
    assert fails["judged"] == []
    assert [f["node_id"] for f in fails["machinery"]] == ["broken"]
    assert [f["node_id"] for f in fails["judged_unknown"]] == ["behind", "lost"]
    text = CliRunner().invoke(main, ["audit", "--db", db_url.removeprefix("sqlite:///")]).output
    machinery = text.split("FAILS BY MACHINERY (judged absent)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[1] for line in machinery] == ["broken:"]
    unknown = text.split("FAILS WITH NO JUDGED ON RECORD", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert [line.split()[1] for line in unknown] == ["behind:", "lost:"]


def test_a_negative_budget_usd_is_a_node_without_a_budget_not_damage(db_url, tmp_path):
    """The engine writes budget_usd as the graph declared it and applies none that is not
    positive (schedule/scheduler.go evaluateBudget: `node.BudgetUSD <= 0` returns nil;
    runner/claude_protocol.go passes --max-budget-usd only when > 0). A state.json carrying
    `budget_usd: -1` is the engine's own: read, the run PASS with its snapshot, no problem,
    no budget and no overrun."""
    home = tmp_path / "home"
    run_id = "20261129-100000.000000001-1"
    doc = state(run_id, "g", {"impl": {"verdict": "PASS", "cost_usd": 0.05, "budget_usd": -1}})
    doc["graph"]["nodes"] = [{"id": "impl", "budget_usd": -1}]
    write_run(home, run_id, [
        ev(run_id, t("10:00:00"), "run_started"),
        ev(run_id, t("10:00:01"), "node_started", node_id="impl"),
        passed(run_id, t("10:00:02"), "impl", 0.05, provenance="exit-only"),
        ev(run_id, t("10:00:03"), "run_finished", outcome="passed"),
    ], doc)
    engine = ledger(db_url, home)
    report = audit_report(engine, now=NOW)
    assert report["problems"] == [] and report["budget"]["overruns"] == []
    with engine.connect() as conn:
        from sqlalchemy import text

        row = conn.execute(text("SELECT r.snapshot_schema, n.budget_nano_usd, n.verdict FROM nodes n "
                                "JOIN runs r ON r.id = n.run_pk WHERE n.node_id = 'impl'")).one()
    assert tuple(row) == (3, None, "PASS")


def test_since_counts_each_unpriced_invocation_at_its_own_time_as_cost_does(db_url, tmp_path):
    """One Codex run with an unpriced call at 10:00 and one at 12:00: `audit --since 11:00`
    counts the second only, as `cost --since 11:00` does — and as the estimate printed
    under the count does, which is `cost`'s. Counting every call of a run with an event
    since 11:00 read "UNPRICED INVOCATIONS: 2" above "estimated (1 of 1 unpriced)"."""
    home = tmp_path / "home"
    run = "20261129-100000.000000001-1"
    usage = {"input_tokens": 1000, "cached_input_tokens": 0, "output_tokens": 100, "reasoning_output_tokens": 0}
    write_run(home, run, [
        ev(run, t("10:00:00"), "run_started"),
        ev(run, t("10:00:01"), "node_started", node_id="a"),
        passed(run, t("10:00:02"), "a", cost_unknown=True, usage=usage, provenance="exit-only"),
        ev(run, t("12:00:01"), "node_started", node_id="b"),
        passed(run, t("12:00:02"), "b", cost_unknown=True, usage=usage, provenance="exit-only"),
        ev(run, t("12:00:03"), "run_finished", outcome="passed"),
    ], state(run, "g", {"a": {"verdict": "PASS", "cost_unknown": True},
                        "b": {"verdict": "PASS", "cost_unknown": True}}, runtime="codex"))
    engine = ledger(db_url, home)
    assert audit_report(engine, now=NOW)["unknown_cost"]["by_runtime"] == {"codex": 2}
    for since, expected in (("2026-11-29T10:00:02Z", 2), ("2026-11-29T10:00:02.000001Z", 1),
                            ("2026-11-29T11:00:00Z", 1), ("2026-11-29T12:00:02Z", 1),
                            ("2026-11-29T12:00:02.000001Z", 0)):
        unknown = audit_report(engine, since=since, now=NOW)["unknown_cost"]
        assert (unknown["total"], unknown["by_runtime"]) == (expected, {"codex": expected} if expected else {}), since
    if db_url.startswith("sqlite"):
        db = db_url.removeprefix("sqlite:///")
        env = {"OMG_LEDGER_NOW": "2026-12-01T00:00:00Z"}
        args = ["--db", db, "--since", "2026-11-29T11:00:00Z", "--tz", "UTC", "--estimate", "--json"]
        audit = json.loads(CliRunner().invoke(main, ["audit", *args], env=env).output)["unknown_cost"]
        cost = json.loads(CliRunner().invoke(main, ["cost", *args], env=env).output)["total"]
        assert audit["total"] == cost["unknown_cost_invocations"] == 1
        assert audit["estimate"]["estimated_invocations"] + audit["estimate"]["unestimated_invocations"] == 1


def test_the_text_shows_its_window_in_tz_as_every_table_does(corpus_audit, db_url):
    """`audit --since 2d --tz Europe/Berlin` read the window in Berlin and wrote it in UTC
    with microseconds; the text now writes its times as every table does (the JSON keeps
    UTC). 2026-11-30T12:00Z less two days is 2026-11-28 12:00Z, 13:00 in Berlin (CET, +1)."""
    env = {"OMG_LEDGER_NOW": "2026-11-30T12:00:00Z"}
    args = ["audit", "--db", db_url, "--since", "2d", "--stale-after", "1h"]
    berlin = CliRunner().invoke(main, [*args, "--tz", "Europe/Berlin"], env=env).output.splitlines()
    assert berlin[1].startswith("audit since 2026-11-28 13:00:00.000+0100 ")
    assert any(line.startswith("HOMES NOT SYNCED SINCE 2026-11-30 12:00:00.000+0100 ") for line in berlin)
    utc = CliRunner().invoke(main, args, env={**env, "TZ": "UTC"}).output.splitlines()
    assert utc[1].startswith("audit since 2026-11-28 12:00:00.000Z ")
    as_json = json.loads(CliRunner().invoke(main, [*args, "--tz", "Europe/Berlin", "--json"], env=env).output)
    assert as_json["since"] == "2026-11-28T12:00:00.000000Z"


def test_a_fails_detail_cut_short_says_so_and_never_halves_an_escape(sqlite_url, tmp_path, corpus_home):
    """The text keeps a FAIL's detail to its first 100 columns; it used to cut s07's
    `… exited 3, want 0; output: FAIL: 2 tests failed` at "want 0; o", with no mark that
    anything followed, and a control character near the cut to half its escape (`\\x1`)."""
    ledger(sqlite_url, corpus_home, "corpus")
    text = CliRunner().invoke(main, ["audit", "--db", sqlite_url]).output
    [s07] = [line for line in text.splitlines() if line.startswith(f"  {S07}  impl: ")]
    detail = "node \"impl\" failed success_check verify: `echo 'FAIL: 2 tests failed' && exit 3` exited 3, " \
             "want 0; output: FAIL: 2 tests failed"  # its node_failed line in the corpus
    shown = s07.removeprefix(f"  {S07}  impl: ")
    assert shown.endswith("…") and detail.startswith(shown[:-1]) and len(shown) == 100

    home = tmp_path / "home"
    run = "20261129-100000.000000001-1"
    escaped = "x" * 97 + "\x1b[2J and more"  # \x1b is shown as the four characters \x1b
    write_run(home, run, [
        ev(run, t("10:00:00"), "run_started"),
        ev(run, t("10:00:01"), "node_started", node_id="n"),
        ev(run, t("10:00:02"), "node_failed", node_id="n", verdict="FAIL", cost_usd=0.01, detail=escaped),
        ev(run, t("10:00:03"), "run_finished", outcome="failed"),
    ], state(run, "g", {"n": {"verdict": "FAIL", "cost_usd": 0.01, "judged": True}}))
    ledger(sqlite_url, home, "hand")
    text = CliRunner().invoke(main, ["audit", "--db", sqlite_url]).output
    [line] = [line for line in text.splitlines() if line.startswith(f"  {run}  n: ")]
    assert line == f"  {run}  n: " + "x" * 97 + "…"
