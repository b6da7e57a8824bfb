"""Pure parsing, pairing and summarising of the runner's ``events.jsonl`` stream.

The runner appends one JSON line before each role invocation and one after it
settles (the contract is quoted from the runner PR in
``/work/shared/seeds/runner-invocation-events.txt``)::

    {"ts", "role", "milestone", "event": "start"}
    {"ts", "role", "milestone", "event": "end", "status", "duration_ms"}

The stream is *display-only* and *best-effort*: lines can be missing, a start
can lack its end, an end can lack its start.  The ledger stays the source of
truth; this module only turns the stream into rows a report can show, and it
never drops a line to make the picture look tidier.

Nothing here does I/O: callers read the file, split it into lines, and hand the
bytes to :func:`parse_invocation_line`, then hand the parsed lines (in file
order) to :func:`pair_invocations`.

Decisions that are ours (not the runner's) are spelled out where they are made:

* how a ``recover`` end is recognised and what it closes (:func:`pair_invocations`);
* which statuses count as failures (:data:`SUCCESS_STATUSES`, :data:`JUDGED_STATUSES`);
* which percentile definition is used (:func:`percentile`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson

from .units import RFC3339_DATE_TIME

__all__ = [
    "JUDGED_STATUSES",
    "RECOVER_STATUS",
    "SUCCESS_STATUSES",
    "InvocationLine",
    "InvocationLineError",
    "PairedInvocation",
    "classify_status",
    "is_failure_status",
    "is_recover_end",
    "pair_appended",
    "pair_invocations",
    "parse_invocation_line",
    "parse_rfc3339",
    "percentile",
    "summarize",
]

Event = Literal["start", "end"]
Outcome = Literal["paired", "recovered", "unmatched_end", "dangling"]
DurationSource = Literal["reported", "timestamps"]

#: Status the runner's ``recover`` writes on the end line that closes a killed
#: supervisor's dangling start.  Informational: recognition keys on ``role``
#: being null (see :func:`is_recover_end`), not on this string.
RECOVER_STATUS = "INVOCATION_FAILURE"

#: Statuses by which a role reports that it did its job (the runner's lifecycle
#: table: bulldozer DONE, zen GO, piledriver/instinct SUCCESS, navi OBSERVED/DONE,
#: specialists READY/ACCEPT).
SUCCESS_STATUSES: frozenset[str] = frozenset(
    {"DONE", "GO", "SUCCESS", "OBSERVED", "READY", "ACCEPT"}
)

#: Statuses by which a role *ran fine* but judged the work negatively
#: (bulldozer BLOCKED/NEEDS_DEEP, zen NO-GO, navi BLOCKED/NEEDS_CONFIRMATION).
#: These are verdicts, not machinery failures, so they do not count as failures.
JUDGED_STATUSES: frozenset[str] = frozenset(
    {"BLOCKED", "NEEDS_DEEP", "NO-GO", "NEEDS_CONFIRMATION"}
)


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class InvocationLine:
    """One validated line of ``events.jsonl``."""

    line_no: int
    byte_offset: int
    ts: str
    event: Event
    role: str | None
    milestone: str | None
    status: str | None
    duration_ms: int | None
    raw: dict[str, Any]


class InvocationLineError(ValueError):
    """A line of ``events.jsonl`` that does not match the contract.

    ``reason`` is the bare explanation ("not JSON: ...", "missing field 'event'",
    ...); ``str(err)`` prefixes it with the line number and byte offset.
    """

    def __init__(self, reason: str, line_no: int | None = None, byte_offset: int | None = None):
        self.reason = reason
        self.line_no = line_no
        self.byte_offset = byte_offset
        where = []
        if line_no is not None:
            where.append(f"line {line_no}")
        if byte_offset is not None:
            where.append(f"byte {byte_offset}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC 3339 date-time into an aware :class:`datetime`.

    Raises ``ValueError`` for anything else (no offset, date only, impossible
    dates).  Fractions finer than microseconds are truncated.  Leap seconds
    (``:60``) are rejected: Python cannot represent them and the runner's
    ``Date#toISOString`` never emits them.
    """
    m = RFC3339_DATE_TIME.fullmatch(value)
    if m is None:
        raise ValueError("not an RFC 3339 date-time (expected e.g. 2024-05-01T10:00:00.000Z)")
    frac = m["frac"]
    offset = m["offset"]
    text = f"{m['date']}T{m['time']}"
    if frac:
        text += "." + frac[:6].ljust(6, "0")
    text += "+00:00" if offset in ("Z", "z") else offset
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:  # e.g. month 13, Feb 30, hour 24, second 60
        raise ValueError(f"not a valid date-time: {exc}") from None


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _optional_str(obj: dict[str, Any], key: str, *, required: bool) -> str | None:
    if key not in obj:
        if required:
            raise ValueError(f"missing field {key!r}")
        return None
    value = obj[key]
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string or null, got {_describe(value)}")
    return value


