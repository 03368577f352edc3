//! The listings' totals (`GET /api/v1/intents` and `/escalations`' `total`) without reading
//! the listings, and how far back a page's rows lie.
//!
//! A total under `FINAL` reads every row of a listing (tens of millions over a year),
//! and 18.16 has no way to keep exact counts of a `ReplacingMergeTree` as rows are rewritten
//! (no deduplication of a retried INSERT outside replicated tables, so +1/-1 deltas would drift).
//! So the counts are recounted, not maintained: per hour of listing places, from that hour's rows
//! alone (a range of the primary index), whenever the hour was written since it was last counted
//! ([`recount`], a background task). A total adds the counts of the hours counted since their
//! last write to a count of the listing's own rows in the hours that are not (the current hour,
//! and the few that late evidence touched since the last pass): exact either way, and cheap as
//! long as the task keeps up. Which hours were written comes from the data
//! (`reckon_intent_list_hours`, a materialized view of every INSERT), so any instance may count
//! and any may read.
//!
//! Only the filters the counts have dimensions for are answered this way: for intents state,
//! tool and one finding kind, for escalations status and severity. The intents' `since` (a time
//! of last activity, not of listing) is answered by the counts of the hours after its own (every
//! intent listed there is active since) and the listing's rows for the rest, which
//! `reckon_intent_activity` bounds (`report.rs`); their lookups (a few exact keys) and the
//! escalations' tool (their intent's) are counted from the listing. The report is counted the
//! same way, in its own tables (`report.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::rows::{CountRow, COUNTS};
use super::{bind_all, Arg, RetryPolicy, StoreError, HOUR_NS};

/// What counting needs of the store: its client and retry policy (the background task holds
/// its own, not the store).
#[derive(Clone)]
pub(super) struct Conn {
    pub client: ::clickhouse::Client,
    pub retry: RetryPolicy,
}

impl Conn {
    pub(super) async fn fetch<T>(
        &self,
        op: &str,
        q: ::clickhouse::query::Query,
    ) -> Result<Vec<T>, StoreError>
    where
        T: ::clickhouse::RowOwned + ::clickhouse::RowRead,
    {
        fetch(&self.retry, op, q).await
    }

    /// Counts rows are idempotent (the same hour at the same version), so a retry is safe.
    pub(super) async fn insert<T>(&self, table: &'static str, rows: &[T]) -> Result<(), StoreError>
    where
        T: ::clickhouse::RowOwned + ::clickhouse::RowWrite + serde::Serialize,
    {
        if rows.is_empty() {
            return Ok(());
        }
        Ok(self
            .retry
            .run(
                || format!("INSERT INTO {table}"),
                || async {
                    let mut ins = self.client.insert::<T>(table).await?;
                    for r in rows {
                        ins.write(r).await?;
                    }
                    ins.end().await
                },
            )
            .await?)
    }
}

/// A read, retried by `retry` (the store's and the counting task's reads alike).
pub(super) async fn fetch<T>(
    retry: &RetryPolicy,
    op: &str,
    q: ::clickhouse::query::Query,
) -> Result<Vec<T>, StoreError>
where
    T: ::clickhouse::RowOwned + ::clickhouse::RowRead,
{
    Ok(retry
        .run(|| op.to_string(), || q.clone().fetch_all::<T>())
        .await?)
}

/// How often the background task looks for hours to recount.
pub(super) const RECOUNT_EVERY: Duration = Duration::from_secs(2);

/// Hours recounted per pass at most: a store upgraded with a year of history (8,760 hours)
/// is counted over the first minutes, and totals read the listing until then.
const HOURS_PER_PASS: usize = 256;

/// Past this many hours not counted since their last write, a total reads the whole listing
/// rather than naming each hour (a store whose counts are still being made).
pub(super) const MAX_LIVE_HOURS: usize = 512;

/// A table counted by hour (`reckon_listing_hours.listing`): the two listings, counted in
/// `reckon_listing_counts`, and the report's tally, counted in `reckon_report_counts` and
/// `reckon_report_findings` (`report.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Counted {
    Intents = 1,
    Escalations = 2,
    Report = 3,
}

