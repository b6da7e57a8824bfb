-- omg-ledger's SQLite schema at revision 0017, as the migrations build it (make head-schema)
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)
;
CREATE TABLE homes (
	id INTEGER NOT NULL, 
	label TEXT NOT NULL, 
	path TEXT NOT NULL, machine TEXT, dev BIGINT, inode BIGINT, real_path TEXT, last_synced_at TEXT, 
	CONSTRAINT pk_homes PRIMARY KEY (id), 
	CONSTRAINT uq_homes_label UNIQUE (label)
)
;
CREATE TABLE plans (
	home_id INTEGER NOT NULL, 
	plan_id TEXT NOT NULL, 
	has_graph_json BOOLEAN NOT NULL, 
	has_rejected BOOLEAN NOT NULL, 
	graph_name TEXT, 
	gone BOOLEAN NOT NULL, 
	CONSTRAINT pk_plans PRIMARY KEY (home_id, plan_id), 
	CONSTRAINT fk_plans_home_id_homes FOREIGN KEY(home_id) REFERENCES homes (id) ON DELETE CASCADE
)
;
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	home_id INTEGER NOT NULL, 
	run_id TEXT NOT NULL, 
	dir_path TEXT NOT NULL, 
	gone BOOLEAN NOT NULL, 
	has_events BOOLEAN NOT NULL, 
	has_state BOOLEAN NOT NULL, 
	has_graph_json BOOLEAN NOT NULL, 
	has_rejected BOOLEAN NOT NULL, 
	has_assess BOOLEAN NOT NULL, 
	has_lock BOOLEAN NOT NULL, 
	snapshot_schema INTEGER, 
	runtime TEXT, 
	graph_name TEXT, 
	graph_version TEXT, 
	node_count INTEGER, 
	graph_source_path TEXT, 
	graph_sha256 TEXT, 
	inputs_json TEXT, 
	continue_on_fail BOOLEAN, 
	goal_text TEXT, 
	goal_cycle INTEGER, 
	goal_max_cycles INTEGER, 
	goal_first_run_id TEXT, 
	build_evidence_answer TEXT, 
	build_evidence_declared_by TEXT, 
	build_evidence_signals_json TEXT, 
	gate_paused_at TEXT, 
	gate_decisions_json TEXT, 
	planning_cost_nano_usd BIGINT, 
	planning_cost_unknown BOOLEAN, 
	snapshot_cost_nano_usd BIGINT, 
	snapshot_cost_unknown BOOLEAN, 
	nodes_passed INTEGER, 
	all_nodes_passed BOOLEAN, 
	event_count INTEGER NOT NULL, 
	first_event_at TEXT, 
	first_event_at_us BIGINT, 
	last_event_at TEXT, 
	last_event_at_us BIGINT, 
	leg_count INTEGER NOT NULL, 
	any_leg BOOLEAN NOT NULL, 
	last_leg_open BOOLEAN NOT NULL, 
	last_leg_phase TEXT, 
	last_outcome TEXT, 
	last_detail TEXT, 
	stream_paused BOOLEAN NOT NULL, 
	cost_nano_usd BIGINT NOT NULL, 
	invocations INTEGER NOT NULL, 
	unknown_cost_invocations INTEGER NOT NULL, 
	unrecorded_attempts INTEGER NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	cached_input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	reasoning_output_tokens BIGINT NOT NULL, derivation_version INTEGER DEFAULT '0' NOT NULL, stream_identity TEXT, billed BOOLEAN DEFAULT 1 NOT NULL, passes INTEGER DEFAULT '0' NOT NULL, passes_verified INTEGER DEFAULT '0' NOT NULL, passes_approved INTEGER DEFAULT '0' NOT NULL, passes_self_reported INTEGER DEFAULT '0' NOT NULL, passes_exit_only INTEGER DEFAULT '0' NOT NULL, passes_unknown INTEGER DEFAULT '0' NOT NULL, 
	CONSTRAINT pk_runs PRIMARY KEY (id), 
	CONSTRAINT fk_runs_home_id_homes FOREIGN KEY(home_id) REFERENCES homes (id) ON DELETE CASCADE, 
	CONSTRAINT uq_runs_home_id_run_id UNIQUE (home_id, run_id)
)
;
CREATE TABLE charges (
	run_pk INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	leg_ordinal INTEGER, 
	leg_kind TEXT, 
	node_id TEXT, 
	round INTEGER, 
	kind TEXT NOT NULL, 
	at TEXT, 
	at_us BIGINT, 
	cost_nano_usd BIGINT, 
	cost_unknown BOOLEAN NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	cached_input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	reasoning_output_tokens BIGINT NOT NULL, 
	source_file TEXT NOT NULL, 
	source_offset BIGINT, 
	source_line INTEGER, 
	CONSTRAINT pk_charges PRIMARY KEY (run_pk, seq), 
	CONSTRAINT fk_charges_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE events (
	run_pk INTEGER NOT NULL, 
	line_no INTEGER NOT NULL, 
	byte_offset BIGINT NOT NULL, 
	schema INTEGER, 
	ts TEXT, 
	event TEXT, 
	node_id TEXT, 
	raw TEXT NOT NULL, 
	CONSTRAINT pk_events PRIMARY KEY (run_pk, line_no), 
	CONSTRAINT fk_events_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE findings (
	run_pk INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	kind TEXT NOT NULL, 
	node_id TEXT, 
	leg_ordinal INTEGER, 
	detail TEXT NOT NULL, 
	CONSTRAINT pk_findings PRIMARY KEY (run_pk, seq), 
	CONSTRAINT fk_findings_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE goal_cycles (
	run_pk INTEGER NOT NULL, 
	first_run_id TEXT NOT NULL, 
	cycle INTEGER, 
	max_cycles INTEGER, 
	text TEXT, 
	assessed BOOLEAN NOT NULL, 
	goal_met BOOLEAN, 
	remaining TEXT, 
	evidence TEXT, 
	assess_cost_nano_usd BIGINT, 
	CONSTRAINT pk_goal_cycles PRIMARY KEY (run_pk), 
	CONSTRAINT fk_goal_cycles_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE legs (
	run_pk INTEGER NOT NULL, 
	ordinal INTEGER NOT NULL, 
	phase TEXT NOT NULL, 
	kind TEXT NOT NULL, 
	started_at TEXT, 
	started_at_us BIGINT, 
	finished_at TEXT, 
	outcome TEXT, 
	detail TEXT, 
	is_open BOOLEAN NOT NULL, 
	closed_by TEXT, 
	session_limited BOOLEAN NOT NULL, 
	start_line INTEGER, 
	end_line INTEGER, 
	CONSTRAINT pk_legs PRIMARY KEY (run_pk, ordinal), 
	CONSTRAINT fk_legs_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE nodes (
	run_pk INTEGER NOT NULL, 
	node_id TEXT NOT NULL, 
	node_type TEXT, 
	in_graph BOOLEAN NOT NULL, 
	verdict TEXT, 
	verdict_source TEXT, 
	state TEXT NOT NULL, 
	retries INTEGER, 
	round INTEGER, 
	provenance TEXT, 
	judged BOOLEAN, 
	budget_nano_usd BIGINT, 
	duration_ns BIGINT, 
	session_id TEXT, 
	detail TEXT, 
	artifact_name TEXT NOT NULL, 
	artifact_path TEXT, 
	has_artifact BOOLEAN NOT NULL, 
	has_failed_output BOOLEAN NOT NULL, 
	budget_overrun BOOLEAN NOT NULL, 
	last_leg INTEGER, 
	cost_nano_usd BIGINT NOT NULL, 
	invocations INTEGER NOT NULL, 
	unknown_cost_invocations INTEGER NOT NULL, 
	unrecorded_attempts INTEGER NOT NULL, 
	snapshot_verdict TEXT, 
	snapshot_round INTEGER, 
	snapshot_cost_nano_usd BIGINT, 
	snapshot_cost_unknown BOOLEAN, 
	CONSTRAINT pk_nodes PRIMARY KEY (run_pk, node_id), 
	CONSTRAINT fk_nodes_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE rounds (
	run_pk INTEGER NOT NULL, 
	leg_ordinal INTEGER NOT NULL, 
	node_id TEXT NOT NULL, 
	seq INTEGER NOT NULL, 
	round INTEGER NOT NULL, 
	started_at TEXT, 
	ended_at TEXT, 
	outcome TEXT, 
	retries INTEGER NOT NULL, 
	session_id TEXT, 
	provenance TEXT, 
	detail TEXT, 
	cost_nano_usd BIGINT, 
	cost_unknown BOOLEAN NOT NULL, 
	start_line INTEGER, 
	end_line INTEGER, 
	CONSTRAINT pk_rounds PRIMARY KEY (run_pk, leg_ordinal, node_id, seq), 
	CONSTRAINT fk_rounds_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE snapshot_files (
	run_pk INTEGER NOT NULL, 
	name TEXT NOT NULL, 
	dev BIGINT, 
	inode BIGINT, 
	size BIGINT, 
	mtime_ns BIGINT, 
	sha256 TEXT, 
	content TEXT, 
	error TEXT, ctime_ns BIGINT, 
	CONSTRAINT pk_snapshot_files PRIMARY KEY (run_pk, name), 
	CONSTRAINT fk_snapshot_files_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE streams (
	id INTEGER NOT NULL, 
	kind TEXT NOT NULL, 
	source TEXT NOT NULL, 
	path TEXT NOT NULL, 
	run_pk INTEGER, 
	dev BIGINT, 
	inode BIGINT, 
	size BIGINT, 
	mtime_ns BIGINT, 
	ctime_ns BIGINT, 
	end_offset BIGINT NOT NULL, 
	next_line INTEGER NOT NULL, 
	head_len INTEGER NOT NULL, 
	head_sha256 TEXT, 
	tail_len INTEGER NOT NULL, 
	tail_sha256 TEXT, 
	scan_offset BIGINT, 
	scan_line INTEGER, 
	paused_schema INTEGER, 
	paused_reason TEXT, 
	derivation_version INTEGER NOT NULL, 
	CONSTRAINT pk_streams PRIMARY KEY (id), 
	CONSTRAINT fk_streams_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE, 
	CONSTRAINT uq_streams_kind_source_path UNIQUE (kind, source, path), 
	CONSTRAINT uq_streams_run_pk UNIQUE (run_pk)
)
;
CREATE TABLE "invocation_lines" (
	file_pk INTEGER NOT NULL, 
	line_no INTEGER NOT NULL, 
	byte_offset BIGINT NOT NULL, 
	ts TEXT NOT NULL, 
	ts_us BIGINT NOT NULL, 
	event TEXT NOT NULL, 
	role TEXT, 
	milestone TEXT, 
	status TEXT, 
	duration_ms BIGINT, 
	raw TEXT NOT NULL, 
	CONSTRAINT pk_invocation_lines PRIMARY KEY (file_pk, line_no), 
	CONSTRAINT fk_invocation_lines_file_pk_streams FOREIGN KEY(file_pk) REFERENCES streams (id) ON DELETE CASCADE
)
;
CREATE TABLE "invocations" (
	file_pk INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	role TEXT, 
	milestone TEXT, 
	started_at TEXT, 
	started_at_us BIGINT, 
	ended_at TEXT, 
	ended_at_us BIGINT, 
	status TEXT, 
	duration_ms BIGINT, 
	duration_source TEXT, 
	outcome TEXT NOT NULL, 
	start_line INTEGER, 
	end_line INTEGER, 
	CONSTRAINT pk_invocations PRIMARY KEY (file_pk, seq), 
	CONSTRAINT fk_invocations_file_pk_streams FOREIGN KEY(file_pk) REFERENCES streams (id) ON DELETE CASCADE
)
;
CREATE TABLE "ingest_state" (
	run_pk INTEGER NOT NULL, 
	dir_mtime_ns BIGINT, 
	failed_dir_mtime_ns BIGINT, dir_ctime_ns BIGINT, failed_dir_ctime_ns BIGINT, 
	CONSTRAINT pk_ingest_state PRIMARY KEY (run_pk), 
	CONSTRAINT fk_ingest_state_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE run_files (
	run_pk INTEGER NOT NULL, 
	place TEXT NOT NULL, 
	name TEXT NOT NULL, 
	CONSTRAINT pk_run_files PRIMARY KEY (run_pk, place, name), 
	CONSTRAINT fk_run_files_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE derive_states (
	run_pk INTEGER NOT NULL, 
	derivation_version INTEGER NOT NULL, 
	line_no BIGINT NOT NULL, 
	state TEXT NOT NULL, 
	CONSTRAINT pk_derive_states PRIMARY KEY (run_pk), 
	CONSTRAINT fk_derive_states_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE CASCADE
)
;
CREATE TABLE "problems" (
	id INTEGER NOT NULL, 
	run_pk INTEGER, 
	path TEXT NOT NULL, 
	byte_offset BIGINT NOT NULL, 
	reason TEXT NOT NULL, 
	first_seen_at TEXT NOT NULL, 
	last_seen_at TEXT NOT NULL, 
	resolved_at TEXT, 
	machine TEXT DEFAULT ('') NOT NULL, 
	CONSTRAINT pk_problems PRIMARY KEY (id), 
	CONSTRAINT fk_problems_run_pk_runs FOREIGN KEY(run_pk) REFERENCES runs (id) ON DELETE SET NULL, 
	CONSTRAINT uq_problems_machine_path_byte_offset_reason UNIQUE (machine, path, byte_offset, reason)
)
;
CREATE INDEX ix_charges_at_us ON charges (at_us)
;
CREATE INDEX ix_charges_cost_unknown ON charges (run_pk) WHERE cost_unknown
;
CREATE INDEX ix_goal_cycles_first_run_id ON goal_cycles (first_run_id)
;
CREATE INDEX ix_invocations_outcome ON invocations (outcome)
;
CREATE INDEX ix_invocations_started_at_us ON invocations (started_at_us)
;
CREATE INDEX ix_nodes_budget_overrun ON nodes (run_pk) WHERE budget_overrun OR (budget_nano_usd IS NOT NULL AND cost_nano_usd > budget_nano_usd)
;
CREATE INDEX ix_nodes_verdict ON nodes (verdict, run_pk, provenance)
;
CREATE INDEX ix_runs_derivation_version ON runs (derivation_version)
;
CREATE INDEX ix_runs_first_event_at_us ON runs (first_event_at_us)
;
CREATE INDEX ix_runs_last_leg_open ON runs (last_leg_open)
;
CREATE INDEX ix_runs_stream_identity ON runs (stream_identity)
;
CREATE INDEX ix_snapshot_files_identity ON snapshot_files (run_pk, name, dev, inode, size, mtime_ns, ctime_ns, sha256)
;
CREATE VIEW v_invocations AS
SELECT
    s.path AS path,
    s.source AS source,
    i.seq AS seq,
    i.role AS role,
    i.milestone AS milestone,
    i.outcome AS outcome,
    i.status AS status,
    CASE
        WHEN i.status IS NULL THEN NULL
        WHEN i.status IN ('ACCEPT', 'DONE', 'GO', 'OBSERVED', 'READY', 'SUCCESS') THEN 'success'
        WHEN i.status IN ('BLOCKED', 'NEEDS_CONFIRMATION', 'NEEDS_DEEP', 'NO-GO') THEN 'judged'
        ELSE 'failure'
    END AS status_class,
    i.started_at AS started_at,
    i.started_at_us AS started_at_us,
    i.ended_at AS ended_at,
    i.ended_at_us AS ended_at_us,
    COALESCE(i.started_at_us, i.ended_at_us) AS at_us,
    i.duration_ms AS duration_ms,
    i.duration_source AS duration_source,
    i.start_line AS start_line,
    i.end_line AS end_line
FROM invocations i
JOIN streams s ON s.id = i.file_pk
;
CREATE VIEW v_charges AS SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.runtime,
       c.seq, c.kind, c.leg_ordinal AS leg, c.leg_kind, c.node_id AS node, c.round,
       c.at, c.at_us,
       c.cost_nano_usd, CAST(c.cost_nano_usd AS DOUBLE PRECISION) / CAST(1000000000 AS DOUBLE PRECISION) AS cost_usd, c.cost_unknown,
       c.input_tokens, c.cached_input_tokens, c.output_tokens, c.reasoning_output_tokens,
       c.source_file, c.source_line
FROM charges c
JOIN runs r ON r.id = c.run_pk
JOIN homes h ON h.id = r.home_id
WHERE r.billed
;
CREATE VIEW v_runs AS SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.graph_version, r.runtime,
       CASE
         WHEN r.stream_paused THEN 'NOT-KNOWN-YET'
         WHEN NOT r.any_leg AND r.snapshot_schema IS NULL AND NOT r.has_state THEN 'NOT-KNOWN-YET'
         WHEN r.last_leg_open THEN 'OPEN'
         WHEN r.last_outcome = 'paused' THEN 'PAUSED'
         WHEN r.snapshot_schema IS NOT NULL AND r.all_nodes_passed THEN 'PASS'
         WHEN r.snapshot_schema IS NULL AND r.has_state AND r.last_outcome = 'passed' THEN 'PASS'
         ELSE 'FAIL'
       END AS ledger_state,
       r.first_event_at AS started_at, r.first_event_at_us AS started_at_us,
       r.last_event_at, r.last_event_at_us,
       r.leg_count AS legs, r.node_count AS nodes_total, r.nodes_passed,
       r.cost_nano_usd, CAST(r.cost_nano_usd AS DOUBLE PRECISION) / CAST(1000000000 AS DOUBLE PRECISION) AS cost_usd,
       r.invocations, r.unknown_cost_invocations,
       CASE WHEN r.unknown_cost_invocations > 0 THEN 1 ELSE 0 END AS cost_is_lower_bound,
       r.unrecorded_attempts,
       r.input_tokens, r.cached_input_tokens, r.output_tokens, r.reasoning_output_tokens,
       r.goal_first_run_id, r.goal_cycle, r.goal_max_cycles, r.goal_text,
       r.build_evidence_answer, r.build_evidence_declared_by,
       r.gate_paused_at, r.last_outcome, r.last_detail,
       r.snapshot_cost_nano_usd AS engine_snapshot_cost_nano_usd,
       r.gone, r.dir_path
FROM runs r
JOIN homes h ON h.id = r.home_id
WHERE r.billed
;
CREATE VIEW v_node_rounds AS SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.runtime,
       x.leg_ordinal AS leg, l.kind AS leg_kind, x.node_id AS node, x.seq, x.round,
       x.outcome, x.retries, x.provenance, x.started_at, x.ended_at,
       x.cost_nano_usd, CAST(x.cost_nano_usd AS DOUBLE PRECISION) / CAST(1000000000 AS DOUBLE PRECISION) AS cost_usd, x.cost_unknown,
       x.session_id, x.detail
FROM rounds x
JOIN runs r ON r.id = x.run_pk
JOIN homes h ON h.id = r.home_id
LEFT JOIN legs l ON l.run_pk = x.run_pk AND l.ordinal = x.leg_ordinal
WHERE r.billed
;
CREATE VIEW v_nodes AS SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.runtime,
       n.node_id AS node, n.node_type, n.in_graph, n.verdict, n.verdict_source, n.state,
       n.provenance, n.judged, n.round, n.retries,
       n.cost_nano_usd, CAST(n.cost_nano_usd AS DOUBLE PRECISION) / CAST(1000000000 AS DOUBLE PRECISION) AS cost_usd,
       n.invocations, n.unknown_cost_invocations, n.unrecorded_attempts,
       n.budget_nano_usd, CAST(n.budget_nano_usd AS DOUBLE PRECISION) / CAST(1000000000 AS DOUBLE PRECISION) AS budget_usd,
       CASE WHEN n.budget_nano_usd IS NOT NULL AND n.cost_nano_usd > n.budget_nano_usd
            THEN 1 ELSE 0 END AS over_budget,
       n.budget_overrun, n.has_artifact, n.has_failed_output, n.detail
FROM nodes n
JOIN runs r ON r.id = n.run_pk
JOIN homes h ON h.id = r.home_id
WHERE r.billed
;
CREATE VIEW v_problems AS SELECT h.label AS home, r.run_id, p.path, p.byte_offset, p.reason, p.first_seen_at, p.last_seen_at,
       p.resolved_at, p.machine
FROM problems p
LEFT JOIN runs r ON r.id = p.run_pk
LEFT JOIN homes h ON h.id = r.home_id
;
CREATE VIEW v_findings AS SELECT h.label AS home, r.run_id, r.graph_name AS graph, f.seq, f.kind, f.node_id AS node,
       f.leg_ordinal AS leg, f.detail
FROM findings f
JOIN runs r ON r.id = f.run_pk
JOIN homes h ON h.id = r.home_id
;
