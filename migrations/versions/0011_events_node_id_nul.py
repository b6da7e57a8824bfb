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

# Frozen here (a migration keeps its meaning); equal to store._event_tuple's replacement.
_COLUMNS = ("node_id", "ts")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    # SQLite's replace() takes char(0) for an empty pattern and changes nothing, so the
    # few rows are found by instr() (which does find a NUL) and rewritten here.
    for column in _COLUMNS:
        rows = bind.execute(sa.text(
            f"SELECT run_pk, line_no, {column} FROM events WHERE instr({column}, char(0)) > 0")).fetchall()
        for run_pk, line_no, value in rows:
            bind.execute(sa.text(f"UPDATE events SET {column} = :value WHERE run_pk = :run_pk AND line_no = :line_no"),
                         {"value": value.replace("\x00", "\ufffd"), "run_pk": run_pk, "line_no": line_no})


def downgrade() -> None:
    # Nothing to undo: 0010's code reads events from raw, which kept the escape, and
    # stores a NUL as U+FFFD in every other text column.
    pass