impl Counted {
    const ALL: [Counted; 3] = [Counted::Intents, Counted::Escalations, Counted::Report];

    /// The `Enum8` name: 18.16 refuses to compare a key's enum with a number.
    fn name(self) -> &'static str {
        match self {
            Counted::Intents => "intents",
            Counted::Escalations => "escalations",
            Counted::Report => "report",
        }
    }

    /// When each hour was last counted, rows `(hour, counted)`.
    fn counted_sql(self) -> String {
        match self {
            Counted::Report => {
                "SELECT toUInt32(hour), toUInt32(max(counted)) FROM reckon_report_counts GROUP BY hour"
                    .to_string()
            }
            listing => format!(
                "SELECT toUInt32(hour), toUInt32(max(counted)) FROM reckon_listing_counts
                 WHERE listing = '{}' GROUP BY hour",
                listing.name()
            ),
        }
    }

    /// How the hours within a key condition (`{hours}`) are counted, each row
    /// `(hour, dim1, dim2, finding, count)`.
    fn recount_sql(self) -> &'static str {
        match self {
            Counted::Intents => {
                "SELECT toUInt32(intDiv(listed_ns, 3600000000000) * 3600) AS hour, toString(state),
                     ifNull(tool, ''), finding, count()
                 FROM (SELECT intent_id, listed_ns, state, tool, finding_kinds, deleted
                       FROM reckon_intent_list FINAL WHERE {hours})
                 ARRAY JOIN arrayPushFront(arrayMap(k -> toUInt8(CAST(k AS Int8)), finding_kinds), toUInt8(0)) AS finding
                 WHERE deleted = 0
                 GROUP BY hour, state, tool, finding"
            }
            Counted::Escalations => {
                "SELECT toUInt32(intDiv(listed_ns, 3600000000000) * 3600) AS hour, toString(status),
                     toString(severity), toUInt8(0), count()
                 FROM (SELECT id, listed_ns, status, severity FROM reckon_escalation_list FINAL
                       WHERE {hours})
                 GROUP BY hour, status, severity"
            }
            Counted::Report => unreachable!("the report is counted by report::recount_hours"),
        }
    }
}

/// A filter the counts can answer: each `None` is "any". For intents `dim1` is the state and
/// `dim2` the tool (empty: none); for escalations the status and the severity.
pub(super) struct Dims<'a> {
    pub dim1: Option<&'a str>,
    pub dim2: Option<&'a str>,
    /// Intents: the finding kind's code in `finding_kinds` (its `Enum8` value).
    pub finding: Option<u8>,
}

/// When each hour of a listing was last written, and when its counts were last made (the
/// server's clock, unix seconds).
pub(super) async fn hours(
    store: &Conn,
    listing: Counted,
) -> Result<(BTreeMap<u32, u32>, BTreeMap<u32, u32>), StoreError> {
    let written = store
        .client
        .query("SELECT toUInt32(hour), toUInt32(max(written)) FROM reckon_listing_hours WHERE listing = ? GROUP BY hour")
        .bind(listing.name());
    let counted = store.client.query(&listing.counted_sql());
    let (written, counted) = tokio::join!(
        store.fetch::<(u32, u32)>("listing hours", written),
        store.fetch::<(u32, u32)>("counted hours", counted),
    );
    Ok((
        written?.into_iter().collect(),
        counted?.into_iter().collect(),
    ))
}

/// The hours written at or after they were last counted (or never counted), oldest first. A
/// write in the second a count began may or may not be in it: such an hour is counted again.
pub(super) fn stale(written: &BTreeMap<u32, u32>, counted: &BTreeMap<u32, u32>) -> Vec<u32> {
    written
        .iter()
        .filter(|(hour, w)| counted.get(hour).is_none_or(|c| c <= w))
        .map(|(h, _)| *h)
        .collect()
}

