"""Moving a ledger to another backend keeps everything, history of gone runs included."""

from __future__ import annotations

import shutil

import pytest
from sqlalchemy import select

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.errors import BadArgument
from omg_ledger.export import export_ledger
from omg_ledger.sync import Home, sync

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
