"""`audit`: one report of what to trust and what needs a human.

Sections (every one is present, empty ones as empty lists / zero counts):

* ``provenance`` — how each PASS was reached: the node's latest verdict's provenance
  (verified, self-reported, exit-only, approved; ``unknown`` = absent, i.e. a run that
  predates the field), and the runs whose passes are *all* self-reported or exit-only.
* ``failures`` — FAIL verdicts split by the engine's own ``judged`` field as written:
  ``judged`` (a check rendered a verdict) vs ``machinery`` (judged absent). The engine
  also sets judged on some machinery failures (a timeout kill, a halt, a rejected gate;
  corpus README #7), so ``ours_likely_machinery`` lists judged FAILs whose detail reads
  like one of those — **that flag is omg-ledger's own reading of the detail text**, not
  the engine's.
* ``budget.overruns`` — one entry per node over its budget: ``failed_for_budget`` (the
  engine failed it for its budget_usd: its terminal node_failed says "exceeded
  budget_usd", whether or not a .out exists) and/or ``spend_over_budget`` (its recorded
  spend is above its budget_usd).
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
at or after it (problems: seen at or after it). Status is live: a run's
ABANDONED/PAUSED status is probed now.
"""

from __future__ import annotations

import re
from datetime import datetime, tzinfo

import orjson
from sqlalchemy import and_, case, func, or_, select, true
from sqlalchemy.engine import Engine

from .. import schema
from ..status import ABANDONED, GATE, ORPHAN_WARNING, OTHER, PAUSED, SESSION_LIMIT
from ..timespec import parse_since
from ..units import format_instant, us_to_instant
from .problems import list_problems
from .runs import list_runs

PROVENANCES = ("verified", "approved", "self-reported", "exit-only")
WEAK_PROVENANCES = ("self-reported", "exit-only")
EVIDENCE_ANSWERS = ("attached", "declared", "disclosed", "none-detected")
NOT_RECORDED = "not recorded"
# omg-ledger's own reading of a judged FAIL's detail: the machinery, not the work.
_MACHINERY_DETAIL = re.compile(r"timed? ?out|timeout|cancel|halt|gate .*reject|rejected|killed|signal", re.I)


def _run_filter(since_us: int | None, billed_only: bool = True):
    """Runs in the window; a run seen in several homes counts once (its billed copy)."""
    r = schema.runs.c
    conditions = [r.billed] if billed_only else [true()]
    return conditions if since_us is None else [*conditions, r.last_event_at_us >= since_us]


def _node_rows(conn, since_us: int | None, *conditions) -> list:
    n, r, h = schema.nodes.c, schema.runs.c, schema.homes.c
    query = (select(h.label.label("home"), r.run_id, r.graph_name, n.node_id, n.verdict, n.provenance, n.judged,
                    n.detail, n.budget_nano_usd, n.cost_nano_usd, n.unknown_cost_invocations, n.budget_overrun)
             .select_from(schema.nodes.join(schema.runs, r.id == n.run_pk).join(schema.homes, h.id == r.home_id))
             .where(and_(*conditions, *_run_filter(since_us)))
             .order_by(r.run_id, h.label, n.node_id))
    return [row._mapping for row in conn.execute(query)]


def _node_ref(m) -> dict:
    return {"home": m["home"], "run_id": m["run_id"], "graph": m["graph_name"], "node_id": m["node_id"],
            "detail": m["detail"]}


def _provenance(conn, since_us: int | None) -> dict:
    """The PASS mix and the runs whose passes are all weak, counted in SQL (10,000 runs
    hold ~100,000 passes: they are aggregated where they live, not shipped to Python)."""
    n, r, h = schema.nodes.c, schema.runs.c, schema.homes.c
    joined = schema.nodes.join(schema.runs, r.id == n.run_pk).join(schema.homes, h.id == r.home_id)
    where = and_(n.verdict == "PASS", *_run_filter(since_us))
    mix = {name: 0 for name in (*PROVENANCES, "unknown")}
    passes = 0
    for provenance, count in conn.execute(select(n.provenance, func.count()).select_from(joined).where(where)
                                          .group_by(n.provenance)):
        name = provenance if provenance else "unknown"
        mix[name] = mix.get(name, 0) + count
        passes += count

    def counting(*values: str):
        return func.sum(case((n.provenance.in_(values), 1), else_=0))

    weak_rows = conn.execute(
        select(h.label, r.run_id, r.graph_name, func.count().label("passes"), counting("self-reported"),
               counting("exit-only"))
        .select_from(joined).where(where)
        .group_by(h.label, r.run_id, r.graph_name)
        .having(func.count() == counting(*WEAK_PROVENANCES))
        .order_by(r.run_id, h.label))
    weak = [{"home": home, "run_id": run_id, "graph": graph, "passes": total, "self_reported": int(sr),
             "exit_only": int(eo)} for home, run_id, graph, total, sr, eo in weak_rows]
    return {"passes": passes, "mix": mix, "runs_all_unverified": weak}


