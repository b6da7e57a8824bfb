"""A sync that writes many runs per transaction stores exactly what one transaction per
run stores (the speed work must not change a row), and a cold sync of the scale corpus
reproduces the digest taken on main before that work (tests/fixtures/scale-digest-v4.json)."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from sqlalchemy import text

from omg_ledger import derive
from omg_ledger.db import open_ledger
from omg_ledger.provenance import PASS_COUNT_COLUMNS_ALL
from omg_ledger.sync import SYNC_BATCH_RUNS, Home, sync

from .conftest import CORPUS, CORPUS_HOME
from .ledger_dump import diff, dump
from .scale_digest import digest

SCALE = CORPUS.parent / "corpus-scale"
GOLDEN = Path(__file__).parent / "fixtures" / "scale-digest-v4.json"
SCALE_RUNS = 305


@pytest.fixture(scope="module")
def scale_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("scale") / "home"
    with tarfile.open(SCALE / "home.tar.gz") as archive:
        archive.extractall(home, filter="data")
    return home


def _synced(db: str, home: Path, **options):
    engine = open_ledger(db)
    report = sync(engine, [Home.from_path(str(home), "scale")], **options)
    return engine, report


@pytest.fixture(scope="module")
def fast_and_slow(scale_home, tmp_path_factory):
    where = tmp_path_factory.mktemp("ledgers")
    # More runs than one default batch holds: the fast path commits a full batch and a partial one.
    assert SCALE_RUNS > SYNC_BATCH_RUNS
    fast = _synced(str(where / "fast.sqlite"), scale_home)  # as operators sync: the pool, on 2+ CPUs
    slow = _synced(str(where / "slow.sqlite"), scale_home, batch_runs=1, workers=0)  # the plainest path
    yield fast, slow
    fast[0].dispose()
    slow[0].dispose()


def test_batched_cold_sync_of_the_scale_corpus_equals_one_transaction_per_run(fast_and_slow):
    (fast, fast_report), (slow, slow_report) = fast_and_slow
    fast_dump, slow_dump = dump(fast), dump(slow)
    assert len(fast_dump["runs"]) == SCALE_RUNS
    assert fast_dump == slow_dump, diff(fast_dump, slow_dump)
    for report in (fast_report, slow_report):
        assert (report.runs_seen, report.runs_changed, report.problems) == (SCALE_RUNS, SCALE_RUNS, [])
    assert (fast_report.events_ingested, fast_report.bytes_read) == (slow_report.events_ingested,
                                                                      slow_report.bytes_read)
    assert fast_report.events_ingested == len(fast_dump["events"])


def _v4_execution_cost(row: dict) -> int | None:
    """rounds.cost_nano_usd as version 4 wrote it: 0 for an execution whose stream charges
    all had unknown prices (an execution recovered from state.json kept NULL)."""
    if row["cost_nano_usd"] is None and row["cost_unknown"] and row["outcome"] is not None:
        return 0
    return row["cost_nano_usd"]


def test_batched_cold_sync_reproduces_the_digest_taken_before_the_speed_work(fast_and_slow, scale_home):
    golden = json.loads(GOLDEN.read_text())
    # Version 5 changed a rule for a directory whose state.json names another run, which
    # the scale corpus has none of, and made an execution paid only at unknown prices cost
    # NULL where v4 wrote 0; versions 6 and 7 changed which copy is billed (one without a
    # stream; of copies with one stream, the one with the most charges, then with an assess.json), and the scale
    # corpus has no copies (version 9 too); version 8 reads a budget overrun from the engine's whole message
    # and leaves judged unknown behind a snapshot that is an earlier terminal's, which its runs
    # do not change; version 10 reads a null event field as absent, version 11 a key in
    # another case as its field and version 12 a lone surrogate escape as U+FFFD, and no scale
    # line holds any; version 13 reads a negative budget_usd as none, and no scale snapshot
    # holds one; version 14 leaves a snapshot_behind node's duration unknown and numbers a
    # diverged copy's line as in its file, and the scale corpus has neither; version 15 bills
    # a stream-less copy's planning call from its state.json, and every scale run has its
    # stream; version 16 writes a year before 1000 with four digits, and every scale time is
    # after 1970; version 17 keys a copy whose stream's head is damaged by its run id, and
    # every scale stream begins with its first event; version 18 reads a byte that is not
    # UTF-8 in a string as U+FFFD, and the scale corpus holds none; version 19 dates an
    # assessment at its run's first scheduler leg's end, which is its last event in every
    # scale run, recovers no verdict after a feedback round, finds no damaged assess.json and
    # reads runner streams, which it has none of: its rows are the v4 ones but for those and
    # the version stamp.
    assert (derive.DERIVATION_VERSION, golden["derivation_version"]) == (19, 4), (
        "the rules changed: derived rows may differ now; take a new golden digest at the new version")
    (fast, _), _ = fast_and_slow
    # runs.passes* (migration 0010) came after the digest was taken: the v4 digest leaves
    # them out (test_corpus_scale checks their values); every other runs column is compared.
    with fast.connect() as conn:
        assert {v for (v,) in conn.execute(text("SELECT DISTINCT derivation_version FROM runs"))} == {derive.DERIVATION_VERSION}
    ours = digest(fast, str(scale_home), leave_out={"runs": set(PASS_COUNT_COLUMNS_ALL)},
                  as_of={"runs": {"derivation_version": lambda row: 4},
                         "rounds": {"cost_nano_usd": _v4_execution_cost}})
    # derive_states (where each run's derivation stopped, a cache of the stored events)
    # came after the digest was taken: exactly the runs whose last leg is still open keep
    # one (every scale stream is shorter than derive.RESUMABLE_FROM_LINE); every other
    # table is as it was.
    ours.pop("derive_states")
    with fast.connect() as conn:
        assert conn.execute(text("SELECT max(line_no) FROM events")).scalar() < derive.RESUMABLE_FROM_LINE
        kept = set(conn.execute(text("SELECT run_pk FROM derive_states")).scalars())
        open_last_leg = set(conn.execute(text("SELECT id FROM runs WHERE last_leg_open")).scalars())
    assert kept == open_last_leg and 0 < len(kept) < SCALE_RUNS
    assert ours == golden["tables"], {t: (ours.get(t), golden["tables"].get(t))
                                      for t in set(ours) | set(golden["tables"]) if ours.get(t) != golden["tables"].get(t)}


def test_batches_equal_one_transaction_per_run_with_copies_and_progress(tmp_path, db_url):
    """The corpus twice (a copy of every run in a second home, so every run is settled
    against a copy) in batches of 4 vs 1; progress reports the runs committed."""
    second = tmp_path / "second"
    shutil.copytree(CORPUS_HOME / "runs", second / "runs")
    homes = [Home.from_path(str(CORPUS_HOME), "first"), Home.from_path(str(second), "second")]
    runs = len(list((CORPUS_HOME / "runs").iterdir()))
    dumps = []
    for batch in (4, 1):
        url = db_url if batch == 4 else str(tmp_path / "reference.sqlite")
        engine = open_ledger(url)
        seen: list[tuple[str, int, int]] = []
        sync(engine, homes, batch_runs=batch, progress=lambda stage, done, total, seen=seen: seen.append(
            (stage, done, total)))
        dumps.append(dump(engine))
        engine.dispose()
        committed = [done for stage, done, total in seen if stage == "sync"]
        ends = [*range(batch, runs, batch), runs]
        assert committed == [0, *ends, 0, *ends], (batch, committed)  # each home: 0, then each batch's end
    batched, reference = dumps
    assert batched == reference, diff(batched, reference)
    assert sum(1 for row in batched["runs"] if dict(row)["billed"]) == runs  # each run billed once


@pytest.mark.parametrize("workers", [0, 2])
def test_new_runs_read_and_derived_by_worker_processes_equal_the_inline_path(fast_and_slow, scale_home, tmp_path,
                                                                           workers):
    """Batches of 250 read here (workers=0) or by two worker processes: the ledger of
    one transaction per run read here."""
    _, (slow, slow_report) = fast_and_slow
    synced, report = _synced(str(tmp_path / "synced.sqlite"), scale_home, workers=workers)
    try:
        synced_dump, slow_dump = dump(synced), dump(slow)
        assert synced_dump == slow_dump, diff(synced_dump, slow_dump)
        assert (report.runs_changed, report.events_ingested, report.bytes_read, report.problems) == (
            SCALE_RUNS, slow_report.events_ingested, slow_report.bytes_read, [])
    finally:
        synced.dispose()


def test_rows_written_out_mid_run_equal_one_transaction_per_run(fast_and_slow, scale_home, tmp_path, monkeypatch):
    """Held-back rows written out whenever 7 are held (a run's lines between batches of
    its walk, its finished rows while the walk goes on, its derive state): the same
    ledger as one transaction per run, and the batch still commits whole runs."""
    from omg_ledger import store

    monkeypatch.setattr(store, "HELD_BACK_ROWS", 7)
    flushes = []
    flush = store.PendingRows.flush
    monkeypatch.setattr(store.PendingRows, "flush", lambda self, conn: (flushes.append(self.count), flush(self, conn)))
    _, (slow, _) = fast_and_slow
    spilled, report = _synced(str(tmp_path / "spilled.sqlite"), scale_home, workers=0)
    try:
        spilled_dump, slow_dump = dump(spilled), dump(slow)
        assert spilled_dump == slow_dump, diff(spilled_dump, slow_dump)
        assert (report.runs_changed, report.problems) == (SCALE_RUNS, [])
        # More flushes than runs (a batch commit alone is two for all 305): rows went out mid-run.
        assert len(flushes) > SCALE_RUNS
    finally:
        spilled.dispose()


def test_batch_size_below_one_is_refused(tmp_path):
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    with pytest.raises(ValueError, match="batch_runs"):
        sync(engine, [Home.from_path(str(CORPUS_HOME))], batch_runs=0)
    engine.dispose()


def test_pooled_cold_sync_of_the_corpus_records_the_same_problems_as_the_inline_path(tmp_path):
    """The corpus with bad input added (a bad line, a state.json that is not JSON, a
    symlink in a run directory): a worker's problems are recorded by the writer under the
    run's key, as the inline path records them."""
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME / "runs", home / "runs")
    first, second, third = sorted((home / "runs").iterdir())[:3]
    with open(first / "events.jsonl", "a") as f:
        f.write("{not json\n")
    (second / "state.json").write_text("{")
    (third / "elsewhere.json").symlink_to("/etc/hostname")
    ledgers = {}
    for workers in (0, 2):
        engine = open_ledger(str(tmp_path / f"w{workers}.sqlite"))
        report = sync(engine, [Home.from_path(str(home), "corpus")], workers=workers)
        ledgers[workers] = (dump(engine), report)
        engine.dispose()
    (inline, inline_report), (pooled, pooled_report) = ledgers[0], ledgers[2]
    assert len(inline_report.problems) == 3, inline_report.problems
    assert pooled == inline, diff(pooled, inline)
    assert pooled_report.problems == inline_report.problems
    assert (pooled_report.runs_changed, pooled_report.events_ingested, pooled_report.bytes_read) == (
        inline_report.runs_changed, inline_report.events_ingested, inline_report.bytes_read)


