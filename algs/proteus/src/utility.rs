//! The utility functions u_P, u_S and u_H (docs/algorithms/proteus.md §1.2–§1.4), and the probing
//! rule each one implies (§1.4, §2.4).

use crate::params::{
    LATENCY_COEFFICIENT, LOSS_COEFFICIENT, PRIMARY_PROBING_PAIRS, PROBING_STEP, RATE_EXPONENT,
    RTT_DEVIATION_COEFFICIENT_PER_US, SCAVENGER_PROBING_PAIRS,
};
use crate::rate_control::Scorer;
use crate::tolerance::compared_losses;
// The utility's x is in 10^6-based Mbit/s (§1.4 REC).
use algs_core::units::BITS_PER_SEC_PER_MBPS;
use algs_core::{BytesPerSec, Priority};

/// The effective inputs of one MI's utility, after the noise-tolerance rules (§1.1, §1.6).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UtilityInputs {
    /// Sending rate x, Mbit/s (10^6).
    pub x_mbps: f64,
    /// Effective RTT gradient (dimensionless); negative values are never rewarded.
    pub gradient: f64,
    /// Loss rate, fraction of the MI's resolved packets.
    pub loss: f64,
    /// Effective RTT standard deviation, µs (0 when tolerated).
    pub rtt_dev_us: f64,
    /// Packets the loss rate is measured on (0: unknown, never pooled).
    pub resolved: u64,
}

/// Which utility a flow maximises (its priority).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UtilityFn {
    /// Proteus-P, §1.2.
    Primary,
    /// Proteus-S, §1.3.
    Scavenger,
    /// Proteus-H, §1.4: P below `threshold_mbps`, S at or above it.
    Hybrid { threshold_mbps: f64 },
}

impl UtilityFn {
    /// The utility a priority selects. A hybrid flow with no threshold behaves as a
    /// scavenger (h = 0: every rate is "not below h").
    pub fn of(priority: Priority) -> Self {
        match priority {
            Priority::Primary => UtilityFn::Primary,
            Priority::Scavenger => UtilityFn::Scavenger,
            Priority::Hybrid { threshold } => UtilityFn::Hybrid {
                threshold_mbps: threshold.map_or(0.0, threshold_mbps),
            },
        }
    }
}

/// Mbit/s of a threshold in bytes/s (10^6-based, §1.4 REC).
pub fn threshold_mbps(h: BytesPerSec) -> f64 {
    h.as_bits_per_sec() / BITS_PER_SEC_PER_MBPS
}

/// How a probing round is sized and decided (§2.4, §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbingRule {
    /// 3 pairs; a 2-of-3 majority increases, decreasing needs all 3.
    Primary,
    /// 2 pairs; both must agree, either way.
    Scavenger,
}

impl ProbingRule {
    pub fn pairs(self) -> usize {
        match self {
            ProbingRule::Primary => PRIMARY_PROBING_PAIRS,
            ProbingRule::Scavenger => SCAVENGER_PROBING_PAIRS,
        }
    }
}

/// u_P = x^t − b·x·max(g, 0) − c·x·L (§1.2).
pub fn u_primary(i: &UtilityInputs) -> f64 {
    let x = i.x_mbps.max(0.0);
    // §1.6e: negative gradients are clipped (App. A: they are never rewarded).
    x.powf(RATE_EXPONENT)
        - LATENCY_COEFFICIENT * x * i.gradient.max(0.0)
        - LOSS_COEFFICIENT * x * i.loss
}

/// u_S = u_P − d·x·σ (§1.3).
pub fn u_scavenger(i: &UtilityInputs) -> f64 {
    u_primary(i) - RTT_DEVIATION_COEFFICIENT_PER_US * i.x_mbps.max(0.0) * i.rtt_dev_us.max(0.0)
}

impl Scorer<UtilityInputs> for UtilityFn {
    fn score(&self, mi: &UtilityInputs) -> f64 {
        self.utility(mi)
    }

