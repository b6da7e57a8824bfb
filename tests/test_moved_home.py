"""A home directory renamed, or no longer reached through the symlink it was synced
through, is the same home (README "One run, one bill"), and every run in it is where it
is now: the sync after it equals a cold sync of the home at its new path, and each
run's status is the engine's read-back still.

Each run's directory path is where its lock is probed (status at query time), where
`show` says its files are and what its problems name. It was kept from the first sync
that read the run, so after `mv home home2` a dead run's lock file was looked for where
nothing is any more: no lock file is a doubt, so the two ABANDONED corpus runs read
PLANNING and RUNNING (and their orphan warning was gone), and a bad line's problem named
the old path for ever. Real CLI processes, the real corpus, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid

from .builders import age_tree
from .conftest import CORPUS
from .ledger_dump import diff, dump

BAD_LINE_RUN = "20261129-181512.929654081-1"


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def _engine_statuses() -> dict[str, str]:
    """The engine's own `runs list` (no process holds a corpus run's lock)."""
    rows = (re.match(r"(\d{8}-\d{6}\.\d{9}-\d+) .* (\S+)$", line)
            for line in (CORPUS / "truth" / "runs-list.txt").read_text().splitlines())
    return {row.group(1): row.group(2) for row in rows if row}


def _statuses(db: str) -> dict[str, str]:
    return {run["run_id"]: run["status"] for run in json.loads(_cli("runs", "--db", db, "--json"))}


def _open_problem_paths(db: str) -> list[str]:
    return sorted(p["path"] for p in json.loads(_cli("problems", "--db", db, "--json")) if p["open"])


def _comparable(db: str) -> dict:
    out = dump(db)
    out["problems"] = sorted(tuple(kv for kv in row if kv[0] != "resolved_at") for row in out["problems"]
                             if dict(row)["resolved_at"] is None)
    return out


def _home(tmp_path):
    home = tmp_path / "home"
    shutil.copytree(CORPUS / "home", home, symlinks=True)
    with open(home / "runs" / BAD_LINE_RUN / "events.jsonl", "ab") as f:
        f.write(b"not json\n")  # a problem, to see which path it names
    age_tree(home)
    return home


def _cold(request, tmp_path, db_url: str, home) -> str:
    if db_url.startswith("sqlite"):
        cold = f"sqlite:///{tmp_path / 'cold.sqlite'}"
    else:
        cold = request.getfixturevalue("pg_server").create_database(f"cold_{uuid.uuid4().hex[:8]}")
    _cli("sync", "--db", cold, "--home", f"a={home}")
    return cold


def _check_where_it_is_now(request, tmp_path, db_url: str, now) -> None:
    engine_says = _engine_statuses()
    assert engine_says["20261129-181520.321225011-1"] == engine_says["20261129-181522.722804151-1"] == "ABANDONED"
    assert _statuses(db_url) == {run_id: engine_says[run_id] for run_id in _statuses(db_url)}
    assert _open_problem_paths(db_url) == [f"{now}/runs/{BAD_LINE_RUN}/events.jsonl"]
    cold = _cold(request, tmp_path, db_url, now)
    assert _comparable(db_url) == _comparable(cold), diff(_comparable(cold), _comparable(db_url))


def test_a_renamed_home_is_read_where_it_is_now(request, tmp_path, db_url):
    home = _home(tmp_path)
    _cli("sync", "--db", db_url, "--home", f"a={home}")
    assert _statuses(db_url) == {run_id: _engine_statuses()[run_id] for run_id in _statuses(db_url)}

    moved = home.rename(tmp_path / "home-renamed")
    _cli("sync", "--db", db_url, "--home", f"a={moved}")
    _check_where_it_is_now(request, tmp_path, db_url, moved)


def test_a_home_synced_through_a_symlink_then_at_its_real_path_is_read_there(request, tmp_path, db_url):
    home = _home(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(home)
    _cli("sync", "--db", db_url, "--home", f"a={link}")
    link.unlink()
    _cli("sync", "--db", db_url, "--home", f"a={home}")
    _check_where_it_is_now(request, tmp_path, db_url, home)
