-- most_expensive_nodes: the nodes that cost the most, over every leg and round.
--
-- One row per node per run (v_nodes): cost includes earlier legs' failed attempts
-- and every feedback round, which state.json alone does not keep. Nodes with unpriced
-- invocations sort by their known spend; check unpriced_invocations.
--
-- :limit  how many rows [default: 20]
-- :since  only runs with an event at or after this day or instant (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    n.home, n.run_id, n.graph, n.node, n.verdict, n.provenance,
    n.cost_nano_usd, n.cost_usd,
    n.invocations, n.unknown_cost_invocations AS unpriced_invocations,
    n.unrecorded_attempts, n.budget_usd
FROM v_nodes n
JOIN v_runs r ON r.home = n.home AND r.run_id = n.run_id
WHERE (:since = '' OR r.last_event_at >= :since)
ORDER BY n.cost_nano_usd DESC, n.run_id, n.node
LIMIT CAST(:limit AS INTEGER)
