-- omg-ledger's PostgreSQL schema at revision 0017, as the migrations build it (make head-schema)
CREATE TABLE alembic_version (
    version_num character varying(32) NOT NULL
)
;
CREATE TABLE charges (
    run_pk integer NOT NULL,
    seq integer NOT NULL,
    leg_ordinal integer,
    leg_kind text COLLATE pg_catalog."C",
    node_id text COLLATE pg_catalog."C",
    round integer,
    kind text NOT NULL COLLATE pg_catalog."C",
    at text COLLATE pg_catalog."C",
    at_us bigint,
    cost_nano_usd bigint,
    cost_unknown boolean NOT NULL,
    input_tokens bigint NOT NULL,
    cached_input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    reasoning_output_tokens bigint NOT NULL,
    source_file text NOT NULL COLLATE pg_catalog."C",
    source_offset bigint,
    source_line integer
)
;
CREATE TABLE derive_states (
    run_pk integer NOT NULL,
    derivation_version integer NOT NULL,
    line_no bigint NOT NULL,
    state text NOT NULL COLLATE pg_catalog."C"
)
;
CREATE TABLE events (
    run_pk integer NOT NULL,
    line_no integer NOT NULL,
    byte_offset bigint NOT NULL,
    schema integer,
    ts text COLLATE pg_catalog."C",
    event text COLLATE pg_catalog."C",
    node_id text COLLATE pg_catalog."C",
    raw text NOT NULL COLLATE pg_catalog."C"
)
;
CREATE TABLE findings (
    run_pk integer NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL COLLATE pg_catalog."C",
    node_id text COLLATE pg_catalog."C",
    leg_ordinal integer,
    detail text NOT NULL COLLATE pg_catalog."C"
)
;
CREATE TABLE goal_cycles (
    run_pk integer NOT NULL,
    first_run_id text NOT NULL COLLATE pg_catalog."C",
    cycle integer,
    max_cycles integer,
    text text COLLATE pg_catalog."C",
    assessed boolean NOT NULL,
    goal_met boolean,
    remaining text COLLATE pg_catalog."C",
    evidence text COLLATE pg_catalog."C",
    assess_cost_nano_usd bigint
)
;
CREATE TABLE homes (
    id integer NOT NULL,
    label text NOT NULL COLLATE pg_catalog."C",
    path text NOT NULL COLLATE pg_catalog."C",
    machine text COLLATE pg_catalog."C",
    dev bigint,
    inode bigint,
    real_path text COLLATE pg_catalog."C",
    last_synced_at text COLLATE pg_catalog."C"
)
;
CREATE SEQUENCE homes_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE homes_id_seq OWNED BY homes.id
;
CREATE TABLE ingest_state (
    run_pk integer NOT NULL,
    dir_mtime_ns bigint,
    failed_dir_mtime_ns bigint,
    dir_ctime_ns bigint,
    failed_dir_ctime_ns bigint
)
;
CREATE TABLE invocation_lines (
    file_pk integer NOT NULL,
    line_no integer NOT NULL,
    byte_offset bigint NOT NULL,
    ts text NOT NULL COLLATE pg_catalog."C",
    ts_us bigint NOT NULL,
    event text NOT NULL COLLATE pg_catalog."C",
    role text COLLATE pg_catalog."C",
    milestone text COLLATE pg_catalog."C",
    status text COLLATE pg_catalog."C",
    duration_ms bigint,
    raw text NOT NULL COLLATE pg_catalog."C"
)
;
CREATE TABLE invocations (
    file_pk integer NOT NULL,
    seq integer NOT NULL,
    role text COLLATE pg_catalog."C",
    milestone text COLLATE pg_catalog."C",
    started_at text COLLATE pg_catalog."C",
    started_at_us bigint,
    ended_at text COLLATE pg_catalog."C",
    ended_at_us bigint,
    status text COLLATE pg_catalog."C",
    duration_ms bigint,
    duration_source text COLLATE pg_catalog."C",
    outcome text NOT NULL COLLATE pg_catalog."C",
    start_line integer,
    end_line integer
)
;
CREATE TABLE legs (
    run_pk integer NOT NULL,
    ordinal integer NOT NULL,
    phase text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    started_at text COLLATE pg_catalog."C",
    started_at_us bigint,
    finished_at text COLLATE pg_catalog."C",
    outcome text COLLATE pg_catalog."C",
    detail text COLLATE pg_catalog."C",
    is_open boolean NOT NULL,
    closed_by text COLLATE pg_catalog."C",
    session_limited boolean NOT NULL,
    start_line integer,
    end_line integer
)
;
CREATE TABLE nodes (
    run_pk integer NOT NULL,
    node_id text NOT NULL COLLATE pg_catalog."C",
    node_type text COLLATE pg_catalog."C",
    in_graph boolean NOT NULL,
    verdict text COLLATE pg_catalog."C",
    verdict_source text COLLATE pg_catalog."C",
    state text NOT NULL COLLATE pg_catalog."C",
    retries integer,
    round integer,
    provenance text COLLATE pg_catalog."C",
    judged boolean,
    budget_nano_usd bigint,
    duration_ns bigint,
    session_id text COLLATE pg_catalog."C",
    detail text COLLATE pg_catalog."C",
    artifact_name text NOT NULL COLLATE pg_catalog."C",
    artifact_path text COLLATE pg_catalog."C",
    has_artifact boolean NOT NULL,
    has_failed_output boolean NOT NULL,
    budget_overrun boolean NOT NULL,
    last_leg integer,
    cost_nano_usd bigint NOT NULL,
    invocations integer NOT NULL,
    unknown_cost_invocations integer NOT NULL,
    unrecorded_attempts integer NOT NULL,
    snapshot_verdict text COLLATE pg_catalog."C",
    snapshot_round integer,
    snapshot_cost_nano_usd bigint,
    snapshot_cost_unknown boolean
)
;
CREATE TABLE plans (
    home_id integer NOT NULL,
    plan_id text NOT NULL COLLATE pg_catalog."C",
    has_graph_json boolean NOT NULL,
    has_rejected boolean NOT NULL,
    graph_name text COLLATE pg_catalog."C",
    gone boolean NOT NULL
)
;
CREATE TABLE problems (
    id integer NOT NULL,
    run_pk integer,
    path text NOT NULL COLLATE pg_catalog."C",
    byte_offset bigint NOT NULL,
    reason text NOT NULL COLLATE pg_catalog."C",
    first_seen_at text NOT NULL COLLATE pg_catalog."C",
    last_seen_at text NOT NULL COLLATE pg_catalog."C",
    resolved_at text COLLATE pg_catalog."C",
    machine text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C"
)
;
CREATE SEQUENCE problems_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE problems_id_seq OWNED BY problems.id
;
CREATE TABLE rounds (
    run_pk integer NOT NULL,
    leg_ordinal integer NOT NULL,
    node_id text NOT NULL COLLATE pg_catalog."C",
    seq integer NOT NULL,
    round integer NOT NULL,
    started_at text COLLATE pg_catalog."C",
    ended_at text COLLATE pg_catalog."C",
    outcome text COLLATE pg_catalog."C",
    retries integer NOT NULL,
    session_id text COLLATE pg_catalog."C",
    provenance text COLLATE pg_catalog."C",
    detail text COLLATE pg_catalog."C",
    cost_nano_usd bigint,
    cost_unknown boolean NOT NULL,
    start_line integer,
    end_line integer
)
;
CREATE TABLE run_files (
    run_pk integer NOT NULL,
    place text NOT NULL COLLATE pg_catalog."C",
    name text NOT NULL COLLATE pg_catalog."C"
)
;
CREATE TABLE runs (
    id integer NOT NULL,
    home_id integer NOT NULL,
    run_id text NOT NULL COLLATE pg_catalog."C",
    dir_path text NOT NULL COLLATE pg_catalog."C",
    gone boolean NOT NULL,
    has_events boolean NOT NULL,
    has_state boolean NOT NULL,
    has_graph_json boolean NOT NULL,
    has_rejected boolean NOT NULL,
    has_assess boolean NOT NULL,
    has_lock boolean NOT NULL,
    snapshot_schema integer,
    runtime text COLLATE pg_catalog."C",
    graph_name text COLLATE pg_catalog."C",
    graph_version text COLLATE pg_catalog."C",
    node_count integer,
    graph_source_path text COLLATE pg_catalog."C",
    graph_sha256 text COLLATE pg_catalog."C",
    inputs_json text COLLATE pg_catalog."C",
    continue_on_fail boolean,
    goal_text text COLLATE pg_catalog."C",
    goal_cycle integer,
    goal_max_cycles integer,
    goal_first_run_id text COLLATE pg_catalog."C",
    build_evidence_answer text COLLATE pg_catalog."C",
    build_evidence_declared_by text COLLATE pg_catalog."C",
    build_evidence_signals_json text COLLATE pg_catalog."C",
    gate_paused_at text COLLATE pg_catalog."C",
    gate_decisions_json text COLLATE pg_catalog."C",
    planning_cost_nano_usd bigint,
    planning_cost_unknown boolean,
    snapshot_cost_nano_usd bigint,
    snapshot_cost_unknown boolean,
    nodes_passed integer,
    all_nodes_passed boolean,
    event_count integer NOT NULL,
    first_event_at text COLLATE pg_catalog."C",
    first_event_at_us bigint,
    last_event_at text COLLATE pg_catalog."C",
    last_event_at_us bigint,
    leg_count integer NOT NULL,
    any_leg boolean NOT NULL,
    last_leg_open boolean NOT NULL,
    last_leg_phase text COLLATE pg_catalog."C",
    last_outcome text COLLATE pg_catalog."C",
    last_detail text COLLATE pg_catalog."C",
    stream_paused boolean NOT NULL,
    cost_nano_usd bigint NOT NULL,
    invocations integer NOT NULL,
    unknown_cost_invocations integer NOT NULL,
    unrecorded_attempts integer NOT NULL,
    input_tokens bigint NOT NULL,
    cached_input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    reasoning_output_tokens bigint NOT NULL,
    derivation_version integer DEFAULT 0 NOT NULL,
    stream_identity text COLLATE pg_catalog."C",
    billed boolean DEFAULT true NOT NULL,
    passes integer DEFAULT 0 NOT NULL,
    passes_verified integer DEFAULT 0 NOT NULL,
    passes_approved integer DEFAULT 0 NOT NULL,
    passes_self_reported integer DEFAULT 0 NOT NULL,
    passes_exit_only integer DEFAULT 0 NOT NULL,
    passes_unknown integer DEFAULT 0 NOT NULL
)
;
CREATE SEQUENCE runs_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE runs_id_seq OWNED BY runs.id
;
CREATE TABLE snapshot_files (
    run_pk integer NOT NULL,
    name text NOT NULL COLLATE pg_catalog."C",
    dev bigint,
    inode bigint,
    size bigint,
    mtime_ns bigint,
    sha256 text COLLATE pg_catalog."C",
    content text COLLATE pg_catalog."C",
    error text COLLATE pg_catalog."C",
    ctime_ns bigint
)
;
CREATE TABLE streams (
    id integer NOT NULL,
    kind text NOT NULL COLLATE pg_catalog."C",
    source text NOT NULL COLLATE pg_catalog."C",
    path text NOT NULL COLLATE pg_catalog."C",
    run_pk integer,
    dev bigint,
    inode bigint,
    size bigint,
    mtime_ns bigint,
    ctime_ns bigint,
    end_offset bigint NOT NULL,
    next_line integer NOT NULL,
    head_len integer NOT NULL,
    head_sha256 text COLLATE pg_catalog."C",
    tail_len integer NOT NULL,
    tail_sha256 text COLLATE pg_catalog."C",
    scan_offset bigint,
    scan_line integer,
    paused_schema integer,
    paused_reason text COLLATE pg_catalog."C",
    derivation_version integer NOT NULL
)
;
CREATE SEQUENCE streams_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE streams_id_seq OWNED BY streams.id
;
CREATE VIEW v_charges AS
 SELECT h.label AS home,
    r.run_id,
    r.graph_name AS graph,
    r.runtime,
    c.seq,
    c.kind,
    c.leg_ordinal AS leg,
    c.leg_kind,
    c.node_id AS node,
    c.round,
    c.at,
    c.at_us,
    c.cost_nano_usd,
    ((c.cost_nano_usd)::double precision / (1000000000)::double precision) AS cost_usd,
    c.cost_unknown,
    c.input_tokens,
    c.cached_input_tokens,
    c.output_tokens,
    c.reasoning_output_tokens,
    c.source_file,
    c.source_line
   FROM ((charges c
     JOIN runs r ON ((r.id = c.run_pk)))
     JOIN homes h ON ((h.id = r.home_id)))
  WHERE r.billed
