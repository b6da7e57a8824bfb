"""Backend.upsert: one INSERT … ON CONFLICT text per table and columns, for SQLite and
PostgreSQL alike (it replaced building SQLAlchemy's statement on every call)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from omg_ledger import schema
from omg_ledger.backend import upsert_sql
from omg_ledger.db import open_ledger, write_transaction
from omg_ledger.store import upsert


def test_the_text_names_the_conflict_keys_and_sets_only_the_update_columns():
    assert upsert_sql("plans", ("home_id", "plan_id", "gone"), ("home_id", "plan_id"), ("gone",), "?") == (
        "INSERT INTO plans (home_id, plan_id, gone) VALUES (?, ?, ?) "
        "ON CONFLICT (home_id, plan_id) DO UPDATE SET gone = excluded.gone")
    assert upsert_sql("streams", ("kind", "source", "path"), ("kind", "source", "path"), (), "%s") == (
        "INSERT INTO streams (kind, source, path) VALUES (%s, %s, %s) ON CONFLICT (kind, source, path) DO NOTHING")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ledger(request, tmp_path):
    url = str(tmp_path / "l.sqlite") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    engine = open_ledger(url)
    yield engine
    engine.dispose()


def _plan(engine) -> tuple:
    with engine.connect() as conn:
        return conn.execute(text("SELECT has_graph_json, has_rejected, graph_name, gone FROM plans")).one()


def test_an_upsert_inserts_then_updates_the_named_columns_and_fills_defaults(ledger):
    with write_transaction(ledger) as conn:
        home = conn.execute(text("INSERT INTO homes (label, path) VALUES ('h', '/h') RETURNING id")).scalar()
        # gone left out: its default (False) is what the insert stores
        upsert(conn, schema.plans, {"home_id": home, "plan_id": "p1", "has_graph_json": True, "has_rejected": False,
                                    "graph_name": "first"}, ["home_id", "plan_id"], ["graph_name"])
    assert _plan(ledger) == (True, False, "first", False)
    with write_transaction(ledger) as conn:
        # a conflict: only graph_name is set again; has_graph_json keeps what was stored
        upsert(conn, schema.plans, {"home_id": home, "plan_id": "p1", "has_graph_json": False, "has_rejected": False,
                                    "graph_name": "second"}, ["home_id", "plan_id"], ["graph_name"])
        # and with no update column, a conflict changes nothing
        upsert(conn, schema.plans, {"home_id": home, "plan_id": "p1", "has_graph_json": False, "has_rejected": True,
                                    "graph_name": "third", "gone": True}, ["home_id", "plan_id"], [])
    assert _plan(ledger) == (True, False, "second", False)
