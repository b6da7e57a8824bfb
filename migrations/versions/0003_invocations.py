"""runner role invocations: invocation_files, invocation_lines, invocations, v_invocations

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Frozen copy of omg_ledger.invocations.SUCCESS_STATUSES / JUDGED_STATUSES as of this
# revision (a migration must not change meaning when the code moves on). Anything else
# with an end is a failure; no end (a dangling start) is NULL.
_SUCCESS = ("ACCEPT", "DONE", "GO", "OBSERVED", "READY", "SUCCESS")
_JUDGED = ("BLOCKED", "NEEDS_CONFIRMATION", "NEEDS_DEEP", "NO-GO")


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


V_INVOCATIONS = f"""
CREATE VIEW v_invocations AS
SELECT
    f.path AS path,
    i.seq AS seq,
    i.role AS role,
    i.milestone AS milestone,
    i.outcome AS outcome,
    i.status AS status,
    CASE
        WHEN i.status IS NULL THEN NULL
        WHEN i.status IN ({_in(_SUCCESS)}) THEN 'success'
        WHEN i.status IN ({_in(_JUDGED)}) THEN 'judged'
        ELSE 'failure'
    END AS status_class,
    i.started_at AS started_at,
    i.started_at_us AS started_at_us,
    i.ended_at AS ended_at,
    i.ended_at_us AS ended_at_us,
    COALESCE(i.started_at_us, i.ended_at_us) AS at_us,
    i.duration_ms AS duration_ms,
    i.duration_source AS duration_source,
    i.start_line AS start_line,
    i.end_line AS end_line
FROM invocations i
JOIN invocation_files f ON f.id = i.file_pk
"""


def upgrade() -> None:
    op.create_table(
        "invocation_files",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("dev", sa.BigInteger(), nullable=True),
        sa.Column("inode", sa.BigInteger(), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("stream_offset", sa.BigInteger(), nullable=False),
        sa.Column("next_line", sa.Integer(), nullable=False),
        sa.Column("head_len", sa.Integer(), nullable=False),
        sa.Column("head_sha256", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invocation_files")),
        sa.UniqueConstraint("path", name=op.f("uq_invocation_files_path")),
    )
    op.create_table(
        "invocation_lines",
        sa.Column("file_pk", sa.Integer(), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("ts", sa.Text(), nullable=False),
        sa.Column("ts_us", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=True),
        sa.Column("milestone", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["file_pk"], ["invocation_files.id"],
            name=op.f("fk_invocation_lines_file_pk_invocation_files"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("file_pk", "line_no", name=op.f("pk_invocation_lines")),
    )
    op.create_table(
        "invocations",
        sa.Column("file_pk", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=True),
        sa.Column("milestone", sa.Text(), nullable=True),
        sa.Column("started_at", sa.Text(), nullable=True),
        sa.Column("started_at_us", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.Column("ended_at_us", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("duration_source", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("start_line", sa.Integer(), nullable=True),
        sa.Column("end_line", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["file_pk"], ["invocation_files.id"],
            name=op.f("fk_invocations_file_pk_invocation_files"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("file_pk", "seq", name=op.f("pk_invocations")),
    )
    with op.batch_alter_table("invocations", schema=None) as batch_op:
        batch_op.create_index("ix_invocations_started_at_us", ["started_at_us"], unique=False)
        batch_op.create_index("ix_invocations_outcome", ["outcome"], unique=False)
    op.execute(V_INVOCATIONS)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_invocations")
    with op.batch_alter_table("invocations", schema=None) as batch_op:
        batch_op.drop_index("ix_invocations_outcome")
        batch_op.drop_index("ix_invocations_started_at_us")
    op.drop_table("invocations")
    op.drop_table("invocation_lines")
    op.drop_table("invocation_files")
