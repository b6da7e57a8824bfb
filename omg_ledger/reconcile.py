"""Pure reconciliation: one run's stream + snapshot facts in, ledger rows out.

No I/O happens here. Every rule is from RUN-FEED.md (seeds/run-feed-contract.txt) or
from what the real engine is seen doing in the corpus (corpus/README.md), and each is
pinned by a table-driven test in tests/test_reconcile.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from operator import attrgetter

import orjson

from .bounds import RUN_BOUND_REASON, RunTally
from .feed import TOKEN_FIELDS, Event
from .provenance import PASS_COUNT_COLUMNS, PASS_COUNT_COLUMNS_ALL
from .snapshot import all_nodes_passed
from .units import NANOS_PER_USD, usd_to_nanos

PLANNING = "planning"
RUN = "run"
TERMINAL_EVENTS = ("node_passed", "node_failed")
SETTLED_VERDICTS = ("PASS", "FAIL")
# The engine's words when it fails a node for its budget_usd, the whole detail: 'node "<id>"
# exceeded budget_usd: $X actual vs $Y budgeted …' (Go's %q quoting of the id). Anchored: a
# judged FAIL's detail may quote a test's output that says the same words. A .out on disk is
# no proof either way (an earlier round's PASS leaves one; a CLI killed at its budget writes none).
_BUDGET_FAILURE = re.compile(r'node "(?:[^"\\]|\\.)*" exceeded budget_usd: \$')


@dataclass(frozen=True)
class RunInput:
    run_id: str
    events: Iterable[Event]  # every valid event of the run, in file order (walked once: may be a stream)
    snapshot: dict | None = None  # a valid state.json, or None when absent/unreadable
    assess: dict | None = None  # a valid assess.json
    artifacts: frozenset[str] = frozenset()  # flat '*.out' names in the run directory
    failed_outputs: frozenset[str] = frozenset()  # '*.out' names under failed/
    # Where finished rows go while the walk goes on (None: all of them in the result),
    # so a run of millions of events never holds its rows at once.
    sink: Callable[[FinishedRows], None] | None = None
    # A fold state a previous walk left (RunRows.state): ``events`` are then only the
    # lines after it, and the result holds only rows that are new or may have changed.
    resume: dict | None = None
    # Whether to return the fold state after the last event (RunRows.state): only for a
    # run whose last leg is still open (its engine appends more) or whose walk reached
    # line ``state_from_line`` (walking it again would cost more than keeping it).
    keep_state: bool = False
    state_from_line: int = 0
    # node_id -> the (verdict, round, session_id) of each of its terminal events in the
    # stream; with it, the walk keeps only a node's latest few (memory that does not
    # grow with the stream) and asks for the rest in the rare case it needs them.
    terminal_lookup: Callable[[str], Iterable[tuple[str, int, str | None]]] | None = None


# Plain tuples, not NamedTuples: one of each is made per node event, and a NamedTuple
# costs a Python-level __new__ call.
# What the rules read back later of a terminal node event (never the event itself: a
# run's events are walked once, and only this much of each is kept):
# (type, line_no, verdict, round, session_id).
_Terminal = tuple[str, int, str, int, str | None]
# A node's record as the engine's snapshot recorder has folded it so far:
# (cost, unknown, round, verdict, the four token counts).
_Recorded = tuple[int, bool, int, str, tuple[int, int, int, int]]

_NOT_RECORDED: _Recorded = (0, False, -1, "", (0, 0, 0, 0))


@dataclass(slots=True)
class Leg:
    ordinal: int
    phase: str
    kind: str
    started_at: str | None
    started_at_us: int | None
    start_line: int | None
    finished_at: str | None = None
    outcome: str | None = None
    detail: str | None = None
    is_open: bool = True
    closed_by: str | None = None
    session_limited: bool = False
    end_line: int | None = None


@dataclass(slots=True)
class Execution:
    """One execution of a node within a leg (a row of `rounds`)."""

    leg_ordinal: int
    node_id: str
    seq: int
    round: int
    started_at: str | None = None
    start_line: int | None = None
    ended_at: str | None = None
    end_line: int | None = None
    outcome: str | None = None
    retries: int = 0
    session_id: str | None = None
    provenance: str | None = None
    detail: str | None = None
    cost_nano_usd: int | None = None
    cost_unknown: bool = False
    unrecorded_attempts: int = 0
    order: int = 0  # creation order within the run (not a column: rows are keyed by leg, node, seq)


@dataclass(slots=True)
class Charge:
    seq: int
    kind: str
    leg_ordinal: int | None
    leg_kind: str | None
    node_id: str | None
    round: int | None
    at: str | None
    at_us: int | None
    cost_nano_usd: int | None
    cost_unknown: bool
    tokens: tuple[int, int, int, int]
    source_file: str
    source_offset: int | None
    source_line: int | None


@dataclass
class Finding:
    kind: str
    node_id: str | None
    leg_ordinal: int | None
    detail: str
    seq: int = field(default=0, compare=False)  # position among the run's findings, 1-based


@dataclass
class RunRows:
    run: dict
    legs: list[Leg] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    rounds: list[Execution] = field(default_factory=list)
    charges: list[Charge] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    goal_cycle: dict | None = None
    problems: list[tuple[str, int | None, str]] = field(default_factory=list)  # (file, byte offset, reason)
    # The walk's fold after the last event (RunInput.keep_state), for resuming it on an
    # append; None where none is kept (the next derivation walks every stored line).
    state: dict | None = None
    events_walked: int = 0  # events this derivation walked (an append walks only the new ones)


@dataclass
class FinishedRows:
    """Rows the walk will not change again (closed legs and executions, charges and
    walk findings), handed to RunInput.sink while the walk goes on."""

    legs: list[Leg]
    rounds: list[Execution]
    charges: list[Charge]
    findings: list[Finding]


def artifact_name(node_id: str) -> str:
    """The flat artifact filename: every '/' becomes '~' (RUN-FEED.md)."""
    return node_id.replace("/", "~") + ".out"


_INPUT, _CACHED_INPUT, _OUTPUT, _REASONING_OUTPUT = TOKEN_FIELDS
_NO_TOKENS = (0, 0, 0, 0)


def has_accounting(data: dict) -> bool:
    if "cost_usd" in data or data.get("cost_unknown"):
        return True
    usage = data.get("usage")
    if not usage:
        return False
    return bool(usage.get(_INPUT) or usage.get(_CACHED_INPUT) or usage.get(_OUTPUT) or usage.get(_REASONING_OUTPUT))


_NANOS_OF_FLOAT: dict[float, int] = {}
_NANOS_KEPT = 4096
_EXACT_INT_USD = 10**18  # below it, n * 10**9 fits Decimal's 28 digits: usd_to_nanos is plain multiplication


def usd_nanos(value: float | int) -> int:
    """usd_to_nanos, with its result remembered per float value: equal floats have one
    repr (0.0 and -0.0 both give 0), so the value determines the result. A run's costs
    repeat (a node's charge, its snapshot record, the run's sums), and Decimal is slow."""
    if type(value) is float:
        known = _NANOS_OF_FLOAT.get(value)
        if known is None:
            known = usd_to_nanos(value)
            if len(_NANOS_OF_FLOAT) >= _NANOS_KEPT:
                _NANOS_OF_FLOAT.clear()
            _NANOS_OF_FLOAT[value] = known
        return known
    if type(value) is int and -_EXACT_INT_USD < value < _EXACT_INT_USD:
        return value * NANOS_PER_USD
    return usd_to_nanos(value)


def _cost(data: dict) -> tuple[int | None, bool]:
    """(nano-dollars or None, unknown). cost_unknown makes any number beside it filler."""
    if data.get("cost_unknown"):
        return None, True
    return usd_nanos(data.get("cost_usd", 0)), False


def _tokens(usage: object) -> tuple[int, int, int, int]:
    if not isinstance(usage, dict):
        return _NO_TOKENS
    get = usage.get
    return (int(get(_INPUT) or 0), int(get(_CACHED_INPUT) or 0), int(get(_OUTPUT) or 0),
            int(get(_REASONING_OUTPUT) or 0))


DRAIN_ROWS = 2000  # finished rows held before they go to the sink
RECENT_TERMINALS = 8  # per node, with a lookup for older ones

_LEG_FIELDS = tuple(f.name for f in fields(Leg))
_EXECUTION_FIELDS = tuple(f.name for f in fields(Execution))
_ordinal = attrgetter("ordinal")
_order = attrgetter("order")
_leg_values = attrgetter(*_LEG_FIELDS)  # a leg's field values, in _LEG_FIELDS order (a tuple)
_execution_values = attrgetter(*_EXECUTION_FIELDS)


class _Reconciler:
    """The walk over a run's events, as a fold: per event it updates what may still
    change (the open leg, open executions, per-node facts, running totals) and moves
    what cannot (closed legs and executions, charges, walk findings) to ``done``."""

    def __init__(self, run: RunInput) -> None:
        self.input = run
        self.leg_kinds: list[str] = []  # every leg's kind, by ordinal - 1
        self.open_leg: Leg | None = None
        self.last_leg: Leg | None = None
        self.last_run_leg: Leg | None = None
        self.run_leg_count = 0
        self.last_outcome: str | None = None
        self.last_detail: str | None = None
        self.exec_total = 0
        self.open_executions: dict[int, Execution] = {}  # by creation order: not ended yet
        self.last_execution: dict[str, Execution] = {}  # per node
        self.closed_unrecorded: dict[str, int] = {}  # per node, over its ended executions
        # Per leg ordinal still open (and 0, outside any leg): node -> its current execution, count.
        self.current: dict[int, dict[str, Execution]] = {}
        self.exec_count: dict[int, dict[str, int]] = {}
        self.charge_total = 0
        self.money = [0, 0, 0, 0, 0, 0, 0]  # known cost, invocations, unknown, four token counts
        self.node_money: dict[str, list[int]] = {}  # known cost, invocations, unknown
        self.finding_total = 0
        self.findings: list[Finding] = []  # after the walk: the snapshot checks' findings
        self.late_charges: list[Charge] = []  # after the walk: recovered and assessment charges
        self.done = FinishedRows([], [], [], [])
        # Per node: its latest terminal, every (verdict, round, session) a terminal carried,
        # the recorder's fold of what it saw, and when its last node_started was.
        self.latest_terminal: dict[str, tuple[_Terminal, Execution]] = {}
        # Per node, the (verdict, round, session) of its terminals: the latest RECENT_TERMINALS
        # when the caller can look the others up (RunInput.terminal_lookup), else all.
        self.terminal_keys: dict[str, list[tuple[str, int, str | None]]] = {}
        self.terminal_count: dict[str, int] = {}
        self.keep_recent = run.terminal_lookup is not None
        self.recorded: dict[str, _Recorded] = {}
        self.last_started: dict[str, tuple[str, int]] = {}
        self.event_count = 0
        self.first: tuple[str, int] | None = None  # (ts, at_us) of the first event
        self.last: tuple[str, int] | None = None
        # (ts, at_us) of the run_finished that ended the run's first scheduler leg: the leg
        # an `auto --max-cycles` process ran, right after which it assessed the cycle.
        self.first_run_end: tuple[str, int] | None = None
        self.last_line = 0
        self.walked = 0
        self.tally = RunTally()
        self.problems: list[tuple[str, int | None, str]] = []

    # -- the fold state ---------------------------------------------------------------

    def state(self) -> dict:
        """What a later walk over appended lines needs, as plain JSON-able values: copies
        of everything the snapshot checks after the walk change (totals, the bound's
        tally, problems, open executions), so the state is the walk's own."""
        legs = {leg.ordinal: leg for leg in (self.open_leg, self.last_leg, self.last_run_leg) if leg is not None}
        executions = dict(self.open_executions)  # keyed by order, as the ones added below
        for execution in self.last_execution.values():
            executions[execution.order] = execution
        for by_node in self.current.values():
            for execution in by_node.values():
                executions[execution.order] = execution
        for _, execution in self.latest_terminal.values():
            executions[execution.order] = execution
        return {
            "leg_kinds": self.leg_kinds,
            "legs": list(map(_leg_values, legs.values())),
            "open_leg": self.open_leg.ordinal if self.open_leg else None,
            "last_leg": self.last_leg.ordinal if self.last_leg else None,
            "last_run_leg": self.last_run_leg.ordinal if self.last_run_leg else None,
            "run_leg_count": self.run_leg_count,
            "last_outcome": self.last_outcome,
            "last_detail": self.last_detail,
            "exec_total": self.exec_total,
            "executions": list(map(_execution_values, executions.values())),
            "open_executions": list(self.open_executions),
            "nodes": self._node_states(),
            "current": [[leg, node, e.order] for leg, by_node in self.current.items() for node, e in by_node.items()],
            "exec_count": [[leg, node, n] for leg, by_node in self.exec_count.items() for node, n in by_node.items()],
            "charge_total": self.charge_total,
            "money": list(self.money),
            "finding_total": self.finding_total,
            "event_count": self.event_count,
            "first": self.first,
            "last": self.last,
            "first_run_end": self.first_run_end,
            "last_line": self.last_line,
            "tally": [self.tally.money, list(self.tally.tokens), self.tally.exhausted],
            "problems": list(self.problems),
        }

    def _node_states(self) -> dict[str, list]:
        """Per node (every node with an execution has one, and only those have any of
        these): [its last execution's order, unrecorded attempts over its ended
        executions, its money (a copy), its latest terminal's line and execution order,
        its terminal keys, its terminal count, its recorder fold, its last start], None
        where it has none. One list per node: its id is written once, not once a map.
        The latest terminal's (verdict, round, session) is its last terminal key."""
        closed_unrecorded, node_money, latest_terminal = self.closed_unrecorded, self.node_money, self.latest_terminal
        terminal_keys, terminal_count, recorded, last_started = (
            self.terminal_keys, self.terminal_count, self.recorded, self.last_started)
        nodes = {}
        for node, execution in self.last_execution.items():
            money = node_money.get(node)
            latest = latest_terminal.get(node)
            nodes[node] = [execution.order, closed_unrecorded.get(node), list(money) if money is not None else None,
                           latest[0][1] if latest is not None else None, latest[1].order if latest is not None else None,
                           terminal_keys.get(node), terminal_count.get(node), recorded.get(node),
                           last_started.get(node)]
        return nodes

    def _load_nodes(self, nodes: dict[str, list], executions: dict[int, Execution]) -> None:
        for node, (order, unrecorded, money, latest_line, latest_order, keys, count, fold, started) in nodes.items():
            self.last_execution[node] = executions[order]
            if unrecorded is not None:
                self.closed_unrecorded[node] = unrecorded
            if money is not None:
                self.node_money[node] = list(money)
            if keys is not None:
                self.terminal_keys[node] = keys = [tuple(key) for key in keys]
                verdict, round_, session_id = keys[-1]
                kind = "node_passed" if verdict == "PASS" else "node_failed"
                self.latest_terminal[node] = ((kind, latest_line, verdict, round_, session_id), executions[latest_order])
            if count is not None:
                self.terminal_count[node] = count
            if fold is not None:
                self.recorded[node] = _loaded_fold(fold)
            if started is not None:
                self.last_started[node] = tuple(started)

    def _load_node_maps(self, state: dict, executions: dict[int, Execution]) -> None:
        """The per-node facts of a state laid out as one map per fact (states saved by
        omg-ledger before the per-node lists; still stored at the same derivation version)."""
        self.last_execution = {node: executions[order] for node, order in state["last_execution"].items()}
        self.closed_unrecorded = dict(state["closed_unrecorded"])
        self.node_money = {node: list(m) for node, m in state["node_money"].items()}
        self.latest_terminal = {node: (tuple(t[:5]), executions[t[5]])
                                for node, t in state["latest_terminal"].items()}
        self.terminal_keys = {node: [tuple(k) for k in keys] for node, keys in state["terminal_keys"].items()}
        self.terminal_count = dict(state["terminal_count"])
        self.recorded = {node: _loaded_fold(r) for node, r in state["recorded"].items()}
        self.last_started = {node: tuple(v) for node, v in state["last_started"].items()}

    def load(self, state: dict) -> None:
        legs = {values[0]: Leg(**dict(zip(_LEG_FIELDS, values, strict=True))) for values in state["legs"]}
        self.leg_kinds = list(state["leg_kinds"])
        self.open_leg, self.last_leg, self.last_run_leg = (
            legs[state[k]] if state[k] is not None else None for k in ("open_leg", "last_leg", "last_run_leg"))
        self.run_leg_count = state["run_leg_count"]
        self.last_outcome, self.last_detail = state["last_outcome"], state["last_detail"]
        self.exec_total = state["exec_total"]
        executions = {}
        for values in state["executions"]:
            execution = Execution(**dict(zip(_EXECUTION_FIELDS, values, strict=True)))
            executions[execution.order] = execution
        self.open_executions = {order: executions[order] for order in state["open_executions"]}
        if "nodes" in state:
            self._load_nodes(state["nodes"], executions)
        else:
            self._load_node_maps(state, executions)
        for leg, node, order in state["current"]:
            self.current.setdefault(leg, {})[node] = executions[order]
        for leg, node, count in state["exec_count"]:
            self.exec_count.setdefault(leg, {})[node] = count
        self.charge_total = state["charge_total"]
        self.money = list(state["money"])
        self.finding_total = state["finding_total"]
        self.event_count = state["event_count"]
        self.first = tuple(state["first"]) if state["first"] else None
        self.last = tuple(state["last"]) if state["last"] else None
        self.first_run_end = tuple(state["first_run_end"]) if state.get("first_run_end") else None
        self.last_line = state["last_line"]
        self.tally.money, self.tally.tokens, self.tally.exhausted = state["tally"][0], list(state["tally"][1]), \
            state["tally"][2]
        self.problems = [tuple(p) for p in state["problems"]]

    def drain(self) -> FinishedRows:
        done, self.done = self.done, FinishedRows([], [], [], [])
        return done

    # -- legs ---------------------------------------------------------------------

    def _leg_open(self, ordinal: int | None) -> bool:
        return bool(ordinal) and self.open_leg is not None and self.open_leg.ordinal == ordinal

    def _open(self, event: Event, phase: str) -> Leg:
        if phase == PLANNING:
            kind = PLANNING
        else:
            previous = self.last_run_leg
            if previous is None:
                kind = "initial"
            else:
                kind = {"paused": "resume", "failed": "retry"}.get(
                    previous.outcome or "", "after-abandoned" if previous.outcome is None else "rerun"
                )
        leg = Leg(len(self.leg_kinds) + 1, phase, kind, event.ts, event.at_us, event.line_no)
        self.leg_kinds.append(kind)
        self.last_leg = leg
        if phase == RUN:
            self.last_run_leg = leg
            self.run_leg_count += 1
        self.open_leg = leg
        return leg

    def _close(self, leg: Leg, event: Event, closed_by: str, outcome: str | None) -> None:
        leg.is_open = False
        leg.closed_by = closed_by
        leg.outcome = outcome
        leg.end_line = event.line_no
        if closed_by != "superseded":
            leg.finished_at = event.ts
        self.open_leg = None
        self.done.legs.append(leg)
        # Its executions can never be current again: a leg's ordinal is never reopened.
        self.current.pop(leg.ordinal, None)
        self.exec_count.pop(leg.ordinal, None)

    def run_started(self, event: Event) -> None:
        phase = PLANNING if event.data.get("phase") == PLANNING else RUN
        planning_leg = None
        if self.open_leg is not None:
            if self.open_leg.phase == PLANNING and phase == RUN:
                # The unphased run_started commits the plan: it closes the planning
                # phase (same leg, same lock — no run_finished between them).
                planning_leg = self.open_leg
                self._close(planning_leg, event, "plan_committed", "planned")
            else:
                # Every run_started is a leg boundary: an earlier leg left open was
                # killed; its nodes are not running any more.
                self._close(self.open_leg, event, "superseded", None)
        leg = self._open(event, phase)
        if has_accounting(event.data):
            charge_leg = planning_leg or leg
            self._charge(event, _cost(event.data), "planning", charge_leg.ordinal, PLANNING, None, None)

    def run_finished(self, event: Event) -> None:
        leg = self.open_leg
        if leg is None:
            self.finding_total += 1
            self.done.findings.append(
                Finding(
                    "run_finished_without_leg",
                    None,
                    None,
                    f"line {event.line_no}: run_finished with no run_started before it (damage, not a leg)",
                    self.finding_total,
                )
            )
            if has_accounting(event.data):
                self._charge(event, _cost(event.data), "other", None, None, None, None)
            return
        outcome = event.data.get("outcome")
        detail = event.data.get("detail")
        self._close(leg, event, "run_finished", outcome)
        if leg.phase == RUN and self.first_run_end is None:
            self.first_run_end = (event.ts, event.at_us)
        leg.detail = detail
        leg.session_limited = outcome == "paused" and "session limit" in (detail or "")
        self.last_outcome, self.last_detail = outcome, detail
        if has_accounting(event.data):
            kind = "refused" if leg.phase == PLANNING else "other"
            self._charge(event, _cost(event.data), kind, leg.ordinal, leg.kind, None, None)

    # -- node executions ----------------------------------------------------------

    def _new_execution(self, event: Event, node_id: str, started: bool) -> Execution:
        open_leg = self.open_leg
        ordinal = open_leg.ordinal if open_leg is not None else 0
        counts = self.exec_count.get(ordinal)
        if counts is None:
            counts = self.exec_count[ordinal] = {}
        seq = counts[node_id] = counts.get(node_id, 0) + 1
        order = self.exec_total = self.exec_total + 1
        data = event.data
        started_at, start_line, session_id = (event.ts, event.line_no, data.get("session_id")) if started \
            else (None, None, None)
        execution = Execution(ordinal, node_id, seq, int(data.get("round") or 0), started_at, start_line,
                              None, None, None, 0, session_id, None, None, None, False, 0, order)
        self.open_executions[order] = execution
        current = self.current.get(ordinal)
        if current is None:
            current = self.current[ordinal] = {}
        current[node_id] = execution
        self.last_execution[node_id] = execution
        return execution

    def _execution(self, event: Event, node_id: str) -> Execution:
        open_leg = self.open_leg
        current = self.current.get(open_leg.ordinal if open_leg is not None else 0)
        execution = current.get(node_id) if current is not None else None
        if execution is None or execution.outcome is not None:
            execution = self._new_execution(event, node_id, started=False)
        return execution

    def _end(self, execution: Execution, event: Event, outcome: str) -> None:
        execution.outcome = outcome
        execution.ended_at = event.ts
        execution.end_line = event.line_no
        detail = event.data.get("detail")
        if detail is not None:
            execution.detail = detail
        # Ended: nothing later changes it (a later event for its node starts another).
        del self.open_executions[execution.order]
        self.done.rounds.append(execution)
        node_id = execution.node_id
        self.closed_unrecorded[node_id] = self.closed_unrecorded.get(node_id, 0) + execution.unrecorded_attempts

    def node_started(self, event: Event) -> None:
        node_id = event.data["node_id"]
        self._new_execution(event, node_id, started=True)
        self.last_started[node_id] = (event.ts, event.at_us)

    def node_retried(self, event: Event) -> None:
        data = event.data
        node_id = data["node_id"]
        execution = self._execution(event, node_id)
        retries = int(data.get("retries") or 0)
        feedback = retries == 0 and int(data.get("round") or 0) >= 1
        cost = _cost(data)
        if has_accounting(data):
            self._charge_execution(event, cost, execution, "feedback" if feedback else "retry")
        elif not feedback:
            # A plain retry's failed attempt was paid for, but the engine records its
            # spend nowhere (corpus README #1). Count it; never invent a number.
            execution.unrecorded_attempts += 1
        if feedback:
            self._end(execution, event, "FEEDBACK")
            self.recorded[node_id] = _recorder_step(self.recorded.get(node_id, _NOT_RECORDED), event, cost)
        else:
            execution.retries = retries
            if data.get("session_id"):
                execution.session_id = data["session_id"]

    def node_terminal(self, event: Event) -> None:
        data = event.data
        node_id = data["node_id"]
        execution = self._execution(event, node_id)
        if "round" in data:
            execution.round = int(data["round"])
        execution.retries = int(data.get("retries") or 0)
        execution.provenance = data.get("provenance")
        session_id = data.get("session_id")
        if session_id:
            execution.session_id = session_id
        cost = _cost(data)
        if has_accounting(data):
            self._charge_execution(event, cost, execution, "node")
        kind = data["event"]
        verdict = "PASS" if kind == "node_passed" else "FAIL"
        self._end(execution, event, verdict)
        round_ = int(data.get("round") or 0)
        self.latest_terminal[node_id] = ((kind, event.line_no, verdict, round_, session_id), execution)
        keys = self.terminal_keys.get(node_id)
        if keys is None:
            keys = self.terminal_keys[node_id] = []
        keys.append((verdict, round_, session_id))
        if self.keep_recent and len(keys) > RECENT_TERMINALS:
            del keys[0]
        self.terminal_count[node_id] = self.terminal_count.get(node_id, 0) + 1
        self.recorded[node_id] = _recorder_step(self.recorded.get(node_id, _NOT_RECORDED), event, cost)

    def gate_paused(self, event: Event) -> None:
        execution = self._execution(event, event.data["node_id"])
        self._end(execution, event, "PAUSED")

    # -- money ----------------------------------------------------------------------

    def _charge_execution(self, event: Event, cost: tuple[int | None, bool], execution: Execution, kind: str) -> None:
        ordinal = execution.leg_ordinal
        charge = self._charge(event, cost, kind, ordinal or None, self._leg_kind(ordinal),
                              execution.node_id, execution.round)
        if charge.cost_nano_usd is not None:  # an execution paid only at unknown prices stays NULL, never $0
            execution.cost_nano_usd = (execution.cost_nano_usd or 0) + charge.cost_nano_usd
        execution.cost_unknown = execution.cost_unknown or charge.cost_unknown

    def _leg_kind(self, ordinal: int | None) -> str | None:
        return self.leg_kinds[ordinal - 1] if ordinal else None

    def _count(self, charge: Charge) -> None:
        money = self.money
        cost = charge.cost_nano_usd or 0
        money[0] += cost
        money[1] += 1
        money[2] += charge.cost_unknown
        input_, cached, output, reasoning = charge.tokens
        money[3] += input_
        money[4] += cached
        money[5] += output
        money[6] += reasoning
        if charge.node_id is not None:
            mine = self.node_money.get(charge.node_id)
            if mine is None:
                mine = self.node_money[charge.node_id] = [0, 0, 0]
            mine[0] += cost
            mine[1] += 1
            mine[2] += charge.cost_unknown

    def add_late_charge(self, charge: Charge) -> None:
        """A charge found after the walk (recovered from the snapshot, the assessment)."""
        self.charge_total += 1
        charge.seq = self.charge_total
        self._count(charge)
        self.late_charges.append(charge)

    def _bounded(self, cost: int | None, unknown: bool, tokens: tuple[int, int, int, int], source_file: str,
                 offset: int | None) -> tuple[int | None, bool, tuple[int, int, int, int]]:
        """A charge as counted: past the per-run bound (bounds.py) it is an invocation of
        unknown cost without tokens, and the first such charge is a problem."""
        if self.tally.admit(cost, tokens):
            return cost, unknown, tokens
        if not self.problems:
            self.problems.append((source_file, offset, RUN_BOUND_REASON))
        return None, True, (0, 0, 0, 0)

    def _charge(self, event: Event, priced: tuple[int | None, bool], kind: str, leg_ordinal: int | None,
                leg_kind: str | None, node_id: str | None, round_: int | None) -> Charge:
        """``priced``: _cost of the event (its handler may need it too)."""
        cost, unknown, tokens = self._bounded(*priced, _tokens(event.data.get("usage")), "events.jsonl",
                                              event.byte_offset)
        seq = self.charge_total = self.charge_total + 1
        charge = Charge(seq, kind, leg_ordinal, leg_kind, node_id, round_, event.ts,
                        event.at_us, cost, unknown, tokens, "events.jsonl",
                        event.byte_offset, event.line_no)
        self._count(charge)
        self.done.charges.append(charge)
        return charge

    # -- the walk -------------------------------------------------------------------

    def walk(self) -> None:
        handlers = {
            "run_started": self.run_started,
            "run_finished": self.run_finished,
            "node_started": self.node_started,
            "node_retried": self.node_retried,
            "node_passed": self.node_terminal,
            "node_failed": self.node_terminal,
            "gate_paused": self.gate_paused,
        }
        sink = self.input.sink
        done = self.done
        walked = 0
        event = None
        for event in self.input.events:
            if self.first is None:
                self.first = (event.ts, event.at_us)
            walked += 1
            handler = handlers.get(event.data["event"])
            if handler is not None:  # an unknown type (stored by an older omg-ledger) derives nothing
                handler(event)
            if sink is not None and not walked % 256 and \
                    len(done.rounds) + len(done.charges) + len(done.legs) >= DRAIN_ROWS:
                sink(self.drain())
                done = self.done
        self.walked = walked
        self.event_count += walked
        if event is not None:
            self.last = (event.ts, event.at_us)
            self.last_line = event.line_no


