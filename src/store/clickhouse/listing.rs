//! Pages of the listings (`reckon_intent_list`, `reckon_escalation_list`): newest first by
//! `(listed_ns, id)`, the tables' sorting key, so a page is a range of the primary index.
//!
//! 18.16 cannot stop a `FINAL` read at `LIMIT` (no read-in-order), so a page is not "the first
//! rows after the cursor" but a walk back from it in slabs of `listed_ns`: the last hour before
//! the cursor, then the seven before that, and so on, each a `FINAL` read of the narrow columns
//! of that range only, until the page is full or everything older has been read. A page of the
//! newest rows reads the last hour; a filter that matches one row in a thousand reads further,
//! a slab at a time. The key conditions sit inside `FINAL` (every version of a row shares its
//! key, so they may filter before versions collapse); the filters on what a row says sit
//! outside, on its current version.

use super::{bind_all, counts, Arg, ClickHouseStore, StoreError, HOUR_NS};

/// How far back from the page's start each successive slab reaches; past the last, the rest.
const REACH_NS: [u64; 5] = [
    HOUR_NS,
    8 * HOUR_NS,
    64 * HOUR_NS,
    512 * HOUR_NS,
    4_096 * HOUR_NS,
];

/// One listing query: the table, its id column, and the conditions of a filter.
#[derive(Clone)]
pub(super) struct Listing {
    pub table: &'static str,
    /// `intent_id` or `id`: the second column of the sorting key.
    pub id: &'static str,
    /// Columns the conditions outside `FINAL` read (besides the key and `version`).
    pub cols: Vec<&'static str>,
    /// Conditions on the current version, each `AND ...`.
    pub outer: String,
    pub outer_args: Vec<Arg>,
    /// Conditions on the key, inside `FINAL`, each `AND ...`: a set of exact keys (a lookup)
    /// makes the walk one read.
    pub inner: String,
    pub inner_args: Vec<Arg>,
    /// Whether `inner` names the exact keys, so there is nothing to gain from slabs.
    pub keyed: bool,
}

/// What a walk is asked for (see [`Listing::walk`]).
pub(super) struct Walk<'a> {
    /// The cursor's `(listed_ns, id)`; `None`: from the newest.
    pub after: Option<(u64, String)>,
    pub now: u64,
    /// Rows wanted (a page and one more, to tell whether there is a next).
    pub want: usize,
    pub counted: Option<&'a [counts::HourCount]>,
    pub inline: Option<&'static str>,
}

/// A row of a page: its place, id and the version `FINAL` chose, and the inline column's
/// value if it was read with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Key {
    pub listed_ns: u64,
    pub id: String,
    pub version: u64,
    pub inline: Option<String>,
}

/// The upper end of a slab.
#[derive(Clone)]
enum Upper {
    /// Everything after the lower end (the first slab of a first page).
    Open,
    /// Before a cursor: `(listed_ns, id) < (ns, id)`.
    Cursor(u64, String),
    /// Below where the previous slab began.
    Below(u64),
}

impl Listing {
    /// `SELECT what` over the current versions (`{inner}` marks where the key conditions go);
    /// `extra`, a column the inner read selects besides those the conditions need.
    fn select(&self, what: &str, extra: Option<&str>) -> String {
        let mut cols = format!("{}, listed_ns, version", self.id);
        for c in self.cols.iter().copied().chain(extra) {
            cols.push_str(", ");
            cols.push_str(c);
        }
        format!(
            "SELECT {what} FROM (SELECT {cols} FROM {} FINAL WHERE 1 = 1{{inner}}) WHERE 1 = 1{}",
            self.table, self.outer
        )
    }

    /// How many rows match, in all, or within `within` (a condition on the key and its
    /// arguments).
    pub async fn count(
        &self,
        store: &ClickHouseStore,
        op: &str,
        within: Option<(String, Vec<Arg>)>,
    ) -> Result<u64, StoreError> {
        let mut inner = self.inner.clone();
        let mut args = self.inner_args.clone();
        if let Some((cond, cond_args)) = within {
            inner.push_str(" AND ");
            inner.push_str(&cond);
            args.extend(cond_args);
        }
        let sql = self.select("count()", None).replace("{inner}", &inner);
        args.extend(self.outer_args.iter().cloned());
        Ok(store
            .fetch::<u64>(op, bind_all(store.client.query(&sql), &args))
            .await?
            .pop()
            .unwrap_or(0))
    }