/// The `listed_ns` condition of a set of hours, adjacent hours joined into one range.
pub(super) fn ranges(hours: &[u32]) -> (String, Vec<Arg>) {
    any_range(&hour_spans(hours))
}

/// Each hour (unix s) as its `[lo, hi)` span of unix ns.
fn hour_spans(hours: &[u32]) -> Vec<(u64, u64)> {
    hours
        .iter()
        .map(|&h| {
            let lo = u64::from(h) * 1_000_000_000;
            (lo, lo + HOUR_NS)
        })
        .collect()
}

/// A condition that holds every hour of `hours` (ascending) in at most `most` ranges, joining
/// those across the smallest gaps first: a superset, for reads that filter the rows again. A
/// few ranges cost the index a little more reading; a thousand cost every row read a thousand
/// comparisons (1.7 s for 266 k escalations with unresolved ones in every other hour).
pub(super) fn covering_ranges(hours: &[u32], most: usize) -> (String, Vec<Arg>) {
    let mut spans = joined(&hour_spans(hours));
    if spans.len() > most.max(1) {
        // Keep the widest gaps as the breaks between ranges.
        let mut gaps: Vec<(u64, usize)> = spans
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[1].0 - w[0].1, i))
            .collect();
        gaps.sort_unstable_by(|a, b| b.cmp(a));
        let mut breaks: Vec<usize> = gaps.iter().take(most.max(1) - 1).map(|g| g.1).collect();
        breaks.sort_unstable();
        let mut covering = Vec::with_capacity(breaks.len() + 1);
        let mut start = 0;
        for b in breaks.into_iter().chain(std::iter::once(spans.len() - 1)) {
            covering.push((spans[start].0, spans[b].1));
            start = b + 1;
        }
        spans = covering;
    }
    any_range(&spans)
}

/// `spans` (ascending) with the adjacent and overlapping ones joined.
fn joined(spans: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut joined: Vec<(u64, u64)> = Vec::new();
    for &(lo, hi) in spans {
        match joined.last_mut() {
            Some((_, end)) if *end >= lo => *end = (*end).max(hi),
            _ => joined.push((lo, hi)),
        }
    }
    joined
}

/// The `listed_ns` condition of any of `spans` (`[lo, hi)`, unix ns, ascending), adjacent ones
/// joined; never true when there are none. Only ranges, so 18.16's index reads just them (a
/// constant or a subquery in the disjunction makes it read everything).
pub(super) fn any_range(spans: &[(u64, u64)]) -> (String, Vec<Arg>) {
    let joined = joined(spans);
    if joined.is_empty() {
        return ("listed_ns < 0".to_string(), Vec::new());
    }
    let mut sql = Vec::new();
    let mut args = Vec::new();
    for (lo, hi) in joined {
        if hi == u64::MAX {
            sql.push("listed_ns >= ?");
            args.push(Arg::U(lo));
        } else {
            sql.push("(listed_ns >= ? AND listed_ns < ?)");
            args.extend([Arg::U(lo), Arg::U(hi)]);
        }
    }
    (format!("({})", sql.join(" OR ")), args)
}

/// One hour of listing places under a filter: how many intents match and how many there are
/// (as of its last count), and whether it was written since.
#[derive(Clone, Copy, Debug)]
pub(super) struct HourCount {
    pub hour: u32,
    pub stale: bool,
    pub matching: u64,
    pub everyone: u64,
}

