"""events: a NUL in node_id or ts stored as U+FFFD, as in derived text

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

A stream line may spell a NUL (the JSON escape \\u0000) in its node_id, or in a ts that
still parses. Events rows now hold it as U+FFFD, as derived text always did: PostgreSQL
cannot store a NUL in text, and on SQLite events.node_id then equals nodes.node_id. A
SQLite ledger written before may hold such rows: this revision rewrites them. A
PostgreSQL ledger cannot hold one (the sync that met it failed), so there it does
nothing. Derived rows do not change (derivation reads an event from its raw line, which
keeps the escape as written; terminal lookups filter on the column and then keep the
lines whose raw names the exact node): DERIVATION_VERSION stays.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    # SQLite's replace() takes char(0) for an empty pattern and changes nothing, so the
    # few rows are found by instr() (which does find a NUL), in one pass over the
    # table, and rewritten here.
    rows = bind.execute(sa.text(
        "SELECT run_pk, line_no, node_id, ts FROM events "
        "WHERE instr(node_id, char(0)) > 0 OR instr(ts, char(0)) > 0")).fetchall()
    for run_pk, line_no, node_id, ts in rows:
        bind.execute(sa.text("UPDATE events SET node_id = :node_id, ts = :ts WHERE run_pk = :run_pk "
                             "AND line_no = :line_no"),
                     {"node_id": _no_nul(node_id), "ts": _no_nul(ts), "run_pk": run_pk, "line_no": line_no})


# Frozen here (a migration keeps its meaning); equal to store._no_nul.
def _no_nul(value: str | None) -> str | None:
    return value.replace("\x00", "\ufffd") if value is not None else None


def downgrade() -> None:
    # Nothing to undo: 0010's code reads events from raw, which kept the escape, and
    # stores a NUL as U+FFFD in every other text column.
    pass