def _loaded_fold(values: list) -> _Recorded:
    """A recorder fold as a stored state holds it (one saved before the fold kept tokens has
    four values: only a state of an older derivation version, which is never loaded)."""
    tokens = tuple(values[4]) if len(values) > 4 else _NO_TOKENS
    return values[0], values[1], values[2], values[3], tokens


def _recorder_step(previous: _Recorded, event: Event, cost: tuple[int | None, bool]) -> _Recorded:
    """Fold one event into what the engine's snapshot recorder holds for its node.

    A record replaces the previous one, except that a later round (or the verdict that
    settles a feedback marker of the same round) carries the superseded spend forward.
    """
    data = event.data
    previous_cost, previous_unknown, previous_round, previous_verdict, previous_tokens = previous
    rec_round = int(data.get("round") or 0)
    kind = data["event"]
    rec_verdict = "" if kind == "node_retried" else ("PASS" if kind == "node_passed" else "FAIL")
    rec_cost, rec_unknown = cost  # _cost of the event
    rec_cost = rec_cost or 0
    supersedes = previous_round >= 0 and (
        rec_round > previous_round or (rec_round == previous_round and previous_verdict == "" and rec_verdict != "")
    )
    rec_tokens = _tokens(data.get("usage"))
    if supersedes:
        rec_cost += previous_cost
        rec_unknown = rec_unknown or previous_unknown
        # The recorder folds the superseded record's usage in as well (RecordNode).
        if previous_tokens != _NO_TOKENS:
            rec_tokens = (rec_tokens[0] + previous_tokens[0], rec_tokens[1] + previous_tokens[1],
                          rec_tokens[2] + previous_tokens[2], rec_tokens[3] + previous_tokens[3])
    return rec_cost, rec_unknown, rec_round, rec_verdict, rec_tokens


