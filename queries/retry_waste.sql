-- retry_waste: spend on attempts that were retried or failed, per run and node.
--
-- failed_cost: executions whose outcome was FAIL (an earlier leg's failure that a
-- `resume --retry-failed` later fixed counts here too). retried_cost: node_retried
-- events that carried their own accounting. feedback_cost is shown apart: a feedback
-- round's judgment is the price of iterating, not a failure.
-- unrecorded_attempts: attempts that were paid for but whose spend the engine wrote
-- nowhere (a plain in-leg retry, a session-limited call): their cost is unknown, so
-- the waste here is a lower bound whenever that column is > 0.
-- unpriced_invocations: failed or feedback executions and retries whose price nobody
-- recorded (Codex, cost_unknown): they count 0 in the sums, which are then lower bounds.
--
-- :since  only runs with an event at or after this day or instant (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
WITH waste AS (
    SELECT home, run_id, node,
           SUM(CASE WHEN outcome = 'FAIL' THEN COALESCE(cost_nano_usd, 0) ELSE 0 END) AS failed_nano,
           SUM(CASE WHEN outcome = 'FAIL' THEN 1 ELSE 0 END) AS failed_executions,
           SUM(CASE WHEN outcome = 'FEEDBACK' THEN COALESCE(cost_nano_usd, 0) ELSE 0 END) AS feedback_nano,
           0 AS retried_nano,
           SUM(CASE WHEN outcome IN ('FAIL', 'FEEDBACK') AND cost_unknown THEN 1 ELSE 0 END) AS unpriced
    FROM v_node_rounds
    GROUP BY home, run_id, node
    UNION ALL
    SELECT home, run_id, node, 0, 0, 0, SUM(COALESCE(cost_nano_usd, 0)),
           SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END)
    FROM v_charges
    WHERE kind = 'retry'
    GROUP BY home, run_id, node
)
SELECT
    w.home, w.run_id, r.graph, w.node,
    SUM(w.failed_executions) AS failed_executions,
    SUM(w.failed_nano) AS failed_cost_nano_usd,
    SUM(w.retried_nano) AS retried_cost_nano_usd,
    CAST(SUM(w.failed_nano) + SUM(w.retried_nano) AS DOUBLE PRECISION) / 1000000000 AS waste_usd,
    CAST(SUM(w.feedback_nano) AS DOUBLE PRECISION) / 1000000000 AS feedback_usd,
    MAX(n.unrecorded_attempts) AS unrecorded_attempts,
    SUM(w.unpriced) AS unpriced_invocations
FROM waste w
JOIN v_runs r ON r.home = w.home AND r.run_id = w.run_id
LEFT JOIN v_nodes n ON n.home = w.home AND n.run_id = w.run_id AND n.node = w.node
WHERE (:since = '' OR r.last_event_at >= :since)
GROUP BY w.home, w.run_id, r.graph, w.node
HAVING SUM(w.failed_nano) + SUM(w.retried_nano) + SUM(w.feedback_nano) > 0
    OR SUM(w.failed_executions) > 0
    OR MAX(n.unrecorded_attempts) > 0
    OR SUM(w.unpriced) > 0
ORDER BY SUM(w.failed_nano) + SUM(w.retried_nano) DESC, w.run_id, w.node