/// Every hour with its counts under `dims`, newest first, in one read; `None` when the counts
/// cannot answer (never made, or too many hours written since: a store still being counted).
pub(super) async fn hours_counted(
    store: &Conn,
    listing: Counted,
    dims: &Dims<'_>,
) -> Result<Option<Vec<HourCount>>, StoreError> {
    let mut cond = String::from("finding = ?");
    let mut args = vec![
        Arg::S(listing.name().into()),
        Arg::U(u64::from(dims.finding.unwrap_or(0))),
    ];
    if let Some(s) = dims.dim1 {
        cond.push_str(" AND dim1 = ?");
        args.push(Arg::S(s.into()));
    }
    if let Some(t) = dims.dim2 {
        cond.push_str(" AND dim2 = ?");
        args.push(Arg::S(t.into()));
    }
    args.push(Arg::S(listing.name().into()));
    // An hour never counted has no row on the right: its counted version reads as 0.
    let sql = format!(
        "SELECT toUInt32(hour), toUInt32(written), toUInt32(counted), matching, everyone FROM
            (SELECT hour, max(written) AS written FROM reckon_listing_hours WHERE listing = ? GROUP BY hour)
         ANY LEFT JOIN
            (SELECT hour, max(counted) AS counted, sumIf(n, {cond}) AS matching,
                 sumIf(n, finding = 0) AS everyone
             FROM (SELECT listing, hour, dim1, dim2, finding, n, counted FROM reckon_listing_counts FINAL)
             WHERE listing = ?
             GROUP BY hour)
         USING hour
         ORDER BY hour DESC"
    );
    let rows: Vec<(u32, u32, u32, u64, u64)> = store
        .fetch("counted hours", bind_all(store.client.query(&sql), &args))
        .await?;
    let hours: Vec<HourCount> = rows
        .into_iter()
        .map(|(hour, written, counted, matching, everyone)| HourCount {
            hour,
            stale: counted <= written,
            matching,
            everyone,
        })
        .collect();
    let stale = hours.iter().filter(|h| h.stale).count();
    if stale > MAX_LIVE_HOURS || hours.iter().all(|h| h.stale) {
        return Ok(None);
    }
    Ok(Some(hours))
}

/// How many rows the filter matches: the counts of the hours counted since their last write
/// (`hours`, from [`hours_counted`]), and `live`, a count of the listing's rows in the others
/// and in every hour that begins before `live_below` (unix ns; 0: none), where the counts do
/// not answer the filter (an hour before a `since`).
pub(super) async fn total(
    hours: &[HourCount],
    live_below: u64,
    live: impl AsyncFnOnce(Option<(String, Vec<Arg>)>) -> Result<u64, StoreError>,
) -> Result<u64, StoreError> {
    let counts = |h: &&HourCount| u64::from(h.hour) * 1_000_000_000 >= live_below;
    let counted: u64 = hours
        .iter()
        .filter(counts)
        .filter(|h| !h.stale)
        .map(|h| h.matching)
        .sum();
    let mut stale: Vec<u32> = hours
        .iter()
        .filter(counts)
        .filter(|h| h.stale)
        .map(|h| h.hour)
        .collect();
    stale.sort_unstable();
    let within = match (stale.is_empty(), live_below) {
        (true, 0) => return Ok(counted),
        (true, below) => ("listed_ns < ?".to_string(), vec![Arg::U(below)]),
        (false, 0) => ranges(&stale),
        (false, below) => {
            let (cond, mut args) = ranges(&stale);
            args.push(Arg::U(below));
            (format!("({cond} OR listed_ns < ?)"), args)
        }
    };
    Ok(counted + live(Some(within)).await?)
}

/// Where a slab that ends before `below` (unix ns, exclusive) must begin to hold `still` more
/// matching rows, by the counts (`hours` newest first; an hour written since it was counted
/// is taken at its last count: the walk reads on if that fell short), and how many rows of
/// any kind that range holds. 0: the rest of the listing.
pub(super) fn reach(hours: &[HourCount], below: u64, still: usize) -> (u64, u64) {
    let mut matching = 0u64;
    let mut rows = 0u64;
    for h in hours {
        let start = u64::from(h.hour) * 1_000_000_000;
        if start >= below {
            continue;
        }
        matching += h.matching;
        rows += h.everyone;
        if matching >= still as u64 {
            return (start, rows);
        }
    }
    (0, rows)
}

