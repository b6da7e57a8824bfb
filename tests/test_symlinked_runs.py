"""A home whose runs/ or plans/ is a symlink (issue 13, "leaving the home").

A symlinked runs/ is a legitimate setup (the runs on a bigger disk): it is read where
it leads, the resolved directory is reported (sync --json, the TTY summary, `homes`)
and recorded (each run's dir_path). Because such a link may lead anywhere, only
directories named like the engine's ids are runs there; any other directory is a
problem and is never opened, and nothing outside the resolved tree is read.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from omg_ledger.discover import ENGINE_ID

from .builders import copy_run as copy_corpus_run
from .conftest import CORPUS_HOME
from .fswatch import IN_OPEN, watch_tree

CLI = [sys.executable, "-m", "omg_ledger.cli"]
RUN_IDS = ["20261129-181512.929654081-1", "20261129-181518.678721711-1", "20261129-181522.329723440-2"]
PLAN_ID = "20261129-181522.137935627-1"  # the corpus plan


def cli(*args: object) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def copy_run(src_name: str, dest: Path) -> None:
    """A corpus run under ``dest``'s name, its stream naming that run (builders.copy_run)."""
    copy_corpus_run(CORPUS_HOME / "runs" / src_name, dest)
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o700 if name in dirs else 0o600)


@pytest.fixture
def linked_home(tmp_path) -> tuple[Path, Path, Path]:
    """home/runs -> disk/omg-runs holding three real runs and things that are not runs;
    returns (home, the link's target, a decoy run outside the target)."""
    target = tmp_path / "disk" / "omg-runs"
    for run_id in RUN_IDS:
        copy_run(run_id, target / run_id)
    copy_run(RUN_IDS[0], target / "notes")  # a real run's files, under a name the engine never makes
    (target / "lost+found").mkdir()
    (target / "README.txt").write_text("runs live here\n")  # a file: not a run, as in any runs/
    decoy = tmp_path / "elsewhere" / "20261129-181599.000000001-1"
    copy_run(RUN_IDS[1], decoy)
    os.symlink(decoy, target / decoy.name)  # run-shaped, but a link out of the tree
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(target, home / "runs")
    return home, target, decoy


def test_symlinked_runs_is_read_where_it_leads_and_only_run_shaped_directories_count(linked_home, tmp_path):
    home, target, decoy = linked_home
    db = tmp_path / "ledger.sqlite"
    with watch_tree(target / "notes", extra_mask=IN_OPEN) as notes_opened, \
            watch_tree(decoy.parent, extra_mask=IN_OPEN) as decoy_opened:
        result = cli("sync", "--db", db, "--home", home, "--json")
    assert result.returncode == 0, result.stderr
    assert notes_opened == [] and decoy_opened == []  # never opened, not even listed
    report = json.loads(result.stdout)
    assert report["runs_seen"] == 3 and report["runs_changed"] == 3
    assert [(d["dir"], d["resolved"]) for d in report["symlinked_dirs"]] == [(str(home / "runs"), str(target))]
    problems = {p["path"]: p["reason"] for p in report["problems"]}
    assert set(problems) == {str(target / "notes"), str(target / "lost+found"), str(target / decoy.name)}
    assert "not an oh-my-graph run or plan id" in problems[str(target / "notes")]
    assert "symlink not followed" in problems[str(target / decoy.name)]
    for path in problems:  # one line each on stderr, as every problem
        assert f"problem: {path} at byte 0" in result.stderr

    with sqlite3.connect(db) as conn:  # recorded: each run's directory where it really is
        assert conn.execute("SELECT run_id, dir_path FROM runs ORDER BY run_id").fetchall() == [
            (i, str(target / i)) for i in RUN_IDS]

    homes = json.loads(cli("homes", "--db", db, "--json").stdout)
    assert [(h["path"], h["runs_dir"]) for h in homes] == [(str(home), str(target))]
    shown = cli("homes", "--db", db)
    assert shown.returncode == 0 and f"(runs/ -> {target})" in shown.stdout.replace("\n", "")

    again = cli("sync", "--db", db, "--home", home, "--json", "--strict")  # problems stay problems
    assert again.returncode == 1 and json.loads(again.stdout)["runs_changed"] == 0


def test_a_plain_runs_directory_is_unchanged_and_not_reported_as_a_link(tmp_path):
    home = tmp_path / "home"
    copy_run(RUN_IDS[0], home / "runs" / "any name at all")  # a real runs/: names are the engine's business
    db = tmp_path / "ledger.sqlite"
    report = json.loads(cli("sync", "--db", db, "--home", home, "--json").stdout)
    assert report["runs_seen"] == 1 and report["problems"] == [] and report["symlinked_dirs"] == []
    homes = json.loads(cli("homes", "--db", db, "--json").stdout)
    assert homes[0]["runs_dir"] == str(home / "runs")
    assert "runs/ ->" not in cli("homes", "--db", db).stdout


