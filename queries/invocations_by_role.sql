-- invocations_by_role: runner role invocations per role, from `sync --invocations` streams.
--
-- One row per role (NULL role = a recover end that found nothing open). Reads the
-- v_invocations view: an invocation is a paired start/end, a start
-- closed by recover, a dangling start (no end yet) or an end whose start was never seen.
-- status_class: success | judged (a negative verdict, not a failure) | failure | NULL (no end).
-- Percentiles need code: `omg-ledger invocations --by role` adds p50/p95.
--
-- :since  earliest start (an end without a start: its end), a day or instant such as 2026-11-01 (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    role,
    COUNT(*) AS invocations,
    SUM(CASE WHEN status_class = 'failure' THEN 1 ELSE 0 END) AS failures,
    SUM(CASE WHEN status_class = 'judged' THEN 1 ELSE 0 END) AS judged,
    SUM(CASE WHEN outcome = 'dangling' THEN 1 ELSE 0 END) AS dangling,
    SUM(CASE WHEN outcome = 'recovered' THEN 1 ELSE 0 END) AS recovered,
    SUM(CASE WHEN outcome = 'unmatched_end' THEN 1 ELSE 0 END) AS unmatched_ends,
    COUNT(duration_ms) AS with_duration,
    MIN(duration_ms) AS min_ms,
    MAX(duration_ms) AS max_ms,
    SUM(duration_ms) AS total_ms,
    MIN(started_at) AS first_started_at,
    MAX(started_at) AS last_started_at
FROM v_invocations
WHERE (:since = '' OR COALESCE(started_at, ended_at) >= :since)
GROUP BY role
ORDER BY CASE WHEN role IS NULL THEN 1 ELSE 0 END, role
