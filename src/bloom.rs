//! A scalable Bloom filter: which keys may be in a set held elsewhere (the store), in memory
//! that grows with the log of the set, not with the set.
//!
//! Two users: the engine's filter of the routes (see [`crate::store::Route`]) that may reach an
//! intent out of memory, and the ClickHouse writer's filter of the event identities that may be
//! stored already. A key that was inserted always answers "maybe"; one that was not answers "no"
//! except for a false positive, which costs one store lookup that finds nothing. The store holds
//! the keys themselves, so the filter never has to be exact, only never wrong about "no". Until
//! it has been filled from the store ([`Bloom::cold`], [`Bloom::warmed`]), every key answers
//! "maybe".
//!
//! It grows in stages, as a scalable Bloom filter does (Almeida et al., 2007): keys go into
//! the newest stage; once it is full (the first at 55 % of its bits set, 2.8 % false positives
//! with six probes; each later one at half the false positives of the one before, so together
//! they never pass twice the first's) a new stage twice its size takes the next ones, and a
//! key answers "maybe" if any stage says so. A stage is never dropped: a months-old intent
//! must still be found. A fixed filter
//! saturated instead, at 100 tool calls a second within about a week, after which nearly every
//! event asked the store. Past `max_bytes` the newest stage goes on filling: more "maybe"s,
//! each a store lookup, rather than more memory.

use std::hash::{BuildHasher, Hasher};

/// Probes per key. With a share `f` of its bits set, a stage answers "maybe" to `f^6` of
/// the keys it never saw.
const PROBES: u64 = 6;

/// The first stage is full, and the next one begins, once this share of its bits is set:
/// 32 MiB then holds ~36 M routes (10 M intents at rest, at the benchmark's ~3.3 routes each)
/// at 2.8 % false positives.
const FIRST_FULL: f64 = 0.55;

/// When stage `i` (0 first) is full: at `FIRST_FULL^6 / 2^i` false positives.
fn full_at(i: usize) -> f64 {
    FIRST_FULL * 2f64.powf(-(i as f64) / PROBES as f64)
}

struct Stage {
    /// The share of its bits set at which it is full.
    full: f64,
    bits: Vec<u64>,
    /// Bits set: how full it is, counted as bits go from 0 to 1 (a key inserted twice, or a
    /// probe landing on a set bit, adds nothing).
    ones: u64,
}

impl Stage {
    fn new(bytes: usize, full: f64, touch: bool) -> Stage {
        let words = (bytes / 8).max(1);
        let mut bits = vec![0u64; words];
        if touch {
            // Zeroed allocations are mapped lazily; writing makes them resident.
            for w in bits.iter_mut() {
                *w = std::hint::black_box(0);
            }
        }
        Stage {
            full,
            bits,
            ones: 0,
        }
    }

    fn bytes(&self) -> usize {
        self.bits.len() * 8
    }

    fn fill(&self) -> f64 {
        self.ones as f64 / self.len_bits() as f64
    }

    fn is_full(&self) -> bool {
        self.fill() >= self.full
    }

    fn len_bits(&self) -> u64 {
        (self.bits.len() * 64) as u64
    }

    fn insert(&mut self, h: (u64, u64)) {
        for p in probes(self.len_bits(), h) {
            let (word, bit) = (&mut self.bits[p / 64], 1u64 << (p % 64));
            if *word & bit == 0 {
                *word |= bit;
                self.ones += 1;
            }
        }
    }

    fn may_contain(&self, h: (u64, u64)) -> bool {
        probes(self.len_bits(), h).all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
}

/// The bits a key sets in a stage of `m` bits, by double hashing.
fn probes(m: u64, (h1, h2): (u64, u64)) -> impl Iterator<Item = usize> {
    (0..PROBES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m) as usize)
}

pub struct Bloom {
    /// Oldest first, each twice the size of the one before; keys go into the last.
    stages: Vec<Stage>,
    /// The most bytes the stages may take together.
    max_bytes: usize,
    warm: bool,
}

impl std::fmt::Debug for Bloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bloom")
            .field("bytes", &self.bytes())
            .field("stages", &self.stages.len())
            .field("false_positives", &self.false_positive_rate())
            .field("warm", &self.warm)
            .finish()
    }
}

/// Two independent 64-bit hashes of a key, for double hashing.
fn hashes(key: &[u8]) -> (u64, u64) {
    let seeded = |seed: u64| {
        let mut h = foldhash::quality::FixedState::with_seed(seed).build_hasher();
        h.write(key);
        h.finish()
    };
    (seeded(0x5eed_0001), seeded(0x5eed_0002) | 1)
}

impl Bloom {
    /// A filter of `bytes` (at least 8), warm and empty, that does not grow (see
    /// [`Bloom::growing_to`]). `touch` writes every page of the first stage now, so the
    /// process's resident memory is the same before and after history fills it.
    pub fn new(bytes: usize, touch: bool) -> Bloom {
        let first = Stage::new(bytes, full_at(0), touch);
        Bloom {
            max_bytes: first.bytes(),
            stages: vec![first],
            warm: true,
        }
    }

    /// Let the filter grow, a stage at a time, up to `max_bytes` in all.
    pub fn growing_to(mut self, max_bytes: usize) -> Bloom {
        self.max_bytes = max_bytes.max(self.bytes());
        self
    }

    /// Bytes the stages take together.
    pub fn bytes(&self) -> usize {
        self.stages.iter().map(Stage::bytes).sum()
    }

