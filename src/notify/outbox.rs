//! The durable outbox as plain data and a deterministic state machine: which items are due, and
//! what an attempt makes of an item. Time is an input; nothing here sends, stores or sleeps.
//!
//! An item is one notification to one target (a webhook delivery, an Alertmanager push). It is
//! written in the same durable write as the escalation change it announces (`Store::put_derived`,
//! `Store::swap_escalation_notify`), so an escalation that anyone could see always has its
//! notifications, and a crash cannot lose them. Its id is deterministic for the change
//! (`{escalation id}:{version}:{target}`), so writing the same change twice stores one item.
//!
//! Delivery is at-least-once: an item stays `pending` until a target answered 2xx, and is tried
//! again with capped exponential backoff until [`Policy::max_age`] after it was created. Items of
//! one escalation go to one target in version order: an item waits while an earlier version of
//! the same escalation is still pending for that target (see [`due`]), so a receiver never sees
//! `escalation.resolved` before the `escalation.opened` it follows.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::model::{Dur, Timestamp};

/// Where an item stands. Terminal states never go back to pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutboxState {
    /// Not yet acknowledged by its target: due at `next_at`.
    Pending,
    /// The target answered 2xx.
    Delivered,
    /// Given up: still failing [`Policy::max_age`] after it was created.
    Expired,
}

impl OutboxState {
    /// In the order of the stores' encodings (ClickHouse `Enum8` codes 1..3).
    pub const ALL: [OutboxState; 3] = [
        OutboxState::Pending,
        OutboxState::Delivered,
        OutboxState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Delivered => "delivered",
            OutboxState::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// One notification to one target, as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxItem {
    /// `{escalation id}:{escalation version}:{target}`: the `Reckon-Delivery` header and the
    /// body's `id`, the same on every retry.
    pub id: String,
    /// The `[[notify]]` target's name.
    pub target: String,
    pub escalation_id: String,
    /// The escalation version it announces: items of one escalation are delivered in this order.
    pub escalation_version: u64,
    /// `escalation.opened`, `escalation.updated` or `escalation.resolved`.
    pub event: String,
    /// The payload as it was when the change was made (JSON): the same bytes on every retry.
    pub body: String,
    pub created_at: Timestamp,
    pub state: OutboxState,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due (pending items).
    pub next_at: Timestamp,
    /// What the last failed attempt said.
    pub last_error: Option<String>,
}

impl OutboxItem {
    /// A fresh item, due at once.
    pub fn new(
        target: &str,
        escalation_id: &str,
        escalation_version: u64,
        event: &str,
        body: String,
        now: Timestamp,
    ) -> OutboxItem {
        OutboxItem {
            id: delivery_id(escalation_id, escalation_version, target),
            target: target.to_string(),
            escalation_id: escalation_id.to_string(),
            escalation_version,
            event: event.to_string(),
            body,
            created_at: now,
            state: OutboxState::Pending,
            attempts: 0,
            next_at: now,
            last_error: None,
        }
    }

    /// How far along the item is, for stores that keep the latest of several writes: a write
    /// replaces the stored row only when its rank is at least the stored one. Pending items rank
    /// by attempts made; an expired item outranks every pending one, a delivered item
    /// everything. So a late write of an older state (another instance's retry, the engine
    /// writing the same change again) never brings back an item that was delivered.
    pub fn rank(&self) -> u64 {
        match self.state {
            OutboxState::Pending => u64::from(self.attempts) + 1,
            OutboxState::Expired => u64::MAX - 1,
            OutboxState::Delivered => u64::MAX,
        }
    }
}

/// The delivery id of one escalation change for one target.
pub fn delivery_id(escalation_id: &str, version: u64, target: &str) -> String {
    format!("{escalation_id}:{version}:{target}")
}

/// Retry timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Delay after the first failed attempt (default 1 s); doubled after each further failure.
    pub base: Dur,
    /// Longest delay between attempts (default 10 min).
    pub cap: Dur,
    /// How long an item is retried after it was created before it is given up (default 24 h).
    pub max_age: Dur,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            base: Dur::secs(1),
            cap: Dur::minutes(10),
            max_age: Dur::hours(24),
        }
    }
}

