"""The notebook views: stable, documented names over the ledger's tables.

A notebook user reads these and never needs the stream's rules to get money right:
every paid invocation is one row of ``v_charges`` (planning, refused plans, feedback
rounds, earlier legs and assessments included, each exactly once), so
``SUM(cost_nano_usd)`` over it is the known spend and
``COUNT(*) - COUNT(cost_nano_usd)`` the invocations with no known price.

Conventions in every view:

* ``cost_nano_usd`` is exact integer nano-dollars; ``cost_usd`` the same as a float
  (``cost_nano_usd / 1e9``) for display. Of one invocation (``v_charges``) or one
  execution (``v_node_rounds``), NULL means *unknown*, never zero: sum
  ``cost_nano_usd`` for exact totals and count the NULLs beside them. A run's or a
  node's (``v_runs``, ``v_nodes``) is the known spend of its priced invocations, beside
  ``unknown_cost_invocations``: with any of those it is a lower bound (``v_runs.
  cost_is_lower_bound``), so a run of Codex calls alone reads 0 with its unknown count,
  never a known $0.
* ``home`` is the home label, ``run_id`` the engine's run id: together they are the key.
* Times are UTC text (``2026-11-29T18:15:18.132685Z``) and ``*_at_us`` epoch µs.
* Status is **not** here: it needs a live lock probe (``omg-ledger runs``).
  ``v_runs.ledger_state`` says only what the stored facts can (``OPEN`` = RUNNING,
  PLANNING or ABANDONED).

The SQL is portable (SQLite and PostgreSQL) and versioned: migration 0002 creates
``VIEWS_0002``; a later change adds a new constant and a migration that replaces
the views, so old migrations keep their meaning.

Note for future migrations: SQLite batch operations (copy table, drop, rename) fail
on a table a view reads from. Drop the views first and recreate them afterwards.
"""

from __future__ import annotations

_USD = "CAST({col} AS DOUBLE PRECISION) / CAST(1000000000 AS DOUBLE PRECISION)"


def usd(column: str) -> str:
    return _USD.format(col=column)


_TOKENS = "{p}.input_tokens, {p}.cached_input_tokens, {p}.output_tokens, {p}.reasoning_output_tokens"

