-- spend_by_day: known spend, invocations and unpriced invocations per UTC day.
--
-- Every paid invocation counts once, on the day of its own event (v_charges), so a
-- run that spans midnight is split across both days. Days are UTC: for days in your
-- own zone use `omg-ledger cost --by day --tz ZONE`. cost_usd is a lower bound
-- whenever unpriced_invocations > 0 (Codex reports no price). Charges with no time (a
-- run copy without its events.jsonl) are the '(undated)' row, in no :since/:until window.
--
-- :since  first day or instant to include, e.g. 2026-11-01 (without an offset: in --tz, default the local zone; --tz UTC for whole UTC days) [default: ]
-- :until  day or instant to stop before, e.g. 2026-12-01 (without an offset: in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    COALESCE(SUBSTR(at, 1, 10), '(undated)') AS day,
    SUM(cost_nano_usd) AS cost_nano_usd,
    CAST(COALESCE(SUM(cost_nano_usd), 0) AS DOUBLE PRECISION) / 1000000000 AS cost_usd,
    COUNT(*) AS invocations,
    COUNT(*) - COUNT(cost_nano_usd) AS unpriced_invocations,
    SUM(input_tokens) AS input_tokens,
    SUM(cached_input_tokens) AS cached_input_tokens,
    SUM(output_tokens) AS output_tokens,
    SUM(reasoning_output_tokens) AS reasoning_output_tokens
FROM v_charges
WHERE (:since = '' OR at >= :since)
  AND (:until = '' OR at < :until)
GROUP BY COALESCE(SUBSTR(at, 1, 10), '(undated)')
ORDER BY day