    /// Not in UDT: two MIs that u_P scores and whose loss rates differ within their
    /// sampling noise are both scored with the pooled rate ([`compared_losses`]). A
    /// scavenger keeps UDT's comparison: a loss that falls more often into its higher
    /// probes is a primary's mark it should yield to, however weak in one pair.
    fn compare(&self, a: &UtilityInputs, b: &UtilityInputs) -> (f64, f64) {
        let (la, lb) = if self.is_primary_at(a.x_mbps) && self.is_primary_at(b.x_mbps) {
            compared_losses((a.loss, a.resolved), (b.loss, b.resolved))
        } else {
            (a.loss, b.loss)
        };
        (
            self.utility(&UtilityInputs { loss: la, ..*a }),
            self.utility(&UtilityInputs { loss: lb, ..*b }),
        )
    }
}

impl UtilityFn {
    /// The MI's utility under this function.
    pub fn utility(&self, i: &UtilityInputs) -> f64 {
        if self.is_primary_at(i.x_mbps) {
            u_primary(i)
        } else {
            u_scavenger(i)
        }
    }

    /// Whether an MI at `x_mbps` is scored by u_P. For hybrid, x = h counts as "not
    /// below" (U10).
    fn is_primary_at(&self, x_mbps: f64) -> bool {
        match *self {
            UtilityFn::Primary => true,
            UtilityFn::Scavenger => false,
            UtilityFn::Hybrid { threshold_mbps } => x_mbps < threshold_mbps,
        }
    }

