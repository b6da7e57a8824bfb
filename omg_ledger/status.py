"""The six-valued run status, composed at query time (ADR 0015, runstatus.Derive).

Nothing here is stored: the ledger keeps the stream's facts, and the lock is probed
live — only beside an open leg, since beside a closed leg it says nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .liveness import Liveness, probe_lock

PLANNING, RUNNING, ABANDONED, PAUSED, PASS, FAIL = "PLANNING", "RUNNING", "ABANDONED", "PAUSED", "PASS", "FAIL"
NOT_KNOWN_YET = "NOT-KNOWN-YET"
STATUSES = (PLANNING, RUNNING, ABANDONED, PAUSED, PASS, FAIL, NOT_KNOWN_YET)

ORPHAN_WARNING = ("a model-CLI subprocess started by the dead leg may still be running and spending, "
                  "so check for one before you spend again")


# The columns of `runs` that status, the pause reason and the hint are composed from.
FACT_COLUMNS = ("any_leg", "last_leg_open", "last_leg_phase", "last_outcome", "last_detail", "snapshot_schema",
                "has_state", "all_nodes_passed", "gate_paused_at")


class StatusFacts(NamedTuple):
    """A tuple, not a dataclass: `runs` makes one per run, and a tuple is built ~7x faster."""

    any_leg: bool
    last_leg_open: bool
    last_leg_phase: str | None
    last_outcome: str | None
    has_snapshot: bool
    all_nodes_passed: bool
    snapshot_unreadable: bool = False  # state.json is there but could not be read (a problem)
    last_detail: str | None = None
    gate_paused_at: str | None = None

    @classmethod
    def from_row(cls, row) -> StatusFacts:
        m = row._mapping if hasattr(row, "_mapping") else row
        return cls.from_columns(*(m[name] for name in FACT_COLUMNS))

    @classmethod
    def from_columns(cls, any_leg, last_leg_open, last_leg_phase, last_outcome, last_detail, snapshot_schema,
                     has_state, all_nodes_passed, gate_paused_at) -> StatusFacts:
        """From the FACT_COLUMNS of a `runs` row, in that order."""
        has_snapshot = snapshot_schema is not None
        return cls(bool(any_leg), bool(last_leg_open), last_leg_phase, last_outcome, has_snapshot,
                   bool(all_nodes_passed), bool(has_state) and not has_snapshot, last_detail, gate_paused_at)

    @property
    def spoken(self) -> bool:
        """A directory with no leg and no snapshot has said nothing: not known yet."""
        return self.any_leg or self.has_snapshot or self.snapshot_unreadable

    @property
    def session_limited(self) -> bool:
        """The last leg paused for a session limit (the same test reconcile puts on a leg)."""
        return self.last_outcome == "paused" and "session limit" in (self.last_detail or "")


def derive(facts: StatusFacts, lock: Liveness) -> str:
    """The one place the status rules live (views.VIEWS_0006's ledger_state CASE and
    `could_be` are checked against it by tests/test_status.py)."""
    if not facts.spoken:
        return NOT_KNOWN_YET
    if facts.last_leg_open and lock is Liveness.FREE:
        return ABANDONED
    if facts.last_leg_open:
        return PLANNING if facts.last_leg_phase == "planning" else RUNNING
    if facts.last_outcome == "paused":
        return PAUSED
    if facts.has_snapshot and facts.all_nodes_passed:
        return PASS
    if facts.snapshot_unreadable and facts.last_outcome == "passed":
        # An unreadable state.json is damage to the reader's input (a recorded problem),
        # not a verdict about the work: the stream's own "passed" stands.
        return PASS
    return FAIL


def could_be(status: str):
    """A SQL pre-filter on `runs` keeping every run that could have ``status``; the exact
    status still comes from :func:`derive` with a live lock probe."""
    from sqlalchemy import and_, or_

    from . import schema

    r = schema.runs.c
    if status in (ABANDONED, RUNNING, PLANNING):
        return r.last_leg_open
    if status == PAUSED:
        return and_(r.last_leg_open.is_(False), r.last_outcome == "paused")
    if status == NOT_KNOWN_YET:
        return and_(r.any_leg.is_(False), r.snapshot_schema.is_(None), r.has_state.is_(False))
    return and_(r.last_leg_open.is_(False), or_(r.last_outcome.is_(None), r.last_outcome != "paused"))  # PASS, FAIL


GATE, SESSION_LIMIT, OTHER = "gate", "session_limit", "other"


def pause_reason(facts: StatusFacts) -> str:
    """Why a PAUSED run waits. The last leg decides: a session limit in leg 1 and a gate in
    leg 2 is a run waiting at the gate."""
    if facts.session_limited:
        return SESSION_LIMIT
    if facts.gate_paused_at:
        return GATE
    return OTHER


INTERRUPTED = "interrupted"


def node_state(stored: str, run_status: str) -> str:
    """A node's state, composed like run status: the stored row says what the stream
    says ("running": its last execution has no terminal in the open leg); a node left
    running in the open leg of an ABANDONED run is interrupted, never running."""
    if stored == "running" and run_status == ABANDONED:
        return INTERRUPTED
    return stored


def unrecorded_attempts(stored: int, nodes_left_running: int, run_status: str) -> int:
    """Attempts the engine paid for and recorded nowhere. A call killed in an open leg
    found abandoned counts the same as one in a leg a later leg followed (which the
    stored count already holds)."""
    return int(stored or 0) + (int(nodes_left_running or 0) if run_status == ABANDONED else 0)


Prober = Callable[[str], Liveness]


def status_of(facts: StatusFacts, run_dir: str, prober: Prober = probe_lock) -> str:
    """Probe the lock only when it can matter: beside an open leg."""
    if not facts.last_leg_open:
        return derive(facts, Liveness.UNKNOWN)
    if not os.path.isdir(run_dir):
        return derive(facts, Liveness.UNKNOWN)  # gone: no evidence either way
    return derive(facts, prober(run_dir))


def status_across_copies(status: str, facts: StatusFacts, copy_dirs: Iterable[str],
                         prober: Prober = probe_lock) -> str:
    """The status of a run held in several homes, from ``status`` (what one copy's lock
    said) and the other copies' directories. A backup of a live run's directory carries a
    marked lock nobody holds, so ABANDONED needs every copy's lock free: a copy whose lock
    is held or cannot answer keeps the run in flight. A copy whose directory is gone holds
    no leg and says nothing."""
    if status != ABANDONED:
        return status
    for copy_dir in copy_dirs:
        if os.path.isdir(copy_dir):
            lock = prober(copy_dir)
            if lock is not Liveness.FREE:
                return derive(facts, lock)
    return status


def recovery_hint(run_id: str, has_snapshot: bool) -> str:
    if has_snapshot:
        return f"continue it with `oh-my-graph resume {run_id} --retry-failed`"
    return "it never wrote a snapshot, so there is nothing to resume from — run the graph again"


def hint(status: str, run_id: str, facts: StatusFacts) -> str | None:
    if status == ABANDONED:
        return (f"run {run_id} is ABANDONED — a leg started and never reported an end: "
                f"{recovery_hint(run_id, facts.has_snapshot)}. WARNING: {ORPHAN_WARNING}.")
    if status == PAUSED:
        reason = pause_reason(facts)
        gate = facts.gate_paused_at
        if reason == SESSION_LIMIT:
            how = f"after the session limit resets, `oh-my-graph resume {run_id} --retry-failed`"
        elif reason == GATE:
            how = (f"at gate {gate}: `oh-my-graph resume {run_id} --approve {gate}` or "
                   f"`--reject {gate}`")
        else:
            how = (f"`oh-my-graph resume {run_id} --retry-failed` after a session limit, or "
                   f"`--approve <gate-id>` / `--reject <gate-id>` at a gate")
        return f"run {run_id} is PAUSED — resumable: {how}"
    return None