def test_a_run_read_as_new_by_a_worker_resolves_the_problems_left_under_its_directory(tmp_path):
    """A problem recorded under a run directory the ledger no longer holds a run for (its
    row deleted: run_pk set to NULL) is resolved when a worker reads the directory again
    and no longer sees it — and kept open when it is seen again."""
    from .builders import ev, write_run

    clock = 1_800_000_000 * 10**9
    stream = [ev("run_started", 0, graph="g"), ev("node_started", 1, node_id="a")]
    results = {}
    for workers in (0, 2):
        home = tmp_path / f"home{workers}"
        good = write_run(home, "r1", stream)
        bad = write_run(home, "r2", stream)
        with open(good / "events.jsonl", "a") as f:
            f.write("{not json\n")
        with open(bad / "events.jsonl", "a") as f:
            f.write("{not json\n")
        db = str(tmp_path / f"w{workers}.sqlite")
        engine = open_ledger(db)
        sync(engine, [Home.from_path(str(home), "h")], clock_ns=lambda: clock)
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM runs")  # both runs are new again; their problems stay
        with open(good / "events.jsonl", "w") as f:  # r1's bad line is gone, r2's stays
            f.write("".join(json.dumps({**e, "run_id": "r1"}, separators=(",", ":")) + "\n" for e in stream))
        report = sync(engine, [Home.from_path(str(home), "h")], clock_ns=lambda: clock + 10**9, workers=workers)
        with engine.connect() as conn:
            open_paths = sorted(p.replace(str(home), "HOME") for (p,) in conn.exec_driver_sql(
                "SELECT path FROM problems WHERE resolved_at IS NULL"))
            resolved = sorted(p.replace(str(home), "HOME") for (p,) in conn.exec_driver_sql(
                "SELECT path FROM problems WHERE resolved_at IS NOT NULL"))
        engine.dispose()
        assert report.runs_changed == 2
        results[workers] = (open_paths, resolved)
    assert results[2] == results[0] == (["HOME/runs/r2/events.jsonl"], ["HOME/runs/r1/events.jsonl"])