def parse_invocation_line(line: bytes, line_no: int, byte_offset: int) -> InvocationLine:
    """Validate one ``events.jsonl`` line strictly and return it parsed.

    Rules (any violation raises :class:`InvocationLineError`):

    * the line (trailing newline allowed) is one JSON *object* (orjson: no NaN,
      no trailing content, valid UTF-8);
    * ``event`` is ``"start"`` or ``"end"``;
    * ``ts`` is a string holding an RFC 3339 date-time (offset required);
    * ``role`` is present and a string or null (an absent ``role`` must not pass
      for a recover's null); ``milestone`` a string or null, absent read as null
      (JavaScript's JSON.stringify leaves out a field whose value is undefined);
    * ``status``: on an end, present and a string, or an integer read as its
      decimal text (the runner writes ``error.code || error.name``, and a
      DOMException's code is a number: an AbortSignal timeout's is 23); on a
      start, absent, null or either;
    * ``duration_ms``: on an end, present (the runner always writes it, null for
      ``recover``); on a start, may be absent; when given, a non-negative number
      or null, a fraction read as its whole milliseconds (``true``, ``-1``,
      ``"12"`` are rejected).

    A value read leniently keeps the end that closes its start: refused, the start
    would read as working for good, which is what the runner writes ends to prevent.
    Unknown extra fields are kept untouched in ``raw``.
    """

    def fail(reason: str) -> InvocationLineError:
        return InvocationLineError(reason, line_no, byte_offset)

    if not line.strip():
        raise fail("empty line")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise fail(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise fail(f"not a JSON object: got {type(obj).__name__}")

    if "event" not in obj:
        raise fail("missing field 'event'")
    event = obj["event"]
    if not isinstance(event, str) or event not in ("start", "end"):
        raise fail(f"event must be 'start' or 'end', got {_describe(event)}")

    if "ts" not in obj:
        raise fail("missing field 'ts'")
    ts = obj["ts"]
    if not isinstance(ts, str):
        raise fail(f"ts must be an RFC 3339 string, got {_describe(ts)}")
    try:
        parse_rfc3339(ts)
    except ValueError as exc:
        raise fail(f"bad ts {_describe(ts)}: {exc}") from None

    numbered = obj.get("status")
    try:
        role = _optional_str(obj, "role", required=True)
        milestone = _optional_str(obj, "milestone", required=False)
        status = (str(numbered) if isinstance(numbered, int) and not isinstance(numbered, bool)
                  else _optional_str(obj, "status", required=event == "end"))
    except ValueError as exc:
        raise fail(str(exc)) from None
    if event == "end" and status is None:
        raise fail("status must be a string on an end line, got None")

    if "duration_ms" in obj:
        duration = obj["duration_ms"]
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0
        ):
            raise fail(
                f"duration_ms must be a non-negative number or null, got {_describe(duration)}"
            )
        if isinstance(duration, float):
            duration = int(duration)  # whole milliseconds
    elif event == "end":
        raise fail("missing field 'duration_ms' (an end line always carries it, null if unknown)")
    else:
        duration = None

    return InvocationLine(
        line_no=line_no,
        byte_offset=byte_offset,
        ts=ts,
        event=event,
        role=role,
        milestone=milestone,
        status=status,
        duration_ms=duration,
        raw=obj,
    )


# --------------------------------------------------------------------------- pairing


@dataclass
class PairedInvocation:
    """One invocation as the stream shows it: a start and/or an end."""

    seq: int
    role: str | None
    milestone: str | None
    started_at: str | None
    ended_at: str | None
    status: str | None
    duration_ms: int | None
    duration_source: DurationSource | None
    outcome: Outcome
    start_line: int | None
    end_line: int | None


def is_recover_end(line: InvocationLine) -> bool:
    """True for the end line ``recover`` writes to close a killed supervisor's start.

    Recognition is ``event == "end" and role is None`` -- nothing else.  Every
    runner-dispatched invocation is written with its role name (bulldozer, zen,
    piledriver, instinct, navi, a specialist), so a null role can only come
    from ``recover``.  The status (:data:`RECOVER_STATUS`, ``INVOCATION_FAILURE``)
    and the null ``duration_ms`` are *not* required: if the runner ever changes
    the status string, the line is still a recover and its status is still
    reported verbatim.  The recover line's ``milestone`` is ignored for matching
    (see :func:`pair_invocations`).
    """
    return line.event == "end" and line.role is None


