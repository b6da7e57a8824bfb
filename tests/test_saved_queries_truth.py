"""The saved queries and the notebook views against the run files read by hand.

Every expectation here is computed from the files on disk (the 25-run corpus, the
305-run scale corpus, a whole copy of the corpus in a second home, and a runner
invocation stream) by the run-feed contract and README's rules — legs, executions,
charges, nodes, the status without a live lock — never from the ledger. Each saved
query's rows and each view's documented columns must say what the header and DOCS say,
on SQLite and PostgreSQL alike, in the same order where the query orders.
(Totals, `cost` groupings and `spend_by_graph` are tests/test_money_truth.py's.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson
import pytest
from sqlalchemy import text

from omg_ledger.db import open_ledger
from omg_ledger.reports.runs import list_runs
from omg_ledger.reports.sql import run_saved
from omg_ledger.sync import Home, sync

from .builders import age_tree, epoch_us, nanos
from .conftest import CORPUS

SCALE = CORPUS.parent / "corpus-scale"
TOKENS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
TERMINALS = {"node_passed": "PASS", "node_failed": "FAIL"}
# The engine's post-hoc budget failure, its whole detail (README "How money is counted").
BUDGET_MESSAGE = re.compile(r'node ".*" exceeded budget_usd: \$')
RUN_ROW = re.compile(r"^(\d{8}-\d{6}\.\d{9}-\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)$")


# -- the run files, read by hand --------------------------------------------------------


def utc_text(ts: str) -> str:
    """The engine's RFC 3339 (Z, up to 9 fraction digits) as the views write times: µs, cut."""
    second, _, fraction = ts[:-1].partition(".")
    return f"{second}.{(fraction + '000000')[:6]}Z"


def nanos_of_sum(usd: object) -> int:
    """A float the engine summed (a record folding several rounds): to the nearest nano-dollar."""
    return int((Decimal(str(usd)) * 10**9).to_integral_value())


def tokens(usage: dict | None) -> tuple[int, int, int, int]:
    usage = usage or {}
    return tuple(int(usage.get(name) or 0) for name in TOKENS)  # type: ignore[return-value]


def accounted(data: dict) -> bool:
    return "cost_usd" in data or bool(data.get("cost_unknown"))


@dataclass
class Leg:
    ordinal: int
    phase: str  # planning | run
    kind: str
    open: bool = True
    outcome: str | None = None


@dataclass
class Execution:
    leg: int
    leg_kind: str | None
    node: str
    seq: int
    round: int
    started_at: str | None
    outcome: str | None = None
    ended_at: str | None = None
    retries: int = 0
    provenance: str | None = None
    session_id: str | None = None
    detail: str | None = None
    cost: int | None = None
    cost_unknown: bool = False
    unrecorded: int = 0


@dataclass
class Charge:
    kind: str
    leg: int | None
    leg_kind: str | None
    node: str | None
    round: int | None
    at: str | None
    cost: int | None
    tokens: tuple[int, int, int, int]
    source_file: str
    source_line: int | None


@dataclass
class Run:
    run_id: str
    home: str
    dir_path: str
    snapshot: dict | None
    legs: list[Leg] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    charges: list[Charge] = field(default_factory=list)
    terminals: dict[str, Execution] = field(default_factory=dict)  # node -> latest terminal's execution
    stream_nodes: set[str] = field(default_factory=set)
    first_ts: str | None = None
    last_ts: str | None = None
    last_outcome: str | None = None
    last_detail: str | None = None
    artifacts: set[str] = field(default_factory=set)
    failed_outputs: set[str] = field(default_factory=set)

    @property
    def graph(self) -> dict:
        return (self.snapshot or {}).get("graph") or {}

    @property
    def graph_nodes(self) -> dict[str, dict]:
        return {n["id"]: n for n in self.graph.get("nodes") or []}

    @property
    def records(self) -> dict[str, dict]:
        return (self.snapshot or {}).get("nodes") or {}

    def leg(self, ordinal: int) -> Leg:
        return self.legs[ordinal - 1]


