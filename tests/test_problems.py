"""Problems have a lifecycle, and status/node state are composed at query time, on real
run directories synced into real ledgers (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.errors import BadArgument
from omg_ledger.reports.audit import audit_report
from omg_ledger.reports.homes import list_homes
from omg_ledger.reports.problems import list_problems
from omg_ledger.reports.runs import list_runs, show_run
from omg_ledger.sync import Home, sync

from .builders import age_tree
from .cli_checks import one_line_error
from .test_cost import NOW, ev, passed, state, t, write_run

RUN = "20261129-100000.000000001-1"
OTHER_RUN = "20261129-110000.000000001-1"


def _sync(engine, home, label="hand"):
    sync(engine, [Home.from_path(str(home), label)])


def _clean(home, run_id=RUN):
    return write_run(home, run_id, [
        ev(run_id, t("10:00:00"), "run_started"),
        ev(run_id, t("10:00:01"), "node_started", node_id="a"),
        passed(run_id, t("10:00:02"), "a", 0.01, provenance="verified"),
        ev(run_id, t("10:00:03"), "run_finished", outcome="passed"),
    ], state(run_id, "g", {"a": {"verdict": "PASS", "cost_usd": 0.01, "provenance": "verified"}}))


def _rewrite(path, text: str) -> None:
    """Replace a file the way the engine does (temp file + rename), with a new mtime."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    info = os.stat(path)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 2_000_000_000))


def test_corrupt_state_json_is_a_problem_never_a_fail_and_resolves_when_fixed(db_url, tmp_path):
    home = tmp_path / "home"
    run_dir = _clean(home)
    good = (run_dir / "state.json").read_text()
    (run_dir / "state.json").write_text('{"schema": 3, "nodes": {')  # torn mid-write
    engine = open_ledger(db_url)
    _sync(engine, home)
    [run] = list_runs(engine)
    assert run["status"] == "PASS"  # the stream says passed; the unreadable file is the reader's damage
    [problem] = list_problems(engine)
    assert problem["path"] == str(run_dir / "state.json") and problem["open"] is True
    assert audit_report(engine, now=NOW)["attention"] == ["1 open input problem(s)"]

    _sync(engine, home)  # unchanged: skipped by the stat-only check, the problem stays open
    assert [p["open"] for p in list_problems(engine)] == [True]

    _rewrite(run_dir / "state.json", good)
    _sync(engine, home)
    assert list_problems(engine) == []
    [resolved] = list_problems(engine, include_resolved=True)
    assert resolved["open"] is False and resolved["resolved_at"] is not None
    assert audit_report(engine, now=NOW)["needs_attention"] is False

    _rewrite(run_dir / "state.json", '{"schema": 3, "nodes": {')  # broken again: open again
    _sync(engine, home)
    assert [p["open"] for p in list_problems(engine)] == [True]


def test_a_stream_problem_resolves_only_when_the_stream_is_read_again_from_the_start(sqlite_url, tmp_path):
    home = tmp_path / "home"
    run_dir = _clean(home)
    lines = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "events.jsonl").write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    engine = open_ledger(sqlite_url)
    _sync(engine, home)
    assert [p["path"] for p in list_problems(engine)] == [str(run_dir / "events.jsonl")]
    with open(run_dir / "events.jsonl", "a") as fh:  # read on from the checkpoint: the bad line is not re-read
        fh.write(json.dumps(ev(RUN, t("10:00:04"), "node_started", node_id="late")) + "\n")
    _sync(engine, home)
    assert [p["open"] for p in list_problems(engine)] == [True]
    _rewrite(run_dir / "events.jsonl", "".join(lines))  # a new file without the bad line
    _sync(engine, home)
    assert list_problems(engine) == []