def _failures(conn, since_us: int | None) -> dict:
    fails = _node_rows(conn, since_us, schema.nodes.c.verdict == "FAIL")
    judged, machinery = [], []
    for m in fails:
        item = _node_ref(m)
        if m["judged"]:
            item["ours_likely_machinery"] = bool(_MACHINERY_DETAIL.search(m["detail"] or ""))
            judged.append(item)
        else:
            machinery.append(item)
    return {"judged": judged, "machinery": machinery,
            "note": "judged/machinery is the engine's `judged` field as written; ours_likely_machinery is "
                    "omg-ledger's own reading of the detail text (the engine also marks some timeouts, "
                    "halts and rejected gates judged)"}


def _budget(conn, since_us: int | None) -> dict:
    """One entry per node over its budget, however it shows: the engine failed it for its
    budget_usd (its terminal node_failed says so), or its recorded spend is above it."""
    n = schema.nodes.c
    rows = _node_rows(conn, since_us, or_(n.budget_overrun, and_(n.budget_nano_usd.is_not(None),
                                                                  n.cost_nano_usd > n.budget_nano_usd)))
    overruns = []
    for m in rows:
        spent = int(m["cost_nano_usd"] or 0)
        overruns.append({**_node_ref(m), "verdict": m["verdict"], "cost_nano_usd": spent,
                         "budget_nano_usd": m["budget_nano_usd"], "failed_for_budget": bool(m["budget_overrun"]),
                         "spend_over_budget": m["budget_nano_usd"] is not None and spent > m["budget_nano_usd"]})
    return {"overruns": overruns}


def _left_running(conn, home: str, run_id: str) -> list[str]:
    """The nodes an abandoned run's dead leg left running: interrupted (status.node_state)."""
    n, r, h = schema.nodes.c, schema.runs.c, schema.homes.c
    return list(conn.execute(
        select(n.node_id).select_from(schema.nodes.join(schema.runs, r.id == n.run_pk)
                                      .join(schema.homes, h.id == r.home_id))
        .where(h.label == home, r.run_id == run_id, n.state == "running").order_by(n.node_id)).scalars())


def _live(engine: Engine, conn, since_us: int | None) -> tuple[list, dict, int]:
    """ABANDONED and PAUSED runs now, however old (`since` does not hide them: the daily
    cron use must keep warning about an orphan). Also the killed calls of the abandoned
    runs in the window, which no stored count holds yet (status.unrecorded_attempts)."""
    live = list_runs(engine, statuses=(ABANDONED, PAUSED))
    abandoned = [{"home": r["home"], "run_id": r["run_id"], "graph": r["graph"], "last_event_at": r["last_event_at"],
                  "has_snapshot": r["has_snapshot"], "interrupted_nodes": _left_running(conn, r["home"], r["run_id"]),
                  "hint": r["hint"]}
                 for r in live if r["status"] == ABANDONED]
    in_window = {(r["home"], r["run_id"]) for r in list_runs(engine, since_us=since_us, statuses=(ABANDONED,))} \
        if since_us is not None else {(r["home"], r["run_id"]) for r in abandoned}
    killed = sum(r["nodes_interrupted"] for r in live
                 if r["status"] == ABANDONED and (r["home"], r["run_id"]) in in_window)
    paused: dict[str, list] = {GATE: [], SESSION_LIMIT: [], OTHER: []}
    for p in live:
        if p["status"] == PAUSED:
            paused[p["paused_for"]].append({"home": p["home"], "run_id": p["run_id"], "graph": p["graph"],
                                            "hint": p["hint"], "gate": p["gate"]})
    return abandoned, paused, killed


