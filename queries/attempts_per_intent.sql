-- Question: Which intents were sent many times (retry storms: stacked retry layers, loops that
--   never consult reckon), and under how many keys?
-- Parameters:
--   {since:DateTime}        start of the window, UTC (inclusive): the intent's first event
--   {until:DateTime}        end of the window, UTC (exclusive)
--   {min_attempts:UInt32}   only intents with at least this many attempts (3 is a storm for a
--                           contract allowing 5; 1 lists every intent)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there)
-- Columns: intent_id, tool, attempts, keys, first_attempt, last_attempt, spread_s, timeouts, http_5xx, state, findings
--
-- The intents are those first seen in the window (where reckon_intent_tally lists them: its
-- partition and sort key), with the audit's count of their attempts (the sends of their write,
-- as the verdict counts them), their state and the findings reckon drew (for example
-- retry_budget_exceeded, new_key_retry), from the tally's current rows. Their attempt rows add
-- the keys, times, timeouts and 5xx answers, read by intent (reckon_attempts' sort key) with no
-- FINAL: a re-delivered span counts once. keys > 1 means the retries minted new keys: each may
-- execute again. Those rows are read from a day before the window on (reckon_attempts'
-- partition column), so the months before it are not read: an intent first seen in the window
-- has no attempt earlier than that unless a span reached reckon over a day after a later one.
SELECT
    t.intent_id AS intent_id, t.tool AS tool, t.attempts AS attempts, a.keys AS keys,
    a.first_attempt AS first_attempt, a.last_attempt AS last_attempt, a.spread_s AS spread_s,
    a.timeouts AS timeouts, a.http_5xx AS http_5xx, t.state AS state, t.findings AS findings
FROM
(
    SELECT
        intent_id, ifNull(tool, '(unknown tool)') AS tool, attempts, toString(state) AS state,
        arrayMap(k -> toString(k), arraySort(arrayDistinct(finding_kind))) AS findings
    FROM
    (
        SELECT intent_id, tool, attempts, state, finding_kind, first_attempt_ns, deleted
            FROM reckon_intent_tally FINAL
            WHERE listed_at >= {since:DateTime} AND listed_at < {until:DateTime}
              AND listed_ns >= toUInt64(toUInt32({since:DateTime})) * 1000000000
              AND listed_ns < toUInt64(toUInt32({until:DateTime})) * 1000000000
    )
    WHERE deleted = 0 AND first_attempt_ns > 0 AND attempts >= {min_attempts:UInt32}
) AS t
ANY LEFT JOIN
(
    SELECT
        intent_id,
        uniqExact(ifNull(idempotency_key, '')) AS keys,
        min(started_at) AS first_attempt,
        max(started_at) AS last_attempt,
        round((max(started_ns) - min(started_ns)) / 1e9, 3) AS spread_s,
        uniqExactIf(trace_id, span_id, isNull(http_status)) AS timeouts,
        uniqExactIf(trace_id, span_id, ifNull(http_status, 0) >= 500) AS http_5xx
    FROM reckon_attempts
    WHERE started_at >= {since:DateTime} - 86400
      AND intent_id IN
    (
        SELECT intent_id
        FROM
        (
            SELECT intent_id, tool, attempts, state, finding_kind, first_attempt_ns, deleted
            FROM reckon_intent_tally FINAL
            WHERE listed_at >= {since:DateTime} AND listed_at < {until:DateTime}
              AND listed_ns >= toUInt64(toUInt32({since:DateTime})) * 1000000000
              AND listed_ns < toUInt64(toUInt32({until:DateTime})) * 1000000000
        )
        WHERE deleted = 0 AND first_attempt_ns > 0 AND attempts >= {min_attempts:UInt32}
    )
    GROUP BY intent_id
) AS a USING (intent_id)
ORDER BY attempts DESC, intent_id