impl Policy {
    /// The wait after the `attempts`-th failed attempt (1-based): `base · 2^(attempts-1)`, capped,
    /// less a jitter of up to a quarter drawn from the item's id, so items that failed together
    /// (a receiver that was down) do not all come back in the same instant. Deterministic: the
    /// same id and count always wait the same.
    pub fn backoff(&self, id: &str, attempts: u32) -> Dur {
        let doublings = attempts.saturating_sub(1).min(40);
        let full = self
            .base
            .0
            .max(0)
            .saturating_mul(1i64 << doublings.min(62))
            .min(self.cap.0.max(0));
        let mut h = Sha256::new();
        h.update(id.as_bytes());
        h.update(attempts.to_le_bytes());
        let d = h.finalize();
        let frac = u16::from_le_bytes([d[0], d[1]]) as i64; // 0..65535
        let jitter = (full / 4).saturating_mul(frac) / 65_536;
        Dur(full - jitter)
    }

    /// Whether an item created at `created_at` is still retried at `now`.
    pub fn in_window(&self, created_at: Timestamp, now: Timestamp) -> bool {
        now < created_at.saturating_add(self.max_age)
    }
}

/// What one attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The target answered 2xx.
    Delivered,
    /// Anything else: a status, a refused connection, a timeout.
    Failed(String),
}