def _duration(
    start: InvocationLine, end: InvocationLine
) -> tuple[int | None, DurationSource | None]:
    if end.duration_ms is not None:
        return end.duration_ms, "reported"
    delta = parse_rfc3339(end.ts) - parse_rfc3339(start.ts)
    if delta < timedelta(0):
        # Clock went backwards between the two appends: no honest duration.
        return None, None
    return delta // timedelta(milliseconds=1), "timestamps"


def pair_invocations(lines: Iterable[InvocationLine]) -> list[PairedInvocation]:
    """Pair start and end lines into one row per invocation.

    ``lines`` must be given in file order; pairing walks them once, in order.

    * A start opens an invocation keyed by ``(role, milestone)``.
    * A regular end (non-null role) closes the OLDEST open start with the same
      key (FIFO): two concurrent invocations of one role on one milestone are
      indistinguishable in the stream, and first-in-first-out is the only
      order-preserving guess.  With no open start for its key it becomes an
      ``unmatched_end`` row -- it is never matched across keys.
    * A recover end (:func:`is_recover_end`: end with null role) closes EVERY
      start open at that point, whatever its key, each as a ``recovered`` row
      sharing the recover's end line and status.  Why all and not only the most
      recent: ``recover`` runs after the supervisor that wrote those starts was
      killed, and afterwards "the ledger records no active role" -- nothing is
      working any more.  A dead supervisor can never append the missing ends,
      so every start still open is a dangling start it (or an earlier
      supervisor whose own recover line was lost) left behind; one recover line
      is written per recovery however many invocations were in flight.
      Closing only the newest would leave the older ones "working" forever,
      which is exactly what the recover line exists to prevent.  The recover
      line's own milestone is not used to narrow this: a planning/alt start
      has a null milestone and would otherwise survive a milestone-scoped
      recover, contradicting "no active role".
      A recover end with nothing open is kept as an ``unmatched_end`` row.
    * Starts never closed are ``dangling`` rows (status/duration None).

    Duration: the end's reported ``duration_ms`` (source ``'reported'``); when
    it is null, whole milliseconds between the two timestamps, truncated
    (source ``'timestamps'``); None when those go backwards.  ``recovered``
    rows get no duration: the recover's timestamp says when an operator ran
    ``recover``, not when the invocation died, and the ledger records null
    for it too -- a made-up duration would poison latency percentiles.
    ``dangling`` and ``unmatched_end`` rows have no duration.

    Output is sorted by the row's start line (end line for an unmatched end;
    ties, possible only with duplicate line numbers, fall back to end line and
    then arrival order) and ``seq`` numbers the rows 0.. in that order.  The
    result depends only on the input sequence: deterministic.
    """
    open_starts: dict[tuple[str | None, str | None], deque[tuple[int, InvocationLine]]] = {}
    arrival = 0  # global order of starts, so "close everything" keeps file order
    rows: list[tuple[tuple[int, int, int], PairedInvocation]] = []

    def add(start: InvocationLine | None, end: InvocationLine | None, outcome: Outcome) -> None:
        nonlocal arrival
        anchor = start if start is not None else end
        assert anchor is not None
        duration: int | None = None
        source: DurationSource | None = None
        if outcome == "paired" and start is not None and end is not None:
            duration, source = _duration(start, end)
        row = PairedInvocation(
            seq=-1,
            role=anchor.role,
            milestone=anchor.milestone,
            started_at=start.ts if start is not None else None,
            ended_at=end.ts if end is not None else None,
            status=end.status if end is not None else None,
            duration_ms=duration,
            duration_source=source,
            outcome=outcome,
            start_line=start.line_no if start is not None else None,
            end_line=end.line_no if end is not None else None,
        )
        end_no = end.line_no if end is not None else -1
        rows.append(((anchor.line_no, end_no, arrival), row))
        arrival += 1

    for line in lines:
        if line.event == "start":
            open_starts.setdefault((line.role, line.milestone), deque()).append((arrival, line))
            arrival += 1
        elif is_recover_end(line):
            pending = sorted(
                (item for queue in open_starts.values() for item in queue), key=lambda item: item[0]
            )
            open_starts.clear()
            if not pending:
                add(None, line, "unmatched_end")
            for _, start in pending:
                add(start, line, "recovered")
        else:
            queue = open_starts.get((line.role, line.milestone))
            if queue:
                _, start = queue.popleft()
                add(start, line, "paired")
            else:
                add(None, line, "unmatched_end")

    leftovers = sorted(
        (item for queue in open_starts.values() for item in queue), key=lambda i: i[0]
    )
    for _, start in leftovers:
        add(start, None, "dangling")

    rows.sort(key=lambda pair: pair[0])
    result = []
    for seq, (_, row) in enumerate(rows):
        row.seq = seq
        result.append(row)
    return result


