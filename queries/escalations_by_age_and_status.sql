-- Question: How large and how old is the escalation queue: escalations by status, severity and
--   age bucket, with the oldest of each?
-- Parameters:
--   {opened_since:DateTime}  only escalations opened at or after this instant, UTC
--                            ('1970-01-01 00:00:00': the whole queue)
-- Runs on ClickHouse 18.16: yes (bind the parameter as a literal there)
-- Columns: status, severity, age, escalations, oldest_opened_at, oldest_id
--
-- Age is measured from opening to now for open and claimed items, and from opening to
-- resolution for resolved ones (how long it took a person), so the buckets answer "how long
-- has it waited" and "how long did it take" in one table. Each escalation is read at its latest
-- version (FINAL over the window's range): a claim or resolution writes a new version of the row.
SELECT
    status,
    severity,
    multiIf(
        age_s < 3600, '1: under 1h',
        age_s < 4 * 3600, '2: 1h-4h',
        age_s < 24 * 3600, '3: 4h-24h',
        age_s < 7 * 86400, '4: 1d-7d',
        '5: over 7d') AS age,
    count() AS escalations,
    min(opened_at) AS oldest_opened_at,
    argMin(id, opened_ns) AS oldest_id
FROM
(
    SELECT
        id, status, severity, opened_at, opened_ns,
        if(status = 'resolved' AND isNotNull(resolved_at),
           toUInt32(assumeNotNull(resolved_at)), toUInt32(now())) - toUInt32(opened_at) AS age_s
    -- The listing (reckon_escalation_list: the same rows, partitioned and sorted by where each
    -- is listed, its opening, which never changes), so a window is a range of its key.
    FROM reckon_escalation_list FINAL
    WHERE listed_at >= {opened_since:DateTime}
      AND listed_ns >= toUInt64(toUInt32({opened_since:DateTime})) * 1000000000
      AND opened_at >= {opened_since:DateTime}
)
GROUP BY status, severity, age
ORDER BY status, severity DESC, age
