"""a covering index of snapshot_files' identities, for the change check

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

``ix_snapshot_files_identity`` on ``snapshot_files (run_pk, name, dev, inode, size,
mtime_ns, sha256)``: the change check of every sync (the cron no-op included) reads each
file's identity, and without it SQLite read the table's rows, which are mostly the
files' content: ~120 MB of pages at 10,000 runs for ~0.6 MB of identities. Reads of
an older ledger work without it.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_snapshot_files_identity", "snapshot_files",
                    ["run_pk", "name", "dev", "inode", "size", "mtime_ns", "sha256"])


def downgrade() -> None:
    op.drop_index("ix_snapshot_files_identity", table_name="snapshot_files")
