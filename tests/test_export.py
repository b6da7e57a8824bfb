"""Moving a ledger to another backend keeps everything, history of gone runs included."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest
from sqlalchemy import func, select

from omg_ledger import schema
from omg_ledger.db import open_ledger, sync_lock
from omg_ledger.errors import BadArgument, LedgerBusy
from omg_ledger.export import export_ledger
from omg_ledger.sync import Home, sync

from .cli_checks import one_line_error
from .conftest import CORPUS_HOME
from .ledger_dump import dump


def test_export_copies_every_row_and_new_syncs_continue(tmp_path, db_url):
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home)
    source = open_ledger(str(tmp_path / "source.sqlite"))
    sync(source, [Home.from_path(str(home), "h")])
    shutil.rmtree(home / "runs" / "20261129-181512.929654081-1")
    sync(source, [Home.from_path(str(home), "h")])  # that run is now history only

    target = open_ledger(db_url)
    copied = export_ledger(source, target)
    assert copied["runs"] == 25 and copied["charges"] > 0
    assert dump(target, cache_hints=True) == dump(source, cache_hints=True)
    with target.connect() as conn:
        gone = conn.execute(select(schema.runs.c.run_id).where(schema.runs.c.gone)).scalars().all()
    assert gone == ["20261129-181512.929654081-1"]
    # The target keeps working: a new home syncs in with fresh keys (sequences moved on).
    sync(target, [Home.from_path(str(CORPUS_HOME), "other")])
    with target.connect() as conn:
        assert len(conn.execute(select(schema.runs.c.id)).all()) == 50


def test_export_refuses_a_non_empty_target(tmp_path):
    source = open_ledger(str(tmp_path / "a.sqlite"))
    target = open_ledger(str(tmp_path / "b.sqlite"))
    sync(target, [Home.from_path(str(CORPUS_HOME), "h")])
    with pytest.raises(BadArgument, match="not empty"):
        export_ledger(source, target)


def test_export_refuses_a_target_holding_only_runner_streams(tmp_path):
    source = open_ledger(str(tmp_path / "a.sqlite"))
    sync(source, [Home.from_path(str(CORPUS_HOME), "h")])
    stream = tmp_path / "runner" / "events.jsonl"
    stream.parent.mkdir()
    stream.write_text('{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"m1","event":"start"}\n')
    target = open_ledger(str(tmp_path / "b.sqlite"))
    sync(target, [], invocation_files=[str(stream)])  # no home: its streams, lines and invocations only
    before = dump(target, cache_hints=True)
    with pytest.raises(BadArgument, match="not empty"):
        export_ledger(source, target)
    assert dump(target, cache_hints=True) == before


@pytest.mark.postgres
def test_export_from_postgresql_is_one_snapshot_while_a_sync_commits(tmp_path, pg_url):
    """A sync that commits while the tables are being read: the copy is the ledger as it was
    when the export began, every table of it (never a stream's checkpoint past the lines
    the copy holds)."""
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home)
    stream = home / "runs" / "20261129-181512.929654081-1" / "events.jsonl"
    whole = stream.read_bytes()
    stream.write_bytes(b"".join(whole.splitlines(keepends=True)[:5]))
    source = open_ledger(pg_url)
    sync(source, [Home.from_path(str(home), "h")])
    as_it_was = dump(source, cache_hints=True)
    stream.write_bytes(whole)  # the rest of the run, synced while the export reads

    def sync_after_events(table: str, count: int) -> None:
        if table == "events":
            sync(source, [Home.from_path(str(home), "h")])

    target = open_ledger(str(tmp_path / "copy.sqlite"))
    export_ledger(source, target, progress=sync_after_events)
    assert dump(source, cache_hints=True) != as_it_was  # the sync did commit meanwhile
    assert dump(target, cache_hints=True) == as_it_was
    sync(target, [Home.from_path(str(home), "h")])  # and the copy catches up like any ledger
    assert dump(target, cache_hints=True) == dump(source, cache_hints=True)


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_export_of_an_empty_ledger_says_so(tmp_path):
    source, target = tmp_path / "empty.sqlite", tmp_path / "copy.sqlite"
    assert cli("db", "upgrade", "--db", source).returncode == 0  # a ledger, never synced
    result = cli("export", "--db", source, "--to", target)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "copied 0 rows: the ledger is empty\n"


@pytest.mark.parametrize("to, hint", [
    ("somedir", "(the default file name is ledger.sqlite: --to somedir/ledger.sqlite)"),
    ("sqlite://", "exits: give the ledger a file (--to ledger.sqlite)"),
    ("x\udcff.sqlite", "--to x\\udcff.sqlite is not valid UTF-8"),  # (the byte 0xff, as a shell's $'x\xff.sqlite')
    ("newer.sqlite", "written by a newer omg-ledger — upgrade omg-ledger, or point --to at another database"),
])
def test_export_names_to_in_the_hints_about_its_target(tmp_path, to, hint):
    source = tmp_path / "ledger.sqlite"
    assert cli("db", "upgrade", "--db", source).returncode == 0
    (tmp_path / "somedir").mkdir()
    assert cli("db", "upgrade", "--db", tmp_path / "newer.sqlite").returncode == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "newer.sqlite")) as newer, newer:
        newer.execute("UPDATE alembic_version SET version_num = '9999'")  # as a newer omg-ledger leaves it
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "export", "--db", str(source), "--to", to],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    line = one_line_error(result, 3)
    assert hint in line and "--db" not in line
    assert os.listdir(tmp_path / "somedir") == []


def _rows(url: str) -> int:
    engine = open_ledger(url)
    try:
        with engine.connect() as conn:
            return sum(conn.execute(select(func.count()).select_from(t)).scalar() for t in schema.metadata.sorted_tables)
    finally:
        engine.dispose()


def test_export_waits_for_a_sync_holding_its_target(tmp_path, db_url):
    """A sync into the target holds its sync lock (here the test holds it, as a sync does):
    export waits for it within --wait, and gives up without copying a row."""
    source = tmp_path / "source.sqlite"
    assert cli("sync", "--db", source, "--home", CORPUS_HOME).returncode == 0
    target = open_ledger(db_url)
    with sync_lock(target, "h", 0):
        line = one_line_error(cli("export", "--db", source, "--to", db_url, "--wait", "0"), 75)
        holder = ("another sync or an export holds this ledger (" if db_url.startswith("sqlite")
                  else "another sync, rebuild or export into this ledger is running;")
        assert holder in line and "gave up after 0s (use --wait to wait longer)" in line
        assert _rows(db_url) == 0
    done = cli("export", "--db", source, "--to", db_url, "--wait", "0")
    assert done.returncode == 0, done.stderr
    target.dispose()
    assert dump(open_ledger(db_url), cache_hints=True) == dump(open_ledger(str(source)), cache_hints=True)


def test_a_sync_into_the_target_waits_for_the_export(tmp_path, db_url, monkeypatch):
    """The review's race: a sync into a brand-new target while export copies into it. The
    sync (a real process, started once the homes are copied but not committed; then the
    full sync in this process too, past the change check) waits for the export's lock
    and, with --wait 0, gives up having written nothing; run again after the export, it
    adds its home beside the copied ones."""
    source = open_ledger(str(tmp_path / "source.sqlite"))
    sync(source, [Home.from_path(str(CORPUS_HOME), "h")])
    other = tmp_path / "other-home"
    shutil.copytree(CORPUS_HOME, other)
    # Without the export's lock a sync into PostgreSQL would wait on the copy's uncommitted
    # homes row for good: every connection from here on gives up after 2 s instead of
    # hanging the test (the export itself waits on no row lock).
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=2000")
    target = open_ledger(db_url)
    second = open_ledger(db_url)  # a writer of its own: another connection, another flock
    during: list[subprocess.CompletedProcess] = []
    holder = ("another sync or an export holds this ledger (" if db_url.startswith("sqlite")
              else "an export into this ledger is running;")

    def sync_while_copying(table: str, count: int) -> None:
        if table == "homes":
            during.append(cli("sync", "--db", db_url, "--home", f"other={other}", "--wait", "0"))
            with pytest.raises(LedgerBusy, match=re.escape(holder)):
                sync(second, [Home.from_path(str(other), "other")], wait_seconds=0)

    copied = export_ledger(source, target, progress=sync_while_copying)
    assert copied["homes"] == 1
    line = one_line_error(during[0], 75)
    assert holder in line and "gave up after 0s" in line
    assert dump(target, cache_hints=True) == dump(source, cache_hints=True)  # the sync wrote nothing
    after = cli("sync", "--db", db_url, "--home", f"other={other}", "--wait", "0")
    assert after.returncode == 0, after.stderr
    with target.connect() as conn:
        assert sorted(conn.execute(select(schema.homes.c.label)).scalars()) == ["h", "other"]
        assert conn.execute(select(func.count()).select_from(schema.runs)).scalar() == 50
    second.dispose()


def test_an_export_into_one_postgresql_schema_lets_syncs_into_another_run(tmp_path, pg_url):
    """A database may hold a ledger in each of several schemas (search_path): the lock an
    export holds on its target is that ledger's, so a sync into the other schema's ledger
    goes on while one into the export's own target waits."""
    import psycopg
    from sqlalchemy.engine import make_url

    libpq_url = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA ledger_a")
        conn.execute("CREATE SCHEMA ledger_b")
    url_a, url_b = (pg_url + f"&options=-csearch_path%3D{name}" for name in ("ledger_a", "ledger_b"))
    source = open_ledger(str(tmp_path / "source.sqlite"))
    sync(source, [Home.from_path(str(CORPUS_HOME), "h")])
    outcomes: dict[str, int] = {}

    def sync_both_while_copying(table: str, count: int) -> None:
        if table == "homes":
            for name, url in (("a", url_a), ("b", url_b)):
                outcomes[name] = cli("sync", "--db", url, "--home", f"h={CORPUS_HOME}", "--wait", "0").returncode

    target = open_ledger(url_a)
    export_ledger(source, target, progress=sync_both_while_copying)
    target.dispose()
    assert outcomes == {"a": 75, "b": 0}