    /// The share of keys never inserted that would answer "maybe" now: each stage's chance
    /// of a false positive, added up (a bound, close while they are small).
    pub fn false_positive_rate(&self) -> f64 {
        self.stages
            .iter()
            .map(|s| s.fill().powi(PROBES as i32))
            .sum::<f64>()
            .min(1.0)
    }

    /// Whether the filter is as large as it may grow and its newest stage full: from here on
    /// false positives rise.
    pub fn at_its_most(&self) -> bool {
        self.stages.last().is_some_and(Stage::is_full)
            && self.bytes() + self.next_stage_bytes() > self.max_bytes
    }

    fn next_stage_bytes(&self) -> usize {
        self.stages.last().map_or(8, |s| s.bytes() * 2)
    }

    /// Keys exist in the set that the filter does not hold yet: everything is "maybe" until
    /// [`Bloom::warmed`].
    pub fn cold(&mut self) {
        self.warm = false;
    }

    pub fn warmed(&mut self) {
        self.warm = true;
    }

    pub fn is_warm(&self) -> bool {
        self.warm
    }

    pub fn insert(&mut self, key: impl AsRef<[u8]>) {
        let h = hashes(key.as_ref());
        // Already a "maybe" (inserted before, or a false positive: the answer is the same), it
        // adds nothing: a route re-inserted each time its intent leaves does not fill a stage.
        if self.stages.iter().any(|s| s.may_contain(h)) {
            return;
        }
        let last = self.stages.len() - 1;
        self.stages[last].insert(h);
        if self.stages[last].is_full() {
            let next = self.next_stage_bytes();
            if self.bytes() + next <= self.max_bytes {
                // Not touched: it fills as keys arrive, and so becomes resident with them.
                self.stages
                    .push(Stage::new(next, full_at(self.stages.len()), false));
            }
        }
    }

    /// False only when the key was never inserted and the filter is warm.
    pub fn may_contain(&self, key: impl AsRef<[u8]>) -> bool {
        if !self.warm {
            return true;
        }
        let h = hashes(key.as_ref());
        self.stages.iter().any(|s| s.may_contain(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_routes_always_answer_maybe_and_most_others_no() {
        let mut f = Bloom::new(64 * 1024, false);
        for i in 0..20_000 {
            f.insert(format!("i:intent-{i}"));
        }
        assert!((0..20_000).all(|i| f.may_contain(format!("i:intent-{i}"))));
        let false_positives = (0..20_000)
            .filter(|i| f.may_contain(format!("k:other-{i}")))
            .count();
        // 26 bits per route: far under 1 % in theory; 2 % leaves room.
        assert!(false_positives < 400, "{false_positives} false positives");
    }

    #[test]
    fn a_cold_filter_says_maybe_to_everything_until_warmed() {
        let mut f = Bloom::new(1024, true);
        assert!(!f.may_contain("o:re_1"));
        f.cold();
        assert!(f.may_contain("o:re_1"));
        f.warmed();
        assert!(!f.may_contain("o:re_1"));
        assert_eq!(f.bytes(), 1024);
    }

    fn false_positives(f: &Bloom, n: usize) -> f64 {
        let hits = (0..n)
            .filter(|i| f.may_contain(format!("k:never-{i}")))
            .count();
        hits as f64 / n as f64
    }

    /// Forty times the routes a fixed filter of the first stage's size holds at 1.6 %: the
    /// fixed one answers "maybe" to nearly everything, the growing one stays near its estimate,
    /// having grown in doubling stages, and never forgets a route.
    #[test]
    fn a_growing_filter_keeps_its_false_positives_low_as_history_grows() {
        let mut fixed = Bloom::new(4096, false);
        let mut growing = Bloom::new(4096, false).growing_to(1 << 20);
        let n = 120_000;
        for i in 0..n {
            let r = format!("i:intent-{i}");
            fixed.insert(&r);
            growing.insert(&r);
        }
        assert!((0..n).all(|i| growing.may_contain(format!("i:intent-{i}"))));
        let (fixed_fp, growing_fp) = (
            false_positives(&fixed, 20_000),
            false_positives(&growing, 20_000),
        );
        assert!(fixed_fp > 0.95, "the fixed filter saturated: {fixed_fp}");
        assert!(growing_fp < 0.08, "{growing_fp} ({growing:?})");
        let estimate = growing.false_positive_rate();
        assert!(
            (growing_fp - estimate).abs() < 0.02,
            "measured {growing_fp}, estimated {estimate}"
        );
        // 4, 8, 16, ... KiB: the first stage and doublings, within the most it may take.
        assert_eq!(growing.bytes() % 4096, 0);
        assert!(
            (growing.bytes() / 4096 + 1).is_power_of_two(),
            "{growing:?}"
        );
        assert!(growing.bytes() <= 1 << 20);
        assert!(!growing.at_its_most());
    }

    /// At the most it may take, the filter stops growing and fills further instead (more
    /// "maybe"s, each a store lookup); routes inserted again add nothing.
    #[test]
    fn a_filter_at_its_most_fills_instead_of_growing() {
        let mut f = Bloom::new(1024, false).growing_to(8 * 1024);
        for i in 0..50_000 {
            f.insert(format!("o:re_{i}"));
        }
        assert_eq!(
            f.bytes(),
            7 * 1024,
            "1 + 2 + 4 KiB: 8 more would pass the most"
        );
        assert!(f.at_its_most());
        assert!(false_positives(&f, 5_000) > 0.5);

        let mut g = Bloom::new(1024, false).growing_to(1 << 20);
        for _ in 0..10 {
            for i in 0..200 {
                g.insert(format!("o:re_{i}"));
            }
        }
        assert_eq!(
            g.bytes(),
            1024,
            "the same 200 routes ten times fill one stage once"
        );
    }
}
