"""One run, one bill: however many paths, labels, hostnames or homes a run is seen
through, its spend is counted once.

Expected totals come from the corpus files themselves (the known spend of every
charge in the real engine's streams and assess.json files, summed here by hand), and
every case is compared with one clean sync of one copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from omg_ledger.cli import main
from omg_ledger.db import open_ledger
from omg_ledger.errors import HomeConflict
from omg_ledger.reports.cost import cost_report
from omg_ledger.reports.runs import list_runs, show_run
from omg_ledger.sync import Home, sync

from .conftest import CORPUS

KNOWN_NANOS = 1_716_700_000  # $1.7167: README's corpus total, every charge once
RUN = "20261129-181518.678721711-1"


def _corpus_known_nanos(home: Path) -> int:
    """Known spend straight from the files: every accounting line's cost_usd (unless
    cost_unknown) plus each assess.json's assess_cost_usd."""
    total = Decimal(0)
    for stream in (home / "runs").glob("*/events.jsonl"):
        for line in stream.read_text().splitlines():
            data = json.loads(line)
            if "cost_usd" in data and not data.get("cost_unknown"):
                total += Decimal(str(data["cost_usd"]))
    for assess in (home / "runs").glob("*/assess.json"):
        data = json.loads(assess.read_text())
        if isinstance(data.get("assess_cost_usd"), int | float) and not data.get("assess_cost_unknown"):
            total += Decimal(str(data["assess_cost_usd"]))
    return int(total * 10**9)


def _totals(engine) -> tuple:
    report = cost_report(engine, by=None)
    with engine.connect() as conn:
        view = conn.execute(text("SELECT COUNT(*), SUM(cost_nano_usd) FROM v_charges")).one()
        runs = conn.execute(text("SELECT COUNT(*) FROM v_runs")).scalar()
    listed = list_runs(engine)
    return (report["total"]["cost_nano_usd"], report["total"]["invocations"], tuple(view), runs, len(listed),
            sum(r["cost_nano_usd"] for r in listed))


@pytest.fixture
def clean_totals(tmp_path_factory):
    engine = open_ledger(str(tmp_path_factory.mktemp("clean") / "ledger.sqlite"))
    sync(engine, [Home.from_path(str(CORPUS / "home"), "clean")])
    totals = _totals(engine)
    engine.dispose()
    assert totals[0] == KNOWN_NANOS == _corpus_known_nanos(CORPUS / "home")
    return totals


@pytest.fixture
def home(tmp_path) -> Path:
    target = tmp_path / "home"
    shutil.copytree(CORPUS / "home", target, symlinks=True)
    return target


def test_same_directory_with_and_without_a_label_is_one_home(tmp_path, home, db_url, clean_totals):
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home))])  # default label <hostname>:<path>
        with pytest.raises(HomeConflict, match=r"already indexed as home '.*:.*home'"):
            sync(engine, [Home.from_path(str(home), "work")])
        sync(engine, [Home.from_path(str(home))])
        assert _totals(engine) == clean_totals
    finally:
        engine.dispose()


def test_label_first_then_no_label_finds_the_labelled_home(home, db_url, clean_totals):
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "work")])
        sync(engine, [Home.from_path(str(home))])
        with engine.connect() as conn:
            assert conn.execute(text("SELECT label FROM homes")).scalars().all() == ["work"]
        assert _totals(engine) == clean_totals
    finally:
        engine.dispose()


def test_through_a_symlink_is_the_same_home(tmp_path, home, db_url, clean_totals):
    link = tmp_path / "link"
    link.symlink_to(home)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home))])
        sync(engine, [Home.from_path(str(link))])
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM homes")).scalar() == 1
            assert conn.execute(text("SELECT COUNT(*) FROM runs WHERE gone")).scalar() == 0
        assert _totals(engine) == clean_totals
    finally:
        engine.dispose()


