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
    text,
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

# Text sorts and compares in code point order on both backends: SQLite's BINARY
# collation is that for UTF-8, and on PostgreSQL "C" is, whatever locale the database
# was created in (en_US.UTF-8 would put "alpha" before "Zed" and "a_b" before "a-b").
TEXT = Text().with_variant(Text(collation="C"), "postgresql")


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
    Column("label", TEXT, nullable=False),
    Column("path", TEXT, nullable=False),
    # the directory's identity: a home is its real directory, whatever label or path names it
    Column("machine", TEXT),  # machine id (or hostname where there is none) of the machine it is on
    Column("dev", BigInteger),
    Column("inode", BigInteger),
    Column("real_path", TEXT),  # symlinks resolved
    Column("last_synced_at", TEXT),
    UniqueConstraint("label"),
)

# One row per run directory ever seen. Status is NOT stored: it is composed at query
# time from the stream facts below plus a live probe of resume.lock (status.py).
runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("home_id", Integer, ForeignKey("homes.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", TEXT, nullable=False),
    Column("dir_path", TEXT, nullable=False),
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
    Column("runtime", TEXT),  # absent key in a snapshot means "claude"
    Column("graph_name", TEXT),
    Column("graph_version", TEXT),
    Column("node_count", Integer),  # nodes in the snapshot's graph
    Column("graph_source_path", TEXT),
    Column("graph_sha256", TEXT),
    Column("inputs_json", TEXT),
    Column("continue_on_fail", Boolean),
    Column("goal_text", TEXT),
    Column("goal_cycle", Integer),
    Column("goal_max_cycles", Integer),
    Column("goal_first_run_id", TEXT),
    Column("build_evidence_answer", TEXT),  # attached | declared | disclosed | none-detected
    Column("build_evidence_declared_by", TEXT),
    Column("build_evidence_signals_json", TEXT),
    Column("gate_paused_at", TEXT),
    Column("gate_decisions_json", TEXT),
    Column("planning_cost_nano_usd", BigInteger),
    Column("planning_cost_unknown", Boolean),
    Column("snapshot_cost_nano_usd", BigInteger),  # engine's `runs list` figure: state.json sums
    Column("snapshot_cost_unknown", Boolean),
    Column("nodes_passed", Integer),  # graph nodes whose snapshot record is PASS
    Column("all_nodes_passed", Boolean),
    # stream (events.jsonl) facts
    Column("event_count", Integer, nullable=False, default=0),
    Column("first_event_at", TEXT),
    Column("first_event_at_us", BigInteger),
    Column("last_event_at", TEXT),
    Column("last_event_at_us", BigInteger),
    Column("leg_count", Integer, nullable=False, default=0),  # unphased legs, as the engine counts
    Column("any_leg", Boolean, nullable=False, default=False),
    Column("last_leg_open", Boolean, nullable=False, default=False),
    Column("last_leg_phase", TEXT),  # 'planning' or 'run'
    Column("last_outcome", TEXT),  # outcome of the last closed leg
    Column("last_detail", TEXT),
    Column("stream_paused", Boolean, nullable=False, default=False),  # newer schema: ingestion waits
    # the DERIVATION_VERSION whose rules wrote this run's derived rows (0 = before versions)
    Column("derivation_version", Integer, nullable=False, default=0, server_default="0"),
    # run id + hash of the stream's first line: equal identities are copies of one run
    Column("stream_identity", TEXT),
    # the one copy of a run that counts (most of the stream); the views show only these
    Column("billed", Boolean, nullable=False, default=True, server_default=true()),
    # money, summed from charges (all legs, assessment included)
    Column("cost_nano_usd", BigInteger, nullable=False, default=0),  # known spend only
    Column("invocations", Integer, nullable=False, default=0),
    Column("unknown_cost_invocations", Integer, nullable=False, default=0),
    # calls paid for and recorded nowhere: a plain retry's failed attempt, a session-limited call,
    # one killed with its leg (a call killed in an open leg found ABANDONED is added at query time)
    Column("unrecorded_attempts", Integer, nullable=False, default=0),
    *_tokens(),
    # PASS nodes (latest verdict) by provenance, from the run's node rows: what audit reads
    Column("passes", Integer, nullable=False, default=0, server_default="0"),
    Column("passes_verified", Integer, nullable=False, default=0, server_default="0"),
    Column("passes_approved", Integer, nullable=False, default=0, server_default="0"),
    Column("passes_self_reported", Integer, nullable=False, default=0, server_default="0"),
    Column("passes_exit_only", Integer, nullable=False, default=0, server_default="0"),
    Column("passes_unknown", Integer, nullable=False, default=0, server_default="0"),  # provenance absent
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
    Column("phase", TEXT, nullable=False),  # 'planning' | 'run'
    # planning | initial | resume (after paused) | retry (after failed) | rerun (after passed) |
    # after-abandoned (after a leg that never closed)
    Column("kind", TEXT, nullable=False),
    Column("started_at", TEXT),
    Column("started_at_us", BigInteger),
    Column("finished_at", TEXT),
    Column("outcome", TEXT),  # passed | failed | paused | planned (plan committed) | NULL
    Column("detail", TEXT),
    Column("is_open", Boolean, nullable=False),
    Column("closed_by", TEXT),  # run_finished | plan_committed | superseded | NULL (open)
    Column("session_limited", Boolean, nullable=False, default=False),
    Column("start_line", Integer),
    Column("end_line", Integer),
)

# One row per node id per run: the latest authoritative verdict (latest terminal
# event in file order, across legs and rounds), recovered from the snapshot when the
# event was dropped.
# A node over its budget: the partial index's predicate. reports/audit.py's budget query
# states the same predicate on alias `n` (the planner uses the index only for a query
# whose WHERE has this very term; audit cannot import this module: start-up).
NODE_OVER_BUDGET = "budget_overrun OR (budget_nano_usd IS NOT NULL AND cost_nano_usd > budget_nano_usd)"

