"""`audit`: one report of what to trust and what needs a human.

Sections (every one is present, empty ones as empty lists / zero counts):

* ``provenance`` — how each PASS was reached: the node's latest verdict's provenance
  (verified, self-reported, exit-only, approved; ``unknown`` = absent, i.e. a run that
  predates the field), and the runs whose passes are *all* self-reported or exit-only.
* ``failures`` — FAIL verdicts split by the engine's own ``judged`` field as written:
  ``judged`` (a check rendered a verdict) vs ``machinery`` (judged absent). The engine
  writes judged only into state.json's record of a terminal, so a FAIL with no record of
  its own there (a dropped snapshot write, or the record is an earlier terminal's) has no
  judged field at all: ``judged_unknown``, never counted as machinery. The engine
  also sets judged on some machinery failures (a timeout kill, a halt, a rejected gate;
  corpus README #7), so ``ours_likely_machinery`` lists judged FAILs whose detail reads
  like one of those — **that flag is omg-ledger's own reading of the detail text**, not
  the engine's.
* ``budget.overruns`` — one entry per node over its budget: ``failed_for_budget`` (the
  engine failed it for its budget_usd: its terminal node_failed says "exceeded
  budget_usd", whether or not a .out exists) and/or ``spend_over_budget`` (an
  invocation's recorded spend is above its budget_usd, which bounds each invocation:
  ``largest_invocation_nano_usd``; ``cost_nano_usd`` is the node's spend in all).
* ``abandoned`` — runs ABANDONED right now (live lock probe), however old, with the
  nodes their dead leg left running (``interrupted_nodes``), the orphan warning and the
  recovery hint.
* ``paused`` — PAUSED runs now, however old, waiting at a gate or for a session limit
  to reset; the last leg decides which (status.pause_reason).
* ``findings`` (stream/snapshot disagreements) and ``problems`` (bad input recorded and
  still open: a problem whose cause a later sync found gone is resolved, `problems --all`).
* ``build_evidence`` — per auto run (a run with a planning leg), the launch-time answer:
  attached, declared, disclosed, none-detected, or ``not recorded``. Declared and
  disclosed are counted separately and never summed (RUN-FEED.md).
* ``unknown_cost`` — invocations with no known price, per runtime; plus attempts the
  engine paid for but recorded nowhere (``unrecorded_attempts``).

``needs_attention`` is true when there is at least one ABANDONED run, PAUSED run,
budget overrun (either kind), finding or recorded problem. Unverified passes and
unpriced work are reported, but are facts about the work, not alarms.

``since`` limits every section but ``abandoned`` and ``paused`` to runs with an event
at or after it (problems: seen at or after it; unpriced invocations: charged in
[since, now), each at its own time, as ``cost --since`` counts them). Status is live: a run's
ABANDONED/PAUSED status is probed now.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING

import orjson

from ..backend import reading
from ..provenance import PASS_COUNT_COLUMNS_ALL, PROVENANCES
from ..status import ABANDONED, GATE, ORPHAN_WARNING, OTHER, PAUSED, SESSION_LIMIT
from ..timespec import parse_since
from ..units import BadTimestamp, format_instant, instant_to_us, parse_timestamp, us_to_instant
from .problems import list_problems
from .runs import list_runs, running_nodes

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

EVIDENCE_ANSWERS = ("attached", "declared", "disclosed", "none-detected")
NOT_RECORDED = "not recorded"
# omg-ledger's own reading of a judged FAIL's detail: the machinery, not the work.
_MACHINERY_DETAIL = re.compile(r"timed? ?out|timeout|cancel|halt|gate .*reject|rejected|killed|signal", re.I)
_NODES = "FROM nodes n JOIN runs r ON r.id = n.run_pk JOIN homes h ON h.id = r.home_id"


class Rows:
    """A long section read while it is rendered (audit_streamed): iterating runs its
    query again in the report's read transaction; ``len`` is known when counted first.
    ``listed``: iterating gives only the newest that many of the ``len`` rows."""

    def __init__(self, produce: Callable[[], Iterator[dict]], count: int | None = None,
                 listed: int | None = None) -> None:
        self._produce = produce
        self._count = count
        self.listed = listed

    def __iter__(self) -> Iterator[dict]:
        return self._produce()

    def __len__(self) -> int:
        if self._count is None:
            raise TypeError("this section is not counted before it is read")
        return self._count


def _run_filter(since_us: int | None, params: dict, billed_only: bool = True) -> list[str]:
    """Runs in the window; a run seen in several homes counts once (its billed copy)."""
    conditions = ["r.billed"] if billed_only else []
    if since_us is not None:
        conditions.append("r.last_event_at_us >= :since_us")
        params["since_us"] = since_us
    return conditions


def _where(conditions: list[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def _node_rows(reader, since_us: int | None, condition: str, newest: int | None = None,
               extra: str = "") -> Iterator[dict]:
    """Nodes matching ``condition`` in run order; ``newest``: only the last that many;
    ``extra``: more columns to select (", <expr> AS <name>")."""
    params: dict = {}
    query = ("SELECT h.label AS home, r.run_id, r.graph_name, n.node_id, n.verdict, n.provenance, n.judged, "
             f"n.detail, n.budget_nano_usd, n.cost_nano_usd, n.unknown_cost_invocations, n.budget_overrun{extra} "
             f"{_NODES}{_where([condition, *_run_filter(since_us, params)])}")
    if newest is None:
        return reader.dicts(query + " ORDER BY r.run_id, h.label, n.node_id", params)
    params["newest"] = newest
    tail = reader.dicts(query + " ORDER BY r.run_id DESC, h.label DESC, n.node_id DESC LIMIT :newest", params)
    return reversed(list(tail))  # at most `newest` rows


def _count_nodes(reader, since_us: int | None, condition: str) -> int:
    params: dict = {}
    return int(reader.scalar(f"SELECT COUNT(*) {_NODES}{_where([condition, *_run_filter(since_us, params)])}",
                             params) or 0)


def _node_ref(m) -> dict:
    return {"home": m["home"], "run_id": m["run_id"], "graph": m["graph_name"], "node_id": m["node_id"],
            "detail": m["detail"]}


def _counting(*values: str) -> str:
    listed = ", ".join(f"'{v}'" for v in values)  # the constants above, never user input
    return f"SUM(CASE WHEN n.provenance IN ({listed}) THEN 1 ELSE 0 END)"




def _passes_per_run(reader) -> tuple[str, str]:
    """(FROM clause, alias of the counts) of every run's PASS counts, aliasing its run
    ``r``: the run's own row from revision 0010 on; on an older ledger (reads never
    migrate) counted from its nodes as derivation counts them, runs without a PASS left out."""
    from ..db import PASS_COUNTS_SINCE, read_at_least

    if read_at_least(reader, PASS_COUNTS_SINCE):
        return "FROM runs r", "r"
    counts = [*(_counting(name) for name in PROVENANCES),
              "SUM(CASE WHEN n.provenance IS NULL OR n.provenance = '' THEN 1 ELSE 0 END)"]
    per_run = ("SELECT n.run_pk AS run_pk, COUNT(*) AS passes, "
               + ", ".join(f"{count} AS {name}" for count, name in zip(counts, PASS_COUNT_COLUMNS_ALL[1:], strict=True))
               + " FROM nodes n WHERE n.verdict = 'PASS' GROUP BY n.run_pk")
    return f"FROM ({per_run}) w JOIN runs r ON r.id = w.run_pk", "w"


def _all_weak(alias: str) -> str:
    """A run with at least one PASS, every one of them self-reported or exit-only."""
    return f"{alias}.passes > 0 AND {alias}.passes = {alias}.passes_self_reported + {alias}.passes_exit_only"


assert PROVENANCES == ("verified", "approved", "self-reported", "exit-only")  # _provenance unpacks in this order


def _weak_runs(reader, since_us: int | None, source: tuple[str, str]) -> Iterator[dict]:
    params: dict = {}
    from_runs, a = source
    query = (f"SELECT h.label, r.run_id, r.graph_name, {a}.passes, {a}.passes_self_reported, {a}.passes_exit_only "
             f"{from_runs} JOIN homes h ON h.id = r.home_id{_where([_all_weak(a), *_run_filter(since_us, params)])} "
             "ORDER BY r.run_id, h.label")
    for label, run_id, graph, passes, self_reported, exit_only in reader.rows(query, params):
        yield {"home": label, "run_id": run_id, "graph": graph, "passes": int(passes),
               "self_reported": int(self_reported), "exit_only": int(exit_only)}


def _provenance(reader, since_us: int | None, lazy: bool = False) -> dict:
    """The PASS mix and the runs whose passes are all weak, summed from the runs' own
    PASS counts from revision 0010 on (one row per run, written when the run was
    derived), counted from the nodes before it (_passes_per_run); provenances this
    omg-ledger does not know are named from the nodes.
    ``lazy``: the weak runs are counted here and read again when rendered."""
    params: dict = {}
    source = _passes_per_run(reader)
    from_runs, a = source
    sums = ", ".join(f"SUM({a}.{name})" for name in PASS_COUNT_COLUMNS_ALL)
    row = next(reader.rows(f"SELECT {sums}, SUM(CASE WHEN {_all_weak(a)} THEN 1 ELSE 0 END) {from_runs}"
                           f"{_where(_run_filter(since_us, params))}", params))
    # No run in the window: every SUM is NULL. PostgreSQL's sums may be Decimals.
    passes, verified, approved, self_reported, exit_only, unknown, weak_count = (int(v or 0) for v in row)
    totals = [verified, approved, self_reported, exit_only]
    others = passes - sum(totals) - unknown
    mix = {**dict(zip(PROVENANCES, totals, strict=True)), "unknown": unknown}
    if others:  # provenances this omg-ledger does not know (rare): named as written
        params = {}
        known = ", ".join(f"'{name}'" for name in PROVENANCES)
        for provenance, count in reader.rows(
                "SELECT n.provenance, COUNT(*) FROM nodes n JOIN runs r ON r.id = n.run_pk"
                + _where(["n.verdict = 'PASS'", f"n.provenance NOT IN ({known})", "n.provenance <> ''",
                          *_run_filter(since_us, params)]) + " GROUP BY n.provenance ORDER BY n.provenance",
                params):
            mix[provenance] = mix.get(provenance, 0) + int(count)
    runs = Rows(lambda: _weak_runs(reader, since_us, source), weak_count) if lazy \
        else list(_weak_runs(reader, since_us, source))
    return {"passes": passes, "mix": mix, "runs_all_unverified": runs}


def _fails(reader, since_us: int | None, condition: str, newest: int | None = None
           ) -> Iterator[tuple[bool | None, dict]]:
    """(judged: True, False or None when no record of the terminal holds it, the FAIL)."""
    for m in _node_rows(reader, since_us, condition, newest):
        item = _node_ref(m)
        if m["judged"]:
            item["ours_likely_machinery"] = bool(_MACHINERY_DETAIL.search(m["detail"] or ""))
        yield None if m["judged"] is None else bool(m["judged"]), item


FAIL_NOTE = ("judged/machinery is the engine's `judged` field as written; judged_unknown: state.json holds "
             "no record of that terminal, so no judged field was written for it; ours_likely_machinery is "
             "omg-ledger's own reading of the detail text (the engine also marks some timeouts, "
             "halts and rejected gates judged)")


_JUDGED_FAIL = "n.verdict = 'FAIL' AND n.judged"
_MACHINERY_FAIL = "n.verdict = 'FAIL' AND NOT n.judged"
# NULL judged: state.json holds no record of this terminal (nodes.judged), so the engine's
# answer was never written; "absent" in the engine's sense (false) is a record without it.
_JUDGED_UNKNOWN_FAIL = "n.verdict = 'FAIL' AND n.judged IS NULL"


def _failures(reader, since_us: int | None, lazy: bool = False, newest: int | None = None) -> dict:
    """FAIL verdicts: judged, machinery, and judged not on record. ``lazy``: each list is read when rendered;
    ``newest`` (lazy only): each list holds its newest that many, and is counted whole."""
    if lazy:
        def rows(condition: str) -> Rows:
            produce = lambda: (item for _judged, item in _fails(reader, since_us, condition, newest))  # noqa: E731
            if newest is None:
                return Rows(produce)
            return Rows(produce, _count_nodes(reader, since_us, condition), listed=newest)

        return {"judged": rows(_JUDGED_FAIL), "machinery": rows(_MACHINERY_FAIL),
                "judged_unknown": rows(_JUDGED_UNKNOWN_FAIL), "note": FAIL_NOTE}
    lists: dict[bool | None, list] = {True: [], False: [], None: []}
    for is_judged, item in _fails(reader, since_us, "n.verdict = 'FAIL'"):
        lists[is_judged].append(item)
    return {"judged": lists[True], "machinery": lists[False], "judged_unknown": lists[None], "note": FAIL_NOTE}


# The node's costliest invocation. budget_usd bounds each invocation, as the engine applies
# it (claude's --max-budget-usd per process, and its post-hoc check of each outcome): a
# node run three times at 60% of its budget is within it, though its total is not.
_LARGEST_INVOCATION = ("(SELECT MAX(c.cost_nano_usd) FROM charges c "
                       "WHERE c.run_pk = n.run_pk AND c.node_id = n.node_id)")


def _budget(reader, since_us: int | None) -> dict:
    """One entry per node over its budget, however it shows: the engine failed it for its
    budget_usd (its terminal node_failed says so), or an invocation's recorded spend is above it."""
    # The first term is schema.NODE_OVER_BUDGET on `n`, the partial index's predicate (an
    # invocation over the budget puts the node's total over it too): the few candidates
    # come from the index, not a scan of every node.
    condition = (f"(n.budget_overrun OR (n.budget_nano_usd IS NOT NULL AND n.cost_nano_usd > n.budget_nano_usd)) "
                 f"AND (n.budget_overrun OR {_LARGEST_INVOCATION} > n.budget_nano_usd)")
    rows = _node_rows(reader, since_us, condition, extra=f", {_LARGEST_INVOCATION} AS largest_invocation_nano_usd")
    overruns = []
    for m in rows:
        largest, budget = m["largest_invocation_nano_usd"], m["budget_nano_usd"]
        overruns.append({**_node_ref(m), "verdict": m["verdict"], "cost_nano_usd": int(m["cost_nano_usd"] or 0),
                         "largest_invocation_nano_usd": None if largest is None else int(largest),
                         "budget_nano_usd": budget, "failed_for_budget": bool(m["budget_overrun"]),
                         "spend_over_budget": budget is not None and largest is not None and largest > budget})
    return {"overruns": overruns}