def test_a_hostname_change_is_not_a_new_home(tmp_path, home, clean_totals):
    """A real new hostname: the second sync runs in its own UTS namespace."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux `unshare` is needed for this test")
    db = tmp_path / "ledger.sqlite"
    cli = [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(db), "--home", str(home)]
    first = subprocess.run(cli, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    renamed = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname renamed-box && exec "$@"', "sh", *cli],
                             capture_output=True, text=True)
    assert renamed.returncode == 0, renamed.stderr
    hostnames = subprocess.run(["unshare", "--uts", "sh", "-c", "hostname renamed-box && hostname"],
                               capture_output=True, text=True).stdout.strip()
    assert hostnames == "renamed-box"  # the namespace really had another hostname
    engine = open_ledger(str(db))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM homes")).scalar() == 1
        assert _totals(engine) == clean_totals
    finally:
        engine.dispose()


def test_a_label_for_another_directory_is_refused_unless_relabel(tmp_path, home, db_url):
    other = tmp_path / "other"
    shutil.copytree(CORPUS / "home", other)
    (other / "runs" / RUN).rename(other / "runs" / "20300101-000000.000000001-1")
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "work")])
        with pytest.raises(HomeConflict, match="--relabel"):
            sync(engine, [Home.from_path(str(other), "work")])
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM runs WHERE gone")).scalar() == 0
        report = sync(engine, [Home.from_path(str(other), "work")], relabel=True)
        assert report.runs_gone == 1  # the label now holds the other directory
    finally:
        engine.dispose()


@pytest.mark.parametrize("copy", ["whole", "mid-run prefix"])
def test_a_run_copied_into_another_home_is_billed_once(tmp_path, home, db_url, clean_totals, copy):
    second = tmp_path / "second"
    (second / "runs").mkdir(parents=True)
    shortened = set()
    for run_dir in sorted((home / "runs").iterdir()):
        target = second / "runs" / run_dir.name
        shutil.copytree(run_dir, target)
        if copy == "mid-run prefix" and (target / "events.jsonl").exists():
            lines = (target / "events.jsonl").read_bytes().splitlines(keepends=True)
            (target / "events.jsonl").write_bytes(b"".join(lines[: max(1, len(lines) // 2)]))
            if len(lines) > 1:
                shortened.add(run_dir.name)
            (target / "state.json").unlink(missing_ok=True)
            (target / "assess.json").unlink(missing_ok=True)
    engine = open_ledger(db_url)
    try:
        # The copy is synced first: the fuller copy must still be the billed one.
        sync(engine, [Home.from_path(str(second), "machine-b")])
        sync(engine, [Home.from_path(str(home), "machine-a")])
        assert _totals(engine) == clean_totals
        billed = {r["run_id"]: r["home"] for r in list_runs(engine)}
        # The copy holding more of the stream is billed, whichever was seen first.
        assert {billed[run_id] for run_id in shortened} <= {"machine-a"}
        assert bool(shortened) == (copy == "mid-run prefix")
        detail = show_run(engine, RUN)
        assert detail["copies_in"] and detail["billed"] is True
        # Each home lists every run it holds (25 corpus runs), each once, as its billed
        # copy wherever that copy is: a backup's listing is not empty.
        for label in ("machine-a", "machine-b"):
            held = list_runs(engine, home_labels=(label,))
            assert len(held) == len({r["run_id"] for r in held}) == 25
            assert sum(r["cost_nano_usd"] for r in held) == KNOWN_NANOS
        if shortened:
            assert {r["home"] for r in list_runs(engine, home_labels=("machine-b",))
                    if r["run_id"] in shortened} == {"machine-a"}
        with engine.connect() as conn:
            diverged = conn.execute(text("SELECT COUNT(*) FROM findings WHERE kind = 'diverged_copy'")).scalar()
        assert diverged == 0  # a prefix is not a divergence
    finally:
        engine.dispose()


ASSESSED_RUN = "20261129-181522.237468643-1"  # goal cycle 1: its assess.json costs $0.0078


@pytest.mark.parametrize("case", ["backup synced first", "original synced first", "original deleted"])
def test_of_copies_with_one_stream_the_one_holding_the_assessment_is_billed(tmp_path, home, db_url, clean_totals,
                                                                            case):
    """A backup taken after run_finished but before the engine wrote assess.json holds the
    whole stream: only the original records the assessment's spend, which the choice of
    the billed copy must not leave out (nor a deleted original's history)."""
    backup = tmp_path / "backup"
    shutil.copytree(home / "runs" / ASSESSED_RUN, backup / "runs" / ASSESSED_RUN)
    (backup / "runs" / ASSESSED_RUN / "assess.json").unlink()
    original, copy = Home.from_path(str(home), "original"), Home.from_path(str(backup), "backup")
    engine = open_ledger(db_url)
    try:
        if case == "backup synced first":
            sync(engine, [copy])
            sync(engine, [original])
        else:
            sync(engine, [original])
            sync(engine, [copy])
        if case == "original deleted":
            shutil.rmtree(home / "runs" / ASSESSED_RUN)
            sync(engine, [original, copy])
        # Every charge once, the $0.0078 assessment included (KNOWN_NANOS, summed from the files).
        assert _totals(engine) == clean_totals
        billed = {r["run_id"]: r["home"] for r in list_runs(engine)}
        assert billed[ASSESSED_RUN] == "original"
        goal = {r["key"]: r["cost_nano_usd"] for r in cost_report(engine, by="goal")["rows"]}
        # Cycle 1: stream $0.0966 + assessment $0.0078; cycle 2: $0.0824 (its own assessment included).
        assert goal[ASSESSED_RUN] == 104_400_000 + 82_400_000
    finally:
        engine.dispose()


def test_a_ledger_that_billed_the_copy_without_the_assessment_is_corrected_on_its_next_sync(tmp_path, home, db_url):
    """What DERIVATION_VERSION 6 left: the backup (same stream, no assess.json) billed, the
    assessment's $0.0078 out of every total. Nothing on disk changes; the next sync
    re-derives every run under the new rule and bills the original, as a cold sync does."""
    from .ledger_dump import diff, dump

    backup = tmp_path / "backup"
    shutil.copytree(home / "runs" / ASSESSED_RUN, backup / "runs" / ASSESSED_RUN)
    (backup / "runs" / ASSESSED_RUN / "assess.json").unlink()
    homes = [Home.from_path(str(home), "original"), Home.from_path(str(backup), "backup")]
    engine = open_ledger(db_url)
    try:
        sync(engine, homes)
        with engine.begin() as conn:
            conn.execute(text("UPDATE runs SET derivation_version = 6"))
            conn.execute(text("UPDATE runs SET billed = (home_id = (SELECT id FROM homes WHERE label = 'backup')) "
                              "WHERE run_id = :r"), {"r": ASSESSED_RUN})
        assert cost_report(engine)["total"]["cost_nano_usd"] == KNOWN_NANOS - 7_800_000  # what version 6 billed
        sync(engine, homes)
        assert cost_report(engine)["total"]["cost_nano_usd"] == KNOWN_NANOS
    finally:
        engine.dispose()
    cold = open_ledger(str(tmp_path / "cold.sqlite"))
    try:
        sync(cold, homes)
        assert dump(db_url) == dump(str(tmp_path / "cold.sqlite")), diff(dump(str(tmp_path / "cold.sqlite")),
                                                                          dump(db_url))
    finally:
        cold.dispose()


def _diverged_copy(home: Path, second: Path, blank_after_first: bool = False) -> None:
    """A copy of RUN in ``second`` whose third event says something else (and, with
    ``blank_after_first``, a blank line after its first)."""
    shutil.copytree(home / "runs" / RUN, second / "runs" / RUN)
    stream = second / "runs" / RUN / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    changed = json.loads(lines[2])
    changed["detail"] = "this copy went another way"
    blank = [b"\n"] if blank_after_first else []
    stream.write_bytes(b"".join([lines[0], *blank, lines[1], json.dumps(changed).encode() + b"\n", *lines[3:]]))


def test_diverging_copies_are_a_finding_and_still_billed_once(tmp_path, home, db_url):
    second = tmp_path / "second"
    _diverged_copy(home, second)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "a"), Home.from_path(str(second), "b")])
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT f.kind, f.detail FROM findings f JOIN runs r ON r.id = f.run_pk "
                "WHERE f.kind = 'diverged_copy'")).all()
            billed = conn.execute(text("SELECT COUNT(*) FROM runs WHERE run_id = :r AND billed"), {"r": RUN}).scalar()
        assert len(rows) == 1 and "differ from stream line 3" in rows[0].detail
        assert billed == 1
    finally:
        engine.dispose()


