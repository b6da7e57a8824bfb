"""The six-valued run status, composed at query time (ADR 0015, runstatus.Derive).

Nothing here is stored: the ledger keeps the stream's facts, and the lock is probed
live — only beside an open leg, since beside a closed leg it says nothing.
"""

from __future__ import annotations

import os
import stat
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
                "has_state", "all_nodes_passed", "gate_paused_at", "stream_paused")


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
    # Reading stopped before a line of a newer event schema: the lines past it are not
    # known, so neither is whether they closed the last leg (or opened another).
    stream_paused: bool = False

    @classmethod
    def from_row(cls, row) -> StatusFacts:
        m = row._mapping if hasattr(row, "_mapping") else row
        return cls.from_columns(*(m[name] for name in FACT_COLUMNS))

    @classmethod
    def from_columns(cls, any_leg, last_leg_open, last_leg_phase, last_outcome, last_detail, snapshot_schema,
                     has_state, all_nodes_passed, gate_paused_at, stream_paused) -> StatusFacts:
        """From the FACT_COLUMNS of a `runs` row, in that order."""
        has_snapshot = snapshot_schema is not None
        return cls(bool(any_leg), bool(last_leg_open), last_leg_phase, last_outcome, has_snapshot,
                   bool(all_nodes_passed), bool(has_state) and not has_snapshot, last_detail, gate_paused_at,
                   bool(stream_paused))

    @property
    def spoken(self) -> bool:
        """A directory with no leg and no snapshot has said nothing: not known yet."""
        return self.any_leg or self.has_snapshot or self.snapshot_unreadable

    @property
    def session_limited(self) -> bool:
        """The last leg paused for a session limit (the same test reconcile puts on a leg)."""
        return self.last_outcome == "paused" and "session limit" in (self.last_detail or "")


def derive(facts: StatusFacts, lock: Liveness) -> str:
    """The one place the status rules live (views.VIEWS_0015's ledger_state CASE and
    `could_be` are checked against it by tests/test_status.py)."""
    if not facts.spoken or facts.stream_paused:
        # Nothing said yet, or said in a newer schema than this omg-ledger reads: no
        # status is concluded from the lines before it (ABANDONED least of all).
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
    from sqlalchemy import and_, false, func, not_, or_, true

    from . import schema

    r = schema.runs.c
    if status in (PASS, FAIL):
        return true()  # a leg stored open may have closed since the last sync, a paused run been resumed
    # A stored PAUSED or FAIL may have been resumed since the last sync (recheck).
    may_move_on = or_(r.last_leg_open, r.last_outcome.is_(None), r.last_outcome != "passed",
                      not_(func.coalesce(r.all_nodes_passed, false())))
    if status == NOT_KNOWN_YET:
        # A stream that may have moved on may have met a line of a newer schema since.
        return or_(and_(r.any_leg.is_(False), r.snapshot_schema.is_(None), r.has_state.is_(False)),
                   r.stream_paused.is_(True), may_move_on)
    return may_move_on


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


def status_of(facts: StatusFacts, run_dir: str, prober: Prober = probe_lock, here: bool = True) -> str:
    """Probe the lock only when it can matter: beside an open leg, and only on the machine
    the run's home is on (``here``): elsewhere the path names another directory, or none,
    and a lock on another machine cannot be probed — no evidence either way."""
    if not facts.last_leg_open or not here:
        return derive(facts, Liveness.UNKNOWN)
    if not os.path.isdir(run_dir):
        return derive(facts, Liveness.UNKNOWN)  # gone: no evidence either way
    return derive(facts, prober(run_dir))


