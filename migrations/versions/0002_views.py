"""notebook views: v_charges, v_runs, v_node_rounds, v_nodes, v_problems, v_findings

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

The view SQL lives in omg_ledger/views.py as VIEWS_0002 (documented there, one
docstring per view); it is versioned by name so this migration keeps its meaning when
a later migration replaces the views.
"""

from __future__ import annotations

from alembic import op

from omg_ledger.views import VIEWS_0002, create_statements, drop_statements

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in create_statements(VIEWS_0002):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_statements(VIEWS_0002):
        op.execute(statement)
