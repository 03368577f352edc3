-- Question: Which attempts were sent after the intent's idempotency key may already have
--   expired (first attempt + key_retention - retry_margin), and what came of them?
-- Parameters:
--   {since:DateTime}  start of the window, UTC (inclusive): when the late attempt was sent
--   {until:DateTime}  end of the window, UTC (exclusive)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there)
-- Columns: at, intent_id, tool, span_id, idempotency_key, http_status, error_type, state, duplicate_effect, escalation_id, detail
--
-- The finding's subject is the late attempt's span id; the attempt row adds what the downstream
-- answered. `duplicate_effect` = 1 when the same intent also has a second live object: the
-- expired key let the send execute again, which is the costly case. One JOIN per SELECT level,
-- because 18.16 supports no more.
SELECT
    at, intent_id, tool, span_id, idempotency_key, http_status, error_type,
    toString(v.state) AS state,
    -- Through toString: 18.16's has() does not compare an Enum8 array with a string.
    has(arrayMap(k -> toString(k), v.finding_kinds), 'duplicate_effect') AS duplicate_effect,
    v.escalation_id AS escalation_id,
    detail
FROM
(
    SELECT
        f.at AS at,
        f.intent_id AS intent_id,
        ifNull(f.tool, '(unknown tool)') AS tool,
        f.subject AS span_id,
        a.idempotency_key AS idempotency_key,
        a.http_status AS http_status,
        a.error_type AS error_type,
        f.detail AS detail
    FROM reckon_current_findings AS f
    ANY LEFT JOIN
    (
        SELECT span_id AS attempt_span_id, idempotency_key, http_status, error_type
        FROM reckon_attempts FINAL
        -- The window's intents only (the sort key's first column), not the whole table.
        WHERE intent_id IN
            (SELECT intent_id FROM reckon_findings
             WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime})
    ) AS a ON f.subject = a.attempt_span_id
    WHERE f.kind = 'expired_key_retry'
      AND f.at >= {since:DateTime} AND f.at < {until:DateTime}
) AS late
ANY LEFT JOIN
(
    SELECT intent_id, state, finding_kinds, escalation_id
    FROM
    (
        SELECT intent_id, state, finding_kinds, escalation_id, deleted
        FROM reckon_verdicts FINAL
        WHERE intent_id IN
            (SELECT intent_id FROM reckon_findings
             WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime})
    )
    WHERE deleted = 0
) AS v USING (intent_id)
ORDER BY at, intent_id
