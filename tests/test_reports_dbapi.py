"""runs, cost, audit and problems read SQL text through backend.reading: on a SQLite
ledger opened for reading that is a plain sqlite3 connection (no SQLAlchemy), on an
Engine its DB-API connection. Both must give the same reports, value for value and type
for type (JSON is compared: a 1 where a true was would show), on the corpus."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime

import orjson
import pytest

from .conftest import REPO

EXAMPLES = REPO / "examples" / "home"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _sync(db: str, *homes) -> None:
    for home in homes:
        done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", str(home)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> str:
    """The conformance corpus and the examples home in one SQLite ledger, synced by the CLI."""
    from .conftest import CORPUS_HOME

    db = str(tmp_path_factory.mktemp("dbapi") / "ledger.sqlite")
    _sync(db, CORPUS_HOME, EXAMPLES)
    return db


def _json(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _reports(bind) -> dict[str, bytes]:
    from omg_ledger.reports.audit import audit_report
    from omg_ledger.reports.cost import GROUPINGS, cost_report
    from omg_ledger.reports.problems import list_problems
    from omg_ledger.reports.runs import list_runs
    from omg_ledger.status import ABANDONED, PASS, PAUSED

    out = {
        "runs": _json(list_runs(bind)),
        "runs live": _json(list_runs(bind, statuses=(ABANDONED, PAUSED))),
        "runs pass since": _json(list_runs(bind, since_us=1_764_000_000_000_000, statuses=(PASS,))),
        "audit": _json(audit_report(bind, now=NOW)),
        "audit since": _json(audit_report(bind, since="2026-11-29", now=NOW)),
        "problems": _json(list_problems(bind, include_resolved=True)),
    }
    for by in (None, *GROUPINGS):
        out[f"cost {by}"] = _json(cost_report(bind, by=by, tz="Europe/Berlin", now=NOW))
        out[f"cost {by} window"] = _json(cost_report(bind, by=by, since="2026-11-28", until="2026-11-30",
                                                     tz="UTC", now=NOW))
    return out


def test_reports_are_the_same_through_sqlite3_and_through_a_sqlalchemy_engine(synced):
    from omg_ledger.db import create_ledger_engine, open_ledger_readonly
    from omg_ledger.ledger import ReadLedger

    handle = open_ledger_readonly(synced)
    assert isinstance(handle, ReadLedger)
    through_sqlite3 = _reports(handle)
    assert handle._engine is None  # none of it asked for SQLAlchemy
    engine = create_ledger_engine(synced)
    try:
        through_engine = _reports(engine)
    finally:
        engine.dispose()
    assert through_sqlite3.keys() == through_engine.keys()
    for name in through_sqlite3:
        assert through_sqlite3[name] == through_engine[name], name
    # The corpus exercises what the reports count: not a comparison of empty lists.
    audit = orjson.loads(through_sqlite3["audit"])
    assert audit["abandoned"] and audit["failures"]["judged"] and audit["provenance"]["passes"] > 0
    # examples/home holds copies of the corpus's 25 runs: 50 directories, 25 runs listed.
    con = sqlite3.connect(synced)
    assert con.execute("SELECT COUNT(*), SUM(billed) FROM runs").fetchone() == (50, 25)
    con.close()
    assert len(orjson.loads(through_sqlite3["runs"])) == 25


def _shown_alike(detail: dict) -> dict:
    """A run's show, less what each sync stamps on its own problems (ids and times)."""
    for problem in detail["problems"]:
        for stamp in ("id", "first_seen_at", "last_seen_at", "resolved_at"):
            problem.pop(stamp, None)
    return detail


def test_show_gives_every_run_alike_on_sqlite_and_postgresql(synced, pg_url):
    """show reads `SELECT *` rows through the DB-API: sqlite3 hands a BOOLEAN back as 0 or
    1, psycopg as a bool. The JSON of every run and copy, value for value and type for
    type, is the same from the two databases synced from the same homes."""
    from omg_ledger.db import RUN_TABLES_SINCE, open_ledger_readonly
    from omg_ledger.reports.runs import list_runs, show_run

    from .conftest import CORPUS_HOME

    _sync(pg_url, CORPUS_HOME, EXAMPLES)
    lite, pg = open_ledger_readonly(synced, RUN_TABLES_SINCE), open_ledger_readonly(pg_url, RUN_TABLES_SINCE)
    con = sqlite3.connect(synced)
    copies = con.execute("SELECT r.run_id, h.label FROM runs r JOIN homes h ON h.id = r.home_id").fetchall()
    con.close()
    assert len(copies) == 50 and len(list_runs(lite)) == 25
    flags = set()
    for run_id, home in copies:
        shown = _shown_alike(show_run(lite, run_id, home))
        assert _json(shown) == _json(_shown_alike(show_run(pg, run_id, home))), (run_id, home)
        flags |= {(table, key) for table in ("nodes", "rounds", "charges") for item in shown[table]
                  for key, value in item.items() if value is True or value is False}
    assert {("nodes", "budget_overrun"), ("rounds", "cost_unknown"), ("charges", "cost_unknown")} <= flags
    pg.dispose()


