"""an index for audit's scans of nodes by verdict

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

* ``ix_nodes_verdict`` on ``nodes (verdict, run_pk, provenance)``: audit's PASS
  provenance counts become an index-only range scan and its FAIL rows a lookup (10,000
  runs, 152,000 nodes: ~0.2 s to ~0.05 s). Reads of a 0006 ledger work without it
  (reads never migrate); the next sync adds it.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain CREATE INDEX (never a batch copy of a table with children on SQLite).
    op.create_index("ix_nodes_verdict", "nodes", ["verdict", "run_pk", "provenance"])


def downgrade() -> None:
    op.drop_index("ix_nodes_verdict", table_name="nodes")