/// One pass: recount, in each listing, the hours written since they were counted, up to
/// [`HOURS_PER_PASS`], oldest first, [`HOURS_PER_READ`] at a time. Returns how many it
/// recounted.
pub async fn recount(store: &Conn) -> Result<usize, StoreError> {
    let mut n = 0;
    for listing in Counted::ALL {
        let (written, counted) = hours(store, listing).await?;
        let stale = stale(&written, &counted);
        let stale = &stale[..stale.len().min(HOURS_PER_PASS)];
        for batch in stale.chunks(HOURS_PER_READ) {
            match listing {
                Counted::Report => super::report::recount_hours(store, batch).await?,
                _ => recount_hours(store, listing, batch).await?,
            }
        }
        n += stale.len();
    }
    Ok(n)
}

/// The server's clock (unix seconds): what a count is stamped with, taken before counting (a row
/// written while counting leaves the hour stale, counted again next pass).
pub(super) async fn server_now(store: &Conn) -> Result<u32, StoreError> {
    Ok(store
        .fetch::<u32>(
            "the server's time",
            store.client.query("SELECT toUInt32(now())"),
        )
        .await?
        .pop()
        .unwrap_or(0))
}

/// Hours counted by one read: a store upgraded with months of history is counted in minutes,
/// and one read stays a few thousand rows of counts.
const HOURS_PER_READ: usize = 32;

/// `toUInt32(hour) IN (...)` of a set of hours, with its arguments.
pub(super) fn hour_set(hours: &[u32]) -> (String, Vec<Arg>) {
    (
        format!("toUInt32(hour) IN ({})", vec!["?"; hours.len()].join(", ")),
        hours.iter().map(|h| Arg::U(u64::from(*h))).collect(),
    )
}

/// The rows a recount of `hours` writes: every group counted `now`, a zero for each group
/// counted `before` that has no rows now (the newest count of a group is the one read), and
/// `empty_hour`'s row for an hour left with neither (every row in it a tombstone), so that it
/// reads as counted. A group's key starts with its hour.
pub(super) fn recounted<G: Ord + Clone, R>(
    hours: &[u32],
    now: Vec<((u32, G), R)>,
    before: Vec<(u32, G)>,
    zero: impl Fn(&(u32, G)) -> R,
    empty_hour: impl Fn(u32) -> Option<R>,
) -> Vec<R>
where
    (u32, G): Ord,
{
    let present: BTreeSet<(u32, G)> = now.iter().map(|(k, _)| k.clone()).collect();
    let mut rows: Vec<R> = now.into_iter().map(|(_, r)| r).collect();
    let mut filled: BTreeSet<u32> = present.iter().map(|(h, _)| *h).collect();
    for k in before.iter().filter(|k| !present.contains(*k)) {
        filled.insert(k.0);
        rows.push(zero(k));
    }
    rows.extend(
        hours
            .iter()
            .filter(|h| !filled.contains(h))
            .filter_map(|&h| empty_hour(h)),
    );
    rows
}

/// Count some hours of a listing, stamped with [`server_now`], and zero the dimensions each had
/// and has no more.
async fn recount_hours(store: &Conn, listing: Counted, hours: &[u32]) -> Result<(), StoreError> {
    if hours.is_empty() {
        return Ok(());
    }
    let began = server_now(store).await?;
    let (within, args) = ranges(hours);
    let sql = listing.recount_sql().replace("{hours}", &within);
    let now: Vec<(u32, String, String, u8, u64)> = store
        .fetch("recount hours", bind_all(store.client.query(&sql), &args))
        .await?;
    let (set, mut args) = hour_set(hours);
    args.insert(0, Arg::S(listing.name().into()));
    let sql = format!(
        "SELECT toUInt32(hour), dim1, dim2, finding FROM
            (SELECT listing, hour, dim1, dim2, finding, n FROM reckon_listing_counts FINAL
             WHERE listing = ? AND {set})
         WHERE n > 0"
    );
    let before: Vec<(u32, String, String, u8)> = store
        .fetch("counts of hours", bind_all(store.client.query(&sql), &args))
        .await?;
    type Group = (String, String, u8);
    let row = |(hour, (dim1, dim2, finding)): &(u32, Group), n: u64| CountRow {
        listing: listing as i8,
        hour: *hour,
        dim1: dim1.clone(),
        dim2: dim2.clone(),
        finding: *finding,
        n,
        counted: began,
    };
    let now: Vec<_> = now
        .into_iter()
        .map(|(h, a, b, f, n)| {
            let key = (h, (a, b, f));
            let r = row(&key, n);
            (key, r)
        })
        .collect();
    let before: Vec<(u32, Group)> = before
        .into_iter()
        .map(|(h, a, b, f)| (h, (a, b, f)))
        .collect();
    let rows = recounted(
        hours,
        now,
        before,
        |k| row(k, 0),
        |h| Some(row(&(h, (String::new(), String::new(), 0)), 0)),
    );
    store.insert(COUNTS, &rows).await
}

