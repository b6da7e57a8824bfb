"""Spend so far in the current period of each limit, and which limits are exceeded.

Spend is what ``cost`` reports for the period holding *now* (``[start, end)`` cut in
``tz``), filtered to the limit's scope: known spend always; with a price book also the
estimate for unpriced work. A limit is exceeded when known spend is above it, or, with
``--estimate``, when known spend plus the estimate is. Spend equal to the limit is not
over it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from ..errors import BadArgument
from ..limits import Limit, node_parts, quote_graph
from ..prices import PriceBook
from ..render import limit_places
from ..units import format_usd
from .cost import cost_report, current_period, zone_named

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

_GROUPING = {None: None, "graph": "graph", "node": "node", "runtime": "runtime"}


def _in_scope(report: dict, counts: Callable[[dict], bool] | None) -> dict:
    fields = ("cost_nano_usd", "unknown_cost_invocations", "estimated_nano_usd", "estimated_invocations",
              "unestimated_invocations")
    rows = [report["total"]] if counts is None else [r for r in report["rows"] if counts(r)]
    return {f: sum(int(r.get(f) or 0) for r in rows) for f in fields}


def _counted(limit: Limit, ever: list[dict]) -> Callable[[dict], bool] | None:
    """Which rows of `cost --by <scope>` are the limit's (None: the total). ``ever``: that
    report's rows over all time, where a node limit's GRAPH/NODE is looked up."""
    if limit.scope is None:
        return None
    if limit.scope != "node":  # the row keyed by its name ("(no graph)" included)
        return lambda row: row["key"] == limit.name
    parts = node_parts(limit.name)
    if parts is not None:
        graph, node = parts
        return lambda row: row["graph"] == graph and row["key"] == f"{graph}/{node}"
    # Graph "a/b" node "c" and graph "a" node "b/c" are both keyed "a/b/c": such a key
    # names no one node, and summing both would charge the limit with another's spend.
    named = {(row["graph"], row["node_id"], row["key"]) for row in ever if row["key"] == limit.name}
    if len(named) > 1:
        nodes = sorted(named, key=lambda n: (n[0] is not None, n[0] or "", n[2]))
        shown = ", ".join(f"graph {g!r} node {k[len(g) + 1:]!r}" if g is not None else f"{k!r} of runs with no graph"
                          for g, _, k in nodes)
        quoted = " or ".join(f"node:{quote_graph(g)}/{k[len(g) + 1:]}" for g, _, k in nodes if g is not None)
        raise BadArgument(f"limit {limit.label}: {limit.name} names {len(named)} nodes ({shown}): quote the graph "
                          f"to say which, {quoted}")
    return lambda row: (row["graph"], row["node_id"], row["key"]) in named


def _breach_line(item: dict) -> str:
    places = limit_places(item)
    spent = format_usd(item["spent_nano_usd"], places)
    of = format_usd(item["limit_nano_usd"], places)
    period = f"{item['period']} from {item['period_start'][:10]} in {item['tz']}"
    if item["exceeded"]:
        text = f"LIMIT EXCEEDED: {item['limit']}: {spent} known spend of {of} ({period})"
    else:
        text = (f"LIMIT EXCEEDED: {item['limit']}: {spent} known + ~{format_usd(item['estimated_nano_usd'], places)} "
                f"estimated of {of} ({period})")
    if item["unpriced_invocations"]:
        text += f"; {item['unpriced_invocations']} unpriced invocation(s) not in the known spend"
    return text


def check_limits(engine: Engine, limits: list[Limit], *, tz: str | None = None, now: datetime | None = None,
                 prices: PriceBook | None = None, home_labels: tuple[str, ...] = ()) -> dict:
    """Each limit with its spend so far; `breaches` holds one line per exceeded limit."""
    now = now or datetime.now(UTC)
    zone = zone_named(tz)
    reports: dict[tuple, dict] = {}
    ever: dict[str, list[dict]] = {}  # scope -> the rows of `cost --by <scope>` over all time
    items = []
    for limit in limits:
        if limit.scope is not None and limit.scope not in ever:
            ever[limit.scope] = cost_report(engine, by=_GROUPING[limit.scope], tz=tz, now=now)["rows"]
        counts = _counted(limit, ever.get(limit.scope, []))
        start, end = current_period(now, limit.period, zone)
        grouping = _GROUPING[limit.scope]
        # Periods of different lengths can start together (the 1st's day and month): the
        # end belongs to the key.
        cache_key = (start, end, grouping)
        if cache_key not in reports:
            reports[cache_key] = cost_report(engine, since=start.isoformat(), until=end.isoformat(), by=grouping,
                                             tz=tz, home_labels=home_labels, now=now, prices=prices)
        spend = _in_scope(reports[cache_key], counts)
        item = {
            "limit": limit.label, "scope": limit.scope or "all", "name": limit.name, "period": limit.period,
            "tz": reports[cache_key]["tz"], "period_start": start.isoformat(), "period_end": end.isoformat(),
            "limit_nano_usd": limit.amount_nano_usd, "limit_usd": round(limit.amount_nano_usd / 1e9, 9),
            "spent_nano_usd": spend["cost_nano_usd"], "spent_usd": round(spend["cost_nano_usd"] / 1e9, 9),
            "unpriced_invocations": spend["unknown_cost_invocations"],
            "exceeded": spend["cost_nano_usd"] > limit.amount_nano_usd,
        }
        if prices is not None:
            with_estimate = spend["cost_nano_usd"] + spend["estimated_nano_usd"]
            item.update({
                "estimated_nano_usd": spend["estimated_nano_usd"],
                "estimated_usd": round(spend["estimated_nano_usd"] / 1e9, 9),
                "estimated_invocations": spend["estimated_invocations"],
                "unestimated_invocations": spend["unestimated_invocations"],
                "exceeded_with_estimate": with_estimate > limit.amount_nano_usd,
            })
        item["breach"] = item["exceeded"] or bool(item.get("exceeded_with_estimate"))
        # A name nothing in the ledger was ever charged to (a typo in a cron job's limits)
        # reads $0 and never trips: said, not left to look like an answer.
        item["names_nothing_charged"] = counts is not None and not any(counts(row) for row in ever[limit.scope])
        items.append(item)
    # Spend with no time is in no period, so no limit counts it: said, never left out
    # unsaid (every period's report holds the same all-time figure).
    undated = next(iter(reports.values()))["undated_outside_window"] if reports else None
    out = {
        "at": now.astimezone(zone).isoformat(),
        "tz": zone.key if isinstance(zone, ZoneInfo) and zone.key else str(zone),
        "estimate": prices is not None,
        "limits": items,
        "breaches": [_breach_line(item) for item in items if item["breach"]],
        "undated_outside_periods": undated,
    }
    out["exceeded"] = bool(out["breaches"])
    if prices is not None:
        out["price_book"] = prices.describe()
    return out