nodes = Table(
    "nodes",
    metadata,
    _run_fk(),
    Column("node_id", TEXT, primary_key=True),
    Column("node_type", TEXT),  # from the snapshot's graph; NULL = a model-CLI node
    Column("in_graph", Boolean, nullable=False),
    Column("verdict", TEXT),  # PASS | FAIL | NULL (not settled)
    Column("verdict_source", TEXT),  # 'stream' | 'snapshot' (recovered dropped event)
    Column("state", TEXT, nullable=False),  # settled | running | paused | unfinished | pending
    Column("retries", Integer),  # in-leg retries before the latest terminal attempt (the event's)
    Column("round", Integer),
    Column("provenance", TEXT),
    Column("judged", Boolean),  # the snapshot record's (absent = false); NULL: no record of this terminal
    Column("budget_nano_usd", BigInteger),
    Column("duration_ns", BigInteger),  # the snapshot record's: one execution's, never summed
    Column("session_id", TEXT),
    Column("detail", TEXT),
    Column("artifact_name", TEXT, nullable=False),  # '<id with / replaced by ~>.out'
    Column("artifact_path", TEXT),  # as recorded by the engine (path on the engine's machine)
    Column("has_artifact", Boolean, nullable=False),
    Column("has_failed_output", Boolean, nullable=False),
    # the engine failed it for its budget_usd (the unjudged FAIL's detail says so), .out or not
    Column("budget_overrun", Boolean, nullable=False, default=False),
    Column("last_leg", Integer),
    Column("cost_nano_usd", BigInteger, nullable=False, default=0),  # known spend, all legs
    Column("invocations", Integer, nullable=False, default=0),
    Column("unknown_cost_invocations", Integer, nullable=False, default=0),
    Column("unrecorded_attempts", Integer, nullable=False, default=0),
    Column("snapshot_verdict", TEXT),
    Column("snapshot_round", Integer),
    Column("snapshot_cost_nano_usd", BigInteger),
    Column("snapshot_cost_unknown", Boolean),
    # audit's scans by verdict: the PASS provenance counts read this index alone.
    Index("ix_nodes_verdict", "verdict", "run_pk", "provenance"),
    # audit's budget overruns: the few nodes over budget, not a scan of every node.
    Index("ix_nodes_budget_overrun", "run_pk", sqlite_where=text(NODE_OVER_BUDGET),
          postgresql_where=text(NODE_OVER_BUDGET)),
)

# One row per execution of a node within a leg: round 0 is the initial pass, k the
# k-th feedback round. outcome FEEDBACK = a declarer's non-final judgment.
rounds = Table(
    "rounds",
    metadata,
    _run_fk(),
    Column("leg_ordinal", Integer, primary_key=True),  # 0 = outside any leg (damage)
    Column("node_id", TEXT, primary_key=True),
    Column("seq", Integer, primary_key=True),  # execution order of this node within the leg
    Column("round", Integer, nullable=False),
    Column("started_at", TEXT),
    Column("ended_at", TEXT),
    Column("outcome", TEXT),  # PASS | FAIL | FEEDBACK | PAUSED | NULL (no terminal)
    Column("retries", Integer, nullable=False, default=0),
    Column("session_id", TEXT),
    Column("provenance", TEXT),
    Column("detail", TEXT),
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
    Column("first_run_id", TEXT, nullable=False),
    Column("cycle", Integer),
    Column("max_cycles", Integer),
    Column("text", TEXT),
    Column("assessed", Boolean, nullable=False),
    Column("goal_met", Boolean),
    Column("remaining", TEXT),
    Column("evidence", TEXT),
    Column("assess_cost_nano_usd", BigInteger),
    Index("ix_goal_cycles_first_run_id", "first_run_id"),
)

# Exactly one row per paid invocation. kind:
#   node        terminal node event (node_passed / node_failed)
#   feedback    a declarer's feedback node_retried (its judgment was non-terminal)
#   retry       a plain node_retried that carried accounting
#   planning    the unphased run_started that committed a plan (in a copy without its
#               stream: state.json's planning cost, undated)
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
    Column("leg_kind", TEXT),
    Column("node_id", TEXT),
    Column("round", Integer),
    Column("kind", TEXT, nullable=False),
    Column("at", TEXT),
    Column("at_us", BigInteger),
    Column("cost_nano_usd", BigInteger),  # NULL = unknown, never 0 for unknown
    Column("cost_unknown", Boolean, nullable=False),
    *_tokens(),
    Column("source_file", TEXT, nullable=False),
    Column("source_offset", BigInteger),
    Column("source_line", Integer),
    Index("ix_charges_at_us", "at_us"),
    # audit's unpriced work: the unknown-cost charges only.
    Index("ix_charges_cost_unknown", "run_pk", sqlite_where=text("cost_unknown"),
          postgresql_where=text("cost_unknown")),
)

# Every stream line ingested, in file order, with typed columns and the original line.
events = Table(
    "events",
    metadata,
    _run_fk(),
    Column("line_no", Integer, primary_key=True),  # 1-based line number in events.jsonl
    Column("byte_offset", BigInteger, nullable=False),
    Column("schema", Integer),
    Column("ts", TEXT),
    Column("event", TEXT),
    Column("node_id", TEXT),
    Column("raw", TEXT, nullable=False),  # the line as written (unknown fields kept; bytes not UTF-8 as U+FFFD)
)

# The directory change cache of a run: its own mtimes and ctimes (a new .out, a renamed
# state.json or a new failed/ reply shows there; the ctime also when the mtime was set
# back, as `rsync -t` does). Not a fact: only what lets an unchanged directory cost a few
# stat calls.
ingest_state = Table(
    "ingest_state",
    metadata,
    _run_fk(),
    Column("dir_mtime_ns", BigInteger),  # NULL = must rescan (racy or never scanned)
    Column("failed_dir_mtime_ns", BigInteger),
    Column("dir_ctime_ns", BigInteger),  # NULL = must rescan (as dir_mtime_ns; remembered from 0017 on)
    Column("failed_dir_ctime_ns", BigInteger),
)