def confirm_abandoned(facts: StatusFacts, run_dir: str, checkpoint, prober: Prober = probe_lock
                      ) -> tuple[str, StatusFacts]:
    """The status of a run the stored facts and a free lock call ABANDONED, with what the
    stream says now. The stored facts are as of the last sync and the lock is probed now:
    a leg that closed after the sync has let go of its lock, and reads as dead beside
    "last leg open" — so ABANDONED stands only if the lines appended since
    ``checkpoint`` (the run's ``streams`` row) leave the leg open. Those lines are final:
    a leg writes its last event before it gives the lock back. A leg they open again is
    probed again; a leg they close is settled, judged with state.json as it is now.
    Returns the status and the facts it was derived from."""
    return _with_new_lines(ABANDONED, facts, run_dir, checkpoint, prober)[:2]


# Stored statuses a stream may have moved on from since the last sync, on this machine: a
# resume of a PAUSED or FAIL run, the first leg of a run synced before its first line, a
# leg in flight (its lock held, or unable to answer) that closed, a plan that committed.
IN_FLIGHT = (RUNNING, PLANNING)
RECHECKED = (PAUSED, FAIL, NOT_KNOWN_YET, *IN_FLIGHT)


def recheck(status: str, facts: StatusFacts, run_dir: str, checkpoint, copies: Callable[[], Iterable[Copy]] = tuple,
            prober: Prober = probe_lock) -> tuple[str, StatusFacts]:
    """The status of a run the stored facts call one of RECHECKED, with what the stream
    says now (``checkpoint``: where the last sync stopped reading it). A leg opened since
    (a resume, a run's first leg) is probed like any open leg, and may have closed again;
    a leg in flight that the appended lines close is settled, judged with state.json as it
    is now (beside a closed leg the lock says nothing), and a plan committed since is
    RUNNING. A stream with no byte since the last sync keeps ``status`` for one lstat —
    unless a settled run's ``copies`` here (asked only then) moved on past it
    (_settled_across_copies)."""
    if status not in RECHECKED:
        return status, facts
    now_status, now_facts, lines = _with_new_lines(status, facts, run_dir, checkpoint, prober)
    if lines is not None or checkpoint is None or status in IN_FLIGHT:
        return now_status, now_facts
    return _settled_across_copies(status, facts, checkpoint.next_line - 1, copies(), prober)


def stream_changed_since_sync(run_dir: str, checkpoint) -> bool | None:
    """Whether the run's events.jsonl is no longer the file the last sync read (another
    size, inode or time: lines appended, the file replaced or removed), so rows stored
    from it may be behind the stream. None when this machine cannot look: the run's
    directory is not here. One lstat; the home is never written."""
    from .tail import needs_reading

    try:
        info = os.lstat(os.path.join(run_dir, "events.jsonl"))
    except OSError:
        if not os.path.isdir(run_dir):
            return None
        return checkpoint is not None  # read at the last sync, gone or unreadable now
    return needs_reading(info, checkpoint)