/// The item after one attempt at `now`: delivered; or pending again after its backoff (never
/// later than the end of its window, so the last try happens then); or expired when it failed
/// at or after the end of its window.
pub fn after_attempt(
    item: &OutboxItem,
    outcome: Attempt,
    now: Timestamp,
    p: &Policy,
) -> OutboxItem {
    let mut next = item.clone();
    next.attempts = item.attempts.saturating_add(1);
    match outcome {
        Attempt::Delivered => {
            next.state = OutboxState::Delivered;
            next.last_error = None;
        }
        Attempt::Failed(error) => {
            next.last_error = Some(truncate(error, 500));
            let end = item.created_at.saturating_add(p.max_age);
            if now >= end {
                next.state = OutboxState::Expired;
            } else {
                let at = now.saturating_add(p.backoff(&item.id, next.attempts));
                next.next_at = at.min(end);
            }
        }
    }
    next
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Per target and escalation, the pending item of the lowest version: the only one that may be
/// sent (the rest wait for it).
fn heads(pending: &[OutboxItem]) -> impl Iterator<Item = &OutboxItem> {
    let mut heads: HashMap<(&str, &str), &OutboxItem> = HashMap::new();
    for it in pending.iter().filter(|i| i.state == OutboxState::Pending) {
        let key = (it.target.as_str(), it.escalation_id.as_str());
        match heads.get(&key) {
            Some(h) if (h.escalation_version, &h.id) <= (it.escalation_version, &it.id) => {}
            _ => {
                heads.insert(key, it);
            }
        }
    }
    heads.into_values()
}

/// Of one target's pending items, those to attempt at `now`: per escalation, only the pending
/// item of the lowest version (the head), and only once it is due. Returned oldest first.
pub fn due(pending: &[OutboxItem], now: Timestamp) -> Vec<&OutboxItem> {
    let mut out: Vec<&OutboxItem> = heads(pending).filter(|i| i.next_at <= now).collect();
    out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    out
}

/// When the earliest head of `pending` falls due (`None`: nothing pending). Items behind a head
/// do not count, however early their own time: they go after it.
pub fn next_due(pending: &[OutboxItem]) -> Option<Timestamp> {
    heads(pending).map(|i| i.next_at).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn item(esc: &str, version: u64, at: i64) -> OutboxItem {
        OutboxItem::new(
            "hook",
            esc,
            version,
            "escalation.opened",
            "{}".into(),
            Timestamp(at),
        )
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_bounded_jitter() {
        let p = Policy::default();
        let mut last = 0;
        for n in 1..=20u32 {
            let full = (S << (n - 1).min(40)).min(p.cap.0);
            let d = p.backoff("esc_1:1:hook", n).0;
            assert!(
                d <= full && d >= full - full / 4,
                "attempt {n}: {d} vs {full}"
            );
            assert_eq!(d, p.backoff("esc_1:1:hook", n).0, "deterministic");
            if full < p.cap.0 {
                assert!(d > last, "grows: attempt {n}");
            }
            last = d;
        }
        assert!(p.backoff("x", 1_000).0 <= p.cap.0);
        assert!(p.backoff("x", u32::MAX).0 <= p.cap.0);
        // Different ids spread out.
        let spread: std::collections::BTreeSet<i64> = (0..20)
            .map(|i| p.backoff(&format!("esc_{i}:1:hook"), 5).0)
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
    }

    #[test]
    fn a_failure_reschedules_and_a_success_delivers() {
        let p = Policy::default();
        let it = item("esc_a", 1, 100 * S);
        let failed = after_attempt(
            &it,
            Attempt::Failed("HTTP 500".into()),
            Timestamp(100 * S),
            &p,
        );
        assert_eq!(failed.state, OutboxState::Pending);
        assert_eq!(failed.attempts, 1);
        assert_eq!(failed.id, it.id, "the same delivery id on every retry");
        assert_eq!(failed.body, it.body);
        assert_eq!(failed.last_error.as_deref(), Some("HTTP 500"));
        assert!(failed.next_at > Timestamp(100 * S) && failed.next_at <= Timestamp(101 * S));
        let again = after_attempt(
            &failed,
            Attempt::Failed("HTTP 500".into()),
            failed.next_at,
            &p,
        );
        assert_eq!(again.attempts, 2);
        assert!(again.next_at.0 - failed.next_at.0 > S);
        let done = after_attempt(&again, Attempt::Delivered, again.next_at, &p);
        assert_eq!(done.state, OutboxState::Delivered);
        assert_eq!(done.attempts, 3);
        assert_eq!(done.last_error, None);
        assert!(done.rank() > again.rank() && again.rank() > failed.rank());
    }

    #[test]
    fn retries_stop_after_the_window_with_a_last_try_at_its_end() {
        let p = Policy::default();
        let it = item("esc_a", 1, 0);
        let end = Timestamp(p.max_age.0);
        let late = Timestamp(end.0 - S);
        let mut x = it.clone();
        x.attempts = 100;
        let r = after_attempt(&x, Attempt::Failed("down".into()), late, &p);
        assert_eq!(r.state, OutboxState::Pending);
        assert_eq!(r.next_at, end, "the last try is at the end of the window");
        let r = after_attempt(&r, Attempt::Failed("down".into()), end, &p);
        assert_eq!(r.state, OutboxState::Expired);
        assert!(r.rank() > x.rank());
        // A success at the last moment still counts.
        let ok = after_attempt(&x, Attempt::Delivered, end, &p);
        assert_eq!(ok.state, OutboxState::Delivered);
        assert!(ok.rank() > r.rank(), "delivered outranks expired");
    }

    #[test]
    fn only_the_head_of_each_escalation_is_due() {
        let now = Timestamp(10 * S);
        let opened = item("esc_a", 1, S);
        let mut claimed = item("esc_a", 2, 2 * S);
        claimed.next_at = Timestamp(0);
        let resolved = item("esc_a", 3, 3 * S);
        let other = item("esc_b", 1, 4 * S);
        let mut later = item("esc_c", 1, 5 * S);
        later.next_at = Timestamp(20 * S);
        let all = vec![
            resolved.clone(),
            claimed.clone(),
            other.clone(),
            later.clone(),
            opened.clone(),
        ];
        let d: Vec<&str> = due(&all, now).iter().map(|i| i.id.as_str()).collect();
        assert_eq!(d, vec![opened.id.as_str(), other.id.as_str()]);
        // A head that is not due yet holds the rest of its escalation back.
        let mut waiting = opened.clone();
        waiting.next_at = Timestamp(30 * S);
        let held = [waiting.clone(), claimed.clone()];
        assert!(due(&held, now).is_empty());
        assert_eq!(
            next_due(&held),
            Some(Timestamp(30 * S)),
            "the head decides when its escalation is next due"
        );
        // Once the head is delivered (not pending), the next version is the head.
        let mut done = opened.clone();
        done.state = OutboxState::Delivered;
        let rest = [done, claimed.clone(), resolved];
        let d: Vec<&str> = due(&rest, now).iter().map(|i| i.id.as_str()).collect();
        assert_eq!(d, vec![claimed.id.as_str()]);
        // Targets are independent.
        let mut elsewhere = item("esc_a", 2, 2 * S);
        elsewhere.target = "pager".into();
        elsewhere.id = delivery_id("esc_a", 2, "pager");
        assert_eq!(due(&[opened.clone(), elsewhere.clone()], now).len(), 2);
    }

    #[test]
    fn delivery_ids_are_deterministic_per_change_and_target() {
        assert_eq!(delivery_id("esc_ab_1", 3, "oncall"), "esc_ab_1:3:oncall");
        let a = item("esc_ab_1", 3, 0);
        let b = item("esc_ab_1", 3, 99);
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, item("esc_ab_1", 4, 0).id);
        for s in OutboxState::ALL {
            assert_eq!(OutboxState::parse(s.as_str()), Some(s));
        }
        let long = "é".repeat(600);
        let r = after_attempt(&a, Attempt::Failed(long), Timestamp(0), &Policy::default());
        assert!(r.last_error.unwrap().len() <= 504);
    }
}