def test_a_runs_problems_end_when_its_directory_is_removed_and_its_history_stays(db_url, tmp_path):
    """The cause of a problem in a run's files is gone with its directory: nothing is left
    to fix, so audit stops asking (the run stays, marked gone; the problem stays as history)."""
    import shutil

    home = tmp_path / "home"
    run_dir = _clean(home)
    _clean(home, OTHER_RUN)
    lines = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "events.jsonl").write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    engine = open_ledger(db_url)
    _sync(engine, home)
    assert [(p["path"], p["open"]) for p in list_problems(engine)] == [(str(run_dir / "events.jsonl"), True)]
    shutil.rmtree(run_dir)
    _sync(engine, home)
    assert {r["run_id"]: r["gone"] for r in list_runs(engine)} == {RUN: True, OTHER_RUN: False}
    assert list_problems(engine) == []
    [kept] = list_problems(engine, include_resolved=True)
    assert kept["run_id"] == RUN and kept["resolved_at"] is not None
    assert "open input problem(s)" not in " ".join(audit_report(engine, now=NOW)["attention"])


def _gone_for_now(home):
    """The home's directory moved away (a disk not mounted, say): its path names nothing."""
    away = home.with_name(home.name + ".away")
    home.rename(away)
    return away


def test_a_known_home_gone_missing_is_a_problem_until_it_is_back(sqlite_url, tmp_path):
    home = tmp_path / "home"
    _clean(home)
    engine = open_ledger(sqlite_url)
    _sync(engine, home)
    away = _gone_for_now(home)
    _sync(engine, home)
    assert [p["reason"] for p in list_problems(engine)] == ["home directory does not exist or is not a directory"]
    assert len(list_runs(engine)) == 1  # its runs stay, as they were
    away.rename(home)
    _sync(engine, home)
    assert list_problems(engine) == [] and len(list_problems(engine, include_resolved=True)) == 1


def test_a_known_home_whose_runs_dir_is_missing_keeps_its_runs_until_it_is_back(sqlite_url, tmp_path):
    """A home that is a mount point is an empty directory while its disk is not mounted:
    runs/ is not there. That is damage, as a home gone missing is: its runs are not
    recorded gone (each would flip back on the next mount), the problem says so, and it
    resolves once runs/ is back; an empty runs/ is every run gone, as the README says."""
    home = tmp_path / "home"
    _clean(home)
    _clean(home, OTHER_RUN)
    engine = open_ledger(sqlite_url)
    _sync(engine, home)
    runs_dir = home / "runs"
    away = runs_dir.rename(tmp_path / "runs.away")
    _sync(engine, home)
    [problem] = list_problems(engine)
    assert problem["path"] == str(runs_dir) and problem["reason"].startswith("runs/ does not exist")
    assert {r["run_id"]: r["gone"] for r in list_runs(engine)} == {RUN: False, OTHER_RUN: False}
    assert "open input problem(s)" in " ".join(audit_report(engine, now=NOW)["attention"])
    away.rename(runs_dir)
    _sync(engine, home)
    assert list_problems(engine) == [] and len(list_problems(engine, include_resolved=True)) == 1
    assert {r["run_id"]: r["gone"] for r in list_runs(engine)} == {RUN: False, OTHER_RUN: False}
    # Removed on purpose: an empty runs/ says every run is gone.
    runs_dir.rename(away)
    runs_dir.mkdir()
    _sync(engine, home)
    assert {r["run_id"]: r["gone"] for r in list_runs(engine)} == {RUN: True, OTHER_RUN: True}
    assert list_problems(engine) == []


def test_a_home_without_runs_dir_that_holds_no_run_is_no_problem(sqlite_url, tmp_path):
    """oh-my-graph makes runs/ with its first run: a home before that, or one whose runs are
    all gone, has nothing to keep."""
    home = tmp_path / "home"
    home.mkdir()
    engine = open_ledger(sqlite_url)
    _sync(engine, home)
    assert list_problems(engine, include_resolved=True) == [] and list_runs(engine) == []


def test_a_home_never_indexed_that_does_not_exist_is_refused(sqlite_url, tmp_path):
    """A mistyped --home or OMG_HOME: a usage error, no home row, no problem recorded (a
    cron job would otherwise sync a home that is not there, exit 0, for ever)."""
    engine = open_ledger(sqlite_url)
    with pytest.raises(BadArgument, match="does not exist and this ledger has never indexed a home there"):
        _sync(engine, tmp_path / "typo")
    assert list_homes(engine) == [] and list_problems(engine, include_resolved=True) == []
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", sqlite_url,
                             "--home", str(tmp_path / "typo")], capture_output=True, text=True, timeout=120)
    assert one_line_error(result, 2).endswith("check --home or OMG_HOME (nothing was indexed)")
    assert list_homes(engine) == []
    # A file where the home was meant: refused alike, and said as it is.
    (tmp_path / "a-file").write_text("not a home")
    with pytest.raises(BadArgument, match=f"home directory {tmp_path / 'a-file'} is not a directory and this ledger"):
        _sync(engine, tmp_path / "a-file")
    assert list_homes(engine) == []


