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
-- The current findings of the window are read as the dashboards read them: the rows of the kind
-- and window (any version) name their intents' places in reckon_intent_tally, which is read at
-- those keys alone (FINAL merges their versions only) for the current version; a finding is
-- current when it was written with it. LIMIT BY keeps one row of a finding written twice at
-- one version. Nothing merges every verdict or finding ever written.
-- The verdict's state, findings and escalation come from the same tally rows, and the late
-- attempts from reckon_attempts by the window's intents (its sort key), with no FINAL: a span
-- stored twice answers the same.
SELECT
    at, intent_id, tool, span_id, idempotency_key, http_status, error_type,
    toString(v.state) AS state,
    -- Through toString: 18.16's has() does not compare an Enum8 array with a string.
    has(arrayMap(k -> toString(k), v.finding_kind), 'duplicate_effect') AS duplicate_effect,
    v.escalation_id AS escalation_id,
    detail
FROM
(
    SELECT
        f.at AS at,
        f.intent_id AS intent_id,
        f.listed_ns AS listed_ns,
        ifNull(f.tool, '(unknown tool)') AS tool,
        f.subject AS span_id,
        a.idempotency_key AS idempotency_key,
        a.http_status AS http_status,
        a.error_type AS error_type,
        f.detail AS detail
    FROM
    (
        SELECT at, at_ns, intent_id, listed_ns, kind, subject, tool, detail
        FROM reckon_finding_times
        WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime}
          AND (listed_ns, intent_id, verdict_version) IN
              (SELECT listed_ns, intent_id, version
               FROM (SELECT listed_ns, intent_id, version, deleted FROM reckon_intent_tally FINAL
                     WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_finding_times WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime}))
               WHERE deleted = 0)
        LIMIT 1 BY intent_id, kind, subject
    ) AS f
    ANY LEFT JOIN
    (
        SELECT span_id AS attempt_span_id, idempotency_key, http_status, error_type
        FROM reckon_attempts
        -- The window's intents only (the sort key's first column), not the whole table, from a
        -- day before the earliest of their listing places on (the partition column: the months
        -- before are not read; a span that reached reckon over a day late is missed).
        WHERE started_at >=
            (SELECT toDateTime(greatest(intDiv(min(listed_ns), 1000000000), 86400) - 86400)
             FROM reckon_finding_times
             WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime})
          AND intent_id IN (SELECT intent_id FROM reckon_finding_times WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime})
    ) AS a ON f.subject = a.attempt_span_id
) AS late
ANY LEFT JOIN
(
    SELECT listed_ns, intent_id, state, finding_kind, escalation_id
    FROM
    (
        SELECT listed_ns, intent_id, state, finding_kind, escalation_id, deleted
        FROM reckon_intent_tally FINAL
        WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_finding_times WHERE kind = 'expired_key_retry' AND at >= {since:DateTime} AND at < {until:DateTime})
    )
    WHERE deleted = 0
) AS v USING (listed_ns, intent_id)
ORDER BY at, intent_id
