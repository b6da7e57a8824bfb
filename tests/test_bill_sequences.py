"""One bill through a history of syncs: a backup home taken at any byte of a run, grown
whole, deleted and taken again, the original deleted (gone) and restored, each home
synced on its own or both together, in a random order of steps.

After every sync each money report must say what the run files say (one charge per
accounting line and assessment, read by hand in test_money_truth), every run once: `cost`
(total and by home), `runs` (one row per run, its own sums), `metrics`, and the v_* views.
A backup that holds less of the stream than the original is never the billed copy; of
two whole copies, the one still on disk is.
"""

from __future__ import annotations

import random
import shutil
import tarfile
from pathlib import Path

import pytest
from sqlalchemy import text

from omg_ledger.db import open_ledger
from omg_ledger.reports import metrics
from omg_ledger.reports.cost import cost_report
from omg_ledger.reports.runs import list_runs
from omg_ledger.sync import Home, sync

from .builders import age_tree, nanos
from .test_money_truth import MEASURES, SCALE, charges_on_disk, grouped, measures, sums

STEPS = 40


@pytest.fixture(scope="module")
def scale_runs(tmp_path_factory) -> Path:
    if not SCALE.exists():
        pytest.fail(f"the scale corpus is missing at {SCALE}")
    root = tmp_path_factory.mktemp("scale")
    with tarfile.open(SCALE) as archive:
        archive.extractall(root, filter="data")
    return root / "runs"


def _copy(source: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)


def _check(engine, truth: list, run_ids: list[str], billed_in_home: dict[str, str]) -> None:
    expected = sums(truth)
    assert measures(cost_report(engine, tz="UTC")["total"]) == expected
    listed = list_runs(engine)
    assert sorted(r["run_id"] for r in listed) == sorted(run_ids)  # each run once
    by_run = grouped(truth, lambda c: c.run_id)
    assert {r["run_id"]: [r[m] for m in MEASURES] for r in listed} == {
        run_id: by_run.get(run_id, [0] * len(MEASURES)) for run_id in run_ids}
    billed_in = {r["run_id"]: r["home"] for r in listed}
    assert {run_id: billed_in[run_id] for run_id in billed_in_home} == billed_in_home
    by_home = {r["key"]: measures(r) for r in cost_report(engine, by="home", tz="UTC")["rows"]}
    assert by_home == grouped(truth, lambda c: billed_in[c.run_id])
    families = {f["name"]: f["samples"] for f in metrics.collect(engine)}
    assert sum(nanos(value) for _, value in families["omg_ledger_known_spend_usd"]) == expected[0]
    assert sum(int(value) for _, value in families["omg_ledger_invocations"]) == expected[1]
    with engine.connect() as conn:
        view = conn.execute(text("SELECT COALESCE(SUM(cost_nano_usd), 0), COUNT(*) FROM v_charges")).one()
    assert [int(v) for v in view] == expected[:2]


@pytest.mark.parametrize("seed", [1, 2])
def test_every_report_bills_each_run_once_through_a_history_of_backups_and_deletions(db_url, tmp_path, scale_runs,
                                                                                     seed):
    rng = random.Random(seed)
    names = sorted(p.name for p in scale_runs.iterdir())
    assessed = [n for n in names if (scale_runs / n / "assess.json").exists()]
    run_ids = sorted(set(rng.sample(names, 20) + assessed[:2]))
    original, backup = tmp_path / "original", tmp_path / "backup"
    (backup / "runs").mkdir(parents=True)
    for run_id in run_ids:
        _copy(scale_runs / run_id, original / "runs" / run_id)
    truth = [c for c in charges_on_disk(scale_runs.parent) if c.run_id in set(run_ids)]
    homes = {"original": original, "backup": backup}
    # What the ledger last read of each copy: (whole, on disk) of the backup's, and whether
    # the original's is gone.
    backup_seen: dict[str, tuple[bool, bool]] = {}
    original_gone: set[str] = set()
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(original), "original")])
        _check(engine, truth, run_ids, {})
        for _ in range(STEPS):
            run_id = rng.choice(run_ids)
            mine, theirs = original / "runs" / run_id, backup / "runs" / run_id
            action = rng.choice(["backup mid-run", "backup whole", "delete original", "restore original",
                                 "delete backup"])
            if action == "backup mid-run":
                _copy(scale_runs / run_id, theirs)
                stream = (theirs / "events.jsonl").read_bytes()
                (theirs / "events.jsonl").write_bytes(stream[:rng.randrange(1, len(stream))])
                (theirs / "assess.json").unlink(missing_ok=True)  # the engine writes it after the last line
            elif action == "backup whole":
                _copy(scale_runs / run_id, theirs)
            elif action == "delete original":
                shutil.rmtree(mine, ignore_errors=True)
            elif action == "restore original" and not mine.exists():
                _copy(scale_runs / run_id, mine)
            elif action == "delete backup":
                shutil.rmtree(theirs, ignore_errors=True)
            synced = rng.choice([("original", "backup"), ("backup",), ("original",)])
            age_tree(original)
            age_tree(backup)
            sync(engine, [Home.from_path(str(homes[label]), label) for label in synced])
            for name in run_ids:
                there = backup / "runs" / name / "events.jsonl"
                if "backup" in synced and there.exists():
                    backup_seen[name] = (there.read_bytes() == (scale_runs / name / "events.jsonl").read_bytes(), True)
                elif "backup" in synced and name in backup_seen:
                    backup_seen[name] = (backup_seen[name][0], False)  # gone: its rows stay as last read
                if "original" in synced:
                    (original_gone.discard if (original / "runs" / name).exists() else original_gone.add)(name)
            expected = {}
            for name, (whole, on_disk) in backup_seen.items():
                if not whole:  # holds less of the stream: never billed, present or gone
                    expected[name] = "original"
                elif on_disk != (name not in original_gone):  # two whole copies: the one on disk
                    expected[name] = "backup" if on_disk else "original"
            _check(engine, truth, run_ids, expected)
    finally:
        engine.dispose()