def test_a_diverged_copy_is_named_at_its_own_line_number(tmp_path, home, db_url):
    """The finding names the line of the copy's file where it differs: a blank line before
    it (never stored) still counts, so the copy's changed third event is its line 4."""
    second = tmp_path / "second"
    _diverged_copy(home, second, blank_after_first=True)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "a"), Home.from_path(str(second), "b")])
        with engine.connect() as conn:
            [detail] = conn.execute(text("SELECT detail FROM findings WHERE kind = 'diverged_copy'")).scalars()
        assert "differ from stream line 4:" in detail, detail
    finally:
        engine.dispose()


def test_equal_ids_that_are_different_runs_stay_two_and_show_says_how_to_pick(tmp_path, home, db_url):
    other = tmp_path / "other"
    shutil.copytree(home / "runs" / RUN, other / "runs" / RUN)
    stream = other / "runs" / RUN / "events.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["ts"] = "2026-11-30T09:00:00.000000001Z"  # another machine's run with the same id
    stream.write_bytes(json.dumps(first).encode() + b"\n" + b"".join(lines[1:]))
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "a"), Home.from_path(str(other), "b")])
        assert sum(1 for r in list_runs(engine) if r["run_id"] == RUN) == 2
        result = CliRunner().invoke(main, ["show", "--db", str(engine.url.render_as_string(hide_password=False)),
                                           RUN])
        assert result.exit_code == 2 and "pick one with --home LABEL" in result.output
        assert show_run(engine, RUN, "b")["home"] == "b"
    finally:
        engine.dispose()


