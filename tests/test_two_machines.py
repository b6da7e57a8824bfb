"""Two machines, one ledger (README "PostgreSQL: one ledger for many machines"): homes
at the same path on two machines are two homes, whatever their hostnames; one machine's
sync never takes over the other's home, nor resolves, re-opens or takes over its
problems.

The second machine is real: a sync run in its own mount and UTS namespaces, where
another machine id is bind-mounted over /etc/machine-id, the hostname is another (or
kept), and another directory is bind-mounted over the home's path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from .test_problems import RUN, _clean

OTHER_MACHINE_ID = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"

# In a new mount and UTS namespace: another hostname ($HOSTNAME_B, unless empty), another
# machine id wherever the system keeps one, and the directory $2 seen at the path $3; then
# the command.
_ON_MACHINE_B = """
set -e
if [ -n "$HOSTNAME_B" ]; then hostname "$HOSTNAME_B"; fi
for id_file in /etc/machine-id /var/lib/dbus/machine-id; do
    if [ -f "$id_file" ]; then mount --bind "$1" "$id_file"; fi
done
mount --bind "$2" "$3"
shift 3
exec "$@"
"""


def _omg(*args: str) -> list[str]:
    return [sys.executable, "-m", "omg_ledger.cli", *args]


def _on_machine_b(tmp_path: Path, home_b: Path, home_path: Path, command: list[str],
                  hostname: str = "machine-b") -> subprocess.CompletedProcess:
    """``command`` run on machine B ("" as ``hostname``: B has this machine's hostname)."""
    started = _start_on_machine_b(tmp_path, home_b, home_path, command, hostname)
    out, err = started.communicate()
    return subprocess.CompletedProcess(started.args, started.returncode, out, err)


def _start_on_machine_b(tmp_path: Path, home_b: Path, home_path: Path, command: list[str],
                        hostname: str = "machine-b") -> subprocess.Popen:
    id_file = tmp_path / "machine-id-b"
    id_file.write_text(OTHER_MACHINE_ID + "\n")
    return subprocess.Popen(["unshare", "--mount", "--uts", "sh", "-c", _ON_MACHINE_B, "sh",
                             str(id_file), str(home_b), str(home_path), *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HOSTNAME_B": hostname})


def _problems(db: str) -> list[dict]:
    out = subprocess.run(_omg("problems", "--db", db, "--all", "--json"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def two_machines(tmp_path, db_url):
    """The same run at the same path on two machines; machine A's copy has a torn state.json."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux `unshare` is needed for this test")
    home, home_b = tmp_path / "home", tmp_path / "home-on-b"
    run_a = _clean(home)
    _clean(home_b)
    (run_a / "state.json").write_text('{"schema": 3, "nodes": {')  # torn mid-write, on A only
    probe = "from omg_ledger.tail import machine_source; print(machine_source())"
    here = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    there = _on_machine_b(tmp_path, home_b, home, [sys.executable, "-c", probe])
    assert there.returncode == 0, there.stderr
    assert there.stdout != here  # really another machine
    return home, home_b, run_a / "state.json"


def test_another_machines_sync_of_the_same_path_leaves_a_problem_open(tmp_path, db_url, two_machines):
    home, home_b, torn = two_machines
    sync_a = _omg("sync", "--db", db_url, "--home", str(home), "--json")
    sync_b = _omg("sync", "--db", db_url, "--home", str(home), "--json")

    first = subprocess.run(sync_a, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    [seen_by_a] = _problems(db_url)
    assert seen_by_a["path"] == str(torn) and seen_by_a["open"] is True

    # Machine B reads its own copy of the run at the same path: whole, nothing wrong.
    second = _on_machine_b(tmp_path, home_b, home, sync_b)
    assert second.returncode == 0, second.stderr
    assert [(p["path"], p["run_id"], p["open"]) for p in _problems(db_url)] == [(str(torn), RUN, True)]

    # A's file is unchanged: A's next sync does not read it again, and the problem stays.
    third = subprocess.run(sync_a, capture_output=True, text=True)
    assert third.returncode == 0, third.stderr
    [still] = _problems(db_url)
    assert still["open"] is True and still["machine"] == seen_by_a["machine"]
    audit = subprocess.run(_omg("audit", "--db", db_url, "--json"), capture_output=True, text=True)
    assert audit.returncode == 1 and [p["path"] for p in json.loads(audit.stdout)["problems"]] == [str(torn)]


def test_the_same_problem_on_two_machines_is_two_problems(tmp_path, db_url, two_machines):
    home, home_b, torn = two_machines
    (home_b / "runs" / RUN / "state.json").write_text('{"schema": 3, "nodes": {')  # torn on B too
    assert subprocess.run(_omg("sync", "--db", db_url, "--home", str(home)), capture_output=True).returncode == 0
    b = _on_machine_b(tmp_path, home_b, home, _omg("sync", "--db", db_url, "--home", str(home)))
    assert b.returncode == 0, b.stderr
    problems = _problems(db_url)
    assert [p["path"] for p in problems] == [str(torn), str(torn)]
    assert len({p["machine"] for p in problems}) == 2 and len({p["home"] for p in problems}) == 2

    # B's copy repaired: B's problem resolves, A's stays open.
    (home_b / "runs" / RUN / "state.json").write_text(json.dumps({"schema": 3, "run_id": RUN, "nodes": {}}))
    b = _on_machine_b(tmp_path, home_b, home, _omg("sync", "--db", db_url, "--home", str(home)))
    assert b.returncode == 0, b.stderr
    by_home = {p["home"]: p["open"] for p in _problems(db_url)}
    assert sorted(by_home.values()) == [False, True]
    assert by_home[next(h for h in by_home if "machine-b" not in h)] is True


def test_upgrading_names_the_machine_of_each_problem_where_the_ledger_tells_it(tmp_path, db_url):
    """Revision 0016 fills problems.machine: from the run's home, the runner stream at the
    path, the one machine whose homes hold the path, or the only machine; else ''."""
    from alembic import command
    from sqlalchemy import text

    from omg_ledger.db import alembic_config, open_ledger, write_transaction
    from omg_ledger.sync import Home, sync
    from omg_ledger.tail import machine_source

    home = tmp_path / "home"
    run_dir = _clean(home)
    (run_dir / "state.json").write_text('{"schema": 3, "nodes": {')  # a run's problem
    os.symlink(run_dir, home / "runs" / "elsewhere")  # a problem of no run, under the home
    stream = tmp_path / "runner" / "events.jsonl"
    stream.parent.mkdir()
    stream.write_text("not json\n")  # a runner stream's problem
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "a")], invocation_files=[str(stream)])
    here = machine_source()
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0015")
        for label, path, machine in (("b", "/srv/b-home", "machine:b"), ("c", "/srv/c-home", "machine:c")):
            conn.execute(text("INSERT INTO homes (label, path, machine) VALUES (:l, :p, :m)"),
                         {"l": label, "p": path, "m": machine})
        for path in ("/srv/b-home/runs/x", "/srv/nowhere/file"):
            conn.execute(text("INSERT INTO problems (run_pk, path, byte_offset, reason, first_seen_at, last_seen_at) "
                              "VALUES (NULL, :p, 0, 'r', 't', 't')"), {"p": path})
        command.upgrade(alembic_config(conn), "head")
    with engine.connect() as conn:
        machines = dict(conn.execute(text("SELECT path, machine FROM problems")).all())
    engine.dispose()
    assert machines == {
        str(run_dir / "state.json"): here,  # its run's home
        str(home / "runs" / "elsewhere"): here,  # under a home of one machine
        str(stream): here,  # the runner stream read there
        "/srv/b-home/runs/x": "machine:b",
        "/srv/nowhere/file": "",  # three machines, none holding the path: not told
    }


def test_upgrading_names_no_machine_for_a_problem_of_a_runner_stream_two_machines_read_at_its_path(
        tmp_path, db_url, monkeypatch):
    """Two machines read a runner stream at the same path; only machine B's copy has a bad
    line. Before 0016 the problem did not say whose it was, and the ledger cannot tell
    (either machine's stream is at that path; the only machine with homes is a third):
    it names no machine (''), so B's next sync that reads the stream again resolves it
    and records it as B's. Naming one machine (A, the first by name; or the one with
    homes) left it open for ever beside B's: no sync of B resolves another machine's
    problems, and that machine's copy never had it."""
    from alembic import command
    from sqlalchemy import text

    from omg_ledger.db import alembic_config, open_ledger, write_transaction
    from omg_ledger.sync import Home, sync

    stream = tmp_path / "runner" / "events.jsonl"
    stream.parent.mkdir()
    good = b'{"ts":"2026-11-29T10:00:00Z","role":"zen","milestone":"M1","event":"start"}\n'
    engine = open_ledger(db_url)
    try:
        _clean(tmp_path / "home")
        sync(engine, [Home.from_path(str(tmp_path / "home"), "here")])  # a home of this machine, clean
        stream.write_bytes(good)
        monkeypatch.setattr("omg_ledger.sync.machine_source", lambda: "machine:a")
        sync(engine, [], invocation_files=[str(stream)])
        stream.write_bytes(good + b"not json\n")
        monkeypatch.setattr("omg_ledger.sync.machine_source", lambda: "machine:b")
        sync(engine, [], invocation_files=[str(stream)])
        with write_transaction(engine) as conn:
            command.downgrade(alembic_config(conn), "0015")
            command.upgrade(alembic_config(conn), "head")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT machine FROM problems")).scalars().all() == [""]

        stream.unlink()
        stream.write_bytes(good + b"not json\n")  # B's copy again, a new file: read from the start
        sync(engine, [], invocation_files=[str(stream)])
        with engine.connect() as conn:
            open_problems = conn.execute(text("SELECT machine, byte_offset FROM problems "
                                              "WHERE resolved_at IS NULL")).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in open_problems] == [("machine:b", len(good))]


def test_a_problem_of_no_machine_is_recorded_anew_by_the_next_sync_that_reads_its_path(tmp_path, db_url):
    from sqlalchemy import text

    from omg_ledger.db import open_ledger, write_transaction
    from omg_ledger.sync import Home, sync
    from omg_ledger.tail import machine_source

    home = tmp_path / "home"
    run_dir = _clean(home)
    (run_dir / "state.json").write_text('{"schema": 3, "nodes": {')
    engine = open_ledger(db_url)
    sync(engine, [Home.from_path(str(home), "a")])
    with write_transaction(engine) as conn:  # as an upgrade that could not tell its machine leaves it
        conn.execute(text("UPDATE problems SET machine = ''"))
    torn = (run_dir / "state.json").read_bytes()
    (run_dir / "state.json").unlink()
    (run_dir / "state.json").write_bytes(torn)  # the same bytes in a new file: read again, the same problem
    sync(engine, [Home.from_path(str(home), "a")])
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT machine, reason, resolved_at IS NULL FROM problems ORDER BY id")).all()
    engine.dispose()
    # One open problem, now this machine's; the row that named none is resolved.
    [(old_machine, old_reason, old_open), (new_machine, new_reason, new_open)] = rows
    assert (old_machine, old_open) == ("", False) and (new_machine, new_open) == (machine_source(), True)
    assert new_reason == old_reason


def test_a_machine_of_the_same_hostname_with_a_home_at_the_same_path_does_not_take_it_over(tmp_path, db_url,
                                                                                          two_machines):
    """The default label <hostname>:<path> names machine A's home already: B's home is
    another home, labelled with B's machine id, and neither sync marks the other's runs
    gone (before, B took the home over, marked A's run gone, and A took it back)."""
    import socket

    home, home_b, _ = two_machines
    other_run = _another_run_on_b(home_b)
    sync = _omg("sync", "--db", db_url, "--home", str(home))
    for step in ("a", "b", "a", "b"):
        done = (subprocess.run(sync, capture_output=True, text=True) if step == "a"
                else _on_machine_b(tmp_path, home_b, home, sync, hostname=""))
        assert done.returncode == 0, done.stderr
    homes = json.loads(subprocess.run(_omg("homes", "--db", db_url, "--json"), capture_output=True,
                                      text=True).stdout)
    label_a, label_b = f"{socket.gethostname()}:{home}", f"{socket.gethostname()}#{OTHER_MACHINE_ID[:8]}:{home}"
    assert sorted((h["label"], h["runs"], h["gone"]) for h in homes) == sorted([(label_a, 1, 0), (label_b, 1, 0)])
    assert {h["label"]: h["machine"] for h in homes}[label_b] == f"machine:{OTHER_MACHINE_ID}"
    runs = json.loads(subprocess.run(_omg("runs", "--db", db_url, "--json"), capture_output=True, text=True).stdout)
    assert sorted((r["run_id"], r["home"]) for r in runs) == [(RUN, label_a), (other_run, label_b)]


def test_a_label_given_for_another_machines_home_is_refused_naming_that_machine(tmp_path, db_url, two_machines):
    home, home_b, _ = two_machines
    first = subprocess.run(_omg("sync", "--db", db_url, "--home", f"shared={home}"), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    refused = _on_machine_b(tmp_path, home_b, home, _omg("sync", "--db", db_url, "--home", f"shared={home}"))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"omg-ledger: error: home 'shared' is {home} on another machine ({_machine_here()}); give this machine's "
        f"home a label of its own (--home LABEL={home}), or sync with --relabel to point 'shared' here (its runs on "
        f"that machine are then marked gone)"]


def _another_run_on_b(home_b: Path) -> str:
    """Machine B's copy of the run made another run of B's own (another id)."""
    other_run = "20261129-110000.000000001-1"
    (home_b / "runs" / RUN).rename(home_b / "runs" / other_run)
    for name in ("events.jsonl", "state.json"):
        path = home_b / "runs" / other_run / name
        path.write_text(path.read_text().replace(RUN, other_run))
    return other_run


def _machine_here() -> str:
    from omg_ledger.tail import machine_source

    return machine_source()


def _really_another_machine(tmp_path: Path, directory: Path, mount_point: Path) -> None:
    probe = "from omg_ledger.tail import machine_source; print(machine_source())"
    here = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    there = _on_machine_b(tmp_path, directory, mount_point, [sys.executable, "-c", probe])
    assert there.returncode == 0, there.stderr
    assert there.stdout != here


def _homes(db: str) -> list[dict]:
    out = subprocess.run(_omg("homes", "--db", db, "--json"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_home_missing_on_machine_b_is_refused_there_though_machine_a_has_one_at_that_path(tmp_path, db_url):
    """A home directory that is not there is a problem to record only for a home this
    machine has synced before (a disk not mounted); machine A's home at the same path is
    no home of B's: B's mistyped --home is refused, and nothing is written."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux `unshare` is needed for this test")
    parent = tmp_path / "parent"
    home = parent / "home"
    _clean(home)
    nothing = tmp_path / "nothing-on-b"
    nothing.mkdir()
    _really_another_machine(tmp_path, nothing, parent)
    first = subprocess.run(_omg("sync", "--db", db_url, "--home", str(home)), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    before = _homes(db_url)
    for given in (str(home), f"mine={home}"):
        on_b = _on_machine_b(tmp_path, nothing, parent, _omg("sync", "--db", db_url, "--home", given))
        assert on_b.returncode == 2, (on_b.returncode, on_b.stderr)
        assert on_b.stderr.strip().splitlines() == [
            f"omg-ledger: error: home directory {home} does not exist and this ledger has never indexed a home "
            f"there: check --home or OMG_HOME (nothing was indexed)"]
    assert _homes(db_url) == before
    assert _problems(db_url) == []


def test_a_home_named_by_its_directory_is_this_machines_home_at_that_path(tmp_path, db_url, two_machines):
    """`--home DIR` on a reading command names the home at DIR on the machine it runs on:
    another machine's home at the same path is another directory (before, `show RUN --home
    DIR` took the first label in order, another machine's, and found no such run; `runs`
    and `cost` counted both machines' homes)."""
    home, home_b, _ = two_machines
    other_run = _another_run_on_b(home_b)
    sync = _omg("sync", "--db", db_url, "--home", str(home))
    assert subprocess.run(sync, capture_output=True).returncode == 0
    on_b = _on_machine_b(tmp_path, home_b, home, sync, hostname="a-machine-b")  # its label sorts first
    assert on_b.returncode == 0, on_b.stderr
    labels = {h["machine"]: h["label"] for h in _homes(db_url)}
    label_a, label_b = labels[_machine_here()], labels[f"machine:{OTHER_MACHINE_ID}"]

    def read(*args: str, on_b: bool = False) -> subprocess.CompletedProcess:
        command = _omg(*args, "--db", db_url, "--json")
        done = _on_machine_b(tmp_path, home_b, home, command) if on_b else subprocess.run(
            command, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    for on_b, run_id, label in ((False, RUN, label_a), (True, other_run, label_b)):
        shown = read("show", run_id, "--home", str(home), on_b=on_b)
        assert (shown["run_id"], shown["home"]) == (run_id, label)
        assert [(r["run_id"], r["home"]) for r in read("runs", "--home", str(home), on_b=on_b)] == [(run_id, label)]
        assert read("cost", "--home", str(home), on_b=on_b)["total"]["invocations"] == 1
    # A label still names any machine's home.
    assert read("show", other_run, "--home", label_b)["home"] == label_b


def test_show_refuses_a_directory_that_names_homes_of_two_other_machines(tmp_path, db_url, two_machines):
    """On a host with no home at DIR (one that only reads the ledger), `--home DIR` names
    every machine's home there: `show` asks for a label instead of taking one of them."""
    home, home_b, _ = two_machines
    sync = _omg("sync", "--db", db_url, "--home", str(home))
    assert subprocess.run(sync, capture_output=True).returncode == 0
    assert _on_machine_b(tmp_path, home_b, home, sync).returncode == 0
    labels = sorted(h["label"] for h in _homes(db_url))
    elsewhere = tmp_path / "home-on-c"
    elsewhere.mkdir()
    third = tmp_path / "machine-id-c"
    third.write_text("0c" * 16 + "\n")
    command = _omg("show", RUN, "--home", str(home), "--db", db_url)
    on_c = subprocess.run(["unshare", "--mount", "--uts", "sh", "-c", _ON_MACHINE_B, "sh", str(third),
                           str(elsewhere), str(home), *command], capture_output=True, text=True,
                          env={**os.environ, "HOSTNAME_B": "machine-c"})
    assert on_c.returncode == 2, on_c.stderr
    assert on_c.stderr.strip().splitlines() == [
        f"omg-ledger: error: --home {str(home)!r} is the directory of 2 homes ({', '.join(labels)}): give one's label"]


def _append(run_dir: Path, count: int) -> None:
    """``count`` more lines on the run's stream, as a leg going on writes them."""
    from .test_cost import ev, t

    with open(run_dir / "events.jsonl", "a") as f:
        for n in range(count):
            f.write(json.dumps({**ev(RUN, t(f"10:00:{10 + n}"), "node_started", node_id=f"n{n}"), "run_id": RUN},
                               separators=(",", ":")) + "\n")


def _both_at_the_settling(tmp_path: Path, home: Path, home_b: Path, conninfo: str, identity: str,
                          sync: list[str]) -> list[tuple[subprocess.Popen, str, str]]:
    """``sync`` run on machine B and on this machine (A) at once, both let through to the
    settling of the run's copies together, B's first: while a third connection holds the
    lock they settle under (store.settle_copies), each waits there. Each settles the
    other's copy too, so PostgreSQL ends one of them to break the deadlock. B's, then A's
    (process, stdout, stderr)."""
    import psycopg

    key = zlib.crc32(identity.encode()) & 0x7FFFFFFF  # (backend.PostgresBackend.lock_identities)
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 2 AND NOT granted"
    with psycopg.connect(conninfo, autocommit=True) as holder, psycopg.connect(conninfo, autocommit=True) as watch:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(2, %s)", (key,))
        started = []
        for start in (lambda: _start_on_machine_b(tmp_path, home_b, home, sync),
                      lambda: subprocess.Popen(sync, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)):
            started.append(start())
            deadline = time.monotonic() + 120
            while watch.execute(waiting).fetchone()[0] < len(started):
                assert all(p.poll() is None for p in started), [p.communicate() for p in started]
                assert time.monotonic() < deadline, "the syncs never reached the settling"
                time.sleep(0.05)
        holder.execute("COMMIT")
        return [(p, *p.communicate(timeout=300)) for p in started]


def _a_run_and_bs_copy_taken_mid_run(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """(home, home on B, the run, B's copy of it, of its first 3 lines)."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux `unshare` is needed for this test")
    home, home_b = tmp_path / "home", tmp_path / "home-on-b"
    run_a, run_b = _clean(home), _clean(home_b)
    lines = (run_b / "events.jsonl").read_text().splitlines(keepends=True)
    (run_b / "events.jsonl").write_text("".join(lines[:3]))  # B's copy was taken mid-run
    return home, home_b, run_a, run_b


def test_two_machines_syncing_copies_of_one_run_at_once_both_finish(tmp_path, pg_url):
    """Machine A holds a run, machine B a copy of it; both copies grow, and both machines
    sync at once (cron at the same minute). Each sync writes its own copy's row, then waits
    to settle which copy is billed; the one that settles first must change the other's row,
    which the other holds: PostgreSQL ends one of them to break the deadlock (before, that
    sync stopped with exit 3). It is synced again, and settles after the other."""
    import psycopg

    home, home_b, run_a, run_b = _a_run_and_bs_copy_taken_mid_run(tmp_path)
    _really_another_machine(tmp_path, home_b, home)
    sync = _omg("sync", "--db", pg_url, "--home", str(home))
    assert subprocess.run(sync, capture_output=True).returncode == 0
    first_b = _on_machine_b(tmp_path, home_b, home, sync)
    assert first_b.returncode == 0, first_b.stderr
    conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        [(identity,)] = set(conn.execute("SELECT stream_identity FROM runs").fetchall())
        assert sorted(conn.execute("SELECT event_count, billed FROM runs").fetchall()) == [(3, False), (4, True)]
    _append(run_a, 1)  # A's copy: 5 lines
    _append(run_b, 3)  # B's copy: 6 lines, now the one to bill
    done = _both_at_the_settling(tmp_path, home, home_b, conninfo, identity, sync)
    assert [(p.returncode, err) for p, _, err in done] == [(0, ""), (0, "")]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute("SELECT h.machine, r.event_count, r.billed FROM runs r JOIN homes h ON h.id = r.home_id "
                            "ORDER BY r.event_count").fetchall()
    assert rows == [(_machine_here(), 5, False), (f"machine:{OTHER_MACHINE_ID}", 6, True)]


def test_a_sync_done_again_after_a_deadlock_reports_what_it_did_once(tmp_path, pg_url):
    """The deadlock above, with a bad line appended to each copy and an entry in each
    home's runs/ that is no run: the sync PostgreSQL ended is done again, and its report
    (`--json` and the problem lines on stderr) says what it did once, as the ledger
    holds it. Before, the rolled-back attempt's run, events, bytes and problems were
    counted again, and the runs/ entry listed twice."""
    import psycopg

    home, home_b, run_a, run_b = _a_run_and_bs_copy_taken_mid_run(tmp_path)
    for runs in (home / "runs", home_b / "runs"):
        os.symlink("/nowhere", runs / "a-link")  # a problem every sync of the home lists
    _really_another_machine(tmp_path, home_b, home)
    sync = _omg("sync", "--db", pg_url, "--home", str(home))
    assert subprocess.run(sync, capture_output=True).returncode == 0
    assert _on_machine_b(tmp_path, home_b, home, sync).returncode == 0
    conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        [(identity,)] = set(conn.execute("SELECT stream_identity FROM runs").fetchall())
        [(deadlocks_before,)] = conn.execute(deadlocks).fetchall()

    # What each sync reads, by hand: the lines appended to its copy since the last sync
    # (good ones, then one bad line), at the byte offsets where they begin.
    appended = {}
    for name, run_dir, good in (("A", run_a, 1), ("B", run_b, 3)):  # A's copy: 5 events, B's 6 (billed)
        stream = run_dir / "events.jsonl"
        before = stream.stat().st_size
        _append(run_dir, good)
        bad_at = stream.stat().st_size
        with open(stream, "a") as f:
            f.write("{not json\n")
        appended[name] = {"good": good, "bytes": stream.stat().st_size - before, "bad_at": bad_at,
                          "events": len(stream.read_text().splitlines()) - 1}
    done = _both_at_the_settling(tmp_path, home, home_b, conninfo, identity, [*sync, "--json"])
    assert [p.returncode for p, _, _ in done] == [0, 0], [err for _, _, err in done]

    # One of them was ended by PostgreSQL and done again (the server counts the deadlock;
    # a backend's counts reach pg_stat_database once it reports them, at the latest as it exits).
    with psycopg.connect(conninfo, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while conn.execute(deadlocks).fetchone()[0] == deadlocks_before:
            assert time.monotonic() < deadline, "no deadlock: neither sync was done again"
            time.sleep(0.1)
    stream_path, link = str(run_a / "events.jsonl"), str(home / "runs" / "a-link")  # (B's at the same path)
    for name, (_, out, err) in zip(("B", "A"), done, strict=True):
        report, mine = json.loads(out), appended[name]
        assert (report["runs_seen"], report["runs_changed"], report["events_ingested"], report["bytes_read"]) == (
            1, 1, mine["good"], mine["bytes"]), (name, report)
        assert report["events_derived"] <= mine["events"], (name, report)  # no more than the stream holds
        assert sorted((p["path"], p["offset"]) for p in report["problems"]) == sorted(
            [(link, 0), (stream_path, mine["bad_at"])]), (name, report["problems"])
        shown = err.splitlines()
        assert [sum(path in line for line in shown) for path in (link, stream_path)] == [1, 1], (name, err)


def test_a_home_moved_away_from_a_path_another_machine_has_a_home_at_takes_its_problems_along(tmp_path, db_url,
                                                                                             two_machines):
    """Machine A's home renamed: its problems of no run under the old path are renamed
    with it, though machine B has a home at that old path (B's problems are B's own).
    Before, they stayed at the old path, open for ever: no sync of A reads it again, and
    B's syncs never resolve A's problems."""
    home, home_b, _ = two_machines
    os.symlink("/nowhere", home / "runs" / "a-link")  # a problem of no run, on A only
    sync = _omg("sync", "--db", db_url, "--home", str(home))
    assert subprocess.run(sync, capture_output=True).returncode == 0
    on_b = _on_machine_b(tmp_path, home_b, home, sync)
    assert on_b.returncode == 0, on_b.stderr
    moved = tmp_path / "home-renamed"
    home.rename(moved)
    again = subprocess.run(_omg("sync", "--db", db_url, "--home", str(moved)), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    open_problems = [(p["path"], p["machine"]) for p in _problems(db_url) if p["open"]]
    # (the torn state.json of A's run is its run's: renamed with it)
    assert sorted(open_problems) == sorted([(str(moved / "runs" / "a-link"), _machine_here()),
                                            (str(moved / "runs" / RUN / "state.json"), _machine_here())])


def test_dangling_invocations_name_the_machine_whose_runner_stream_holds_them(tmp_path, db_url, monkeypatch):
    """Runner streams at the same path on two machines are two streams: a start with no
    end is listed with the machine whose stream holds it (before, both lines read
    `PATH:1`, and nothing said which machine's runner is working)."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux `unshare` is needed for this test")
    monkeypatch.delenv("OMG_HOME")  # no home named: ~/.oh-my-graph (there is none) is not synced
    stream, stream_b = tmp_path / "runner" / "events.jsonl", tmp_path / "runner-on-b" / "events.jsonl"
    for path, role in ((stream, "zen"), (stream_b, "navi")):
        path.parent.mkdir()
        path.write_text(json.dumps({"ts": "2024-05-01T10:00:00Z", "role": role, "milestone": "m1",
                                    "event": "start"}) + "\n")
    _really_another_machine(tmp_path, stream_b.parent, stream.parent)
    sync = _omg("sync", "--db", db_url, "--invocations", str(stream))
    assert subprocess.run(sync, capture_output=True).returncode == 0
    on_b = _on_machine_b(tmp_path, stream_b.parent, stream.parent, sync)
    assert on_b.returncode == 0, on_b.stderr

    now = {**os.environ, "OMG_LEDGER_NOW": "2024-05-01T10:05:00Z"}
    listed = subprocess.run(_omg("invocations", "--db", db_url, "--json"), capture_output=True, text=True, env=now)
    assert listed.returncode == 0, listed.stderr
    dangling = json.loads(listed.stdout)["dangling"]
    assert sorted((d["role"], d["path"], d["line"], d["machine"]) for d in dangling) == [
        ("navi", str(stream), 1, f"machine:{OTHER_MACHINE_ID}"), ("zen", str(stream), 1, _machine_here())]
    # The text names them too: one line per start, each with its machine.
    text = subprocess.run(_omg("invocations", "--db", db_url), capture_output=True, text=True, env=now)
    assert text.returncode == 0, text.stderr
    rows = text.stdout.split("WORKING NOW", 1)[1].splitlines()
    [zen] = [line for line in rows if " zen " in f" {line} "]
    [navi] = [line for line in rows if " navi " in f" {line} "]
    assert _machine_here() in zen and OTHER_MACHINE_ID not in zen
    assert f"machine:{OTHER_MACHINE_ID}" in navi and _machine_here() not in navi


def test_a_machine_named_by_omg_ledger_machine_is_one_machine_whatever_its_id_and_hostname(tmp_path, db_url):
    """A cron job in a container made anew for every run: another machine id and hostname
    each time, the same home at the same path. Named by OMG_LEDGER_MACHINE it is one
    machine: one home, and the lock of a run whose leg its stream left open is probed
    there, so a dead run reads ABANDONED; unnamed, the second container is another
    machine, with a home of its own and no lock it may probe (the run reads RUNNING)."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux `unshare` is needed for this test")
    from .builders import ev as event
    from .builders import write_run

    home = tmp_path / "home"
    run_id = "20261129-120000.000000001-1"
    write_run(home, run_id, [event("run_started", 0), event("node_started", 1, node_id="a")],
              lock="oh-my-graph-lock 1\n1\n")  # the leg open; the lock file there, held by no one
    sync = _omg("sync", "--db", db_url, "--home", str(home))
    runs = _omg("runs", "--db", db_url, "--json")

    def homes() -> list[tuple[str, str]]:
        out = subprocess.run(_omg("homes", "--db", db_url, "--json"), capture_output=True, text=True)
        return sorted((h["label"], h["machine"]) for h in json.loads(out.stdout))

    named = {**os.environ, "OMG_LEDGER_MACHINE": "nightly-cron"}
    first = subprocess.run(sync, capture_output=True, text=True, env=named)
    assert first.returncode == 0, first.stderr
    assert homes() == [(f"nightly-cron:{home}", "named:nightly-cron")]

    def on_b(command: list[str], env: dict) -> subprocess.CompletedProcess:
        id_file = tmp_path / "machine-id-b"
        id_file.write_text(OTHER_MACHINE_ID + "\n")
        return subprocess.run(["unshare", "--mount", "--uts", "sh", "-c", _ON_MACHINE_B, "sh", str(id_file),
                               str(home), str(home), *command], capture_output=True, text=True,
                              env={**env, "HOSTNAME_B": "container-2"})

    second = on_b(sync, named)
    assert second.returncode == 0, second.stderr
    assert homes() == [(f"nightly-cron:{home}", "named:nightly-cron")]  # the same home
    listed = on_b(runs, named)
    assert listed.returncode == 0, listed.stderr
    assert [(r["run_id"], r["status"]) for r in json.loads(listed.stdout)] == [(run_id, "ABANDONED")]

    unnamed = {k: v for k, v in os.environ.items() if k != "OMG_LEDGER_MACHINE"}
    assert on_b(sync, unnamed).returncode == 0
    assert [machine for _label, machine in homes()] == [f"machine:{OTHER_MACHINE_ID}", "named:nightly-cron"]
    listed = on_b(runs, unnamed)
    assert [(r["run_id"], r["status"]) for r in json.loads(listed.stdout)] == [(run_id, "RUNNING")]


def test_an_omg_ledger_machine_name_that_is_too_long_is_a_usage_error(tmp_path):
    result = subprocess.run(_omg("sync", "--db", str(tmp_path / "l.sqlite"), "--home", str(tmp_path)),
                            capture_output=True, text=True, env={**os.environ, "OMG_LEDGER_MACHINE": "m" * 5000})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "OMG_LEDGER_MACHINE is at most" in result.stderr
