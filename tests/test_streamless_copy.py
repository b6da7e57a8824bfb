"""A copy of a run without its stream (a backup that left events.jsonl out, a stream
deleted) is one run with its streamed copy, billed once (README "One run, one bill").

A run's identity is its id with its stream's first line; a directory with no line has
only its id to go by ('<id>:no-stream'), and was billed as a run of its own: its
state.json spend (the snapshot's verdicts, recovered as charges) was counted beside the
streamed copy's, twice the run's spend. A stream-less directory cannot be a run of its
own machine's (the engine writes the stream before any paid call), so it is a copy of
the run with that id that has a stream. Real CLI processes, a real corpus run, SQLite
and PostgreSQL; the expected totals are the corpus files' spend summed here by hand.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from decimal import Decimal

from .builders import age_tree
from .conftest import CORPUS

RUN = "20261129-181520.321225011-1"  # s22-abandon: one paid call in the stream, its verdict in state.json


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def _by_hand(stream) -> int:
    total = Decimal(0)
    for line in stream.read_bytes().splitlines():
        event = json.loads(line)
        if "cost_usd" in event and not event.get("cost_unknown"):
            total += Decimal(str(event["cost_usd"]))
    return int(total * 10**9)


def _total(db: str) -> int:
    return json.loads(_cli("cost", "--db", db, "--json"))["total"]["cost_nano_usd"]


def _listed(db: str) -> list[tuple[str, str, int]]:
    return [(r["run_id"], r["home"], r["cost_nano_usd"]) for r in json.loads(_cli("runs", "--db", db, "--json"))]


def _homes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(CORPUS / "home" / "runs" / RUN, a / "runs" / RUN)
    shutil.copytree(CORPUS / "home" / "runs" / RUN, b / "runs" / RUN)
    (b / "runs" / RUN / "events.jsonl").unlink()  # the backup left the stream out
    assert (b / "runs" / RUN / "state.json").exists()
    age_tree(a)
    age_tree(b)
    return a, b


def test_a_copy_without_its_stream_is_billed_once_with_the_streamed_copy(tmp_path, db_url):
    a, b = _homes(tmp_path)
    spend = _by_hand(a / "runs" / RUN / "events.jsonl")
    assert spend == 13_000_000  # $0.0130, the engine's runs list too
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    assert _total(db_url) == spend
    assert _listed(db_url) == [(RUN, "a", spend)]
    # One run: the backup's listing holds it (as its billed copy), show finds it.
    listed_b = json.loads(_cli("runs", "--db", db_url, "--home", "b", "--json"))
    assert [(r["run_id"], r["home"]) for r in listed_b] == [(RUN, "a")]
    shown = json.loads(_cli("show", "--db", db_url, RUN, "--json"))
    assert (shown["home"], shown["billed"], shown["copies_in"]) == ("a", True, ["b"])
    shown_b = json.loads(_cli("show", "--db", db_url, RUN, "--home", "b", "--json"))
    assert (shown_b["home"], shown_b["billed"], shown_b["copies_in"]) == ("b", False, ["a"])
    assert json.loads(_cli("show", "--db", db_url, RUN[:20], "--json"))["home"] == "a"  # a prefix too


def test_the_stream_less_copy_seen_first_is_not_billed_once_the_stream_is_seen(tmp_path, db_url):
    a, b = _homes(tmp_path)
    spend = _by_hand(a / "runs" / RUN / "events.jsonl")
    _cli("sync", "--db", db_url, "--home", f"b={b}")
    assert _total(db_url) == spend  # the snapshot's verdict: all there is to go by yet
    _cli("sync", "--db", db_url, "--home", f"a={a}")
    assert _total(db_url) == spend
    # The streamed copy removed: it is still the one holding most of the stream.
    shutil.rmtree(a / "runs" / RUN)
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    assert _total(db_url) == spend
    assert _listed(db_url) == [(RUN, "a", spend)]


def test_a_stream_less_copy_that_gains_its_stream_leaves_the_gone_one_unbilled(tmp_path, db_url):
    """The campaign's case: the stream-less copy in a, copied into b, a's removed, then
    b's stream arrives (an rsync finishing)."""
    a, b = _homes(tmp_path)
    spend = _by_hand(a / "runs" / RUN / "events.jsonl")
    stream = (a / "runs" / RUN / "events.jsonl").read_bytes()
    shutil.rmtree(a / "runs" / RUN)
    shutil.copytree(b / "runs" / RUN, a / "runs" / RUN)  # a holds the stream-less copy too
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    shutil.rmtree(a / "runs" / RUN)
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    assert _total(db_url) == spend
    (b / "runs" / RUN / "events.jsonl").write_bytes(stream)
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    assert _total(db_url) == spend
    assert _listed(db_url) == [(RUN, "b", spend)]


