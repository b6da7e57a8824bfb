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
    report = json.loads(_cli("sync", "--db", db_url, "--home", f"a={moved}", "--json"))
    assert report["moved_homes"] == [{"home": "a", "from": str(home), "to": str(moved)}]
    _check_where_it_is_now(request, tmp_path, db_url, moved)
    assert json.loads(_cli("sync", "--db", db_url, "--home", f"a={moved}", "--json"))["moved_homes"] == []


def test_a_moved_home_is_said_on_a_terminal(tmp_path):
    """A sync on a terminal names the move (a pseudo-terminal: the TTY branch is real)."""
    import os
    import pty

    home = _home(tmp_path)
    db = str(tmp_path / "ledger.sqlite")
    _cli("sync", "--db", db, "--home", f"a={home}")
    moved = home.rename(tmp_path / "elsewhere")
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", f"a={moved}"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    said = " ".join(out.decode().split())  # as the terminal's width wrapped it
    assert "home a is at" in said and "streams and problems follow it" in said and "elsewhere" in said, said


def test_a_home_synced_through_a_symlink_then_at_its_real_path_is_read_there(request, tmp_path, db_url):
    home = _home(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(home)
    _cli("sync", "--db", db_url, "--home", f"a={link}")
    link.unlink()
    _cli("sync", "--db", db_url, "--home", f"a={home}")
    _check_where_it_is_now(request, tmp_path, db_url, home)


def _sync_json(db: str, home) -> dict:
    return json.loads(_cli("sync", "--db", db, "--home", f"a={home}", "--json"))


def test_a_home_named_by_turns_through_a_symlink_and_its_path_is_read_once(request, tmp_path, db_url):
    """The same directory named two ways in turn (cron through a symlink, a hand sync by
    its path) is one home whose files did not change: after the first sync none is read
    again, and what names a path names the one given last."""
    home = _home(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(home)
    first = _sync_json(db_url, home)
    assert first["runs_changed"] == 25 and first["bytes_read"] > 0 and first["moved_homes"] == []
    for before, name in ((home, link), (link, home), (home, link)):
        again = _sync_json(db_url, name)
        assert (again["runs_changed"], again["bytes_read"], again["events_ingested"]) == (0, 0, 0), again
        assert again["moved_homes"] == [{"home": "a", "from": str(before), "to": str(name)}]
    # One problem row for the bad line, open, at the path given last: not one per name.
    problems = json.loads(_cli("problems", "--db", db_url, "--json", "--all"))
    assert [(p["path"], p["open"]) for p in problems] == [(f"{link}/runs/{BAD_LINE_RUN}/events.jsonl", True)]
    _check_where_it_is_now(request, tmp_path, db_url, link)


def test_a_problem_held_under_both_names_of_a_home_is_one_problem_after_a_rename(tmp_path):
    """A ledger written before homes were renamed in place can hold a run's problem under
    each name its home was synced by (runs kept their first path, problems took the path
    of the sync that saw them). Renamed to one name, they are one problem: seen first at
    the earlier time, open if either was."""
    import sqlite3

    home = _home(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(home)
    db = str(tmp_path / "ledger.sqlite")
    _cli("sync", "--db", db, "--home", f"a={home}")
    bad = f"runs/{BAD_LINE_RUN}/events.jsonl"
    with sqlite3.connect(db) as conn:
        run_pk, offset, reason = conn.execute(
            "SELECT run_pk, byte_offset, reason FROM problems WHERE path = ?", (f"{home}/{bad}",)).fetchone()
        conn.execute("UPDATE problems SET first_seen_at = '2026-11-02T00:00:00Z', last_seen_at = "
                     "'2026-11-02T00:00:00Z', resolved_at = '2026-11-03T00:00:00Z'")
        conn.execute("INSERT INTO problems (run_pk, path, byte_offset, reason, first_seen_at, last_seen_at) "
                     "VALUES (?, ?, ?, ?, '2026-11-05T00:00:00Z', '2026-11-06T00:00:00Z')",
                     (run_pk, f"{link}/{bad}", offset, reason))
    _cli("sync", "--db", db, "--home", f"a={home}")  # was never named by the link: nothing moves
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM problems").fetchone() == (2,)
    _cli("sync", "--db", db, "--home", f"a={link}")
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT path, first_seen_at, resolved_at FROM problems").fetchall()
    assert rows == [(f"{link}/{bad}", "2026-11-02T00:00:00Z", None)]


def test_a_home_whose_paths_hold_wildcards_and_non_ascii_is_renamed_exactly(request, tmp_path, db_url):
    """The old path is matched as a prefix counted in characters, not as a pattern: '%' and
    '_' are themselves, and a multi-byte name is cut where its characters end (SQLite and
    PostgreSQL count characters alike). A sibling whose name starts with the old one's is
    another directory and keeps its paths."""
    home = tmp_path / "hömé 100%_x"
    shutil.copytree(_home(tmp_path), home, symlinks=True)
    sibling = tmp_path / "hömé 100%_xyz_x"  # as a LIKE pattern, 'hömé 100%_x/%' takes its paths too
    shutil.copytree(CORPUS / "home", sibling, symlinks=True)
    (sibling / "runs" / "a-link").symlink_to(tmp_path)  # a problem of no run, under the sibling
    age_tree(home)
    age_tree(sibling)
    _cli("sync", "--db", db_url, "--home", f"a={home}", "--home", f"b={sibling}")
    moved = home.rename(tmp_path / "ünï_%")
    report = json.loads(_cli("sync", "--db", db_url, "--home", f"a={moved}", "--home", f"b={sibling}", "--json"))
    assert (report["runs_changed"], report["bytes_read"]) == (0, 0)  # renamed in place, not read again
    shown = json.loads(_cli("show", "--db", db_url, BAD_LINE_RUN, "--home", "b", "--json"))
    assert shown["dir_path"] == f"{sibling}/runs/{BAD_LINE_RUN}"
    shown = json.loads(_cli("show", "--db", db_url, BAD_LINE_RUN, "--home", "a", "--json"))
    assert shown["dir_path"] == f"{moved}/runs/{BAD_LINE_RUN}"
    assert _open_problem_paths(db_url) == sorted([f"{moved}/runs/{BAD_LINE_RUN}/events.jsonl",
                                                  f"{sibling}/runs/a-link"])