def test_an_export_into_a_full_disk_names_its_target_and_can_be_done_again(tmp_path):
    """The target's file system fills during the copy: the one line named the ledger being
    read (`database /…/ledger.sqlite: database or disk is full`), sending the operator to
    free space on the wrong disk. It names the target, says nothing of the copy was kept,
    and once there is room the same export into the same target succeeds."""
    from .test_faults import small_filesystem

    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home)
    source = tmp_path / "ledger.sqlite"
    engine = open_ledger(str(source))
    try:
        sync(engine, [Home.from_path(str(home), "h")])
    finally:
        engine.dispose()
    with small_filesystem(tmp_path / "small", "4m") as grow:
        if grow is None:
            pytest.skip("no tmpfs can be mounted here (root needed): a full file system cannot be made")
        target = tmp_path / "small" / "copy.sqlite"
        assert cli("db", "upgrade", "--db", target).returncode == 0
        filler = tmp_path / "small" / "filler"
        with open(filler, "wb") as f:  # all but 64 KiB: the empty ledger fits, the copy does not
            free = os.statvfs(filler.parent).f_bavail * os.statvfs(filler.parent).f_frsize
            f.write(bytes(free - 65536))
        result = cli("export", "--db", source, "--to", target)
        line = one_line_error(result, 3)
        assert f"cannot write the export's target {target}: database or disk is full" in line, line
        assert str(source) not in line, line
        filler.unlink()
        result = cli("export", "--db", source, "--to", target)
        assert result.returncode == 0, result.stderr
        assert dump(str(target), cache_hints=True) == dump(str(source), cache_hints=True)


def test_a_source_that_cannot_be_opened_is_said_to_be_the_source_not_the_target(tmp_path):
    """The source's connection is the source's: a ledger to export that cannot be opened
    (gone since it was named, a server down) is not reported as the target's failure,
    with the advice to export into the target again."""
    from sqlalchemy import create_engine

    from omg_ledger.errors import DatabaseUnavailable

    gone = tmp_path / "gone.sqlite"
    source = create_engine(f"sqlite:///file:{gone}?mode=ro&uri=true")
    target = open_ledger(str(tmp_path / "target.sqlite"))
    try:
        with pytest.raises(DatabaseUnavailable, match="^cannot read the ledger to export: "):
            export_ledger(source, target)
    finally:
        source.dispose()
        target.dispose()
    assert not gone.exists()
