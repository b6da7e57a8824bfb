"""Status at query time, with real processes holding real locks (ADR 0015)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from omg_ledger.db import open_ledger
from omg_ledger.liveness import Liveness
from omg_ledger.reports.runs import list_runs, show_run
from omg_ledger.status import StatusFacts, derive
from omg_ledger.sync import Home, sync

from .builders import ev, graph, write_run

HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, b"oh-my-graph-lock 1\n%d\n" % os.getpid())
print("held", flush=True)
time.sleep(600)
"""


def hold_lock(run_dir) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir / "resume.lock")], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"held\n"
    return child


def kill9(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def status_of_run(engine, run_id):
    return {r["run_id"]: r for r in list_runs(engine)}[run_id]["status"]


@pytest.fixture
def ledger(tmp_path):
    return open_ledger(str(tmp_path / "ledger.sqlite"))


def test_held_lock_is_running_and_kill9_makes_it_abandoned_without_resync(tmp_path, ledger):
    home = tmp_path / "home"
    run_dir = write_run(home, "run-a", [ev("run_started"), ev("node_started", node_id="slow")],
                        state={"graph": graph("first", "slow"), "nodes": {"first": {"verdict": "PASS"}}})
    child = hold_lock(run_dir)
    try:
        sync(ledger, [Home.from_path(str(home), "h")])
        assert status_of_run(ledger, "run-a") == "RUNNING"
    finally:
        kill9(child)
    # No re-sync: the kernel released the lock when the holder died.
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-a"]
    assert row["status"] == "ABANDONED"
    assert "--retry-failed" in row["hint"] and "may still be running and spending" in row["hint"]


def _planning_run_synced_inside_its_planner_call(tmp_path, ledger):
    """run-p, synced while its planner call runs (PLANNING, its lock held by a real process):
    (its directory, the process holding the lock)."""
    home = tmp_path / "home"
    run_dir = write_run(home, "run-p", [ev("run_started", phase="planning")])
    child = hold_lock(run_dir)
    try:
        sync(ledger, [Home.from_path(str(home), "h")])
        assert status_of_run(ledger, "run-p") == "PLANNING"
    except BaseException:
        kill9(child)
        raise
    return run_dir, child


def test_planning_phase_with_held_lock_is_planning_then_abandoned(tmp_path, ledger):
    _, child = _planning_run_synced_inside_its_planner_call(tmp_path, ledger)
    kill9(child)
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-p"]
    assert row["status"] == "ABANDONED" and "run the graph again" in row["hint"]


def test_missing_lock_file_is_running(tmp_path, ledger):
    home = tmp_path / "home"
    write_run(home, "run-m", [ev("run_started"), ev("node_started", node_id="a")])
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-m") == "RUNNING"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize(("lock", "expected"), [
    (lambda: f"{_dead_pid()}\n", "ABANDONED"),
    (lambda: f"{os.getpid()}\n", "RUNNING"),
    (lambda: "not a pid\n", "RUNNING"),
], ids=["unmarked-dead-pid", "unmarked-live-pid", "unmarked-garbage"])
def test_unmarked_lock_files(tmp_path, ledger, lock, expected):
    home = tmp_path / "home"
    write_run(home, "run-u", [ev("run_started"), ev("node_started", node_id="a")], lock=lock())
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-u") == expected


def test_non_local_filesystem_is_running():
    facts = StatusFacts(any_leg=True, last_leg_open=True, last_leg_phase="run", last_outcome=None,
                        has_snapshot=True, all_nodes_passed=False)
    from omg_ledger import status
    from omg_ledger.liveness import probe_lock

    # statfs injected to answer NFS: the probe reports unknown, and unknown is in flight.
    assert probe_lock("/", fs_type=lambda _path: 0x6969) is Liveness.UNKNOWN
    assert status.derive(facts, Liveness.UNKNOWN) == "RUNNING"


