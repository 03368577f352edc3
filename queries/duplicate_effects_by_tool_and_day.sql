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
-- duplicate_effects counts extra objects and intents counts the actions that made them. Only
-- current findings count: a finding a later verdict dropped (a record that turned out to be a
-- failure) must not be counted. The day is the day the finding became true.
-- The current findings of the window are read as the dashboards read them: the rows of the kind
-- and window (any version) name their intents' places in reckon_intent_tally, which is read at
-- those keys alone (FINAL merges their versions only) for the current version; a finding is
-- current when it was written with it. LIMIT BY keeps one row of a finding written twice at
-- one version. Nothing merges every verdict or finding ever written.
SELECT
    toDate(f.at) AS day,
    ifNull(f.tool, '(unknown tool)') AS tool,
    count() AS duplicate_effects,
    uniqExact(f.intent_id) AS intents,
    -- The queue's view: how many of those intents still wait for a person (escalation open or
    -- claimed). A marker column, not the status: an unmatched row gets the type's default, and
    -- an Enum8's default is its first value ('open').
    uniqExactIf(f.intent_id, e.unresolved = 1) AS intents_unresolved
FROM
(
    SELECT at, intent_id, kind, subject, tool
    FROM reckon_finding_times
    WHERE kind = 'duplicate_effect' AND at >= {since:DateTime} AND at < {until:DateTime}
      AND (listed_ns, intent_id, verdict_version) IN
          (SELECT listed_ns, intent_id, version
           FROM (SELECT listed_ns, intent_id, version, deleted FROM reckon_intent_tally FINAL
                 WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_finding_times WHERE kind = 'duplicate_effect' AND at >= {since:DateTime} AND at < {until:DateTime}))
           WHERE deleted = 0)
    LIMIT 1 BY intent_id, kind, subject
) AS f
ANY LEFT JOIN
(
    SELECT intent_id, toUInt8(1) AS unresolved
    FROM
    (
        SELECT intent_id, status
        FROM reckon_escalation_list FINAL
        -- The window's intents only: the join side is built from them, not from the whole queue,
        -- read from a day before the earliest of their listing places on (an escalation is
        -- listed where it opened, after its intent's first event): a range of the listing's key.
        WHERE listed_ns >=
            (SELECT greatest(min(listed_ns), toUInt64(86400000000000)) - 86400000000000
             FROM reckon_finding_times
             WHERE kind = 'duplicate_effect' AND at >= {since:DateTime} AND at < {until:DateTime})
          AND intent_id IN (SELECT intent_id FROM reckon_finding_times WHERE kind = 'duplicate_effect' AND at >= {since:DateTime} AND at < {until:DateTime})
    )
    -- Outside FINAL: a status filter under it could drop a newer version before they collapse.
    WHERE status != 'resolved'
) AS e USING (intent_id)
GROUP BY day, tool
ORDER BY day, tool
