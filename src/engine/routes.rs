//! The route filter: which routes (see [`crate::store::Route`]) may reach an intent that is not
//! in memory, in a fixed number of bytes whatever the history behind it.
//!
//! A Bloom filter: a route that was inserted always answers "maybe"; one that was not answers
//! "no" except for a false positive, which costs one store lookup that finds nothing new. The
//! store holds the routes themselves (`Store::route_owners`), so the filter never has to be
//! exact, only never wrong about "no". Until it has been filled from the store after a start
//! that left settled intents there ([`RouteFilter::cold`]), every route answers "maybe".

use std::hash::{BuildHasher, Hasher};

/// Probes per route. With ~9 bits per route (32 MiB for 30M routes, three per settled
/// intent), six probes keep false positives near 2 %.
const PROBES: u64 = 6;

pub struct RouteFilter {
    bits: Vec<u64>,
    warm: bool,
}

impl std::fmt::Debug for RouteFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteFilter")
            .field("bytes", &(self.bits.len() * 8))
            .field("warm", &self.warm)
            .finish()
    }
}

/// Two independent 64-bit hashes of a route, for double hashing.
fn hashes(route: &str) -> (u64, u64) {
    let seeded = |seed: u64| {
        let mut h = foldhash::quality::FixedState::with_seed(seed).build_hasher();
        h.write(route.as_bytes());
        h.finish()
    };
    (seeded(0x5eed_0001), seeded(0x5eed_0002) | 1)
}

impl RouteFilter {
    /// A filter of `bytes` (at least 8), warm and empty. `touch` writes every page now, so the
    /// process's resident memory is the same before and after history fills it.
    pub fn new(bytes: usize, touch: bool) -> RouteFilter {
        let words = (bytes / 8).max(1);
        let mut bits = vec![0u64; words];
        if touch {
            // Zeroed allocations are mapped lazily; writing makes them resident.
            for w in bits.iter_mut() {
                *w = std::hint::black_box(0);
            }
        }
        RouteFilter { bits, warm: true }
    }

    pub fn bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// Routes out of memory exist that the filter does not hold yet: everything is "maybe"
    /// until [`RouteFilter::warmed`].
    pub fn cold(&mut self) {
        self.warm = false;
    }

    pub fn warmed(&mut self) {
        self.warm = true;
    }

    pub fn is_warm(&self) -> bool {
        self.warm
    }

    fn positions(&self, route: &str) -> impl Iterator<Item = usize> {
        let m = (self.bits.len() * 64) as u64;
        let (h1, h2) = hashes(route);
        (0..PROBES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m) as usize)
    }

    pub fn insert(&mut self, route: &str) {
        for p in self.positions(route).collect::<Vec<_>>() {
            self.bits[p / 64] |= 1 << (p % 64);
        }
    }

    /// False only when no intent out of memory can have this route.
    pub fn may_contain(&self, route: &str) -> bool {
        !self.warm
            || self
                .positions(route)
                .all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_routes_always_answer_maybe_and_most_others_no() {
        let mut f = RouteFilter::new(64 * 1024, false);
        for i in 0..20_000 {
            f.insert(&format!("i:intent-{i}"));
        }
        assert!((0..20_000).all(|i| f.may_contain(&format!("i:intent-{i}"))));
        let false_positives = (0..20_000)
            .filter(|i| f.may_contain(&format!("k:other-{i}")))
            .count();
        // 26 bits per route: far under 1 % in theory; 2 % leaves room.
        assert!(false_positives < 400, "{false_positives} false positives");
    }

    #[test]
    fn a_cold_filter_says_maybe_to_everything_until_warmed() {
        let mut f = RouteFilter::new(1024, true);
        assert!(!f.may_contain("o:re_1"));
        f.cold();
        assert!(f.may_contain("o:re_1"));
        f.warmed();
        assert!(!f.may_contain("o:re_1"));
        assert_eq!(f.bytes(), 1024);
    }
}
