"""one checkpoint table for every stream; derived rows carry their derivation version

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

* ``streams`` replaces the two checkpoint column sets (``ingest_state``'s stream
  columns and ``invocation_files``): one row per stream file, keyed by (kind, source,
  path). A run stream's source is its home (``home:<id>``); a runner stream's is the
  machine it was read on, so equal paths on two machines stay two streams.
* ``runs.derivation_version`` / ``streams.derivation_version``: the version of the
  rules that produced the derived rows. 0 (every row written before this revision)
  is older than any code, so the first sync after the upgrade re-derives everything
  from the stored facts.
* ``run_files``: the ``.out`` names of a run directory (flat and under ``failed/``),
  the last directory fact derivation needed from the home. Rows written before this
  revision are rebuilt from what the nodes recorded about their own artifacts, which
  is everything derivation reads from the listing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omg_ledger.tail import machine_source
from omg_ledger.views import VIEWS_0002, create_statements, drop_statements

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Frozen as of this revision (see 0003 for the status classes).
_SUCCESS = ("ACCEPT", "DONE", "GO", "OBSERVED", "READY", "SUCCESS")
_JUDGED = ("BLOCKED", "NEEDS_CONFIRMATION", "NEEDS_DEEP", "NO-GO")


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


V_INVOCATIONS = f"""
CREATE VIEW v_invocations AS
SELECT
    s.path AS path,
    s.source AS source,
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
JOIN streams s ON s.id = i.file_pk
"""

V_INVOCATIONS_0003 = V_INVOCATIONS.replace("    s.source AS source,\n", "").replace(
    "JOIN streams s ON s.id = i.file_pk", "JOIN invocation_files s ON s.id = i.file_pk")


def upgrade() -> None:
    bind = op.get_bind()
    # SQLite batch operations cannot copy a table a view reads from.
    op.execute("DROP VIEW IF EXISTS v_invocations")
    for statement in drop_statements(VIEWS_0002):
        op.execute(statement)

    op.create_table(
        "streams",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("run_pk", sa.Integer(), nullable=True),
        sa.Column("dev", sa.BigInteger(), nullable=True),
        sa.Column("inode", sa.BigInteger(), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("ctime_ns", sa.BigInteger(), nullable=True),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("next_line", sa.Integer(), nullable=False),
        sa.Column("head_len", sa.Integer(), nullable=False),
        sa.Column("head_sha256", sa.Text(), nullable=True),
        sa.Column("tail_len", sa.Integer(), nullable=False),
        sa.Column("tail_sha256", sa.Text(), nullable=True),
        sa.Column("scan_offset", sa.BigInteger(), nullable=True),
        sa.Column("scan_line", sa.Integer(), nullable=True),
        sa.Column("paused_schema", sa.Integer(), nullable=True),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("derivation_version", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["run_pk"], ["runs.id"], name=op.f("fk_streams_run_pk_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_streams")),
        sa.UniqueConstraint("kind", "source", "path", name=op.f("uq_streams_kind_source_path")),
        sa.UniqueConstraint("run_pk", name=op.f("uq_streams_run_pk")),
    )

    # Runner streams keep their ids (their lines and invocations point at them); run
    # streams take ids after them.
    top = bind.execute(sa.text("SELECT COALESCE(MAX(id), 0) FROM invocation_files")).scalar()
    source = machine_source()
    bind.execute(sa.text(
        "INSERT INTO streams (id, kind, source, path, run_pk, dev, inode, size, mtime_ns, ctime_ns, end_offset, "
        "next_line, head_len, head_sha256, tail_len, tail_sha256, scan_offset, scan_line, paused_schema, "
        "paused_reason, derivation_version) "
        "SELECT id, 'invocations', :source, path, NULL, dev, inode, size, mtime_ns, NULL, stream_offset, next_line, "
        "head_len, head_sha256, 0, NULL, NULL, NULL, NULL, NULL, 0 FROM invocation_files"), {"source": source})
    # A stream that was paused (newer schema) forgets its size, so the next sync looks again.
    bind.execute(sa.text(
        "INSERT INTO streams (id, kind, source, path, run_pk, dev, inode, size, mtime_ns, ctime_ns, end_offset, "
        "next_line, head_len, head_sha256, tail_len, tail_sha256, scan_offset, scan_line, paused_schema, "
        "paused_reason, derivation_version) "
        "SELECT :top + i.run_pk, 'run', 'home:' || CAST(r.home_id AS TEXT), r.dir_path || '/events.jsonl', i.run_pk, "
        "i.stream_dev, i.stream_inode, CASE WHEN i.blocked_reason IS NULL THEN i.stream_size ELSE -1 END, "
        "i.stream_mtime_ns, NULL, i.stream_offset, i.next_line, i.head_len, i.head_sha256, 0, NULL, NULL, NULL, "
        "NULL, i.blocked_reason, 0 "
        "FROM ingest_state i JOIN runs r ON r.id = i.run_pk"), {"top": top})
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text(
            "SELECT setval(pg_get_serial_sequence('streams', 'id'), (SELECT COALESCE(MAX(id), 0) + 1 FROM streams), "
            "false)"))

    for table in ("invocation_lines", "invocations"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f"fk_{table}_file_pk_invocation_files", type_="foreignkey")
            batch_op.create_foreign_key(f"fk_{table}_file_pk_streams", "streams", ["file_pk"], ["id"],
                                        ondelete="CASCADE")
    op.drop_table("invocation_files")

    with op.batch_alter_table("ingest_state", schema=None) as batch_op:
        for column in ("stream_dev", "stream_inode", "stream_size", "stream_mtime_ns", "stream_offset", "next_line",
                       "head_len", "head_sha256", "blocked_reason"):
            batch_op.drop_column(column)

    # Plain ADD COLUMN, never a batch copy: recreating `runs` on SQLite would drop the
    # old table, and its ON DELETE CASCADE children (events, charges…) with it.
    op.add_column("runs", sa.Column("derivation_version", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_runs_derivation_version", "runs", ["derivation_version"], unique=False)

    op.create_table(
        "run_files",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("place", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_pk"], ["runs.id"], name=op.f("fk_run_files_run_pk_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_pk", "place", "name", name=op.f("pk_run_files")),
    )
    bind.execute(sa.text(
        "INSERT INTO run_files (run_pk, place, name) SELECT run_pk, '', artifact_name FROM nodes WHERE has_artifact"))
    bind.execute(sa.text(
        "INSERT INTO run_files (run_pk, place, name) SELECT run_pk, 'failed', artifact_name FROM nodes "
        "WHERE has_failed_output"))

    for statement in create_statements(VIEWS_0002):
        op.execute(statement)
    op.execute(V_INVOCATIONS)


def downgrade() -> None:
    """Back to two checkpoint column sets. Derivation versions and run_files are
    dropped; a runner stream read on several machines keeps one row per path (the
    first), which is what revision 0003 could hold."""
    bind = op.get_bind()
    op.execute("DROP VIEW IF EXISTS v_invocations")
    for statement in drop_statements(VIEWS_0002):
        op.execute(statement)
    op.drop_table("run_files")
    op.drop_index("ix_runs_derivation_version", table_name="runs")
    op.execute("ALTER TABLE runs DROP COLUMN derivation_version")  # never a batch copy of runs
    with op.batch_alter_table("ingest_state", schema=None) as batch_op:
        for name in ("stream_dev", "stream_inode", "stream_size", "stream_mtime_ns"):
            batch_op.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("stream_offset", sa.BigInteger(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("next_line", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("head_len", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("head_sha256", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("blocked_reason", sa.Text(), nullable=True))
    bind.execute(sa.text(
        "UPDATE ingest_state SET (stream_dev, stream_inode, stream_size, stream_mtime_ns, stream_offset, next_line, "
        "head_len, head_sha256, blocked_reason) = (SELECT dev, inode, size, mtime_ns, end_offset, next_line, "
        "head_len, head_sha256, paused_reason FROM streams s WHERE s.run_pk = ingest_state.run_pk) "
        "WHERE EXISTS (SELECT 1 FROM streams s WHERE s.run_pk = ingest_state.run_pk)"))
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
    bind.execute(sa.text(
        "INSERT INTO invocation_files (id, path, dev, inode, size, mtime_ns, stream_offset, next_line, head_len, "
        "head_sha256) SELECT id, path, dev, inode, size, mtime_ns, end_offset, next_line, head_len, head_sha256 "
        "FROM streams WHERE kind = 'invocations' AND id IN "
        "(SELECT MIN(id) FROM streams WHERE kind = 'invocations' GROUP BY path)"))
    for table in ("invocation_lines", "invocations"):
        bind.execute(sa.text(f"DELETE FROM {table} WHERE file_pk NOT IN (SELECT id FROM invocation_files)"))
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f"fk_{table}_file_pk_streams", type_="foreignkey")
            batch_op.create_foreign_key(f"fk_{table}_file_pk_invocation_files", "invocation_files", ["file_pk"],
                                        ["id"], ondelete="CASCADE")
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text(
            "SELECT setval(pg_get_serial_sequence('invocation_files', 'id'), "
            "(SELECT COALESCE(MAX(id), 0) + 1 FROM invocation_files), false)"))
    op.drop_table("streams")
    for statement in create_statements(VIEWS_0002):
        op.execute(statement)
    op.execute(V_INVOCATIONS_0003)
