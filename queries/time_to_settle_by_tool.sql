-- Question: How long does an intent take from its first attempt to a settled state (completed,
--   failed after execution, or rejected before execution), per tool, as percentiles?
-- Parameters:
--   {since:DateTime}  start of the window, UTC (inclusive): the intent's first attempt
--   {until:DateTime}  end of the window, UTC (exclusive)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there)
-- Columns: tool, settled_intents, p50_s, p90_s, p99_s, max_s, still_open
--
-- The settling instant is taken from evidence, not from when reckon happened to audit:
-- - rejected before execution: the end of the last attempt (the rejection arrived then);
-- - completed or failed after execution: the earliest, over the intent's objects, of the first
--   observation of the object in the status its latest observation shows, counting the
--   downstream's records of the object when it has any, else the attempt responses that
--   returned it (the records outrank a response, as in reckon's own fold).
-- Objects are the intent's current `object` rows of reckon_intent_lookup; nothing reads the
-- verdict's JSON document. Unlike reckon's fold this does not know which statuses the contract
-- calls terminal: a status observed after a terminal one counts as the final one.
-- Downstreams often stamp observations to the second, so a record can read a little earlier
-- than the attempt that caused it: durations are clamped at 0.
-- still_open counts the intents of the same window that have not settled (pending, unknown):
-- a percentile over settled intents alone flatters a tool that leaves many open.
-- The window is applied first, on reckon_attempts' partition column: the intents with an
-- attempt in it are the candidates, and every other table is read for those intents only.
-- One JOIN per SELECT level and no WITH subqueries, because 18.16 supports no more.
SELECT
    tool,
    countIf(settled_ns > 0) AS settled_intents,
    -- Seconds, to the millisecond; quantileExactIf so a handful of intents gives true values.
    round(quantileExactIf(0.5)((greatest(settled_ns, first_ns) - first_ns) / 1e9, settled_ns > 0), 3) AS p50_s,
    round(quantileExactIf(0.9)((greatest(settled_ns, first_ns) - first_ns) / 1e9, settled_ns > 0), 3) AS p90_s,
    round(quantileExactIf(0.99)((greatest(settled_ns, first_ns) - first_ns) / 1e9, settled_ns > 0), 3) AS p99_s,
    round(maxIf((greatest(settled_ns, first_ns) - first_ns) / 1e9, settled_ns > 0), 3) AS max_s,
    countIf(settled_ns = 0) AS still_open
FROM
(
    SELECT
        w.tool AS tool,
        w.first_ns AS first_ns,
        multiIf(w.state IN ('completed', 'failed_after_execution'), o.object_ns,
                w.state = 'failed_before_execution', w.last_end_ns,
                toUInt64(0)) AS settled_ns
    FROM
    (
        -- The intents whose first attempt is in the window, with their current verdict.
        SELECT intent_id, tool, state, first_ns, last_end_ns
        FROM
        (
            SELECT intent_id, ifNull(tool, '(unknown tool)') AS tool, state
            FROM
            (
                SELECT intent_id, tool, state, deleted
                FROM reckon_verdicts FINAL
                WHERE intent_id IN (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime})
            )
            WHERE deleted = 0
        ) AS v
        ALL INNER JOIN
        (
            SELECT intent_id, min(started_ns) AS first_ns, max(ended_ns) AS last_end_ns
            FROM reckon_attempts
            WHERE intent_id IN (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime})
            GROUP BY intent_id
            HAVING min(started_at) >= {since:DateTime} AND min(started_at) < {until:DateTime}
        ) AS a USING (intent_id)
    ) AS w
    ANY LEFT JOIN
    (
        -- Per intent: the earliest first observation of an object in its final status.
        SELECT intent_id, min(final_ns) AS object_ns
        FROM
        (
            -- Per (intent, object): of the most trusted source that observed it, the status
            -- observed last (ties: the status that sorts last) and when it was first observed.
            SELECT intent_id, object, argMax(first_ns, tuple(source, last_ns, status)) AS final_ns
            FROM
            (
                SELECT intent_id, object, source, status, min(at_ns) AS first_ns, max(at_ns) AS last_ns
                FROM
                (
                    -- The downstream's records of the candidates' objects.
                    SELECT intent_id, object_id AS object, status, observed_ns AS at_ns, toUInt8(2) AS source
                    FROM
                    (
                        SELECT intent_id, value AS object_id
                        FROM reckon_intent_lookup FINAL
                        WHERE kind = 'object'
                          AND intent_id IN (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime})
                          AND (intent_id, verdict_version) IN
                              (SELECT intent_id, version FROM reckon_verdicts FINAL
                               WHERE intent_id IN (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime}))
                    ) AS l
                    ALL INNER JOIN
                    (
                        SELECT object_id, status, observed_ns
                        FROM reckon_records
                        WHERE object_id IN
                            (SELECT value FROM reckon_intent_lookup
                             WHERE kind = 'object'
                               AND intent_id IN (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime}))
                    ) AS r USING (object_id)
                    UNION ALL
                    -- The candidates' own attempt responses that returned an object.
                    SELECT intent_id, assumeNotNull(object_id) AS object, ifNull(object_status, 'unknown') AS status,
                           ended_ns AS at_ns, toUInt8(1) AS source
                    FROM reckon_attempts
                    WHERE intent_id IN (SELECT intent_id FROM reckon_attempts WHERE started_at >= {since:DateTime} AND started_at < {until:DateTime})
                      AND isNotNull(object_id)
                )
                GROUP BY intent_id, object, source, status
            )
            GROUP BY intent_id, object
        )
        GROUP BY intent_id
    ) AS o USING (intent_id)
)
GROUP BY tool
ORDER BY tool