def _with_new_lines(stored: str, facts: StatusFacts, run_dir: str, checkpoint, prober: Prober
                    ) -> tuple[str, StatusFacts, int | None]:
    """``stored`` (the status of the stored facts) composed with the lines of the run's
    stream appended since ``checkpoint``: unchanged when no leg opened or closed. The
    third value is the stream's line count now when a leg did (else None)."""
    run_id = os.path.basename(run_dir)
    # (A stream that cannot be looked at is read below, which words what is wrong with it.)
    if checkpoint is not None and checkpoint.paused_schema is None \
            and stream_changed_since_sync(run_dir, checkpoint) is False:
        # Not a byte since the last sync: the stored facts are the stream's.
        if stored == ABANDONED:
            return _with_final_line(facts, run_dir, run_id, checkpoint)
        return stored, facts, None
    stream = os.path.join(run_dir, "events.jsonl")
    from .feed import parse_stream_line
    from .tail import TailReader

    def parse(line: bytes, line_no: int, offset: int) -> object:
        return parse_stream_line(line, line_no, offset, run_id)

    unknown = derive(facts, Liveness.UNKNOWN) if stored == ABANDONED else stored
    try:
        reader = TailReader(stream, checkpoint, parse)
    except OSError:
        # The stream the facts came from is gone or unreadable: no evidence either way.
        return unknown, facts, None
    if reader.replace or checkpoint is None:
        # Not the file read before: its legs are walked from its first line.
        open_, phase, outcome, detail, any_leg = False, None, None, None, False
    else:
        open_, phase, outcome, detail, any_leg = (facts.last_leg_open, facts.last_leg_phase, facts.last_outcome,
                                                  facts.last_detail, facts.any_leg)
    changed = reader.replace or checkpoint is None
    try:
        for event in reader:
            kind = event.data.get("event")
            if kind == "run_started":
                open_, any_leg, changed = True, True, True
                phase = "planning" if event.data.get("phase") == "planning" else "run"
            elif kind == "run_finished" and open_:
                open_, changed = False, True
                outcome, detail = event.data.get("outcome"), event.data.get("detail")
    except OSError:
        return unknown, facts, None  # a read that failed is not an answer
    read_to = reader.checkpoint
    paused = read_to is not None and read_to.paused_schema is not None
    if paused != facts.stream_paused:
        changed = True  # a newer schema met now, or understood now
    if not changed:
        if stored == ABANDONED:
            return _with_final_line(facts, run_dir, run_id, read_to)
        return stored, facts, None
    lines = read_to.next_line - 1 if read_to is not None else None
    now = facts._replace(any_leg=any_leg, last_leg_open=open_, last_leg_phase=phase, last_outcome=outcome,
                         last_detail=detail, stream_paused=paused)
    if open_:
        status = derive(now, prober(run_dir))
        if status == ABANDONED:
            status, now, _ = _with_final_line(now, run_dir, run_id, read_to)
        return status, now, lines
    now = now._replace(**_snapshot_facts_now(run_dir, run_id))
    return derive(now, Liveness.UNKNOWN), now, lines


def bytes_after_last_line(checkpoint) -> bool:
    """Whether the stream ended in bytes after its last complete line when ``checkpoint`` was
    taken (not a stream paused before a newer schema's line, nor one skipping a runaway
    line, whose unread bytes are whole lines)."""
    return (checkpoint is not None and checkpoint.size is not None and checkpoint.size > checkpoint.end_offset
            and checkpoint.paused_schema is None and checkpoint.scan_offset is None)


def _with_final_line(facts: StatusFacts, run_dir: str, run_id: str, checkpoint
                     ) -> tuple[str, StatusFacts, int | None]:
    """The status of a run whose open leg's lock is free (ABANDONED so far), with the bytes
    after its last complete line as ``checkpoint`` (the stream read up to now) left them: a
    whole event written without its newline (a write cut between the two) is final once
    the lock is free — no writer is left to end it — and the engine's own reader counts it.
    A run_finished there closed the leg: the run is not ABANDONED. Anything else (nothing,
    a cut line, an event that closes nothing) leaves it ABANDONED, with state.json as it is
    now: the recovery hint turns on it, and a snapshot written since the last sync is one
    `resume --retry-failed` loads (runstatus.Gather reads it when asked)."""
    from .feed import Event, parse_stream_line
    from .tail import MAX_LINE_BYTES, Paused, open_regular

    def abandoned() -> tuple[str, StatusFacts, None]:
        if facts.has_snapshot:  # (the engine replaces a snapshot whole: one there stays one to resume from)
            return ABANDONED, facts, None
        return ABANDONED, facts._replace(**_snapshot_facts_now(run_dir, run_id)), None

    if not bytes_after_last_line(checkpoint):
        return abandoned()
    end_offset, line_no = checkpoint.end_offset, checkpoint.next_line
    try:
        # As sync opens it: a symlink or a FIFO put in its place is refused, never waited on.
        fd = open_regular(os.path.join(run_dir, "events.jsonl"))
        try:
            tail = os.pread(fd, MAX_LINE_BYTES + 1, end_offset)
        finally:
            os.close(fd)
    except OSError:
        return derive(facts, Liveness.UNKNOWN), facts, None  # a read that failed is not an answer
    if b"\n" in tail:
        return derive(facts, Liveness.UNKNOWN), facts, None  # written to since it was read: someone is there
    if not tail.strip() or len(tail) > MAX_LINE_BYTES:
        return abandoned()
    event = parse_stream_line(tail, line_no, end_offset, run_id)
    if isinstance(event, Paused):
        # A line of a newer schema, which may be the run_finished: nothing is concluded.
        now = facts._replace(stream_paused=True)
        return derive(now, Liveness.UNKNOWN), now, None
    if not isinstance(event, Event) or event.data.get("event") != "run_finished":
        return abandoned()
    now = facts._replace(last_leg_open=False, last_outcome=event.data.get("outcome"),
                         last_detail=event.data.get("detail"))
    now = now._replace(**_snapshot_facts_now(run_dir, run_id))
    return derive(now, Liveness.UNKNOWN), now, line_no


