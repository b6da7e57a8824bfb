"""problems have a lifecycle; v_runs.ledger_state follows the status rules

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

* ``problems.resolved_at``: when a later sync re-read the file (or the home, or the
  directory) and found the problem's cause gone. NULL: still open. A problem seen again
  is open again. Rows written before this revision are open until the next sync that
  re-reads their file.
* The views are recreated as ``VIEWS_0006``: ``v_runs.ledger_state`` no longer reads an
  unreadable state.json as FAIL for a run whose stream says passed, and ``v_problems``
  carries ``resolved_at``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omg_ledger.views import VIEWS_0005, VIEWS_0006, create_statements, drop_statements

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in drop_statements(VIEWS_0005):
        op.execute(statement)
    # Plain ADD COLUMN (problems has no children, but never a batch copy on SQLite).
    op.add_column("problems", sa.Column("resolved_at", sa.Text(), nullable=True))
    for statement in create_statements(VIEWS_0006):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_statements(VIEWS_0006):
        op.execute(statement)
    op.execute("ALTER TABLE problems DROP COLUMN resolved_at")
    for statement in create_statements(VIEWS_0005):
        op.execute(statement)
