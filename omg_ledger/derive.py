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
from .invocations import InvocationLine, PairedInvocation, pair_appended, pair_invocations
from .reconcile import FinishedRows, RunInput, RunRows, reconcile
from .snapshot import PARSERS, BadSnapshot, snapshot_names_another_run
from .version import DERIVATION_VERSION as DERIVATION_VERSION  # (kept there: see version.py)

# A derive state (where a walk stopped, to resume it on an append) is kept for a run
# whose last leg is still open, or whose stream reached this line. A short run that has
# ended is walked again from its stored lines if it ever grows (a resume: a few
# milliseconds), rather than a ~5 KB state written for each of them on every sync.
RESUMABLE_FROM_LINE = 256


@dataclass(frozen=True)
class RunFacts:
    """Everything derivation reads about one run: the stored facts, nothing else."""

    run_id: str
    events: Iterable[Event]  # in file order; walked once (a stream from the table, never held whole)
    files: Mapping[str, str] = field(default_factory=dict)  # readable JSON file name -> stored text
    artifacts: frozenset[str] = frozenset()  # flat '*.out' names
    failed_outputs: frozenset[str] = frozenset()  # '*.out' names under failed/
    # assess.json is in the directory (runs.has_assess): one that is not in ``files``, or
    # that these rules refuse, is an assessment paid for at a price nothing readable gives.
    has_assess: bool = False
    # How the caller takes the rows (none of it changes what they are):
    # ``sink(finished, scrub)`` receives rows the walk will not change again while it
    # goes on (``scrub``: a line seen so far held a NUL escape); ``resume`` is a state a
    # previous derivation left (RunRows.state), ``events`` then being only the lines
    # after its ``line``; ``keep_state`` asks for the state after the last line, where
    # one pays (RESUMABLE_FROM_LINE).
    sink: Callable[[FinishedRows, bool], None] | None = None
    resume: dict | None = None
    keep_state: bool = False
    terminal_lookup: Callable[[str], Iterable[tuple[str, int, str | None]]] | None = None  # RunInput's


class UnderivableRun(ValueError):
    """A run whose rows cannot be derived: two of its node ids differ only where one
    holds NUL and the other U+FFFD, and derived text stores NUL as U+FFFD, so both
    would be one key of ``nodes`` (and of ``rounds``); or a rule failed on its facts (a
    bug: one run's facts must not stop every other run's sync). ``reason`` says which,
    in words that do not depend on how the run was walked."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self):  # (handed back from a pool worker)
        return UnderivableRun, (self.reason,)


def parse_file(name: str, content: str) -> dict | None:
    try:
        return PARSERS[name](content.encode("utf-8"))
    except BadSnapshot:
        return None  # recorded as a problem when it was read


def parse_files(files: Mapping[str, str]) -> tuple[dict[str, dict | None], list[tuple[str, str]]]:
    """(each stored file parsed, None where these rules refuse it; the (name, reason) of
    each refused). Stored files are those an omg-ledger read without an error: one
    refused here was read by older rules that took it."""
    parsed: dict[str, dict | None] = {}
    refused = []
    for name, content in files.items():
        try:
            parsed[name] = PARSERS[name](content.encode("utf-8"))
        except BadSnapshot as exc:
            parsed[name] = None
            refused.append((name, str(exc)))
    return parsed, refused


def derive_run(facts: RunFacts, parsed: Mapping[str, dict | None] | None = None) -> tuple[RunRows, bool]:
    """(rows, scrub) for one run. ``parsed`` may hand over the JSON files already parsed
    from the same text (ingest just validated them); it never changes the result.
    ``scrub``: some text holds a NUL (only a JSON \\u0000 escape can), which the
    store turns into U+FFFD in derived text on every backend. Raises UnderivableRun
    when two node ids would then be one key (no row of the run can be stored), or when
    a rule fails on the run's facts. What the caller hands in (the events' source, the
    sink, the terminal lookup: a database, a file) raises as it raised."""
    outside = _Outside()
    try:
        return _derive_run(facts, parsed, outside)
    except (UnderivableRun, *_NEVER_A_RULES):
        raise
    except Exception as exc:
        if outside.failed:
            raise
        raise UnderivableRun(f"{RULE_FAILED}{type(exc).__name__}: {exc}; it is indexed once a release "
                             "derives it") from exc


# The start of the reason of a run, or a runner stream, a rule fails on: a bug of
# omg-ledger, not of what it read.
RULE_FAILED = "a rule fails on this run (a bug of omg-ledger: please report this line): "
STREAM_RULE_FAILED = "a rule fails on this runner stream (a bug of omg-ledger: please report this line): "
# Out of memory or of descriptors: the caller's to end, never one run's or stream's problem.
_NEVER_A_RULES = (MemoryError, OSError)


class _Outside:
    """Marks a failure of what derivation calls out to, so that it is never taken for a
    rule's."""

    def __init__(self) -> None:
        self.failed = False

    def calling(self, call: Callable | None) -> Callable | None:
        if call is None:
            return None

        def called(*args):
            try:
                return call(*args)
            except BaseException:
                self.failed = True
                raise

        return called