def _live(engine: Engine, reader, since_us: int | None) -> tuple[list, dict, int]:
    """ABANDONED and PAUSED runs now, however old (`since` does not hide them: the daily
    cron use must keep warning about an orphan). Also the killed calls of the abandoned
    runs in the window, which no stored count holds yet (status.unrecorded_attempts).
    The runs are probed once; the nodes their dead legs left running (status.node_state's
    interrupted ones) are one query for all of them."""
    live = list_runs(engine, statuses=(ABANDONED, PAUSED))
    left_running = running_nodes(reader) if any(r["status"] == ABANDONED for r in live) else {}
    abandoned = [{"home": r["home"], "run_id": r["run_id"], "graph": r["graph"], "last_event_at": r["last_event_at"],
                  "has_snapshot": r["has_snapshot"], "interrupted_nodes": left_running.get((r["home"], r["run_id"]), []),
                  "hint": r["hint"]}
                 for r in live if r["status"] == ABANDONED]
    in_window = _open_leg_runs_since(reader, since_us) if since_us is not None \
        else {(r["home"], r["run_id"]) for r in abandoned}
    killed = sum(r["nodes_interrupted"] for r in live
                 if r["status"] == ABANDONED and (r["home"], r["run_id"]) in in_window)
    paused: dict[str, list] = {GATE: [], SESSION_LIMIT: [], OTHER: []}
    for p in live:
        if p["status"] == PAUSED:
            paused[p["paused_for"]].append({"home": p["home"], "run_id": p["run_id"], "graph": p["graph"],
                                            "hint": p["hint"], "gate": p["gate"]})
    return abandoned, paused, killed


