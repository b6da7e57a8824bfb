"""Datasette metadata for a ledger: titles, descriptions and label columns.

Every description comes from :data:`omg_ledger.schema.DOCS`, the one place the tables,
views and columns are documented. Label columns make Datasette show a foreign key by
the name a person knows (a home's label, a run's id) instead of a row id.
"""

from __future__ import annotations

import os

from .db import database_url

TITLE = "omg-ledger"
DESCRIPTION = ("oh-my-graph run history: what was spent, how every verdict was reached. Money is integer "
               "nano-dollars (cost_nano_usd; NULL = unknown, never 0). Status is live and not in SQL: "
               "ask `omg-ledger runs`. The v_* views are the stable names to query.")
LABEL_COLUMNS = {"homes": "label", "runs": "run_id", "streams": "path"}


def database_name(db: str) -> str:
    """The name Datasette gives a SQLite file: its base name without the extension (a
    URL's ``?options`` left out; for a server's URL, the database's name)."""
    url = database_url(db)
    path = url.split(":///", 1)[1] if url.startswith("sqlite") and ":///" in url else db
    path = path.split("?", 1)[0]
    if "://" in path:  # a server: the database named after the last slash
        return path.rsplit("/", 1)[1] or "ledger"
    return os.path.splitext(os.path.basename(path))[0] or "ledger"


def datasette_metadata(name: str) -> dict:
    from .schema import DOCS

    tables = {}
    for table, docs in DOCS.items():
        entry: dict = {"description": docs[""],
                       "columns": {column: doc for column, doc in docs.items() if column}}
        if table in LABEL_COLUMNS:
            entry["label_column"] = LABEL_COLUMNS[table]
        tables[table] = entry
    return {"title": TITLE, "description": DESCRIPTION, "databases": {name: {"tables": tables}}}
