"""The ledger in Datasette: every table, view and column documented, foreign keys shown
by name, checked against a real Datasette server over a real synced ledger."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from omg_ledger import schema
from omg_ledger.views import VIEWS_0002

from .conftest import CORPUS_HOME

CLI = [sys.executable, "-m", "omg_ledger.cli"]


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Path:
    assert CORPUS_HOME.is_dir(), f"the shared corpus is missing at {CORPUS_HOME}"
    db = tmp_path_factory.mktemp("datasette") / "ledger.sqlite"
    subprocess.run([*CLI, "sync", "--db", str(db), "--home", str(CORPUS_HOME)], check=True, capture_output=True)
    return db


def _objects(db: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'")]
        return {n: [r[1] for r in con.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        con.close()


def test_every_table_view_and_column_has_a_description(ledger):
    documented = schema.DOCS
    for table in schema.metadata.tables.values():
        assert documented.get(table.name, {}).get(""), f"table {table.name} has no description"
        for column in table.c:
            assert documented[table.name].get(column.name), f"{table.name}.{column.name} has no description"
    for view in VIEWS_0002:
        assert documented.get(view, {}).get(""), f"view {view} has no description"
    # What a migrated ledger really holds (views of later migrations included).
    objects = _objects(ledger)
    assert "v_invocations" in objects and "runs" in objects
    for name, columns in objects.items():
        assert documented.get(name, {}).get(""), f"{name} has no description"
        for column in columns:
            assert documented[name].get(column), f"{name}.{column} has no description"
        stale = set(documented[name]) - set(columns) - {""}
        assert not stale, f"{name}: descriptions for columns it does not have: {stale}"


def test_view_descriptions_are_the_views_own(ledger):
    for view, (about, _sql) in VIEWS_0002.items():
        assert schema.DOCS[view][""] == about


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"datasette exited {process.returncode}: {process.stderr.read().decode()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"datasette did not listen on port {port} within {deadline_s}s")


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        assert response.status == 200
        return response.read().decode()


def test_real_datasette_shows_descriptions_and_labels(ledger, tmp_path):
    metadata_file = tmp_path / "metadata.json"
    metadata_file.write_bytes(subprocess.run([*CLI, "datasette-metadata", "--db", str(ledger)], check=True,
                                             capture_output=True).stdout)
    metadata = json.loads(metadata_file.read_text())
    assert list(metadata["databases"]) == ["ledger"]  # the name Datasette gives ledger.sqlite
    port = _free_port()
    datasette = Path(sys.executable).parent / "datasette"
    process = subprocess.Popen([str(datasette), "serve", str(ledger), "-m", str(metadata_file),
                                "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for_port(port, process)
        view = json.loads(_get(port, "/ledger/v_runs.json?_shape=objects&_size=max"))
        assert view["is_view"] is True
        assert len(view["rows"]) == 25  # the corpus's 25 run directories
        assert all(isinstance(r["cost_nano_usd"], int) for r in view["rows"])

        view_page = _get(port, "/ledger/v_runs")
        assert schema.DOCS["v_runs"][""].split(",")[0] in view_page
        assert "Home label (homes.label)" in view_page  # a column description

        runs_page = _get(port, "/ledger/runs")
        assert "One row per run directory ever seen" in runs_page
        assert "Known spend over every leg and the assessment" in runs_page
        home_label = f"{socket.gethostname()}:{CORPUS_HOME.resolve()}"
        # home_id is shown as the home's label, linked to its row.
        assert f'href="/ledger/homes/1">{home_label}</a>' in runs_page

        legs = json.loads(_get(port, "/ledger/legs.json?_shape=objects&_labels=on&_size=max"))
        labels = {r["run_pk"]["label"] for r in legs["rows"]}
        run_ids = {r["run_id"] for r in view["rows"]}
        assert labels and labels <= run_ids  # run_pk is shown as the run's id
    finally:
        process.terminate()
        process.wait(timeout=30)



@pytest.mark.parametrize("db, name", [
    ("/srv/ledgers/spend.sqlite", "spend"),
    ("sqlite:////srv/ledgers/spend.sqlite?mode=ro", "spend"),
    ("postgresql://me:secret@db.example/omg_spend?sslmode=require&options=-c%20search_path%3Dx", "omg_spend"),
], ids=["path", "sqlite-url-with-options", "server-url-with-options"])
def test_the_default_database_name_leaves_a_urls_options_out(db, name):
    out = subprocess.run([*CLI, "datasette-metadata", "--db", db], check=True, capture_output=True, text=True)
    assert list(json.loads(out.stdout)["databases"]) == [name]