def test_closed_leg_is_never_probed(tmp_path, ledger):
    home = tmp_path / "home"
    write_run(home, "run-c", [ev("run_started"), ev("run_finished", outcome="passed")],
              state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS"}}}, lock="garbage")
    sync(ledger, [Home.from_path(str(home), "h")])
    calls = []
    from omg_ledger.status import status_of

    facts = StatusFacts(True, False, "run", "passed", True, True)
    assert status_of(facts, str(home / "runs" / "run-c"), prober=lambda d: calls.append(d)) == "PASS"
    assert calls == []


STATUS_CASES = [
    ("open leg + free lock", StatusFacts(True, True, "run", None, True, False), Liveness.FREE, "ABANDONED"),
    ("open planning leg + held lock", StatusFacts(True, True, "planning", None, False, False), Liveness.HELD, "PLANNING"),
    ("open leg + unknown lock", StatusFacts(True, True, "run", None, True, False), Liveness.UNKNOWN, "RUNNING"),
    ("closed paused", StatusFacts(True, False, "run", "paused", True, False), Liveness.UNKNOWN, "PAUSED"),
    ("closed, every node PASS", StatusFacts(True, False, "run", "passed", True, True), Liveness.UNKNOWN, "PASS"),
    ("refused plan, no snapshot", StatusFacts(True, False, "planning", "failed", False, False), Liveness.UNKNOWN, "FAIL"),
    ("closed, not all PASS", StatusFacts(True, False, "run", "failed", True, False), Liveness.UNKNOWN, "FAIL"),
    ("said nothing at all", StatusFacts(False, False, None, None, False, False), Liveness.FREE, "NOT-KNOWN-YET"),
]


@pytest.mark.parametrize(("facts", "lock", "expected"), [c[1:] for c in STATUS_CASES], ids=[c[0] for c in STATUS_CASES])
def test_derive(facts, lock, expected):
    assert derive(facts, lock) == expected


def test_empty_stream_is_not_known_yet_never_fail(tmp_path, ledger):
    home = tmp_path / "home"
    run_dir = write_run(home, "run-e", [])
    (run_dir / "resume.lock").write_text("oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-e") == "NOT-KNOWN-YET"


def test_show_accepts_a_unique_prefix_and_lists_ambiguous_candidates(tmp_path, ledger):
    home = tmp_path / "home"
    write_run(home, "20261129-101010.1-1", [ev("run_started"), ev("run_finished", outcome="passed")])
    write_run(home, "20261129-101010.2-1", [ev("run_started"), ev("run_finished", outcome="passed")])
    sync(ledger, [Home.from_path(str(home), "h")])
    assert show_run(ledger, "20261129-101010.2")["run_id"] == "20261129-101010.2-1"
    from omg_ledger.errors import AmbiguousRun

    with pytest.raises(AmbiguousRun, match="20261129-101010.1-1.*20261129-101010.2-1"):
        show_run(ledger, "20261129-1010")


def test_runs_json_over_many_runs_probes_only_open_legs(tmp_path, ledger, monkeypatch):
    home = tmp_path / "home"
    for i in range(200):
        write_run(home, f"closed-{i:03d}", [ev("run_started"), ev("run_finished", outcome="passed")])
    write_run(home, "open-1", [ev("run_started")])
    sync(ledger, [Home.from_path(str(home), "h")])
    probed = []
    import omg_ledger.status as status_module

    real = status_module.probe_lock
    monkeypatch.setattr(status_module, "probe_lock", lambda d: probed.append(d) or real(d))
    monkeypatch.setattr(status_module.status_of, "__defaults__", (status_module.probe_lock, True))
    started = time.monotonic()
    rows = list_runs(ledger)
    assert len(rows) == 201 and time.monotonic() - started < 30
    assert [os.path.basename(p) for p in probed] == ["open-1"]


def test_paused_rows_name_how_to_resume(ledger):
    from .conftest import CORPUS_HOME

    sync(ledger, [Home.from_path(str(CORPUS_HOME), "corpus")])
    rows = {r["run_id"]: r for r in list_runs(ledger, statuses=("PAUSED",))}
    assert set(rows) == {"20261129-181518.826010212-1", "20261129-181524.604560538-1"}
    # s16 stopped at a session limit: resume with --retry-failed once it resets.
    assert "session limit" in rows["20261129-181518.826010212-1"]["hint"]
    assert "--retry-failed" in rows["20261129-181518.826010212-1"]["hint"]
    # s39 stopped at two gates; state.json's gate.paused_at names gate-b, the one to decide.
    assert "--approve gate-b" in rows["20261129-181524.604560538-1"]["hint"]


# -- the status rules live once: the view's CASE and the SQL pre-filter agree with derive --

def _fact_combinations():
    import itertools

    for any_leg, open_, phase, outcome, schema_, has_state, all_passed, paused in itertools.product(
            (False, True), (False, True), (None, "run", "planning"), (None, "passed", "failed", "paused"),
            (None, 3), (False, True), (False, True), (False, True)):
        if schema_ is not None and not has_state:
            continue  # a parsed snapshot was a present state.json
        yield dict(any_leg=any_leg, last_leg_open=open_, last_leg_phase=phase, last_outcome=outcome,
                   snapshot_schema=schema_, has_state=has_state, all_nodes_passed=all_passed,
                   last_detail=None, gate_paused_at=None, stream_paused=paused)


def test_view_ledger_state_and_could_be_agree_with_derive():
    import sqlalchemy as sa

    from omg_ledger.status import STATUSES, could_be, derive
    from omg_ledger.views import LEDGER_STATE_0015

    engine = sa.create_engine("sqlite://")
    rows = list(_fact_combinations())
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE runs (id INTEGER PRIMARY KEY, any_leg BOOLEAN, last_leg_open BOOLEAN, "
                             "last_leg_phase TEXT, last_outcome TEXT, snapshot_schema INTEGER, has_state BOOLEAN, "
                             "all_nodes_passed BOOLEAN, last_detail TEXT, gate_paused_at TEXT, "
                             "stream_paused BOOLEAN)")
        for pk, row in enumerate(rows, 1):
            conn.execute(sa.text("INSERT INTO runs VALUES (:id, :any_leg, :last_leg_open, :last_leg_phase, "
                                 ":last_outcome, :snapshot_schema, :has_state, :all_nodes_passed, NULL, NULL, "
                                 ":stream_paused)"),
                         {"id": pk, **row})
        states = dict(conn.exec_driver_sql(f"SELECT id, {LEDGER_STATE_0015} FROM runs r").all())
        from omg_ledger import schema

        kept = {status: set(conn.execute(sa.select(schema.runs.c.id).where(could_be(status))).scalars())
                for status in STATUSES}
    open_states = {"RUNNING": "OPEN", "PLANNING": "OPEN", "ABANDONED": "OPEN"}
    for pk, row in enumerate(rows, 1):
        facts = StatusFacts.from_row(row)
        for lock in (Liveness.FREE, Liveness.HELD, Liveness.UNKNOWN):
            status = derive(facts, lock)
            assert open_states.get(status, status) == states[pk], row
            assert pk in kept[status], (status, row)


def test_an_unreadable_snapshot_never_turns_a_passed_stream_into_fail():
    unreadable = StatusFacts(True, False, "run", "passed", False, False, snapshot_unreadable=True)
    absent = StatusFacts(True, False, "run", "passed", False, False)
    failed = StatusFacts(True, False, "run", "failed", False, False, snapshot_unreadable=True)
    assert [derive(f, Liveness.UNKNOWN) for f in (unreadable, absent, failed)] == ["PASS", "FAIL", "FAIL"]


def test_a_live_run_copied_into_another_home_is_running_wherever_its_billed_copy_is(tmp_path, db_url):
    # A backup of a live run's directory (same run, same stream: billed once) has a marked
    # lock nobody holds. The backup is synced first and holds as many events, so it is the
    # billed copy; its free lock must not make the run ABANDONED while the live copy's
    # lock is held — every surface reads status through the billed row.
    ledger = open_ledger(db_url)
    live, backup = tmp_path / "live", tmp_path / "backup"
    run_dir = write_run(live, "run-x", [ev("run_started"), ev("node_started", node_id="slow")],
                        state={"graph": graph("first", "slow"), "nodes": {"first": {"verdict": "PASS"}}})
    child = hold_lock(run_dir)
    try:
        shutil.copytree(live, backup)
        sync(ledger, [Home.from_path(str(backup), "backup"), Home.from_path(str(live), "live")])
        row = {r["run_id"]: r for r in list_runs(ledger)}["run-x"]
        assert row["home"] == "backup"  # the case under test: the billed copy is the unheld one
        assert row["status"] == "RUNNING" and row["hint"] is None
        assert [show_run(ledger, "run-x", home)["status"] for home in (None, "backup", "live")] == ["RUNNING"] * 3
    finally:
        kill9(child)
    # Every copy's lock is free now: the run is abandoned, seen from either copy.
    assert status_of_run(ledger, "run-x") == "ABANDONED"
    assert [show_run(ledger, "run-x", home)["status"] for home in (None, "backup", "live")] == ["ABANDONED"] * 3


def test_a_copy_whose_lock_cannot_answer_keeps_the_run_in_flight(tmp_path, ledger):
    # The billed copy's lock is free, but the other copy's lock file is missing: that copy
    # could be where a leg runs (a lock a human deleted), so the doubt reads in flight.
    a, b = tmp_path / "a", tmp_path / "b"
    stream = [ev("run_started"), ev("node_started", node_id="slow")]
    write_run(a, "run-y", stream, lock="oh-my-graph-lock 1\n1\n")
    write_run(b, "run-y", stream)
    sync(ledger, [Home.from_path(str(a), "a"), Home.from_path(str(b), "b")])
    assert {r["run_id"]: r for r in list_runs(ledger)}["run-y"]["home"] == "a"
    assert status_of_run(ledger, "run-y") == "RUNNING"
    (b / "runs" / "run-y" / "resume.lock").write_text("oh-my-graph-lock 1\n1\n")
    assert status_of_run(ledger, "run-y") == "ABANDONED"
    # A copy whose directory is gone can hold no leg: it leaves the answer to the others.
    shutil.rmtree(b / "runs" / "run-y")
    assert status_of_run(ledger, "run-y") == "ABANDONED"


# -- the stored stream facts are as of the last sync; the lock is probed now --

# A leg shaped like the engine's: it takes the flock before its first event and gives it
# back after its last (ADR 0015's ordering invariant). On "finish" it appends the given
# lines, writes state.json, and exits, which releases the lock.
LEG = r"""
import fcntl, os, sys
run_dir, tail, state = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(os.path.join(run_dir, "resume.lock"), os.O_CREAT | os.O_RDWR, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, b"oh-my-graph-lock 1\n%d\n" % os.getpid())
print("held", flush=True)
assert sys.stdin.readline() == "finish\n"
with open(os.path.join(run_dir, "events.jsonl"), "a") as f:
    f.write(tail)
if state:
    with open(os.path.join(run_dir, "state.json"), "w") as f:
        f.write(state)
print("finished", flush=True)
"""


def run_leg(run_dir, tail: list[dict], state: dict | None) -> subprocess.Popen:
    import json

    lines = "".join(json.dumps({**data, "run_id": run_dir.name}) + "\n" for data in tail)
    snapshot = json.dumps({"schema": 3, "run_id": run_dir.name, **state}) if state else ""
    child = subprocess.Popen([sys.executable, "-c", LEG, str(run_dir), lines, snapshot],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "held\n"
    return child


def finish(child: subprocess.Popen) -> None:
    child.stdin.write("finish\n")
    child.stdin.flush()
    assert child.stdout.readline() == "finished\n"
    assert child.wait() == 0


@pytest.mark.parametrize(("tail", "state", "expected"), [
    ([ev("node_passed", 5, node_id="a", verdict="PASS"), ev("run_finished", 6, outcome="passed")],
     {"graph": graph("a"), "nodes": {"a": {"verdict": "PASS"}}}, "PASS"),
    ([ev("node_failed", 5, node_id="a", verdict="FAIL"), ev("run_finished", 6, outcome="failed")],
     {"graph": graph("a"), "nodes": {"a": {"verdict": "FAIL"}}}, "FAIL"),
    ([ev("gate_paused", 5, node_id="a"), ev("run_finished", 6, outcome="paused")], None, "PAUSED"),
], ids=["passed", "failed", "paused"])
def test_a_run_that_finished_after_the_last_sync_is_never_abandoned(tmp_path, db_url, tail, state, expected):
    # Synced while its leg ran; the leg then closed normally and let go of its lock. The
    # ledger still holds "last leg open", and the lock is free now: that is a finished
    # run, not a dead one. The contract's rule (closed leg: the lock is not consulted,
    # PASS needs every graph node PASS in state.json) gives the expected word.
    ledger = open_ledger(db_url)
    home = tmp_path / "home"
    run_dir = write_run(home, "run-f", [ev("run_started"), ev("node_started", 1, node_id="a")])
    child = run_leg(run_dir, tail, state)
    try:
        sync(ledger, [Home.from_path(str(home), "h")])
        assert status_of_run(ledger, "run-f") == "RUNNING"
    finally:
        finish(child)
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-f"]
    assert (row["status"], show_run(ledger, "run-f")["status"]) == (expected, expected)
    assert row["hint"] is None or "ABANDONED" not in row["hint"]
    assert [r["run_id"] for r in list_runs(ledger, statuses=("ABANDONED",))] == []
    assert [r["run_id"] for r in list_runs(ledger, statuses=(expected,))] == ["run-f"]


def test_a_run_killed_after_more_events_than_the_last_sync_saw_is_abandoned(tmp_path, ledger):
    home = tmp_path / "home"
    run_dir = write_run(home, "run-k", [ev("run_started"), ev("node_started", 1, node_id="a")])
    child = hold_lock(run_dir)
    try:
        sync(ledger, [Home.from_path(str(home), "h")])
        with open(run_dir / "events.jsonl", "a") as f:  # the leg went on after the sync...
            f.write('{"schema":3,"ts":"2026-11-29T10:00:05.000000000Z","run_id":"run-k","event":"node_started",'
                    '"node_id":"b"}\n')
    finally:
        kill9(child)  # ...and was killed
    assert status_of_run(ledger, "run-k") == "ABANDONED"


def test_a_run_resumed_after_the_last_sync_saw_its_dead_leg_is_running(tmp_path, ledger):
    # The ledger saw a dead leg (ABANDONED); since then a resume closed nothing but opened
    # a new leg, which holds the lock: the run is in flight.
    home = tmp_path / "home"
    run_dir = write_run(home, "run-r", [ev("run_started"), ev("node_started", 1, node_id="a")],
                        lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-r") == "ABANDONED"
    child = hold_lock(run_dir)
    try:
        with open(run_dir / "events.jsonl", "a") as f:
            f.write('{"schema":3,"ts":"2026-11-29T10:01:00.000000000Z","run_id":"run-r","event":"run_started"}\n')
        assert status_of_run(ledger, "run-r") == "RUNNING"
    finally:
        kill9(child)
    assert status_of_run(ledger, "run-r") == "ABANDONED"


# -- one ledger, several machines: a lock is probed only on the machine its home is on --

def _move_home_to_another_machine(ledger, label: str) -> None:
    # What a second machine syncing into the same PostgreSQL ledger leaves: a home row
    # whose machine is not this one, with a path that may well exist here too (a copy of
    # that home at the same place, the same user's layout).
    with ledger.begin() as conn:
        conn.exec_driver_sql("UPDATE homes SET machine = 'machine:another-one' WHERE label = ?"
                             if ledger.dialect.name == "sqlite" else
                             "UPDATE homes SET machine = 'machine:another-one' WHERE label = %(label)s",
                             (label,) if ledger.dialect.name == "sqlite" else {"label": label})


def test_a_run_of_another_machines_home_is_never_probed_here(tmp_path, db_url):
    # Here, at the path the other machine synced, is a copy whose marked lock nobody holds.
    # That says nothing about the leg on the other machine: its lock cannot be probed from
    # here, which is the "unknown" arm — the open leg reads as in flight, and says why.
    ledger = open_ledger(db_url)
    home = tmp_path / "home"
    write_run(home, "run-m", [ev("run_started"), ev("node_started", 1, node_id="a")], lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-m") == "ABANDONED"  # on its own machine
    _move_home_to_another_machine(ledger, "h")
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-m"]
    shown = show_run(ledger, "run-m")
    assert (row["status"], shown["status"]) == ("RUNNING", "RUNNING")
    assert "another machine" in row["hint"] and row["hint"] == shown["hint"]
    assert list_runs(ledger, statuses=("ABANDONED",)) == []
    assert {n["node_id"]: n["state"] for n in shown["nodes"]} == {"a": "running"}


def _dead_leg_in_two_homes(tmp_path, ledger, run_id: str):
    """Homes a and b, each holding a copy of ``run_id`` whose open leg's lock is free,
    synced; a's copy billed (seen first). Returns the two homes."""
    a, b = tmp_path / "a", tmp_path / "b"
    stream = [ev("run_started"), ev("node_started", 1, node_id="slow")]
    for home in (a, b):
        write_run(home, run_id, stream, lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(a), "a"), Home.from_path(str(b), "b")])
    assert {r["run_id"]: r for r in list_runs(ledger)}[run_id]["home"] == "a"
    return a, b


def test_a_copy_on_another_machine_keeps_the_run_in_flight(tmp_path, ledger):
    # Both copies' locks are free here, but one copy's home is on another machine, where
    # the run may be live: that copy cannot answer, and a copy that cannot answer keeps
    # the run in flight.
    a, b = _dead_leg_in_two_homes(tmp_path, ledger, "run-c")
    assert status_of_run(ledger, "run-c") == "ABANDONED"
    _move_home_to_another_machine(ledger, "b")
    assert status_of_run(ledger, "run-c") == "RUNNING"
    assert show_run(ledger, "run-c")["status"] == "RUNNING"
    # The other machine's copy is not read here: a directory missing at its path here
    # does not make it gone.
    shutil.rmtree(b / "runs" / "run-c")
    assert status_of_run(ledger, "run-c") == "RUNNING"


def test_a_run_whose_directory_is_gone_reads_in_flight_and_says_why(tmp_path, ledger):
    # The ledger saw this run ABANDONED; then its home was moved away. A missing directory
    # is no evidence either way (a moved run's leg may still hold its lock there), so the
    # open leg reads in flight, as the contract's "unknown" arm says — and the row says
    # that the lock could not be probed, instead of passing for a probed RUNNING.
    home = tmp_path / "home"
    write_run(home, "run-g", [ev("run_started"), ev("node_started", 1, node_id="a")], lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-g") == "ABANDONED"
    shutil.move(home, tmp_path / "moved")
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-g"]
    shown = show_run(ledger, "run-g")
    assert (row["status"], shown["status"]) == ("RUNNING", "RUNNING")
    assert "cannot be probed" in row["hint"] and "not there any more" in row["hint"] and row["hint"] == shown["hint"]


def test_a_probed_running_run_has_no_hint(tmp_path, ledger):
    home = tmp_path / "home"
    run_dir = write_run(home, "run-h", [ev("run_started"), ev("node_started", 1, node_id="a")])
    child = hold_lock(run_dir)
    try:
        sync(ledger, [Home.from_path(str(home), "h")])
        row = {r["run_id"]: r for r in list_runs(ledger)}["run-h"]
        assert (row["status"], row["hint"], show_run(ledger, "run-h")["hint"]) == ("RUNNING", None, None)
    finally:
        kill9(child)


def test_a_live_run_copied_elsewhere_that_finished_after_the_last_sync_is_not_abandoned(tmp_path, ledger):
    # The backup is the billed copy (synced first); the live copy's leg then closed and
    # let go of its lock. Both locks are free now, the backup's stream never moves, and
    # the live copy's stream says the run finished: it PASSed.
    live, backup = tmp_path / "live", tmp_path / "backup"
    run_dir = write_run(live, "run-x", [ev("run_started"), ev("node_started", 1, node_id="a")])
    child = run_leg(run_dir, [ev("node_passed", 5, node_id="a", verdict="PASS"), ev("run_finished", 6, outcome="passed")],
                    {"graph": graph("a"), "nodes": {"a": {"verdict": "PASS"}}})
    try:
        shutil.copytree(live, backup)
        sync(ledger, [Home.from_path(str(backup), "backup"), Home.from_path(str(live), "live")])
        row = {r["run_id"]: r for r in list_runs(ledger)}["run-x"]
        assert (row["home"], row["status"]) == ("backup", "RUNNING")
    finally:
        finish(child)
    assert status_of_run(ledger, "run-x") == "PASS"
    assert [show_run(ledger, "run-x", home)["status"] for home in (None, "backup", "live")] == ["PASS"] * 3


def test_a_run_whose_billed_copy_is_gone_is_judged_by_the_copies_still_here(tmp_path, ledger):
    # The billed copy's directory was deleted after the sync; another copy is still here,
    # and its lock is free: the gone copy says nothing, the copy here says the leg is dead.
    a, b = _dead_leg_in_two_homes(tmp_path, ledger, "run-z")
    shutil.rmtree(a / "runs" / "run-z")
    assert status_of_run(ledger, "run-z") == "ABANDONED"
    assert show_run(ledger, "run-z")["status"] == "ABANDONED"
    # ...and a copy here whose lock is held keeps it in flight.
    child = hold_lock(b / "runs" / "run-z")
    try:
        assert status_of_run(ledger, "run-z") == "RUNNING"
        assert show_run(ledger, "run-z")["status"] == "RUNNING"
    finally:
        kill9(child)
    # With no copy left here, nothing answers: in flight on the stream alone.
    shutil.rmtree(b / "runs" / "run-z")
    assert status_of_run(ledger, "run-z") == "RUNNING"


# -- a settled run resumed since the last sync: its stream says so before any sync --

def _append(run_dir, *lines: dict) -> None:
    import json

    with open(run_dir / "events.jsonl", "a") as f:
        for data in lines:
            f.write(json.dumps({**data, "run_id": run_dir.name}, separators=(",", ":")) + "\n")


def test_a_paused_run_resumed_after_the_last_sync_is_running_then_passes(tmp_path, db_url):
    # The ledger saw the run paused at its gate. `oh-my-graph resume --approve` takes the
    # lock, opens a leg (run_started) and, at its end, passes the gate and writes state.json.
    # The engine's `runs list` reads RUNNING while it runs and PASS after, with no sync.
    ledger = open_ledger(db_url)
    home = tmp_path / "home"
    run_dir = write_run(home, "run-p", [ev("run_started"), ev("node_started", 1, node_id="g"),
                                        ev("gate_paused", 2, node_id="g"),
                                        ev("run_finished", 3, outcome="paused")],
                        state={"graph": graph("g", g="gate"), "nodes": {}, "gate": {"paused_at": "g"}},
                        lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-p") == "PAUSED"
    child = run_leg(run_dir, [ev("gate_approved", 11, node_id="g"), ev("node_passed", 12, node_id="g"),
                              ev("run_finished", 13, outcome="passed")],
                    {"graph": graph("g", g="gate"), "nodes": {"g": {"verdict": "PASS", "provenance": "approved"}}})
    try:
        _append(run_dir, ev("run_started", 10), ev("node_started", 10, node_id="g"))
        row = {r["run_id"]: r for r in list_runs(ledger)}["run-p"]
        assert (row["status"], row["paused_for"], row["hint"]) == ("RUNNING", None, None)
        assert show_run(ledger, "run-p")["status"] == "RUNNING"
        assert [r["run_id"] for r in list_runs(ledger, statuses=("RUNNING",))] == ["run-p"]
        assert list_runs(ledger, statuses=("PAUSED",)) == []
    finally:
        finish(child)
    assert (status_of_run(ledger, "run-p"), show_run(ledger, "run-p")["status"]) == ("PASS", "PASS")
    assert [r["run_id"] for r in list_runs(ledger, statuses=("PASS",))] == ["run-p"]
    assert list_runs(ledger, statuses=("PAUSED",)) == list_runs(ledger, statuses=("RUNNING",)) == []


def test_a_failed_run_retried_after_the_last_sync_and_killed_is_abandoned(tmp_path, ledger):
    # `resume --retry-failed` of a FAIL the ledger saw, then kill -9 of that leg: the leg
    # it opened holds no lock any more, so the run is ABANDONED (and a resume is the hint).
    home = tmp_path / "home"
    run_dir = write_run(home, "run-q", [ev("run_started"), ev("node_started", 1, node_id="a"),
                                        ev("node_failed", 2, node_id="a", verdict="FAIL", cost_usd=0.5),
                                        ev("run_finished", 3, outcome="failed")],
                        state={"graph": graph("a"), "nodes": {"a": {"verdict": "FAIL", "cost_usd": 0.5}}},
                        lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-q") == "FAIL"
    child = hold_lock(run_dir)
    try:
        _append(run_dir, ev("run_started", 10), ev("node_started", 11, node_id="a"))
        assert status_of_run(ledger, "run-q") == "RUNNING"
        assert list_runs(ledger, statuses=("FAIL",)) == []
    finally:
        kill9(child)
    row = {r["run_id"]: r for r in list_runs(ledger, statuses=("ABANDONED",))}["run-q"]
    assert "oh-my-graph resume run-q" in row["hint"]
    assert show_run(ledger, "run-q")["status"] == "ABANDONED"


def test_a_settled_run_of_another_machines_home_is_not_read_here(tmp_path, ledger):
    # Its path here names another directory, or none: what is there says nothing of it.
    home = tmp_path / "home"
    run_dir = write_run(home, "run-o", [ev("run_started"), ev("run_finished", 3, outcome="failed")],
                        state={"graph": graph("a"), "nodes": {"a": {"verdict": "FAIL"}}})
    sync(ledger, [Home.from_path(str(home), "h")])
    _move_home_to_another_machine(ledger, "h")
    _append(run_dir, ev("run_started", 10))
    assert (status_of_run(ledger, "run-o"), show_run(ledger, "run-o")["status"]) == ("FAIL", "FAIL")


def test_a_run_resumed_in_the_home_of_its_unbilled_copy_is_running_there(tmp_path, ledger):
    # A live home and its backup, both synced while the run was paused: equal copies, the
    # backup billed (seen first). The resume happens in the live home, whose stream then
    # holds more than the billed copy's: the run is where that copy says.
    live, backup = tmp_path / "live", tmp_path / "backup"
    paused = [ev("run_started"), ev("node_started", 1, node_id="g"), ev("gate_paused", 2, node_id="g"),
              ev("run_finished", 3, outcome="paused")]
    state = {"graph": graph("g", g="gate"), "nodes": {}, "gate": {"paused_at": "g"}}
    run_dir = write_run(live, "run-b", paused, state=state, lock="oh-my-graph-lock 1\n1\n")
    shutil.copytree(live, backup)
    sync(ledger, [Home.from_path(str(backup), "backup"), Home.from_path(str(live), "live")])
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-b"]
    assert (row["home"], row["status"]) == ("backup", "PAUSED")
    child = run_leg(run_dir, [ev("node_passed", 12, node_id="g"), ev("run_finished", 13, outcome="passed")],
                    {"graph": graph("g", g="gate"), "nodes": {"g": {"verdict": "PASS", "provenance": "approved"}}})
    try:
        _append(run_dir, ev("run_started", 10), ev("gate_approved", 11, node_id="g"))
        assert status_of_run(ledger, "run-b") == "RUNNING"
        assert [show_run(ledger, "run-b", home)["status"] for home in (None, "backup", "live")] == ["RUNNING"] * 3
        assert [r["run_id"] for r in list_runs(ledger, statuses=("RUNNING",))] == ["run-b"]
    finally:
        finish(child)
    assert status_of_run(ledger, "run-b") == "PASS"


def test_a_copy_catching_up_on_what_the_billed_copy_holds_says_nothing_new(tmp_path, ledger):
    # The billed copy saw two legs (paused at the gate, then a retry that failed); the
    # backup was synced after the first. A copy into the backup that has written only the
    # second leg's first line so far holds fewer lines than the billed copy: its open leg
    # (its lock free) is not the run's, which is still FAIL.
    a, b = tmp_path / "a", tmp_path / "b"
    leg1 = [ev("run_started"), ev("node_started", 1, node_id="g"), ev("gate_paused", 2, node_id="g"),
            ev("run_finished", 3, outcome="paused")]
    leg2 = [ev("run_started", 10), ev("node_started", 11, node_id="g"),
            ev("node_failed", 12, node_id="g", verdict="FAIL"), ev("run_finished", 13, outcome="failed")]
    write_run(a, "run-c", leg1 + leg2, state={"graph": graph("g"), "nodes": {"g": {"verdict": "FAIL"}}},
              lock="oh-my-graph-lock 1\n1\n")
    backup_dir = write_run(b, "run-c", leg1, state={"graph": graph("g"), "nodes": {}, "gate": {"paused_at": "g"}},
                           lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(a), "a"), Home.from_path(str(b), "b")])
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-c"]
    assert (row["home"], row["status"]) == ("a", "FAIL")
    _append(backup_dir, leg2[0])
    assert status_of_run(ledger, "run-c") == "FAIL"
    assert show_run(ledger, "run-c")["status"] == "FAIL"


def test_a_run_synced_before_its_first_line_is_running_once_its_leg_starts(tmp_path, ledger):
    # Synced with an empty stream (NOT-KNOWN-YET); the engine then took the lock and wrote
    # its first leg's run_started: RUNNING, and ABANDONED once that leg is killed.
    home = tmp_path / "home"
    run_dir = write_run(home, "run-n", [])
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-n") == "NOT-KNOWN-YET"
    child = hold_lock(run_dir)
    try:
        _append(run_dir, ev("run_started", 1), ev("node_started", 2, node_id="a"))
        assert (status_of_run(ledger, "run-n"), show_run(ledger, "run-n")["status"]) == ("RUNNING", "RUNNING")
        assert [r["run_id"] for r in list_runs(ledger, statuses=("RUNNING",))] == ["run-n"]
    finally:
        kill9(child)
    assert status_of_run(ledger, "run-n") == "ABANDONED"


# -- show says when its tables are behind the stream whose status it reads now --

def test_show_says_when_the_stream_changed_since_the_last_sync(tmp_path, db_url):
    from omg_ledger.render import run_detail

    note = "its events.jsonl has changed since the last sync"
    ledger = open_ledger(db_url)
    home = tmp_path / "home"
    # A marked lock nobody holds: the open leg reads as dead.
    run_dir = write_run(home, "run-c", [ev("run_started"), ev("node_started", 1, node_id="a")],
                        lock="oh-my-graph-lock 1\n1\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    shown = show_run(ledger, "run-c")
    assert (shown["status"], shown["stream_changed_since_sync"]) == ("ABANDONED", False)
    assert note not in run_detail(shown)

    # The leg went on and closed after that sync: the status is the stream's now (the
    # contract's closed-leg rule: every graph node PASS in state.json), the legs and
    # nodes are still the sync's (the leg open), and show says so.
    with open(run_dir / "events.jsonl", "a") as f:
        for data in (ev("node_passed", 2, node_id="a", verdict="PASS"), ev("run_finished", 3, outcome="passed")):
            f.write(json.dumps({**data, "run_id": "run-c"}, separators=(",", ":")) + "\n")
    write_run(home, "run-c", state={"graph": graph("a"), "nodes": {"a": {"verdict": "PASS"}}})
    shown = show_run(ledger, "run-c")
    assert (shown["status"], shown["stream_changed_since_sync"]) == ("PASS", True)
    assert [leg["is_open"] for leg in shown["legs"]] == [True]
    assert note in run_detail(shown)

    sync(ledger, [Home.from_path(str(home), "h")])
    shown = show_run(ledger, "run-c")
    assert (shown["status"], shown["stream_changed_since_sync"]) == ("PASS", False)
    assert [(leg["is_open"], leg["outcome"]) for leg in shown["legs"]] == [(False, "passed")]
    assert note not in run_detail(shown)

    # Read at the last sync and gone now: changed. The whole directory gone: this
    # machine cannot tell, and show claims nothing.
    (run_dir / "events.jsonl").unlink()
    assert show_run(ledger, "run-c")["stream_changed_since_sync"] is True
    shutil.rmtree(run_dir)
    shown = show_run(ledger, "run-c")
    assert shown["stream_changed_since_sync"] is None
    assert note not in run_detail(shown)


# -- a lock that cannot answer leaves the open leg to the stream, read now --

LEG_CLOSES = [
    ([ev("node_passed", 5, node_id="a", verdict="PASS"), ev("run_finished", 6, outcome="passed")],
     {"graph": graph("a"), "nodes": {"a": {"verdict": "PASS"}}}, "PASS"),
    ([ev("node_failed", 5, node_id="a", verdict="FAIL"), ev("run_finished", 6, outcome="failed")],
     {"graph": graph("a"), "nodes": {"a": {"verdict": "FAIL"}}}, "FAIL"),
    ([ev("gate_paused", 5, node_id="a"), ev("run_finished", 6, outcome="paused")],
     {"graph": graph("a", a="gate"), "nodes": {}, "gate": {"paused_at": "a"}}, "PAUSED"),
]


@pytest.mark.parametrize("lock", [None, "live-pid"], ids=["no-lock-file", "unmarked-live-pid"])
@pytest.mark.parametrize(("tail", "state", "expected"), LEG_CLOSES, ids=["passed", "failed", "paused"])
def test_a_run_whose_lock_cannot_answer_that_finished_after_the_last_sync_is_settled(
        tmp_path, db_url, lock, tail, state, expected):
    # Nothing the lock says can decide this run (no lock file: a directory from before the
    # lock, or one a human deleted; an unmarked lock naming a live pid), so its open leg
    # reads in flight on the stream alone. The stream then closed that leg: beside a closed
    # leg the lock is not consulted (RUN-FEED "Liveness", runstatus.Probe), and the engine
    # reads the run settled. So does every command, without a sync.
    ledger = open_ledger(db_url)
    home = tmp_path / "home"
    run_dir = write_run(home, "run-u", [ev("run_started"), ev("node_started", 1, node_id="a")],
                        lock=None if lock is None else f"{os.getpid()}\n")
    sync(ledger, [Home.from_path(str(home), "h")])
    assert status_of_run(ledger, "run-u") == "RUNNING"
    _append(run_dir, *tail)
    write_run(home, "run-u", state=state)
    assert (status_of_run(ledger, "run-u"), show_run(ledger, "run-u")["status"]) == (expected, expected)
    assert [r["run_id"] for r in list_runs(ledger, statuses=(expected,))] == ["run-u"]
    assert [r["run_id"] for r in list_runs(ledger, statuses=("RUNNING",))] == []


def test_a_planning_run_whose_plan_committed_after_the_last_sync_is_running(tmp_path, db_url):
    # Synced inside its planner call (PLANNING, lock held). The plan then committed (the
    # unphased run_started) and the same leg runs on under the same lock: the engine reads
    # RUNNING (its latest run_started has no phase), and so does every command.
    ledger = open_ledger(db_url)
    run_dir, child = _planning_run_synced_inside_its_planner_call(tmp_path, ledger)
    try:
        _append(run_dir, ev("run_started", 1, cost_usd=0.5), ev("node_started", 2, node_id="a"))
        assert (status_of_run(ledger, "run-p"), show_run(ledger, "run-p")["status"]) == ("RUNNING", "RUNNING")
        assert [r["run_id"] for r in list_runs(ledger, statuses=("PLANNING",))] == []
    finally:
        kill9(child)
    assert status_of_run(ledger, "run-p") == "ABANDONED"


@pytest.mark.parametrize("appended", [
    [ev("node_passed", 2, node_id="a", verdict="PASS"), ev("node_started", 3, node_id="b")],
    [],
], ids=["lines-appended-since", "no-line-since"])
def test_an_abandoned_runs_hint_reads_the_snapshot_written_after_the_last_sync(tmp_path, db_url, appended):
    # Synced before state.json existed. Its first node then settled, the engine wrote
    # state.json, and the leg was killed: `oh-my-graph resume --retry-failed` loads that
    # snapshot now, and the engine's hint (runstatus.Gather reads state.json when asked)
    # says to resume. "Run the graph again" would pay for the settled node twice.
    ledger = open_ledger(db_url)
    home = tmp_path / "home"
    stream = [ev("run_started"), ev("node_started", 1, node_id="a")]
    if not appended:
        stream.append(ev("node_passed", 2, node_id="a", verdict="PASS"))
    run_dir = write_run(home, "run-s", stream)
    child = hold_lock(run_dir)
    try:
        sync(ledger, [Home.from_path(str(home), "h")])
        assert status_of_run(ledger, "run-s") == "RUNNING"
        _append(run_dir, *appended)
        write_run(home, "run-s", state={"graph": graph("a", "b"), "nodes": {"a": {"verdict": "PASS"}}})
    finally:
        kill9(child)
    resume = "continue it with `oh-my-graph resume run-s --retry-failed`"
    row = {r["run_id"]: r for r in list_runs(ledger)}["run-s"]
    assert (row["status"], row["has_snapshot"]) == ("ABANDONED", True) and resume in row["hint"]
    shown = show_run(ledger, "run-s")
    assert (shown["status"], shown["has_snapshot"]) == ("ABANDONED", True) and resume in shown["hint"]
    from omg_ledger.reports.audit import audit_report

    [abandoned] = audit_report(ledger)["abandoned"]
    assert abandoned["has_snapshot"] is True and resume in abandoned["hint"]