    /// The probing rule for a round around `central_bps`. Hybrid uses the scavenger rule
    /// once the upper probe exceeds h. UDT compares in 2^20-bit/s "Mbit/s" here but in
    /// 10^6 in the utility (§1.4); we use 10^6 in both, as §1.4 REC says (vector R8).
    pub fn probing_rule(&self, central_bps: f64) -> ProbingRule {
        match *self {
            UtilityFn::Primary => ProbingRule::Primary,
            UtilityFn::Scavenger => ProbingRule::Scavenger,
            UtilityFn::Hybrid { threshold_mbps } => {
                if central_bps * (1.0 + PROBING_STEP) / BITS_PER_SEC_PER_MBPS > threshold_mbps {
                    ProbingRule::Scavenger
                } else {
                    ProbingRule::Primary
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(x: f64, g: f64, loss: f64, sigma: f64) -> UtilityInputs {
        UtilityInputs {
            x_mbps: x,
            gradient: g,
            loss,
            rtt_dev_us: sigma,
            resolved: 0,
        }
    }

    fn close(got: f64, want: f64) {
        let tol = 1e-9 * want.abs().max(1.0);
        assert!((got - want).abs() <= tol, "got {got}, want {want}");
    }

    const H15: UtilityFn = UtilityFn::Hybrid {
        threshold_mbps: 15.0,
    };

    #[test]
    fn spec_vectors_u1_to_u10() {
        // §5.1, inputs already effective.
        let p = UtilityFn::Primary;
        let s = UtilityFn::Scavenger;
        close(p.utility(&inputs(10.0, 0.0, 0.0, 0.0)), 7.943282347242816); // U1
        close(p.utility(&inputs(50.0, 0.0, 0.01, 0.0)), 28.13716689031207); // U2
        close(
            p.utility(&inputs(20.0, 0.02, 0.0, 0.0)),
            -345.17731101786103,
        ); // U3
        close(
            p.utility(&inputs(20.0, -0.05, 0.0, 0.0)),
            14.822688982138954,
        ); // U4
        close(
            s.utility(&inputs(20.0, 0.0, 0.0, 2000.0)),
            -45.177311017861044,
        ); // U5
        close(s.utility(&inputs(20.0, 0.0, 0.0, 0.0)), 14.822688982138954); // U6
        close(
            s.utility(&inputs(30.0, 0.01, 0.02, 1500.0)),
            -322.959446946252,
        ); // U7
        close(
            H15.utility(&inputs(10.0, 0.0, 0.0, 2000.0)),
            7.943282347242816,
        ); // U8
        close(
            H15.utility(&inputs(20.0, 0.0, 0.0, 2000.0)),
            -45.177311017861044,
        ); // U9
        close(
            H15.utility(&inputs(15.0, 0.0, 0.0, 2000.0)),
            -33.55852191325986,
        ); // U10
    }

    /// A probe pair around 50 Mbit/s: (higher, lower) with `lost` packets of each.
    fn pair(lost: (u32, u32)) -> (UtilityInputs, UtilityInputs) {
        let mi = |x: f64, n: u64, k: u32| UtilityInputs {
            x_mbps: x,
            loss: f64::from(k) / n as f64,
            resolved: n,
            ..UtilityInputs::default()
        };
        (mi(52.5, 130, lost.0), mi(47.5, 118, lost.1))
    }

    #[test]
    fn one_loss_does_not_decide_a_probe_pair() {
        let p = UtilityFn::Primary;
        let (hi, lo) = pair((1, 0));
        // Alone, the higher probe's one loss outweighs what its 5 Mbit/s more earns.
        assert!(p.score(&hi) < p.score(&lo));
        let (u_hi, u_lo) = p.compare(&hi, &lo);
        assert!(u_hi > u_lo);
        // Ten losses are the higher rate's own.
        let (hi, lo) = pair((10, 0));
        assert_eq!(p.compare(&hi, &lo), (p.score(&hi), p.score(&lo)));
        // A scavenger, and a hybrid above its threshold, yield to the one loss.
        let (hi, lo) = pair((1, 0));
        for f in [UtilityFn::Scavenger, H15] {
            assert_eq!(f.compare(&hi, &lo), (f.score(&hi), f.score(&lo)));
        }
        // Below the threshold the hybrid is a primary.
        let h60 = UtilityFn::Hybrid {
            threshold_mbps: 60.0,
        };
        assert_eq!(h60.compare(&hi, &lo), p.compare(&hi, &lo));
    }

    #[test]
    fn pooled_losses_keep_the_loss_tolerance() {
        // Random loss hits both probes alike: below the tolerance (5.4 % at 50 Mbit/s,
        // §1.2) the higher probe wins, above it the lower.
        let p = UtilityFn::Primary;
        let (hi, lo) = pair((6, 5));
        let (u_hi, u_lo) = p.compare(&hi, &lo);
        assert!(u_hi > u_lo, "4.4 %: {u_hi} vs {u_lo}");
        let (hi, lo) = pair((9, 7));
        let (u_hi, u_lo) = p.compare(&hi, &lo);
        assert!(u_hi < u_lo, "6.5 %: {u_hi} vs {u_lo}");
    }

    #[test]
    fn primary_ignores_deviation() {
        let i = inputs(20.0, 0.0, 0.0, 5000.0);
        close(UtilityFn::Primary.utility(&i), 14.822688982138954);
    }

    #[test]
    fn hybrid_rule_uses_decimal_megabits_r8() {
        // R8: h = 10 Mbit/s, central 9.6e6: the upper probe 10.08e6 is above h in 10^6
        // units, so the scavenger rule (2 pairs) applies; UDT's 2^20 units would say 3.
        let h = UtilityFn::Hybrid {
            threshold_mbps: 10.0,
        };
        assert_eq!(h.probing_rule(9.6e6), ProbingRule::Scavenger);
        assert_eq!(h.probing_rule(9.6e6).pairs(), 2);
        assert_eq!(h.probing_rule(9.0e6), ProbingRule::Primary);
        assert_eq!(UtilityFn::Primary.probing_rule(1e9).pairs(), 3);
        // And the upper probe's own utility is u_S (x = 10.08 ≥ 10).
        close(
            h.utility(&inputs(10.08, 0.0, 0.0, 1000.0)),
            u_scavenger(&inputs(10.08, 0.0, 0.0, 1000.0)),
        );
    }
}