;
CREATE VIEW v_findings AS
 SELECT h.label AS home,
    r.run_id,
    r.graph_name AS graph,
    f.seq,
    f.kind,
    f.node_id AS node,
    f.leg_ordinal AS leg,
    f.detail
   FROM ((findings f
     JOIN runs r ON ((r.id = f.run_pk)))
     JOIN homes h ON ((h.id = r.home_id)))
;
CREATE VIEW v_invocations AS
 SELECT s.path,
    s.source,
    i.seq,
    i.role,
    i.milestone,
    i.outcome,
    i.status,
        CASE
            WHEN (i.status IS NULL) THEN NULL::text
            WHEN (i.status = ANY (ARRAY['ACCEPT'::text, 'DONE'::text, 'GO'::text, 'OBSERVED'::text, 'READY'::text, 'SUCCESS'::text])) THEN 'success'::text
            WHEN (i.status = ANY (ARRAY['BLOCKED'::text, 'NEEDS_CONFIRMATION'::text, 'NEEDS_DEEP'::text, 'NO-GO'::text])) THEN 'judged'::text
            ELSE 'failure'::text
        END AS status_class,
    i.started_at,
    i.started_at_us,
    i.ended_at,
    i.ended_at_us,
    COALESCE(i.started_at_us, i.ended_at_us) AS at_us,
    i.duration_ms,
    i.duration_source,
    i.start_line,
    i.end_line
   FROM (invocations i
     JOIN streams s ON ((s.id = i.file_pk)))
