"""problems.machine: each machine's sync keeps its own problems

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

In a ledger shared by several machines, two machines' homes may have the same path (the
same user's default home on two hosts). A problem was keyed by its path alone, so one
machine's sync resolved the other's open problems under that path (its own copy read
clean), and took over its row when it saw the same problem. Each problem now names the
machine whose sync found it (as ``homes.machine``), and is unique per machine.

Existing rows are given the machine of their run's home; else of the runner stream at
their path, when one machine read a stream there; else of the homes holding their path,
when those are all on one machine; else the only machine the ledger has homes or runner
streams on. A row none of these tells keeps '' (a ledger of several machines, a problem
of no run on a path under none of its homes, or a runner stream's path two machines
read): the next sync to read that path again, on any machine, resolves it and records it
anew if it is still there. ``v_problems`` carries the column. Derived rows do not change:
DERIVATION_VERSION stays.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omg_ledger.views import VIEWS_0015, VIEWS_0016, create_statements, drop_statements

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

OLD_KEY = ("path", "byte_offset", "reason")
NEW_KEY = ("machine", "path", "byte_offset", "reason")

# The machine of each existing problem, by the first of these that tells it.
FILL = """
UPDATE problems SET machine = COALESCE(
  (SELECT h.machine FROM runs r JOIN homes h ON h.id = r.home_id WHERE r.id = problems.run_pk),
  (SELECT MIN(s.source) FROM streams s WHERE s.kind = 'invocations' AND s.path = problems.path
   HAVING COUNT(DISTINCT s.source) = 1),
  (SELECT MIN(h.machine) FROM homes h
   WHERE problems.path = h.path OR substr(problems.path, 1, length(h.path) + 1) = h.path || '/'
   HAVING COUNT(DISTINCT h.machine) = 1),
  (SELECT MIN(machine) FROM (SELECT machine FROM homes UNION ALL
                            SELECT source FROM streams WHERE kind = 'invocations') AS known
   HAVING COUNT(DISTINCT machine) = 1),
  '')
"""


def _text(bind) -> sa.types.TypeEngine:
    # Every text column of a PostgreSQL ledger sorts in code point order (revision 0012).
    return sa.Text(collation="C") if bind.dialect.name == "postgresql" else sa.Text()


def upgrade() -> None:
    bind = op.get_bind()
    for statement in drop_statements(VIEWS_0015):
        op.execute(statement)
    op.add_column("problems", sa.Column("machine", _text(bind), nullable=False, server_default=""))
    op.execute(FILL)
    # (SQLite cannot drop a table's constraint: the table, which nothing references, is
    # copied into its new shape.)
    with op.batch_alter_table("problems") as batch:
        batch.drop_constraint("uq_problems_path_byte_offset_reason", type_="unique")
        batch.create_unique_constraint("uq_problems_machine_path_byte_offset_reason", list(NEW_KEY))
    for statement in create_statements(VIEWS_0016):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_statements(VIEWS_0016):
        op.execute(statement)
    # One row per path, offset and reason again: another machine's twin is dropped.
    op.execute("DELETE FROM problems WHERE id NOT IN (SELECT MIN(id) FROM problems GROUP BY path, byte_offset, reason)")
    with op.batch_alter_table("problems") as batch:
        batch.drop_constraint("uq_problems_machine_path_byte_offset_reason", type_="unique")
        batch.create_unique_constraint("uq_problems_path_byte_offset_reason", list(OLD_KEY))
        batch.drop_column("machine")
    for statement in create_statements(VIEWS_0015):
        op.execute(statement)
