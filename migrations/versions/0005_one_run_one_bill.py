"""one run, one bill: a home is its real directory; a run seen twice is billed once

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

* ``homes``: the directory's identity (machine, device, inode, resolved path) and the
  time of its last completed sync. A home is found by its identity, not its label, so
  the same directory under another label, through a symlink or after a hostname
  change is the same home. Rows written before this revision get their identity on
  their next sync.
* ``runs.stream_identity``: the run id with a hash of its stream's first line (which
  carries a nanosecond timestamp): equal identities are copies of one run.
  ``runs.billed``: the one copy of a run that counts (the one holding most of the
  stream). The notebook views show billed copies only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omg_ledger.views import VIEWS_0002, VIEWS_0005, create_statements, drop_statements

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in drop_statements(VIEWS_0002):
        op.execute(statement)
    # Plain ADD COLUMN, never a batch copy: recreating `runs` on SQLite would drop the
    # old table, and its ON DELETE CASCADE children (events, charges…) with it.
    for column in (sa.Column("machine", sa.Text(), nullable=True), sa.Column("dev", sa.BigInteger(), nullable=True),
                   sa.Column("inode", sa.BigInteger(), nullable=True), sa.Column("real_path", sa.Text(), nullable=True),
                   sa.Column("last_synced_at", sa.Text(), nullable=True)):
        op.add_column("homes", column)
    op.add_column("runs", sa.Column("stream_identity", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("billed", sa.Boolean(), nullable=False, server_default=sa.true()))
    op.create_index("ix_runs_stream_identity", "runs", ["stream_identity"], unique=False)
    for statement in create_statements(VIEWS_0005):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_statements(VIEWS_0005):
        op.execute(statement)
    # Plain DROP COLUMN (SQLite 3.35+), never a batch copy of `runs` (see upgrade).
    op.drop_index("ix_runs_stream_identity", table_name="runs")
    for table, column in (("runs", "billed"), ("runs", "stream_identity"), ("homes", "last_synced_at"),
                          ("homes", "real_path"), ("homes", "inode"), ("homes", "dev"), ("homes", "machine")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    for statement in create_statements(VIEWS_0002):
        op.execute(statement)