/// Recount every few seconds for as long as the store is open (`alive`).
pub(super) async fn run(store: Conn, alive: std::sync::Weak<()>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(RECOUNT_EVERY).await;
        if alive.upgrade().is_none() {
            return;
        }
        match recount(&store).await {
            Ok(_) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "could not recount the listings' totals and the report's counts; they read the rows until it can");
                }
                failing = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recount writes what it counted, zeroes what was counted before and is gone, and marks
    /// an hour left empty; an hour that had counts and has none now is marked by its zeroes.
    #[test]
    fn a_recount_zeroes_what_is_gone_and_marks_empty_hours() {
        let now = vec![((10, "a"), "10 a: 3"), ((10, "b"), "10 b: 1")];
        let before = vec![(10, "a"), (10, "c"), (11, "a")];
        let rows = recounted(
            &[10, 11, 12],
            now,
            before,
            |(h, g)| format!("{h} {g}: 0").leak() as &str,
            |h| Some(format!("{h} empty").leak() as &str),
        );
        assert_eq!(
            rows,
            ["10 a: 3", "10 b: 1", "10 c: 0", "11 a: 0", "12 empty"]
        );
        let rows = recounted(
            &[12],
            Vec::new(),
            Vec::<(u32, &str)>::new(),
            |_| 0,
            |_| None,
        );
        assert!(rows.is_empty(), "no marker asked for");
    }

    #[test]
    fn ranges_join_adjacent_spans_and_leave_gaps() {
        let (sql, args) = any_range(&[(0, 10), (10, 20), (30, u64::MAX)]);
        assert_eq!(
            sql,
            "((listed_ns >= ? AND listed_ns < ?) OR listed_ns >= ?)"
        );
        assert_eq!(args.len(), 3);
        assert_eq!(any_range(&[]).0, "listed_ns < 0");
    }

    /// At most `most` ranges, each hour inside one, the widest gaps kept open.
    #[test]
    fn covering_ranges_keep_the_widest_gaps() {
        let h = |x: u32| x * 3_600;
        let ns = |x: u32| u64::from(h(x)) * 1_000_000_000;
        // Hours 0, 1, 3, 10, 11, 12, 30: gaps of 1, 6 and 17 hours.
        let hours: Vec<u32> = [0, 1, 3, 10, 11, 12, 30].map(h).to_vec();
        let bounds = |(_, args): (String, Vec<Arg>)| -> Vec<u64> {
            args.into_iter()
                .map(|a| match a {
                    Arg::U(n) => n,
                    _ => panic!("only hour bounds"),
                })
                .collect()
        };
        assert_eq!(
            bounds(covering_ranges(&hours, 10)),
            [ns(0), ns(2), ns(3), ns(4), ns(10), ns(13), ns(30), ns(31)]
        );
        assert_eq!(
            bounds(covering_ranges(&hours, 3)),
            [ns(0), ns(4), ns(10), ns(13), ns(30), ns(31)]
        );
        assert_eq!(
            bounds(covering_ranges(&hours, 2)),
            [ns(0), ns(13), ns(30), ns(31)]
        );
        assert_eq!(bounds(covering_ranges(&hours, 1)), [ns(0), ns(31)]);
        assert_eq!(covering_ranges(&[], 4).0, "listed_ns < 0");
    }
}