;
CREATE VIEW v_node_rounds AS
 SELECT h.label AS home,
    r.run_id,
    r.graph_name AS graph,
    r.runtime,
    x.leg_ordinal AS leg,
    l.kind AS leg_kind,
    x.node_id AS node,
    x.seq,
    x.round,
    x.outcome,
    x.retries,
    x.provenance,
    x.started_at,
    x.ended_at,
    x.cost_nano_usd,
    ((x.cost_nano_usd)::double precision / (1000000000)::double precision) AS cost_usd,
    x.cost_unknown,
    x.session_id,
    x.detail
   FROM (((rounds x
     JOIN runs r ON ((r.id = x.run_pk)))
     JOIN homes h ON ((h.id = r.home_id)))
     LEFT JOIN legs l ON (((l.run_pk = x.run_pk) AND (l.ordinal = x.leg_ordinal))))
  WHERE r.billed
;
CREATE VIEW v_nodes AS
 SELECT h.label AS home,
    r.run_id,
    r.graph_name AS graph,
    r.runtime,
    n.node_id AS node,
    n.node_type,
    n.in_graph,
    n.verdict,
    n.verdict_source,
    n.state,
    n.provenance,
    n.judged,
    n.round,
    n.retries,
    n.cost_nano_usd,
    ((n.cost_nano_usd)::double precision / (1000000000)::double precision) AS cost_usd,
    n.invocations,
    n.unknown_cost_invocations,
    n.unrecorded_attempts,
    n.budget_nano_usd,
    ((n.budget_nano_usd)::double precision / (1000000000)::double precision) AS budget_usd,
        CASE
            WHEN ((n.budget_nano_usd IS NOT NULL) AND (n.cost_nano_usd > n.budget_nano_usd)) THEN 1
            ELSE 0
        END AS over_budget,
    n.budget_overrun,
    n.has_artifact,
    n.has_failed_output,
    n.detail
   FROM ((nodes n
     JOIN runs r ON ((r.id = n.run_pk)))
     JOIN homes h ON ((h.id = r.home_id)))
  WHERE r.billed