def read_run(run_dir: Path, home: str) -> Run:
    stream = run_dir / "events.jsonl"
    data = stream.read_bytes() if stream.exists() else b""
    # A last line without its newline is not there yet (contract: crash-safe appends).
    lines = data.split(b"\n")[:-1]
    snapshot = json.loads((run_dir / "state.json").read_text()) if (run_dir / "state.json").exists() else None
    run = Run(run_dir.name, home, str(run_dir), snapshot)
    run.artifacts = {p.name for p in run_dir.glob("*.out")}
    run.failed_outputs = {p.name for p in (run_dir / "failed").glob("*.out")} if (run_dir / "failed").is_dir() \
        else set()
    open_leg: Leg | None = None
    last_run_leg: Leg | None = None
    current: dict[tuple[int, str], Execution] = {}
    counts: dict[tuple[int, str], int] = defaultdict(int)

    def charge(kind, ev, line_no, leg, node=None, round_=None) -> Charge:
        unknown = bool(ev.get("cost_unknown"))
        c = Charge(kind, leg.ordinal if leg else None, leg.kind if leg else None, node, round_, utc_text(ev["ts"]),
                   None if unknown else nanos(ev.get("cost_usd") or 0), tokens(ev.get("usage")), "events.jsonl",
                   line_no)
        run.charges.append(c)
        return c

    def new_execution(node, ev, started) -> Execution:
        ordinal = open_leg.ordinal if open_leg else 0
        counts[(ordinal, node)] += 1
        x = Execution(ordinal, open_leg.kind if open_leg else None, node, counts[(ordinal, node)],
                      int(ev.get("round") or 0), utc_text(ev["ts"]) if started else None,
                      session_id=ev.get("session_id") if started else None)
        run.executions.append(x)
        current[(ordinal, node)] = x
        return x

    def execution(node, ev) -> Execution:
        x = current.get((open_leg.ordinal if open_leg else 0, node))
        return x if x is not None and x.outcome is None else new_execution(node, ev, started=False)

    def pay(x: Execution, c: Charge) -> None:
        if c.cost is not None:
            x.cost = (x.cost or 0) + c.cost
        x.cost_unknown = x.cost_unknown or c.cost is None

    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        ev = json.loads(line)
        run.first_ts = run.first_ts or ev["ts"]
        run.last_ts = ev["ts"]
        kind = ev["event"]
        node = ev.get("node_id")
        if node is not None:
            run.stream_nodes.add(node)
        if kind == "run_started":
            planning = ev.get("phase") == "planning"
            committed = None
            if open_leg is not None:
                # The unphased run_started commits a plan; any other closes a leg that was killed.
                open_leg.open = False
                if open_leg.phase == "planning" and not planning:
                    open_leg.outcome, committed = "planned", open_leg
            if planning:
                leg_kind = "planning"
            elif last_run_leg is None:
                leg_kind = "initial"
            else:
                leg_kind = {"paused": "resume", "failed": "retry", None: "after-abandoned"}.get(
                    last_run_leg.outcome, "rerun")
            open_leg = Leg(len(run.legs) + 1, "planning" if planning else "run", leg_kind)
            run.legs.append(open_leg)
            if not planning:
                last_run_leg = open_leg
            if accounted(ev):
                charge("planning", ev, line_no, committed or open_leg)
        elif kind == "run_finished":
            leg = open_leg
            assert leg is not None, run_dir  # the real engine never writes one outside a leg
            leg.open, leg.outcome = False, ev.get("outcome")
            run.last_outcome, run.last_detail = ev.get("outcome"), ev.get("detail")
            open_leg = None
            if accounted(ev):
                charge("refused" if leg.phase == "planning" else "other", ev, line_no, leg)
        elif kind == "node_started":
            new_execution(node, ev, started=True)
        elif kind == "node_retried":
            x = execution(node, ev)
            feedback = int(ev.get("retries") or 0) == 0 and int(ev.get("round") or 0) >= 1
            if accounted(ev):
                # The paid call is the execution that judged: its round, not the one beginning.
                pay(x, charge("feedback" if feedback else "retry", ev, line_no, run.leg(x.leg) if x.leg else None,
                              node, x.round))
            elif not feedback:
                x.unrecorded += 1  # a plain retry: the failed attempt's spend is written nowhere
            if feedback:
                x.outcome, x.ended_at = "FEEDBACK", utc_text(ev["ts"])
                x.detail = ev.get("detail", x.detail)
            else:
                x.retries = int(ev.get("retries") or 0)
                x.session_id = ev.get("session_id") or x.session_id
        elif kind in TERMINALS:
            x = execution(node, ev)
            if "round" in ev:
                x.round = int(ev["round"])
            x.retries = int(ev.get("retries") or 0)
            x.provenance = ev.get("provenance")
            x.session_id = ev.get("session_id") or x.session_id
            if accounted(ev):
                pay(x, charge("node", ev, line_no, run.leg(x.leg) if x.leg else None, node, x.round))
            x.outcome, x.ended_at = TERMINALS[kind], utc_text(ev["ts"])
            x.detail = ev.get("detail", x.detail)
            run.terminals[node] = x
        elif kind == "gate_paused":
            x = execution(node, ev)
            x.outcome, x.ended_at = "PAUSED", utc_text(ev["ts"])
    if (run_dir / "assess.json").exists():
        assess = json.loads((run_dir / "assess.json").read_text())
        unknown = bool(assess.get("assess_cost_unknown"))
        # It belongs to no leg (it runs after the cycle's last); its leg_kind names it.
        run.charges.append(Charge("assessment", None, "assessment", None, None,
                                  utc_text(run.last_ts) if run.last_ts else None,
                                  None if unknown else nanos(assess["assess_cost_usd"]), tokens(assess.get("usage")),
                                  "assess.json", None))
    return run


def read_home(home: Path, label: str) -> dict[str, Run]:
    return {d.name: read_run(d, label) for d in sorted((home / "runs").iterdir())}


# -- what each view and query should say, from those readings ---------------------------


def last_leg_open(run: Run) -> bool:
    return bool(run.legs) and run.legs[-1].open


def ledger_state(run: Run) -> str:
    """README "Status" without a live lock: an open last leg is one of RUNNING, PLANNING or
    ABANDONED (OPEN); a paused leg PAUSED; a passed run PASS when every graph node's
    record in state.json is PASS; else FAIL. A directory with no leg and no snapshot
    has said nothing yet."""
    if not run.legs and run.snapshot is None:
        return "NOT-KNOWN-YET"
    if last_leg_open(run):
        return "OPEN"
    if run.last_outcome == "paused":
        return "PAUSED"
    graph_nodes = run.graph_nodes
    if run.snapshot is not None and graph_nodes and all(
            (run.records.get(n) or {}).get("verdict") == "PASS" for n in graph_nodes):
        return "PASS"
    return "FAIL"


def money(charges) -> dict:
    charges = list(charges)
    return {
        "cost_nano_usd": sum(c.cost or 0 for c in charges),
        "invocations": len(charges),
        "unknown_cost_invocations": sum(c.cost is None for c in charges),
        **{name: sum(c.tokens[i] for c in charges) for i, name in enumerate(TOKENS)},
    }


def node_names(run: Run) -> list[str]:
    return sorted({*run.graph_nodes, *run.records, *run.stream_nodes})


def node_state(run: Run, node: str, verdict: str | None) -> str:
    """The stream's word for a node (contract: key liveness off events.jsonl): its last
    execution's terminal settles it, a gate_paused pauses it, no terminal in the open
    leg is running, in a closed one unfinished; never started is pending."""
    mine = [x for x in run.executions if x.node == node]
    if not mine:
        return "settled" if verdict else "pending"
    last = mine[-1]
    leg_open = bool(last.leg) and run.leg(last.leg).open
    if last.outcome in ("PASS", "FAIL"):
        return "settled"
    if last.outcome == "PAUSED":
        return "paused"
    if verdict and not leg_open:
        return "settled"
    return "running" if leg_open else "unfinished"


def unrecorded(run: Run, node: str) -> int:
    """Attempts paid for whose spend is written nowhere: a plain retry's failed attempt, and
    a call whose leg closed without its terminal (a session limit, a killed leg followed by
    another). One in the still-open leg is in flight as far as the files say."""
    total = 0
    for x in run.executions:
        if x.node != node:
            continue
        total += x.unrecorded
        if x.outcome is None and x.started_at and x.leg and not run.leg(x.leg).open:
            total += 1
    return total


def artifact(node: str) -> str:
    return node.replace("/", "~") + ".out"


