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
* ``budget`` — nodes with ``budget_overrun`` (a FAIL with its artifact on disk: the
  post-hoc budget check) and nodes whose recorded spend exceeds their ``budget_usd``.
* ``abandoned`` — runs ABANDONED right now (live lock probe), with the orphan warning
  and the recovery hint.
* ``paused`` — PAUSED runs, waiting at a gate (``gate_paused_at``) or for a session
  limit to reset (a leg ended ``session_limited``).
* ``findings`` (stream/snapshot disagreements) and ``problems`` (bad input recorded).
* ``build_evidence`` — per auto run (a run with a planning leg), the launch-time answer:
  attached, declared, disclosed, none-detected, or ``not recorded``. Declared and
  disclosed are counted separately and never summed (RUN-FEED.md).
* ``unknown_cost`` — invocations with no known price, per runtime; plus attempts the
  engine paid for but recorded nowhere (``unrecorded_attempts``).

``needs_attention`` is true when there is at least one ABANDONED run, PAUSED run,
budget overrun (either kind), finding or recorded problem. Unverified passes and
unpriced work are reported, but are facts about the work, not alarms.

``since`` limits every section to runs with an event at or after it (problems: seen at
or after it). Status is live: a run's ABANDONED/PAUSED status is probed now.
"""

from __future__ import annotations

import re
from datetime import datetime

import orjson

from ..backend import reading
from ..status import ABANDONED, ORPHAN_WARNING, PAUSED
from ..timespec import parse_since
from ..units import format_instant, us_to_instant
from .runs import list_runs

PROVENANCES = ("verified", "approved", "self-reported", "exit-only")
WEAK_PROVENANCES = ("self-reported", "exit-only")
EVIDENCE_ANSWERS = ("attached", "declared", "disclosed", "none-detected")
NOT_RECORDED = "not recorded"
# omg-ledger's own reading of a judged FAIL's detail: the machinery, not the work.
_MACHINERY_DETAIL = re.compile(r"timed? ?out|timeout|cancel|halt|gate .*reject|rejected|killed|signal", re.I)


_NODES = "FROM nodes n JOIN runs r ON r.id = n.run_pk JOIN homes h ON h.id = r.home_id"


def _run_filter(since_us: int | None, params: dict, billed_only: bool = True) -> list[str]:
    """Runs in the window; a run seen in several homes counts once (its billed copy)."""
    conditions = ["r.billed"] if billed_only else []
    if since_us is not None:
        conditions.append("r.last_event_at_us >= :since_us")
        params["since_us"] = since_us
    return conditions


def _where(conditions: list[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def _node_rows(reader, since_us: int | None, condition: str) -> list:
    params: dict = {}
    query = ("SELECT h.label AS home, r.run_id, r.graph_name, n.node_id, n.verdict, n.provenance, n.judged, "
             "n.detail, n.budget_nano_usd, n.cost_nano_usd, n.unknown_cost_invocations, n.budget_overrun "
             f"{_NODES}{_where([condition, *_run_filter(since_us, params)])} ORDER BY r.run_id, h.label, n.node_id")
    return list(reader.rows(query, params))


def _node_ref(m) -> dict:
    return {"home": m["home"], "run_id": m["run_id"], "graph": m["graph_name"], "node_id": m["node_id"],
            "detail": m["detail"]}


def _counting(*values: str) -> str:
    listed = ", ".join(f"'{v}'" for v in values)  # constants above, never user input
    return f"SUM(CASE WHEN n.provenance IN ({listed}) THEN 1 ELSE 0 END)"


def _provenance(reader, since_us: int | None) -> dict:
    """The PASS mix and the runs whose passes are all weak, from one pass over the
    nodes grouped per run in SQL (10,000 runs hold ~100,000 passes: they are counted
    where they live; only one row per run comes back)."""
    params: dict = {}
    per_run = ("SELECT n.run_pk AS run_pk, COUNT(*) AS passes, "
               + "".join(f"{_counting(name)} AS p{i}, " for i, name in enumerate(PROVENANCES))
               + "SUM(CASE WHEN n.provenance IS NULL OR n.provenance = '' THEN 1 ELSE 0 END) AS unknown "
               "FROM nodes n WHERE n.verdict = 'PASS' GROUP BY n.run_pk")
    counted = ", ".join(f"w.p{i}" for i in range(len(PROVENANCES)))
    rows = reader.tuples(
        f"SELECT h.label, r.run_id, r.graph_name, w.passes, w.unknown, {counted} FROM ({per_run}) w "
        f"JOIN runs r ON r.id = w.run_pk JOIN homes h ON h.id = r.home_id{_where(_run_filter(since_us, params))} "
        "ORDER BY r.run_id, h.label", params)
    totals = [0] * len(PROVENANCES)
    unknown = passes = others = 0
    weak = []
    self_reported, exit_only = PROVENANCES.index("self-reported"), PROVENANCES.index("exit-only")
    for home, run_id, graph, run_passes, run_unknown, *counts in rows:  # by position: ~10,000 rows
        counts = [int(count) for count in counts]
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        unknown += int(run_unknown)
        passes += run_passes
        others += run_passes - sum(counts) - int(run_unknown)
        if run_passes == counts[self_reported] + counts[exit_only]:
            weak.append({"home": home, "run_id": run_id, "graph": graph, "passes": run_passes,
                         "self_reported": counts[self_reported], "exit_only": counts[exit_only]})
    mix = {**dict(zip(PROVENANCES, totals, strict=True)), "unknown": unknown}
    if others:  # provenances this omg-ledger does not know (rare): named as written
        params = {}
        known = ", ".join(f"'{name}'" for name in PROVENANCES)
        for provenance, count in reader.rows(
                "SELECT n.provenance, COUNT(*) FROM nodes n JOIN runs r ON r.id = n.run_pk"
                + _where(["n.verdict = 'PASS'", f"n.provenance NOT IN ({known})", "n.provenance <> ''",
                          *_run_filter(since_us, params)]) + " GROUP BY n.provenance", params):
            mix[provenance] = mix.get(provenance, 0) + count
    return {"passes": passes, "mix": mix, "runs_all_unverified": weak}


def _failures(reader, since_us: int | None) -> dict:
    fails = _node_rows(reader, since_us, "n.verdict = 'FAIL'")
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


def _budget(reader, since_us: int | None) -> dict:
    rows = _node_rows(reader, since_us, "(n.budget_overrun OR (n.budget_nano_usd IS NOT NULL "
                                        "AND n.cost_nano_usd > n.budget_nano_usd))")
    overrun, over_budget = [], []
    for m in rows:
        item = {**_node_ref(m), "verdict": m["verdict"], "cost_nano_usd": int(m["cost_nano_usd"] or 0),
                "budget_nano_usd": m["budget_nano_usd"]}
        if m["budget_overrun"]:
            overrun.append(item)
        if m["budget_nano_usd"] is not None and (m["cost_nano_usd"] or 0) > m["budget_nano_usd"]:
            over_budget.append(item)
    return {"budget_overrun": overrun, "spend_over_budget": over_budget}


def _live(engine, reader, since_us: int | None) -> tuple[list, dict]:
    # list_runs pre-filters in SQL (open last leg, or paused): only those are probed.
    live = list_runs(engine, since_us=since_us, statuses=(ABANDONED, PAUSED))
    abandoned = [{"home": r["home"], "run_id": r["run_id"], "graph": r["graph"], "last_event_at": r["last_event_at"],
                  "has_snapshot": r["has_snapshot"], "hint": r["hint"]} for r in live if r["status"] == ABANDONED]
    paused_rows = [r for r in live if r["status"] == PAUSED]
    gate, session, other = [], [], []
    if paused_rows:
        params: dict = {}
        conditions = ["NOT r.last_leg_open", "r.last_outcome = 'paused'", *_run_filter(since_us, params)]
        facts = {
            (m["label"], m["run_id"]): m
            for m in reader.rows(
                "SELECT h.label, r.run_id, r.gate_paused_at, (SELECT COUNT(*) FROM legs l WHERE l.run_pk = r.id "
                f"AND l.session_limited) AS limited FROM runs r JOIN homes h ON h.id = r.home_id{_where(conditions)}",
                params)
        }
        for p in paused_rows:
            m = facts.get((p["home"], p["run_id"]))
            item = {"home": p["home"], "run_id": p["run_id"], "graph": p["graph"], "hint": p["hint"],
                    "gate": m["gate_paused_at"] if m is not None else None}
            if m is not None and m["limited"]:
                session.append(item)
            elif item["gate"]:
                gate.append(item)
            else:
                other.append(item)
    return abandoned, {"gate": gate, "session_limit": session, "other": other}


def _findings(reader, since_us: int | None) -> list:
    params: dict = {}
    query = ("SELECT h.label AS home, r.run_id, f.kind, f.node_id, f.leg_ordinal, f.detail "
             "FROM findings f JOIN runs r ON r.id = f.run_pk JOIN homes h ON h.id = r.home_id"
             f"{_where(_run_filter(since_us, params, billed_only=False))} ORDER BY r.run_id, h.label, f.seq")
    return [dict(row) for row in reader.rows(query, params)]


def _problems(reader, since_us: int | None) -> list:
    params: dict = {}
    where = ""
    if since_us is not None:
        where = " WHERE p.last_seen_at >= :since_at"
        params["since_at"] = format_instant(us_to_instant(since_us))
    query = ("SELECT r.run_id, p.path, p.byte_offset, p.reason, p.first_seen_at, p.last_seen_at "
             f"FROM problems p LEFT JOIN runs r ON r.id = p.run_pk{where} ORDER BY p.path, p.byte_offset")
    return [dict(row) for row in reader.rows(query, params)]


def _build_evidence(reader, since_us: int | None) -> dict:
    params: dict = {}
    conditions = ["(r.id IN (SELECT l.run_pk FROM legs l WHERE l.phase = 'planning') "
                  "OR r.build_evidence_answer IS NOT NULL)", *_run_filter(since_us, params)]
    query = ("SELECT h.label AS home, r.run_id, r.graph_name, r.build_evidence_answer, "
             "r.build_evidence_declared_by, r.build_evidence_signals_json "
             f"FROM runs r JOIN homes h ON h.id = r.home_id{_where(conditions)} ORDER BY r.run_id, h.label")
    runs = []
    counts = {name: 0 for name in (*EVIDENCE_ANSWERS, NOT_RECORDED)}
    for m in reader.rows(query, params):
        answer = m["build_evidence_answer"] or NOT_RECORDED
        counts[answer] = counts.get(answer, 0) + 1
        signals = m["build_evidence_signals_json"]
        runs.append({"home": m["home"], "run_id": m["run_id"], "graph": m["graph_name"], "answer": answer,
                     "declared_by": m["build_evidence_declared_by"],
                     "signals": orjson.loads(signals) if signals else []})
    return {"counts": counts, "runs": runs,
            "note": "declared and disclosed are different answers and are never summed"}


def _unknown_cost(reader, since_us: int | None) -> dict:
    params: dict = {}
    query = ("SELECT r.runtime, (r.snapshot_schema IS NULL) AS no_snapshot, COUNT(*) AS n "
             "FROM charges c JOIN runs r ON r.id = c.run_pk"
             f"{_where(['c.cost_unknown', *_run_filter(since_us, params)])} "
             "GROUP BY r.runtime, (r.snapshot_schema IS NULL)")
    by_runtime: dict[str, int] = {}
    for m in reader.rows(query, params):
        key = m["runtime"] or ("(no snapshot)" if m["no_snapshot"] else "(unknown)")
        by_runtime[key] = by_runtime.get(key, 0) + int(m["n"])
    params = {}
    unrecorded = reader.scalar("SELECT COALESCE(SUM(r.unrecorded_attempts), 0) FROM runs r"
                               f"{_where(_run_filter(since_us, params))}", params)
    return {"by_runtime": dict(sorted(by_runtime.items())), "total": sum(by_runtime.values()),
            "unrecorded_attempts": int(unrecorded or 0)}


def audit_report(engine, since: str | None = None, now: datetime | None = None) -> dict:
    """Every section of the audit, plus `needs_attention` and the reasons for it."""
    since_us = parse_since(since, now)
    with reading(engine) as reader:
        report = {
            "since": None if since_us is None else format_instant(us_to_instant(since_us)),
            "provenance": _provenance(reader, since_us),
            "failures": _failures(reader, since_us),
            "budget": _budget(reader, since_us),
            "findings": _findings(reader, since_us),
            "problems": _problems(reader, since_us),
            "build_evidence": _build_evidence(reader, since_us),
            "unknown_cost": _unknown_cost(reader, since_us),
        }
        report["abandoned"], report["paused"] = _live(engine, reader, since_us)
    report["orphan_warning"] = ORPHAN_WARNING
    reasons = []
    for label, count in (
        ("ABANDONED run(s)", len(report["abandoned"])),
        ("PAUSED run(s)", sum(len(v) for v in report["paused"].values())),
        ("budget overrun(s)", len({(x["home"], x["run_id"], x["node_id"]) for k in report["budget"].values()
                                   for x in k})),
        ("reconciliation finding(s)", len(report["findings"])),
        ("recorded input problem(s)", len(report["problems"])),
    ):
        if count:
            reasons.append(f"{count} {label}")
    report["needs_attention"] = bool(reasons)
    report["attention"] = reasons
    return report