def _snapshot_facts_now(run_dir: str, run_id: str) -> dict:
    """has_snapshot, all_nodes_passed, snapshot_unreadable and gate_paused_at, from the
    run's state.json as it is now (the same reading reconcile gives them)."""
    from .snapshot import (
        BadSnapshot,
        UnreadableFile,
        all_nodes_passed,
        parse_state,
        read_small_file,
        snapshot_names_another_run,
    )

    path = os.path.join(run_dir, "state.json")
    absent = {"has_snapshot": False, "all_nodes_passed": False, "snapshot_unreadable": False, "gate_paused_at": None}
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # never open a FIFO or follow a symlink
            return {**absent, "snapshot_unreadable": True}
        snapshot = parse_state(read_small_file(path).content)
    except FileNotFoundError:
        return absent
    except (OSError, UnreadableFile, BadSnapshot):
        return {**absent, "snapshot_unreadable": True}
    if snapshot_names_another_run(snapshot, run_id):
        return {**absent, "snapshot_unreadable": True}
    graph = snapshot.get("graph") if isinstance(snapshot.get("graph"), dict) else {}
    graph_ids = {n["id"] for n in graph.get("nodes") or [] if isinstance(n, dict) and isinstance(n.get("id"), str)}
    gate = snapshot.get("gate") or {}
    return {"has_snapshot": True, "all_nodes_passed": all_nodes_passed(snapshot, graph_ids),
            "snapshot_unreadable": False, "gate_paused_at": gate.get("paused_at") or None}


class Copy(NamedTuple):
    """Another copy of a run (the same stream, in another home), as the status reads it."""

    dir_path: str | None  # None: its home is on another machine, where its lock cannot be probed
    facts: StatusFacts
    checkpoint: object  # its stream's tail.Checkpoint, or None


def status_across_copies(status: str, facts: StatusFacts, copies: Iterable[Copy],
                         prober: Prober = probe_lock) -> tuple[str, StatusFacts]:
    """The status of a run held in several homes, from ``status`` (what one copy's lock
    and stream said) and the other copies. A backup of a live run's directory carries a
    marked lock nobody holds, so ABANDONED needs every copy's lock free: a copy whose lock
    is held or cannot answer keeps the run in flight, and a copy whose stream closed the
    leg since the last sync (confirm_abandoned) says the run settled. A copy whose
    directory is gone holds no leg and says nothing. Returns the status and its facts."""
    if status != ABANDONED:
        return status, facts
    for copy in copies:
        if copy.dir_path is None:
            return derive(facts, Liveness.UNKNOWN), facts
        if os.path.isdir(copy.dir_path):
            lock = prober(copy.dir_path)
            if lock is not Liveness.FREE:
                return derive(facts, lock), facts
            if copy.facts.last_leg_open:
                copy_status, copy_facts = confirm_abandoned(copy.facts, copy.dir_path, copy.checkpoint, prober)
                if copy_status != ABANDONED:
                    return copy_status, copy_facts
    return status, facts


