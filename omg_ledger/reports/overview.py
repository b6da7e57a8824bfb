"""What `report --html` shows, as data (htmlpage.py turns it into the page).

Every money figure comes from the same queries as ``cost`` over the same window, so the
page and ``cost --json`` agree to the nano-dollar:

* ``total``, ``runtimes`` (cost by runtime), ``nodes`` (cost by node) and ``graphs`` (the
  node rows summed per graph);
* ``days``: spend per day (cut in ``tz``) and runtime, known and, with a price book,
  estimated — the per-day sums equal ``cost --by day``;
* ``redone``: spend on work that was done again. A charge of a node is *redone* when the
  same node has a later charge in its run: ``feedback`` when that later charge is in the
  same leg (a feedback round re-ran it, or it is the declarer's non-final judgment),
  ``retry`` when it is in a later leg (``resume --retry-failed``). Plain retries inside a
  leg are not charged at all; their count is ``unrecorded_attempts``;
* ``status``: runs with an event in the window by live status; ``abandoned``, ``paused``
  and ``problems`` as ``audit`` reports them; ``limits`` when limits are set.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import and_, case, func, select, true
from sqlalchemy.engine import Engine

from .. import schema
from ..prices import PriceBook
from ..units import instant_to_us, us_to_instant
from . import estimate as est
from .audit import audit_report
from .cost import (
    BUCKET_US,
    UNDATED,
    _conditions,
    _period_key,
    cost_report,
    period_start,
    window,
    zone_named,
)
from .runs import iter_runs

TOP = 10


def _runtime_key(runtime: str | None, no_snapshot: bool) -> str:
    return runtime or ("(no snapshot)" if no_snapshot else "(unknown)")


def _day_key(at_us: int | None, zone) -> str:
    if at_us is None:
        return UNDATED
    return _period_key(period_start(us_to_instant(int(at_us) // BUCKET_US * BUCKET_US).astimezone(zone), "day"), "day")


def _days(engine: Engine, conditions: list, zone, prices: PriceBook | None) -> list[dict]:
    c, r = schema.charges.c, schema.runs.c
    bucket = (c.at_us // BUCKET_US).label("bucket")
    no_snapshot = r.snapshot_schema.is_(None)
    query = (select(bucket, r.runtime, no_snapshot.label("no_snapshot"), func.sum(c.cost_nano_usd).label("known"),
                    func.count().label("invocations"), func.sum(case((c.cost_unknown, 1), else_=0)).label("unpriced"))
             .select_from(schema.charges.join(schema.runs, r.id == c.run_pk))
             .where(and_(true(), *conditions)).group_by(bucket, r.runtime, no_snapshot))
    days: dict[str, dict[str, dict]] = {}

    def cell(day: str, runtime: str) -> dict:
        return days.setdefault(day, {}).setdefault(runtime, {"cost_nano_usd": 0, "invocations": 0,
                                                             "unknown_cost_invocations": 0,
                                                             **({"estimated_nano_usd": 0} if prices else {})})

    with engine.connect() as conn:
        for m in conn.execute(query):
            into = cell(_day_key(None if m.bucket is None else int(m.bucket) * BUCKET_US, zone),
                        _runtime_key(m.runtime, m.no_snapshot))
            into["cost_nano_usd"] += int(m.known or 0)
            into["invocations"] += int(m.invocations)
            into["unknown_cost_invocations"] += int(m.unpriced or 0)
        if prices is not None:
            for row in conn.execute(est.unpriced_charges(conditions)):
                m = row._mapping
                nanos = est.estimate(prices, m)
                if nanos is not None:
                    cell(_day_key(m["at_us"], zone), _runtime_key(m["runtime"], m["no_snapshot"]))[
                        "estimated_nano_usd"] += nanos
    return [{"day": day, "runtimes": dict(sorted(rts.items()))}
            for day, rts in sorted(days.items(), key=lambda kv: (kv[0] == UNDATED, kv[0]))]


def _redone(engine: Engine, conditions: list, since_us: int | None) -> dict:
    c = schema.charges.c
    later = schema.charges.alias("later")
    last = (select(c.run_pk, c.node_id, func.max(c.seq).label("last_seq"))
            .where(c.node_id.is_not(None)).group_by(c.run_pk, c.node_id).subquery("last"))
    query = (select(c.kind, c.leg_ordinal, later.c.leg_ordinal.label("last_leg"), c.cost_nano_usd)
             .select_from(schema.charges
                          .join(last, and_(last.c.run_pk == c.run_pk, last.c.node_id == c.node_id))
                          .join(later, and_(later.c.run_pk == c.run_pk, later.c.seq == last.c.last_seq)))
             .where(and_(c.seq < last.c.last_seq, *conditions)))
    out = {cause: {"cost_nano_usd": 0, "invocations": 0, "unknown_cost_invocations": 0}
           for cause in ("feedback", "retry")}
    r = schema.runs.c
    with engine.connect() as conn:
        for m in conn.execute(query):
            cause = "feedback" if m.kind == "feedback" or m.leg_ordinal == m.last_leg else "retry"
            out[cause]["invocations"] += 1
            if m.cost_nano_usd is None:
                out[cause]["unknown_cost_invocations"] += 1
            else:
                out[cause]["cost_nano_usd"] += int(m.cost_nano_usd)
        unrecorded = select(func.coalesce(func.sum(r.unrecorded_attempts), 0)).where(r.billed)
        if since_us is not None:
            unrecorded = unrecorded.where(r.last_event_at_us >= since_us)
        out["unrecorded_attempts"] = int(conn.execute(unrecorded).scalar() or 0)
    return out


def _graphs(node_rows: list[dict]) -> list[dict]:
    graphs: dict[str, dict] = {}
    for row in node_rows:
        name = row["graph"] if row.get("graph") is not None else "(no graph)"
        into = graphs.setdefault(name, {"key": name, "cost_nano_usd": 0, "invocations": 0,
                                        "unknown_cost_invocations": 0, "estimated_nano_usd": 0})
        for field in ("cost_nano_usd", "invocations", "unknown_cost_invocations", "estimated_nano_usd"):
            into[field] += int(row.get(field) or 0)
    return sorted(graphs.values(), key=lambda g: (-g["cost_nano_usd"], -g["unknown_cost_invocations"], g["key"]))


def overview(engine: Engine, *, since: str | None = None, until: str | None = None, tz: str | None = None,
             now: datetime | None = None, prices: PriceBook | None = None, limits: dict | None = None) -> dict:
    """Everything the HTML report shows, for [since, until) (all time without them)."""
    now = now or datetime.now(UTC)
    zone = zone_named(tz)
    win = window(since, until, zone, now)
    conditions = _conditions(win, ())
    by_runtime = cost_report(engine, since=since, until=until, by="runtime", tz=tz, now=now, prices=prices)
    by_node = cost_report(engine, since=since, until=until, by="node", tz=tz, now=now, prices=prices)
    since_us = None if win.since is None else instant_to_us(win.since)
    audit = audit_report(engine, since=None if win.since is None else win.since.isoformat(), now=now)
    status = Counter(run["status"] for run in iter_runs(engine, since_us=since_us))
    redone = _redone(engine, conditions, since_us)
    # the same count audit gives: killed calls of ABANDONED runs included (status.unrecorded_attempts)
    redone["unrecorded_attempts"] = audit["unknown_cost"]["unrecorded_attempts"]
    return {
        "generated_at": now.astimezone(zone).isoformat(),
        "tz": by_runtime["tz"],
        "since": by_runtime["since"],
        "until": by_runtime["until"],
        "total": by_runtime["total"],
        "runtimes": by_runtime["rows"],
        "graphs": _graphs(by_node["rows"])[:TOP],
        "nodes": by_node["rows"][:TOP],
        "days": _days(engine, conditions, zone, prices),
        "redone": redone,
        "status": dict(status),
        "abandoned": audit["abandoned"],
        "paused": [p for kind in ("gate", "session_limit", "other") for p in audit["paused"][kind]],
        "problems": audit["problems"],
        "orphan_warning": audit["orphan_warning"],
        "limits": limits,
        "price_book": by_runtime.get("price_book"),
    }