def _derive_run(facts: RunFacts, parsed: Mapping[str, dict | None] | None,
                outside: _Outside) -> tuple[RunRows, bool]:
    docs = {name: (parsed[name] if parsed is not None and name in parsed else parse_file(name, text))
            for name, text in facts.files.items()}
    if facts.has_assess and docs.get("assess.json") is None:
        # The engine writes assess.json only once the assessment call returned: damaged
        # (torn by a crash, a full disk, an edit), it is that call, at an unknown price.
        docs["assess.json"] = {}
    if snapshot_names_another_run(docs.get("state.json"), facts.run_id):
        # The directory is a copy of that run (its stream lines are refused the same way):
        # recovering its records or billing its assessment would bill that run twice.
        docs = {**docs, "state.json": None, "assess.json": None}
    resume = facts.resume
    seen = _Watched(facts.events, nul=bool(resume and resume["nul"]), outside=outside)
    keys = _NodeKeys(resume["fold"]["nodes"] if resume else ())
    sink = outside.calling(facts.sink)
    rows = reconcile(RunInput(
        run_id=facts.run_id,
        events=seen,
        snapshot=docs.get("state.json"),
        assess=docs.get("assess.json"),
        artifacts=facts.artifacts,
        failed_outputs=facts.failed_outputs,
        # Once two ids have met, nothing more goes to be stored (the run raises at the end).
        sink=(lambda finished: sink(finished, seen.nul) if keys.see_rounds(finished.rounds) else None)
        if sink is not None else None,
        resume=resume["fold"] if resume else None,
        keep_state=facts.keep_state,
        state_from_line=RESUMABLE_FROM_LINE,
        terminal_lookup=outside.calling(facts.terminal_lookup),
    ))
    for _ in seen:  # a walk that stopped early still leaves every line looked at
        pass
    keys.see_rounds(rows.rounds)
    for node in rows.nodes:
        keys.see(node["node_id"], None)
    keys.raise_if_met()
    known = resume["identity"] if resume else None  # None: no line walked yet
    # A stream that does not begin with its first event (its head damaged: NULs a crash
    # left, a byte-order mark an editor added), or whose first line holds what the engine's
    # encoder never writes (a byte that is not UTF-8, read as U+FFFD), has only its run id
    # to go by: a copy of the run whose first line is intact.
    intact = seen.first_at == 0 and seen.first_raw is not None and "\ufffd" not in seen.first_raw
    identity = known or stream_identity(facts.run_id, seen.first_raw if intact else None)
    rows.run["stream_identity"] = identity
    if rows.state is not None:
        rows.state = {"line": rows.state["last_line"], "nul": seen.nul, "fold": rows.state,
                      "identity": identity if known or seen.first_raw is not None else None}
    scrub = seen.nul or any("\\u0000" in text for text in facts.files.values())
    return rows, scrub