;
CREATE VIEW v_problems AS
 SELECT h.label AS home,
    r.run_id,
    p.path,
    p.byte_offset,
    p.reason,
    p.first_seen_at,
    p.last_seen_at,
    p.resolved_at,
    p.machine
   FROM ((problems p
     LEFT JOIN runs r ON ((r.id = p.run_pk)))
     LEFT JOIN homes h ON ((h.id = r.home_id)))
;
CREATE VIEW v_runs AS
 SELECT h.label AS home,
    r.run_id,
    r.graph_name AS graph,
    r.graph_version,
    r.runtime,
        CASE
            WHEN r.stream_paused THEN 'NOT-KNOWN-YET'::text
            WHEN ((NOT r.any_leg) AND (r.snapshot_schema IS NULL) AND (NOT r.has_state)) THEN 'NOT-KNOWN-YET'::text
            WHEN r.last_leg_open THEN 'OPEN'::text
            WHEN (r.last_outcome = 'paused'::text) THEN 'PAUSED'::text
            WHEN ((r.snapshot_schema IS NOT NULL) AND r.all_nodes_passed) THEN 'PASS'::text
            WHEN ((r.snapshot_schema IS NULL) AND r.has_state AND (r.last_outcome = 'passed'::text)) THEN 'PASS'::text
            ELSE 'FAIL'::text
        END AS ledger_state,
    r.first_event_at AS started_at,
    r.first_event_at_us AS started_at_us,
    r.last_event_at,
    r.last_event_at_us,
    r.leg_count AS legs,
    r.node_count AS nodes_total,
    r.nodes_passed,
    r.cost_nano_usd,
    ((r.cost_nano_usd)::double precision / (1000000000)::double precision) AS cost_usd,
    r.invocations,
    r.unknown_cost_invocations,
        CASE
            WHEN (r.unknown_cost_invocations > 0) THEN 1
            ELSE 0
        END AS cost_is_lower_bound,
    r.unrecorded_attempts,
    r.input_tokens,
    r.cached_input_tokens,
    r.output_tokens,
    r.reasoning_output_tokens,
    r.goal_first_run_id,
    r.goal_cycle,
    r.goal_max_cycles,
    r.goal_text,
    r.build_evidence_answer,
    r.build_evidence_declared_by,
    r.gate_paused_at,
    r.last_outcome,
    r.last_detail,
    r.snapshot_cost_nano_usd AS engine_snapshot_cost_nano_usd,
    r.gone,
    r.dir_path
   FROM (runs r
     JOIN homes h ON ((h.id = r.home_id)))
  WHERE r.billed
