//! A small seeded generator (SplitMix64): the storm's choices replay from the seed it prints.
//! Timing still differs from run to run (which operation a kill lands in), so a seed replays
//! the same operations and faults, not the same interleaving.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// An independent stream for `index` (a worker), derived from the seed.
    pub fn fork(seed: u64, index: u64) -> Rng {
        let mut base = Rng(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        Rng(base.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // The modulo bias is below 2^-40 for the small n used here.
        self.next_u64() % n.max(1)
    }

    /// True `percent` times out of a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
}

/// A seed from the clock and the process id, for runs without `--seed`.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(nanos ^ u64::from(std::process::id()).rotate_left(32)).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_sequence() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(42);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(42);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(Rng::new(43).next_u64(), a[0]);
    }

    #[test]
    fn forks_differ_and_replay() {
        assert_ne!(Rng::fork(7, 0).next_u64(), Rng::fork(7, 1).next_u64());
        assert_eq!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 1).next_u64());
    }

    #[test]
    fn ranges_hold() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            assert!(r.below(7) < 7);
            let x = r.between(3, 5);
            assert!((3..=5).contains(&x));
        }
        let hits = (0..10_000).filter(|_| r.chance(30)).count();
        assert!((2_500..3_500).contains(&hits), "30% of 10,000 draws: {hits}");
        assert!((0..1000).all(|_| !r.chance(0)) && (0..1000).all(|_| r.chance(100)));
    }
}
