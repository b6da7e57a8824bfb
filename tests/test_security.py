"""Security properties, each proven with real processes: the homes are never written
(inotify sees nothing), the ledger is private (0600/0700), stored text cannot drive the
terminal, and user input never becomes SQL."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from omg_ledger.db import open_ledger
from omg_ledger.errors import RunNotFound
from omg_ledger.reports.runs import list_runs, show_run

from .builders import copy_run, write_run
from .conftest import CORPUS_HOME
from .fswatch import watch_tree

CLI = [sys.executable, "-m", "omg_ledger.cli"]
TS = "2026-11-29T18:15:12.93149401Z"
RAW_CONTROL = [b"\x1b", b"\x07", b"\x9b", "\u009b".encode(), b"\x08", b"\r"]


def cli(*args: object, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, timeout=120, **kwargs)


def ok(result: subprocess.CompletedProcess, code: int | tuple = 0) -> subprocess.CompletedProcess:
    assert result.returncode in (code if isinstance(code, tuple) else (code,)), result.stderr.decode(errors="replace")[-3000:]
    assert b"Traceback" not in result.stderr
    return result


def commands() -> set[str]:
    from omg_ledger.cli import main

    return set(main.commands)


def test_nothing_is_written_under_the_home_by_sync_or_any_report(corpus_copy, tmp_path):
    """Invariant 4, observed by the kernel: sync, runs (with its live lock probes on
    the open-leg runs), show, and every report produce no mutating inotify event
    anywhere in the home: no create, write, attribute change, rename or delete."""
    db = tmp_path / "ledger.sqlite"
    available = commands()
    run_id = sorted(p.name for p in (corpus_copy / "runs").iterdir())[0]
    with watch_tree(corpus_copy) as events:
        ok(cli("sync", "--db", db, "--home", corpus_copy))
        ok(cli("sync", "--db", db, "--home", corpus_copy, "--json"))
        ok(cli("runs", "--db", db))
        runs = json.loads(ok(cli("runs", "--db", db, "--json")).stdout)
        ok(cli("show", "--db", db, run_id))
        ok(cli("show", "--db", db, "--json", run_id))
        for report in ("cost", "audit"):
            if report in available:  # audit exits 1 when something needs attention
                ok(cli(report, "--db", db), code=(0, 1))
                ok(cli(report, "--db", db, "--json"), code=(0, 1))
    assert events == [], events
    # The probes really ran: the corpus has open legs whose lock was probed (ABANDONED).
    assert any(r["status"] == "ABANDONED" for r in runs)
    assert not list(corpus_copy.rglob("*.sync-lock")) and not list(corpus_copy.rglob("*.sqlite*"))


def _umask0():
    os.umask(0)


def test_ledger_database_is_private_from_the_first_byte(corpus_home, tmp_path):
    """Created 0600 in a 0700 directory even with umask 0: the ledger holds every
    detail the runs wrote, and the run directories themselves are private."""
    parent = tmp_path / "new" / "deeper"
    db = parent / "ledger.sqlite"
    ok(cli("sync", "--db", db, "--home", corpus_home, preexec_fn=_umask0))
    assert stat.S_IMODE(os.stat(parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
    for path in parent.iterdir():  # the database, its WAL/shm, the sync lock
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    # An existing directory is the user's: its mode is not changed.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    ok(cli("sync", "--db", shared / "l.sqlite", "--home", corpus_home, preexec_fn=_umask0))
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(shared / "l.sqlite").st_mode) == 0o600


ESCAPES = "\u001b]0;pwned\u0007\u001b[2J\u001b[31mred\u009b1m\u0008\r"


def _escape_home(tmp_path: Path, run_name: str = "escapes") -> Path:
    home = tmp_path / "home"
    run = home / "runs" / run_name
    run.mkdir(parents=True)

    def ev(event: str, **fields) -> bytes:
        return orjson.dumps({"schema": 3, "ts": TS, "event": event, **fields}) + b"\n"

    (run / "events.jsonl").write_bytes(
        ev("run_started")
        + ev("node_started", node_id="n" + ESCAPES, session_id="s" + ESCAPES)
        + ev("node_failed", node_id="n" + ESCAPES, verdict="FAIL", detail="boom" + ESCAPES, cost_usd=0.5,
             provenance="exit-only")
        + ev("run_finished", outcome="failed", detail="finished" + ESCAPES)
        + b"not json \x1b[31m\x07\n"
    )
    state = json.loads((CORPUS_HOME / "runs" / "20261129-181512.929654081-1" / "state.json").read_bytes())
    state["graph"]["name"] = "graph" + ESCAPES
    state["run_id"] = run_name  # a snapshot naming another run is not this one's
    (run / "state.json").write_text(json.dumps(state))
    return home


def _assert_no_raw_control(output: bytes, what: str) -> None:
    for seq in RAW_CONTROL:
        assert seq not in output, f"{what}: raw {seq!r} reached the terminal"


def test_stored_escape_sequences_are_not_sent_to_the_terminal(tmp_path):
    home = _escape_home(tmp_path)
    db = tmp_path / "ledger.sqlite"
    sync = ok(cli("sync", "--db", db, "--home", home))
    _assert_no_raw_control(sync.stdout + sync.stderr, "sync")
    for args in (["runs"], ["show", "escapes"], *([r] for r in ("cost", "audit") if r in commands())):
        result = ok(cli(*args, "--db", db), code=(0, 1))
        _assert_no_raw_control(result.stdout + result.stderr, " ".join(args))
    # --json output (for programs) escapes C0 controls as JSON must (\u001b) and keeps the text.
    shown = ok(cli("show", "--db", db, "--json", "escapes"))
    assert b"\x1b" not in shown.stdout and b"\x07" not in shown.stdout and b"\x08" not in shown.stdout
    detail = json.loads(shown.stdout)
    assert any(r.get("detail") == "boom" + ESCAPES for r in detail["rounds"] + detail["nodes"])


def test_escape_sequences_in_run_ids_and_stream_enums_are_not_sent_to_the_terminal(tmp_path):
    home = _escape_home(tmp_path, run_name="run" + ESCAPES.replace("\r", ""))
    run = next((home / "runs").iterdir())
    text = (run / "events.jsonl").read_bytes().replace(b'"verdict":"FAIL"', b'"verdict":"FAIL\\u001b[2J"')
    text = text.replace(b'"provenance":"exit-only"', b'"provenance":"p\\u001b]0;pwned\\u0007"')
    (run / "events.jsonl").write_bytes(text)
    db = tmp_path / "ledger.sqlite"
    ok(cli("sync", "--db", db, "--home", home))
    for args in (["runs"], ["show", "run"]):
        result = ok(cli(*args, "--db", db))
        _assert_no_raw_control(result.stdout + result.stderr, " ".join(args))


def test_user_input_is_never_sql(corpus_home, tmp_path):
    db = tmp_path / "ledger.sqlite"
    ok(cli("sync", "--db", db, "--home", corpus_home))
    result = ok(cli("show", "--db", db, "x' OR '1'='1"), code=2)  # an unknown run id is a usage error
    assert b"no run matches" in result.stderr, result.stderr
    # The hostile label is compared as data: it names no home, so the listing refuses it by name.
    listed = ok(cli("runs", "--db", db, "--json", "--home", "x' OR '1'='1"), code=2)
    assert b"--home \"x' OR '1'='1\" is no home of this ledger" in listed.stderr, listed.stderr
    assert listed.stdout == b""
    engine = open_ledger(str(db))  # the same library calls, for the rest of the list
    try:
        for hostile in ("%", "_", "2026%", "'; DROP TABLE runs; --", '" OR 1=1 --', "\\", "' || '"):
            with pytest.raises(RunNotFound):
                show_run(engine, hostile)
            assert list_runs(engine, home_labels=(hostile,)) == []
    finally:
        engine.dispose()
    # The table survived, every run still listed.
    assert len(json.loads(ok(cli("runs", "--db", db, "--json")).stdout)) == 25
    # A real prefix still resolves (prefix match is LIKE with escaping, not text pasting).
    assert ok(cli("show", "--db", db, "--json", "20261129-181512")).returncode == 0


def test_a_run_named_like_sql_is_just_a_name(tmp_path):
    name = "r'); DELETE FROM runs; --"
    home = tmp_path / "home"
    copy_run(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", home / "runs" / name)
    copy_run(CORPUS_HOME / "runs" / "20261129-181513.435710166-1", home / "runs" / "other")
    db = tmp_path / "ledger.sqlite"
    ok(cli("sync", "--db", db, "--home", home))
    assert json.loads(ok(cli("show", "--db", db, "--json", "--", name)).stdout)["run_id"] == name
    assert len(json.loads(ok(cli("runs", "--db", db, "--json")).stdout)) == 2


def _swapped_for_a_link(run_dir: Path, decoy: Path) -> None:
    """The run directory moved away and a symlink to ``decoy`` put at its path."""
    run_dir.rename(run_dir.with_name(run_dir.name + ".moved"))
    run_dir.symlink_to(decoy, target_is_directory=True)


def test_a_run_directory_swapped_for_a_link_while_it_is_read_is_never_followed(tmp_path):
    """Once a run directory is opened, everything read of it is that directory's: its
    listing, failed/, state.json and events.jsonl. A symlink put at its path meanwhile
    (to a directory of someone else's files) is never followed: each file is opened
    relative to the directory's descriptor, not by its path again."""
    from omg_ledger.discover import open_directory
    from omg_ledger.ingest import read_run_dir

    home = tmp_path / "home"
    run_id = "20261129-101500.000000001-1"
    start = {"schema": 3, "ts": TS, "event": "run_started"}
    run_dir = write_run(home, run_id, [start], state={"graph": {"name": "mine", "version": "1", "nodes": []}},
                        extra={"a.out": "x", "failed/a.out": "y"})
    decoy = write_run(tmp_path / "elsewhere", run_id, [start, {**start, "event": "run_finished"}],
                      state={"graph": {"name": "SECRET", "version": "1", "nodes": []}},
                      extra={"b.out": "x", "failed/b.out": "y"})

    dir_fd = open_directory(str(run_dir))
    try:
        _swapped_for_a_link(run_dir, decoy)
        read = read_run_dir(str(run_dir), None, {}, {}, dir_fd=dir_fd)
        lines = [item.raw for item in read.stream.items]
        read.finish_stream()
        read.stream.close()
    finally:
        os.close(dir_fd)

    assert read.listing.artifacts == {"a.out"}
    assert read.listing.failed_outputs == {"a.out"}
    state = read.files["state.json"]
    assert "mine" in state.row["content"] and "SECRET" not in state.row["content"]
    assert state.row["inode"] == (run_dir.with_name(run_id + ".moved") / "state.json").stat().st_ino
    assert [orjson.loads(line)["event"] for line in lines] == ["run_started"]
    assert read.problems == []


def test_a_run_directory_that_is_a_link_when_opened_is_refused(tmp_path):
    """The other side of the race: a path that already is a link is not opened at all."""
    from omg_ledger.ingest import read_run_dir

    run_id = "20261129-101500.000000001-1"
    run_dir = write_run(tmp_path / "home", run_id, [{"schema": 3, "ts": TS, "event": "run_started"}])
    decoy = write_run(tmp_path / "elsewhere", run_id, [{"schema": 3, "ts": TS, "event": "run_started"}],
                      state={"graph": "SECRET"})
    _swapped_for_a_link(run_dir, decoy)
    with pytest.raises(OSError) as raised:
        read_run_dir(str(run_dir), None, {}, {})
    assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)  # (O_DIRECTORY | O_NOFOLLOW on a link: ENOTDIR on Linux)