;
ALTER TABLE ONLY homes ALTER COLUMN id SET DEFAULT nextval('homes_id_seq'::regclass)
;
ALTER TABLE ONLY problems ALTER COLUMN id SET DEFAULT nextval('problems_id_seq'::regclass)
;
ALTER TABLE ONLY runs ALTER COLUMN id SET DEFAULT nextval('runs_id_seq'::regclass)
;
ALTER TABLE ONLY streams ALTER COLUMN id SET DEFAULT nextval('streams_id_seq'::regclass)
;
ALTER TABLE ONLY alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
;
ALTER TABLE ONLY charges
    ADD CONSTRAINT pk_charges PRIMARY KEY (run_pk, seq)
;
ALTER TABLE ONLY derive_states
    ADD CONSTRAINT pk_derive_states PRIMARY KEY (run_pk)
;
ALTER TABLE ONLY events
    ADD CONSTRAINT pk_events PRIMARY KEY (run_pk, line_no)
;
ALTER TABLE ONLY findings
    ADD CONSTRAINT pk_findings PRIMARY KEY (run_pk, seq)
;
ALTER TABLE ONLY goal_cycles
    ADD CONSTRAINT pk_goal_cycles PRIMARY KEY (run_pk)
;
ALTER TABLE ONLY homes
    ADD CONSTRAINT pk_homes PRIMARY KEY (id)
;
ALTER TABLE ONLY ingest_state
    ADD CONSTRAINT pk_ingest_state PRIMARY KEY (run_pk)
;
ALTER TABLE ONLY invocation_lines
    ADD CONSTRAINT pk_invocation_lines PRIMARY KEY (file_pk, line_no)
;
ALTER TABLE ONLY invocations
    ADD CONSTRAINT pk_invocations PRIMARY KEY (file_pk, seq)
;
ALTER TABLE ONLY legs
    ADD CONSTRAINT pk_legs PRIMARY KEY (run_pk, ordinal)
;
ALTER TABLE ONLY nodes
    ADD CONSTRAINT pk_nodes PRIMARY KEY (run_pk, node_id)
;
ALTER TABLE ONLY plans
    ADD CONSTRAINT pk_plans PRIMARY KEY (home_id, plan_id)
;
ALTER TABLE ONLY problems
    ADD CONSTRAINT pk_problems PRIMARY KEY (id)
;
ALTER TABLE ONLY rounds
    ADD CONSTRAINT pk_rounds PRIMARY KEY (run_pk, leg_ordinal, node_id, seq)
;
ALTER TABLE ONLY run_files
    ADD CONSTRAINT pk_run_files PRIMARY KEY (run_pk, place, name)
