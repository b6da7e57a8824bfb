"""`plans`: the plan previews under <home>/plans/ — paid for, never runs."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine

from .. import schema


def list_plans(engine: Engine, home_labels: tuple[str, ...] = ()) -> list[dict]:
    """Newest first. ``refused``: the planner wrote rejected.json (no graph was committed)."""
    plans, homes = schema.plans, schema.homes
    query = (select(homes.c.label, plans.c.plan_id, plans.c.graph_name, plans.c.has_graph_json,
                    plans.c.has_rejected, plans.c.gone)
             .select_from(plans.join(homes, homes.c.id == plans.c.home_id))
             .order_by(plans.c.plan_id.desc(), homes.c.label))
    if home_labels:
        query = query.where(homes.c.label.in_(home_labels))
    with engine.connect() as conn:
        return [{"home": r.label, "plan_id": r.plan_id, "graph": r.graph_name, "refused": bool(r.has_rejected),
                 "has_graph_json": bool(r.has_graph_json), "gone": bool(r.gone)} for r in conn.execute(query)]