def test_a_batch_counts_the_changed_runs_it_writes_not_the_runs_looked_at(tmp_path, db_url, monkeypatch):
    """Three changed runs spread over the corpus's 25 (the first, the 13th, the last): in
    batches of 3 changed runs they are one commit, where one per run is three; a batch
    also ends after SYNC_BATCH_LOOKS times its size of runs looked at (2 × 3 = 6 here:
    three commits again). Counting every run looked at, batches of 3 were three commits."""
    from sqlalchemy import event

    from omg_ledger import sync as sync_module

    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME / "runs", home / "runs")
    names = sorted(p.name for p in (home / "runs").iterdir() if (p / "events.jsonl").is_file())
    changed = [names[0], names[len(names) // 2], names[-1]]
    assert len(names) == 25 and len(names) // 2 > 2 * 3  # (the changed runs are more than a window apart)
    homes = [Home.from_path(str(home), "h")]
    engine = open_ledger(db_url)
    commits: list[int] = []
    event.listen(engine, "commit", lambda conn: commits.append(1))

    def commits_of_a_sync(batch_runs: int) -> int:
        for name in changed:  # one more valid line each: the last line again
            stream = home / "runs" / name / "events.jsonl"
            stream.write_bytes(stream.read_bytes() + stream.read_bytes().splitlines(keepends=True)[-1])
        commits.clear()
        report = sync(engine, homes, batch_runs=batch_runs, workers=0)
        assert (report.runs_changed, report.events_ingested) == (3, 3)
        return len(commits)

    try:
        sync(engine, homes, workers=0)
        one_per_run = commits_of_a_sync(1)
        assert commits_of_a_sync(3) == one_per_run - 2
        monkeypatch.setattr(sync_module, "SYNC_BATCH_LOOKS", 2)
        assert commits_of_a_sync(3) == one_per_run
    finally:
        engine.dispose()
