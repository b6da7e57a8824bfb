"""snapshot_files.ctime_ns: a JSON file rewritten in place with its mtime restored is seen

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03

A run's state.json or assess.json rewritten in place at the same size with its mtime set
back (``cp -p`` of another version over it, a restore keeping times) kept device, inode,
size and mtime, so no sync read it again and the ledger kept the old spend. The ctime
(which no user can set back) joins the file's identity, as it is in a stream's, and the
change check's covering index. Rows of an older ledger have NULL: each such file is
read once more by the next sync (unchanged bytes re-derive nothing).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

OLD = ["run_pk", "name", "dev", "inode", "size", "mtime_ns", "sha256"]
NEW = ["run_pk", "name", "dev", "inode", "size", "mtime_ns", "ctime_ns", "sha256"]


def upgrade() -> None:
    op.add_column("snapshot_files", sa.Column("ctime_ns", sa.BigInteger(), nullable=True))
    op.drop_index("ix_snapshot_files_identity", table_name="snapshot_files")
    op.create_index("ix_snapshot_files_identity", "snapshot_files", NEW)


def downgrade() -> None:
    op.drop_index("ix_snapshot_files_identity", table_name="snapshot_files")
    with op.batch_alter_table("snapshot_files") as batch:
        batch.drop_column("ctime_ns")
    op.create_index("ix_snapshot_files_identity", "snapshot_files", OLD)