def _any_terminal_matches(r: _Reconciler, run: RunInput, node_id: str, record: dict) -> bool:
    """Whether any terminal of the node is the one that wrote its snapshot record: the
    latest few are at hand (the record is nearly always one of them); the others are
    looked up only when none of those is."""
    recent = r.terminal_keys.get(node_id, ())
    for key in recent:
        if _record_matches(key, record):
            return True
    if run.terminal_lookup is None or r.terminal_count.get(node_id, 0) <= len(recent):
        return False
    return any(_record_matches(key, record) for key in run.terminal_lookup(node_id))


def _record_matches(terminal: tuple[str, int, str | None], record: dict) -> bool:
    """Whether a snapshot record is the one a terminal (verdict, round, session) wrote."""
    verdict, round_, ours = terminal
    if record.get("verdict") != verdict:
        return False
    if int(record.get("round") or 0) != round_:
        return False
    theirs = record.get("session_id")
    return not (ours and theirs and ours != theirs)


@dataclass(frozen=True)
class LiveRows:
    """The rows a walk resumed from a fold state may write again (all others it only
    adds to): the open leg, the executions not ended, charges and findings past the
    walk's own (the snapshot's and the assessment's, numbered after them)."""

    open_leg: int | None
    open_rounds: list[tuple[int, str, int]]  # (leg_ordinal, node_id, seq)
    charges_after: int
    findings_after: int