def _findings(conn, since_us: int | None) -> list:
    f, r, h = schema.findings.c, schema.runs.c, schema.homes.c
    query = (select(h.label.label("home"), r.run_id, f.kind, f.node_id, f.leg_ordinal, f.detail)
             .select_from(schema.findings.join(schema.runs, r.id == f.run_pk).join(schema.homes, h.id == r.home_id))
             .where(and_(*_run_filter(since_us, billed_only=False))).order_by(r.run_id, h.label, f.seq))
    return [dict(row._mapping) for row in conn.execute(query)]


def _problems(engine: Engine, since_us: int | None) -> list:
    """Open problems only: one whose cause a later sync found gone is resolved."""
    since_text = None if since_us is None else format_instant(us_to_instant(since_us))
    return [{k: m[k] for k in ("run_id", "path", "byte_offset", "reason", "first_seen_at", "last_seen_at")}
            for m in list_problems(engine, since_text=since_text)]


def _build_evidence(conn, since_us: int | None) -> dict:
    r, h, legs = schema.runs.c, schema.homes.c, schema.legs.c
    auto = select(legs.run_pk).where(legs.phase == "planning")
    query = (select(h.label.label("home"), r.run_id, r.graph_name, r.build_evidence_answer,
                    r.build_evidence_declared_by, r.build_evidence_signals_json)
             .select_from(schema.runs.join(schema.homes, h.id == r.home_id))
             .where(and_(or_(r.id.in_(auto), r.build_evidence_answer.is_not(None)), *_run_filter(since_us)))
             .order_by(r.run_id, h.label))
    runs = []
    counts = {name: 0 for name in (*EVIDENCE_ANSWERS, NOT_RECORDED)}
    for m in conn.execute(query):
        answer = m.build_evidence_answer or NOT_RECORDED
        counts[answer] = counts.get(answer, 0) + 1
        runs.append({"home": m.home, "run_id": m.run_id, "graph": m.graph_name, "answer": answer,
                     "declared_by": m.build_evidence_declared_by, "signals": orjson.loads(m.build_evidence_signals_json) if m.build_evidence_signals_json else []})
    return {"counts": counts, "runs": runs,
            "note": "declared and disclosed are different answers and are never summed"}


def _unknown_cost(conn, since_us: int | None) -> dict:
    c, r = schema.charges.c, schema.runs.c
    query = (select(r.runtime, r.snapshot_schema.is_(None).label("no_snapshot"), func.count().label("n"))
             .select_from(schema.charges.join(schema.runs, r.id == c.run_pk))
             .where(and_(c.cost_unknown, *_run_filter(since_us)))
             .group_by(r.runtime, r.snapshot_schema.is_(None)))
    by_runtime: dict[str, int] = {}
    for m in conn.execute(query):
        key = m.runtime or ("(no snapshot)" if m.no_snapshot else "(unknown)")
        by_runtime[key] = by_runtime.get(key, 0) + int(m.n)
    unrecorded = conn.execute(select(func.coalesce(func.sum(r.unrecorded_attempts), 0))
                              .where(and_(*_run_filter(since_us)))).scalar()
    return {"by_runtime": dict(sorted(by_runtime.items())), "total": sum(by_runtime.values()),
            "unrecorded_attempts": int(unrecorded or 0)}


def audit_report(engine: Engine, since: str | None = None, now: datetime | None = None,
                 zone: tzinfo | None = None) -> dict:
    """Every section of the audit, plus `needs_attention` and the reasons for it.
    ``zone``: where a --since date without an offset is read."""
    since_us = parse_since(since, now, zone)
    with engine.connect() as conn:
        report = {
            "since": None if since_us is None else format_instant(us_to_instant(since_us)),
            "provenance": _provenance(conn, since_us),
            "failures": _failures(conn, since_us),
            "budget": _budget(conn, since_us),
            "findings": _findings(conn, since_us),
            "problems": _problems(engine, since_us),
            "build_evidence": _build_evidence(conn, since_us),
            "unknown_cost": _unknown_cost(conn, since_us),
        }
        report["abandoned"], report["paused"], killed = _live(engine, conn, since_us)
    report["unknown_cost"]["unrecorded_attempts"] += killed
    report["orphan_warning"] = ORPHAN_WARNING
    reasons = []
    for label, count in (
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