def expected_nodes(run: Run) -> list[dict]:
    rows = []
    for node in node_names(run):
        spec, record = run.graph_nodes.get(node), run.records.get(node)
        latest = run.terminals.get(node)
        verdict = latest.outcome if latest else None
        charges = [c for c in run.charges if c.node == node]
        budget = (record or {}).get("budget_usd", (spec or {}).get("budget_usd"))
        budget = nanos(budget) if isinstance(budget, int | float) and budget > 0 else None
        judged = bool(record.get("judged")) if record is not None else None
        cost = money(charges)["cost_nano_usd"]
        rows.append({
            "home": run.home, "run_id": run.run_id, "graph": run.graph.get("name"), "runtime": runtime(run),
            "node": node, "node_type": (spec or {}).get("type"), "in_graph": int(spec is not None),
            "verdict": verdict, "verdict_source": "stream" if latest else None,
            "state": node_state(run, node, verdict), "provenance": latest.provenance if latest else None,
            "judged": None if judged is None else int(judged),
            "round": latest.round if latest else None, "retries": latest.retries if latest else None,
            "cost_nano_usd": cost, "cost_usd": cost / 1e9,
            "invocations": len(charges), "unknown_cost_invocations": sum(c.cost is None for c in charges),
            "unrecorded_attempts": unrecorded(run, node),
            "budget_nano_usd": budget, "budget_usd": None if budget is None else budget / 1e9,
            "over_budget": int(budget is not None and cost > budget),
            "budget_overrun": int(verdict == "FAIL" and not judged and bool(BUDGET_MESSAGE.match(latest.detail or ""))),
            "has_artifact": int(artifact(node) in run.artifacts),
            "has_failed_output": int(artifact(node) in run.failed_outputs),
            "detail": latest.detail if latest else None,
        })
    return rows


def runtime(run: Run) -> str | None:
    return (run.snapshot.get("runtime") or "claude") if run.snapshot is not None else None


def expected_run(run: Run) -> dict:
    snapshot = run.snapshot or {}
    goal, evidence, gate = snapshot.get("goal") or {}, snapshot.get("build_evidence") or {}, snapshot.get("gate") or {}
    graph_nodes = run.graph_nodes
    sums = money(run.charges)
    engine_total = None
    if run.snapshot is not None:
        # The engine's own total: state.json's priced records plus the planner's call.
        engine_total = nanos(snapshot.get("planning_cost_usd") or 0) + sum(
            nanos_of_sum(r.get("cost_usd") or 0) for r in run.records.values() if not r.get("cost_unknown"))
    return {
        "home": run.home, "run_id": run.run_id, "graph": run.graph.get("name"),
        "graph_version": run.graph.get("version"), "runtime": runtime(run), "ledger_state": ledger_state(run),
        "started_at": run.first_ts and utc_text(run.first_ts), "started_at_us": run.first_ts and epoch_us(run.first_ts),
        "last_event_at": run.last_ts and utc_text(run.last_ts), "last_event_at_us": run.last_ts and epoch_us(run.last_ts),
        "legs": sum(leg.phase == "run" for leg in run.legs),
        "nodes_total": len(graph_nodes) if run.snapshot is not None else None,
        "nodes_passed": sum((run.records.get(n) or {}).get("verdict") == "PASS" for n in graph_nodes)
        if run.snapshot is not None else None,
        **sums, "cost_usd": sums["cost_nano_usd"] / 1e9,
        "cost_is_lower_bound": int(sums["unknown_cost_invocations"] > 0),
        "unrecorded_attempts": sum(unrecorded(run, n) for n in node_names(run)),
        "goal_first_run_id": goal.get("first_run_id"), "goal_cycle": goal.get("cycle"),
        "goal_max_cycles": goal.get("max_cycles"), "goal_text": goal.get("text"),
        "build_evidence_answer": evidence.get("answer"), "build_evidence_declared_by": evidence.get("declared_by"),
        "gate_paused_at": gate.get("paused_at") or None, "last_outcome": run.last_outcome,
        "last_detail": run.last_detail, "engine_snapshot_cost_nano_usd": engine_total, "gone": 0,
        "dir_path": run.dir_path,
    }


def expected_charges(run: Run) -> list[dict]:
    return [{
        "home": run.home, "run_id": run.run_id, "graph": run.graph.get("name"), "runtime": runtime(run),
        "kind": c.kind, "leg": c.leg, "leg_kind": c.leg_kind, "node": c.node, "round": c.round, "at": c.at,
        "at_us": epoch_us(c.at) if c.at else None, "cost_nano_usd": c.cost,
        "cost_usd": None if c.cost is None else c.cost / 1e9, "cost_unknown": int(c.cost is None),
        **dict(zip(TOKENS, c.tokens, strict=True)), "source_file": c.source_file, "source_line": c.source_line,
    } for c in run.charges]


def expected_rounds(run: Run) -> list[dict]:
    return [{
        "home": run.home, "run_id": run.run_id, "graph": run.graph.get("name"), "runtime": runtime(run),
        "leg": x.leg, "leg_kind": x.leg_kind, "node": x.node, "seq": x.seq, "round": x.round, "outcome": x.outcome,
        "retries": x.retries, "provenance": x.provenance, "started_at": x.started_at, "ended_at": x.ended_at,
        "cost_nano_usd": x.cost, "cost_usd": None if x.cost is None else x.cost / 1e9,
        "cost_unknown": int(x.cost_unknown), "session_id": x.session_id, "detail": x.detail,
    } for x in run.executions]


# -- a runner invocation stream, and its pairing by hand --------------------------------

SUCCESS = {"DONE", "GO", "SUCCESS", "OBSERVED", "READY", "ACCEPT"}
JUDGED = {"BLOCKED", "NEEDS_DEEP", "NO-GO", "NEEDS_CONFIRMATION"}


