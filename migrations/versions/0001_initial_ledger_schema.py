"""initial ledger schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "homes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_homes")),
        sa.UniqueConstraint("label", name=op.f("uq_homes_label")),
    )
    op.create_table(
        "plans",
        sa.Column("home_id", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.Text(), nullable=False),
        sa.Column("has_graph_json", sa.Boolean(), nullable=False),
        sa.Column("has_rejected", sa.Boolean(), nullable=False),
        sa.Column("graph_name", sa.Text(), nullable=True),
        sa.Column("gone", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["home_id"], ["homes.id"], name=op.f("fk_plans_home_id_homes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("home_id", "plan_id", name=op.f("pk_plans")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("home_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("dir_path", sa.Text(), nullable=False),
        sa.Column("gone", sa.Boolean(), nullable=False),
        sa.Column("has_events", sa.Boolean(), nullable=False),
        sa.Column("has_state", sa.Boolean(), nullable=False),
        sa.Column("has_graph_json", sa.Boolean(), nullable=False),
        sa.Column("has_rejected", sa.Boolean(), nullable=False),
        sa.Column("has_assess", sa.Boolean(), nullable=False),
        sa.Column("has_lock", sa.Boolean(), nullable=False),
        sa.Column("snapshot_schema", sa.Integer(), nullable=True),
        sa.Column("runtime", sa.Text(), nullable=True),
        sa.Column("graph_name", sa.Text(), nullable=True),
        sa.Column("graph_version", sa.Text(), nullable=True),
        sa.Column("node_count", sa.Integer(), nullable=True),
        sa.Column("graph_source_path", sa.Text(), nullable=True),
        sa.Column("graph_sha256", sa.Text(), nullable=True),
        sa.Column("inputs_json", sa.Text(), nullable=True),
        sa.Column("continue_on_fail", sa.Boolean(), nullable=True),
        sa.Column("goal_text", sa.Text(), nullable=True),
        sa.Column("goal_cycle", sa.Integer(), nullable=True),
        sa.Column("goal_max_cycles", sa.Integer(), nullable=True),
        sa.Column("goal_first_run_id", sa.Text(), nullable=True),
        sa.Column("build_evidence_answer", sa.Text(), nullable=True),
        sa.Column("build_evidence_declared_by", sa.Text(), nullable=True),
        sa.Column("build_evidence_signals_json", sa.Text(), nullable=True),
        sa.Column("gate_paused_at", sa.Text(), nullable=True),
        sa.Column("gate_decisions_json", sa.Text(), nullable=True),
        sa.Column("planning_cost_nano_usd", sa.BigInteger(), nullable=True),
        sa.Column("planning_cost_unknown", sa.Boolean(), nullable=True),
        sa.Column("snapshot_cost_nano_usd", sa.BigInteger(), nullable=True),
        sa.Column("snapshot_cost_unknown", sa.Boolean(), nullable=True),
        sa.Column("nodes_passed", sa.Integer(), nullable=True),
        sa.Column("all_nodes_passed", sa.Boolean(), nullable=True),
        sa.Column("event_count", sa.Integer(), nullable=False),
        sa.Column("first_event_at", sa.Text(), nullable=True),
        sa.Column("first_event_at_us", sa.BigInteger(), nullable=True),
        sa.Column("last_event_at", sa.Text(), nullable=True),
        sa.Column("last_event_at_us", sa.BigInteger(), nullable=True),
        sa.Column("leg_count", sa.Integer(), nullable=False),
        sa.Column("any_leg", sa.Boolean(), nullable=False),
        sa.Column("last_leg_open", sa.Boolean(), nullable=False),
        sa.Column("last_leg_phase", sa.Text(), nullable=True),
        sa.Column("last_outcome", sa.Text(), nullable=True),
        sa.Column("last_detail", sa.Text(), nullable=True),
        sa.Column("stream_paused", sa.Boolean(), nullable=False),
        sa.Column("cost_nano_usd", sa.BigInteger(), nullable=False),
        sa.Column("invocations", sa.Integer(), nullable=False),
        sa.Column("unknown_cost_invocations", sa.Integer(), nullable=False),
        sa.Column("unrecorded_attempts", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("reasoning_output_tokens", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["home_id"], ["homes.id"], name=op.f("fk_runs_home_id_homes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("home_id", "run_id", name=op.f("uq_runs_home_id_run_id")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_first_event_at_us", ["first_event_at_us"], unique=False)
        batch_op.create_index("ix_runs_last_leg_open", ["last_leg_open"], unique=False)

    op.create_table(
        "charges",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("leg_ordinal", sa.Integer(), nullable=True),
        sa.Column("leg_kind", sa.Text(), nullable=True),
        sa.Column("node_id", sa.Text(), nullable=True),
        sa.Column("round", sa.Integer(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("at", sa.Text(), nullable=True),
        sa.Column("at_us", sa.BigInteger(), nullable=True),
        sa.Column("cost_nano_usd", sa.BigInteger(), nullable=True),
        sa.Column("cost_unknown", sa.Boolean(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("reasoning_output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("source_file", sa.Text(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=True),
        sa.Column("source_line", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_charges_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "seq", name=op.f("pk_charges")),
    )
    with op.batch_alter_table("charges", schema=None) as batch_op:
        batch_op.create_index("ix_charges_at_us", ["at_us"], unique=False)

    op.create_table(
        "events",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("schema", sa.Integer(), nullable=True),
        sa.Column("ts", sa.Text(), nullable=True),
        sa.Column("event", sa.Text(), nullable=True),
        sa.Column("node_id", sa.Text(), nullable=True),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_events_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "line_no", name=op.f("pk_events")),
    )
    op.create_table(
        "findings",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=True),
        sa.Column("leg_ordinal", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_findings_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "seq", name=op.f("pk_findings")),
    )
    op.create_table(
        "goal_cycles",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("first_run_id", sa.Text(), nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=True),
        sa.Column("max_cycles", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("assessed", sa.Boolean(), nullable=False),
        sa.Column("goal_met", sa.Boolean(), nullable=True),
        sa.Column("remaining", sa.Text(), nullable=True),
        sa.Column("evidence", sa.Text(), nullable=True),
        sa.Column("assess_cost_nano_usd", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_goal_cycles_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", name=op.f("pk_goal_cycles")),
    )
    with op.batch_alter_table("goal_cycles", schema=None) as batch_op:
        batch_op.create_index("ix_goal_cycles_first_run_id", ["first_run_id"], unique=False)

    op.create_table(
        "ingest_state",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("dir_mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("failed_dir_mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("stream_dev", sa.BigInteger(), nullable=True),
        sa.Column("stream_inode", sa.BigInteger(), nullable=True),
        sa.Column("stream_size", sa.BigInteger(), nullable=True),
        sa.Column("stream_mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("stream_offset", sa.BigInteger(), nullable=False),
        sa.Column("next_line", sa.Integer(), nullable=False),
        sa.Column("head_len", sa.Integer(), nullable=False),
        sa.Column("head_sha256", sa.Text(), nullable=True),
        sa.Column("blocked_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_ingest_state_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", name=op.f("pk_ingest_state")),
    )
    op.create_table(
        "legs",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("started_at", sa.Text(), nullable=True),
        sa.Column("started_at_us", sa.BigInteger(), nullable=True),
        sa.Column("finished_at", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("is_open", sa.Boolean(), nullable=False),
        sa.Column("closed_by", sa.Text(), nullable=True),
        sa.Column("session_limited", sa.Boolean(), nullable=False),
        sa.Column("start_line", sa.Integer(), nullable=True),
        sa.Column("end_line", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_legs_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "ordinal", name=op.f("pk_legs")),
    )
    op.create_table(
        "nodes",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("node_type", sa.Text(), nullable=True),
        sa.Column("in_graph", sa.Boolean(), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=True),
        sa.Column("verdict_source", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=True),
        sa.Column("round", sa.Integer(), nullable=True),
        sa.Column("provenance", sa.Text(), nullable=True),
        sa.Column("judged", sa.Boolean(), nullable=True),
        sa.Column("budget_nano_usd", sa.BigInteger(), nullable=True),
        sa.Column("duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("session_id", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("artifact_name", sa.Text(), nullable=False),
        sa.Column("artifact_path", sa.Text(), nullable=True),
        sa.Column("has_artifact", sa.Boolean(), nullable=False),
        sa.Column("has_failed_output", sa.Boolean(), nullable=False),
        sa.Column("budget_overrun", sa.Boolean(), nullable=False),
        sa.Column("last_leg", sa.Integer(), nullable=True),
        sa.Column("cost_nano_usd", sa.BigInteger(), nullable=False),
        sa.Column("invocations", sa.Integer(), nullable=False),
        sa.Column("unknown_cost_invocations", sa.Integer(), nullable=False),
        sa.Column("unrecorded_attempts", sa.Integer(), nullable=False),
        sa.Column("snapshot_verdict", sa.Text(), nullable=True),
        sa.Column("snapshot_round", sa.Integer(), nullable=True),
        sa.Column("snapshot_cost_nano_usd", sa.BigInteger(), nullable=True),
        sa.Column("snapshot_cost_unknown", sa.Boolean(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_nodes_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "node_id", name=op.f("pk_nodes")),
    )
    op.create_table(
        "problems",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_pk", sa.Integer(), nullable=True),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("first_seen_at", sa.Text(), nullable=False),
        sa.Column("last_seen_at", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_problems_run_pk_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_problems")),
        sa.UniqueConstraint(
            "path", "byte_offset", "reason", name=op.f("uq_problems_path_byte_offset_reason")
        ),
    )
    op.create_table(
        "rounds",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("leg_ordinal", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Text(), nullable=True),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=True),
        sa.Column("provenance", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("cost_nano_usd", sa.BigInteger(), nullable=True),
        sa.Column("cost_unknown", sa.Boolean(), nullable=False),
        sa.Column("start_line", sa.Integer(), nullable=True),
        sa.Column("end_line", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_rounds_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "leg_ordinal", "node_id", "seq", name=op.f("pk_rounds")),
    )
    op.create_table(
        "snapshot_files",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("dev", sa.BigInteger(), nullable=True),
        sa.Column("inode", sa.BigInteger(), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("sha256", sa.Text(), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.id"], name=op.f("fk_snapshot_files_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "name", name=op.f("pk_snapshot_files")),
    )


def downgrade() -> None:
    op.drop_table("snapshot_files")
    op.drop_table("rounds")
    op.drop_table("problems")
    op.drop_table("nodes")
    op.drop_table("legs")
    op.drop_table("ingest_state")
    with op.batch_alter_table("goal_cycles", schema=None) as batch_op:
        batch_op.drop_index("ix_goal_cycles_first_run_id")

    op.drop_table("goal_cycles")
    op.drop_table("findings")
    op.drop_table("events")
    with op.batch_alter_table("charges", schema=None) as batch_op:
        batch_op.drop_index("ix_charges_at_us")

    op.drop_table("charges")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_last_leg_open")
        batch_op.drop_index("ix_runs_first_event_at_us")

    op.drop_table("runs")
    op.drop_table("plans")
    op.drop_table("homes")
