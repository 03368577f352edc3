-- Question: How many duplicate effects (two or more live downstream objects for one intent) did
--   each tool cause, per day?
-- Parameters:
--   {since:DateTime}  start of the window, UTC (inclusive), e.g. '2026-01-01 00:00:00'
--   {until:DateTime}  end of the window, UTC (exclusive)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there: 18.16 predates query
--   parameters; clickhouse-client --param_since=... or HTTP ?param_since=... on current servers)
-- Columns: day, tool, duplicate_effects, intents, intents_unresolved
--
-- One `duplicate_effect` finding is one extra object (its subject is the object id), so
-- duplicate_effects counts extra objects and intents counts the actions that made them. Findings
-- are read through reckon_current_findings: a finding a later verdict dropped (a record that
-- turned out to be a failure) must not be counted. The day is the day the finding became true.
SELECT
    toDate(f.at) AS day,
    ifNull(f.tool, '(unknown tool)') AS tool,
    count() AS duplicate_effects,
    uniqExact(f.intent_id) AS intents,
    -- The queue's view: how many of those intents still wait for a person (escalation open or
    -- claimed). A marker column, not the status: an unmatched row gets the type's default, and
    -- an Enum8's default is its first value ('open').
    uniqExactIf(f.intent_id, e.unresolved = 1) AS intents_unresolved
FROM reckon_current_findings AS f
ANY LEFT JOIN
(
    SELECT intent_id, toUInt8(1) AS unresolved
    FROM reckon_escalations FINAL
    WHERE status != 'resolved'
      -- The window's intents only: the join side is built from them, not from the whole queue.
      AND intent_id IN
          (SELECT intent_id FROM reckon_findings
           WHERE kind = 'duplicate_effect' AND at >= {since:DateTime} AND at < {until:DateTime})
) AS e USING (intent_id)
WHERE f.kind = 'duplicate_effect'
  AND f.at >= {since:DateTime} AND f.at < {until:DateTime}
GROUP BY day, tool
ORDER BY day, tool
