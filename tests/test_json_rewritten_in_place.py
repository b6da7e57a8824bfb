"""A run's JSON file rewritten in place at the same size with its mtime set back (`cp -p`
of another version over it, a restore that keeps times) is read again: the sync after
it equals a cold sync of the same files, and the money is what the file now says.

The stream has had this guard (ctime, test_tail.py); state.json and assess.json were
known by device, inode, size and mtime only, so such a rewrite was never seen — by the
full sync nor by the no-op check — and the ledger kept the old spend for ever.
Real CLI processes, a real corpus run (a goal cycle with assess.json), SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal

import pytest

from .builders import age_tree
from .conftest import CORPUS_HOME
from .ledger_dump import diff, dump

RUN = "20261129-181522.237468643-1"  # goal-cycle-one: state.json and assess.json ($0.0078)


def _sync(db: str, home) -> None:
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", f"h={home}"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr


def _known_total(db: str) -> int:
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--db", db, "--json"],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["total"]["cost_nano_usd"]


def _by_hand(run_dir) -> int:
    """Known spend from the files: each stream line's cost_usd plus assess_cost_usd."""
    total = Decimal(0)
    for line in (run_dir / "events.jsonl").read_bytes().splitlines():
        event = json.loads(line)
        if "cost_usd" in event and not event.get("cost_unknown"):
            total += Decimal(str(event["cost_usd"]))
    total += Decimal(str(json.loads((run_dir / "assess.json").read_bytes())["assess_cost_usd"]))
    return int(total * 10**9)


def _rewrite_keeping_size_and_mtime(path, key: bytes) -> None:
    """The first `"key": 0.` becomes `"key": 9.`: the same size, written in place, its
    mtime set back to what it was."""
    info = os.stat(path)
    data = path.read_bytes()
    at = data.index(b'"' + key + b'": 0.') + len(key) + 4
    changed = data[:at] + b"9" + data[at + 1:]
    assert len(changed) == len(data) and changed != data
    with open(path, "r+b") as f:
        f.write(changed)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (info.st_ino, info.st_size, info.st_mtime_ns)


@pytest.mark.parametrize("name, key", [("assess.json", b"assess_cost_usd"), ("state.json", b"cost_usd")])
def test_a_json_file_rewritten_in_place_with_its_mtime_restored_is_read_again(tmp_path, db_url, name, key):
    home = tmp_path / "home"
    run_dir = home / "runs" / RUN
    shutil.copytree(CORPUS_HOME / "runs" / RUN, run_dir)
    for path in [run_dir, *run_dir.iterdir()]:
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    age_tree(home)  # the directory's mtime is trusted: the cron case, the no-op check first
    _sync(db_url, home)
    assert _known_total(db_url) == _by_hand(run_dir) == 104_400_000  # $0.0966 of the stream + $0.0078

    _rewrite_keeping_size_and_mtime(run_dir / name, key)
    _sync(db_url, home)

    cold = str(tmp_path / "cold.sqlite")
    _sync(cold, home)
    incremental, expected = dump(db_url), dump(cold)
    for data in (incremental, expected):
        del data["problems"], data["alembic_version"]  # (none here; the other ledger's times)
    assert incremental == expected, diff(expected, incremental)
    assert _known_total(db_url) == _by_hand(run_dir)
    if name == "assess.json":
        assert _known_total(db_url) == 104_400_000 + 9_000_000_000  # $0.0078 became $9.0078


def test_files_read_before_their_ctime_was_kept_are_read_once_and_rederive_nothing(tmp_path, db_url):
    """A ledger of revision 0013 holds no ctime (NULL after the upgrade): the next sync
    reads each JSON file once more, finds the bytes it holds and changes no row but the
    identities; the sync after that reads nothing."""
    from sqlalchemy import text

    from omg_ledger.db import open_ledger
    from omg_ledger.sync import Home, sync

    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME, home, symlinks=True)
    age_tree(home)
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        before = dump(engine)
        with engine.begin() as conn:
            assert conn.execute(text("UPDATE snapshot_files SET ctime_ns = NULL")).rowcount > 25
        again = sync(engine, [Home.from_path(str(home), "h")])
        assert (again.runs_rederived, again.events_ingested, again.problems) == (0, 0, [])
        after = dump(engine)
        assert {k: v for k, v in after.items() if k != "homes"} == {k: v for k, v in before.items() if k != "homes"}
        quiet = sync(engine, [Home.from_path(str(home), "h")])
        assert (quiet.runs_changed, quiet.bytes_read) == (0, 0)
    finally:
        engine.dispose()