def live_rows(fold: dict) -> LiveRows:
    order = _EXECUTION_FIELDS.index("order")
    keys = [_EXECUTION_FIELDS.index(name) for name in ("leg_ordinal", "node_id", "seq")]
    open_orders = set(fold["open_executions"])
    return LiveRows(fold["open_leg"], [tuple(values[i] for i in keys) for values in fold["executions"]
                                       if values[order] in open_orders],
                    fold["charge_total"], fold["finding_total"])


def reconcile(run: RunInput) -> RunRows:
    """Derive every ledger row of one run from its facts. Pure and deterministic.

    With ``run.sink``, finished rows go there during the walk and the result holds the
    rest; with ``run.resume``, the walk goes on from that state over ``run.events``
    (the lines after it) and the result holds only rows that are new or may have
    changed since (the open leg and executions, nodes, the snapshot's findings and
    charges, the goal cycle) — together with what was kept, the same rows as a walk
    over every line."""
    r = _Reconciler(run)
    if run.resume is not None:
        r.load(run.resume)
    r.walk()
    state = r.state() if run.keep_state and (r.open_leg is not None or r.last_line >= run.state_from_line) else None
    snapshot = run.snapshot or {}
    graph = snapshot.get("graph")
    if not isinstance(graph, dict):
        graph = {}
    graph_nodes = {n["id"]: n for n in graph.get("nodes") or [] if isinstance(n, dict) and isinstance(n.get("id"), str)}
    records: dict[str, dict] = snapshot.get("nodes") or {}
    last_event = r.last

    open_by_node: dict[str, list[Execution]] = {}
    for execution in r.open_executions.values():
        open_by_node.setdefault(execution.node_id, []).append(execution)
    last_execution = r.last_execution
    node_rows = [_node_row(r, run, node_id, graph_nodes.get(node_id), records.get(node_id), last_event,
                           last_execution.get(node_id))
                 for node_id in sorted({*graph_nodes, *records, *last_execution})]

    if r.event_count == 0 and run.snapshot is not None:
        # No line of the stream (a copy without it): the plan commit that carries the
        # planner's spend is not there, and state.json's record of that call is all
        # there is to go by, as its node records are for the nodes.
        planning = _snapshot_planning_cost(snapshot)
        if planning is not None:
            cost, unknown, tokens = r._bounded(*planning, _tokens(snapshot.get("planning_usage")), "state.json", None)
            r.add_late_charge(Charge(0, "planning", None, PLANNING, None, None, None, None,
                                     cost, unknown, tokens, "state.json", None, None))
    assessed = _assess_cost(run.assess)
    assessment_cost = None  # as its charge counts it (past the run's bound: unknown)
    if assessed is not None:
        # The assessment call's spend exists only here. The `auto` process assesses a
        # cycle right after its run's first scheduler leg ends (`resume` never writes an
        # assess.json): it is dated there, not at a resume leg's end days later.
        assessed_at = r.first_run_end or last_event
        at, at_us = assessed_at if assessed_at else (None, None)
        cost, unknown, tokens = r._bounded(*assessed, _tokens((run.assess or {}).get("usage")), "assess.json", None)
        r.add_late_charge(Charge(0, "assessment", None, "assessment", None, None, at, at_us,
                                 cost, unknown, tokens, "assess.json", None, None))
        assessment_cost = cost
    node_money, closed_unrecorded = r.node_money, r.closed_unrecorded
    for row in node_rows:
        node_id = row["node_id"]
        row["cost_nano_usd"], row["invocations"], row["unknown_cost_invocations"] = node_money.get(node_id, (0, 0, 0))
        unrecorded = closed_unrecorded.get(node_id, 0)
        for execution in open_by_node.get(node_id, ()):
            unrecorded += execution.unrecorded_attempts + (1 if _ended_without_terminal(r, execution) else 0)
        row["unrecorded_attempts"] = unrecorded

    run_row = _run_row(r, run, snapshot, graph, graph_nodes, node_rows)
    goal = _goal_cycle(run, snapshot, assessment_cost)
    for seq, finding in enumerate(r.findings, r.finding_total + 1):
        finding.seq = seq
    done = r.drain()
    legs = sorted(done.legs + ([r.open_leg] if r.open_leg is not None else []), key=_ordinal)
    rounds = sorted(done.rounds + list(r.open_executions.values()), key=_order)
    rows = RunRows(run_row, legs, node_rows, rounds, done.charges + r.late_charges, done.findings + r.findings,
                   goal, r.problems)
    rows.state = state
    rows.events_walked = r.walked
    return rows