def _open_leg_runs_since(reader, since_us: int) -> set[tuple[str, str]]:
    """(home, run id) of the listed runs (billed copies) with an open last leg and an event
    at or after ``since_us``: the window runs.iter_runs gives abandoned runs, without
    probing them again."""
    return set(reader.rows("SELECT h.label, r.run_id FROM runs r JOIN homes h ON h.id = r.home_id "
                           "WHERE r.billed AND r.last_leg_open AND r.last_event_at_us >= :since_us",
                           {"since_us": since_us}))


def _findings(reader, since_us: int | None) -> list:
    """The billed copy's disagreements of each run, and every diverged_copy (recorded on
    the copies). An unbilled copy's own disagreements are its backup's artifacts (a copy
    without its stream has no terminal for any node its state.json records), not the
    run's: they stay in v_findings and `show --home`."""
    params: dict = {}
    runs = ["(r.billed OR f.kind = 'diverged_copy')", *_run_filter(since_us, params, billed_only=False)]
    query = ("SELECT h.label AS home, r.run_id, f.kind, f.node_id, f.leg_ordinal, f.detail "
             "FROM findings f JOIN runs r ON r.id = f.run_pk JOIN homes h ON h.id = r.home_id"
             f"{_where(runs)} ORDER BY r.run_id, h.label, f.seq")
    return list(reader.dicts(query, params))


