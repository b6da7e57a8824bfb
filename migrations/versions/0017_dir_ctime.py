"""ingest_state remembers the run directory's ctime (and failed/'s) beside its mtime

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

The change check listed a run directory again only when its mtime moved. `rsync -t` sets
a directory's mtime back to the source's after writing into it, so a sync that read the
directory mid-transfer remembered the same mtime the finished transfer left: a state.json
or assess.json that arrived later was never read (an assessment's charge lost for good).
The ctime moves with every change, and no user can set it: a directory is now listed
again when either differs. Existing rows have NULL, which reads as a change: the first sync
after the upgrade lists every run directory once more (its files are read again only where
their identity changed). Derived rows do not change: DERIVATION_VERSION stays.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ingest_state", sa.Column("dir_ctime_ns", sa.BigInteger(), nullable=True))
    op.add_column("ingest_state", sa.Column("failed_dir_ctime_ns", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ingest_state") as batch:
        batch.drop_column("failed_dir_ctime_ns")
        batch.drop_column("dir_ctime_ns")