def _assess_cost(assess: dict | None) -> tuple[int | None, bool] | None:
    """(nano-dollars or None, unknown) of the assessment call, or None when there was no
    assessment charge. An assessor on Codex writes ``assess_cost_unknown: true`` beside
    a filler 0: that call was paid for at a price nobody recorded (NULL, never $0). The
    engine always writes assess_cost_usd, so a file without one is an assessment that
    ran at a price it does not give: unknown too, never dropped."""
    if assess is None:
        return None
    cost = assess.get("assess_cost_usd")
    if assess.get("assess_cost_unknown") or not isinstance(cost, int | float) or isinstance(cost, bool):
        return None, True
    return usd_nanos(cost), False


def _snapshot_planning_cost(snapshot: dict) -> tuple[int | None, bool] | None:
    """(nano-dollars or None, unknown) of the planner's call as state.json records it, or
    None when it records none (not an auto run). On Codex it writes planning_cost_unknown
    and no planning_cost_usd: a call paid for at a price nobody recorded."""
    if snapshot.get("planning_cost_unknown"):
        return None, True
    cost = snapshot.get("planning_cost_usd")
    return None if cost is None else (usd_nanos(cost), False)


def _ended_without_terminal(r: _Reconciler, execution: Execution) -> bool:
    """An execution whose leg closed without a terminal for it: its call's spend (a
    session limit, a killed leg) is recorded nowhere."""
    if execution.outcome is not None or not execution.started_at:
        return False
    return bool(execution.leg_ordinal) and not r._leg_open(execution.leg_ordinal)