def _problems(engine: Engine, since_us: int | None) -> list:
    """Open problems only: one whose cause a later sync found gone is resolved."""
    since_text = None if since_us is None else format_instant(us_to_instant(since_us))
    return [{k: m[k] for k in ("run_id", "path", "byte_offset", "reason", "first_seen_at", "last_seen_at", "machine")}
            for m in list_problems(engine, since_text=since_text)]


def _build_evidence(reader, since_us: int | None) -> dict:
    params: dict = {}
    conditions = ["(r.id IN (SELECT l.run_pk FROM legs l WHERE l.phase = 'planning') "
                  "OR r.build_evidence_answer IS NOT NULL)", *_run_filter(since_us, params)]
    query = ("SELECT h.label AS home, r.run_id, r.graph_name, r.build_evidence_answer, "
             "r.build_evidence_declared_by, r.build_evidence_signals_json "
             f"FROM runs r JOIN homes h ON h.id = r.home_id{_where(conditions)} ORDER BY r.run_id, h.label")
    runs = []
    counts = {name: 0 for name in (*EVIDENCE_ANSWERS, NOT_RECORDED)}
    for home, run_id, graph, answer, declared_by, signals in reader.rows(query, params):
        answer = answer or NOT_RECORDED
        counts[answer] = counts.get(answer, 0) + 1
        runs.append({"home": home, "run_id": run_id, "graph": graph, "answer": answer,
                     "declared_by": declared_by, "signals": orjson.loads(signals) if signals else []})
    return {"counts": counts, "runs": runs,
            "note": "declared and disclosed are different answers and are never summed"}


