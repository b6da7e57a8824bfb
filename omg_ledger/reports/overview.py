"""What `report --html` shows, as data (htmlpage.py turns it into the page).

Every money figure comes from the same queries as ``cost`` over the same window, so the
page and ``cost --json`` agree to the nano-dollar:

* ``total``, ``runtimes`` (cost by runtime), ``nodes`` (cost by node) and ``graphs`` (the
  node rows summed per graph);
* ``undated_outside_window``: the spend with no time a window leaves out, as ``cost`` says it;
* ``days``: spend per day (cut in ``tz``) and runtime, known and, with a price book,
  estimated — the per-day sums equal ``cost --by day``;
* ``redone``: spend on work that was done again. A charge of a node is *redone* when the
  same node has a later charge in its run: ``feedback`` when that later charge is in the
  same leg (a feedback round re-ran it, or it is the declarer's non-final judgment),
  ``retry`` when it is in a later leg (``resume --retry-failed``). Plain retries inside a
  leg are not charged at all; their count is ``unrecorded_attempts`` (of the runs ``status``
  counts, the killed calls of the ABANDONED ones included);
* ``status``: runs with an event in the window (the last at or after ``since``, the first
  before ``until``) by live status; ``abandoned``, ``paused``
  and ``problems`` as ``audit`` reports them; ``limits`` when limits are set.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..backend import bind_list, reading
from ..prices import PriceBook
from ..units import instant_to_us, us_to_instant
from .audit import audit_report
from .cost import (
    BUCKET_US,
    UNDATED,
    _conditions,
    _conditions_sql,
    _period_key,
    cost_report,
    exact_sum,
    joined_sum,
    period_start,
    straddling_buckets,
    window,
    zone_named,
)
from .runs import iter_runs

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

TOP = 10


def _runtime_key(runtime: str | None, no_snapshot: bool) -> str:
    return runtime or ("(no snapshot)" if no_snapshot else "(unknown)")


def _day_key(at_us: int | None, zone) -> str:
    if at_us is None:
        return UNDATED
    return _period_key(period_start(us_to_instant(int(at_us)).astimezone(zone), "day"), "day")


# Per 15-minute bucket, runtime and whether the run had a snapshot: the buckets are cut
# into days in the report's zone (the same buckets as `cost --by day`); a bucket that
# straddles two days is summed again per charge time ({slot} c.at_us).
_DAYS_SQL = ("SELECT {slot} AS slot, r.runtime AS runtime, (r.snapshot_schema IS NULL) AS no_snapshot, "
             f"{exact_sum('c.cost_nano_usd', 'known')}, COUNT(*) AS invocations, "
             "SUM(CASE WHEN c.cost_unknown THEN 1 ELSE 0 END) AS unpriced "
             "FROM charges c JOIN runs r ON r.id = c.run_pk WHERE {where} "
             "GROUP BY {slot}, r.runtime, (r.snapshot_schema IS NULL)")


def _days(engine, win, zone, prices: PriceBook | None) -> list[dict]:
    days: dict[str, dict[str, dict]] = {}

    def cell(day: str, runtime: str) -> dict:
        return days.setdefault(day, {}).setdefault(runtime, {"cost_nano_usd": 0, "invocations": 0,
                                                             "unknown_cost_invocations": 0,
                                                             **({"estimated_nano_usd": 0} if prices else {})})

    params: dict = {}
    sql = _DAYS_SQL.format(slot=f"c.at_us / {BUCKET_US}", where=_conditions_sql(win, (), params))
    with reading(engine) as reader:
        rows = [(None if bucket is None else int(bucket) * BUCKET_US, *rest)
                for bucket, *rest in reader.rows(sql, params)]
        straddling = straddling_buckets({None if at is None else at // BUCKET_US for at, *_ in rows}, "day", zone)
        if straddling:
            params = {}
            where = (f"{_conditions_sql(win, (), params)} "
                     f"AND c.at_us / {BUCKET_US} IN {bind_list(params, 'bucket', straddling)}")
            redone = {b * BUCKET_US for b in straddling}
            rows = [row for row in rows if row[0] not in redone] + list(
                reader.rows(_DAYS_SQL.format(slot="c.at_us", where=where), params))
        for at_us, runtime, no_snapshot, known_hi, known_lo, known_odd, invocations, unpriced in rows:
            into = cell(_day_key(at_us, zone), _runtime_key(runtime, no_snapshot))
            into["cost_nano_usd"] += joined_sum(known_hi, known_lo, known_odd)
            into["invocations"] += int(invocations)
            into["unknown_cost_invocations"] += int(unpriced or 0)
    if prices is not None:
        from . import estimate as est  # (SQLAlchemy: only a report with a price book needs it)

        with engine.connect() as conn:
            for row in conn.execute(est.unpriced_charges(_conditions(win, ()))):
                m = row._mapping
                nanos = est.estimate(prices, m)
                if nanos is not None:
                    cell(_day_key(m["at_us"], zone), _runtime_key(m["runtime"], m["no_snapshot"]))[
                        "estimated_nano_usd"] += nanos
    return [{"day": day, "runtimes": dict(sorted(rts.items()))}
            for day, rts in sorted(days.items(), key=lambda kv: (kv[0] == UNDATED, kv[0]))]


# A charge of a node is redone when the node has a later charge in its run: "feedback"
# when that last charge is in the same leg (or the charge is a feedback round's),
# "retry" when it is in a later leg. Each charge is compared with its node's last one
# (a window over the node's charges, not a self-join), and the sums are made in SQL.
_REDONE_SQL = (
    "SELECT CASE WHEN c.kind = 'feedback' OR c.leg_ordinal = c.last_leg "
    "OR (c.leg_ordinal IS NULL AND c.last_leg IS NULL) THEN 'feedback' ELSE 'retry' END AS cause, "
    "COUNT(*) AS invocations, SUM(CASE WHEN c.cost_nano_usd IS NULL THEN 1 ELSE 0 END) AS unpriced, "
    f"{exact_sum('c.cost_nano_usd', 'known')} "
    "FROM (SELECT run_pk, seq, kind, leg_ordinal, cost_nano_usd, at_us, MAX(seq) OVER node AS last_seq, "
    "FIRST_VALUE(leg_ordinal) OVER (node ORDER BY seq DESC) AS last_leg "
    "FROM charges WHERE node_id IS NOT NULL WINDOW node AS (PARTITION BY run_pk, node_id)) c "
    "WHERE c.seq < c.last_seq AND {where} GROUP BY 1")


def _redone(engine, win) -> dict:
    out = {cause: {"cost_nano_usd": 0, "invocations": 0, "unknown_cost_invocations": 0}
           for cause in ("feedback", "retry")}
    params: dict = {}
    with reading(engine) as reader:
        for cause, invocations, unpriced, known_hi, known_lo, known_odd in reader.rows(_REDONE_SQL.format(
                where=_conditions_sql(win, (), params)), params):
            out[cause] = {"cost_nano_usd": joined_sum(known_hi, known_lo, known_odd), "invocations": int(invocations),
                          "unknown_cost_invocations": int(unpriced or 0)}
    return out


def _synced(engine, zone) -> dict:
    """How fresh the page's figures are: the oldest and newest last completed sync of the
    ledger's homes (as stored, and shown in ``zone`` like every other time of the page),
    and how many homes have none."""
    with reading(engine) as reader:
        [(never, oldest, newest)] = list(reader.rows(
            "SELECT COUNT(*) - COUNT(last_synced_at), MIN(last_synced_at), MAX(last_synced_at) FROM homes"))

    def shown(instant: str | None) -> str | None:
        if instant is None:
            return None
        try:
            return datetime.fromisoformat(instant).astimezone(zone).isoformat(timespec="seconds")
        except (TypeError, ValueError):  # a row edited by hand: shown as stored, as `homes` shows it
            return str(instant)

    return {"never_synced": int(never), "oldest": oldest, "newest": newest,
            "oldest_shown": shown(oldest), "newest_shown": shown(newest)}


def overview(engine: Engine, *, since: str | None = None, until: str | None = None, tz: str | None = None,
             now: datetime | None = None, prices: PriceBook | None = None, limits: dict | None = None) -> dict:
    """Everything the HTML report shows, for [since, until) (all time without them)."""
    now = now or datetime.now(UTC)
    zone = zone_named(tz)
    win = window(since, until, zone, now)
    by_runtime = cost_report(engine, since=since, until=until, by="runtime", tz=tz, now=now, prices=prices)
    by_graph = cost_report(engine, since=since, until=until, by="graph", tz=tz, now=now, prices=prices)
    by_node = cost_report(engine, since=since, until=until, by="node", tz=tz, now=now, prices=prices)
    since_us = None if win.since is None else instant_to_us(win.since)
    audit = audit_report(engine, since=None if win.since is None else win.since.isoformat(), now=now)
    status: Counter[str] = Counter()
    unrecorded = 0
    for run in iter_runs(engine, since_us=since_us, until_us=win.until_us):
        status[run["status"]] += 1
        unrecorded += run["unrecorded_attempts"]  # killed calls of ABANDONED runs included, as in audit
    redone = _redone(engine, win)
    redone["unrecorded_attempts"] = unrecorded
    return {
        "generated_at": now.astimezone(zone).isoformat(),
        "synced": _synced(engine, zone),
        "tz": by_runtime["tz"],
        "since": by_runtime["since"],
        "until": by_runtime["until"],
        "total": by_runtime["total"],
        "undated_outside_window": by_runtime["undated_outside_window"],
        "runtimes": by_runtime["rows"],
        "graphs": by_graph["rows"][:TOP],
        "nodes": by_node["rows"][:TOP],
        "days": _days(engine, win, zone, prices),
        "redone": redone,
        "status": dict(status),
        "abandoned": audit["abandoned"],
        "paused": [p for kind in ("gate", "session_limit", "other") for p in audit["paused"][kind]],
        "problems": audit["problems"],
        "orphan_warning": audit["orphan_warning"],
        "limits": limits,
        "price_book": by_runtime.get("price_book"),
    }
