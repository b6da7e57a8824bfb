-- unknown_cost_work: invocations that were paid for but carry no price.
--
-- cost_unknown is not a zero: Codex reports tokens and no USD, and a Claude call
-- killed by its own timeout or cancelled by a halt is recorded with no price too.
-- Grouped per runtime, graph and charge kind, with the tokens that were reported so
-- a price can be estimated elsewhere. Charges with no time (a run copy without its
-- events.jsonl) count only with neither :since nor :until.
--
-- :since  day or instant, inclusive (a date or time without an offset is read in --tz, default the local zone) [default: ]
-- :until  day or instant, exclusive (a date or time without an offset is read in --tz, default the local zone) [default: ]
--
-- Portable: SQLite and PostgreSQL.
SELECT
    COALESCE(runtime, '(no snapshot)') AS runtime,
    COALESCE(graph, '(no graph)') AS graph,
    kind,
    COUNT(*) AS unpriced_invocations,
    COUNT(DISTINCT home || ' ' || run_id) AS runs,
    SUM(input_tokens) AS input_tokens,
    SUM(cached_input_tokens) AS cached_input_tokens,
    SUM(output_tokens) AS output_tokens,
    SUM(reasoning_output_tokens) AS reasoning_output_tokens
FROM v_charges
WHERE cost_nano_usd IS NULL
  AND (:since = '' OR at >= :since)
  AND (:until = '' OR at < :until)
GROUP BY COALESCE(runtime, '(no snapshot)'), COALESCE(graph, '(no graph)'), kind
ORDER BY COUNT(*) DESC, runtime, graph, kind