def _unknown_cost(reader, since_us: int | None, now_us: int) -> dict:
    params: dict = {}
    runs_in_window = _run_filter(since_us, params)
    # Each unpriced invocation counts at its own time, in [since, now) as `cost --since`
    # counts it (the estimate shown beside this count is cost's); attempts recorded
    # nowhere have no time, so they are those of the runs in the window.
    charges_in_window = ["c.cost_unknown", "r.billed"]
    if since_us is not None:
        charges_in_window += ["c.at_us >= :since_us", "c.at_us < :now_us"]
        params["now_us"] = now_us
    query = ("SELECT r.runtime, (r.snapshot_schema IS NULL) AS no_snapshot, COUNT(*) AS n "
             f"FROM charges c JOIN runs r ON r.id = c.run_pk{_where(charges_in_window)} "
             "GROUP BY r.runtime, (r.snapshot_schema IS NULL)")
    by_runtime: dict[str, int] = {}
    for runtime, no_snapshot, n in reader.rows(query, params):
        key = runtime or ("(no snapshot)" if no_snapshot else "(unknown)")
        by_runtime[key] = by_runtime.get(key, 0) + int(n)
    unrecorded = reader.scalar(f"SELECT COALESCE(SUM(r.unrecorded_attempts), 0) FROM runs r"
                               f"{_where(runs_in_window)}", params)
    return {"by_runtime": dict(sorted(by_runtime.items())), "total": sum(by_runtime.values()),
            "unrecorded_attempts": int(unrecorded or 0)}


