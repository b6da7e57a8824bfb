"""This omg-ledger's version, as pyproject.toml states it (tests/test_startup.py keeps the
two equal). A constant, because asking importlib.metadata costs more than the rest of
`omg-ledger --version` together (it imports the email package to read METADATA).

DERIVATION_VERSION is the version of derivation's rules (derive.py): any change to a rule
that alters derived rows bumps it, and the next sync re-derives every run whose rows an
older version wrote, gone runs included. It lives here so that a sync with nothing to do
can compare it with the ledger's without importing the rules themselves."""

VERSION = "0.1.0"

# 1: release 0.2's rules. 2: runs.stream_identity (copies of one run are billed once).
# 3: a run's known spend is bounded ($1e9): charges past it count as unknown, with a problem.
# 4: assessments of unknown cost (Codex) and their tokens; a budget overrun is what the
#    engine failed for its budget_usd; a node's last_leg from its own executions.
# 5: a state.json naming another run_id (a run directory copied under another id) is that
#    run's, and so is the assess.json beside it: neither is charged to this directory; an
#    assess.json without assess_cost_usd is an assessment of unknown cost, not no charge;
#    an execution (rounds) whose every charge has no known price costs NULL, not $0.
# 6: a copy of a run without a line of its stream is billed only while no copy with its
#    stream is (store.settle_copies): every run is settled again on re-derivation, so a
#    ledger that billed such a copy beside its streamed one bills it once; a verdict
#    recovered from state.json whose record has no accounting (a gate: no subprocess)
#    is no invocation, as a terminal event without accounting is none on the stream.
# 7: of copies holding the same stream, the one with the most charges is billed (an
#    assess.json or a recovered verdict only one copy holds is not left out by the choice).
# 8: a budget overrun is a FAIL whose whole detail is the engine's budget message, never a
#    judged FAIL whose output quotes one; a node whose snapshot record is an earlier
#    terminal's has judged unknown (NULL), not that record's.
# 9: of copies holding the same stream, the one holding an assess.json is billed (7's "most
#    charges" also counted charges recovered from a snapshot, which a stale or damaged copy's
#    state.json can hold more of than the copy on disk).
# 10: a JSON null in an event field is that field absent (the engine's decoder leaves the
#    field its zero value), not a bad line: a run_finished carrying "detail": null closes
#    its leg. (Lines refused before were never stored: the sync reads such runs' streams again.)
# 11: a key naming an event field in another case ("Outcome", "Cost_USD") is that field, as
#    the engine's decoder reads it; two keys naming one field are a duplicate key.
# 12: a \u escape of a lone UTF-16 surrogate in an event line is U+FFFD, as the engine's
#    decoder reads it, not a bad line (events.raw keeps the escape).
# 13: a negative budget_usd (state.json's record or graph) is a node without a budget, as the
#    engine applies none that is not positive; it made the whole state.json damage.
# 14: a node whose snapshot record is an earlier terminal's (snapshot_behind) has no
#    duration, as it has no judged (the record's was that terminal's); a diverged copy's
#    finding names the copy's own line number where the streams differ (blank or bad
#    lines before it counted), not the index among its stored lines.
# 15: a copy without a line of its stream bills the planner's call its state.json records
#    (planning_cost_usd; planning_cost_unknown with planning_usage's tokens), as the
#    engine's runs list counts it; a planning_usage that holds no token counts is damage.
# 16: an instant is written with a four-digit year wherever it is (units.format_instant): a
#    runner stream's time before the year 1000 was stored as 999-…, which sorts after 2026.
# 17: a copy whose stream does not begin with its first line (its head damaged) has only its
#    run id to go by ('<run id>:no-stream'), settled with the run's copies and billed where it
#    holds most of the stream; it was a run of its own, the run billed twice.
# 18: a byte that is not UTF-8 inside a JSON string, in an event line or in state.json, is
#    U+FFFD (one per byte, as Go's encoding/json coerces it), and so is a lone surrogate's \u
#    escape in state.json (as in the stream since 12): not a bad line or a damaged snapshot,
#    so the line's money counts. events.raw and snapshot_files.content hold the text so
#    decoded. (The sync reads again the files of runs whose stream or state.json the older
#    rules refused.) Settling a run id's copies takes in all of its runs when a copy without
#    the stream's first line is among them (one of two runs of an id was billed twice, the
#    other not at all); two copies with damaged heads are compared from the later one's
#    first stored line, and a copy with no billed copy to compare it with keeps no
#    diverged_copy finding. state.json is read as runstate.Load decodes it (feed.go_decoded
#    and go_type_error over the engine's structs): a key in another case names its field
#    ("Verdict", "Cost_USD", "Schema"), two spellings of one field are a duplicate key, a null
#    is the field absent (a null record in nodes a record with no verdict and no cost), and a
#    value of another type than the field's, in any field, is a damaged snapshot, as Load
#    fails on it. (The sync reads again the state.json the older rules refused; one they took
#    that these refuse is refused on re-derivation, its error and problem recorded.) A
#    closed leg is PASS when the snapshot holds as many PASS records, of any node, as the
#    graph has nodes (runstatus.Gather counts snap.CompletedNodes()), not when every graph
#    node's record is PASS: runs.all_nodes_passed. A copy whose first line holds U+FFFD (a
#    byte that is not UTF-8 there) is keyed by its run id, as a damaged head is; of copies
#    holding as many lines, the one whose last line is latest is billed (it was the first
#    seen, so the money depended on the order of syncs).
# 19: an assessment (assess.json) is dated at the end of its run's first scheduler leg, the
#    leg the `auto` process ran and then assessed, not at the run's last event (a resume
#    days later moved its spend into another day's window); a verdict recovered from
#    state.json counts only its own round's tokens (the engine's recorder folds a superseded
#    feedback round's usage into the record, as it folds its cost). The fold state keeps
#    both facts. An assess.json in the run directory that cannot be read or is refused is
#    an assessment charge of unknown cost (the call was paid; it was no charge at all), and
#    goal_cycles.assess_cost_nano_usd is the assessment's charge as counted (past the run's
#    bound: unknown, as the charge is). A runner stream's line is read as JavaScript writes it
#    (a milestone left out is null, a numeric status its decimal text, a fractional
#    duration_ms its whole milliseconds); a stream whose rows older rules derived and that
#    holds an open problem is read again from its first byte, so the ends they refused
#    close their starts.
DERIVATION_VERSION = 19
