-- Question: Which intents are still of unknown outcome (the write may or may not have happened),
--   oldest first, and what is safe to do about each?
-- Parameters:
--   {min_age_s:UInt32}  only intents whose first event is at least this many seconds old
--                       (0: all; 900 hides those a retry may still settle)
-- Runs on ClickHouse 18.16: yes (bind the parameter as a literal there)
-- Columns: intent_id, tool, first_seen, age_s, attempts, attempts_unknown, decision, safe_retry_until, escalation_id, escalation_status
--
-- "Open" means the current verdict's state is `unknown`: no downstream record settled it and no
-- attempt was rejected outright. `decision` is reckon's advice (retry_same_key while the key is
-- still held, reconcile after, escalate when a person must decide).
SELECT
    v.intent_id AS intent_id,
    ifNull(v.tool, '(unknown tool)') AS tool,
    v.first_seen AS first_seen,
    toUInt32(now()) - toUInt32(v.first_seen) AS age_s,
    v.attempts AS attempts,
    v.attempts_unknown AS attempts_unknown,
    toString(v.decision) AS decision,
    -- Nanoseconds to whole seconds: the DateTime the column's _ns holds.
    if(isNull(v.safe_retry_until_ns), NULL, toDateTime(intDiv(assumeNotNull(v.safe_retry_until_ns), 1000000000))) AS safe_retry_until,
    v.escalation_id AS escalation_id,
    -- '' from an unmatched join row means no escalation: NULL says so.
    nullIf(e.escalation_status, '') AS escalation_status
FROM reckon_current_verdicts AS v
ANY LEFT JOIN
(
    SELECT id AS escalation_id_key, toString(status) AS escalation_status
    FROM reckon_escalations FINAL
) AS e ON v.escalation_id = e.escalation_id_key
WHERE v.state = 'unknown'
  AND toUInt32(now()) - toUInt32(v.first_seen) >= {min_age_s:UInt32}
ORDER BY v.first_seen, v.intent_id