def runner_lines() -> list[dict]:
    """One runner's stream as the seed describes it (start/end per role invocation, recover
    closing a killed supervisor's starts): every status class, null milestones, a thrown
    end, a timestamps-only duration, a recover, an end whose start was lost, a start with
    no end yet, across two UTC days."""
    day1, day2 = "2026-11-28T23:5", "2026-11-29T00:0"
    return [
        {"ts": f"{day1}0:00.000Z", "role": "bulldozer", "milestone": "M1", "event": "start"},
        {"ts": f"{day1}0:01.500Z", "role": "zen", "milestone": "M1", "event": "start"},
        {"ts": f"{day1}0:03.250Z", "role": "bulldozer", "milestone": "M1", "event": "start"},
        {"ts": f"{day1}1:00.000Z", "role": "bulldozer", "milestone": "M1", "event": "end", "status": "DONE",
         "duration_ms": 60000},
        {"ts": f"{day1}1:30.000Z", "role": "zen", "milestone": "M1", "event": "end", "status": "NO-GO",
         "duration_ms": 88500},
        {"ts": f"{day1}2:00.000Z", "role": "bulldozer", "milestone": "M1", "event": "end", "status": "BLOCKED",
         "duration_ms": 116750},
        {"ts": f"{day1}3:00.000Z", "role": "piledriver", "milestone": None, "event": "start"},
        {"ts": f"{day1}3:04.000Z", "role": "piledriver", "milestone": None, "event": "end", "status": "SUCCESS",
         "duration_ms": 4000},
        {"ts": f"{day1}4:00.000Z", "role": "navi", "milestone": None, "event": "start"},
        {"ts": f"{day1}4:02.125Z", "role": "navi", "milestone": None, "event": "end", "status": "OBSERVED",
         "duration_ms": None},
        {"ts": f"{day1}5:00.000Z", "role": "jaguar", "milestone": "M2", "event": "start"},
        {"ts": f"{day1}5:09.000Z", "role": "jaguar", "milestone": "M2", "event": "end", "status": "TIMEOUT",
         "duration_ms": 9000},
        {"ts": f"{day1}6:00.000Z", "role": "puma", "milestone": "M2", "event": "end", "status": "ENOENT",
         "duration_ms": 12},
        {"ts": f"{day1}8:00.000Z", "role": "bulldozer", "milestone": "M2", "event": "start"},
        {"ts": f"{day1}8:30.000Z", "role": "jaguar", "milestone": "M2", "event": "start"},
        {"ts": f"{day2}0:10.000Z", "role": None, "milestone": "M2", "event": "end", "status": "INVOCATION_FAILURE",
         "duration_ms": None},
        {"ts": f"{day2}1:00.000Z", "role": None, "milestone": "M2", "event": "end", "status": "INVOCATION_FAILURE",
         "duration_ms": None},
        {"ts": f"{day2}2:00.000Z", "role": "strix-halo", "milestone": "M3", "event": "start"},
        {"ts": f"{day2}2:07.000Z", "role": "strix-halo", "milestone": "M3", "event": "end", "status": "ACCEPT",
         "duration_ms": 7000},
        {"ts": f"{day2}3:00.000Z", "role": "zen", "milestone": "M3", "event": "start"},
        {"ts": f"{day2}3:01.000Z", "role": "zen", "milestone": "M3", "event": "end", "status": "Error",
         "duration_ms": 1000},
        {"ts": f"{day2}4:00.000Z", "role": "bobcat", "milestone": "M3", "event": "start"},
    ]


def pair_invocations(path: str, lines: list[dict]) -> list[dict]:
    """README "Runner role invocations": an end closes the oldest open start of its (role,
    milestone); a recover end (role null) closes every start still open; a start left open
    is dangling, an end with nothing to close unmatched."""
    found = []  # (sort line, row)
    open_starts: list[tuple[int, dict]] = []

    def row(outcome, start_no, start, end_no, end) -> dict:
        started, ended = (start or {}).get("ts"), (end or {}).get("ts")
        reported = (end or {}).get("duration_ms")
        if outcome in ("recovered", "unmatched_end"):
            # recover reports none; an end whose start was lost is kept without one
            # (tests/test_invocation_sync.py::test_end_without_start).
            duration, source = None, None
        elif reported is not None:
            duration, source = reported, "reported"
        elif started and ended:
            duration, source = (epoch_us(ended) - epoch_us(started)) // 1000, "timestamps"
        else:
            duration, source = None, None
        status = (end or {}).get("status")
        return {
            "path": path, "role": (start or end)["role"], "milestone": (start or end)["milestone"],
            "outcome": outcome, "status": status,
            "status_class": None if status is None else
            "success" if status in SUCCESS else "judged" if status in JUDGED else "failure",
            "started_at": started and utc_text(started), "started_at_us": started and epoch_us(started),
            "ended_at": ended and utc_text(ended), "ended_at_us": ended and epoch_us(ended),
            "at_us": epoch_us(started or ended), "duration_ms": duration, "duration_source": source,
            "start_line": start_no, "end_line": end_no,
        }

    for no, line in enumerate(lines, 1):
        if line["event"] == "start":
            open_starts.append((no, line))
        elif line["role"] is None:
            if not open_starts:
                found.append((no, row("unmatched_end", None, None, no, line)))
            for start_no, start in open_starts:
                found.append((start_no, row("recovered", start_no, start, no, line)))
            open_starts = []
        else:
            match = next((i for i, (_, s) in enumerate(open_starts)
                          if (s["role"], s["milestone"]) == (line["role"], line["milestone"])), None)
            if match is None:
                found.append((no, row("unmatched_end", None, None, no, line)))
            else:
                start_no, start = open_starts.pop(match)
                found.append((start_no, row("paired", start_no, start, no, line)))
    found += [(no, row("dangling", no, start, None, None)) for no, start in open_starts]
    return [{**r, "seq": seq} for seq, (_, r) in enumerate(sorted(found, key=lambda f: f[0]))]


# -- the homes and the ledgers ------------------------------------------------------------

TS = re.compile(rb'"ts":"([^"]+)"')


def _ns(ts: str) -> int:
    return epoch_us(ts[:-1].partition(".")[0] + "Z") * 1000 + int((ts[:-1].partition(".")[2] + "0" * 9)[:9])


def _rfc3339nano(ns: int) -> str:
    second = datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{ns % 10**9:09d}".rstrip("0")  # Go's RFC3339Nano drops trailing zeros
    return f"{second}.{fraction}Z" if fraction else f"{second}Z"


def shifted_copy(run_dir: Path, home: Path, start: datetime) -> None:
    """``run_dir`` as if it had started at ``start``: every ts moved by one offset, the run
    id minted from its new first instant (README #12); every other byte as the engine wrote it."""
    data = (run_dir / "events.jsonl").read_bytes()
    first = TS.search(data).group(1).decode()
    delta = int(start.timestamp()) * 10**9 + start.microsecond * 1000 - _ns(first)
    old = run_dir.name
    new = datetime.fromtimestamp((_ns(first) + delta) // 10**9, UTC).strftime("%Y%m%d-%H%M%S") + old[15:]
    target = home / "runs" / new
    shutil.copytree(run_dir, target)
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o700 if name in dirs else 0o600)
    data = TS.sub(lambda m: b'"ts":"' + _rfc3339nano(_ns(m.group(1).decode()) + delta).encode() + b'"', data)
    (target / "events.jsonl").write_bytes(data.replace(old.encode(), new.encode()))
    for name in ("state.json", "assess.json"):
        if (target / name).exists():
            (target / name).write_bytes((target / name).read_bytes().replace(old.encode(), new.encode()))


