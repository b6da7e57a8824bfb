-- abandoned_runs: runs whose last leg is still open (candidates for ABANDONED).
--
-- CAUTION: status is live, and SQL cannot see it. ABANDONED means "open leg AND the
-- resume.lock is affirmatively free right now"; only a live probe can tell
-- that from RUNNING/PLANNING. This query lists every run whose last leg is open —
-- RUNNING, PLANNING and ABANDONED alike. For the real answer run
-- `omg-ledger runs --status ABANDONED` or `omg-ledger audit`. Before resuming an
-- abandoned run, check for an orphaned model-CLI process still spending.
--
-- :since  only runs with an event at or after this day or instant (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    home, run_id, graph, runtime, legs, started_at, last_event_at,
    cost_nano_usd, cost_usd, unknown_cost_invocations AS unpriced_invocations,
    dir_path
FROM v_runs
WHERE ledger_state = 'OPEN'
  AND (:since = '' OR last_event_at >= :since)
ORDER BY last_event_at DESC, run_id
