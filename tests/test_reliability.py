"""No input stops the ledger (issue 13): each break, reproduced with real files, a real
database and real processes, is one bad thing after which sync still completes, the
bad thing is a problem at its byte offset, and no report crashes.

Expected values come from the bytes the test wrote and from the contract, never from
the code under test.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.reports.cost import GROUPINGS, cost_report
from omg_ledger.sync import Home, sync

from .cli_checks import PausedCommand

CLI = [sys.executable, "-m", "omg_ledger.cli"]
TS = "2026-11-29T18:15:12.931494010Z"


def line(run_id: str, event: str, ts: str = TS, **fields) -> bytes:
    return orjson.dumps({"schema": 3, "ts": ts, "run_id": run_id, "event": event, **fields}) + b"\n"


def paid_run(run_id: str, cost: float = 0.5, ts: str = TS, node: str = "a") -> list[bytes]:
    """A complete one-node leg whose terminal event carries ``cost``."""
    return [line(run_id, "run_started", ts), line(run_id, "node_started", ts, node_id=node, session_id="s"),
            line(run_id, "node_passed", ts, node_id=node, verdict="PASS", cost_usd=cost, provenance="exit-only"),
            line(run_id, "run_finished", ts, outcome="passed")]


def write_stream(home: Path, run_id: str, lines: list[bytes]) -> tuple[Path, list[int]]:
    """Write a run's stream; returns its path and the byte offset of every line."""
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    offsets, position = [], 0
    for item in lines:
        offsets.append(position)
        position += len(item)
    path = run_dir / "events.jsonl"
    path.write_bytes(b"".join(lines))
    return path, offsets


def problems_of(engine) -> set[tuple[str, int, str]]:
    with engine.connect() as conn:
        return {(r.path, r.byte_offset, r.reason) for r in conn.execute(
            select(schema.problems.c.path, schema.problems.c.byte_offset, schema.problems.c.reason))}


def problem_offsets(engine, path: Path) -> set[int]:
    return {offset for p, offset, _ in problems_of(engine) if p == str(path)}


def cli(*args: str, check_traceback: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True)
    if check_traceback:
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


# -- timestamps at the edges of the calendar ---------------------------------------

EDGE_TIMESTAMPS = {
    "year-1-at-plus-14": "0001-01-01T00:00:00+14:00",  # UTC is in year 0: OverflowError
    "year-9999-at-minus-1": "9999-12-31T23:30:00-01:00",  # UTC is in year 10000
    "year-0": "0000-01-01T00:00:00Z",
    "last-nanosecond": "9999-12-31T23:59:59.999999999Z",
    "before-1970": "1969-12-31T23:59:59.999999Z",  # a negative instant floors wrongly in SQL
    "year-9999": "9999-01-01T00:00:00Z",  # its month would end in year 10000 in +14:00
}
ZONES = ("UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/Los_Angeles")


def test_instants_outside_the_range_are_problems_and_every_period_report_works(tmp_path, db_url):
    home = tmp_path / "home"
    edge_paths = {}
    for name, ts in EDGE_TIMESTAMPS.items():
        lines = paid_run(name)
        lines.insert(2, line(name, "node_passed", ts, node_id="b", verdict="PASS", cost_usd=7.0))
        edge_paths[name] = write_stream(home, name, lines)
    # The first and last accepted instants, each with a charge: every zone's day, week
    # and month around them must exist.
    first, _ = write_stream(home, "first-instant", paid_run("first-instant", 1.0, "1970-01-01T00:00:00Z"))
    last, _ = write_stream(home, "last-instant", paid_run("last-instant", 2.0, "9998-12-31T23:59:59.999999999Z"))
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home))])
    for name, (path, offsets) in edge_paths.items():
        assert problem_offsets(engine, path) == {offsets[2]}, name
    assert problem_offsets(engine, first) == problem_offsets(engine, last) == set()
    for zone in ZONES:
        for by in ("day", "week", "month"):
            report = cost_report(engine, by=by, tz=zone)
            # Six edge runs at $0.5 each plus the two accepted edges; the $7 lines are refused.
            assert report["total"]["cost_nano_usd"] == 6 * 500_000_000 + 3_000_000_000, (zone, by)
    engine.dispose()
    if not db_url.startswith("sqlite"):
        return
    db = db_url.removeprefix("sqlite:///")
    for by in ("day", "week", "month"):
        result = cli("cost", "--db", db, "--by", by, "--tz", "Pacific/Kiritimati", "--json")
        assert result.returncode == 0, result.stderr
    second = cli("sync", "--db", db, "--home", str(home), "--json")
    assert second.returncode == 0, second.stderr