    /// How many rows match: from the hour counts when the filter has them
    /// ([`counts::hours_counted`]), else from the listing; the hours that begin before
    /// `live_below` (unix ns; 0: none) from the listing whatever the counts say.
    pub async fn total(
        &self,
        store: &ClickHouseStore,
        op: &str,
        counted: Option<&[counts::HourCount]>,
        live_below: u64,
    ) -> Result<u64, StoreError> {
        match counted {
            Some(hours) => {
                counts::total(hours, live_below, async |within| {
                    self.count(store, op, within).await
                })
                .await
            }
            None => self.count(store, op, None).await,
        }
    }

    /// The keys of up to `want` rows after `after` (`(listed_ns, id)`; `None`: from the newest),
    /// newest first; `now` anchors the first page's first slab ([`Walk`]). With `counted` (the rows that
    /// match per hour, newest first: [`counts::hours`]) each slab reaches exactly as far back as
    /// the counts say the rows still wanted lie, so a page is one read; and when that range holds
    /// few rows more than the page, `inline` (a column, the document) is read with the keys
    /// rather than after them.
    pub async fn walk(
        &self,
        store: &ClickHouseStore,
        op: &str,
        page: Walk<'_>,
    ) -> Result<Vec<Key>, StoreError> {
        let Walk {
            after,
            now,
            want,
            counted,
            inline,
        } = page;
        let anchor = after.as_ref().map_or(now, |(ns, _)| *ns);
        let mut upper = match after {
            Some((ns, id)) => Upper::Cursor(ns, id),
            None => Upper::Open,
        };
        let mut keys: Vec<Key> = Vec::new();
        let mut reaches = REACH_NS.iter();
        loop {
            let still = want - keys.len();
            let below = match &upper {
                Upper::Open => u64::MAX,
                Upper::Cursor(ns, _) => ns.saturating_add(1),
                Upper::Below(ns) => *ns,
            };
            let (lower, rows) = if self.keyed {
                (0, None)
            } else if let Some(hours) = counted {
                let (lower, rows) = counts::reach(hours, below, still);
                (lower, Some(rows))
            } else {
                (
                    reaches.next().map_or(0, |r| anchor.saturating_sub(*r)),
                    None,
                )
            };
            // Reading the documents of a few more rows than the page costs less than a second
            // round trip for them.
            let inline = inline.filter(|_| rows.is_some_and(|r| r <= 4 * still as u64 + 64));
            let mut inner = self.inner.clone();
            let mut args = self.inner_args.clone();
            if lower > 0 {
                inner.push_str(" AND listed_ns >= ?");
                args.push(Arg::U(lower));
            }
            match &upper {
                Upper::Open => {}
                Upper::Cursor(ns, id) => {
                    // The plain bound lets the index skip what is after the cursor.
                    inner.push_str(&format!(
                        " AND listed_ns <= ? AND (listed_ns < ? OR {} < ?)",
                        self.id
                    ));
                    args.extend([Arg::U(*ns), Arg::U(*ns), Arg::S(id.clone())]);
                }
                Upper::Below(ns) => {
                    inner.push_str(" AND listed_ns < ?");
                    args.push(Arg::U(*ns));
                }
            }
            args.extend(self.outer_args.iter().cloned());
            args.push(Arg::U(still as u64));
            let what = format!(
                "{}, listed_ns, version, {}",
                self.id,
                inline.unwrap_or("''")
            );
            let select = self.select(&what, inline);
            let sql = format!(
                "{} ORDER BY listed_ns DESC, {} DESC LIMIT ?",
                select.replace("{inner}", &inner),
                self.id
            );
            let rows: Vec<(String, u64, u64, String)> = store
                .fetch(op, bind_all(store.client.query(&sql), &args))
                .await?;
            keys.extend(rows.into_iter().map(|(id, listed_ns, version, value)| Key {
                listed_ns,
                id,
                version,
                inline: inline.map(|_| value),
            }));
            if keys.len() >= want || lower == 0 {
                break;
            }
            upper = Upper::Below(lower);
        }
        Ok(keys)
    }
}

/// The `listed_ns` range a page's keys span, for reading their rows as a range of the index.
pub(super) fn span(keys: &[Key]) -> (u64, u64) {
    let lo = keys.iter().map(|k| k.listed_ns).min().unwrap_or(0);
    let hi = keys.iter().map(|k| k.listed_ns).max().unwrap_or(0);
    (lo, hi)
}
