"""`problems`: the bad input sync recorded, open ones by default.

A problem is open until a later sync re-reads what it is about (the file, the run
directory, the home) and does not see it again: then ``resolved_at`` is set. Seen again,
it is open again. ``audit`` counts open problems only.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine

from .. import schema


def list_problems(engine: Engine, include_resolved: bool = False, since_text: str | None = None) -> list[dict]:
    """Problems ordered by path and offset; ``since_text``: seen at or after that UTC text."""
    p, r, h = schema.problems.c, schema.runs.c, schema.homes.c
    query = (select(h.label.label("home"), r.run_id, p.path, p.byte_offset, p.reason, p.first_seen_at,
                    p.last_seen_at, p.resolved_at)
             .select_from(schema.problems.outerjoin(schema.runs, r.id == p.run_pk)
                          .outerjoin(schema.homes, h.id == r.home_id))
             .order_by(p.path, p.byte_offset, p.reason))
    if not include_resolved:
        query = query.where(p.resolved_at.is_(None))
    if since_text is not None:
        query = query.where(p.last_seen_at >= since_text)
    with engine.connect() as conn:
        return [{**row._mapping, "open": row.resolved_at is None} for row in conn.execute(query)]
