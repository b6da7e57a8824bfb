"""PostgreSQL: every text column sorts and compares in code point order (COLLATE "C")

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

A PostgreSQL database takes its default collation from the locale it was created in,
commonly en_US.UTF-8 or an ICU locale, which ignores case and punctuation at first:
there `ORDER BY label` put `alpha` before `Zed`, `a_b` before `a-b`, and `runs`,
`show`, `audit`, `problems`, `homes`, `plans` and the saved queries listed rows in
another order than SQLite (whose BINARY collation is code point order for UTF-8) over
the same facts. Every text column of the ledger's tables now collates as "C", so
ordering, comparisons and `min`/`max` over text are the same on both backends whatever
the database's locale; the views are recreated over them. SQLite: nothing to do.
Derived rows do not change: DERIVATION_VERSION stays.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omg_ledger.views import VIEWS_0006

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# Frozen here (a migration keeps its meaning): the ledger's tables at revision 0011.
# The views over them, in an order each can be created in (they are recreated from their
# definitions as the database holds them).
VIEWS = (*VIEWS_0006, "v_invocations")
# Another program's tables in the same schema are left as they are.
TABLES = ("charges", "derive_states", "events", "findings", "goal_cycles", "homes", "ingest_state",
          "invocation_lines", "invocations", "legs", "nodes", "plans", "problems", "rounds", "run_files",
          "runs", "snapshot_files", "streams")


def _text_columns(bind, collated_c: bool) -> dict[str, list[str]]:
    """{table: its text columns that collate as "C" (collated_c) or do not}."""
    rows = bind.execute(sa.text(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND data_type = 'text' "
        "ORDER BY table_name, ordinal_position")).fetchall()
    found: dict[str, list[str]] = {}
    for table, column, collation in rows:
        if table in TABLES and (collation == "C") == collated_c:
            found.setdefault(table, []).append(column)
    return found


def _alter(collation: str, columns: dict[str, list[str]]) -> None:
    for table, names in columns.items():
        changes = ", ".join(f'ALTER COLUMN "{name}" TYPE text COLLATE "{collation}"' for name in names)
        op.execute(f'ALTER TABLE "{table}" {changes}')


def _with_views_dropped(bind, change) -> None:
    """PostgreSQL refuses to change a column a view reads: drop the views, change, and
    create them again as they were."""
    definitions = dict(bind.execute(sa.text(
        "SELECT viewname, definition FROM pg_views WHERE schemaname = current_schema()")).fetchall())
    present = [name for name in VIEWS if name in definitions]
    for name in reversed(present):
        op.execute(f'DROP VIEW "{name}"')
    change()
    for name in present:
        op.execute(f'CREATE VIEW "{name}" AS {definitions[name]}')


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    _with_views_dropped(bind, lambda: _alter("C", _text_columns(bind, collated_c=False)))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    _with_views_dropped(bind, lambda: _alter("default", _text_columns(bind, collated_c=True)))