def _stale_homes(reader, synced_since_us: int) -> list[dict]:
    """The homes whose last completed sync is older than ``synced_since_us``, or that
    never completed one: everything the ledger says about them may be behind."""
    stale = []
    for label, path, machine, synced in reader.rows(
            "SELECT label, path, machine, last_synced_at FROM homes ORDER BY label"):
        if synced is None or _synced_us(synced) < synced_since_us:
            stale.append({"label": label, "path": path, "machine": machine, "last_synced_at": synced})
    return stale


def _synced_us(text: str) -> int:
    try:
        return parse_timestamp(text, strict=False)[1]
    except BadTimestamp:  # a row edited by hand: no telling when that home was synced
        return -1


def _report(engine: Engine, reader, since_us: int | None, now_us: int, lazy: bool, newest_fails: int | None = None,
            synced_since_us: int | None = None) -> dict:
    report = {
        "since": None if since_us is None else format_instant(us_to_instant(since_us)),
        "synced_since": None if synced_since_us is None else format_instant(us_to_instant(synced_since_us)),
        "stale_homes": [] if synced_since_us is None else _stale_homes(reader, synced_since_us),
        "provenance": _provenance(reader, since_us, lazy),
        "failures": _failures(reader, since_us, lazy, newest_fails),
        "budget": _budget(reader, since_us),
        "findings": _findings(reader, since_us),
        "problems": _problems(engine, since_us),
        "build_evidence": _build_evidence(reader, since_us),
        "unknown_cost": _unknown_cost(reader, since_us, now_us),
    }
    report["abandoned"], report["paused"], killed = _live(engine, reader, since_us)
    report["unknown_cost"]["unrecorded_attempts"] += killed
    report["orphan_warning"] = ORPHAN_WARNING
    reasons = []
    for label, count in (
        (f"home(s) not synced since {report['synced_since']}", len(report["stale_homes"])),
        ("ABANDONED run(s)", len(report["abandoned"])),
        ("PAUSED run(s)", sum(len(v) for v in report["paused"].values())),
        ("budget overrun(s)", len(report["budget"]["overruns"])),
        ("reconciliation finding(s)", len(report["findings"])),
        ("open input problem(s)", len(report["problems"])),
    ):
        if count:
            reasons.append(f"{count} {label}")
    report["needs_attention"] = bool(reasons)
    report["attention"] = reasons
    return report


def audit_report(engine: Engine, since: str | None = None, now: datetime | None = None,
                 zone: tzinfo | None = None, stale_after: str | None = None) -> dict:
    """Every section of the audit, plus `needs_attention` and the reasons for it.
    ``zone``: where a --since date without an offset is read. ``stale_after`` (a time,
    2h or a date): a home whose last sync is older needs attention."""
    now = now or datetime.now(UTC)
    since_us = parse_since(since, now, zone)
    synced_since_us = parse_since(stale_after, now, zone)
    with reading(engine) as reader:
        return _report(engine, reader, since_us, instant_to_us(now), lazy=False, synced_since_us=synced_since_us)


@contextlib.contextmanager
def audit_streamed(engine: Engine, since: str | None = None, now: datetime | None = None,
                   zone: tzinfo | None = None, newest_fails: int | None = None,
                   stale_after: str | None = None) -> Iterator[dict]:
    """audit_report whose long lists (the FAILs, the runs whose passes are all weak) are
    Rows, read in the same read transaction while they are rendered: the text of 10,000
    runs is written as it is read, never held whole (peak memory stays flat).
    ``newest_fails``: each FAIL list holds only its newest that many (counted whole)."""
    now = now or datetime.now(UTC)
    since_us = parse_since(since, now, zone)
    synced_since_us = parse_since(stale_after, now, zone)
    with reading(engine) as reader:
        yield _report(engine, reader, since_us, instant_to_us(now), lazy=True, newest_fails=newest_fails,
                      synced_since_us=synced_since_us)
