"""The six-valued run status, composed at query time (ADR 0015, runstatus.Derive).

Nothing here is stored: the ledger keeps the stream's facts, and the lock is probed
live — only beside an open leg, since beside a closed leg it says nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .liveness import Liveness, probe_lock

PLANNING, RUNNING, ABANDONED, PAUSED, PASS, FAIL = "PLANNING", "RUNNING", "ABANDONED", "PAUSED", "PASS", "FAIL"
NOT_KNOWN_YET = "NOT-KNOWN-YET"
STATUSES = (PLANNING, RUNNING, ABANDONED, PAUSED, PASS, FAIL, NOT_KNOWN_YET)

ORPHAN_WARNING = ("a model-CLI subprocess started by the dead leg may still be running and spending, "
                  "so check for one before you spend again")


@dataclass(frozen=True)
class StatusFacts:
    any_leg: bool
    last_leg_open: bool
    last_leg_phase: str | None
    last_outcome: str | None
    has_snapshot: bool
    all_nodes_passed: bool

    @classmethod
    def from_row(cls, row) -> StatusFacts:
        m = row._mapping if hasattr(row, "_mapping") else row
        return cls(bool(m["any_leg"]), bool(m["last_leg_open"]), m["last_leg_phase"], m["last_outcome"],
                   m["snapshot_schema"] is not None, bool(m["all_nodes_passed"]))

    @property
    def spoken(self) -> bool:
        """A directory with no leg and no snapshot has said nothing: not known yet."""
        return self.any_leg or self.has_snapshot


def derive(facts: StatusFacts, lock: Liveness) -> str:
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
    return FAIL


Prober = Callable[[str], Liveness]


def status_of(facts: StatusFacts, run_dir: str, prober: Prober = probe_lock) -> str:
    """Probe the lock only when it can matter: beside an open leg."""
    if not facts.last_leg_open:
        return derive(facts, Liveness.UNKNOWN)
    if not os.path.isdir(run_dir):
        return derive(facts, Liveness.UNKNOWN)  # gone: no evidence either way
    return derive(facts, prober(run_dir))


def recovery_hint(run_id: str, has_snapshot: bool) -> str:
    if has_snapshot:
        return f"continue it with `oh-my-graph resume {run_id} --retry-failed`"
    return "it never wrote a snapshot, so there is nothing to resume from — run the graph again"


def hint(status: str, run_id: str, has_snapshot: bool, gate: str | None, session_limited: bool) -> str | None:
    if status == ABANDONED:
        return (f"run {run_id} is ABANDONED — a leg started and never reported an end: "
                f"{recovery_hint(run_id, has_snapshot)}. WARNING: {ORPHAN_WARNING}.")
    if status == PAUSED:
        if session_limited:
            how = f"after the session limit resets, `oh-my-graph resume {run_id} --retry-failed`"
        elif gate:
            how = (f"at gate {gate}: `oh-my-graph resume {run_id} --approve {gate}` or "
                   f"`--reject {gate}`")
        else:
            how = (f"`oh-my-graph resume {run_id} --retry-failed` after a session limit, or "
                   f"`--approve <gate-id>` / `--reject <gate-id>` at a gate")
        return f"run {run_id} is PAUSED — resumable: {how}"
    return None