def pair_appended(still_open: Sequence[tuple[int, InvocationLine]], appended: Sequence[InvocationLine],
                  next_seq: int) -> list[PairedInvocation]:
    """The rows an append changes or adds: each start the stream's earlier lines left
    open (``still_open``: its row's seq and its line, in file order) paired on with the
    ``appended`` lines. Every other row of the earlier lines is final: no later line can
    close a start already closed. So the earlier starts keep their seq (a row's place is
    its start line's), and the rows of the appended lines, all anchored after every
    earlier line, are numbered from ``next_seq`` on in order: with the final rows, the
    rows :func:`pair_invocations` makes of every line."""
    seqs = {start.line_no: seq for seq, start in still_open}
    rows = pair_invocations([start for _, start in still_open] + list(appended))
    number = next_seq
    for row in rows:
        if row.start_line is not None and row.start_line in seqs:
            row.seq = seqs[row.start_line]
        else:
            row.seq, number = number, number + 1
    return rows


# --------------------------------------------------------------------------- summary


def classify_status(status: str | None) -> Literal["success", "judged", "failure"] | None:
    """Our classification of an end status (None for "no end seen").

    * ``success``: :data:`SUCCESS_STATUSES` -- the role did its job;
    * ``judged``: :data:`JUDGED_STATUSES` -- the role ran and returned a negative
      verdict; a working system, not a failing one;
    * ``failure``: everything else -- runner error codes (TIMEOUT, SPAWN_ERROR,
      MODEL_ERROR, ...), thrown errors (ETIMEDOUT, ENOENT, Error, ERROR),
      ``INVOCATION_FAILURE`` from recover, and any status we do not know.

    Comparison is exact and case-sensitive because statuses are written
    verbatim.  Unknown statuses count as failures on purpose: a failure that is
    really a new success shows up and gets classified; the reverse would hide.
    """
    if status is None:
        return None
    if status in SUCCESS_STATUSES:
        return "success"
    if status in JUDGED_STATUSES:
        return "judged"
    return "failure"


def is_failure_status(status: str | None) -> bool:
    """True when an end was seen and its status is a failure (see :func:`classify_status`)."""
    return classify_status(status) == "failure"


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence (None when empty).

    The value at 1-based rank ``ceil(p / 100 * n)`` (rank at least 1), so the
    result is always an observed value: p0 is the minimum, p100 the maximum,
    p50 of ``[1, 2, 3, 4]`` is 2.  ``p`` must lie in ``[0, 100]``.  The input is
    trusted to be sorted (not re-sorted here).
    """
    if not 0 <= p <= 100 or math.isnan(p):
        raise ValueError(f"percentile p must be within [0, 100], got {p!r}")
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100 * n))
    return sorted_values[rank - 1]


_SUMMARY_KEYS = ("role", "status", "milestone")


def summarize(
    rows: Iterable[PairedInvocation], by: Literal["role", "status", "milestone"]
) -> list[dict[str, Any]]:
    """Aggregate paired rows per role, status or milestone.

    One dict per distinct key value, sorted by key with None last::

        {<by>: key, "invocations": int, "failures": int, "dangling": int,
         "p50_ms": int|None, "p95_ms": int|None, "max_ms": int|None,
         "statuses": {status: count, ...}}

    * ``invocations``: rows in the group (every row is one invocation, whether
      both lines, only the start or only the end was seen);
    * ``failures``: rows with an end whose status :func:`is_failure_status`
      (recovered rows count: INVOCATION_FAILURE); dangling rows are not
      failures, they are counted in ``dangling``;
    * percentiles (nearest rank) and max over the rows that have a duration;
    * ``statuses``: end statuses verbatim, sorted by name; dangling rows add
      nothing here.

    The key is the row's field: a null milestone (planning, alt) or a recover
    with nothing to close (role null) is the key None; for ``by='status'``
    dangling rows group under None.
    """
    if by not in _SUMMARY_KEYS:
        raise ValueError(f"summarize by must be one of {_SUMMARY_KEYS}, got {by!r}")
    groups: dict[str | None, list[PairedInvocation]] = {}
    for row in rows:
        groups.setdefault(getattr(row, by), []).append(row)

    out: list[dict[str, Any]] = []
    for key in sorted(groups, key=lambda k: (k is None, k or "")):
        members = groups[key]
        durations = sorted(r.duration_ms for r in members if r.duration_ms is not None)
        statuses: dict[str, int] = {}
        for r in members:
            if r.status is not None:
                statuses[r.status] = statuses.get(r.status, 0) + 1
        out.append(
            {
                by: key,
                "invocations": len(members),
                "failures": sum(1 for r in members if is_failure_status(r.status)),
                "dangling": sum(1 for r in members if r.outcome == "dangling"),
                "p50_ms": percentile(durations, 50),
                "p95_ms": percentile(durations, 95),
                "max_ms": durations[-1] if durations else None,
                "statuses": dict(sorted(statuses.items())),
            }
        )
    return out
