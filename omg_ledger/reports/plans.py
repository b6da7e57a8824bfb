"""`plans`: the plan previews under <home>/plans/ — paid for, never runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import bind_list, reading

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def list_plans(engine: Engine, home_labels: tuple[str, ...] = ()) -> list[dict]:
    """Newest first. ``refused``: the planner wrote rejected.json (no graph was committed).
    Read through the DB-API, like `runs`."""
    params: dict = {}
    where = f" WHERE h.label IN {bind_list(params, 'home', home_labels)}" if home_labels else ""
    query = ("SELECT h.label, p.plan_id, p.graph_name, p.has_graph_json, p.has_rejected, p.gone "
             f"FROM plans p JOIN homes h ON h.id = p.home_id{where} ORDER BY p.plan_id DESC, h.label")
    with reading(engine) as reader:
        return [{"home": label, "plan_id": plan_id, "graph": graph, "refused": bool(rejected),
                 "has_graph_json": bool(graph_json), "gone": bool(gone)}
                for label, plan_id, graph, graph_json, rejected, gone in reader.rows(query, params)]
