"""A rule that fails on one run's facts (a bug of omg-ledger, found by some run no test
had) must not stop every sync: that run is a problem on its events.jsonl and is not
indexed (an indexed run keeps the rows it had), every other run is indexed as it would
be without it, and the release that fixes the rule indexes it and resolves the problem.
What derivation calls out to (the database behind the sink, the stream being read)
fails as it failed: that is never one run's problem."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from omg_ledger import derive, invocations, reconcile
from omg_ledger.db import open_ledger
from omg_ledger.derive import RULE_FAILED, RunFacts, UnderivableRun, derive_run
from omg_ledger.sync import Home, rebuild, sync

from .builders import ev, events, graph
from .ledger_dump import diff, dump

CORPUS_RUNS = Path("/work/shared/corpus/home/runs")


def _home(tmp_path: Path) -> tuple[Path, list[str]]:
    """A home of the first three corpus runs."""
    home = tmp_path / "home"
    runs = sorted(p.name for p in CORPUS_RUNS.iterdir() if (p / "events.jsonl").is_file())[:3]
    for run_id in runs:
        shutil.copytree(CORPUS_RUNS / run_id, home / "runs" / run_id)
    return home, runs


def _rule_fails_on(run_id: str, monkeypatch) -> None:
    """From here on a rule raises on ``run_id`` (a forked worker inherits it)."""
    original = derive.reconcile

    def failing(run):
        if run.run_id == run_id:
            raise KeyError("verdict")
        return original(run)

    monkeypatch.setattr(derive, "reconcile", failing)


def _without_problems(dumped: dict) -> dict:
    return {k: v for k, v in dumped.items() if k != "problems"}


def _problems(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT path, byte_offset, reason, resolved_at IS NOT NULL FROM problems ORDER BY id"))]


def _synced(home: Path, db: str) -> dict:
    engine = open_ledger(db)
    try:
        sync(engine, [Home.from_path(str(home), "h")], workers=0)
        return _without_problems(dump(engine))
    finally:
        engine.dispose()


def _assert_a_clean_sync_makes(got: dict, home: Path, tmp_path: Path) -> None:
    clean = _synced(home, str(tmp_path / "clean.sqlite"))
    assert got == clean, diff(got, clean)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_run_a_rule_fails_on_is_a_problem_and_the_others_are_indexed(db_url, tmp_path, workers,
                                                                         monkeypatch):
    home, runs = _home(tmp_path)
    bad = home / "runs" / runs[1]  # a good run written before it in the batch, one after
    shutil.move(bad, tmp_path / "aside")
    expected = _synced(home, str(tmp_path / "expected.sqlite"))
    shutil.move(tmp_path / "aside", bad)
    bad_stream = f"{bad}/events.jsonl"

    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    try:
        with monkeypatch.context() as m:
            _rule_fails_on(bad.name, m)
            report = sync(engine, homes, workers=workers)
            assert report.runs_changed == 2
            reason = f"{RULE_FAILED}KeyError: 'verdict'; it is indexed once a release derives it"
            assert [(p.path, p.offset, p.reason) for p in report.problems] == [(bad_stream, 0, reason)]
            assert _without_problems(dump(engine)) == expected, diff(_without_problems(dump(engine)), expected)
            with engine.connect() as conn:
                assert conn.execute(text("SELECT COUNT(*) FROM runs WHERE run_id = :r"), {"r": bad.name}).scalar() == 0
            again = sync(engine, homes, workers=workers)  # tried again, recorded once
            assert (again.runs_changed, [p.reason for p in again.problems]) == (0, [reason])
            assert _problems(engine) == [(bad_stream, 0, reason, False)]
        fixed = sync(engine, homes, workers=workers)  # the release that fixes the rule
        assert (fixed.runs_changed, fixed.problems) == (1, [])
        assert _problems(engine) == [(bad_stream, 0, reason, True)]
        got = _without_problems(dump(engine))
    finally:
        engine.dispose()
    _assert_a_clean_sync_makes(got, home, tmp_path)


def test_an_indexed_run_a_rule_fails_on_after_an_append_keeps_its_rows(db_url, tmp_path, monkeypatch):
    home, runs = _home(tmp_path)
    bad, later = home / "runs" / runs[1], home / "runs" / runs[2]
    stream = bad / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    stream.write_bytes(b"".join(lines[:-1]))  # the run still going: its last line not yet written
    shutil.move(later, tmp_path / "aside")
    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    try:
        sync(engine, homes, workers=0)
        before = _without_problems(dump(engine))
        with open(stream, "ab") as f:
            f.write(lines[-1])
        shutil.move(tmp_path / "aside", later)
        with monkeypatch.context() as m:
            _rule_fails_on(bad.name, m)
            report = sync(engine, homes, workers=0)
        assert report.runs_changed == 1  # the run added back; the appended one is kept as it was
        assert [(p.path, p.reason.startswith(RULE_FAILED)) for p in report.problems] == [(str(stream), True)]
        after = _without_problems(dump(engine))
        only_before = {table: [row for row in rows if (("run_pk", ("h", later.name)) not in row
                                                       and ("run_id", later.name) not in row)]
                       for table, rows in after.items()}
        assert only_before["runs"] and only_before == before, diff(only_before, before)
        fixed = sync(engine, homes, workers=0)
        assert (fixed.runs_changed, fixed.problems) == (1, [])
        assert [p[3] for p in _problems(engine)] == [True]
        got = _without_problems(dump(engine))
    finally:
        engine.dispose()
    _assert_a_clean_sync_makes(got, home, tmp_path)


def test_rebuild_keeps_the_rows_of_a_run_a_rule_fails_on_and_names_the_rules_error(db_url, tmp_path, monkeypatch):
    home, runs = _home(tmp_path)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")], workers=0)
        before = _without_problems(dump(engine))
        with monkeypatch.context() as m:
            _rule_fails_on(runs[1], m)
            assert rebuild(engine).runs_rederived == 2
        assert _without_problems(dump(engine)) == before
        assert _problems(engine) == [(str(home / "runs" / runs[1]), 0,
                                      "cannot derive this run's rows from its stored facts: KeyError: 'verdict'",
                                      False)]
        assert rebuild(engine).runs_rederived == 3  # the release that fixes the rule
        assert [p[3] for p in _problems(engine)] == [True]
    finally:
        engine.dispose()


# A launcher: the CLI with a rule that fails on the run named by its first argument.
_FAILING_CLI = """
import sys
from omg_ledger import cli, derive
original, bad = derive.reconcile, sys.argv.pop(1)
derive.reconcile = lambda run: (_ for _ in ()).throw(KeyError("verdict")) if run.run_id == bad else original(run)
cli.main()
"""


def test_the_cli_syncs_past_such_a_run_strict_and_audit_say_so(tmp_path):
    home, runs = _home(tmp_path)
    db = str(tmp_path / "ledger.sqlite")

    def cli(*args: str, failing: str | None = None) -> subprocess.CompletedProcess:
        launcher = ["-c", _FAILING_CLI, failing] if failing else ["-m", "omg_ledger.cli"]
        return subprocess.run([sys.executable, *launcher, *args, "--db", db], capture_output=True, text=True,
                              timeout=120)

    synced = cli("sync", "--home", str(home), "--json", failing=runs[0])
    assert synced.returncode == 0 and "Traceback" not in synced.stderr, synced.stderr
    assert [p["path"] for p in json.loads(synced.stdout)["problems"]] == [f"{home}/runs/{runs[0]}/events.jsonl"]
    listed = json.loads(cli("runs", "--json").stdout)
    assert sorted(r["run_id"] for r in listed) == runs[1:]
    strict = cli("sync", "--home", str(home), "--strict", failing=runs[0])
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    assert strict.stderr.count("omg-ledger: problem:") == 1 and "a bug of omg-ledger" in strict.stderr
    assert cli("audit").returncode == 1  # an open problem needs attention
    assert cli("sync", "--home", str(home)).returncode == 0
    assert sorted(r["run_id"] for r in json.loads(cli("runs", "--json").stdout)) == runs


# -- in derive_run itself ----------------------------------------------------------


def _long_stream() -> list:
    """Past DRAIN_ROWS finished rows at a line the sink is offered them on (every 256)."""
    lines = [ev("run_started", 0)]
    for n in range(200):
        lines += [ev("node_started", 1, node_id=f"n{n}"), ev("node_passed", 2, node_id=f"n{n}", cost_usd=0.01)]
    return events(*lines)


def test_a_rule_that_raises_is_an_underivable_run_naming_it():
    def failing(run):
        raise ZeroDivisionError("division by zero")

    original, derive.reconcile = derive.reconcile, failing
    try:
        with pytest.raises(UnderivableRun) as raised:
            derive_run(RunFacts(run_id="r1", events=events(ev("run_started", 0))))
    finally:
        derive.reconcile = original
    assert raised.value.reason.startswith(f"{RULE_FAILED}ZeroDivisionError: division by zero")
    assert isinstance(raised.value.__cause__, ZeroDivisionError)


def test_what_derivation_calls_out_to_fails_as_it_failed(monkeypatch):
    monkeypatch.setattr(reconcile, "DRAIN_ROWS", 10)
    stream = _long_stream()

    def sink(finished, scrub):
        raise sqlite3.OperationalError("database or disk is full")

    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        derive_run(RunFacts(run_id="r1", events=stream, sink=sink))

    def source():
        yield from stream[:5]
        raise sqlite3.DatabaseError("database disk image is malformed")

    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        derive_run(RunFacts(run_id="r1", events=source()))

    def lookup(node_id):
        raise sqlite3.OperationalError("no such table: events")

    # A snapshot record older than the node's recent terminals: the others are looked up.
    fails = [ev("run_started", 0)]
    for round_ in range(1, reconcile.RECENT_TERMINALS + 2):
        fails += [ev("node_started", round_, node_id="a", round=round_),
                  ev("node_failed", round_, node_id="a", round=round_, session_id=f"s{round_}")]
    state = {"schema": 3, "run_id": "r1", "graph": graph("a"),
             "nodes": {"a": {"verdict": "FAIL", "round": 1, "session_id": "s1"}}}
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        derive_run(RunFacts(run_id="r1", events=events(*fails), files={"state.json": json.dumps(state)},
                            terminal_lookup=lookup))


def test_running_out_of_memory_is_never_one_runs_problem(monkeypatch):
    def failing(run):
        raise MemoryError

    monkeypatch.setattr(derive, "reconcile", failing)
    with pytest.raises(MemoryError):
        derive_run(RunFacts(run_id="r1", events=events(ev("run_started", 0))))


# -- a runner stream ----------------------------------------------------------------


def _invocation_line(event: str, second: int, **fields) -> bytes:
    line = {"ts": f"2024-05-01T10:00:{second:02d}.000Z", "role": "bulldozer", "milestone": "M1", "event": event,
            **fields}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def _paired(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT s.path, i.outcome, i.start_line, i.end_line FROM invocations i JOIN streams s ON s.id = i.file_pk "
            "ORDER BY s.path, i.seq"))]


def _pairing_fails_on(second: int, monkeypatch) -> None:
    """From here on pairing raises on an end line written at ``second``."""
    original = invocations.is_recover_end

    def failing(line):
        if line.ts == f"2024-05-01T10:00:{second:02d}.000Z":
            raise KeyError("milestone")
        return original(line)

    monkeypatch.setattr(invocations, "is_recover_end", failing)


def test_a_runner_stream_a_rule_fails_on_is_a_problem_and_the_other_streams_are_paired(db_url, tmp_path,
                                                                                     monkeypatch):
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    bad.write_bytes(_invocation_line("start", 1) + _invocation_line("end", 2, status="DONE", duration_ms=1000))
    good.write_bytes(_invocation_line("start", 3))
    engine = open_ledger(db_url)
    reason = (f"{derive.STREAM_RULE_FAILED}KeyError: 'milestone'; its invocations are those of its lines before, "
              "until a release pairs them")
    try:
        sync(engine, [], invocation_files=[str(bad)])
        assert _paired(engine) == [(str(bad), "paired", 1, 2)]
        with open(bad, "ab") as f:  # appended while the rule fails on the stream
            f.write(_invocation_line("end", 4, status="DONE", duration_ms=5))
        with monkeypatch.context() as m:
            _pairing_fails_on(4, m)
            report = sync(engine, [], invocation_files=[str(bad), str(good)])
            assert [(p.path, p.offset, p.reason) for p in report.problems] == [(str(bad), 0, reason)]
            # Its rows are those of its lines before; the stream after it is paired.
            assert _paired(engine) == [(str(bad), "paired", 1, 2), (str(good), "dangling", 1, None)]
            again = sync(engine, [], invocation_files=[str(bad), str(good)])  # read again, recorded once
            assert [p.reason for p in again.problems] == [reason]
            assert _problems(engine) == [(str(bad), 0, reason, False)]
        fixed = sync(engine, [], invocation_files=[str(bad), str(good)])  # the release that fixes the rule
        assert fixed.problems == []
        assert _paired(engine) == [(str(bad), "paired", 1, 2), (str(bad), "unmatched_end", None, 3),
                                   (str(good), "dangling", 1, None)]
        assert _problems(engine) == [(str(bad), 0, reason, True)]
    finally:
        engine.dispose()
