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
-- The current findings of the window are read as the dashboards read them: the rows of the kind
-- and window (any version) name their intents' places in reckon_intent_tally, which is read at
-- those keys alone (FINAL merges their versions only) for the current version; a finding is
-- current when it was written with it. LIMIT BY keeps one row of a finding written twice at
-- one version. Nothing merges every verdict or finding ever written.
-- The attempts under each key are read by their key column with no FINAL (a span stored twice
-- counts once), from a day before the earliest listing place of the window's intents on (the
-- partition column): an attempt under the key over a day before that (by another intent, long
-- after any downstream kept the key; or a span that reached reckon over a day late) is not
-- counted. The verdict's state and escalation come from the tally.
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
        f.listed_ns AS listed_ns,
        ifNull(f.tool, '(unknown tool)') AS tool,
        a.attempts AS attempts,
        a.distinct_arguments AS distinct_arguments,
        a.http_statuses AS http_statuses,
        f.detail AS detail
    FROM
    (
        SELECT at, at_ns, intent_id, listed_ns, kind, subject, tool, detail
        FROM reckon_finding_times
        WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime}
          AND (listed_ns, intent_id, verdict_version) IN
              (SELECT listed_ns, intent_id, version
               FROM (SELECT listed_ns, intent_id, version, deleted FROM reckon_intent_tally FINAL
                     WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_finding_times WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime}))
               WHERE deleted = 0)
        LIMIT 1 BY intent_id, kind, subject
    ) AS f
    ANY LEFT JOIN
    (
        SELECT
            assumeNotNull(idempotency_key) AS key,
            uniqExact(trace_id, span_id) AS attempts,
            uniqExactIf(assumeNotNull(arguments), isNotNull(arguments)) AS distinct_arguments,
            -- 0 stands for "no response" (a timeout): an Array cannot hold NULL on 18.16.
            groupUniqArray(ifNull(http_status, 0)) AS http_statuses
        FROM reckon_attempts
        -- Every attempt that sent one of the window's keys, whatever its intent, from a day
        -- before the earliest listing place of the window's intents on (the partition column:
        -- the months before are not read). PREWHERE (no FINAL here): the key column is read
        -- first, the others only in the granules that sent one, whatever the server's settings.
        PREWHERE idempotency_key IN (SELECT subject FROM reckon_finding_times WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime})
        WHERE started_at >=
            (SELECT toDateTime(greatest(intDiv(min(listed_ns), 1000000000), 86400) - 86400)
             FROM reckon_finding_times
             WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime})
        GROUP BY key
    ) AS a ON f.subject = a.key
) AS reused
ANY LEFT JOIN
(
    SELECT listed_ns, intent_id, state, escalation_id
    FROM
    (
        SELECT listed_ns, intent_id, state, escalation_id, deleted
        FROM reckon_intent_tally FINAL
        WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_finding_times WHERE kind = 'key_reuse_mismatch' AND at >= {since:DateTime} AND at < {until:DateTime})
    )
    WHERE deleted = 0
) AS v USING (listed_ns, intent_id)
ORDER BY at, intent_id