def test_a_first_sync_of_a_home_that_does_not_exist_creates_no_ledger(tmp_path):
    """The first sync into a new SQLite ledger, with a mistyped --home: refused (exit 2)
    before the ledger or its directory is made, so a later `runs` says there is no
    ledger instead of listing none."""
    db = tmp_path / "data" / "omg-ledger" / "ledger.sqlite"
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db),
                             "--home", str(tmp_path / "typo")], capture_output=True, text=True, timeout=120)
    assert one_line_error(result, 2).endswith("check --home or OMG_HOME (nothing was indexed)")
    assert os.listdir(tmp_path) == []
    runs = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "runs", "--db", str(db)],
                          capture_output=True, text=True, timeout=120)
    assert one_line_error(runs, 3).startswith(f"omg-ledger: error: no ledger at {db}")


def test_problems_command(sqlite_url, tmp_path):
    engine = open_ledger(sqlite_url)
    home = tmp_path / "nowhere"
    _clean(home)
    _sync(engine, home)
    away = _gone_for_now(home)
    _sync(engine, home)
    runner = CliRunner()
    listed = runner.invoke(main, ["problems", "--db", sqlite_url])
    assert listed.exit_code == 0 and "[open]" in listed.output and "does not exist" in listed.output
    away.rename(home)
    _sync(engine, home)
    assert runner.invoke(main, ["problems", "--db", sqlite_url]).output.strip() == "no open input problems"
    doc = json.loads(runner.invoke(main, ["problems", "--db", sqlite_url, "--all", "--json"]).output)
    assert [(p["open"], p["byte_offset"]) for p in doc] == [(False, 0)]


def test_a_node_left_running_in_an_abandoned_leg_is_interrupted_and_its_call_unrecorded(db_url, tmp_path):
    home = tmp_path / "home"
    run_dir = write_run(home, RUN, [
        ev(RUN, t("10:00:00"), "run_started"),
        ev(RUN, t("10:00:01"), "node_started", node_id="a"),
        passed(RUN, t("10:00:02"), "a", 0.01),
        ev(RUN, t("10:00:03"), "node_started", node_id="b"),  # killed -9 while b's call runs
    ], state(RUN, "g", {"a": {"verdict": "PASS", "cost_usd": 0.01}, "b": {"verdict": ""}}))
    (run_dir / "resume.lock").write_text(f"oh-my-graph-lock 1\n{2**22 + 17}\n")  # nobody holds it: dead leg
    engine = open_ledger(db_url)
    _sync(engine, home)
    detail = show_run(engine, RUN)
    assert detail["status"] == "ABANDONED"
    assert {n["node_id"]: n["state"] for n in detail["nodes"]} == {"a": "settled", "b": "interrupted"}
    # counted like a killed call in a leg a later leg followed (one, not zero)
    assert detail["unrecorded_attempts"] == 1
    assert [n["unrecorded_attempts"] for n in detail["nodes"]] == [0, 1]
    [run] = list_runs(engine)
    assert run["unrecorded_attempts"] == 1
    report = audit_report(engine, now=NOW)
    assert [a["interrupted_nodes"] for a in report["abandoned"]] == [["b"]]
    assert report["unknown_cost"]["unrecorded_attempts"] == 1

    # The same killed call in a leg that a later leg followed: the same count.
    other = "20261129-110000.000000001-1"
    write_run(home, other, [
        ev(other, t("11:00:00"), "run_started"),
        ev(other, t("11:00:01"), "node_started", node_id="a"),
        passed(other, t("11:00:02"), "a", 0.01),
        ev(other, t("11:00:03"), "node_started", node_id="b"),
        ev(other, t("11:05:00"), "run_started"),
        ev(other, t("11:05:01"), "node_started", node_id="b"),
        passed(other, t("11:05:02"), "b", 0.02),
        ev(other, t("11:05:03"), "run_finished", outcome="passed"),
    ], state(other, "g", {"a": {"verdict": "PASS", "cost_usd": 0.01}, "b": {"verdict": "PASS", "cost_usd": 0.02}}))
    _sync(engine, home)
    assert show_run(engine, other)["unrecorded_attempts"] == 1