def _settled_across_copies(status: str, facts: StatusFacts, lines: int, copies: Iterable[Copy],
                           prober: Prober) -> tuple[str, StatusFacts]:
    """The status of a PAUSED or FAIL run held in several homes whose own stream has not
    moved on (``lines``: its line count, the stored checkpoint's): a copy here resumed
    since the last sync (the live home beside its backup, both synced) says where the run
    is now, once its stream holds more lines than this one — a backup catching up on what
    this copy already holds says nothing new."""
    if status not in (PAUSED, FAIL):
        return status, facts
    for copy in copies:
        if copy.dir_path is None or copy.checkpoint is None or copy.facts.last_leg_open:
            continue  # another machine's, stream-less, or a copy taken mid-leg (behind this one)
        copy_status, copy_facts, copy_lines = _with_new_lines(
            derive(copy.facts, Liveness.UNKNOWN), copy.facts, copy.dir_path, copy.checkpoint, prober)
        if copy_lines is not None and copy_lines > lines:
            return copy_status, copy_facts
    return status, facts


def status_without_own_copy(status: str, facts: StatusFacts, run_dir: str, copies: list[Copy],
                            prober: Prober = probe_lock) -> tuple[str, StatusFacts]:
    """The status of a run read in flight because its own directory is gone, when other
    copies of it are still here: a gone copy says nothing, so they decide — ABANDONED
    only if at least one of them answers (and every one is free, status_across_copies)."""
    if status not in (RUNNING, PLANNING) or not facts.last_leg_open or os.path.isdir(run_dir):
        return status, facts
    if not any(copy.dir_path is not None and os.path.isdir(copy.dir_path) for copy in copies):
        return status, facts
    return status_across_copies(ABANDONED, facts, copies, prober)


def recovery_hint(run_id: str, has_snapshot: bool, snapshot_unreadable: bool = False) -> str:
    if has_snapshot:
        return f"continue it with `oh-my-graph resume {run_id} --retry-failed`"
    if snapshot_unreadable:
        # Its absence would be a fact about the run; its unreadability is one about the reader.
        return (f"its state.json is there but cannot be read (`omg-ledger problems` says why): look at it before "
                f"`oh-my-graph resume {run_id} --retry-failed` or running the graph again")
    return "it never wrote a snapshot, so there is nothing to resume from — run the graph again"


def not_probed(facts: StatusFacts, run_dir: str, elsewhere: str | None) -> str | None:
    """Why the lock beside an open leg could not be probed here (the run then reads in
    flight on the stream alone), or None. ``elsewhere``: the machine the run's home is
    on, when it is not this one."""
    if not facts.last_leg_open:
        return None
    if elsewhere is not None:
        return f"its home is on another machine ({elsewhere}), where `omg-ledger runs` tells a live leg from a dead one"
    if not os.path.isdir(run_dir):
        return f"its directory {run_dir} is not there any more (if the run moved, sync the home it is in now)"
    return None


def hint(status: str, run_id: str, facts: StatusFacts, unprobed: str | None = None) -> str | None:
    """``unprobed``: not_probed's reason, when the open leg's lock could not be probed."""
    if unprobed is not None and status in (RUNNING, PLANNING):
        return f"run {run_id} reads {status} on the stream alone: its lock cannot be probed from here — {unprobed}"
    if status == ABANDONED:
        return (f"run {run_id} is ABANDONED — a leg started and never reported an end: "
                f"{recovery_hint(run_id, facts.has_snapshot, facts.snapshot_unreadable)}. WARNING: {ORPHAN_WARNING}.")
    if status == NOT_KNOWN_YET and facts.stream_paused:
        return (f"run {run_id}: its events.jsonl has lines of an event schema newer than this omg-ledger reads, so "
                f"its status is not known (nor whether its last leg ended): upgrade omg-ledger, then sync "
                f"(`omg-ledger problems` says where reading stopped)")
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
