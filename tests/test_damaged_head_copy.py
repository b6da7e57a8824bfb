"""A copy of a run whose stream does not begin with its first line is still one run with
its other copies, billed once (README "One run, one bill").

A run's identity is its id with its stream's first line. When a copy's first bytes are
damaged — NULs where a crash left a sector unwritten (a backup copied without fsync), a
byte-order mark an editor added — its first line is a problem, and the identity was taken
from the next line: the copy became a run of its own and the run was billed twice. Such a
copy has only its id to go by, as a copy without its stream; settled with the run's
streamed copies, the one holding most of the stream is billed, damaged or not.

Real CLI processes, a real corpus run, SQLite and PostgreSQL. The expected figures are the
corpus stream's spend, summed here by hand (corpus/per-run.md: s12 cost $0.2010 in eight
paid calls, on lines 3, 5, 7, 9, 11, 13, 15 and 17).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from decimal import Decimal

from .builders import age_tree, nanos
from .conftest import CORPUS

RUN = "20261129-181518.131561744-1"  # s12-feedback-2rounds
STREAM = CORPUS / "home" / "runs" / RUN / "events.jsonl"
RUN_SPEND = nanos("0.2010")


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def _spend_of_lines(first: int, last: int) -> int:
    """The stream's cost_usd on lines first..last, by hand."""
    lines = STREAM.read_bytes().splitlines()[first - 1:last]
    return int(sum(Decimal(str(json.loads(line).get("cost_usd", 0))) for line in lines) * 10**9)


def _copy(home, damage=None, keep_lines: int | None = None):
    shutil.copytree(CORPUS / "home" / "runs" / RUN, home / "runs" / RUN)
    stream = home / "runs" / RUN / "events.jsonl"
    data = stream.read_bytes()
    if keep_lines is not None:  # a copy taken mid-run: the stream's first lines
        data = b"".join(data.splitlines(keepends=True)[:keep_lines])
    if damage is not None:
        data = damage(data)
    stream.write_bytes(data)
    age_tree(home)
    return home


def _zeroed_head(data: bytes) -> bytes:
    return b"\0" * 512 + data[512:]  # lines 1 and 2 and most of line 3 (112 + 181 + 239 bytes)