def test_abandoned_runs_list_their_interrupted_nodes_and_since_counts_only_the_window_s_killed_calls(
        db_url, tmp_path):
    # Two dead legs (nobody holds resume.lock): an older run that left b and c running,
    # and a newer one that left x. `since` never hides an orphan, but only the newer run's
    # killed call falls in a window that starts between them.
    home = tmp_path / "home"
    older, newer = RUN, "20261129-120000.000000001-1"
    for run_id, hour, left in ((older, "10", ["c", "b"]), (newer, "12", ["x"])):
        stream = [ev(run_id, t(f"{hour}:00:00"), "run_started")]
        stream += [ev(run_id, t(f"{hour}:00:0{n + 1}"), "node_started", node_id=node) for n, node in enumerate(left)]
        run_dir = write_run(home, run_id, stream, state(run_id, "g", {node: {"verdict": ""} for node in left}))
        (run_dir / "resume.lock").write_text(f"oh-my-graph-lock 1\n{2**22 + 17}\n")
    engine = open_ledger(db_url)
    _sync(engine, home)
    listed = {r["run_id"]: (r["status"], r["unrecorded_attempts"]) for r in list_runs(engine)}
    assert listed == {older: ("ABANDONED", 2), newer: ("ABANDONED", 1)}
    everything = audit_report(engine, now=NOW)
    window = audit_report(engine, since="2026-11-29T11:00:00Z", now=NOW)
    for report in (everything, window):
        assert [(a["run_id"], a["interrupted_nodes"]) for a in report["abandoned"]] == [(newer, ["x"]),
                                                                                         (older, ["b", "c"])]
    assert everything["unknown_cost"]["unrecorded_attempts"] == 3
    assert window["unknown_cost"]["unrecorded_attempts"] == 1


def test_the_last_leg_decides_why_a_run_paused(db_url, tmp_path):
    # Leg 1 hit a session limit; leg 2 (the resume) paused at gate g: it waits at the gate.
    home = tmp_path / "home"
    write_run(home, RUN, [
        ev(RUN, t("10:00:00"), "run_started"),
        ev(RUN, t("10:00:01"), "node_started", node_id="a"),
        ev(RUN, t("10:00:02"), "run_finished", outcome="paused",
           detail="session limit reached at a: You've hit your limit"),
        ev(RUN, t("15:00:00"), "run_started"),
        ev(RUN, t("15:00:01"), "node_started", node_id="a"),
        passed(RUN, t("15:00:02"), "a", 0.01),
        ev(RUN, t("15:00:03"), "node_started", node_id="g"),
        ev(RUN, t("15:00:04"), "gate_paused", node_id="g"),
        ev(RUN, t("15:00:05"), "run_finished", outcome="paused", detail="paused at gate g"),
    ], state(RUN, "g", {"a": {"verdict": "PASS", "cost_usd": 0.01}, "g": {"verdict": ""}}, gate={"paused_at": "g"}))
    engine = open_ledger(db_url)
    _sync(engine, home)
    [run] = list_runs(engine)
    detail = show_run(engine, RUN)
    paused = audit_report(engine, now=NOW)["paused"]
    assert (run["paused_for"], detail["paused_for"]) == ("gate", "gate")
    assert "--approve g" in run["hint"] and run["hint"] == detail["hint"]
    assert [p["run_id"] for p in paused["gate"]] == [RUN] and paused["session_limit"] == []


def test_a_symlink_in_runs_resolves_when_removed_and_a_skipped_run_keeps_its_problems(sqlite_url, tmp_path):
    home = tmp_path / "home"
    run_dir = _clean(home)
    (run_dir / "state.json").write_text("{torn")
    (home / "runs" / "elsewhere").symlink_to(tmp_path)
    engine = open_ledger(sqlite_url)
    _sync(engine, home)
    assert sorted(p["path"] for p in list_problems(engine)) == sorted([str(home / "runs" / "elsewhere"),
                                                                      str(run_dir / "state.json")])
    (home / "runs" / "elsewhere").unlink()
    _sync(engine, home)  # the run is unchanged and skipped: its state.json problem stays open
    assert [p["path"] for p in list_problems(engine)] == [str(run_dir / "state.json")]


