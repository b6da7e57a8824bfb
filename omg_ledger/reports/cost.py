"""`cost`: known spend, tokens, invocations and unpriced invocations, grouped.

Rules (each one is a test in tests/test_cost.py):

* A charge is attributed by its own time (``charges.at_us``), not by its run's start.
  The window is ``[since, until)``. ``--since`` without ``--until`` ends at *now*; with
  neither, the window is all time and charges with no time (none normally) count too,
  as their own ``(undated)`` group when grouping by period. A report with a window
  says what such charges add up to in ``undated_outside_window`` (null for all time),
  and the terminal table says it under the total, so no spend is left out unsaid; a
  window that ends at now says so of charges dated after now (a machine's clock ahead) in
  ``after_now_outside_window`` (null when ``--until`` is given or for all time).
* Money is summed in SQL as integer nano-dollars and only rounded for display. A
  group with unpriced invocations (``cost_unknown``, stored as NULL) has a lower-bound
  total: ``cost_is_lower_bound`` in JSON, ``≥ $12.40 +3 unpriced`` on a terminal.
* Periods (day, week from Monday, month) are cut in ``tz``. SQL groups charges into
  15-minute UTC buckets and Python maps each bucket to its local period with zoneinfo:
  DST days of 23 or 25 hours come out exact. Today's offsets are all multiples of 15
  minutes, so no bucket straddles a local midnight; the few that did (Pacific/Kiritimati
  at -10:40 until 1979, Africa/Monrovia at -0:44:30 until 1972) are summed again per
  charge time.
* Keys: ``day`` ``2026-11-29``; ``week`` the Monday it starts on, ``2026-11-23``;
  ``month`` ``2026-11``; ``run`` the run id (the row also names its home); ``node``
  ``<graph>/<node id>`` (the row also has ``graph`` and ``node_id`` separately, since node
  ids may contain ``/``); charges that belong to no node (planning, refused plan,
  assessment) are keyed ``<graph>/(planning)`` etc.; a run with no graph (planner
  killed or plan refused) is ``(no graph)``; ``runtime`` ``claude``/``codex``, or
  ``(no snapshot)`` when the run never wrote state.json; ``graph`` the graph's name, or
  ``(no graph)`` (the row's ``graph`` is then null); ``home`` the label of the home holding
  the run's billed copy; ``goal`` the goal's first run id
  (every cycle of one iterated auto run adds up there), ``(no goal)`` for all other
  runs; ``leg-kind`` initial/resume/retry/rerun/after-abandoned/planning/assessment, or
  ``(no leg)`` for a charge outside any leg.
* JSON money: ``cost_nano_usd`` exact (integer), ``cost_usd`` a number equal to it
  divided by 1e9 (so at most 9 decimals).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from ..backend import backend_of, bind_list, reading
from ..errors import BadArgument
from ..prices import PriceBook
from ..timespec import local_zone, parse_time, zone_named  # noqa: F401 (re-exported)
from ..units import instant_in_range, instant_to_us, summed, us_to_instant
from .graphs import NO_GRAPH, graph_condition

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

GROUPINGS = ("day", "week", "month", "run", "node", "graph", "runtime", "home", "goal", "leg-kind")
RUN_LEVEL = ("run", "graph", "runtime", "home", "goal")  # keys read off each charge's run
PERIODS = ("day", "week", "month")
BUCKET_US = 900_000_000  # 15 minutes
TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
UNDATED = "(undated)"
OUT_OF_RANGE = "(out of range)"  # a time an older omg-ledger stored before instants were range-checked


@dataclass(frozen=True)
class Window:
    since: datetime | None
    until: datetime | None

    @property
    def since_us(self) -> int | None:
        return None if self.since is None else instant_to_us(self.since)

    @property
    def until_us(self) -> int | None:
        return None if self.until is None else instant_to_us(self.until)

    @property
    def all_time(self) -> bool:
        return self.since is None and self.until is None


def window(since: str | None, until: str | None, zone: tzinfo, now: datetime | None = None) -> Window:
    """[since, until): absolute times without an offset are read in `zone`."""
    now = now or datetime.now(UTC)
    start = parse_time(since, now, zone) if since else None
    end = parse_time(until, now, zone) if until else (now if since else None)
    # Compared as instants: two datetimes of one zone compare as wall clocks, and a time in
    # a DST gap (read with the offset before it) can be a later instant than a wall clock
    # after it.
    if start is not None and end is not None and instant_to_us(end) <= instant_to_us(start):
        def shown(moment: datetime) -> str:  # the wall clock there at that instant (02:30 EST in a gap: 03:30 EDT)
            return moment.astimezone(UTC).astimezone(zone).isoformat()

        if not until:  # (the window ends now: --until was not given)
            raise BadArgument(f"empty window: --since ({shown(start)}) is not before now "
                              f"({shown(now)}): give a time in the past")
        raise BadArgument(f"empty window: --until ({shown(end)}) is not after --since "
                          f"({shown(start)}); --until is exclusive (the window is [since, "
                          f"until)): to include a whole day, end the window at the start of the next one")
    return Window(start, end)


# Exact sums that cannot overflow. SQLite's SUM() raises "integer overflow" past 2**63
# (ten runs at the per-run bound reach it; PostgreSQL sums BIGINT as NUMERIC). Then the
# query runs again with each value summed as a high and a low part (value // split,
# value % split), joined in Python's unbounded integers: a part's sum would need
# billions of charges to overflow. Real ledgers never pay for the split.
SPLIT = {"cost_nano_usd": 10**9, **{name: 10**6 for name in TOKEN_FIELDS}}
COUNTS = ("invocations", "unknown_cost_invocations")


def exact_sum(column: str, name: str) -> str:
    """SUM of a nano-dollar column in SQL text that cannot overflow, for a report of its
    own: a high and a low part (``<name>_hi``, ``<name>_lo``), joined by joined_sum, and
    how many values are no integer (``<name>_odd``: text or a real typed into a SQLite
    ledger by hand, which the parts would sum as 0 or round; never on PostgreSQL)."""
    part = SPLIT["cost_nano_usd"]
    return (f"SUM({column} / {part}) AS {name}_hi, SUM({column} % {part}) AS {name}_lo, "
            f"SUM(CASE WHEN {column} <> CAST({column} AS BIGINT) THEN 1 ELSE 0 END) AS {name}_odd")


def joined_sum(high: int | None, low: int | None, odd: int | None) -> int:
    """The exact sum of an exact_sum's parts; ValueError (as summed) when a value summed
    is no integer."""
    if odd:
        raise ValueError(f"a sum of an integer column met {odd} value(s) that are no integer")
    return summed(high) * SPLIT["cost_nano_usd"] + summed(low)


def _measure_names(split: bool) -> list[str]:
    return [*COUNTS, *((f"{n}_hi" for n in SPLIT) if split else SPLIT), *((f"{n}_lo" for n in SPLIT) if split else ())]


def _measures(split: bool) -> str:
    counts = ["COUNT(*) AS invocations", "SUM(CASE WHEN c.cost_unknown THEN 1 ELSE 0 END) AS unknown_cost_invocations"]
    if not split:
        return ", ".join([*counts, *(f"SUM(c.{name}) AS {name}" for name in SPLIT)])
    return ", ".join([*counts, *(f"SUM(c.{name} / {part}) AS {name}_hi" for name, part in SPLIT.items()),
                      *(f"SUM(c.{name} % {part}) AS {name}_lo" for name, part in SPLIT.items())])


def _conditions(win: Window, home_labels: tuple[str, ...], at_us=None, graphs: tuple[str, ...] = ()) -> list:
    """The window, home and graph filter on charges as SQLAlchemy conditions (for the
    estimate and the HTML overview; the aggregate below uses the same filter in SQL text)."""
    from sqlalchemy import or_, select

    from .. import schema

    c, r, h = schema.charges.c, schema.runs.c, schema.homes.c
    at_us = c.at_us if at_us is None else at_us
    # A run seen in several homes (a copied directory) is billed once: its billed copy.
    conditions = [c.run_pk.not_in(select(r.id).where(r.billed.is_(False)))]
    if win.since_us is not None:
        conditions.append(at_us >= win.since_us)
    if win.until_us is not None:
        conditions.append(at_us < win.until_us)
    if home_labels:
        conditions.append(c.run_pk.in_(select(r.id).join(schema.homes, h.id == r.home_id)
                                       .where(h.label.in_(home_labels))))
    if graphs:
        named = [name for name in graphs if name != NO_GRAPH]
        conditions.append(c.run_pk.in_(select(r.id).where(or_(
            r.graph_name.in_(named), *([r.graph_name.is_(None)] if NO_GRAPH in graphs else [])))))
    return conditions


def _conditions_sql(win: Window, home_labels: tuple[str, ...], params: dict, at_us: str = "c.at_us",
                    graphs: tuple[str, ...] = ()) -> str:
    """_conditions in SQL text, on charges ``c``."""
    # A run seen in several homes (a copied directory) is billed once: its billed copy.
    conditions = ["c.run_pk NOT IN (SELECT id FROM runs WHERE NOT billed)"]
    if win.since_us is not None:
        conditions.append(f"{at_us} >= :since_us")
        params["since_us"] = win.since_us
    if win.until_us is not None:
        conditions.append(f"{at_us} < :until_us")
        params["until_us"] = win.until_us
    if home_labels:
        conditions.append("c.run_pk IN (SELECT r.id FROM runs r JOIN homes h ON h.id = r.home_id "
                          f"WHERE h.label IN {bind_list(params, 'home', home_labels)})")
    if graphs:
        conditions.append(f"c.run_pk IN (SELECT id FROM runs WHERE {graph_condition('graph_name', graphs, params)})")
    return " AND ".join(conditions)


def _query(by: str | None, win: Window, home_labels: tuple[str, ...], backend, split: bool = False,
           graphs: tuple[str, ...] = ()) -> tuple[str, dict]:
    """One aggregate query and its parameters. For run-level groupings, charges are first
    summed per run on the charges table alone and only those partial sums are joined to
    runs/homes; periods are summed per 15-minute bucket."""
    params: dict = {}
    per_run = by in RUN_LEVEL
    # A window usually covers most charges: a scan in run order beats the at_us index
    # plus a sort (the backend says where); "+ 0" keeps the planner off the index.
    at_us = "c.at_us + 0" if per_run and backend.scan_wide_windows else "c.at_us"
    where = _conditions_sql(win, home_labels, params, at_us, graphs)
    measures = _measures(split)
    if by == "node":
        # Nodes are many: one join of each charge to its run, grouped once, is cheaper
        # than per-run partial sums (measured: 0.4 s vs 0.95 s for 300k charges).
        kind = "CASE WHEN c.node_id IS NULL THEN c.kind ELSE NULL END"
        return (f"SELECT r.graph_name AS graph, c.node_id AS node_id, {kind} AS charge_kind, {measures} "
                f"FROM charges c JOIN runs r ON r.id = c.run_pk WHERE {where} "
                f"GROUP BY r.graph_name, c.node_id, {kind}"), params
    if by in PERIODS:
        bucket = f"c.at_us / {BUCKET_US}"
        return f"SELECT {bucket} AS bucket, {measures} FROM charges c WHERE {where} GROUP BY {bucket}", params
    if by == "leg-kind":
        return (f"SELECT c.leg_kind AS leg_kind, {measures} FROM charges c WHERE {where} "
                "GROUP BY c.leg_kind"), params
    if not per_run:
        return f"SELECT {measures} FROM charges c WHERE {where}", params
    agg = f"(SELECT c.run_pk AS run_pk, {measures} FROM charges c WHERE {where} GROUP BY c.run_pk) agg"
    names = _measure_names(split)
    if by == "run":
        return ("SELECT r.id AS run_pk, r.run_id AS run_id, h.label AS home, "
                + ", ".join(f"agg.{m} AS {m}" for m in names)
                + f" FROM {agg} JOIN runs r ON r.id = agg.run_pk JOIN homes h ON h.id = r.home_id"), params
    joins = f"{agg} JOIN runs r ON r.id = agg.run_pk"
    if by == "runtime":
        keys, group = ("r.runtime AS runtime, (r.snapshot_schema IS NULL) AS no_snapshot",
                       "r.runtime, (r.snapshot_schema IS NULL)")
    elif by == "graph":
        keys, group = "r.graph_name AS graph", "r.graph_name"
    elif by == "home":
        # Charges are of billed copies only, so a run's spend goes to the home of that copy.
        joins += " JOIN homes h ON h.id = r.home_id"
        keys, group = "h.label AS home", "h.label"
    else:
        keys, group = "r.goal_first_run_id AS goal", "r.goal_first_run_id"
    return (f"SELECT {keys}, " + ", ".join(f"SUM(agg.{m}) AS {m}" for m in names)
            + f" FROM {joins} GROUP BY {group}"), params


def row_identity(by: str, m) -> object:
    """What makes a row of a run-, node- or graph-level grouping one group: not its key as
    shown, which two groups can share — a run id in two homes; graph "a/b" node "c" and
    graph "a" node "b/c" (both "a/b/c"); a graph named "(no graph)" and runs with none."""
    if by == "run":
        return (m["home"], m["run_id"])
    if by == "node":
        return (m["graph"], m["node_id"], None if m["node_id"] is not None else m["charge_kind"])
    if by == "graph":
        return (m["graph"],)
    return _key(by, m)


def _key(by: str, m) -> str:
    if by == "run":
        return m["run_id"]
    if by == "node":
        graph = m["graph"] if m["graph"] is not None else NO_GRAPH
        node = m["node_id"] if m["node_id"] is not None else f"({m['charge_kind']})"
        return f"{graph}/{node}"
    if by == "graph":
        return m["graph"] if m["graph"] is not None else NO_GRAPH
    if by == "home":
        return m["home"]
    if by == "runtime":
        return m["runtime"] or ("(no snapshot)" if m["no_snapshot"] else "(unknown)")
    if by == "goal":
        return m["goal"] or "(no goal)"
    if by == "leg-kind":
        return m["leg_kind"] or "(no leg)"
    raise AssertionError(by)


def period_start(moment: datetime, by: str) -> date:
    """The local date a period starts on (moment is already in the zone)."""
    day = moment.date()
    if by == "week":
        return day - timedelta(days=day.weekday())
    if by == "month":
        return day.replace(day=1)
    return day


def _period_bounds(start: date, by: str, zone: tzinfo) -> tuple[datetime, datetime]:
    if by == "day":
        end = start + timedelta(days=1)
    elif by == "week":
        end = start + timedelta(days=7)
    else:
        end = (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return (datetime(start.year, start.month, start.day, tzinfo=zone),
            datetime(end.year, end.month, end.day, tzinfo=zone))


def current_period(now: datetime, by: str, zone: tzinfo) -> tuple[datetime, datetime]:
    """[start, end) of the day, week (from Monday) or month that holds `now`, cut in `zone`."""
    return _period_bounds(period_start(now.astimezone(zone), by), by, zone)


def _period_key(start: date, by: str) -> str:
    return start.strftime("%Y-%m") if by == "month" else start.isoformat()


def _zero() -> dict:
    return {"cost_nano_usd": 0, "invocations": 0, "unknown_cost_invocations": 0, **dict.fromkeys(TOKEN_FIELDS, 0)}


def _add(into: dict, m) -> None:
    for name in COUNTS:
        into[name] += summed(m[name])
    for name, part in SPLIT.items():
        if name in m:
            into[name] += summed(m[name])
        else:
            into[name] += summed(m[f"{name}_hi"]) * part + summed(m[f"{name}_lo"])


def _sum_rows(rows: list) -> dict:
    into = _zero()
    for m in rows:
        _add(into, m)
    return into


def _finish(row: dict) -> dict:
    nanos = row["cost_nano_usd"]
    row["cost_usd"] = round(nanos / 1e9, 9)
    row["cost_is_lower_bound"] = row["unknown_cost_invocations"] > 0
    if "estimated_nano_usd" in row:
        row["estimated_usd"] = round(row["estimated_nano_usd"] / 1e9, 9)
    return row


def _iso(moment: datetime | None, zone: tzinfo) -> str | None:
    return None if moment is None else moment.astimezone(zone).isoformat()


def cost_report(engine: Engine, *, since: str | None = None, until: str | None = None, by: str | None = None,
                tz: str | None = None, home_labels: tuple[str, ...] = (), now: datetime | None = None,
                prices: PriceBook | None = None, graphs: tuple[str, ...] = ()) -> dict:
    """Spend per group and in total over a window. `now` is injectable for tests.
    With `prices`, every row and the total also carry the estimate for their unpriced
    charges (reports/estimate.py), beside the known spend, never in it."""
    if by is not None and by not in GROUPINGS:
        raise BadArgument(f"unknown grouping {by!r}: use one of {', '.join(GROUPINGS)}")
    zone = zone_named(tz)
    win = window(since, until, zone, now)
    backend = backend_of(engine)
    labels = tuple(home_labels)
    ends_now = win.since is not None and not until  # (its end is now, as window() reads since and until)
    with reading(engine) as reader:
        def fetch(split: bool) -> tuple[list, list | None, list | None]:
            result = list(reader.dicts(*_query(by, win, labels, backend, split, graphs)))
            if by in PERIODS:
                result = _split_straddling_buckets(reader, result, by, zone, win, labels, split, graphs)
            undated = None if win.all_time else list(reader.dicts(*_undated_query(labels, split, graphs)))
            after_now = list(reader.dicts(*_dated_from_query(win.until, labels, split, graphs))) if ends_now else None
            return result, undated, after_now

        try:
            result, undated, after_now = fetch(False)
        except Exception as exc:  # the driver's own error, inside the read transaction
            if "integer overflow" not in str(exc):
                raise
            result, undated, after_now = fetch(True)

    total = _zero()
    rows: dict[object, dict] = {}  # by a row's identity: its key as shown can be two groups' (row_identity)
    extra: dict[object, dict] = {}
    for m in result:
        _add(total, m)
        if by is None:
            continue
        if by in PERIODS:
            if m.get("bucket") is None and "at_us" not in m:
                key = UNDATED
                extra[key] = {}
            elif not instant_in_range(_start_us(m)):
                key = OUT_OF_RANGE
                extra[key] = {}
            else:
                start = period_start(us_to_instant(_start_us(m)).astimezone(zone), by)
                key = _period_key(start, by)
                if key not in extra:
                    lo, hi = _period_bounds(start, by, zone)
                    extra[key] = {"start": lo.isoformat(), "end": hi.isoformat()}
        else:
            key = row_identity(by, m)
            if key not in extra:
                extra[key] = {"key": _key(by, m)}
                if by == "run":
                    extra[key]["home"] = m["home"]
                elif by == "node":
                    extra[key].update(graph=m["graph"], node_id=m["node_id"])
                elif by == "graph":
                    extra[key]["graph"] = m["graph"]
        _add(rows.setdefault(key, _zero()), m)

    if prices is not None:
        _add_estimates(engine, prices, by, win, tuple(home_labels), zone, total, rows, graphs)

    out_rows = []
    for key, values in rows.items():
        out_rows.append(_finish({"key": key, **extra.get(key, {}), **values}))
    if by in PERIODS or by == "run":
        out_rows.sort(key=lambda row: (row["key"] in (UNDATED, OUT_OF_RANGE), row["key"], row.get("home", "")))
    else:
        out_rows.sort(key=lambda row: (-row["cost_nano_usd"], -row["unknown_cost_invocations"], row["key"]))
    report = {
        "by": by,
        "tz": zone.key if isinstance(zone, ZoneInfo) and zone.key else str(zone),
        "since": _iso(win.since, zone),
        "until": _iso(win.until, zone),
        "homes": list(home_labels),
        "graphs": list(graphs),
        "rows": out_rows,
        "total": _finish(total),
    }
    # Spend with no time (a run that left state.json or assess.json but no stream to date
    # it by) belongs to no window: said beside the total, never silently left out.
    report["undated_outside_window"] = None if undated is None else _finish(_sum_rows(undated))
    # Dated after now, by a clock ahead of this machine's: in the all-time total, in no
    # window that ends now.
    report["after_now_outside_window"] = None if after_now is None else _finish(_sum_rows(after_now))
    if prices is not None:
        report["price_book"] = prices.describe()
    return report


def _start_us(m) -> int:
    """The first microsecond a period row covers: its bucket's, or its own charge time's."""
    return int(m["at_us"]) if "at_us" in m else int(m["bucket"]) * BUCKET_US


def straddling_buckets(buckets: Iterable[int | None], by: str, zone: tzinfo) -> list[int]:
    """The 15-minute buckets whose first and last microsecond fall in different local
    periods (none in any zone since 1979)."""
    straddling = []
    for bucket in buckets:
        if bucket is None or not instant_in_range(int(bucket) * BUCKET_US) \
                or not instant_in_range(int(bucket) * BUCKET_US + BUCKET_US - 1):
            continue
        first = us_to_instant(int(bucket) * BUCKET_US).astimezone(zone)
        last = us_to_instant(int(bucket) * BUCKET_US + BUCKET_US - 1).astimezone(zone)
        if period_start(first, by) != period_start(last, by):
            straddling.append(int(bucket))
    return straddling


def _split_straddling_buckets(reader, result: list, by: str, zone: tzinfo, win: Window,
                              home_labels: tuple[str, ...], split: bool, graphs: tuple[str, ...] = ()) -> list:
    """The rows of straddling buckets summed again per charge time instead."""
    straddling = straddling_buckets((m["bucket"] for m in result), by, zone)
    if not straddling:
        return result
    params: dict = {}
    where = _conditions_sql(win, home_labels, params, graphs=graphs)
    sql = (f"SELECT c.at_us AS at_us, {_measures(split)} FROM charges c WHERE {where} "
           f"AND c.at_us / {BUCKET_US} IN {bind_list(params, 'bucket', straddling)} GROUP BY c.at_us")
    redone = set(straddling)
    kept = [m for m in result if m["bucket"] is None or int(m["bucket"]) not in redone]
    return kept + list(reader.dicts(sql, params))


def _undated_query(home_labels: tuple[str, ...], split: bool = False, graphs: tuple[str, ...] = ()
                   ) -> tuple[str, dict]:
    """The charges no window holds (no time), billed copies of the chosen homes and graphs only."""
    params: dict = {}
    where = _conditions_sql(Window(None, None), home_labels, params, graphs=graphs)
    return f"SELECT {_measures(split)} FROM charges c WHERE c.at_us IS NULL AND {where}", params


def _dated_from_query(moment: datetime, home_labels: tuple[str, ...], split: bool = False,
                      graphs: tuple[str, ...] = ()) -> tuple[str, dict]:
    """The charges dated at or after ``moment``, billed copies of the chosen homes and graphs only."""
    params: dict = {}
    where = _conditions_sql(Window(moment, None), home_labels, params, graphs=graphs)
    return f"SELECT {_measures(split)} FROM charges c WHERE {where}", params


# -- estimates (--estimate): unpriced charges priced from their tokens, kept apart ----


def _estimate_key(by: str, m, zone: tzinfo) -> object:
    """The row of one unpriced charge, as the aggregate above keys its rows."""
    if by in PERIODS:
        if m["at_us"] is None:
            return UNDATED
        # The charge's own time: the period its bucket maps to, or the right one where
        # the bucket straddles two.
        return _period_key(period_start(us_to_instant(int(m["at_us"])).astimezone(zone), by), by)
    return row_identity(by, m)


def _add_estimates(engine: Engine, prices: PriceBook, by: str | None, win: Window, home_labels: tuple[str, ...],
                   zone: tzinfo, total: dict, rows: dict[str, dict], graphs: tuple[str, ...] = ()) -> None:
    from . import estimate

    total.update(estimate.zero())
    for values in rows.values():
        values.update(estimate.zero())
    with engine.connect() as conn:
        for row in conn.execute(estimate.unpriced_charges(_conditions(win, home_labels, graphs=graphs))):
            m = row._mapping
            estimate.add(total, prices, m)
            if by is not None:
                into = rows.setdefault(_estimate_key(by, m, zone), {**_zero(), **estimate.zero()})
                estimate.add(into, prices, m)
