-- Question: Which idempotency keys were sent again with different parameters (the downstream
--   either rejected the reuse or, worse, answered with the first request's saved result)?
-- Parameters:
--   {since:DateTime}  start of the window, UTC (inclusive): when the mismatch was found
--   {until:DateTime}  end of the window, UTC (exclusive)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there)
-- Columns: at, idempotency_key, intent_id, tool, attempts, distinct_arguments, http_statuses, state, escalation_id, detail
--
-- The finding's subject is the key. distinct_arguments counts the different argument texts
-- sent under the key; it is 0 when content capture was off (reckon then relies on the
-- downstream's mismatch error or the records' amounts), so the finding, not this count, is the
-- evidence. One JOIN per SELECT level, because 18.16 supports no more.
SELECT
    at, idempotency_key, intent_id, tool, attempts, distinct_arguments, http_statuses,
    toString(v.state) AS state,
    v.escalation_id AS escalation_id,
    detail
FROM
(
    SELECT
        f.at AS at,
        f.subject AS idempotency_key,
        f.intent_id AS intent_id,
        ifNull(f.tool, '(unknown tool)') AS tool,
        a.attempts AS attempts,
        a.distinct_arguments AS distinct_arguments,
        a.http_statuses AS http_statuses,
        f.detail AS detail
    FROM reckon_current_findings AS f
    ANY LEFT JOIN
    (
        SELECT
            assumeNotNull(idempotency_key) AS key,
            count() AS attempts,
            uniqExactIf(assumeNotNull(arguments), isNotNull(arguments)) AS distinct_arguments,
            -- 0 stands for "no response" (a timeout): an Array cannot hold NULL on 18.16.
            groupUniqArray(ifNull(http_status, 0)) AS http_statuses
        FROM reckon_attempts FINAL
        -- Only the window's keys are grouped (every attempt that sent one, whatever its intent).
        WHERE idempotency_key IN
            (SELECT subject FROM reckon_findings
             WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime})
        GROUP BY key
    ) AS a ON f.subject = a.key
    WHERE f.kind = 'key_reuse_mismatch'
      AND f.at >= {since:DateTime} AND f.at < {until:DateTime}
) AS reused
ANY LEFT JOIN
(
    SELECT intent_id, state, escalation_id
    FROM
    (
        SELECT intent_id, state, escalation_id, deleted
        FROM reckon_verdicts FINAL
        WHERE intent_id IN
            (SELECT intent_id FROM reckon_findings
             WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime})
    )
    WHERE deleted = 0
) AS v USING (intent_id)
ORDER BY at, intent_id