def _byte_order_mark(data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def _total(db: str) -> int:
    return json.loads(_cli("cost", "--db", db, "--json"))["total"]["cost_nano_usd"]


def _listed(db: str, *home: str) -> list[tuple[str, str]]:
    return [(r["run_id"], r["home"]) for r in json.loads(_cli("runs", "--db", db, *home, "--json"))]


def _diverged(db: str) -> int:
    out = _cli("sql", "--db", db, "--json", "SELECT COUNT(*) AS n FROM findings WHERE kind = 'diverged_copy'")
    return json.loads(out)["rows"][0]["n"]


def test_a_backup_whose_head_a_crash_zeroed_is_not_billed_beside_the_run(tmp_path, db_url):
    assert _spend_of_lines(1, 18) == RUN_SPEND
    live = _copy(tmp_path / "live")
    backup = _copy(tmp_path / "backup", damage=_zeroed_head)
    _cli("sync", "--db", db_url, "--home", f"live={live}", "--home", f"backup={backup}")
    assert _total(db_url) == RUN_SPEND  # was twice the run less line 3's $0.01
    assert _listed(db_url) == [(RUN, "live")]
    assert _listed(db_url, "--home", "backup") == [(RUN, "live")]  # the backup holds a copy of it
    shown = json.loads(_cli("show", "--db", db_url, RUN, "--json"))
    assert (shown["home"], shown["billed"], shown["copies_in"]) == ("live", True, ["backup"])
    shown = json.loads(_cli("show", "--db", db_url, RUN, "--home", "backup", "--json"))
    assert (shown["home"], shown["billed"], shown["copies_in"]) == ("backup", False, ["live"])
    assert _diverged(db_url) == 0  # the damage is the backup's problem, not a difference


def test_a_damaged_copy_holding_more_of_the_stream_is_the_one_billed(tmp_path, db_url):
    """The copy whose head an editor changed is the whole run; the intact one a backup taken
    after line 9. Billing the intact copy would leave out the spend of lines 11 to 17."""
    live = _copy(tmp_path / "live", damage=_byte_order_mark)
    backup = _copy(tmp_path / "backup", keep_lines=9)
    _cli("sync", "--db", db_url, "--home", f"live={live}", "--home", f"backup={backup}")
    assert _total(db_url) == _spend_of_lines(2, 18) == RUN_SPEND  # line 1, the one damaged, has no cost
    assert _listed(db_url) == [(RUN, "live")]
    for named in (RUN, RUN[:20]):  # its id, or a prefix of it
        shown = json.loads(_cli("show", "--db", db_url, named, "--json"))
        assert (shown["home"], shown["billed"], shown["copies_in"]) == ("live", True, ["backup"])
    assert _diverged(db_url) == 0  # the backup's stream is the live one's from line 2 on
    assert _listed(db_url, "--home", "backup") == [(RUN, "live")]


def test_two_damaged_copies_and_no_intact_one_are_one_run(tmp_path, db_url):
    zeroed = _copy(tmp_path / "zeroed", damage=_zeroed_head)
    marked = _copy(tmp_path / "marked", damage=_byte_order_mark)
    _cli("sync", "--db", db_url, "--home", f"zeroed={zeroed}", "--home", f"marked={marked}")
    assert _total(db_url) == RUN_SPEND  # the copy with the byte-order mark holds every paid line
    assert _listed(db_url) == [(RUN, "marked")]
    assert _diverged(db_url) == 0  # each one's damage is its own problem, not a difference


def test_two_damaged_copies_that_differ_after_their_heads_are_a_diverged_copy(tmp_path, db_url):
    def zeroed_and_ended_otherwise(data: bytes) -> bytes:
        *lines, last = data.splitlines(keepends=True)
        assert b'"event":"run_finished"' in last and b'"ts":"2026-11-29T18:15:18.' in last
        return _zeroed_head(b"".join(lines) + last.replace(b'"ts":"2026-11-29T18:15:18.', b'"ts":"2026-11-29T18:15:19.'))

    zeroed = _copy(tmp_path / "zeroed", damage=zeroed_and_ended_otherwise)
    marked = _copy(tmp_path / "marked", damage=_byte_order_mark)
    _cli("sync", "--db", db_url, "--home", f"zeroed={zeroed}", "--home", f"marked={marked}")
    out = _cli("sql", "--db", db_url, "--json", "SELECT detail FROM findings WHERE kind = 'diverged_copy'")
    [finding] = json.loads(out)["rows"]
    # The stream's line 18 is the zeroed copy's line 16 (its lines 1 to 3 are its first).
    assert "(home zeroed)" in finding["detail"] and "differ from stream line 16" in finding["detail"]


def test_a_damaged_copy_synced_before_the_intact_one_is_billed_until_then(tmp_path, db_url):
    backup = _copy(tmp_path / "backup", damage=_zeroed_head)
    _cli("sync", "--db", db_url, "--home", f"backup={backup}")
    # Line 3 (spec's pass, $0.01) is lost in it; state.json's record of spec holds the verdict.
    assert _total(db_url) == _spend_of_lines(4, 18) + nanos("0.01") == RUN_SPEND
    live = _copy(tmp_path / "live")
    _cli("sync", "--db", db_url, "--home", f"backup={backup}", "--home", f"live={live}")
    assert _total(db_url) == RUN_SPEND
    assert _listed(db_url) == [(RUN, "live")]


def test_a_ledger_that_billed_a_damaged_copy_beside_the_run_bills_it_once_after_its_next_sync(tmp_path, db_url):
    """What DERIVATION_VERSION 16 left: the damaged backup keyed by its first stored line's
    hash, both copies billed. Nothing on disk changes; the next sync re-derives every run
    under the new rule and bills the run once, as a cold sync does."""
    import hashlib

    from sqlalchemy import create_engine, text

    from omg_ledger.db import database_url

    from .ledger_dump import diff, dump

    live = _copy(tmp_path / "live")
    backup = _copy(tmp_path / "backup", damage=_zeroed_head)
    homes = ("--home", f"live={live}", "--home", f"backup={backup}")
    _cli("sync", "--db", db_url, *homes)
    engine = create_engine(database_url(db_url))
    with engine.begin() as conn:
        first_stored = conn.execute(text(
            "SELECT e.raw FROM events e JOIN runs r ON r.id = e.run_pk JOIN homes h ON h.id = r.home_id "
            "WHERE h.label = 'backup' ORDER BY e.line_no LIMIT 1")).scalar()
        old_identity = f"{RUN}:{hashlib.sha256(first_stored.encode()).hexdigest()[:32]}"
        conn.execute(text("UPDATE runs SET stream_identity = :old, billed = true, derivation_version = 16 "
                          "WHERE home_id = (SELECT id FROM homes WHERE label = 'backup')"), {"old": old_identity})
        conn.execute(text("UPDATE runs SET derivation_version = 16"))
    engine.dispose()
    assert _total(db_url) > RUN_SPEND  # the double bill the earlier version left
    _cli("sync", "--db", db_url, *homes)
    assert _total(db_url) == RUN_SPEND
    cold = f"sqlite:///{tmp_path / 'cold.sqlite'}"
    _cli("sync", "--db", cold, *homes)
    assert dump(db_url) == dump(cold), diff(dump(cold), dump(db_url))


def _another_machines_run(data: bytes) -> bytes:
    """The same run id started on another machine: another first line (its instant)."""
    first, rest = data.split(b"\n", 1)
    assert b'"ts":"2026-11-29T18:15:18.1' in first
    return first.replace(b'"ts":"2026-11-29T18:15:18.1', b'"ts":"2026-11-29T18:15:18.9') + b"\n" + rest


def _billed(db: str) -> list[tuple[str, bool]]:
    out = _cli("sql", "--db", db, "--json", "SELECT h.label, r.billed FROM runs r JOIN homes h ON h.id = r.home_id "
                                          "ORDER BY h.label")
    return [(row["label"], bool(row["billed"])) for row in json.loads(out)["rows"]]


def _two_runs_and_a_damaged_copy(tmp_path):
    """Two machines' runs of one id (here, a backup of the first taken after line 9) and a
    damaged full copy of the second: which of them it copies is not known from its id."""
    here = _copy(tmp_path / "here", keep_lines=9)
    there = _copy(tmp_path / "there", damage=_another_machines_run)
    backup = _copy(tmp_path / "backup", damage=lambda data: _zeroed_head(_another_machines_run(data)))
    return ("--home", f"here={here}", "--home", f"there={there}", "--home", f"backup={backup}"), here


def test_forgetting_one_of_two_runs_of_an_id_settles_the_damaged_copy_with_the_other(tmp_path, db_url):
    homes, _ = _two_runs_and_a_damaged_copy(tmp_path)
    _cli("sync", "--db", db_url, *homes)
    assert _billed(db_url) == [("backup", False), ("here", True), ("there", True)]
    _cli("homes", "forget", "--db", db_url, "there", "--yes")
    # One run of the id is left: the damaged copy is a copy of it, and holds more of the
    # stream (15 events against 9), so it is the one billed, in place of the backup here.
    assert _billed(db_url) == [("backup", True), ("here", False)]  # both were billed
    assert _total(db_url) == RUN_SPEND  # (state.json holds each node's whole spend: each copy bills it)
    assert _listed(db_url) == [(RUN, "backup")]


def test_a_run_of_an_id_with_two_growing_beside_a_damaged_copy_is_settled_as_a_cold_sync_does(tmp_path, db_url):
    from .ledger_dump import diff, dump

    homes, here = _two_runs_and_a_damaged_copy(tmp_path)
    _cli("sync", "--db", db_url, *homes)
    with open(here / "runs" / RUN / "events.jsonl", "ab") as stream:  # the run here goes on: line 10
        stream.write(STREAM.read_bytes().splitlines(keepends=True)[9])
    _cli("sync", "--db", db_url, *homes)
    # Beside two runs of its id the damaged copy is never billed (it was, in place of the
    # run here: the run there billed twice, the one here not at all).
    assert _billed(db_url) == [("backup", False), ("here", True), ("there", True)]
    cold = f"sqlite:///{tmp_path / 'cold.sqlite'}"
    _cli("sync", "--db", cold, *homes)
    assert dump(db_url) == dump(cold), diff(dump(cold), dump(db_url))


def test_a_live_run_whose_head_a_crash_zeroed_is_running_though_its_intact_backup_is_billed(tmp_path, db_url):
    """The live copy (its first 512 bytes zeroed, then a line appended: 8 events) holds
    fewer events than a backup taken after line 10, so the backup is billed; the backup's
    lock is a copy nobody holds. The leg is alive in the live home: the engine's answer
    there is RUNNING, and ABANDONED would invite a second run over a live one."""
    from .test_status import hold_lock, kill9

    live = _copy(tmp_path / "live", damage=_zeroed_head, keep_lines=11)
    backup = _copy(tmp_path / "backup", keep_lines=10)
    for home in (live, backup):  # mid-leg: no final snapshot yet
        (home / "runs" / RUN / "state.json").unlink()
    holder = hold_lock(live / "runs" / RUN)
    try:
        _cli("sync", "--db", db_url, "--home", f"live={live}", "--home", f"backup={backup}")
        assert _billed(db_url) == [("backup", True), ("live", False)]
        [row] = json.loads(_cli("runs", "--db", db_url, "--json"))
        assert (row["home"], row["status"]) == ("backup", "RUNNING")  # was ABANDONED
        assert json.loads(_cli("show", "--db", db_url, RUN, "--json"))["status"] == "RUNNING"
        audit = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "audit", "--db", db_url, "--json"],
                               capture_output=True, text=True)  # (exit 1: it needs attention, for the damage)
        assert json.loads(audit.stdout)["abandoned"] == []
        assert 'omg_ledger_runs{status="RUNNING"} 1' in _cli("metrics", "--db", db_url)
    finally:
        kill9(holder)
    # The leg died: every copy's lock is free now, and the run is ABANDONED.
    [row] = json.loads(_cli("runs", "--db", db_url, "--json"))
    assert row["status"] == "ABANDONED"