def _node_row(r: _Reconciler, run: RunInput, node_id: str, spec: dict | None, record: dict | None,
              last_event: tuple[str, int] | None, last_execution: Execution | None) -> dict:
    latest = r.latest_terminal.get(node_id)
    verdict = provenance = session_id = detail = None
    retries = round_ = last_leg = None
    verdict_source = None
    if latest is not None:
        terminal, execution = latest
        verdict = execution.outcome
        verdict_source = "stream"
        retries, round_ = execution.retries, execution.round
        provenance, session_id, detail = execution.provenance, execution.session_id, execution.detail
        last_leg = execution.leg_ordinal or None

    if record is None:
        judged = duration = artifact_path = record_verdict = record_round = record_cost = record_unknown = None
        if latest is not None and run.snapshot is not None:
            r.findings.append(Finding(
                "snapshot_record_missing", node_id, execution.leg_ordinal or None,
                f"{terminal[0]} for {node_id} at line {terminal[1]} has no record in state.json "
                f"(dropped snapshot write)",
            ))
    else:
        get = record.get
        record_verdict = get("verdict")
        record_round = int(get("round") or 0)
        record_unknown = bool(get("cost_unknown"))
        record_cost = None if record_unknown else usd_nanos(get("cost_usd") or 0)
        judged, duration, artifact_path = bool(get("judged")), get("duration"), get("artifact_path") or None
        if record_verdict in SETTLED_VERDICTS:
            # The latest terminal's key is among the node's recent ones: when it is the
            # record's, no other need be looked at.
            latest_matches = latest is not None and _record_matches(terminal[2:], record)
            if not latest_matches and not _any_terminal_matches(r, run, node_id, record):
                # The snapshot holds a terminal verdict the stream never carried: the event
                # write was dropped (non-fatal in the engine). Recover it, flagged.
                verdict, verdict_source = record["verdict"], "snapshot"
                round_ = record_round
                provenance, session_id, detail = get("provenance"), get("session_id"), get("detail")
                retries = int(get("retries") or 0)
                charge = _recover(r, node_id, record, last_event)
                if charge is not None:
                    r.add_late_charge(charge)
                # The dropped terminal ended this node's last execution: its leg is the node's.
                if last_execution is not None:
                    last_leg = last_execution.leg_ordinal or None
            elif latest is not None and not latest_matches:
                # The record is an earlier terminal's: this one's judged and duration are not known.
                judged = duration = None
                r.findings.append(Finding(
                    "snapshot_behind", node_id, execution.leg_ordinal or None,
                    f"state.json still holds an earlier {record['verdict']} for {node_id}; the stream's latest "
                    f"terminal (line {terminal[1]}) has no snapshot record (dropped snapshot write, or "
                    f"the snapshot has not caught up yet)",
                ))
            else:
                _check_cost(r, node_id, record_cost)

    state = _node_state(r, last_execution, verdict)
    name = artifact_name(node_id)
    if record is not None and "budget_usd" in record:
        budget = record["budget_usd"]
    else:
        budget = spec.get("budget_usd") if spec else None
    return {
        "node_id": node_id,
        "node_type": spec.get("type") if spec else None,
        "in_graph": spec is not None,
        "verdict": verdict,
        "verdict_source": verdict_source,
        "state": state,
        "retries": retries,
        "round": round_,
        "provenance": provenance,
        "judged": judged,
        # (Not positive: no budget, as the engine applies none; scheduler.evaluateBudget.)
        "budget_nano_usd": usd_nanos(budget) if isinstance(budget, (int, float)) and budget > 0 else None,
        "duration_ns": duration,
        "session_id": session_id,
        "detail": detail,
        "artifact_name": name,
        "artifact_path": artifact_path,
        "has_artifact": name in run.artifacts,
        "has_failed_output": name in run.failed_outputs,
        # A judgment is never a blown budget (contract: judged).
        "budget_overrun": verdict == "FAIL" and judged is not True and bool(_BUDGET_FAILURE.match(detail or "")),
        "last_leg": last_leg,
        "snapshot_verdict": record_verdict,
        "snapshot_round": record_round,
        "snapshot_cost_nano_usd": record_cost,
        "snapshot_cost_unknown": record_unknown,
    }