class _NodeKeys:
    """Node ids as derived text stores them (NUL as U+FFFD), to find two that become
    one key. Only an id holding NUL or U+FFFD can meet another, so only those are kept,
    with the first stream line each was seen on."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self._ids: dict[str, dict[str, int | None]] = {}  # stored key -> {id: first line}
        self.met = False
        for node_id in known:  # (a resumed walk: ids of the lines walked before)
            self.see(node_id, None)

    def see(self, node_id: str, line: int | None) -> None:
        if "\x00" not in node_id and "\ufffd" not in node_id:
            return
        ids = self._ids.setdefault(node_id.replace("\x00", "\ufffd"), {})
        first = ids.get(node_id)
        if node_id not in ids or (line is not None and (first is None or line < first)):
            ids[node_id] = line
        if len(ids) > 1:
            self.met = True

    def see_rounds(self, rounds: Iterable) -> bool:
        """True while no two ids have met: the rows may then go on to be stored."""
        see = self.see
        for execution in rounds:
            node_id = execution.node_id
            if "\x00" in node_id or "\ufffd" in node_id:
                see(node_id, execution.start_line if execution.start_line is not None else execution.end_line)
        return not self.met

    def raise_if_met(self) -> None:
        if not self.met:
            return
        ids = self._ids[min(key for key, ids in self._ids.items() if len(ids) > 1)]  # (not the walk's order)
        named = " and ".join(f"{ascii(node_id)} ({f'first on line {line}' if line is not None else 'on no line walked'})"
                             for node_id, line in sorted(ids.items()))
        raise UnderivableRun(f"node ids {named} are one node once NUL is stored as U+FFFD: the run is not "
                             f"indexed until its stream names only one of them")


class _Watched:
    """The run's events passed through once, noting what derivation reads of the raw
    lines: the first one and where it starts (the run's identity), and whether any holds
    a NUL escape."""

    def __init__(self, events: Iterable[Event], nul: bool = False, outside: _Outside | None = None) -> None:
        self._events = iter(events)
        self._outside = outside if outside is not None else _Outside()
        self.first_raw: str | None = None
        self.first_at: int | None = None
        self.nul = nul

    def __iter__(self) -> Iterator[Event]:
        # Each check stops once it is answered (per line, only what is still open is
        # asked). Iterating again goes on where the last iteration stopped. Only the
        # source's own failures reach the except: a rule's are raised where it stands.
        events = self._events
        try:
            if self.first_raw is None:
                for event in events:
                    self.first_raw = event.raw
                    self.first_at = event.byte_offset
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
        except Exception:
            self._outside.failed = True
            raise


STREAM_LESS = ":no-stream"  # the identity's tail for a run with no line of its stream yet, or no first one


def stream_identity(run_id: str, first_line: str | None) -> str:
    """A run's identity: its id with a hash of its stream's first event (its raw line),
    which carries a nanosecond timestamp. Two directories with equal identities are
    copies of one run (a copy taken mid-run holds a prefix of the same stream)."""
    if first_line is None:
        # Nothing was said yet (and nothing paid for): its id is all there is to go by.
        return run_id + STREAM_LESS
    return f"{run_id}:{hashlib.sha256(first_line.encode('utf-8')).hexdigest()[:32]}"


class UnderivableStream(ValueError):
    """A runner stream whose invocations a rule fails to pair (a bug of omg-ledger)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def derive_invocations(lines: Sequence[InvocationLine]) -> list[PairedInvocation]:
    """A runner stream's invocations from all of its stored lines, in file order. Raises
    UnderivableStream when a rule fails on them."""
    return _pairing(pair_invocations, lines)


def derive_appended_invocations(still_open: Sequence[tuple[int, InvocationLine]], appended: Sequence[InvocationLine],
                                next_seq: int) -> list[PairedInvocation]:
    """The invocation rows an append changes or adds (invocations.pair_appended). Raises
    UnderivableStream when a rule fails on them."""
    return _pairing(pair_appended, still_open, appended, next_seq)


def _pairing(pair: Callable[..., list[PairedInvocation]], *lines) -> list[PairedInvocation]:
    try:
        return pair(*lines)
    except _NEVER_A_RULES:
        raise
    except Exception as exc:
        raise UnderivableStream(f"{STREAM_RULE_FAILED}{type(exc).__name__}: {exc}; its invocations are those "
                                "of its lines before, until a release pairs them") from exc