# Where the derivation of a run's stream stopped: the reconciler's fold state after
# its last stored line, so an append walks only the new lines. Derived from stored
# facts like every derived row (rebuild recomputes it); a row of another derivation
# version, or a stream re-read from zero, is never resumed from.
derive_states = Table(
    "derive_states",
    metadata,
    _run_fk(),
    Column("derivation_version", Integer, nullable=False),
    Column("line_no", BigInteger, nullable=False),  # the last event line the state covers
    Column("state", TEXT, nullable=False),  # JSON
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
    Column("kind", TEXT, nullable=False),  # 'run' | 'invocations'
    Column("source", TEXT, nullable=False),
    Column("path", TEXT, nullable=False),  # absolute path where it was read
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE")),  # kind 'run' only
    Column("dev", BigInteger),
    Column("inode", BigInteger),
    Column("size", BigInteger),  # -1 = look again next time (a partial last line waits)
    Column("mtime_ns", BigInteger),
    Column("ctime_ns", BigInteger),  # no user can set it back: a rewrite with mtime restored shows here
    Column("end_offset", BigInteger, nullable=False, default=0),  # after the last complete line
    Column("next_line", Integer, nullable=False, default=1),
    Column("head_len", Integer, nullable=False, default=0),
    Column("head_sha256", TEXT),
    Column("tail_len", Integer, nullable=False, default=0),  # bytes just before end_offset
    Column("tail_sha256", TEXT),
    Column("scan_offset", BigInteger),  # a runaway line (no newline yet) was scanned up to here
    Column("scan_line", Integer),
    Column("paused_schema", Integer),  # a line of this newer schema waits at end_offset
    Column("paused_reason", TEXT),
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
    Column("place", TEXT, primary_key=True),
    Column("name", TEXT, primary_key=True),
)

# The small JSON files of a run (state.json, assess.json, rejected.json, graph.json):
# identity and a content hash, so an unchanged file is not re-parsed and an atomic
# rename with identical bytes does not trigger a rebuild. The content is kept so the
# run's history survives its directory.
snapshot_files = Table(
    "snapshot_files",
    metadata,
    _run_fk(),
    Column("name", TEXT, primary_key=True),
    Column("dev", BigInteger),
    Column("inode", BigInteger),
    Column("size", BigInteger),
    Column("mtime_ns", BigInteger),
    Column("sha256", TEXT),
    Column("content", TEXT),
    Column("error", TEXT),  # unreadable / not JSON / wrong shape
    # No user can set it back: a same-size rewrite in place with the mtime restored shows.
    Column("ctime_ns", BigInteger),
    # The change check reads every file's identity; covered here, it never reads the
    # table's pages, which are mostly the files' content.
    Index("ix_snapshot_files_identity", "run_pk", "name", "dev", "inode", "size", "mtime_ns", "ctime_ns",
          "sha256"),
)

# Bad input: where, what, when first and last seen. Never silently dropped.
problems = Table(
    "problems",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="SET NULL")),
    Column("path", TEXT, nullable=False),
    Column("byte_offset", BigInteger, nullable=False),
    Column("reason", TEXT, nullable=False),
    Column("first_seen_at", TEXT, nullable=False),
    Column("last_seen_at", TEXT, nullable=False),
    Column("resolved_at", TEXT),  # a later sync re-read its file and found the cause gone; NULL: open
    # The machine that read the path (tail.machine_source; '' recorded before machines
    # were told apart): two machines' homes may have one path, each with its own problems.
    Column("machine", TEXT, nullable=False, server_default=""),
    UniqueConstraint("machine", "path", "byte_offset", "reason"),
)

# Reconciliation disagreements between state.json and the stream (derived; rebuilt
# with the run).
findings = Table(
    "findings",
    metadata,
    _run_fk(),
    Column("seq", Integer, primary_key=True),
    Column("kind", TEXT, nullable=False),
    Column("node_id", TEXT),
    Column("leg_ordinal", Integer),
    Column("detail", TEXT, nullable=False),
)

# Plan previews under <home>/plans/<id>/: paid for, but not runs.
plans = Table(
    "plans",
    metadata,
    Column("home_id", Integer, ForeignKey("homes.id", ondelete="CASCADE"), primary_key=True),
    Column("plan_id", TEXT, primary_key=True),
    Column("has_graph_json", Boolean, nullable=False),
    Column("has_rejected", Boolean, nullable=False),
    Column("graph_name", TEXT),
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
    Column("ts", TEXT, nullable=False),  # normalized UTC
    Column("ts_us", BigInteger, nullable=False),
    Column("event", TEXT, nullable=False),  # 'start' | 'end'
    Column("role", TEXT),  # NULL on recover's end line
    Column("milestone", TEXT),  # NULL for planning / alt / navi
    Column("status", TEXT),  # verbatim; ends only
    Column("duration_ms", BigInteger),
    Column("raw", TEXT, nullable=False),  # the line exactly as written
)