;
ALTER TABLE ONLY runs
    ADD CONSTRAINT pk_runs PRIMARY KEY (id)
;
ALTER TABLE ONLY snapshot_files
    ADD CONSTRAINT pk_snapshot_files PRIMARY KEY (run_pk, name)
;
ALTER TABLE ONLY streams
    ADD CONSTRAINT pk_streams PRIMARY KEY (id)
;
ALTER TABLE ONLY homes
    ADD CONSTRAINT uq_homes_label UNIQUE (label)
;
ALTER TABLE ONLY problems
    ADD CONSTRAINT uq_problems_machine_path_byte_offset_reason UNIQUE (machine, path, byte_offset, reason)
;
ALTER TABLE ONLY runs
    ADD CONSTRAINT uq_runs_home_id_run_id UNIQUE (home_id, run_id)
;
ALTER TABLE ONLY streams
    ADD CONSTRAINT uq_streams_kind_source_path UNIQUE (kind, source, path)
;
ALTER TABLE ONLY streams
    ADD CONSTRAINT uq_streams_run_pk UNIQUE (run_pk)
;
CREATE INDEX ix_charges_at_us ON charges USING btree (at_us)
;
CREATE INDEX ix_charges_cost_unknown ON charges USING btree (run_pk) WHERE cost_unknown
;
CREATE INDEX ix_goal_cycles_first_run_id ON goal_cycles USING btree (first_run_id)
;
CREATE INDEX ix_invocations_outcome ON invocations USING btree (outcome)
;
CREATE INDEX ix_invocations_started_at_us ON invocations USING btree (started_at_us)
;
CREATE INDEX ix_nodes_budget_overrun ON nodes USING btree (run_pk) WHERE (budget_overrun OR ((budget_nano_usd IS NOT NULL) AND (cost_nano_usd > budget_nano_usd)))
;
CREATE INDEX ix_nodes_verdict ON nodes USING btree (verdict, run_pk, provenance)
;
CREATE INDEX ix_runs_derivation_version ON runs USING btree (derivation_version)
;
CREATE INDEX ix_runs_first_event_at_us ON runs USING btree (first_event_at_us)
;
CREATE INDEX ix_runs_last_leg_open ON runs USING btree (last_leg_open)
;
CREATE INDEX ix_runs_stream_identity ON runs USING btree (stream_identity)
;
CREATE INDEX ix_snapshot_files_identity ON snapshot_files USING btree (run_pk, name, dev, inode, size, mtime_ns, ctime_ns, sha256)
;
ALTER TABLE ONLY charges
    ADD CONSTRAINT fk_charges_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY derive_states
    ADD CONSTRAINT fk_derive_states_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY events
    ADD CONSTRAINT fk_events_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY findings
    ADD CONSTRAINT fk_findings_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY goal_cycles
    ADD CONSTRAINT fk_goal_cycles_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY ingest_state
    ADD CONSTRAINT fk_ingest_state_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY invocation_lines
    ADD CONSTRAINT fk_invocation_lines_file_pk_streams FOREIGN KEY (file_pk) REFERENCES streams(id) ON DELETE CASCADE
;
ALTER TABLE ONLY invocations
    ADD CONSTRAINT fk_invocations_file_pk_streams FOREIGN KEY (file_pk) REFERENCES streams(id) ON DELETE CASCADE
;
ALTER TABLE ONLY legs
    ADD CONSTRAINT fk_legs_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY nodes
    ADD CONSTRAINT fk_nodes_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY plans
    ADD CONSTRAINT fk_plans_home_id_homes FOREIGN KEY (home_id) REFERENCES homes(id) ON DELETE CASCADE
;
ALTER TABLE ONLY problems
    ADD CONSTRAINT fk_problems_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE SET NULL
;
ALTER TABLE ONLY rounds
    ADD CONSTRAINT fk_rounds_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY run_files
    ADD CONSTRAINT fk_run_files_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY runs
    ADD CONSTRAINT fk_runs_home_id_homes FOREIGN KEY (home_id) REFERENCES homes(id) ON DELETE CASCADE
;
ALTER TABLE ONLY snapshot_files
    ADD CONSTRAINT fk_snapshot_files_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
ALTER TABLE ONLY streams
    ADD CONSTRAINT fk_streams_run_pk_runs FOREIGN KEY (run_pk) REFERENCES runs(id) ON DELETE CASCADE
;
