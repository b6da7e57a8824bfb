"""Each run's PASS counts on its `runs` row (passes, passes_<provenance>, passes_unknown):
derived with the run's other columns, filled by migration 0010 from the stored nodes
with the same values, and what audit's provenance section sums."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
from alembic import command
from sqlalchemy import inspect, text

from omg_ledger import derive
from omg_ledger.db import (
    HEAD_REVISION,
    alembic_config,
    open_ledger,
    open_ledger_readonly,
    write_transaction,
)
from omg_ledger.reports.audit import audit_report
from omg_ledger.sync import Home, sync

from .ledger_dump import diff, dump, with_file_ctimes_unknown

NOW = datetime(2026, 12, 1, tzinfo=UTC)
# The contract's closed set of four (RUN-FEED.md), each with its column.
BY_PROVENANCE = {"verified": "passes_verified", "approved": "passes_approved",
                 "self-reported": "passes_self_reported", "exit-only": "passes_exit_only"}
COLUMNS = ("passes", *BY_PROVENANCE.values(), "passes_unknown")
S01 = "20261129-181512.929654081-1"  # corpus/per-run.md: 4 nodes, all exit-only PASS


def stored_counts(engine) -> dict[str, dict[str, int]]:
    """{run_id: {column: value}} as the runs rows hold them (every run, with or without a PASS)."""
    with engine.connect() as conn:
        return {run_id: dict(zip(COLUMNS, map(int, values), strict=True)) for run_id, *values in conn.execute(text(
            f"SELECT run_id, {', '.join(COLUMNS)} FROM runs"))}


def counted_from_nodes(engine) -> dict[str, dict[str, int]]:
    """The same counts from the nodes rows, one (run, provenance) group at a time."""
    out: dict[str, dict[str, int]] = {}
    with engine.connect() as conn:
        for run_id, in conn.execute(text("SELECT run_id FROM runs")):
            out[run_id] = dict.fromkeys(COLUMNS, 0)
        for run_id, provenance, count in conn.execute(text(
                "SELECT r.run_id, n.provenance, COUNT(*) FROM nodes n JOIN runs r ON r.id = n.run_pk "
                "WHERE n.verdict = 'PASS' GROUP BY r.run_id, n.provenance")):
            counts = out[run_id]
            counts["passes"] += count
            if provenance in BY_PROVENANCE:
                counts[BY_PROVENANCE[provenance]] += count
            elif not provenance:
                counts["passes_unknown"] += count
    return out


def counted_from_state_json(home: Path) -> dict[str, dict[str, int]]:
    """Straight from the files: each run's PASS records in its state.json by provenance
    (the corpus drops no terminal event, so a snapshot's records are the stream's
    latest verdicts; corpus/README.md)."""
    out = {}
    for run in sorted((home / "runs").iterdir()):
        counts = dict.fromkeys(COLUMNS, 0)
        state = run / "state.json"
        records = (json.loads(state.read_text()).get("nodes") or {}) if state.exists() else {}
        for record in records.values():
            if record.get("verdict") == "PASS":
                counts["passes"] += 1
                provenance = record.get("provenance")
                counts[BY_PROVENANCE[provenance] if provenance else "passes_unknown"] += 1
        out[run.name] = counts
    return out


def test_corpus_runs_hold_their_pass_counts_by_provenance(db_url, corpus_home):
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(corpus_home), "corpus")])
    stored = stored_counts(engine)
    from_nodes = counted_from_nodes(engine)
    engine.dispose()
    assert len(stored) == 25
    assert stored == from_nodes
    assert stored == counted_from_state_json(corpus_home)
    assert stored[S01] == {"passes": 4, "passes_verified": 0, "passes_approved": 0, "passes_self_reported": 0,
                           "passes_exit_only": 4, "passes_unknown": 0}
    # The corpus has passes of every provenance but unknown, and runs without a PASS.
    totals = {c: sum(run[c] for run in stored.values()) for c in COLUMNS}
    assert all(totals[c] > 0 for c in ("passes", *BY_PROVENANCE.values())) and totals["passes_unknown"] == 0
    assert any(run["passes"] == 0 for run in stored.values())


def test_unknown_and_absent_provenances_are_in_passes_and_audit_names_them(tmp_path):
    """A PASS without provenance counts as unknown; one of a provenance the contract does
    not name is in `passes` alone, and audit names it from the nodes."""
    from .test_cost import ev, ledger, passed, state, t, write_run

    run_id = "20261130-090000.000000001-1"
    write_run(tmp_path / "home", run_id, [
        ev(run_id, t("09:00:00"), "run_started"),
        passed(run_id, t("09:00:01"), "a", 0.01),
        passed(run_id, t("09:00:02"), "b", 0.01, provenance="peer-reviewed"),
        passed(run_id, t("09:00:03"), "c", 0.01, provenance="self-reported"),
        ev(run_id, t("09:00:04"), "run_finished", outcome="passed"),
    ], state(run_id, "clean", {"a": {"verdict": "PASS", "cost_usd": 0.01},
                               "b": {"verdict": "PASS", "cost_usd": 0.01, "provenance": "peer-reviewed"},
                               "c": {"verdict": "PASS", "cost_usd": 0.01, "provenance": "self-reported"}}))
    engine = ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}", tmp_path / "home")
    assert stored_counts(engine)[run_id] == {"passes": 3, "passes_verified": 0, "passes_approved": 0,
                                             "passes_self_reported": 1, "passes_exit_only": 0, "passes_unknown": 1}
    provenance = audit_report(engine, now=NOW)["provenance"]
    engine.dispose()
    assert provenance["passes"] == 3
    assert provenance["mix"] == {"verified": 0, "approved": 0, "self-reported": 1, "exit-only": 0, "unknown": 1,
                                 "peer-reviewed": 1}
    assert provenance["runs_all_unverified"] == []  # 1 of its 3 passes is weak: not all


def _audits(url: str) -> list[bytes]:
    """audit (lazy and not) read as a command reads it: opened read-only, at any revision from 0006."""
    return [orjson.dumps(audit_report(open_ledger_readonly(url, oldest="0006"), since=since, now=NOW),
                         option=orjson.OPT_SORT_KEYS) for since in (None, "2026-11-29T18:15:20Z")]


def test_a_0009_ledger_upgraded_to_0010_equals_the_ledger_derivation_wrote(db_url, corpus_copy):
    """A ledger at 0009 (the columns dropped by 0010's downgrade: what 0009's code wrote),
    a run of it gone, upgraded: every row of every table, those columns included, equals
    what derivation wrote at 0010 — no run is re-derived (DERIVATION_VERSION unchanged) —
    and audit reads the same from the columns as from the nodes (0009)."""
    gone = corpus_copy / "runs" / S01
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(corpus_copy), "corpus")])
    shutil.rmtree(gone)
    assert sync(engine, [Home.from_path(str(corpus_copy), "corpus")]).runs_gone == 1
    derived = dump(engine)
    audited = _audits(db_url)

    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0009")
    with engine.connect() as conn:
        assert not set(COLUMNS) & {c["name"] for c in inspect(conn).get_columns("runs")}
    assert _audits(db_url) == audited  # at 0009: counted from the nodes

    with write_transaction(engine) as conn:
        command.upgrade(alembic_config(conn), HEAD_REVISION)
    upgraded = dump(engine)
    until_read = with_file_ctimes_unknown(derived)
    assert upgraded == until_read, diff(upgraded, until_read)
    counts = stored_counts(engine)
    assert counts[S01]["passes_exit_only"] == 4  # the gone run's, from its kept nodes
    with engine.connect() as conn:
        assert conn.execute(text("SELECT gone FROM runs WHERE run_id = :r"), {"r": S01}).scalar()
        versions = set(conn.execute(text("SELECT derivation_version FROM runs")).scalars())
    assert versions == {derive.DERIVATION_VERSION}  # the next sync re-derives nothing
    assert _audits(db_url) == audited  # at 0010: from the columns
    report = sync(engine, [Home.from_path(str(corpus_copy), "corpus")])
    # Each file's ctime is read again, but for the gone run's: there is no file to read.
    assert report.runs_changed == 0 and dump(engine) == with_file_ctimes_unknown(derived, {S01})
    engine.dispose()


def test_audit_text_and_json_are_the_same_from_the_columns_as_from_the_nodes(tmp_path, corpus_home):
    """The command's own output, byte for byte: a ledger at 0010 and the same ledger at
    0009 (audit then groups the nodes per run, as before the columns)."""
    new, old = tmp_path / "new.sqlite", tmp_path / "old.sqlite"
    engine = open_ledger(str(new))
    sync(engine, [Home.from_path(str(corpus_home), "corpus")])
    engine.dispose()
    shutil.copy(new, old)
    engine = open_ledger(str(old))
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0009")
    engine.dispose()

    def audit(db: Path, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "audit", *args, "--db", str(db)],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "OMG_LEDGER_NOW": "2026-12-01T00:00:00Z"})
        assert done.returncode == 1, done.stderr  # the corpus needs attention (ABANDONED runs)
        return done.stdout

    for args in ((), ("--json",), ("--since", "2026-11-29T18:15:20Z")):
        assert audit(new, *args) == audit(old, *args), args
    assert "exit-only" in audit(new)