def test_homes_command_lists_renames_and_forgets(tmp_path, home):
    db = str(tmp_path / "ledger.sqlite")
    runner = CliRunner()
    assert runner.invoke(main, ["sync", "--db", db, "--home", f"work={home}"]).exit_code == 0
    listed = runner.invoke(main, ["homes", "--db", db, "--json"])
    (row,) = json.loads(listed.output)
    assert (row["label"], row["path"], row["runs"], row["gone"]) == ("work", str(home), 25, 0)
    assert row["last_synced_at"].endswith("Z")
    assert runner.invoke(main, ["homes", "rename", "--db", db, "work", "laptop"]).exit_code == 0
    assert "laptop" in runner.invoke(main, ["homes", "--db", db]).output
    refused = runner.invoke(main, ["homes", "forget", "--db", db, "laptop"])
    # Without --yes: what it would remove (the corpus home's 25 runs), or that there is no such home.
    assert refused.exit_code == 2 and f"forgetting 'laptop' ({home}) removes its 25 run(s)" in refused.output
    assert "--yes" in refused.output
    mistyped = runner.invoke(main, ["homes", "forget", "--db", db, "lapotp"])
    assert mistyped.exit_code == 2 and "no home is labelled 'lapotp'" in mistyped.output
    forgot = runner.invoke(main, ["homes", "forget", "--db", db, "laptop", "--yes"])
    assert forgot.exit_code == 0 and "25 run(s)" in forgot.output
    assert json.loads(runner.invoke(main, ["homes", "--db", db, "--json"]).output) == []
    assert os.path.isdir(home / "runs" / RUN)  # the directory itself is never touched


@pytest.mark.parametrize("label, message", [
    ("", "NEW was given an empty value"), ("a=b", "cannot hold '='"), ("x" * 600, "at most 512 characters")])
def test_homes_rename_refuses_a_label_sync_could_not_name_again(tmp_path, home, label, message):
    db = str(tmp_path / "ledger.sqlite")
    runner = CliRunner()
    assert runner.invoke(main, ["sync", "--db", db, "--home", f"work={home}"]).exit_code == 0
    refused = runner.invoke(main, ["homes", "rename", "--db", db, "work", label])
    assert refused.exit_code == 2 and message in refused.output, refused.output
    assert [row["label"] for row in json.loads(runner.invoke(main, ["homes", "--db", db, "--json"]).output)] == ["work"]
    # The label it keeps still names the home for sync.
    assert runner.invoke(main, ["sync", "--db", db, "--home", f"work={home}"]).exit_code == 0


def test_homes_counts_a_home_with_no_run_as_none_billed_elsewhere(db_url, tmp_path, home):
    """The listing's outer join gives a home without runs one row of NULL run columns:
    0 runs, 0 gone, 0 copies billed elsewhere (not 1); a home holding copies counts them."""
    from omg_ledger.reports.homes import list_homes

    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    twin = tmp_path / "twin"
    shutil.copytree(home, twin, symlinks=True)
    engine = open_ledger(db_url)
    try:
        for label, path in (("a", home), ("b", twin), ("c", empty)):
            sync(engine, [Home.from_path(str(path), label)])
        counts = {h["label"]: (h["runs"], h["gone"], h["copies_elsewhere"]) for h in list_homes(engine)}
    finally:
        engine.dispose()
    assert counts == {"a": (25, 0, 0), "b": (25, 0, 25), "c": (0, 0, 0)}