def _node_state(r: _Reconciler, last: Execution | None, verdict: str | None) -> str:
    if last is None:
        return "settled" if verdict else "pending"
    leg_open = r._leg_open(last.leg_ordinal)
    if last.outcome in SETTLED_VERDICTS:
        return "settled"
    if last.outcome == "PAUSED":
        return "paused"
    if verdict and not leg_open:
        return "settled"
    return "running" if leg_open else "unfinished"


def _check_cost(r: _Reconciler, node_id: str, theirs: int | None) -> None:
    """``theirs``: the node's snapshot record's cost (None: unknown)."""
    cost, unknown = r.recorded.get(node_id, _NOT_RECORDED)[:2]
    if unknown or theirs is None:
        return
    if theirs != cost:
        r.findings.append(Finding(
            "cost_mismatch", node_id, None,
            f"state.json records ${theirs / 1e9:.6f} for {node_id}; its charges on the stream "
            f"account for ${cost / 1e9:.6f}",
        ))


def _recover(r: _Reconciler, node_id: str, record: dict, last_event: tuple[str, int] | None) -> Charge | None:
    """Add the charge of a terminal event the stream dropped, from the snapshot record.

    The record may have folded earlier rounds' spend in; only the part the stream does
    not already carry is charged. Dated at the node's last node_started (the execution
    the dropped terminal ended), else at the run's last event. Returns the charge (None
    when the recovery is refused, or the record has no accounting: nothing was paid);
    the caller numbers and keeps it.
    """
    started = r.last_started.get(node_id)
    anchor = started or last_event
    leg_ordinal = None
    execution = r.last_execution.get(node_id)
    if execution is not None:
        leg_ordinal = execution.leg_ordinal or None
    r.findings.append(Finding(
        "dropped_event", node_id, leg_ordinal,
        f"state.json records {record['verdict']} for {node_id} but the stream has no matching terminal "
        f"event; recovered from the snapshot",
    ))
    if not has_accounting(record):
        # Nothing was paid (a gate spawns no subprocess: its record has no cost, usage or
        # session), as a terminal event without accounting is no charge on the stream.
        if execution is not None and execution.outcome is None:
            execution.outcome = record["verdict"]
        return None
    prior_cost, prior_unknown, prior_round, prior_verdict, prior_tokens = r.recorded.get(node_id, _NOT_RECORDED)
    rec_round = int(record.get("round") or 0)
    folds = prior_round >= 0 and (rec_round > prior_round or (rec_round == prior_round and prior_verdict == ""))
    unknown = bool(record.get("cost_unknown"))
    cost = None if unknown else usd_nanos(record.get("cost_usd") or 0) - (prior_cost if folds else 0)
    tokens = _tokens(record.get("usage"))
    if folds and prior_tokens != _NO_TOKENS:
        # Its usage holds the superseded rounds' tokens too, which their own events carry.
        tokens = tuple(max(mine - prior, 0) for mine, prior in zip(tokens, prior_tokens, strict=True))
    if cost is None or cost >= 0:
        cost, unknown, tokens = r._bounded(cost, unknown, tokens, "state.json", None)
    if execution is not None and execution.outcome is None:
        execution.outcome = record["verdict"]
        execution.cost_nano_usd, execution.cost_unknown = cost, unknown
    if cost is not None and cost < 0:
        r.findings.append(Finding("recovery_negative", node_id, leg_ordinal,
                                  f"snapshot cost for {node_id} is below what the stream already charged"))
        return None
    return Charge(0, "recovered", leg_ordinal, r._leg_kind(leg_ordinal), node_id,
                  rec_round, anchor[0] if anchor else None, anchor[1] if anchor else None, cost,
                  unknown, tokens, "state.json", None, None)


