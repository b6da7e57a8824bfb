"""Derive: the ledger's derived rows as a pure function of its stored facts.

The stored facts are the record: a run's stream lines (``events``), the bytes of its
small JSON files (``snapshot_files``), its directory facts (file presence on the
``runs`` row, ``.out`` names in ``run_files``), and a runner stream's lines
(``invocation_lines``). Everything else — legs, nodes, rounds, charges, findings,
goal cycles, a run's totals, paired invocations — is derived here, with no I/O.

Every derived row set carries the :data:`DERIVATION_VERSION` that produced it. Any
change to a rule that alters derived rows bumps it; the next ``sync`` (or
``omg-ledger rebuild``) then re-derives every run and stream whose rows are older,
gone runs included, so a rule fix reaches all history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .feed import Event
from .invocations import InvocationLine, PairedInvocation, pair_invocations
from .reconcile import FinishedRows, RunInput, RunRows, reconcile
from .snapshot import PARSERS, BadSnapshot

# 1: release 0.2's rules. 2: runs.stream_identity (copies of one run are billed once).
# 3: a run's known spend is bounded ($1e9): charges past it count as unknown, with a problem.
# 4: assessments of unknown cost (Codex) and their tokens; a budget overrun is what the
#    engine failed for its budget_usd; a node's last_leg from its own executions.
DERIVATION_VERSION = 4


@dataclass(frozen=True)
class RunFacts:
    """Everything derivation reads about one run: the stored facts, nothing else."""

    run_id: str
    events: Iterable[Event]  # in file order; walked once (a stream from the table, never held whole)
    files: Mapping[str, str] = field(default_factory=dict)  # readable JSON file name -> stored text
    artifacts: frozenset[str] = frozenset()  # flat '*.out' names
    failed_outputs: frozenset[str] = frozenset()  # '*.out' names under failed/
    # How the caller takes the rows (none of it changes what they are):
    # ``sink(finished, scrub)`` receives rows the walk will not change again while it
    # goes on (``scrub``: a line seen so far held a NUL escape); ``resume`` is a state a
    # previous derivation left (RunRows.state), ``events`` then being only the lines
    # after its ``line``; ``keep_state`` asks for the state after the last line.
    sink: Callable[[FinishedRows, bool], None] | None = None
    resume: dict | None = None
    keep_state: bool = False
    terminal_lookup: Callable[[str], Iterable[tuple[str, int, str | None]]] | None = None  # RunInput's


def parse_file(name: str, content: str) -> dict | None:
    try:
        return PARSERS[name](content.encode("utf-8"))
    except BadSnapshot:
        return None  # recorded as a problem when it was read


def derive_run(facts: RunFacts, parsed: Mapping[str, dict | None] | None = None) -> tuple[RunRows, bool]:
    """(rows, scrub) for one run. ``parsed`` may hand over the JSON files already parsed
    from the same text (ingest just validated them); it never changes the result.
    ``scrub``: some text holds a NUL (only a JSON \\u0000 escape can), which the
    store turns into U+FFFD in derived text on every backend."""
    docs = {name: (parsed[name] if parsed is not None and name in parsed else parse_file(name, text))
            for name, text in facts.files.items()}
    resume = facts.resume
    seen = _Watched(facts.events, nul=bool(resume and resume["nul"]))
    sink = facts.sink
    rows = reconcile(RunInput(
        run_id=facts.run_id,
        events=seen,
        snapshot=docs.get("state.json"),
        assess=docs.get("assess.json"),
        artifacts=facts.artifacts,
        failed_outputs=facts.failed_outputs,
        sink=(lambda finished: sink(finished, seen.nul)) if sink is not None else None,
        resume=resume["fold"] if resume else None,
        keep_state=facts.keep_state,
        terminal_lookup=facts.terminal_lookup,
    ))
    for _ in seen:  # a walk that stopped early still leaves every line looked at
        pass
    known = resume["identity"] if resume else None  # None: no line walked yet
    identity = known or stream_identity(facts.run_id, seen.first_raw)
    rows.run["stream_identity"] = identity
    if rows.state is not None:
        rows.state = {"line": rows.state["last_line"], "nul": seen.nul, "fold": rows.state,
                      "identity": identity if known or seen.first_raw is not None else None}
    scrub = seen.nul or any("\\u0000" in text for text in facts.files.values())
    return rows, scrub


class _Watched:
    """The run's events passed through once, noting what derivation reads of the raw
    lines: the first one (the run's identity) and whether any holds a NUL escape."""

    def __init__(self, events: Iterable[Event], nul: bool = False) -> None:
        self._events = iter(events)
        self.first_raw: str | None = None
        self.nul = nul

    def __iter__(self) -> Iterator[Event]:
        # Each check stops once it is answered (per line, only what is still open is
        # asked). Iterating again goes on where the last iteration stopped.
        events = self._events
        if self.first_raw is None:
            for event in events:
                self.first_raw = event.raw
                if "\\u0000" in event.raw:
                    self.nul = True
                yield event
                break
        if not self.nul:
            for event in events:
                if "\\u0000" in event.raw:
                    self.nul = True
                    yield event
                    break
                yield event
        yield from events


def stream_identity(run_id: str, first_line: str | None) -> str:
    """A run's identity: its id with a hash of its stream's first event (its raw line),
    which carries a nanosecond timestamp. Two directories with equal identities are
    copies of one run (a copy taken mid-run holds a prefix of the same stream)."""
    if first_line is None:
        # Nothing was said yet (and nothing paid for): its id is all there is to go by.
        return f"{run_id}:no-stream"
    return f"{run_id}:{hashlib.sha256(first_line.encode('utf-8')).hexdigest()[:32]}"


def derive_invocations(lines: Sequence[InvocationLine]) -> list[PairedInvocation]:
    """A runner stream's invocations from all of its stored lines, in file order."""
    return pair_invocations(lines)
