-- unverified_passes: PASS verdicts reached without evidence the engine gathered.
--
-- provenance: 'verified' = a verify command the engine ran;
-- 'approved' = a human approved a gate; 'self-reported' = the model said so;
-- 'exit-only' = the process exited 0. NULL = the run predates the field.
-- This lists the self-reported, exit-only and unknown ones, with how many of the
-- run's passes were verified or approved beside them.
--
-- :since  only runs with an event at or after this day or instant (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    n.home, n.run_id, n.graph, n.node,
    COALESCE(n.provenance, '(unknown/pre-field)') AS provenance,
    n.cost_usd,
    (SELECT COUNT(*) FROM v_nodes v
      WHERE v.home = n.home AND v.run_id = n.run_id AND v.verdict = 'PASS'
        AND v.provenance IN ('verified', 'approved')) AS run_verified_or_approved
FROM v_nodes n
JOIN v_runs r ON r.home = n.home AND r.run_id = n.run_id
WHERE n.verdict = 'PASS'
  AND (n.provenance IS NULL OR n.provenance IN ('self-reported', 'exit-only'))
  AND (:since = '' OR r.last_event_at >= :since)
ORDER BY n.run_id, n.node