@pytest.mark.parametrize("since", ["99999999d", "999999999999999999999999w", "0001-01-01T00:00:00+14:00",
                                   "9999-12-31T23:00:00-05:00"])
@pytest.mark.parametrize("command", ["cost", "runs", "audit", "invocations"])
def test_a_time_argument_beyond_the_calendar_is_a_usage_error(tmp_path, command, since):
    assert cli("db", "upgrade", "--db", str(tmp_path / "l.sqlite")).returncode == 0  # reads never create one
    result = cli(command, "--db", str(tmp_path / "l.sqlite"), "--since", since)
    assert result.returncode == 2, result.stderr
    assert "omg-ledger: error:" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


# -- Ctrl-C, aimed deterministically -------------------------------------------------

def _fds_of(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


def test_ctrl_c_while_waiting_for_the_sync_lock_is_one_line_and_exit_130(tmp_path, corpus_home):
    db = tmp_path / "ledger.sqlite"
    lock = f"{db}.sync-lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys\n"
         f"fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        waiter = subprocess.Popen([*CLI, "sync", "--db", str(db), "--home", str(corpus_home), "--wait", "600"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The waiter has reached the lock once it holds the lock file open: a state, not a delay.
        while lock not in _fds_of(waiter.pid):
            assert waiter.poll() is None, waiter.communicate()
        waiter.send_signal(signal.SIGINT)
        out, err = waiter.communicate(timeout=60)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert waiter.returncode == 130, err
    assert err == "omg-ledger: interrupted\n", err


# `rebuild` as the command line runs it, paused inside its first batch after AFTER runs
# re-derived (in a transaction not committed yet) until told to go on: a point, not a
# moment, to send a signal at or to remove the ledger file.
REBUILD_PAUSED_MID_BATCH = r"""
import os, sys
from omg_ledger import sync
from omg_ledger.cli import main

rederive = sync._rederive_run
done = []

def rederive_then_pause(conn, run_pk, force):
    result = rederive(conn, run_pk, force)
    done.append(run_pk)
    if len(done) == int(sys.argv[3]):
        os.write(int(sys.argv[1]), b"paused\n")
        os.read(int(sys.argv[2]), 1)
    return result

sync._rederive_run = rederive_then_pause
main(sys.argv[4:], prog_name="omg-ledger")
"""


def paused_rebuild(db: Path, after: int) -> PausedCommand:
    """The command line's rebuild of ``db`` (REBUILD_PAUSED_MID_BATCH), paused after ``after`` runs."""
    return PausedCommand(REBUILD_PAUSED_MID_BATCH, b"paused", str(after), "rebuild", "--db", str(db))


def test_sigterm_mid_rebuild_rolls_the_batch_back_in_one_line_and_exit_143(tmp_path, corpus_home):
    from .ledger_dump import diff, dump

    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", str(db), "--home", str(corpus_home)).returncode == 0
    before = dump(str(db))
    rebuild = paused_rebuild(db, after=10)
    rebuild.paused()
    rebuild.proc.send_signal(signal.SIGTERM)
    assert rebuild.finish() == (143, "", "omg-ledger: terminated\n")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert dump(str(db)) == before, diff(dump(str(db)), before)
    assert cli("rebuild", "--db", str(db), "--wait", "0").returncode == 0  # the sync lock was released


def test_a_ledger_file_removed_mid_rebuild_is_an_error_not_done(tmp_path, corpus_home):
    """`rm ledger.sqlite` while rebuild runs: what it writes from then on goes to a file
    that no longer has a name. It must not end as done (exit 0), as sync does not."""
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", str(db), "--home", str(corpus_home)).returncode == 0
    rebuild = paused_rebuild(db, after=1)
    rebuild.paused()
    db.unlink()
    rebuild.resume()
    code, out, err = rebuild.finish()
    assert (code, out) == (3, ""), err
    assert err == (f"omg-ledger: error: the ledger file {db} was removed or replaced while this rebuild ran: what "
                   f"the rebuild wrote went with the file it had opened; the next sync re-derives the file now "
                   f"there as it needs\n")
    assert not db.exists()


# Deliver a real SIGINT to the process itself at a chosen import: while the command
# line loads its libraries (click), and inside a command (the sync pipeline's import).
INTERRUPT_AT_IMPORT = """
import os, runpy, signal, sys

class InterruptAt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptAt())
sys.argv = ["omg-ledger", *{args!r}]
runpy.run_module("omg_ledger.cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["click", "sqlalchemy", "omg_ledger.sync"])
def test_ctrl_c_while_loading_is_one_line_and_exit_130(tmp_path, corpus_home, module):
    args = ["sync", "--db", str(tmp_path / "l.sqlite"), "--home", str(corpus_home)]
    result = subprocess.run([sys.executable, "-c", INTERRUPT_AT_IMPORT.format(module=module, args=args)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, result.stderr
    assert result.stderr == "omg-ledger: interrupted\n", result.stderr


def test_importing_the_command_line_leaves_sigint_as_it_was():
    """The start-up guard is for the command line only: a program that imports it keeps
    its own Ctrl-C (here Python's default KeyboardInterrupt)."""
    check = ("import signal\nbefore = signal.getsignal(signal.SIGINT)\nimport omg_ledger.cli\n"
             "assert signal.getsignal(signal.SIGINT) is before is signal.default_int_handler")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# -- a corrupted ledger ------------------------------------------------------------

def _page_size(path: Path) -> int:
    """The file's page size, from its header (bytes 16-17, big-endian; 1 means 65536)."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(18)[16:18], "big")
    return 65536 if size == 1 else size


def _overwrite_pages(path: Path, first: int, last: int) -> None:
    page_size = _page_size(path)
    with open(path, "r+b") as f:
        for page in range(first, last + 1):
            f.seek((page - 1) * page_size)
            f.write(b"\xa5" * page_size)


@pytest.mark.parametrize("where", ["data-pages", "schema-page"])
@pytest.mark.parametrize("command", [["runs"], ["cost"], ["cost", "--by", "day"], ["audit"], ["show", "2026"],
                                     ["sync"]])
def test_a_corrupted_ledger_says_so_and_what_to_do(tmp_path, corpus_home, command, where):
    db = tmp_path / "ledger.sqlite"
    first = cli("sync", "--db", str(db), "--home", str(corpus_home))
    assert first.returncode == 0, first.stderr
    pages, rest = divmod(db.stat().st_size, _page_size(db))
    assert rest == 0 and pages > 40  # the corpus fills well over 40 pages
    if where == "data-pages":
        # The middle pages, and the first page of every table and index (where the pages
        # lie depends on the order rows were written in): not the schema page.
        # (Roots read first: the schema itself may span pages past the first.)
        with contextlib.closing(sqlite3.connect(db)) as con:
            roots = [page for (page,) in con.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 1")]
        _overwrite_pages(db, pages // 2, pages * 3 // 4)
        for page in roots:
            _overwrite_pages(db, page, page)
    else:
        _overwrite_pages(db, 1, 1)
    args = [*command, "--db", str(db)] + (["--home", str(corpus_home)] if command == ["sync"] else [])
    result = cli(*args)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "damaged" in lines[0] and "restore it from a backup" in lines[0] and "rebuild" in lines[0], lines[0]


# -- what goes into indexed columns is bounded (PostgreSQL's btree limit) --------------

def incompressible(n: int, seed: int) -> str:
    """``n`` characters PostgreSQL cannot compress below its btree limit (it compresses
    a long index entry first, so "nnnn…" would fit): CJK, three UTF-8 bytes each."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(n))


def test_absurd_ids_are_refused_and_long_problem_texts_are_capped(tmp_path, db_url):
    # A home whose path alone is ~3 KB: every problem path in it is longer than a
    # PostgreSQL btree entry may be.
    home = tmp_path.joinpath(*[incompressible(80, seed) for seed in range(13)]) / "home"
    assert len(str(home).encode()) > 3000
    long_node = line("long-node-id", "node_started", node_id=incompressible(3000, 1), session_id="s")
    long_session = line("long-node-id", "node_passed", node_id="a", verdict="PASS", session_id=incompressible(3000, 2))
    long_value = line("long-node-id", "node_passed", node_id="a", verdict="PASS", retries=incompressible(3000, 3))
    lines = paid_run("long-node-id")
    lines[2:2] = [long_node, long_session, long_value]
    stream, offsets = write_stream(home, "long-node-id", lines)
    assert len(long_node) > 3000
    state_dir = home / "runs" / "long-graph-node"
    write_stream(home, "long-graph-node", paid_run("long-graph-node"))
    (state_dir / "state.json").write_text(orjson.dumps({
        "schema": 3, "run_id": "long-graph-node", "graph": {"name": "g", "nodes": [{"id": incompressible(3000, 4)}]},
        "nodes": {}}).decode())
    engine = open_ledger(db_url)
    try:
        for _ in range(2):  # the second sync must not fail on what the first recorded
            sync(engine, [Home.from_path(str(home))])
        found = problems_of(engine)
        mine = {(offset, reason) for path, offset, reason in found if path.endswith("long-node-id/events.jsonl")}
        assert {offset for offset, _ in mine} == {offsets[2], offsets[3], offsets[4]}
        for _, reason in mine:
            assert len(reason.encode()) <= 700, reason[:200]
        assert any("'node_id' is 3000 characters long" in reason for _, reason in mine)
        assert any("'session_id' is 3000 characters long" in reason for _, reason in mine)
        assert any(path.endswith("long-graph-node/state.json") and "3000 characters" in reason
                   for path, _, reason in found)
        for path, _, _ in found:
            assert len(path.encode()) <= 1300 and path.endswith((".jsonl", ".json")), path[:100]
        # Everything good around the bad lines is indexed: both runs' $0.5.
        assert cost_report(engine)["total"]["cost_nano_usd"] == 1_000_000_000
    finally:
        engine.dispose()


@pytest.mark.parametrize("where", ["stream", "state.json"])
def test_a_3000_character_node_id_is_bad_input(tmp_path, db_url, where):
    """The issue's own case: one 3 KB line (or snapshot record) whose node id no index holds."""
    home = tmp_path / "home"
    node = incompressible(3000, 6)
    lines = paid_run("long-id")
    if where == "stream":
        lines.insert(2, line("long-id", "node_passed", node_id=node, verdict="PASS", cost_usd=1.0))
    stream, offsets = write_stream(home, "long-id", lines)
    if where == "state.json":
        (home / "runs" / "long-id" / "state.json").write_text(orjson.dumps(
            {"schema": 3, "run_id": "long-id", "nodes": {node: {"verdict": "PASS", "cost_usd": 1.0}}}).decode())
    engine = open_ledger(db_url)
    try:
        for _ in range(2):
            sync(engine, [Home.from_path(str(home))])
        bad = stream if where == "stream" else stream.with_name("state.json")
        assert problem_offsets(engine, bad) == ({offsets[2]} if where == "stream" else {0})
        assert cost_report(engine)["total"]["cost_nano_usd"] == 500_000_000
    finally:
        engine.dispose()


def test_capped_problem_reasons_stay_distinct(db_url):
    from omg_ledger.db import write_transaction
    from omg_ledger.store import record_problem

    head = incompressible(1500, 5)  # 4500 bytes of three-byte characters: the cut must not split one
    reasons = [head + " first", head + " second", "short"]
    engine = open_ledger(db_url)
    try:
        with write_transaction(engine) as conn:
            for reason in reasons * 2:  # recording again only updates last_seen_at
                record_problem(conn, None, "/x/events.jsonl", 7, reason, "2026-11-29T00:00:00.000000Z",
                               "machine:a")
        stored = [reason for _, _, reason in problems_of(engine)]
    finally:
        engine.dispose()
    assert len(stored) == 3 and "short" in stored
    assert all(len(r.encode()) <= 700 and r.startswith(head[:150]) for r in stored if r != "short")


# -- input checks ----------------------------------------------------------------

def test_state_json_with_a_duplicate_key_is_a_problem(tmp_path):
    home = tmp_path / "home"
    write_stream(home, "dup-state", paid_run("dup-state"))
    record = '{"verdict":"PASS","cost_usd":0.5}'
    # Pretty-printed like the engine's, with node "a" written twice (the last would win).
    state = ('{\n  "schema": 3,\n  "run_id": "dup-state",\n  "nodes": {\n    "a": ' + record +
             ',\n    "a": {"verdict":"FAIL","cost_usd":9}\n  }\n}\n')
    (home / "runs" / "dup-state" / "state.json").write_text(state)
    write_stream(home, "dup-top", paid_run("dup-top"))
    (home / "runs" / "dup-top" / "state.json").write_text(
        '{"schema": 3, "runtime": "claude", "nodes": {"a": ' + record + '}, "runtime": "codex"}')
    write_stream(home, "colon-in-value", paid_run("colon-in-value"))
    (home / "runs" / "colon-in-value" / "state.json").write_text(  # '":' inside a string is no key
        '{"schema": 3, "nodes": {"a": {"verdict":"PASS","cost_usd":0.5,"detail":"said \\": here"}}}')
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    sync(engine, [Home.from_path(str(home))])
    found = problems_of(engine)
    engine.dispose()
    for run, key in (("dup-state", "'a'"), ("dup-top", "'runtime'")):
        path = str(home / "runs" / run / "state.json")
        assert [(o, r) for p, o, r in found if p == path] == [(0, f"state.json has the key {key} more than once "
                                                                  f"in one object")]
    assert not [p for p, _, _ in found if "colon-in-value" in p]


# -- money that would overflow ---------------------------------------------------

CAP_USD = 100_000  # feed.MAX_COST_USD: the most one invocation may cost
CAP_NANOS = CAP_USD * 10**9
RUN_BOUND_NANOS = 10**18  # $1e9: ten thousand charges at the cap


def charges_at_cap(run_id: str, count: int) -> list[bytes]:
    """One leg, one node, ``count`` paid retries of it at the per-charge cap."""
    paid = [line(run_id, "node_retried", node_id="a", retries=i + 1, cost_usd=CAP_USD,
                 usage={"input_tokens": 1000}) for i in range(count)]
    return [line(run_id, "run_started"), line(run_id, "node_started", node_id="a", session_id="s"), *paid,
            line(run_id, "run_finished", outcome="failed")]


def test_a_run_past_the_per_run_bound_is_counted_up_to_it_with_a_problem(tmp_path, db_url):
    home = tmp_path / "home"
    stream, offsets = write_stream(home, "huge", charges_at_cap("huge", 93_000))
    engine = open_ledger(db_url)
    try:
        report = sync(engine, [Home.from_path(str(home))])
        assert [(p.offset, "per-run bound" in p.reason) for p in report.problems] == [(offsets[2 + 10_000], True)]
        assert problem_offsets(engine, stream) == {offsets[2 + 10_000]}
        with engine.connect() as conn:
            run = conn.execute(select(schema.runs)).one()._mapping
        # The first 10,000 charges reach the bound exactly; the 83,000 after it are
        # invocations of unknown cost, without tokens.
        assert run["cost_nano_usd"] == 10_000 * CAP_NANOS == RUN_BOUND_NANOS
        assert (run["invocations"], run["unknown_cost_invocations"]) == (93_000, 83_000)
        assert run["input_tokens"] == 10_000 * 1000
        total = cost_report(engine)["total"]
        assert (total["cost_nano_usd"], total["invocations"], total["unknown_cost_invocations"]) == \
            (RUN_BOUND_NANOS, 93_000, 83_000)
        assert total["cost_is_lower_bound"] is True
        again = sync(engine, [Home.from_path(str(home))])
        assert again.runs_changed == 0
    finally:
        engine.dispose()


def test_an_assessment_past_the_per_run_bound_is_of_unknown_cost_in_its_goal_cycle_too(tmp_path):
    home = tmp_path / "home"
    write_stream(home, "huge", charges_at_cap("huge", 10_000))  # the bound reached exactly
    (home / "runs" / "huge" / "assess.json").write_text(
        '{"goal_met": false, "remaining": "more", "assess_cost_usd": 0.0078}')
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    try:
        sync(engine, [Home.from_path(str(home))])
        with engine.connect() as conn:
            charged = conn.execute(select(schema.charges.c.cost_nano_usd, schema.charges.c.cost_unknown).where(
                schema.charges.c.kind == "assessment")).all()
            cycle = conn.execute(select(schema.goal_cycles.c.assessed,
                                        schema.goal_cycles.c.assess_cost_nano_usd)).all()
    finally:
        engine.dispose()
    # Its $0.0078 would pass the bound: an invocation of unknown cost, there as in its charge.
    assert [tuple(r) for r in charged] == [(None, True)]
    assert [tuple(r) for r in cycle] == [(True, None)]


def test_report_sums_past_2_63_nanos_are_exact(tmp_path, db_url):
    home = tmp_path / "home"
    runs = [f"r{n:02d}" for n in range(12)]  # 12 runs at the bound: $1.2e10 > 2**63 nanos
    for run_id in runs:
        write_stream(home, run_id, charges_at_cap(run_id, 10_000))
    engine = open_ledger(db_url)
    try:
        report = sync(engine, [Home.from_path(str(home))])
        assert report.problems == []
        expected = 12 * RUN_BOUND_NANOS
        assert expected > 2**63
        for by in (None, *GROUPINGS):
            result = cost_report(engine, by=by, tz="UTC")
            assert result["total"]["cost_nano_usd"] == expected, by
            assert result["total"]["input_tokens"] == 12 * 10_000 * 1000, by
            assert sum(row["cost_nano_usd"] for row in result["rows"]) == (expected if by else 0), by
        by_run = cost_report(engine, by="run")["rows"]
        assert [(row["key"], row["cost_nano_usd"]) for row in by_run] == [(r, RUN_BOUND_NANOS) for r in runs]
    finally:
        engine.dispose()
    if db_url.startswith("sqlite"):
        db = db_url.removeprefix("sqlite:///")
        for args in (["cost", "--json"], ["cost", "--by", "day", "--csv"], ["runs"], ["audit"]):
            result = cli(*args, "--db", db)
            assert result.returncode in (0, 1) and "error" not in result.stderr, result.stderr
        shown = orjson.loads(cli("cost", "--json", "--db", db).stdout)
        assert shown["total"]["cost_nano_usd"] == expected


def test_metrics_and_the_html_report_sum_past_2_63_nanos_exactly(tmp_path, db_url):
    """The same twelve runs at the bound: `metrics` and `report --html` sum known spend
    themselves (per runtime and graph; per day and runtime; redone work), and SQLite's
    SUM() stopped both with 'integer overflow' (exit 3) where `cost` answers."""
    from decimal import Decimal

    from omg_ledger.reports import metrics
    from omg_ledger.reports.overview import overview

    home = tmp_path / "home"
    for n in range(12):
        write_stream(home, f"r{n:02d}", charges_at_cap(f"r{n:02d}", 10_000))
    engine = open_ledger(db_url)
    try:
        assert sync(engine, [Home.from_path(str(home))]).problems == []
        expected = 12 * RUN_BOUND_NANOS
        families = {f["name"]: f["samples"] for f in metrics.collect(engine)}
        [(labels, usd)] = families["omg_ledger_known_spend_usd"]
        assert labels == {"runtime": "(no snapshot)", "graph": "(no graph)"}
        assert Decimal(usd) * 10**9 == expected
        page = overview(engine, tz="UTC")
        assert page["total"]["cost_nano_usd"] == expected
        assert [(d["day"], d["runtimes"]["(no snapshot)"]["cost_nano_usd"]) for d in page["days"]] == \
            [("2026-11-29", expected)]
        # Every charge of node a but its run's last was done again (in the same leg).
        assert page["redone"]["feedback"]["cost_nano_usd"] == 12 * 9_999 * CAP_NANOS
    finally:
        engine.dispose()
    if db_url.startswith("sqlite"):
        db = db_url.removeprefix("sqlite:///")
        assert cli("metrics", "--db", db).returncode == 0
        assert cli("report", "--html", str(tmp_path / "page.html"), "--tz", "UTC", "--db", db).returncode == 0


def test_the_per_run_bound_counts_a_prefix_of_the_run():
    from omg_ledger.bounds import beyond_run_bound

    at_cap = (CAP_NANOS, (0, 0, 0, 0))
    assert beyond_run_bound([at_cap] * 10_000) is None  # exactly at the bound: all counted
    assert beyond_run_bound([at_cap] * 10_001) == 10_000
    # Once past, every later charge is beyond it, even one that would fit.
    assert beyond_run_bound([*[at_cap] * 9_999, (CAP_NANOS + 1, (0,) * 4), (1, (0,) * 4)]) == 9_999
    assert beyond_run_bound([(None, (0,) * 4)] * 50_000) is None  # unknown costs add nothing
    tokens = (10**12, 0, 0, 0)  # feed.MAX_TOKENS per invocation: 10**6 of them reach 10**18
    assert beyond_run_bound([(0, tokens)] * 1_000_000) is None
    assert beyond_run_bound([(0, tokens)] * 1_000_001) == 1_000_000


@pytest.mark.parametrize(("schema", "event"), [(3, "node_charged"), (2, "cost_recorded"), (1, "gate_paused"),
                                               (3, "Node_Passed")])
def test_an_unknown_event_type_at_a_supported_schema_is_a_problem(tmp_path, schema, event):
    """The contract: the event set is closed per schema (schema 2 added the gate events),
    so an unknown type at a schema this ledger reads is damage; reading goes on."""
    home = tmp_path / "home"
    lines = paid_run("unknown-type")
    unknown = orjson.dumps({"schema": schema, "ts": TS, "run_id": "unknown-type", "event": event,
                            "node_id": "a", "cost_usd": 9.0}) + b"\n"
    lines.insert(3, unknown)
    stream, offsets = write_stream(home, "unknown-type", lines)
    db = tmp_path / "l.sqlite"
    strict = cli("sync", "--strict", "--db", str(db), "--home", str(home), "--json")
    assert strict.returncode == 1, strict.stderr
    assert [(p["path"], p["offset"]) for p in orjson.loads(strict.stdout)["problems"]] == [(str(stream), offsets[3])]
    assert "unknown event type" in strict.stderr
    audit = cli("audit", "--db", str(db), "--json")
    assert audit.returncode == 1, audit.stderr
    assert [p["byte_offset"] for p in orjson.loads(audit.stdout)["problems"]] == [offsets[3]]
    # The lines around it are the run: $0.5, and the $9 is nowhere.
    assert orjson.loads(cli("cost", "--db", str(db), "--json").stdout)["total"]["cost_nano_usd"] == 500_000_000


def test_a_known_event_type_of_a_newer_schema_still_waits_for_an_upgrade(tmp_path):
    home = tmp_path / "home"
    lines = paid_run("newer")
    lines.insert(3, orjson.dumps({"schema": 4, "ts": TS, "run_id": "newer", "event": "node_charged"}) + b"\n")
    stream, offsets = write_stream(home, "newer", lines)
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    report = sync(engine, [Home.from_path(str(home))])
    engine.dispose()
    assert [(p.offset, "newer than this omg-ledger" in p.reason) for p in report.problems] == [(offsets[3], True)]


def test_lines_naming_another_run_are_problems_not_this_runs_events(tmp_path):
    home = tmp_path / "home"
    lines = paid_run("mine")
    # Another run's paid terminal inside this run's stream, and a line with no run_id
    # (the directory says which run it is).
    lines.insert(3, line("someone-else", "node_passed", node_id="b", verdict="PASS", cost_usd=9.0))
    lines.insert(4, orjson.dumps({"schema": 3, "ts": TS, "event": "node_started", "node_id": "c"}) + b"\n")
    stream, offsets = write_stream(home, "mine", lines)
    engine = open_ledger(str(tmp_path / "l.sqlite"))
    try:
        report = sync(engine, [Home.from_path(str(home))])
        assert [(p.path, p.offset) for p in report.problems] == [(str(stream), offsets[3])]
        assert "'someone-else'" in report.problems[0].reason and "'mine'" in report.problems[0].reason
        with engine.connect() as conn:
            stored = [row.byte_offset for row in conn.execute(select(schema.events.c.byte_offset)
                                                              .order_by(schema.events.c.line_no))]
        assert stored == [o for i, o in enumerate(offsets) if i != 3]
        assert cost_report(engine)["total"]["cost_nano_usd"] == 500_000_000
        # Appended later, read from the stored offset: the same rule.
        with open(stream, "ab") as f:
            f.write(line("someone-else", "run_started"))
        size = sum(len(x) for x in lines)
        again = sync(engine, [Home.from_path(str(home))])
        assert [(p.path, p.offset) for p in again.problems] == [(str(stream), size)]
    finally:
        engine.dispose()


# -- an unreadable thing is damage, not absence ----------------------------------

def test_contract_files_that_are_not_regular_files_are_problems(tmp_path):
    home = tmp_path / "home"
    for run_id in ("fifo-state", "fifo-assess", "dir-rejected", "failed-is-a-file", "good"):
        write_stream(home, run_id, paid_run(run_id))
    runs = home / "runs"
    os.mkfifo(runs / "fifo-state" / "state.json")
    os.mkfifo(runs / "fifo-assess" / "assess.json")
    (runs / "dir-rejected" / "rejected.json").mkdir()
    (runs / "failed-is-a-file" / "failed").write_text("not a directory")
    plan = home / "plans" / "p1"
    plan.mkdir(parents=True)
    os.mkfifo(plan / "graph.json")
    db = tmp_path / "l.sqlite"
    result = subprocess.run([*CLI, "sync", "--db", str(db), "--home", str(home), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    found = {(p["path"], p["offset"]) for p in orjson.loads(result.stdout)["problems"]}
    assert found == {(str(runs / "fifo-state" / "state.json"), 0), (str(runs / "fifo-assess" / "assess.json"), 0),
                     (str(runs / "dir-rejected" / "rejected.json"), 0), (str(runs / "failed-is-a-file" / "failed"), 0),
                     (str(plan / "graph.json"), 0)}
    reasons = " | ".join(p["reason"] for p in orjson.loads(result.stdout)["problems"])
    assert "state.json is a FIFO" in reasons and "rejected.json is a directory" in reasons
    # Every run's stream is still indexed.
    assert orjson.loads(cli("cost", "--db", str(db), "--json").stdout)["total"]["cost_nano_usd"] == 5 * 500_000_000
    assert cli("audit", "--db", str(db)).returncode == 1


def test_an_unlistable_failed_directory_is_a_problem(tmp_path):
    from .test_hostile_input import _can_drop_dac, _without_dac_override

    assert _can_drop_dac() is None, _can_drop_dac()
    home = tmp_path / "home"
    run_dir = write_stream(home, "locked-failed", paid_run("locked-failed"))[0].parent
    (run_dir / "failed").mkdir()
    (run_dir / "failed" / "a.out").write_text("the failed reply")
    os.chmod(run_dir / "failed", 0o100)  # can pass through, cannot list
    db = tmp_path / "l.sqlite"
    result = subprocess.run([*CLI, "sync", "--db", str(db), "--home", str(home), "--json"], capture_output=True,
                            text=True, timeout=120, preexec_fn=_without_dac_override if os.geteuid() == 0 else None)
    os.chmod(run_dir / "failed", 0o700)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    problems = orjson.loads(result.stdout)["problems"]
    assert [(p["path"], p["offset"]) for p in problems] == [(str(run_dir / "failed"), 0)]
    assert "cannot list failed/" in problems[0]["reason"]