def _run_row(r: _Reconciler, run: RunInput, snapshot: dict, graph: dict, graph_nodes: dict,
             node_rows: list[dict]) -> dict:
    last_leg = r.last_leg
    has_snapshot = run.snapshot is not None
    # Every snapshot record has a node row, which holds what the run row sums of it.
    unrecorded = records_cost = passed = 0
    records_unknown: bool | None = False
    passes = dict.fromkeys(PASS_COUNT_COLUMNS_ALL, 0)
    for node in node_rows:
        unrecorded += node["unrecorded_attempts"]
        records_cost += node["snapshot_cost_nano_usd"] or 0
        records_unknown = records_unknown or node["snapshot_cost_unknown"]
        if node["in_graph"] and node["snapshot_verdict"] == "PASS":
            passed += 1
        if node["verdict"] == "PASS":
            passes["passes"] += 1
            provenance = node["provenance"] or ""
            # Any other provenance is in `passes` alone (audit names it from the nodes).
            column = PASS_COUNT_COLUMNS.get(provenance)
            if column is not None:
                passes[column] += 1
    tokens = r.money[3:7]
    row: dict = {
        "event_count": r.event_count,
        "first_event_at": r.first[0] if r.first else None,
        "first_event_at_us": r.first[1] if r.first else None,
        "last_event_at": r.last[0] if r.last else None,
        "last_event_at_us": r.last[1] if r.last else None,
        "leg_count": r.run_leg_count,
        "any_leg": bool(r.leg_kinds),
        "last_leg_open": bool(last_leg and last_leg.is_open),
        "last_leg_phase": last_leg.phase if last_leg else None,
        "last_outcome": r.last_outcome,
        "last_detail": r.last_detail,
        "cost_nano_usd": r.money[0],
        "invocations": r.money[1],
        "unknown_cost_invocations": r.money[2],
        "unrecorded_attempts": unrecorded,
        "input_tokens": tokens[0],
        "cached_input_tokens": tokens[1],
        "output_tokens": tokens[2],
        "reasoning_output_tokens": tokens[3],
        **passes,
    }
    if not has_snapshot:
        row.update({k: None for k in SNAPSHOT_COLUMNS})
        return row
    goal = snapshot.get("goal")
    if not isinstance(goal, dict):
        goal = {}
    evidence = snapshot.get("build_evidence")
    if not isinstance(evidence, dict):
        evidence = {}
    gate = snapshot.get("gate")
    if not isinstance(gate, dict):
        gate = {}
    planning, planning_unknown = _snapshot_planning_cost(snapshot) or (None, None)  # None: not an auto run
    snapshot_cost = (planning or 0) + records_cost
    row.update({
        "snapshot_schema": snapshot.get("schema"),
        "runtime": snapshot.get("runtime") or "claude",  # absent means claude (RUN-FEED.md)
        "graph_name": graph.get("name"),
        "graph_version": graph.get("version"),
        "node_count": len(graph_nodes),
        "graph_source_path": snapshot.get("graph_source_path"),
        "graph_sha256": snapshot.get("graph_sha256"),
        "inputs_json": _json(snapshot.get("inputs")),
        "continue_on_fail": bool(snapshot.get("continue_on_fail")),
        "goal_text": goal.get("text"),
        "goal_cycle": goal.get("cycle"),
        "goal_max_cycles": goal.get("max_cycles"),
        "goal_first_run_id": goal.get("first_run_id"),
        "build_evidence_answer": evidence.get("answer"),
        "build_evidence_declared_by": evidence.get("declared_by"),
        "build_evidence_signals_json": _json(evidence.get("signals")),
        "gate_paused_at": gate.get("paused_at") or None,
        "gate_decisions_json": _json(gate.get("decisions")),
        "planning_cost_nano_usd": planning,
        "planning_cost_unknown": planning_unknown,
        "snapshot_cost_nano_usd": snapshot_cost,
        "snapshot_cost_unknown": bool(planning_unknown or records_unknown),
        "nodes_passed": passed,
        "all_nodes_passed": all_nodes_passed(snapshot, graph_nodes),
    })
    return row


SNAPSHOT_COLUMNS = (
    "snapshot_schema", "runtime", "graph_name", "graph_version", "node_count", "graph_source_path",
    "graph_sha256", "inputs_json", "continue_on_fail", "goal_text", "goal_cycle", "goal_max_cycles",
    "goal_first_run_id", "build_evidence_answer", "build_evidence_declared_by", "build_evidence_signals_json",
    "gate_paused_at", "gate_decisions_json", "planning_cost_nano_usd", "planning_cost_unknown",
    "snapshot_cost_nano_usd", "snapshot_cost_unknown", "nodes_passed", "all_nodes_passed",
)


def _json(value: object) -> str | None:
    if value is None or value == {} or value == []:
        return None
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _goal_cycle(run: RunInput, snapshot: dict, assessment_cost: int | None) -> dict | None:
    """``assessment_cost``: the assessment's charge, as counted (None: unknown, or none)."""
    goal = snapshot.get("goal") if isinstance(snapshot.get("goal"), dict) else None
    assess = run.assess
    if goal is None and assess is None:
        return None
    goal = goal or {}
    return {
        "first_run_id": goal.get("first_run_id") or run.run_id,
        "cycle": goal.get("cycle"),
        "max_cycles": goal.get("max_cycles"),
        "text": goal.get("text"),
        "assessed": assess is not None,
        "goal_met": assess.get("goal_met") if assess is not None else None,
        "remaining": assess.get("remaining") if assess is not None else None,
        "evidence": assess.get("evidence") if assess is not None else None,
        "assess_cost_nano_usd": assessment_cost,
    }