VIEWS_0002: dict[str, tuple[str, str]] = {
    "v_charges": (
        "One row per paid invocation: node verdicts, feedback rounds, retries with "
        "accounting, plan commits, refused plans, assessments, recovered verdicts.",
        f"""
SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.runtime,
       c.seq, c.kind, c.leg_ordinal AS leg, c.leg_kind, c.node_id AS node, c.round,
       c.at, c.at_us,
       c.cost_nano_usd, {usd('c.cost_nano_usd')} AS cost_usd, c.cost_unknown,
       {_TOKENS.format(p='c')},
       c.source_file, c.source_line
FROM charges c
JOIN runs r ON r.id = c.run_pk
JOIN homes h ON h.id = r.home_id
""",
    ),
    "v_runs": (
        "One row per run ever seen (gone ones too), with its totals over every leg "
        "and the assessment.",
        f"""
SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.graph_version, r.runtime,
       CASE
         WHEN NOT r.any_leg AND r.snapshot_schema IS NULL THEN 'NOT-KNOWN-YET'
         WHEN r.last_leg_open THEN 'OPEN'
         WHEN r.last_outcome = 'paused' THEN 'PAUSED'
         WHEN r.snapshot_schema IS NOT NULL AND r.all_nodes_passed THEN 'PASS'
         ELSE 'FAIL'
       END AS ledger_state,
       r.first_event_at AS started_at, r.first_event_at_us AS started_at_us,
       r.last_event_at, r.last_event_at_us,
       r.leg_count AS legs, r.node_count AS nodes_total, r.nodes_passed,
       r.cost_nano_usd, {usd('r.cost_nano_usd')} AS cost_usd,
       r.invocations, r.unknown_cost_invocations,
       CASE WHEN r.unknown_cost_invocations > 0 THEN 1 ELSE 0 END AS cost_is_lower_bound,
       r.unrecorded_attempts,
       {_TOKENS.format(p='r')},
       r.goal_first_run_id, r.goal_cycle, r.goal_max_cycles, r.goal_text,
       r.build_evidence_answer, r.build_evidence_declared_by,
       r.gate_paused_at, r.last_outcome, r.last_detail,
       r.snapshot_cost_nano_usd AS engine_snapshot_cost_nano_usd,
       r.gone, r.dir_path
FROM runs r
JOIN homes h ON h.id = r.home_id
""",
    ),
    "v_node_rounds": (
        "One row per execution of a node within a leg (round 0 = initial, k = k-th "
        "feedback round); outcome PASS, FAIL, FEEDBACK, PAUSED or NULL (no terminal).",
        f"""
SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.runtime,
       x.leg_ordinal AS leg, l.kind AS leg_kind, x.node_id AS node, x.seq, x.round,
       x.outcome, x.retries, x.provenance, x.started_at, x.ended_at,
       x.cost_nano_usd, {usd('x.cost_nano_usd')} AS cost_usd, x.cost_unknown,
       x.session_id, x.detail
FROM rounds x
JOIN runs r ON r.id = x.run_pk
JOIN homes h ON h.id = r.home_id
LEFT JOIN legs l ON l.run_pk = x.run_pk AND l.ordinal = x.leg_ordinal
""",
    ),
    "v_nodes": (
        "One row per node per run: its latest verdict and its spend over every leg "
        "and round.",
        f"""
SELECT h.label AS home, r.run_id, r.graph_name AS graph, r.runtime,
       n.node_id AS node, n.node_type, n.in_graph, n.verdict, n.verdict_source, n.state,
       n.provenance, n.judged, n.round, n.retries,
       n.cost_nano_usd, {usd('n.cost_nano_usd')} AS cost_usd,
       n.invocations, n.unknown_cost_invocations, n.unrecorded_attempts,
       n.budget_nano_usd, {usd('n.budget_nano_usd')} AS budget_usd,
       CASE WHEN n.budget_nano_usd IS NOT NULL AND n.cost_nano_usd > n.budget_nano_usd
            THEN 1 ELSE 0 END AS over_budget,
       n.budget_overrun, n.has_artifact, n.has_failed_output, n.detail
FROM nodes n
JOIN runs r ON r.id = n.run_pk
JOIN homes h ON h.id = r.home_id
""",
    ),
    "v_problems": (
        "Bad input recorded by sync (path, byte offset, reason), with its run when known.",
        """
SELECT h.label AS home, r.run_id, p.path, p.byte_offset, p.reason, p.first_seen_at, p.last_seen_at
FROM problems p
LEFT JOIN runs r ON r.id = p.run_pk
LEFT JOIN homes h ON h.id = r.home_id
""",
    ),
    "v_findings": (
        "Disagreements between state.json and the stream, per run.",
        """
SELECT h.label AS home, r.run_id, r.graph_name AS graph, f.seq, f.kind, f.node_id AS node,
       f.leg_ordinal AS leg, f.detail
FROM findings f
JOIN runs r ON r.id = f.run_pk
JOIN homes h ON h.id = r.home_id
""",
    ),
}


# Revision 0005: a run seen through several homes (a copied directory) is one run; only
# its billed copy (runs.billed) appears in the money views, so sums count it once.
BILLED_ONLY = ("v_charges", "v_runs", "v_node_rounds", "v_nodes")
VIEWS_0005: dict[str, tuple[str, str]] = {
    name: (doc + (" Billed copies only: a run seen in several homes counts once." if name in BILLED_ONLY else ""),
           sql.rstrip() + "\nWHERE r.billed\n" if name in BILLED_ONLY else sql)
    for name, (doc, sql) in VIEWS_0002.items()
}


def create_statements(views: dict[str, tuple[str, str]]) -> list[str]:
    return [f"CREATE VIEW {name} AS {sql.strip()}" for name, (_doc, sql) in views.items()]


