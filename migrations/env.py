"""Alembic environment, driven from code (omg_ledger.db.migrate) with an open connection.

Run by hand only through `omg-ledger db upgrade` / `omg-ledger db current`.
"""

from __future__ import annotations

from alembic import context

from omg_ledger.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only via omg_ledger.db
    raise SystemExit("run migrations through `omg-ledger db upgrade`")

context.configure(
    connection=connection,
    target_metadata=metadata,
    # SQLite cannot ALTER most things: batch mode copies the table, which is why every
    # constraint in schema.py is named.
    render_as_batch=True,
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
