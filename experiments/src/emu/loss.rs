//! Random loss with the semantics of Mahimahi's `mm-loss uplink|downlink RATE`: every packet
//! that crosses the loss stage in its direction is dropped with probability RATE, on its own
//! (independent, identically distributed losses). In a `delay D loss uplink R link ...`
//! chain the stage sits between the delay and the link, as Mahimahi's nested shells put it:
//! uplink packets are lost after the link, downlink packets before it.

/// One direction's loss stage.
#[derive(Debug, Clone)]
pub struct RandomLoss {
    /// Drop probability per packet, in [0, 1].
    rate: f64,
    /// SplitMix64 state: a small generator is enough for Bernoulli draws, and a seed makes a
    /// run's losses repeatable.
    state: u64,
    /// Packets dropped so far.
    lost: u64,
}

/// A loss rate outside [0, 1].
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("loss rate {0} is not a probability in [0, 1]")]
pub struct BadRate(pub f64);

impl RandomLoss {
    pub fn new(rate: f64, seed: u64) -> Result<Self, BadRate> {
        if !(0.0..=1.0).contains(&rate) {
            return Err(BadRate(rate));
        }
        Ok(RandomLoss {
            rate,
            state: seed,
            lost: 0,
        })
    }

    /// Whether the next packet is lost.
    pub fn drops(&mut self) -> bool {
        let lost = self.uniform() < self.rate;
        self.lost += u64::from(lost);
        lost
    }

    /// Packets dropped so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// A uniform draw in [0, 1) from the top 53 bits of SplitMix64's next output.
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_lost_matches_the_rate_and_a_seed_repeats_it() {
        for rate in [0.0, 0.01, 0.05, 0.3, 1.0] {
            let mut l = RandomLoss::new(rate, 7).expect("valid");
            let n = 200_000;
            let lost = (0..n).filter(|_| l.drops()).count();
            assert_eq!(lost as u64, l.lost());
            // Binomial: four standard deviations.
            let sd = (n as f64 * rate * (1.0 - rate)).sqrt();
            assert!(
                (lost as f64 - n as f64 * rate).abs() <= 4.0 * sd + 1e-9,
                "rate {rate}: {lost} of {n}"
            );
        }
        let draws = |seed| {
            let mut l = RandomLoss::new(0.5, seed).expect("valid");
            (0..64).map(|_| l.drops()).collect::<Vec<_>>()
        };
        assert_eq!(draws(1), draws(1));
        assert_ne!(draws(1), draws(2));
    }

    #[test]
    fn losses_are_independent_of_the_previous_packet() {
        // After a loss, the next packet is lost with the same probability (no bursts).
        let mut l = RandomLoss::new(0.1, 3).expect("valid");
        let draws: Vec<bool> = (0..400_000).map(|_| l.drops()).collect();
        let after_loss: Vec<bool> = draws.windows(2).filter(|w| w[0]).map(|w| w[1]).collect();
        let p = after_loss.iter().filter(|x| **x).count() as f64 / after_loss.len() as f64;
        assert!((p - 0.1).abs() < 0.01, "P(loss | loss before) = {p}");
    }

    #[test]
    fn rates_outside_zero_to_one_are_refused() {
        assert_eq!(RandomLoss::new(1.5, 0).expect_err("refused"), BadRate(1.5));
        assert!(RandomLoss::new(-0.1, 0).is_err());
        assert!(RandomLoss::new(f64::NAN, 0).is_err());
    }
}