def test_runs_linked_to_etc_indexes_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.symlink("/etc", home / "runs")
    db = tmp_path / "ledger.sqlite"
    result = cli("sync", "--db", db, "--home", home, "--json", "--strict")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["runs_seen"] == 0 and report["events_ingested"] == 0
    real_etc = os.path.realpath("/etc")
    directories = {os.path.join(real_etc, e.name) for e in os.scandir(real_etc) if e.is_dir(follow_symlinks=False)}
    links = {os.path.join(real_etc, e.name) for e in os.scandir(real_etc) if e.is_symlink()}
    assert len(directories) > 10  # what the test is about: /etc has plenty
    assert {p["path"] for p in report["problems"]} == directories | links
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM snapshot_files").fetchone() == (0,)


def test_runs_link_that_leads_nowhere_is_damage_not_every_run_gone(linked_home, tmp_path):
    """The bigger disk not mounted: the link dangles. Before, that read as an empty runs/
    and marked every run gone."""
    home, target, _decoy = linked_home
    db = tmp_path / "ledger.sqlite"
    assert cli("sync", "--db", db, "--home", home).returncode == 0
    unmounted = target.with_name("unmounted")
    target.rename(unmounted)
    result = cli("sync", "--db", db, "--home", home, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["runs_gone"] == 0
    assert [(p["path"], p["reason"]) for p in report["problems"]] == [
        (str(home / "runs"), f"cannot list directory: it is a symlink to {target}: No such file or directory")]
    runs = json.loads(cli("runs", "--db", db, "--json").stdout)
    assert len(runs) == 3 and not any(r["gone"] for r in runs)
    unmounted.rename(target)
    report = json.loads(cli("sync", "--db", db, "--home", home, "--json").stdout)
    assert report["runs_gone"] == 0 and {p["path"] for p in report["problems"]} >= {str(target / "notes")}


def test_symlinked_plans_only_plan_shaped_directories_count(tmp_path):
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    target = tmp_path / "disk" / "plans"
    shutil.copytree(CORPUS_HOME / "plans" / PLAN_ID, target / PLAN_ID)
    shutil.copytree(CORPUS_HOME / "plans" / PLAN_ID, target / "draft")
    os.symlink(target, home / "plans")
    db = tmp_path / "ledger.sqlite"
    with watch_tree(target / "draft", extra_mask=IN_OPEN) as draft_opened:
        report = json.loads(cli("sync", "--db", db, "--home", home, "--json").stdout)
    assert draft_opened == []
    assert [(d["dir"], d["resolved"]) for d in report["symlinked_dirs"]] == [(str(home / "plans"), str(target))]
    assert [p["path"] for p in report["problems"]] == [str(target / "draft")]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT plan_id FROM plans").fetchall() == [(PLAN_ID,)]


def test_a_symlinked_failed_directory_is_not_listed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "n1.out").write_text("not ours\n")
    home = tmp_path / "home"
    run = home / "runs" / RUN_IDS[0]
    copy_run(RUN_IDS[0], run)
    os.symlink(outside, run / "failed")
    db = tmp_path / "ledger.sqlite"
    with watch_tree(outside, extra_mask=IN_OPEN) as opened:
        assert cli("sync", "--db", db, "--home", home).returncode == 0
    assert opened == []
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM run_files WHERE place = 'failed'").fetchone() == (0,)


@pytest.mark.parametrize(("name", "engine_made"), [
    ("20261129-181518.678721711-1", True), ("20261129-181522.329723440-12", True),
    ("20261129-181500.5-1", True),  # nanoseconds with trailing zeros trimmed
    ("20261129-181500-1", True),  # a whole second
    ("notes", False), ("lost+found", False), ("20261129-181518.678721711", False),
    ("20261129-181518.678721711-1-extra", False), ("x20261129-181518.678721711-1", False),
    ("20261129-181518.6787217110-1", False), ("..", False),
])
def test_engine_id_shape(name, engine_made):
    assert bool(ENGINE_ID.fullmatch(name)) is engine_made


def test_runs_dir_is_recorded_on_every_backend(linked_home, db_url):
    from sqlalchemy import select

    from omg_ledger import schema
    from omg_ledger.db import open_ledger
    from omg_ledger.reports.homes import list_homes
    from omg_ledger.sync import Home, sync

    home, target, _decoy = linked_home
    plain = home.parent / "plain-home"
    copy_run(RUN_IDS[0], plain / "runs" / RUN_IDS[0])
    empty = home.parent / "empty-home"
    (empty / "runs").mkdir(parents=True)
    engine = open_ledger(db_url)
    try:
        report = sync(engine, [Home.from_path(str(home)), Home.from_path(str(plain)), Home.from_path(str(empty))])
        assert [d["resolved"] for d in report.symlinked_dirs] == [str(target)]
        with engine.connect() as conn:
            paths = sorted(conn.execute(select(schema.runs.c.dir_path)).scalars())
        assert paths == sorted([str(target / i) for i in RUN_IDS] + [str(plain / "runs" / RUN_IDS[0])])
        by_path = {h["path"]: h["runs_dir"] for h in list_homes(engine)}
        assert by_path == {str(home): str(target), str(plain): str(plain / "runs"), str(empty): None}
    finally:
        engine.dispose()
