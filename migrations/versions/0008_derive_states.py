"""derive_states: where a run's derivation stopped, so an append walks only new lines

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

A cache derived from stored events (rebuild recomputes it). A ledger upgraded to this
revision has no rows: each run's next derivation walks its whole stream once and
leaves one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "derive_states",
        sa.Column("run_pk", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("derivation_version", sa.Integer(), nullable=False),
        sa.Column("line_no", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("derive_states")
