"""PostgreSQL as a first-class backend: same data, same reports, concurrent syncs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pytest

from omg_ledger.db import open_ledger
from omg_ledger.reports.cost import GROUPINGS, cost_report
from omg_ledger.reports.runs import list_runs
from omg_ledger.sync import Home, sync

from .builders import copy_run, ev, write_run
from .conftest import CORPUS_HOME
from .ledger_dump import dump

pytestmark = pytest.mark.postgres
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_corpus_in_sqlite_and_postgresql_gives_equal_data_and_reports(tmp_path, pg_url):
    homes = [Home.from_path(str(CORPUS_HOME), "corpus")]
    lite = open_ledger(str(tmp_path / "l.sqlite"))
    pg = open_ledger(pg_url)
    sync(lite, homes)
    sync(pg, homes)
    assert dump(lite, cache_hints=True) == dump(pg, cache_hints=True)
    assert list_runs(lite) == list_runs(pg)
    for by in (None, *GROUPINGS):
        for tz in ("UTC", "Asia/Kolkata", "America/New_York"):
            assert cost_report(lite, by=by, tz=tz, now=NOW) == cost_report(pg, by=by, tz=tz, now=NOW), (by, tz)


def _copy_home(src, dst, suffix: str):
    """The corpus under different run-id directory names (a second machine's runs)."""
    dst.mkdir(parents=True)
    shutil.copytree(src / "plans", dst / "plans")
    (dst / "runs").mkdir()
    for run in (src / "runs").iterdir():
        copy_run(run, dst / "runs" / f"{run.name}{suffix}")


def test_six_concurrent_syncs_into_one_postgresql_ledger_equal_sequential_syncs(tmp_path, pg_server, pg_url):
    homes = []
    for i in range(4):
        home = tmp_path / f"home{i}"
        _copy_home(CORPUS_HOME, home, f"-m{i}")
        homes.append(home)
    open_ledger(pg_url).dispose()  # not required (first syncs migrate under a lock), but keeps timing tight
    cli = [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", pg_url, "--json"]
    # 4 processes on 4 homes, plus 2 more processes on home0 at the same moment.
    jobs = [[*cli, "--home", f"h{i}={home}"] for i, home in enumerate(homes)]
    jobs += [[*cli, "--home", f"h0={homes[0]}"]] * 2
    procs = [subprocess.Popen(job, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for job in jobs]
    results = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert json.loads(out)["problems"] == []
        assert "deadlock" not in err.lower()
    concurrent = dump(pg_url, cache_hints=True)

    sequential_url = pg_server.create_database("sequential")
    engine = open_ledger(sequential_url)
    for i, home in enumerate(homes):
        sync(engine, [Home.from_path(str(home), f"h{i}")])
    assert dump(engine, cache_hints=True) == concurrent
    assert len(concurrent["runs"]) == 100


def test_first_time_syncs_racing_to_migrate_do_not_collide(pg_url):
    cli = [sys.executable, "-c", "import sys; from omg_ledger.db import open_ledger; open_ledger(sys.argv[1])", pg_url]
    procs = [subprocess.Popen(cli, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


# Text that bulk-load formats escape (backslash, \N for NULL, tab, newline, CR, \.)
# must reach both databases as the values themselves.
AWKWARD_TEXT = ["back\\slash", "\\N", "", "tab\there", "new\nline", "cr\rhere", "\\.", "naïve ✓", "nul\u0000here"]


def test_awkward_text_is_stored_alike_in_sqlite_and_postgresql(tmp_path, pg_url):
    home = tmp_path / "home"
    stream = [ev("run_started", 0), ev("node_started", 1, node_id="a", session_id="s\\1\t")]
    stream += [ev("node_failed", 2 + n, node_id="a", detail=text) for n, text in enumerate(AWKWARD_TEXT)]
    stream += [ev("node_passed", 20, node_id="a", verdict="PASS", cost_usd=0.5, detail="\\N"),
               ev("run_finished", 21, outcome="passed")]
    write_run(home, "r1", stream)
    lines = (home / "runs" / "r1" / "events.jsonl").read_text().splitlines()
    homes = [Home.from_path(str(home), "awkward")]
    lite = open_ledger(str(tmp_path / "l.sqlite"))
    pg = open_ledger(pg_url)
    sync(lite, homes)
    sync(pg, homes)
    assert dump(lite) == dump(pg)
    with pg.connect() as conn:
        raws = conn.exec_driver_sql("SELECT raw FROM events ORDER BY line_no").scalars().all()
        details = conn.exec_driver_sql("SELECT detail FROM rounds ORDER BY seq, round").scalars().all()
        session = conn.exec_driver_sql("SELECT session_id FROM rounds WHERE session_id IS NOT NULL").scalar_one()
    assert raws == lines  # the lines as written, byte for byte
    # One round per node_failed, then the passing one; NUL becomes U+FFFD in derived text.
    assert details == [t.replace("\u0000", "\ufffd") for t in AWKWARD_TEXT] + ["\\N"]
    assert session == "s\\1\t"


def test_a_rejected_bulk_insert_is_the_same_sqlalchemy_error_on_both_backends(db_url):
    # The CLI turns SQLAlchemy errors into one line and exit 3; a bare driver error
    # from the bulk write would be a traceback.
    from sqlalchemy.exc import IntegrityError

    from omg_ledger.store import PendingRows

    engine = open_ledger(db_url)
    pending = PendingRows()
    pending.add("events", [(424242, 1, 0, 3, "2026-11-29T10:00:00Z", "run_started", None, "{}")])
    with engine.connect() as conn, pytest.raises(IntegrityError):  # no run 424242: the foreign key refuses
        pending.flush(conn)


def test_a_run_locked_once_per_transaction_stays_locked_and_a_rolled_back_savepoint_locks_again(pg_url):
    """lock_run asks the server once per run and (sub)transaction; the row lock is real
    (another session cannot take it) and is taken again after a savepoint that held it
    was rolled back (which released it)."""
    import psycopg
    from sqlalchemy import event

    from omg_ledger.backend import backend_of
    from omg_ledger.ledger import postgres_conninfo

    engine = open_ledger(pg_url)
    sync(engine, [Home.from_path(str(CORPUS_HOME), "corpus")])
    locks: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: locks.append(statement) if "FOR UPDATE" in statement else None)
    other = psycopg.connect(postgres_conninfo(pg_url), autocommit=True)

    def locked_elsewhere(run_pk: int) -> bool:
        try:
            other.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE NOWAIT", (run_pk,))
            return False
        except psycopg.errors.LockNotAvailable:
            return True

    try:
        with engine.connect() as conn:
            run_pk = conn.exec_driver_sql("SELECT MIN(id) FROM runs").scalar()
            conn.rollback()
            backend = backend_of(conn)
            with conn.begin():
                backend.lock_run(conn, run_pk)
                backend.lock_run(conn, run_pk)
                assert len(locks) == 1 and locked_elsewhere(run_pk)
                nested = conn.begin_nested()
                backend.lock_run(conn, run_pk)  # a new subtransaction: asked again
                assert len(locks) == 2
                nested.rollback()
                assert locked_elsewhere(run_pk)  # (the outer transaction's lock stands)
                backend.lock_run(conn, run_pk + 1)
                nested = conn.begin_nested()
                backend.lock_run(conn, run_pk + 2)
                nested.rollback()  # released with the savepoint...
                assert not locked_elsewhere(run_pk + 2)
                backend.lock_run(conn, run_pk + 2)  # ...so taken again
                assert len(locks) == 5 and locked_elsewhere(run_pk + 2)
            assert not locked_elsewhere(run_pk)  # the transaction ended
    finally:
        other.close()
        engine.dispose()


def _locale_database(pg_server) -> str:
    """A database whose default collation is ICU's en-US, as a server created in an
    en_US.UTF-8 locale would be: case and punctuation count only to break ties."""
    name = f"icu_{uuid.uuid4().hex[:8]}"
    pg_server.execute_admin(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu "
                            "ICU_LOCALE 'en-US' LOCALE 'C.utf8'")
    [(before,)] = pg_server.execute_admin("SELECT 'a_b' < 'a-b' COLLATE \"en-US-x-icu\"")
    assert before  # the locale really orders otherwise than code points
    return pg_server.url(name)


def _awkwardly_named_home(root, label_dir: str):
    home = root / label_dir
    run = "20261129-100000.000000001-1"
    nodes = ["a_b", "a-b", "B", "a"]
    stream = [ev("run_started", 0)]
    for n, node in enumerate(nodes):
        stream += [ev("node_started", 1 + 2 * n, node_id=node),
                   ev("node_passed", 2 + 2 * n, node_id=node, verdict="PASS", cost_usd=0.1)]
    write_run(home, run, stream + [ev("run_finished", 20, outcome="passed")])
    for plan in ("p_1", "p-1", "P2"):
        (home / "plans" / plan).mkdir(parents=True)
    with open(home / "runs" / run / "events.jsonl", "a") as f:
        f.write("not json\n")
    return home


def _cli_json(db: str, *args: str):
    out = subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args, "--db", db, "--json"],
                         capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def test_text_is_listed_in_code_point_order_whatever_the_databases_locale(tmp_path, pg_server):
    url = _locale_database(pg_server)
    lite = str(tmp_path / "l.sqlite")
    homes = ["--home", f"Zed={_awkwardly_named_home(tmp_path, 'Zed')}",
             "--home", f"alpha={_awkwardly_named_home(tmp_path, 'alpha')}"]
    for db in (lite, url):
        subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, *homes],
                       capture_output=True, check=True)
    # Code point order, as SQLite's BINARY collation: "B" < "a" < "a-b" < "a_b", "P2" < "p-1" < "p_1",
    # "Zed" < "alpha". en-US would say a, a_b, a-b, B and alpha, Zed.
    for db in (lite, url):
        show = _cli_json(db, "show", "20261129-100000.000000001-1", "--home", "Zed")
        assert [n["node_id"] for n in show["nodes"]] == ["B", "a", "a-b", "a_b"]
        assert [h["label"] for h in _cli_json(db, "homes")] == ["Zed", "alpha"]
        assert [(p["home"], p["plan_id"]) for p in _cli_json(db, "plans")] == [
            ("Zed", "p_1"), ("alpha", "p_1"), ("Zed", "p-1"), ("alpha", "p-1"), ("Zed", "P2"), ("alpha", "P2")]
        assert [p["path"].split("/")[-4] for p in _cli_json(db, "problems")] == ["Zed", "alpha"]
    for command in (["runs"], ["query", "unverified_passes"], ["query", "most_expensive_nodes"]):
        assert _cli_json(lite, *command) == _cli_json(url, *command), command
    audits = [_cli_json(db, "audit") for db in (lite, url)]
    for audit in audits:  # when each sync saw a problem is the wall clock's
        for problem in audit["problems"]:
            del problem["first_seen_at"], problem["last_seen_at"]
    assert audits[0] == audits[1]


def test_a_ledger_made_before_0012_in_such_a_database_sorts_in_code_point_order_once_upgraded(tmp_path, pg_server):
    from alembic import command

    from omg_ledger.db import alembic_config, write_transaction

    url = _locale_database(pg_server)
    engine = open_ledger(url)
    sync(engine, [Home.from_path(str(_awkwardly_named_home(tmp_path, "Zed")), "Zed"),
                  Home.from_path(str(_awkwardly_named_home(tmp_path, "alpha")), "alpha")])
    derived = dump(engine, cache_hints=True)
    with write_transaction(engine) as conn:
        command.downgrade(alembic_config(conn), "0011")  # the columns take the database's collation again
    labels = "SELECT label FROM homes ORDER BY label"
    nodes = "SELECT node FROM v_nodes WHERE home = 'Zed' ORDER BY node"
    with engine.connect() as conn:
        assert conn.exec_driver_sql(labels).scalars().all() == ["alpha", "Zed"]
        assert conn.exec_driver_sql(nodes).scalars().all() == ["a", "a_b", "a-b", "B"]

    with write_transaction(engine) as conn:
        command.upgrade(alembic_config(conn), "head")
    with engine.connect() as conn:
        assert conn.exec_driver_sql(labels).scalars().all() == ["Zed", "alpha"]
        assert conn.exec_driver_sql(nodes).scalars().all() == ["B", "a", "a-b", "a_b"]  # through the view too
        assert conn.exec_driver_sql(
            "SELECT count(*) FROM pg_views WHERE schemaname = current_schema()").scalar() == 7
    assert dump(engine, cache_hints=True) == derived
    engine.dispose()