def test_a_run_directory_copied_under_another_run_id_is_billed_once(tmp_path, home, db_url):
    """`cp -a runs/X runs/Y`: every line of Y's stream names X (another run's, not Y's),
    and so does Y's state.json; the assess.json beside it is X's assessment. None of it
    is Y's spend: X is still billed once, and Y's snapshot is a problem, not recovered
    charges."""
    second = tmp_path / "second"
    copied = {"20261129-181522.237468643-1": "20261129-181522.237468643-7",  # goal cycle 1, with assess.json
              RUN: "20261129-181518.678721711-9"}
    for source, name in copied.items():
        shutil.copytree(home / "runs" / source, second / "runs" / name)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "a"), Home.from_path(str(second), "b")])
        known = _corpus_known_nanos(home)
        assert cost_report(engine, by=None)["total"]["cost_nano_usd"] == known == KNOWN_NANOS
        by_home = cost_report(engine, by="run", home_labels=("b",))
        assert by_home["total"]["invocations"] == 0 and by_home["rows"] == []
        with engine.connect() as conn:
            assert conn.execute(text("SELECT SUM(cost_nano_usd) FROM v_charges")).scalar() == known
            reasons = [r for (r,) in conn.execute(text("SELECT reason FROM problems WHERE path LIKE '%state.json'"))]
        assert sum(r["cost_nano_usd"] for r in list_runs(engine)) == known
        assert sorted(r.split(":")[0] for r in reasons) == [
            f"state.json names run_id '{source}', not this directory's '{name}'" for source, name in sorted(copied.items())]
    finally:
        engine.dispose()


def test_forgetting_a_home_resolves_its_open_problems(db_url, tmp_path):
    """A forgotten home is never synced again, so nothing else would ever resolve its
    problems: `audit` would need attention for ever. Forgetting resolves them; another
    home's problems stay open."""
    from .test_cost import ev, t, write_run

    homes = {}
    for label in ("gone", "kept"):
        home = homes[label] = tmp_path / label
        run = f"20261129-100000.000000001-{label}"
        write_run(home, run, [ev(run, t("10:00:00"), "run_started"), ev(run, t("10:00:01"), "run_finished",
                                                                      outcome="passed")])
        with open(home / "runs" / run / "events.jsonl", "a") as f:
            f.write("not json\n")
    (homes["gone"] / "plans").mkdir()
    (homes["gone"] / "plans" / "p1").write_text("a file where a plan directory goes")
    db = db_url if "://" in db_url and not db_url.startswith("sqlite") else db_url.removeprefix("sqlite:///")
    runner = CliRunner()
    for label, home in homes.items():
        assert runner.invoke(main, ["sync", "--db", db, "--home", f"{label}={home}"]).exit_code == 0
    before = json.loads(runner.invoke(main, ["problems", "--db", db, "--json"]).output)
    assert {p["path"].removeprefix(str(tmp_path)).split("/")[1] for p in before} == {"gone", "kept"}
    assert runner.invoke(main, ["homes", "forget", "--db", db, "gone", "--yes"]).exit_code == 0

    still_open = json.loads(runner.invoke(main, ["problems", "--db", db, "--json"]).output)
    assert [p["path"] for p in still_open] == [str(homes["kept"] / "runs" / "20261129-100000.000000001-kept"
                                                   / "events.jsonl")]
    every = json.loads(runner.invoke(main, ["problems", "--db", db, "--all", "--json"]).output)
    resolved = [p for p in every if not p["open"]]
    assert resolved and all(p["path"].startswith(str(homes["gone"]) + "/") and p["resolved_at"] for p in resolved)
    assert len(resolved) + 1 == len(every) == len(before)


def test_forgetting_the_home_of_the_billed_copy_leaves_no_finding_against_it(tmp_path, home, db_url):
    """A diverged_copy says how a copy differs from the billed one; once that one's home is
    forgotten the copy left is the run, billed alone, as a sync of its home alone has it."""
    second = tmp_path / "second"
    _diverged_copy(home, second)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "a"), Home.from_path(str(second), "b")])
        runner = CliRunner()
        assert runner.invoke(main, ["homes", "forget", "--db", db_url, "a", "--yes"]).exit_code == 0
        with engine.connect() as conn:
            found = conn.execute(text("SELECT f.detail FROM findings f WHERE f.kind = 'diverged_copy'")).scalars().all()
            billed = conn.execute(text("SELECT billed FROM runs WHERE run_id = :r"), {"r": RUN}).scalars().all()
        assert billed == [True]
        assert found == []  # was: "... and the billed copy (home a) ... differ from stream line 3"
    finally:
        engine.dispose()