def backup_copy(home: Path, target: Path) -> None:
    """Every run of ``home`` again in another home: every other one whole, the rest as a
    backup taken mid-run (the stream cut after half its lines, no assess.json yet)."""
    shutil.copytree(home / "runs", target / "runs")
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o700 if name in dirs else 0o600)
    for n, run_dir in enumerate(sorted((target / "runs").iterdir())):
        if n % 2:
            lines = (run_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
            (run_dir / "events.jsonl").write_bytes(b"".join(lines[:max(1, len(lines) // 2)]))
            (run_dir / "assess.json").unlink(missing_ok=True)


@dataclass
class World:
    runs: dict[str, Run]  # run id -> its billed copy, read by hand
    invocations: list[dict]
    truth_status: dict[str, str]  # the engine's own `runs list`, both corpora
    engines: dict[str, object]
    homes: list[tuple[str, Path]]
    stream: Path
    root: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not (SCALE / "home.tar.gz").exists():
        pytest.fail(f"the scale corpus is missing at {SCALE}")
    root = tmp_path_factory.mktemp("truth")
    scale, shifted, backup = root / "scale", root / "shifted", root / "backup"
    with tarfile.open(SCALE / "home.tar.gz") as archive:
        archive.extractall(scale, filter="data")
    (shifted / "runs").mkdir(parents=True)
    truth = {}
    for path in (CORPUS / "truth" / "runs-list.txt", SCALE / "truth-runs-list.txt"):
        for line in path.read_text().splitlines():
            match = RUN_ROW.match(line)
            if match:
                truth[match.group(1)] = match.group(2)
    assert len(truth) == 330
    picked = sorted((scale / "runs").iterdir())[::8]
    picked += [d for d in sorted((scale / "runs").iterdir()) if truth[d.name] == "ABANDONED" and d not in picked][:2]
    for i, run_dir in enumerate(picked):
        start = datetime(2026, 12, 1, tzinfo=UTC) + (i * 11 + i % 5) * (datetime(2026, 1, 1, 1, 7, tzinfo=UTC)
                                                                        - datetime(2026, 1, 1, tzinfo=UTC))
        if i % 3 == 0:  # a second before midnight: the run's charges fall on two days
            start = start.replace(hour=23, minute=59, second=59, microsecond=0)
        shifted_copy(run_dir, shifted, start)
    backup_copy(CORPUS / "home", backup)
    for home in (scale, shifted, backup):
        age_tree(home)
    stream = root / "runner" / "events.jsonl"
    stream.parent.mkdir()
    lines = runner_lines()
    stream.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    runs = {**read_home(CORPUS / "home", "corpus"), **read_home(scale, "scale"), **read_home(shifted, "shifted")}
    homes = [("corpus", CORPUS / "home"), ("scale", scale), ("shifted", shifted), ("backup", backup)]
    world = World(runs, pair_invocations(str(stream.resolve()), lines), truth, {}, homes, stream, root)
    yield world
    for engine in world.engines.values():
        engine.dispose()


def engine_for(world: World, backend: str, request):
    """The ledger of every home and the runner stream on ``backend``, synced once."""
    if backend not in world.engines:
        if backend == "sqlite":
            url = f"sqlite:///{world.root / 'ledger.sqlite'}"
        else:
            url = request.getfixturevalue("pg_server").create_database(f"truth_{os.getpid()}")
        engine = open_ledger(url)
        # The originals first: each run of the backup is then a copy of a run already seen.
        first = sync(engine, [Home.from_path(str(path), label) for label, path in world.homes[:3]],
                     invocation_files=[str(world.stream)])
        label, path = world.homes[3]
        second = sync(engine, [Home.from_path(str(path), label)])
        assert first.problems == [] and second.problems == [], (first.problems, second.problems)
        world.engines[backend] = engine
    return world.engines[backend]


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def ledger(request, world):
    return engine_for(world, request.param, request)


def view(engine, name: str) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(text(f"SELECT * FROM {name}"))]


def saved(engine, name: str, **params: str) -> list[dict]:
    return run_saved(engine, name, params).as_dict()["rows"]


def normal(value: object) -> object:
    """A cell as both backends compare: booleans and exact integers as ints, floats to 12 digits."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return round(value, 12)
    return value


def normal_rows(rows: list[dict]) -> list[dict]:
    return [{k: normal(v) for k, v in row.items()} for row in rows]


def keyed(rows: list[dict], *key: str) -> dict:
    out = {}
    for row in normal_rows(rows):
        k = tuple(row[name] for name in key)
        assert k not in out, k
        out[k] = row
    return out


def billed(world: World) -> list[Run]:
    return list(world.runs.values())


def differences(got: dict, expected: dict) -> list:
    assert set(got) == set(expected), sorted(set(got) ^ set(expected))[:5]
    return [(k, col, got[k][col], v) for k, row in expected.items() for col, v in row.items()
            if got[k].get(col, "<no column>") != normal(v)][:10]


# -- the views --------------------------------------------------------------------------


def test_v_runs_says_what_each_column_documents(ledger, world):
    got = keyed(view(ledger, "v_runs"), "run_id")
    expected = {(r.run_id,): expected_run(r) for r in billed(world)}
    assert set(next(iter(got.values()))) == set(next(iter(expected.values())))  # every column checked
    assert differences(got, expected) == []
    # A run copied into a second home is one row, its billed copy's (the backup holds less or is later).
    assert {row["home"] for row in got.values()} == {"corpus", "scale", "shifted"}
    # ledger_state is the engine's own status wherever no lock is needed: an open leg (no
    # process holds a lock here) is ABANDONED, which the view can only call OPEN.
    engine_word = {"ABANDONED": "OPEN", "PAUSED": "PAUSED", "PASS": "PASS", "FAIL": "FAIL"}
    assert {run_id: got[(run_id,)]["ledger_state"] for run_id in world.truth_status} == \
        {run_id: engine_word[status] for run_id, status in world.truth_status.items()}


def test_v_nodes_says_what_each_column_documents(ledger, world):
    got = keyed(view(ledger, "v_nodes"), "run_id", "node")
    expected = {(n["run_id"], n["node"]): n for r in billed(world) for n in expected_nodes(r)}
    assert set(next(iter(got.values()))) == set(next(iter(expected.values())))
    assert differences(got, expected) == []
    # What each rule rests on is in the data: overruns with and without a .out, spend over
    # a budget that bounds each invocation, killed calls and plain retries.
    rows = list(got.values())
    assert {(r["budget_overrun"], r["has_artifact"]) for r in rows if r["budget_overrun"]} == {(1, 0), (1, 1)}
    assert any(r["over_budget"] and r["verdict"] == "PASS" for r in rows)
    assert {r["state"] for r in rows} == {"settled", "running", "paused", "unfinished", "pending"}
    assert sum(r["unrecorded_attempts"] for r in rows) > 0


def test_v_node_rounds_says_what_each_column_documents(ledger, world):
    got = keyed(view(ledger, "v_node_rounds"), "run_id", "leg", "node", "seq")
    expected = {(x["run_id"], x["leg"], x["node"], x["seq"]): x for r in billed(world) for x in expected_rounds(r)}
    assert set(next(iter(got.values()))) == set(next(iter(expected.values())))
    assert differences(got, expected) == []
    assert {x["outcome"] for x in got.values()} == {"PASS", "FAIL", "FEEDBACK", "PAUSED", None}


def test_v_charges_says_what_each_column_documents(ledger, world):
    rows = view(ledger, "v_charges")
    got = keyed(rows, "run_id", "source_file", "source_line")
    expected = {(c["run_id"], c["source_file"], c["source_line"]): c for r in billed(world) for c in expected_charges(r)}
    assert set(next(iter(got.values()))) == set(next(iter(expected.values()))) | {"seq"}
    assert differences(got, expected) == []
    # seq numbers a run's charges 1…n: the stream's in file order, then assess.json's.
    by_run = defaultdict(list)
    for row in got.values():
        by_run[row["run_id"]].append(row)
    for run_id, charges in by_run.items():
        ordered = sorted(charges, key=lambda c: (c["source_file"] != "events.jsonl", c["source_line"] or 0))
        assert [c["seq"] for c in ordered] == list(range(1, len(charges) + 1)), run_id


def test_v_findings_are_the_copies_whose_stream_is_behind_their_snapshot_and_v_problems_is_empty(ledger, world):
    """The engine's own directories never disagree with themselves; a backup taken mid-run
    holds a state.json ahead of its cut stream, and each settled record there with no
    terminal of its own (node, verdict, round, session) on that stream is a dropped event, in
    that copy's home. Every file is readable: no problem."""
    expected = set()
    backup = world.homes[3][1]
    for run_dir in sorted((backup / "runs").iterdir()):
        copy = read_run(run_dir, "backup")
        ends = {(x.node, x.outcome, x.round, x.session_id) for x in copy.executions}
        for node, record in copy.records.items():
            if record.get("verdict") in ("PASS", "FAIL") and \
                    (node, record["verdict"], int(record.get("round") or 0), record.get("session_id")) not in ends:
                expected.add(("backup", copy.run_id, "dropped_event", node))
    got = [(f["home"], f["run_id"], f["kind"], f["node"]) for f in view(ledger, "v_findings")]
    assert len(got) == len(set(got)) and set(got) == expected and expected
    assert view(ledger, "v_problems") == []


# -- the saved queries ------------------------------------------------------------------

UTC_ZONE = ZoneInfo("UTC")


def query(engine, name: str, zone=UTC_ZONE, **params: str) -> list[dict]:
    return normal_rows(run_saved(engine, name, params, zone=zone).as_dict()["rows"])


def since_filter(rows: list[dict], since: str | None) -> list[dict]:
    return [r for r in rows if since is None or (r["last_event_at"] or "") >= since]


@pytest.mark.parametrize("since", [None, "2026-12-05T00:00:00.000000Z"])
def test_abandoned_runs_are_the_runs_whose_last_leg_is_open(ledger, world, since):
    runs = since_filter([expected_run(r) for r in billed(world)], since)
    expected = sorted((r for r in runs if last_leg_open(world.runs[r["run_id"]])),
                      key=lambda r: (r["last_event_at"], r["run_id"]), reverse=True)
    # DESC on both keys above; the query breaks a tie by run_id ascending: none here.
    assert len({r["last_event_at"] for r in expected}) == len(expected)
    columns = ("home", "run_id", "graph", "runtime", "legs", "started_at", "last_event_at", "cost_nano_usd",
               "cost_usd", "unknown_cost_invocations", "dir_path")
    got = query(ledger, "abandoned_runs", **({"since": since} if since else {}))
    assert got == normal_rows([{**{c: r[c] for c in columns if c != "unknown_cost_invocations"},
                                "unpriced_invocations": r["unknown_cost_invocations"]} for r in expected])
    # No process holds a lock here: each is what the engine calls ABANDONED, and what `runs` says.
    abandoned = {run_id for run_id, status in world.truth_status.items() if status == "ABANDONED"}
    if since is None:
        assert {r["run_id"] for r in got} >= abandoned and len(abandoned) == 7
        assert {r["run_id"] for r in got} == {r["run_id"] for r in list_runs(ledger) if r["status"] == "ABANDONED"}
    else:
        assert got and all(r["home"] == "shifted" for r in got)


@pytest.mark.parametrize(("limit", "since"), [("20", None), ("2147483647", None), ("7", "2026-12-09T12:00:00Z")])
def test_most_expensive_nodes_ranks_every_nodes_spend_over_every_leg_and_round(ledger, world, limit, since):
    runs = {r["run_id"]: r for r in since_filter([expected_run(r) for r in billed(world)],
                                                 since and since.replace("Z", ".000000Z"))}
    nodes = [n for r in billed(world) if r.run_id in runs for n in expected_nodes(r)]
    nodes.sort(key=lambda n: (-n["cost_nano_usd"], n["run_id"], n["node"]))
    columns = ("home", "run_id", "graph", "node", "verdict", "provenance", "cost_nano_usd", "cost_usd",
               "invocations", "unknown_cost_invocations", "unrecorded_attempts", "budget_usd")
    expected = [{**{c: n[c] for c in columns if c != "unknown_cost_invocations"},
                 "unpriced_invocations": n["unknown_cost_invocations"]} for n in nodes[:int(limit)]]
    got = query(ledger, "most_expensive_nodes", limit=limit, **({"since": since} if since else {}))
    assert got == normal_rows(expected)
    # The spend is the node's over every leg and round, not state.json's last record.
    assert len(got) == min(int(limit), len(nodes))


def test_retry_waste_is_failed_and_feedback_spend_per_node(ledger, world):
    expected = []
    for run in billed(world):
        nodes = {n["node"]: n for n in expected_nodes(run)}
        for node in sorted({x.node for x in run.executions}):
            mine = [x for x in run.executions if x.node == node]
            failed = [x for x in mine if x.outcome == "FAIL"]
            feedback = [x for x in mine if x.outcome == "FEEDBACK"]
            retried = [c for c in run.charges if c.node == node and c.kind == "retry"]
            failed_nano = sum(x.cost or 0 for x in failed)
            retried_nano = sum(c.cost or 0 for c in retried)
            feedback_nano = sum(x.cost or 0 for x in feedback)
            unpriced = sum(x.cost_unknown for x in failed + feedback) + sum(c.cost is None for c in retried)
            row = {"home": run.home, "run_id": run.run_id, "graph": run.graph.get("name"), "node": node,
                   "failed_executions": len(failed), "failed_cost_nano_usd": failed_nano,
                   "retried_cost_nano_usd": retried_nano, "waste_usd": (failed_nano + retried_nano) / 1e9,
                   "feedback_usd": feedback_nano / 1e9, "unrecorded_attempts": nodes[node]["unrecorded_attempts"],
                   "unpriced_invocations": unpriced}
            if failed_nano + retried_nano + feedback_nano or failed or row["unrecorded_attempts"] or unpriced:
                expected.append(row)
    expected.sort(key=lambda r: (-(r["failed_cost_nano_usd"] + r["retried_cost_nano_usd"]), r["run_id"], r["node"]))
    got = query(ledger, "retry_waste")
    assert got == normal_rows(expected)
    # Each kind of waste is in the data: failures (priced and not), feedback, unrecorded retries.
    assert all(any(r[c] for r in got) for c in ("failed_cost_nano_usd", "feedback_usd", "unrecorded_attempts",
                                                "unpriced_invocations"))


def _day_rows(charges: list[dict]) -> list[dict]:
    days = defaultdict(list)
    for c in charges:
        days[c["at"][:10] if c["at"] else "(undated)"].append(c)
    rows = []
    for day, mine in sorted(days.items()):
        known = [c["cost_nano_usd"] for c in mine if c["cost_nano_usd"] is not None]
        rows.append({"day": day, "cost_nano_usd": sum(known) if known else None, "cost_usd": sum(known) / 1e9,
                     "invocations": len(mine), "unpriced_invocations": len(mine) - len(known),
                     **{t: sum(c[t] for c in mine) for t in TOKENS}})
    return rows


@pytest.mark.parametrize(("since", "until"), [
    (None, None), ("2026-12-03", None), (None, "2026-12-10"), ("2026-12-02T23:59:59.5Z", "2026-12-08T00:00:00.25Z"),
    ("2026-11-29T18:30:00Z", "2026-11-29T18:45:00Z")])
def test_spend_by_day_puts_each_charge_on_its_own_utc_day(ledger, world, since, until):
    lo = since and format_utc(since)
    hi = until and format_utc(until)
    charges = [c for r in billed(world) for c in expected_charges(r)
               if (lo is None or c["at"] >= lo) and (hi is None or c["at"] < hi)]
    params = {k: v for k, v in (("since", since), ("until", until)) if v}
    got = query(ledger, "spend_by_day", **params)
    assert got == normal_rows(_day_rows(charges))
    if not params:  # the shifted runs span midnights: some of their runs are split across two days
        split = {r.run_id for r in billed(world) if len({c.at[:10] for c in r.charges if c.at}) > 1}
        assert split and len(got) > 5


def format_utc(value: str) -> str:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(("since", "until"), [(None, None), ("2026-12-04", "2026-12-20")])
def test_unknown_cost_work_groups_every_unpriced_invocation(ledger, world, since, until):
    lo, hi = since and format_utc(since), until and format_utc(until)
    groups = defaultdict(list)
    for r in billed(world):
        for c in expected_charges(r):
            if c["cost_nano_usd"] is None and (lo is None or c["at"] >= lo) and (hi is None or c["at"] < hi):
                groups[(c["runtime"] or "(no snapshot)", c["graph"] or "(no graph)", c["kind"])].append(c)
    expected = [{"runtime": k[0], "graph": k[1], "kind": k[2], "unpriced_invocations": len(v),
                 "runs": len({(c["home"], c["run_id"]) for c in v}), **{t: sum(c[t] for c in v) for t in TOKENS}}
                for k, v in groups.items()]
    expected.sort(key=lambda r: (-r["unpriced_invocations"], r["runtime"], r["graph"], r["kind"]))
    params = {k: v for k, v in (("since", since), ("until", until)) if v}
    got = query(ledger, "unknown_cost_work", **params)
    assert got == normal_rows(expected)
    if not params:  # Codex nodes and plans, and Claude calls killed by a timeout or a halt
        assert {r["runtime"] for r in got} == {"codex", "claude"} and {"node", "planning"} <= {r["kind"] for r in got}


@pytest.mark.parametrize("since", [None, "2026-12-10T00:00:00Z"])
def test_unverified_passes_are_the_passes_no_engine_evidence_backs(ledger, world, since):
    runs = {r["run_id"] for r in since_filter([expected_run(r) for r in billed(world)],
                                              since and format_utc(since))}
    expected = []
    for run in billed(world):
        if run.run_id not in runs:
            continue
        nodes = expected_nodes(run)
        backed = sum(n["verdict"] == "PASS" and n["provenance"] in ("verified", "approved") for n in nodes)
        expected += [{"home": run.home, "run_id": run.run_id, "graph": n["graph"], "node": n["node"],
                      "provenance": n["provenance"] or "(unknown/pre-field)", "cost_usd": n["cost_usd"],
                      "run_verified_or_approved": backed}
                     for n in nodes if n["verdict"] == "PASS" and n["provenance"] in (None, "self-reported",
                                                                                       "exit-only")]
    expected.sort(key=lambda r: (r["run_id"], r["node"]))
    got = query(ledger, "unverified_passes", **({"since": since} if since else {}))
    assert got == normal_rows(expected)
    if since is None:
        assert {r["provenance"] for r in got} == {"self-reported", "exit-only"}
        assert any(r["run_verified_or_approved"] for r in got)


# -- runner invocations -----------------------------------------------------------------


def test_v_invocations_pairs_the_runner_stream_as_the_readme_says(ledger, world):
    got = sorted(normal_rows(view(ledger, "v_invocations")), key=lambda r: r["seq"])
    assert [{k: v for k, v in r.items() if k != "source"} for r in got] == normal_rows(world.invocations)
    assert {r["outcome"] for r in got} == {"paired", "recovered", "dangling", "unmatched_end"}
    assert {r["status_class"] for r in got} == {"success", "judged", "failure", None}


@pytest.mark.parametrize("since", [None, "2026-11-29"])
def test_invocations_by_role_counts_each_roles_invocations(ledger, world, since):
    lo = since and format_utc(since)
    chosen = [i for i in world.invocations if lo is None or (i["started_at"] or i["ended_at"]) >= lo]
    roles = defaultdict(list)
    for i in chosen:
        roles[i["role"]].append(i)
    expected = []
    for role in sorted(roles, key=lambda r: (r is None, r or "")):
        mine = roles[role]
        durations = [i["duration_ms"] for i in mine if i["duration_ms"] is not None]
        starts = [i["started_at"] for i in mine if i["started_at"]]
        expected.append({
            "role": role, "invocations": len(mine),
            "failures": sum(i["status_class"] == "failure" for i in mine),
            "judged": sum(i["status_class"] == "judged" for i in mine),
            "dangling": sum(i["outcome"] == "dangling" for i in mine),
            "recovered": sum(i["outcome"] == "recovered" for i in mine),
            "unmatched_ends": sum(i["outcome"] == "unmatched_end" for i in mine),
            "with_duration": len(durations), "min_ms": min(durations, default=None),
            "max_ms": max(durations, default=None), "total_ms": sum(durations) if durations else None,
            "first_started_at": min(starts, default=None), "last_started_at": max(starts, default=None),
        })
    got = query(ledger, "invocations_by_role", **({"since": since} if since else {}))
    assert got == normal_rows(expected)


# -- the two backends -------------------------------------------------------------------

QUERY_CASES = [
    ("abandoned_runs", {}), ("abandoned_runs", {"since": "2026-12-05"}),
    ("invocations_by_role", {}), ("invocations_by_role", {"since": "2026-11-29"}),
    ("most_expensive_nodes", {"limit": "2147483647"}), ("most_expensive_nodes", {"limit": "5", "since": "2026-12-09"}),
    ("retry_waste", {}), ("retry_waste", {"since": "2026-12-01"}),
    ("spend_by_day", {}), ("spend_by_day", {"since": "2026-12-03", "until": "2026-12-10"}),
    ("spend_by_graph", {}), ("unknown_cost_work", {}), ("unknown_cost_work", {"until": "2026-12-01"}),
    ("unverified_passes", {}), ("unverified_passes", {"since": "2026-12-10"}),
]
VIEW_KEYS = {
    "v_runs": ("home", "run_id"), "v_nodes": ("home", "run_id", "node"),
    "v_node_rounds": ("home", "run_id", "leg", "node", "seq"), "v_charges": ("home", "run_id", "seq"),
    "v_findings": ("home", "run_id", "seq"), "v_problems": ("path", "byte_offset", "reason"),
    "v_invocations": ("path", "seq"),
}


@pytest.mark.postgres
def test_sqlite_and_postgresql_give_the_same_rows_in_the_same_order(world, request):
    lite, pg = engine_for(world, "sqlite", request), engine_for(world, "postgresql", request)
    for name, params in QUERY_CASES:
        rows = query(lite, name, **params)
        assert rows, (name, params)  # every case answers something to compare
        assert query(pg, name, **params) == rows, (name, params)
    for name, key in VIEW_KEYS.items():
        rows = {tuple(r[k] for k in key): r for r in normal_rows(view(lite, name))}
        other = {tuple(r[k] for k in key): r for r in normal_rows(view(pg, name))}
        assert len(rows) == len(view(lite, name)) and other == rows, name
        if name != "v_problems":
            assert rows, name


def test_a_time_parameter_says_in_which_zone_a_date_is_read(ledger):
    """`query --param since=2026-12-03` reads the date in --tz, the local zone by default
    (README: the time grammar), as every --since does: in Berlin the window opens at
    23:00 UTC the day before, so spend_by_day's UTC days start with 2026-12-02. A header
    calling the parameter a "UTC day" would promise whole UTC days; each says how it is read."""
    berlin = query(ledger, "spend_by_day", zone=ZoneInfo("Europe/Berlin"), since="2026-12-03")
    assert berlin[0]["day"] == "2026-12-02"
    assert query(ledger, "spend_by_day", since="2026-12-03")[0]["day"] == "2026-12-03"
    from omg_ledger.reports.sql import saved_queries

    for q in saved_queries():
        for param in q.params:
            if param.name in ("since", "until"):
                assert not re.search(r"UTC (day or|text)", param.description), (q.name, param)
                assert "--tz" in param.description, (q.name, param.description)


def test_the_column_docs_name_the_values_the_views_hold(ledger):
    """DOCS (Datasette's descriptions) name every value these columns take on real data,
    and the overrun rule is the engine's message, never the .out (3 overruns here have none)."""
    from omg_ledger.schema import DOCS

    for view_name, column in (("v_nodes", "node_type"), ("v_nodes", "provenance"), ("v_charges", "leg_kind"),
                              ("v_node_rounds", "leg_kind"), ("v_charges", "kind")):
        with ledger.connect() as conn:
            values = {v for (v,) in conn.execute(text(f"SELECT DISTINCT {column} FROM {view_name}")) if v}
        words = set(re.findall(r"[\w-]+", DOCS[view_name][column]))
        assert values <= words, (view_name, column, values - words)
    assert "judged" not in DOCS["v_nodes"]["provenance"]  # judged is a column of its own, no provenance
    with ledger.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM v_nodes WHERE budget_overrun AND NOT has_artifact")
                            ).scalar() == 3
    assert ".out" not in DOCS["v_nodes"]["budget_overrun"].split("budget_usd")[0]
    # Session-limited and killed calls are unrecorded attempts too, not only retries.
    assert "session" in DOCS["v_nodes"]["unrecorded_attempts"] and "session" in DOCS["v_runs"]["unrecorded_attempts"]
