//! Random (non-congestive) loss on the link: a seeded, deterministic draw per packet.
//!
//! xorshift64 (G. Marsaglia, "Xorshift RNGs", J. Stat. Softw. 8(14), 2003) seeded through
//! one SplitMix64 step, so that every seed, 0 included, gives a usable nonzero state. Only
//! shifts, xors and one integer-to-float conversion: no `ln`/`log`, the same draws on every
//! machine.

/// Whether each packet that crossed the bottleneck is lost on the way to the receiver.
#[derive(Debug, Clone)]
pub(crate) struct RandomLoss {
    probability: f64,
    state: u64,
}

impl RandomLoss {
    pub(crate) fn new(probability: f64, seed: u64) -> Self {
        // SplitMix64's finalizer (Steele, Lea, Flood, OOPSLA 2014).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        RandomLoss {
            probability,
            state: if z == 0 { 0x2545_F491_4F6C_DD1D } else { z },
        }
    }

    /// Draws for one packet: `true` = lost. Draws nothing when the probability is 0, so a
    /// lossless link runs exactly as before the feature existed.
    pub(crate) fn lose(&mut self) -> bool {
        if self.probability <= 0.0 {
            return false;
        }
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        // The top 53 bits as a uniform number in [0, 1).
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        u < self.probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loses_the_asked_share_and_repeats_with_the_seed() {
        let draws = |p: f64, seed: u64| -> Vec<bool> {
            let mut l = RandomLoss::new(p, seed);
            (0..100_000).map(|_| l.lose()).collect()
        };
        for p in [0.01, 0.05, 0.3] {
            let lost = draws(p, 7).iter().filter(|&&l| l).count() as f64 / 100_000.0;
            assert!((lost - p).abs() < 0.1 * p + 0.002, "p {p}: lost {lost}");
        }
        assert_eq!(draws(0.05, 1), draws(0.05, 1));
        assert_ne!(draws(0.05, 1), draws(0.05, 2));
        assert!(draws(0.0, 3).iter().all(|&l| !l));
    }
}
