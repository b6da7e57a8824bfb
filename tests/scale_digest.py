"""A per-table digest of a scale-corpus ledger, comparable across machines and checkouts.

The dump (tests/ledger_dump.py) is made independent of where and on what the corpus
was unpacked: the unpacked home's path becomes ``<home>``, and the columns that name a
filesystem object rather than its content (``dev``, ``inode``, ``ctime_ns``, ``machine``)
are left out. Each table then digests to (row count, sha256 of the repr of its sorted rows).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from sqlalchemy.engine import Engine

from .ledger_dump import dump

PLACE_COLUMNS = {"dev", "inode", "ctime_ns", "machine"}


def digest(engine: Engine, home: str, leave_out: dict[str, set[str]] | None = None,
           as_of: dict[str, dict[str, Callable[[dict], object]]] | None = None) -> dict[str, list]:
    """{table: [row count, sha256 hex]} of the whole ledger, the home's path made ``<home>``.
    ``leave_out``: {table: columns} not digested (columns a golden digest predates).
    ``as_of``: {table: {column: f}} digested as ``f(row)`` (the row as a dict): the value
    an older rule wrote, for a column whose rule changed since the golden digest."""
    prefixes = sorted({home, os.path.realpath(home)}, key=len, reverse=True)

    def placeless(value):
        if isinstance(value, str):
            for prefix in prefixes:
                value = value.replace(prefix, "<home>")
        elif isinstance(value, tuple):
            value = tuple(placeless(v) for v in value)
        return value

    out = {}
    for table, rows in dump(engine).items():
        if table == "alembic_version":
            continue  # the migration head, not a sync's output
        skip = PLACE_COLUMNS | (leave_out or {}).get(table, set())
        older = (as_of or {}).get(table, {})

        def as_digested(row: tuple, older: dict = older, skip: set = skip) -> tuple:
            values = dict(row)
            return tuple((c, placeless(older[c](values) if c in older else v)) for c, v in row if c not in skip)

        normal = sorted((as_digested(row) for row in rows), key=repr)
        out[table] = [len(normal), hashlib.sha256(repr(normal).encode()).hexdigest()]
    return out
