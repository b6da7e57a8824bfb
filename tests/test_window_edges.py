"""Windows at their edges, across every surface that cuts one: `cost`, the saved
queries, `audit`. Expectations are the run files read by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from omg_ledger.errors import BadArgument
from omg_ledger.reports.audit import audit_report
from omg_ledger.reports.cost import cost_report
from omg_ledger.reports.overview import overview
from omg_ledger.reports.sql import run_saved

from .test_cost import ev, ledger, passed, state, t, write_run

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_window_reaching_before_the_year_1000_cuts_saved_queries_and_audit_as_cost(db_url, tmp_path):
    """The grammar takes dates from 0001-01-02. A saved query's time parameter and audit's
    problem window are compared as the ledger's UTC text, which orders as the instant only
    with a four-digit year: written `999-12-31T…` it sorted after `2026-…`, so
    `--param since=0999-12-31` dropped every charge, `until=0999-12-31` kept every one,
    and `audit --since 0999-12-31` hid an open problem (exit 0 where it is 1)."""
    home = tmp_path / "home"
    paid = "20261129-090000.000000001-1"
    write_run(home, paid, [
        ev(paid, t("09:00:00"), "run_started"),
        ev(paid, t("09:00:01"), "node_started", node_id="build"),
        passed(paid, t("09:00:02"), "build", 0.25, provenance="exit-only"),
        ev(paid, t("09:00:03"), "run_finished", outcome="passed"),
    ], state(paid, "g", {"build": {"verdict": "PASS", "cost_usd": 0.25, "provenance": "exit-only"}}))
    broken = "20261129-120000.000000001-1"
    write_run(home, broken, [ev(broken, t("12:00:00"), "run_started")], state(broken, "g3", {}))
    with open(home / "runs" / broken / "events.jsonl", "a") as fh:
        fh.write("{not json\n")
    engine = ledger(db_url, home)
    everything = 250_000_000  # the one charge, $0.25

    def query_spend(name: str, **params: str) -> int:
        rows = run_saved(engine, name, params, now=NOW, zone=UTC).rows
        column = {"spend_by_graph": 2, "spend_by_day": 1}[name]
        return sum(int(row[column] or 0) for row in rows)

    for since in ("0001-01-02", "0999-12-31", "0999-12-31T23:59:59Z", "1000-01-01", "1969-12-31"):
        assert cost_report(engine, since=since, tz="UTC", now=NOW)["total"]["cost_nano_usd"] == everything, since
        assert query_spend("spend_by_graph", since=since) == everything, since
        assert query_spend("spend_by_day", since=since) == everything, since
        assert [r[1] for r in run_saved(engine, "unverified_passes", {"since": since}, now=NOW, zone=UTC).rows] \
            == [paid], since
        assert [p["run_id"] for p in audit_report(engine, since=since, now=NOW)["problems"]] == [broken], since
    for until in ("0999-12-31", "1000-01-01"):
        assert cost_report(engine, since="0500-01-01", until=until, tz="UTC", now=NOW)["total"]["invocations"] == 0
        assert run_saved(engine, "spend_by_graph", {"since": "0500-01-01", "until": until}, now=NOW,
                         zone=UTC).rows == [], until
        assert query_spend("spend_by_day", until=until) == 0, until


def test_a_window_whose_until_is_before_its_since_in_real_time_is_refused(db_url, tmp_path):
    """New York skips 02:00-03:00 on 2026-03-08: 02:30 is read under the rules before the
    change (EST), the instant 07:30Z, which is 03:30 EDT; 03:10 is 07:10Z. So --since
    02:30 --until 03:10 ends before it starts. Two times of one zone compared as wall
    clocks (Python's rule for datetimes sharing a tzinfo) let it through, and `cost`
    answered $0 for a window holding nothing while a charge at 03:05 EDT was paid."""
    home = tmp_path / "home"
    run = "20260308-070000.000000001-1"
    write_run(home, run, [
        ev(run, "2026-03-08T07:00:00.000000Z", "run_started"),
        ev(run, "2026-03-08T07:05:00.000000Z", "node_started", node_id="a"),
        passed(run, "2026-03-08T07:05:00.000000Z", "a", 0.5, provenance="exit-only"),
        ev(run, "2026-03-08T07:05:01.000000Z", "run_finished", outcome="passed"),
    ], state(run, "g", {"a": {"verdict": "PASS", "cost_usd": 0.5}}))
    engine = ledger(db_url, home)
    tz = "America/New_York"
    with pytest.raises(BadArgument, match="empty window") as caught:
        cost_report(engine, since="2026-03-08T02:30", until="2026-03-08T03:10", tz=tz, now=NOW)
    assert "--until (2026-03-08T03:10:00-04:00) is not after --since (2026-03-08T03:30:00-04:00)" in str(caught.value)
    with pytest.raises(BadArgument, match="empty window"):
        overview(engine, since="2026-03-08T02:30", until="2026-03-08T03:10", tz=tz, now=NOW)
    # 02:00 read the same way is 07:00Z, the change itself: the charge at 03:05 EDT is in.
    window = cost_report(engine, since="2026-03-08T02:00", until="2026-03-08T03:10", tz=tz, now=NOW)
    assert [datetime.fromisoformat(window[end]) for end in ("since", "until")] == [
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC), datetime(2026, 3, 8, 7, 10, tzinfo=UTC)]
    assert window["total"]["cost_nano_usd"] == 500_000_000