def test_a_damaged_copy_that_diverged_from_a_run_keeps_no_finding_once_a_second_run_of_its_id_comes(tmp_path, db_url):
    """Beside one run of its id the damaged copy is compared with it (here it differs at its
    last line but one); once another machine's run of that id is synced, which one it copies
    is not known, and nothing is said against either (as a cold sync of the three homes)."""
    def zeroed_and_changed(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        lines[-2] = lines[-2].replace(b'"ts":"2026-11-29T18:15:18.', b'"ts":"2026-11-29T18:15:19.')
        return _zeroed_head(b"".join(lines))

    here = _copy(tmp_path / "here")
    backup = _copy(tmp_path / "backup", damage=zeroed_and_changed)
    _cli("sync", "--db", db_url, "--home", f"here={here}", "--home", f"backup={backup}")
    assert _diverged(db_url) == 1
    there = _copy(tmp_path / "there", damage=_another_machines_run)
    homes = ("--home", f"here={here}", "--home", f"backup={backup}", "--home", f"there={there}")
    _cli("sync", "--db", db_url, *homes)
    assert _billed(db_url) == [("backup", False), ("here", True), ("there", True)]
    assert _diverged(db_url) == 0  # was 1: the backup against "the billed copy (home here)"


def _bad_byte_in_the_first_line(data: bytes) -> bytes:
    # Inside the key "run_id": the line is still read (the key names no field), as U+FFFD.
    first, rest = data.split(b"\n", 1)
    assert first.count(b'"run_id"') == 1
    return first.replace(b'"run_id"', b'"run_\xffid"') + b"\n" + rest


def test_a_copy_whose_first_line_holds_a_byte_that_is_not_utf8_is_a_copy_not_a_second_run(tmp_path, db_url):
    """One flipped byte in a backup's first line: the line is read (as U+FFFD, as the engine
    reads it), but it is not the line the engine wrote, so it names no other run: the
    backup is a copy of the run, billed once."""
    live = _copy(tmp_path / "live")
    backup = _copy(tmp_path / "backup", damage=_bad_byte_in_the_first_line)
    _cli("sync", "--db", db_url, "--home", f"live={live}", "--home", f"backup={backup}")
    assert _total(db_url) == RUN_SPEND
    assert _listed(db_url) == [(RUN, "live")]


def test_of_two_copies_holding_as_many_lines_the_one_reaching_further_is_billed_whichever_came_first(
        tmp_path, db_url):
    """The live copy's head zeroed over lines 1 and 2 (it holds lines 3 to 18), a backup
    taken after line 16 (lines 1 to 16): 16 lines each. The live one reaches the run's end,
    line 17's $0.005 included; which home was synced first does not decide it."""
    live = _copy(tmp_path / "live", damage=lambda data: b"\0" * 292 + data[292:])  # lines 1, 2 (112 + 181 bytes)
    backup = _copy(tmp_path / "backup", keep_lines=16)
    _cli("sync", "--db", db_url, "--home", f"backup={backup}")
    _cli("sync", "--db", db_url, "--home", f"backup={backup}", "--home", f"live={live}")
    assert _total(db_url) == RUN_SPEND
    assert _listed(db_url) == [(RUN, "live")]