def test_the_sql_text_prefilter_keeps_the_runs_status_could_be_keeps(synced):
    """reports.runs.could_be_sql is status.could_be (checked against derive by test_status)."""
    import sqlalchemy as sa

    from omg_ledger import schema
    from omg_ledger.db import create_ledger_engine
    from omg_ledger.reports.runs import could_be_sql
    from omg_ledger.status import STATUSES, could_be

    engine = create_ledger_engine(synced)
    try:
        with engine.connect() as conn:
            for status in STATUSES:
                expected = set(conn.execute(sa.select(schema.runs.c.id).where(could_be(status))).scalars())
                got = set(conn.exec_driver_sql(f"SELECT r.id FROM runs r WHERE {could_be_sql(status)}").scalars())
                assert got == expected, status
    finally:
        engine.dispose()


def test_audit_reads_a_ledger_without_the_audit_index_the_same_and_never_adds_it(synced, tmp_path):
    """0007 only adds ix_nodes_verdict: a 0006 ledger is read as it is (reads never migrate)."""
    from omg_ledger.db import open_ledger_readonly
    from omg_ledger.reports.audit import audit_report

    old = tmp_path / "old.sqlite"
    shutil.copy(synced, old)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(synced + suffix):
            shutil.copy(synced + suffix, str(old) + suffix)
    con = sqlite3.connect(old)
    con.execute("DROP INDEX ix_nodes_verdict")
    con.execute("UPDATE alembic_version SET version_num = '0006'")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    assert _json(audit_report(open_ledger_readonly(str(old), oldest="0006"), now=NOW)) == \
        _json(audit_report(open_ledger_readonly(synced), now=NOW))
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "audit", "--json", "--db", str(old)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and orjson.loads(done.stdout)["abandoned"], done.stderr
    con = sqlite3.connect(old)
    assert con.execute("SELECT version_num FROM alembic_version").fetchone() == ("0006",)
    assert con.execute("SELECT name FROM sqlite_master WHERE name = 'ix_nodes_verdict'").fetchone() is None
    con.close()


def test_a_ledger_gone_under_a_reader_is_a_one_line_database_error(synced, tmp_path):
    """The sqlite3 path words database trouble as the SQLAlchemy path does: exit 3, one line."""
    from omg_ledger.db import open_ledger_readonly
    from omg_ledger.errors import DatabaseUnavailable
    from omg_ledger.reports.runs import list_runs

    db = tmp_path / "gone.sqlite"
    shutil.copy(synced, db)
    handle = open_ledger_readonly(str(db))
    db.unlink()
    with pytest.raises(DatabaseUnavailable, match="unable to open database file") as caught:
        list_runs(handle)
    assert caught.value.exit_code == 3 and "\n" not in str(caught.value)


def test_a_damaged_ledger_under_a_reader_says_it_is_damaged(synced, tmp_path):
    from omg_ledger.db import open_ledger_readonly
    from omg_ledger.errors import DatabaseDamaged
    from omg_ledger.reports.audit import audit_report

    db = tmp_path / "damaged.sqlite"
    con = sqlite3.connect(synced)
    con.execute("VACUUM INTO ?", (str(db),))
    con.close()
    handle = open_ledger_readonly(str(db))  # the header and the revision still read
    size = db.stat().st_size
    with open(db, "r+b") as f:  # every page after the first few: garbage
        f.seek(8 * 4096)
        f.write(os.urandom(size - 8 * 4096))
    with pytest.raises(DatabaseDamaged, match="restore it from a backup"):
        audit_report(handle, now=NOW)


@pytest.mark.parametrize("since", [None, "2026-11-29"])
def test_audit_text_read_while_rendered_is_the_text_of_the_whole_report(synced, since):
    """audit_streamed's long sections are read while rendered; the text is the same."""
    from omg_ledger import render
    from omg_ledger.db import open_ledger_readonly
    from omg_ledger.reports.audit import Rows, audit_report, audit_streamed

    handle = open_ledger_readonly(synced)
    whole = audit_report(handle, since=since, now=NOW)
    assert whole["failures"]["judged"] and whole["provenance"]["runs_all_unverified"]
    for verbose in (False, True):
        with audit_streamed(handle, since=since, now=NOW) as streamed:
            assert isinstance(streamed["failures"]["judged"], Rows)  # not held as a list
            assert isinstance(streamed["provenance"]["runs_all_unverified"], Rows)
            text = "\n".join(render.audit_lines(streamed, verbose))
        assert text == render.audit_text(whole, verbose)
    first = whole["failures"]["judged"][0]
    assert f"  {first['run_id']}  {first['node_id']}: " in render.audit_text(whole)  # the rows were rendered
