"""The ledger's tables: the one definition that alembic migrates.

Conventions (they hold in every table):

* Money is an integer number of **nano-dollars** (``*_nano_usd``, 1e-9 USD): sums are
  exact on SQLite and PostgreSQL alike, with no float drift. ``NULL`` means *unknown*
  (the engine said ``cost_unknown: true``) and is never written as 0. The ``v_*``
  views expose plain ``cost_usd`` columns for notebooks.
* Times are stored twice: ``*_at`` is normalized UTC text (``2026-11-29T18:15:18.132685Z``,
  sortable, readable) and ``*_at_us`` the same instant as integer epoch microseconds
  (cheap range filters and time bucketing).
* Runs are keyed by ``(home_id, run_id)``: run ids are only unique per machine. Child
  tables use ``run_pk`` (``runs.id``) and natural ordinals, so rebuilding a run
  reproduces identical rows.
* Every constraint and index is named (SQLite batch migrations need names).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    true,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _run_fk() -> Column:
    return Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)


def _tokens() -> list[Column]:
    return [
        Column("input_tokens", BigInteger, nullable=False, default=0),
        Column("cached_input_tokens", BigInteger, nullable=False, default=0),
        Column("output_tokens", BigInteger, nullable=False, default=0),
        Column("reasoning_output_tokens", BigInteger, nullable=False, default=0),
    ]


# Each oh-my-graph home indexed. ``label`` defaults to "<hostname>:<absolute path>" so
# homes from several machines never collide in one shared ledger.
homes = Table(
    "homes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("label", Text, nullable=False),
    Column("path", Text, nullable=False),
    # the directory's identity: a home is its real directory, whatever label or path names it
    Column("machine", Text),  # machine id (or hostname where there is none) of the machine it is on
    Column("dev", BigInteger),
    Column("inode", BigInteger),
    Column("real_path", Text),  # symlinks resolved
    Column("last_synced_at", Text),
    UniqueConstraint("label"),
)

# One row per run directory ever seen. Status is NOT stored: it is composed at query
# time from the stream facts below plus a live probe of resume.lock (status.py).
runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("home_id", Integer, ForeignKey("homes.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", Text, nullable=False),
    Column("dir_path", Text, nullable=False),
    # directory facts
    Column("gone", Boolean, nullable=False, default=False),  # directory disappeared; history kept
    Column("has_events", Boolean, nullable=False, default=False),
    Column("has_state", Boolean, nullable=False, default=False),
    Column("has_graph_json", Boolean, nullable=False, default=False),
    Column("has_rejected", Boolean, nullable=False, default=False),
    Column("has_assess", Boolean, nullable=False, default=False),
    Column("has_lock", Boolean, nullable=False, default=False),
    # snapshot (state.json) facts; NULL when there is no readable snapshot
    Column("snapshot_schema", Integer),
    Column("runtime", Text),  # absent key in a snapshot means "claude"
    Column("graph_name", Text),
    Column("graph_version", Text),
    Column("node_count", Integer),  # nodes in the snapshot's graph
    Column("graph_source_path", Text),
    Column("graph_sha256", Text),
    Column("inputs_json", Text),
    Column("continue_on_fail", Boolean),
    Column("goal_text", Text),
    Column("goal_cycle", Integer),
    Column("goal_max_cycles", Integer),
    Column("goal_first_run_id", Text),
    Column("build_evidence_answer", Text),  # attached | declared | disclosed | none-detected
    Column("build_evidence_declared_by", Text),
    Column("build_evidence_signals_json", Text),
    Column("gate_paused_at", Text),
    Column("gate_decisions_json", Text),
    Column("planning_cost_nano_usd", BigInteger),
    Column("planning_cost_unknown", Boolean),
    Column("snapshot_cost_nano_usd", BigInteger),  # engine's `runs list` figure: state.json sums
    Column("snapshot_cost_unknown", Boolean),
    Column("nodes_passed", Integer),  # graph nodes whose snapshot record is PASS
    Column("all_nodes_passed", Boolean),
    # stream (events.jsonl) facts
    Column("event_count", Integer, nullable=False, default=0),
    Column("first_event_at", Text),
    Column("first_event_at_us", BigInteger),
    Column("last_event_at", Text),
    Column("last_event_at_us", BigInteger),
    Column("leg_count", Integer, nullable=False, default=0),  # unphased legs, as the engine counts
    Column("any_leg", Boolean, nullable=False, default=False),
    Column("last_leg_open", Boolean, nullable=False, default=False),
    Column("last_leg_phase", Text),  # 'planning' or 'run'
    Column("last_outcome", Text),  # outcome of the last closed leg
    Column("last_detail", Text),
    Column("stream_paused", Boolean, nullable=False, default=False),  # newer schema: ingestion waits
    # the DERIVATION_VERSION whose rules wrote this run's derived rows (0 = before versions)
    Column("derivation_version", Integer, nullable=False, default=0, server_default="0"),
    # run id + hash of the stream's first line: equal identities are copies of one run
    Column("stream_identity", Text),
    # the one copy of a run that counts (most of the stream); the views show only these
    Column("billed", Boolean, nullable=False, default=True, server_default=true()),
    # money, summed from charges (all legs, assessment included)
    Column("cost_nano_usd", BigInteger, nullable=False, default=0),  # known spend only
    Column("invocations", Integer, nullable=False, default=0),
    Column("unknown_cost_invocations", Integer, nullable=False, default=0),
    Column("unrecorded_attempts", Integer, nullable=False, default=0),  # retried calls never billed
    *_tokens(),
    UniqueConstraint("home_id", "run_id"),
    Index("ix_runs_first_event_at_us", "first_event_at_us"),
    Index("ix_runs_last_leg_open", "last_leg_open"),
    Index("ix_runs_derivation_version", "derivation_version"),
    Index("ix_runs_stream_identity", "stream_identity"),
)

# One row per leg bracket, in file order. A planning leg (phase 'planning') is closed by
# the unphased run_started that commits the plan, or by run_finished of a refused plan.
legs = Table(
    "legs",
    metadata,
    _run_fk(),
    Column("ordinal", Integer, primary_key=True),  # 1-based, file order
    Column("phase", Text, nullable=False),  # 'planning' | 'run'
    Column("kind", Text, nullable=False),  # planning | initial | resume | retry | after-abandoned
    Column("started_at", Text),
    Column("started_at_us", BigInteger),
    Column("finished_at", Text),
    Column("outcome", Text),  # passed | failed | paused | planned (plan committed) | NULL
    Column("detail", Text),
    Column("is_open", Boolean, nullable=False),
    Column("closed_by", Text),  # run_finished | plan_committed | superseded | NULL (open)
    Column("session_limited", Boolean, nullable=False, default=False),
    Column("start_line", Integer),
    Column("end_line", Integer),
)

# One row per node id per run: the latest authoritative verdict (latest terminal
# event in file order, across legs and rounds), recovered from the snapshot when the
# event was dropped.
nodes = Table(
    "nodes",
    metadata,
    _run_fk(),
    Column("node_id", Text, primary_key=True),
    Column("node_type", Text),  # from the snapshot's graph; NULL = a model-CLI node
    Column("in_graph", Boolean, nullable=False),
    Column("verdict", Text),  # PASS | FAIL | NULL (not settled)
    Column("verdict_source", Text),  # 'stream' | 'snapshot' (recovered dropped event)
    Column("state", Text, nullable=False),  # settled | running | paused | unfinished | pending
    Column("retries", Integer),
    Column("round", Integer),
    Column("provenance", Text),
    Column("judged", Boolean),
    Column("budget_nano_usd", BigInteger),
    Column("duration_ns", BigInteger),
    Column("session_id", Text),
    Column("detail", Text),
    Column("artifact_name", Text, nullable=False),  # '<id with / replaced by ~>.out'
    Column("artifact_path", Text),  # as recorded by the engine (path on the engine's machine)
    Column("has_artifact", Boolean, nullable=False),
    Column("has_failed_output", Boolean, nullable=False),
    Column("budget_overrun", Boolean, nullable=False, default=False),  # FAIL with its .out on disk
    Column("last_leg", Integer),
    Column("cost_nano_usd", BigInteger, nullable=False, default=0),  # known spend, all legs
    Column("invocations", Integer, nullable=False, default=0),
    Column("unknown_cost_invocations", Integer, nullable=False, default=0),
    Column("unrecorded_attempts", Integer, nullable=False, default=0),
    Column("snapshot_verdict", Text),
    Column("snapshot_round", Integer),
    Column("snapshot_cost_nano_usd", BigInteger),
    Column("snapshot_cost_unknown", Boolean),
)

# One row per execution of a node within a leg: round 0 is the initial pass, k the
# k-th feedback round. outcome FEEDBACK = a declarer's non-final judgment.
rounds = Table(
    "rounds",
    metadata,
    _run_fk(),
    Column("leg_ordinal", Integer, primary_key=True),  # 0 = outside any leg (damage)
    Column("node_id", Text, primary_key=True),
    Column("seq", Integer, primary_key=True),  # execution order of this node within the leg
    Column("round", Integer, nullable=False),
    Column("started_at", Text),
    Column("ended_at", Text),
    Column("outcome", Text),  # PASS | FAIL | FEEDBACK | PAUSED | NULL (no terminal)
    Column("retries", Integer, nullable=False, default=0),
    Column("session_id", Text),
    Column("provenance", Text),
    Column("detail", Text),
    Column("cost_nano_usd", BigInteger),
    Column("cost_unknown", Boolean, nullable=False, default=False),
    Column("start_line", Integer),
    Column("end_line", Integer),
)

# Goal cycles of iterated auto runs: the state.json goal block joined with assess.json.
goal_cycles = Table(
    "goal_cycles",
    metadata,
    _run_fk(),
    Column("first_run_id", Text, nullable=False),
    Column("cycle", Integer),
    Column("max_cycles", Integer),
    Column("text", Text),
    Column("assessed", Boolean, nullable=False),
    Column("goal_met", Boolean),
    Column("remaining", Text),
    Column("evidence", Text),
    Column("assess_cost_nano_usd", BigInteger),
    Index("ix_goal_cycles_first_run_id", "first_run_id"),
)

# Exactly one row per paid invocation. kind:
#   node        terminal node event (node_passed / node_failed)
#   feedback    a declarer's feedback node_retried (its judgment was non-terminal)
#   planning    the unphased run_started that committed a plan
#   refused     run_finished of a plan refused before a graph existed
#   assessment  assess.json's assess_cost_usd (the only place it exists)
#   recovered   a terminal verdict the stream dropped, recovered from state.json
#   other       accounting on any other event (kept, never lost)
charges = Table(
    "charges",
    metadata,
    _run_fk(),
    Column("seq", Integer, primary_key=True),
    Column("leg_ordinal", Integer),
    Column("leg_kind", Text),
    Column("node_id", Text),
    Column("round", Integer),
    Column("kind", Text, nullable=False),
    Column("at", Text),
    Column("at_us", BigInteger),
    Column("cost_nano_usd", BigInteger),  # NULL = unknown, never 0 for unknown
    Column("cost_unknown", Boolean, nullable=False),
    *_tokens(),
    Column("source_file", Text, nullable=False),
    Column("source_offset", BigInteger),
    Column("source_line", Integer),
    Index("ix_charges_at_us", "at_us"),
)

# Every stream line ingested, in file order, with typed columns and the original line.
events = Table(
    "events",
    metadata,
    _run_fk(),
    Column("line_no", Integer, primary_key=True),  # 1-based line number in events.jsonl
    Column("byte_offset", BigInteger, nullable=False),
    Column("schema", Integer),
    Column("ts", Text),
    Column("event", Text),
    Column("node_id", Text),
    Column("raw", Text, nullable=False),  # the line exactly as written (unknown fields kept)
)

# The directory change cache of a run: its own mtimes (a new .out, a renamed
# state.json or a new failed/ reply shows there). Not a fact: only what lets an
# unchanged directory cost a few stat calls.
ingest_state = Table(
    "ingest_state",
    metadata,
    _run_fk(),
    Column("dir_mtime_ns", BigInteger),  # NULL = must rescan (racy or never scanned)
    Column("failed_dir_mtime_ns", BigInteger),
)

# One row per stream file ever read, of every kind: a run's events.jsonl (kind 'run',
# source 'home:<homes.id>') or a runner's invocation stream (kind 'invocations',
# source 'machine:<id>' of the machine that read it). Identity and resume point: the
# offset after the last complete line, fingerprints of the file's head and of the
# bytes just before that offset (a file truncated and regrown is noticed), where a
# runaway line's scan stopped, and the schema that paused reading.
streams = Table(
    "streams",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False),  # 'run' | 'invocations'
    Column("source", Text, nullable=False),
    Column("path", Text, nullable=False),  # absolute path where it was read
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE")),  # kind 'run' only
    Column("dev", BigInteger),
    Column("inode", BigInteger),
    Column("size", BigInteger),  # -1 = look again next time (a partial last line waits)
    Column("mtime_ns", BigInteger),
    Column("ctime_ns", BigInteger),  # no user can set it back: a rewrite with mtime restored shows here
    Column("end_offset", BigInteger, nullable=False, default=0),  # after the last complete line
    Column("next_line", Integer, nullable=False, default=1),
    Column("head_len", Integer, nullable=False, default=0),
    Column("head_sha256", Text),
    Column("tail_len", Integer, nullable=False, default=0),  # bytes just before end_offset
    Column("tail_sha256", Text),
    Column("scan_offset", BigInteger),  # a runaway line (no newline yet) was scanned up to here
    Column("scan_line", Integer),
    Column("paused_schema", Integer),  # a line of this newer schema waits at end_offset
    Column("paused_reason", Text),
    Column("derivation_version", Integer, nullable=False, default=0),  # kind 'invocations': of its rows
    UniqueConstraint("kind", "source", "path"),
    UniqueConstraint("run_pk"),
)

# The '*.out' names a run directory holds: place '' (flat, a node's artifact) or
# 'failed' (a reply kept under failed/). A directory fact derivation reads.
run_files = Table(
    "run_files",
    metadata,
    _run_fk(),
    Column("place", Text, primary_key=True),
    Column("name", Text, primary_key=True),
)

# The small JSON files of a run (state.json, assess.json, rejected.json, graph.json):
# identity and a content hash, so an unchanged file is not re-parsed and an atomic
# rename with identical bytes does not trigger a rebuild. The content is kept so the
# run's history survives its directory.
snapshot_files = Table(
    "snapshot_files",
    metadata,
    _run_fk(),
    Column("name", Text, primary_key=True),
    Column("dev", BigInteger),
    Column("inode", BigInteger),
    Column("size", BigInteger),
    Column("mtime_ns", BigInteger),
    Column("sha256", Text),
    Column("content", Text),
    Column("error", Text),  # unreadable / not JSON / wrong shape
)

# Bad input: where, what, when first and last seen. Never silently dropped.
problems = Table(
    "problems",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="SET NULL")),
    Column("path", Text, nullable=False),
    Column("byte_offset", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("first_seen_at", Text, nullable=False),
    Column("last_seen_at", Text, nullable=False),
    Column("resolved_at", Text),  # a later sync re-read its file and found the cause gone; NULL: open
    UniqueConstraint("path", "byte_offset", "reason"),
)

# Reconciliation disagreements between state.json and the stream (derived; rebuilt
# with the run).
findings = Table(
    "findings",
    metadata,
    _run_fk(),
    Column("seq", Integer, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("node_id", Text),
    Column("leg_ordinal", Integer),
    Column("detail", Text, nullable=False),
)

# Plan previews under <home>/plans/<id>/: paid for, but not runs.
plans = Table(
    "plans",
    metadata,
    Column("home_id", Integer, ForeignKey("homes.id", ondelete="CASCADE"), primary_key=True),
    Column("plan_id", Text, primary_key=True),
    Column("has_graph_json", Boolean, nullable=False),
    Column("has_rejected", Boolean, nullable=False),
    Column("graph_name", Text),
    Column("gone", Boolean, nullable=False, default=False),
)

# --------------------------------------------------------------------------- runner invocations
# A runner's display-only role-invocation stream (seeds/runner-invocation-events.txt):
# ``events.jsonl`` beside the runner's ledger, one line per invocation start and end.
# Indexed by `omg-ledger sync --invocations PATH` (invocation_sync.py).

# Every valid line of an invocation stream, in file order. Pairing needs starts that are
# still open across syncs, so the paired rows below are re-derived from all of a file's
# stored lines whenever the file changes.
invocation_lines = Table(
    "invocation_lines",
    metadata,
    Column("file_pk", Integer, ForeignKey("streams.id", ondelete="CASCADE"), primary_key=True),
    Column("line_no", Integer, primary_key=True),  # 1-based physical line number
    Column("byte_offset", BigInteger, nullable=False),
    Column("ts", Text, nullable=False),  # normalized UTC
    Column("ts_us", BigInteger, nullable=False),
    Column("event", Text, nullable=False),  # 'start' | 'end'
    Column("role", Text),  # NULL on recover's end line
    Column("milestone", Text),  # NULL for planning / alt / navi
    Column("status", Text),  # verbatim; ends only
    Column("duration_ms", BigInteger),
    Column("raw", Text, nullable=False),  # the line exactly as written
)

# One row per invocation as the stream shows it (invocations.pair_invocations):
# outcome paired | recovered (closed by recover) | dangling (start, no end yet) |
# unmatched_end (end, no start). Derived; rebuilt with the file.
invocations = Table(
    "invocations",
    metadata,
    Column("file_pk", Integer, ForeignKey("streams.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),  # 0-based, ordered by start (or end) line
    Column("role", Text),
    Column("milestone", Text),
    Column("started_at", Text),
    Column("started_at_us", BigInteger),
    Column("ended_at", Text),
    Column("ended_at_us", BigInteger),
    Column("status", Text),
    Column("duration_ms", BigInteger),
    Column("duration_source", Text),  # 'reported' | 'timestamps' | NULL
    Column("outcome", Text, nullable=False),
    Column("start_line", Integer),
    Column("end_line", Integer),
    Index("ix_invocations_started_at_us", "started_at_us"),
    Index("ix_invocations_outcome", "outcome"),
)
