-- Question: Which intents were sent many times (retry storms: stacked retry layers, loops that
--   never consult reckon), and under how many keys?
-- Parameters:
--   {since:DateTime}        start of the window, UTC (inclusive): the intent's first attempt
--   {until:DateTime}        end of the window, UTC (exclusive)
--   {min_attempts:UInt32}   only intents with at least this many attempts (3 is a storm for a
--                           contract allowing 5; 1 lists every intent)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there)
-- Columns: intent_id, tool, attempts, keys, first_attempt, last_attempt, spread_s, timeouts, http_5xx, state, findings
--
-- Counted from the attempts table itself (every tool span, FINAL so a re-delivered span counts
-- once), then joined with the verdict for the state and the findings reckon drew (for example
-- retry_budget_exceeded, new_key_retry). keys > 1 means the retries minted new keys: each may
-- execute again. The window is applied first, in WHERE on the partition column: an intent
-- whose first attempt is in the window has an attempt in it, so only those intents are
-- grouped (their attempts found by the sort key), and the verdicts are read for them alone.
SELECT
    intent_id, tool, attempts, keys, first_attempt, last_attempt, spread_s, timeouts, http_5xx,
    toString(v.state) AS state,
    arrayMap(k -> toString(k), v.finding_kinds) AS findings
FROM
(
    SELECT
        intent_id,
        any(tool) AS tool,
        count() AS attempts,
        uniqExact(ifNull(idempotency_key, '')) AS keys,
        min(started_at) AS first_attempt,
        max(started_at) AS last_attempt,
        round((max(started_ns) - min(started_ns)) / 1e9, 3) AS spread_s,
        countIf(isNull(http_status)) AS timeouts,
        countIf(ifNull(http_status, 0) >= 500) AS http_5xx
    FROM reckon_attempts FINAL
    WHERE intent_id IN
        (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime})
    GROUP BY intent_id
    HAVING attempts >= {min_attempts:UInt32}
       AND first_attempt >= {since:DateTime} AND first_attempt < {until:DateTime}
) AS a
ANY LEFT JOIN
(
    SELECT intent_id, state, finding_kinds
    FROM
    (
        SELECT intent_id, state, finding_kinds, deleted
        FROM reckon_verdicts FINAL
        WHERE intent_id IN
            (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime})
    )
    WHERE deleted = 0
) AS v USING (intent_id)
ORDER BY attempts DESC, intent_id
