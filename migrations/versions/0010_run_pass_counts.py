"""runs: each run's PASS nodes by provenance, so audit reads one row per run

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

``runs.passes`` (nodes whose latest verdict is PASS) and ``passes_verified``,
``passes_approved``, ``passes_self_reported``, ``passes_exit_only``, ``passes_unknown``
(provenance absent or empty). Derivation writes them with the run's other columns; this
revision fills every existing run, gone runs included, from the node rows it already
holds: the same values derivation gives, so no re-derivation is needed (the rules did
not change: DERIVATION_VERSION stays).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Frozen here (a migration keeps its meaning); equal to provenance.PASS_COUNT_COLUMNS.
_BY_PROVENANCE = (("passes_verified", "provenance = 'verified'"),
                  ("passes_approved", "provenance = 'approved'"),
                  ("passes_self_reported", "provenance = 'self-reported'"),
                  ("passes_exit_only", "provenance = 'exit-only'"),
                  ("passes_unknown", "provenance IS NULL OR provenance = ''"))
_COLUMNS = ("passes", *(name for name, _ in _BY_PROVENANCE))


def upgrade() -> None:
    # Plain ADD COLUMN, never a batch copy: recreating `runs` on SQLite would drop the
    # old table, and its ON DELETE CASCADE children (events, charges…) with it.
    for name in _COLUMNS:
        op.add_column("runs", sa.Column(name, sa.Integer(), nullable=False, server_default="0"))
    # COUNT, not SUM: 0 for a run without a PASS, and an integer on both backends.
    counts = ", ".join(f"COUNT(CASE WHEN {condition} THEN 1 END)" for _, condition in _BY_PROVENANCE)
    op.execute(f"UPDATE runs SET ({', '.join(_COLUMNS)}) = (SELECT COUNT(*), {counts} FROM nodes "
               "WHERE nodes.run_pk = runs.id AND nodes.verdict = 'PASS')")


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+), never a batch copy of `runs` (see upgrade).
    for name in reversed(_COLUMNS):
        op.execute(f"ALTER TABLE runs DROP COLUMN {name}")
