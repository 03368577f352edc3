-- Question: How long does an intent take from its first attempt to a settled state (completed,
--   failed after execution, or rejected before execution), per tool, as percentiles?
-- Parameters:
--   {since:DateTime}  start of the window, UTC (inclusive): the intent's first attempt
--   {until:DateTime}  end of the window, UTC (exclusive)
-- Runs on ClickHouse 18.16: no (reads the verdict's JSON document with JSONExtract* and uses
--   WITH subqueries: ClickHouse 21 and later; dashboards and queries/ target 23.8+)
-- Columns: tool, settled_intents, p50_s, p90_s, p99_s, max_s, still_open
--
-- The settling instant is taken from evidence, not from when reckon happened to audit:
-- - rejected before execution: the end of the last attempt (the rejection arrived then);
-- - otherwise: the first time a linked object was seen in the status it has now, by a
--   downstream record (webhook, records API, OTLP log) or, when no record says so, by the
--   attempt response that returned it (the object's first_seen in the verdict).
-- Downstreams often stamp observations to the second, so a record can read a little earlier
-- than the attempt that caused it: durations are clamped at 0.
-- still_open counts the intents of the same window that have not settled (pending, unknown):
-- a percentile over settled intents alone flatters a tool that leaves many open.
WITH
    first_attempts AS
    (
        SELECT intent_id, min(started_ns) AS first_ns
        FROM reckon_attempts FINAL
        GROUP BY intent_id
        HAVING min(started_at) >= {since:DateTime} AND min(started_at) < {until:DateTime}
    ),
    verdicts AS
    (
        SELECT intent_id, ifNull(tool, '(unknown tool)') AS tool, state, doc
        FROM reckon_current_verdicts
        WHERE intent_id IN (SELECT intent_id FROM first_attempts)
    ),
    -- One row per (intent, linked object): the status it ended in and when it was first seen.
    objects AS
    (
        SELECT
            intent_id,
            JSONExtractString(o, 'object_id') AS object_id,
            JSONExtractString(o, 'status') AS status,
            toUInt64(toUnixTimestamp64Nano(parseDateTime64BestEffort(JSONExtractString(o, 'first_seen'), 9))) AS first_seen_ns
        FROM verdicts
        ARRAY JOIN JSONExtractArrayRaw(doc, 'objects') AS o
        WHERE state IN ('completed', 'failed_after_execution')
    ),
    reached AS
    (
        SELECT
            o.intent_id AS intent_id,
            -- The earliest record in the final status; the attempt's report otherwise.
            min(if(r.observed_ns > 0, least(r.observed_ns, o.first_seen_ns), o.first_seen_ns)) AS settled_ns
        FROM objects AS o
        LEFT JOIN
        (
            SELECT object_id, status, min(observed_ns) AS observed_ns
            FROM reckon_records FINAL
            GROUP BY object_id, status
        ) AS r ON o.object_id = r.object_id AND o.status = r.status
        GROUP BY o.intent_id
    ),
    rejected AS
    (
        SELECT intent_id, max(ended_ns) AS settled_ns
        FROM reckon_attempts FINAL
        WHERE intent_id IN (SELECT intent_id FROM verdicts WHERE state = 'failed_before_execution')
        GROUP BY intent_id
    ),
    settled AS
    (
        SELECT intent_id, settled_ns FROM reached
        UNION ALL
        SELECT intent_id, settled_ns FROM rejected
    )
SELECT
    v.tool AS tool,
    countIf(s.settled_ns > 0) AS settled_intents,
    -- Seconds, to the millisecond; quantilesExactIf so a handful of intents gives true values.
    round(quantileExactIf(0.5)((greatest(s.settled_ns, f.first_ns) - f.first_ns) / 1e9, s.settled_ns > 0), 3) AS p50_s,
    round(quantileExactIf(0.9)((greatest(s.settled_ns, f.first_ns) - f.first_ns) / 1e9, s.settled_ns > 0), 3) AS p90_s,
    round(quantileExactIf(0.99)((greatest(s.settled_ns, f.first_ns) - f.first_ns) / 1e9, s.settled_ns > 0), 3) AS p99_s,
    round(maxIf((greatest(s.settled_ns, f.first_ns) - f.first_ns) / 1e9, s.settled_ns > 0), 3) AS max_s,
    countIf(s.settled_ns = 0) AS still_open
FROM verdicts AS v
INNER JOIN first_attempts AS f ON v.intent_id = f.intent_id
LEFT JOIN settled AS s ON v.intent_id = s.intent_id
GROUP BY v.tool
ORDER BY v.tool
