"""`problems`: the bad input sync recorded, open ones by default.

A problem is open until a later sync re-reads what it is about (the file, the run
directory, the home) and does not see it again: then ``resolved_at`` is set. Seen again,
it is open again. ``audit`` counts open problems only. Each is the problem of the machine
whose sync found it (``machine``, as ``homes.machine``): in a ledger several machines
sync into, homes at the same path on two machines have problems of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import reading
from ..db import PROBLEM_MACHINES_SINCE, read_at_least

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def list_problems(engine: Engine, include_resolved: bool = False, since_text: str | None = None) -> list[dict]:
    """Problems ordered by path and offset; ``since_text``: seen at or after that UTC text."""
    conditions, params = [], {}
    if not include_resolved:
        conditions.append("p.resolved_at IS NULL")
    if since_text is not None:
        conditions.append("p.last_seen_at >= :since_text")
        params["since_text"] = since_text
    with reading(engine) as reader:
        # (Read commands never migrate: a ledger older than problems.machine is read too.)
        machine = "p.machine" if read_at_least(reader, PROBLEM_MACHINES_SINCE) else "''"
        query = ("SELECT h.label AS home, r.run_id, p.path, p.byte_offset, p.reason, p.first_seen_at, "
                 f"p.last_seen_at, p.resolved_at, {machine} AS machine FROM problems p "
                 "LEFT JOIN runs r ON r.id = p.run_pk LEFT JOIN homes h ON h.id = r.home_id"
                 + (" WHERE " + " AND ".join(conditions) if conditions else "")
                 + " ORDER BY p.path, p.byte_offset, p.reason" + (", p.machine" if machine == "p.machine" else ""))
        return [{**row, "open": row["resolved_at"] is None} for row in reader.dicts(query, params)]
