-- spend_by_graph: known spend, runs, invocations and unpriced invocations per graph.
--
-- A graph is the snapshot's graph name; runs that never wrote a snapshot (a planner
-- killed mid-call, a refused plan) have none and are grouped as '(no graph)'.
-- Charges are selected by their own time, so :since/:until cut inside a run; charges
-- with no time (a run copy without its events.jsonl) count only with neither.
--
-- :since  day or instant, inclusive (a date or time without an offset is read in --tz, default the local zone) [default: ]
-- :until  day or instant, exclusive (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    COALESCE(graph, '(no graph)') AS graph,
    COUNT(DISTINCT home || ' ' || run_id) AS runs,
    SUM(cost_nano_usd) AS cost_nano_usd,
    CAST(COALESCE(SUM(cost_nano_usd), 0) AS DOUBLE PRECISION) / 1000000000 AS cost_usd,
    COUNT(*) AS invocations,
    COUNT(*) - COUNT(cost_nano_usd) AS unpriced_invocations
FROM v_charges
WHERE (:since = '' OR at >= :since)
  AND (:until = '' OR at < :until)
GROUP BY COALESCE(graph, '(no graph)')
-- A graph with no known spend (every invocation unpriced) last on both backends: PostgreSQL
-- would put its NULL first in DESC order.
ORDER BY SUM(cost_nano_usd) IS NULL, SUM(cost_nano_usd) DESC, graph
