"""v_runs.ledger_state is NOT-KNOWN-YET for a run whose stream waits at a newer schema

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

Reading a stream stops before a line of an event schema newer than this omg-ledger reads
(``runs.stream_paused``). The lines before it said the last leg was open, and beside a
free lock that read ABANDONED, though the lines past it may have ended the leg: the
status is now NOT-KNOWN-YET until an omg-ledger that reads them syncs (status.derive).
The views are recreated as ``VIEWS_0015`` so ``ledger_state`` says the same. Derived rows
do not change: DERIVATION_VERSION stays.
"""

from __future__ import annotations

from alembic import op

from omg_ledger.views import VIEWS_0006, VIEWS_0015, create_statements, drop_statements

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in drop_statements(VIEWS_0006):
        op.execute(statement)
    for statement in create_statements(VIEWS_0015):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_statements(VIEWS_0015):
        op.execute(statement)
    for statement in create_statements(VIEWS_0006):
        op.execute(statement)