# -- every kind of problem resolves once its cause is gone, as a cold sync would show ------------


def _open_problems(engine) -> list[tuple[str, str]]:
    return [(p["path"], p["reason"]) for p in list_problems(engine) if p["open"]]


def test_a_stream_that_could_not_be_opened_resolves_once_it_is_read_whole(db_url, tmp_path):
    home = tmp_path / "home"
    run_dir = _clean(home)
    stream = run_dir / "events.jsonl"
    lines = stream.read_bytes()
    stream.unlink()
    os.mkfifo(stream)  # not a regular file: never opened
    engine = open_ledger(db_url)
    _sync(engine, home)
    assert [path for path, _ in _open_problems(engine)] == [str(stream)]
    stream.unlink()
    stream.write_bytes(lines)
    _sync(engine, home)
    _sync(engine, home)
    # Read from its first byte now: the problem is not seen again, as a cold sync shows.
    assert _open_problems(engine) == []
    assert audit_report(engine)["problems"] == []
    [run] = list_runs(engine)
    assert (run["status"], run["cost_nano_usd"]) == ("PASS", 10_000_000)


def test_a_plan_problem_resolves_when_its_cause_is_gone(db_url, tmp_path):
    home = tmp_path / "home"
    _clean(home)
    plan = home / "plans" / "20261129-095900.000000001-1"
    plan.mkdir(parents=True)
    graph = plan / "graph.json"
    os.mkfifo(graph)
    engine = open_ledger(db_url)
    _sync(engine, home)
    assert [path for path, _ in _open_problems(engine)] == [str(graph)]
    graph.unlink()
    graph.write_text(json.dumps({"name": "planned", "nodes": [{"id": "a"}]}))
    _sync(engine, home)
    assert _open_problems(engine) == []
    # And nothing is left for the next sync, which finds nothing to do, to resolve.
    _sync(engine, home)
    assert _open_problems(engine) == []


def test_the_no_op_sync_leaves_a_plan_problem_to_the_full_sync_to_resolve(sqlite_url, tmp_path):
    home = tmp_path / "home"
    _clean(home)
    plan = home / "plans" / "20261129-095900.000000001-1"
    plan.mkdir(parents=True)
    os.mkfifo(plan / "graph.json")
    age_tree(home)  # old mtimes, as in a real home: the no-op check trusts them
    runner = CliRunner()
    assert runner.invoke(main, ["sync", "--db", sqlite_url, "--home", str(home)]).exit_code == 0
    assert len(_open_problems(open_ledger(sqlite_url))) == 1
    (plan / "graph.json").unlink()  # no plan row changes (a FIFO was no graph.json), no run does
    old = (home / "plans").stat().st_mtime
    os.utime(plan, (old, old))  # (only the plan's own mtime: a run file's ctime would send the sync the full way)
    assert runner.invoke(main, ["sync", "--db", sqlite_url, "--home", str(home)]).exit_code == 0
    assert _open_problems(open_ledger(sqlite_url)) == []


def test_an_invocation_stream_problem_resolves_when_the_file_is_read_whole(db_url, tmp_path):
    runner_dir = tmp_path / "runner"
    runner_dir.mkdir()
    stream = runner_dir / "events.jsonl"
    os.mkfifo(stream)
    engine = open_ledger(db_url)
    sync(engine, [], invocation_files=[str(stream)])
    assert [path for path, _ in _open_problems(engine)] == [str(stream)]
    stream.unlink()
    sync(engine, [], invocation_files=[str(stream)])  # not there (created lazily): nothing wrong with it now
    assert _open_problems(engine) == []
    os.mkfifo(stream)
    sync(engine, [], invocation_files=[str(stream)])
    stream.unlink()
    stream.write_text('{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"m1","event":"start"}\n'
                      'not json\n')
    sync(engine, [], invocation_files=[str(stream)])
    # The FIFO's problem is gone; the bad line, seen in this whole read, is open.
    assert [(path, reason.split(":")[0]) for path, reason in _open_problems(engine)] == [(str(stream), "line 2")]
    stream.write_text('{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"m1","event":"start"}\n')
    sync(engine, [], invocation_files=[str(stream)])  # rewritten shorter: read again from its first byte
    assert _open_problems(engine) == []