# One row per invocation as the stream shows it (invocations.pair_invocations):
# outcome paired | recovered (closed by recover) | dangling (start, no end yet) |
# unmatched_end (end, no start). Derived; rebuilt with the file.
invocations = Table(
    "invocations",
    metadata,
    Column("file_pk", Integer, ForeignKey("streams.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),  # 0-based, ordered by start (or end) line
    Column("role", TEXT),
    Column("milestone", TEXT),
    Column("started_at", TEXT),
    Column("started_at_us", BigInteger),
    Column("ended_at", TEXT),
    Column("ended_at_us", BigInteger),
    Column("status", TEXT),
    Column("duration_ms", BigInteger),
    Column("duration_source", TEXT),  # 'reported' | 'timestamps' | NULL
    Column("outcome", TEXT, nullable=False),
    Column("start_line", Integer),
    Column("end_line", Integer),
    Index("ix_invocations_started_at_us", "started_at_us"),
    Index("ix_invocations_outcome", "outcome"),
)

# --------------------------------------------------------------------------- documentation
# One description per table, view and column: what Datasette shows (`omg-ledger
# datasette-metadata`) and what a notebook user reads. tests/test_datasette.py keeps it
# complete: a new table, view or column without a line here fails the tests.

_TOKEN_DOCS = {
    "input_tokens": "Input tokens the engine reported (0 when it reported none).",
    "cached_input_tokens": "Cached input tokens the engine reported.",
    "output_tokens": "Output tokens the engine reported.",
    "reasoning_output_tokens": "Reasoning output tokens the engine reported (Codex).",
}
_RUN_PK = "The run (runs.id)."
_STREAM_IDENTITY = {
    "dev": "Device number of the file when last read.",
    "inode": "Inode of the file when last read.",
    "size": "Size in bytes when last read.",
    "mtime_ns": "Modification time (epoch ns) when last read.",
    "stream_offset": "Byte offset just after the last complete line read: the next sync resumes here.",
    "next_line": "Line number (1-based) of the next line to read.",
    "head_len": "Number of leading bytes fingerprinted by head_sha256.",
    "head_sha256": "SHA-256 of the first head_len bytes: a replaced or rewritten file is noticed.",
}

DOCS: dict[str, dict[str, str]] = {
    "alembic_version": {
        "": "The ledger's schema revision (`omg-ledger db current` prints it; `db upgrade` moves it).",
        "version_num": "The revision the database is at.",
    },
    "homes": {
        "": "Each oh-my-graph home indexed. The label defaults to <hostname>:<absolute path>, so homes "
            "from several machines never collide in one shared ledger (two machines of one hostname: "
            "<hostname>#<machine id's first 8 characters>:<absolute path> for the second).",
        "id": "Row id (other tables refer to it as home_id).",
        "label": "The home's name: --home LABEL=DIR, or <hostname>:<absolute path> (<hostname>#<machine id's "
                 "first 8 characters>:<absolute path> where another machine's home of that hostname has it).",
        "path": "Absolute path of the home on the machine that synced it, as last given.",
        "machine": "The machine the directory is on: machine:<machine-id>, or host:<hostname> where there is none.",
        "dev": "Device number of the home directory: with inode, its identity (labels and paths may change).",
        "inode": "Inode of the home directory.",
        "real_path": "The home's path with symlinks resolved.",
        "last_synced_at": "When the last sync of this home completed (UTC).",
    },
    "runs": {
        "": "One row per run directory ever seen, gone ones included. Status is not stored: it is "
            "composed when asked from these facts plus a live lock probe (`omg-ledger runs`).",
        "id": "Row id (other tables refer to it as run_pk).",
        "home_id": "The home the run belongs to (homes.id).",
        "run_id": "The engine's run id (the directory name); unique per home, not across machines.",
        "dir_path": "Absolute path of the run directory.",
        "gone": "1 when the directory disappeared; its history is kept.",
        "has_events": "1 when events.jsonl exists.",
        "has_state": "1 when state.json exists.",
        "has_graph_json": "1 when graph.json exists.",
        "has_rejected": "1 when rejected.json exists (a refused plan).",
        "has_assess": "1 when assess.json exists (an assessed goal cycle).",
        "has_lock": "1 when resume.lock exists.",
        "snapshot_schema": "Schema version of state.json; NULL when there is no readable snapshot.",
        "runtime": "claude or codex (a snapshot without the key means claude).",
        "graph_name": "Name of the graph the run executed.",
        "graph_version": "Version of the graph.",
        "node_count": "Number of nodes in the snapshot's graph.",
        "graph_source_path": "Where the graph was loaded from, as the engine recorded it.",
        "graph_sha256": "SHA-256 of the graph source.",
        "inputs_json": "The run's inputs, as JSON.",
        "continue_on_fail": "1 when the run continues after a failed node.",
        "goal_text": "Goal of an iterated auto run.",
        "goal_cycle": "This run's cycle number within its goal.",
        "goal_max_cycles": "Most cycles the goal may take.",
        "goal_first_run_id": "Run id of the goal's first cycle: the key that groups a goal's runs.",
        "build_evidence_answer": "Build evidence of an auto run: attached, declared, disclosed or none-detected.",
        "build_evidence_declared_by": "Who declared the build evidence.",
        "build_evidence_signals_json": "The signals the build evidence answer rests on, as JSON.",
        "gate_paused_at": "Node whose gate paused the run, when one did.",
        "gate_decisions_json": "Gate decisions taken so far, as JSON.",
        "planning_cost_nano_usd": "Planning spend in nano-dollars (1e-9 USD); NULL when unknown.",
        "planning_cost_unknown": "1 when the planning call reported no price.",
        "snapshot_cost_nano_usd": "The engine's own total from state.json (what `runs list` shows); "
                                  "it misses earlier legs and assessments.",
        "snapshot_cost_unknown": "1 when the engine's state.json total includes unpriced work.",
        "nodes_passed": "Graph nodes whose snapshot record is PASS.",
        "all_nodes_passed": "1 when the snapshot holds as many PASS records as the graph has nodes (the "
                            "engine's PASS: a record of a node not in the graph counts too).",
        "event_count": "Stream lines ingested.",
        "first_event_at": "Time of the first stream event (UTC).",
        "first_event_at_us": "first_event_at as epoch microseconds.",
        "last_event_at": "Time of the last stream event (UTC).",
        "last_event_at_us": "last_event_at as epoch microseconds.",
        "leg_count": "Unphased legs, counted as the engine counts them.",
        "any_leg": "1 when the stream opened at least one leg.",
        "last_leg_open": "1 when the last leg never reported an end (running, planning or abandoned).",
        "last_leg_phase": "Phase of the last leg: planning or run.",
        "last_outcome": "Outcome of the last closed leg: passed, failed, paused or planned.",
        "last_detail": "Detail the last closed leg reported.",
        "stream_paused": "1 when ingestion waits: the stream uses a newer event schema than this omg-ledger reads.",
        "derivation_version": "The version of omg-ledger's rules that derived this run's rows (a newer "
                              "omg-ledger re-derives older ones from the stored facts on its next sync).",
        "stream_identity": "The run id with a hash of its stream's first line: equal identities are copies "
                           "of one run. '<run id>:no-stream' when the stream has no line, or does not begin "
                           "with one (its head damaged): a copy of the run with that id.",
        "billed": "1 for the one copy of a run that counts (the one holding most of the stream); the views "
                  "show only these.",
        "cost_nano_usd": "Known spend over every leg and the assessment, in nano-dollars (1e-9 USD). "
                         "Unpriced work is not in it: see unknown_cost_invocations.",
        "invocations": "Paid invocations (charges) of the run.",
        "unknown_cost_invocations": "Invocations with no known price (Codex, killed calls): the cost is a lower bound.",
        "unrecorded_attempts": "Calls paid for but recorded nowhere: a plain retry's failed attempt, a "
                               "session-limited call or one killed with a leg a later leg followed (one killed in "
                               "the open leg of an ABANDONED run needs the live status: `omg-ledger runs`).",
        **_TOKEN_DOCS,
        "passes": "Nodes of the run whose latest verdict is PASS (nodes.verdict).",
        "passes_verified": "PASS nodes whose provenance is verified (a success check the engine ran and judged).",
        "passes_approved": "PASS nodes whose provenance is approved (a human approved a gate).",
        "passes_self_reported": "PASS nodes whose provenance is self-reported (the node emitted the right words).",
        "passes_exit_only": "PASS nodes whose provenance is exit-only (a subprocess exited 0, nothing checked).",
        "passes_unknown": "PASS nodes with no provenance recorded (a run that predates the field). A "
                          "provenance omg-ledger does not know is counted in passes alone.",
    },
    "legs": {
        "": "One row per leg bracket, in file order. A planning leg is closed by the run_started that "
            "commits the plan, or by run_finished of a refused plan.",
        "run_pk": _RUN_PK,
        "ordinal": "Leg number, 1-based, in file order.",
        "phase": "planning or run.",
        "kind": "planning, initial, resume (after a paused leg), retry (after a failed one), rerun (after a "
                "passed one) or after-abandoned (after one that never ended).",
        "started_at": "When the leg started (UTC).",
        "started_at_us": "started_at as epoch microseconds.",
        "finished_at": "When the leg finished (UTC); NULL while open.",
        "outcome": "passed, failed, paused, planned (plan committed) or NULL.",
        "detail": "Detail the leg's end reported.",
        "is_open": "1 when the leg never reported an end.",
        "closed_by": "What closed the leg: run_finished, plan_committed, superseded, or NULL (open).",
        "session_limited": "1 when the leg stopped at a session limit.",
        "start_line": "Stream line that opened the leg.",
        "end_line": "Stream line that closed the leg.",
    },
    "nodes": {
        "": "One row per node per run: the latest authoritative verdict (latest terminal event in file "
            "order, across legs and rounds), recovered from the snapshot when the event was dropped.",
        "run_pk": _RUN_PK,
        "node_id": "The node's id in the graph.",
        "node_type": "Node type as the snapshot's graph writes it: claude-run (a model-CLI node, whatever the "
                     "runtime) or gate; NULL when the graph gives none (the engine reads that as claude-run) or the "
                     "node is not in the graph.",
        "in_graph": "1 when the node is in the snapshot's graph.",
        "verdict": "PASS, FAIL, or NULL (not settled).",
        "verdict_source": "stream, or snapshot (a dropped event recovered from state.json).",
        "state": "settled, running, paused, unfinished or pending.",
        "retries": "Retries the node took.",
        "round": "Feedback round of the verdict (0 = initial pass).",
        "provenance": "How the PASS was reached: verified, approved, self-reported or exit-only; NULL on a FAIL "
                      "and on a PASS that predates the field.",
        "judged": "The engine's judged field: 1 when a judge decided the verdict.",
        "budget_nano_usd": "The node's budget in nano-dollars; NULL when it has none.",
        "duration_ns": "Duration the engine reported, in nanoseconds.",
        "session_id": "Model CLI session id.",
        "detail": "Detail of the verdict.",
        "artifact_name": "Artifact file name: <id with / replaced by ~>.out.",
        "artifact_path": "Artifact path as the engine recorded it (on the engine's machine).",
        "has_artifact": "1 when the .out artifact is on disk.",
        "has_failed_output": "1 when a failed/ reply is on disk.",
        "budget_overrun": "1 for a FAIL the engine gave for its budget_usd (the terminal's detail is the engine's "
                          "\"exceeded budget_usd\" message and the FAIL is not judged), with or without a .out.",
        "last_leg": "Last leg in which the node ran.",
        "cost_nano_usd": "Known spend of the node over every leg and round, in nano-dollars. Unpriced work is "
                         "not in it: with unknown_cost_invocations above 0 it is a lower bound (0 for a node "
                         "whose every invocation is unpriced, e.g. Codex).",
        "invocations": "Paid invocations of the node.",
        "unknown_cost_invocations": "Invocations of the node with no known price.",
        "unrecorded_attempts": "Calls of the node paid for but recorded nowhere: a plain retry's failed attempt, "
                               "a session-limited call or one killed with a leg a later leg followed.",
        "snapshot_verdict": "Verdict in state.json.",
        "snapshot_round": "Round in state.json.",
        "snapshot_cost_nano_usd": "Cost in state.json (latest leg only), in nano-dollars.",
        "snapshot_cost_unknown": "1 when state.json marks the cost unknown.",
    },
    "rounds": {
        "": "One row per execution of a node within a leg: round 0 is the initial pass, k the k-th "
            "feedback round. Outcome FEEDBACK is a declarer's non-final judgment.",
        "run_pk": _RUN_PK,
        "leg_ordinal": "Leg number (legs.ordinal); 0 = outside any leg (damaged stream).",
        "node_id": "The node's id.",
        "seq": "Execution order of this node within the leg.",
        "round": "0 = initial pass, k = k-th feedback round.",
        "started_at": "When the execution started (UTC).",
        "ended_at": "When it ended (UTC).",
        "outcome": "PASS, FAIL, FEEDBACK, PAUSED or NULL (no terminal event).",
        "retries": "Retries within this execution.",
        "session_id": "Model CLI session id.",
        "provenance": "How the outcome was reached.",
        "detail": "Detail of the outcome.",
        "cost_nano_usd": "Known spend of this execution in nano-dollars; NULL when none of it has a known "
                         "price (or it was charged nothing: no terminal event, a gate).",
        "cost_unknown": "1 when some of its charges have no known price: cost_nano_usd is then a lower bound.",
        "start_line": "Stream line of the node's start.",
        "end_line": "Stream line of the node's end.",
    },
    "goal_cycles": {
        "": "Goal cycles of iterated auto runs: the state.json goal block joined with assess.json.",
        "run_pk": _RUN_PK,
        "first_run_id": "Run id of the goal's first cycle.",
        "cycle": "This cycle's number.",
        "max_cycles": "Most cycles the goal may take.",
        "text": "The goal.",
        "assessed": "1 when assess.json exists for this cycle.",
        "goal_met": "The assessment's answer: 1 when the goal is met.",
        "remaining": "What the assessment says remains.",
        "evidence": "The assessment's evidence.",
        "assess_cost_nano_usd": "Spend of the assessment in nano-dollars (only assess.json records it).",
    },
    "charges": {
        "": "Exactly one row per paid invocation. kind: node (terminal node event), feedback (a "
            "declarer's feedback round), planning (the run_started that committed a plan, or state.json's "
            "planning cost in a copy without its stream), refused (a "
            "plan refused before a graph existed), assessment (assess.json), recovered (a verdict the "
            "stream dropped, from state.json), other (accounting on any other event).",
        "run_pk": _RUN_PK,
        "seq": "Charge number within the run.",
        "leg_ordinal": "Leg number (legs.ordinal).",
        "leg_kind": "Kind of that leg (legs.kind: planning, initial, resume, retry, rerun or after-abandoned); "
                    "assessment for the assessment, which follows the cycle's last leg and belongs to none.",
        "node_id": "The node charged, when a node was.",
        "round": "Feedback round (0 = initial pass).",
        "kind": "node, feedback, retry (a plain node_retried that carried accounting), planning, refused, "
                "assessment, recovered or other.",
        "at": "When the charge counts (UTC): the event's time (an assessment: the end of its run's first "
              "scheduler leg, the leg the auto process ran and assessed; a "
              "recovered verdict: its node's last node_started, else the run's last event); NULL in a copy "
              "without its stream, whose charges are in no window.",
        "at_us": "at as epoch microseconds.",
        "cost_nano_usd": "Spend in nano-dollars (1e-9 USD); NULL = unknown, never 0 for unknown.",
        "cost_unknown": "1 when the engine reported no price.",
        **_TOKEN_DOCS,
        "source_file": "File the charge was read from.",
        "source_offset": "Byte offset of the line in source_file.",
        "source_line": "Line number in source_file.",
    },
    "events": {
        "": "Every stream line ingested, in file order, with typed columns and the original line. The "
            "original line is the fact (re-derivation reads it) and most of the bytes (~220 of ~275 a line); "
            "the typed columns are kept because they are what a notebook filters events by.",
        "run_pk": _RUN_PK,
        "line_no": "Line number in events.jsonl, 1-based.",
        "byte_offset": "Byte offset of the line in events.jsonl.",
        "schema": "The event's schema version.",
        "ts": "The event's time as written (a NUL, JSON \\u0000, as U+FFFD: raw holds it as written).",
        "event": "The event name (run_started, node_passed, …).",
        "node_id": "The node the event is about, when any, as nodes.node_id spells it (a NUL as U+FFFD).",
        "raw": "The line as written (unknown fields kept; a byte that is not UTF-8, inside a string, as "
               "U+FFFD, as the engine decodes it).",
    },
    "ingest_state": {
        "": "A run directory's own mtimes and ctimes: only what lets an unchanged directory cost a few stat calls.",
        "run_pk": _RUN_PK,
        "dir_mtime_ns": "The run directory's mtime (epoch ns); NULL = must rescan.",
        "failed_dir_mtime_ns": "The failed/ directory's mtime (epoch ns); -1 = it did not exist.",
        "dir_ctime_ns": "The run directory's ctime when its mtime was remembered (epoch ns): a directory whose "
                        "mtime was set back (rsync -t) after a change still reads as changed. NULL = must rescan.",
        "failed_dir_ctime_ns": "The failed/ directory's ctime when its mtime was remembered; NULL when it did not "
                               "exist or must be listed again.",
    },
    "derive_states": {
        "": "Where the derivation of a run's stream stopped (a cache derived from the stored events): the fold "
            "state after its last line, so an append walks only the new lines.",
        "run_pk": _RUN_PK,
        "derivation_version": "The DERIVATION_VERSION of the rules that left it; another version is never resumed.",
        "line_no": "The last event line (events.line_no) the state covers.",
        "state": "The fold state, JSON (internal to omg-ledger: legs and executions still open, per-node facts, "
                 "running totals).",
    },
    "streams": {
        "": "One row per stream file ever read, of every kind (a run's events.jsonl, a runner's invocation "
            "stream): its identity and where reading resumes.",
        "id": "Row id (invocation tables refer to it as file_pk).",
        "kind": "run (a run's events.jsonl) or invocations (a runner's role-invocation stream).",
        "source": "Where it was read: home:<homes.id> for a run stream, machine:<id> for a runner stream.",
        "path": "Absolute path where it was read.",
        "run_pk": "The run, for a run stream (runs.id).",
        **{k: _STREAM_IDENTITY[k] for k in ("dev", "inode", "size", "mtime_ns")},
        "ctime_ns": "Status-change time (epoch ns): no user can set it back, so an in-place rewrite shows.",
        "end_offset": _STREAM_IDENTITY["stream_offset"],
        "next_line": _STREAM_IDENTITY["next_line"],
        "head_len": _STREAM_IDENTITY["head_len"],
        "head_sha256": _STREAM_IDENTITY["head_sha256"],
        "tail_len": "Number of bytes just before end_offset fingerprinted by tail_sha256.",
        "tail_sha256": "SHA-256 of the bytes before end_offset: a file truncated and regrown is noticed.",
        "scan_offset": "Where the scan of a line still without its newline (over 1 MiB) stopped.",
        "scan_line": "The line number of that runaway line.",
        "paused_schema": "A line of this newer schema waits at end_offset; reading resumes once understood.",
        "paused_reason": "Why reading waits.",
        "derivation_version": "For a runner stream: the version of the rules that paired its invocations.",
    },
    "run_files": {
        "": "The '*.out' files a run directory holds: a directory fact derivation reads.",
        "run_pk": _RUN_PK,
        "place": "'' for a node's artifact directly in the run directory, 'failed' for a reply under failed/.",
        "name": "The file name.",
    },
    "snapshot_files": {
        "": "The small JSON files of a run (state.json, assess.json, rejected.json, graph.json): "
            "identity, content hash and content, so the run's history survives its directory.",
        "run_pk": _RUN_PK,
        "name": "File name.",
        **{k: _STREAM_IDENTITY[k] for k in ("dev", "inode", "size", "mtime_ns")},
        "sha256": "SHA-256 of the content.",
        "content": "The file's content (a byte that is not UTF-8 as U+FFFD, as the engine decodes it).",
        "error": "Why the file could not be used: unreadable, not JSON, wrong shape.",
        "ctime_ns": "Status-change time (epoch ns) when last read: no user can set it back, so an in-place "
                    "rewrite shows (NULL: read before omg-ledger kept it; read again at the next sync).",
    },
    "problems": {
        "": "Bad input found by sync: where, what, when first and last seen. Never silently dropped.",
        "id": "Row id.",
        "run_pk": "The run, when the problem belongs to one (runs.id).",
        "path": "File or directory with the problem.",
        "byte_offset": "Byte offset of the problem in the file.",
        "reason": "What is wrong.",
        "first_seen_at": "When a sync first saw it (UTC).",
        "last_seen_at": "When a sync last saw it (UTC).",
        "resolved_at": "When a sync re-read the thing and no longer found the problem (UTC); NULL = open.",
        "machine": "The machine whose sync found it (as homes.machine): another machine's home at the same path "
                   "has problems of its own. Empty: recorded before problems named their machine, and it could "
                   "not be told; the next sync to read the path again records it anew.",
    },
    "findings": {
        "": "Disagreements between state.json and the stream, per run (rebuilt with the run).",
        "run_pk": _RUN_PK,
        "seq": "Finding number within the run.",
        "kind": "dropped_event, snapshot_record_missing, snapshot_behind, cost_mismatch, "
                "recovery_negative, run_finished_without_leg or diverged_copy.",
        "node_id": "The node concerned, when any.",
        "leg_ordinal": "The leg concerned, when any.",
        "detail": "What disagrees.",
    },
    "plans": {
        "": "Plan previews under <home>/plans/<id>/: paid for, but never runs.",
        "home_id": "The home (homes.id).",
        "plan_id": "The plan directory's name.",
        "has_graph_json": "1 when the plan produced a graph.json.",
        "has_rejected": "1 when the plan was refused (rejected.json).",
        "graph_name": "Name of the planned graph.",
        "gone": "1 when the directory disappeared.",
    },
    "invocation_lines": {
        "": "Every valid line of a runner invocation stream, in file order.",
        "file_pk": "The stream (streams.id).",
        "line_no": "Line number, 1-based.",
        "byte_offset": "Byte offset of the line.",
        "ts": "The line's time (UTC).",
        "ts_us": "ts as epoch microseconds.",
        "event": "start or end.",
        "role": "The role invoked; NULL on recover's end line.",
        "milestone": "The milestone; NULL for planning, alt and navi.",
        "status": "End status, verbatim (ends only).",
        "duration_ms": "Duration the end line reported, in ms.",
        "raw": "The line exactly as written.",
    },
    "invocations": {
        "": "One row per runner role invocation: a start paired with its end (outcome paired), closed by "
            "recover (recovered), still open (dangling) or an end with no start (unmatched_end).",
        "file_pk": "The stream (streams.id).",
        "seq": "Invocation number in the stream, 0-based, by start (or end) line.",
        "role": "The role invoked.",
        "milestone": "The milestone.",
        "started_at": "Start time (UTC).",
        "started_at_us": "started_at as epoch microseconds.",
        "ended_at": "End time (UTC).",
        "ended_at_us": "ended_at as epoch microseconds.",
        "status": "End status, verbatim.",
        "duration_ms": "Duration in ms.",
        "duration_source": "reported (the end line said), timestamps (end minus start) or NULL.",
        "outcome": "paired, recovered, dangling or unmatched_end.",
        "start_line": "Line of the start.",
        "end_line": "Line of the end.",
    },
}


def _view_docs(description: str, columns: dict[str, str | tuple[str, str]]) -> dict[str, str]:
    """A view's docs; a column given as (table, column) borrows that table column's doc."""
    out = {"": description}
    for name, doc in columns.items():
        out[name] = DOCS[doc[0]][doc[1]] if isinstance(doc, tuple) else doc
    return out


def _same(table: str, *columns: str) -> dict[str, tuple[str, str]]:
    return {c: (table, c) for c in columns}


_HOME = {"home": "Home label (homes.label); with run_id, the key of a run."}
_RUN = {"run_id": ("runs", "run_id"), "graph": ("runs", "graph_name"), "runtime": ("runs", "runtime")}
_USD_DOC = "The same amount in US dollars, a float for display: sum cost_nano_usd for exact totals."
_TOKENS = tuple(_TOKEN_DOCS)


def _add_view_docs() -> None:
    from .views import VIEWS_0002

    def about(view: str) -> str:
        return VIEWS_0002[view][0]

    DOCS["v_charges"] = _view_docs(about("v_charges"), {
        **_HOME, **_RUN, **_same("charges", "seq", "kind"), "leg": ("charges", "leg_ordinal"),
        "leg_kind": ("charges", "leg_kind"), "node": ("charges", "node_id"),
        **_same("charges", "round", "at", "at_us", "cost_nano_usd"), "cost_usd": _USD_DOC,
        **_same("charges", "cost_unknown", *_TOKENS, "source_file", "source_line"),
    })
    DOCS["v_runs"] = _view_docs(about("v_runs"), {
        **_HOME, **_RUN, "graph_version": ("runs", "graph_version"),
        "ledger_state": "What the stored facts say: NOT-KNOWN-YET (nothing said yet, or a stream that waits at "
                        "a newer event schema), OPEN (running, planning or abandoned: `omg-ledger runs` probes "
                        "which), PAUSED, PASS or FAIL.",
        "started_at": ("runs", "first_event_at"), "started_at_us": ("runs", "first_event_at_us"),
        **_same("runs", "last_event_at", "last_event_at_us"), "legs": ("runs", "leg_count"),
        "nodes_total": ("runs", "node_count"), "nodes_passed": ("runs", "nodes_passed"),
        "cost_nano_usd": ("runs", "cost_nano_usd"), "cost_usd": _USD_DOC,
        **_same("runs", "invocations", "unknown_cost_invocations"),
        "cost_is_lower_bound": "1 when some invocations have no known price: the cost is a lower bound.",
        **_same("runs", "unrecorded_attempts", *_TOKENS, "goal_first_run_id", "goal_cycle", "goal_max_cycles",
                "goal_text", "build_evidence_answer", "build_evidence_declared_by", "gate_paused_at",
                "last_outcome", "last_detail"),
        "engine_snapshot_cost_nano_usd": ("runs", "snapshot_cost_nano_usd"),
        **_same("runs", "gone", "dir_path"),
    })
    DOCS["v_node_rounds"] = _view_docs(about("v_node_rounds"), {
        **_HOME, **_RUN, "leg": ("rounds", "leg_ordinal"), "leg_kind": ("legs", "kind"),
        "node": ("rounds", "node_id"),
        **_same("rounds", "seq", "round", "outcome", "retries", "provenance", "started_at", "ended_at",
                "cost_nano_usd"), "cost_usd": _USD_DOC,
        **_same("rounds", "cost_unknown", "session_id", "detail"),
    })
    DOCS["v_nodes"] = _view_docs(about("v_nodes"), {
        **_HOME, **_RUN, "node": ("nodes", "node_id"),
        **_same("nodes", "node_type", "in_graph", "verdict", "verdict_source", "state", "provenance", "judged",
                "round", "retries", "cost_nano_usd"), "cost_usd": _USD_DOC,
        **_same("nodes", "invocations", "unknown_cost_invocations", "unrecorded_attempts", "budget_nano_usd"),
        "budget_usd": "The budget in US dollars (a float for display).",
        "over_budget": "1 when the node's known spend over every invocation exceeds its budget (budget_usd bounds each invocation: audit's spend_over_budget compares the costliest one).",
        **_same("nodes", "budget_overrun", "has_artifact", "has_failed_output", "detail"),
    })
    DOCS["v_problems"] = _view_docs(about("v_problems"), {
        **_HOME, "run_id": ("runs", "run_id"),
        **_same("problems", "path", "byte_offset", "reason", "first_seen_at", "last_seen_at",
               "resolved_at", "machine"),
    })
    DOCS["v_findings"] = _view_docs(about("v_findings"), {
        **_HOME, "run_id": ("runs", "run_id"), "graph": ("runs", "graph_name"), **_same("findings", "seq", "kind"),
        "node": ("findings", "node_id"), "leg": ("findings", "leg_ordinal"), "detail": ("findings", "detail"),
    })
    DOCS["v_invocations"] = _view_docs(
        "One row per runner role invocation, with its stream's path and whether its status is a success, "
        "a judged verdict or a failure.", {
            "path": ("streams", "path"),
            "source": ("streams", "source"),
            **_same("invocations", "seq", "role", "milestone", "outcome", "status"),
            "status_class": "success (DONE, GO, SUCCESS, OBSERVED, READY, ACCEPT), judged (BLOCKED, NEEDS_DEEP, "
                            "NO-GO, NEEDS_CONFIRMATION), failure (any other end status) or NULL (no end yet).",
            **_same("invocations", "started_at", "started_at_us", "ended_at", "ended_at_us"),
            "at_us": "started_at_us, or ended_at_us for an end with no start: the time to filter on.",
            **_same("invocations", "duration_ms", "duration_source", "start_line", "end_line"),
        })


_add_view_docs()