def test_a_ledger_that_billed_both_copies_bills_one_after_its_next_sync(tmp_path, db_url):
    """A ledger an earlier version wrote billed the stream-less copy beside the streamed
    one (its runs at DERIVATION_VERSION 5, both billed: what b400422 wrote for these two
    homes, cost $0.0260). Nothing on disk changes; the next sync re-derives every run
    under the new rule and bills the run once, as a cold sync does."""
    from sqlalchemy import create_engine, text

    from omg_ledger.db import database_url

    from .ledger_dump import diff, dump

    a, b = _homes(tmp_path)
    spend = _by_hand(a / "runs" / RUN / "events.jsonl")
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    engine = create_engine(database_url(db_url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET billed = true, derivation_version = 5"))
    engine.dispose()
    assert _total(db_url) == 2 * spend  # the double bill the earlier version left
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    assert _total(db_url) == spend
    cold = f"sqlite:///{tmp_path / 'cold.sqlite'}"
    _cli("sync", "--db", cold, "--home", f"a={a}", "--home", f"b={b}")
    assert dump(db_url) == dump(cold), diff(dump(cold), dump(db_url))


def test_the_readers_stream_less_suffix_is_the_one_derive_mints():
    from omg_ledger import derive
    from omg_ledger.reports import runs

    assert runs.STREAM_LESS == derive.STREAM_LESS
    assert derive.stream_identity("r1", None) == "r1" + runs.STREAM_LESS


AUTO_RUN = "20261129-181524.161957784-1"  # s36: planner $0.0456 + two nodes $0.0330 (engine's runs list: $0.0786)
CODEX_AUTO_RUN = "20261129-181522.625907719-1"  # s32: planner and two nodes on Codex, no price, tokens only


def test_a_stream_less_auto_run_bills_the_planning_call_its_snapshot_records(tmp_path, db_url):
    """The only copy of an auto run, without its stream: state.json is all there is to go
    by, and it records the planner's call (planning_cost_usd, or planning_cost_unknown
    with planning_usage on Codex) beside the nodes' records. That call was paid for; the
    engine's own runs list counts it from state.json alone."""
    home = tmp_path / "home"
    for run in (AUTO_RUN, CODEX_AUTO_RUN):
        shutil.copytree(CORPUS / "home" / "runs" / run, home / "runs" / run)
        (home / "runs" / run / "events.jsonl").unlink()
    age_tree(home)
    _cli("sync", "--db", db_url, "--home", f"b={home}")
    listed = {r["run_id"]: r for r in json.loads(_cli("runs", "--db", db_url, "--json"))}
    auto = listed[AUTO_RUN]
    assert (auto["cost_nano_usd"], auto["invocations"], auto["unknown_cost_invocations"]) == (78_600_000, 3, 0)
    codex = listed[CODEX_AUTO_RUN]
    assert (codex["cost_nano_usd"], codex["invocations"], codex["unknown_cost_invocations"]) == (0, 3, 3)
    # The planner's tokens (2,100/1,500/320/64) beside the nodes' (4,000/3,000/500/200, 7,000/5,000/900/300).
    assert [codex[k] for k in ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")] \
        == [13_100, 9_500, 1_720, 564]
    nodes = {r["key"]: r for r in json.loads(_cli("cost", "--db", db_url, "--by", "node", "--json"))["rows"]}
    assert nodes["auto-build-evidence/(planning)"]["cost_nano_usd"] == 45_600_000
    assert nodes["auto-codex/(planning)"]["unknown_cost_invocations"] == 1
    assert _total(db_url) == 78_600_000


def test_audit_does_not_ask_for_attention_over_a_stream_less_backups_own_findings(tmp_path, db_url):
    """The backup without its stream holds no terminal for any node its state.json records:
    a dropped_event finding each, about the backup, not the run, whose billed copy agrees
    with its snapshot. audit reads the billed copy's findings; v_findings keeps them all."""
    a, b = _homes(tmp_path)
    _cli("sync", "--db", db_url, "--home", f"a={a}", "--home", f"b={b}")
    every = json.loads(_cli("sql", "--db", db_url, "--json",
                            "SELECT home, kind FROM v_findings ORDER BY home, kind"))
    assert every["rows"] and {(row["home"], row["kind"]) for row in every["rows"]} == {("b", "dropped_event")}
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "audit", "--db", db_url, "--json"],
                          capture_output=True, text=True)
    audit = json.loads(done.stdout)
    assert audit["findings"] == [] and not any("finding" in reason for reason in audit["attention"])
