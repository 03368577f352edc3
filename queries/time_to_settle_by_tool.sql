-- Question: How long does an intent take from its first attempt to a settled state (completed,
--   failed after execution, or rejected before execution), per tool, as percentiles?
-- Parameters:
--   {since:DateTime}  start of the window, UTC (inclusive): the intent's first event
--   {until:DateTime}  end of the window, UTC (exclusive)
-- Runs on ClickHouse 18.16: yes (bind the parameters as literals there)
-- Columns: tool, settled_intents, p50_s, p90_s, p99_s, max_s, still_open
--
-- The settling instant is the audit's (`settled_at` in GET /api/v1/intents/{id}), taken from
-- evidence, not from when reckon happened to audit, under the intent's contract:
-- - completed: the first observation of its intended object in the successful status, counting
--   the downstream's records of the object when it has any, else the attempt response that
--   returned it (the records outrank a response);
-- - failed after execution: the latest, over its objects, of the first observation in the
--   failed status they settled in;
-- - rejected before execution: the end of its last attempt (the last rejection).
-- reckon_intent_tally keeps it beside each verdict (settled_ns; first_attempt_ns for the start),
-- so nothing here joins attempts, objects or records, and nothing reads the verdict's JSON.
-- Verdicts written before schema v15 (and not audited since) kept no object history: a completed
-- or failed one counts to its latest event, an upper bound.
-- The window selects intents by their first event (where they are listed: the table's
-- partition and sort key), which is their first attempt unless a record came first.
-- Downstreams often stamp observations to the second, so a record can read a little earlier
-- than the attempt that caused it: durations are clamped at 0.
-- still_open counts the intents of the same window that have not settled (pending, unknown):
-- a percentile over settled intents alone flatters a tool that leaves many open.
SELECT
    ifNull(tool, '(unknown tool)') AS tool,
    countIf(settled_ns > 0) AS settled_intents,
    -- Seconds, to the millisecond; quantileExactIf so a handful of intents gives true values.
    round(quantileExactIf(0.5)((greatest(settled_ns, first_attempt_ns) - first_attempt_ns) / 1e9, settled_ns > 0), 3) AS p50_s,
    round(quantileExactIf(0.9)((greatest(settled_ns, first_attempt_ns) - first_attempt_ns) / 1e9, settled_ns > 0), 3) AS p90_s,
    round(quantileExactIf(0.99)((greatest(settled_ns, first_attempt_ns) - first_attempt_ns) / 1e9, settled_ns > 0), 3) AS p99_s,
    round(maxIf((greatest(settled_ns, first_attempt_ns) - first_attempt_ns) / 1e9, settled_ns > 0), 3) AS max_s,
    countIf(settled_ns = 0) AS still_open
FROM
(
    -- The current tally row of each intent listed in the window (the filters on the key apply
    -- before FINAL, which then merges the versions of those keys only).
    SELECT tool, first_attempt_ns, settled_ns, deleted
    FROM reckon_intent_tally FINAL
    WHERE listed_at >= {since:DateTime} AND listed_at < {until:DateTime}
      AND listed_ns >= toUInt64(toUInt32({since:DateTime})) * 1000000000
      AND listed_ns < toUInt64(toUInt32({until:DateTime})) * 1000000000
)
WHERE deleted = 0 AND first_attempt_ns > 0
GROUP BY tool
ORDER BY tool