def test_a_first_line_longer_than_the_longest_line_stays_a_problem_while_it_grows(db_url, tmp_path):
    """Reading waits at byte 0 while the runaway line is scanned: that is no re-read from the
    first byte, and its problem (reported once, when first seen) stays open."""
    home = tmp_path / "home"
    run_dir = home / "runs" / RUN
    run_dir.mkdir(parents=True)
    runner = tmp_path / "runner" / "events.jsonl"
    runner.parent.mkdir()
    for stream in (run_dir / "events.jsonl", runner):
        stream.write_bytes(b"x" * 2_000_000)  # over the 1 MiB line cap, no newline yet
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "hand")], invocation_files=[str(runner)])
    assert sorted(path for path, _ in _open_problems(engine)) == sorted([str(run_dir / "events.jsonl"), str(runner)])
    for stream in (run_dir / "events.jsonl", runner):
        with open(stream, "ab") as f:
            f.write(b"x" * 1000)
    sync(engine, [Home.from_path(str(home), "hand")], invocation_files=[str(runner)])
    assert sorted(path for path, _ in _open_problems(engine)) == sorted([str(run_dir / "events.jsonl"), str(runner)])


def test_a_moved_runner_stream_whose_problem_is_recorded_where_it_moved_to(db_url, tmp_path):
    """Adopting a stream at a path that holds a resolved problem the same as one it brings:
    that one is open again (a problem is its path, offset and reason), never a unique-key error."""
    good = '{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"m1","event":"start"}\n'
    a, b, c = (tmp_path / name for name in ("a.jsonl", "b.jsonl", "c.jsonl"))
    engine = open_ledger(db_url)

    def sync_stream(path) -> None:
        sync(engine, [], invocation_files=[str(path)])

    b.write_text("garbage\n")
    sync_stream(b)
    b.write_text(good)
    sync_stream(b)  # read from its first byte again (rewritten shorter): b's problem resolved
    b.rename(c)
    sync_stream(c)  # the stream, adopted at c
    a.write_text("garbage\n")
    sync_stream(a)
    a.rename(b)
    sync_stream(b)  # a's stream adopted at b, where the same problem was resolved
    assert [path for path, _ in _open_problems(engine)] == [str(b)]


def test_a_runner_stream_with_a_long_path_resolves_its_problems(db_url, tmp_path):
    """Paths over the ledger's bound are stored shortened (bounds.bounded_path): the stream's
    problems are found under that form when the file is read whole again."""
    deep = tmp_path
    while len(str(deep)) < 1300:
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    stream = deep / "events.jsonl"
    stream.write_text("garbage\n")
    engine = open_ledger(db_url)
    sync(engine, [], invocation_files=[str(stream)])
    assert len(_open_problems(engine)) == 1
    stream.write_text('{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"m1","event":"start"}\n')
    sync(engine, [], invocation_files=[str(stream)])
    assert _open_problems(engine) == []


def test_a_runs_problems_resolve_beside_a_sibling_whose_name_sorts_between(db_url, tmp_path):
    """'<run>-2/…' sorts between '<run>' and '<run>/…': the run's own open problems are still
    found, and resolved once fixed, while the sibling's stay open."""
    home = tmp_path / "home"
    sibling = RUN + "-2"
    for run_id in (RUN, sibling):
        run_dir = _clean(home, run_id)
        (run_dir / "state.json").write_text('{"schema": 3, "nodes": {')
    engine = open_ledger(db_url)
    _sync(engine, home)
    assert len(_open_problems(engine)) == 2
    good = _clean(tmp_path / "good", RUN) / "state.json"
    _rewrite(home / "runs" / RUN / "state.json", good.read_text())
    _sync(engine, home)
    assert [path for path, _ in _open_problems(engine)] == [str(home / "runs" / sibling / "state.json")]