def drop_statements(views: dict[str, tuple[str, str]]) -> list[str]:
    return [f"DROP VIEW IF EXISTS {name}" for name in reversed(list(views))]


# Revision 0006: ledger_state follows status.derive (an unreadable state.json never turns
# a run the stream says passed into FAIL; such a run has spoken); v_problems says which
# problems are resolved (their cause gone on a later sync). v_nodes.state is the stream's
# word: "running" means its last execution has no terminal in the open leg — the status
# (a live lock probe) decides whether it is running or interrupted (`omg-ledger show`).
LEDGER_STATE_0006 = """CASE
         WHEN NOT r.any_leg AND r.snapshot_schema IS NULL AND NOT r.has_state THEN 'NOT-KNOWN-YET'
         WHEN r.last_leg_open THEN 'OPEN'
         WHEN r.last_outcome = 'paused' THEN 'PAUSED'
         WHEN r.snapshot_schema IS NOT NULL AND r.all_nodes_passed THEN 'PASS'
         WHEN r.snapshot_schema IS NULL AND r.has_state AND r.last_outcome = 'passed' THEN 'PASS'
         ELSE 'FAIL'
       END"""
_LEDGER_STATE_0002 = VIEWS_0002["v_runs"][1][VIEWS_0002["v_runs"][1].index("CASE"):
                                            VIEWS_0002["v_runs"][1].index("END") + 3]
VIEWS_0006: dict[str, tuple[str, str]] = {
    **VIEWS_0005,
    "v_runs": (VIEWS_0005["v_runs"][0], VIEWS_0005["v_runs"][1].replace(_LEDGER_STATE_0002, LEDGER_STATE_0006)),
    "v_nodes": (VIEWS_0005["v_nodes"][0] + " state 'running' is the stream's word (no terminal in the open leg); "
                "whether the run is alive needs a live lock probe (`omg-ledger show`).", VIEWS_0005["v_nodes"][1]),
    "v_problems": (
        "Bad input recorded by sync (path, byte offset, reason), with its run when known; resolved_at is "
        "set when a later sync found the cause gone (NULL: still open).",
        """
SELECT h.label AS home, r.run_id, p.path, p.byte_offset, p.reason, p.first_seen_at, p.last_seen_at,
       p.resolved_at
FROM problems p
LEFT JOIN runs r ON r.id = p.run_pk
LEFT JOIN homes h ON h.id = r.home_id
""",
    ),
}
assert LEDGER_STATE_0006 in VIEWS_0006["v_runs"][1]


# Revision 0015: a run whose stream waits before a line of a newer event schema has no
# ledger_state but NOT-KNOWN-YET (status.derive): the lines past it may end its last leg.
LEDGER_STATE_0015 = LEDGER_STATE_0006.replace(
    "CASE\n", "CASE\n         WHEN r.stream_paused THEN 'NOT-KNOWN-YET'\n", 1)
VIEWS_0015: dict[str, tuple[str, str]] = {
    **VIEWS_0006,
    "v_runs": (VIEWS_0006["v_runs"][0], VIEWS_0006["v_runs"][1].replace(LEDGER_STATE_0006, LEDGER_STATE_0015)),
}
assert LEDGER_STATE_0015 in VIEWS_0015["v_runs"][1] and LEDGER_STATE_0015 != LEDGER_STATE_0006


# Revision 0016: a problem names the machine whose sync found it (two machines' homes may
# share a path in one ledger); v_problems carries it.
VIEWS_0016: dict[str, tuple[str, str]] = {
    **VIEWS_0015,
    "v_problems": (
        VIEWS_0015["v_problems"][0] + " machine: the machine whose sync found it.",
        VIEWS_0015["v_problems"][1].replace("       p.resolved_at\n", "       p.resolved_at, p.machine\n", 1),
    ),
}
assert "p.machine" in VIEWS_0016["v_problems"][1]
